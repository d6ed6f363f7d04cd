"""The Heads page's cached work (ui.heads.runs): the same results as the analysis, computed once,
shared read-only."""

from __future__ import annotations

import numpy as np
import pytest

from core.analysis.heads.ablation import ablate_each, kinds_by_key
from core.analysis.heads.circuits import qk_circuit
from core.analysis.heads.cost import head_counts
from core.analysis.heads.subspaces import subspace_report
from core.analysis.heads.toy import ToyReport
from core.tasks import get_task
from ui.heads import runs as R
from ui.shell.memo import freeze
from ui.shell import models

MODEL = "induction-sinusoidal"


@pytest.fixture(scope="module")
def model():
    return models.get_model(MODEL, "cpu")[0]


def test_subspaces_match_the_analysis_and_are_shared_read_only(model):
    kind = kinds_by_key(model)["self"]
    rep = R.subspaces(MODEL, "cpu", "self", 1, "W_Q", "min")
    direct = subspace_report(model, kind, 1, "W_Q", "min")
    np.testing.assert_array_equal(rep.angles, direct.angles)
    np.testing.assert_array_equal(rep.gram_normalised, direct.gram_normalised)
    assert rep.joint_rank == direct.joint_rank
    assert R.subspaces(MODEL, "cpu", "self", 1, "W_Q", "min") is rep  # one computation for every session
    for arr in (rep.angles, rep.gram, rep.gram_normalised, rep.eff_rank, rep.all_angles[0][1]):
        assert not arr.flags.writeable
    with pytest.raises(ValueError):
        rep.angles[0, 0] = 1.0


def test_circuits_are_frozen_and_keyed_on_labels(model):
    labels = tuple(get_task(models.get_model(MODEL, "cpu")[1]["task"]).vocab.tokens[:model.cfg.vocab_size])
    qk, ov = R.circuits(MODEL, "cpu", "self", 1, 2, labels, labels, labels)
    kind = kinds_by_key(model)["self"]
    np.testing.assert_allclose(qk.table, qk_circuit(model, kind, 1, 2, labels, labels).table)
    assert ov is not None and not ov.table.flags.writeable and not qk.singular_values.flags.writeable
    assert R.circuits(MODEL, "cpu", "self", 1, 2, labels, labels, labels)[0] is qk


def test_ranking_is_an_immutable_sequence_equal_to_ablate_each(model):
    task_name = models.get_model(MODEL, "cpu")[1]["task"]
    task = get_task(task_name)
    ranking = R.ranking(MODEL, "cpu", task_name, "zero")
    assert isinstance(ranking, tuple)
    direct = ablate_each(model, task, R.ablation_batch(task, model.cfg.arch), "zero")
    # The same heads in the same order with the same losses, up to float rounding: the ranking may come from the
    # results shipped with the app, computed on another CPU (whose kernels round the last bits differently).
    assert [(r["layer"], r["index"]) for r in ranking] == [(r["layer"], r["index"]) for r in direct]
    assert [r["loss"] for r in ranking] == pytest.approx([r["loss"] for r in direct], rel=1e-5)
    base = R.ablation(MODEL, "cpu", task_name, (), "zero")
    assert R.ablation(MODEL, "cpu", task_name, (), "zero") is base


def test_freeze_reaches_into_dataclasses_lists_and_dicts():
    report = ToyReport(accuracy=0.5, letter_attention=np.zeros(2), digit_attention=np.zeros(2),
                         block_share=np.zeros((2, 3)), qk_forms=np.zeros((2, 10, 10)), example_tokens=["a1"],
                         example_pattern=np.zeros((2, 6, 6)))
    nested = {"a": [report, np.ones(3)]}
    assert freeze(nested) is nested
    assert not report.qk_forms.flags.writeable and not report.example_pattern.flags.writeable
    assert not nested["a"][1].flags.writeable


def test_head_costs_measure_once_per_width_and_length_whatever_the_input_length(monkeypatch):
    calls = []

    def counting(d_model, n):
        calls.append((d_model, n))
        return tuple(1000 * h for h in range(1, len(head_counts(d_model)) + 1))

    monkeypatch.setattr(R, "measured_peaks", counting)
    R.head_peaks.clear()
    try:
        short = R.head_costs(24, 10, 96)
        long = R.head_costs(24, 1000, 96)
        assert calls == [(24, 96)]  # a new input length re-counts, it does not re-measure
        assert short[0]["MFLOP"] < long[0]["MFLOP"]
        assert [r["peak MiB at the measured n (measured)"] for r in long] == \
            [1000 * h / 2 ** 20 for h in range(1, len(long) + 1)]
        R.head_costs(24, 10, 128)
        assert calls == [(24, 96), (24, 128)]  # a new measured length measures
    finally:
        R.head_peaks.clear()
