"""Keep the server's memory near its baseline after a class leaves: cap glibc's malloc arenas, fix its
mmap threshold, and hand free memory back to the system once the server has been idle for a while.

Each of the many threads a Streamlit server runs (one per session's script run) may get its own
malloc arena; memory freed in one arena is reused only by the threads that map to it and rarely goes
back to the operating system, so after thirty students leave the process keeps hundreds of MB it no
longer uses. Two arenas (what MALLOC_ARENA_MAX=2 sets) were measured with bench/classroom.py
--after 150: peak 955 -> 737 MB and 775 -> 596 MB after the tabs closed, against 458 MB before the
class (docs/classroom-benchmark.md). glibc only: elsewhere this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import os
import sys
import threading
import time
from typing import Callable, Optional

from streamlit.logger import get_logger

log = get_logger(__name__)  # Streamlit's logger: its lines go to the server's log at the server's level

M_ARENA_MAX = -8  # glibc's mallopt parameter numbers (malloc.h)
M_MMAP_THRESHOLD = -3
ARENAS = 2
MMAP_THRESHOLD = 1024 * 1024  # fixed (see fix_mmap_threshold); 128 KiB slowed training 1.5x, 1 MiB nothing
# Quiet this long before trimming: past Streamlit's server.disconnectedSessionTTL (120 s), when the state
# of the sessions whose tabs closed is gone too.
IDLE_SECONDS = float(os.environ.get("GLASSBOX_TRIM_IDLE", "130"))
CHECK_SECONDS = float(os.environ.get("GLASSBOX_TRIM_CHECK", "10"))  # how often the trimmer thread looks
_DONE: list[bool] = []
_THRESHOLD: list[bool] = []
_LOCK = threading.Lock()
_TRIMMER: list[threading.Thread] = []


def _libc():
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")


def cap_arenas(arenas: int = ARENAS) -> bool:
    """Tell glibc's malloc to use at most `arenas` arenas, once per process (later calls return the first
    answer). True if glibc accepted it; False where there is no glibc (macOS, musl) or it refused."""
    with _LOCK:
        if _DONE:
            return _DONE[0]
        accepted = False
        try:
            accepted = bool(_libc().mallopt(ctypes.c_int(M_ARENA_MAX), ctypes.c_int(int(arenas))))
        except (OSError, AttributeError) as exc:  # no C library found, or one without mallopt
            log.info("malloc arenas not capped: %s", exc)
        _DONE.append(accepted)
        return accepted


def fix_mmap_threshold(threshold: int = MMAP_THRESHOLD) -> bool:
    """Give every malloc block of `threshold` bytes or more its own mapping, returned to the system when
    freed, once per process (later calls return the first answer). glibc's default threshold rises to
    the size of the largest such block the program has freed (up to 32 MiB), after which a class's big
    transient buffers (figure JSON, messages, tensors) land in the heap and stay there as free space
    that malloc_trim cannot give back. Measured (docs/classroom-benchmark.md, "Memory"): 30 students left 76-124 MB more
    anonymous memory than the warm-up after the idle trim with the default, 68-75 MB with 1 MiB fixed
    here (53 MB with it set in the environment from the first allocation);
    bench/malloc_threshold.py: no cost in speed at 1 MiB, training 1.5x slower at 128 KiB (its
    tensors then get a fresh mapping each step). A MALLOC_MMAP_THRESHOLD_ in the environment is the
    operator's choice and is kept. True if a threshold is in force; False without glibc."""
    with _LOCK:
        if _THRESHOLD:
            return _THRESHOLD[0]
        accepted = False
        try:
            mallopt = _libc().mallopt
            if os.environ.get("MALLOC_MMAP_THRESHOLD_"):
                accepted = True  # glibc read it at start-up
            else:
                accepted = bool(mallopt(ctypes.c_int(M_MMAP_THRESHOLD), ctypes.c_int(int(threshold))))
        except (OSError, AttributeError) as exc:
            log.info("malloc mmap threshold not fixed: %s", exc)
        _THRESHOLD.append(accepted)
        return accepted


def trim() -> bool:
    """One full garbage collection, then glibc's malloc_trim(0): free memory goes back to the system.
    True if glibc released something; False if it had nothing to give or there is no glibc."""
    gc.collect()
    try:
        return bool(_libc().malloc_trim(ctypes.c_size_t(0)))
    except (OSError, AttributeError):
        return False


def resident_mb() -> dict[str, float]:
    """This process's resident memory in MB from Linux's /proc: 'total' (VmRSS), 'anonymous' (the heap,
    what the process allocated) and 'file' (pages of the libraries and files it mapped, which the
    kernel may drop and read again); empty where /proc is not available."""
    names = {"VmRSS:": "total", "RssAnon:": "anonymous", "RssFile:": "file"}
    try:
        with open("/proc/self/status") as status:
            return {names[line.split()[0]]: int(line.split()[1]) / 1024 for line in status
                    if line.split()[:1] and line.split()[0] in names}
    except (OSError, ValueError, IndexError):
        return {}


class _MallInfo2(ctypes.Structure):
    """glibc's struct mallinfo2 (malloc.h, glibc 2.33 and later): every field a size_t."""
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]


def malloc_mb() -> dict[str, float]:
    """What glibc's malloc holds, over all its arenas, in MB: 'in use' (blocks the program holds), 'free'
    (freed blocks it keeps in its heaps for reuse) and 'mapped' (large blocks in their own mmap). Tells
    heap slack (free) from live allocations (in use) when the resident memory stays up. Empty where
    there is no glibc 2.33+."""
    try:
        mallinfo2 = _libc().mallinfo2
    except (OSError, AttributeError):
        return {}
    mallinfo2.restype = _MallInfo2
    info = mallinfo2()
    return {"in use": info.uordblks / 2**20, "free": info.fordblks / 2**20, "mapped": info.hblkhd / 2**20}


def rss_mb() -> Optional[float]:
    """This process's resident memory in MB, or None where that is not available."""
    return resident_mb().get("total")


def memory_line() -> str:
    """One line for the server log: resident memory and what the memos keep (their largest three)."""
    from ui.shell import memo

    kept = memo.held()
    total = sum(size for _, size in kept.values())
    largest = ", ".join(f"{name.split(':')[-1]} {size / 2**20:.1f} MB ({n})" for name, (n, size) in list(kept.items())[:3])
    rss, heap = resident_mb(), malloc_mb()
    line = (f"RSS {rss['total']:.0f} MB ({rss.get('anonymous', 0):.0f} anonymous, {rss.get('file', 0):.0f} file); "
            if "total" in rss else "") + \
        (f"malloc {heap['in use']:.0f} MB in use, {heap['free']:.0f} MB free in its heaps, {heap['mapped']:.0f} MB "
         f"mapped; " if heap else "") + \
        f"memos keep {sum(n for n, _ in kept.values())} results, about {total / 2**20:.1f} MB" + \
        (f" (largest: {largest})" if largest else "") + \
        f"; {sys.getallocatedblocks()} blocks allocated"
    # Not gc.get_objects(): on CPython before 3.13 a list of every object can hold a tuple that another thread
    # is still building (tuple(generator)); that thread's resize then fails with "SystemError: bad argument to
    # internal function" (CPython gh-107137), which CI once met on the Masks page while the trimmer logged.
    return line


def log_memory(event: str) -> None:
    """One line in the server's log: what just happened, and memory_line(). A developer's question, where
    the server runs under PYTHONTRACEMALLOC and GLASSBOX_TRACEMALLOC_DIR names a folder: which lines of
    Python allocated what is still alive; a tracemalloc snapshot is written there at each line, to be
    compared (Snapshot.load(b).compare_to(Snapshot.load(a), "lineno"))."""
    log.info("%s: %s", event, memory_line())
    folder = os.environ.get("GLASSBOX_TRACEMALLOC_DIR")
    if folder:
        import tracemalloc

        if tracemalloc.is_tracing():
            path = os.path.join(folder, f"memory-{time.time():.3f}.snapshot")
            try:
                tracemalloc.take_snapshot().dump(path)
                log.info("tracemalloc snapshot written: %s", path)
            except OSError as exc:
                log.info("tracemalloc snapshot not written: %s", exc)


class IdleTrimmer:
    """One check every CHECK_SECONDS, in the trimmer thread: once no page has run for `idle` seconds, trim
    (once per quiet spell), after asking the app to let go of what the class left (`before_trim`, which
    says whether it did: ui.server.warmup.start_afresh lets go only when no tab is connected). While it has not
    let go, every later check of the same quiet spell asks again, and trims again the moment it does: a
    projector tab closed after the students left still gives the class's memory back."""

    def __init__(self, last_run: Callable[[], Optional[float]], before_trim: Optional[Callable[[], bool]] = None,
                 idle: float = IDLE_SECONDS, now: Callable[[], float] = time.monotonic):
        self.last_run, self.before_trim, self.idle, self.now = last_run, before_trim, idle, now
        self.trimmed_after: Optional[float] = None  # the latest page run of the quiet spell trimmed last
        self.released_after: Optional[float] = None  # ... of the quiet spell in which the app let go

    def check(self) -> bool:
        """Trim now if the server is quiet and this quiet spell asks for it; True if it trimmed."""
        last = self.last_run()
        if last is None or self.now() - last < self.idle or self.released_after == last:
            return False
        released = bool(self.before_trim()) if self.before_trim is not None else False
        if released:
            self.released_after = last
        if self.trimmed_after == last and not released:
            return False
        self.trimmed_after = last
        trim()
        log_memory(f"idle {self.now() - last:.0f} s, memory trimmed")
        return True


def start_trimmer(last_run: Callable[[], Optional[float]], before_trim: Optional[Callable[[], bool]] = None) -> bool:
    """Start the one idle-trimming daemon thread of this process (later calls do nothing); True if started."""
    with _LOCK:
        if _TRIMMER:
            return False

        trimmer = IdleTrimmer(last_run, before_trim)

        def loop() -> None:
            while True:
                time.sleep(CHECK_SECONDS)
                try:
                    trimmer.check()
                except Exception:  # noqa: BLE001 - a failed trim costs memory, never a page
                    log.exception("idle memory trim failed")

        thread = threading.Thread(target=loop, name="glassbox-idle-trim", daemon=True)
        _TRIMMER.append(thread)
        thread.start()
        return True
