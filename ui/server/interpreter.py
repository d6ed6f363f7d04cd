"""How often the interpreter lock changes hands between the server's threads.

Torch lets go of the interpreter lock around every operation, however small, and takes it back
afterwards. While another session's thread runs Python (drawing a page), taking it back waits for
that thread to be asked to let go, which CPython does only after the switch interval (5 ms by
default). 150 tiny torch calls (the Masks page's leak table) took 0.4 ms alone, 0.28 s beside one
busy Python thread and 3.4 s beside two; at 1 ms, 42 ms beside one (bench/gil_convoy.py). A shorter
interval bounds that wait at little cost to the threads that only run Python, so the server sets it
once, with torch's thread count (ui/server/process.py: as the server starts, or at app.py's first run).
"""

from __future__ import annotations

import os
import sys
import threading

from streamlit.logger import get_logger

log = get_logger(__name__)

DEFAULT_MS = 1.0  # measured in bench/gil_convoy.py and bench/classroom.py (docs/classroom-benchmark.md)
_LOCK = threading.Lock()
_SET: list[float] = []


def wanted_interval_s(environ=os.environ) -> float:
    """The switch interval in seconds: GLASSBOX_SWITCH_INTERVAL_MS when it is a number from 0.05 to
    50, else the default (a bad value is logged, never fatal: it is a server setting, not input)."""
    text = environ.get("GLASSBOX_SWITCH_INTERVAL_MS")
    if text is None:
        return DEFAULT_MS / 1000
    try:
        ms = float(text)
    except ValueError:
        ms = float("nan")
    if not 0.05 <= ms <= 50:  # also false for NaN
        log.warning("GLASSBOX_SWITCH_INTERVAL_MS=%r is not a number of milliseconds from 0.05 to 50; using %g",
                    text, DEFAULT_MS)
        return DEFAULT_MS / 1000
    return ms / 1000


def share_the_lock() -> float:
    """Set the interpreter's switch interval once per process; returns the interval in force (s)."""
    with _LOCK:
        if not _SET:
            sys.setswitchinterval(wanted_interval_s())
            _SET.append(sys.getswitchinterval())
        return _SET[0]
