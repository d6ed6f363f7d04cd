"""Keyed sections: the parts of a page that a control's change redraws, and nothing else.

A page draws its controls outside its sections. Each part of the page that reads a control is a section: a
keyed fragment that says which controls it reads, declared once where it is defined.

    S = Sections("attention", open_view=open_view)          # open_view(): the view shown now, if the page has views

    @S.section("grid.heads", reads=("kind", "layer", "head", "temp"), view=VIEW_GRID)
    def grid_heads(sel): ...                                 # reads the controls' values from the session

A control's change then reruns, by key, only the sections shown now that read it (Streamlit 1.67 reruns
fragments by key from a widget callback): not the headings, text and formulas around them, and not the
sections that do not read it. Nothing else is written per control:
- a URL parameter of the page (`URL.layer.widget(...)`, ui.shell.params) reruns the sections that read its
  name, found through the page's name (`Params("attention", ...)`); one read by no section reruns the page;
- a control that feeds what sections read under another name passes it: every control of the mask editor
  feeds "mask" (`URL.preset.widget(..., feeds="mask")`, `st.checkbox(..., **S.on_change("mask", key=...))`);
- a button's callback calls `S.rerun("t")`.
A change reruns the sections that read it in the order they are declared (Streamlit runs keyed fragments in
the order named): a section that keeps a value valid for the others (a query row for the kind's tokens) is
declared before them. A section belongs to every view (view=None) or to one. On a page with views, a change that no section of the
open view reads reruns an empty section instead (a rerun by key needs one key at least, and the whole page is
what the sections are there to avoid): `with S.group():` draws it, around the page's sections.

The registry is filled when the view modules are imported and only read afterwards, so every session's
thread sees the same declarations.
"""

from __future__ import annotations

from functools import partial, wraps
from typing import Any, Callable, Optional, Sequence

import streamlit as st
from streamlit.errors import StreamlitAPIException
from streamlit.runtime.scriptrunner import get_script_run_ctx

from ui.server import measure_process
from ui.shell import activity, offscreen, query

_PAGES: dict[str, "Sections"] = {}  # page name -> its sections, filled at import time


class Sections:
    """A page's keyed sections and the controls each reads."""

    def __init__(self, page: str, open_view: Optional[Callable[[], str]] = None):
        self.page = page
        self.open_view = open_view  # the view shown now (read from the session), or None: one view
        self.nothing = f"{page}.nothing"  # the empty section a change reruns when the open view does not read it
        self._readers: dict[str, list[tuple[str, Optional[str]]]] = {}  # control -> [(section key, view)]
        self._keys: set[str] = set()
        self._draw_nothing = st.fragment(_empty, key=self.nothing)
        _PAGES[page] = self  # a module imported again (a reload) declares its page afresh

    def key(self, name: str) -> str:
        """A section's fragment key: the page's name, a dot, the section's name."""
        return f"{self.page}.{name}"

    def section(self, name: str, reads: Sequence[str] = (), view: Optional[str] = None) -> Callable:
        """Decorator: the function becomes the keyed fragment `<page>.<name>` (`st.fragment(key=...)`), which a
        change of any control in `reads` reruns while `view` (None: any view) is open."""
        key = self.key(name)
        if key in self._keys:
            raise ValueError(f"section {key!r} is declared twice")
        self._keys.add(key)
        for control in reads:
            self._readers.setdefault(control, []).append((key, view))
        return lambda fn: st.fragment(key=key)(refusals_said(fn))

    def read(self, control: str) -> bool:
        """Whether any section of the page reads `control`."""
        return control in self._readers

    def readers(self, control: str) -> tuple[str, ...]:
        """The keys of the sections shown now that read `control` (the open view's and those of every view), or
        the empty section's when there is none."""
        shown = self.open_view() if self.open_view is not None else None
        keys = tuple(key for key, view in self._readers.get(control, ()) if view is None or view == shown)
        return keys or (self.nothing,)

    def rerun(self, control: str, param: Any = None, key: Optional[str] = None, default: Any = None) -> None:
        """From a callback: rerun the sections that read `control` (not the page); see `rerun_readers`."""
        rerun_readers(param, key, default, partial(self.readers, control))

    def on_change(self, control: str, key: str) -> dict:
        """Keyword arguments for a widget that is no URL parameter (bound to session key `key`) and feeds
        `control`: its change reruns the sections that read `control`."""
        return {"on_change": rerun_readers, "args": (None, key, None, partial(self.readers, control))}

    def group(self, name: Optional[str] = None):
        """The container the page's sections are drawn in (`with S.group():`): long groups are skipped out of
        sight block by block (ui.shell.offscreen), and on a page with views the empty section is drawn at its
        end, so that every full run has it."""
        return _Group(self, name or self.page)


def refusals_said(fn: Callable) -> Callable:
    """`fn`, but a measurement the server would not make now (measure_process.Refused: busy, waited too long)
    is said in the section's place, and the rest of the page draws as usual."""
    @wraps(fn)
    def section(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except measure_process.Refused as exc:
            st.warning(str(exc), icon=":material/hourglass_empty:")
            return None
    return section


def _empty() -> None:
    """Nothing: the rerun of a change that no section of the open view reads (its URL is written by
    rerun_readers)."""


class _Group:
    """`with S.group():`: an offscreen section group, closed by the page's empty section."""

    def __init__(self, sections: Sections, name: str):
        self.sections, self.container = sections, offscreen.section_group(name)

    def __enter__(self):
        self.container.__enter__()
        return self.container

    def __exit__(self, *exc) -> bool:
        try:
            if exc[0] is None and self.sections.open_view is not None:
                self.sections._draw_nothing()
        finally:
            self.container.__exit__(*exc)
        return False


def of(page: str) -> Optional[Sections]:
    """The sections page `page` declared, if any."""
    return _PAGES.get(page)


def readers_of(page: str, control: str) -> Optional[Callable[[], tuple[str, ...]]]:
    """For a control of page `page` that feeds `control`: a function that names, when it changes, the keys of
    the sections to rerun; None when no section of the page reads it (its change reruns the page)."""
    sections = _PAGES.get(page)
    if sections is None or not sections.read(control):
        return None
    return partial(sections.readers, control)


def rerun_readers(param: Any, key: Optional[str], default: Any,
                  fragments: Sequence[str] | Callable[[], Sequence[str]]) -> None:
    """A control's on_change: rerun only the sections that read it, not the page. The control itself is not
    drawn again, so its URL parameter (`param`, a ui.shell.params.Param; None: it has none) is written here.
    `fragments` may be a function that names them now."""
    activity.touch()  # a student at work, as a full run would record it (app.py does not run now)
    keys = list(fragments() if callable(fragments) else fragments)
    if param is not None and key is not None:
        query.keep(key, st.session_state[key])  # what the page shows when it is opened again in this session
    if _opening_another_page(keys):
        return  # the change went out with a switch to another page: open that page, leave this one's URL alone
    if param is not None and key is not None:
        param.write(st.session_state[key], default=default)
    try:
        st.rerun(keys)
    except StreamlitAPIException:  # one of them was not drawn on the page's last run (an early return): all of it
        st.rerun()


def _opening_another_page(keys: Sequence[str]) -> bool:
    """Whether this run opens another page than the one whose sections `keys` are (each key starts with its
    page's name). A browser sends a control's last change together with a click on another page; rerunning the
    old page's sections then answered the switch (the new page drawn under the old page's address, or not at
    all), in about one switch in sixty after a section's control had changed."""
    ctx = get_script_run_ctx()
    if ctx is None or not keys:
        return False
    try:
        opened = ctx.pages_manager.get_pages().get(ctx.page_script_hash, {}).get("url_pathname")
    except (AttributeError, TypeError):  # another Streamlit's internals: rerun the sections as before
        return False
    return bool(opened) and opened != keys[0].split(".", 1)[0]
