"""Real browser: the Lessons page, then one whole lesson walked in presenter mode at 1024x768 with
the keyboard (arrow keys, page up/down), a screenshot of every step under test-artifacts/screenshots/.
With GLASSBOX_THUMBNAILS=1 the Lessons page's picture for the home map is made too."""

from __future__ import annotations

import os

import pytest
from PIL import Image

from core import lessons as L
from tests.e2e.conftest import SCREENSHOTS, assert_no_exception, open_page, screenshot, wait_for_run
from ui.shell.nav import IMAGES

pytestmark = pytest.mark.e2e
LESSON = "attention-as-retrieval"
THUMB_WIDTH, THUMB_HEIGHT = 560, 300


def _bar_text(page) -> str:
    return page.locator(".st-key-lesson_bar").first.inner_text(timeout=60_000)


def _wait_for_step(page, k: int, n: int) -> None:
    page.wait_for_function(
        "(t) => { const b = document.querySelector('.st-key-lesson_bar'); return b && b.innerText.includes(t); }",
        arg=f"step {k} of {n}", timeout=120_000)
    wait_for_run(page, timeout=120_000)


def _thumbnail(page) -> None:
    target = SCREENSHOTS / "thumb_lessons.png"
    box = page.locator("[data-testid='stMain']").bounding_box()
    page.screenshot(path=str(target), clip=dict(x=box["x"], y=box["y"], width=box["width"],
                                                 height=min(box["height"], 800)))
    if os.environ.get("GLASSBOX_THUMBNAILS") == "1":
        with Image.open(target) as img:
            img = img.convert("RGB")
            img.thumbnail((THUMB_WIDTH, THUMB_HEIGHT))
            card = Image.new("RGB", (THUMB_WIDTH, THUMB_HEIGHT), "white")
            card.paste(img, ((THUMB_WIDTH - img.width) // 2, (THUMB_HEIGHT - img.height) // 2))
            card.save(IMAGES / "lessons.png", optimize=True)


def test_lessons_page_lists_the_lessons(server_url, page):
    open_page(page, server_url, timeout=180_000)
    open_page(page, f"{server_url}/lessons", timeout=180_000, last="text=Joining a class?")
    assert_no_exception(page)
    for lesson in L.bundled():
        assert page.get_by_text(lesson.title, exact=True).count() >= 1
    screenshot(page, "lessons")
    _thumbnail(page)


def test_walk_a_whole_lesson_in_presenter_mode(server_url, page):
    lesson = L.load_lesson(L.LESSONS_DIR / f"{LESSON}.toml")
    n = len(lesson.steps)
    page.set_viewport_size({"width": 1024, "height": 768})
    open_page(page, f"{server_url}/?lesson={LESSON}&step=1&present=1", timeout=180_000)
    _wait_for_step(page, 1, n)
    assert not page.locator("[data-testid='stSidebar']").is_visible()  # no app chrome on the projector
    assert_no_exception(page)
    page.locator(".st-key-lesson_next button").wait_for(state="visible", timeout=120_000)
    page.screenshot(path=str(SCREENSHOTS / "lesson_present_1.png"))
    for k in range(2, n + 1):
        # A presenter presses the key once the bar's buttons are drawn (their shortcuts live on them).
        page.locator(".st-key-lesson_next button").wait_for(state="visible", timeout=120_000)
        page.locator("body").press("ArrowRight")
        _wait_for_step(page, k, n)
        assert f"step={k}" in page.url and "present=1" in page.url
        assert_no_exception(page)
        assert lesson.steps[k - 1].title in _bar_text(page)
        if k == 2:  # answer the check on the one-number example
            box = page.locator(".st-key-lesson_bar input[type='number']")
            box.fill("0.5005")
            box.press("Enter")
            wait_for_run(page)
            page.locator(".st-key-lesson_bar").get_by_role("button", name="Check").click()
            page.get_by_text("Right.").first.wait_for(timeout=60_000)
        page.screenshot(path=str(SCREENSHOTS / f"lesson_present_{k}.png"))
    page.locator("body").press("PageUp")  # a presentation clicker's keys step too
    _wait_for_step(page, n - 1, n)
    page.locator("body").press("PageDown")
    _wait_for_step(page, n, n)
    assert_no_exception(page)


def test_a_student_browser_follows_the_teacher(server_url, browser, page):
    """Two browser sessions: the teacher opens a class and steps; the student's screen follows by itself."""
    import re
    import time

    n = len(L.load_lesson(L.LESSONS_DIR / f"{LESSON}.toml").steps)  # the class opens the first lesson
    open_page(page, f"{server_url}/lessons", timeout=180_000, last="text=Joining a class?")
    page.get_by_role("button", name="Open a class").click()
    page.get_by_role("button", name="Start the lesson").click()  # from the join screen (issue 40)
    _wait_for_step(page, 1, n)
    code = re.search(r"class ([A-Z0-9]{6})", _bar_text(page)).group(1)

    context = browser.new_context(viewport={"width": 1024, "height": 768})
    student = context.new_page()
    try:
        open_page(student, f"{server_url}/?class={code}", timeout=180_000)
        _wait_for_step(student, 1, n)
        assert student.locator(".st-key-lesson_next button").is_disabled()  # the teacher moves the class
        page.locator(".st-key-lesson_next button").click()
        _wait_for_step(page, 2, n)
        moved = time.monotonic()
        student.wait_for_function(
            "(t) => { const b = document.querySelector('.st-key-lesson_bar'); return b && b.innerText.includes(t); }",
            arg=f"step 2 of {n}", timeout=60_000)
        print(f"student followed {time.monotonic() - moved:.2f} s after the teacher's page showed step 2")
        wait_for_run(student)
        assert_no_exception(student)
        assert "step=2" in student.url and f"class={code}" in student.url
        student.screenshot(path=str(SCREENSHOTS / "lesson_class_student.png"))
    finally:
        context.close()
