"""Real browser: blocks out of sight are skipped until reached (ui/shell/offscreen.py), and a student sees
the same page: every chart drawn at the size it has without the rule, full-screen views that fill the
window, element toolbars that answer clicks.
"""

from __future__ import annotations

import json

import pytest

from tests.e2e.conftest import assert_no_exception, open_page, screenshot, wait_for_charts
from ui.shell import offscreen

pytestmark = pytest.mark.e2e

POSITIONS_CHARTS = 15
MAIN = "[data-testid='stMain']"
# The blocks the rule is on: the page's top-level blocks and those of a group of sections.
SKIPPABLE = f"{offscreen.TOP_LEVEL_BLOCKS}, {offscreen.GROUP_BLOCKS}"
# The same page with the rule switched off in the browser: what "unchanged" is measured against.
RULE_OFF = ("document.addEventListener('DOMContentLoaded', () => { const s = document.createElement('style');"
            f" s.textContent = {json.dumps(offscreen.RULE_OFF)}; document.head.appendChild(s); }});")
CHART_SIZES = ("() => Array.from(document.querySelectorAll(\"[data-testid='stPlotlyChart'] .main-svg:first-of-type\"))"
               ".map(s => s.getAttribute('width') + 'x' + s.getAttribute('height'))")
LAST_CHART_SHOWN = ("() => { const c = document.querySelectorAll(\"[data-testid='stPlotlyChart']\");"
                    " return c[c.length - 1].checkVisibility({contentVisibilityAuto: true}); }")

# A chart at the top edge of a skipped (contained) block: a block itself, or the first element of a fragment's
# block that is one (a keyed fragment drawing one chart), where its toolbar meets the block's edge.
TOP_LEVEL_CHART = ("() => Array.from(document.querySelectorAll(\"[data-testid='stPlotlyChart']\")).findIndex(c => {"
                   " const el = c.closest(\"[data-testid='stElementContainer']\"), block = el.parentElement;"
                   " if (el.matches(\"" + SKIPPABLE + "\")) return true;"
                   " const wrapper = block.parentElement;"
                   " return block.firstElementChild === el && !!wrapper && wrapper.matches(\"" + SKIPPABLE + "\"); })")


def _scroll_through(page) -> None:
    """Scroll the main column from top to bottom a screen at a time, as a reader would."""
    height = page.evaluate(f"() => document.querySelector(\"{MAIN}\").scrollHeight")
    y = 0
    while y < height:
        y += 700
        page.evaluate(f"(y) => document.querySelector(\"{MAIN}\").scrollTo(0, y)", y)
        page.wait_for_timeout(80)
        height = page.evaluate(f"() => document.querySelector(\"{MAIN}\").scrollHeight")  # grows as blocks draw
    page.wait_for_timeout(500)


def _fills_window(box: dict, page) -> bool:
    window = page.viewport_size
    return box["width"] > 0.9 * window["width"] and box["height"] > 0.85 * window["height"]


def test_blocks_out_of_sight_wait_and_charts_keep_their_size(server_url, browser, page):
    reference = browser.new_context(viewport={"width": 1400, "height": 1000})
    try:
        plain = reference.new_page()
        plain.add_init_script(RULE_OFF)
        open_page(plain, f"{server_url}/positions", timeout=240_000)
        wait_for_charts(plain, POSITIONS_CHARTS)
        plain.wait_for_timeout(1000)
        assert plain.evaluate(LAST_CHART_SHOWN) is True  # the rule really is off there
        expected_sizes = plain.evaluate(CHART_SIZES)
        expected_height = plain.evaluate(f"() => document.querySelector(\"{MAIN}\").scrollHeight")
    finally:
        reference.close()

    open_page(page, f"{server_url}/positions", timeout=240_000)
    wait_for_charts(page, POSITIONS_CHARTS)
    assert_no_exception(page)
    blocks = page.evaluate(f"() => Array.from(document.querySelectorAll(\"{SKIPPABLE}\"))"
                           ".map(e => getComputedStyle(e).contentVisibility)")
    assert len(blocks) > 20 and set(blocks) == {"auto"}, blocks
    assert page.evaluate(LAST_CHART_SHOWN) is False  # far below the first screen: not drawn yet

    _scroll_through(page)
    assert page.evaluate(LAST_CHART_SHOWN) is True
    assert page.evaluate(CHART_SIZES) == expected_sizes
    # once every block was drawn, the page is as tall as without the rule
    assert page.evaluate(f"() => document.querySelector(\"{MAIN}\").scrollHeight") == expected_height


def test_full_screen_and_toolbars_work_inside_skipped_blocks(server_url, page):
    open_page(page, f"{server_url}/positions", timeout=240_000)
    wait_for_charts(page, POSITIONS_CHARTS)

    # A table's full screen. The button is pressed by its event: Playwright's pointer often finds the
    # grid's own scroller over the toolbar of a table, with or without the rule (seen either way).
    table = page.locator("[data-testid='stDataFrame']").first
    table.scroll_into_view_if_needed()
    table.hover()
    table.locator("xpath=ancestor::*[@data-testid='stElementContainer'][1]").locator(
        "button[aria-label='Fullscreen']").dispatch_event("click")
    page.wait_for_timeout(600)
    assert _fills_window(table.bounding_box(), page)
    screenshot(page, "offscreen_table_full_screen")
    page.keyboard.press("Escape")
    page.wait_for_timeout(500)
    assert not _fills_window(table.bounding_box(), page)

    # A chart that is a block itself (top-level or in a group: the block is contained): its toolbar answers the pointer,
    # and full screen takes the whole window, not its block.
    index = page.evaluate(TOP_LEVEL_CHART)
    assert index >= 0
    chart = page.locator("[data-testid='stPlotlyChart']").nth(index)
    chart.scroll_into_view_if_needed()
    page.evaluate(f"(y) => document.querySelector(\"{MAIN}\").scrollBy(0, -300)")  # clear of the app's header
    page.wait_for_timeout(300)
    chart.hover()
    button = chart.locator("xpath=ancestor::*[@data-testid='stElementContainer'][1]").locator(
        "button[aria-label='Fullscreen']")
    box = button.bounding_box()
    centre = [box["x"] + box["width"] / 2, box["y"] + box["height"] / 2]
    hit = page.evaluate("([x, y]) => { const e = document.elementFromPoint(x, y); return !!(e && e.closest("
                        "\"button[aria-label='Fullscreen']\")); }", centre)
    assert hit  # drawn and under the pointer
    button.click(timeout=10_000)
    page.wait_for_timeout(800)
    assert _fills_window(chart.bounding_box(), page)
    screenshot(page, "offscreen_chart_full_screen")


CHUNKS_FETCHED = ("() => performance.getEntriesByType('resource').map(r => r.name.split('/').pop())"
                  ".filter(n => n.startsWith('PlotlyChart.') || n.startsWith('DataFrame.'))")


GRID_STYLE_SHEETS = ("() => Array.from(document.querySelectorAll('link[rel=stylesheet]'))"
                     ".filter(l => l.href.split('/').pop().startsWith('DataFrame.')).length")
KATEX_FACES = ("() => { const s = []; document.fonts.forEach(f => { if (f.family.replace(/[\"']/g, '')"
               ".startsWith('KaTeX_')) s.push(f.status); }); return s; }")


SCRIPT_BLOCKS = ("() => Array.from(document.querySelectorAll(\"[data-testid='stHtml']\"))"
                 ".filter(h => h.children.length === 1 && h.firstElementChild.tagName === 'SCRIPT')"
                 ".map(h => getComputedStyle(h.closest(\"[data-testid='stElementContainer']\")).display)")


def test_lessons_fetches_the_chart_code_that_the_next_page_then_uses(server_url, page):
    # ui/shell/preload.py: the Lessons page draws no chart and no table (Home now draws both), yet the browser
    # fetches Plotly's and the grid's chunks once it is idle...
    open_page(page, f"{server_url}/lessons", timeout=240_000)
    page.wait_for_function(f"() => ({CHUNKS_FETCHED})().length >= 2", timeout=30_000)
    # ...from a block that takes no room: the title sits where it sits without the script
    # (blocks that hold a script and nothing else; the header's "Copy link" button carries its own script and is
    # meant to be seen: ui/shell/export.py)
    page.wait_for_function(f"() => ({SCRIPT_BLOCKS})().length > 0", timeout=30_000)
    hidden = page.evaluate(SCRIPT_BLOCKS)
    assert hidden and set(hidden) == {"none"}, hidden
    # ...with the table grid's style sheet linked and every KaTeX face loaded (the page shows no table and no
    # formula in those fonts' sizes)
    page.wait_for_function(f"() => ({KATEX_FACES})().every(s => s === 'loaded')", timeout=30_000)
    assert len(page.evaluate(KATEX_FACES)) >= 20
    assert page.evaluate(GRID_STYLE_SHEETS) == 1
    # Streamlit's own import of the chunk, on the first chart page, finds the same module: no second fetch
    page.locator("[data-testid='stSidebarNav']").get_by_role("link", name="Attention", exact=True).click()
    page.wait_for_url("**/attention**")
    wait_for_charts(page, 1)
    assert_no_exception(page)
    fetched = page.evaluate(CHUNKS_FETCHED)
    kinds = sorted(f"{n.split('.')[0]}.{n.split('.')[-1]}" for n in fetched)
    assert kinds == ["DataFrame.css", "DataFrame.js", "PlotlyChart.js"], fetched  # each once
    assert page.evaluate(GRID_STYLE_SHEETS) == 1  # Streamlit found the style sheet linked and added none
