"""The view lives in the URL: read untrusted query parameters safely, write the current view back.

A teacher pastes a link and the class sees the same model, input, layer and head. Values from
the URL are validated and clamped; anything odd becomes a visible note, never an exception.
This is the low-level layer: pages declare their parameters with ui.shell.params, which calls it.
"""

from __future__ import annotations

from typing import Callable, Iterable, Optional

import streamlit as st

from ui.shell.text import code, literal  # noqa: F401 (the notes echo what someone typed; also named from here)

_NOTES_KEY = "glassbox.url_notes"
_REFUSED_KEY = "glassbox.input_refused"  # what the student typed and the page could not use, said under the title
_MISSING = object()
_BOOK_KEY = "glassbox.url_book"  # a _Book: keys read from the URL, and each widget's last value
MAX_PARAM_CHARS = 2000
# A typed input in a link (the sidebar's `input`): 1,024 tokens of English are about 5,000 characters. What is
# written is cut to this many characters and UTF-8 bytes (`url_text`), so its percent-encoding stays under 48 KB:
# the server (tornado) refuses a request whose header lines pass 64 KiB, and every asset the page loads repeats
# the address in its Referer header.
MAX_TEXT_PARAM_CHARS = 16_000


def _raw(name: str, max_chars: int = MAX_PARAM_CHARS) -> Optional[str]:
    value = st.query_params.get(name)
    if value is None:
        return None
    value = str(value)
    if len(value) > max_chars:
        note(f"URL parameter '{name}' is too long ({len(value):,} characters, at most {max_chars:,}) "
             f"and was ignored.")
        return None
    return value


def note(message: str) -> None:
    """Remember a message about the URL, shown once by `show_notes`."""
    notes = st.session_state.setdefault(_NOTES_KEY, [])
    if message not in notes:
        notes.append(message)


def refused(problem: str, instead: str, what: str) -> None:
    """Remember that what the student typed could not be used (`problem`) and which tokens the page shows
    instead (`instead`, which are `what`: "the task's example"), for `show_notes` to say under the title: the
    sidebar's own message is out of sight on a short screen, while the figures silently show something else."""
    message = f"{literal(problem)} The page shows {literal(what)} instead: {code(instead)}"
    notes = st.session_state.setdefault(_REFUSED_KEY, [])
    if message not in notes:
        notes.append(message)


def show_notes() -> None:
    """Show (and forget) what the page could not use: typed input first, then what was wrong with the URL.
    Both echo what someone typed, so they are shown literally (`literal`)."""
    for message in st.session_state.pop(_REFUSED_KEY, []):
        st.error(message, icon=":material/keyboard:")
    for message in st.session_state.pop(_NOTES_KEY, []):
        st.warning(literal(message), icon=":material/link_off:")


def parse_int(name: str, lo: int, hi: int) -> Optional[int]:
    """An integer URL parameter clamped to [lo, hi], or None if absent or unreadable."""
    raw = _raw(name)
    if raw is None:
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        note(f"URL parameter {name}={raw[:40]!r} is not a whole number; using the default.")
        return None
    if value < lo or value > hi:
        clamped = min(max(value, lo), hi)
        note(f"URL parameter {name}={value} is outside {lo}..{hi}; using {clamped}.")
        return clamped
    return value


def parse_float(name: str, lo: float, hi: float) -> Optional[float]:
    """A float URL parameter clamped to [lo, hi], or None."""
    raw = _raw(name)
    if raw is None:
        return None
    try:
        value = float(raw.strip())
    except ValueError:
        note(f"URL parameter {name}={raw[:40]!r} is not a number; using the default.")
        return None
    if value != value or value in (float("inf"), float("-inf")):
        note(f"URL parameter {name} must be a finite number; using the default.")
        return None
    if value < lo or value > hi:
        clamped = min(max(value, lo), hi)
        note(f"URL parameter {name}={value:g} is outside {lo:g}..{hi:g}; using {clamped:g}.")
        return clamped
    return value


def parse_choice(name: str, choices: Iterable[str]) -> Optional[str]:
    """A URL parameter that must be one of `choices`, or None."""
    raw = _raw(name)
    if raw is None:
        return None
    choices = list(choices)
    if raw not in choices:
        shown = ", ".join(choices[:8]) + (" ..." if len(choices) > 8 else "")
        note(f"URL parameter {name}={raw[:40]!r} is not one of: {shown}; using the default.")
        return None
    return raw


def parse_text(name: str, max_chars: int = MAX_PARAM_CHARS) -> Optional[str]:
    """A free-text URL parameter (length-limited), or None."""
    return _raw(name, max_chars)


def url_text(value: str, max_chars: int = MAX_PARAM_CHARS) -> str:
    """The start of `value` that a link carries: at most `max_chars` characters and as many UTF-8 bytes (each byte
    is at most three characters percent-encoded), cut between characters. A longer text stays whole in the page."""
    cut = value[:max_chars]
    raw = cut.encode("utf-8", errors="surrogatepass")
    if len(raw) > max_chars:
        cut = raw[:max_chars].decode("utf-8", errors="ignore")
    return cut


class _Book:
    """What `seed` remembers for a session: the widget keys already read from the URL, and each
    widget's last value (which survives page switches). One object in session_state, so a seed
    costs two or three session_state operations on a rerun, not eight."""

    def __init__(self):
        self.seeded: set[str] = set()
        self.kept: dict[str, object] = {}


def _book() -> _Book:
    book = st.session_state.get(_BOOK_KEY)
    if book is None:
        book = st.session_state[_BOOK_KEY] = _Book()
    return book


def seed(key: str, param: str, parse: Callable[[str], object], default, valid: Callable[[object], bool] = None,
         fit: Callable[[object], object] = None):
    """Initialise widget state `key` from the URL once per session, else from `default`.

    Afterwards the widget owns the value; if it became invalid (e.g. a smaller model was picked),
    `fit` makes it valid again (e.g. clamps it; None when it cannot) or, without `fit`, it is reset
    to `default`. Call before creating the widget, and create it with `key=key` only.
    """
    book = _book()
    state = st.session_state
    if key not in book.seeded:
        book.seeded.add(key)
        value = parse(param)
        value = default if value is None else value
    else:
        # Widget state is per page (Streamlit puts the page into a widget's id): on another page the
        # same key starts a new widget that would ignore the old value. Writing the value back as
        # user state hands it to the new widget; if none is left, use this session's last value.
        value = state.get(key, _MISSING)  # not `key in state`: that copies the whole state (~0.15 ms)
        if value is _MISSING:
            value = book.kept.get(key, default)
    if fit is not None:
        value = fit(value)
        value = default if value is None else value
    if valid is not None and not valid(value):
        value = default
    state[key] = value
    book.kept[key] = value
    return value


def keep(key: str, value) -> None:
    """Remember `value` as widget `key`'s last value in this session, which `seed` hands back when the page is
    opened again: for a control whose change reruns only other fragments (ui.shell.sections.rerun_readers), so that it
    is not drawn, and seeded, again."""
    _book().kept[key] = value


def drop(key: str) -> None:
    """Forget widget `key`'s value in this session, and the value `seed` keeps for it, so that its next `seed`
    starts from the default it is given (a new model's example input). The URL is not read again for a key
    already read from it: it still holds the view being left."""
    st.session_state.pop(key, None)
    book = st.session_state.get(_BOOK_KEY)
    if book is not None:
        book.kept.pop(key, None)


def write(**values) -> None:
    """Put the current view into the URL (only the keys given; None removes a key)."""
    for name, value in values.items():
        if value is None:
            if st.query_params.get(name) is not None:  # not `name in`: that is ~0.15 ms a call
                del st.query_params[name]
            continue
        text = str(value)
        if st.query_params.get(name) != text:
            st.query_params[name] = text


def forget(keys: Iterable[str]) -> None:
    """Forget what this session read from the URL and the values of these widget keys, so that every
    `seed` reads the URL again on this run (a lesson step opening its view, or "reset this step")."""
    st.session_state.pop(_BOOK_KEY, None)
    for key in keys:
        st.session_state.pop(key, None)
