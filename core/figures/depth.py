"""Figures of the Depth page: layer x position heatmaps, the contribution waterfall, the logit lens,
input saliency, the depth experiment's log-scale chart, the twins, and long-range paths.

Pure functions: numpy arrays and labels in, plotly figures out. Layers go UP the page (the
embedding at the bottom, the output at the top), as the residual stream flows.
"""

from __future__ import annotations

from typing import Mapping, Optional, Sequence

import numpy as np
import plotly.graph_objects as go

from core.figures.heatmaps import ATTENTION_SCALE, unique_labels

FONT = dict(size=15)
SCALE = "Viridis"  # sequential, colour-blind safe
# Okabe-Ito: distinguishable with every common colour-vision deficiency.
COLOURS = {
    "pre-LN": "#0072B2", "post-LN": "#D55E00", "no norm": "#CC79A7", "no residual": "#000000",
    "hyper (Sinkhorn)": "#009E73", "hyper (free mixing)": "#E69F00",
}
EXTRA_COLOURS = ["#56B4E9", "#F0E442", "#999999"]
BOUND_COLOUR = "#555555"
POSITIVE, NEGATIVE = "#0072B2", "#D55E00"


def _layout(fig: go.Figure, height: int, title: str = "", **kwargs) -> go.Figure:
    """Shared look: big fonts for a projector, tight margins, a title when given."""
    fig.update_layout(font=FONT, height=height, title=dict(text=title or None, font=dict(size=17)),
                      margin=dict(l=10, r=10, t=50 if title else 20, b=10), legend_font=dict(size=14), **kwargs)
    # Streamlit's chart theme sets small axis fonts; say the sizes on the axes themselves.
    fig.update_xaxes(tickfont=dict(size=13), title_font=dict(size=15))
    fig.update_yaxes(tickfont=dict(size=13), title_font=dict(size=15))
    return fig


def _power_ticks(lo: float, hi: float) -> dict:
    """Colour-bar ticks at whole powers of ten for a log10-valued heatmap."""
    lo, hi = int(np.floor(lo)), int(np.ceil(hi))
    step = max(1, (hi - lo) // 6)
    vals = list(range(lo, hi + 1, step))
    return dict(tickvals=vals, ticktext=[f"1e{v}" if v else "1" for v in vals])


def _log_ticks(arrays) -> dict:
    """Readable ticks for a log axis: 1-2-5 steps written out in full over a few decades
    (plotly's own labels there read "2" for 20); over many decades, plotly's powers of ten."""
    values = np.concatenate([np.ravel(_finite_positive(a)) for a in arrays] or [np.ones(1)])
    values = values[np.isfinite(values)]
    if not values.size:
        return {}
    lo, hi = np.floor(np.log10(values.min())), np.ceil(np.log10(values.max()))
    if hi - lo > 4:
        return dict(exponentformat="power")
    ticks = [m * 10.0 ** k for k in range(int(lo), int(hi) + 1) for m in (1, 2, 5)]
    ticks = [t for t in ticks if values.min() / 1.5 <= t <= values.max() * 1.5]
    return dict(tickvals=ticks, ticktext=[f"{t:g}" for t in ticks])


# ---------------------------------------------------------------------------------------------
# Forward and backward over one input


def stage_heatmap(values: np.ndarray, stages: Sequence[str], tokens: Sequence[str], title: str = "",
                  colorbar: str = "", log: bool = False, value_name: str = "value") -> go.Figure:
    """A `[stage pos]` array: residual states up the side (embedding at the bottom), tokens along.

    With log=True the colour is log10(value) (zeros left blank) and the colour bar reads in
    powers of ten; the hover always shows the value itself.
    """
    values = np.asarray(values, dtype=np.float64)
    if values.shape != (len(stages), len(tokens)):
        raise ValueError(f"values {values.shape} do not match {len(stages)} stages x {len(tokens)} tokens")
    x = unique_labels(tokens)
    colour = values
    bar = dict(title=colorbar or value_name)
    if log:
        with np.errstate(divide="ignore", invalid="ignore"):
            colour = np.where(values > 0, np.log10(values), np.nan)
        finite = colour[np.isfinite(colour)]
        if finite.size:
            bar.update(_power_ticks(finite.min(), finite.max()))
    fig = go.Figure(go.Heatmap(
        z=colour, x=x, y=list(stages), customdata=values, colorscale=SCALE, colorbar=bar,
        hovertemplate=f"%{{y}}<br>token %{{x}}<br>{value_name} %{{customdata:.4g}}<extra></extra>",
    ))
    _layout(fig, max(260, 90 + 34 * len(stages)), title)
    fig.update_xaxes(title="token (position:token)", tickangle=-50, automargin=True)
    fig.update_yaxes(title=None, automargin=True)
    return fig


def contribution_figure(parts: Sequence[str], lengths: np.ndarray, projections: np.ndarray,
                        final_norm: float, is_sum: bool, title: str = "") -> go.Figure:
    """What each component wrote into the stream at one position.

    When the stream is an exact sum, a waterfall: each component's signed projection on the
    final state's direction, adding up to ||x_final||. Bars of each component's length beside it.
    """
    parts = list(parts)
    fig = go.Figure()
    if is_sum:
        fig.add_trace(go.Waterfall(
            x=parts + ["final state"], y=list(np.round(projections, 6)) + [final_norm],
            measure=["relative"] * len(parts) + ["total"], name="along the final direction",
            increasing=dict(marker=dict(color=POSITIVE)), decreasing=dict(marker=dict(color=NEGATIVE)),
            totals=dict(marker=dict(color="#009E73")), connector=dict(line=dict(color="#999999")),
            hovertemplate="%{x}<br>adds %{y:.3f} along the final direction<extra></extra>",
        ))
    else:
        fig.add_trace(go.Bar(x=parts, y=projections, name="along the final direction", marker_color=POSITIVE,
                             hovertemplate="%{x}<br>%{y:.3f} along the final direction<extra></extra>"))
    fig.add_trace(go.Scatter(x=parts, y=lengths, mode="markers", name="length ||output||",
                             marker=dict(symbol="diamond", size=13, color="#000000"),
                             hovertemplate="%{x}<br>length %{y:.3f}<extra></extra>"))
    _layout(fig, 460, title, legend=dict(orientation="h", y=-0.28, x=0, yanchor="top"))
    fig.update_yaxes(title="size in the residual stream")
    fig.update_xaxes(title="component (embedding, positions, then each sublayer)")
    return fig


def logit_lens_figure(colour: np.ndarray, top_tokens: np.ndarray, p_top: np.ndarray, p_right: np.ndarray,
                      stages: Sequence[str], tokens: Sequence[str], colour_name: str = "p(right answer)",
                      title: str = "", alternatives: Optional[np.ndarray] = None, first_position: int = 0) -> go.Figure:
    """The logit lens table: each cell's text is the top prediction, its colour a probability (0..1).

    colour `[stage pos]` (NaN = blank, e.g. a position with no right answer), top_tokens `[stage pos]`
    strings, p_top and p_right `[stage pos]` for the hover; alternatives `[stage pos]` strings (e.g. the
    next likeliest tokens with their probabilities), shown in the hover when given. first_position: the
    position of the first column (a window of a longer input), as the axis labels number them.
    """
    colour = np.asarray(colour, dtype=np.float64)
    if colour.shape != (len(stages), len(tokens)) or np.shape(top_tokens) != colour.shape:
        raise ValueError("colour, top_tokens and labels must agree on [stage pos]")
    if alternatives is not None and np.shape(alternatives) != colour.shape:
        raise ValueError("alternatives must be [stage pos] like colour")
    custom = np.stack([np.asarray(p_top, dtype=np.float64), np.asarray(p_right, dtype=np.float64)], axis=-1)
    more = "" if alternatives is None else "<br>likeliest: %{hovertext}"
    fig = go.Figure(go.Heatmap(
        z=colour, x=[f"{first_position + i}:{t}" for i, t in enumerate(tokens)], y=list(stages),
        text=np.asarray(top_tokens), customdata=custom,
        hovertext=None if alternatives is None else np.asarray(alternatives, dtype=object),
        texttemplate="%{text}", textfont=dict(size=14 if len(tokens) <= 14 else 11), zmin=0.0, zmax=1.0,
        colorscale=ATTENTION_SCALE,
        colorbar=dict(title=colour_name), xgap=1, ygap=1,
        hovertemplate=("%{y}<br>token %{x}<br>top prediction %{text} (p = %{customdata[0]:.3f})"
                       "<br>p(right answer) %{customdata[1]:.3f}" + more + "<extra></extra>"),
    ))
    _layout(fig, max(280, 100 + 40 * len(stages)), title, plot_bgcolor="#eeeeee")
    fig.update_xaxes(title="token (position:token)", tickangle=-50, automargin=True, showgrid=False)
    fig.update_yaxes(title="decoded after", automargin=True, showgrid=False)
    return fig


def saliency_figure(tokens: Sequence[str], saliency: np.ndarray, title: str = "") -> go.Figure:
    """Gradient x embedding per input token, as signed bars (blue pushes the scalar up, orange down)."""
    saliency = np.asarray(saliency, dtype=np.float64)
    if saliency.shape != (len(tokens),):
        raise ValueError(f"{len(tokens)} tokens but saliency of shape {saliency.shape}")
    fig = go.Figure(go.Bar(
        x=unique_labels(tokens), y=saliency, marker_color=np.where(saliency >= 0, POSITIVE, NEGATIVE),
        hovertemplate="token %{x}<br>gradient x embedding %{y:.4g}<extra></extra>",
    ))
    _layout(fig, 340, title)
    fig.update_xaxes(title="input token (position:token)", tickangle=-50, automargin=True)
    fig.update_yaxes(title="gradient · embedding", zeroline=True, zerolinecolor="#444444")
    return fig


# ---------------------------------------------------------------------------------------------
# The depth experiment


def _finite_positive(y: np.ndarray) -> np.ndarray:
    """Non-finite or non-positive values become NaN (gaps): a log axis cannot show them."""
    y = np.asarray(y, dtype=np.float64)
    return np.where(np.isfinite(y) & (y > 0), y, np.nan)


def depth_chart(curves: Mapping[str, np.ndarray], lower: Optional[np.ndarray] = None,
                upper: Optional[np.ndarray] = None, rho: Optional[float] = None, y_title: str = "",
                title: str = "", x_title: str = "layer l (0 = input side)") -> go.Figure:
    """Gradient norm per layer for several stacks on one log axis, with the seed's two bounds.

    curves: name -> values at layers 0..L (already relative to the top). lower/upper: the
    bounds (1-rho)^(L-l) and rho^(L-l) at the same layers, drawn dashed.
    """
    fig = go.Figure()
    extra = iter(EXTRA_COLOURS * 4)
    for name, y in curves.items():
        y = _finite_positive(y)
        x = np.arange(len(y))
        broken = np.isnan(y).any()
        fig.add_trace(go.Scatter(
            x=x, y=y, mode="lines+markers", name=name + (" (overflowed: gaps)" if broken else ""),
            line=dict(color=COLOURS.get(name) or next(extra), width=3), marker=dict(size=6),
            hovertemplate=f"{name}<br>layer %{{x}}<br>%{{y:.3g}}<extra></extra>",
        ))
    if lower is not None and rho is not None:
        fig.add_trace(go.Scatter(x=np.arange(len(lower)), y=_finite_positive(lower), mode="lines",
                                 name=f"(1 - ρ)^(L-l), ρ = {rho:.2f}: floor with an identity path",
                                 line=dict(color=BOUND_COLOUR, width=2, dash="dash"),
                                 hovertemplate="(1-ρ)^(L-l)<br>layer %{x}<br>%{y:.3g}<extra></extra>"))
    if upper is not None and rho is not None:
        fig.add_trace(go.Scatter(x=np.arange(len(upper)), y=_finite_positive(upper), mode="lines",
                                 name=f"ρ^(L-l), ρ = {rho:.2f}: ceiling without one",
                                 line=dict(color=BOUND_COLOUR, width=2, dash="dot"),
                                 hovertemplate="ρ^(L-l)<br>layer %{x}<br>%{y:.3g}<extra></extra>"))
    _layout(fig, 560, title, legend=dict(orientation="h", y=-0.18, x=0, yanchor="top"),
            hovermode="closest")
    drawn = list(curves.values()) + [b for b in (lower, upper) if b is not None and rho is not None]
    fig.update_yaxes(type="log", title=y_title, **_log_ticks(drawn))
    fig.update_xaxes(title=x_title, dtick=4 if max((len(v) for v in curves.values()), default=0) > 16 else 1)
    return fig


def twins_chart(stages: Sequence[str], curves: Mapping[str, np.ndarray], y_title: str, title: str = "",
                log: bool = True) -> go.Figure:
    """The bundled twins (and their untrained copies): one value per residual state (solid = trained)."""
    fig = go.Figure()
    styles = {"trained": dict(width=4), "untrained": dict(width=2, dash="dot")}
    for name, y in curves.items():
        kind = "untrained" if "untrained" in name else "trained"
        colour = COLOURS["post-LN"] if "post" in name else COLOURS["pre-LN"]
        fig.add_trace(go.Scatter(x=list(stages), y=_finite_positive(y), mode="lines+markers", name=name,
                                 line=dict(color=colour, **styles[kind]), marker=dict(size=9),
                                 hovertemplate=f"{name}<br>%{{x}}<br>%{{y:.3g}}<extra></extra>"))
    _layout(fig, 440, title, legend=dict(orientation="h", y=-0.3, x=0, yanchor="top"))
    if log:
        fig.update_yaxes(type="log", title=y_title, **_log_ticks(list(curves.values())))
    else:
        fig.update_yaxes(title=y_title, rangemode="tozero")
    fig.update_xaxes(title="residual state (input side on the left)")
    return fig


def mixing_figure(matrix: np.ndarray, title: str = "") -> go.Figure:
    """One hyper-connection mixing matrix H_res with its entries written in, on a fixed 0..1 scale."""
    matrix = np.asarray(matrix, dtype=np.float64)
    n = matrix.shape[0]
    labels = [f"stream {i}" for i in range(n)]
    fig = go.Figure(go.Heatmap(
        z=matrix, x=labels, y=labels, text=np.round(matrix, 2), texttemplate="%{text}", textfont=dict(size=15),
        zmin=0.0, zmax=1.0, colorscale=SCALE, colorbar=dict(title="weight"),
        hovertemplate="new %{y} takes %{z:.3f} of old %{x}<extra></extra>",
    ))
    _layout(fig, 380, title)
    fig.update_layout(margin=dict(l=10, r=10, t=110, b=10))  # room for the title above the top axis
    fig.update_xaxes(title="from (old stream)", side="top")
    fig.update_yaxes(title="to (new stream)", autorange="reversed")
    return fig


# ---------------------------------------------------------------------------------------------
# Long-range paths


def paths_chart(ns: np.ndarray, formula: np.ndarray, ideal: np.ndarray, random_heads: np.ndarray,
                rnn: np.ndarray, heads: int, chosen_n: Optional[int] = None,
                model_point: Optional[tuple[int, float, str]] = None, title: str = "") -> go.Figure:
    """Layers (or RNN steps) needed for the last token to hear the first, against sequence length n.

    Log-log axes: the Transformer curves grow like ln n, the RNN's like n.
    model_point: (n, layers, label) measured on a real model's attention graphs.
    """
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=ns, y=rnn, mode="lines", name="RNN: n − 1 steps",
                             line=dict(color="#000000", width=3),
                             hovertemplate="RNN<br>n = %{x}<br>%{y} steps<extra></extra>"))
    fig.add_trace(go.Scatter(x=ns, y=formula, mode="lines", name=f"hop model ln n / ln(H+1), H = {heads}",
                             line=dict(color=COLOURS["pre-LN"], width=3, dash="dash"),
                             hovertemplate="ln n / ln(H+1)<br>n = %{x}<br>%{y:.2f} layers<extra></extra>"))
    fig.add_trace(go.Scatter(x=ns, y=ideal, mode="lines+markers", name="perfectly spread heads (measured)",
                             line=dict(color="#009E73", width=3, shape="hv"), marker=dict(size=7),
                             hovertemplate="spread heads<br>n = %{x}<br>%{y} layers<extra></extra>"))
    fig.add_trace(go.Scatter(x=ns, y=_finite_positive(random_heads), mode="lines+markers",
                             name="random sharp heads (mean, measured)",
                             line=dict(color=COLOURS["post-LN"], width=3), marker=dict(size=7),
                             hovertemplate="random heads<br>n = %{x}<br>%{y:.2f} layers<extra></extra>"))
    if chosen_n is not None:  # a trace, not a shape: shapes on log axes want log10 coordinates
        top = float(np.nanmax(np.asarray(rnn, dtype=np.float64)))
        bottom = min(float(np.nanmin(formula)), 1.0) * 0.7
        fig.add_trace(go.Scatter(x=[chosen_n, chosen_n], y=[bottom, max(top, 2.0) * 1.5], mode="lines",
                                 name=f"your n = {chosen_n}", line=dict(color="#777777", width=2, dash="dot"),
                                 hoverinfo="skip"))
    if model_point is not None:
        n_model, layers, label = model_point
        fig.add_trace(go.Scatter(x=[n_model], y=[layers], mode="markers", name=label,
                                 marker=dict(symbol="star", size=20, color="#CC79A7", line=dict(color="#000", width=1)),
                                 hovertemplate="this model<br>n = %{x}<br>%{y} layers<extra></extra>"))
    _layout(fig, 520, title, legend=dict(orientation="h", y=-0.2, x=0, yanchor="top"))
    ticks = [int(v) for v in np.asarray(ns) if (int(v) & (int(v) - 1)) == 0 and np.log2(int(v)) % 2 == 1]  # 2, 8, 32, ...
    fig.update_xaxes(type="log", title="sequence length n", tickvals=ticks, ticktext=[str(t) for t in ticks])
    lo = min(float(np.nanmin(formula)), 1.0) * 0.7
    hi = float(np.nanmax(np.asarray(rnn, dtype=np.float64))) * 1.5
    fig.update_yaxes(type="log", title="layers (Transformer) or steps (RNN)", dtick=1,
                     range=[np.log10(lo), np.log10(max(hi, 2.0))])
    return fig


def linked_layers_chart(taus: np.ndarray, layers: np.ndarray, keys: np.ndarray, n: int, heads: int,
                        sharp_layers: int, tau: float, tau_layers: int, title: str = "") -> go.Figure:
    """Layers the last token needs to reach all n positions when only weights >= tau count as links,
    against tau (log axis), between dense soft attention (one layer) and sharp heads (the logarithm).

    taus, layers, keys: the curve (keys = the most keys one head can give tau). sharp_layers:
    ceil(ln n / ln(H + 1)). (tau, tau_layers): the chosen threshold, starred.
    """
    taus = np.asarray(taus, dtype=np.float64)
    fig = go.Figure()
    fig.add_trace(go.Scatter(
        x=taus, y=layers, customdata=keys, mode="lines", name=f"best layout of H = {heads} heads, links ≥ τ",
        line=dict(color=COLOURS["pre-LN"], width=3, shape="hv"),
        hovertemplate="τ = %{x:.3g}<br>≤ %{customdata} keys per head<br>%{y} layers<extra></extra>"))
    span = [float(taus.min()), float(taus.max())]
    fig.add_trace(go.Scatter(x=span, y=[sharp_layers] * 2, mode="lines",
                             name=f"sharp heads, one edge each: ⌈ln n / ln(H+1)⌉ = {sharp_layers}",
                             line=dict(color=COLOURS["post-LN"], width=2, dash="dash"),
                             hovertemplate="sharp heads<br>%{y} layers<extra></extra>"))
    fig.add_trace(go.Scatter(x=span, y=[1, 1], mode="lines", name="dense soft attention: 1 layer, every pair",
                             line=dict(color=COLOURS["hyper (Sinkhorn)"], width=2, dash="dot"),
                             hovertemplate="dense soft attention<br>%{y} layer<extra></extra>"))
    top = max(sharp_layers, int(np.max(layers))) + 1
    fig.add_trace(go.Scatter(x=[1 / n, 1 / n], y=[0, top], mode="lines", name=f"τ = 1/n = {1 / n:.3g}: a dense "
                             "head's weight on each key", line=dict(color="#777777", width=2, dash="dashdot"),
                             hoverinfo="skip"))
    fig.add_trace(go.Scatter(x=[tau], y=[tau_layers], mode="markers", name=f"your τ = {tau:g}: {tau_layers} layers",
                             marker=dict(symbol="star", size=20, color="#CC79A7", line=dict(color="#000", width=1)),
                             hovertemplate="your τ = %{x}<br>%{y} layers<extra></extra>"))
    _layout(fig, 460, title, legend=dict(orientation="h", y=-0.25, x=0, yanchor="top"))
    fig.update_xaxes(type="log", title="τ: the least weight that counts as a link (log)", exponentformat="power")
    fig.update_yaxes(title=f"layers to reach all n = {n} positions", dtick=1, range=[0, top + 0.2])
    return fig


def receptive_field_figure(fields: np.ndarray, tokens: Sequence[str], layer_names: Sequence[str],
                           title: str = "") -> go.Figure:
    """The last token's receptive field as layers stack: row k = which keys can reach it after k layers."""
    fields = np.asarray(fields, dtype=bool)
    if fields.ndim != 2 or fields.shape[1] != len(tokens) or fields.shape[0] != len(layer_names):
        raise ValueError(f"fields {fields.shape} do not match {len(layer_names)} layers x {len(tokens)} tokens")
    fig = go.Figure(go.Heatmap(
        z=fields.astype(np.float32), x=unique_labels(tokens), y=list(layer_names), zmin=0.0, zmax=1.0,
        colorscale=[[0, "#f2f2f2"], [1, "#21908d"]], showscale=False, xgap=2, ygap=2,
        hovertemplate="after %{y}<br>token %{x}<br>reaches the last token: %{z}<extra></extra>",
    ))
    _layout(fig, max(220, 110 + 40 * len(layer_names)), title)
    fig.update_xaxes(title="token that can reach the last one (teal)", tickangle=-50, automargin=True)
    fig.update_yaxes(title="stacked layers", automargin=True)
    return fig
