"""Figures for the Masks page: arrays in, plotly figures out (no models, no streamlit).

The mask as a grid and as a graph (an arc diagram that stays readable to 32 tokens), the
Laplacian and its spectrum, reach through stacked layers, measured influence, right vs wrong
masking, the leak through a finite mask constant, and the cost of dense vs sparse attention.
"""

from __future__ import annotations

from typing import Mapping, Optional, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from core.figures.heatmaps import ATTENTION_SCALE, attention_heatmap, unique_labels

BLOCKED, ALLOWED = "#00224e", "#fee838"  # the two ends of cividis
BACK, AHEAD = "#0072B2", "#D55E00"  # Okabe-Ito blue / vermillion: colour-blind safe
HIGHLIGHT, MUTED = "#D55E00", "#7f8fa6"
FONT = dict(size=14)
LEGEND_BELOW = dict(orientation="h", yref="container", y=0, yanchor="bottom", x=0)  # clear of titles and top axes


def _title(text: str) -> Optional[dict]:
    """A left-aligned title at the very top of the figure (None for no title)."""
    if not text:
        return None
    return dict(text=text, x=0, xanchor="left", yref="container", y=1, yanchor="top", pad=dict(t=8),
                font=dict(size=16))


def _top_margin(labels: Sequence[str], title: str) -> int:
    """Top margin for a heatmap whose key labels sit on top: title + rotated labels + axis title.

    Plotly's automargin makes room for the labels but not for a title above them, so the room
    is reserved here: about 6.5 px per character of the longest label turned by 60 degrees.
    """
    longest = max((len(str(label)) for label in labels), default=1)
    return (36 if title else 0) + int(6.5 * longest) + 40


def title_above(fig: go.Figure) -> go.Figure:
    """Give a heatmap with key labels on top (like the shared attention heatmap) room for its title."""
    text = fig.layout.title.text
    if not text:
        return fig
    labels = list(fig.data[0].x) if fig.data and fig.data[0].x is not None else []
    margin = fig.layout.margin
    return fig.update_layout(title=_title(text), height=(fig.layout.height or 300) + 36,
                             margin=dict(l=margin.l, r=margin.r, b=margin.b, t=_top_margin(labels, text)))


def titled_heatmap(pattern: np.ndarray, tokens: Sequence[str], title: str, height: int) -> go.Figure:
    """One attention pattern [q k] on the shared 0..1 heatmap, its title clear of the key labels on top."""
    return title_above(attention_heatmap(pattern, tokens, tokens, title=title, height=height))


def _grid_height(rows: int) -> int:
    """A height that keeps every row label readable (22 px a row, 260..760)."""
    return max(260, min(760, 90 + 22 * rows))


def mask_grid(mask: np.ndarray, q_tokens: Sequence[str], k_tokens: Sequence[str], title: str = "",
              height: Optional[int] = None) -> go.Figure:
    """A bool mask ``[q, k]`` as a two-colour grid: bright = may attend, dark = blocked.

    A query row with no allowed key is flagged in its label ("no keys"), since that row's
    attention output is all zeros.
    """
    mask = np.asarray(mask, dtype=bool)
    nq, nk = mask.shape
    y = unique_labels(q_tokens)
    empty = ~mask.any(axis=1)  # [q]
    y = [f"{label}  ⚠ no keys" if e else label for label, e in zip(y, empty)]
    text = np.where(mask, "may attend", "blocked")  # [q k]
    fig = go.Figure(go.Heatmap(
        z=mask.astype(np.float32), x=unique_labels(k_tokens), y=y, zmin=0, zmax=1,
        colorscale=[[0.0, BLOCKED], [0.5, BLOCKED], [0.5, ALLOWED], [1.0, ALLOWED]], showscale=False,
        text=text, hovertemplate="query %{y}<br>key %{x}<br>%{text}<extra></extra>", xgap=1, ygap=1,
    ))
    fig.update_layout(
        title=_title(title), height=height or _grid_height(nq) + (36 if title else 0), font=FONT,
        margin=dict(l=10, r=10, t=_top_margin(unique_labels(k_tokens), title), b=10),
        xaxis=dict(side="top", tickangle=-60, title="key (attended to)", automargin=True),
        yaxis=dict(autorange="reversed", title="query (attending)", automargin=True),
    )
    return fig


def _arcs(queries: np.ndarray, keys: np.ndarray, sign: float, n: int, points: int = 13) -> tuple[np.ndarray, np.ndarray]:
    """Every arc key -> query as a half-ellipse from x = key to x = query, above the axis (sign +1) or below (-1),
    in one pair of float32 arrays, each arc followed by a gap (NaN): numpy arrays ship in binary, where a list of
    Python floats for a 64-token causal mask was 1.2 MB of text. An arc's height grows like the square root of
    its length (the longest is (n-1)/2 high), so arcs between neighbours stay visible next to long ones."""
    t = np.linspace(0.0, np.pi, points)  # [point]
    a, b = np.asarray(keys, dtype=np.float64)[:, None], np.asarray(queries, dtype=np.float64)[:, None]  # [edge 1]
    x = a + (b - a) * (1 - np.cos(t)) / 2  # [edge point]
    height = np.sqrt(np.abs(b - a) / max(n - 1, 1)) * max(n - 1, 1) / 2  # [edge 1]
    y = sign * height * np.sin(t)  # [edge point]
    gap = np.full((len(x), 1), np.nan)
    return (np.hstack([x, gap]).ravel().astype(np.float32),  # [edge*(point+1)]
            np.hstack([y, gap]).ravel().astype(np.float32))


def arc_diagram(mask: np.ndarray, tokens: Sequence[str], title: str = "") -> go.Figure:
    """The mask as a directed graph: tokens on a line, one arc per allowed pair (k -> q, k != q).

    Arcs above the line carry information from an EARLIER key to a later query (looking
    back); arcs below carry it from a LATER key to an earlier query (looking ahead). A causal
    mask draws only the upper half. A filled node may attend to itself; a hollow one may not.
    """
    mask = np.asarray(mask, dtype=bool)
    n = mask.shape[0]
    labels = unique_labels(tokens)
    fig = go.Figure()
    edges = int(mask.sum() - np.trace(mask))
    opacity = float(np.clip(60.0 / max(edges, 1), 0.18, 0.9))
    tallest = {1.0: 0.6, -1.0: 0.6}  # the highest arc above and below (a little room when none)
    for name, colour, sign, pick in (("looks back: key before query (above)", BACK, 1.0, np.tril(mask, -1)),
                                     ("looks ahead: key after query (below)", AHEAD, -1.0, np.triu(mask, 1))):
        xs, ys = _arcs(*np.nonzero(pick), sign, n)
        if len(ys):
            tallest[sign] = max(tallest[sign], float(np.nanmax(np.abs(ys))))
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", name=f"{name}: {int(pick.sum())} edges",
                                 line=dict(color=colour, width=1.6), opacity=opacity, hoverinfo="skip",
                                 showlegend=True))
    self_loop = np.diag(mask)
    out_deg, in_deg = mask.sum(axis=1), mask.sum(axis=0)  # keys each query reads, queries reading each key
    hover = [f"{labels[i]}<br>reads {out_deg[i]} keys<br>is read by {in_deg[i]} queries"
             f"<br>{'attends to itself' if self_loop[i] else 'may NOT attend to itself'}" for i in range(n)]
    fig.add_trace(go.Scatter(
        x=np.arange(n), y=np.zeros(n), mode="markers", name="token (filled: may attend to itself)",
        marker=dict(size=11, color=np.where(self_loop, "#222222", "white"), line=dict(color="#222222", width=2)),
        hovertext=hover, hoverinfo="text",
    ))
    fig.update_layout(
        title=_title(title), height=420, font=FONT, margin=dict(l=10, r=10, t=40 if title else 10, b=10),
        legend=LEGEND_BELOW,
        xaxis=dict(tickmode="array", tickvals=list(range(n)), ticktext=labels, tickangle=-60,
                   range=[-0.7, n - 0.3], showgrid=False, zeroline=False, automargin=True),
        yaxis=dict(range=[-tallest[-1.0] * 1.05, tallest[1.0] * 1.05], visible=False),
        plot_bgcolor="white",
    )
    return fig


def laplacian_heatmap(lap: np.ndarray, tokens: Sequence[str], title: str = "") -> go.Figure:
    """L = D - A as a heatmap: degrees on the diagonal, -1 for every undirected edge."""
    lap = np.asarray(lap, dtype=np.float64)
    labels = unique_labels(tokens)
    top = float(max(lap.max(), 1.0))
    # Every edge is exactly -1: give -1 the full orange so edges stay visible next to big degrees.
    fig = go.Figure(go.Heatmap(
        z=lap, x=labels, y=labels, zmin=-1, zmax=top,
        colorscale=[[0.0, AHEAD], [1.0 / (1.0 + top), "#f7f7f7"], [1.0, "#3f007d"]],
        colorbar=dict(title="L[i, j]"), hovertemplate="row %{y}<br>column %{x}<br>L = %{z:g}<extra></extra>",
    ))
    fig.update_layout(
        title=_title(title), height=_grid_height(len(labels)) + (36 if title else 0), font=FONT,
        margin=dict(l=10, r=10, t=_top_margin(labels, title), b=10),
        xaxis=dict(side="top", tickangle=-60, automargin=True),
        yaxis=dict(autorange="reversed", automargin=True),
    )
    return fig


def spectrum_bars(eigenvalues: np.ndarray, title: str = "") -> go.Figure:
    """The Laplacian's eigenvalues in ascending order, lambda_2 (algebraic connectivity) highlighted,
    with the complete graph's value n drawn for comparison."""
    eig = np.asarray(eigenvalues, dtype=np.float64)
    n = len(eig)
    colours = [HIGHLIGHT if i == 1 else MUTED for i in range(n)]
    fig = go.Figure(go.Bar(
        x=[f"λ{i + 1}" for i in range(n)], y=eig, marker_color=colours,
        hovertemplate="%{x} = %{y:.4g}<extra></extra>",
    ))
    fig.add_hline(y=n, line_dash="dash", line_color="#444444",
                  annotation_text=f"complete graph: λ2 = … = λn = n = {n}", annotation_position="top right")
    if n >= 2:
        fig.add_annotation(x="λ2", y=eig[1], text=f"λ2 = {eig[1]:.3g}", showarrow=True, arrowhead=2,
                           ax=60, ay=50 if eig[1] > n / 2 else -50, font=dict(size=16, color=HIGHLIGHT),
                           bgcolor="white")
    fig.update_layout(
        title=_title(title), height=360, font=FONT, margin=dict(l=10, r=10, t=40 if title else 20, b=10),
        yaxis=dict(title="eigenvalue", range=[0, max(n, float(eig.max()) if n else 1) * 1.12]),
        xaxis=dict(title="eigenvalues of L, smallest first", tickangle=-60 if n > 10 else 0),
        showlegend=False,
    )
    return fig


def reach_by_layer(shares: Sequence[float], model_layers: int, full_at: Optional[int], title: str = "") -> go.Figure:
    """Share of (query, key) pairs with a route after 0, 1, 2, ... stacked layers."""
    shares = np.asarray(shares, dtype=np.float64)
    layers = np.arange(len(shares))
    fig = go.Figure(go.Scatter(x=layers, y=shares, mode="lines+markers", line=dict(color=BACK, width=3),
                               marker=dict(size=9), name="pairs with a route",
                               hovertemplate="after %{x} layers: %{y:.1%} of pairs<extra></extra>"))
    fig.add_vline(x=model_layers, line_dash="dash", line_color="#444444",
                  annotation_text=f"this model: {model_layers} layers", annotation_position="bottom right")
    if full_at is not None:
        fig.add_annotation(x=full_at, y=1.0, text=f"everyone reaches everyone after {full_at}",
                           showarrow=True, arrowhead=2, ax=-20, ay=40, font=dict(color=HIGHLIGHT, size=14))
    fig.update_layout(
        title=_title(title), height=340, font=FONT, margin=dict(l=10, r=10, t=40 if title else 20, b=10),
        xaxis=dict(title="layers stacked", dtick=1), yaxis=dict(title="share of pairs reached", range=[0, 1.08],
                                                                 tickformat=".0%"),
        showlegend=False,
    )
    return fig


def receptive_field_grid(fields: np.ndarray, tokens: Sequence[str], token: int, title: str = "") -> go.Figure:
    """Rows = after layer 1, 2, ...; bright cells = keys that can influence ``token`` by then."""
    fields = np.asarray(fields, dtype=bool)  # [layer k]
    rows = [f"after layer {i + 1}: {int(f.sum())} keys" for i, f in enumerate(fields)]
    fig = go.Figure(go.Heatmap(
        z=fields.astype(np.float32), x=unique_labels(tokens), y=rows, zmin=0, zmax=1, showscale=False,
        colorscale=[[0.0, BLOCKED], [0.5, BLOCKED], [0.5, ALLOWED], [1.0, ALLOWED]], xgap=1, ygap=1,
        text=np.where(fields, "can influence it", "cannot reach it yet"),
        hovertemplate="%{y}<br>key %{x}: %{text}<extra></extra>",
    ))
    fig.add_vline(x=token, line_color=HIGHLIGHT, line_width=3)
    fig.update_layout(
        title=_title(title), height=max(200, 90 + 34 * len(rows)) + (36 if title else 0), font=FONT,
        margin=dict(l=10, r=10, t=_top_margin(unique_labels(tokens), title), b=10),
        xaxis=dict(side="top", tickangle=-60, automargin=True),
        yaxis=dict(autorange="reversed", automargin=True),
    )
    return fig


def influence_heatmap(influence: np.ndarray, reach: np.ndarray, q_tokens: Sequence[str],
                      k_tokens: Sequence[str], title: str = "") -> go.Figure:
    """Measured influence (gradient size, scaled to 0..1 per query row) with every cell the mask
    gives NO route marked by a small cross: crosses should sit only on exact zeros."""
    infl = np.asarray(influence, dtype=np.float64)
    reach = np.asarray(reach, dtype=bool)
    scaled = infl / np.maximum(infl.max(axis=1, keepdims=True), 1e-30)  # [q k]
    x, y = unique_labels(k_tokens), unique_labels(q_tokens)
    text = np.where(reach, "route: yes", "route: none")
    fig = go.Figure(go.Heatmap(
        z=scaled.astype(np.float32), x=x, y=y, zmin=0, zmax=1, colorscale=ATTENTION_SCALE,
        customdata=infl, text=text, colorbar=dict(title="share of<br>row max"),
        hovertemplate="query %{y}<br>key %{x}<br>|gradient| %{customdata:.3g}<br>%{text}<extra></extra>",
    ))
    qi, ki = np.nonzero(~reach)
    if len(qi):
        fig.add_trace(go.Scatter(x=[x[k] for k in ki], y=[y[q] for q in qi], mode="markers",
                                 marker=dict(symbol="x-thin", size=7, line=dict(width=1.5, color="#bbbbbb")),
                                 name="no route under the mask", hoverinfo="skip"))
    fig.update_layout(
        title=_title(title), height=_grid_height(len(y)) + (36 if title else 0) + 40, font=FONT,
        margin=dict(l=10, r=10, t=_top_margin(x, title), b=10),
        xaxis=dict(side="top", tickangle=-60, title="key (input position)", automargin=True),
        yaxis=dict(autorange="reversed", title="query (output position)", automargin=True),
        legend=LEGEND_BELOW,
    )
    return fig


def row_sums_chart(right: np.ndarray, wrong: np.ndarray, tokens: Sequence[str], title: str = "") -> go.Figure:
    """Row sums of the right and the wrong masked pattern, with the line every softmax row should hit."""
    labels = unique_labels(tokens)
    fig = go.Figure([
        go.Bar(x=labels, y=np.asarray(right), name="mask before softmax", marker_color=BACK,
               hovertemplate="query %{x}: row sums to %{y:.4f}<extra></extra>"),
        go.Bar(x=labels, y=np.asarray(wrong), name="zero after softmax", marker_color=AHEAD,
               hovertemplate="query %{x}: row sums to %{y:.4f}<extra></extra>"),
    ])
    fig.add_hline(y=1.0, line_dash="dash", line_color="#444444", annotation_text="1",
                  annotation_position="right")
    fig.update_layout(
        title=_title(title), barmode="group", height=330, font=FONT,
        margin=dict(l=10, r=10, t=40 if title else 20, b=10),
        yaxis=dict(title="sum of the row", range=[0, 1.1]), xaxis=dict(tickangle=-60, title="query"),
        legend=LEGEND_BELOW,
    )
    return fig


LEAK_FLOOR = 1e-20  # exact zeros are drawn here on the log axis


def leak_chart(gaps: Sequence[float], curves: Mapping[str, np.ndarray], eps: float, gap: Optional[float] = None,
               title: str = "") -> go.Figure:
    """Leaked mass against the logit gap (log-log), one panel per number format and one line per
    constant (curves are keyed "<dtype> <constant>"); exact zeros sit on the floor, NaN (overflow)
    is left out, and the tolerance eps is a dashed line."""
    dtypes = list(dict.fromkeys(name.split()[0] for name in curves))
    fig = make_subplots(rows=1, cols=len(dtypes), shared_yaxes=True, horizontal_spacing=0.04,
                        subplot_titles=dtypes)
    style = {"-1e4": (AHEAD, "solid", 5), "-1e9": (BACK, "dash", 4), "-inf": ("#009E73", "dot", 3)}
    for name, values in curves.items():
        dtype, constant = name.split()[0], name.split()[-1]
        col = dtypes.index(dtype) + 1
        values = np.asarray(values, dtype=np.float64)
        shown = np.where(np.isnan(values), np.nan, np.maximum(values, LEAK_FLOOR))
        colour, dash, width = style.get(constant, (MUTED, "solid", 3))
        fig.add_trace(go.Scatter(
            x=np.asarray(gaps), y=shown, mode="lines", name=f"C = {constant}", legendgroup=constant,
            showlegend=col == 1, line=dict(color=colour, width=width, dash=dash), customdata=values,
            hovertemplate=f"{name}<br>gap %{{x:.3g}}: leaked %{{customdata:.3g}}<extra></extra>",
        ), row=1, col=col)
    for col in range(1, len(dtypes) + 1):
        fig.add_hline(y=eps, line_dash="dash", line_color="#444444", row=1, col=col)
        # Placed by hand: on a log axis an annotation's y is log10 of the value.
        fig.add_annotation(x=1, xref="x domain", y=float(np.log10(eps)), text=f"ε = {eps:g}", showarrow=False,
                           xanchor="right", yanchor="top", font=dict(size=13, color="#444444"), row=1, col=col)
        if gap is not None:
            fig.add_vline(x=gap, line_color="#999999", line_width=1, row=1, col=col)
    fig.update_xaxes(type="log", title_text="gap g (blocked minus allowed logit)", dtick=2)
    fig.update_yaxes(type="log", range=[-20.5, 0.5], tickvals=[1e-20, 1e-15, 1e-10, 1e-5, 1],
                     ticktext=["0 (exact)", "1e-15", "1e-10", "1e-5", "1"])
    fig.update_yaxes(title_text="probability leaked", row=1, col=1)
    fig.update_layout(title=_title(title), height=420, font=FONT, margin=dict(l=10, r=10, t=70 if title else 40, b=10),
                      legend=LEGEND_BELOW)
    return fig


def pairs_chart(ns: Sequence[int], b: int, w: int, current: Optional[tuple[int, int]] = None,
                title: str = "") -> go.Figure:
    """Allowed (query, key) pairs against n: dense n^2, block-diagonal n*b, sliding window
    about n*(2w+1); ``current`` = (n, pairs) of the mask on the page."""
    ns = np.asarray(ns, dtype=np.float64)
    fig = go.Figure([
        go.Scatter(x=ns, y=ns ** 2, name="dense: n²", mode="lines+markers", line=dict(color=AHEAD, width=3)),
        go.Scatter(x=ns, y=ns * np.minimum(b, ns), name=f"block-diagonal, b = {b}: n·b", mode="lines+markers",
                   line=dict(color=BACK, width=3)),
        go.Scatter(x=ns, y=ns * np.minimum(2 * w + 1, ns), name=f"sliding window, w = {w}: ≈ n·(2w+1)",
                   mode="lines+markers", line=dict(color="#009E73", width=3, dash="dot")),
    ])
    if current is not None:
        fig.add_trace(go.Scatter(x=[current[0]], y=[current[1]], mode="markers", name="your mask",
                                 marker=dict(size=16, symbol="star", color="#222222")))
    fig.update_traces(hovertemplate="n = %{x}<br>%{y:,.0f} pairs<extra></extra>")
    fig.update_layout(
        title=_title(title), height=360, font=FONT, margin=dict(l=10, r=10, t=40 if title else 20, b=10),
        xaxis=dict(type="log", title="sequence length n"), yaxis=dict(type="log", title="allowed pairs"),
        legend=LEGEND_BELOW,
    )
    return fig


def timing_chart(rows: Sequence[Mapping], title: str = "") -> go.Figure:
    """Measured dense vs block-sparse time against n (left) and the measured ratio against b/n (right)."""
    ns = [r["n"] for r in rows]
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.12)
    fig.add_trace(go.Scatter(x=ns, y=[r["dense ms"] for r in rows], name="dense", mode="lines+markers",
                             line=dict(color=AHEAD, width=3)), row=1, col=1)
    fig.add_trace(go.Scatter(x=ns, y=[r["block-sparse ms"] for r in rows], name="block-sparse",
                             mode="lines+markers", line=dict(color=BACK, width=3)), row=1, col=1)
    fig.add_trace(go.Scatter(x=ns, y=[r["measured ratio"] for r in rows], name="measured ratio",
                             mode="lines+markers", line=dict(color="#222222", width=3)), row=1, col=2)
    fig.add_trace(go.Scatter(x=ns, y=[r["predicted ratio b/n"] for r in rows], name="predicted b/n",
                             mode="lines", line=dict(color=MUTED, width=3, dash="dash")), row=1, col=2)
    fig.update_xaxes(type="log", title_text="sequence length n")
    fig.update_yaxes(type="log", row=1, col=1, title_text="time per call, ms")
    fig.update_yaxes(type="log", row=1, col=2, title_text="block-sparse ÷ dense")
    fig.update_layout(title=_title(title), height=400, font=FONT,
                      margin=dict(l=10, r=10, t=50 if title else 20, b=10),
                      legend=LEGEND_BELOW)
    return fig
