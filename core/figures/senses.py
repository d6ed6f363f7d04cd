"""Figures of the Attention page's English panel: how far apart two uses of "bank" are at every layer, where
"bank" looks, and the head whose "it" looks most at "animal".

Pure functions: arrays and labels in, plotly figures out. Attention on a fixed 0..1 colour range (cividis).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from core.figures.depth import _layout
from core.figures.heatmaps import ATTENTION_SCALE, unique_labels

WITHIN, ACROSS, HIGHLIGHT, PLAIN = "#0072B2", "#D55E00", "#D55E00", "#999999"  # Okabe-Ito


def sense_distance_figure(layers: Sequence[str], within: np.ndarray, across: np.ndarray, title: str = "") -> go.Figure:
    """1 - cosine between two uses of "bank" after every block: same sense (the control) against different senses.
    Linear axis from 0, so the gap between the lines reads as it is."""
    fig = go.Figure()
    for name, y, colour, dash in (("same sense (control)", within, WITHIN, "solid"),
                                  ("different senses", across, ACROSS, "dash")):
        values = 1.0 - np.asarray(y, dtype=float)
        fig.add_trace(go.Scatter(x=list(layers), y=values, mode="lines+markers", name=name,
                                 line=dict(color=colour, width=4, dash=dash), marker=dict(size=9),
                                 hovertemplate=f"{name}<br>%{{x}}<br>1 − cos = %{{y:.3g}}<extra></extra>"))
    _layout(fig, 380, title, legend=dict(orientation="h", y=-0.25, x=0, yanchor="top"))
    fig.update_yaxes(title="1 − cosine of the two 'bank' vectors", rangemode="tozero", exponentformat="e")
    fig.update_xaxes(title="stream after each block")
    return fig


def word_rows_figure(rows: Sequence[np.ndarray], tokens: Sequence[Sequence[str]], titles: Sequence[str],
                     layers: Sequence[str], title: str = "") -> go.Figure:
    """One small heatmap per sentence: the attention row of one word `[layer key]` (mean over heads)."""
    n = len(rows)
    cols = 2 if n > 1 else 1
    fig = make_subplots(rows=(n + cols - 1) // cols, cols=cols, subplot_titles=list(titles),
                        vertical_spacing=0.25, horizontal_spacing=0.08)
    for i, (row, labels) in enumerate(zip(rows, tokens)):
        fig.add_trace(go.Heatmap(z=np.asarray(row, dtype=np.float32), x=unique_labels(labels), y=list(layers),
                                 zmin=0.0, zmax=1.0, colorscale=ATTENTION_SCALE, showscale=i == 0,
                                 colorbar=dict(title="weight"),
                                 hovertemplate="%{y} → %{x}<br>weight %{z:.3f}<extra></extra>"),
                      row=i // cols + 1, col=i % cols + 1)
    _layout(fig, 260 * ((n + cols - 1) // cols) + 60, title)
    fig.update_xaxes(tickangle=-60, tickfont=dict(size=11))
    return fig


def coref_figure(mass: np.ndarray, row: np.ndarray, tokens: Sequence[str], targets: Sequence[int], layer: int,
                 head: int, title: str = "") -> go.Figure:
    """Left: the attention from "it" to "animal" of every head `[layer head]`. Right: the chosen head's "it" row,
    the target word's pieces highlighted."""
    fig = make_subplots(rows=1, cols=2, column_widths=[0.32, 0.68], horizontal_spacing=0.16,
                        subplot_titles=("'it' → 'animal', every head", f"L{layer}H{head}: the row of 'it'"))
    n_layers, n_heads = mass.shape
    fig.add_trace(go.Heatmap(z=np.asarray(mass, dtype=np.float32), x=[f"H{h}" for h in range(n_heads)],
                             y=[f"L{i}" for i in range(n_layers)], zmin=0.0, zmax=1.0, colorscale=ATTENTION_SCALE,
                             colorbar=dict(title="weight", x=0.29, thickness=12),
                             hovertemplate="%{y}%{x}<br>'it' → 'animal' %{z:.3f}<extra></extra>"), row=1, col=1)
    colours = [HIGHLIGHT if k in set(targets) else PLAIN for k in range(len(row))]
    fig.add_trace(go.Bar(x=unique_labels(tokens[:len(row)]), y=np.asarray(row, dtype=float), marker_color=colours,
                         showlegend=False, hovertemplate="%{x}<br>weight %{y:.3f}<extra></extra>"), row=1, col=2)
    _layout(fig, 400, title)
    fig.update_yaxes(autorange="reversed", row=1, col=1)
    fig.update_yaxes(range=[0, 1], row=1, col=2)
    fig.update_xaxes(tickangle=-60, tickfont=dict(size=11), row=1, col=2)
    return fig
