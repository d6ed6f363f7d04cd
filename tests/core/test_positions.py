"""Unit tests for the Positions page's quantities: each property drawn on the page, checked here.

Models are randomly initialised (seeded), so these run without the bundled checkpoints.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from core import positional
from core.analysis import positions as P
from core.config import TransformerConfig
from core.figures import positions as F
from core.model import Transformer
from core.tasks import get_task


def _model(**overrides) -> Transformer:
    """A small seeded random model (encoder unless overridden), in eval mode."""
    fields = dict(arch="encoder", vocab_size=30, d_model=32, n_heads=4, n_layers=2, max_len=16)
    fields.update(overrides)
    torch.manual_seed(0)
    return Transformer(TransformerConfig(**fields)).eval()


# ---- the sinusoidal table -------------------------------------------------------------------


@pytest.mark.parametrize("n,d,base", [(64, 64, 10000.0), (40, 16, 100.0), (128, 128, 10000.0), (30, 8, 10.0)])
def test_sinusoidal_gram_is_constant_along_diagonals(n, d, base):
    gram = P.gram_matrix(P.sinusoidal_table(n, d, base))
    profile = P.diagonal_profile(gram)
    assert profile["spread"] < 1e-9
    assert np.allclose(profile["mean"], P.closed_form_gram(profile["offsets"], d, base), atol=1e-9)
    assert len(profile["offsets"]) == 2 * n - 1 and profile["offsets"][0] == -(n - 1)


def test_a_random_table_is_not_constant_along_diagonals():
    """The property is specific to sinusoids: a learned-like random table fails it."""
    table = np.random.default_rng(0).standard_normal((32, 16))
    assert P.diagonal_profile(P.gram_matrix(table))["spread"] > 1.0


def test_closed_form_needs_even_d():
    with pytest.raises(ValueError, match="even"):
        P.closed_form_gram(np.arange(3), 7)


@pytest.mark.parametrize("k", [1, 2, 5, 17, -3, 100, 1000])
@pytest.mark.parametrize("d,base", [(64, 10000.0), (16, 100.0)])
def test_shift_map_error_is_tiny(k, d, base):
    m, error = P.shift_map(k, 200, d, base)
    assert m.shape == (d, d)
    assert error < 1e-5
    # and M_k is really a shift by k: it does not map PE_p to PE_{p+k+1}
    table = P.sinusoidal_table(300 + abs(k), d, base)
    start = max(0, -k)
    wrong = np.abs(table[start + k + 1:start + k + 101] - table[start:start + 100] @ m.T).max()
    assert wrong > 1e-2


def test_shift_errors_rows():
    rows = P.shift_errors([1, 4, 9], 50, 32)
    assert [r["k"] for r in rows] == [1, 4, 9]
    assert all(r["max error"] < 1e-5 for r in rows)


def test_wavelengths_grow_geometrically():
    wl = positional.wavelengths(64).numpy()
    assert wl[0] == pytest.approx(2 * np.pi)
    assert np.allclose(wl[1:] / wl[:-1], 10000.0 ** (2 / 64))


# ---- RoPE -----------------------------------------------------------------------------------


@pytest.mark.parametrize("m,n,s", [(0, 0, 5), (3, 10, 100), (40, 2, 1000), (7, 7, -7)])
def test_rope_score_depends_on_offset_only(m, n, s):
    q, k = P.random_vectors(16, seed=3)
    before, after = P.rope_shift_check(q, k, m, n, s, base=10000.0)
    assert before == pytest.approx(after, abs=1e-9)
    # and it does depend on the offset m - n
    other, _ = P.rope_shift_check(q, k, m + 1, n, 0)
    assert abs(other - before) > 1e-6


def test_rope_score_grid_is_toeplitz():
    q, k = P.random_vectors(8, seed=1)
    pos = np.arange(20)
    s = P.rope_scores(q, k, pos, pos, base=100.0)
    for delta in range(-19, 20):
        diag = np.diagonal(s, offset=delta)
        assert np.ptp(diag) < 1e-9


def test_rope_in_the_model_scores_depend_on_offset_only():
    """The model's own RoPE: with one token repeated, layer 0's scores depend on m - n only."""
    model = _model(pos="rope", max_len=24)
    tokens = torch.full((1, 24), 5)
    _, cache = model.run_with_cache(tokens, ["blocks.0.attn.hook_attn_scores"])
    scores = cache["blocks.0.attn.hook_attn_scores"][0, 0].double().numpy()  # [q k]
    for delta in range(-23, 24):
        assert np.ptp(np.diagonal(scores, offset=delta)) < 1e-4
    # the same model without RoPE gives identical rows (no sense of offset at all)
    _, flat = model.run_with_cache(tokens, ["blocks.0.attn.hook_attn_scores"], pos="none")
    assert np.ptp(flat["blocks.0.attn.hook_attn_scores"][0, 0].numpy()) < 1e-4
    assert np.ptp(scores) > 1e-3


def test_rope_trajectory_keeps_the_norm_and_turns_by_theta():
    theta = 0.3
    trail = P.rope_trajectory([1.0, 0.5], range(10), theta)
    assert np.allclose(np.linalg.norm(trail, axis=1), np.hypot(1.0, 0.5))
    angles = np.unwrap(np.arctan2(trail[:, 1], trail[:, 0]))
    assert np.allclose(np.diff(angles), theta)


# ---- translation invariance ------------------------------------------------------------------


@pytest.mark.parametrize("scheme", ["sinusoidal", "rope"])
def test_neighbour_attention_is_translation_invariant(scheme):
    offsets, a = P.neighbour_attention(scheme, 7, 6)
    _, b = P.neighbour_attention(scheme, 107, 6)
    assert list(offsets) == list(range(-6, 7))
    assert a.sum() == pytest.approx(1.0)
    assert np.abs(a - b).max() < 1e-9


def test_projected_sinusoids_lose_translation_invariance():
    _, a = P.neighbour_attention("sinusoidal + projections", 7, 6)
    _, b = P.neighbour_attention("sinusoidal + projections", 107, 6)
    assert np.abs(a - b).max() > 1e-2


def test_neighbour_attention_rejects_a_window_before_position_zero():
    with pytest.raises(ValueError, match="centre >= window"):
        P.neighbour_attention("sinusoidal", 3, 6)
    with pytest.raises(ValueError, match="scheme"):
        P.neighbour_attention("alibi", 10, 2)


# ---- order blindness ---------------------------------------------------------------------------


def test_matching_permutation():
    a, b = ["x", "y", "x", "z"], ["z", "x", "x", "y"]
    perm = P.matching_permutation(a, b)
    assert [a[j] for j in perm] == b
    assert sorted(perm) == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="same tokens"):
        P.matching_permutation(a, ["x", "y", "z", "z"])


def test_shuffled_keeps_the_first_token_and_the_multiset():
    toks = ["<cls>", "(", "[", "]", ")", "(", ")"]
    out = P.shuffled(toks, seed=2)
    assert out[0] == "<cls>" and sorted(out) == sorted(toks) and out != toks


def test_encoder_without_positions_is_permutation_equivariant_and_pooling_invariant():
    model = _model(pos="sinusoidal")
    ids_a = torch.tensor([[4, 9, 9, 12, 20, 7, 3, 15]])
    perm = [3, 0, 7, 1, 6, 2, 5, 4]
    ids_b = ids_a[:, perm]
    none = P.order_check(model, ids_a, ids_b, perm, pos="none")
    assert none.row_error < 1e-5  # shuffled input -> the same rows, shuffled
    assert none.pooled_error < 1e-5  # mean pooling: the two orders give one vector
    assert np.allclose(none.rows_b, none.rows_a[perm], atol=1e-5)
    assert all(none.distances[i, perm[i]] < 1e-4 for i in range(8))
    sin = P.order_check(model, ids_a, ids_b, perm, pos="sinusoidal")
    assert sin.row_error > 1e-2 and sin.pooled_error > 1e-3  # positions break the symmetry
    rope = P.order_check(model, ids_a, ids_b, perm, pos="rope")
    assert rope.row_error > 1e-3  # weaker at random init (near-uniform attention), still far from 0


def test_encoder_decoder_encoder_is_equivariant_without_positions():
    model = _model(arch="encoder-decoder", pos="sinusoidal")
    ids_a = torch.tensor([[4, 5, 6, 7, 8]])
    perm = [4, 3, 2, 1, 0]
    check = P.order_check(model, ids_a, ids_a[:, perm], perm, pos="none")
    assert check.row_error < 1e-5 and check.rows_a.shape == (5, 32)


def test_order_check_refuses_a_causal_decoder():
    model = _model(arch="decoder")
    ids = torch.tensor([[1, 2, 3]])
    with pytest.raises(ValueError, match="causal"):
        P.order_check(model, ids, ids, [0, 1, 2], pos="none")


def test_answers_on_an_order_pair():
    """'dog bites man': with pos='none' the <mask> gets the same answer in both orders."""
    task = get_task("agreement")
    model = _model(vocab_size=len(task.vocab), max_len=20)
    a = "the dog near the cats <mask> loud".split()
    b = "the cats near the dog <mask> loud".split()
    ra, rb = P.answers(model, task, a, "none"), P.answers(model, task, b, "none")
    assert [r["position"] for r in ra] == [5] and ra[0]["right answer"] == "is" and rb[0]["right answer"] == "are"
    assert ra[0]["predicted"] == rb[0]["predicted"]
    assert not (ra[0]["correct"] and rb[0]["correct"])  # one answer for both: one order must be wrong
    shuffled = ["loud", "the", "near", "<mask>", "dog", "the", "cats"]
    rows = P.answers(model, task, shuffled, "none", focus=[3])
    assert rows[0]["right answer"] is None and rows[0]["predicted"] == ra[0]["predicted"]


def test_answers_encoder_decoder_writes_an_output():
    task = get_task("reverse")
    model = _model(arch="encoder-decoder", vocab_size=len(task.vocab), max_len=16)
    rows = P.answers(model, task, "1 2 3".split(), "none")
    assert rows[0]["right answer"] == "3 2 1" and isinstance(rows[0]["predicted"], str)


# ---- swap and extrapolation ----------------------------------------------------------------------


def test_scheme_accuracy_and_learned_refusal():
    task = get_task("induction")
    model = _model(arch="decoder", vocab_size=len(task.vocab), max_len=21, pos="sinusoidal")
    for pos in ("none", "sinusoidal", "rope"):
        assert 0.0 <= P.scheme_accuracy(model, task, pos, n_samples=16) <= 1.0
    with pytest.raises(ValueError, match="no learned position table"):
        P.scheme_accuracy(model, task, "learned", n_samples=4)


def test_sinusoidal_extrapolates_and_learned_refuses_with_a_clear_message():
    task = get_task("induction")
    sin = _model(arch="decoder", vocab_size=len(task.vocab), max_len=21, pos="sinusoidal")
    learned = _model(arch="decoder", vocab_size=len(task.vocab), max_len=21, pos="learned")
    lengths = [5, 10, 20]  # rows of 11, 21 and 41 positions; the tables hold 21
    sin_curve = P.extrapolation_curve(sin, task, lengths, n_samples=8)
    assert [p.positions for p in sin_curve] == [11, 21, 41]
    assert all(p.accuracy is not None and p.error is None for p in sin_curve)
    learned_curve = P.extrapolation_curve(learned, task, lengths, n_samples=8)
    assert [p.accuracy is None for p in learned_curve] == [False, False, True]
    assert "cannot extrapolate" in learned_curve[-1].error and "21" in learned_curve[-1].error
    with pytest.raises(ValueError, match="learned a position table for 21 positions"):
        learned(torch.ones(1, 22, dtype=torch.long))


def test_swap_schemes_offer_learned_only_with_a_table_and_rope_only_with_even_heads():
    assert P.swap_schemes("sinusoidal", 16) == ["none", "sinusoidal", "rope"]
    assert P.swap_schemes("learned", 16) == ["none", "sinusoidal", "learned", "rope"]
    assert P.swap_schemes("none", 5) == ["none", "sinusoidal"]


def test_scored_positions_counts_right_top_tokens_at_scored_places_only():
    from core.tasks import IGNORE
    logits = np.zeros((1, 4, 3))
    logits[0, [0, 1, 2, 3], [2, 1, 0, 1]] = 1.0  # top tokens 2, 1, 0, 1
    assert P.scored_positions([IGNORE, 1, 2, 1], logits) == (2, 3)  # position 2 wrong, position 0 unscored
    assert P.scored_positions([IGNORE], logits[:, :1]) == (0, 0)  # a one-token input scores nothing
    assert P.scored_positions(None, logits) == (0, 0)


def test_answer_rows_list_a_then_b_for_each_scheme():
    a = [{"position": 5, "token": "<mask>", "predicted": "is", "right answer": "is", "correct": True}]
    b = [{"position": 5, "token": "<mask>", "predicted": "is", "right answer": None, "correct": None}]
    rows = P.answer_rows([("none", a, b), ("rope", b, a)])
    assert [(r["run with"], r["input"]) for r in rows] == [
        ("none (no positions)", "A"), ("none (no positions)", "B"),
        ("RoPE (rotated q and k)", "A"), ("RoPE (rotated q and k)", "B")]
    assert rows[0]["correct"] == "yes" and rows[1]["correct"] == "-"
    assert rows[1]["right answer"] == "(no rule for this order)"


def test_length_rows_and_series_report_refusals_as_text_and_none():
    curves = {"sinusoidal": [{"length": 4, "positions": 9, "accuracy": 0.5, "error": None},
                             {"length": 20, "positions": 41, "accuracy": 0.25, "error": None}],
              "learned": [{"length": 4, "positions": 9, "accuracy": 1.0, "error": None},
                          {"length": 20, "positions": 41, "accuracy": None, "error": "too long"}]}
    ids = {"sinusoidal": "induction-sinusoidal", "learned": "induction-learned"}
    rows, refusals = P.length_rows(curves, ids, 20)
    assert rows == [{"scheme": "sinusoidal (added table)", "accuracy": "25.0%"},
                    {"scheme": "learned (its own table)", "accuracy": "refused"}]
    assert refusals == [("induction-learned", 41, "too long")]
    assert P.length_rows(curves, ids, 4)[1] == []
    assert P.curve_series(curves) == {"sinusoidal": ([9, 41], [0.5, 0.25]), "learned": ([9, 41], [1.0, None])}


# ---- figures ---------------------------------------------------------------------------------------


def test_figures_carry_the_data():
    table = P.sinusoidal_table(10, 8)
    fig = F.encoding_heatmap(table, "PE")
    assert np.allclose(np.asarray(fig.data[0].z), table, atol=1e-6)
    assert (fig.data[0].zmin, fig.data[0].zmax) == (-1.0, 1.0)
    fig = F.extrapolation_chart({"learned": ([11, 21, 41], [0.9, 0.8, None])}, 21)
    assert list(fig.data[0].x) == [11, 21] and list(fig.data[1].x) == [41]  # the refusal is its own cross
    dist = np.array([[1.0, 0.0], [0.0, 1.0]])
    fig = F.row_distance_heatmap(dist, ["a", "b"], ["b", "a"])
    assert list(fig.data[0].text[0]) == ["", "0"]
    with pytest.raises(ValueError):
        F.encoding_heatmap(np.zeros(3))


# ---------------------------------------------------------------------------------------------
# RoPE's distance decay


def test_rope_decay_bound_is_one_at_zero_and_bounds_every_score():
    distances = np.arange(0, 256)
    for d in (16, 64, 128):
        bound = P.rope_decay_bound(distances, d, 10000)
        assert bound[0] == pytest.approx(1.0) and np.all(bound <= 1.0 + 1e-12) and np.all(bound > 0)
        # the Abel-summation inequality holds for actual vectors: |q.k| <= max_j |h_j - h_{j-1}| * sum_j |S_j|
        q, k = P.random_qk_pairs(d, count=64, seed=3)
        h = (q[:, 0::2] + 1j * q[:, 1::2]) * np.conj(k[:, 0::2] + 1j * k[:, 1::2])  # [pairs d/2]
        steps = np.abs(np.diff(np.concatenate([h, np.zeros((64, 1))], axis=1), axis=1)).max(axis=1)  # j = 1..d/2
        raw = np.abs(P.rope_partial_sums(distances, d, 10000)).sum(axis=1)  # [distance]
        scores = P.rope_abs_scores(q, k, distances, 10000)  # [pairs distance]
        assert np.all(scores <= steps[:, None] * raw[None, :] + 1e-9)
        # and the abs scores are the explicit rotations' scores
        explicit = np.abs(np.array([P.rope_scores(q[0], k[0], [m], [0], 10000)[0, 0] for m in distances[:20]]))
        assert np.allclose(scores[0, :20], explicit)


def test_rope_decay_bound_decays_on_average_with_distance():
    distances = np.arange(0, 256)
    for d in (16, 32, 64, 128):
        for base in (1000, 10000, 100000):
            bound = P.rope_decay_bound(distances, d, base)
            near, middle, far = bound[1:33].mean(), bound[32:128].mean(), bound[128:].mean()
            assert near > middle > far, (d, base)
        for base in (10, 100, 1e6):
            bound = P.rope_decay_bound(distances, d, base)
            assert bound[1:5].mean() > bound[128:].mean() + 0.1, (d, base)


def test_random_mean_abs_score_does_not_follow_the_bound():
    curves = P.decay_curves(np.arange(0, 256), 128, 10000, count=4096, seed=0)
    random_rel = curves.relative(curves.random_mean)
    # the bound falls well below 1 on average; the random mean stays flat (rotating a random key gives a random key)
    assert curves.bound[128:].mean() < 0.4
    assert np.all(np.abs(random_rel - 1) < 0.1)
    assert not np.all(np.diff(random_rel) <= 0)  # it goes up as often as down: not a decay
    assert (np.diff(random_rel) > 0).mean() > 0.3


def test_model_qk_rows_pair_queries_and_keys_of_one_head_before_rope():
    from core.checkpoints import MANIFEST, load_bundled
    if not MANIFEST.is_file():
        pytest.skip("bundled models not built")
    model, meta = load_bundled("induction-rope")
    batch = get_task(meta["task"]).batch(4, "decoder", seed=1)
    heads = P.model_qk_rows(model, batch.tokens)
    assert len(heads) == model.cfg.n_layers * model.cfg.n_heads
    rows = batch.tokens.numel()
    assert all(q.shape == (rows, model.cfg.d_head) and k.shape == q.shape for q, k in heads)
    _, cache = model.run_with_cache(batch.tokens, ["blocks.0.attn.hook_q"])
    assert np.allclose(heads[0][0], cache["blocks.0.attn.hook_q"][:, :, 0].reshape(rows, -1).double().numpy())
    curves = P.decay_curves(np.arange(0, 64), 16, 10000, model_heads=heads, count=1024)
    assert curves.model_mean.shape == (64,) and np.all(curves.model_mean > 0)
