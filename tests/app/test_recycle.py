"""ui.server.recycle: behind `deploy/cluster.py --recycle-idle` an idle server with no tab connected stops itself
so that the cluster starts it afresh, one server of the cluster at a time; anywhere else it never does."""

from __future__ import annotations

import os

from ui.server import recycle


def test_without_the_cluster_a_server_never_recycles(monkeypatch):
    monkeypatch.delenv(recycle.MARKER_ENV, raising=False)
    stopped = []
    assert not recycle.enabled()
    assert not recycle.recycle_if_idle(lambda: 0, grace=0, stop=lambda: stopped.append(1))
    assert not stopped


def test_an_idle_server_takes_the_marker_and_stops_and_a_second_waits_its_turn(monkeypatch, tmp_path):
    marker = tmp_path / "recycling"
    monkeypatch.setenv(recycle.MARKER_ENV, str(marker))
    stopped = []
    assert recycle.enabled()
    assert not recycle.recycle_if_idle(lambda: 1, grace=0, stop=lambda: stopped.append("open tab"))  # a tab connected
    assert not recycle.recycle_if_idle(lambda: None, grace=0, stop=lambda: stopped.append("unknown"))  # cannot tell
    assert not marker.exists() and not stopped
    assert recycle.recycle_if_idle(lambda: 0, grace=0, stop=lambda: stopped.append("first"))
    assert stopped == ["first"] and marker.read_text().strip() == str(os.getpid())
    # another server of the cluster, idle too, while the first restarts: it waits (asked again later)
    assert not recycle.recycle_if_idle(lambda: 0, grace=0, stop=lambda: stopped.append("second"))
    assert stopped == ["first"]
    marker.unlink()  # the supervisor, once the first answers again
    assert recycle.recycle_if_idle(lambda: 0, grace=0, stop=lambda: stopped.append("second"))
    assert stopped == ["first", "second"]


def test_a_marker_that_cannot_be_written_is_logged_not_raised(monkeypatch, tmp_path):
    monkeypatch.setenv(recycle.MARKER_ENV, str(tmp_path / "missing" / "recycling"))
    assert not recycle.recycle_if_idle(lambda: 0, grace=0, stop=lambda: (_ for _ in ()).throw(AssertionError("stopped")))


def test_a_tab_reconnecting_during_a_page_load_is_not_a_server_without_tabs(monkeypatch, tmp_path):
    """A full page load closes the old connection a moment before the new one opens: one check with no tab must not
    stop the server; only no tab on checks `grace` seconds apart does, and a tab in between starts the count again."""
    monkeypatch.setenv(recycle.MARKER_ENV, str(tmp_path / "recycling"))
    now = [100.0]
    clock = recycle.NoTabClock(now=lambda: now[0])
    stopped = []

    def ask(tabs: int) -> bool:
        return recycle.recycle_if_idle(lambda: tabs, stop=lambda: stopped.append(now[0]), grace=5.0, clock=clock)

    assert not ask(0)  # the moment between two pages' connections
    now[0] += 1.0
    assert not ask(1)  # the new page connected
    now[0] += 6.0
    assert not ask(0)  # no tab again: a new stretch starts here
    now[0] += 4.0
    assert not ask(0) and not stopped  # 4 s of it, under the grace
    now[0] += 1.5
    assert ask(0) and stopped == [now[0]]  # 5.5 s without a tab: it stops
