"""Figures of the Train page: the loss and accuracy curves, head spread over training, and every head at a snapshot.

Arrays in, plotly figures out. The curves show every step's value (thin) and a moving average
(thick), because one batch's loss is noisy; the x axis spans the whole planned run so the
figure doubles as a progress bar. Attention snapshots reuse the shared `attention_heatmap`
(fixed 0..1 cividis scale, token labels on both axes).
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from core.figures.heatmaps import ATTENTION_SCALE, attention_heatmap

HEAD_COLOURS = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000")  # Okabe-Ito
RAW_COLOUR, SMOOTH_COLOUR, EVAL_COLOUR = "#9bb7d4", "#0b3d91", "#D55E00"
FONT = dict(size=15)  # readable on a projector


def moving_average(values: Sequence[float], window: int) -> np.ndarray:
    """Trailing mean over the last `window` values (shorter at the start), same length as `values`."""
    v = np.asarray(values, dtype=np.float64)
    if v.size == 0 or window <= 1:
        return v
    c = np.cumsum(np.insert(v, 0, 0.0))  # [n+1]
    idx = np.arange(1, v.size + 1)
    lo = np.maximum(0, idx - window)
    return (c[idx] - c[lo]) / (idx - lo)


def training_curves(steps: Sequence[int], loss: Sequence[float], accuracy: Sequence[float], total: int,
                    metric: str = "accuracy", final_accuracy: Optional[float] = None,
                    height: int = 360) -> go.Figure:
    """Loss (log scale, left) and accuracy (0..1, right) against the step, raw and smoothed.

    `final_accuracy`, when given, is drawn as a dashed line: the accuracy on fresh samples.
    """
    steps = np.asarray(steps, dtype=np.int32)
    loss = np.asarray(loss, dtype=np.float32)
    accuracy = np.asarray(accuracy, dtype=np.float32)
    window = max(1, min(25, steps.size // 30))  # short: a long trailing mean lags behind a sudden drop
    fig = make_subplots(rows=1, cols=2, subplot_titles=("Loss (cross-entropy, log scale)", metric.capitalize()),
                        horizontal_spacing=0.09)
    fig.add_trace(go.Scatter(x=steps, y=loss, mode="lines", name="loss (each step)", legendgroup="loss",
                             line=dict(color=RAW_COLOUR, width=1),
                             hovertemplate="step %{x}<br>loss %{y:.4f}<extra></extra>"), row=1, col=1)
    fig.add_trace(go.Scatter(x=steps, y=moving_average(loss, window).astype(np.float32), mode="lines",
                             name=f"loss (mean of last {window})", legendgroup="loss",
                             line=dict(color=SMOOTH_COLOUR, width=3),
                             hovertemplate="step %{x}<br>smoothed loss %{y:.4f}<extra></extra>"), row=1, col=1)
    fig.add_trace(go.Scatter(x=steps, y=accuracy, mode="lines", name=f"{metric} (each batch)", legendgroup="acc",
                             line=dict(color=RAW_COLOUR, width=1), showlegend=False,
                             hovertemplate="step %{x}<br>accuracy %{y:.3f}<extra></extra>"), row=1, col=2)
    fig.add_trace(go.Scatter(x=steps, y=moving_average(accuracy, window).astype(np.float32), mode="lines",
                             name=f"{metric} (mean of last {window})", legendgroup="acc",
                             line=dict(color=SMOOTH_COLOUR, width=3), showlegend=False,
                             hovertemplate="step %{x}<br>smoothed accuracy %{y:.3f}<extra></extra>"), row=1, col=2)
    if final_accuracy is not None:
        fig.add_trace(go.Scatter(x=[0, total], y=[final_accuracy, final_accuracy], mode="lines",
                                 name=f"fresh samples: {final_accuracy:.1%}", line=dict(color=EVAL_COLOUR, width=2,
                                                                                        dash="dash"),
                                 hovertemplate="accuracy on fresh samples %{y:.3f}<extra></extra>"), row=1, col=2)
    fig.update_xaxes(title_text="training step", range=[0, max(total, 1)], row=1, col=1)
    fig.update_xaxes(title_text="training step", range=[0, max(total, 1)], row=1, col=2)
    fig.update_xaxes(tickfont=dict(size=14), title_font=dict(size=15))
    fig.update_yaxes(tickfont=dict(size=14))
    fig.update_annotations(font=dict(size=17))  # the subplot titles
    positive = loss[np.isfinite(loss) & (loss > 0)]
    decades = positive.size and positive.max() / positive.min() >= 10
    fig.update_yaxes(type="log", row=1, col=1, **({"dtick": 1} if decades else {}))  # powers of ten only
    fig.update_yaxes(range=[-0.02, 1.02], tickformat=".0%", row=1, col=2)
    fig.update_layout(height=height, margin=dict(l=10, r=10, t=40, b=10), font=FONT,
                      legend=dict(orientation="h", yanchor="top", y=-0.22, x=0))
    return fig


def entropy_curves(steps: Sequence[int], entropy: np.ndarray, current: Optional[int] = None,
                   title: str = "", height: int = 300) -> go.Figure:
    """How spread out each head's attention is over training: `entropy [snapshot head]` in 0..1.

    A head that has found its job usually drops from near 1 (looking everywhere) towards 0
    (each query picks one key). `current` marks the snapshot shown in the heatmaps.
    """
    entropy = np.asarray(entropy, dtype=np.float32)
    if entropy.ndim != 2 or entropy.shape[0] != len(steps):
        raise ValueError(f"entropy must be [snapshot head] with {len(steps)} snapshots, got {entropy.shape}")
    steps = np.asarray(steps, dtype=np.int32)
    fig = go.Figure()
    for h in range(entropy.shape[1]):
        fig.add_trace(go.Scatter(x=steps, y=entropy[:, h], mode="lines+markers", name=f"head {h}",
                                 line=dict(color=HEAD_COLOURS[h % len(HEAD_COLOURS)], width=3),
                                 marker=dict(size=6),
                                 hovertemplate=f"head {h}<br>step %{{x}}<br>spread %{{y:.2f}}<extra></extra>"))
    if current is not None:
        fig.add_vline(x=current, line=dict(color="#444", dash="dot", width=2))
    fig.update_layout(title=dict(text=title, y=0.98, yanchor="top") if title else None, height=height, font=FONT,
                      margin=dict(l=10, r=10, t=80 if title else 40, b=10),
                      xaxis=dict(title="training step", tickfont=dict(size=14)),
                      yaxis=dict(title="attention spread", range=[-0.02, 1.02], tickfont=dict(size=14)),
                      legend=dict(orientation="h", yanchor="bottom", y=1.01, x=0))
    return fig


def heads_figure(patterns: np.ndarray, q_tokens: Sequence[str], k_tokens: Sequence[str], title: str = "",
                 per_row: int = 4, width: int = 1000) -> go.Figure:
    """Every head of one layer `[head q k]` side by side, sharing one 0..1 colour bar.

    Each panel is the shared `attention_heatmap` trace (token labels, hover values, fixed range),
    placed in a grid so a projector shows all heads at a readable size. `width` is the expected
    width in pixels, used only to pick a height that keeps the cells roughly square.
    """
    patterns = np.asarray(patterns, dtype=np.float32)
    if patterns.ndim != 3:
        raise ValueError(f"heads_figure needs [head q k], got shape {patterns.shape}")
    n_heads, n_q, n_k = patterns.shape
    cols = max(1, min(per_row, n_heads))
    rows = math.ceil(n_heads / cols)
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=[f"head {h}" for h in range(n_heads)],
                        horizontal_spacing=0.06 if cols > 1 else 0.0, vertical_spacing=0.12 if rows > 1 else 0.0)
    zrange = (0.0, 1.0)
    for h in range(n_heads):
        trace = attention_heatmap(patterns[h], q_tokens, k_tokens).data[0]
        zrange = (trace.zmin, trace.zmax)
        trace.update(coloraxis="coloraxis", showscale=False, colorbar=None, zmin=None, zmax=None)
        fig.add_trace(trace, row=h // cols + 1, col=h % cols + 1)
    cell = min(36.0, max(12.0, (width - 80) / cols / max(1, n_k)))  # pixels per cell, roughly square
    row_height = cell * n_q + 110
    fig.update_layout(
        title=title or None, height=int(rows * row_height + (50 if title else 20)), font=dict(size=13),
        coloraxis=dict(colorscale=ATTENTION_SCALE, cmin=zrange[0], cmax=zrange[1],
                       colorbar=dict(title="weight", thickness=14)),
        margin=dict(l=10, r=10, t=60 if title else 30, b=10),
    )
    every = dict(tickmode="linear", dtick=1) if max(n_q, n_k) <= 40 else {}  # label every token
    fig.update_xaxes(tickangle=-60, automargin=True, tickfont=dict(size=12), **every)
    fig.update_yaxes(autorange="reversed", automargin=True, tickfont=dict(size=12), **every)
    for r in range(1, rows + 1):
        fig.update_yaxes(title_text="query", row=r, col=1)
        for c in range(2, cols + 1):  # the same queries in every panel of a row: label them once
            fig.update_yaxes(showticklabels=False, row=r, col=c)
    for c in range(1, cols + 1):
        fig.update_xaxes(title_text="key", row=rows, col=c)
    return fig



MI_SCALE = "Viridis"  # colour-blind-safe, dark = little shared information


def head_mi_figure(before: np.ndarray, after: np.ndarray, steps: tuple[int, int], title: str = "",
                   layers: Optional[Sequence[int]] = None) -> go.Figure:
    """Mutual information between every two heads of each layer, before and after training.

    before, after: `[layer head head]` in nats (the diagonal is left blank). One row per layer,
    the two moments side by side, one colour bar from 0 to the largest value of either, so the
    two columns compare cell by cell. `steps` names the two moments, `layers` the rows' layers.
    """
    before = np.asarray(before, dtype=np.float64)
    after = np.asarray(after, dtype=np.float64)
    if before.ndim != 3 or before.shape != after.shape or before.shape[1] != before.shape[2]:
        raise ValueError(f"before and after must both be [layer head head], got {before.shape} and {after.shape}")
    n_layers, n_heads, _ = before.shape
    layers = list(range(n_layers)) if layers is None else list(layers)
    titles = [f"layer {layer} · {when} (step {step})" for layer in layers
              for when, step in (("before", steps[0]), ("after", steps[1]))]
    fig = make_subplots(rows=n_layers, cols=2, subplot_titles=titles, horizontal_spacing=0.1,
                        vertical_spacing=0.12 / max(1, n_layers - 1) * 2 if n_layers > 1 else 0.0)
    off = ~np.eye(n_heads, dtype=bool)
    top = max(float(before[:, off].max()) if off.any() else 0.0, float(after[:, off].max()) if off.any() else 0.0)
    heads = [f"head {h}" for h in range(n_heads)]
    for r in range(n_layers):
        for c, values in enumerate((before[r], after[r])):
            z = np.where(off, values, np.nan).astype(np.float32)  # [head head], blank diagonal
            fig.add_trace(go.Heatmap(z=z, x=heads, y=heads, coloraxis="coloraxis", xgap=1, ygap=1,
                                     hovertemplate="%{y} and %{x}<br>shared information %{z:.3f} nats<extra></extra>"),
                          row=r + 1, col=c + 1)
    cell = 44 if n_heads <= 4 else 30
    fig.update_layout(title=title or None, height=int(n_layers * (cell * n_heads + 90) + (60 if title else 20)),
                      font=dict(size=13), margin=dict(l=10, r=10, t=70 if title else 30, b=10),
                      coloraxis=dict(colorscale=MI_SCALE, cmin=0.0, cmax=max(top, 1e-6),
                                     colorbar=dict(title="nats", thickness=14)))
    fig.update_yaxes(autorange="reversed", automargin=True)
    fig.update_yaxes(title_text="head", col=1)  # the same heads in both columns: name the axis once a row
    fig.update_xaxes(title_text="head", automargin=True)
    return fig
