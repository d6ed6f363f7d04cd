"""Figures of the Heads page: subspace angles and overlaps, the head budget, QK/OV circuits,
queries and keys in 2-D, role tables, redundancy, ablation rankings, the two-head toy, and the
orthogonal-query bars.

Pure functions: numpy arrays and labels in, plotly figures out. Attention weights and other
shares use a fixed 0..1 range; signed tables use a diverging scale centred on 0.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from core.figures.heatmaps import ATTENTION_SCALE, unique_labels

SEQ_SCALE = "Viridis"  # colour-blind safe, for non-negative quantities
DIV_SCALE = "RdBu"  # diverging (ColorBrewer), for signed tables; centred at 0
FONT = dict(size=15)  # readable on a projector
HEAD_COLOURS = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000"]
QUERY_COLOUR, KEY_COLOUR = "#D55E00", "#0072B2"
SPARE_COLOUR, OVER_COLOUR = "#d9d9d9", "#b2182b"


MAX_BOXES = 64  # boxes drawn per row of the budget picture


def _fmt(values: np.ndarray, template: str) -> np.ndarray:
    """Each number of an array formatted with `template` (e.g. "{:.2f}"), same shape, as strings."""
    values = np.asarray(values, dtype=np.float64)
    return np.array([template.format(v) for v in values.ravel()], dtype=object).reshape(values.shape)


def _layout(fig: go.Figure, title: str = "", height: int = 360, **extra) -> go.Figure:
    """The shared look: projector-size font, tight margins, an optional title."""
    fig.update_layout(title=title or None, height=height, font=FONT,
                      margin=dict(l=10, r=10, t=50 if title else 20, b=10), **extra)
    fig.update_layout(legend_font_size=14)
    fig.update_xaxes(tickfont_size=14)
    fig.update_yaxes(tickfont_size=14)
    return fig


def _head_square(z: np.ndarray, labels: Sequence[str], text: np.ndarray, hover: np.ndarray, zmin: float,
                 zmax: float, colour_title: str, scale: str = SEQ_SCALE) -> go.Heatmap:
    """A head x head heatmap trace with the value written in every cell."""
    return go.Heatmap(z=z, x=list(labels), y=list(labels), zmin=zmin, zmax=zmax, colorscale=scale,
                      text=text, texttemplate="%{text}", textfont=dict(size=15), customdata=hover,
                      hovertemplate="%{y} vs %{x}<br>%{customdata}<extra></extra>",
                      colorbar=dict(title=colour_title))


def angle_heatmap(angles: np.ndarray, all_angles: Sequence[Sequence[np.ndarray]], labels: Sequence[str],
                  which: str, reduce: str = "mean", title: str = "") -> go.Figure:
    """Principal angles (degrees) between every pair of heads' subspaces, on a fixed 0..90 scale."""
    angles = np.asarray(angles, dtype=np.float64)
    text = _fmt(angles, "{:.0f}°")
    hover = np.empty(angles.shape, dtype=object)
    for i in range(angles.shape[0]):
        for j in range(angles.shape[1]):
            every = ", ".join(f"{a:.0f}" for a in all_angles[i][j])
            hover[i, j] = f"{reduce} angle {angles[i, j]:.1f}°<br>all angles: {every}"
    fig = go.Figure(_head_square(angles, labels, text, hover, 0.0, 90.0, "degrees"))
    fig.update_yaxes(autorange="reversed")
    fig.update_xaxes(side="top")
    return _layout(fig, title, height=max(300, 60 + 60 * len(labels)))


def gram_heatmap(gram: np.ndarray, labels: Sequence[str], which: str, normalised: bool = False,
                 title: str = "") -> go.Figure:
    """||(W^i)^T W^j||_F for every pair of heads (0 only when the two subspaces are orthogonal)."""
    gram = np.asarray(gram, dtype=np.float64)
    text = _fmt(gram, "{:.2f}")
    hover = _fmt(gram, "norm {:.4f}")
    zmax = 1.0 if normalised else float(np.nanmax(gram)) or 1.0
    fig = go.Figure(_head_square(gram, labels, text, hover, 0.0, zmax, "norm"))
    fig.update_yaxes(autorange="reversed")
    fig.update_xaxes(side="top")
    return _layout(fig, title, height=max(300, 60 + 60 * len(labels)))


def effective_rank_bars(eff_rank: np.ndarray, labels: Sequence[str], d_head: int, which: str,
                        title: str = "") -> go.Figure:
    """Each head's effective rank against its d_head directions (the dashed line)."""
    eff_rank = np.asarray(eff_rank, dtype=np.float64)
    fig = go.Figure(go.Bar(x=list(labels), y=eff_rank, marker_color=HEAD_COLOURS[0],
                           text=[f"{v:.1f}" for v in eff_rank], textposition="inside", insidetextanchor="middle",
                           textfont=dict(size=16, color="white"),
                           hovertemplate="%{x}: effective rank %{y:.2f}<extra></extra>", name="effective rank"))
    fig.add_hline(y=d_head, line=dict(dash="dash", color="#555"))
    fig.add_annotation(xref="paper", x=1, y=d_head, yshift=12, xanchor="right", showarrow=False,
                       text=f"d_head = {d_head}", font=dict(size=14))
    fig.update_yaxes(range=[0, d_head * 1.15], title="effective rank")
    return _layout(fig, title, height=320, showlegend=False)


def budget_figure(d_model: int, d_v: int, n_heads: int, title: str = "") -> go.Figure:
    """The width budget as a picture: d_model slots, each head taking d_v of them.

    Top row: the h heads asked for, laid side by side (red past d_model: they cannot all be
    orthogonal). Bottom row: the most heads whose value spaces can be pairwise orthogonal,
    h_max = floor(d_model / d_v), and the slots left over.
    """
    h_max = d_model // d_v
    fig = go.Figure()
    rows = [(f"h = {n_heads}", n_heads), (f"h_max = {h_max}", h_max)]
    for r, (name, count) in enumerate(rows):
        y = len(rows) - 1 - r
        if count > MAX_BOXES:
            fig.add_annotation(x=MAX_BOXES * d_v, y=y, text=f"+{count - MAX_BOXES} more", showarrow=False,
                               xanchor="left", font=dict(size=13))
        for h in range(min(count, MAX_BOXES)):
            x0, x1 = h * d_v, (h + 1) * d_v
            over = x1 > d_model
            colour = OVER_COLOUR if over else HEAD_COLOURS[h % len(HEAD_COLOURS)]
            fig.add_shape(type="rect", x0=x0, x1=x1, y0=y - 0.35, y1=y + 0.35, fillcolor=colour,
                          line=dict(color="white", width=2), opacity=0.9)
            fig.add_annotation(x=(x0 + x1) / 2, y=y, text=f"H{h}", showarrow=False,
                               font=dict(color="white", size=14))
        used = min(count, MAX_BOXES) * d_v
        if count <= MAX_BOXES and used < d_model:
            fig.add_shape(type="rect", x0=used, x1=d_model, y0=y - 0.35, y1=y + 0.35, fillcolor=SPARE_COLOUR,
                          line=dict(color="white", width=2))
            fig.add_annotation(x=(used + d_model) / 2, y=y, text=f"{d_model - used} spare", showarrow=False,
                               font=dict(color="#333", size=13))
    fig.add_shape(type="line", x0=d_model, x1=d_model, y0=-0.6, y1=len(rows) - 0.4,
                  line=dict(color="#222", width=2, dash="dash"))
    fig.add_annotation(x=d_model, y=len(rows) - 0.4, text=f"d_model = {d_model}", showarrow=False, yshift=12,
                       xanchor="right", font=dict(size=14))
    # an invisible trace gives the axes something to span and a hover for every slot
    right = max(d_model, min(n_heads, MAX_BOXES) * d_v)
    fig.add_trace(go.Scatter(x=[0, right], y=[-0.5, len(rows) - 0.5], mode="markers", marker=dict(opacity=0),
                             hoverinfo="skip", showlegend=False))
    fig.update_xaxes(range=[-0.5, right * 1.03 + 0.5], title=f"dimensions of the residual stream (each head: d_v = {d_v})",
                     showgrid=False, zeroline=False)
    fig.update_yaxes(tickvals=[1, 0], ticktext=[rows[0][0], rows[1][0]], range=[-0.7, len(rows) - 0.2],
                     showgrid=False, zeroline=False)
    return _layout(fig, title or f"h · d_v ≤ d_model: {n_heads} × {d_v} = {n_heads * d_v} of {d_model}", height=260)


def circuit_heatmap(table: np.ndarray, row_labels: Sequence[str], col_labels: Sequence[str], row_title: str,
                    col_title: str, title: str = "", value_name: str = "value") -> go.Figure:
    """A token x token circuit table on a diverging scale centred on 0 (blue positive, red negative)."""
    table = np.asarray(table, dtype=np.float32)
    lim = float(np.abs(table).max()) or 1.0
    n_r, n_c = table.shape
    fig = go.Figure(go.Heatmap(
        z=table, x=list(col_labels), y=list(row_labels), zmin=-lim, zmax=lim, zmid=0.0, colorscale=DIV_SCALE,
        colorbar=dict(title=value_name),
        hovertemplate=f"{row_title} %{{y}}<br>{col_title} %{{x}}<br>{value_name} %{{z:.3f}}<extra></extra>"))
    short = max((len(str(t)) for t in col_labels), default=0) <= 2
    fig.update_xaxes(side="top", tickangle=0 if short else -60, title=col_title, automargin=True, type="category",
                     dtick=1)
    fig.update_yaxes(autorange="reversed", title=row_title, automargin=True, type="category", dtick=1)
    fig = _layout(fig, title, height=max(400, min(1100, 150 + 16 * n_r)))
    tick = 14 if max(n_r, n_c) <= 40 else 12
    fig.update_xaxes(tickfont_size=tick)
    fig.update_yaxes(tickfont_size=tick)
    return fig


def singular_value_bars(s: np.ndarray, d_head: int, title: str = "") -> go.Figure:
    """Singular values of a circuit table; at most d_head of them can be non-zero (the dashed line)."""
    s = np.asarray(s, dtype=np.float64)[: d_head + 4]
    x = np.arange(1, s.size + 1)
    colours = [HEAD_COLOURS[0] if i <= d_head else OVER_COLOUR for i in x]
    fig = go.Figure(go.Bar(x=x, y=s, marker_color=colours, hovertemplate="σ%{x} = %{y:.4g}<extra></extra>"))
    if d_head < s.size:
        fig.add_vline(x=d_head + 0.5, line=dict(dash="dash", color="#555"))
        fig.add_annotation(x=d_head + 0.5, yref="paper", y=1, xanchor="right", showarrow=False,
                           text=f"d_head = {d_head} ", font=dict(size=14))
    fig.update_xaxes(title="singular value number", dtick=1 if s.size <= 20 else 4)
    fig.update_yaxes(title="size")
    return _layout(fig, title, height=280, showlegend=False)


SCATTER_LABELS = 64  # tokens a side up to which the Q & K plane writes every token and every strong line


def qk_scatter(q2: np.ndarray, k2: np.ndarray, q_tokens: Sequence[str], k_tokens: Sequence[str],
               pattern: np.ndarray, explained: np.ndarray, min_weight: float = 0.2, title: str = "") -> go.Figure:
    """Queries (circles) and keys (diamonds) of one head in a shared 2-D PCA plane.

    A line joins each query to every key it gives at least `min_weight` of its attention; the
    line's width and opacity follow the weight. Past SCATTER_LABELS tokens (a long input: thousands of labels
    would cover each other) the points carry their token in the hover only, and each query keeps one line, to
    its strongest key when that has at least `min_weight`, all in one trace (a trace per line at 1,024 tokens
    was thousands of traces).
    """
    q_lab, k_lab = unique_labels(q_tokens), unique_labels(k_tokens)
    fig = go.Figure()
    pattern = np.asarray(pattern, dtype=np.float64)
    long = max(len(q_tokens), len(k_tokens)) > SCATTER_LABELS
    if long:
        best = pattern.argmax(axis=1)  # [q]
        strong = np.nonzero(pattern[np.arange(len(best)), best] >= min_weight)[0]
        xs = np.full(3 * len(strong), np.nan)
        ys = np.full(3 * len(strong), np.nan)
        xs[0::3], xs[1::3] = q2[strong, 0], k2[best[strong], 0]  # segments separated by gaps (NaN)
        ys[0::3], ys[1::3] = q2[strong, 1], k2[best[strong], 1]
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", line=dict(color="rgba(80,80,80,0.35)", width=1),
                                 hoverinfo="skip", name=f"strongest key ≥ {min_weight:g}", showlegend=True))
    else:
        for i in range(pattern.shape[0]):
            for j in np.nonzero(pattern[i] >= min_weight)[0]:
                w = float(pattern[i, j])
                fig.add_trace(go.Scatter(x=[q2[i, 0], k2[j, 0]], y=[q2[i, 1], k2[j, 1]], mode="lines",
                                         line=dict(color=f"rgba(80,80,80,{0.25 + 0.7 * w:.2f})", width=1 + 5 * w),
                                         hoverinfo="text", text=f"q {q_lab[i]} → k {k_lab[j]}: {w:.2f}",
                                         showlegend=False))
    mode, size = ("markers", 6) if long else ("markers+text", 13)
    fig.add_trace(go.Scatter(x=k2[:, 0], y=k2[:, 1], mode=mode, name="keys",
                             marker=dict(symbol="diamond", size=size, color=KEY_COLOUR, line=dict(color="white", width=1)),
                             text=None if long else list(k_tokens), textposition="bottom center",
                             textfont=dict(color=KEY_COLOUR, size=14),
                             customdata=k_lab, hovertemplate="key %{customdata}<extra></extra>"))
    fig.add_trace(go.Scatter(x=q2[:, 0], y=q2[:, 1], mode=mode, name="queries",
                             marker=dict(symbol="circle", size=size - 1, color=QUERY_COLOUR,
                                         line=dict(color="white", width=1)),
                             text=None if long else list(q_tokens), textposition="top center",
                             textfont=dict(color=QUERY_COLOUR, size=14),
                             customdata=q_lab, hovertemplate="query %{customdata}<extra></extra>"))
    fig.update_xaxes(title=f"PC 1 ({explained[0]:.0%} of the spread)", zeroline=False)
    fig.update_yaxes(title=f"PC 2 ({explained[1]:.0%})", zeroline=False, scaleanchor="x", scaleratio=1)
    return _layout(fig, title, height=520, legend=dict(orientation="h", yanchor="bottom", y=1.02, x=0))


def role_tables(scores: Mapping[str, np.ndarray], chance: Mapping[str, float], title: str = "") -> go.Figure:
    """One layer x head table per role (two per row; one per row for more than 6 heads, whose cells would be too
    narrow for their numbers side by side), on a shared 0..1 scale, each score in its cell."""
    roles = list(scores)
    n_l0, n_h0 = np.asarray(next(iter(scores.values()))).shape
    wide = n_h0 > 6  # a GPT-2's 12 heads
    n_cols = 1 if wide else 2
    n_rows = (len(roles) + n_cols - 1) // n_cols
    subtitles = []
    for r in roles:
        c = chance.get(r, float("nan"))
        subtitles.append(f"<b>{r}</b>" + (" (not measured)" if np.isnan(np.asarray(scores[r])).all()
                                          else "" if np.isnan(c) else f"  (even spread: {c:.2f})"))
    fig = make_subplots(rows=n_rows, cols=n_cols, subplot_titles=subtitles, horizontal_spacing=0.1,
                        vertical_spacing=(0.3 / n_rows if wide else 0.22) if n_rows > 1 else 0.1)
    for i, r in enumerate(roles):
        row, col = i // n_cols + 1, i % n_cols + 1
        z = np.asarray(scores[r], dtype=np.float64)  # [layer head]
        n_l, n_h = z.shape
        missing = np.isnan(z).all()
        text = np.where(np.isnan(z), "n/a", _fmt(np.nan_to_num(z), "{:.2f}"))
        fig.add_trace(go.Heatmap(
            z=np.zeros_like(z) if missing else z, x=[f"H{h}" for h in range(n_h)], y=[f"L{l}" for l in range(n_l)],
            zmin=0, zmax=1, colorscale=ATTENTION_SCALE, showscale=i == 0, colorbar=dict(title="score"),
            text=text, texttemplate="%{text}", textfont=dict(size=12 if wide else 15), opacity=0.25 if missing else 1.0,
            hovertemplate=f"{r}<br>%{{y}} %{{x}}: %{{text}}<extra></extra>"), row=row, col=col)
        fig.update_yaxes(autorange="reversed", row=row, col=col)
    n_l = np.asarray(next(iter(scores.values()))).shape[0]
    fig = _layout(fig, title, height=n_rows * (110 + (30 if n_l > 6 else 48) * n_l))
    fig.update_layout(margin=dict(l=10, r=10, t=40, b=10))
    return fig


def pair_heatmap(matrix: np.ndarray, labels: Sequence[str], zmin: float, zmax: float, colour_title: str,
                 value_fmt: str = "{:.2f}", title: str = "") -> go.Figure:
    """A head x head table (pattern similarity or mutual information) with values in the cells."""
    m = np.asarray(matrix, dtype=np.float64)
    text = np.where(np.isnan(m), "", _fmt(np.nan_to_num(m), value_fmt))
    hover = np.where(np.isnan(m), "same head", text).astype(object)
    fig = go.Figure(_head_square(m, labels, text, hover, zmin, zmax, colour_title))
    fig.update_yaxes(autorange="reversed")
    fig.update_xaxes(side="top", tickangle=-45)
    size = len(labels)
    if size > 6:
        fig.update_traces(textfont=dict(size=13 if size <= 10 else 10))
    return _layout(fig, title, height=max(340, min(820, 90 + 48 * size)))


def ablation_bars(labels: Sequence[str], loss_change: np.ndarray, accuracy_change: np.ndarray,
                  title: str = "") -> go.Figure:
    """Each head's importance: the rise in loss (left) and the change in accuracy (right) when it alone is removed."""
    loss_change = np.asarray(loss_change, dtype=np.float64)
    accuracy_change = np.asarray(accuracy_change, dtype=np.float64)
    fig = make_subplots(rows=1, cols=2, shared_yaxes=True, horizontal_spacing=0.04,
                        subplot_titles=("loss change (higher = more important)", "accuracy change"))
    y = list(labels)
    fig.add_trace(go.Bar(y=y, x=loss_change, orientation="h", marker_color=HEAD_COLOURS[5],
                         text=[f"{v:+.3f}" for v in loss_change], textposition="auto",
                         hovertemplate="%{y}: loss %{x:+.4f}<extra></extra>"), row=1, col=1)
    fig.add_trace(go.Bar(y=y, x=accuracy_change, orientation="h", marker_color=HEAD_COLOURS[0],
                         text=[f"{v:+.1%}" for v in accuracy_change], textposition="auto",
                         hovertemplate="%{y}: accuracy %{x:+.2%}<extra></extra>"), row=1, col=2)
    fig.update_yaxes(autorange="reversed", type="category")
    fig.update_xaxes(tickformat="+.1%", row=1, col=2)
    return _layout(fig, title, height=max(300, 90 + 30 * len(y)), showlegend=False)


def toy_qk_forms(forms: np.ndarray, features: Sequence[str], roles: Sequence[str], title: str = "") -> go.Figure:
    """Each toy head's W_Q W_K^T on the input features, with the letter and digit blocks framed."""
    forms = np.asarray(forms, dtype=np.float64)
    lim = float(np.abs(forms).max()) or 1.0
    n = forms.shape[0]
    fig = make_subplots(rows=1, cols=n, subplot_titles=[f"head {h}: {roles[h]}" for h in range(n)],
                        horizontal_spacing=0.12)
    for h in range(n):
        fig.add_trace(go.Heatmap(z=forms[h], x=list(features), y=list(features), zmin=-lim, zmax=lim, zmid=0,
                                 colorscale=DIV_SCALE, showscale=h == n - 1, colorbar=dict(title="weight"),
                                 hovertemplate="query feature %{y}<br>key feature %{x}<br>%{z:.3f}<extra></extra>"),
                      row=1, col=h + 1)
        for lo, hi, colour in ((0, 4, HEAD_COLOURS[0]), (4, 8, HEAD_COLOURS[1])):
            fig.add_shape(type="rect", x0=lo - 0.5, x1=hi - 0.5, y0=lo - 0.5, y1=hi - 0.5,
                          line=dict(color=colour, width=3), row=1, col=h + 1)
        fig.update_yaxes(autorange="reversed", row=1, col=h + 1, title="query feature" if h == 0 else None)
        fig.update_xaxes(tickangle=-60, row=1, col=h + 1, title="key feature")
    return _layout(fig, title, height=480)


def toy_share_bars(share: np.ndarray, title: str = "") -> go.Figure:
    """Per toy head, how its W_Q W_K^T splits (squared entries) into letter x letter, digit x digit and the rest."""
    share = np.asarray(share, dtype=np.float64)  # [head 3]
    heads = [f"head {h}" for h in range(share.shape[0])]
    parts = [("letter × letter", HEAD_COLOURS[0]), ("digit × digit", HEAD_COLOURS[1]), ("everything else", SPARE_COLOUR)]
    fig = go.Figure([go.Bar(y=heads, x=share[:, i], orientation="h", name=name, marker_color=colour,
                            text=[f"{v:.0%}" for v in share[:, i]], textposition="inside", insidetextanchor="middle",
                            textfont=dict(size=15), hovertemplate=f"%{{y}}: {name} %{{x:.1%}}<extra></extra>")
                     for i, (name, colour) in enumerate(parts)])
    fig.update_xaxes(range=[0, 1], tickformat=".0%")
    fig.update_yaxes(autorange="reversed")
    return _layout(fig, title, height=260, barmode="stack",
                   legend=dict(orientation="h", yanchor="bottom", y=1.02, x=0, traceorder="normal"))


def toy_match_bars(letter: np.ndarray, digit: np.ndarray, title: str = "") -> go.Figure:
    """Per toy head: attention from a query to the memory item with its letter, and to the one with its digit."""
    heads = [f"head {h}" for h in range(len(letter))]
    fig = go.Figure([
        go.Bar(x=heads, y=letter, name="to the item sharing my LETTER", marker_color=HEAD_COLOURS[0],
               text=[f"{v:.2f}" for v in letter], textposition="outside"),
        go.Bar(x=heads, y=digit, name="to the item sharing my DIGIT", marker_color=HEAD_COLOURS[1],
               text=[f"{v:.2f}" for v in digit], textposition="outside"),
    ])
    fig.update_yaxes(range=[0, 1.12], title="mean attention weight")
    return _layout(fig, title, height=360, barmode="group", legend=dict(orientation="h", yanchor="bottom", y=1.02, x=0))


def orthogonal_bars(labels: Sequence[str], scores: np.ndarray, scores_orth: np.ndarray, scores_rand: np.ndarray,
                    title: str = "") -> go.Figure:
    """Scores of one query against its keys: as computed, with an orthogonal part added, with a random part added."""
    x = unique_labels(labels)
    fig = go.Figure([
        go.Bar(x=x, y=scores, name="q (the model's query)", marker_color="#555"),
        go.Bar(x=x, y=scores_orth, name="q + part orthogonal to every key", marker_color=HEAD_COLOURS[2]),
        go.Bar(x=x, y=scores_rand, name="q + random part of the same size", marker_color=HEAD_COLOURS[5]),
    ])
    fig.update_xaxes(title="key", tickangle=-45, type="category")
    fig.update_yaxes(title="score q·k / √d_head")
    return _layout(fig, title, height=400, barmode="group", legend=dict(orientation="h", yanchor="bottom", y=1.02, x=0))


def head_cost_chart(rows: Sequence[Mapping], n_counted: int, n_measured: int, title: str = "") -> go.Figure:
    """One layer split into h heads. Left, what stays: parameters and matrix FLOPs at the input's length, each
    relative to one wide head. Right, what grows: the patterns training keeps (counted, h n^2 floats) and the
    measured peak memory of a training step, both at `n_measured` tokens."""
    h = np.asarray([r["heads"] for r in rows], dtype=np.float64)
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.14,
                        subplot_titles=(f"stays: × one wide head (n = {n_counted:,})",
                                        f"grows with h: MiB at n = {n_measured:,}"))
    for key, name, colour, dash in (("parameters", "parameters (counted)", HEAD_COLOURS[0], "solid"),
                                    ("MFLOP", "matrix FLOPs (counted)", HEAD_COLOURS[1], "dash")):
        base = rows[0][key]
        fig.add_trace(go.Scatter(x=h, y=[r[key] / base for r in rows], name=name, mode="lines+markers",
                                 line=dict(color=colour, width=3, dash=dash),
                                 hovertemplate=f"{name}<br>h = %{{x}}<br>× %{{y:.3g}}<extra></extra>"), row=1, col=1)
    for key, name, colour, dash in (("patterns MiB at the measured n (counted)", "patterns h·n² (counted)",
                                     HEAD_COLOURS[2], "dash"),
                                    ("peak MiB at the measured n (measured)", "training-step peak (measured)",
                                     HEAD_COLOURS[3], "solid")):
        fig.add_trace(go.Scatter(x=h, y=[r[key] for r in rows], name=name, mode="lines+markers",
                                 line=dict(color=colour, width=3, dash=dash),
                                 hovertemplate=f"{name}<br>h = %{{x}}<br>%{{y:.3g}} MiB<extra></extra>"), row=1, col=2)
    fig.update_xaxes(title_text="heads h (each of d_model / h)", tickvals=h)
    fig.update_yaxes(rangemode="tozero", row=1, col=1)
    fig.update_yaxes(rangemode="tozero", title_text="MiB", row=1, col=2)
    _layout(fig, title, height=380, legend=dict(orientation="h", yref="container", y=0, yanchor="bottom", x=0))
    return fig.update_layout(margin=dict(l=10, r=10, t=60, b=90))
