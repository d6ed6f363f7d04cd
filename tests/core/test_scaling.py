"""core.analysis.scaling: the parameter and FLOP formulas equal what small models built here measure, they give
the published sizes of GPT-2 and BERT-base, and the costs grow linearly with depth and faster with width."""

from __future__ import annotations

import pytest

from core.analysis import scaling as S


@pytest.mark.parametrize("shape", [(1, 32), (2, 64)])
def test_formulas_equal_the_measurements_of_small_models(shape):
    measured = S.measure_small(*shape)
    size = S.small_size(*shape)
    assert measured["params"] == S.counted_params(size)
    assert measured["flops"] == S.counted_flops(size, S.SMALL_N)
    assert measured["train_bytes"] > 0


def test_counts_at_published_sizes():
    params = {s.name: S.counted_params(s) for s in S.LARGE}
    assert params["GPT-2 small"] == 124_439_808  # the 124M GPT-2 checkpoint's parameter count
    assert params["GPT-2 medium"] == pytest.approx(355e6, rel=0.01)
    assert params["GPT-2 large"] == pytest.approx(774e6, rel=0.01)
    assert params["BERT-base"] == pytest.approx(110e6, rel=0.01)
    rows = {r["model"]: r for r in S.large_rows()}
    assert rows["GPT-2 large"]["forward GFLOP at context (counted)"] > rows["GPT-2 small"]["forward GFLOP at context (counted)"]


def test_depth_is_linear_and_width_is_faster_than_linear():
    one, two = S.small_size(2, 64), S.small_size(4, 64)
    body = lambda s: S.counted_params(s) - s.vocab * s.d_model - s.n_ctx * s.d_model - 2 * s.d_model  # noqa: E731
    assert body(two) == 2 * body(one)
    assert S.counted_activation_bytes(two, 128) == 2 * S.counted_activation_bytes(one, 128)
    wide = S.small_size(2, 128)
    assert body(wide) > 3.9 * body(one)  # d^2: doubling the width about quadruples the layers' parameters
