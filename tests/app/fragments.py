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


def click(at: AppTest, key: str, value=None, page=None) -> AppTest:
    """Change widget `key` to `value` (a button: click it) as a browser does, and run what Streamlit runs for
    it: its fragment when it is drawn inside one, else the page, whose callbacks may narrow that to the
    fragments the control reruns by key (ui.shell.sections.rerun_readers).

    `page` is the element tree of the page as the browser shows it (`at._tree` after a full run): a rerun of
    fragments leaves only their elements in AppTest's tree, while the browser keeps every control of the page
    and sends all their values. Given, the change is made on that tree, so a control outside the fragments
    that reran can be changed again."""
    if page is not None:
        at._tree = page
    fragment = fragment_id(at, key)
    element = widget(at, key)
    action = element.click() if value is None else element.set_value(value)
    if fragment is None:
        action.run()
    else:
        with scoped_to(fragment):
            action.run()
    if value is None and hasattr(element, "_value"):
        element._value = False  # a button's click is sent once; `page` may keep this button (not redrawn)
    if page is not None:
        graft(page, at._tree)
    return at


def graft(page, rerun) -> None:
    """Put what `rerun` (AppTest's tree after a run of some fragments) drew in place of what `page` (the full
    page) shows at the same positions, as the browser does with the deltas of a fragment's rerun: a redrawn
    control may have new options, labels or even a new id (a slider whose range changed), and the next run
    must send its state as the browser shows it."""
    def adopt(node) -> None:  # a node moved into `page` runs with the page's widget states
        node.root = page
        for child in getattr(node, "children", {}).values():
            adopt(child)

    def merge(into, block) -> None:
        for index, child in block.children.items():
            here = into.children.get(index)
            if here is not None and hasattr(here, "children") and hasattr(child, "children"):
                merge(here, child)  # a container: the rerun may have redrawn only part of it
            else:
                adopt(child)
                into.children[index] = child

    merge(page, rerun)
