"""Which browser sessions are using this server right now, for sharing it fairly (ui.train.runs).

app.py calls `touch()` on every full run of a session (a page opened or a control changed; a
fragment's own reruns, such as a training tick, do not run app.py), and so does a control that reruns
only the fragments that read it (ui.shell.sections.rerun_readers). A session counts as active
for `ACTIVE_SECONDS` after that. A tab left open that nobody clicks stops counting, so it does
not slow anyone's training down.
"""

from __future__ import annotations

import threading
import time
from typing import Optional

from streamlit.runtime.scriptrunner import get_script_run_ctx

ACTIVE_SECONDS = 15.0
_FORGET_SECONDS = 600.0  # entries older than this are dropped (the table stays small)
_LAST_RUN: dict[str, float] = {}  # session id -> time.monotonic() of its last full run
_LOCK = threading.Lock()


def current_session() -> Optional[str]:
    """This script run's session id (None outside a script run)."""
    ctx = get_script_run_ctx()
    return ctx.session_id if ctx is not None else None


def touch(session_id: Optional[str] = None, now: Optional[float] = None) -> None:
    """Record that a session just ran a page."""
    if session_id is None:
        from ui import under_apptest

        if under_apptest():  # AppTest sessions in one test process are not students sharing a server
            return
        session_id = current_session()
    if session_id is None:
        return
    now = time.monotonic() if now is None else now
    with _LOCK:
        _LAST_RUN[session_id] = now
        for sid in [s for s, t in _LAST_RUN.items() if now - t > _FORGET_SECONDS]:
            del _LAST_RUN[sid]


def others_active(session_id: Optional[str] = None, now: Optional[float] = None) -> bool:
    """Whether any other session ran a page in the last ACTIVE_SECONDS."""
    session_id = session_id or current_session()
    now = time.monotonic() if now is None else now
    with _LOCK:
        return any(now - t <= ACTIVE_SECONDS for sid, t in _LAST_RUN.items() if sid != session_id)


def last_run() -> Optional[float]:
    """time.monotonic() of the latest full run of any session, or None if none ran (in the last 10 minutes)."""
    with _LOCK:
        return max(_LAST_RUN.values(), default=None)


def connected_sessions() -> Optional[int]:
    """How many browser tabs hold a live connection to this server now, or None where that cannot be
    asked (no Streamlit server in this process, or a Streamlit whose session manager differs)."""
    try:
        from streamlit.runtime import Runtime

        if not Runtime.exists():
            return None
        return int(Runtime.instance()._session_mgr.num_active_sessions())  # noqa: SLF001 - no public API for it
    except Exception:  # noqa: BLE001 - an unknown answer, never a failure
        return None
