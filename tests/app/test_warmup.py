"""The start-up warm-up (ui.server.warmup): it computes what a default visit asks for, once per process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest

from tests.app.conftest import ROOT, app_at, assert_ok
from ui.server import warmup


@pytest.mark.parametrize("page", ["masks", "depth", "positions", "cost"])
def test_the_warmup_computes_exactly_what_a_default_visit_asks_for(page):
    wanted = warmup.page_results(page)
    assert wanted
    for memo_, _ in wanted:
        memo_.clear()
    at = app_at(f"pages/{page}.py")
    assert_ok(at)
    missing = [(m.__name__, args) for m, args in wanted if not m.has(*args)]
    assert not missing, f"the warm-up would compute results the page never asks for: {missing}"


def test_start_runs_the_tasks_once_per_process_in_one_background_thread(monkeypatch):
    calls, done = [], threading.Event()

    def task():
        calls.append(threading.current_thread().name)
        done.set()

    monkeypatch.setattr(warmup, "TASKS", (("test task", task),))
    monkeypatch.setattr(warmup, "_STATE", {"thread": None, "done": []})
    monkeypatch.setenv("GLASSBOX_WARMUP", "1")
    assert warmup.start() is True
    assert warmup.start() is False  # the second call (every later run of app.py) starts nothing
    assert done.wait(10)
    warmup._STATE["thread"].join(10)
    assert calls == ["glassbox-warmup"]
    assert warmup.finished("test task")


def test_a_failing_task_is_logged_and_the_others_still_run(monkeypatch, caplog):
    ran = []

    def broken():
        raise RuntimeError("model file missing")

    monkeypatch.setattr(warmup, "TASKS", (("broken", broken), ("fine", lambda: ran.append(1))))
    monkeypatch.setattr(warmup, "_STATE", {"thread": None, "done": []})
    finished = warmup.run_all()
    assert [name for name, _ in finished] == ["fine"] and ran == [1]
    assert "broken" in caplog.text


def test_the_warmup_can_be_switched_off(monkeypatch):
    monkeypatch.setattr(warmup, "_STATE", {"thread": None, "done": []})
    monkeypatch.setenv("GLASSBOX_WARMUP", "0")
    assert warmup.start() is False and warmup._STATE["thread"] is None


def test_the_app_does_not_start_the_warmup_under_apptest(monkeypatch):
    monkeypatch.setattr(warmup, "_STATE", {"thread": None, "done": []})
    at = app_at()
    assert_ok(at)
    assert warmup._STATE["thread"] is None


# In a fresh interpreter (this one has imported everything already): the warm-up's imports, then every
# page with a model, and the library modules that still appeared.
FIRST_DRAW = """
import json
import sys
from tests.app.conftest import page_at
from ui.server import warmup
warmup.page_modules()
before = set(sys.modules)
for page, model in [("masks", "induction-rope"), ("retrieval", "recall-tied"), ("cost", "sort-decoder"),
                    ("heads", "reverse-encdec"), ("positions", "induction-learned"), ("generation", "sort-encdec")]:
    at = page_at(f"pages/{page}.py", {"model": model})
    assert not at.exception, [e.value for e in at.exception]
print(json.dumps(sorted(m for m in set(sys.modules) - before if m.split(".")[0] in ("plotly", "jinja2", "pandas", "orjson"))))
"""


def test_after_the_warmup_a_first_page_draw_imports_no_plotly_or_styler_modules():
    """A student's first page would otherwise import them under the interpreter lock while others wait."""
    run = subprocess.run([sys.executable, "-c", FIRST_DRAW], cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "GLASSBOX_WARMUP": "0"})
    assert run.returncode == 0, run.stderr[-3000:]
    imported = json.loads(run.stdout.strip().splitlines()[-1])
    assert [m for m in imported if m != "plotly.graph_objs._deprecations"] == [], imported


def test_when_the_class_has_left_its_results_are_forgotten_and_the_warmup_runs_again(monkeypatch):
    from ui.shell import memo as memo_module
    from ui.shell import precomputed

    student = memo_module.memo(maxsize=8)(lambda x: [x] * 3)  # a student's own result
    models = memo_module.memo(maxsize=8, keep_when_idle=True)(lambda name: f"model {name}")
    student(1), student(2), models("a")
    ran, forgot_decoded = [], []
    monkeypatch.setattr(warmup, "TASKS", (("defaults", lambda: ran.append(1)),))
    monkeypatch.setattr(warmup, "_STATE", {"thread": None, "done": []})
    monkeypatch.setattr(precomputed, "forget_decoded", lambda: forgot_decoded.append(1))
    monkeypatch.setenv("GLASSBOX_WARMUP", "1")

    for open_tabs in (1, None):  # a tab still open (or no way to tell): nothing is forgotten
        assert warmup.start_afresh(lambda: open_tabs) is False
        assert len(student) == 2 and len(models) == 1 and not ran and not forgot_decoded
    assert warmup.start_afresh(lambda: 0) is True
    assert len(student) == 0 and student.bytes == 0  # forgotten; asking again computes it
    assert len(models) == 1  # the loaded models stay
    assert ran == [1] and forgot_decoded == [1]  # warmed up again, as a fresh server
    assert student(1) == [1, 1, 1]
    assert warmup.start_afresh(lambda: 0) is True and ran == [1, 1]  # the next class that left
    assert warmup._STATE["done"] == ["defaults"]  # each task listed once, however many classes came and went
