"""The settings every app process makes once, before its pages do any work.

One torch thread per run, a short interpreter switch interval, and glibc's malloc capped and fixed.
app.py calls `set_up` on every run (after the first, each call is a few microseconds); serve.py
calls it when the server starts, so that the warm-up started there runs under the same settings.
"""

from __future__ import annotations

import logging
import os
import threading

import torch

from ui.server import allocator, interpreter

SERVED_ENV = "GLASSBOX_SERVED_BY"  # serve.py sets it to "serve.py" as the server starts
_warned = threading.Event()


def set_up() -> None:
    """Apply the process-wide settings; safe to call from any thread and any number of times."""
    # Many students share a few cores: one torch thread per run avoids thread-pool contention, which
    # made small-model runs and training chunks many times slower on a 2-core server. (Torch keeps the
    # count process-wide; every thread that later runs torch work takes it up.)
    torch.set_num_threads(1)
    # Torch lets go of the interpreter lock around every op: a short switch interval bounds how long a
    # session waits to take it back while others draw their pages (ui/server/interpreter.py).
    interpreter.share_the_lock()
    allocator.cap_arenas()  # once per process: freed memory is reused instead of kept per thread (ui/server/allocator.py)
    allocator.fix_mmap_threshold()  # and big freed blocks go back to the system instead of staying in the heap
    _say_what_is_missing()


def _say_what_is_missing() -> None:
    """Once per process, in the log: started as `streamlit run app.py`, the server has none of serve.py's
    middlewares (the security headers, the per-session upload budget, compressed static files)."""
    if os.environ.get(SERVED_ENV) == "serve.py" or _warned.is_set():
        return
    _warned.set()
    logging.getLogger("glassbox.server").warning(
        "Started as `streamlit run app.py`: answers carry no nosniff, referrer or frame-ancestors headers and a "
        "session's uploads are bounded per file only (20 MB), not to 64 MiB in all. For a class, start the app "
        "with `streamlit run serve.py` (README).")
