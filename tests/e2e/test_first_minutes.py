"""A student's first minutes in a real browser at 1440x900 (issue 35, defects 1 and 2).

Switching the model starts from the new model's example, in the text box and in the URL, even when the
link carried the old model's input; a typed input the model cannot read is said under the page's title,
on the first screen, with the example shown instead, and the typed tokens appear exactly as typed.
"""

from __future__ import annotations

from urllib.parse import quote

import pytest

from core.checkpoints import read_manifest
from core.tasks import get_task
from tests.e2e.conftest import SCREENSHOTS, assert_no_exception, open_page, pick_option, wait_for_run
from ui.shell.sidebar import example_text

pytestmark = pytest.mark.e2e

WIDTH, HEIGHT = 1440, 900
REVERSE_INPUT = "8 6 5 2 3 0 0 0"  # the reverse model's example: digits the induction models do not know
INPUT_BOX = "[data-testid='stSidebar'] [data-testid='stTextArea'] textarea"


def example(model_id: str) -> str:
    """The sidebar's first example for a bundled model."""
    meta = next(e for e in read_manifest() if e["id"] == model_id)
    return example_text(get_task(meta["task"]), meta["arch"], 0)


@pytest.fixture
def student(browser):
    """A browser page at a laptop's 1440x900."""
    context = browser.new_context(viewport={"width": WIDTH, "height": HEIGHT})
    yield context.new_page()
    context.close()


def first_screen(page, name: str) -> None:
    """What the student sees without scrolling."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"))


def wait_for_input(page, text: str) -> None:
    """Wait until the sidebar's box and the URL's `input` both hold `text`, and the run is done."""
    page.wait_for_function(
        "([box, text]) => { const t = document.querySelector(box);"
        " return t && t.value === text && new URLSearchParams(location.search).get('input') === text; }",
        arg=[INPUT_BOX, text], timeout=120_000)
    wait_for_run(page)


@pytest.mark.parametrize("model_id, title", [("induction-rope", "Induction, RoPE"),
                                             ("sort-decoder", "Sort (decoder, pre-LN)")])
def test_switching_model_starts_from_the_new_models_example(server_url, student, model_id, title):
    open_page(student, f"{server_url}/attention?model=reverse-encdec&input={quote(REVERSE_INPUT)}",
              last="[data-testid='stPlotlyChart']")
    assert student.locator(INPUT_BOX).input_value() == REVERSE_INPUT
    box = student.locator("[data-testid='stSidebar'] [data-testid='stSelectbox']").filter(has_text="Model")
    pick_option(student, box.get_by_role("combobox"), student.get_by_role("option", name=title, exact=True))
    wait_for_input(student, example(model_id))
    assert_no_exception(student)
    alerts = student.locator("[data-testid='stAlert']").all_inner_texts()
    assert not any("does not know" in a or "must start with" in a for a in alerts), alerts
    assert f"model={model_id}" in student.url
    student.locator(INPUT_BOX).scroll_into_view_if_needed()  # the sidebar scrolls to show the new input
    first_screen(student, f"first_minutes_switch_to_{model_id}")


def test_a_bad_input_is_said_on_the_first_screen_exactly_as_typed(server_url, student):
    open_page(student, f"{server_url}/attention?model=induction-sinusoidal", last="[data-testid='stPlotlyChart']")
    shown = example("induction-sinusoidal")
    typed = "A **x** [a](http://h) __import__ B"
    student.locator(INPUT_BOX).fill(typed)
    student.locator(INPUT_BOX).press("Control+Enter")
    said = student.locator("[data-testid='stMain'] [data-testid='stAlert']").filter(has_text="does not know")
    said.wait_for(timeout=120_000)
    wait_for_run(student)
    assert_no_exception(student)
    text = said.inner_text()
    for token in ("'**x**'", "'[a](http://h)'", "'__import__'", shown):
        assert token in text.replace("\u2060", ""), (token, text)  # as typed: no bold, no link
    assert said.locator("a, strong, em, img").count() == 0
    top = said.bounding_box()
    assert 0 <= top["y"] and top["y"] + top["height"] <= HEIGHT, top  # on the first screen
    sidebar = student.locator("[data-testid='stSidebar'] [data-testid='stAlert']").filter(has_text="does not know")
    assert sidebar.count() == 1 and sidebar.locator("a, strong, em").count() == 0  # the sidebar says it too
    first_screen(student, "first_minutes_bad_input")
