"""The figure first (issue 35): on every page, at a laptop's 1440x900 and a projector's 1024x768, the page's
first figure starts on the first screen with room to be seen, and nothing is wider than the window; in
presenter mode the step's figure is on the first screen beside the step's notes, whose buttons show one
arrow each; in normal mode the lesson bar leaves the page room.

"On the first screen" means: the first chart's (or picture's) top edge is at most the window's height less
FIGURE_SHOWN px from the top, so at least that much of it shows before any scrolling.
"""

from __future__ import annotations

import pytest

from tests.e2e.conftest import SCREENSHOTS, assert_no_exception, open_page
from tests.e2e.test_narrow_attention_heads_masks import CUT_EQUATIONS
from ui.shell.nav import PAGES

pytestmark = pytest.mark.e2e

SIZES = [(1440, 900), (1024, 768)]
FIGURE_SHOWN = 150  # px of the first figure a student sees without scrolling, at least
FIGURE = ("[data-testid='stMain'] [data-testid='stPlotlyChart'], [data-testid='stMain'] [data-testid='stVegaLiteChart'],"
          " [data-testid='stMain'] [data-testid='stImage']")
# The Lessons page has no figure: its first lesson's Start button stands for it. Its block is there, as a grey
# placeholder, before the button's code has drawn it, and the next lessons' buttons may be drawn first (CI once
# measured the second lesson's): the button inside the first Start block is the one measured.
LESSONS_FIRST = "[data-testid='stMain'] [class*='st-key-start-']"

FIRST_TOP = """(sel) => { let e = document.querySelector(sel); if (!e) return null;
  if (!e.matches("[data-testid='stPlotlyChart'], [data-testid='stVegaLiteChart'], [data-testid='stImage']")) {
    e = e.querySelector('button'); if (!e) return null; }
  const r = e.getBoundingClientRect(); return r.height > 0 ? r.top : null; }"""
OVERFLOW = """() => { const m = document.querySelector("[data-testid='stMainBlockContainer']");
  return m.scrollWidth - m.clientWidth; }"""


def _first_top(page, selector: str, timeout: float = 60_000) -> float:
    """The top edge (px from the window's top) of the first element matching `selector` (for a block, the button
    in it), once laid out and still for half a second (blocks above it may still be drawing)."""
    page.wait_for_function(f"(sel) => ({FIRST_TOP})(sel) !== null", arg=selector, timeout=timeout)
    top = page.evaluate(FIRST_TOP, selector)
    for _ in range(20):
        page.wait_for_timeout(500)
        now = page.evaluate(FIRST_TOP, selector)
        if now == top:
            break
        top = now
    return top


@pytest.fixture(scope="module")
def contexts(browser):
    """One browser context per window size, kept for the module."""
    made = {size: browser.new_context(viewport={"width": size[0], "height": size[1]}) for size in SIZES}
    yield made
    for context in made.values():
        context.close()


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("info", PAGES, ids=lambda p: p.url_path or "home")
def test_the_first_figure_is_on_the_first_screen(server_url, contexts, info, size):
    width, height = size
    page = contexts[size].new_page()
    try:
        open_page(page, f"{server_url}/{info.url_path}", timeout=180_000)
        assert_no_exception(page)
        selector = LESSONS_FIRST if info.url_path == "lessons" else FIGURE
        top = _first_top(page, selector)
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOTS / f"first_screen_{info.url_path or 'home'}_{width}.png"))
        assert 0 <= top <= height - FIGURE_SHOWN, (
            f"{info.title} at {width}x{height}: the first figure starts at {top:.0f} px, below the first screen")
        assert page.evaluate(OVERFLOW) <= 1, f"{info.title} at {width}x{height} is wider than the window"
    finally:
        page.close()


# Steps whose page opens with several controls above the figure, at the projector's size.
PRESENTED = ["/?lesson=attention-as-retrieval&step=2&present=1",
             "/?lesson=attention-as-retrieval&step=4&present=1",
             "/?lesson=attention-as-retrieval&step=5&present=1"]


@pytest.mark.parametrize("url", PRESENTED, ids=["attention-steps", "retrieval", "heads"])
def test_presenter_mode_shows_the_steps_figure_beside_its_notes(server_url, contexts, url):
    width, height = SIZES[1]
    page = contexts[SIZES[1]].new_page()
    try:
        open_page(page, server_url + url, timeout=180_000)
        page.locator(".st-key-lesson_next button").wait_for(state="visible", timeout=120_000)
        assert_no_exception(page)
        # The page scrolls itself once the figure is drawn: wait until the figure sits whole on the screen
        # (or, if taller than the screen, starts at its top).
        page.wait_for_function(
            f"(sel) => {{ const e = document.querySelector(sel); if (!e) return false;"
            f" const r = e.getBoundingClientRect(); return r.height > 50 && r.top >= 0"
            f" && (r.bottom <= window.innerHeight || r.top <= 16); }}", arg=FIGURE, timeout=60_000)
        page.screenshot(path=str(SCREENSHOTS / f"first_screen_present_{url.split('step=')[1][0]}.png"))
        figure = page.locator(FIGURE).first.bounding_box()
        notes = page.locator(".st-key-lesson_bar").bounding_box()
        assert notes["x"] >= figure["x"] + figure["width"] - 1, "the step's notes cover the figure"
        assert notes["y"] >= 0 and notes["y"] + notes["height"] <= height + 1, "the notes run off the screen"
        wide = page.evaluate(CUT_EQUATIONS)  # (scrolls each into view: after the figure's place was read)
        assert not wide, f"equations wider than the page's column in presenter mode: {wide}"
        for key, word in (("lesson_back", "Back"), ("lesson_next", "Next")):
            button = page.locator(f".st-key-{key} button")
            assert button.inner_text().strip().startswith(word)
            # The key's own arrow is drawn after the label; a second arrow (an icon) would double it.
            assert button.locator("[data-testid='stIconMaterial']").count() == 0, f"{word} shows two arrows"
    finally:
        page.close()


def test_the_lesson_bar_leaves_the_page_room(server_url, contexts):
    width, height = SIZES[0]
    page = contexts[SIZES[0]].new_page()
    try:
        open_page(page, f"{server_url}/?lesson=attention-as-retrieval&step=2", timeout=180_000)
        page.locator(".st-key-lesson_next button").wait_for(state="visible", timeout=120_000)
        bar = page.locator(".st-key-lesson_bar").bounding_box()
        assert bar["height"] <= 0.45 * height, f"the lesson bar takes {bar['height']:.0f} of {height} px"
    finally:
        page.close()
