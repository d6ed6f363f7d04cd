"""Figures of the Generation page: the families' block diagrams, a tensor at a hook, the heads'
contributions, attention tensors as labelled blocks, the decoding stepper's views and counters,
and the two leakage studies. Arrays and plain lists in, plotly figures out (nothing here knows a model).
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from core.figures.heatmaps import ATTENTION_SCALE, pool, pool_block, unique_labels

WITH, WITHOUT = "#0072B2", "#D55E00"  # Okabe-Ito blue / vermillion: colour-blind safe
MUTED, PICKED = "#7f8fa6", "#D55E00"
FONT = dict(size=14)
LEGEND_BELOW = dict(orientation="h", yref="container", y=0, yanchor="bottom", x=0)
DIVERGING = "RdBu"
TENSOR_CELLS = 256  # rows and columns a hook's tensor is drawn with at most: 65,536 cells, ~0.4 MB sent
# One fill per box of the block diagram (Okabe-Ito tints).
BOX_FILL = {"embedding": "#E8E8E8", "self-attention": "#CCE3F2", "cross-attention": "#F9DCC4",
            "MLP": "#D5EDE0", "final norm": "#EFE6F5", "unembedding": "#E8E8E8", "residual stream": "#FFFFFF"}


def _title(text: str) -> Optional[dict]:
    """A left-aligned title at the top of the figure (None for no title)."""
    if not text:
        return None
    return dict(text=text, x=0, xanchor="left", yref="container", y=1, yanchor="top", pad=dict(t=8),
                font=dict(size=16))


# ---------------------------------------------------------------------------------------------
# 1. Anatomy
# ---------------------------------------------------------------------------------------------


def short_hook(name: str) -> str:
    """A hook name without its stack and block, as the diagram labels its dot: `attn.hook_q`."""
    parts = name.split(".")
    if "blocks" in parts:
        parts = parts[parts.index("blocks") + 2:]
    elif parts[0] in ("encoder", "decoder"):
        parts = parts[1:]
    return ".".join(parts)


def family_diagram(columns: Sequence[tuple[str, Sequence[tuple[str, str, str]], bool]], n_layers: int,
                   picked: str = "", title: str = "") -> go.Figure:
    """Block diagrams side by side: one column per stack, (column title, [(hook name, sublayer,
    axes text)] in forward order, whether it is the current model's) with the hooks of one block;
    each sublayer a box, each hook a dot (hover: its axes). The `picked` hook's dot is drawn larger
    in the accent colour, in the current model's columns only (other families share hook names)."""
    fig = go.Figure()
    shapes, notes = [], []
    named: list[str] = []  # the sublayers drawn, in order: the key under the diagram names their colours
    longest = max((len(hooks) for _, hooks, _ in columns), default=1)
    for c, (heading, hooks, mine) in enumerate(columns):
        x0 = c * 3.0
        notes.append(dict(x=x0 + 1.0, y=1.3, text=f"<b>{heading}</b><br>dotted block × {n_layers} layers",
                          showarrow=False, font=dict(size=12)))
        runs: list[tuple[str, int, int]] = []  # (sublayer, first row, last row)
        for row, (_, sub, _) in enumerate(hooks):
            if runs and runs[-1][0] == sub:
                runs[-1] = (sub, runs[-1][1], row)
            else:
                runs.append((sub, row, row))
        for sub, first, last in runs:
            if sub == "residual stream":
                continue
            shapes.append(dict(type="rect", x0=x0 - 0.1, x1=x0 + 2.5, y0=-last - 0.45, y1=-first + 0.45,
                               fillcolor=BOX_FILL.get(sub, "#FFFFFF"), line=dict(color="#999999", width=1),
                               layer="below"))
            if sub not in named:
                named.append(sub)
        block_rows = [r for r, (name, _, _) in enumerate(hooks) if ".blocks." in f".{name}"]
        if block_rows:
            shapes.append(dict(type="rect", x0=x0 - 0.2, x1=x0 + 2.6, y0=-max(block_rows) - 0.55,
                               y1=-min(block_rows) + 0.55, line=dict(color="#333333", width=2, dash="dot")))
        names = [h[0] for h in hooks]
        ys = [-r for r in range(len(hooks))]
        colours = [PICKED if mine and n == picked else "#333333" for n in names]
        sizes = [16 if mine and n == picked else 8 for n in names]
        fig.add_trace(go.Scatter(
            x=[x0] * len(hooks), y=ys, mode="markers+text", text=[short_hook(n) for n in names],
            textposition="middle right", textfont=dict(size=10), marker=dict(color=colours, size=sizes),
            customdata=[[n, axes] for n, _, axes in hooks], showlegend=False,
            hovertemplate="%{customdata[0]}<br>%{customdata[1]}<extra></extra>"))
    # A colour key, not a name inside each box: in a column narrower than a hook's name the two overlapped
    # (at 1024 px beside the sidebar). Added after the columns, so a clicked dot's curve is still its column.
    for sub in named:
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=sub, hoverinfo="skip",
                                 marker=dict(symbol="square", size=13, color=BOX_FILL.get(sub, "#FFFFFF"),
                                             line=dict(color="#999999", width=1))))
    fig.update_layout(
        title=_title(title), height=max(420, 150 + 19 * longest), font=FONT, shapes=shapes, annotations=notes,
        legend=dict(orientation="h", yanchor="top", y=-0.01, x=0, title=dict(text="sublayer: "), itemclick=False,
                    itemdoubleclick=False),
        margin=dict(l=10, r=10, t=60 if title else 30, b=10), plot_bgcolor="white",
        xaxis=dict(visible=False, range=[-0.4, 3.0 * len(columns) - 0.3]),
        yaxis=dict(visible=False, range=[-longest - 0.2, 2.1]))
    return fig


def tensor_blocks(rows: int, cols: int) -> tuple[int, int]:
    """The block of cells (rows, columns) a `[rows cols]` tensor is drawn in: 1 x 1 while it has at most
    TENSOR_CELLS of each, so the figure never sends more than TENSOR_CELLS² cells (a 1,024-token pattern of four
    heads is 1,024 x 4,096 cells, 23 MB as floats)."""
    return pool_block(rows, TENSOR_CELLS), pool_block(cols, TENSOR_CELLS)


def block_labels(labels: Sequence[str], block: int) -> list[str]:
    """One label per block of `block` consecutive labels: the positions it spans and its first label's text
    ("8–15: cat"), or the label itself for blocks of one."""
    labels = [str(label) for label in labels]
    if block == 1:
        return labels
    out = []
    for start in range(0, len(labels), block):
        stop = min(len(labels), start + block) - 1
        first = labels[start].split(":", 1)[-1]
        out.append(f"{start}–{stop}: {first}" if first != str(start) else f"{start}–{stop}")
    return out


def tensor_heatmap(matrix: np.ndarray, row_labels: Sequence[str], col_title: str, row_title: str,
                   title: str = "", weights: bool = False, col_labels: Optional[Sequence[str]] = None) -> go.Figure:
    """A tensor shown as a matrix `[rows cols]`: on a diverging scale centred at zero, or, for
    attention weights (`weights`), on the fixed 0..1 attention scale. `col_labels` (distinct) names the
    columns, e.g. the tokens whose logits they are; without them columns are numbered. A tensor larger than
    TENSOR_CELLS a side is drawn in blocks (`tensor_blocks`): each block's largest weight, or for other tensors
    its value of largest size with its sign, so one strong cell stays visible; the labels name the positions each
    block spans."""
    matrix = np.asarray(matrix, dtype=np.float32)
    bq, bk = tensor_blocks(*matrix.shape)
    rows = unique_labels(row_labels)
    if (bq, bk) != (1, 1):
        cols = col_labels if col_labels is not None else [str(i) for i in range(matrix.shape[1])]
        matrix = pool(matrix, (bq, bk), "max" if weights else "absmax")  # [rows/bq cols/bk]
        rows, col_labels = block_labels(rows, bq), block_labels(cols, bk)
    bound = float(np.abs(matrix).max()) or 1.0
    zmin, zmax, scale = (0.0, 1.0, ATTENTION_SCALE) if weights else (-bound, bound, DIVERGING)
    x = {"x": [str(c) for c in col_labels]} if col_labels is not None else {}
    what = "value" if (bq, bk) == (1, 1) else f"{'largest' if weights else 'largest-size'} value of {bq} × {bk} cells"
    fig = go.Figure(go.Heatmap(z=matrix, y=rows, zmin=zmin, zmax=zmax, colorscale=scale, **x,
                               hovertemplate=f"row %{{y}}<br>column %{{x}}<br>{what} %{{z:.4f}}<extra></extra>"))
    fig.update_layout(title=_title(title), height=max(260, min(560, 80 + 22 * matrix.shape[0])), font=FONT,
                      margin=dict(l=10, r=10, t=50 if title else 10, b=10),
                      xaxis=dict(title=dict(text=col_title), **({"type": "category"} if col_labels is not None else {})),
                      yaxis=dict(autorange="reversed", title=dict(text=row_title)))
    return fig


def head_contributions(norms: np.ndarray, tokens: Sequence[str], title: str = "") -> go.Figure:
    """Each head's contribution to the attention output, ‖z_h W_O^h‖ per position, stacked `[head pos]`."""
    fig = go.Figure()
    x = unique_labels(tokens)
    for h, row in enumerate(np.asarray(norms)):
        fig.add_trace(go.Bar(x=x, y=row, name=f"head {h}",
                             hovertemplate=f"head {h}<br>%{{x}}<br>norm %{{y:.3f}}<extra></extra>"))
    fig.update_layout(barmode="stack", title=_title(title), height=320, font=FONT, legend=LEGEND_BELOW,
                      margin=dict(l=10, r=10, t=50 if title else 10, b=60),
                      yaxis=dict(title=dict(text="‖z_h W_O^h‖")), xaxis=dict(title=dict(text="position")))
    return fig


# ---------------------------------------------------------------------------------------------
# 2. Shapes
# ---------------------------------------------------------------------------------------------


def shape_blocks(rows: Sequence[tuple[str, Sequence[tuple[str, tuple, tuple]]]], title: str = "") -> go.Figure:
    """Attention tensors as labelled rectangles, one row per attention type: each is (row title,
    [(label, axes, sizes)]). A rectangle's height is its second-last size and its width its last,
    on one scale for the whole figure (the largest size drawn LONGEST pixels), so a longer input
    visibly stretches the blocks it enters."""
    longest, slot, gap, label_room, heading = 260.0, 175.0, 20.0, 58.0, 34.0  # pixels
    biggest = max((max(s[-2], s[-1]) for _, blocks in rows for _, _, s in blocks), default=1)
    scale = longest / max(1, biggest)
    shapes, notes, top, right = [], [], 0.0, 0.0
    for heading_text, blocks in rows:
        notes.append(dict(x=0, y=-top, text=f"<b>{heading_text}</b>", showarrow=False, xanchor="left", yanchor="top",
                          font=dict(size=13)))
        row_top = top + heading
        tallest, x = 0.0, 0.0
        for label, axes, sizes in blocks:
            w, h = max(2.0, sizes[-1] * scale), max(2.0, sizes[-2] * scale)
            shapes.append(dict(type="rect", x0=x, x1=x + w, y0=-row_top - h, y1=-row_top, fillcolor="#CCE3F2",
                               line=dict(color="#0072B2", width=1)))
            dims = " × ".join(f"{a}={s}" for a, s in zip(axes, sizes))
            notes.append(dict(x=x, y=-row_top - h - 4, text=f"{label}<br>{dims}", showarrow=False, xanchor="left",
                              yanchor="top", align="left", font=dict(size=10)))
            tallest = max(tallest, h)
            x += max(w, slot) + gap
        right = max(right, x)
        top = row_top + tallest + label_room
    fig = go.Figure(go.Scatter(x=[0], y=[0], mode="markers", marker=dict(opacity=0), hoverinfo="skip", showlegend=False))
    fig.update_layout(title=_title(title), shapes=shapes, annotations=notes, height=int(top + 70), font=FONT,
                      plot_bgcolor="white", margin=dict(l=10, r=10, t=50 if title else 10, b=10),
                      xaxis=dict(visible=False, range=[-4, max(right, 1.0)]),
                      yaxis=dict(visible=False, range=[-top, 4], scaleanchor="x"))
    return fig


# ---------------------------------------------------------------------------------------------
# 3. The decoding stepper
# ---------------------------------------------------------------------------------------------


def step_rows(self_row: np.ndarray, key_tokens: Sequence[str], cross_row: Optional[np.ndarray] = None,
              src_tokens: Sequence[str] = (), title: str = "") -> go.Figure:
    """The newest token's attention rows: self-attention `[layer head k]` over the tokens so far and,
    for an encoder-decoder, cross-attention `[layer head L_e]` over the source."""
    panels = [("self-attention over the tokens so far", self_row, key_tokens)]
    if cross_row is not None:
        panels.append(("cross-attention over the source", cross_row, src_tokens))
    fig = make_subplots(rows=1, cols=len(panels), subplot_titles=[p[0] for p in panels], horizontal_spacing=0.12)
    for c, (_, rows, labels) in enumerate(panels, start=1):
        n_layers, n_heads, n_keys = rows.shape
        z = rows.reshape(n_layers * n_heads, n_keys)  # [layer*head k]
        fig.add_trace(go.Heatmap(z=z, x=unique_labels(labels), y=[f"L{l} H{h}" for l in range(n_layers) for h in range(n_heads)],
                                 zmin=0, zmax=1, colorscale=ATTENTION_SCALE, showscale=c == len(panels),
                                 hovertemplate="%{y}<br>key %{x}<br>weight %{z:.3f}<extra></extra>"), row=1, col=c)
        fig.update_yaxes(autorange="reversed", row=1, col=c)
    fig.update_layout(title=_title(title), height=140 + 24 * self_row.shape[0] * self_row.shape[1], font=FONT,
                      margin=dict(l=10, r=10, t=80, b=10))
    return fig


def kv_cache(keys: np.ndarray, tokens: Sequence[str], new_rows: int, title: str = "",
             heads: str = "head") -> go.Figure:
    """One layer's self-attention keys `[pos kv_head*d_head]`; the rows added at this step are outlined.
    `heads` names the head axis of the columns ("key/value head" under grouped-query attention)."""
    keys = np.asarray(keys, dtype=np.float32)
    n = keys.shape[0]
    bound = float(np.abs(keys).max()) or 1.0
    fig = go.Figure(go.Heatmap(z=keys, y=unique_labels(tokens[:n]), zmin=-bound, zmax=bound, colorscale=DIVERGING,
                               hovertemplate="%{y}<br>dim %{x}<br>%{z:.3f}<extra></extra>"))
    if 0 < new_rows <= n:
        fig.add_shape(type="rect", x0=-0.5, x1=keys.shape[1] - 0.5, y0=n - new_rows - 0.5, y1=n - 0.5,
                      line=dict(color=PICKED, width=3))
    fig.update_layout(title=_title(title), height=max(240, min(520, 90 + 20 * n)), font=FONT,
                      margin=dict(l=10, r=10, t=50 if title else 10, b=10),
                      xaxis=dict(title=dict(text=f"key dimension ({heads} × d_h)")),
                      yaxis=dict(autorange="reversed", title=dict(text="cached position")))
    return fig


def counters_chart(cached: Sequence[dict], recomputed: Sequence[dict], step: int = -1, title: str = "") -> go.Figure:
    """Projections and attention multiply-adds per step, with and without the cache (counted rows
    from the stepper); the current step is marked."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=["token rows projected (W_Q, W_K, W_V)",
                                                        "attention multiply-adds"], horizontal_spacing=0.12)
    for rows, name, colour in ((cached, "with cache", WITH), (recomputed, "without cache", WITHOUT)):
        steps = [r["step"] for r in rows]
        for c, key in ((1, "projections"), (2, "attention multiply-adds")):
            fig.add_trace(go.Scatter(x=steps, y=[r[key] for r in rows], name=name, mode="lines+markers",
                                     line=dict(color=colour, width=3), showlegend=c == 1,
                                     hovertemplate=f"{name}<br>step %{{x}}<br>%{{y:,}}<extra></extra>"), row=1, col=c)
    if step >= 0:
        for c in (1, 2):
            fig.add_vline(x=step, line=dict(color=MUTED, dash="dot"), row=1, col=c)
    fig.update_xaxes(title_text="step t")
    fig.update_layout(title=_title(title), height=360, font=FONT, legend=LEGEND_BELOW,
                      margin=dict(l=10, r=10, t=70, b=70))
    return fig


def time_chart(cached_ms: np.ndarray, recomputed_ms: np.ndarray, title: str = "") -> go.Figure:
    """Measured milliseconds per generated token against the step, with and without the cache."""
    fig = go.Figure()
    for ms, name, colour in ((cached_ms, "with cache", WITH), (recomputed_ms, "without cache", WITHOUT)):
        fig.add_trace(go.Scatter(x=list(range(len(ms))), y=np.asarray(ms), name=name, mode="lines+markers",
                                 line=dict(color=colour, width=3),
                                 hovertemplate=f"{name}<br>step %{{x}}<br>%{{y:.3f}} ms<extra></extra>"))
    both = np.concatenate([np.asarray(cached_ms, dtype=float), np.asarray(recomputed_ms, dtype=float)])
    top = 1.4 * float(np.percentile(both, 95)) if both.size else 1.0  # a stray spike runs off the top (hover keeps it)
    fig.update_layout(title=_title(title), height=340, font=FONT, legend=LEGEND_BELOW,
                      margin=dict(l=10, r=10, t=50 if title else 10, b=70),
                      xaxis=dict(title=dict(text="step t (tokens generated so far)")),
                      yaxis=dict(title=dict(text="ms per token"), range=[0, max(top, 1e-3)]))
    return fig


# ---------------------------------------------------------------------------------------------
# 4-5. Leakage
# ---------------------------------------------------------------------------------------------


def gradient_maps(maps: Sequence[tuple[str, np.ndarray]], answer: Sequence[str], rows: Sequence[str],
                  title: str = "") -> go.Figure:
    """Side-by-side `[t k]` maps of ‖∂ prediction_t / ∂ embedding(y_k)‖, one per model, on one
    colour scale; a dotted staircase separates the past (k <= t) from the future (k > t, upper right)."""
    bound = max((float(np.max(m)) for _, m in maps), default=1.0) or 1.0
    fig = make_subplots(rows=1, cols=len(maps), subplot_titles=[name for name, _ in maps], horizontal_spacing=0.1)
    for c, (_, grads) in enumerate(maps, start=1):
        grads = np.asarray(grads)
        n_t, n_k = grads.shape
        fig.add_trace(go.Heatmap(z=grads, x=list(range(1, n_k + 1)), y=list(range(n_t)), zmin=0, zmax=bound,
                                 colorscale="Viridis", showscale=c == len(maps), colorbar=dict(title=dict(text="‖grad‖")),
                                 customdata=[[[rows[t], answer[k]] for k in range(n_k)] for t in range(n_t)],
                                 hovertemplate="prediction at step %{y} (reads %{customdata[0]})<br>target y%{x} = "
                                               "%{customdata[1]}<br>‖grad‖ %{z:.3g}<extra></extra>"), row=1, col=c)
        xs, ys = [], []
        for t in range(min(n_t, n_k)):  # the staircase: right of column t, from row t's top to its bottom
            xs += [t + 0.5, t + 0.5]
            ys += [t - 0.5, t + 0.5]
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", line=dict(color="white", width=2, dash="dot"),
                                 hoverinfo="skip", showlegend=False), row=1, col=c)
        fig.update_yaxes(autorange="reversed", tickvals=list(range(n_t)),
                         ticktext=[f"{t}:{tok}" for t, tok in enumerate(rows)],
                         title_text="decoder step t (reads)" if c == 1 else None, row=1, col=c)
        fig.update_xaxes(tickvals=list(range(1, n_k + 1)), ticktext=[f"y{k + 1}={tok}" for k, tok in enumerate(answer)],
                         title_text="target token y_k", row=1, col=c)
    fig.update_layout(title=_title(title), height=440, font=FONT, margin=dict(l=10, r=10, t=80, b=10))
    return fig


def loss_curves(curves: Sequence[tuple[str, np.ndarray]], title: str = "") -> go.Figure:
    """Training loss per step of each named run, on a log scale."""
    fig = go.Figure()
    for (name, loss), colour in zip(curves, (WITH, WITHOUT, MUTED)):
        fig.add_trace(go.Scatter(x=list(range(1, len(loss) + 1)), y=np.maximum(np.asarray(loss), 1e-6), name=name,
                                 mode="lines", line=dict(color=colour, width=3),
                                 hovertemplate=f"{name}<br>step %{{x}}<br>loss %{{y:.4f}}<extra></extra>"))
    fig.update_layout(title=_title(title), height=340, font=FONT, legend=LEGEND_BELOW,
                      margin=dict(l=10, r=10, t=50 if title else 10, b=70),
                      xaxis=dict(title=dict(text="training step")),
                      yaxis=dict(title=dict(text="loss"), type="log", dtick=1))  # a label per power of ten
    return fig
