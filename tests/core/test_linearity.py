"""Attention is linear in V and not in Q or K (core.analysis.linearity), and the Retrieval page's figure of it."""

from __future__ import annotations

import numpy as np
import pytest

from core.analysis import linearity as L
from core.figures.retrieval import scale_figure


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_scaling_the_values_scales_the_output_exactly(seed):
    q, keys, values = L.example(seed)
    base = L.attention_output(q, keys, values)
    for c in (0.1, 0.5, 3.0, 10.0):
        assert np.allclose(L.scaled_output(q, keys, values, "values", c), c * base, rtol=1e-12, atol=0)
    curves = L.output_scale(q, keys, values)
    assert np.allclose(curves.ratio["values"], curves.factors, rtol=1e-12)


@pytest.mark.parametrize("which", ["queries", "keys"])
def test_scaling_queries_or_keys_does_not_scale_the_output(which):
    q, keys, values = L.example(0)
    curves = L.output_scale(q, keys, values)
    assert not curves.uniform
    gap = np.abs(curves.ratio[which] - curves.factors)
    assert gap[curves.factors >= 2].min() > 0.5  # far from c where c is large
    # the output stays between the smallest and largest value norms: bounded, whatever c is
    norms = np.linalg.norm(values, axis=1) / np.linalg.norm(L.attention_output(q, keys, values))
    assert curves.ratio[which].max() <= norms.max() + 1e-9


def test_a_uniform_pattern_ignores_the_factor_on_queries_and_keys():
    q, keys, values = L.example(0, uniform=True)
    curves = L.output_scale(q, keys, values)
    assert curves.uniform
    for which in ("queries", "keys"):
        assert np.allclose(curves.ratio[which], 1.0, atol=1e-12)
    assert np.allclose(curves.ratio["values"], curves.factors)


def test_bad_choices_are_refused_and_the_figure_marks_the_factor():
    q, keys, values = L.example(0)
    with pytest.raises(ValueError, match="which"):
        L.scaled_output(q, keys, values, "weights", 2.0)
    with pytest.raises(ValueError, match="zero"):
        L.output_scale(q, keys, np.zeros_like(values))
    factors = np.union1d(L.FACTORS, [3.0])
    curves = L.output_scale(q, keys, values, factors)
    fig = scale_figure(curves.factors, curves.ratio, 3.0)
    marker = fig.data[-1]
    assert list(marker.x) == [3.0] * 3
    assert marker.y[0] == pytest.approx(3.0)  # the values' marker sits on y = c
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"
