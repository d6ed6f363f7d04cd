"""Real browser: on the Attention page a slider and a select change the heatmap, and each view draws.
Screenshots go to test-artifacts/screenshots/. (Every page's first load, and its screenshot, is in
test_offline.py.)
"""

from __future__ import annotations

from urllib.parse import parse_qs, urlparse

import numpy as np
import pytest

from tests.app.conftest import decode_array
from tests.e2e.conftest import (assert_no_exception, fit_viewport_to_page, open_page, pick_option,
                                 plotly_data, screenshot, wait_for_run)

pytestmark = pytest.mark.e2e
CHART = "[data-testid='stPlotlyChart'] .js-plotly-plot"


def _tall_screenshot(page, name: str, width: int = 1400, cap: int = 9000):
    """A screenshot of the whole page: Streamlit scrolls inside its main block, so a full-page shot of the
    window would stop at the viewport; make the viewport as tall as the content first."""
    fit_viewport_to_page(page, width=width, cap=cap, pad=0)
    page.wait_for_timeout(700)  # plotly charts and data grids redraw for the new viewport
    wait_for_run(page)
    page.wait_for_function("() => !document.querySelector(\"[data-testid='stSkeleton']\")", timeout=60_000)
    path = screenshot(page, name)
    page.set_viewport_size({"width": width, "height": 1000})
    return path


def _z(page, index: int = 0) -> np.ndarray:
    data = plotly_data(page, index)
    assert data, f"no plotly chart number {index} on the page"
    return _array(data[0]["z"])


def _array(value) -> np.ndarray:
    """A trace array as the browser holds it: a list, or plotly's {dtype, bdata, shape} typed-array spec."""
    if isinstance(value, dict) and "bdata" in value:
        return decode_array(value).astype(float)
    return np.asarray(value, dtype=float)


def _settled_chart(page, index: int, trace_type: str, timeout_ms: int = 60_000, unlike: list | None = None) -> list:
    """The index-th chart's data once the rerun has settled on a chart of `trace_type` there (and, with
    `unlike`, once its first trace's y differs from that earlier data: the click's rerun has landed).

    While Streamlit replaces a view, the page can briefly hold the old and the new charts side by side,
    and a rerun may not have started yet when a click returns; so the n-th chart is only trusted once
    the run is over, it is the kind of chart expected, and it is not the chart from before the click.
    """
    step = 250
    data = None
    for _ in range(timeout_ms // step):
        wait_for_run(page)
        data = plotly_data(page, index)
        stale = unlike is not None and data and np.array_equal(_array(data[0]["y"]), _array(unlike[0]["y"]))
        if data and data[0].get("type") == trace_type and not stale:
            return data
        page.wait_for_timeout(step)
    raise AssertionError(f"chart {index} is {data and data[0].get('type')!r}, not a {trace_type!r} chart")


def _wait_change(page, before: np.ndarray, index: int = 0, timeout_ms: int = 60_000) -> np.ndarray:
    """Wait until the index-th chart's z differs from `before` (the rerun replaced the figure)."""
    step = 250
    for _ in range(timeout_ms // step):
        wait_for_run(page)
        try:
            now = _z(page, index)
        except AssertionError:
            now = None
        if now is not None and (now.shape != before.shape or not np.allclose(now, before)):
            return now
        page.wait_for_timeout(step)
    raise AssertionError("the heatmap did not change")


def test_slider_and_select_change_the_heatmap(server_url, page):
    open_page(page, f"{server_url}/attention?model=induction-sinusoidal&view=head&layer=1", timeout=180_000,
              last="[data-testid='stPlotlyChart'] >> nth=2")
    assert_no_exception(page)
    _tall_screenshot(page, "attention_head")
    z0 = _z(page)
    assert z0.ndim == 2 and np.allclose(z0.sum(axis=1), 1, atol=1e-3)

    # A select: the Head buttons open another head.
    page.locator("[data-testid='stButtonGroup']").nth(1).get_by_role("radio", name="2", exact=True).click()
    z1 = _wait_change(page, z0)
    assert "head=2" in page.url

    # A slider: one step left on the temperature sharpens every row.
    slider = page.locator("[data-testid='stSlider'] input[type='range']").first
    slider.focus()
    slider.press("ArrowLeft")
    z2 = _wait_change(page, z1)
    assert (z2.max(axis=1) >= z1.max(axis=1) - 1e-3).all()
    assert parse_qs(urlparse(page.url).query)["temp"] == ["0.8"]

    # The query select box moves the bar chart to another row of the heatmap.
    before = _settled_chart(page, 2, "bar")
    query_box = page.locator("[data-testid='stSelectbox']").filter(has_text="Query token").get_by_role("combobox")
    pick_option(page, query_box, page.get_by_role("option").nth(3))
    bars = _settled_chart(page, 2, "bar", unlike=before)
    np.testing.assert_allclose(_array(bars[0]["y"]), z2[3], atol=1e-3)
    assert_no_exception(page)
    _tall_screenshot(page, "attention_head_changed")

    # The URL now holds the view: opening it again shows the same heatmap.
    url = page.url
    open_page(page, url, timeout=180_000, last="[data-testid='stPlotlyChart'] >> nth=2")
    np.testing.assert_allclose(_z(page), z2, atol=1e-6)


@pytest.mark.parametrize("name, query", [
    ("attention_grid", "model=induction-sinusoidal"),
    ("attention_steps_toy", "model=induction-sinusoidal&view=steps&steps=toy"),
    ("attention_steps_toy_negative_q", "model=induction-sinusoidal&view=steps&steps=toy&toy_q=-2&temp=0.5"),
    ("attention_steps_head", "model=sort-decoder&view=steps&layer=1&head=1"),
    ("attention_temperature", "model=sort-decoder&view=temp&temp=0.33"),
    ("attention_compare", "model=induction-sinusoidal&view=compare&layer2=1&head2=1"),
    ("attention_cross", "model=reverse-encdec&view=head&kind=cross&layer=1"),
    ("attention_export", "model=agreement-encoder&view=export"),
])
def test_views_render(server_url, page, name, query):
    open_page(page, f"{server_url}/attention?{query}", timeout=180_000)
    assert_no_exception(page)
    _tall_screenshot(page, name)


def test_scale_view_draws_the_histogram_curves_and_model_spread(server_url, page):
    open_page(page, f"{server_url}/attention?model=induction-sinusoidal&view=scale&dk=1024", timeout=180_000,
              last="[data-testid='stPlotlyChart'] >> nth=4")
    assert_no_exception(page)
    hist = _settled_chart(page, 0, "bar")
    centres = _array(hist[0]["x"])
    assert centres.max() > 3 * 32 and centres.min() < -3 * 32  # raw q.k at d_k = 1024 spreads about 32
    curve = _settled_chart(page, 1, "scatter")
    assert _array(curve[1]["y"])[-1] > 0.9  # unscaled: one key takes almost all the weight at d_k = 1024
    # not inner_text: a block out of sight is not laid out (ui/shell/offscreen.py), and its innerText is empty
    assert "1024" in page.get_by_text("Random q·k at d_k").first.text_content()  # the metrics' heading
    _tall_screenshot(page, "attention_scale")
