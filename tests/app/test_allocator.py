"""ui.server.allocator: the server caps glibc's malloc arenas once per process (memory back near its baseline
after a class leaves); elsewhere it does nothing and says so."""

from __future__ import annotations

import platform
import re

import numpy as np
import pytest

from ui.server import allocator


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt(M_ARENA_MAX) is glibc's")
def test_glibc_accepts_the_cap_and_a_second_call_keeps_the_first_answer():
    assert allocator.cap_arenas() is True
    assert allocator.cap_arenas(64) is True  # once per process: not set again
    assert allocator._DONE == [True]


def test_without_a_c_library_it_refuses_quietly(monkeypatch):
    monkeypatch.setattr(allocator, "_DONE", [])

    def missing(*args, **kwargs):
        raise OSError("no C library here")

    monkeypatch.setattr(allocator.ctypes, "CDLL", missing)
    assert allocator.cap_arenas() is False
    assert allocator._DONE == [False]


def test_the_trimmer_waits_for_a_quiet_server_and_trims_once_per_quiet_spell(monkeypatch):
    trims = []
    monkeypatch.setattr(allocator, "trim", lambda: trims.append(1) or True)
    clock = {"now": 100.0}
    runs = {"last": None}
    trimmer = allocator.IdleTrimmer(lambda: runs["last"], idle=60.0, now=lambda: clock["now"])

    assert not trimmer.check() and not trims  # nobody has run a page yet
    runs["last"] = 90.0
    assert not trimmer.check() and not trims  # a page ran 10 s ago: not quiet
    clock["now"] = 150.0
    assert trimmer.check() and len(trims) == 1 and trimmer.trimmed_after == 90.0  # quiet for 60 s: trimmed
    clock["now"] = 400.0
    assert not trimmer.check() and len(trims) == 1  # still the same quiet spell: not again
    runs["last"], clock["now"] = 500.0, 520.0
    assert not trimmer.check() and len(trims) == 1  # a new class is on
    clock["now"] = 560.0
    assert trimmer.check() and len(trims) == 2 and trimmer.trimmed_after == 500.0  # it left: trimmed again


def test_before_trimming_the_app_may_let_go_of_what_the_class_left_once_per_quiet_spell(monkeypatch):
    events = []
    monkeypatch.setattr(allocator, "trim", lambda: events.append("trim") or True)
    clock, runs = {"now": 100.0}, {"last": 90.0}
    trimmer = allocator.IdleTrimmer(lambda: runs["last"], before_trim=lambda: events.append("let go") or True,
                                    idle=60.0, now=lambda: clock["now"])

    assert not trimmer.check() and not events  # not quiet yet
    clock["now"] = 151.0
    assert trimmer.check()
    assert events == ["let go", "trim"]  # first what the app holds, then the freed memory goes back
    clock["now"] = 999.0
    assert not trimmer.check() and events == ["let go", "trim"]  # once per quiet spell


def test_a_tab_left_open_is_trimmed_around_and_closing_it_later_lets_go(monkeypatch):
    events, tabs = [], {"open": 1}
    monkeypatch.setattr(allocator, "trim", lambda: events.append("trim") or True)

    def let_go() -> bool:  # as ui.server.warmup.start_afresh: only with no tab connected
        events.append(f"asked ({tabs['open']} open)")
        return tabs["open"] == 0

    clock = {"now": 200.0}
    trimmer = allocator.IdleTrimmer(lambda: 90.0, before_trim=let_go, idle=60.0, now=lambda: clock["now"])
    assert trimmer.check() and events == ["asked (1 open)", "trim"]  # the projector stays: trimmed, nothing forgotten
    clock["now"] = 300.0
    assert not trimmer.check() and events[-1] == "asked (1 open)"  # asked again, nothing new to give back
    tabs["open"] = 0  # the projector is closed, no page ran since
    clock["now"] = 400.0
    assert trimmer.check() and events[-2:] == ["asked (0 open)", "trim"]  # let go, then trimmed again
    clock["now"] = 500.0
    n = len(events)
    assert not trimmer.check() and len(events) == n  # done for this quiet spell: not even asked


def test_the_memory_line_names_the_resident_memory_and_what_the_memos_keep(monkeypatch):
    from ui.shell import memo

    def every_object(*args, **kwargs):
        raise AssertionError("gc.get_objects() in a threaded server breaks tuples being built (CPython gh-107137)")

    monkeypatch.setattr(allocator.gc, "get_objects", every_object)

    kept = memo.memo(maxsize=4)(lambda n: np.zeros(n))
    kept(1000)
    line = allocator.memory_line()
    assert re.search(r"RSS \d+ MB", line) or allocator.rss_mb() is None
    assert re.search(r"memos keep \d+ results", line) and re.search(r"\d+ blocks allocated", line)
    if platform.libc_ver()[0] == "glibc":  # glibc's own count: live blocks vs free space kept in its heaps
        assert re.search(r"malloc \d+ MB in use, \d+ MB free in its heaps, \d+ MB mapped", line), line
        heap = allocator.malloc_mb()
        block = bytearray(64 * 2**20)  # far above any mmap threshold: a mapping of its own
        assert allocator.malloc_mb()["mapped"] - heap["mapped"] >= 63
        del block
    assert memo.held()[kept.name][0] == 1 and memo.held()[kept.name][1] >= 8000


def test_a_developer_can_ask_for_tracemalloc_snapshots_beside_the_memory_line(monkeypatch, tmp_path):
    import tracemalloc

    monkeypatch.setenv("GLASSBOX_TRACEMALLOC_DIR", str(tmp_path))
    allocator.log_memory("not tracing")
    assert not list(tmp_path.iterdir())  # without PYTHONTRACEMALLOC nothing is written
    tracemalloc.start()
    try:
        kept = [bytearray(1000) for _ in range(200)]  # noqa: F841 - alive at the snapshot
        allocator.log_memory("tracing")
    finally:
        tracemalloc.stop()
    (snapshot,) = tmp_path.iterdir()
    stats = tracemalloc.Snapshot.load(str(snapshot)).statistics("filename")
    assert any(s.traceback[0].filename == __file__ and s.size >= 200_000 for s in stats)
    monkeypatch.setenv("GLASSBOX_TRACEMALLOC_DIR", str(tmp_path / "missing"))
    tracemalloc.start()
    try:
        allocator.log_memory("a folder that is not there")  # logged, never raised
    finally:
        tracemalloc.stop()


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_trim_hands_freed_memory_back():
    def rss_mb() -> float:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024

    # Many small blocks (below the mmap threshold, so they live in the heap), then free every other one:
    # the heap cannot shrink from its top, only malloc_trim returns the free pages inside it.
    blocks = [bytearray(64 * 1024) for _ in range(3000)]  # ~190 MB
    for b in blocks:
        b[::4096] = b"\x01" * len(b[::4096])  # touch every page
    peak = rss_mb()
    del blocks[::2]
    allocator.gc.collect()
    before = rss_mb()
    allocator.trim()
    after = rss_mb()
    del blocks
    assert peak - after > 50, (peak, before, after)  # the freed half (~95 MB) is no longer the process's
    # After earlier tests glibc may have served the blocks outside its main heap (when that heap cannot
    # grow in place it maps memory instead), and then free() already gave them back: nothing left to trim.
    if peak - before < 20:
        assert before - after > 50, (before, after)  # about 95 MB of free pages went back


_THRESHOLD_PROBE = """
import ctypes, json, sys
from ui.server import allocator
if sys.argv[1] == "fixed":
    assert allocator.fix_mmap_threshold(1024 * 1024) is True
    assert allocator.fix_mmap_threshold(64 * 1024) is True  # once per process: not set again
libc = allocator._libc()
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
libc.free(libc.malloc(4 * 1024 * 1024))  # glibc's default threshold rises to the size of a freed mapped block
before = allocator.malloc_mb()["mapped"]
block = libc.malloc(2 * 1024 * 1024)  # above the fixed threshold, below the risen one
during = allocator.malloc_mb()["mapped"]
libc.free(block)
print(json.dumps([before, during, allocator.malloc_mb()["mapped"]]))
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt(M_MMAP_THRESHOLD) and mallinfo2 are glibc's")
@pytest.mark.parametrize("mode", ["default", "fixed"])
def test_a_fixed_mmap_threshold_keeps_big_blocks_out_of_the_heap(mode):
    """With glibc's default, a freed 4 MiB block raises the threshold and a later 2 MiB block lands in
    the heap (where, freed, it stays); with the fixed threshold it gets its own mapping, gone when freed.
    In a fresh process: the threshold is process-wide and set once."""
    import json
    import subprocess
    import sys

    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("MALLOC_")}
    out = subprocess.run([sys.executable, "-c", _THRESHOLD_PROBE, mode], cwd=allocator.__file__.rsplit("/ui/", 1)[0],
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    before, during, after = json.loads(out.stdout.strip().splitlines()[-1])
    if mode == "fixed":
        assert during - before >= 2 and abs(after - before) < 0.5, (before, during, after)
    else:
        assert during - before < 0.5, (before, during, after)  # the default: in the heap


def test_the_cluster_and_the_image_set_the_same_threshold_from_the_first_allocation():
    from pathlib import Path

    from deploy import cluster

    root = Path(allocator.__file__).resolve().parents[2]
    assert int(cluster.MMAP_THRESHOLD) == allocator.MMAP_THRESHOLD
    assert f"MALLOC_MMAP_THRESHOLD_={allocator.MMAP_THRESHOLD}" in (root / "Dockerfile").read_text()


def test_an_operators_threshold_in_the_environment_is_kept(monkeypatch):
    monkeypatch.setattr(allocator, "_THRESHOLD", [])
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "33554432")
    calls = []
    monkeypatch.setattr(allocator, "_libc", lambda: type("Libc", (), {"mallopt": lambda *a: calls.append(a) or 1})())
    assert allocator.fix_mmap_threshold() is True and calls == []
