"""Figures for the Retrieval page: arrays in, plotly figures out (no models, no streamlit).

The kernel a query applies and the two estimates it links (attention, Nadaraya-Watson), a 2-D
database of key arrows, the beta sweep from soft average to hard lookup, the attention and
kernel weights side by side, where head outputs sit against the span of the keys, and the
hijack curves of three models.
"""

from __future__ import annotations

import math
from typing import Mapping, Optional, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from core.figures.heatmaps import attention_heatmap

# Okabe-Ito colours: colour-blind safe
BLUE, ORANGE, GREEN, VERMILLION, PURPLE, GREY = "#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#7f8fa6"
FONT = dict(size=14)
LEGEND_BELOW = dict(orientation="h", yref="container", y=0, yanchor="bottom", x=0)
MODEL_COLOURS = (BLUE, ORANGE, GREEN, PURPLE)


def _layout(fig: go.Figure, title: str, height: int) -> go.Figure:
    fig.update_layout(title=dict(text=title, x=0, xanchor="left"), height=height, font=FONT,
                      margin=dict(l=60, r=20, t=50, b=90), legend=LEGEND_BELOW)
    return fig


# ---------------------------------------------------------------------------------------------
# Panel 1: kernel smoothing


def kernel_figure(x: np.ndarray, weights: np.ndarray, kernel_x: np.ndarray, kernel_curve: np.ndarray,
                  query_x: float, title: str = "") -> go.Figure:
    """The weights one query gives the points (stems), over the kernel it applies (a curve, peak 1)."""
    fig = go.Figure()
    scaled = kernel_curve * (float(np.max(weights)) if len(weights) else 1.0)
    fig.add_trace(go.Scatter(x=kernel_x, y=scaled, mode="lines", name="kernel exp(q·k(x)), scaled",
                             line=dict(color=GREY, width=2)))
    stems_x = np.repeat(x, 3)
    stems_y = np.stack([np.zeros_like(weights), weights, np.full_like(weights, np.nan)], axis=-1).ravel()
    fig.add_trace(go.Scatter(x=stems_x, y=stems_y, mode="lines", line=dict(color=BLUE), showlegend=False,
                             hoverinfo="skip"))
    fig.add_trace(go.Scatter(x=x, y=weights, mode="markers", name="attention weight of each point",
                             marker=dict(color=BLUE, size=8),
                             hovertemplate="x=%{x:.3f}<br>weight=%{y:.4f}<extra></extra>"))
    fig.add_vline(x=query_x, line=dict(color=VERMILLION, dash="dash"), annotation_text="query",
                  annotation_position="top")
    fig.update_xaxes(title="x", range=[0, 1])
    fig.update_yaxes(title="attention weight", rangemode="tozero")
    return _layout(fig, title, 360)


def estimate_figure(x: np.ndarray, y: np.ndarray, grid: np.ndarray, attention: np.ndarray,
                    nadaraya_watson: np.ndarray, nw_in_x: np.ndarray, query_x: float, title: str = "") -> go.Figure:
    """The points, the attention estimate across x, and the two Nadaraya-Watson estimates."""
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=x, y=y, mode="markers", name="points (x_j, y_j)", marker=dict(color=GREY, size=7)))
    fig.add_trace(go.Scatter(x=grid, y=attention, mode="lines", name="attention Σ softmax(q·k_j) y_j",
                             line=dict(color=BLUE, width=4)))
    fig.add_trace(go.Scatter(x=grid, y=nadaraya_watson, mode="lines",
                             name="Nadaraya-Watson, Gaussian<br>in key space (σ² = 1/|q|)",
                             line=dict(color=ORANGE, width=2, dash="dash")))
    fig.add_trace(go.Scatter(x=grid, y=nw_in_x, mode="lines", name="Nadaraya-Watson, Gaussian<br>in x (h = 1/(π√|q|))",
                             line=dict(color=GREEN, width=1.5, dash="dot")))
    fig.add_vline(x=query_x, line=dict(color=VERMILLION, dash="dash"))
    fig.update_xaxes(title="x (query position)", range=[0, 1])
    fig.update_yaxes(title="estimate of y")
    return _layout(fig, title, 420)


# ---------------------------------------------------------------------------------------------
# Panel 2 and 5: keys as arrows, the beta sweep, attention against the kernel


def arrows_figure(keys: np.ndarray, labels: Sequence[str], query: np.ndarray, highlight: Sequence[int] = (),
                  weights: Optional[np.ndarray] = None, title: str = "") -> go.Figure:
    """Keys as arrows from the origin (highlighted ones in vermillion), the query as a dashed arrow,
    each key labelled (and its weight given when `weights` is)."""
    fig = go.Figure()
    reach = max(1.2, float(np.abs(keys).max()) * 1.15, float(np.abs(query).max()) * 1.15)
    angle = np.linspace(0, 2 * math.pi, 121)
    fig.add_trace(go.Scatter(x=np.cos(angle), y=np.sin(angle), mode="lines", line=dict(color="#dddddd"),
                             name="unit circle", hoverinfo="skip"))
    for i, (k, label) in enumerate(zip(keys, labels)):
        colour = VERMILLION if i in highlight else BLUE
        text = label if weights is None else f"{label}  w={weights[i]:.3f}"
        fig.add_annotation(x=k[0], y=k[1], ax=0, ay=0, xref="x", yref="y", axref="x", ayref="y", showarrow=True,
                           arrowhead=2, arrowwidth=2 + (4 * weights[i] if weights is not None else 0),
                           arrowcolor=colour, text="")
        fig.add_trace(go.Scatter(x=[k[0]], y=[k[1]], mode="markers+text", text=[text], textposition="top center",
                                 marker=dict(color=colour, size=6), showlegend=False,
                                 hovertemplate=f"{text}<br>k=(%{{x:.2f}}, %{{y:.2f}})<extra></extra>"))
    fig.add_annotation(x=query[0], y=query[1], ax=0, ay=0, xref="x", yref="y", axref="x", ayref="y",
                       showarrow=True, arrowhead=3, arrowwidth=3, arrowcolor=GREEN, text="")
    fig.add_trace(go.Scatter(x=[query[0]], y=[query[1]], mode="markers+text", text=["query"],
                             textposition="bottom center", marker=dict(color=GREEN, size=8), name="query"))
    fig.update_xaxes(range=[-reach, reach], zeroline=True, title="key coordinate 1")
    fig.update_yaxes(range=[-reach, reach], zeroline=True, scaleanchor="x", scaleratio=1, title="key coordinate 2")
    return _layout(fig, title, 440)


def sweep_figure(betas: np.ndarray, output: np.ndarray, best_weight: np.ndarray, entropy: np.ndarray,
                 mean_value: float, limit_value: float, beta_one_hot: float, beta_now: float,
                 title: str = "") -> go.Figure:
    """Output, the best key's weight and the entropy against beta (log axis), with beta* and the chosen beta."""
    fig = make_subplots(rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.06,
                        subplot_titles=("output Σ w_j v_j", "weight of the best key", "entropy (nats)"))
    fig.add_trace(go.Scatter(x=betas, y=output, mode="lines", name="output", line=dict(color=BLUE, width=3)), 1, 1)
    fig.add_hline(y=mean_value, line=dict(color=GREY, dash="dot"), annotation_text="mean of all values",
                  annotation_position="top left", row=1, col=1)
    fig.add_hline(y=limit_value, line=dict(color=GREEN, dash="dot"), annotation_text="value of the best key(s)",
                  annotation_position="bottom right", row=1, col=1)
    fig.add_trace(go.Scatter(x=betas, y=best_weight, mode="lines", name="best key's weight",
                             line=dict(color=ORANGE, width=3)), 2, 1)
    fig.add_hline(y=0.99, line=dict(color=GREY, dash="dot"), row=2, col=1)
    fig.add_trace(go.Scatter(x=betas, y=entropy, mode="lines", name="entropy", line=dict(color=PURPLE, width=3)), 3, 1)
    for row in (1, 2, 3):
        fig.add_vline(x=beta_now, line=dict(color=VERMILLION, dash="dash"), row=row, col=1)
        if math.isfinite(beta_one_hot):
            fig.add_vline(x=beta_one_hot, line=dict(color=GREEN, width=1), row=row, col=1)
    if math.isfinite(beta_one_hot):
        fig.add_annotation(x=math.log10(beta_one_hot), y=0.99, xref="x2", yref="y2", text=f"β* = {beta_one_hot:.3g}",
                           showarrow=True, ax=-50, ay=25)
    fig.update_xaxes(type="log")  # every row: shared axes of different types draw nonsense
    fig.update_xaxes(title="β (log scale)", row=3, col=1)
    fig.update_yaxes(range=[0, 1.05], row=2, col=1)
    return _layout(fig, title, 620)


def weights_comparison(labels: Sequence[str], attention: np.ndarray, kernel: np.ndarray, title: str = "") -> go.Figure:
    """Attention weights and Nadaraya-Watson weights of the same keys, side by side."""
    fig = go.Figure()
    fig.add_trace(go.Bar(x=list(labels), y=attention, name="softmax(q·k)", marker_color=BLUE))
    fig.add_trace(go.Bar(x=list(labels), y=kernel, name="Gaussian kernel exp(−|u − k|²·|q|/2), normalised",
                         marker_color=ORANGE))
    fig.update_layout(barmode="group")
    fig.update_yaxes(title="weight", range=[0, 1.05])
    return _layout(fig, title, 360)


# ---------------------------------------------------------------------------------------------
# Panels 3 and 4: the trained recall models


def span_figure(points: Mapping[str, tuple[np.ndarray, np.ndarray]], title: str = "") -> go.Figure:
    """For each model, every output vector as (|part inside the key span|, |part outside|)."""
    fig = go.Figure()
    for colour, (name, (inside, outside)) in zip(MODEL_COLOURS, points.items()):
        fig.add_trace(go.Scatter(x=inside, y=outside, mode="markers", name=name, marker=dict(color=colour, size=7,
                                 opacity=0.7), hovertemplate="inside %{x:.3g}<br>outside %{y:.3g}<extra></extra>"))
    fig.update_xaxes(title="|P z|: the part inside the span of the keys", rangemode="tozero")
    fig.update_yaxes(title="|z − P z|: the part outside", rangemode="tozero")
    return _layout(fig, title, 420)


def hijack_figure(alphas: np.ndarray, accuracy: Mapping[str, np.ndarray], mass: Mapping[str, np.ndarray],
                  alpha_now: float, title: str = "") -> go.Figure:
    """Accuracy and the attention mass on the scaled key against alpha (log), one colour per model."""
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.12,
                        subplot_titles=("accuracy on the recall examples", "attention on the scaled key"))
    for colour, name in zip(MODEL_COLOURS, accuracy):
        fig.add_trace(go.Scatter(x=alphas, y=accuracy[name], mode="lines+markers", name=name,
                                 line=dict(color=colour, width=3), legendgroup=name), 1, 1)
        fig.add_trace(go.Scatter(x=alphas, y=mass[name], mode="lines+markers", name=name, showlegend=False,
                                 line=dict(color=colour, width=3), legendgroup=name), 1, 2)
    for col in (1, 2):
        fig.add_vline(x=alpha_now, line=dict(color=VERMILLION, dash="dash"), row=1, col=col)
        fig.update_xaxes(type="log", title="α (the key's scale, log)", row=1, col=col)
        fig.update_yaxes(range=[0, 1.05], row=1, col=col)
    return _layout(fig, title, 420)


def pattern_figure(pattern: np.ndarray, tokens: Sequence[str], title: str = "") -> go.Figure:
    """One example's last-layer attention (mean over heads), queries down, keys across."""
    fig = attention_heatmap(pattern, tokens, tokens, height=460)
    fig.update_layout(title=dict(text=title, x=0, xanchor="left", yref="container", y=0.99, yanchor="top"),
                      margin=dict(t=130))  # the title above the key labels, which sit on top
    return fig


# ---------------------------------------------------------------------------------------------
# Panel 6: what scales the output


def scale_figure(factors: np.ndarray, ratio: Mapping[str, np.ndarray], factor: float, title: str = "") -> go.Figure:
    """‖output‖ / ‖unscaled output‖ against the factor c that multiplies the values, the queries or the keys
    (log-log: scaling the values is the line y = c), with the student's c marked on every curve."""
    colours = {"values": BLUE, "queries": VERMILLION, "keys": ORANGE}
    dashes = {"values": "solid", "queries": "solid", "keys": "dash"}
    fig = go.Figure()
    for which, y in ratio.items():
        fig.add_trace(go.Scatter(x=factors, y=y, mode="lines", name=f"scale the {which} by c",
                                 line=dict(color=colours.get(which, GREY), width=3, dash=dashes.get(which)),
                                 hovertemplate=f"{which} × %{{x:.3g}}<br>output × %{{y:.4g}}<extra></extra>"))
    at = {which: float(np.interp(np.log(factor), np.log(factors), y)) for which, y in ratio.items()}
    fig.add_trace(go.Scatter(x=[factor] * len(at), y=list(at.values()), mode="markers", name=f"c = {factor:g}",
                             marker=dict(color=[colours.get(w, GREY) for w in at], size=12, line=dict(width=1)),
                             text=list(at), hovertemplate="%{text} × %{x:.3g}: output × %{y:.4g}<extra></extra>"))
    fig.update_xaxes(type="log", title="factor c")
    fig.update_yaxes(type="log", title="‖output‖ ÷ ‖unscaled output‖")
    return _layout(fig, title, 400)
