"""Figures of the Attention page: the layer x head grid, token-to-token lines, one query's bars,
the step-by-step bars, row entropy, and the difference of two patterns.

Pure functions: numpy arrays and token lists in, plotly figures out. Attention weights always use
the fixed 0..1 range and the colour-blind-safe Cividis scale (see core.figures.heatmaps).
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import plotly.graph_objects as go

from core.figures.heatmaps import (ATTENTION_SCALE, EXACT_CELLS, NICE_STEPS, attention_heatmap, pool, pool_block,
                                   tick_step, unique_labels, window_ticks)

DIFF_SCALE = "RdBu"  # diverging, colour-blind-safe (ColorBrewer); centred at 0 with zmid
QUERY_COLOUR = "#d95f02"  # the chosen query (orange reads well against Cividis blues and yellows)
OTHER_COLOUR = "#3b528b"
MASKED_COLOUR = "#bdbdbd"
MAX_LINES = 3000  # the strongest lines drawn in the lines view; the rest would be invisible anyway
MAX_LINE_LABELS = 40  # token labels written beside the lines view up to this many tokens per side
FONT = dict(size=14)


def head_heatmap(pattern: np.ndarray, q_tokens: Sequence[str], k_tokens: Sequence[str], q_title: str,
                 k_title: str, title: str = "", query: Optional[int] = None, height: Optional[int] = None) -> go.Figure:
    """One head's pattern with named axes; the chosen query row is outlined in orange."""
    fig = attention_heatmap(pattern, q_tokens, k_tokens, title=title, height=height, q_title=q_title,
                            k_title=k_title)
    layout = dict(font=FONT)
    if title:
        layout["title"] = _caption_title(title)
        layout["margin"] = dict(l=10, r=10, t=10, b=44)
    if query is not None and 0 <= query < len(q_tokens):
        layout["shapes"] = [dict(type="rect", xref="x domain", yref="y", x0=0, x1=1, y0=query - 0.5, y1=query + 0.5,
                                 line=dict(color=QUERY_COLOUR, width=3), fillcolor="rgba(0,0,0,0)")]
    fig.update_layout(layout)
    return fig


# At 1024 x 768 the page's main column is about 560 px wide; the window's query labels take about 80 px, and its
# colour bar lies under the plot, which leaves the plot about 470 px for its key labels.
WINDOW_X_PX = 440  # room for the window's key labels (measured in chromium: ~470)
WINDOW_Y_PX = 470  # the window's plotting height: room for its query labels


def window_heatmap(window: np.ndarray, q_tokens: Sequence[str], k_tokens: Sequence[str], first: tuple[int, int],
                   q_title: str, k_title: str, title: str = "", query: Optional[int] = None) -> go.Figure:
    """A window of a long head's pattern at full resolution, `[wq wk]` from query first[0] and key first[1]
    (`q_tokens`, `k_tokens`: the window's own tokens), exact weights on hover. Labels keep their positions in the
    input; past what fits at 1024 x 768 every 2nd, 5th, ... is written (heatmaps.window_ticks, counted from the
    input's start, so moving the window keeps the labelled positions). `query` (a position in the input) is
    outlined in orange when the window holds it."""
    window = np.asarray(window, dtype=np.float32)
    n_q, n_k = window.shape
    fig = attention_heatmap(window, q_tokens, k_tokens, title=title, height=WINDOW_Y_PX + 190, q_title=q_title,
                            k_title=k_title, first=first)
    fig.update_traces(colorbar=dict(orientation="h", x=0.5, xanchor="center", y=-0.02, yanchor="top", len=0.7,
                                    thickness=12, title=dict(text="weight", side="right")))
    y, x = fig.data[0].y, fig.data[0].x
    layout = dict(font=FONT)
    layout["xaxis"] = dict(side="top", tickangle=-90, title=dict(text=k_title), automargin=True, type="category",
                           **window_ticks(x, first[1], WINDOW_X_PX))
    layout["yaxis"] = dict(autorange="reversed", title=dict(text=q_title), automargin=True, type="category",
                           **window_ticks(y, first[0], WINDOW_Y_PX))
    layout["margin"] = dict(l=10, r=10, t=10, b=(44 if title else 10) + 56)  # the colour bar under the plot
    if title:
        layout["title"] = _caption_title(title)
    row = None if query is None else query - first[0]
    if row is not None and 0 <= row < n_q:
        layout["shapes"] = [dict(type="rect", xref="x domain", yref="y", x0=0, x1=1, y0=row - 0.5, y1=row + 0.5,
                                 line=dict(color=QUERY_COLOUR, width=3), fillcolor="rgba(0,0,0,0)")]
    fig.update_layout(layout)
    return fig


def _caption_title(text: str) -> dict:
    """A chart title set under the chart like a caption: keys label the top axis, so a title above would
    collide with them (and exported PNGs keep it)."""
    return dict(text=text, x=0.5, xanchor="center", xref="paper", yref="container", y=0, yanchor="bottom",
                pad=dict(b=8), font=dict(size=16))


GRID_TICK_FONT = 10  # px: the grid's token labels
GRID_LABEL_PX = 11  # room one such label needs along its axis (its line height; rotated -60°, about the same)
GRID_HEADS_PX = 352  # the width the heads of one layer share at the narrowest the page is read (1024 x 768)
GRID_GAP_PX = 14  # between two layers' rows: no labels or titles live there, only the selected head's frame
GRID_ROW_PX = 190  # one layer's row, up to four heads (grid_row_px)
GRID_ROW_MIN_PX = 72  # the shortest row: 128 tokens still show 3 query labels, 16 tokens 4
GRID_TITLE_CHAR_PX = 8.5  # width of one character of a 14 px column title (generous)
GRID_TOP_PX = 34  # above the first row: the column titles "head 0", "head 1", ...
GRID_CHAR_PX = 6.2  # width of one character of a token label (generous), to size the margin under the grid


def grid_tick_step(n: int, room_px: float) -> int:
    """Label every step-th of n tokens along an axis of room_px pixels: the smallest step of 1, 2, 5, 10, 20, ...
    that leaves each label GRID_LABEL_PX of room (heatmaps.tick_step). 8 tokens keep every label; 128 keep a
    readable subset, not none."""
    return tick_step(n, room_px, GRID_LABEL_PX)


def _grid_ticks(labels: Sequence[str], room_px: float, shown: bool) -> dict:
    """One grid axis's tick settings: every step-th token label (grid_tick_step) on a shown axis, none elsewhere.
    Labels sit only outside the grid (first column, bottom row), so none is ever drawn over a neighbour."""
    if not shown:
        return dict(showticklabels=False, ticks="")
    picked = list(labels[::grid_tick_step(len(labels), room_px)])
    return dict(showticklabels=True, ticks="outside", ticklen=3, tickmode="array", tickvals=picked, ticktext=picked,
                tickfont=dict(size=GRID_TICK_FONT), automargin=True)


def _grid_bottom_px(labels: Sequence[str]) -> int:
    """The margin under the grid that the bottom row's key labels need, written at -60° (sin 60° ≈ 0.87)."""
    longest = max((len(t) for t in labels), default=1)
    return int(12 + 0.87 * GRID_CHAR_PX * longest)


def grid_row_px(n_heads: int) -> int:
    """The height of one layer's row: 190 px up to four heads; with more heads each is narrower, so rows shrink
    with them (a 12-head GPT-2 layer: 72 px) and a head stays a small square rather than a tall strip."""
    return GRID_ROW_PX if n_heads <= 4 else max(GRID_ROW_MIN_PX, round(4 * GRID_ROW_PX / n_heads))


def grid_column_title(head: int, n_heads: int) -> str:
    """A column's title: "head h" while it fits one head's width at the narrowest window, else "H h" (a
    12-head layer gives each head about 29 px there, too little for "head 11")."""
    return f"head {head}" if len(f"head {n_heads - 1}") * GRID_TITLE_CHAR_PX <= GRID_HEADS_PX / n_heads else f"H{head}"


def overview_grid(patterns: np.ndarray, q_tokens: Sequence[str], k_tokens: Sequence[str],
                  selected: Optional[tuple[int, int]] = None, cell_px: Optional[int] = None) -> go.Figure:
    """Every head of every layer `[layer head q k]` as a grid of small heatmaps on one 0..1 scale.

    Rows are layers, columns are heads, read like a table: each row is titled "layer l" on its left (the
    first column's y-axis title, centred on the row), each column "head h" above the first row. Every head
    shares the same tokens, so query labels sit on the first column only and key labels under the bottom
    row only: no label is drawn over a neighbouring heatmap at any width. Long inputs label every 2nd, 5th,
    10th ... token (grid_tick_step). Each row is cell_px tall (default: grid_row_px, shorter for many heads, whose
    columns are titled "H h" when "head h" would not fit: grid_column_title). The selected (layer, head) gets an orange
    frame. Above `EXACT_CELLS` cells in all, weights ship as uint8 percentages to keep the payload small.
    The subplot layout is written out directly (one Figure construction, no make_subplots), which is
    several times faster to build. Past GRID_CELLS cells in all, draw `pooled_grid` instead.
    """
    patterns = np.asarray(patterns, dtype=np.float32)
    if patterns.ndim != 4:
        raise ValueError(f"overview_grid needs [layer head q k], got shape {patterns.shape}")
    n_l, n_h, n_q, n_k = patterns.shape
    if (len(q_tokens), len(k_tokens)) != (n_q, n_k):
        raise ValueError(f"{len(q_tokens)} query and {len(k_tokens)} key labels for {n_q}x{n_k} patterns")
    cell_px = grid_row_px(n_h) if cell_px is None else cell_px
    quantise = patterns.size > EXACT_CELLS
    y, x = unique_labels(q_tokens), unique_labels(k_tokens)
    value = "weight about %{z}%" if quantise else "weight %{z:.3f}"

    def trace(layer: int, head: int) -> dict:
        z = patterns[layer, head]
        if quantise:
            z = np.clip(np.rint(z * 100), 0, 100).astype(np.uint8)  # percent
        return dict(type="heatmap", z=z, x=x, y=y,
                    hovertemplate=f"layer {layer} head {head}<br>query %{{y}}<br>key %{{x}}<br>{value}<extra></extra>")

    def axes(layer: int, head: int) -> tuple[dict, dict]:
        return (dict(type="category", tickangle=-60, **_grid_ticks(x, GRID_HEADS_PX / n_h, layer == n_l - 1)),
                dict(type="category", autorange="reversed", **_grid_ticks(y, cell_px, head == 0)))

    ticks = dict(tickvals=[0, 25, 50, 75, 100], ticktext=["0", "0.25", "0.5", "0.75", "1"]) if quantise else {}
    colour = dict(cmax=100 if quantise else 1.0, colorbar=dict(title=dict(text="weight"), **ticks))
    bottom = _grid_bottom_px(x[::grid_tick_step(n_k, GRID_HEADS_PX / n_h)])
    return _grid_figure(n_l, n_h, cell_px, bottom, trace, axes, colour, selected)


GRID_CELLS = 2 ** 18  # cells the whole grid ships at most (~370 KB as uint8): 16 heads of 128², 144 of 42²
GRID_NUMBER_PX = 32  # room one position label (up to "4,000": about 26 px at 10 px) needs along a pooled grid's axis


def grid_block(n_heads: int, n_q: int, n_k: int) -> tuple[int, int]:
    """The block (rows, columns of tokens) that pools `n_heads` heads of n_q x n_k into at most GRID_CELLS cells in
    all, the same factor on both axes; (1, 1) when they fit as they are."""
    side = max(1, int(np.sqrt(GRID_CELLS / max(1, n_heads))))  # cells a side per head
    b = max(pool_block(n_q, side), pool_block(n_k, side))
    return b, b


def grid_more(n_heads: int, n_q: int, n_k: int, block: tuple[int, int]) -> tuple[int, int]:
    """How many of an overview's `block`s pooled_grid pools again into one cell (whole blocks of blocks, so the
    largest of the largest is exact); the grid's cells then stand for block x this many tokens."""
    want = grid_block(n_heads, n_q, n_k)
    return max(1, -(-want[0] // block[0])), max(1, -(-want[1] // block[1]))  # rounded up: never past GRID_CELLS


def pooled_grid(pooled: np.ndarray, n_q: int, n_k: int, block: tuple[int, int],
                selected: Optional[tuple[int, int]] = None, cell_px: Optional[int] = None) -> go.Figure:
    """overview_grid for long inputs: every head's pattern already pooled `[layer head q/bq k/bk]` (the largest
    weight of each block of `block` tokens, heatmaps.pool), pooled further when the grid would ship more than
    GRID_CELLS cells, on axes counted in token positions (a position label needs no token to be read; the one-head
    view has the tokens). The colour bar says how the cells were pooled; every head shares its 0..1 scale."""
    pooled = np.asarray(pooled, dtype=np.float32)
    if pooled.ndim != 4:
        raise ValueError(f"pooled_grid needs [layer head q k], got shape {pooled.shape}")
    n_l, n_h = pooled.shape[:2]
    more = grid_more(n_l * n_h, n_q, n_k, block)
    pooled = pool(pooled, more)
    bq, bk = block[0] * more[0], block[1] * more[1]
    cell_px = grid_row_px(n_h) if cell_px is None else cell_px
    z_all = np.clip(np.rint(pooled * 100), 0, 100).astype(np.uint8)  # percent: ~1.4 bytes a cell
    block_note = f"{bq} × {bk}"

    def trace(layer: int, head: int) -> dict:
        return dict(type="heatmap", z=z_all[layer, head], x0=(bk - 1) / 2, dx=bk, y0=(bq - 1) / 2, dy=bq,
                    hovertemplate=f"layer {layer} head {head}<br>query ≈ %{{y:.0f}}<br>key ≈ %{{x:.0f}}<br>largest "
                                  f"weight of the {block_note} block about %{{z}}%<extra></extra>")

    def axis(n: int, room: float, shown: bool) -> dict:
        ticks = dict(showticklabels=True, ticks="outside", ticklen=3, tickfont=dict(size=GRID_TICK_FONT),
                     **position_ticks(n, room)) if shown else dict(showticklabels=False, ticks="")
        return dict(range=[-0.5, n - 0.5], zeroline=False, showgrid=False, **ticks)

    def axes(layer: int, head: int) -> tuple[dict, dict]:
        x_axis = axis(n_k, GRID_HEADS_PX / n_h, layer == n_l - 1)
        y_axis = axis(n_q, cell_px, head == 0)
        y_axis["range"] = y_axis["range"][::-1]  # the first query at the top
        return x_axis, y_axis

    ticks = dict(tickvals=[0, 25, 50, 75, 100], ticktext=["0", "0.25", "0.5", "0.75", "1"])
    colour = dict(cmax=100, colorbar=dict(title=dict(text=f"largest weight<br>of {block_note} tokens"), **ticks))
    return _grid_figure(n_l, n_h, cell_px, GRID_BOTTOM_NUMBERS_PX, trace, axes, colour, selected)


GRID_BOTTOM_NUMBERS_PX = 30  # under a pooled grid: one row of upright position labels


def position_ticks(n: int, room_px: float) -> dict:
    """Position labels along an axis of n tokens and room_px pixels: 0 and every multiple of a step of 1, 2, 5,
    10, 20, ... at least GRID_NUMBER_PX apart, leaving out one within half a label of the far end, where it would
    touch the neighbouring head's 0."""
    step = 1
    for scale in (10 ** k for k in range(len(str(max(1, n))) + 1)):
        fitting = [s * scale for s in NICE_STEPS if room_px / max(1, n) * s * scale >= GRID_NUMBER_PX]
        if fitting:
            step = fitting[0]
            break
    half_label = GRID_NUMBER_PX / 2 / (room_px / max(1, n))  # in tokens
    values = [v for v in range(0, n, step) if v == 0 or v <= n - 1 - half_label]
    return dict(tickmode="array", tickvals=values, ticktext=[f"{v:,}" for v in values])


def _grid_figure(n_l: int, n_h: int, cell_px: int, bottom: int, trace, axes, colour: dict,
                 selected: Optional[tuple[int, int]]) -> go.Figure:
    """The grid's frame shared by overview_grid and pooled_grid: one subplot per (layer, head) placed by hand,
    `trace(layer, head)` and `axes(layer, head)` -> (x axis, y axis) filling each, row and column titles, the
    selected head's orange frame and one colour axis (`colour`: its cmax and colour bar) for every head."""
    rows_px = cell_px * n_l + GRID_GAP_PX * (n_l - 1)  # the plotting area's height
    height = GRID_TOP_PX + rows_px + bottom
    gap_x = min(0.04, 0.24 / n_h)  # 4 heads: 4% of the width between two; 12 heads: 2%, or the gaps took 44%
    gap_y = GRID_GAP_PX / rows_px
    w = (1 - gap_x * (n_h - 1)) / n_h
    h = cell_px / rows_px
    data, layout, notes = [], {}, []
    for layer in range(n_l):
        for head in range(n_h):
            idx = layer * n_h + head + 1
            ax = "" if idx == 1 else str(idx)
            x0, y1 = head * (w + gap_x), 1 - layer * (h + gap_y)
            data.append(dict(trace(layer, head), coloraxis="coloraxis", xaxis=f"x{ax}", yaxis=f"y{ax}"))
            x_axis, y_axis = axes(layer, head)
            # domains clamped to [0, 1]: the last row or column can end a rounding error outside, which plotly refuses
            layout[f"xaxis{ax}"] = dict(domain=[x0, min(1.0, x0 + w)], anchor=f"y{ax}", **x_axis)
            layout[f"yaxis{ax}"] = dict(domain=[max(0.0, y1 - h), y1], anchor=f"x{ax}", **y_axis)
            if head == 0:  # the row's title, centred on the row, left of its query labels
                layout[f"yaxis{ax}"]["title"] = dict(text=f"layer {layer}", font=dict(size=14), standoff=6)
            if layer == 0:
                notes.append(dict(text=grid_column_title(head, n_h), x=x0 + w / 2, y=1, xref="paper", yref="paper",
                                  xanchor="center", yanchor="bottom", yshift=6, showarrow=False, font=dict(size=14)))
    shapes = []
    if selected is not None and 0 <= selected[0] < n_l and 0 <= selected[1] < n_h:
        idx = selected[0] * n_h + selected[1] + 1
        ax = "" if idx == 1 else str(idx)
        shapes.append(dict(type="rect", xref=f"x{ax} domain", yref=f"y{ax} domain", x0=-0.025, x1=1.025,
                           y0=-0.025, y1=1.01, line=dict(color=QUERY_COLOUR, width=4)))
    layout.update(
        coloraxis=dict(colorscale=ATTENTION_SCALE, cmin=0, **colour),
        height=height, margin=dict(l=10, r=10, t=GRID_TOP_PX, b=bottom), font=FONT, annotations=notes,
        shapes=shapes,
    )
    return go.Figure(data=data, layout=layout)


def lines_view(pattern: np.ndarray, q_tokens: Sequence[str], k_tokens: Sequence[str],
               query: Optional[int] = None, min_weight: float = 0.02, q_title: str = "queries",
               k_title: str = "keys", height: Optional[int] = None) -> go.Figure:
    """Queries on the left, keys on the right, a line per (query, key) with width and opacity = weight.

    Lines below `min_weight` are left out. The chosen query's lines are orange and drawn on top.
    Lines are grouped into weight bins (one trace per bin) so a 128-token head stays fast. Above
    `MAX_LINE_LABELS` tokens the labels move to the hover (they would overlap); long inputs draw
    `top_lines_view` instead.
    """
    pattern = np.asarray(pattern, dtype=np.float64)
    n_q, n_k = pattern.shape
    if (len(q_tokens), len(k_tokens)) != (n_q, n_k):
        raise ValueError(f"{len(q_tokens)} query and {len(k_tokens)} key labels for a {n_q}x{n_k} pattern")
    every = 1 if max(n_q, n_k) <= MAX_LINE_LABELS else None  # beyond that, labels would overlap: hover
    return _lines_figure(pattern, unique_labels(q_tokens), unique_labels(k_tokens), query, min_weight, q_title,
                         k_title, height, every, every)


TOP_LINES = 3  # lines per query in the long-input lines view: its strongest keys
LINES_MAX_PX = 640  # its height at most: the whole chart on a 768 px screen
LINE_LABEL_PX = 16  # room one 13 px label of the lines view needs, up and down


def top_lines_view(rows: np.ndarray, first_query: int, q_tokens: Sequence[str], k_tokens: Sequence[str],
                   top: int = TOP_LINES, query: Optional[int] = None, q_title: str = "queries",
                   k_title: str = "keys") -> go.Figure:
    """lines_view for long inputs: the queries of a window (`rows` `[window k]`, the pattern's rows from
    `first_query` on), each with only its `top` strongest keys; each of those keys drawn once, in position order.
    Labels keep their positions in the input; when a side has more than fit its height, every step-th is written
    (heatmaps.tick_step) and the rest are read on hover. `query` is a row of the whole pattern."""
    rows = np.asarray(rows, dtype=np.float64)
    n_rows, n_k = rows.shape
    if len(k_tokens) != n_k or first_query + n_rows > len(q_tokens):
        raise ValueError(f"{n_rows} rows from query {first_query} of {len(q_tokens)}, {n_k} keys with "
                         f"{len(k_tokens)} labels")
    top = max(1, min(int(top), n_k))
    best = np.argpartition(-rows, top - 1, axis=1)[:, :top]  # [window top]: each row's strongest keys
    keys = np.unique(best)  # in position order
    column = np.searchsorted(keys, best)  # [window top]: where each lands among `keys`
    sub = np.zeros((n_rows, keys.size))  # [window keys]: the top weights, every other left out
    np.put_along_axis(sub, column, np.take_along_axis(rows, best, axis=1), axis=1)
    q_labels = [f"{first_query + i}:{q_tokens[first_query + i]}" for i in range(n_rows)]
    k_labels = [f"{j}:{k_tokens[j]}" for j in keys]
    n = max(n_rows, keys.size)
    height = max(300, min(LINES_MAX_PX, 80 + 20 * n))
    every = [tick_step(m, height - 50, LINE_LABEL_PX) for m in (n_rows, keys.size)]
    row = None if query is None else query - first_query
    return _lines_figure(sub, q_labels, k_labels, row, 1e-9, q_title, k_title, height, *every)


def _lines_figure(pattern: np.ndarray, q_labels: list[str], k_labels: list[str], query: Optional[int],
                  min_weight: float, q_title: str, k_title: str, height: Optional[int],
                  q_every: Optional[int], k_every: Optional[int]) -> go.Figure:
    """The lines drawing shared by lines_view and top_lines_view: `pattern` `[q k]` row `query` in orange; a side's
    labels written every `*_every`-th (None: on hover only)."""
    n_q, n_k = pattern.shape
    n = max(n_q, n_k)
    yq, yk = _spread(n_q, n), _spread(n_k, n)
    data = []
    qi, ki = np.nonzero(pattern >= min_weight)
    w = pattern[qi, ki]
    if w.size > MAX_LINES:
        keep = np.argsort(w)[-MAX_LINES:]
        qi, ki, w = qi[keep], ki[keep], w[keep]
    chosen = (qi == query) if query is not None else np.zeros_like(qi, dtype=bool)
    bins = np.linspace(0, 1, 9)
    for highlight in (False, True):
        for b in range(len(bins) - 1):
            sel = (chosen == highlight) & (w >= bins[b]) & ((w < bins[b + 1]) | (b == len(bins) - 2))
            if not sel.any():
                continue
            xs = np.tile(np.array([0.0, 1.0, np.nan]), sel.sum())
            ys = np.stack([yq[qi[sel]], yk[ki[sel]], np.full(sel.sum(), np.nan)], axis=1).ravel()  # [line*3]
            mid = (bins[b] + bins[b + 1]) / 2
            data.append(dict(type="scatter", x=xs, y=ys, mode="lines", hoverinfo="skip", showlegend=False,
                             line=dict(color=QUERY_COLOUR if highlight else OTHER_COLOUR, width=0.6 + 9 * mid),
                             opacity=0.95 if highlight else min(1.0, 0.25 + mid)))
    best = pattern.argmax(axis=1)
    q_hover = [f"query {q_labels[i]}<br>strongest key {k_labels[best[i]]} ({pattern[i, best[i]]:.3f})"
               for i in range(n_q)]
    q_colours = [QUERY_COLOUR if i == query else "#222222" for i in range(n_q)]
    received = pattern.sum(axis=0)
    k_hover = [f"key {k_labels[j]}<br>total weight received {received[j]:.2f}" for j in range(n_k)]
    for labels, x, every, side, hover, colours in ((q_labels, 0.0, q_every, "left", q_hover, q_colours),
                                                    (k_labels, 1.0, k_every, "right", k_hover, None)):
        text = labels if every == 1 else [t if i % every == 0 else "" for i, t in enumerate(labels)] if every else None
        trace = dict(type="scatter", x=np.full(len(labels), x), y=yq if side == "left" else yk,
                     mode="markers+text" if text is not None else "markers", text=labels if text is None else text,
                     textposition=f"middle {side}", marker=dict(size=8, color=colours or "#222222"),
                     textfont=dict(color=colours, size=13) if colours else dict(size=13), hovertext=hover,
                     hoverinfo="text", showlegend=False)
        data.append(trace)
    layout = dict(
        height=height or max(300, min(900, 80 + 24 * n)), margin=dict(l=10, r=10, t=40, b=10), font=FONT,
        xaxis=dict(range=[-0.55, 1.55], showgrid=False, zeroline=False, tickvals=[0, 1], ticktext=[q_title, k_title],
                   side="top", fixedrange=True),
        yaxis=dict(range=[n - 0.5, -0.5], showgrid=False, zeroline=False, showticklabels=False, fixedrange=True),
        plot_bgcolor="white",
    )
    return go.Figure(data=data, layout=layout)


def _spread(m: int, n: int) -> np.ndarray:
    """m positions spread over the height of n rows (so unequal sides line up top and bottom)."""
    if m == 1:
        return np.array([(n - 1) / 2])
    return np.linspace(0, n - 1, m)


def query_bars(weights: np.ndarray, k_tokens: Sequence[str], allowed: Optional[np.ndarray] = None,
               title: str = "", k_title: str = "key") -> go.Figure:
    """The chosen query's weight on every key as bars on a fixed 0..1 axis; masked keys in grey."""
    weights = np.asarray(weights, dtype=np.float64)
    n = weights.size
    allowed = np.ones(n, dtype=bool) if allowed is None else np.asarray(allowed, dtype=bool)
    labels = unique_labels(k_tokens)
    colours = [OTHER_COLOUR if a else MASKED_COLOUR for a in allowed]
    text = [f"{w:.2f}" if a else "masked" for w, a in zip(weights, allowed)] if n <= 40 else None
    bar = dict(type="bar", x=labels, y=np.where(allowed, weights, 0.0), marker=dict(color=colours), text=text,
               textposition="outside", customdata=np.where(allowed, "allowed", "masked (cannot be seen)"),
               hovertemplate="key %{x}<br>weight %{y:.4f}<br>%{customdata}<extra></extra>", cliponaxis=False)
    layout = dict(height=320, margin=dict(l=10, r=10, t=50 if title else 20, b=10), font=FONT,
                  yaxis=dict(range=[0, 1.12], title=dict(text="weight α"), tickvals=[0, 0.25, 0.5, 0.75, 1]),
                  xaxis=dict(title=dict(text=k_title), tickangle=-60 if n > 8 else 0, type="category",
                             automargin=True))
    if title:
        layout["title"] = dict(text=title)
    return go.Figure(data=[bar], layout=layout)


TOP_KEYS = 20  # bars the long-input bar view labels: one query's strongest keys
REST_COLOUR = "#9ecae1"  # the bar that sums every other key (light blue: not a key of its own)


def top_query_bars(weights: np.ndarray, k_tokens: Sequence[str], allowed: Optional[np.ndarray] = None,
                   top: int = TOP_KEYS, title: str = "", k_title: str = "key") -> go.Figure:
    """query_bars for long inputs: the `top` keys with the most weight, strongest first, each labelled with its
    position and token and its weight written on it, then one bar summing every other key the query may see
    (how many, their total and their largest weight on hover). Masked keys (weight exactly 0) are left out; the
    page says how many."""
    weights = np.asarray(weights, dtype=np.float64)
    n = weights.size
    allowed = np.ones(n, dtype=bool) if allowed is None else np.asarray(allowed, dtype=bool)
    seen = np.flatnonzero(allowed)
    order = seen[np.argsort(-weights[seen], kind="stable")]  # allowed keys, strongest first
    shown, rest = order[:top], order[top:]
    labels = [f"{j}:{k_tokens[j]}" for j in shown]
    ys = [float(weights[j]) for j in shown]
    colours = [OTHER_COLOUR] * len(shown)
    text = [f"{w:.2f}" for w in ys]
    hover = [f"key {label}<br>weight {w:.3f}" for label, w in zip(labels, ys)]
    if rest.size:
        total, largest = float(weights[rest].sum()), float(weights[rest].max())
        labels.append(f"the other {rest.size:,} keys")
        ys.append(total)
        colours.append(REST_COLOUR)
        text.append(f"{total:.2f} in all")
        hover.append(f"the other {rest.size:,} keys this query may see<br>their weights add up to {total:.3f}"
                     f"<br>the largest of them {largest:.3f}")
    bar = dict(type="bar", x=labels, y=ys, marker=dict(color=colours), text=text, textposition="outside",
               hovertext=hover, hoverinfo="text", cliponaxis=False)
    layout = dict(height=340, margin=dict(l=10, r=10, t=50 if title else 20, b=10), font=FONT,
                  yaxis=dict(range=[0, 1.12], title=dict(text="weight α"), tickvals=[0, 0.25, 0.5, 0.75, 1]),
                  xaxis=dict(title=dict(text=f"{k_title}: the {len(shown)} strongest, then the rest"), tickangle=-60,
                             type="category", automargin=True))
    if title:
        layout["title"] = dict(text=title)
    return go.Figure(data=[bar], layout=layout)


def steps_bars(scores: np.ndarray, weights: np.ndarray, labels: Sequence[str],
               allowed: Optional[np.ndarray] = None) -> go.Figure:
    """Scores before softmax (left) next to weights after it (right), one bar per key."""
    scores = np.asarray(scores, dtype=np.float64)
    weights = np.asarray(weights, dtype=np.float64)
    allowed = np.ones(scores.size, dtype=bool) if allowed is None else np.asarray(allowed, dtype=bool)
    labels = list(labels)
    shown_scores = np.where(allowed, scores, 0.0)
    data = [
        dict(type="bar", x=labels, y=shown_scores, marker=dict(color=np.where(allowed, OTHER_COLOUR, MASKED_COLOUR)),
             text=[f"{s:.4g}" if a else "−∞ (masked)" for s, a in zip(scores, allowed)], textposition="outside",
             cliponaxis=False, showlegend=False, hovertemplate="%{x}<br>score %{y:.4f}<extra></extra>",
             xaxis="x", yaxis="y"),
        dict(type="bar", x=labels, y=weights, marker=dict(color=np.where(allowed, QUERY_COLOUR, MASKED_COLOUR)),
             text=[f"{w:.4f}" for w in weights], textposition="outside", cliponaxis=False, showlegend=False,
             hovertemplate="%{x}<br>weight %{y:.4f}<extra></extra>", xaxis="x2", yaxis="y2"),
    ]
    lo = min(0.0, float(shown_scores.min())) if shown_scores.size else 0.0
    hi = max(0.0, float(shown_scores.max())) if shown_scores.size else 1.0
    pad = 0.2 * max(hi - lo, 1e-6)
    angle = -60 if len(labels) > 8 else 0
    x_axis = dict(type="category", tickangle=angle, automargin=True)
    notes = [dict(text=t, x=x, y=1.0, xref="paper", yref="paper", xanchor="center", yanchor="bottom",
                  showarrow=False, font=dict(size=14))
             for t, x in (("score = q·k × scale (before softmax)", 0.22), ("weight α = softmax(score)", 0.78))]
    layout = dict(
        xaxis=dict(domain=[0, 0.44], anchor="y", **x_axis), xaxis2=dict(domain=[0.56, 1], anchor="y2", **x_axis),
        yaxis=dict(anchor="x", range=[lo - (pad if lo < 0 else 0), hi + pad], title=dict(text="score")),
        yaxis2=dict(anchor="x2", range=[0, 1.15], title=dict(text="weight"), tickvals=[0, 0.25, 0.5, 0.75, 1]),
        annotations=notes, height=340, margin=dict(l=10, r=10, t=50, b=10), font=FONT,
    )
    return go.Figure(data=data, layout=layout)


def entropy_bars(before: np.ndarray, after: np.ndarray, limit: np.ndarray, q_tokens: Sequence[str],
                 temperature: float, q_title: str = "query") -> go.Figure:
    """Entropy (bits) of each query row at T = 1 and at the chosen T, with the uniform maximum as a marker."""
    labels = unique_labels(q_tokens)
    data = [
        dict(type="bar", x=labels, y=before, name="T = 1 (as trained)", marker=dict(color=OTHER_COLOUR),
             hovertemplate="%{x}<br>%{y:.3f} bits<extra>T = 1</extra>"),
        dict(type="bar", x=labels, y=after, name=f"T = {temperature:g}", marker=dict(color=QUERY_COLOUR),
             hovertemplate="%{x}<br>%{y:.3f} bits<extra>T = " + f"{temperature:g}</extra>"),
        dict(type="scatter", x=labels, y=limit, mode="markers", name="uniform (largest possible)",
             marker=dict(symbol="line-ew-open", size=22, color="#222222", line=dict(width=3, color="#222222")),
             hovertemplate="%{x}<br>uniform: %{y:.3f} bits<extra></extra>"),
    ]
    top = float(np.max(limit)) if np.size(limit) else 1.0
    layout = dict(barmode="group", height=340, margin=dict(l=10, r=10, t=30, b=10), font=FONT,
                  yaxis=dict(title=dict(text="entropy (bits)"), range=[0, max(top, 0.1) * 1.15]),
                  xaxis=dict(title=dict(text=q_title), type="category", tickangle=-60 if len(labels) > 8 else 0,
                             automargin=True),
                  legend=dict(orientation="h", yanchor="bottom", y=1.0, x=0))
    return go.Figure(data=data, layout=layout)


def entropy_lines(before: np.ndarray, after: np.ndarray, limit: np.ndarray, q_tokens: Sequence[str],
                  temperature: float, q_title: str = "query") -> go.Figure:
    """entropy_bars for long inputs: each query row's entropy at T = 1 and at T as two lines over the query's
    position (a thousand grouped bars would be slivers), the uniform maximum as a dotted line; the token on hover."""
    n = len(q_tokens)
    xs = np.arange(n)
    labels = unique_labels(q_tokens)
    data = [
        dict(type="scatter", x=xs, y=np.asarray(before, dtype=np.float32), mode="lines", name="T = 1 (as trained)",
             line=dict(color=OTHER_COLOUR, width=1.5), text=labels,
             hovertemplate="%{text}<br>%{y:.3f} bits<extra>T = 1</extra>"),
        dict(type="scatter", x=xs, y=np.asarray(after, dtype=np.float32), mode="lines", name=f"T = {temperature:g}",
             line=dict(color=QUERY_COLOUR, width=1.5), text=labels,
             hovertemplate="%{text}<br>%{y:.3f} bits<extra>T = " + f"{temperature:g}</extra>"),
        dict(type="scatter", x=xs, y=np.asarray(limit, dtype=np.float32), mode="lines",
             name="uniform (largest possible)", line=dict(color="#222222", width=1, dash="dot"), hoverinfo="skip"),
    ]
    top = float(np.max(limit)) if np.size(limit) else 1.0
    layout = dict(height=340, margin=dict(l=10, r=10, t=30, b=10), font=FONT,
                  yaxis=dict(title=dict(text="entropy (bits)"), range=[0, max(top, 0.1) * 1.15]),
                  xaxis=dict(title=dict(text=f"{q_title}: position"), range=[-0.5, n - 0.5], tickformat=",d"),
                  legend=dict(orientation="h", yanchor="bottom", y=1.0, x=0))
    return go.Figure(data=data, layout=layout)


def difference_heatmap(diff: np.ndarray, q_tokens: Sequence[str], k_tokens: Sequence[str], title: str = "",
                       q_title: str = "query", k_title: str = "key", height: Optional[int] = None) -> go.Figure:
    """A - B on a diverging scale centred at 0 (blue: A attends more, red: B attends more).

    The colour range is symmetric, ±(largest |difference|, at least 0.05), so small changes show.
    Above `EXACT_CELLS` cells the differences ship as int8 percentages of that range.
    """
    diff = np.asarray(diff, dtype=np.float32)
    n_q, n_k = diff.shape
    y, x = unique_labels(q_tokens)[:n_q], unique_labels(k_tokens)[:n_k]
    limit = float(max(0.05, np.abs(diff).max() if diff.size else 0.0))
    if diff.size > EXACT_CELLS:
        z = np.clip(np.rint(diff / limit * 100), -100, 100).astype(np.int8)  # percent of the range
        zr = 100.0
        hover = "query %{y}<br>key %{x}<br>A − B about %{z}% of ±" + f"{limit:.2f}<extra></extra>"
        ticks = dict(tickvals=[-100, -50, 0, 50, 100], ticktext=[f"{v * limit:+.2f}" for v in (-1, -0.5, 0, 0.5, 1)])
    else:
        z, zr = diff, limit
        hover = "query %{y}<br>key %{x}<br>A − B = %{z:+.3f}<extra></extra>"
        ticks = {}
    trace = dict(type="heatmap", z=z, x=x, y=y, zmin=-zr, zmax=zr, zmid=0, colorscale=DIFF_SCALE,
                 hovertemplate=hover, colorbar=dict(title=dict(text="A − B"), **ticks))
    layout = dict(
        height=height or max(260, min(720, 60 + 22 * n_q)), font=FONT,
        margin=dict(l=10, r=10, t=40 if title else 10, b=10),
        xaxis=dict(side="top", tickangle=-60, title=dict(text=k_title), automargin=True),
        yaxis=dict(autorange="reversed", title=dict(text=q_title), automargin=True),
    )
    if title:
        layout["title"] = _caption_title(title)
        layout["margin"] = dict(l=10, r=10, t=10, b=44)
    return go.Figure(data=[trace], layout=layout)


def pooled_difference_heatmap(pooled: np.ndarray, n_q: int, n_k: int, block: tuple[int, int], title: str = "",
                              q_title: str = "query", k_title: str = "key", height: int = 340) -> go.Figure:
    """difference_heatmap for long inputs: A - B pooled (heatmaps.pool "absmax": each cell the difference of largest
    size in its block, with its sign, so one strong disagreement stays visible) on axes in token positions, as int8
    percentages of the symmetric range; the colour bar says how it was pooled."""
    pooled = np.asarray(pooled, dtype=np.float32)
    bq, bk = block
    limit = float(max(0.05, np.abs(pooled).max() if pooled.size else 0.0))
    z = np.clip(np.rint(pooled / limit * 100), -100, 100).astype(np.int8)  # percent of the range
    cells = f"{bq} × {bk}"
    trace = dict(type="heatmap", z=z, x0=(bk - 1) / 2, dx=bk, y0=(bq - 1) / 2, dy=bq, zmin=-100, zmax=100, zmid=0,
                 colorscale=DIFF_SCALE,
                 hovertemplate=f"query ≈ %{{y:.0f}}<br>key ≈ %{{x:.0f}}<br>largest A − B of the {cells} block about "
                               f"%{{z}}% of ±{limit:.2f}<extra></extra>",
                 colorbar=dict(title=dict(text=f"A − B, largest<br>of {cells} tokens"),
                               tickvals=[-100, -50, 0, 50, 100],
                               ticktext=[f"{v * limit:+.2f}" for v in (-1, -0.5, 0, 0.5, 1)]))
    layout = dict(
        height=height, font=FONT, margin=dict(l=10, r=10, t=10, b=44 if title else 10),
        xaxis=dict(side="top", title=dict(text=k_title), range=[-0.5, n_k - 0.5], zeroline=False, showgrid=False,
                   automargin=True),
        yaxis=dict(title=dict(text=q_title), range=[n_q - 0.5, -0.5], zeroline=False, showgrid=False,
                   automargin=True),
    )
    if title:
        layout["title"] = _caption_title(title)
    return go.Figure(data=[trace], layout=layout)


# ---------------------------------------------------------------------------------------------
# Why divide by sqrt(d_k)

SCALED_COLOUR, UNSCALED_COLOUR = OTHER_COLOUR, QUERY_COLOUR  # blue / orange: safe for colour-blind readers


def dot_histogram(samples: np.ndarray, d_k: int, scaled: bool, bins: int = 60) -> go.Figure:
    """A histogram (as a density) of q.k for random pairs, divided by sqrt(d_k) when `scaled`, with the
    normal curve it should follow: N(0, d_k) unscaled, N(0, 1) scaled."""
    x = np.asarray(samples, dtype=np.float64) / (np.sqrt(d_k) if scaled else 1.0)
    sigma = 1.0 if scaled else float(np.sqrt(d_k))
    reach = 4.5 * max(sigma, float(np.abs(x).max()) / 4.5 if x.size else sigma)
    density, edges = np.histogram(x, bins=bins, range=(-reach, reach), density=True)
    centres = (edges[:-1] + edges[1:]) / 2
    label = "q·k / √d_k" if scaled else "q·k"
    grid = np.linspace(-reach, reach, 241)
    curve = np.exp(-0.5 * (grid / sigma) ** 2) / (sigma * np.sqrt(2 * np.pi))
    data = [
        dict(type="bar", x=centres, y=density, width=edges[1] - edges[0], name=f"measured ({x.size:,} pairs)",
             marker=dict(color=SCALED_COLOUR if scaled else UNSCALED_COLOUR, line=dict(width=0)), opacity=0.8,
             customdata=np.stack([edges[:-1], edges[1:]], axis=1),
             hovertemplate=label + " from %{customdata[0]:.3g} to %{customdata[1]:.3g}<br>density %{y:.4f}"
                                   "<extra></extra>"),
        dict(type="scatter", x=grid, y=curve, mode="lines", name=f"normal, spread {sigma:.3g}",
             line=dict(color="#222222", width=2, dash="dash"),
             hovertemplate=label + " %{x:.3g}<br>normal density %{y:.4f}<extra></extra>"),
    ]
    layout = dict(height=340, margin=dict(l=10, r=10, t=40, b=10), font=FONT, bargap=0,
                  xaxis=dict(title=dict(text=f"{label}  (d_k = {d_k})"), zeroline=True),
                  yaxis=dict(title=dict(text="density")),
                  legend=dict(orientation="h", yanchor="bottom", y=1.0, x=0))
    return go.Figure(data=data, layout=layout)


def scale_curve(dks: np.ndarray, scaled: np.ndarray, unscaled: np.ndarray, y_title: str, current: int,
                reference: Optional[float] = None, reference_label: str = "",
                y_range: Optional[tuple[float, float]] = None) -> go.Figure:
    """One measure of softmax against d_k (log axis), scaled (blue, solid) and unscaled (orange, dashed);
    a grey line marks the d_k chosen on the page and an optional dotted line a reference value."""
    dks = np.asarray(dks, dtype=np.float64)
    data = [
        dict(type="scatter", x=dks, y=np.asarray(scaled), mode="lines+markers", name="scaled: q·k / √d_k",
             line=dict(color=SCALED_COLOUR, width=3), marker=dict(symbol="circle", size=8),
             hovertemplate="d_k = %{x}<br>" + y_title + " %{y:.3f}<extra>scaled</extra>"),
        dict(type="scatter", x=dks, y=np.asarray(unscaled), mode="lines+markers", name="unscaled: q·k",
             line=dict(color=UNSCALED_COLOUR, width=3, dash="dash"), marker=dict(symbol="square", size=8),
             hovertemplate="d_k = %{x}<br>" + y_title + " %{y:.3f}<extra>unscaled</extra>"),
    ]
    shapes = [dict(type="line", xref="x", yref="paper", x0=current, x1=current, y0=0, y1=1,
                   line=dict(color="#888888", width=2, dash="dot"))]
    notes = [dict(text=f"d_k = {current}", x=np.log10(current), xref="x", y=0.5, yref="paper", showarrow=False,
                  xanchor="right" if current > np.sqrt(dks.min() * dks.max()) else "left", yanchor="bottom",
                  xshift=-4 if current > np.sqrt(dks.min() * dks.max()) else 4, font=dict(size=12, color="#555555"),
                  bgcolor="rgba(255,255,255,0.8)")]
    if reference is not None:
        shapes.append(dict(type="line", xref="paper", yref="y", x0=0, x1=1, y0=reference, y1=reference,
                           line=dict(color="#222222", width=1, dash="dot")))
        if reference_label:
            notes.append(dict(text=reference_label, x=0, xref="paper", y=reference, yref="y", showarrow=False,
                              xanchor="left", yanchor="bottom", font=dict(size=12), bgcolor="rgba(255,255,255,0.8)"))
    layout = dict(height=320, margin=dict(l=10, r=10, t=40, b=10), font=FONT, shapes=shapes, annotations=notes,
                  xaxis=dict(type="log", title=dict(text="d_k (key width, log scale)"), tickvals=list(dks),
                             ticktext=[f"{int(d)}" for d in dks]),
                  yaxis=dict(title=dict(text=y_title), **({"range": list(y_range)} if y_range else {})),
                  legend=dict(orientation="h", yanchor="bottom", y=1.08, x=0))
    return go.Figure(data=data, layout=layout)


def head_spread_bars(dot_std: np.ndarray, d_head: int, q_std: np.ndarray, k_std: np.ndarray) -> go.Figure:
    """The spread of raw q.k per head (bars, grouped by layer) with sqrt(d_head), the spread that
    unit-variance random q and k would give, as a dotted line."""
    dot_std = np.asarray(dot_std, dtype=np.float64)
    n_l, n_h = dot_std.shape
    data = []
    for layer in range(n_l):
        colour = _layer_colour(layer, n_l)
        data.append(dict(type="bar", x=[f"L{layer} H{h}" for h in range(n_h)], y=dot_std[layer],
                         name=f"layer {layer}", marker=dict(color=colour),
                         customdata=np.stack([q_std[layer], k_std[layer]], axis=1),
                         hovertemplate="%{x}<br>std of q·k %{y:.3f}<br>std of q entries %{customdata[0]:.3f}"
                                       "<br>std of k entries %{customdata[1]:.3f}<extra></extra>"))
    ref = float(np.sqrt(d_head))
    layout = dict(height=340, margin=dict(l=10, r=10, t=40, b=10), font=FONT,
                  xaxis=dict(title=dict(text="layer and head"), type="category"),
                  yaxis=dict(title=dict(text="spread (std) of raw q·k"),
                             range=[0, 1.15 * max(ref, float(dot_std.max()) if dot_std.size else ref)]),
                  shapes=[dict(type="line", xref="paper", yref="y", x0=0, x1=1, y0=ref, y1=ref,
                               line=dict(color="#222222", width=2, dash="dot"))],
                  annotations=[dict(text=f"√d_head = √{d_head} = {ref:.2f}", x=0, xref="paper", y=ref, yref="y",
                                    showarrow=False, xanchor="left", yanchor="bottom", yshift=2, font=dict(size=13),
                                    bgcolor="white", bordercolor="#222222", borderwidth=1)],
                  legend=dict(orientation="h", yanchor="bottom", y=1.0, x=0))
    return go.Figure(data=data, layout=layout)


SPREAD_BARS_MAX = 48  # heads drawn as bars; more (GPT-2 small: 144) are a layer x head table (head_spread_table)


def head_spread_table(dot_std: np.ndarray, d_head: int, q_std: np.ndarray, k_std: np.ndarray) -> go.Figure:
    """head_spread_bars for many heads: the spread of raw q.k as a layer x head table (each value in its cell),
    coloured by its ratio to sqrt(d_head) on a diverging scale (white = sqrt(d_head), the random-vector spread).
    144 bars left each about 5 px and their labels unreadable."""
    dot_std = np.asarray(dot_std, dtype=np.float64)
    n_l, n_h = dot_std.shape
    ref = float(np.sqrt(d_head))
    ratio = np.log2(np.maximum(dot_std, 1e-12) / ref)  # 0 = sqrt(d_head); +1 = twice it
    top = float(np.clip(np.abs(ratio).max(), 1.0, 3.0))  # colours saturate at 8 times (or an eighth of) sqrt(d_head)
    ratio = np.clip(ratio, -top, top)
    custom = np.stack([dot_std, np.asarray(q_std, dtype=np.float64), np.asarray(k_std, dtype=np.float64)], axis=-1)
    data = [dict(type="heatmap", z=ratio, x=[f"H{h}" for h in range(n_h)], y=[f"L{layer}" for layer in range(n_l)],
                 zmin=-top, zmax=top, zmid=0, colorscale=DIFF_SCALE, reversescale=True, customdata=custom,
                 text=np.vectorize(lambda v: f"{v:.1f}")(dot_std), texttemplate="%{text}", textfont=dict(size=11),
                 colorbar=dict(title=dict(text="× √d_head"), tickvals=[-top, 0, top],
                               ticktext=[f"÷{2 ** top:.3g}", "1", f"×{2 ** top:.3g}"]),
                 hovertemplate="%{y} %{x}<br>std of q·k %{customdata[0]:.3f}<br>std of q entries %{customdata[1]:.3f}"
                               "<br>std of k entries %{customdata[2]:.3f}<extra></extra>")]
    layout = dict(height=max(300, 110 + 30 * n_l), margin=dict(l=10, r=10, t=10, b=10), font=FONT,
                  xaxis=dict(title=dict(text=f"head (white: spread √d_head = √{d_head} = {ref:.2f})"), side="top",
                             type="category"),
                  yaxis=dict(title=dict(text="layer"), autorange="reversed", type="category"))
    return go.Figure(data=data, layout=layout)


def _layer_colour(layer: int, n_layers: int) -> str:
    """A viridis colour per layer (colour-blind safe), stopping short of the pale yellow end."""
    from plotly.colors import sample_colorscale

    return sample_colorscale("Viridis", [0.15 + 0.6 * (layer / max(n_layers - 1, 1))])[0]
