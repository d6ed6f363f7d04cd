"""The Depth page's cross-attention gradient path figure: the decoder's loss gradient along each
encoder-decoder model's encoder, with the identity path's share at the embeddings.

Pure function: arrays and labels in, a plotly figure out.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from core.figures.depth import _layout

COLOURS = ["#0072B2", "#D55E00", "#009E73", "#CC79A7"]  # Okabe-Ito


def cross_path_figure(stages: Sequence[str], along: Mapping[str, np.ndarray], at_embed: Mapping[str, np.ndarray],
                      bar_labels: Sequence[str], title: str = "") -> go.Figure:
    """Left: ||d loss / d x|| at each encoder state relative to the top of the stream, one line per
    model. Right: at the source embeddings, all paths against the identity path alone (same scale)."""
    fig = make_subplots(rows=1, cols=2, column_widths=[0.62, 0.38], horizontal_spacing=0.12,
                        subplot_titles=("Along the encoder (÷ top of its stream)", "At the source embeddings"))
    for i, (name, y) in enumerate(along.items()):
        colour = COLOURS[i % len(COLOURS)]
        fig.add_trace(go.Scatter(x=list(stages), y=np.asarray(y, dtype=float), mode="lines+markers", name=name,
                                 line=dict(color=colour, width=4), marker=dict(size=9), legendgroup=name,
                                 hovertemplate=f"{name}<br>%{{x}}<br>%{{y:.3g}}<extra></extra>"), row=1, col=1)
        fig.add_trace(go.Bar(x=list(bar_labels), y=np.asarray(at_embed[name], dtype=float), name=name,
                             marker_color=colour, legendgroup=name, showlegend=False,
                             hovertemplate=f"{name}<br>%{{x}}<br>%{{y:.3g}}<extra></extra>"), row=1, col=2)
    _layout(fig, 440, title, legend=dict(orientation="h", y=-0.25, x=0, yanchor="top"), barmode="group")
    fig.update_yaxes(title="‖∂ℓ/∂x‖ ÷ top", rangemode="tozero", row=1, col=1)
    fig.update_yaxes(title="‖∂ℓ/∂embedding‖ ÷ top", rangemode="tozero", row=1, col=2)
    fig.update_xaxes(title="encoder state (source embeddings on the left)", row=1, col=1)
    return fig
