"""Heatmaps shared by every page: attention patterns on a fixed 0..1 scale with token labels.

Payload matters: a 512-token head is 262k cells. Up to `EXACT_CELLS` cells ship as float32
(exact hover values); above that the weights ship as uint8 percentages (1 byte + base64 per
cell, ~1.4 bytes) and the hover says "about N%".

Long inputs (a 1,024-token head is a million cells) are read in two figures: an overview of the whole
pattern pooled on the server (`pool`: each cell the largest weight of a block of tokens, at most
`OVERVIEW_CELLS` cells a side), and a window of at most `WINDOW_MAX` x `WINDOW_MAX` cells at full resolution with
token labels (`window_ticks` thins them so that no two overlap).
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import plotly.graph_objects as go
import torch

ATTENTION_SCALE = "Cividis"  # colour-blind safe, perceptually uniform
EXACT_CELLS = 128 * 128
OVERVIEW_CELLS = 256  # cells a side of a pooled overview: a 1,024-token head in blocks of 4 x 4 (~90 KB as uint8)
WINDOW_MAX = 64  # tokens a side of the full-resolution window, so at most 64 token labels per axis
LABEL_FONT = 11  # px: a window's token labels
LABEL_PX = 13  # room one such label needs along its axis: its line height (key labels are written upright, at -90°)
NICE_STEPS = (1, 2, 5)  # label every 1, 2, 5, 10, 20, 50, ... tokens: positions a reader can count on
POOLS = ("max", "mean", "absmax")


def unique_labels(tokens: Sequence[str], first: int = 0) -> list[str]:
    """Axis labels for tokens: plotly merges equal category labels, so prefix the position (counted from
    `first`: a window's tokens keep their positions in the input)."""
    return [f"{i}:{t}" for i, t in enumerate(tokens, start=first)]


def attention_heatmap(pattern: np.ndarray, q_tokens: Sequence[str], k_tokens: Sequence[str],
                      title: str = "", height: Optional[int] = None, show_scale: bool = True,
                      zmax: float = 1.0, q_title: str = "query (attending)",
                      k_title: str = "key (attended to)", first: tuple[int, int] = (0, 0)) -> go.Figure:
    """One head's pattern `[q k]` as a heatmap: queries down the side, keys along the top; labels counted from
    `first` (the query and key positions of its first cell, for a window of a longer pattern).

    Built in one Figure construction (no update_* calls afterwards): several times faster, which
    matters on pages that draw many heatmaps per rerun.
    """
    pattern = np.asarray(pattern, dtype=np.float32)
    if pattern.ndim != 2:
        raise ValueError(f"attention_heatmap needs a 2-D [q, k] array, got shape {pattern.shape}")
    nq, nk = pattern.shape
    if len(q_tokens) != nq or len(k_tokens) != nk:
        raise ValueError(f"{len(q_tokens)} query and {len(k_tokens)} key labels for a {nq}x{nk} pattern")
    y, x = unique_labels(q_tokens, first[0]), unique_labels(k_tokens, first[1])
    if nq * nk <= EXACT_CELLS:
        z, zrange = pattern, (0.0, zmax)
        hover = "query %{y}<br>key %{x}<br>weight %{z:.3f}<extra></extra>"
        ticks = None
    else:
        z = np.clip(np.rint(pattern / zmax * 100), 0, 100).astype(np.uint8)  # percent of zmax
        zrange = (0, 100)
        hover = "query %{y}<br>key %{x}<br>weight about %{z}%<extra></extra>"
        ticks = dict(tickvals=[0, 25, 50, 75, 100], ticktext=[f"{v * zmax / 100:g}" for v in (0, 25, 50, 75, 100)])
    trace = dict(type="heatmap", z=z, x=x, y=y, zmin=zrange[0], zmax=zrange[1], colorscale=ATTENTION_SCALE,
                 hovertemplate=hover, showscale=show_scale)
    if show_scale:
        trace["colorbar"] = dict(title=dict(text="weight"), **(ticks or {}))
    layout = dict(
        title=dict(text=title) if title else None, height=height or max(260, min(720, 60 + 22 * nq)),
        margin=dict(l=10, r=10, t=40 if title else 10, b=10),
        xaxis=dict(side="top", tickangle=-60, title=dict(text=k_title), automargin=True),
        yaxis=dict(autorange="reversed", title=dict(text=q_title), automargin=True),
    )
    return go.Figure(data=[trace], layout={k: v for k, v in layout.items() if v is not None})


# ---------------------------------------------------------------------------------------------
# Long inputs: pooled overviews and a readable window
# ---------------------------------------------------------------------------------------------


def pool_block(n: int, cells: int = OVERVIEW_CELLS) -> int:
    """The block side that pools n tokens into at most `cells` cells (1: no pooling)."""
    return max(1, -(-int(n) // max(1, int(cells))))


def pool(values: np.ndarray, block: tuple[int, int], how: str = "max") -> np.ndarray:
    """The last two axes `[.. q k]` reduced in blocks of block[0] x block[1] cells: each block's largest value
    ("max": a single strong weight stays visible, as a thin diagonal does), its mean ("mean"), or its value of
    largest size with its sign ("absmax", for differences). Blocks at the far edges hold what is left. A 1 x 1
    block returns `values` itself: short inputs are drawn exactly."""
    if how not in POOLS:
        raise ValueError(f"how must be one of {POOLS}, got {how!r}")
    values = np.asarray(values)
    bq, bk = int(block[0]), int(block[1])
    if bq < 1 or bk < 1:
        raise ValueError(f"a block is at least 1 x 1 cells, got {bq} x {bk}")
    if bq == bk == 1:
        return values
    *lead, n_q, n_k = values.shape
    cq, ck = -(-n_q // bq), -(-n_k // bk)  # pooled cells a side

    def blocks(fill: float) -> np.ndarray:
        grid = values
        if (cq * bq, ck * bk) != (n_q, n_k):  # pad the edges with a value the reduction ignores
            grid = np.full((*lead, cq * bq, ck * bk), fill, dtype=np.float32 if how == "mean" else values.dtype)
            grid[..., :n_q, :n_k] = values
        return grid.reshape(*lead, cq, bq, ck, bk)  # [.. q/bq bq k/bk bk]

    if how == "max" and values.dtype in (np.float32, np.float64) and bq <= n_q and bk <= n_k:
        return _max_pool(values, bq, bk)
    if how == "max":
        return blocks(-np.inf).max(axis=(-3, -1))  # [.. q/bq k/bk]
    if how == "absmax":
        high, low = blocks(-np.inf).max(axis=(-3, -1)), blocks(np.inf).min(axis=(-3, -1))
        return np.where(-low > high, low, high)  # [.. q/bq k/bk]
    sums = blocks(0.0).sum(axis=(-3, -1), dtype=np.float32)  # [.. q/bq k/bk]
    rows = np.minimum(bq, n_q - bq * np.arange(cq))  # cells each block really holds, per axis
    cols = np.minimum(bk, n_k - bk * np.arange(ck))
    return sums / np.outer(rows, cols)


def _max_pool(values: np.ndarray, bq: int, bk: int) -> np.ndarray:
    """pool(..., "max") in torch, one axis at a time: each row's blocks of bk keys, then each column's blocks of
    bq queries, over strided views of the whole blocks (no copy) plus the partial block at an edge. The same
    numbers as the definition (NaN included), about twice as fast as torch's max_pool2d on a 4 x 1,024 x 1,024
    layer of patterns (bench/attention_summary.py), the work of every temperature change at long inputs."""
    if not values.flags.writeable:  # a frozen memo's array: torch wants memory it may write
        values = values.copy()
    grid = torch.from_numpy(values)  # [.. q k]; shares the array's memory and only reads it
    keys = _block_max(grid, bk, dim=-1)  # [.. q k/bk]
    return _block_max(keys, bq, dim=-2).numpy()  # [.. q/bq k/bk]


def _block_max(t: torch.Tensor, block: int, dim: int) -> torch.Tensor:
    """The largest value of each block of `block` entries along `dim` (-1 or -2), the last block holding what is
    left; amax propagates NaN, as max does."""
    n = t.shape[dim]
    whole = t.unfold(dim, block, block).amax(-1)  # [.. n/block ..]: a view of the whole blocks, reduced
    if n % block:
        rest = t.narrow(dim, n - n % block, n % block).amax(dim, keepdim=True)  # [.. 1 ..]: the partial block
        whole = torch.cat([whole, rest], dim)
    return whole


def tick_step(n: int, room_px: float, label_px: float = LABEL_PX) -> int:
    """Label every step-th of n tokens along an axis of room_px pixels: the smallest step of 1, 2, 5, 10, 20, ...
    that leaves each label label_px of room, so no two labels overlap."""
    fits = max(1, int(room_px // label_px))
    scale = 1
    while True:
        for step in NICE_STEPS:
            if -(-n // (step * scale)) <= fits:  # ceil(n / step) labels
                return step * scale
        scale *= 10


def window_ticks(labels: Sequence[str], first: int, room_px: float, label_px: float = LABEL_PX) -> dict:
    """Tick settings of a window's axis holding `labels` (category values): the labels of positions that are
    multiples of tick_step (counted from the input's start, so moving the window keeps the same positions
    labelled), each label_px apart at least; every label while they fit."""
    step = tick_step(len(labels), room_px, label_px)
    picked = [label for i, label in enumerate(labels) if (first + i) % step == 0]
    return dict(tickmode="array", tickvals=picked, ticktext=picked, tickfont=dict(size=LABEL_FONT))


def overview_heatmap(pooled: np.ndarray, n_q: int, n_k: int, block: tuple[int, int], title: str = "",
                     q_title: str = "query (attending)", k_title: str = "key (attended to)",
                     window: Optional[tuple[int, int, int, int]] = None, query: Optional[int] = None,
                     height: int = 340, how: str = "max") -> go.Figure:
    """The whole pattern of one head, pooled (`pool`) into `pooled` `[q/bq k/bk]`, on axes in token positions;
    the colour bar says how it was pooled. `window` (q0, q1, k0, k1, ends exclusive) is outlined: it is what
    the full-resolution figure beside shows. `query` marks that row with a short line on each side."""
    pooled = np.asarray(pooled, dtype=np.float32)
    bq, bk = block
    z = np.clip(np.rint(pooled * 100), 0, 100).astype(np.uint8)  # percent: ~1.4 bytes a cell
    word = {"max": "largest", "mean": "mean"}.get(how, how)
    cells = f"{bq} × {bk}" if (bq, bk) != (1, 1) else "1 × 1"
    pooled_note = f"{word} weight<br>of {cells} tokens" if (bq, bk) != (1, 1) else "weight"
    hover = ("query ≈ %{y:.0f}<br>key ≈ %{x:.0f}<br>" + (f"{word} weight of the {cells} block " if (bq, bk) != (1, 1)
             else "weight ") + "about %{z}%<extra></extra>")
    trace = dict(type="heatmap", z=z, x0=(bk - 1) / 2, dx=bk, y0=(bq - 1) / 2, dy=bq, zmin=0, zmax=100,
                 colorscale=ATTENTION_SCALE, hovertemplate=hover,
                 colorbar=dict(title=dict(text=pooled_note), tickvals=[0, 25, 50, 75, 100],
                               ticktext=["0", "0.25", "0.5", "0.75", "1"]))
    shapes = []
    if window is not None:
        q0, q1, k0, k1 = window
        shapes.append(dict(type="rect", xref="x", yref="y", x0=k0 - 0.5, x1=k1 - 0.5, y0=q0 - 0.5, y1=q1 - 0.5,
                           line=dict(color="#ffffff", width=2), fillcolor="rgba(0,0,0,0)"))
        shapes.append(dict(type="rect", xref="x", yref="y", x0=k0 - 0.5, x1=k1 - 0.5, y0=q0 - 0.5, y1=q1 - 0.5,
                           line=dict(color="#d95f02", width=1, dash="dot"), fillcolor="rgba(0,0,0,0)"))
    if query is not None and 0 <= query < n_q:
        for x0, x1 in ((0, 0.03), (0.97, 1)):
            shapes.append(dict(type="line", xref="x domain", yref="y", x0=x0, x1=x1, y0=query, y1=query,
                               line=dict(color="#d95f02", width=3)))
    layout = dict(
        height=height, margin=dict(l=10, r=10, t=10, b=44 if title else 10), shapes=shapes,
        xaxis=dict(side="top", title=dict(text=k_title), range=[-0.5, n_k - 0.5], zeroline=False, showgrid=False,
                   automargin=True),
        yaxis=dict(title=dict(text=q_title), range=[n_q - 0.5, -0.5], zeroline=False, showgrid=False,
                   automargin=True),
    )
    if title:
        layout["title"] = dict(text=title, x=0.5, xanchor="center", xref="paper", yref="container", y=0,
                               yanchor="bottom", pad=dict(b=8), font=dict(size=16))
    return go.Figure(data=[trace], layout=layout)
