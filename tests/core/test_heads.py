"""Head analysis: subspace geometry, h_max, the orthogonal-query identity, ablation through hooks,
role scores, redundancy estimates, and the two-head toy."""

from __future__ import annotations

import math
import threading

import numpy as np
import pytest
import torch

from core.analysis.attention import attention_kinds
from core.analysis.heads.ablation import ablate_each, ablation_hooks, all_heads, head_means, run_ablated
from core.analysis.heads.circuits import ov_available, ov_circuit, pca_2d, qk_circuit
from core.analysis.heads.orthogonal import orthogonal_complement, orthogonal_query, softmax
from core.analysis.heads.redundancy import gaussian_mi, pattern_similarity, redundancy
from core.analysis.heads.roles import (ROLES, induction_score, induction_targets, previous_token_score, role_scores,
                                       sink_score)
from core.analysis.heads.subspaces import (MATRICES, angle_matrix, cross_gram_norms, effective_rank, h_max,
                                           principal_angles, subspace_report)
from core.analysis.heads.toy import (DIGIT_DIMS, LETTER_DIMS, TOY_SEED, TOY_STEPS, few_threads, toy_config,
                                     toy_embedding, toy_model, toy_report, toy_trainer)
from core.config import TransformerConfig
from core.figures import heads as FH
from core.model import Transformer
from core.tasks import TwoLookupTask, get_task


def _model(arch: str = "decoder", seed: int = 0, **kw) -> Transformer:
    torch.manual_seed(seed)
    cfg = dict(arch=arch, vocab_size=60, d_model=32, n_heads=4, n_layers=2, max_len=40)
    cfg.update(kw)
    return Transformer(TransformerConfig(**cfg)).eval()


# ---------------------------------------------------------------------------------------------
# subspaces


def test_principal_angles_identical_subspaces_are_zero():
    g = torch.Generator().manual_seed(0)
    a = torch.randn(16, 4, generator=g, dtype=torch.float64)
    mix = torch.randn(4, 4, generator=g, dtype=torch.float64)  # a different basis of the same space
    angles = principal_angles(a, a @ mix)
    assert angles.shape == (4,)
    assert np.allclose(angles, 0.0, atol=1e-6)


def test_principal_angles_orthogonal_subspaces_are_right_angles():
    e = torch.eye(10, dtype=torch.float64)
    angles = principal_angles(e[:, :3] @ torch.randn(3, 3, dtype=torch.float64), e[:, 3:7])
    assert np.allclose(angles, math.pi / 2, atol=1e-9)


def test_principal_angles_of_a_shared_direction():
    # span{e0, e1} and span{e0, e2}: one shared direction (0) and one orthogonal pair (pi/2)
    e = torch.eye(5, dtype=torch.float64)
    angles = principal_angles(e[:, [0, 1]], e[:, [0, 2]])
    assert np.allclose(angles, [0.0, math.pi / 2], atol=1e-9)
    tilted = torch.stack([e[:, 0], (e[:, 1] + e[:, 2]) / math.sqrt(2)], dim=1)
    assert np.allclose(principal_angles(e[:, [0, 1]], tilted), [0.0, math.pi / 4], atol=1e-9)


def test_angle_matrix_and_cross_gram_for_block_orthogonal_heads():
    w = torch.zeros(3, 12, 4, dtype=torch.float64)
    for h in range(3):
        w[h, 4 * h: 4 * h + 4] = torch.randn(4, 4, dtype=torch.float64)  # head h lives in dims 4h..4h+3
    angles, every = angle_matrix(w)
    assert np.allclose(np.diag(angles), 0.0, atol=1e-4)
    off = angles[~np.eye(3, dtype=bool)]
    assert np.allclose(off, 90.0)
    gram = cross_gram_norms(w)
    assert np.allclose(gram[~np.eye(3, dtype=bool)], 0.0)
    assert (np.diag(gram) > 0).all()
    assert np.allclose(np.diag(cross_gram_norms(w, normalise=True)) <= 1 + 1e-12, True)


def test_effective_rank_counts_used_directions():
    assert effective_rank(torch.eye(6)[:, :4]) == pytest.approx(4.0)
    one = torch.zeros(6, 4)
    one[0, 0] = 3.0
    assert effective_rank(one) == pytest.approx(1.0)
    skewed = torch.diag(torch.tensor([10.0, 1.0, 0.1, 0.01]))
    assert 1.0 < effective_rank(skewed) < 2.0


def test_h_max():
    assert h_max(64, 16) == 4
    assert h_max(512, 64) == 8
    assert h_max(10, 3) == 3
    assert h_max(4, 8) == 0
    with pytest.raises(ValueError, match="d_v"):
        h_max(64, 0)


def test_subspace_report_shapes_on_a_model():
    model = _model()
    kind = attention_kinds("decoder")[0]
    for which in MATRICES:
        rep = subspace_report(model, kind, 1, which)
        assert rep.angles.shape == (4, 4) and rep.gram.shape == (4, 4) and rep.eff_rank.shape == (4,)
        assert rep.h_max == 4 and rep.joint_rank <= 32
        assert np.allclose(np.diag(rep.angles), 0.0, atol=1e-3)


# ---------------------------------------------------------------------------------------------
# circuits


def test_qk_circuit_matches_the_models_own_scores_at_layer_0():
    # no positions and no LayerNorm: layer 0's scores are exactly the QK table read at the token ids
    model = _model(pos="none", norm="none")
    kind = attention_kinds("decoder")[0]
    labels = [str(i) for i in range(60)]
    circuit = qk_circuit(model, kind, 0, 2, labels, labels)
    tokens = torch.tensor([[5, 17, 3, 42, 8]])
    _, cache = model.run_with_cache(tokens, ["blocks.0.attn.hook_attn_scores"])
    scores = cache["blocks.0.attn.hook_attn_scores"][0, 2].numpy()  # [q k]
    ids = tokens[0].numpy()
    assert np.allclose(circuit.table[np.ix_(ids, ids)], scores, atol=1e-5)
    assert (circuit.singular_values[8:] < 1e-8 * circuit.singular_values[0]).all()  # rank <= d_head = 8
    assert circuit.table.shape == (60, 60)


def test_ov_circuit_is_what_a_fully_attending_head_adds_to_the_logits():
    model = _model(pos="none", norm="none", n_layers=1)
    kind = attention_kinds("decoder")[0]
    labels = [str(i) for i in range(60)]
    circuit = ov_circuit(model, kind, 0, 1, labels, labels)
    # a one-token input attends only to itself, so head 1's z is that token's value vector and
    # what it adds to the logits (through W_O and W_U) is row `token` of the table
    token = 9
    _, cache = model.run_with_cache(torch.tensor([[token]]), ["blocks.0.attn.hook_z"])
    z = cache["blocks.0.attn.hook_z"][0, 0, 1].double()  # [d_head]
    w_o = model.head_weights(0)["W_O"][1].double()  # [d_head d_model]
    added = (z @ w_o @ model.unembed.weight.detach().double().T).numpy()  # [vocab]
    assert np.allclose(circuit.table[token], added, atol=1e-6)
    assert not ov_available(_model("encoder-decoder", n_layers=1), attention_kinds("encoder-decoder")[0])


# ---------------------------------------------------------------------------------------------
# the orthogonal-query identity


def test_orthogonal_part_of_a_query_leaves_every_score_unchanged():
    rng = np.random.default_rng(0)
    keys = rng.standard_normal((5, 16))
    q = rng.standard_normal(16)
    res = orthogonal_query(q, keys, alpha=10.0, scale=1 / 4)
    assert res is not None and res.free_dims == 11
    assert np.linalg.norm(res.q_orth - q) > 5 * np.linalg.norm(q)  # a big change to the query ...
    assert np.allclose(res.scores_orth, res.scores, atol=1e-9)  # ... and not a single score moved
    assert np.allclose(softmax(res.scores_orth), softmax(res.scores))
    assert res.max_change_rand > 1e-2  # a random part of the same size does move them


def test_orthogonal_query_on_a_real_head():
    model = _model(d_model=64, n_heads=4)  # d_head = 16
    tokens = torch.tensor([[1, 7, 9, 12, 30, 4]])
    _, cache = model.run_with_cache(tokens, ["blocks.1.attn.hook_q", "blocks.1.attn.hook_k",
                                             "blocks.1.attn.hook_attn_scores"])
    q = cache["blocks.1.attn.hook_q"][0, 5, 3].numpy()
    keys = cache["blocks.1.attn.hook_k"][0, :, 3].numpy()
    res = orthogonal_query(q, keys, alpha=3.0, scale=1 / 4)
    model_scores = cache["blocks.1.attn.hook_attn_scores"][0, 3, 5].numpy()
    assert np.allclose(res.scores, model_scores, atol=1e-5)
    assert np.allclose(res.scores_orth, model_scores, atol=1e-5)


def test_no_orthogonal_direction_when_keys_fill_the_space():
    keys = np.random.default_rng(1).standard_normal((20, 8))
    assert orthogonal_complement(keys).shape == (8, 0)
    assert orthogonal_query(np.ones(8), keys, 1.0, 1.0) is None


# ---------------------------------------------------------------------------------------------
# ablation


def test_zero_ablating_all_heads_of_a_layer_removes_its_attention_output():
    model = _model()
    tokens = torch.randint(4, 60, (3, 9), generator=torch.Generator().manual_seed(0))
    refs = [("self", 1, h) for h in range(4)]
    fwd = ablation_hooks(model, refs, "zero")
    _, cache = model.run_with_cache(tokens, ["blocks.1.hook_attn_out"], fwd=fwd)
    assert torch.count_nonzero(cache["blocks.1.hook_attn_out"]) == 0  # W_O has no bias: exactly 0
    removed = model.run_with_hooks(tokens, [("blocks.1.hook_attn_out", _zeros)])
    ablated = model.run_with_hooks(tokens, fwd)
    assert torch.equal(ablated, removed)
    assert not torch.allclose(ablated, model(tokens))  # and it is a real change


def _zeros(t, hook):
    return torch.zeros_like(t)


def test_ablation_never_changes_the_model():
    model = _model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    tokens = torch.randint(4, 60, (2, 7))
    clean = model(tokens)
    model.run_with_hooks(tokens, ablation_hooks(model, [("self", 0, 1), ("self", 1, 3)]))
    assert torch.equal(model(tokens), clean)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_mean_ablation_puts_the_mean_in_place():
    task = get_task("sort")
    model = _model(vocab_size=len(task.vocab), max_len=24)
    batch = task.batch(16, "decoder", seed=0)
    means = head_means(model, batch, task.vocab.pad_id)
    assert means["blocks.0.attn.hook_z"].shape == (4, 8)
    fwd = ablation_hooks(model, [("self", 0, 2)], "mean", means)
    _, cache = model.run_with_cache(batch.tokens, ["blocks.0.attn.hook_z"], fwd=fwd)
    z = cache["blocks.0.attn.hook_z"]
    assert torch.allclose(z[:, :, 2], means["blocks.0.attn.hook_z"][2].expand_as(z[:, :, 2]))
    with pytest.raises(ValueError, match="means"):
        ablation_hooks(model, [("self", 0, 2)], "mean")
    with pytest.raises(ValueError, match="no head"):
        ablation_hooks(model, [("self", 5, 0)])


def test_ablate_each_ranks_every_head():
    task = get_task("sort")
    model = _model(vocab_size=len(task.vocab), max_len=24)
    batch = task.batch(32, "decoder", seed=0)
    base = run_ablated(model, task, batch)
    rows = ablate_each(model, task, batch)
    assert len(rows) == 8 and [r["rank"] for r in rows] == list(range(1, 9))
    changes = [r["loss change"] for r in rows]
    assert changes == sorted(changes, reverse=True)
    assert any(abs(c) > 0 for c in changes)
    assert all(abs(r["loss"] - r["loss change"] - base.loss) < 1e-9 for r in rows)


def test_ablation_on_an_encoder_decoder_targets_each_stack():
    task = get_task("reverse")
    model = _model("encoder-decoder", vocab_size=len(task.vocab), max_len=24)
    batch = task.batch(8, "encoder-decoder", seed=0)
    refs = all_heads(model)
    assert {r[0] for r in refs} == {"enc", "dec", "cross"} and len(refs) == 24
    base = run_ablated(model, task, batch)
    for key in ("enc", "dec", "cross"):
        res = run_ablated(model, task, batch, [(key, 0, h) for h in range(4)])
        assert res.loss != base.loss


# ---------------------------------------------------------------------------------------------
# roles and redundancy


def test_induction_targets_follow_the_definition():
    tokens = np.array([[1, 10, 11, 12, 10, 11, 12]])
    assert induction_targets(tokens).tolist() == [[-1, -1, -1, -1, 2, 3, 4]]
    assert induction_targets(np.array([[5, 5, 5]])).tolist() == [[-1, -1, -1]]  # s + 1 == t never counts


def test_role_scores_of_hand_made_patterns():
    n = 7
    prev = np.zeros((1, 1, n, n))
    prev[0, 0, 0, 0] = 1
    prev[0, 0, np.arange(1, n), np.arange(n - 1)] = 1
    assert previous_token_score(prev)[0] == pytest.approx(1.0)
    assert sink_score(prev)[0] == pytest.approx(1 / (n - 1))
    tokens = np.array([[1, 10, 11, 12, 10, 11, 12]])
    ind = np.zeros((1, 1, n, n))
    ind[0, 0, :, 0] = 1
    for t, s in enumerate(induction_targets(tokens)[0]):
        if s >= 0:
            ind[0, 0, t] = 0
            ind[0, 0, t, s] = 1
    assert induction_score(ind, tokens)[0] == pytest.approx(1.0)
    assert induction_score(prev, tokens)[0] == pytest.approx(0.0)


def test_role_scores_on_a_random_model_are_low_for_induction():
    task = get_task("induction")
    model = _model(vocab_size=len(task.vocab), max_len=21, pos="learned")
    rs = role_scores(model, attention_kinds("decoder")[0], task.vocab, task)
    assert set(rs.scores) == set(ROLES)
    assert rs.scores["induction"].shape == (2, 4)
    assert rs.scores["induction"].max() < 0.35
    assert np.isnan(rs.scores["subject"]).all()
    assert rs.probe.shape[1] <= 21  # the learned table's length is respected


def _bundled(model_id: str):
    from core import checkpoints

    if not checkpoints.MANIFEST.is_file():
        pytest.skip("the bundled models are not built yet (python -m core.train --all)")
    return checkpoints.load_bundled(model_id)


@pytest.mark.parametrize("model_id", ["induction-sinusoidal", "induction-rope"])
def test_a_trained_induction_model_has_an_induction_head_and_a_random_one_does_not(model_id):
    model, meta = _bundled(model_id)
    task = get_task(meta["task"])
    kind = attention_kinds("decoder")[0]
    trained = role_scores(model, kind, task.vocab, task)
    torch.manual_seed(0)
    random = role_scores(Transformer(model.cfg).eval(), kind, task.vocab, task)
    assert trained.scores["induction"].max() > 0.5
    assert random.scores["induction"].max() < 0.2
    best = np.unravel_index(np.argmax(trained.scores["induction"]), trained.scores["induction"].shape)
    assert best[0] >= 1  # the induction head sits above the layer that supplies previous-token information
    # ... and an earlier layer holds heads that look at the previous token well above an even spread
    assert trained.scores["previous token"][: best[0]].max() > 2 * trained.chance["previous token"]


def test_the_trained_agreement_encoder_has_subject_heads():
    model, meta = _bundled("agreement-encoder")
    task = get_task(meta["task"])
    rs = role_scores(model, attention_kinds("encoder")[0], task.vocab, task)
    assert np.nanmax(rs.scores["subject"]) > 0.6 > 3 * rs.chance["subject"]


def test_subject_score_uses_the_agreement_meta():
    task = get_task("agreement")
    model = _model("encoder", vocab_size=len(task.vocab), max_len=24)
    rs = role_scores(model, attention_kinds("encoder")[0], task.vocab, task)
    assert rs.scores["subject"].shape == (2, 4) and not np.isnan(rs.scores["subject"]).any()
    assert 0 < rs.chance["subject"] < 0.5


def test_gaussian_mi_detects_shared_information():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2000, 4))
    y_indep = rng.standard_normal((2000, 4))
    y_shared = x @ rng.standard_normal((4, 4)) + 0.1 * rng.standard_normal((2000, 4))
    assert gaussian_mi(x, y_indep) < 0.02
    assert gaussian_mi(x, y_shared) > 3.0
    # one shared Gaussian coordinate with correlation rho: I = -1/2 log(1 - rho^2)
    z = rng.standard_normal(20000)
    w = 0.8 * z + 0.6 * rng.standard_normal(20000)
    assert gaussian_mi(z[:, None], w[:, None], k=1) == pytest.approx(-0.5 * math.log(1 - 0.64), abs=0.02)


def test_pattern_similarity_is_one_for_copies_and_lower_for_different_heads():
    rng = np.random.default_rng(0)
    p = rng.random((3, 2, 5, 5))
    p /= p.sum(-1, keepdims=True)
    p[1] = p[0]
    p[2] = np.eye(5)[None].repeat(2, 0)
    sim = pattern_similarity(p, causal=False)
    assert sim[0, 1] == pytest.approx(1.0) and sim[0, 2] < 0.9


def test_redundancy_on_a_random_model():
    task = get_task("sort")
    model = _model(vocab_size=len(task.vocab), max_len=24)
    red = redundancy(model, attention_kinds("decoder")[0], task.vocab, n=16)
    assert red.similarity.shape == (8, 8) and red.mi.shape == (8, 8)
    assert np.allclose(np.diag(red.similarity), 1.0)
    assert np.isnan(np.diag(red.mi)).all()
    assert red.noise >= 0 and red.labels[5] == "L1 H1"


# ---------------------------------------------------------------------------------------------
# the two-head toy


def test_toy_embedding_puts_letters_and_digits_in_orthogonal_subspaces():
    task = TwoLookupTask()
    e = toy_embedding(task.vocab)
    letters, digits = e[:, LETTER_DIMS], e[:, DIGIT_DIMS]
    content = [i for i, t in enumerate(task.vocab.tokens) if not t.startswith("<")]
    assert torch.all(letters[content].sum(1) == 1) and torch.all(digits[content].sum(1) == 1)
    model = toy_model(task, seed=0)
    assert not model.stack.W_E.weight.requires_grad
    assert torch.equal(model.stack.W_E.weight, e)


def test_toy_weights_are_the_ones_its_seed_always_gave():
    task = TwoLookupTask()
    for seed in (0, 3):  # TOY_SEED was chosen on the weights a globally seeded build gave
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            want = Transformer(toy_config(task)).state_dict()
        got = toy_model(task, seed).state_dict()
        assert [k for k in got if not torch.equal(got[k], want[k])] == ["stack.W_E.weight"]  # the fixed embedding
    w_q = [toy_model(task, s).stack.blocks[0].attn.W_Q.weight for s in (0, 1)]
    assert not torch.equal(*w_q)  # the seed matters


def test_toy_builds_in_parallel_threads_get_their_own_seeds_weights():
    """The server runs each session in its own thread; the global RNG is shared by all of them."""
    task = TwoLookupTask()
    seeds = {0: [0, 1] * 5, 1: [2, 3] * 5}  # 2 threads x 10 builds
    want = {s: toy_model(task, s).state_dict() for s in range(4)}
    start = threading.Barrier(2)
    got: dict[int, list] = {0: [], 1: []}

    def build(i: int) -> None:
        start.wait()
        for s in seeds[i]:
            got[i].append((s, toy_model(task, s).state_dict()))

    threads = [threading.Thread(target=build, args=(i,)) for i in seeds]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [len(got[i]) for i in seeds] == [10, 10]
    wrong = [(i, s) for i in seeds for s, sd in got[i] if not all(torch.equal(sd[k], want[s][k]) for k in sd)]
    assert wrong == []


@pytest.mark.slow
def test_two_head_toy_trains_to_a_clear_separation():
    untrained = toy_report(toy_model(TwoLookupTask(), seed=TOY_SEED))
    assert not untrained.separated and untrained.accuracy < 0.3
    trainer = toy_trainer(seed=TOY_SEED, steps=TOY_STEPS)
    with few_threads():
        trainer.run()
    report = toy_report(trainer.model)
    assert report.accuracy > 0.95
    assert report.separated, (report.letter_attention, report.digit_attention)
    letter_head = int(np.argmax(report.letter_attention))
    digit_head = 1 - letter_head
    # each head's QK form lives in its own block of the input space
    assert report.block_share[letter_head, 0] > 5 * report.block_share[letter_head, 1]
    assert report.block_share[digit_head, 1] > 5 * report.block_share[digit_head, 0]


# ---------------------------------------------------------------------------------------------
# figures build from the analyses


def test_figures_build():
    model = _model()
    kind = attention_kinds("decoder")[0]
    rep = subspace_report(model, kind, 0, "W_V")
    labels = [f"H{h}" for h in range(4)]
    assert FH.angle_heatmap(rep.angles, rep.all_angles, labels, "W_V").data[0].zmax == 90
    FH.gram_heatmap(rep.gram, labels, "W_V")
    FH.effective_rank_bars(rep.eff_rank, labels, 8, "W_V")
    fig = FH.budget_figure(32, 8, 5)
    assert any(s.fillcolor == FH.OVER_COLOUR for s in fig.layout.shapes)  # the fifth head does not fit
    toks = [str(i) for i in range(60)]
    c = qk_circuit(model, kind, 0, 0, toks, toks)
    FH.circuit_heatmap(c.table, toks, toks, "query", "key")
    FH.singular_value_bars(c.singular_values, 8)
    proj = pca_2d(np.random.rand(5, 8), np.random.rand(5, 8))
    FH.qk_scatter(proj.q2, proj.k2, list("abcde"), list("abcde"), np.eye(5), proj.explained)
    FH.role_tables({"a": np.random.rand(2, 4), "b": np.full((2, 4), np.nan)}, {"a": 0.2, "b": float("nan")})
    FH.orthogonal_bars(list("abc"), np.ones(3), np.ones(3), np.zeros(3))


@pytest.mark.slow
def test_one_head_trails_two_heads_with_the_same_recipe():
    """At 200 steps one head is clearly behind two (seeds 0-5 measured: 54-79% against 82-100%; per seed the gap
    was 0.13-0.44). By the page's default 600 steps one head catches up (98-100%), so the gap is about speed."""
    gaps = []
    for seed in range(4):
        acc = {}
        for n_heads in (1, 2):
            trainer = toy_trainer(seed=seed, steps=200, n_heads=n_heads)
            assert trainer.model.cfg.n_heads == n_heads and trainer.model.cfg.d_head == 4
            with few_threads():
                trainer.run()
            acc[n_heads] = toy_report(trainer.model).accuracy
        gaps.append(acc[2] - acc[1])
        assert acc[2] > acc[1] + 0.12, (seed, acc)
    assert np.mean(gaps) > 0.2, gaps


def test_toy_head_count_changes_only_the_heads():
    task = TwoLookupTask()
    configs = {h: toy_config(task, h) for h in (1, 2, 4)}
    assert [c.n_heads for c in configs.values()] == [1, 2, 4]
    assert len({(c.d_head, c.d_model, c.d_mlp, c.n_layers, c.pos, c.norm) for c in configs.values()}) == 1
    assert toy_config(task) == configs[2]  # the default is the two-head toy
    one = toy_report(toy_model(task, seed=0, n_heads=1))
    four = toy_report(toy_model(task, seed=0, n_heads=4))
    assert one.qk_forms.shape[0] == 1 and four.example_pattern.shape[0] == 4 and len(four.roles) == 4
    assert not one.separated  # one head can never split the two lookups
