"""The Depth page's core: hook gradients, the logit lens, the depth experiment's claims, Sinkhorn,
hyper-connections and long-range paths. Every claim the page makes is asserted as measured."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from core import masks
from core.analysis import depth as D
from core.figures import depth as fig
from core.hooks import RunState, running
from core.hyper import HyperConfig, HyperTransformer, sinkhorn
from core.model import Transformer, TransformerConfig
from core.tasks import IGNORE
from core.train import init_model


def _model(norm: str = "pre", arch: str = "decoder", n_layers: int = 2, seed: int = 0, **kw) -> Transformer:
    cfg = TransformerConfig(arch=arch, vocab_size=11, d_model=16, n_heads=2, n_layers=n_layers, max_len=16,
                            norm=norm, **kw)
    return init_model(cfg, seed).double().eval()  # the weights torch.manual_seed(seed) gave, from a local generator


def _ids(n: int = 7, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, 11, (1, n), generator=torch.Generator().manual_seed(seed))


# ---------------------------------------------------------------------------------------------
# Hook gradients agree with finite differences (float64)


@pytest.mark.parametrize("norm", ["pre", "post"])
@pytest.mark.parametrize("hook", ["hook_embed", "blocks.0.hook_resid_mid", "blocks.1.hook_resid_pre"])
def test_hook_gradient_matches_finite_difference(norm, hook):
    model = _model(norm)
    ids = _ids()
    targets = torch.randint(0, 11, (7,), generator=torch.Generator().manual_seed(2))

    def loss(logits):
        return F.cross_entropy(logits[0], targets)

    _, cache = model.run_with_cache(ids, names=[hook], grad_of=loss)
    grad = cache[hook + "_grad"]
    v = torch.randn(grad.shape, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    eps = 1e-6

    def shifted(sign):
        def add(x, h):
            return x + sign * eps * v
        return float(loss(model.run_with_hooks(ids, fwd=[(hook, add)])))

    numeric = (shifted(+1) - shifted(-1)) / (2 * eps)
    analytic = float((grad * v).sum())
    assert analytic == pytest.approx(numeric, rel=1e-6, abs=1e-9)
    assert all(p.grad is None for p in model.parameters())  # nothing written on the model


def test_saliency_is_the_derivative_of_scaling_the_embeddings():
    """Sum of gradient x embedding = d f / d s at s = 1 when every embedding is scaled by s."""
    model = _model("pre")
    ids = _ids()
    grad_of = D.objective("logit", None, 5)
    back = D.backward_stream(model, ids, grad_of)
    eps = 1e-6

    def value(scale):
        logits = model.run_with_hooks(ids, fwd=[("hook_embed", lambda x, h: x * scale)])
        return float(grad_of(logits))

    numeric = (value(1 + eps) - value(1 - eps)) / (2 * eps)
    assert back.saliency.sum() == pytest.approx(numeric, rel=1e-6, abs=1e-9)
    assert back.value == pytest.approx(value(1.0))


def test_causal_gradient_of_one_logit_stops_at_its_position():
    model = _model("pre")
    back = D.backward_stream(model, _ids(8), D.objective("logit", None, 4))
    assert np.all(back.grad_norms[:, 5:] == 0)  # later tokens cannot influence position 4
    assert np.all(back.grad_norms[:, 4] > 0)
    assert back.labels[0] == "embed" and back.labels[-1] == "L1 +mlp"


def test_loss_objective_needs_a_scored_position():
    with pytest.raises(ValueError, match="no scored positions"):
        D.objective("loss", [IGNORE, IGNORE], 0)
    with pytest.raises(ValueError, match="objective must be"):
        D.objective("entropy", None, 0)


# ---------------------------------------------------------------------------------------------
# Forward: logit lens and contributions


@pytest.mark.parametrize("norm", ["pre", "post", "none"])
def test_logit_lens_at_the_last_layer_equals_the_model(norm):
    model = _model(norm)
    ids = _ids()
    stream = D.forward_stream(model, ids)
    probs = D.logit_lens(model, stream.resid)
    expected = torch.softmax(model(ids)[0].double(), -1).detach().numpy()
    np.testing.assert_allclose(probs[-1], expected, atol=1e-10)
    # The embedding alone decodes differently: each stage is its own reading, not a copy of the last.
    assert np.abs(np.log(probs[0]) - np.log(expected)).max() > 1e-4


def test_logit_lens_encoder_decoder_reads_the_decoder():
    model = _model("pre", arch="encoder-decoder")
    src, tgt = _ids(6), _ids(5, seed=4)
    stream = D.forward_stream(model, src, "decoder.", tgt=tgt)
    assert "L0 +cross" in stream.labels
    probs = D.logit_lens(model, stream.resid, "decoder.")
    expected = torch.softmax(model(src, tgt)[0].double(), -1).detach().numpy()
    np.testing.assert_allclose(probs[-1], expected, atol=1e-10)


def test_lens_table_marks_unscored_positions():
    probs = np.full((2, 3, 4), 0.25)
    probs[:, 1] = [0.1, 0.7, 0.1, 0.1]
    table = D.lens_table(probs, [IGNORE, 1, IGNORE])
    assert np.isnan(table.p_right[:, 0]).all() and np.isnan(table.p_right[:, 2]).all()
    np.testing.assert_allclose(table.p_right[:, 1], 0.7)
    assert (table.top[:, 1] == 1).all()


def test_pre_ln_stream_is_the_sum_of_what_was_written():
    model = _model("pre")
    stream = D.forward_stream(model, _ids())
    assert stream.is_sum
    np.testing.assert_allclose(stream.part_vectors.sum(0), stream.resid[-1], atol=1e-10)
    lengths, along = D.contributions(stream, 3)
    assert along.sum() == pytest.approx(np.linalg.norm(stream.resid[-1, 3]))
    assert np.all(np.abs(along) <= lengths + 1e-12)


def test_post_ln_stream_is_not_a_plain_sum():
    model = _model("post")
    stream = D.forward_stream(model, _ids())
    assert not stream.is_sum
    assert not np.allclose(stream.part_vectors.sum(0), stream.resid[-1], atol=1e-3)
    np.testing.assert_allclose(np.linalg.norm(stream.resid[1:], axis=-1), math.sqrt(16), rtol=1e-3)  # LN'd


# ---------------------------------------------------------------------------------------------
# The depth experiment: the claims the page makes, measured (48 layers, gain 1)


@pytest.fixture(scope="module")
def profiles():
    return {(v, s): D.depth_profile(v, 48, gain=1.0, seed=s) for v in D.VARIANTS for s in (0, 1)}


@pytest.mark.parametrize("seed", [0, 1])
def test_without_residuals_the_gradient_falls_geometrically(profiles, seed):
    rel = D.relative(profiles["no residual", seed].resid_grad)
    assert rel[0] < 1e-10
    layers = np.arange(1, 49)
    logs = np.log(rel[1:])
    slope, intercept = np.polyfit(layers, logs, 1)
    r2 = 1 - np.var(logs - (slope * layers + intercept)) / np.var(logs)
    assert r2 > 0.97  # a straight line on the log chart: geometric
    factor = D.per_layer_factor(rel)
    assert factor == pytest.approx(math.exp(-slope)) and factor < 0.7


@pytest.mark.parametrize("seed", [0, 1])
def test_pre_ln_stays_in_a_bounded_band(profiles, seed):
    rel = D.relative(profiles["pre-LN", seed].resid_grad)
    assert np.isfinite(rel).all()
    assert rel.max() / rel.min() < 50  # over 48 layers, versus 1e15 without the residual
    assert rel.min() >= 0.5  # and it never falls below the top: no vanishing


@pytest.mark.parametrize("seed", [0, 1])
def test_post_ln_zigzags_where_pre_ln_is_smooth(profiles, seed):
    """The page: post-LN passes the gradient through a LayerNorm in every layer, so each layer
    multiplies it by its own factor; pre-LN's identity path makes the curve smooth."""
    pre = np.std(D.log_steps(profiles["pre-LN", seed].resid_grad))
    post = np.std(D.log_steps(profiles["post-LN", seed].resid_grad))
    assert post > 2 * pre
    rel = D.relative(profiles["post-LN", seed].resid_grad)
    assert np.isfinite(rel).all() and rel.max() / rel.min() < 1e3  # no explosion at initialisation


PAGE_GAINS = (1.0, 1.5, 2.0)  # the Depth page's init gains from the default up to its largest (2.0)
PAGE_SEEDS = (0, 1, 20)  # its init seeds run 0..20


@pytest.fixture(scope="module")
def worst_no_norm():
    """The no-norm stack at the page's deepest setting (48 layers) and its larger gains."""
    return {(g, s): D.depth_profile("no norm", D.MAX_EXPERIMENT_LAYERS, gain=g, seed=s)
            for g in PAGE_GAINS for s in PAGE_SEEDS}


@pytest.mark.parametrize("gain", PAGE_GAINS)
@pytest.mark.parametrize("seed", PAGE_SEEDS)
def test_without_norm_the_gradient_grows_going_down(worst_no_norm, gain, seed):
    """Every value is finite in log space, even where the norm itself is past float64's ~1.8e308
    (48 layers at gain 2: up to ~1e640 over the page's seeds), and the gradient grows going down."""
    p = worst_no_norm[gain, seed]
    log_rel = p.log_resid_grad - p.log_resid_grad[-1]  # ln of the curve the page draws
    assert np.isfinite(log_rel).all() and np.isfinite(p.log_weight_grad).all() and np.isfinite(p.resid_norm).all()
    assert log_rel[1] > math.log(1e6)  # a million times the top's gradient, near the input
    slope = np.polyfit(np.arange(1, len(log_rel)), log_rel[1:], 1)[0]
    assert slope < 0  # going up the stack the gradient shrinks, i.e. it grows going down
    # Where a norm fits in a float64 the plain value is the log's, and it is inf only where it does not fit.
    fits = p.log_resid_grad < math.log(np.finfo(np.float64).max)
    np.testing.assert_allclose(np.log(p.resid_grad[fits]), p.log_resid_grad[fits], rtol=1e-12, atol=1e-12)
    assert np.isposinf(p.resid_grad[~fits]).all()


@pytest.mark.parametrize("variant", list(D.VARIANTS))
def test_every_stack_is_finite_in_log_space_at_the_pages_extremes(variant):
    for gain in (0.25, 2.0):  # the page's smallest and largest init gain, at its deepest stack
        p = D.depth_profile(variant, D.MAX_EXPERIMENT_LAYERS, gain=gain, seed=0, n_streams=8, noise=1.0)
        assert np.isfinite(p.log_resid_grad).all() and np.isfinite(p.log_weight_grad).all()
        assert np.isfinite(p.resid_norm).all() and not np.isnan(p.resid_grad).any()


def _one_backward_pass(variant: str, n_layers: int, gain: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The experiment's gradient norms from a single autograd.grad over the whole stack (the old way)."""
    model = D.random_stack(variant, n_layers, gain=gain, seed=seed)
    tokens, targets = D._experiment_batch(seed)
    weights = D._block_weights(model)
    flat = [w for ws in weights for w in ws]
    with D.one_thread(), torch.enable_grad():
        if isinstance(model, HyperTransformer):
            states = []
            logits = model(tokens, states)
        else:
            names = [f"blocks.{i}.hook_resid_pre" for i in range(n_layers)] + [f"blocks.{n_layers - 1}.hook_resid_post"]
            state = RunState(capture=frozenset(names), keep_live=True)
            with running(state):
                logits = model(tokens, attn_impl="explicit" if model.cfg.norm == "none" else "auto")
            states = [state.live[n] for n in names]
        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
        grads = torch.autograd.grad(loss, states + flat, allow_unused=True)
    with np.errstate(over="ignore", invalid="ignore"):
        resid = np.array([float(g.norm()) for g in grads[: len(states)]])
        squares = iter([0.0 if g is None else float(g.pow(2).sum()) for g in grads[len(states):]])
        weight = np.sqrt([sum(next(squares) for _ in ws) for ws in weights])
    return resid, weight


@pytest.mark.parametrize("variant,n_layers,gain,overflows", [
    ("no norm", 48, 1.5, False), ("no norm", 48, 2.0, True), ("no residual", 48, 1.5, True),
    ("post-LN", 12, 1.0, False), ("hyper (Sinkhorn)", 8, 1.0, False), ("hyper (free mixing)", 8, 2.0, False)])
def test_block_by_block_backward_is_one_backward_pass_bit_for_bit(variant, n_layers, gain, overflows):
    """Rescaling by powers of two is exact, so wherever one pass stays finite the numbers are its
    very bits; where it overflowed the block-by-block ones are still finite in log space."""
    p = D.depth_profile(variant, n_layers, gain=gain, seed=1)
    resid, weight = _one_backward_pass(variant, n_layers, gain, seed=1)
    for new, old in ((p.resid_grad, resid), (p.weight_grad, weight)):
        ok = np.isfinite(old)
        assert ok.any() and ok.all() != overflows
        np.testing.assert_array_equal(new[ok], old[ok])
    assert np.isfinite(p.log_resid_grad).all() and np.isfinite(p.log_weight_grad).all()


@pytest.mark.parametrize("seed", [0, 1])
def test_sinkhorn_hyper_connections_stay_bounded_and_free_mixing_does_not(profiles, seed):
    sink = D.relative(profiles["hyper (Sinkhorn)", seed].resid_grad)
    free = D.relative(profiles["hyper (free mixing)", seed].resid_grad)
    assert sink.max() / sink.min() < 50
    assert free.max() / free.min() > 1e4


def test_residual_stacks_stay_above_the_floor_and_plain_below_the_ceiling(profiles):
    rel_plain = D.relative(profiles["no residual", 0].resid_grad)
    rho = D.per_layer_factor(rel_plain)
    lower, upper = D.bounds(rho, 48)
    for v in ("pre-LN", "post-LN", "hyper (Sinkhorn)"):
        assert np.all(D.relative(profiles[v, 0].resid_grad) >= lower)
    # With rho set a little above the measured rate the plain stack sits under rho^(L-l) far down.
    _, upper_loose = D.bounds(min(rho * 1.3, 0.99), 48)
    assert np.all(rel_plain[:24] <= upper_loose[:24])


def test_depth_profile_uses_the_same_gradients_as_run_with_cache():
    prof = D.depth_profile("pre-LN", 4, gain=1.0, seed=0)
    model = D.random_stack("pre-LN", 4, gain=1.0, seed=0)
    tokens, targets = D._experiment_batch(0)
    names = [f"blocks.{i}.hook_resid_pre" for i in range(4)] + ["blocks.3.hook_resid_post"]
    _, cache = model.run_with_cache(tokens, names=names,
                                    grad_of=lambda lo: F.cross_entropy(lo.flatten(0, 1), targets.flatten()))
    np.testing.assert_allclose(prof.resid_grad, [float(cache[n + "_grad"].norm()) for n in names], rtol=1e-10)
    assert prof.weight_grad.shape == (4,) and np.all(prof.weight_grad > 0)


def test_bounds_and_validation():
    lower, upper = D.bounds(0.5, 3)
    np.testing.assert_allclose(lower, [0.125, 0.25, 0.5, 1.0])
    np.testing.assert_allclose(upper, [0.125, 0.25, 0.5, 1.0])
    with pytest.raises(ValueError):
        D.bounds(1.0, 3)
    with pytest.raises(ValueError, match="n_layers"):
        D.random_stack("pre-LN", 49)
    with pytest.raises(ValueError, match="variant"):
        D.random_stack("sandwich-LN", 4)


# ---------------------------------------------------------------------------------------------
# Sinkhorn and hyper-connections


def test_sinkhorn_makes_doubly_stochastic_matrices():
    logits = torch.randn(8, 5, 5, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 2
    m = sinkhorn(logits)
    assert torch.all(m >= 0)
    torch.testing.assert_close(m.sum(-1), torch.ones(8, 5, dtype=torch.float64), atol=1e-6, rtol=0)
    torch.testing.assert_close(m.sum(-2), torch.ones(8, 5, dtype=torch.float64), atol=1e-6, rtol=0)
    # Doubly stochastic => spectral norm exactly 1: mixing can neither grow nor kill the mean.
    assert torch.linalg.matrix_norm(m, ord=2).max() <= 1 + 1e-6
    with pytest.raises(ValueError, match="square"):
        sinkhorn(torch.zeros(2, 3))


def test_hyper_transformer_mixing_matrices_and_gradients():
    model = HyperTransformer(HyperConfig(n_streams=3, n_layers=2, noise=0.7), seed=0).double()
    mats = model.mixing_matrices()
    assert mats.shape == (4, 3, 3)
    torch.testing.assert_close(mats.sum(-1), torch.ones(4, 3, dtype=torch.float64), atol=1e-6, rtol=0)
    torch.testing.assert_close(mats.sum(-2), torch.ones(4, 3, dtype=torch.float64), atol=1e-6, rtol=0)
    assert not torch.allclose(mats[0], torch.eye(3, dtype=torch.float64), atol=1e-2)  # really mixes
    states = []
    logits = model(torch.randint(0, 16, (2, 6), generator=torch.Generator().manual_seed(0)), states)
    assert logits.shape == (2, 6, 16) and len(states) == 3 and states[0].shape == (2, 6, 3, 32)
    free = HyperTransformer(HyperConfig(n_streams=3, n_layers=2, mixing="free"), seed=0)
    assert not torch.allclose(free.mixing_matrices().sum(-1), torch.ones(4, 3), atol=1e-2)
    with pytest.raises(ValueError, match="mixing"):
        HyperConfig(mixing="softmax")


# ---------------------------------------------------------------------------------------------
# Long-range paths


@pytest.mark.parametrize("n,heads", [(2, 1), (9, 2), (10, 2), (64, 3), (100, 7)])
def test_spread_heads_need_exactly_the_ideal_layers(n, heads):
    need = D.ideal_layers(n, heads)
    assert need - 1 < D.hop_formula(n, heads) <= need + 1e-9
    got, fields = D.layers_to_connect(D.strided_masks(n, heads, max(need, 1)), max_layers=max(need, 1))
    assert got == need
    assert D.strided_head_layers(n, heads) == need  # the cheap edge-following version agrees
    if need > 1:  # one layer fewer is not enough
        assert D.layers_to_connect(D.strided_masks(n, heads, need - 1), max_layers=need - 1)[0] is None


def test_layers_to_connect_on_known_masks():
    assert D.layers_to_connect([masks.causal(12)])[0] == 1
    assert D.layers_to_connect([masks.sliding_window(13, 3, causal=True)])[0] == 4  # 12 steps back, 3 a layer
    got, fields = D.layers_to_connect([masks.block_diagonal(8, 4)])
    assert got is None and fields.shape[1] == 8  # two blocks never talk


def test_random_heads_grow_like_log_n_and_rnn_like_n():
    small, large = D.random_head_mean(16, 2), D.random_head_mean(1024, 2)
    assert small < large < 3 * small  # 64x longer input, well under 3x the layers
    assert D.rnn_path(1024) == 1023 and D.rnn_path(1) == 0


def test_attention_graphs_from_a_model():
    model = _model("pre", n_layers=2)
    graphs = D.attention_graphs(model, _ids(9), threshold=1e-9)
    assert graphs.shape == (2, 9, 9)
    np.testing.assert_array_equal(graphs[0], masks.causal(9).numpy())  # every allowed key gets weight
    assert D.layers_to_connect(list(torch.as_tensor(graphs)))[0] == 1
    sharp = D.attention_graphs(model, _ids(9), threshold=1.0)
    # Only the first token puts weight exactly 1 anywhere (on itself, its only key).
    assert sharp[:, 0, 0].all() and sharp.sum() == 2
    assert D.layers_to_connect(list(torch.as_tensor(sharp)), max_layers=9)[0] is None


# ---------------------------------------------------------------------------------------------
# Figures


def test_figures_build_with_the_right_shapes():
    tokens = ["a", "b", "c"]
    f = fig.stage_heatmap(np.array([[1.0, 0.0, 1e-3], [2.0, 3.0, 4.0]]), ["embed", "L0 +attn"], tokens, log=True)
    assert np.isnan(np.asarray(f.data[0].z)[0, 1])  # a zero is blank on a log colour scale
    curves = {"pre-LN": np.array([2.0, 1.5, 1.0]), "no norm": np.array([np.inf, 10.0, 1.0])}
    lower, upper = D.bounds(0.5, 2)
    chart = fig.depth_chart(curves, lower, upper, 0.5)
    assert len(chart.data) == 4 and "overflowed" in chart.data[1].name
    assert chart.layout.yaxis.type == "log"
    lens = fig.logit_lens_figure(np.full((2, 3), np.nan), np.full((2, 3), "x"), np.ones((2, 3)),
                                 np.full((2, 3), np.nan), ["embed", "L0 +mlp"], tokens)
    assert lens.data[0].zmin == 0 and lens.data[0].zmax == 1
    with pytest.raises(ValueError):
        fig.saliency_figure(tokens, np.zeros(2))
    ns = np.array([2, 4, 8])
    paths = fig.paths_chart(ns, np.log(ns) / np.log(3), ns * 0 + 1, ns * 1.0, ns - 1, 2, 4, (8, 2, "model"))
    assert paths.layout.xaxis.type == "log" and len(paths.data) == 6  # 4 curves, your n, the model
