"""The Depth page's trained hyper-connections figure: loss curves, and the gradient at every block before and
after training, for a pair trained with and without hyper-connections.

Pure function: arrays and labels in, a plotly figure out.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from core.figures.depth import _layout

COLOURS = ["#009E73", "#0072B2", "#D55E00", "#CC79A7"]  # Okabe-Ito; hyper first, like the Depth page's green


def hyper_trained_figure(steps: Sequence[int], losses: Mapping[str, np.ndarray], grad_init: Mapping[str, np.ndarray],
                         grad_trained: Mapping[str, np.ndarray], title: str = "") -> go.Figure:
    """Left: training loss against step, one thin line per seed `[seed step]` and their mean. Right: the mean over
    seeds of ||d loss / d x_l|| at the state entering each block, at initialisation (dotted) and trained (solid)."""
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.12,
                        subplot_titles=("Training loss", "Loss gradient entering each block"))
    for i, (name, curves) in enumerate(losses.items()):
        colour = COLOURS[i % len(COLOURS)]
        curves = np.asarray(curves, dtype=float)  # [seed step]
        for row in curves:
            fig.add_trace(go.Scatter(x=list(steps), y=row, mode="lines", line=dict(color=colour, width=1),
                                     opacity=0.35, showlegend=False, hoverinfo="skip"), row=1, col=1)
        fig.add_trace(go.Scatter(x=list(steps), y=curves.mean(0), mode="lines", name=name, legendgroup=name,
                                 line=dict(color=colour, width=4),
                                 hovertemplate=f"{name}<br>step %{{x}}<br>loss %{{y:.3f}} (mean)<extra></extra>"),
                      row=1, col=1)
        layers = [f"L{j}" for j in range(len(grad_init[name]) - 1)] + ["top"]
        for kind, values, dash in (("init", grad_init[name], "dot"), ("trained", grad_trained[name], "solid")):
            fig.add_trace(go.Scatter(x=layers, y=np.asarray(values, dtype=float), mode="lines+markers",
                                     name=f"{name}, {kind}", legendgroup=name, showlegend=False,
                                     line=dict(color=colour, width=3, dash=dash), marker=dict(size=8),
                                     hovertemplate=f"{name}, {kind}<br>%{{x}}<br>%{{y:.3g}}<extra></extra>"),
                          row=1, col=2)
    _layout(fig, 430, title, legend=dict(orientation="h", y=-0.25, x=0, yanchor="top"))
    fig.update_yaxes(type="log", title="cross-entropy", row=1, col=1)
    fig.update_xaxes(title="step", row=1, col=1)
    fig.update_yaxes(type="log", title="‖∂ℓ/∂x‖ (dotted: init, solid: trained)", row=1, col=2)
    fig.update_xaxes(title="state entering block (input side on the left)", row=1, col=2)
    return fig
