"""Dense soft links against sharp ones (core.analysis.depth): how many layers the last token needs to
reach every position when only attention weights of at least tau count as links."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from core.analysis import depth as A

NS = (2, 7, 64, 100, 1024, 4096)
HEADS = (1, 2, 4, 16)
TAUS = (0.001, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9, 1.0)


@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("heads", HEADS)
def test_sharp_links_need_the_logarithm(n, heads):
    # Above 1/2 a head can give tau to one key only: the sharp-head count ceil(ln n / ln(H + 1)).
    for tau in (0.51, 0.7, 0.9, 1.0):
        got = A.linked_layers(n, heads, tau)
        assert got == A.ideal_layers(n, heads)
        assert got - 1 < A.hop_formula(n, heads) + 1e-9 and A.hop_formula(n, heads) <= got + 1e-9


@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("heads", HEADS)
def test_when_every_dense_link_counts_one_layer_suffices(n, heads):
    tau = A.dense_link_weight(n)  # a uniform head's weight on each of its n keys
    assert tau == pytest.approx(1 / n)
    assert A.linked_layers(n, heads, tau) == 1
    assert A.linked_layers(n, heads, tau / 3) == 1


@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("heads", HEADS)
def test_a_higher_threshold_never_needs_fewer_layers(n, heads):
    taus = np.geomspace(1e-4, 1.0, 200)
    keys, layers = A.linked_layers_curve(n, heads, taus)
    assert np.all(np.diff(keys) <= 0) and np.all(np.diff(layers) >= 0)
    assert layers[0] == (1 if n > 1 else 0) and layers[-1] == A.ideal_layers(n, heads)


@pytest.mark.parametrize("tau", TAUS)
def test_keys_per_head_is_the_most_that_can_each_carry_tau(tau):
    k = A.keys_per_head(tau, 4096)
    assert k * tau <= 1 + 1e-9 and ((k + 1) * tau > 1 or k == 4096)
    assert A.keys_per_head(tau, 3) <= 3


@pytest.mark.parametrize("n,heads,tau", [(64, 4, 0.1), (64, 1, 0.3), (100, 2, 0.2), (200, 3, 0.05), (37, 4, 0.9),
                                         (500, 1, 0.02), (64, 4, 0.02)])
def test_spread_soft_heads_reach_the_count(n, heads, tau):
    k = A.keys_per_head(tau, n)
    need = A.linked_layers(n, heads, tau)
    patterns = A.spread_soft_patterns(n, heads, k, max(need, 1))  # [layer head q k]
    np.testing.assert_allclose(patterns.sum(-1), 1.0)
    assert np.all(np.triu(patterns, 1) == 0)  # causal
    nonzero = patterns[patterns > 0]
    assert nonzero.min() >= tau - 1e-12  # every link carries at least tau
    graphs = [torch.as_tensor((p >= tau).any(axis=0)) for p in patterns]  # [q k], union over heads
    got, fields = A.layers_to_connect(graphs, max_layers=need)
    assert got is not None and got <= need
    assert fields[-1].all()  # the last token reaches every position, not only the first


def _layers_to_cover(graphs: list[np.ndarray], max_layers: int) -> int | None:
    """Layers (the graphs repeated in order) until every position can reach the last one."""
    n = graphs[0].shape[0]
    field = np.zeros(n, dtype=bool)
    field[-1] = True
    for layer in range(max_layers + 1):
        if field.all():
            return layer
        field = field | graphs[layer % len(graphs)][field].any(axis=0)  # the residual path keeps the field
    return None


@pytest.mark.parametrize("seed", range(8))
def test_no_layout_covers_faster_than_the_count(seed):
    # Random soft heads at several temperatures, thresholded at tau: never fewer layers than the count.
    g = np.random.default_rng(seed)
    n, heads = int(g.integers(8, 80)), int(g.integers(1, 5))
    tau = float(g.choice([0.02, 0.05, 0.1, 0.2, 0.5]))
    temp = float(g.choice([0.05, 0.5, 5.0]))
    causal = np.tril(np.ones((n, n), dtype=bool))
    graphs = []
    for _ in range(4):
        scores = np.where(causal, g.normal(size=(heads, n, n)) / temp, -np.inf)
        w = np.exp(scores - scores.max(-1, keepdims=True))
        w /= w.sum(-1, keepdims=True)
        graphs.append((w >= tau).any(axis=0))  # [q k]
    got = _layers_to_cover(graphs, 4 * n)
    assert got is None or got >= A.linked_layers(n, heads, tau)


def test_the_cover_helper_agrees_with_the_spread_heads():
    n, heads, tau = 100, 2, 0.2
    patterns = A.spread_soft_patterns(n, heads, A.keys_per_head(tau, n), 8)
    assert _layers_to_cover([(p >= tau).any(axis=0) for p in patterns], 8) == A.linked_layers(n, heads, tau)


def test_bad_arguments_are_refused():
    for bad in (0, -0.1, 1.5, float("nan"), True):
        with pytest.raises(ValueError):
            A.keys_per_head(bad, 64)
    with pytest.raises(ValueError):
        A.linked_layers(0, 4, 0.1)
    with pytest.raises(ValueError):
        A.spread_soft_patterns(8, 2, 9, 1)


def test_the_chart_draws_the_curve_both_limits_and_the_chosen_tau():
    from core.figures.depth import linked_layers_chart

    n, heads, tau = 64, 4, 0.1
    taus = np.geomspace(0.5 / n, 1, 50)
    keys, layers = A.linked_layers_curve(n, heads, taus)
    fig = linked_layers_chart(taus, layers, keys, n, heads, A.ideal_layers(n, heads), tau,
                              A.linked_layers(n, heads, tau), title="t")
    names = [t.name for t in fig.data]
    assert names[0].startswith("best layout") and "= 3" in names[1] and names[2].startswith("dense")
    assert list(fig.data[-1].y) == [2] and list(fig.data[-1].x) == [tau]
    assert fig.layout.xaxis.type == "log" and fig.layout.xaxis.title.text and fig.layout.yaxis.title.text
    assert all("%{y}" in (t.hovertemplate or "") for t in fig.data if t.hoverinfo != "skip")
