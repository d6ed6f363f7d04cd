"""Real browser: text the app computes or echoes shows as written (issue 35, defect 6), a lesson file cannot
make the browser fetch from another server, and the toolbar has no Deploy button (defect 8).

Streamlit's Markdown has more than CommonMark (math, short codes, colours, bare links): what
ui.shell.text.literal() escapes is read back here from the rendered page, not from its Markdown source.
Screenshots: literal_feedback, literal_formula_error, literal_lesson (test-artifacts/screenshots).
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from urllib.parse import quote, urlsplit

import pytest
from streamlit.proto.NewSession_pb2 import Config

from core import masks as M
from tests.e2e.conftest import SCREENSHOTS, assert_no_exception, open_page, wait_for_run

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]
FORMATTING = "strong, em, del, a, img, code, h1, h2, h3, h4, h5, h6, li, blockquote, .katex, [role='img']"

# A teacher's lesson whose every text field holds what Markdown or Streamlit would read as formatting,
# and whose narration shows an image from another server.
TEXT = {
    "title": "Weights *and* values: 0.2*1 + 0.3*-1",
    "summary": "Uses __import__ and :material/home: and $x$.",
    "section": "Part_1_of_2 ~~x~~",
    "try": "Set `d_k` to 4 * 2 and [look](http://example.invalid/).",
    "question": "Is 2*3*4 = 24? :smile:",
}
NARRATION = "Look: ![a beacon](http://example.invalid/pixel.png) and **this**."


def lesson_file() -> bytes:
    """A one-step lesson (TOML; a JSON string is a TOML string) holding TEXT and NARRATION."""
    t = {name: json.dumps(value) for name, value in TEXT.items()}
    return (f'title = {t["title"]}\nlevel = "first steps"\nchapter = "mechanics"\nsummary = {t["summary"]}\n'
            f'[[steps]]\nsection = {t["section"]}\ntitle = {t["title"]}\nnarration = {json.dumps(NARRATION)}\n'
            f'page = "attention.py"\ntry = [{t["try"]}]\n[steps.check]\nkind = "scalar_output"\n'
            f'question = {t["question"]}\nhint = "none"\n').encode()


def shown(locator) -> str:
    """The text a reader sees (the invisible joiners that break short codes and links taken out)."""
    return locator.inner_text().replace("\u2060", "").replace("\u00a0", " ")


def assert_plain(locator) -> None:
    """No emphasis, link, image, code, heading, list, math or icon inside the element."""
    found = locator.locator(FORMATTING)
    assert found.count() == 0, found.first.evaluate("e => e.outerHTML")[:300]


def test_the_toolbar_has_no_deploy_button(server_url, page):
    """The server runs on 127.0.0.1, where Streamlit's default ("auto") shows the developer's options."""
    open_page(page, server_url, timeout=180_000)
    assert_no_exception(page)
    page.locator("[data-testid='stMainMenu']").wait_for(timeout=60_000)  # the toolbar is drawn
    assert page.locator("[data-testid='stAppDeployButton']").count() == 0
    page.locator("[data-testid='stMainMenu'] button").first.click()
    menu = page.locator("[data-testid='stMainMenuPopover']")
    menu.wait_for(timeout=30_000)
    assert "Print" in menu.inner_text() and "Clear cache" not in menu.inner_text()
    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    assert config["client"]["toolbarMode"] == "viewer" and "VIEWER" in Config.ToolbarMode.keys()


def test_a_checks_feedback_shows_as_computed(server_url, page):
    open_page(page, f"{server_url}/?lesson=mechanics-of-attention&step=1", timeout=180_000)
    box = page.locator(".st-key-lesson_bar input[type='number']")
    box.wait_for(timeout=120_000)
    box.fill("1.4516")
    box.press("Enter")
    wait_for_run(page)
    page.locator(".st-key-lesson_bar").get_by_role("button", name="Check").click()
    alert = page.locator(".st-key-lesson_bar [data-testid='stAlertContainer']", has_text="Right.").first
    alert.wait_for(timeout=60_000)
    assert "0.225*1 + 0.275*-1 + 0.500*3 = 1.4516" in shown(alert)
    assert_plain(alert.locator("[data-testid='stMarkdownContainer']"))
    alert.screenshot(path=str(SCREENSHOTS / "literal_feedback.png"))


def test_a_formula_error_shows_the_formula_as_typed(server_url, page):
    formula = '__import__("os")'
    with pytest.raises(ValueError) as exc:
        M.from_formula(formula, 8)
    open_page(page, f"{server_url}/masks?preset=formula&formula={quote(formula)}", timeout=180_000)
    alert = page.locator("[data-testid='stAlertContainer']", has_text="cannot be used").first
    alert.wait_for(timeout=120_000)
    assert shown(alert).strip() == f"This formula cannot be used: {exc.value}"
    assert "calling __import__(...)" in shown(alert)
    assert_plain(alert.locator("[data-testid='stMarkdownContainer']"))
    alert.scroll_into_view_if_needed()
    alert.screenshot(path=str(SCREENSHOTS / "literal_formula_error.png"))


def test_an_uploaded_lessons_text_shows_as_typed_and_fetches_nothing_outside(server_url, page):
    """Upload the lesson, start it: every field shows as typed, the narration's image is text, and no request
    leaves the server."""
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    open_page(page, f"{server_url}/lessons", timeout=180_000)
    page.locator("[data-testid='stFileUploaderDropzoneInput']").set_input_files(
        files=[{"name": "marked-up.toml", "mimeType": "application/toml", "buffer": lesson_file()}])
    page.locator("[data-testid='stAlertContainer']", has_text="Loaded Weights").wait_for(timeout=60_000)  # (another alert says "uploaded")
    wait_for_run(page)
    start = page.locator(".st-key-start-upload-marked-up")
    card = page.locator("[data-testid='stVerticalBlock']").filter(has=start).filter(has_text="Weights").last
    assert TEXT["title"] in shown(card) and TEXT["summary"] in shown(card) and TEXT["section"] in shown(card)
    start.locator("button").click()

    bar = page.locator(".st-key-lesson_bar")
    bar.wait_for(timeout=120_000)
    wait_for_run(page, timeout=120_000)
    text = shown(bar)
    for field in ("title", "section", "try", "question"):
        assert TEXT[field] in text, field
    assert NARRATION in text and "shown as plain text" in text
    assert bar.locator("img").count() == 0 and bar.locator("a[href*='example.invalid']").count() == 0
    assert_plain(bar.locator("[data-testid='stMarkdownContainer']").filter(has_text="beacon"))
    bar.screenshot(path=str(SCREENSHOTS / "literal_lesson.png"))
    assert_no_exception(page)
    origin = urlsplit(server_url).netloc
    assert [u for u in requests if urlsplit(u).netloc != origin and not u.startswith("data:")] == []
