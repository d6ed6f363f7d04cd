"""Real browser, issue 40: a teacher (1024x768, presenter mode) opens a class and projects its join screen; a
student joins and answers the step's check; the teacher's panel shows the count, survives a reload (the teacher
cookie), and reveals the answer, which the student's page then shows. Screenshots of the join screen, the
teacher's counts and the student's revealed answer under test-artifacts/screenshots/."""

from __future__ import annotations

import re

import pytest

from tests.e2e.conftest import SCREENSHOTS, assert_no_exception, open_page, wait_for_run

pytestmark = pytest.mark.e2e
LESSON = "attention-as-retrieval"  # the class panel's first lesson; step 2 asks for a number (right: 0.5005)


def _wait_text(page, selector: str, text: str, timeout: float = 60_000) -> None:
    page.wait_for_function(
        "([s, t]) => { const e = document.querySelector(s); return !!e && e.innerText.includes(t); }",
        arg=[selector, text], timeout=timeout)


def test_the_teacher_sees_the_class_and_reveals_the_answer(server_url, browser):
    teacher_ctx = browser.new_context(viewport={"width": 1024, "height": 768})
    student_ctx = browser.new_context(viewport={"width": 1024, "height": 768})
    teacher, student = teacher_ctx.new_page(), student_ctx.new_page()
    try:
        open_page(teacher, f"{server_url}/lessons?present=1", timeout=180_000, last="text=Joining a class?")
        teacher.get_by_role("button", name="Open a class").click()
        teacher.locator(".st-key-join_screen").wait_for(timeout=60_000)
        _wait_text(teacher, ".st-key-join_screen", "students joined")  # scrolled to the top, drawn
        code = re.search(r"class=([A-Z2-9]{6})", teacher.locator(".st-key-join_screen").inner_text()).group(1)
        assert "teach=" not in teacher.url

        open_page(student, f"{server_url}/?class={code}", timeout=120_000)
        _wait_text(teacher, ".st-key-join_screen", "1 student joined", timeout=30_000)  # live, no reload
        teacher.locator(".st-key-join_screen").scroll_into_view_if_needed()
        teacher.screenshot(path=str(SCREENSHOTS / "class_join_screen.png"))

        teacher.get_by_role("button", name="Start the lesson").click()
        _wait_text(teacher, ".st-key-lesson_bar", "step 1 of")
        teacher.locator(".st-key-lesson_next button").click()
        _wait_text(teacher, ".st-key-lesson_bar", "step 2 of")
        _wait_text(student, ".st-key-lesson_bar", "step 2 of")
        wait_for_run(student)
        box = student.locator(".st-key-lesson_bar input[type='number']")
        box.fill("0.3")
        box.press("Enter")
        wait_for_run(student)
        student.locator(".st-key-lesson_bar").get_by_role("button", name="Check").click()
        student.get_by_text("Not yet.").first.wait_for(timeout=60_000)

        _wait_text(teacher, ".st-key-class_board", "Answered 1 / 1", timeout=30_000)
        assert "0.3: 1 student" in teacher.locator(".st-key-class_board").inner_text()
        teacher.reload(wait_until="commit")  # F5 mid-lesson: the teacher cookie keeps the class
        wait_for_run(teacher, timeout=120_000)
        _wait_text(teacher, ".st-key-class_board", "Answered 1 / 1", timeout=60_000)
        assert_no_exception(teacher)
        teacher.locator(".st-key-class_board").scroll_into_view_if_needed()
        teacher.screenshot(path=str(SCREENSHOTS / "class_teacher_counts.png"))

        teacher.get_by_role("button", name="Reveal the answer").click()
        student.get_by_text("Your teacher revealed the answer").first.wait_for(timeout=30_000)
        assert_no_exception(student)
        student.get_by_text("Your teacher revealed the answer").first.scroll_into_view_if_needed()
        student.screenshot(path=str(SCREENSHOTS / "class_student_revealed.png"))
    finally:
        teacher_ctx.close()
        student_ctx.close()
