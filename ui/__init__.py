"""Streamlit helpers shared by the pages: the sidebar, model loading, cached runs, URL state.

Lives beside core/ (which never imports streamlit) and is not listed by st.navigation.
"""

import streamlit as st

from unittest.mock import NonCallableMock

try:  # Streamlit internals: the flag behind its old "pages/ folder" mode (see ensure_app_navigation)
    from streamlit.runtime import Runtime
    from streamlit.runtime.pages_manager import PagesManager
except ImportError:  # pragma: no cover - a Streamlit without it has no such mode to escape
    PagesManager = Runtime = None


def _under_apptest() -> bool:
    """AppTest runs scripts on a mock Runtime, and re-arms the pages/ flag before EVERY run."""
    return isinstance(getattr(Runtime, "_instance", None), NonCallableMock)


def ensure_app_navigation() -> None:
    """Make sure this run went through app.py's st.navigation; if not, rerun so that it does.

    Streamlit decides once per server process, when the first browser session starts, whether
    the app uses the old "pages/ folder" mode: it does if a folder called pages/ sits beside
    app.py, until some run calls st.navigation. So if the very first visitor after a restart
    opens a deep link (a teacher's /attention?layer=1 link), Streamlit runs that page file
    alone: no sections, no wide layout, file names in the menu. Clearing the flag and
    rerunning sends the run through app.py, which keeps the URL and its query parameters.
    A real server arms the flag once per process, so this reruns at most once. AppTest re-arms
    it before every run, where rerunning would swallow the click being tested: skip it there
    (tests/e2e/test_deep_link.py covers the real server).
    """
    if PagesManager is not None and PagesManager.uses_pages_directory and not _under_apptest():
        PagesManager.uses_pages_directory = False
        st.rerun()
