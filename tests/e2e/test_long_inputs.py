"""Issue 38 in a real browser: every page opened at 1,024 tokens on a 1,024-token screen (1024 x 768), with no
exception, and no axis of any figure writing more token labels than it has room for.

One server for the whole file (a GPT-2 folder with a context of 1,024 and a tiny width, tests/app/long_model.py,
through GLASSBOX_MODELS_DIR), the pages visited in turn. Each page's first screen, and the panel that bounds what
it reads where it has one, go to test-artifacts/screenshots/long-*.png.
"""

from __future__ import annotations

import urllib.parse

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from tests.app.long_model import LONG_MODEL, build_long_model, long_text
from tests.e2e.conftest import assert_no_exception, open_page, screenshot, streamlit_server

pytestmark = pytest.mark.e2e

WIDTH, HEIGHT = 1024, 768
MAX_LABELS = 64  # token labels one axis may write: at 1024 x 768 more would overlap
# (page, its URL's extra parameters, a text of the part to look at: the note of the panel's bound)
PAGES = (
    ("", {}, None),
    ("attention", {}, None),
    ("heads", {"view": "qk"}, "past 64 tokens the plane names each point"),
    ("masks", {}, "draws every pair of tokens"),
    ("positions", {}, "largest weight of a block"),
    ("depth", {}, "The lens writes its top prediction"),
    ("retrieval", {}, None),
    ("cost", {}, None),
    ("generation", {"hook": "blocks.0.attn.hook_pattern"}, "drawn in blocks of"),
    ("train", {}, None),
    ("lessons", {}, None),
)
# Every drawn tick label of every plotly chart, per chart and axis: the browser's own layout, after plotly
# thinned what it could.
CHARTS_IN_SIGHT_DRAWN = """() => Array.from(document.querySelectorAll("[data-testid='stPlotlyChart']")).filter(c => {
    const r = c.getBoundingClientRect(); return r.bottom > 0 && r.top < window.innerHeight; }).every(
    c => c.querySelector('.main-svg'))"""
SCROLL_DOWN = """() => { const m = document.querySelector("[data-testid='stMain']"); if (!m) return true;
    m.scrollBy(0, window.innerHeight * 1.5); return m.scrollTop + m.clientHeight >= m.scrollHeight - 2; }"""
TICK_COUNTS = """() => Array.from(document.querySelectorAll("[data-testid='stPlotlyChart'] .js-plotly-plot")).map(
    (plot, i) => ({chart: i, title: (plot.layout && plot.layout.title && plot.layout.title.text) || "",
                   x: plot.querySelectorAll('.xtick text').length, y: plot.querySelectorAll('.ytick text').length}))"""


@pytest.fixture(scope="module")
def long_server(tmp_path_factory):
    models = build_long_model(tmp_path_factory.mktemp("long-models"))
    env = {"GLASSBOX_MODELS_DIR": str(models), "HF_HUB_CACHE": str(tmp_path_factory.mktemp("empty-hf-cache"))}
    with streamlit_server(extra_env=env, log_path=tmp_path_factory.mktemp("server") / "streamlit.log") as url:
        yield url


@pytest.fixture
def small_page(browser):
    context = browser.new_context(viewport={"width": WIDTH, "height": HEIGHT})
    p = context.new_page()
    yield p
    context.close()


def link(url: str, page: str, **params) -> str:
    return f"{url}/{page}?" + urllib.parse.urlencode({"model": LONG_MODEL, "input": long_text(), **params})


def drawn(page) -> None:
    """Wait (a few seconds at most) until every chart in sight is drawn."""
    try:
        page.wait_for_function(CHARTS_IN_SIGHT_DRAWN, timeout=10_000)
    except PlaywrightTimeout:
        pass  # a chart still drawing is seen as it is; the labels are counted on what is drawn
    page.wait_for_timeout(300)


def test_every_page_opens_at_1024_tokens_with_readable_labels(long_server, small_page):
    page = small_page
    crowded, counted = [], 0
    for name, params, bounded in PAGES:
        open_page(page, link(long_server, name, **params), timeout=180_000)
        assert_no_exception(page)
        sidebar = page.locator("[data-testid='stSidebar']").inner_text()
        assert "show its first 1,024" in sidebar, (name, sidebar[:400])  # the page read the whole context
        drawn(page)
        screenshot(page, f"long-{name or 'home'}")
        if bounded:  # the note at the foot of the screen, the figure it explains above it
            page.get_by_text(bounded).first.evaluate("e => e.scrollIntoView({block: 'end'})")
            drawn(page)
            screenshot(page, f"long-{name}-bounded")
        for _ in range(40):  # down the page: a chart is drawn when it comes in sight (ui/shell/offscreen.py)
            if page.evaluate(SCROLL_DOWN):
                break
            page.wait_for_timeout(200)
        drawn(page)
        counts = page.evaluate(TICK_COUNTS)
        counted += len(counts)
        crowded += [(name, c) for c in counts if max(c["x"], c["y"]) > MAX_LABELS]
    assert counted >= 30, counted  # the charts were drawn and read
    assert not crowded, crowded
