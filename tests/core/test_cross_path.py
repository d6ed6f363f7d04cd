"""Cross-attention as a gradient path (core.analysis.cross_path) on the bundled encoder-decoder models:
the per-layer gradients add up to the full one, detaching the encoder's sublayers leaves only the
identity path, and the numbers the Depth page quotes are finite and consistent."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from core.analysis import cross_path as A
from core.checkpoints import load_bundled
from core.tasks import get_task


@pytest.fixture(scope="module")
def reverse():
    model, meta = load_bundled("reverse-encdec")
    return model.eval(), meta


def task_batch(meta, n=16):
    batch = get_task(meta["task"]).batch(n, "encoder-decoder", seed=3, length=meta["train_length"])
    return batch.tokens, batch.tgt, A.loss_fn(batch.targets)


def test_each_decoder_layer_share_adds_up_to_the_full_gradient(reverse):
    """Backpropagation is linear: the gradients each layer's cross-attention delivers alone sum to the full one."""
    model, meta = reverse
    tokens, tgt, loss = task_batch(meta)
    _, cache = model.run_with_cache(tokens, tgt=tgt, names=[A.ENCODER_OUT], grad_of=loss)
    full = cache[A.ENCODER_OUT + "_grad"].double()
    parts = [A.gradient_via_layer(model, tokens, tgt, loss, j) for j in range(model.cfg.n_layers)]
    assert all(p.norm() > 0 for p in parts)
    assert all(p.norm() < full.norm() * 10 for p in parts)
    torch.testing.assert_close(sum(parts), full, rtol=1e-6, atol=1e-12)
    assert not torch.allclose(parts[0], full)  # one layer alone is not the whole gradient


def test_identity_path_equals_full_path_when_encoder_sublayers_write_nothing(reverse):
    """With every encoder sublayer's output weights zeroed, only the identity path exists: share 1, cosine 1.
    On the trained model the sublayers carry part of the gradient, so the share differs from 1."""
    model, meta = reverse
    task = get_task(meta["task"])
    trained = A.cross_path(model, task, 16, seed=3, length=meta["train_length"])
    assert abs(trained.identity_share - 1) > 0.05
    silent = copy.deepcopy(model)
    with torch.no_grad():
        for block in silent.encoder.blocks:
            for param in list(block.attn.W_O.parameters()) + list(block.mlp.W_out.parameters()):
                param.zero_()
    p = A.cross_path(silent, task, 16, seed=3, length=meta["train_length"])
    assert p.identity_share == pytest.approx(1.0, abs=1e-9)
    assert p.identity_cosine == pytest.approx(1.0, abs=1e-9)


@pytest.mark.parametrize("model_id", ["reverse-encdec", "sort-encdec"])
def test_page_numbers_are_consistent(model_id):
    """Finite positive gradients at every encoder state; the verdict sentence agrees with claim_holds."""
    model, meta = load_bundled(model_id)
    p = A.cross_path(model.eval(), get_task(meta["task"]), 32, seed=5, length=meta["train_length"])
    assert len(p.labels) == len(p.encoder_grad) == 2 * model.cfg.n_layers + 2
    assert p.labels[0] == "embed" and p.labels[-1] == "output"
    assert np.all(np.isfinite(p.encoder_grad)) and np.all(p.encoder_grad > 0)
    assert p.embed_grad == pytest.approx(p.encoder_grad[0], rel=1e-9)  # the embeddings are added to positions
    assert 0 < p.identity_grad and -1 <= p.identity_cosine <= 1
    assert len(p.via_layer) == model.cfg.n_layers and np.all(p.via_layer > 0)
    sentence = A.verdict(p, model_id)
    assert sentence.startswith("The claim holds" if A.claim_holds(p) else "The claim does not hold")
    assert f"{p.embed_over_top:.2f}×" in sentence


def test_refuses_a_decoder():
    model, meta = load_bundled("sort-decoder")
    with pytest.raises(ValueError, match="encoder-decoder"):
        A.cross_path(model, get_task(meta["task"]), 4)
