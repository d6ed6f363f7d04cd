"""The Retrieval page's math: softmax(q.k) as a Gaussian kernel, the beta limit, ties, the toy's checks."""

from __future__ import annotations

import math

import numpy as np
import pytest

from core.analysis import retrieval as R


def random_unit_keys(n: int, d: int, seed: int) -> np.ndarray:
    keys = np.random.default_rng(seed).standard_normal((n, d))
    return keys / np.linalg.norm(keys, axis=-1, keepdims=True)


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("key_norm", [0.5, 1.0, 3.0])
def test_equal_norm_keys_make_softmax_a_gaussian_kernel(seed, key_norm):
    """softmax(q.k) equals the normalised Gaussian kernel around q with variance 1, for keys of equal norm."""
    rng = np.random.default_rng(100 + seed)
    keys = key_norm * random_unit_keys(12, 5, seed)
    query = rng.standard_normal(5) * rng.uniform(0.2, 4.0)
    attention = R.attention_weights(query, keys)
    kernel = R.gaussian_kernel_weights(query, keys, variance=1.0)
    assert np.max(np.abs(attention - kernel)) < 1e-6
    # the same statement with q = |q| u: a kernel centred at u with variance 1 / |q|
    norm = np.linalg.norm(query)
    centred = R.gaussian_kernel_weights(query / norm, keys, variance=R.kernel_variance(norm))
    assert np.max(np.abs(attention - centred)) < 1e-6


def test_unequal_norms_break_the_identity_toward_the_longer_key():
    keys = random_unit_keys(6, 3, 7)
    keys[2] *= 3.0
    query = np.array([0.4, -0.2, 0.9]) * 2.0
    attention = R.attention_weights(query, keys)
    kernel = R.gaussian_kernel_weights(query, keys, variance=1.0)
    assert np.max(np.abs(attention - kernel)) > 1e-3
    # the ratio is exp(|k|^2 / 2) up to one constant: the stretched key is boosted most
    ratio = attention / kernel
    expected = np.exp(np.linalg.norm(keys, axis=-1) ** 2 / 2)
    assert np.allclose(ratio / ratio[0], expected / expected[0], rtol=1e-9)


def test_softmax_survives_huge_scores():
    w = R.attention_weights(np.array([1e4, 0.0]), np.array([[1.0, 0.0], [0.99, 0.1], [-1.0, 0.0]]))
    assert np.isfinite(w).all() and abs(w.sum() - 1) < 1e-12 and w[0] > 0.999


def test_toy_curves_coincide_only_with_equal_norms():
    x, y = R.preset_points("sine")
    equal = R.smooth(x, y, query_x=0.4, query_norm=50.0, norm_tilt=0.0)
    assert equal.equal_norms and equal.max_difference < 1e-6
    tilted = R.smooth(x, y, query_x=0.4, query_norm=50.0, norm_tilt=1.0)
    assert not tilted.equal_norms and tilted.max_difference > 1e-3
    assert abs(equal.weights.sum() - 1) < 1e-12 and equal.kernel_curve.max() == pytest.approx(1.0)


def test_a_larger_query_norm_narrows_the_kernel_as_predicted():
    rows = R.bandwidth_table([4.0, 16.0, 64.0, 256.0])
    measured = [r["measured width"] for r in rows]
    assert all(a > b for a, b in zip(measured, measured[1:]))
    # the small-angle prediction 1 / (pi sqrt|q|) is good for a narrow kernel, worse for a wide one
    assert abs(rows[-1]["measured / predicted"] - 1) < 0.01
    assert abs(rows[0]["measured / predicted"] - 1) > abs(rows[-1]["measured / predicted"] - 1)


def test_points_are_checked_with_messages():
    with pytest.raises(ValueError, match="between 0 and 1"):
        R.check_points([0.2, 1.5], [0, 1])
    with pytest.raises(ValueError, match="finite"):
        R.check_points([0.2, float("nan")], [0, 1])
    with pytest.raises(ValueError, match="between 1 and 64"):
        R.check_points(np.linspace(0, 1, 65), np.zeros(65))
    with pytest.raises(ValueError, match="number"):
        R.check_points(["a"], [1])


@pytest.mark.parametrize("seed", range(4))
def test_large_beta_tends_to_one_hot_on_the_argmax(seed):
    rng = np.random.default_rng(seed)
    keys, values = rng.standard_normal((7, 2)), rng.standard_normal(7)
    query = R.unit(rng.uniform(0, 360))
    sweep = R.lookup_sweep(keys, values, query, np.logspace(-3, 4, 60))
    best = int(np.argmax(keys @ query))
    assert list(sweep.best) == [best]
    assert abs(sweep.output[0] - values.mean()) < 1e-2  # beta near 0: the mean of all values
    assert abs(sweep.output[-1] - values[best]) < 1e-3  # large beta: the best key's value
    assert np.all(np.diff(sweep.best_weight) >= -1e-12)  # the best key's weight only grows
    assert np.all(np.diff(sweep.entropy) <= 1e-12)
    w_at = R.softmax(sweep.beta_one_hot * (keys @ query))[best]
    assert w_at == pytest.approx(R.ONE_HOT, abs=1e-6)


def test_a_tie_stops_at_the_midpoint():
    keys, values = R.preset_table("tie")
    sweep = R.lookup_sweep(keys, values, R.unit(0.0), np.logspace(-2, 4, 40))
    assert len(sweep.best) == 2
    assert math.isinf(sweep.beta_one_hot)
    midpoint = values[sweep.best].mean()
    assert abs(sweep.output[-1] - midpoint) < 1e-9
    assert np.all(sweep.best_weight <= 0.5 + 1e-12)


def test_table_checks():
    with pytest.raises(ValueError, match="finite"):
        R.check_table([[0, float("inf")]], [1])
    with pytest.raises(ValueError, match="between 1 and 16"):
        R.check_table(np.zeros((17, 2)), np.zeros(17))


def test_nearest_is_the_argmax_only_for_equal_norms():
    equal = R.equivalence(R.stretched_keys(1.0), query_angle=0.0, query_norm=5.0)
    assert equal.argmax_dot == equal.nearest == 0 and equal.max_difference < 1e-6
    stretched = R.equivalence(R.stretched_keys(4.0), query_angle=0.0, query_norm=5.0)
    assert stretched.nearest == 0 and stretched.argmax_dot == 1 and stretched.max_difference > 1e-3
