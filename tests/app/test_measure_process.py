"""ui.server.measure_process: measurements run in a worker process with its own interpreter lock; progress
comes back to the caller's thread; errors come back as they were raised; a dead worker falls back to
measuring in the server; stop() ends the worker and the next measurement starts a new one."""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest

import ui
from core.analysis import cost as A
from ui.server import measure_process as MP


def where(progress=None) -> int:
    """The process it ran in, after reporting two steps."""
    if progress is not None:
        progress(0.5, "half")
        progress(1.0, "done")
    return os.getpid()


def refuse(progress=None):
    raise ValueError("n must be at least 2")


def die_unless_in(parent: int, progress=None) -> str:
    if os.getpid() != parent:
        os._exit(3)  # the worker dies as a crash would end it
    return "measured in the server"


@pytest.fixture
def worker(monkeypatch):
    monkeypatch.setattr(ui, "under_apptest", lambda: False)  # an earlier AppTest may leave its mock runtime
    monkeypatch.delenv("GLASSBOX_MEASURE_PROCESS", raising=False)
    MP.stop()
    yield
    MP.stop()


def test_a_measurement_runs_in_another_process_and_reports_progress_here(worker):
    seen = []
    pid = MP.measure(where, progress=lambda f, text: seen.append((f, text, threading.get_ident())))
    assert pid != os.getpid() and MP.running()
    assert [(f, t) for f, t, _ in seen] == [(0.5, "half"), (1.0, "done")]
    assert {ident for *_, ident in seen} == {threading.get_ident()}  # the caller's thread draws the bar
    assert MP.measure(where) == pid  # the same worker, started once


def test_a_real_sweep_in_the_worker_matches_the_shape_of_one_in_process(worker):
    setting = A.Setting(ns=(32, 64), repeats=1)
    there = MP.measure(A.time_sweep, setting)
    here = A.time_sweep(setting)
    assert there["ns"] == here["ns"] == [32, 64]
    assert set(there["ms"]) == set(here["ms"]) and all(len(v) == 2 and min(v) > 0 for v in there["ms"].values())


def test_errors_come_back_as_raised(worker):
    with pytest.raises(ValueError, match="at least 2"):
        MP.measure(refuse)
    assert MP.measure(where) != os.getpid()  # the worker survived it


def test_a_dead_worker_falls_back_to_the_server_and_the_next_one_starts_afresh(worker):
    assert MP.measure(die_unless_in, os.getpid()) == "measured in the server"
    assert not MP.running()
    assert MP.measure(where) != os.getpid()


def test_stop_ends_the_worker(worker):
    first = MP.measure(where)
    assert MP.stop() and not MP.running() and not MP.stop()
    assert MP.measure(where) not in (first, os.getpid())


def test_switched_off_it_measures_in_the_server(worker, monkeypatch):
    monkeypatch.setenv("GLASSBOX_MEASURE_PROCESS", "0")
    assert MP.measure(where) == os.getpid() and not MP.running()


def test_under_apptest_it_measures_in_the_server(monkeypatch):
    monkeypatch.setattr(ui, "under_apptest", lambda: True)
    assert MP.measure(where) == os.getpid()


def test_keyword_arguments_and_a_function_without_progress(worker):
    from core.analysis import masks as MA
    from ui.masks import runs as masks_runs

    rows = MP.measure(MA.time_attention, ns=(16, 32), b=8, repeats=1, seed=0)
    assert [r["n"] for r in rows] == [16, 32] and all(r["dense ms"] > 0 for r in rows)
    assert masks_runs.measure_process is MP  # the Masks timing goes through it


def test_a_bundled_model_is_timed_in_the_worker(worker):
    from ui.generation import runs as G

    timed = MP.measure(G.measure_timings, "sort-decoder", "cpu", 6, 6, 3, 1)
    assert set(timed) == {"with cache", "without cache"}
    assert all(len(ms) == 3 and (ms > 0).all() for ms in timed.values())  # one time per decoding step


class Stopped(Exception):
    """What Streamlit raises from an element call when the run is to stop."""


def slow_count(n: int, progress=None) -> int:
    for i in range(n):
        if progress is not None:
            progress(i / n, f"step {i}")
    return n


def test_a_run_stopped_during_a_measurement_leaves_no_answer_for_the_next(worker):
    def stop_at_once(fraction, text):
        raise Stopped()

    with pytest.raises(Stopped):
        MP.measure(slow_count, 50, progress=stop_at_once)
    assert not MP.running()  # killed: its pending answer cannot reach the next caller
    assert MP.measure(slow_count, 7) == 7
    assert MP.measure(where) != os.getpid()


def test_depth_stacks_and_tiny_decoders_go_through_the_worker(worker):
    """The Depth page's random stacks and the Generation page's tiny decoders: the same results as
    built here (both are seeded), from the worker."""
    from core.analysis import depth as D
    from ui.generation import runs as G

    there = MP.measure(D.depth_profile, "pre-LN", 4, 1.0, 3, 4, 0.5)
    here = D.depth_profile("pre-LN", 4, 1.0, 3, 4, 0.5)
    assert np.array_equal(there.resid_grad, here.resid_grad)
    trained = MP.measure(G.train_tiny_decoders, 1, 3)
    assert set(trained) == {"causal", "full"} and all(len(v["losses"]) == 3 for v in trained.values())


def nap(seconds: float, progress=None) -> int:
    """A measurement that takes `seconds` in the worker; returns the worker's process id."""
    time.sleep(seconds)
    return os.getpid()


def in_thread(fn, *args, **kwargs) -> tuple[threading.Thread, list]:
    """Run fn in a thread of its own (a session of its own, to the scheduler); its result or error lands in the list."""
    out: list = []

    def run():
        try:
            out.append(fn(*args, **kwargs))
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            out.append(exc)
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def wait_until(condition, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_a_queued_measurement_says_it_is_waiting(worker):
    """While another student's measurement holds the worker, the progress bar says so."""
    seen = []
    holder, _ = in_thread(MP.measure, nap, 1.5)
    wait_until(lambda: MP._TURNS._running is not None)
    caller, answer = in_thread(MP.measure, where, progress=lambda f, t: seen.append(t))
    wait_until(lambda: bool(seen))
    assert seen[0] == MP.WAITING and not answer  # told, and still queued
    caller.join(timeout=60)
    holder.join(timeout=60)
    assert answer and answer[0] != os.getpid() and seen[-2:] == ["half", "done"]


def test_a_student_who_rarely_measures_goes_before_three_who_flood(worker, monkeypatch):
    """Three sessions measuring back to back; a fourth that has not measured lately is served as soon as the
    measurement running when it asked is done, not after the others' queued ones."""
    stop = threading.Event()
    done = [0, 0, 0]  # measurements each flooder got back

    def flood(i):
        while not stop.is_set():
            MP.measure(nap, 0.2)
            done[i] += 1
    flooders = [in_thread(flood, i) for i in range(3)]
    try:
        # every flooder has had a turn, so each has a recent last turn. (Counting MP._TURNS.served is not enough:
        # it keeps earlier tests' turns, and a flooder still waiting for its first turn counts as never served,
        # like the fourth session, and rightly goes before it, having asked first.)
        wait_until(lambda: min(done) >= 1)
        asked, victim_local, real_clock = [], threading.local(), MP._TURNS.clock

        def clock():  # the scheduler reads the clock under its lock as a ticket joins the queue: count then
            if getattr(victim_local, "asking", False) and not asked:
                asked.append(len(MP._TURNS.served))
            return real_clock()
        monkeypatch.setattr(MP._TURNS, "clock", clock)

        def ask():
            victim_local.asking = True
            return MP.measure(nap, 0.2)
        victim, answer = in_thread(ask)
        victim.join(timeout=60)
        assert answer and isinstance(answer[0], int)
        served = MP._TURNS.served
        mine = len(served) - 1 - served[::-1].index(f"thread-{victim.ident}")
        assert mine - asked[0] <= 1, f"{mine - asked[0]} flooders' measurements went first"
    finally:
        stop.set()
        for thread, out in flooders:
            thread.join(timeout=60)
            assert not [o for o in out if isinstance(o, BaseException)]


def test_one_session_has_one_measurement_at_a_time(worker, monkeypatch):
    monkeypatch.setattr(MP, "session_id", lambda: "the same student")
    first, _ = in_thread(MP.measure, nap, 1.0)
    wait_until(lambda: MP._TURNS._running == "the same student")
    with pytest.raises(MP.Refused, match="already measuring"):
        MP.measure(where)
    first.join(timeout=60)
    assert MP.measure(where) != os.getpid()  # after it, the next one runs


def test_the_queue_is_bounded_and_a_long_wait_ends_with_a_message(worker, monkeypatch):
    monkeypatch.setattr(MP, "QUEUE_LIMIT", 1)
    monkeypatch.setattr(MP, "WAIT_LIMIT", 0.6)
    holder, _ = in_thread(MP.measure, nap, 3.0)
    wait_until(lambda: MP._TURNS._running is not None)
    waiter, waited = in_thread(MP.measure, where)
    wait_until(lambda: len(MP._TURNS._waiting) == 1)
    with pytest.raises(MP.Refused, match="not queued"):
        MP.measure(where)  # the queue holds one: this is refused at once
    waiter.join(timeout=60)
    assert isinstance(waited[0], MP.Refused) and "given up" in str(waited[0])
    assert not MP._TURNS._waiting  # it left the queue
    holder.join(timeout=60)


def test_a_measurement_past_the_run_limit_is_stopped_with_a_message(worker, monkeypatch):
    MP.measure(where)  # the worker is up (its start, torch's import, is not the measurement's time)
    limit = MP.RUN_LIMIT
    monkeypatch.setattr(MP, "RUN_LIMIT", 0.5)
    with pytest.raises(MP.Refused, match="stopped"):
        MP.measure(nap, 30.0)
    assert not MP.running()
    monkeypatch.setattr(MP, "RUN_LIMIT", limit)
    assert MP.measure(where) != os.getpid()  # a fresh worker serves the next one
