"""Real browser: a click inside a section (an st.fragment) redraws that section, the address bar
follows, and opening that address shows the same state."""

from __future__ import annotations

from urllib.parse import parse_qs, urlparse

import pytest

from tests.e2e.conftest import assert_no_exception, open_page, pick_option, screenshot, wait_for_run
from ui.shell import offscreen

pytestmark = pytest.mark.e2e
TITLES = ("() => [...document.querySelectorAll(\"[data-testid='stPlotlyChart'] .js-plotly-plot\")]"
          ".map(g => (((g.layout || {}).title || {}).text || '').replace(/<[^>]*>/g, ''))")


def shift_title(page) -> str:
    """The title of the shift map's chart (it names k)."""
    page.wait_for_function(f"() => ({TITLES})().some(t => t.startsWith('M_k for k'))", timeout=60_000)
    return next(t for t in page.evaluate(TITLES) if t.startswith("M_k for k"))


def test_a_click_in_a_fragment_updates_the_section_and_the_address(server_url, page):
    open_page(page, server_url, timeout=240_000)
    open_page(page, f"{server_url}/positions?k=3", timeout=240_000, last="text=The shift map M_k")
    assert_no_exception(page)
    assert shift_title(page).startswith("M_k for k = 3 ")
    slider = page.locator("[data-testid='stSlider'] input[type='range'][aria-label='Offset k']")
    slider.focus()
    slider.press("ArrowRight")
    page.wait_for_function("() => new URL(location.href).searchParams.get('k') === '4'", timeout=60_000)
    wait_for_run(page)
    page.wait_for_function(f"() => ({TITLES})().some(t => t.startsWith('M_k for k = 4 '))", timeout=60_000)
    assert_no_exception(page)
    address = page.url
    assert parse_qs(urlparse(address).query)["k"] == ["4"]

    fresh = page.context.new_page()  # the same address in a new tab: a new session
    open_page(fresh, address, timeout=240_000, last="text=The shift map M_k")
    assert shift_title(fresh).startswith("M_k for k = 4 ")
    assert parse_qs(urlparse(fresh.url).query)["k"] == ["4"]


def test_a_control_that_feeds_a_group_of_sections_redraws_them_in_the_browser(server_url, page):
    # Masks' layer picker redraws what reads it in sections 2-4 (by key, tests/app/test_sections.py); here a student's
    # pick in chromium: the section's heatmaps follow, the address follows, and the group's blocks are skipped
    # out of sight one by one, as the page's own blocks are (ui/shell/offscreen.py)
    open_page(page, server_url, timeout=240_000)
    open_page(page, f"{server_url}/masks", timeout=240_000, last="text=5. What sparsity saves")
    page.wait_for_function(f"() => ({TITLES})().some(t => t.startsWith('own mask · layer 0'))", timeout=60_000)
    skipped = page.evaluate(f"() => Array.from(document.querySelectorAll(\"{offscreen.GROUP_BLOCKS}\"))"
                            ".map(e => getComputedStyle(e).contentVisibility)")
    assert len(skipped) > 10 and set(skipped) == {"auto"}, skipped
    pick_option(page, page.locator("[data-testid='stSelectbox']").filter(has_text="Layer").first,
                page.get_by_role("option", name="1", exact=True))
    page.wait_for_function("() => new URL(location.href).searchParams.get('layer') === '1'", timeout=60_000)
    wait_for_run(page)
    page.wait_for_function(f"() => ({TITLES})().some(t => t.startsWith('own mask · layer 1'))", timeout=60_000)
    assert_no_exception(page)
    page.get_by_text("Largest change of one attention weight").scroll_into_view_if_needed()  # the heatmaps
    page.wait_for_timeout(500)
    screenshot(page, "masks_layer_1")
    fresh = page.context.new_page()  # the address in a new tab shows the same pick
    open_page(fresh, page.url, timeout=240_000, last="text=5. What sparsity saves")
    fresh.wait_for_function(f"() => ({TITLES})().some(t => t.startsWith('own mask · layer 1'))", timeout=60_000)
