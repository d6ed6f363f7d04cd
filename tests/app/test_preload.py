"""The app asks the browser for Streamlit's element code ahead of need (ui/shell/preload.py) and keeps the
style rule that skips blocks out of sight (ui/shell/offscreen.py), on every page."""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from tests.app.conftest import app_at, assert_ok
from ui.shell import offscreen, preload

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


def test_every_style_sheet_named_exists_and_is_the_address_the_bundle_loads_it_from():
    styles = preload.stylesheets()
    assert len(styles) == len(preload.STYLE_GLOBS), (preload.STYLE_GLOBS, styles)
    bundle = "".join(p.read_text(errors="ignore") for p in STATIC_JS.glob("index.*.js"))
    for relative in styles:
        assert (STATIC_JS / relative).resolve().is_file()
        assert f'"{relative}"' in bundle  # Streamlit's loader resolves the same address, so it adds no second link


def test_the_script_imports_each_chunk_beside_the_bundle_once_idle():
    script = preload.script(("A.x.js", "B.y.js"))
    assert script.startswith("<script>") and script.endswith("</script>")
    assert '["A.x.js", "B.y.js"]' in script
    assert "new URL(n, main.src)" in script and "requestIdleCallback" in script
    assert ".catch(" in script  # a failed fetch is nobody's error
    assert "styles = []" in script


def test_the_script_links_each_style_sheet_once_and_loads_the_katex_fonts():
    script = preload.script(("A.x.js",), ("../css/S.z.css",))
    assert '["../css/S.z.css"]' in script and "l.rel = 'stylesheet'" in script
    assert ".some((l) => l.href === href)) return" in script  # not linked twice
    assert "startsWith('KaTeX_')" in script and "f.status === 'unloaded'" in script and "f.load()" in script


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
    assert preload.script(preload.chunks(), preload.stylesheets()) in bodies


def test_preload_can_be_switched_off(monkeypatch):
    monkeypatch.setenv("GLASSBOX_PRELOAD", "0")
    at = app_at()
    assert_ok(at)
    bodies = _html_bodies(at)
    assert offscreen.CSS in bodies
    assert not any("import(" in body for body in bodies)
