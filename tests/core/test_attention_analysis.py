"""The Attention page's arithmetic: the seeds' scalar example by hand, one real query recomputed
from q, k, v against the model's own hooks, entropy, predictions, differences and export."""

from __future__ import annotations

import io
import math

import numpy as np
import pytest
import torch

from core.analysis import attention as A
from core.model import Transformer, TransformerConfig
from core.train import init_model


# -- the scalar example from the seeds -----------------------------------------------------------

def test_scalar_example_matches_a_hand_computation():
    steps = A.scalar_example()
    # q = 2, keys 0.1 0.2 0.5, d_k = 1: the scores are just q * k.
    np.testing.assert_allclose(steps.scores, [0.2, 0.4, 1.0], atol=1e-12)
    e = [math.exp(0.2), math.exp(0.4), math.exp(1.0)]
    total = sum(e)
    hand_weights = [x / total for x in e]
    hand_output = sum(w * v for w, v in zip(hand_weights, [1.0, -1.0, 3.0]))
    np.testing.assert_allclose(steps.weights, hand_weights, rtol=1e-12)
    assert steps.output[0] == pytest.approx(hand_output, rel=1e-12)
    # The four-decimal numbers the page shows.
    assert [round(w, 4) for w in steps.weights] == [0.2249, 0.2747, 0.5005]
    assert round(float(steps.output[0]), 4) == 1.4516
    # exp(score - max) times exp(max) gives back exp(score): the shift does not change softmax.
    np.testing.assert_allclose(steps.exps * math.exp(steps.shift), e, rtol=1e-12)
    assert steps.total * math.exp(steps.shift) == pytest.approx(total, rel=1e-12)
    assert int(np.argmax(steps.weights)) == 2  # the largest key wins the most weight


def test_scalar_example_rows_hold_each_step():
    rows = A.scalar_example().rows()
    assert [r["key"] for r in rows] == ["k1", "k2", "k3"]
    assert [r["value v"] for r in rows] == [1.0, -1.0, 3.0]
    assert sum(r["α·v"] for r in rows) == pytest.approx(1.4516082240241481, rel=1e-9)


def test_scale_and_temperature_sharpen_or_flatten():
    base = A.scalar_example()
    hot = A.scalar_example(temperature=10.0)
    cold = A.scalar_example(temperature=0.05)
    assert A.row_entropy(hot.weights) > A.row_entropy(base.weights) > A.row_entropy(cold.weights)
    assert cold.weights[2] > 0.999  # the one-hot limit: a hard lookup of the best key
    # A larger query norm does the same as a lower temperature (the bandwidth picture).
    big_q = A.scalar_example(q=2.0 / 0.05)
    np.testing.assert_allclose(big_q.weights, cold.weights, rtol=1e-9)
    # Dividing by sqrt(d_k) = 2 halves every score.
    np.testing.assert_allclose(A.scalar_example(d_k=4).scores, base.scores / 2)


def test_a_huge_key_hijacks_the_output():
    steps = A.scalar_example(keys=(0.1, 0.2, 0.5, 40.0), values=(1, -1, 3, -100))
    assert steps.weights[3] > 0.999
    assert steps.output[0] < -99


@pytest.mark.parametrize("kwargs, message", [
    (dict(keys=(0.1, 0.2), values=(1.0,)), "one value per key"),
    (dict(keys=(), values=()), "between 1"),
    (dict(d_k=0), "d_k"),
    (dict(temperature=0.0), "temperature"),
])
def test_scalar_example_rejects_bad_numbers(kwargs, message):
    with pytest.raises(ValueError, match=message):
        A.scalar_example(**kwargs)


def test_parse_numbers():
    assert A.parse_numbers("0.1, 0.2 0.5", "keys") == [0.1, 0.2, 0.5]
    for bad, message in [("", "between"), ("1 x 2", "not a number"), ("inf", "finite"), ("1e9", "finite"),
                         (" ".join(["1"] * 20), "between")]:
        with pytest.raises(ValueError, match=message):
            A.parse_numbers(bad, "keys")


# -- masked softmax -----------------------------------------------------------------------------

def test_masked_softmax_gives_exact_zeros_and_sums_to_one():
    exps, w = A.softmax_masked(np.array([3.0, 1.0, 50.0, -2.0]), np.array([True, True, False, True]))
    assert w[2] == 0.0 and exps[2] == 0.0
    assert w.sum() == pytest.approx(1.0)
    assert w[0] > w[1] > w[3]


def test_fully_masked_row_is_zeros_not_nan():
    exps, w = A.softmax_masked(np.array([1.0, 2.0]), np.array([False, False]))
    assert np.all(w == 0) and not np.isnan(w).any()


# -- one real query, recomputed from the model's q, k, v ----------------------------------------

def _model(arch: str, pos: str = "sinusoidal", score: str = "scaled_dot") -> Transformer:
    cfg = TransformerConfig(arch=arch, vocab_size=12, d_model=32, n_heads=4, n_layers=2, pos=pos, score=score)
    return init_model(cfg, 0).eval()  # seeded from a local generator


@pytest.mark.parametrize("arch, pos, score", [
    ("encoder", "sinusoidal", "scaled_dot"), ("decoder", "rope", "scaled_dot"), ("decoder", "learned", "cosine"),
    ("encoder-decoder", "sinusoidal", "scaled_dot"), ("encoder-decoder", "rope", "dot"),
])
def test_head_steps_reproduce_the_models_own_numbers(arch, pos, score):
    model = _model(arch, pos, score)
    src = torch.randint(0, 12, (1, 7), generator=torch.Generator().manual_seed(1))
    kw = {"tgt": torch.randint(0, 12, (1, 5), generator=torch.Generator().manual_seed(2))} \
        if arch == "encoder-decoder" else {}
    for kind in A.attention_kinds(arch):
        names = A.step_names(kind, 1, model.cfg.pos)
        _, cache = model.run_with_cache(src, names, temperature=0.6, **kw)
        cache = {k: v.numpy() for k, v in cache.items()}
        n_q, n_k = cache[names[-2]].shape[-2:]
        steps, checks = A.head_steps(cache, model.cfg, kind, 1, 3, n_q - 2, [str(i) for i in range(n_k)], "q",
                                     temperature=0.6)
        assert max(checks.values()) < 1e-5, (kind.key, checks)
        assert steps.weights.sum() == pytest.approx(1.0)
        if kind.causal:  # query n_q-2 may not see the last key
            assert not steps.allowed[-1] and steps.weights[-1] == 0.0
        # A deliberately wrong temperature no longer matches: the check can fail.
        _, wrong = A.head_steps(cache, model.cfg, kind, 1, 3, n_q - 2, [str(i) for i in range(n_k)], "q",
                                temperature=1.0)
        assert wrong["scores"] > 1e-4


def test_head_steps_rejects_positions_out_of_range():
    model = _model("encoder")
    kind = A.attention_kinds("encoder")[0]
    _, cache = model.run_with_cache(torch.zeros(1, 4, dtype=torch.long), A.step_names(kind, 0, "sinusoidal"))
    cache = {k: v.numpy() for k, v in cache.items()}
    with pytest.raises(ValueError, match="query position"):
        A.head_steps(cache, model.cfg, kind, 0, 0, 9, list("abcd"), "q")
    with pytest.raises(ValueError, match="head"):
        A.head_steps(cache, model.cfg, kind, 0, 7, 0, list("abcd"), "q")


def test_kinds_per_architecture_and_their_axes():
    assert [k.key for k in A.attention_kinds("encoder")] == ["self"]
    assert A.attention_kinds("decoder")[0].causal
    kinds = A.attention_kinds("encoder-decoder")
    assert [k.key for k in kinds] == ["enc", "dec", "cross"]
    cross = kinds[2]
    assert cross.hook(1, "hook_pattern") == "decoder.blocks.1.cross_attn.hook_pattern"
    assert "target" in cross.query_title and "source" in cross.key_title
    q, k = A.axis_tokens(cross, ["a", "b", "c"], ["<bos>", "x"])
    assert (q, k) == (["<bos>", "x"], ["a", "b", "c"])
    with pytest.raises(ValueError):
        A.attention_kinds("rnn")
    with pytest.raises(ValueError, match="target"):
        A.axis_tokens(cross, ["a"], None)


def test_stack_patterns_shape():
    model = _model("encoder-decoder")
    kind = A.attention_kinds("encoder-decoder")[2]
    _, cache = model.run_with_cache(torch.zeros(1, 6, dtype=torch.long), A.pattern_names(kind, 2),
                                    tgt=torch.zeros(1, 3, dtype=torch.long))
    stacked = A.stack_patterns({k: v.numpy() for k, v in cache.items()}, kind, 2)
    assert stacked.shape == (2, 4, 3, 6)  # [layer head q k]: target queries, source keys
    np.testing.assert_allclose(stacked.sum(-1), 1.0, atol=1e-5)


# -- entropy --------------------------------------------------------------------------------------

def test_row_entropy_extremes():
    p = np.array([[1.0, 0, 0, 0], [0.25, 0.25, 0.25, 0.25], [0.5, 0.5, 0, 0]])
    np.testing.assert_allclose(A.row_entropy(p), [0.0, 2.0, 1.0])
    allowed = A.causal_allowed(3, 3, True)
    np.testing.assert_allclose(A.max_entropy(allowed), [0.0, 1.0, math.log2(3)])
    assert A.causal_allowed(2, 5, False).all()


# -- predictions, differences --------------------------------------------------------------------

def test_predictions_and_accuracy():
    logits = np.array([[[0.0, 5.0, 0.0], [3.0, 0.0, 0.0], [0.0, 0.0, 1.0]]])
    rows = A.predictions(logits, [1, -100, 0])
    assert [r["position"] for r in rows] == [0, 2]
    assert [r["correct"] for r in rows] == [True, False]
    assert A.accuracy(rows) == 0.5
    assert A.predictions(logits, None) == [] and A.accuracy([]) is None
    assert sum(np.exp(logits[0, 0]) / np.exp(logits[0, 0]).sum()) == pytest.approx(1.0)
    assert rows[0]["p(predicted)"] == pytest.approx(np.exp(5) / (np.exp(5) + 2))


@pytest.mark.parametrize("scale", [1.0, 40.0])  # spread logits, and ones with a near-certain answer
def test_top_predictions_agree_with_the_float64_softmax(scale):
    """The page's fast path (largest logit, float32 terms summed in float64) gives the ids of `predictions`'
    float64 softmax exactly and its probabilities to 1e-6, over more positions than one chunk holds, with a tie."""
    gen = torch.Generator().manual_seed(3)
    logits = torch.randn(1, A.PREDICTION_ROWS + 37, 8000, generator=gen) * scale  # [1 pos vocab]
    logits[0, 5, [10, 20]] = logits[0, 5].max() + 1.0  # two equal largest logits: the first is the top id
    targets = [int(t) for t in torch.randint(0, 8000, (logits.shape[1],), generator=gen)]
    targets[7] = -100
    ids, top, right = A.top_predictions(logits, targets)
    rows = {r["position"]: r for r in A.predictions(logits.numpy(), targets)}
    assert ids[5] == 10
    for p, r in rows.items():
        assert ids[p] == r["predicted"]
        assert top[p] == pytest.approx(r["p(predicted)"], rel=1e-6)
        assert right[p] == pytest.approx(r["p(right)"], rel=1e-5, abs=1e-12)
    assert 7 not in rows and np.isnan(right[7]) and np.isfinite(top).all()


def test_difference_same_and_different_shapes():
    a, b = np.eye(3), np.full((3, 3), 1 / 3)
    d, note = A.difference(a, b)
    assert note is None and d.shape == (3, 3)
    np.testing.assert_allclose(d.sum(axis=1), 0, atol=1e-12)  # two distributions: rows of A-B sum to 0
    d, note = A.difference(np.eye(4), np.eye(3))
    assert d.shape == (3, 3) and "different sizes" in note


# -- export ---------------------------------------------------------------------------------------

def test_export_csv_and_npz_round_trip():
    rng = np.random.default_rng(0)
    pat = rng.random((2, 3, 4, 5)).astype(np.float32)  # [layer head q k]
    q, k = ["<bos>", "a", "b", "c"], ["x", "y,z", "w", "v", "u"]
    csv = A.export_csv(pat, q, k)
    lines = csv.strip().split("\n")
    assert lines[0] == "layer,head,query_pos,query_token,key_pos,key_token,weight"
    assert len(lines) == 1 + pat.size
    import pandas as pd
    table = pd.read_csv(io.StringIO(csv))
    row = table[(table["layer"] == 1) & (table["head"] == 2) & (table["query_pos"] == 3) & (table["key_pos"] == 1)].iloc[0]
    assert row.key_token == "y,z" and row.query_token == "c"
    assert row.weight == pytest.approx(float(pat[1, 2, 3, 1]), rel=1e-5)
    data = np.load(io.BytesIO(A.export_npz(pat, q, k, model="m", kind="self")), allow_pickle=False)
    np.testing.assert_array_equal(data["pattern"], pat)
    assert list(data["query_tokens"]) == q and list(data["key_tokens"]) == k
    assert str(data["model"]) == "m"
    with pytest.raises(ValueError):
        A.export_csv(pat, q[:2], k)


def test_entropy_bits_is_row_entropy_with_or_without_a_scratch_tensor():
    """The hot path's torch entropy gives row_entropy's bits, zero weights (0 log 0 = 0) and one-hot rows included,
    and leaves the pattern as it was when its terms go into a reused temporary."""
    gen = torch.Generator().manual_seed(4)
    pattern = torch.softmax(torch.randn(3, 50, 50, generator=gen) * 4, dim=-1)  # [head q k]
    pattern = pattern.masked_fill(~torch.ones(50, 50, dtype=torch.bool).tril(), 0.0)
    pattern = pattern / pattern.sum(-1, keepdim=True)  # causal rows: exact zeros to the right
    pattern[0, 7] = 0.0
    pattern[0, 7, 3] = 1.0  # one key takes everything: 0 bits
    before = pattern.clone()
    expected = A.row_entropy(pattern.numpy())  # [head q]
    scratch = torch.empty(50, 50)
    got = np.stack([A.entropy_bits(h, scratch).numpy() for h in pattern])
    np.testing.assert_allclose(A.entropy_bits(pattern).numpy(), expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    assert got[0, 7] == 0.0 and got[:, 0].max() == 0.0 and torch.equal(pattern, before)
