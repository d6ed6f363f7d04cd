"""Timing measurements, and other long torch work that needs nothing from the server, in a process of
their own, so a class neither slows them nor waits for them.

A timing sweep is thousands of tiny torch calls (the RNN steps through every position), and torch
lets go of the interpreter lock around each one. Run in the server, every call waits to get the lock
back while other students' pages are drawn (ui/server/interpreter.py): a sweep that takes 1.5 s alone took
4-8 s in a class of 30, held everyone else up while it ran, and what it measured was mostly that
wait. The same holds for building the Depth page's random stacks and training the Generation
page's tiny decoders. Here such work runs in one worker process (`python -m ui.server.measure_process`,
started on first use; starting it and importing torch took 1.2 s here) with its own interpreter lock. Requests
and answers are pickles over the worker's stdin and stdout: the server starts the worker itself and
reads only what its own child writes. Measurements queue one at a time, which also keeps them from
timing each other; progress comes back to the session that asked. When the worker cannot start or
dies, the measurement runs in the server as before, and the log says why. When the class has left,
`stop()` ends it.

(Not multiprocessing: inside a Streamlit script run, sys.modules["__main__"] is the page script,
and a spawned child would run app.py again, warm-up and all.)
"""

from __future__ import annotations

import importlib
import os
import pickle
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Callable, Optional

ROOT = Path(__file__).resolve().parents[2]
Progress = Optional[Callable[[float, str], None]]
_LOCK = threading.Lock()  # one measurement at a time through the one worker
WAITING = "waiting for another student's measurement to finish"
_WORKER: list[subprocess.Popen] = []


def enabled() -> bool:
    """False under AppTest (the tests and the asset writer measure in-process) or with
    GLASSBOX_MEASURE_PROCESS=0."""
    from ui import under_apptest

    return os.environ.get("GLASSBOX_MEASURE_PROCESS", "1") != "0" and not under_apptest()


def _log():
    from streamlit.logger import get_logger

    return get_logger(__name__)


def _worker() -> subprocess.Popen:
    if _WORKER and _WORKER[0].poll() is None:
        return _WORKER[0]
    _WORKER.clear()
    process = subprocess.Popen([sys.executable, "-m", "ui.server.measure_process"], cwd=ROOT, stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, env={**os.environ, "GLASSBOX_MEASURE_PROCESS": "0"})
    _WORKER.append(process)
    return process


def measure(fn: Callable, *args, progress: Progress = None, **kwargs) -> Any:
    """fn(*args, **kwargs) in the worker process. fn must be a module-level function the worker can
    import; it gets `progress=` only when a callback is given, which is called here, in the caller's
    thread, as the worker reports (and once with WAITING while another measurement holds the worker).
    In-process when switched off or when the worker fails; an exception fn raises comes back as raised."""
    if not enabled():
        return _call(fn, args, kwargs, progress)
    if not _LOCK.acquire(blocking=False):  # another student's measurement is running: say so, then queue
        if progress is not None:
            progress(0.0, WAITING)
        _LOCK.acquire()
    try:
        try:
            worker = _worker()
            pickle.dump(((fn.__module__, fn.__qualname__), args, kwargs, progress is not None), worker.stdin)
            worker.stdin.flush()
            kind, *payload = pickle.load(worker.stdout)
            while kind == "progress":
                if progress is not None:
                    progress(*payload)
                kind, *payload = pickle.load(worker.stdout)
        except (EOFError, OSError, pickle.UnpicklingError) as exc:  # the worker did not start, or died
            _log().warning("measurement worker failed (%r); measuring in the server instead", exc)
            _stop_locked()
            kind = None
        except BaseException:  # `progress` raised (Streamlit stops a run that way when a rerun is asked for):
            _stop_locked(kill=True)  # the worker would still answer this request, so the next would read it
            raise
    finally:
        _LOCK.release()
    if kind == "error":
        raise payload[0]
    if kind == "result":
        return payload[0]
    return _call(fn, args, kwargs, progress)


def _call(fn: Callable, args: tuple, kwargs: dict, progress: Progress) -> Any:
    """fn(*args, **kwargs), given `progress` only when there is one (a function without it works too)."""
    return fn(*args, **kwargs) if progress is None else fn(*args, progress=progress, **kwargs)


def _stop_locked(kill: bool = False) -> None:
    while _WORKER:
        process = _WORKER.pop()
        try:
            if kill:
                process.kill()
            process.stdin.close()  # the worker's loop ends at the end of its input
            process.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            process.kill()
            process.wait()


def stop() -> bool:
    """End the worker (the next measurement starts another); True if one was running."""
    with _LOCK:
        alive = bool(_WORKER) and _WORKER[0].poll() is None
        _stop_locked()
        return alive


def running() -> bool:
    return bool(_WORKER) and _WORKER[0].poll() is None


def serve(requests, answers) -> None:
    """The worker's loop: read (function, args, with progress) pickles, write progress and the result
    (or the exception) back, until the server closes its end."""
    import torch

    torch.set_num_threads(1)  # as the server: timings comparable with the shipped ones

    def send(message: tuple) -> None:
        pickle.dump(message, answers)
        answers.flush()

    while True:
        try:
            (module, name), args, kwargs, with_progress = pickle.load(requests)
        except EOFError:
            return
        try:
            fn = getattr(importlib.import_module(module), name)
            report = (lambda fraction, text: send(("progress", fraction, text))) if with_progress else None
            result = _call(fn, args, kwargs, report)
        except Exception as exc:  # noqa: BLE001 - every error goes back to the caller, as raised
            try:
                send(("error", exc))
            except (pickle.PicklingError, TypeError, AttributeError):
                send(("error", RuntimeError(f"{type(exc).__name__}: {exc}")))
        else:
            send(("result", result))


if __name__ == "__main__":
    answers = sys.stdout.buffer
    sys.stdout = sys.stderr  # a stray print must not land in the answers
    serve(sys.stdin.buffer, answers)
