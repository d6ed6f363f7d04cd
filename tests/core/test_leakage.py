"""The leakage case study: the leaky twin's prediction depends on future target tokens through its
encoder, the proper twin's exactly not; hiding the answer breaks the leaky one; and a tiny decoder
trained with the full mask learns a shortcut that fails at generation."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from core import checkpoints
from core.analysis import leakage as L
from core.tasks import get_task

pytestmark = pytest.mark.usefixtures("one_thread")

PEEK, PLAIN = get_task(L.LEAKY_TASK), get_task(L.PROPER_TASK)


def gradient_model(model_id):
    model, _ = checkpoints.load_bundled(model_id)
    for p in model.parameters():
        p.requires_grad_(True)
    return model


@pytest.fixture(scope="module")
def maps():
    leaky, proper = gradient_model("sort-peek-encdec"), gradient_model("sort-encdec")
    seen = PEEK.batch(1, "encoder-decoder", seed=4)
    fair = PLAIN.batch(1, "encoder-decoder", seed=4)
    assert torch.equal(seen.tgt, fair.tgt)  # the same digits, the same answer
    return (L.future_token_gradients(leaky, seen.tokens, seen.tgt, PEEK.vocab.sep_id),
            L.future_token_gradients(proper, fair.tokens, fair.tgt, PEEK.vocab.sep_id))


def test_the_leaky_model_depends_on_future_target_tokens(maps):
    leaky, _ = maps
    n_t, n_k = leaky.shape
    future = np.array([[k + 1 > t for k in range(n_k)] for t in range(n_t)])
    assert L.future_mass(leaky) > 1e-3
    assert (leaky[future] > 0).mean() > 0.5  # most future cells, not one stray


def test_the_proper_model_has_exactly_zero_gradient_to_the_future_and_not_to_the_past(maps):
    _, proper = maps
    n_t, n_k = proper.shape
    for t in range(n_t):
        for k in range(1, n_k + 1):
            if k > t:
                assert proper[t, k - 1] == 0.0, (t, k)  # exactly: the causal mask's weights are 0
            else:
                assert proper[t, k - 1] > 0.0, (t, k)  # the past does reach it


def test_answer_positions_follow_the_separator():
    src = torch.tensor([PEEK.vocab.encode("3 1 2 <sep> 1 2 3".split())])
    assert L.answer_positions(src, PEEK.vocab.sep_id, 3) == [4, 5, 6]
    assert L.answer_positions(src[:, :3], PEEK.vocab.sep_id, 3) == [None, None, None]


def test_hiding_the_answer_breaks_only_the_leaky_model():
    leaky, proper = gradient_model("sort-peek-encdec"), gradient_model("sort-encdec")
    rows = L.hidden_answer_accuracy(leaky, proper, 256, seed=21)
    shown, hidden, honest = (r["accuracy"] for r in rows)
    assert shown > 0.95 and honest > 0.95
    assert hidden < shown - 0.5


def test_hide_answer_pads_everything_after_the_separator():
    src = torch.tensor([PEEK.vocab.encode("3 1 2 <sep> 1 2 3".split())])
    hidden = PEEK.hide_answer(src)
    assert PEEK.vocab.decode(hidden[0]) == "3 1 2 <sep> <pad> <pad> <pad>".split()
    assert PEEK.label("3 1 2 <sep> 1 2 3".split(), "encoder-decoder") == PLAIN.label("3 1 2".split(), "encoder-decoder")


def test_a_full_mask_decoder_learns_a_shortcut_that_fails_when_generating():
    reports = {}
    losses = {}
    for kind in L.MASKS:
        model, losses[kind] = L.train_tiny_decoder(kind, seed=0, steps=250)
        reports[kind] = L.tiny_report(model, kind)
    assert losses["full"][-20:].mean() < 0.05  # training says: solved
    assert reports["full"]["teacher-forced accuracy"] > 0.9
    assert reports["full"]["greedy accuracy"] < 0.5  # generating says: mostly not
    assert reports["causal"]["greedy accuracy"] > 0.9


def test_the_tiny_decoder_is_the_same_for_the_same_seed_and_leaves_the_global_generator_alone():
    torch.manual_seed(0)
    expected = torch.rand(2)
    torch.manual_seed(0)
    a, loss_a = L.train_tiny_decoder("causal", seed=3, steps=5)
    b, loss_b = L.train_tiny_decoder("causal", seed=3, steps=5)
    assert np.array_equal(loss_a, loss_b)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    assert torch.equal(torch.rand(2), expected)
