"""Figures of the Masks page's local-peaks section: attention to later readings per layer, both twins.

Pure function: arrays in, a plotly figure out.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np
import plotly.graph_objects as go

from core.figures.depth import _layout

COLOURS = {"encoder": "#0072B2", "decoder": "#D55E00"}  # Okabe-Ito
EVEN = "#555555"


def future_mass_figure(later: Mapping[str, np.ndarray], next_one: Mapping[str, np.ndarray], even_later: float,
                       even_next: float, title: str = "") -> go.Figure:
    """Per layer: the weight a reading puts on all later readings (solid bars) and on the next one alone
    (hatched bars), for each model, with an even spread's values as dotted lines."""
    fig = go.Figure()
    for name, y in later.items():
        layers = [f"L{i}" for i in range(len(y))]
        fig.add_trace(go.Bar(x=layers, y=np.asarray(y, dtype=float), name=f"{name}: all later readings",
                             marker_color=COLOURS.get(name, EVEN), offsetgroup=f"{name}-later",
                             hovertemplate=f"{name}<br>%{{x}}: %{{y:.3f}} on later readings<extra></extra>"))
        fig.add_trace(go.Bar(x=layers, y=np.asarray(next_one[name], dtype=float), name=f"{name}: the next reading",
                             marker=dict(color=COLOURS.get(name, EVEN), pattern_shape="/", opacity=0.6),
                             offsetgroup=f"{name}-next",
                             hovertemplate=f"{name}<br>%{{x}}: %{{y:.3f}} on the next reading<extra></extra>"))
    for value, text in ((even_later, "even spread: later readings"), (even_next, "even spread: next reading")):
        fig.add_hline(y=value, line=dict(color=EVEN, dash="dot", width=2), annotation_text=text,
                      annotation_position="top right")
    _layout(fig, 420, title, barmode="group", legend=dict(orientation="h", y=-0.2, x=0, yanchor="top"))
    fig.update_yaxes(title="attention weight (mean over heads, readings)", range=[0, 1])
    fig.update_xaxes(title="layer")
    return fig
