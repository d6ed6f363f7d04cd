"""What a student types into the sidebar, fuzzed: empty, very long, unknown tokens, control and
direction characters, on every page. The page must not crash, must say what it did with input it
could not use, and must keep the student's model choice.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.app.conftest import app_at, assert_ok
from ui.shell.nav import PAGES
from ui.shell.sidebar import INPUT_KEY, MAX_INPUT_TOKENS, MODEL_KEY

PAGE_FILES = [p.path for p in PAGES if p.exists and not p.path.endswith("home.py")]
TYPED = {
    "empty": "",
    "spaces": "   \n\t  ",
    "unknown": "zebra quux 🙂 <mask>",
    "control": "1\x00 2\x07 3\x1b[31m 4\u202e 5\ufeff",
    "long": " ".join(["1"] * (MAX_INPUT_TOKENS * 40)),
    "huge_chars": "9" * 10_000,
    "markup": "<script>alert(1)</script> **bold** $x$ {{7*7}}",
}
NEEDS_A_NOTE = ("unknown", "control", "long", "huge_chars", "markup")


def typed_into_sidebar(page: str, text: str, model: str = "sort-decoder"):
    at = app_at(page, {"model": model})
    at.sidebar.text_area(key=INPUT_KEY).set_value(text).run()
    return at


@pytest.mark.parametrize("page", PAGE_FILES)
@pytest.mark.parametrize("kind", list(TYPED))
def test_typed_input_never_crashes_and_bad_input_is_reported(page, kind):
    at = typed_into_sidebar(page, TYPED[kind])
    assert_ok(at)
    assert at.sidebar.selectbox(key=MODEL_KEY).value == "sort-decoder"  # nothing else lost
    if kind in NEEDS_A_NOTE:
        shown = [m.value for m in (*at.sidebar.warning, *at.sidebar.error, *at.sidebar.info, *at.warning, *at.error)]
        assert shown, f"{kind!r} typed on {page}: the page said nothing about input it could not use"


@pytest.mark.slow
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(page=st.sampled_from(PAGE_FILES), text=st.text(max_size=300))
def test_random_typed_input(page, text):
    assert_ok(typed_into_sidebar(page, text))
