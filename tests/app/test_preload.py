"""The app asks the browser for Streamlit's element code ahead of need (ui/preload.py) and keeps the
style rule that skips blocks out of sight (ui/offscreen.py), on every page."""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from tests.app.conftest import app_at, assert_ok
from ui import offscreen, preload

STATIC_JS = Path(st.__file__).parent / "static" / "static" / "js"


def test_every_chunk_named_exists_in_the_installed_streamlit_and_is_imported_by_its_bundle():
    # A Streamlit upgrade that renames or drops a chunk would silently turn the preload off.
    names = preload.chunks()
    assert len(names) == len(preload.CHUNK_GLOBS), (preload.CHUNK_GLOBS, names)
    bundle = "".join(p.read_text(errors="ignore") for p in STATIC_JS.glob("index.*.js"))
    for name in names:
        assert (STATIC_JS / name).is_file()
        assert f"./{name}" in bundle  # the address Streamlit's own lazy import uses, beside its bundle
    assert names[-1].startswith("PlotlyChart.")


def test_the_script_imports_each_chunk_beside_the_bundle_once_idle():
    script = preload.script(("A.x.js", "B.y.js"))
    assert script.startswith("<script>") and script.endswith("</script>")
    assert '["A.x.js", "B.y.js"]' in script
    assert "new URL(n, main.src)" in script and "requestIdleCallback" in script
    assert ".catch(" in script  # a failed fetch is nobody's error


def _html_bodies(at) -> list[str]:
    """The body of every st.html element of the run, wherever it sits (style-only ones go to the event block)."""
    found, todo = [], [at._tree]
    while todo:
        node = todo.pop()
        if getattr(node, "type", None) == "html":
            found.append(node.proto.body)
        children = getattr(node, "children", None)
        todo.extend(children.values() if isinstance(children, dict) else [])
    return found


def test_the_app_run_sends_the_offscreen_rule_and_the_preload():
    # app.py sends both before it runs the page (AppTest's switch_page keeps only the page's own elements,
    # so the other pages are checked in a browser: tests/e2e/test_offscreen.py)
    at = app_at()
    assert_ok(at)
    bodies = _html_bodies(at)
    assert offscreen.CSS in bodies
    assert preload.HIDE_SCRIPT_BLOCKS in bodies
    assert preload.script(preload.chunks()) in bodies


def test_preload_can_be_switched_off(monkeypatch):
    monkeypatch.setenv("GLASSBOX_PRELOAD", "0")
    at = app_at()
    assert_ok(at)
    bodies = _html_bodies(at)
    assert offscreen.CSS in bodies
    assert not any("import(" in body for body in bodies)
