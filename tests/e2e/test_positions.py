"""Real browser: the Positions page renders every panel (extrapolation included), the base slider
changes the sinusoidal table, and the learned model's refusal is a message, not an exception.

The screenshot is taken with the window as tall as the page, so it shows every panel.
"""

from __future__ import annotations

from urllib.parse import parse_qs, urlparse

import numpy as np
import pytest

from core.analysis import positions as P
from tests.e2e.conftest import (SCREENSHOTS, assert_no_exception, chart_z, fit_viewport_to_page, open_page, screenshot,
                                 wait_for_z_change)

pytestmark = pytest.mark.e2e
CHARTS = "[data-testid='stPlotlyChart'] .js-plotly-plot"


def _full_height_screenshot(page, name: str):
    """Grow the window to the page's height (Streamlit scrolls inside stMain), then screenshot."""
    fit_viewport_to_page(page, pad=80)
    page.wait_for_timeout(700)  # plotly resizes its charts to the new window
    return screenshot(page, name)


def test_positions_page_in_a_browser(server_url, page):
    # The app's entry first: a fresh server asked straight for /positions runs the page file on its own
    # (Streamlit's pages/ folder discovery), without app.py's navigation and wide layout.
    open_page(page, server_url, timeout=240_000)
    # ext= in the URL runs the extrapolation panel right away (a shared link shows the curves).
    open_page(page, f"{server_url}/positions?model=induction-sinusoidal&ext=20", timeout=240_000,
              last="text=cannot extrapolate")
    assert_no_exception(page)
    page.wait_for_function(f"() => document.querySelectorAll(\"{CHARTS}\").length >= 15", timeout=60_000)

    z0 = chart_z(page, "positions-fig_table")  # by its key: plots mount in no fixed order
    np.testing.assert_allclose(z0, P.sinusoidal_table(64, 64, 10000), atol=1e-5)

    # One step left on the base slider: 10,000 -> 5,000, and the table follows.
    slider = page.locator("[data-testid='stSlider'] input[type='range'][aria-label='Base b']")
    slider.focus()
    slider.press("ArrowLeft")
    z1 = wait_for_z_change(page, z0, "positions-fig_table")
    np.testing.assert_allclose(z1, P.sinusoidal_table(64, 64, 5000), atol=1e-5)
    assert parse_qs(urlparse(page.url).query)["base"] == ["5000"]

    # The learned model refused the long inputs with its own message; the page carried on.
    alert = page.locator("[data-testid='stAlert']").filter(has_text="cannot extrapolate")
    assert alert.count() == 1
    assert "21 positions" in alert.text_content()  # not inner_text: a block out of sight is not laid out
    assert_no_exception(page)
    path = _full_height_screenshot(page, "positions")
    assert path.stat().st_size > 50_000



def test_rope_decay_panel_in_a_browser(server_url, page):
    """The distance-decay section draws the bound, the random mean and induction-rope's own q and k; a link's
    decay_base and decay_d are used. Screenshot (the section on screen): positions_decay."""
    open_page(page, server_url, timeout=240_000)
    open_page(page, f"{server_url}/positions?model=induction-rope&decay_base=10000&decay_d=128", timeout=240_000,
              last="text=Only the bound says so")
    assert_no_exception(page)
    # the decay chart, once drawn (plotly draws a page's charts in no fixed order)
    names = page.wait_for_function(
        f"() => [...document.querySelectorAll(\"{CHARTS}\")].map(g => (g.data || []).map(t => t.name))"
        ".find(n => n.some(x => x && x.startsWith('upper bound'))) || null", timeout=60_000).json_value()
    assert names == ["upper bound (d = 128)", "random q, k (d = 128)", "induction-rope q, k (its d = 16)"]
    page.set_viewport_size({"width": 1400, "height": 1000})
    page.get_by_text("Head width d (bound and random vectors)").scroll_into_view_if_needed()
    page.wait_for_timeout(1500)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / "positions_decay.png"
    page.screenshot(path=str(path))  # the window only: the section scrolled into view
    assert path.stat().st_size > 20_000
