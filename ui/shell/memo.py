"""Process-wide memos that are cheap to look up on every rerun.

Every widget change reruns the whole page script, so each lookup of a cached run, figure or model
happens on every rerun of every session. st.cache_data pays for that by hashing its arguments
through Streamlit's general hasher and unpickling a copy of the result (about 0.3 ms a lookup
here, several per page); these memos key on a short fingerprint instead and hand back the stored
object itself. That object is shared by every session, so it must never be changed: `freeze`
makes numpy results read-only, so a page that tried would fail loudly instead of corrupting
another student's view.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
import weakref
from collections import OrderedDict
from typing import Any, Callable, Hashable

import numpy as np
import torch

from ui.shell import precomputed
from ui.shell.fingerprint import fingerprint  # noqa: F401 (also named from here)


def freeze(value: Any) -> Any:
    """Make numpy arrays inside a result read-only (in place, through dicts, lists, tuples and
    dataclasses), so a shared result cannot be changed."""
    if isinstance(value, np.ndarray):
        value.flags.writeable = False
    elif isinstance(value, dict):
        for v in value.values():
            freeze(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            freeze(v)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):  # the analysis reports
        for f in dataclasses.fields(value):
            freeze(getattr(value, f.name))
    return value


# Called as recorder(memo, args, kwargs, key) on every memo call; only `python -m ui.shell.precompute --write`
# adds one (to learn what each page's default visit asks for). Empty while the app serves students.
RECORDERS: list[Callable] = []

DEFAULT_MAX_BYTES = 64 * 2 ** 20  # per memo: a classroom's worth of figures and runs, not the machine
_EVERY_MEMO: "weakref.WeakSet[Memo]" = weakref.WeakSet()  # for held(): what all memos of the process keep
_EVERY_MEMO_LOCK = threading.Lock()  # figure memos are made lazily, from any session's thread


def _every_memo() -> list["Memo"]:
    """A snapshot of every memo of the process (a set changed during iteration would raise)."""
    with _EVERY_MEMO_LOCK:
        return list(_EVERY_MEMO)


def nbytes(value: Any) -> int:
    """A quick estimate of the memory a result holds: its arrays, tensors and byte strings (the rest is
    small next to them)."""
    if isinstance(value, np.ndarray):
        return value.nbytes if value.dtype != object else 64 * value.size
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, (bytes, str)):
        return len(value)
    if isinstance(value, dict):
        return sum(nbytes(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(nbytes(v) for v in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return sum(nbytes(getattr(value, f.name)) for f in dataclasses.fields(value))
    shipped = getattr(value, "_shipped", None)  # a ShippedFigure: its serialised figure
    return nbytes(shipped) if shipped is not None else 0


class Memo:
    """A thread-safe least-recently-used store of results by fingerprint, bounded in count and bytes.

    A miss computes outside the lock, so one slow run never blocks other sessions' lookups of other
    results. A session that asks for a result another thread is computing (a student, or the start-up
    warm-up of ui.server.warmup) waits for it instead of computing it a second time on the same few cores.
    A miss first looks in the results shipped with the app (ui.shell.precomputed), made by this same code.
    """

    def __init__(self, func: Callable, maxsize: int, max_bytes: int = DEFAULT_MAX_BYTES, keep_when_idle: bool = False):
        self.func, self.maxsize, self.max_bytes = func, maxsize, max_bytes
        self.keep_when_idle = keep_when_idle  # forget_results() leaves this memo alone (the bundled models)
        self._store: OrderedDict[Hashable, Any] = OrderedDict()
        self._sizes: dict[Hashable, int] = {}
        self._bytes = 0
        self._lock = threading.Lock()
        self._computing: dict[Hashable, threading.Event] = {}  # key -> set when its computation ends
        functools.update_wrapper(self, func)
        self.name = f"{func.__module__}:{func.__qualname__}"  # how ui.shell.precomputed files its results
        with _EVERY_MEMO_LOCK:
            _EVERY_MEMO.add(self)

    def __call__(self, *args, **kwargs):
        key = (fingerprint(args), fingerprint(kwargs))
        for recorder in RECORDERS:
            recorder(self, args, kwargs, key)
        while True:
            with self._lock:
                if key in self._store:
                    self._store.move_to_end(key)
                    return self._store[key]
                running = self._computing.get(key)
                if running is None:
                    done = self._computing[key] = threading.Event()
                    break
            running.wait()  # then look again: stored now, or that computation failed and this one tries
        try:
            shipped, value = precomputed.lookup(self.name, key)
            value = freeze(value) if shipped else self.func(*args, **kwargs)
            self._keep(key, value)
        finally:
            with self._lock:
                del self._computing[key]
            done.set()
        return value

    def _keep(self, key: Hashable, value: Any) -> None:
        """Store a result, then forget the least recently used ones beyond the count and byte bounds."""
        size = nbytes(value)
        with self._lock:
            self._bytes += size - self._sizes.get(key, 0)
            self._store[key], self._sizes[key] = value, size
            self._store.move_to_end(key)
            while len(self._store) > 1 and (len(self._store) > self.maxsize or self._bytes > self.max_bytes):
                old, _ = self._store.popitem(last=False)
                self._bytes -= self._sizes.pop(old)

    @property
    def bytes(self) -> int:
        """The estimated memory the stored results hold."""
        return self._bytes

    def has(self, *args, **kwargs) -> bool:
        """Whether a result for these arguments is at hand: stored, or shipped with the app (without computing it)."""
        key = (fingerprint(args), fingerprint(kwargs))
        with self._lock:
            if key in self._store:
                return True
        return precomputed.holds(self.name, key)

    def peek(self, *args, **kwargs) -> tuple[bool, Any]:
        """(True, result) if a result for these arguments is stored here, else (False, None); computes nothing."""
        key = (fingerprint(args), fingerprint(kwargs))
        with self._lock:
            return (True, self._store[key]) if key in self._store else (False, None)

    def __len__(self) -> int:
        return len(self._store)

    def clear(self) -> None:
        """Forget every stored result."""
        with self._lock:
            self._store.clear()
            self._sizes.clear()
            self._bytes = 0


def held() -> dict[str, tuple[int, int]]:
    """What every memo of this process keeps now: name -> (results, estimated bytes), largest first."""
    found: dict[str, tuple[int, int]] = {}
    for m in _every_memo():
        if len(m):  # memos of one name (every cached figure builder's wrapper) add up
            n, size = found.get(m.name, (0, 0))
            found[m.name] = (n + len(m), size + m.bytes)
    return dict(sorted(found.items(), key=lambda item: -item[1][1]))


def forget_results() -> int:
    """Empty every memo of the process except those made with keep_when_idle; returns how many results
    were forgotten. Called when a class has left (ui.server.warmup.start_afresh): its results are of no use
    to the next one, which computes its own."""
    forgotten = 0
    for m in _every_memo():
        if not m.keep_when_idle:
            forgotten += len(m)
            m.clear()
    return forgotten


def memo(maxsize: int = 128, max_bytes: int = DEFAULT_MAX_BYTES,
         keep_when_idle: bool = False) -> Callable[[Callable], Memo]:
    """Decorator: keep up to `maxsize` results (and about `max_bytes`) of a pure function for every
    session of this process. The one caching style of the app, for results and models alike."""
    return lambda func: Memo(func, maxsize, max_bytes, keep_when_idle)
