"""Every URL parameter of every page, fed hostile values: each page still renders, with no exception,
and says what it did with a value it could not use. The parameters come from the pages' own URL
tables (ui.<page>.view.URL and the sidebar's), so a parameter added later is fuzzed too."""

from __future__ import annotations

import importlib
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.app.conftest import app_at, assert_ok
from ui.shell import sidebar
from ui.shell.nav import PAGES

PAGE_FILES = [p.path for p in PAGES if p.exists]
HOSTILE = {
    "huge": "9" * 400,
    "negative": "-123456789",
    "nan": "nan",
    "inf": "-inf",
    "unicode": "\u202e\u0000ünï\U0001F600<script>",
    "long": "x" * 3000,
    "empty": "",
}


def url_table(page_file: str):
    """The page's URL table, or None for a page without one (Home)."""
    name = page_file.split("/")[-1].removesuffix(".py")
    try:
        module = importlib.import_module(f"ui.{name}.view")
    except ModuleNotFoundError:
        return None
    return getattr(module, "URL", None)


def names(page_file: str) -> list[str]:
    table = url_table(page_file)
    own = [p.name for p in table] if table is not None else []
    return own + [p.name for p in sidebar.URL]


def test_every_page_with_controls_declares_its_url_table():
    for page in PAGE_FILES:
        if not page.endswith("home.py"):
            assert url_table(page) is not None, page


@pytest.mark.parametrize("page", PAGE_FILES)
@pytest.mark.parametrize("kind", list(HOSTILE))
def test_every_parameter_at_a_hostile_value(page, kind):
    query = {name: HOSTILE[kind] for name in names(page)}
    at = app_at(None if page.endswith("home.py") else page, query)  # Home opens first: no switch to itself
    assert_ok(at)
    if kind in ("huge", "negative", "nan", "unicode", "long"):
        assert at.warning or at.error, "a value the page could not use must be reported on the page"


MARKDOWN = "**x** [a](http://h) __import__ :smile: $x$"
FORMATTING = re.compile(r"\*\*x|\[a\]|__import|:smile|\$x")  # any of MARKDOWN's parts, unescaped


@pytest.mark.parametrize("page", PAGE_FILES)
def test_every_parameter_echoed_in_a_message_is_shown_literally(page):
    # The notes echo what the link holds; Markdown in it must not turn into bold, links, emoji or math.
    query = {name: MARKDOWN for name in names(page)}
    at = app_at(None if page.endswith("home.py") else page, query)
    assert_ok(at)
    messages = [m.value for kind in ("warning", "error", "info", "success", "caption") for m in at.get(kind)]
    assert any("**x**" in re.sub(r"\\(.)", r"\1", m) for m in messages), "the link's value is reported"
    for message in messages:
        assert not FORMATTING.search(re.sub(r"\\.", "", message)), message


@pytest.mark.slow
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_random_values_for_random_parameters(data):
    page = data.draw(st.sampled_from(PAGE_FILES))
    chosen = data.draw(st.lists(st.sampled_from(names(page)), min_size=1, max_size=6, unique=True))
    values = st.one_of(st.text(max_size=40), st.integers(-10 ** 12, 10 ** 12).map(str),
                       st.floats(allow_nan=True, allow_infinity=True).map(repr))
    query = {name: data.draw(values) for name in chosen}
    assert_ok(app_at(page, query))
