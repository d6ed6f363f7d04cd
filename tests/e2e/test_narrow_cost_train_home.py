"""Real browser at 1024x768 (the sidebar open, taking ~300 px): on Cost, Train and Home the main figure starts on
the first screen, the title keeps "Copy link to this view" beside it, and nothing a student must read is cut:
no equation, metric label, segmented-control button, chart title or heading reaches past an edge that clips it.

The clipping checks read the whole page with the window grown to its height at the same width (blocks out of
sight are not laid out, ui/shell/offscreen.py), with every expander opened, so the equations moved into them
are checked too.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.app.conftest import decode_array
from tests.e2e.conftest import assert_no_exception, fit_viewport_to_page, open_page, screenshot, wait_for_run

pytestmark = pytest.mark.e2e

WIDTH, HEIGHT = 1024, 768
FIRST_SCREEN = HEIGHT - 150  # at least 150 px of the first figure show without scrolling
FIGURES = ("[data-testid='stMain'] [data-testid='stPlotlyChart'], [data-testid='stMain'] [data-testid='stImage']")

# What is cut: an element whose box reaches past an ancestor (up to the main column) that clips its overflow,
# or that clips its own text (text-overflow: an ellipsis, scrollWidth > clientWidth).
CUT = """(selector) => {
  const main = document.querySelector("[data-testid='stMain']");
  const cut = [];
  for (const el of main.querySelectorAll(selector)) {
    const r = el.getBoundingClientRect();
    if (r.width === 0 && r.height === 0) continue;  // not laid out (a closed popover, a hidden tab)
    const name = (el.value || el.textContent || el.getAttribute('aria-label') || el.className || '').trim().slice(0, 60);
    // An equation's block is at most as wide as its column; what is wider scrolls inside it (or spills out).
    if (el.matches('.katex-display')) {
      const column = el.closest("[data-testid='stElementContainer']").clientWidth;
      if (el.scrollWidth > column + 1) cut.push(`${name}: the equation is ${el.scrollWidth} px wide in ${column} px`);
      continue;
    }
    if (el.scrollWidth > el.clientWidth + 1 && getComputedStyle(el).overflowX !== 'visible') {
      cut.push(`${name}: its text is ${el.scrollWidth} px wide in ${el.clientWidth} px`);
      continue;
    }
    for (let a = el.parentElement; a && a !== main.parentElement; a = a.parentElement) {
      const style = getComputedStyle(a);
      if (style.overflowX === 'visible' && style.overflowY === 'visible') continue;
      const b = a.getBoundingClientRect();
      if (r.left < b.left - 1 || r.right > b.right + 1) {
        cut.push(`${name}: [${Math.round(r.left)}, ${Math.round(r.right)}] outside [${Math.round(b.left)}, ${Math.round(b.right)}] of ${a.getAttribute('data-testid') || a.className}`);
        break;
      }
    }
  }
  return cut;
}"""
# The text-bearing elements a student must read on these pages.
READ = ", ".join([
    ".katex-display",  # equations
    "[data-testid='stMetricLabel'] p", "[data-testid='stMetricLabel'] div",  # metric labels
    "[data-testid='stButtonGroup'] button",  # segmented controls' buttons
    "[data-testid='stWidgetLabel'] p",  # widget labels
    "[data-testid='stSelectbox'] input",  # the option a select box shows (its value, clipped when too long)
    "[data-testid='stButton'] button", "[data-testid='stDownloadButton'] button",
    "[data-testid='stHeading'] h1", "[data-testid='stHeading'] h2", "[data-testid='stHeading'] h3",
    "[data-testid='stPlotlyChart'] .gtitle", "[data-testid='stPlotlyChart'] .annotation-text",
])
TITLE_ROW = """() => {
  const h = document.querySelector("[data-testid='stMain'] h1");
  const b = [...document.querySelectorAll("[data-testid='stMain'] button")].find(x => x.textContent.includes('Copy link'));
  if (!h || !b) return null;
  const hr = h.getBoundingClientRect(), br = b.getBoundingClientRect();
  return {title_bottom: hr.bottom, button_top: br.top, button_right: br.right, main_right:
          document.querySelector("[data-testid='stMainBlockContainer']").getBoundingClientRect().right};
}"""


def _open(browser, server_url: str, path: str, last: str | None = None):
    """A fresh 1024x768 page on `path`, its script run finished; the page and its context."""
    context = browser.new_context(viewport={"width": WIDTH, "height": HEIGHT})
    page = context.new_page()
    open_page(page, f"{server_url}/{path}", timeout=240_000, last=last)
    page.wait_for_timeout(1500)  # charts and images take their size after the run
    wait_for_run(page)
    assert_no_exception(page)
    return context, page


def _first_figure_top(page) -> tuple[float, str] | None:
    """(top edge in the window, kind) of the main column's first figure (plotly chart or image)."""
    return page.evaluate(f"() => {{ const c = document.querySelector(\"{FIGURES}\");"
                         " return c ? [c.getBoundingClientRect().top, c.getAttribute('data-testid')] : null; }")


def _assert_title_row(page) -> None:
    """The Copy link button sits beside the title, not under it, and inside the main column."""
    row = page.evaluate(TITLE_ROW)
    assert row is not None, "no title or no Copy link button"
    assert row["button_top"] < row["title_bottom"], f"Copy link wrapped under the title: {row}"
    assert row["button_right"] <= row["main_right"] + 1, row


def _assert_nothing_cut(page, name: str) -> None:
    """Grow the window to the page's height at 1024 wide, open every expander, and find nothing cut."""
    fit_viewport_to_page(page, width=WIDTH, cap=16_000)
    for summary in page.locator("[data-testid='stMain'] [data-testid='stExpander'] summary").all():
        if summary.get_attribute("aria-expanded") != "true":
            summary.click()
    page.wait_for_timeout(1000)
    fit_viewport_to_page(page, width=WIDTH, cap=16_000)
    wait_for_run(page)
    page.wait_for_timeout(1500)  # plotly charts redraw at the new size
    cut = page.evaluate(CUT, READ)
    if cut:
        screenshot(page, f"narrow_{name}_cut")
    assert not cut, "\n".join(cut)


def test_train_first_figure_is_the_live_learning_rate_schedule(server_url, browser):
    context, page = _open(browser, server_url, "train?steps=200&warmup=50&lr=0.004")
    try:
        page.wait_for_function("() => { const g = document.querySelector(\"[data-testid='stMain'] "
                               "[data-testid='stPlotlyChart'] .js-plotly-plot\"); return !!(g && g.data); }",
                               timeout=60_000)  # drawn before any training, or the test fails here
        data = page.evaluate("() => { const g = document.querySelector(\"[data-testid='stMain'] "
                             "[data-testid='stPlotlyChart'] .js-plotly-plot\"); return g && g.data ? "
                             "JSON.parse(JSON.stringify(g.data[0], (k, v) => ArrayBuffer.isView(v) ? Array.from(v) : v))"
                             " : null; }")
        assert data is not None, "no chart drawn on the Train page before training"
        x = np.asarray(decode_array(data["x"]), dtype=float)
        y = np.asarray(decode_array(data["y"]), dtype=float)
        assert x.size == 200 and y.max() == pytest.approx(0.004, rel=1e-6)
        assert int(np.argmax(y)) == 49  # the warm-up's last step reaches the peak
        assert np.all(np.diff(y[:50]) > 0) and np.all(np.diff(y[50:]) <= 1e-12)  # up, then down
    finally:
        context.close()


@pytest.mark.parametrize("path,last", [
    ("cost?nmax=512", "text=this is why long-context models use chunked"),
    ("train", "[data-testid='stFileUploader']"),
    ("", None),
], ids=["cost", "train", "home"])
def test_the_main_figure_comes_first_and_nothing_a_student_reads_is_cut_at_1024(server_url, browser, path, last):
    context, page = _open(browser, server_url, path, last=last)
    try:
        found = _first_figure_top(page)
        assert found is not None, "no figure in the main column"
        top, first = found
        assert first == "stPlotlyChart", f"the first figure is a {first}, not the page's main chart"
        assert top <= FIRST_SCREEN, f"the first figure starts at {top:.0f} px, below {FIRST_SCREEN} px"
        _assert_title_row(page)
        if not path:  # Home: the current-model line is on the first screen too
            line = page.get_by_text("Current model:").first.bounding_box()
            assert line is not None and line["y"] + line["height"] <= HEIGHT, line
        _assert_nothing_cut(page, path.split("?")[0] or "home")
    finally:
        context.close()
