"""Run only the fragment a widget lives in, as the browser does after a click inside a section.

AppTest's own `run()` always reruns the whole script. A browser that changes a widget inside an
`st.fragment` asks for that fragment alone; here the same request is made by giving the script
runner the widget's fragment id (read from the session's widget metadata). After such a run the
element tree holds only the fragment's elements, and the URL is what the fragment left in it.
Used by the page tests (a click inside a section redraws that section and keeps the URL right)
and by bench/page_speed.py (what such a click costs).
"""

from __future__ import annotations

import functools
from contextlib import contextmanager
from typing import Optional

import streamlit.testing.v1.local_script_runner as local_runner
from streamlit.testing.v1 import AppTest

WIDGET_TYPES = ("slider", "select_slider", "selectbox", "radio", "number_input", "text_input", "checkbox",
                "toggle", "multiselect", "button_group", "button")


def widget(at: AppTest, key: str):
    """The widget with this key in the current element tree (any of the usual types)."""
    for kind in WIDGET_TYPES:
        for element in at.get(kind):
            if getattr(element, "key", None) == key:
                return element
    raise LookupError(f"no widget with key {key!r} on the page")


def fragment_id(at: AppTest, key: str) -> Optional[str]:
    """The id of the fragment the widget `key` was drawn in; None when it is outside every fragment."""
    metadata = at.session_state._state._state._new_widget_state.widget_metadata
    return getattr(metadata.get(widget(at, key).id), "fragment_id", None)


@contextmanager
def scoped_to(fragment: str):
    """Every AppTest run inside this block reruns only `fragment`, as a click inside it would."""
    original = local_runner.RerunData
    local_runner.RerunData = functools.partial(original, fragment_id_queue=[fragment])
    try:
        yield
    finally:
        local_runner.RerunData = original


def click_in_fragment(at: AppTest, key: str, value=None) -> AppTest:
    """Set widget `key` to `value` (a button: click it) and rerun only its fragment (it must be drawn
    inside one)."""
    fragment = fragment_id(at, key)
    assert fragment is not None, f"widget {key!r} is not inside an st.fragment"
    element = widget(at, key)
    with scoped_to(fragment):
        (element.click() if value is None else element.set_value(value)).run()
    return at
