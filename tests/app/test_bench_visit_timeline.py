"""bench/visit_timeline.py's arithmetic: the phases read from a page's records, and the CPU profile cut at the
page's last change and summed by file (the browser part of the bench is run by hand, not here)."""

from __future__ import annotations

import math

from bench.visit_timeline import js_by_file, phases


def record(t, state, title=0, charts=0, drawn=0, busy=0, nodes=10):
    return {"t": t, "state": state, "nodes": nodes, "charts": charts, "drawn": drawn, "busy": busy, "title": title}


def test_phases_read_each_moment_from_the_records():
    log = [record(600, "initial"), record(800, "running"), record(1000, "running", title=1, busy=3),
           record(1500, "notRunning", title=1, charts=2, busy=1), record(1600, "running", title=1, charts=2),
           record(2600, "notRunning", title=1, charts=2, drawn=2)]
    read = {"log": log, "socket": 750.0, "shell": 640.0, "plotly": 1300.0}
    times = phases(read)
    assert times == {"shell": 0.64, "socket": 0.75, "title shown": 1.0, "run ended": 1.5,
                     "Plotly code": 1.3, "last change": 2.6}


def test_a_page_that_did_not_finish_has_no_last_change_even_after_a_finished_moment():
    log = [record(600, "initial"), record(700, "notRunning", title=1), record(900, "running", title=1, charts=1)]
    times = phases({"log": log, "socket": None, "shell": 640.0, "plotly": None})
    assert math.isnan(times["last change"]) and math.isnan(times["run ended"])
    assert math.isnan(times["socket"]) and math.isnan(times["Plotly code"])
    assert times["title shown"] == 0.7


def test_js_by_file_counts_samples_up_to_the_last_change_only():
    nodes = [{"id": 1, "callFrame": {"url": "", "functionName": "(idle)"}},
             {"id": 2, "callFrame": {"url": "http://h/static/js/PlotlyChart.abc.js", "functionName": "draw"}},
             {"id": 3, "callFrame": {"url": "http://h/static/js/index.xyz.js", "functionName": "render"}},
             {"id": 4, "callFrame": {"url": "", "functionName": "(program)"}}]
    # a sample every 1 ms of the profiler's clock (microseconds) after its start at 10,000 us; the profile ends
    # at 20,000 us, which was 3000 ms of the page's clock: sample k (0-based, at 11,000 + 1000 k us) is at
    # 2991 + k ms of the page's clock.
    samples = [3, 3, 2, 2, 2, 4, 1, 2, 2, 2]
    profile = {"nodes": nodes, "startTime": 10_000, "endTime": 20_000, "samples": samples,
               "timeDeltas": [1000] * len(samples)}
    spent = js_by_file(profile, now_ms=3000.0, until_ms=2996.0)  # samples 0-5 (2991-2996 ms) count
    assert spent == {"Streamlit's frontend": 2.0, "Plotly's chunk": 3.0, "(program)": 1.0}
    assert sum(js_by_file(profile, now_ms=3000.0, until_ms=5000.0).values()) == 10.0
