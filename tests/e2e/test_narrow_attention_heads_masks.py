"""Real browser at 1024 x 768 (the sidebar open: about 300 px of it) on the Attention, Heads and Masks pages, nothing
a student must read is cut (that the first figure starts on the first screen is test_first_screen.py's). Each test measures one
defect seen on these pages: an equation cut at the column's edge, a tab pushed out of the Heads tab strip, a
metric label ended with '...', a chart title running past its chart."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from tests.e2e.conftest import assert_no_exception, open_page, wait_for_run

pytestmark = pytest.mark.e2e
WIDTH, HEIGHT = 1024, 768
FIRST_CHART = "[data-testid='stMain'] [data-testid='stPlotlyChart']"


@pytest.fixture
def narrow(browser):
    """A page in a 1024 x 768 window."""
    context = browser.new_context(viewport={"width": WIDTH, "height": HEIGHT})
    page = context.new_page()
    yield page
    context.close()


def _open(page, url: str) -> None:
    """Open `url`, wait for the run and the first chart, and fail on an exception."""
    open_page(page, url, timeout=180_000)
    page.wait_for_selector(FIRST_CHART, timeout=120_000)
    page.wait_for_timeout(1000)  # plotly lays its chart out after the element arrives
    wait_for_run(page)
    assert_no_exception(page)


def _open_expanders(page, starting: str) -> None:
    """Open every closed expander whose label starts with `starting` (its content is drawn, only folded)."""
    for summary in page.locator("[data-testid='stMain'] [data-testid='stExpander'] summary").all():
        if (summary.text_content() or "").strip().startswith(starting) and \
                summary.locator("xpath=..").get_attribute("open") is None:
            summary.scroll_into_view_if_needed()
            summary.click()
    page.wait_for_timeout(800)


# An equation wider than its column is cut at the column's edge (or must be scrolled sideways): the right edge of
# its last piece lies past the column's, or its block scrolls. (A few px of scroll are KaTeX's own slack.)
CUT_EQUATIONS = """() => [...document.querySelectorAll("[data-testid='stMain'] .katex-display")]
  .filter(e => e.offsetParent !== null)
  .map(e => { e.scrollIntoView({block: 'center'});
              const column = e.closest("[data-testid='stVerticalBlock']").getBoundingClientRect();
              const right = Math.max(...[...e.querySelectorAll('.katex-html .base')].map(b => b.getBoundingClientRect().right));
              return [e.textContent.slice(0, 50), Math.round(right - column.right), e.scrollWidth - e.clientWidth]; })
  .filter(([, past, scroll]) => past > 1 || scroll > 4)"""


@pytest.mark.parametrize("url", ["attention", "attention?view=steps", "attention?view=scale", "heads",
                                 "heads?view=circuits", "heads?view=qk", "heads?view=roles", "heads?view=toy", "masks"])
def test_equations_fit_the_column(server_url, narrow, url):
    """The mask's cases (M_ij = 0 or -inf) ran past the column: only 'M_ij = {0, -inf' showed. Every equation of
    the view is checked, those folded in an expander once it is opened."""
    _open(narrow, f"{server_url}/{url}")
    _open_expanders(narrow, "")
    assert narrow.locator("[data-testid='stMain'] .katex-display").count(), "no equation drawn"
    assert narrow.evaluate(CUT_EQUATIONS) == []


def test_every_heads_tab_is_in_sight(server_url, narrow):
    """The tab strip scrolled its last tabs out of sight beside the sidebar."""
    _open(narrow, f"{server_url}/heads")
    outside = narrow.evaluate("""() => { const list = document.querySelector("[data-testid='stMain'] [data-testid='stTabs'] [role='tablist']");
        const box = list.getBoundingClientRect();
        const tabs = [...list.querySelectorAll("[role='tab']")];
        return {count: tabs.length, scrolls: list.scrollWidth > list.clientWidth + 1,
                outside: tabs.filter(t => { const r = t.getBoundingClientRect();
                    return r.left < box.left - 1 || r.right > box.right + 1 || r.width === 0; }).map(t => t.textContent)}; }""")
    assert outside == {"count": 7, "scrolls": False, "outside": []}


@pytest.mark.parametrize("url", ["heads", "attention?view=temp&temp=0.5"])
def test_metric_labels_are_not_cut(server_url, narrow, url):
    """A metric label longer than its column ends in '...'."""
    _open(narrow, f"{server_url}/{url}")
    labels = narrow.locator("[data-testid='stMain'] [data-testid='stMetricLabel']")
    assert labels.count(), "no metric drawn"
    cut = narrow.evaluate("""() => [...document.querySelectorAll("[data-testid='stMain'] [data-testid='stMetricLabel']")]
        .map(l => { l.scrollIntoView({block: 'center'}); return l; })
        .filter(l => [l, ...l.querySelectorAll('*')].some(e => e.scrollWidth > e.clientWidth + 1))
        .map(l => l.textContent)""")
    assert cut == []


def test_a_formula_error_title_stays_inside_its_chart(server_url, narrow):
    """The grid's title when a formula cannot be used ran past the chart's right edge (even at 1440 px)."""
    _open(narrow, f"{server_url}/masks?preset=formula&formula={quote('__import__(' + chr(39) + 'os' + chr(39) + ')')}")
    assert narrow.get_by_text("This formula cannot be used").count()
    title = narrow.locator(FIRST_CHART).first.locator(".gtitle")
    assert "has an error" in (title.text_content() or "")
    overflow = narrow.evaluate(f"""() => {{ const chart = document.querySelector("{FIRST_CHART} .js-plotly-plot");
        const box = chart.getBoundingClientRect(), t = chart.querySelector('.gtitle').getBoundingClientRect();
        return [box.left - t.left, t.right - box.right, box.top - t.top]; }}""")
    assert max(overflow) <= 1, f"title outside its chart by {overflow} px (left, right, top)"
