"""Heatmaps shared by every page: attention patterns on a fixed 0..1 scale with token labels.

Payload matters: a 512-token head is 262k cells. Up to `EXACT_CELLS` cells ship as float32
(exact hover values); above that the weights ship as uint8 percentages (1 byte + base64 per
cell, ~1.4 bytes) and the hover says "about N%".
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import plotly.graph_objects as go

ATTENTION_SCALE = "Cividis"  # colour-blind safe, perceptually uniform
EXACT_CELLS = 128 * 128


def unique_labels(tokens: Sequence[str]) -> list[str]:
    """Axis labels for tokens: plotly merges equal category labels, so prefix the position."""
    return [f"{i}:{t}" for i, t in enumerate(tokens)]


def attention_heatmap(pattern: np.ndarray, q_tokens: Sequence[str], k_tokens: Sequence[str],
                      title: str = "", height: Optional[int] = None, show_scale: bool = True,
                      zmax: float = 1.0, q_title: str = "query (attending)",
                      k_title: str = "key (attended to)") -> go.Figure:
    """One head's pattern `[q k]` as a heatmap: queries down the side, keys along the top.

    Built in one Figure construction (no update_* calls afterwards): several times faster, which
    matters on pages that draw many heatmaps per rerun.
    """
    pattern = np.asarray(pattern, dtype=np.float32)
    if pattern.ndim != 2:
        raise ValueError(f"attention_heatmap needs a 2-D [q, k] array, got shape {pattern.shape}")
    nq, nk = pattern.shape
    if len(q_tokens) != nq or len(k_tokens) != nk:
        raise ValueError(f"{len(q_tokens)} query and {len(k_tokens)} key labels for a {nq}x{nk} pattern")
    y, x = unique_labels(q_tokens), unique_labels(k_tokens)
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
