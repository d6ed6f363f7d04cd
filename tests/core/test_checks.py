"""The check registry: arguments are checked, answers graded by values core computes."""

from __future__ import annotations

import math

import numpy as np
import pytest

from core import checks as C


def test_scalar_weight_is_the_softmax_of_q_times_k():
    scores = np.array([0.2, 0.4, 1.0])  # q = 2 times the keys 0.1, 0.2, 0.5
    weights = np.exp(scores) / np.exp(scores).sum()
    for key in (1, 2, 3):
        assert math.isclose(C.solve("scalar_weight", {"key": key}).right, weights[key - 1], rel_tol=1e-9)
    assert C.solve("scalar_weight", {"key": 3}).right > C.solve("scalar_weight", {"key": 3, "d_k": 4}).right


def test_mask_measures_match_graph_facts():
    assert math.isclose(C.solve("mask_measure", {"preset": "full", "n": 7, "measure": "lambda_2"}).right, 7)
    assert C.solve("mask_measure", {"preset": "block", "n": 8, "b": 4, "measure": "lambda_2"}).right == 0
    assert C.solve("mask_measure", {"preset": "sliding", "n": 9, "w": 1, "measure": "layers_to_reach_all"}).right == 8


def test_unknown_kinds_and_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="unknown check kind"):
        C.grade("eval", {}, "1")
    with pytest.raises(ValueError, match="needs the argument 'key'"):
        C.solve("scalar_weight", {})
    with pytest.raises(ValueError, match="must be int"):
        C.solve("scalar_weight", {"key": True})
    with pytest.raises(ValueError, match="reads what the student set"):
        C.solve("mask_lambda2", {"target": 0.0})


def test_the_students_own_mask_is_judged():
    goal = {"target": 0.0}
    split = C.Context(state={"input": "a b c d e f", "preset": "block", "b": "3"})
    joined = C.Context(state={"input": "a b c d e f", "preset": "sliding", "w": "1"})
    assert C.grade("mask_lambda2", goal, ctx=split).ok
    verdict = C.grade("mask_lambda2", goal, ctx=joined)
    assert not verdict.ok and "connected" in verdict.why
    formula = C.Context(state={"input": "a b c d", "preset": "formula", "formula": "__import__('os')"})
    assert not C.grade("mask_lambda2", goal, ctx=formula).ok  # a hostile formula is refused, not run


def test_param_checks_read_the_state_and_survive_junk():
    assert C.grade("param_in_range", {"param": "temp", "lo": 0.0, "hi": 0.25}, ctx=C.Context(state={"temp": "0.2"})).ok
    assert not C.grade("param_in_range", {"param": "temp", "lo": 0.0, "hi": 0.25},
                       ctx=C.Context(state={"temp": "nan!"})).ok
    assert not C.grade("param_is", {"param": "model", "values": ["a"]}, ctx=C.Context(state={})).ok


def test_a_pick_accepts_every_near_tie_and_nothing_else():
    sol = C.solve("head_with_role", {"model": "induction-rope", "role": "induction"})
    assert sol.right and all(C.grade("head_with_role", {"model": "induction-rope", "role": "induction"}, r).ok
                             for r in sol.right)
    others = [o for o in sol.options if o not in sol.right]
    assert others and not C.grade("head_with_role", {"model": "induction-rope", "role": "induction"}, others[0]).ok
