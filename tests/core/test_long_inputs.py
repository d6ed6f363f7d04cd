"""Issue 38, the core side of long inputs: the per-panel bounds and their sentences, the figures whose payload
stays bounded at 1,024 tokens, and the computations rewritten to stay light there (the long-range paths, the
attention graphs, the hook shapes and the chunked influence map) giving the numbers they gave before."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from core import masks as M
from core.analysis import bounds as B
from core.analysis import depth as D
from core.analysis import generation as G
from core.analysis import masks as MA
from core.figures import generation as FG
from core.figures import heads as FH
from core.figures import masks as FM
from core.figures.long_patterns import DRAWN_EXACT, pattern_figure, pooled_note, reduce_patterns
from core.model import Transformer, TransformerConfig
from core.train import init_model

N = 1024


def sent(fig) -> int:
    """The bytes of a figure as Streamlit sends it (plotly's JSON)."""
    return len(fig.to_json())


def model(arch: str = "decoder", n_layers: int = 2, seed: int = 0) -> Transformer:
    cfg = TransformerConfig(arch=arch, vocab_size=11, d_model=16, n_heads=2, n_layers=n_layers, max_len=64)
    return init_model(cfg, seed).double().eval()


def random_ids(n: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, 11, (1, n), generator=torch.Generator().manual_seed(seed))  # [1 pos]


# ---------------------------------------------------------------------------------------------
# Bounds and their sentences


def test_a_bound_says_what_it_reads_and_why_only_when_it_applies():
    bound = B.Bound(64, "The editor draws every pair")
    assert bound.note(64) is None and bound.cut(1000) == 64 and bound.cut(10) == 10
    assert bound.note(1024) == "The editor draws every pair: it reads the first 64 tokens of your 1,024."
    assert bound.note(1024, verb="shows") == "The editor draws every pair: it shows the first 64 tokens of your 1,024."


@pytest.mark.parametrize("layers,heads", [(2, 2), (4, 4), (12, 12)])
def test_a_memory_bound_fits_its_budget_and_reads_whole_inputs_that_fit(layers, heads):
    budget = 48 << 20
    limit = B.tokens_within(N, layers, heads, 2.5, budget)
    whole = B.attention_bytes(layers, heads, N, 2.5) <= budget
    assert (limit == N) == whole
    if not whole:
        assert limit % B.ROUND_TO == 0 and B.attention_bytes(layers, heads, limit, 2.5) <= budget
        assert B.attention_bytes(layers, heads, limit + B.ROUND_TO, 2.5) > budget
        note = B.memory_bound(N, layers, heads, "The gradient run", 2.5, budget).note(N)
        assert note.startswith("The gradient run keeps every layer's attention weights")
        assert f"the first {limit:,} tokens of your 1,024" in note and "48 MB" in note


# ---------------------------------------------------------------------------------------------
# Figures: bounded payload at 1,024 tokens


def test_a_hook_tensor_of_a_long_input_is_drawn_in_blocks_under_a_megabyte():
    rng = np.random.default_rng(0)
    pattern = rng.dirichlet(np.ones(N), size=(N, 4)).transpose(1, 0, 2)  # [head q k]
    matrix = pattern.transpose(1, 0, 2).reshape(N, 4 * N)  # [q head*k], as the Generation page shows it
    fig = FG.tensor_heatmap(matrix, [f"t{i}" for i in range(N)], "h × k", "L", weights=True)
    z = np.asarray(fig.data[0].z)
    assert z.shape == (FG.TENSOR_CELLS, FG.TENSOR_CELLS) and FG.tensor_blocks(N, 4 * N) == (4, 16)
    assert np.isclose(z.max(), matrix.max())  # the block's largest weight: a strong cell stays visible
    assert fig.data[0].y[1] == "4–7: t4" and sent(fig) < 600_000
    small = FG.tensor_heatmap(matrix[:8, :8], [f"t{i}" for i in range(8)], "k", "L")
    assert np.asarray(small.data[0].z).shape == (8, 8)  # a short input: every cell


def test_a_long_pattern_is_pooled_and_a_short_one_drawn_cell_by_cell():
    rng = np.random.default_rng(1)
    long = np.tril(rng.random((N, N))).astype(np.float32)  # [q k]
    tokens = [f"w{i}" for i in range(N)]
    kept = reduce_patterns(long[None])  # [1 q/4 k/4]
    assert kept.shape == (1, 256, 256) and np.isclose(kept.max(), long.max())
    fig = pattern_figure(kept[0], tokens, tokens)
    assert sent(fig) < 200_000 and pooled_note(N, N) is not None
    assert sent(pattern_figure(long, tokens, tokens)) == sent(fig)  # the whole pattern pools to the same figure
    short = pattern_figure(long[:DRAWN_EXACT, :DRAWN_EXACT], tokens[:DRAWN_EXACT], tokens[:DRAWN_EXACT])
    assert len(short.data[0].x) == DRAWN_EXACT and pooled_note(DRAWN_EXACT, DRAWN_EXACT) is None
    with pytest.raises(ValueError, match="pooled"):
        pattern_figure(np.zeros((10, 10)), tokens, tokens)
    assert fig.data[0].showscale is not False and pattern_figure(kept[0], tokens, tokens, narrow=True).data[0].showscale is False


def test_the_q_and_k_plane_of_a_long_input_is_three_traces():
    rng = np.random.default_rng(2)
    q2, k2 = rng.normal(size=(N, 2)), rng.normal(size=(N, 2))
    pattern = np.eye(N)  # every query sure of one key: one line each
    fig = FH.qk_scatter(q2, k2, [str(i) for i in range(N)], [str(i) for i in range(N)], pattern, np.array([.5, .3]))
    assert len(fig.data) == 3 and fig.data[1].text is None  # lines, keys, queries; no token written on the plane
    assert np.isfinite(np.asarray(fig.data[0].x, dtype=float)).sum() == 2 * N
    assert sent(fig) < 300_000
    short = FH.qk_scatter(q2[:5], k2[:5], list("abcde"), list("abcde"), np.eye(5), np.array([.5, .3]))
    assert len(short.data) == 5 + 2 and list(short.data[-1].text) == list("abcde")


def test_the_arcs_of_a_64_token_mask_ship_in_binary():
    fig = FM.arc_diagram(M.causal(64).numpy(), [str(i) for i in range(64)])
    assert "2016 edges" in fig.data[0].name and sent(fig) < 600_000


# ---------------------------------------------------------------------------------------------
# Computations rewritten for long inputs give the numbers they gave before


def old_layers_to_connect(layer_masks, max_layers, source=0):
    """The former implementation: a matrix product per stacked layer (core.masks.receptive_field)."""
    n = int(layer_masks[0].shape[-1])
    stacked = [layer_masks[i % len(layer_masks)] for i in range(max_layers)]
    fields = np.stack([f.numpy() for f in M.receptive_field(stacked, n - 1)])  # [layers n]
    hit = np.nonzero(fields[:, source])[0]
    if len(hit):
        return int(hit[0]) + 1, fields[: hit[0] + 1]
    grew = np.nonzero(np.r_[True, (fields[1:] != fields[:-1]).any(axis=1)])[0]
    return None, fields[: grew[-1] + 1]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("period", [1, 2, 3])
def test_layers_to_connect_agrees_with_a_matrix_product_per_layer(seed, period):
    g = torch.Generator().manual_seed(seed)
    n = 24
    density = (0.02, 0.05, 0.12)[seed % 3]
    masks = [torch.rand(n, n, generator=g) < density for _ in range(period)]  # some never connect
    got, fields = D.layers_to_connect(masks)
    want, want_fields = old_layers_to_connect(masks, n)
    assert got == want
    np.testing.assert_array_equal(fields, want_fields)


def test_a_1024_token_chain_is_followed_to_its_end():
    chain = torch.zeros(N, N, dtype=torch.bool)
    chain[torch.arange(1, N), torch.arange(N - 1)] = True  # each token sees only the one before it
    needed, fields = D.layers_to_connect([chain, chain])
    assert needed == N - 1 and fields.shape == (N - 1, N)


def test_attention_graphs_read_from_hooks_equal_the_cached_weights():
    m, ids = model(n_layers=3), random_ids(20)
    names = [f"blocks.{i}.attn.hook_pattern" for i in range(3)]
    _, cache = m.run_with_cache(ids, names)
    want = np.stack([(cache[n][0] >= 0.1).any(dim=0).numpy() for n in names])  # [layer q k]
    np.testing.assert_array_equal(D.attention_graphs(m, ids, 0.1), want)


@pytest.mark.parametrize("arch", ["decoder", "encoder-decoder"])
def test_hook_shapes_are_those_of_a_cache_of_every_hook(arch):
    m = model(arch)
    ids = random_ids(9)
    tgt = random_ids(5, seed=3) if arch == "encoder-decoder" else None
    _, cache = m.run_with_cache(ids, tgt=tgt)
    assert {h.name: h.shape for h in G.anatomy(m, ids, tgt)} == {n: tuple(t.shape) for n, t in cache.items()}


def test_the_influence_map_in_batches_of_copies_is_the_same():
    m, ids = model(), random_ids(12)
    mask = M.sliding_window(12, 2).numpy()
    whole = MA.influence(m, ids, MA.mask_argument(np.stack([mask, mask])), budget=1 << 40)
    pieces = MA.influence(m, ids, MA.mask_argument(np.stack([mask, mask])), budget=1)  # one copy at a time
    np.testing.assert_allclose(pieces, whole, rtol=1e-9, atol=1e-12)
    assert (whole > 0).any() and (whole == 0).any()
