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
reads only what its own child writes. Measurements run one at a time, which also keeps them from
timing each other; progress comes back to the session that asked. When the worker cannot start or
dies, the measurement runs in the server as before, and the log says why. When the class has left,
`stop()` ends it.

Taking turns (`_Turns`): three visitors cycling uncached settings once made another student's measurement
wait 25-32 s instead of 1-5.6 s, behind one lock with no order. Now the waiting measurement whose session
had its last turn longest ago goes next, so a student who rarely measures waits for at most the one
measurement running; each session has at most one measurement waiting or running;
at most QUEUE_LIMIT wait at once; a wait longer than WAIT_LIMIT or a run longer than RUN_LIMIT ends with a
message (`Refused`), which the page shows instead of a figure. Cached results never reach this queue (the
memos in ui/<page>/runs.py answer them first).

(Not multiprocessing: inside a Streamlit script run, sys.modules["__main__"] is the page script,
and a spawned child would run app.py again, warm-up and all.)
"""

from __future__ import annotations

import collections
import importlib
import itertools
import os
import pickle
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Optional

ROOT = Path(__file__).resolve().parents[2]
Progress = Optional[Callable[[float, str], None]]
_LOCK = threading.Lock()  # one measurement at a time through the one worker
WAITING = "waiting for another student's measurement to finish"
_WORKER: list[subprocess.Popen] = []

QUEUE_LIMIT = 12  # measurements waiting at once; one more is refused at once
WAIT_LIMIT = 90.0  # seconds a measurement may wait for its turn
RUN_LIMIT = 180.0  # seconds a measurement may run in the worker before the worker is stopped
USAGE_WINDOW = 120.0  # a session whose last turn began longer ago than this counts as never served
REPORT_EVERY = 1.0  # seconds between "waiting" reports (a stopped run notices at the next one and leaves)


class Refused(RuntimeError):
    """A measurement that was not made; its message, for the page to show, says why and what to do."""


BUSY = ("The server is measuring for {n} students right now; this measurement was not queued. Try again in "
        "a minute (results others already measured show at once).")
TOO_LONG_WAIT = ("This measurement waited {s:.0f} s for its turn on the server and was given up. Try again in a "
                 "minute (results others already measured show at once).")
TOO_LONG_RUN = "This measurement ran longer than {s:g} s and was stopped; a smaller setting measures faster."
ONE_AT_A_TIME = "This page is already measuring something for you; this one starts when you ask again after it."


def session_id() -> str:
    """Who is asking: the Streamlit session running this thread, or the thread itself outside one."""
    try:
        from streamlit.runtime.scriptrunner import get_script_run_ctx

        ctx = get_script_run_ctx(suppress_warning=True)
    except Exception:  # noqa: BLE001 - no Streamlit runtime here
        ctx = None
    return f"session-{ctx.session_id}" if ctx is not None else f"thread-{threading.get_ident()}"


class _Turns:
    """Whose measurement uses the worker next: of those waiting, the session whose last turn began longest
    ago (or that had none in the last USAGE_WINDOW seconds; ties: who came first). A student who measures
    now and then is served as soon as the measurement running is done, however often the others ask and
    however long their measurements are. Thread-safe; every session runs in its own thread."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self._cond = threading.Condition()
        self._running: Optional[str] = None  # the session whose measurement holds the worker
        self._waiting: dict[int, tuple[str, float]] = {}  # ticket -> (session, arrival)
        self._last_turn: dict[str, float] = {}  # session -> when its last turn began
        self._tickets = itertools.count()
        self.served: list[str] = []  # sessions in the order they got the worker (the last 64), for tests

    def _next(self, now: float) -> Optional[int]:
        if not self._waiting:
            return None
        for session in [s for s, t in self._last_turn.items() if t <= now - USAGE_WINDOW]:
            del self._last_turn[session]  # long ago counts as never: the table does not grow
        never = float("-inf")
        return min(self._waiting, key=lambda t: (self._last_turn.get(self._waiting[t][0], never),
                                                 self._waiting[t][1], t))

    def take(self, session: str, progress: Progress) -> None:
        """Wait for this session's turn (reporting WAITING to `progress` while it waits); raises Refused."""
        with self._cond:
            if self._running == session or any(s == session for s, _ in self._waiting.values()):
                raise Refused(ONE_AT_A_TIME)
            if len(self._waiting) >= QUEUE_LIMIT:
                raise Refused(BUSY.format(n=len(self._waiting) + 1))
            ticket, arrived = next(self._tickets), self.clock()
            self._waiting[ticket] = (session, arrived)
        try:
            while True:
                with self._cond:
                    now = self.clock()
                    if self._running is None and self._next(now) == ticket:
                        del self._waiting[ticket]
                        self._running, self._last_turn[session] = session, now
                        self.served = (self.served + [session])[-64:]
                        return
                    if now - arrived >= WAIT_LIMIT:
                        raise Refused(TOO_LONG_WAIT.format(s=now - arrived))
                    self._cond.wait(min(REPORT_EVERY, WAIT_LIMIT - (now - arrived)))
                if progress is not None and self._running is not None:
                    progress(0.0, WAITING)  # outside the lock: a stopped run raises here, and leaves the queue
        except BaseException:
            with self._cond:
                self._waiting.pop(ticket, None)
                self._cond.notify_all()
            raise

    def give_back(self) -> None:
        """The worker is free again: the next turn begins."""
        with self._cond:
            self._running = None
            self._cond.notify_all()


_TURNS = _Turns()


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
    session = session_id()
    _TURNS.take(session, progress)  # raises Refused (busy, waited too long, this session already measuring)
    started, timer = time.monotonic(), None
    try:
        with _LOCK:  # held by the turn's owner only; stop() takes it too
            try:
                worker = _worker()
                timer = threading.Timer(RUN_LIMIT, worker.kill)  # a run past the limit: the worker dies
                timer.daemon = True
                timer.start()
                pickle.dump(((fn.__module__, fn.__qualname__), args, kwargs, progress is not None), worker.stdin)
                worker.stdin.flush()
                kind, *payload = pickle.load(worker.stdout)
                while kind == "progress":
                    if progress is not None:
                        progress(*payload)
                    kind, *payload = pickle.load(worker.stdout)
            except (EOFError, OSError, pickle.UnpicklingError) as exc:  # the worker did not start, or died
                _stop_locked()
                if time.monotonic() - started >= RUN_LIMIT:
                    raise Refused(TOO_LONG_RUN.format(s=RUN_LIMIT)) from None
                _log().warning("measurement worker failed (%r); measuring in the server instead", exc)
                kind = None
            except BaseException:  # `progress` raised (Streamlit stops a run that way when a rerun is asked for):
                _stop_locked(kill=True)  # the worker would still answer this request, so the next would read it
                raise
            finally:
                if timer is not None:
                    timer.cancel()
            if kind is None:  # measured in the server, still in this session's turn
                return _call(fn, args, kwargs, progress)
    finally:
        _TURNS.give_back()
    if kind == "error":
        raise payload[0]
    return payload[0]


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
