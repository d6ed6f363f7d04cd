"""The Attention page's figures at long inputs: pooling (shape, the max and mean of every block, exact at short
lengths), the payload bound (each figure's JSON under 1 MB at 1,024 tokens), and token labels thinned so that no
two overlap (at most one label per LABEL_PX of the axis, never more than WINDOW_MAX)."""

from __future__ import annotations

import base64
import json
import math

import numpy as np
import plotly.io as pio
import pytest

from core.figures import attention as F
from core.figures.heatmaps import (LABEL_PX, OVERVIEW_CELLS, WINDOW_MAX, overview_heatmap, pool, pool_block,
                                   tick_step, window_ticks)

N = 1024
MB = 1_000_000


def rows(n_q: int, n_k: int, heads: tuple = (), seed: int = 0) -> np.ndarray:
    """Random causal attention rows `[*heads q k]` (each row a distribution over the keys up to its own)."""
    rng = np.random.default_rng(seed)
    w = rng.gamma(0.3, size=(*heads, n_q, n_k)).astype(np.float32) * np.tril(np.ones((n_q, n_k), np.float32))
    return w / w.sum(-1, keepdims=True)


def to_json(fig) -> str:
    return pio.to_json(fig, validate=False)


TOKENS = [f"tok{i}" for i in range(N)]


# -- pooling -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("n_q, n_k, block", [(1024, 1024, (4, 4)), (1000, 777, (4, 3)), (5, 7, (2, 3))])
def test_pool_takes_the_max_and_the_mean_of_every_block(n_q, n_k, block):
    x = np.random.default_rng(1).normal(size=(2, n_q, n_k)).astype(np.float32)
    bq, bk = block
    high, mean, big = pool(x, block), pool(x, block, "mean"), pool(x, block, "absmax")
    assert high.shape == mean.shape == big.shape == (2, math.ceil(n_q / bq), math.ceil(n_k / bk))
    for i, j in [(0, 0), (high.shape[1] - 1, high.shape[2] - 1), (high.shape[1] // 2, 1)]:
        cell = x[:, i * bq:(i + 1) * bq, j * bk:(j + 1) * bk]  # the block, shorter at the far edges
        np.testing.assert_array_equal(high[:, i, j], cell.max(axis=(1, 2)))
        np.testing.assert_allclose(mean[:, i, j], cell.mean(axis=(1, 2)), rtol=1e-5)
        largest = np.take_along_axis(cell.reshape(2, -1), np.abs(cell.reshape(2, -1)).argmax(1)[:, None], 1)[:, 0]
        np.testing.assert_array_equal(big[:, i, j], largest)  # the sign is kept


def padded_max(x: np.ndarray, block: tuple) -> np.ndarray:
    """Max pooling written the plain way: pad the edges with -inf, then take each block's largest value."""
    bq, bk = block
    *lead, n_q, n_k = x.shape
    cq, ck = math.ceil(n_q / bq), math.ceil(n_k / bk)
    grid = np.full((*lead, cq * bq, ck * bk), -np.inf, dtype=x.dtype)
    grid[..., :n_q, :n_k] = x
    return grid.reshape(*lead, cq, bq, ck, bk).max(axis=(-3, -1))


@pytest.mark.parametrize("shape, block, dtype", [
    ((4, 1024, 1024), (4, 4), np.float32), ((1023, 1000), (4, 3), np.float32), ((2, 3, 37, 41), (5, 7), np.float64),
    ((3, 2, 9), (1, 4), np.float32), ((6, 6), (6, 6), np.float32), ((2, 9, 9), (3, 3), np.float16),
    ((3, 5), (4, 2), np.float32)])  # a block taller than the input: the plain path
def test_max_pooling_is_every_blocks_largest_value(shape, block, dtype):
    """Every cell, not a sample: the kernel that pools long patterns (torch's) gives what the definition gives,
    NaN included (a NaN in a block is that block's value), on read-only arrays (a memo's) too."""
    x = np.random.default_rng(2).normal(size=shape).astype(dtype)
    x[..., 0, 0] = np.nan
    expected = padded_max(x, block)
    got = pool(x, block)
    assert got.dtype == x.dtype and got.shape == expected.shape
    np.testing.assert_array_equal(got, expected)
    x.setflags(write=False)
    np.testing.assert_array_equal(pool(x, block), expected)


def test_pool_is_exact_at_short_lengths():
    x = rows(30, 30, (4,))
    assert pool_block(30) == 1 and pool(x, (1, 1)) is x  # the toy models' patterns are drawn as they are
    assert pool_block(N) == N // OVERVIEW_CELLS and pool_block(N + 1) == 5
    with pytest.raises(ValueError):
        pool(x, (2, 2), "median")


def test_a_single_strong_weight_survives_max_pooling():
    """A previous-token head at 1,024 tokens: a diagonal one token wide stays at full strength in the overview
    (mean pooling would dilute it to a quarter)."""
    diag = np.eye(N, k=-1, dtype=np.float32)
    b = pool_block(N)
    assert pool(diag, (b, b)).max(axis=1).min() == 1.0
    assert pool(diag, (b, b), "mean").max() <= 0.25


# -- the payload bound at 1,024 tokens ----------------------------------------------------------------------

def test_every_long_figure_ships_under_a_megabyte():
    heads = rows(N, N, (4, 4))  # [layer head q k], a d_model-128 decoder's 4 x 4 heads
    b = pool_block(N)
    overview = pool(heads, (b, b))  # [layer head 256 256]
    one = heads[0, 0]
    q0 = N - 32
    figures = {
        "grid": F.pooled_grid(overview, N, N, (b, b), selected=(1, 2)),
        "grid of 144 heads": F.pooled_grid(np.repeat(overview[:1, :1], 144, axis=1).reshape(12, 12, 256, 256),
                                           N, N, (b, b)),
        "overview": overview_heatmap(overview[0, 0], N, N, (b, b), window=(q0, N, q0, N), query=N - 1),
        "window": F.window_heatmap(one[q0:, q0:], TOKENS[q0:], TOKENS[q0:], (q0, q0), "q", "k", query=N - 1),
        "bars": F.top_query_bars(one[N - 1], TOKENS),
        "lines": F.top_lines_view(one[q0:], q0, TOKENS, TOKENS, query=N - 1),
        "entropy": F.entropy_lines(np.ones(N), np.ones(N), np.ones(N), TOKENS, 0.5),
        "difference": F.pooled_difference_heatmap(pool(one - heads[0, 1], (b, b), "absmax"), N, N, (b, b)),
    }
    sizes = {name: len(to_json(fig)) for name, fig in figures.items()}
    assert max(sizes.values()) < MB, sizes
    # What the bound replaces: every head drawn whole was ~23 MB (one head alone, quantised: ~1.5 MB).
    assert len(to_json(F.overview_grid(heads[:1, :1], TOKENS, TOKENS))) > MB


@pytest.mark.parametrize("layers, heads", [(3, 5), (2, 4), (1, 1), (12, 12)])
def test_the_pooled_grid_stays_under_its_cell_budget_and_says_how_it_pooled(layers, heads):
    b = pool_block(N)
    overview = np.random.default_rng(3).random((layers, heads, N // b, N // b), dtype=np.float32)  # pooled already
    spec = json.loads(to_json(F.pooled_grid(overview, N, N, (b, b))))
    cells = sum(np.prod(json_shape(t["z"])) for t in spec["data"])
    assert len(spec["data"]) == layers * heads and cells <= F.GRID_CELLS
    assert "largest weight" in spec["layout"]["coloraxis"]["colorbar"]["title"]["text"]
    assert all(t["coloraxis"] == "coloraxis" for t in spec["data"])  # one shared colour scale


def json_shape(z: dict) -> tuple:
    return tuple(int(s) for s in str(z["shape"]).split(","))


# -- labels that never overlap ---------------------------------------------------------------------------------

@pytest.mark.parametrize("room", [F.WINDOW_X_PX, F.WINDOW_Y_PX, 200])
def test_window_labels_are_at_least_a_label_apart(room):
    """The rule: along an axis of `room` pixels holding n cells, labels are written every step-th cell with
    room / n * step >= LABEL_PX, so two labels never share a label's room; every label while they fit."""
    for n in range(1, WINDOW_MAX + 1):
        step = tick_step(n, room)
        assert room / n * step >= LABEL_PX or step == 1 and n * LABEL_PX <= room or n == 1
        if n * LABEL_PX <= room:
            assert step == 1
        for first in (0, 7, 993):
            labels = [f"{first + i}:t" for i in range(n)]
            shown = window_ticks(labels, first, room)["tickvals"]
            assert len(shown) <= max(1, math.ceil(room / LABEL_PX)) and len(shown) <= WINDOW_MAX
            at = [int(v.split(":")[0]) for v in shown]
            assert all(p % step == 0 for p in at)  # the same positions stay labelled as the window moves


def test_the_window_heatmap_labels_its_own_positions():
    one = rows(N, N)
    q0, k0, size = 500, 300, 64
    spec = json.loads(to_json(F.window_heatmap(one[q0:q0 + size, k0:k0 + size], TOKENS[q0:q0 + size],
                                               TOKENS[k0:k0 + size], (q0, k0), "q", "k", query=q0 + 3)))
    trace = spec["data"][0]
    assert trace["y"][0] == f"{q0}:tok{q0}" and trace["x"][-1] == f"{k0 + size - 1}:tok{k0 + size - 1}"
    for axis, room in (("xaxis", F.WINDOW_X_PX), ("yaxis", F.WINDOW_Y_PX)):
        shown = spec["layout"][axis]["tickvals"]
        assert len(shown) * LABEL_PX <= room and set(shown) <= set(trace["x" if axis == "xaxis" else "y"])
    assert spec["layout"]["shapes"][0]["y0"] == 2.5  # the query's row, inside the window


def test_top_bars_label_the_strongest_keys_and_sum_the_rest():
    weights = rows(N, N)[700]
    allowed = np.arange(N) <= 700
    spec = json.loads(to_json(F.top_query_bars(weights, TOKENS, allowed)))
    bar = spec["data"][0]
    ys = np.asarray(decode(bar["y"]), dtype=float)
    assert len(bar["x"]) == F.TOP_KEYS + 1 and bar["x"][-1] == f"the other {701 - F.TOP_KEYS:,} keys"
    top = np.sort(weights)[::-1][:F.TOP_KEYS]
    np.testing.assert_allclose(ys[:-1], top, rtol=1e-6)  # strongest first
    assert ys[-1] == pytest.approx(1 - top.sum(), abs=1e-5)  # the rest, summed: every row adds up to 1


def test_top_lines_draw_only_each_querys_strongest_keys():
    one = rows(N, N)
    q0, size = 600, 32
    spec = json.loads(to_json(F.top_lines_view(one[q0:q0 + size], q0, TOKENS, TOKENS, query=q0 + 5)))
    lines = [t for t in spec["data"] if t["mode"] == "lines"]
    drawn = sum(np.sum(~np.isnan(np.asarray(decode(t["y"]), dtype=float))) // 2 for t in lines)
    assert drawn == size * F.TOP_LINES
    queries, keys = [t for t in spec["data"] if t["mode"] != "lines"]
    assert list(queries["text"][:1]) == [f"{q0}:tok{q0}"]
    best = {int(j) for r in one[q0:q0 + size] for j in np.argsort(r)[-F.TOP_LINES:]}
    assert [t.split(":")[0] for t in keys["hovertext"]] == [f"key {j}" for j in sorted(best)]


def decode(value):
    """A plotly array from its JSON (plain list, or base64 with dtype)."""
    if isinstance(value, dict) and "bdata" in value:
        return np.frombuffer(base64.b64decode(value["bdata"]), dtype=np.dtype(value["dtype"]))
    return value


@pytest.mark.parametrize("n", [65, 256, 1000, 1024, 4096])
@pytest.mark.parametrize("room", [29, 88, 190])
def test_a_pooled_grids_position_labels_keep_apart_and_off_the_next_heads_zero(n, room):
    """A pooled grid labels positions: at least GRID_NUMBER_PX apart, and none within half a label of the axis's far
    end, where the next head's 0 is written."""
    at = F.position_ticks(n, room)["tickvals"]
    px = room / n  # pixels per token
    assert at[0] == 0 and all(px * (b - a) >= F.GRID_NUMBER_PX for a, b in zip(at, at[1:]))
    assert all(px * (n - 1 - v) >= F.GRID_NUMBER_PX / 2 for v in at[1:])
    if room >= 88:
        assert len(at) >= 2  # a position to read, not just the 0
