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


# --- the Retrieval and Cost pages' numbers --------------------------------------------------------

def test_lookup_beta_is_where_the_best_key_reaches_the_weight():
    from core.analysis import retrieval as R
    solution = C.solve("lookup_beta", {"table": "spread"})
    keys, _ = R.preset_table("spread")
    scores = keys @ R.unit(0.0)
    weight = lambda beta: R.softmax(beta * scores).max()
    assert weight(solution.right * 0.99) < 0.99 <= weight(solution.right * 1.01)  # the crossing, not a copied number
    assert C.grade("lookup_beta", {"table": "spread"}, solution.right).ok
    assert not C.grade("lookup_beta", {"table": "spread"}, solution.right + 1.0).ok
    assert C.solve("lookup_beta", {"table": "spread", "weight": 0.9}).right < solution.right  # a softer goal comes first
    with pytest.raises(ValueError, match="tie"):
        C.solve("lookup_beta", {"table": "tie"})
    with pytest.raises(ValueError, match="table must be one of"):
        C.solve("lookup_beta", {"table": "phone book"})


def test_kernel_width_narrows_like_one_over_root_qnorm():
    widths = [C.solve("kernel_width", {"qnorm": q}).right for q in (30.0, 120.0)]
    assert widths[1] < widths[0] and math.isclose(widths[0] / widths[1], 2.0, rel_tol=0.02)
    predicted = C.solve("kernel_width", {"qnorm": 100.0, "which": "predicted"}).right
    assert math.isclose(predicted, 1 / (math.pi * 10), rel_tol=1e-12)
    right = C.solve("kernel_width", {"qnorm": 100.0}).right
    assert C.grade("kernel_width", {"qnorm": 100.0}, right).ok
    assert not C.grade("kernel_width", {"qnorm": 100.0}, 2 * right).ok
    with pytest.raises(ValueError, match="qnorm.*between 1 and 1,000"):
        C.solve("kernel_width", {"qnorm": 0.0})


@pytest.mark.parametrize("measure", ["attention_gflop", "rnn_gflop", "flop_ratio", "pattern_mib", "chunked_mib",
                                     "memory_ratio", "crossover_n", "rnn_steps", "rnn_path"])
def test_cost_counts_grade_the_computed_value(measure):
    args = {"measure": measure, "n": 2048}
    right = C.solve("cost_count", args).right
    assert right > 0 and C.grade("cost_count", args, right).ok
    assert not C.grade("cost_count", args, right * 1.5 + 1).ok


def test_cost_counts_follow_the_formulas():
    from core.families import SIZE_PRESETS
    d = SIZE_PRESETS["bert-base"].d_model
    assert math.isclose(C.solve("cost_count", {"measure": "crossover_n", "preset": "bert-base"}).right, d, rel_tol=1e-9)
    assert math.isclose(C.solve("cost_count", {"measure": "flop_ratio", "preset": "bert-base", "n": 3 * d}).right, 3.0)
    small, large = (C.solve("cost_count", {"measure": "pattern_mib", "n": n}).right for n in (1024, 2048))
    assert math.isclose(large / small, 4.0)  # quadratic memory
    assert C.solve("cost_count", {"measure": "memory_ratio", "n": 8192}).right > \
        C.solve("cost_count", {"measure": "memory_ratio", "n": 1024}).right > 1  # chunking pays more the longer n
    assert C.solve("cost_count", {"measure": "rnn_path", "n": 100}).right == 99
    with pytest.raises(ValueError, match="measure must be one of"):
        C.solve("cost_count", {"measure": "vibes"})
    with pytest.raises(ValueError, match="preset must be one of"):
        C.solve("cost_count", {"measure": "flop_ratio", "preset": "gpt-9"})


def test_attention_numbers_follow_the_models_shapes():
    from core.checkpoints import load_bundled
    cfg = load_bundled("reverse-encdec")[0].cfg
    args = {"model": "reverse-encdec", "attention": "cross", "tensor": "scores", "len_dec": 3, "len_enc": 5}
    right = C.solve("attention_numbers", args).right
    assert right == cfg.n_heads * 3 * 5  # L_d x L_e per head: not square
    assert C.grade("attention_numbers", args, right).ok
    assert not C.grade("attention_numbers", args, cfg.n_heads * 5 * 5).ok  # the square an encoder would have
    keys = C.solve("attention_numbers", {**args, "tensor": "k"}).right
    assert keys == cfg.n_heads * 5 * cfg.d_head  # keys come from the encoder: L_e rows
    with pytest.raises(ValueError, match="attention must be one of"):
        C.solve("attention_numbers", {**args, "attention": "sideways"})
