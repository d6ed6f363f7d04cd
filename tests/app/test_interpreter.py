"""The server's interpreter settings: the switch interval app.py sets (ui/server/interpreter.py), and the
sidebar's prediction table computed without torch (each torch call hands the interpreter lock over)."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

from core.tasks import get_task
from ui.server import interpreter
from ui.shell import models
from ui.shell.sidebar import Selection, prediction_table


@pytest.mark.parametrize("text, ms", [(None, interpreter.DEFAULT_MS), ("0.5", 0.5), ("5", 5.0), ("0.05", 0.05),
                                      ("x", interpreter.DEFAULT_MS), ("nan", interpreter.DEFAULT_MS),
                                      ("0", interpreter.DEFAULT_MS), ("-1", interpreter.DEFAULT_MS),
                                      ("1e9", interpreter.DEFAULT_MS), ("inf", interpreter.DEFAULT_MS)])
def test_the_interval_comes_from_the_environment_within_bounds(text, ms):
    environ = {} if text is None else {"GLASSBOX_SWITCH_INTERVAL_MS": text}
    assert interpreter.wanted_interval_s(environ) == pytest.approx(ms / 1000)


def test_share_the_lock_sets_the_interval_once(monkeypatch):
    before = sys.getswitchinterval()
    monkeypatch.setattr(interpreter, "_SET", [])
    monkeypatch.setenv("GLASSBOX_SWITCH_INTERVAL_MS", "0.7")
    try:
        assert interpreter.share_the_lock() == pytest.approx(0.0007, rel=0.01)
        assert sys.getswitchinterval() == pytest.approx(0.0007, rel=0.01)
        monkeypatch.setenv("GLASSBOX_SWITCH_INTERVAL_MS", "3")
        assert interpreter.share_the_lock() == pytest.approx(0.0007, rel=0.01)  # once per process
    finally:
        sys.setswitchinterval(before)


def test_app_sets_the_interval(monkeypatch):
    """app.py's first run sets it (as it sets torch's thread count)."""
    from tests.app.conftest import app_at, assert_ok
    before = sys.getswitchinterval()
    monkeypatch.setattr(interpreter, "_SET", [])
    monkeypatch.delenv("GLASSBOX_SWITCH_INTERVAL_MS", raising=False)
    sys.setswitchinterval(0.005)
    try:
        assert_ok(app_at())
        assert sys.getswitchinterval() == pytest.approx(interpreter.DEFAULT_MS / 1000, rel=0.01)
    finally:
        sys.setswitchinterval(before)


def _selection():
    model, meta = models.get_model("induction-sinusoidal", "cpu")
    task = get_task(meta["task"])
    tokens = [t for t in task.example(model.cfg.arch, seed=3) if t != "<pad>"]
    ids = torch.tensor([task.vocab.encode(tokens)])
    return model, Selection("induction-sinusoidal", model, meta, task, "cpu", tokens, ids,
                            targets=task.label(tokens, model.cfg.arch))


def test_prediction_table_matches_torch_softmax_for_arrays_and_tensors():
    model, sel = _selection()
    with torch.no_grad():
        logits = model(sel.ids)  # [1 pos vocab]
    probs = torch.softmax(logits[0].double(), dim=-1)
    for given in (logits, logits.numpy()):
        rows = prediction_table(sel, given)
        assert rows
        for row in rows:
            p = row["position"]
            top = int(probs[p].argmax())
            assert row["predicted"] == sel.task.vocab.decode([top])[0]
            assert row["p(predicted)"] == pytest.approx(float(probs[p, top]), abs=1e-9)
            assert row["correct"] == (top == sel.targets[p])


def test_prediction_table_stays_finite_for_huge_logits():
    _, sel = _selection()
    logits = np.full((1, len(sel.query_tokens), len(sel.task.vocab)), -1e6, dtype=np.float32)
    logits[0, :, 5] = 1e6  # exp would overflow without the shift
    rows = prediction_table(sel, logits)
    assert rows and all(np.isfinite(r["p(predicted)"]) and r["p(predicted)"] == pytest.approx(1.0) for r in rows)
