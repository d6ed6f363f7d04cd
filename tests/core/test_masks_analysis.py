"""Right vs wrong masking, leak through finite mask constants, sparse-attention timing, and a
model under a mask (accuracy, influence), plus the Masks page's figure builders."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from core import masks as M
from core.analysis import masks as A
from core.figures import masks as F
from core.model import Transformer, TransformerConfig
from core.tasks import get_task

# ---------------------------------------------------------------------------------------------
# Right vs wrong masking
# ---------------------------------------------------------------------------------------------


def _scores(n: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(n, n, generator=torch.Generator().manual_seed(seed)) * 3  # [q k]


def test_wrong_masking_rows_do_not_sum_to_one():
    mask = M.causal(8)
    both = A.compare_masking(np.zeros((8, 8), dtype=np.float32), mask.numpy())
    np.testing.assert_allclose(both["right_sums"], 1.0, atol=1e-6)
    # Equal scores: the wrong way leaves row i with the (i + 1) / 8 its allowed keys had before masking.
    np.testing.assert_allclose(both["wrong_sums"], np.arange(1, 9) / 8, atol=1e-6)
    random = A.compare_masking(_scores(8).numpy(), mask.numpy())
    assert np.all(random["wrong_sums"][:-1] < 1) and random["wrong_sums"][-1] == pytest.approx(1.0, abs=1e-6)
    assert np.all(both["right"][~mask.numpy()] == 0) and np.all(both["wrong"][~mask.numpy()] == 0)


def test_wrong_masking_keeps_the_ratios_but_not_the_scale():
    s, mask = _scores(6, 1), M.sliding_window(6, 1)
    both = A.compare_masking(s.numpy(), mask.numpy())
    scale = both["wrong"].sum(-1, keepdims=True)  # the wrong rows are the right rows times their sum
    np.testing.assert_allclose(both["wrong"], both["right"] * scale, atol=1e-6)


def test_fully_masked_row_gives_zeros_in_the_right_pattern():
    mask = M.causal(5).clone()
    mask[2] = False
    both = A.compare_masking(_scores(5).numpy(), mask.numpy())
    assert both["right_sums"][2] == 0 and not np.isnan(both["right"]).any()


def test_right_masking_matches_the_models_own_pattern():
    torch.manual_seed(0)
    model = Transformer(TransformerConfig(arch="encoder", vocab_size=12, d_model=16, n_heads=2, n_layers=1,
                                          max_len=16)).eval()
    mask = M.sliding_window(7, 2)
    _, cache = model.run_with_cache(torch.randint(0, 12, (1, 7)), ["blocks.0.attn.hook_attn_scores",
                                                                  "blocks.0.attn.hook_pattern"], mask=mask)
    for h in range(2):
        both = A.compare_masking(cache["blocks.0.attn.hook_attn_scores"][0, h].numpy(), mask.numpy())
        np.testing.assert_allclose(both["right"], cache["blocks.0.attn.hook_pattern"][0, h].numpy(), atol=1e-6)


# ---------------------------------------------------------------------------------------------
# Leak through a finite constant
# ---------------------------------------------------------------------------------------------


def test_constants_as_stored():
    assert A.constant_in_dtype(-1e9, torch.float16) == -math.inf
    assert A.constant_in_dtype(-1e4, torch.float16) == -1e4
    assert A.constant_in_dtype(-1e9, torch.float32) == -1e9


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_minus_1e4_leaks_when_the_gap_reaches_it_and_minus_inf_never(dtype):
    scores, mask = A.gap_row(1e4, 7)
    # s + C = 0 for every blocked key: 7 blocked keys share 7/8 of the mass with the allowed one.
    assert float(A.leak_mass(scores, mask, -1e4, dtype)) == pytest.approx(7 / 8, rel=1e-3)
    assert float(A.leak_mass(scores, mask, float("-inf"), dtype)) == 0.0
    assert float(A.leak_mass(scores, mask, -1e9, dtype)) == 0.0


def test_leak_follows_the_closed_form_in_float32():
    k = 5
    for margin in (3.0, 6.0, 10.0):
        scores, mask = A.gap_row(1e4 - margin, k)
        expected = k * math.exp(-margin) / (1 + k * math.exp(-margin))
        assert float(A.leak_mass(scores, mask, -1e4, torch.float32)) == pytest.approx(expected, rel=1e-4)


def test_float16_cannot_resolve_the_same_gap():
    # 9997 is not a float16 number (spacing 8 near 1e4): the leak differs from the exact answer.
    scores, mask = A.gap_row(1e4 - 3, 5)
    exact = 5 * math.exp(-3) / (1 + 5 * math.exp(-3))
    assert abs(float(A.leak_mass(scores, mask, -1e4, torch.float16)) - exact) > 0.05


def test_min_constant_is_exactly_at_the_tolerance():
    for gap, k, eps in ((0.0, 1, 1e-7), (20.0, 9, 1e-3), (300.0, 31, 1e-9)):
        c = A.min_constant(gap, k, eps)
        leak = float(A.leak_mass(*A.gap_row(gap, k), -c, torch.float64))
        assert leak == pytest.approx(eps, rel=1e-6)
        assert float(A.leak_mass(*A.gap_row(gap, k), -(c + 1), torch.float64)) < eps
    with pytest.raises(ValueError):
        A.min_constant(1.0, 1, 0.0)


def test_leak_table_rows():
    rows = A.leak_table(2e4, 7, 1e-7)
    assert len(rows) == 6
    by = {(r["dtype"], r["constant"]): r for r in rows}
    verdict = "within eps = 1e-07?"
    assert by[("float32", "-1e4")][verdict].startswith("no")
    assert by[("float16", "-1e4")]["leaked mass"] > 0.99
    assert by[("float32", "-1e9")]["leaked mass"] == 0.0 and by[("float32", "-1e9")][verdict] == "yes"
    assert by[("float16", "-1e9")]["stored as"] == -math.inf
    assert by[("float32", "-inf")]["row with every key masked"].startswith("NaN")
    assert "all of it leaks" in by[("float32", "-1e4")]["row with every key masked"]
    # Beyond float16's largest number the logit itself overflows to inf: NaN, and the table says so.
    big = {(r["dtype"], r["constant"]): r for r in A.leak_table(1e5, 3, 1e-7)}
    assert math.isnan(big[("float16", "-inf")]["leaked mass"])
    assert "overflows" in big[("float16", "-inf")][verdict]
    assert big[("float32", "-1e4")]["leaked mass"] == pytest.approx(1.0)


def test_leak_curve_is_a_step_near_the_constant():
    gaps = [1.0, 100.0, 9_900.0, 10_100.0, 50_000.0]
    curve = A.leak_curve(gaps, 3, -1e4, torch.float32)
    assert curve[0] == 0 and curve[1] == 0 and curve[2] < 1e-30 and curve[3] > 0.99
    assert np.all(A.leak_curve(gaps, 3, float("-inf"), torch.float16) == 0)


# ---------------------------------------------------------------------------------------------
# Cost: dense vs block-sparse
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n,b", [(8, 2), (12, 4), (16, 16)])
def test_block_sparse_equals_dense_with_a_block_mask(n, b):
    g = torch.Generator().manual_seed(n + b)
    q, k, v = (torch.randn(3, n, 5, generator=g) for _ in range(3))  # [head n d]
    scores = q @ k.transpose(-2, -1) / math.sqrt(5)  # [head n n]
    reference = A.softmax_add_constant(scores, M.block_diagonal(n, b)) @ v  # [head n d]
    torch.testing.assert_close(A.block_sparse_attention(q, k, v, b), reference, atol=1e-5, rtol=1e-5)
    if b == n:
        torch.testing.assert_close(A.dense_attention(q, k, v), reference, atol=1e-5, rtol=1e-5)


def test_block_sparse_needs_b_to_divide_n():
    q = torch.zeros(1, 10, 4)
    with pytest.raises(ValueError, match="divide"):
        A.block_sparse_attention(q, q, q, 4)


def test_timing_rows_are_well_formed_and_threads_are_restored():
    threads = torch.get_num_threads()
    rows = A.time_attention(ns=(32, 64), b=16, repeats=1)
    assert torch.get_num_threads() == threads
    assert [r["n"] for r in rows] == [32, 64]
    for r in rows:
        assert r["dense ms"] > 0 and r["block-sparse ms"] > 0
        assert r["measured ratio"] == pytest.approx(r["block-sparse ms"] / r["dense ms"])
        assert r["predicted ratio b/n"] == 16 / r["n"]
        assert r["dense pairs"] == r["n"] ** 2 and r["block-sparse pairs"] == r["n"] * 16
    with pytest.raises(ValueError):
        A.time_attention(ns=(8,), b=16)


# ---------------------------------------------------------------------------------------------
# A model under a mask
# ---------------------------------------------------------------------------------------------


def _model(arch: str, vocab: int = 20, layers: int = 2) -> Transformer:
    torch.manual_seed(1)
    cfg = TransformerConfig(arch=arch, vocab_size=vocab, d_model=32, n_heads=4, n_layers=layers, max_len=40)
    return Transformer(cfg).eval()


def test_mask_argument_shapes():
    one = A.mask_argument(np.ones((4, 4), dtype=bool))
    assert isinstance(one, torch.Tensor) and one.dtype == torch.bool
    per = A.mask_argument(np.stack([np.eye(4, dtype=bool), np.ones((4, 4), dtype=bool)]))
    assert sorted(per) == [0, 1] and per[0].dtype == torch.bool and bool(per[1].all())


@pytest.mark.parametrize("arch", ["decoder", "encoder", "encoder-decoder"])
def test_influence_is_zero_exactly_where_the_stacked_masks_give_no_route(arch):
    model = _model(arch)
    n = 10
    ids = torch.randint(0, 20, (1, n), generator=torch.Generator().manual_seed(2))
    tgt = torch.randint(0, 20, (1, n), generator=torch.Generator().manual_seed(3)) if arch == "encoder-decoder" else None
    per_layer = [M.sliding_window(n, 1), M.block_diagonal(n, 5)]
    measured = A.influence(model, ids, {0: per_layer[0], 1: per_layer[1]}, tgt)
    reach = M.reachability(per_layer).numpy()
    assert measured.shape == (n, n)
    assert np.all(measured[~reach] == 0)
    assert np.all(measured[reach] > 0)


def test_influence_of_a_decoder_never_looks_ahead():
    measured = A.influence(_model("decoder"), torch.arange(8)[None])
    assert np.all(np.triu(measured, 1) == 0) and np.all(measured[np.tril_indices(8)] > 0)


def test_length_for_width():
    task = get_task("future-legality")
    assert A.length_for_width(task, "encoder", 10) == 8  # <bos> 8 digits rule
    assert A.length_for_width(task, "encoder", 2) is None  # needs at least one digit


def test_masked_accuracy_default_equals_explicit_default_and_a_mask_changes_it():
    task = get_task("future-legality")
    model = _model("decoder", vocab=len(task.vocab))
    default = A.masked_accuracy(model, task, None, n_samples=64, seed=3, length=6)
    explicit = A.masked_accuracy(model, task, M.causal(8), n_samples=64, seed=3, length=6)
    other = A.masked_accuracy(model, task, M.full(8), n_samples=64, seed=3, length=6)
    assert default == explicit
    assert 0.0 <= other <= 1.0
    with pytest.raises(ValueError):
        A.masked_accuracy(model, task, M.causal(5), n_samples=4, seed=3, length=6)  # wrong width


@pytest.mark.parametrize("arch", ["decoder", "encoder-decoder"])
def test_masked_patterns_are_the_masked_sides_patterns(arch):
    model = _model(arch)
    n = 6
    ids = torch.arange(n)[None]
    tgt = torch.arange(1, n + 1)[None] if arch == "encoder-decoder" else None
    window = M.sliding_window(n, 1)
    out = A.masked_patterns(model, ids, window, tgt)
    assert out["pattern"].shape == out["scores"].shape == (2, 4, n, n)  # [layer head q k]
    assert np.all(out["pattern"][:, :, ~window.numpy()] == 0)
    np.testing.assert_allclose(out["pattern"].sum(-1), 1, atol=1e-5)
    own = A.masked_patterns(model, ids, None, tgt)
    assert np.all(np.triu(own["pattern"], 1) == 0)  # a decoder side's own mask is causal
    assert out["logits"].shape == (1, n, 20) and not np.allclose(out["logits"], own["logits"])


def test_graph_facts_of_a_window_and_of_blocks():
    n = 6
    window, blocks = M.sliding_window(n, 1), M.block_diagonal(n, 3)
    facts = A.graph_facts(np.stack([window.numpy(), blocks.numpy()]), 1, False)
    assert facts["lambda2"] == pytest.approx(0.0, abs=1e-9) and facts["pieces"] == 2
    assert facts["full_at"] is None and facts["shares"][0] == pytest.approx(1 / n)
    np.testing.assert_array_equal(facts["reach"], M.reachability([window, blocks]).numpy())
    same = A.graph_facts(np.stack([window.numpy()] * 2), 0, True)
    assert same["full_at"] == n - 1 and same["shares"][-1] == 1.0 and len(same["stacked"]) == n - 1
    one = A.graph_facts(np.ones((2, 1, 1), dtype=bool), 0, True)  # a one-token input
    assert one["lambda2"] == 0.0 and one["pieces"] == 1 and one["shares"] == [1.0, 1.0, 1.0]
    fields = A.receptive_fields(same["stacked"], 0, 3)
    assert fields.shape == (3, n) and fields.sum(-1).tolist() == [2, 3, 4]


def test_edge_counts_and_influence_check():
    causal = M.causal(5).numpy()
    assert A.edge_counts(causal) == {"back": 10, "ahead": 0, "self": 5}
    reach = causal
    measured = np.where(reach, 1.0, 0.0)
    measured[4, 4] = 0.0  # a silent pair with a route
    measured[0, 4] = 0.5  # a leak
    assert A.influence_check(measured, reach) == {"no_route": 10, "leaks": 1, "route": 15, "silent": 1}


def test_empty_rows_lists_every_query_that_reads_nothing():
    stack = np.ones((2, 4, 4), dtype=bool)
    stack[0, 2] = False
    stack[1, [0, 3]] = False
    assert A.empty_rows(stack) == [(0, 2), (1, 0), (1, 3)]
    assert A.empty_rows(np.ones((1, 1, 1), dtype=bool)) == []


def test_prediction_changes_pair_the_rows():
    own = [{"position": 1, "token": "a", "right answer": "x", "predicted": "x", "p(right)": 0.9},
           {"position": 2, "token": "b", "right answer": "y", "predicted": "y", "p(right)": 0.8}]
    yours = [dict(own[0], **{"p(right)": 0.7}), dict(own[1], predicted="z", **{"p(right)": 0.1})]
    rows = A.prediction_changes(own, yours)
    assert [r["position"] for r in rows] == ["1:a", "2:b"] and [r["changed"] for r in rows] == ["", "CHANGED"]
    assert rows[1]["yours: predicts"] == "z" and rows[1]["own: p(right)"] == 0.8
    vocab = get_task("future-legality").vocab
    own_logits, your_logits = np.zeros((1, 2, len(vocab))), np.zeros((1, 2, len(vocab)))
    own_logits[0, :, 3] = your_logits[0, 0, 3] = your_logits[0, 1, 4] = 1.0
    top = A.top_prediction_changes(["p0", "p1"], vocab, own_logits, your_logits)
    assert [r["changed"] for r in top] == ["", "CHANGED"] and top[1]["yours: predicts"] == vocab.decode([4])[0]


def test_real_score_leaks_take_the_worst_partly_blocked_row():
    scores = np.array([[0.0, 20_000.0, 9.0], [0.0, -3.0, 5.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]], dtype=np.float32)
    mask = np.array([[True, False, True], [True, False, True], [True, True, True], [False, False, False]])
    gap, leaks = A.real_score_leaks(scores, mask)
    assert gap == pytest.approx(19_991.0)  # row 0: blocked 20,000 vs allowed 9 (rows 2, 3 are not partly blocked)
    assert leaks["-1e4"] > 0.99 and leaks["-1e9"] == 0.0 and leaks["-inf"] == 0.0  # float16: -1e9 is -inf
    assert A.real_score_leaks(scores, np.ones((3, 3), dtype=bool)) is None


def test_legality_comparison_of_two_untrained_models():
    task = get_task("future-legality")
    enc, dec = _model("encoder", vocab=len(task.vocab)), _model("decoder", vocab=len(task.vocab))
    data = A.legality_comparison(enc, dec, task, 4, n_samples=32, seed=1)
    assert set(data["acc"]) == {(m, k) for m in ("encoder", "decoder") for k in ("full", "causal")}
    assert len(data["tokens"]) == 6 and (data["decoder_rule"][:-1] == 0).all()  # the causal decoder never sees it
    rows = A.legality_rows(data, task.vocab)
    assert len(rows) == sum(t >= 0 for t in data["targets"]) > 0
    assert rows[0]["decoder: pull of the rule"] == 0.0


# ---------------------------------------------------------------------------------------------
# Figures
# ---------------------------------------------------------------------------------------------


def test_arc_diagram_of_a_causal_mask_has_no_arcs_below():
    fig = F.arc_diagram(M.causal(6).numpy(), list("abcdef"))
    back, ahead = fig.data[0], fig.data[1]
    assert "15 edges" in back.name and "0 edges" in ahead.name
    y = np.asarray(back.y, dtype=float)
    assert np.isnan(y).any() and np.all(np.isnan(y) | (y >= 0))  # arcs apart by gaps (NaN), all above the line


def test_arc_diagram_stays_light_at_32_tokens():
    fig = F.arc_diagram(M.full(32).numpy(), [str(i) for i in range(32)])
    assert len(fig.data) == 3  # two edge traces and the nodes, however many edges
    assert fig.data[0].opacity <= 0.2
    assert len(fig.layout.xaxis.ticktext) == 32


def test_mask_grid_flags_rows_with_no_keys():
    mask = M.causal(4).numpy()
    mask[1] = False
    fig = F.mask_grid(mask, list("abcd"), list("abcd"))
    assert "no keys" in fig.data[0].y[1] and "no keys" not in fig.data[0].y[0]


def test_spectrum_bars_highlight_lambda_2():
    spectrum = M.laplacian_spectrum(M.sliding_window(8, 1))
    fig = F.spectrum_bars(spectrum)
    colours = list(fig.data[0].marker.color)
    assert colours[1] == F.HIGHLIGHT and colours.count(F.HIGHLIGHT) == 1
    assert fig.layout.annotations[-1].text.startswith("λ2 = 0.152")  # 2 - 2cos(pi/8)


def test_leak_chart_draws_exact_zeros_at_the_floor_and_drops_nan():
    fig = F.leak_chart([1.0, 10.0], {"float32 -inf": np.array([0.0, np.nan])}, 1e-7)
    y = fig.data[0].y
    assert y[0] == F.LEAK_FLOOR and np.isnan(y[1])


def test_leak_curves_are_the_per_format_curves():
    curves = A.leak_curves(7)
    assert set(curves) == {f"{d} {c}" for d in A.DTYPES for c in A.MASK_CONSTANTS}
    for d, dtype in A.DTYPES.items():
        for c, value in A.MASK_CONSTANTS.items():
            np.testing.assert_array_equal(curves[f"{d} {c}"], A.leak_curve(A.LEAK_GAPS, 7, value, dtype))
    assert not np.array_equal(A.leak_curves(1)["float32 -1e4"], curves["float32 -1e4"], equal_nan=True)


def test_titled_heatmap_is_the_heatmap_with_its_title_above():
    from core.figures.heatmaps import attention_heatmap

    pattern = np.full((3, 3), 1 / 3, dtype=np.float32)
    tokens = ["a", "b", "c"]
    expected = F.title_above(attention_heatmap(pattern, tokens, tokens, title="t", height=200))
    assert F.titled_heatmap(pattern, tokens, "t", 200).to_dict() == expected.to_dict()
