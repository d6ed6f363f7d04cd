"""Issue 36: the lesson bar's state check (mask_lambda2) read the raw URL `input`: 4,096 words in the URL made one
click cost 64 s of a core and 270 MB. It now reads the URL as the pages do (ui.shell.query's length limit), and
core.checks keeps to the Masks page's own bound (a mask of at most 32 tokens): a long input is a message."""

from __future__ import annotations

from tests.app.conftest import app_at, assert_ok
from tests.core.test_lesson_limits import MASK_TOKENS, count_mask_sizes
from ui.shell.text import plain

STEP = {"lesson": "encoder-decoder-stacks", "step": "6"}  # the step whose check is mask_lambda2
CHECK = "lesson_check.encoder-decoder-stacks.6"


def test_the_bound_is_the_masks_pages_own():
    from core import checks as C
    from ui.masks.view import MAX_EDIT_N
    assert C.MAX_MASK_TOKENS == MAX_EDIT_N == MASK_TOKENS


def test_a_long_input_in_the_url_is_not_what_the_check_computes_on(monkeypatch):
    """No lambda_2 of a mask larger than the page draws is ever computed, whatever the URL's input; the
    student gets feedback that says why, and the page runs without an exception."""
    sizes = count_mask_sizes(monkeypatch)

    at = app_at(None, STEP)
    assert_ok(at)
    at.query_params["input"] = " ".join(["a"] * 4096)  # longer than any URL parameter the pages read
    at.button(key=CHECK).click().run()
    assert_ok(at)
    assert any("Not yet" in plain(e.value) and "no input the page can use" in plain(e.value) for e in at.error), \
        [e.value for e in at.error]

    at.query_params["input"] = " ".join(["1"] * 100)  # short enough to read, longer than the Masks page draws
    at.button(key=CHECK).click().run()
    assert_ok(at)
    assert sizes and max(sizes) == MASK_TOKENS  # the mask of the first 64 tokens, as the page draws it
