"""Real browser: the Depth page loads with every chart, the heads slider moves the hop-model curve,
a one-token input from a link draws the page, and screenshots of the whole page go to
test-artifacts/screenshots/."""

from __future__ import annotations

import math
import time
from urllib.parse import quote

import numpy as np
import pytest

from tests.e2e.conftest import (assert_no_exception, open_page, screenshot, tall_screenshot, wait_for_charts,
                                 wait_for_run)

pytestmark = pytest.mark.e2e
LAST = "text=Raise τ on the model until the star disappears"  # the last "try this" prompt on the page


def _charts(page) -> list[dict]:
    """Every plotly chart's title and data, in page order.

    The browser wraps titles in <b> (removed here) and holds numpy arrays as {bdata, _inputArray}.
    """
    return page.evaluate(
        "() => Array.from(document.querySelectorAll(\"[data-testid='stPlotlyChart'] .js-plotly-plot\"))"
        ".map(g => ({title: ((g.layout.title && g.layout.title.text) || '').replace(/<[^>]+>/g, ''),"
        " data: JSON.parse(JSON.stringify(g.data, (k, v) => (v && v._inputArray) ? Array.from(v._inputArray)"
        " : (ArrayBuffer.isView(v) ? Array.from(v) : v)))}))")


def _trace(page, title: str, name: str, timeout_s: float = 60.0) -> dict:
    """The trace `name` of the chart titled `title`, waiting up to `timeout_s` for that chart to be drawn
    (plotly draws a page's charts in no fixed order, and during a section rerun one may be redrawn)."""
    deadline = time.monotonic() + timeout_s
    while True:
        for c in _charts(page):
            if c["title"].startswith(title):
                for t in c["data"]:
                    if (t.get("name") or "").startswith(name):
                        return t
        if time.monotonic() > deadline:
            raise AssertionError(f"no trace {name!r} in a chart titled {title!r}")
        page.wait_for_timeout(250)


def test_depth_page_draws_and_the_heads_slider_moves_the_formula(server_url, page):
    # Arrive the way a student does: the home page (with the model in the URL), then the menu link.
    open_page(page, f"{server_url}/?model=sort-decoder", timeout=240_000)
    page.get_by_role("link", name="Depth").first.click()
    wait_for_run(page, timeout=240_000, last=LAST)
    wait_for_charts(page, 10, timeout=240_000)
    assert_no_exception(page)
    charts = _charts(page)
    assert len(charts) >= 10, [c["title"] for c in charts]
    depth = _trace(page, "Gradient at each block's input", "no residual")
    assert len(depth["y"]) == 49 and depth["y"][0] < 1e-8  # the plain stack's gradient has died
    tall_screenshot(page, "depth", LAST)

    before = np.asarray(_trace(page, "Layers needed", "hop model")["y"], dtype=float)
    slider = page.locator("[data-testid='stSlider'] input[type='range'][aria-label='Heads H']")
    slider.focus()
    slider.press("ArrowRight")  # H: 4 -> 5
    for _ in range(360):
        wait_for_run(page)
        after = np.asarray(_trace(page, "Layers needed", "hop model")["y"], dtype=float)
        if not np.allclose(after, before):
            break
        page.wait_for_timeout(250)
    ns = np.asarray(_trace(page, "Layers needed", "hop model")["x"], dtype=float)
    np.testing.assert_allclose(after, np.log(ns) / math.log(6))
    assert "H=5" in page.url
    wait_for_run(page, last=LAST)
    assert_no_exception(page)


def test_depth_page_takes_a_one_token_input_from_a_link(server_url, page):
    # A classroom link with the shortest input: one token, so one position and nothing scored.
    open_page(page, f"{server_url}/depth?model=induction-rope&input={quote('<bos>')}", timeout=240_000, last=LAST)
    wait_for_charts(page, 10, timeout=240_000)
    assert_no_exception(page)
    titles = [c["title"] for c in _charts(page)]
    assert any(t.startswith("Pieces of the final state at position 0") for t in titles), titles
    assert page.get_by_text("after 0 stacked layer(s)").count() == 1
    tall_screenshot(page, "depth_one_token", LAST)


def _panel_screenshot(page, text: str, name: str) -> None:
    """A viewport screenshot with the element holding `text` scrolled to the top (Streamlit scrolls inside stMain)."""
    page.set_viewport_size({"width": 1400, "height": 1300})
    page.get_by_text(text).first.evaluate("e => e.scrollIntoView({block: 'start'})")
    page.wait_for_timeout(1200)
    screenshot(page, name)


def test_depth_bounds_and_dense_versus_sharp_links(server_url, page):
    # The bounds at the default rho (floor far above ceiling), and the links chart moving with tau.
    open_page(page, f"{server_url}/depth?model=sort-decoder", timeout=240_000, last=LAST)
    wait_for_charts(page, 11, timeout=240_000)
    assert_no_exception(page)
    floor = _trace(page, "Gradient at each block's input", "(1 - ρ)")["y"]
    ceiling = _trace(page, "Gradient at each block's input", "ρ^(L-l)")["y"]
    assert "rho=0.1" in page.url and floor[0] / ceiling[0] > 1e20
    _panel_screenshot(page, "Gradient at each block's input", "depth_bounds")
    star = _trace(page, "Layers to reach all n", "your τ")
    assert star["y"] == [2] and star["x"] == [0.1]
    slider = page.locator("[data-testid='stSlider'] input[type='range'][aria-label='Edge threshold τ']")
    if slider.count() == 0:  # a select_slider's thumb
        slider = page.get_by_role("slider", name="Edge threshold τ")
    slider.first.focus()
    for _ in range(5):  # tau 0.1 -> 0.9, one rerun per press
        slider.first.press("ArrowRight")
        wait_for_run(page)
    for _ in range(360):
        wait_for_run(page)
        star = _trace(page, "Layers to reach all n", "your τ")
        if star["x"] == [0.9]:
            break
        page.wait_for_timeout(250)
    assert star["x"] == [0.9] and star["y"] == [3] and "tau=0.9" in page.url  # sharp links: ceil(ln 64 / ln 5)
    _panel_screenshot(page, "One layer or ln n layers?", "depth_links")
    assert_no_exception(page)
