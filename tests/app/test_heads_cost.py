"""AppTest for the Heads page's head-count costs (issue 39): parameters and FLOPs stay those of one wide head,
the measured pattern memory grows with h, and the length picker changes the measured curve."""

from __future__ import annotations

import numpy as np

from tests.app.conftest import assert_ok, decode_array, page_at, plotly_specs

PAGE = "pages/heads.py"


def cost_chart(at) -> dict:
    return next(s for s in plotly_specs(at) if "stays" in str(s["layout"].get("annotations")))


def ys(spec: dict, name_start: str) -> np.ndarray:
    t = next(t for t in spec["data"] if t["name"].startswith(name_start))
    return np.asarray(decode_array(t["y"]), dtype=np.float64)


def test_head_count_costs_stay_and_grow_and_the_length_changes_the_measurement():
    at = page_at(PAGE, {"model": "induction-sinusoidal"})
    assert_ok(at)
    spec = cost_chart(at)
    assert np.all(ys(spec, "parameters") == 1) and np.all(ys(spec, "matrix FLOPs") == 1)
    peak = ys(spec, "training-step peak")
    assert np.all(np.diff(peak) > 0) and peak[-1] > 4 * peak[0]  # 1 -> 8 heads (d_model 64): about 8x
    at.select_slider(key="heads.cost_n").set_value(256).run()
    assert_ok(at)
    smaller = ys(cost_chart(at), "training-step peak")
    assert np.all(smaller < peak / 8)  # n² : a quarter of the length, a sixteenth of the patterns
    text = " ".join(c.value for c in at.caption)
    assert "for every head count (counted)" in text and "(measured" in text
