"""Figures for the Positions page: arrays in, plotly figures out (no models, no Streamlit).

Signed tables (encodings, M_k) use a diverging scale centred on 0 with a fixed range, so two
tables can be compared by colour; attention uses 0..1; everything shows its value on hover.
"""

from __future__ import annotations

from typing import Mapping, Optional, Sequence

import numpy as np
import plotly.graph_objects as go

SIGNED_SCALE = "RdBu"  # diverging, colour-blind safe (blue/red, no green)
SEQUENTIAL_SCALE = "Viridis"
# Okabe-Ito colours: distinguishable with every common colour-vision deficiency.
COLOURS = {"none": "#999999", "sinusoidal": "#0072B2", "learned": "#E69F00", "rope": "#009E73",
           "a": "#0072B2", "b": "#D55E00"}
FONT = dict(size=15)  # readable on a projector
TICK_FONT = dict(size=14)
AXIS_TITLE_FONT = dict(size=15)


def _layout(fig: go.Figure, title: str, height: int, **extra) -> go.Figure:
    """The shared look: a title, projector-sized fonts on every axis, tight margins."""
    fig.update_layout(title=dict(text=title, font=dict(size=17)) if title else None, height=height,
                      font=FONT, legend_font=dict(size=14), margin=dict(l=10, r=10, t=50 if title else 10, b=10),
                      **extra)
    fig.update_xaxes(tickfont=TICK_FONT, title_font=AXIS_TITLE_FONT)
    fig.update_yaxes(tickfont=TICK_FONT, title_font=AXIS_TITLE_FONT)
    return fig


def encoding_heatmap(table: np.ndarray, title: str = "", zmax: Optional[float] = 1.0,
                     height: int = 380) -> go.Figure:
    """A positions x dimensions table `[n d]` (sinusoidal or learned), position 0 at the top.

    zmax fixes the colour range to -zmax..zmax (None: the table's largest |value|).
    """
    table = np.asarray(table, dtype=np.float32)
    if table.ndim != 2:
        raise ValueError(f"encoding_heatmap needs a 2-D [position, dimension] array, got {table.shape}")
    limit = float(np.abs(table).max()) if zmax is None else float(zmax)
    limit = limit or 1.0
    fig = go.Figure(go.Heatmap(
        z=table, x=np.arange(table.shape[1]), y=np.arange(table.shape[0]), colorscale=SIGNED_SCALE,
        zmin=-limit, zmax=limit, zmid=0, colorbar=dict(title="value"),
        hovertemplate="position %{y}<br>dimension %{x}<br>value %{z:.3f}<extra></extra>"))
    return _layout(fig, title, height, xaxis=dict(title="dimension"),
                   yaxis=dict(title="position", autorange="reversed"))


def wavelength_chart(wavelengths: np.ndarray, n: int, title: str = "", height: int = 320,
                     dims: Optional[np.ndarray] = None, n_label: str = "sequence length n") -> go.Figure:
    """Wavelength (in positions) of each sin/cos pair on a log axis, with the sequence length n marked.

    dims `[pairs 2]`: the two dimensions of each pair, for the hover (None: 2i and 2i + 1, the sinusoidal
    table's and RoPE's "pairs" layout). n_label names the marked length (e.g. a model's context)."""
    wl = np.asarray(wavelengths, dtype=np.float64)
    pairs = np.arange(len(wl))
    dims = np.stack([2 * pairs, 2 * pairs + 1], 1) if dims is None else np.asarray(dims)
    fig = go.Figure(go.Bar(
        x=pairs, y=wl, marker_color=COLOURS["sinusoidal"], customdata=dims,
        hovertemplate="pair %{x} (dims %{customdata[0]}, %{customdata[1]})<br>"
                      "wavelength %{y:.1f} positions<extra></extra>"))
    # The length n as a trace, not add_hline: shapes on a log axis would need log10 coordinates.
    fig.add_trace(go.Scatter(x=[-0.5, len(wl) - 0.5], y=[n, n], mode="lines+text", name=f"{n_label} = {n}",
                             line=dict(color="#333333", dash="dash", width=2), text=[f"n = {n}", ""],
                             textposition="top right", textfont=dict(size=15),
                             hovertemplate=f"{n_label} = {n}<extra></extra>"))
    return _layout(fig, title, height, xaxis=dict(title="dimension pair i"), showlegend=False,
                   yaxis=dict(title="wavelength (positions)", type="log", dtick=1))


def gram_heatmap(gram: np.ndarray, title: str = "", height: int = 380) -> go.Figure:
    """G[t, u] = PE_t . PE_u `[n n]`: stripes parallel to the diagonal mean "depends on t - u only"."""
    gram = np.asarray(gram, dtype=np.float32)
    n = gram.shape[0]
    fig = go.Figure(go.Heatmap(
        z=gram, x=np.arange(n), y=np.arange(n), colorscale=SEQUENTIAL_SCALE, colorbar=dict(title="PE·PE"),
        hovertemplate="t = %{y}<br>u = %{x}<br>PE_t · PE_u = %{z:.4f}<extra></extra>"))
    return _layout(fig, title, height, xaxis=dict(title="position u"),
                   yaxis=dict(title="position t", autorange="reversed"))


def profile_chart(offsets: np.ndarray, mean: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                  closed_form: Optional[np.ndarray] = None, title: str = "", height: int = 380) -> go.Figure:
    """Every diagonal of G against t - u: its smallest and largest entry (a band) and the formula.

    For sinusoids the band has zero width: each diagonal is one number.
    """
    x = np.asarray(offsets)
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=x, y=hi, mode="lines", line=dict(width=0), showlegend=False, hoverinfo="skip"))
    fig.add_trace(go.Scatter(x=x, y=lo, mode="lines", line=dict(width=0), fill="tonexty",
                             fillcolor="rgba(213,94,0,0.35)", name="min..max on the diagonal", hoverinfo="skip"))
    fig.add_trace(go.Scatter(
        x=x, y=mean, mode="lines", name="diagonal mean", line=dict(color=COLOURS["sinusoidal"], width=3),
        customdata=np.stack([lo, hi], 1),
        hovertemplate="t - u = %{x}<br>mean %{y:.4f}<br>min %{customdata[0]:.4f}<br>max %{customdata[1]:.4f}"
                      "<extra></extra>"))
    if closed_form is not None:
        fig.add_trace(go.Scatter(x=x, y=closed_form, mode="markers", name="Σ cos(ω_i (t-u))",
                                 marker=dict(color="#000000", size=5, symbol="circle-open"),
                                 hovertemplate="t - u = %{x}<br>formula %{y:.4f}<extra></extra>"))
    return _layout(fig, title, height, xaxis=dict(title="offset t - u"), yaxis=dict(title="PE_t · PE_u"),
                   legend=dict(orientation="h", y=-0.25))


def shift_matrix_heatmap(m: np.ndarray, title: str = "", height: int = 380) -> go.Figure:
    """M_k `[d d]`: 2x2 rotation blocks on the diagonal, zeros elsewhere."""
    m = np.asarray(m, dtype=np.float32)
    d = m.shape[0]
    fig = go.Figure(go.Heatmap(
        z=m, x=np.arange(d), y=np.arange(d), colorscale=SIGNED_SCALE, zmin=-1, zmax=1, zmid=0,
        colorbar=dict(title="entry"), hovertemplate="row %{y}<br>column %{x}<br>%{z:.4f}<extra></extra>"))
    return _layout(fig, title, height, xaxis=dict(title="input dimension", constrain="domain"),
                   yaxis=dict(title="output dimension", autorange="reversed", scaleanchor="x"))


def rope_plane(trail_q: np.ndarray, trail_k: np.ndarray, positions: Sequence[int], m: int, n: int,
               title: str = "", height: int = 440) -> go.Figure:
    """One dimension pair of q and k in the plane: faint dots where each lands at every position,
    arrows for q at position m and k at position n. The angle between the arrows is what q.k sees."""
    positions = list(positions)
    fig = go.Figure()
    for trail, name, colour in ((trail_q, "q", COLOURS["a"]), (trail_k, "k", COLOURS["b"])):
        fig.add_trace(go.Scatter(
            x=trail[:, 0], y=trail[:, 1], mode="markers", name=f"{name} at positions {positions[0]}..{positions[-1]}",
            marker=dict(color=colour, size=7, opacity=0.35), customdata=np.asarray(positions),
            hovertemplate=f"{name} at position %{{customdata}}<br>(%{{x:.2f}}, %{{y:.2f}})<extra></extra>"))
    for trail, at, name, colour in ((trail_q, m, "q", COLOURS["a"]), (trail_k, n, "k", COLOURS["b"])):
        x, y = trail[positions.index(at)]
        fig.add_annotation(x=x, y=y, ax=0, ay=0, xref="x", yref="y", axref="x", ayref="y", showarrow=True,
                           arrowhead=3, arrowwidth=3, arrowcolor=colour, text="")
        fig.add_trace(go.Scatter(x=[x], y=[y], mode="markers+text", text=[f"{name} at {at}"],
                                 textposition="top center", marker=dict(color=colour, size=12),
                                 textfont=dict(size=16, color=colour), showlegend=False,
                                 hovertemplate=f"{name} at position {at}<br>(%{{x:.2f}}, %{{y:.2f}})<extra></extra>"))
    r = float(max(np.linalg.norm(trail_q, axis=1).max(), np.linalg.norm(trail_k, axis=1).max())) * 1.25
    return _layout(fig, title, height, xaxis=dict(range=[-r, r], zeroline=True, title="dimension 2i"),
                   yaxis=dict(range=[-r, r], zeroline=True, scaleanchor="x", title="dimension 2i+1"),
                   legend=dict(orientation="h", y=-0.2))


def rope_score_heatmap(scores: np.ndarray, positions: Sequence[int], marks: Sequence[tuple[int, int]] = (),
                       title: str = "", height: int = 400) -> go.Figure:
    """q.k for one fixed q and k placed at query position m and key position n; `marks` ring cells."""
    positions = list(positions)
    fig = go.Figure(go.Heatmap(
        z=np.asarray(scores, dtype=np.float32), x=positions, y=positions, colorscale=SEQUENTIAL_SCALE,
        colorbar=dict(title="q·k"), hovertemplate="q at m = %{y}<br>k at n = %{x}<br>q·k = %{z:.4f}<extra></extra>"))
    if marks:
        fig.add_trace(go.Scatter(x=[b for _, b in marks], y=[a for a, _ in marks], mode="markers",
                                 marker=dict(symbol="square-open", size=16, color="#FF2D2D", line=dict(width=3)),
                                 name="compared cells", hovertemplate="m = %{y}, n = %{x}<extra></extra>"))
    return _layout(fig, title, height, xaxis=dict(title="key position n"),
                   yaxis=dict(title="query position m", autorange="reversed"), showlegend=False)


def neighbour_bars(offsets: np.ndarray, weights_a: np.ndarray, weights_b: np.ndarray, label_a: str,
                   label_b: str, title: str = "", height: int = 360) -> go.Figure:
    """Attention weights over neighbours (offset u - t) from two query positions, side by side."""
    fig = go.Figure()
    for w, label, colour in ((weights_a, label_a, COLOURS["a"]), (weights_b, label_b, COLOURS["b"])):
        fig.add_trace(go.Bar(x=np.asarray(offsets), y=np.asarray(w), name=label, marker_color=colour,
                             hovertemplate=label + "<br>offset %{x}<br>weight %{y:.4f}<extra></extra>"))
    top = float(max(np.max(weights_a), np.max(weights_b)))
    return _layout(fig, title, height, barmode="group", xaxis=dict(title="offset of the key (u - t)", dtick=1),
                   yaxis=dict(title="attention weight", range=[0, min(1.0, top * 1.15) or 1.0]),
                   legend=dict(orientation="h", y=-0.25))


def row_distance_heatmap(distances: np.ndarray, a_tokens: Sequence[str], b_tokens: Sequence[str],
                         title: str = "", height: Optional[int] = None) -> go.Figure:
    """||out_B[i] - out_A[j]|| for every pair of output rows; a 0 marks "row i of B is row j of A"."""
    distances = np.asarray(distances, dtype=np.float32)
    nb, na = distances.shape
    x = [f"{j}:{t}" for j, t in enumerate(a_tokens)]
    y = [f"{i}:{t}" for i, t in enumerate(b_tokens)]
    fig = go.Figure(go.Heatmap(
        z=distances, x=x, y=y, colorscale="Cividis", reversescale=True, zmin=0,
        text=np.where(distances < 1e-4, "0", ""), texttemplate="%{text}", textfont=dict(size=16, color="#FFFFFF"),
        colorbar=dict(title="distance"),
        hovertemplate="row %{y} of B<br>row %{x} of A<br>distance %{z:.2e}<extra></extra>"))
    return _layout(fig, title, height or max(380, 120 + 40 * nb),
                   xaxis=dict(title="output row of A (token)", tickangle=-45),
                   yaxis=dict(title="output row of B (token)", autorange="reversed"))


def pooled_chart(pooled_a: np.ndarray, pooled_b: np.ndarray, label_a: str = "A", label_b: str = "B",
                 title: str = "", height: int = 320) -> go.Figure:
    """Mean-pooled output vectors of the two orders over the model dimensions, overlaid."""
    d = np.arange(len(pooled_a))
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=d, y=pooled_a, mode="lines", name=label_a, line=dict(color=COLOURS["a"], width=4),
                             hovertemplate=label_a + "<br>dim %{x}: %{y:.4f}<extra></extra>"))
    fig.add_trace(go.Scatter(x=d, y=pooled_b, mode="lines", name=label_b,
                             line=dict(color=COLOURS["b"], width=2, dash="dash"),
                             hovertemplate=label_b + "<br>dim %{x}: %{y:.4f}<extra></extra>"))
    return _layout(fig, title, height, xaxis=dict(title="model dimension"), yaxis=dict(title="mean over positions"),
                   legend=dict(orientation="h", y=-0.3))


def accuracy_bars(labels: Sequence[str], values: Sequence[float], colours: Sequence[str], title: str = "",
                  height: int = 280) -> go.Figure:
    """Accuracy (0..1) of a few runs of the same model, one bar each, the value written on the bar."""
    fig = go.Figure(go.Bar(x=list(labels), y=list(values), marker_color=list(colours),
                           text=[f"{v:.0%}" for v in values], textposition="outside",
                           hovertemplate="%{x}<br>accuracy %{y:.3f}<extra></extra>"))
    return _layout(fig, title, height, yaxis=dict(title="accuracy", range=[0, 1.15], tickformat=".0%"))


def extrapolation_chart(curves: Mapping[str, tuple[Sequence[int], Sequence[Optional[float]]]],
                        train_positions: int, title: str = "", height: int = 440) -> go.Figure:
    """Accuracy against sequence length, one line per scheme; the training length is marked and a
    refused length (None) is drawn as a cross on the floor instead of a point."""
    fig = go.Figure()
    for name, (positions, acc) in curves.items():
        colour = COLOURS.get(name, "#555555")
        xs = [p for p, a in zip(positions, acc) if a is not None]
        ys = [a for a in acc if a is not None]
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines+markers", name=name,
                                 line=dict(color=colour, width=3), marker=dict(size=9),
                                 hovertemplate=name + "<br>%{x} positions<br>accuracy %{y:.3f}<extra></extra>"))
        refused = [p for p, a in zip(positions, acc) if a is None]
        if refused:
            fig.add_trace(go.Scatter(x=refused, y=[0.0] * len(refused), mode="markers", name=f"{name}: refused",
                                     marker=dict(symbol="x", size=13, color=colour, line=dict(width=1)),
                                     hovertemplate=name + " refused %{x} positions: no table entry<extra></extra>"))
    fig.add_vline(x=train_positions, line_dash="dash", line_color="#333333")
    # Left of the line, half way up: every curve sits near 100% there, so the label never covers data.
    fig.add_annotation(x=train_positions, y=0.5, xanchor="right", showarrow=False, font=dict(size=15),
                       text=f"longest training<br>input: {train_positions} ")
    return _layout(fig, title, height, xaxis=dict(title="input length (positions)"),
                   yaxis=dict(title="accuracy", range=[-0.05, 1.05], tickformat=".0%"),
                   legend=dict(orientation="h", y=-0.22))


def rope_decay_chart(distances: np.ndarray, bound: np.ndarray, random_rel: np.ndarray, random_raw: np.ndarray,
                     model_rel: Optional[np.ndarray] = None, model_raw: Optional[np.ndarray] = None,
                     d_bound: int = 16, model_label: str = "model", title: str = "",
                     height: int = 420) -> go.Figure:
    """RoPE against distance m - n: the relative upper bound (1 at 0), and the mean |q.k| of random vectors
    and of a model's q and k, each divided by its own value at distance 0 (the raw mean on hover)."""
    x = np.asarray(distances)
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=x, y=np.asarray(bound), mode="lines", name=f"upper bound (d = {d_bound})",
                             line=dict(color="#000000", width=3),
                             hovertemplate="m - n = %{x}<br>relative bound %{y:.3f}<extra></extra>"))
    fig.add_trace(go.Scatter(x=x, y=np.asarray(random_rel), mode="lines", name=f"random q, k (d = {d_bound})",
                             line=dict(color=COLOURS["a"], width=2), customdata=np.asarray(random_raw),
                             hovertemplate="m - n = %{x}<br>mean |q·k| %{customdata:.3f}<br>"
                                           "relative to m - n = 0: %{y:.3f}<extra></extra>"))
    if model_rel is not None:
        fig.add_trace(go.Scatter(x=x, y=np.asarray(model_rel), mode="lines", name=model_label,
                                 line=dict(color=COLOURS["b"], width=2, dash="dot"), customdata=np.asarray(model_raw),
                                 hovertemplate="m - n = %{x}<br>mean |q·k| %{customdata:.3f}<br>"
                                               "relative to m - n = 0: %{y:.3f}<extra></extra>"))
    return _layout(fig, title, height, xaxis=dict(title="relative distance m − n"),
                   yaxis=dict(title="relative to distance 0", rangemode="tozero"),
                   legend=dict(orientation="h", y=-0.25))
