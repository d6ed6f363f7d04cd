"""Keep the server's memory near its baseline after a class leaves: cap glibc's malloc arenas.

Each of the many threads a Streamlit server runs (one per session's script run) may get its own
malloc arena; memory freed in one arena is reused only by the threads that map to it and rarely goes
back to the operating system, so after thirty students leave the process keeps hundreds of MB it no
longer uses. Two arenas (what MALLOC_ARENA_MAX=2 sets) were measured with bench/classroom.py
--after 150: peak 955 -> 737 MB and 775 -> 596 MB after the tabs closed, against 458 MB before the
class (README, "Classroom benchmark"). glibc only: elsewhere this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import threading

log = logging.getLogger(__name__)

M_ARENA_MAX = -8  # glibc's mallopt parameter number (malloc.h)
ARENAS = 2
_DONE: list[bool] = []
_LOCK = threading.Lock()


def cap_arenas(arenas: int = ARENAS) -> bool:
    """Tell glibc's malloc to use at most `arenas` arenas, once per process (later calls return the first
    answer). True if glibc accepted it; False where there is no glibc (macOS, musl) or it refused."""
    with _LOCK:
        if _DONE:
            return _DONE[0]
        accepted = False
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            accepted = bool(libc.mallopt(ctypes.c_int(M_ARENA_MAX), ctypes.c_int(int(arenas))))
        except (OSError, AttributeError) as exc:  # no C library found, or one without mallopt
            log.info("malloc arenas not capped: %s", exc)
        _DONE.append(accepted)
        return accepted
