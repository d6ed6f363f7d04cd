"""Why attention divides by sqrt(d_k): random q.k spreads like sqrt(d_k); unscaled softmax saturates
(largest weight to 1, entropy and Jacobian to 0) while scaled softmax stays put; a real model's own
spread of raw q.k per head; and which key of the scalar example wins (for any sign of q)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from core.analysis import attention as A
from core.model import TransformerConfig
from core.train import init_model


# -- random dot products ---------------------------------------------------------------------------

@pytest.mark.parametrize("d_k", [1, 16, 256, 1024])
def test_random_dot_products_spread_like_sqrt_dk(d_k):
    x = A.random_dot_products(d_k, 20_000, seed=3)
    assert x.shape == (20_000,)
    # Var(q.k) = d_k: the sample std is within a few percent of sqrt(d_k) for 20,000 pairs.
    assert x.std() == pytest.approx(math.sqrt(d_k), rel=0.05)
    assert abs(x.mean()) < 0.05 * math.sqrt(d_k)
    assert (x / math.sqrt(d_k)).std() == pytest.approx(1.0, rel=0.05)  # scaled: spread 1 at any width


def test_random_draws_are_seeded_locally():
    state = torch.random.get_rng_state()
    a, b = A.random_dot_products(8, 100, seed=1), A.random_dot_products(8, 100, seed=1)
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, A.random_dot_products(8, 100, seed=2))
    sw1, sw2 = A.scale_sweep(4, seed=5, dks=(1, 64), trials=8), A.scale_sweep(4, seed=5, dks=(1, 64), trials=8)
    np.testing.assert_array_equal(sw1.max_weight, sw2.max_weight)
    assert torch.equal(torch.random.get_rng_state(), state)  # the process-wide generator was not touched


def test_random_dot_products_rejects_empty_draws():
    with pytest.raises(ValueError, match="d_k"):
        A.random_dot_products(0, 10, seed=0)


# -- the softmax Jacobian --------------------------------------------------------------------------

def test_jacobian_norm_matches_the_explicit_matrix():
    rng = np.random.default_rng(0)
    w = A.softmax_rows(rng.normal(size=(5, 7)) * 3)  # [row key]
    for row in w:
        jac = np.diag(row) - np.outer(row, row)  # d alpha_i / d s_j
        assert A.softmax_jacobian_norm(row) == pytest.approx(np.linalg.norm(jac, "fro"), rel=1e-10)
    np.testing.assert_allclose(A.softmax_jacobian_norm(w), [np.linalg.norm(np.diag(r) - np.outer(r, r)) for r in w])


def test_jacobian_norm_vanishes_for_one_hot_and_is_large_for_uniform():
    n = 8
    assert A.softmax_jacobian_norm(np.eye(n)[2]) == pytest.approx(0.0, abs=1e-12)
    uniform = A.softmax_jacobian_norm(np.full(n, 1 / n))
    # diag(1/n) - 1/n^2: the norm is sqrt((n - 1) / n^2).
    assert uniform == pytest.approx(math.sqrt(n - 1) / n, rel=1e-12)
    nearly = A.softmax_rows(np.array([20.0] + [0.0] * (n - 1)))
    assert A.softmax_jacobian_norm(nearly) < 1e-3 < uniform


# -- the sweep over d_k ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def sweep():
    return A.scale_sweep(16, seed=0, trials=64)


def test_unscaled_softmax_saturates_as_dk_grows(sweep):
    scaled, unscaled = 0, 1
    assert tuple(sweep.dks) == A.SCALE_DKS
    every4 = slice(0, None, 3)  # d_k = 1, 8, 64, 512: far enough apart that noise cannot reorder them
    assert np.all(np.diff(sweep.max_weight[unscaled, every4]) > 0)  # the largest weight climbs ...
    assert sweep.max_weight[unscaled, -1] > 0.9  # ... towards 1 (one-hot)
    assert np.all(np.diff(sweep.entropy[unscaled, every4]) < 0)  # entropy falls ...
    assert sweep.entropy[unscaled, -1] < 0.25 * math.log2(16)
    # The gradient through softmax collapses: far below its scaled value at the same width.
    assert sweep.jacobian[unscaled, -1] < 0.3 * sweep.jacobian[scaled, -1]
    np.testing.assert_allclose(sweep.score_std[unscaled], np.sqrt(sweep.dks), rtol=0.2)


def test_scaled_softmax_stays_about_where_it_starts(sweep):
    scaled = 0
    assert np.ptp(sweep.max_weight[scaled]) < 0.1
    assert np.ptp(sweep.entropy[scaled]) < 0.3  # bits, out of log2(16) = 4
    assert np.ptp(sweep.jacobian[scaled]) < 0.1
    np.testing.assert_allclose(sweep.score_std[scaled], 1.0, rtol=0.2)
    # At d_k = 1 the two are the same numbers: sqrt(1) = 1.
    np.testing.assert_allclose(sweep.max_weight[:, 0], sweep.max_weight[0, 0])
    assert np.all(sweep.entropy <= math.log2(16) + 1e-9) and np.all(sweep.max_weight >= 1 / 16 - 1e-9)


def test_scale_sweep_rejects_a_single_key():
    with pytest.raises(ValueError, match="2 keys"):
        A.scale_sweep(1, seed=0)


# -- a real model's spread of q.k ------------------------------------------------------------------

@pytest.mark.parametrize("arch, pos, kind_index", [("decoder", "sinusoidal", 0), ("decoder", "rope", 0),
                                                   ("encoder-decoder", "sinusoidal", 2)])
def test_head_dot_spread_matches_a_direct_computation(arch, pos, kind_index):
    cfg = TransformerConfig(arch=arch, vocab_size=12, d_model=32, n_heads=4, n_layers=2, pos=pos)
    model = init_model(cfg, 0).eval()
    kind = A.attention_kinds(arch)[kind_index]
    names = A.spread_names(kind, 2, pos)
    src = torch.randint(0, 12, (1, 7), generator=torch.Generator().manual_seed(1))
    kw = {"tgt": torch.randint(0, 12, (1, 5), generator=torch.Generator().manual_seed(2))} if arch != "decoder" else {}
    _, cache = model.run_with_cache(src, names, **kw)
    cache = {k: v.numpy() for k, v in cache.items()}
    spread = A.head_dot_spread(cache, kind, 2, pos)
    assert spread.dot_std.shape == (2, 4) and spread.d_head == cfg.d_head
    if pos == "rope":
        assert names[0].endswith("hook_rot_q")  # the rotated vectors are the ones the model multiplies
    q = cache[names[2]][0, :, 3].astype(np.float64)  # layer 1, head 3: [q d_head]
    k = cache[names[3]][0, :, 3].astype(np.float64)  # [k d_head]
    dots = q @ k.T  # [q k]
    seen = [dots[i, j] for i in range(dots.shape[0]) for j in range(dots.shape[1]) if not kind.causal or j <= i]
    assert spread.pairs == len(seen)
    assert spread.dot_std[1, 3] == pytest.approx(np.std(seen), rel=1e-9)
    assert spread.q_std[1, 3] == pytest.approx(q.std(), rel=1e-9)


def test_head_dot_spread_ignores_masked_pairs():
    cfg = TransformerConfig(arch="decoder", vocab_size=12, d_model=32, n_heads=4, n_layers=1)
    model = init_model(cfg, 0).eval()
    kind = A.attention_kinds("decoder")[0]
    _, cache = model.run_with_cache(torch.arange(6).reshape(1, 6), A.spread_names(kind, 1, cfg.pos))
    cache = {k: v.numpy() for k, v in cache.items()}
    assert A.head_dot_spread(cache, kind, 1, cfg.pos).pairs == 6 * 7 // 2  # the causal triangle


# -- which key of the scalar example wins ----------------------------------------------------------

def test_leader_with_a_positive_query_is_the_largest_key():
    lead = A.scalar_leader(A.scalar_example(q=2.0))
    assert lead.indices == (2,) and lead.rank == "largest" and not lead.all_tied


def test_leader_with_a_negative_query_is_the_smallest_key():
    steps = A.scalar_example(q=-2.0)
    lead = A.scalar_leader(steps)
    assert lead.indices == (0,) and lead.rank == "smallest"
    assert int(np.argmax(steps.weights)) == 0  # the smallest key, 0.1, really gets the most weight


def test_leader_ties_and_a_zero_query():
    assert A.scalar_leader(A.scalar_example(q=0.0)).all_tied
    lead = A.scalar_leader(A.scalar_example(q=1.0, keys=(0.5, 0.1, 0.5), values=(1, 2, 3)))
    assert lead.indices == (0, 2) and lead.rank == "largest" and not lead.all_tied
    mid = A.scalar_leader(A.scalar_example(q=1.0, keys=(0.5, 0.1, 0.5), values=(1, 2, 3), temperature=0.1))
    assert mid.indices == (0, 2)  # the temperature does not change which key scores highest


def test_temperature_changes_the_scalar_example():
    base, cold = A.scalar_example(), A.scalar_example(temperature=0.1)
    np.testing.assert_allclose(cold.scores, base.scores * 10)
    assert cold.weights.max() > 0.99 > base.weights.max()
