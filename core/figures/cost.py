"""Figures for the Cost page: measured and counted costs against n, always on log-log axes, where
a power law n^p is a straight line of slope p (arrays in, plotly figures out; no models, no streamlit)."""

from __future__ import annotations

from typing import Mapping, Optional, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from core.figures.masks import FONT, LEGEND_BELOW, _title

COLOURS = {"explicit": "#D55E00", "fused SDPA": "#CC79A7", "block-sparse": "#0072B2", "chunked": "#009E73",
           "RNN": "#222222", "attention": "#D55E00", "patterns": "#7f8fa6",
           "kept patterns": "#CC79A7"}  # Okabe-Ito: colour-blind safe
DASHES = {"RNN": "dot", "patterns": "dash", "tiled": "dash"}


def _colour(name: str) -> str:
    return COLOURS.get(name, "#E69F00")


def _loglog(fig: go.Figure, title: str, y_title: str, height: int = 440) -> go.Figure:
    fig.update_xaxes(type="log", title_text="sequence length n")
    fig.update_yaxes(type="log", title_text=y_title)
    fig.update_layout(title=_title(title), height=height, font=FONT, legend=LEGEND_BELOW,
                      margin=dict(l=10, r=10, t=50 if title else 20, b=10))
    return fig


def _slope_label(name: str, slopes: Mapping[str, float], predicted: Mapping[str, float]) -> str:
    """'explicit: slope 2.04 (predicted 2)' for the legend and the line's end."""
    if name not in slopes:
        return name
    if slopes[name] is None:
        return f"{name}: launch-bound throughout, no slope"
    text = f"{name}: slope {slopes[name]:.2f}"
    return text + (f" (predicted {predicted[name]:g})" if name in predicted else "")


def time_chart(ns: Sequence[int], ms: Mapping[str, Sequence[float]], slopes: Mapping[str, Optional[float]],
               predicted: Mapping[str, float], d_model: int, measured_crossover: Optional[float],
               title: str = "", launch_bound: Optional[Mapping[str, Sequence[bool]]] = None) -> go.Figure:
    """Median time per call against n for every method, each line labelled with its fitted and predicted
    slope at its right end; the predicted attention-vs-RNN crossover n = d and the measured one as
    vertical lines; `launch_bound` (method -> [n] flags) rings the points left out of the slope fits."""
    x = np.asarray(ns, dtype=np.float64)
    fig = go.Figure()
    for name, values in ms.items():
        label = _slope_label(name, slopes, predicted)
        fig.add_trace(go.Scatter(x=x, y=np.asarray(values, dtype=np.float64), name=label, mode="lines+markers",
                                 line=dict(color=_colour(name), width=3, dash=DASHES.get(name)),
                                 hovertemplate=f"{name}<br>n = %{{x}}<br>%{{y:.3g}} ms<extra></extra>"))
        slope = slopes.get(name)
        fig.add_annotation(x=np.log10(x[-1]), y=np.log10(values[-1]), text="–" if slope is None else f"{slope:.2f}",
                           showarrow=False, xanchor="left", xshift=8, font=dict(color=_colour(name), size=13))
    flagged = [(name, np.asarray(f, dtype=bool)) for name, f in (launch_bound or {}).items() if np.any(f)]
    for i, (name, flags) in enumerate(flagged):
        fig.add_trace(go.Scatter(x=x[flags], y=np.asarray(ms[name], dtype=np.float64)[flags], mode="markers",
                                 name="launch-bound: left out of the slope", legendgroup="launch", showlegend=i == 0,
                                 marker=dict(symbol="circle-open", size=16, color="#222222", line=dict(width=2)),
                                 hovertemplate=f"{name}, launch-bound<br>n = %{{x}}<br>%{{y:.3g}} ms<extra></extra>"))
    every = np.concatenate([np.asarray(v, dtype=np.float64) for v in ms.values()])
    span = [float(every.min()), float(every.max())]
    _vertical(fig, d_model, span, f"predicted crossover n = d = {d_model}", "#7f8fa6", "dash")
    if measured_crossover is not None:
        _vertical(fig, measured_crossover, span, f"measured crossover n ≈ {measured_crossover:,.0f}", "#222222", "solid")
    return _loglog(fig, title, "time per call, ms (median)", height=480)


def _vertical(fig: go.Figure, x: float, span: Sequence[float], name: str, colour: str, dash: str) -> None:
    """A vertical line at x over the y span, as a trace (so it has a legend entry and a hover)."""
    fig.add_trace(go.Scatter(x=[x, x], y=list(span), name=name, mode="lines", line=dict(color=colour, width=2, dash=dash),
                             hovertemplate=f"{name}<extra></extra>"))


def steps_chart(ns: Sequence[int], rnn_steps: Sequence[int], attention_steps: Sequence[int],
                rnn_path: Sequence[int], attention_path: Sequence[int], title: str = "") -> go.Figure:
    """Sequential operations (left) and the longest path between two positions (right) of one layer."""
    x = np.asarray(ns, dtype=np.float64)
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.12,
                        subplot_titles=("sequential operations", "longest path (positions 0 → n−1)"))
    for col, (rnn, att) in enumerate(((rnn_steps, attention_steps), (rnn_path, attention_path)), start=1):
        fig.add_trace(go.Scatter(x=x, y=np.asarray(rnn, dtype=np.float64), name="RNN: O(n)", mode="lines+markers",
                                 line=dict(color=_colour("RNN"), width=3, dash="dot"), showlegend=col == 1,
                                 legendgroup="rnn"), row=1, col=col)
        fig.add_trace(go.Scatter(x=x, y=np.asarray(att, dtype=np.float64), name="attention: O(1)",
                                 mode="lines+markers", line=dict(color=_colour("attention"), width=3),
                                 showlegend=col == 1, legendgroup="attention"), row=1, col=col)
    fig.update_traces(hovertemplate="n = %{x}<br>%{y:,}<extra></extra>")
    fig.update_yaxes(title_text="steps", row=1, col=1)
    fig.update_yaxes(title_text="layer-steps", row=1, col=2)
    return _loglog(fig, title, "", height=380)


def memory_chart(ns: Sequence[int], peak: Mapping[str, Sequence[float]], patterns: Sequence[float],
                 slopes: Mapping[str, float], predicted: Mapping[str, float], title: str = "") -> go.Figure:
    """Measured peak memory of a training step (MiB) against n, beside the size of the h n^2 patterns."""
    x = np.asarray(ns, dtype=np.float64)
    fig = go.Figure()
    for name, values in peak.items():
        fig.add_trace(go.Scatter(x=x, y=np.asarray(values, dtype=np.float64) / 2 ** 20,
                                 name=_slope_label(name, slopes, predicted), mode="lines+markers",
                                 line=dict(color=_colour(name), width=3, dash=DASHES.get(name)),
                                 hovertemplate=f"{name}<br>n = %{{x}}<br>%{{y:.3g}} MiB<extra></extra>"))
    fig.add_trace(go.Scatter(x=x, y=np.asarray(patterns, dtype=np.float64) / 2 ** 20, name="h·n² patterns (counted)",
                             mode="lines", line=dict(color=_colour("patterns"), width=2, dash="dash"),
                             hovertemplate="patterns<br>n = %{x}<br>%{y:.3g} MiB<extra></extra>"))
    return _loglog(fig, title, "peak memory, MiB")


def preset_chart(rows: Sequence[Mapping], title: str = "") -> go.Figure:
    """At a famous model's size: GFLOP of attention vs a recurrent layer (left), and the training memory
    of every pattern vs chunked attention (right), against n (counts, not measurements)."""
    x = np.asarray([r["n"] for r in rows], dtype=np.float64)
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.12,
                        subplot_titles=("GFLOP of one layer", "kept for the backward pass, MiB"))
    lines = ((1, "attention GFLOP (one layer)", "attention: 4n²d", "attention"),
             (1, "RNN GFLOP (one layer)", "RNN: 4nd²", "RNN"),
             (2, "patterns kept, MiB (all maps)", "every pattern: h·n² per map", "kept patterns"),
             (2, "chunked keeps, MiB (all maps)", "chunked: linear in n", "chunked"))
    for col, key, name, colour in lines:
        fig.add_trace(go.Scatter(x=x, y=[r[key] for r in rows], name=name, mode="lines+markers",
                                 line=dict(color=_colour(colour), width=3, dash=DASHES.get(colour)),
                                 hovertemplate=f"{name}<br>n = %{{x}}<br>%{{y:.3g}}<extra></extra>"),
                      row=1, col=col)
    return _loglog(fig, title, "", height=400)


def traffic_chart(rows: Sequence[Mapping], title: str = "") -> go.Figure:
    """Bytes one attention forward reads and writes in main memory (counted, MiB) against n: explicit attention,
    whose n x n scores and probabilities go through memory, and a tiled kernel that keeps them on chip."""
    x = np.asarray([r["n"] for r in rows], dtype=np.float64)
    fig = go.Figure()
    for key, name, colour in (("explicit MiB moved", "explicit: 4(4nd + 4hn²) bytes", "explicit"),
                              ("tiled MiB moved", "tiled: 4(2nd + 2nd⌈n/b⌉ + hn) bytes", "tiled")):
        fig.add_trace(go.Scatter(x=x, y=[r[key] for r in rows], name=name, mode="lines+markers",
                                 line=dict(color=_colour("chunked" if colour == "tiled" else colour), width=3,
                                           dash=DASHES.get(colour)),
                                 hovertemplate=f"{name}<br>n = %{{x}}<br>%{{y:.3g}} MiB<extra></extra>"))
    return _loglog(fig, title, "bytes read + written, MiB (counted)", height=400)


def gradient_chart(distance: Sequence[int], curves: Mapping[str, Sequence[float]], title: str = "") -> go.Figure:
    """‖∂y_last / ∂x_t‖ against the distance from the last position, one line per layer, on a log y axis (the
    RNN's gradient falls by orders of magnitude; attention's does not depend on the distance)."""
    x = np.asarray(distance, dtype=np.float64)
    fig = go.Figure()
    for name, values in curves.items():
        fig.add_trace(go.Scatter(x=x, y=np.asarray(values, dtype=np.float64), name=name, mode="lines",
                                 line=dict(color=_colour(name), width=3, dash=DASHES.get(name)),
                                 hovertemplate=f"{name}<br>distance %{{x}}<br>‖∂y/∂x‖ = %{{y:.3g}}<extra></extra>"))
    fig.update_xaxes(title_text="distance from the last position, n − 1 − t")
    fig.update_yaxes(type="log", title_text="‖∂y_last / ∂x_t‖ (Frobenius)", exponentformat="power")
    fig.update_layout(title=_title(title), height=400, font=FONT, legend=LEGEND_BELOW,
                      margin=dict(l=10, r=10, t=50 if title else 20, b=10))
    return fig


def scaling_chart(rows: Sequence[Mapping], vary: str, title: str = "") -> go.Figure:
    """Parameters, forward FLOPs and training memory of small models against their depth or width (log-log):
    measured (markers and solid lines) beside the formulas' counts (dashed) where a formula is given."""
    x_key, x_title = ("layers", "layers L") if vary == "depth" else ("d_model", "width d_model")
    x = np.asarray([r[x_key] for r in rows], dtype=np.float64)
    panels = (("parameters", "parameters (measured)", "parameters (counted)"),
              ("forward MFLOP", "forward MFLOP (measured)", "forward MFLOP (counted)"),
              ("training peak MiB", "training peak MiB (measured, float32)", None))
    fig = make_subplots(rows=1, cols=3, horizontal_spacing=0.09, subplot_titles=[p[0] for p in panels])
    for col, (label, measured, counted) in enumerate(panels, start=1):
        fig.add_trace(go.Scatter(x=x, y=[r[measured] for r in rows], name="measured on models built here",
                                 mode="lines+markers", line=dict(color=_colour("explicit"), width=3),
                                 marker=dict(size=9), legendgroup="measured", showlegend=col == 1,
                                 hovertemplate=f"{label}, measured<br>{x_key} = %{{x}}<br>%{{y:,.4g}}<extra></extra>"),
                      row=1, col=col)
        if counted is not None:
            fig.add_trace(go.Scatter(x=x, y=[r[counted] for r in rows], name="counted by the formula",
                                     mode="lines", line=dict(color=_colour("patterns"), width=2, dash="dash"),
                                     legendgroup="counted", showlegend=col == 1,
                                     hovertemplate=f"{label}, counted<br>{x_key} = %{{x}}<br>%{{y:,.4g}}<extra></extra>"),
                          row=1, col=col)
    fig.update_xaxes(type="log", title_text=x_title)
    fig.update_yaxes(type="log")
    fig.update_layout(title=_title(title), height=400, font=FONT, legend=LEGEND_BELOW,
                      margin=dict(l=10, r=10, t=70 if title else 40, b=10))
    return fig
