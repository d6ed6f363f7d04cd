"""The Depth page's statistics and tables (core.analysis.depth_tables): every number the page's text,
tables and captions quote, checked on hand-made curves where the answer is known, and on real stacks."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from core.analysis import depth as A
from core.analysis import depth_tables as T
from core.hyper import sinkhorn


def _profile(variant: str, resid_grad, weight_grad=None) -> A.DepthProfile:
    resid_grad = np.asarray(resid_grad, dtype=np.float64)
    weight_grad = np.ones(len(resid_grad) - 1) if weight_grad is None else np.asarray(weight_grad, dtype=np.float64)
    return A.DepthProfile(variant, resid_grad, weight_grad, np.ones(len(resid_grad)))


def _geometric(factor: float, n_layers: int = 8) -> np.ndarray:
    """A curve that is multiplied by `factor` per layer going down: factor^(L - l), 1 at the top."""
    return factor ** (n_layers - np.arange(n_layers + 1, dtype=np.float64))


def test_number_text_writes_three_digits_and_overflow_for_what_is_not_a_number():
    assert T.number_text(0.466666) == "0.467"
    assert T.number_text(1.8234e-16) == "1.82e-16"
    assert T.number_text(12345.0) == "1.23e+04"
    for missing in (None, float("inf"), float("-inf"), float("nan"), np.float64("nan")):
        assert T.number_text(missing) == "overflow"


def test_band_is_max_over_min_relative_to_the_top_and_inf_when_a_value_is_lost():
    assert T.band(_geometric(0.5, 4)) == pytest.approx(16.0)  # 2^-4 .. 1
    assert T.band([2.0, 4.0, 1.0, 2.0]) == pytest.approx(4.0)  # relative: 1, 2, 0.5, 1
    assert T.band([np.inf, 1.0, 1.0]) == np.inf
    assert T.band([0.0, 1.0, 1.0]) == np.inf  # a curve that reached zero has no finite band


ZIGZAG_STD = np.log(2.0) * np.sqrt(1 - 1 / 49)  # the spread of 7 steps +log 2, -log 2, ..., +log 2


def _all_profiles(plain_factor: float = 0.5) -> dict[str, A.DepthProfile]:
    """Every stack of A.VARIANTS with a known shape: smooth (pre-LN), zigzag (post-LN), growing (no norm),
    geometric (no residual), flat (Sinkhorn), exploding (free mixing)."""
    zigzag = np.ones(9)
    zigzag[1:-1:2] = 2.0  # 1, 2, 1, 2, ..., 1: above the input, 7 steps of log 2, up and down in turn
    return {
        "pre-LN": _profile("pre-LN", np.linspace(1.5, 1.0, 9)),
        "post-LN": _profile("post-LN", zigzag),
        "no norm": _profile("no norm", _geometric(3.0)),
        "no residual": _profile("no residual", _geometric(plain_factor)),
        "hyper (Sinkhorn)": _profile("hyper (Sinkhorn)", np.ones(9)),
        "hyper (free mixing)": _profile("hyper (free mixing)", [np.inf, 1e200, 1e100, 1e50, 1e10, 1e5, 10, 2, 1]),
    }


def test_stack_rows_have_one_row_per_stack_in_order_with_the_pages_columns():
    profiles = _all_profiles()
    rows = T.stack_rows(profiles)
    assert [r["stack"] for r in rows] == list(profiles)
    assert list(rows[0]) == ["stack", "what it is", "‖g_0‖ / ‖g_L‖", "band max/min", "per-layer factor",
                             "zigzag (std of log step)"]
    by = {r["stack"]: r for r in rows}
    assert by["no residual"]["‖g_0‖ / ‖g_L‖"] == T.number_text(0.5 ** 8)
    assert by["no residual"]["per-layer factor"] == "0.5"  # a straight line on the log axis
    assert by["no residual"]["zigzag (std of log step)"] == "0"  # the same step every layer
    assert by["post-LN"]["zigzag (std of log step)"] == T.number_text(ZIGZAG_STD)
    assert by["hyper (Sinkhorn)"]["band max/min"] == "1"
    assert by["hyper (free mixing)"]["‖g_0‖ / ‖g_L‖"] == "overflow"  # past float64 at the input
    assert by["pre-LN"]["what it is"] == A.VARIANTS["pre-LN"]["blurb"]


def test_stack_summary_quotes_the_bands_factors_and_the_floor():
    profiles = _all_profiles()
    lower, _ = A.bounds(0.5, 8)
    s = T.stack_summary(profiles, lower)
    assert s.plain_bottom == pytest.approx(0.5 ** 8) and s.plain_factor == pytest.approx(0.5) and s.plain_finite
    assert s.pre_band == pytest.approx(1.5) and s.pre_above_floor  # 1.5 .. 1, well above 0.5^k
    assert s.zig_pre < 0.1 and s.zig_post == pytest.approx(ZIGZAG_STD)
    assert s.zig_ratio == pytest.approx(s.zig_post / s.zig_pre)
    assert s.nonorm_bottom == pytest.approx(3.0 ** 8)
    assert s.sinkhorn_band == pytest.approx(1.0) and s.free_band == np.inf
    # A floor above the curve, and a plain stack that overflowed.
    assert T.stack_summary(profiles, np.full(9, 2.0)).pre_above_floor is False  # pre-LN's 1.5 .. 1 is below 2
    profiles["no residual"] = _profile("no residual", [np.inf, 1e300, 1e200, 1e100, 1.0])
    assert T.stack_summary(profiles, lower).plain_finite is False


def test_stack_summary_of_real_stacks_matches_the_page_claims():
    profiles = {v: A.depth_profile(v, 12, 1.0, 0) for v in A.VARIANTS}
    lower, _ = A.bounds(0.5, 12)
    s = T.stack_summary(profiles, lower)
    assert s.plain_finite and s.plain_bottom < 1e-2 and 0 < s.plain_factor < 1  # the plain stack dies at gain 1
    assert s.pre_above_floor and s.pre_band < 10
    assert s.zig_post > s.zig_pre  # post-LN zigzags where pre-LN is smooth
    assert s.sinkhorn_band < 10


def test_first_right_counts_finds_the_first_state_with_the_answer_on_top():
    labels = ["embed", "L0 +attn", "L0 +mlp"]
    top = np.array([[5, 1, 7, 0],
                    [5, 2, 8, 0],
                    [5, 2, 9, 3]])  # [stage pos]
    targets = [5, 2, 9, 4]
    got = T.first_right_counts(top, targets, [0, 1, 2, 3], labels)
    assert got == [("embed", 1), ("L0 +attn", 1), ("L0 +mlp", 1)]  # position 3 is never right: left out
    assert T.first_right_counts(top, targets, [1, 1, 0], labels) == [("L0 +attn", 2), ("embed", 1)]
    assert T.first_right_counts(top, targets, [3], labels) == []
    assert T.first_right_counts(top, targets, [], labels) == []


def _sinkhorn_mats(count: int, n: int, seed: int = 0) -> np.ndarray:
    g = torch.Generator().manual_seed(seed)
    return np.stack([sinkhorn(torch.randn(n, n, generator=g, dtype=torch.float64)).numpy() for _ in range(count)])


def test_mixing_checks_of_doubly_stochastic_matrices_and_their_product():
    mats = _sinkhorn_mats(6, 4)
    checks = T.mixing_checks(mats, 2)
    assert checks["count"] == 6
    assert checks["row"] < 1e-6 and checks["column"] < 1e-6
    assert checks["sigma"] == pytest.approx(1.0, abs=1e-6)  # a doubly stochastic matrix has norm 1
    assert checks["product_row"] < 1e-5 and checks["product_column"] < 1e-5
    # A matrix that is not doubly stochastic is caught, in itself and in the product.
    bad = mats.copy()
    bad[2] *= 1.5
    checks = T.mixing_checks(bad, 2)
    assert checks["row"] == pytest.approx(0.5, abs=1e-6) and checks["product_row"] == pytest.approx(0.5, abs=1e-5)
    assert T.mixing_checks(bad, 0)["row"] < 1e-6  # sublayer 0 itself is still fine


def _twin(loss: float, norms, grads) -> A.TaskGradients:
    return A.TaskGradients(["embed", "L0 +attn", "L0 +mlp"], np.asarray(grads, dtype=np.float64),
                           np.asarray(norms, dtype=np.float64), np.ones(1), loss)


def test_twin_rows_and_curves():
    data = {"pre-LN": {"trained": _twin(0.0123, [2.0, 4.0, 8.0], [0.5, 1.0, 2.0]),
                       "untrained": _twin(2.3456, [2.0, 3.0, 4.0], [1.0, 1.0, 1.0]), "accuracy": 0.99, "id": "a"},
            "post-LN": {"trained": _twin(0.0456, [8.0, 8.0, 8.0], [4.0, 2.0, 2.0]),
                        "untrained": _twin(2.5, [8.0, 8.0, 8.0], [1.0, 1.0, 1.0]), "accuracy": 0.97, "id": "b"}}
    rows = T.twin_rows(data)
    assert [(r["model"], r["norm"], r["accuracy"]) for r in rows] == [("a", "pre-LN", 0.99), ("b", "post-LN", 0.97)]
    assert rows[0]["loss (trained)"] == 0.012 and rows[0]["loss (untrained)"] == 2.35
    assert rows[0]["‖x‖ top/embed"] == "4" and rows[1]["‖x‖ top/embed"] == "1"
    assert rows[0]["g_embed/g_top"] == "0.25" and rows[1]["g_embed/g_top"] == "2"
    assert rows[0]["g_embed/g_top untrained"] == "1"
    norms, grads = T.twin_curves(data)
    assert list(norms) == ["pre-LN trained", "pre-LN untrained", "post-LN trained", "post-LN untrained"]
    np.testing.assert_array_equal(norms["pre-LN trained"], [2.0, 4.0, 8.0])
    np.testing.assert_allclose(grads["post-LN trained"], [2.0, 1.0, 1.0])  # relative to the top


def test_random_beats_formula_from_is_where_random_stays_below():
    ns = np.array([2, 4, 8, 16, 32])
    formula = np.log(ns) / np.log(5)
    assert T.random_beats_formula_from({"ns": ns, "formula": formula, "random": formula - 0.1}) == 2
    above_then_below = formula + np.array([0.1, -0.1, 0.1, -0.1, -0.1])  # dips once, then for good from 16
    assert T.random_beats_formula_from({"ns": ns, "formula": formula, "random": above_then_below}) == 16
    assert T.random_beats_formula_from({"ns": ns, "formula": formula, "random": formula + 0.1}) is None
