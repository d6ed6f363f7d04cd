"""The Attention page's panels: the view controls, every head, one head, the arithmetic, the
temperature, compare and export. pages/attention.py calls them in reading order.

Kept in a module (not the page file) so it is compiled once per process: Streamlit recompiles a
page script's source on every AppTest run, and this is most of the page's code.

What a click reruns: the kind, layer, head and temperature above the views are read by sections
(ui.shell.sections: `@S.section(..., reads=..., view=...)`), and a change reruns those of the open view alone;
the views' own controls (query row, toy numbers, d_k, head B, input B) sit inside the section they change.
The view buttons rerun the page (only the open view is drawn).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Optional

import numpy as np
import pandas as pd
import streamlit as st

from core.analysis import attention as A
from core.figures.attention import GRID_CELLS, SPREAD_BARS_MAX, TOP_KEYS, TOP_LINES, grid_more
from core.figures.heatmaps import EXACT_CELLS, WINDOW_MAX, pool, pool_block
from ui.attention.runs import (bars_figure, curve_figure, diff_figure, dot_samples, dots_figure, entropy_figure,
                               entropy_lines_figure, full_patterns, grid_figure, head_figure, lines_figure,
                               overview_figure, pooled_diff_figure, pooled_grid_figure, run_spread, run_steps,
                               spread_figure, spread_table_figure, steps_figure, summary, sweep, top_bars_figure,
                               top_lines_figure, window_figure)
from ui.shell.export import chart_config, file_stem
from ui.shell.kinds import KIND_HELP, short_kind
from ui.shell.models import is_text_model
from ui.shell.page import csv_download, lead, pick_index, rows_table, try_this
from ui.shell.params import Choice, Flag, Float, Int, Params, Text, general
from ui.shell.sections import Sections
from ui.shell.sidebar import SEED_KEY, Selection, example_text, max_tokens, selection_for

TEMPERATURES = (0.1, 0.2, 0.25, 0.33, 0.5, 0.67, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0, 5.0, 10.0)
STEPS_HEAD, STEPS_TOY = "head", "toy"
CMP_HEADS, CMP_INPUTS = "heads", "inputs"
EXPORT_CSV_ROWS = 200_000  # a CSV of more rows is cut to the open layer (12 heads x 128 x 128 tokens fit: 196,608)
# Past this many, a CSV holds the open head, then the window (a 1,024-token head is a million rows), and the .npz
# the open layer: every layer of a 4 x 4-head model at 1,024 tokens fits (64 MB of float32, made on the click).
EXPORT_NPZ_CELLS = 2 ** 24
WINDOW_SIZES = (16, 32, 64)  # tokens a side of the One head view's full-resolution window (at most WINDOW_MAX)
TABLE_ROWS = 64  # rows of a predictions table drawn on the page; its CSV holds them all
WINDOW_FOLLOW_KEY = "attention.window_follows"  # the query row the window was last moved to
SHOWN_DIMS = 6  # vector components written out in the arithmetic (more would not fit a projector line)
# The views: URL value -> label. Only the open view is drawn, so a rerun pays for one view.
VIEW_GRID, VIEW_HEAD, VIEW_STEPS, VIEW_TEMP, VIEW_CMP, VIEW_EXPORT = "grid", "head", "steps", "temp", "compare", "export"
VIEW_SCALE = "scale"
VIEWS = {VIEW_GRID: "Every head", VIEW_HEAD: "One head", VIEW_STEPS: "Step by step", VIEW_TEMP: "Temperature",
         VIEW_SCALE: "Why √d_k", VIEW_CMP: "Compare", VIEW_EXPORT: "Export"}
TOY_KEYS_TEXT = " ".join(f"{k:g}" for k in A.TOY_KEYS)
TOY_VALUES_TEXT = " ".join(f"{v:g}" for v in A.TOY_VALUES)


# Every URL parameter of the page, once. Ranges that depend on the model or input (layer, head, query
# row) are given when the widget is drawn.
URL = Params(
    "attention",
    Choice("kind", "cross", choices=("enc", "dec", "cross")),
    Int("layer", 0, lo=0, hi=0), Int("head", 0, lo=0, hi=0), Int("query", 0, lo=0, hi=0),
    Float("temp", 1.0, lo=TEMPERATURES[0], hi=TEMPERATURES[-1], stops=TEMPERATURES, log=True, fmt=general,
          omit_default=True),
    Choice("view", VIEW_GRID, choices=tuple(VIEWS), omit_default=True),
    Choice("steps", STEPS_HEAD, choices=(STEPS_HEAD, STEPS_TOY), omit_default=True),
    Float("toy_q", A.TOY_QUERY, lo=-100.0, hi=100.0, fmt=general, omit_default=True),
    Text("toy_keys", TOY_KEYS_TEXT, omit_default=True),
    Text("toy_values", TOY_VALUES_TEXT, omit_default=True),
    Int("toy_dk", 1, lo=1, hi=4096, omit_default=True),
    Choice("cmp", CMP_HEADS, choices=(CMP_HEADS, CMP_INPUTS), omit_default=True),
    Int("layer2", 0, lo=0, hi=0), Int("head2", 0, lo=0, hi=0),
    Text("input2", ""),
    Float("dk", 64, lo=A.SCALE_DKS[0], hi=A.SCALE_DKS[-1], stops=A.SCALE_DKS, log=True, fmt=general,
          omit_default=True),
    Int("dk_keys", 16, lo=2, hi=128, omit_default=True),
    Flag("dk_scaled", False, omit_default=True),
    Int("dk_seed", 0, lo=0, hi=9999, omit_default=True),
    Choice("win", 32, choices=WINDOW_SIZES, omit_default=True),
    Int("wq", 0, lo=0, hi=0), Int("wk", 0, lo=0, hi=0),
)


# ---------------------------------------------------------------------------------------------
# The view: which attention, layer, head, query and temperature (all in the URL)
# ---------------------------------------------------------------------------------------------

def open_view() -> str:
    """The open view's URL value, from the session (where the view buttons keep it)."""
    return URL.view.now()


S = Sections("attention", open_view=open_view)  # its sections say which of kind, layer, head and temp they read


def pick_kind(sel: Selection) -> None:
    """Which attention to look at: a small select box in the controls' row (only encoder-decoder models have more
    than one kind). A change reruns its caption, the query row and the sections of the open view that read it."""
    kinds = A.attention_kinds(sel.arch)
    by_key = {k.key: k for k in kinds}
    if len(kinds) == 1:
        URL.kind.clear()
        return
    URL.kind.widget(st.selectbox, "Which attention", choices=tuple(by_key), format_func=lambda k: short_kind(by_key[k]),
                    width=250, help=KIND_HELP)


def kind_note(sel: Selection) -> None:
    """Under the controls' row: the picked kind's one-line description, or, for a model with one kind of
    attention, which kind that is and where to find the others. A caption, so the figure stays on the first
    screen."""
    kinds = A.attention_kinds(sel.arch)
    if len(kinds) > 1:
        kind_blurb(sel)
        return
    kind = kinds[0]
    other = "an encoder-decoder model (for example *reverse-encdec*)"
    st.caption(f"This model is {'an encoder' if sel.arch == 'encoder' else 'a decoder'}, so it has one kind "
               f"of attention: **{kind.label}**. {kind.blurb} Pick {other} in the sidebar to see cross-attention, "
               f"where queries come from the target and keys from the source.")


@S.section("kind.blurb", reads=("kind",))
def kind_blurb(sel: Selection) -> None:
    """The picked kind's one-line description, under the kind buttons."""
    st.caption(picked(sel).kind.blurb)


@S.section("query_row", reads=("kind",))  # it draws nothing
def query_row(sel: Selection) -> None:
    """The query row, made valid for the kind's query tokens and written to the URL. It is picked inside the
    views about one query (One head, Step by step); the others keep its value, so it survives a trip through
    them. An empty container is not drawn, so a full run shows nothing of it."""
    n_q = len(picked(sel).q_tokens)
    URL.query.write(URL.query.seed(hi=n_q - 1, default=n_q - 1))


def pick_temperature() -> None:
    """The softmax temperature T for this page's runs (scores are divided by T); 1 = as trained. A change
    reruns the sections of the open view that read it."""
    URL.temp.widget(st.select_slider, "Temperature T", format_func=general, width=260,
                    help="T divides every score before softmax; 1 = as trained. A per-call option: the shared "
                         "model is not changed. T < 1 sharpens every row towards one key, T > 1 flattens it "
                         "towards uniform.")


def pick_view() -> str:
    """Which view is open: one button per view, kept in the URL as `view`. Only the open view is drawn; a
    click reruns the page."""
    return URL.view.widget(st.segmented_control, "View", required=True, format_func=VIEWS.get,
                           label_visibility="collapsed", width="stretch")


# ---------------------------------------------------------------------------------------------
# Panels
# ---------------------------------------------------------------------------------------------


def _rounding_note(cells: int) -> str:
    """Said next to 'hover to read the weight' when a figure ships its weights as whole percentages."""
    if cells <= EXACT_CELLS:
        return ""
    return f" (to the nearest percent: above {EXACT_CELLS:,} cells the weights travel as whole percentages)"


def overview_panel(sel: Selection):
    """Every layer x head as a small heatmap; the open head is framed in orange."""
    overview_heads(sel)


@S.section("grid.heads", reads=("kind", "layer", "head", "temp"), view=VIEW_GRID)
def overview_heads(sel: Selection) -> None:
    """A one-line lead, the grid of every head, and the full reading guide (whose rounding note depends on the
    kind's tokens) one click away under it: the grid is the page's first figure and starts on the first screen.
    Past GRID_CELLS cells in all (long inputs, many heads) each head is pooled, which the guide says."""
    v = picked(sel)
    s = summary(sel, v.kind, v.temperature, v.layer)
    n_l, n_h = s.overview.shape[:2]
    exact = s.block == (1, 1) and s.overview.size <= GRID_CELLS
    st.markdown(f"**Every head at once:** rows are layers, columns are heads ({n_l} × {n_h} here).")
    if exact:
        figure = grid_figure(s.overview, v.q_tokens, v.k_tokens, selected=(v.layer, v.head))
        inside = ("Inside a square, row *i* is a query token and column *j* a key token, and the colour is how much "
                  "of query *i*'s attention goes to key *j*")
        hover = f"Hover to read the tokens and the weight{_rounding_note(s.overview.size)}."
    else:
        figure = pooled_grid_figure(s.overview, s.n_q, s.n_k, s.block, selected=(v.layer, v.head))
        more = grid_more(n_l * n_h, s.n_q, s.n_k, s.block)
        block = f"{s.block[0] * more[0]} × {s.block[1] * more[1]}"
        inside = (f"This input is long ({s.n_q:,} × {s.n_k:,} tokens a head), so each square is pooled: a cell is "
                  f"a block of {block} tokens and shows **the largest weight in it**, so a single strong weight "
                  f"(a thin diagonal) stays visible. The axes count positions; the One head view shows the tokens")
        hover = "Hover to read the positions and the weight (to the nearest percent)."
    st.plotly_chart(figure, key="attention.fig_grid",
                    config=chart_config("attention", sel.model_id, f"every-head-{v.kind.key}"))
    with st.expander("How to read this chart"):
        st.markdown(f"Each small square is one head: **rows of the grid are layers, columns are heads**. {inside} "
                    f"(0 dark blue to 1 yellow; every row adds up to 1). {hover} This model has "
                    f"{n_l} layers × {n_h} heads. The open head (the Layer and Head buttons above) is framed "
                    f"in orange.")


def head_panel(sel: Selection):
    """One head: heatmap, token-to-token lines, and the chosen query's weights as bars."""
    head_intro(sel)
    head_query(sel)


def is_long(n_q: int, n_k: int) -> bool:
    """Whether a head of n_q x n_k is read as a pooled overview and a window: more tokens on a side than
    WINDOW_MAX labels that fit without overlapping. Shorter inputs are drawn whole, every cell and label."""
    return max(n_q, n_k) > WINDOW_MAX


@S.section("head.intro", reads=("kind", "layer", "head"), view=VIEW_HEAD)
def head_intro(sel: Selection) -> None:
    """The view's heading, which names the layer and the head, and its reading guide (whose rounding note
    depends on the kind's tokens)."""
    v = picked(sel)
    st.subheader(f"Layer {v.layer}, head {v.head} up close")
    if is_long(len(v.q_tokens), len(v.k_tokens)):
        lead("Top: the **whole pattern**, pooled. Under it: the **window** in its orange box, every cell and token. "
             "Move the window with the sliders; the lines and bars show where its queries look.",
             "How to read these charts",
             f"This input is too long to draw every cell with its tokens ({len(v.q_tokens):,} × {len(v.k_tokens):,}). "
             f"The first chart shows the whole pattern with each cell standing for a block of tokens and showing the "
             f"**largest weight in the block** (its colour bar says how large the blocks are), so a single strong "
             f"weight, such as a thin diagonal, stays visible. The orange box is the **window**: the second chart "
             f"draws those queries and keys at full resolution, with their tokens; hover to read a weight. Pick the "
             f"window's size and where its rows and columns start above it. The lines show, for each query of the "
             f"window, its {TOP_LINES} strongest keys anywhere in the input; the bars show the chosen query's "
             f"{TOP_KEYS} strongest keys and what the others hold together. Picking a query outside the window moves "
             f"the window to it.")
        return
    lead("Left: the pattern, large. Right: the same numbers as lines, **queries on the left, keys on the right**.",
         "How to read these charts",
         "Left: the same pattern, large. Right: the same numbers as lines, **queries on the left, keys "
         "on the right**; a thicker, darker line carries more weight (lines under 0.02 are left out). "
         f"The chosen query's row is outlined in orange and its lines are drawn in orange. Hover over the "
         f"heatmap to read a weight{_rounding_note(len(v.q_tokens) * len(v.k_tokens))}.")


# local: the query slider redraws only itself, the heatmap, the lines, the bars and the mask note
@S.section("head.query", reads=("kind", "layer", "head", "temp"), view=VIEW_HEAD)
def head_query(sel: Selection):
    """The query picker and everything it marks: the heatmap's outlined row, the orange lines and the bars.
    A new query row changes only these, so the heading and the explanation above stay as drawn. A long input's
    window controls live here too."""
    v = picked(sel)
    kind, q_tokens, k_tokens, layer, head, temperature = v.kind, v.q_tokens, v.k_tokens, v.layer, v.head, \
        v.temperature
    s = summary(sel, kind, temperature, layer)
    t = "" if temperature == 1 else f", T = {temperature:g}"
    qpos = pick_query(q_tokens)
    n_q, n_k = len(q_tokens), len(k_tokens)
    if is_long(n_q, n_k):
        long_head(sel, v, s, qpos, t)
    else:
        pattern = s.layer(layer)[head]
        left, right = st.columns([3, 2])
        with left:
            st.plotly_chart(head_figure(pattern, q_tokens, k_tokens, kind.query_title, kind.key_title,
                                        title=f"{short_kind(kind)}: layer {layer}, head {head}{t}", query=qpos,
                                        height=max(440, min(900, 120 + 28 * len(q_tokens)))),
                            key="attention.fig_head",
                            config=chart_config("attention", sel.model_id, f"{kind.key}-l{layer}h{head}-heatmap"))
        with right:
            st.plotly_chart(lines_figure(pattern, q_tokens, k_tokens, query=qpos, q_title=kind.query_title,
                                         k_title=kind.key_title), key="attention.fig_lines",
                            config=chart_config("attention", sel.model_id, f"{kind.key}-l{layer}h{head}-lines"))
        allowed = A.causal_allowed(len(q_tokens), len(k_tokens), kind.causal)[qpos]
        st.plotly_chart(bars_figure(pattern[qpos], k_tokens, allowed, k_title=kind.key_title,
                                    title=f"Where query {qpos}:{q_tokens[qpos]} looks (its row of the heatmap){t}"),
                        key="attention.fig_bars",
                        config=chart_config("attention", sel.model_id, f"{kind.key}-l{layer}h{head}-query{qpos}"))
    hidden = int((~A.allowed_row(n_k, qpos, kind.causal)).sum())
    long = is_long(n_q, n_k)
    if kind.causal and hidden and long:
        st.caption(f"The causal mask hides the {hidden:,} later keys from this query (their weight is exactly 0); "
                   f"the bars rank the {n_k - hidden:,} it may see.")
    elif kind.causal and hidden:
        st.caption(f"The {hidden} grey bars are later keys the causal mask hides from this query: their weight "
                   f"is exactly 0.")
    elif kind.causal:
        st.caption("This is the last query, so the causal mask hides nothing from it; pick an earlier query "
                   "to see masked keys" + ("." if long else " (grey bars with weight exactly 0)."))


def window_controls(n_q: int, n_k: int, qpos: int) -> tuple[int, int, int]:
    """The window's size and the first query row and key column it shows (all in the URL as `win`, `wq`, `wk`).
    It starts on the diagonal at the chosen query; when the query changes to a row outside it, it moves there."""
    with st.container(horizontal=True, vertical_alignment="bottom", gap="medium"):
        sizes = tuple(w for w in WINDOW_SIZES if w <= max(n_q, n_k)) or WINDOW_SIZES[:1]
        size = URL.win.widget(st.segmented_control, "Window", choices=sizes, required=True, format_func=lambda w: f"{w}²",
                              help="How many queries and keys the full-resolution window shows: its tokens are "
                                   "written on both axes (every 2nd past what fits).")
        size_q, size_k = min(size, n_q), min(size, n_k)
        start_q, start_k = window_start(n_q, n_k, size, qpos)
        q0 = URL.wq.seed(hi=n_q - size_q, default=start_q)
        if st.session_state.get(WINDOW_FOLLOW_KEY, qpos) != qpos and not q0 <= qpos < q0 + size_q:
            st.session_state[URL.wq.key] = start_q  # a new query outside the window: the window follows it
            if n_q == n_k:
                st.session_state[URL.wk.key] = start_k
        st.session_state[WINDOW_FOLLOW_KEY] = qpos
        q0 = URL.wq.widget(st.slider, "Window's queries from", hi=n_q - size_q, default=start_q, width=165,
                           help="The first query row the window shows.")
        k0 = URL.wk.widget(st.slider, "keys from", hi=n_k - size_k, default=start_k, width=165,
                           help="The first key column the window shows.")
    return int(q0), int(k0), int(size)


def window_start(n_q: int, n_k: int, size: int, qpos: int) -> tuple[int, int]:
    """Where a window of `size` starts for query `qpos`: that query in its last row and, for self-attention, the
    same keys (the diagonal block, where a causal head's weights are); cross-attention's last keys."""
    size_q, size_k = min(size, n_q), min(size, n_k)
    start_q = min(max(0, qpos - size_q + 1), n_q - size_q)
    start_k = min(start_q, n_k - size_k) if n_q == n_k else max(0, n_k - size_k)
    return start_q, start_k


def long_head(sel: Selection, v: "View", s: A.PatternSummary, qpos: int, t: str) -> None:
    """One head of a long input: the pooled overview with the window's box, the window at full resolution, each
    window query's strongest keys as lines, and the chosen query's strongest keys as bars. Only the window, its rows
    and the query's row are taken out of the kept pattern, and only they travel to the browser."""
    kind, q_tokens, k_tokens, layer, head = v.kind, v.q_tokens, v.k_tokens, v.layer, v.head
    n_q, n_k = len(q_tokens), len(k_tokens)
    q0, k0, size = window_controls(n_q, n_k, qpos)
    q1, k1 = min(n_q, q0 + size), min(n_k, k0 + size)
    pattern = s.head(layer, head)  # [q k], as kept (float16 for a long input)
    name = f"{short_kind(kind)}: layer {layer}, head {head}{t}"
    st.plotly_chart(overview_figure(s.overview[layer, head], n_q, n_k, s.block, title=f"{name}, the whole pattern",
                                    q_title=kind.query_title, k_title=kind.key_title, window=(q0, q1, k0, k1),
                                    query=qpos),
                    key="attention.fig_overview",
                    config=chart_config("attention", sel.model_id, f"{kind.key}-l{layer}h{head}-overview"))
    window = np.asarray(pattern[q0:q1, k0:k1], dtype=np.float32)  # [window_q window_k]
    st.plotly_chart(window_figure(window, q_tokens[q0:q1], k_tokens[k0:k1], (q0, k0), kind.query_title,
                                  kind.key_title, title=f"The window: queries {q0}–{q1 - 1}, keys {k0}–{k1 - 1}",
                                  query=qpos),
                    key="attention.fig_head",
                    config=chart_config("attention", sel.model_id, f"{kind.key}-l{layer}h{head}-window-q{q0}-k{k0}"))
    rows = np.asarray(pattern[q0:q1], dtype=np.float32)  # [window_q k]
    st.plotly_chart(top_lines_figure(rows, q0, q_tokens, k_tokens, query=qpos, q_title=kind.query_title,
                                     k_title=kind.key_title), key="attention.fig_lines",
                    config=chart_config("attention", sel.model_id, f"{kind.key}-l{layer}h{head}-lines-q{q0}"))
    st.caption(f"The lines: each query of the window (rows {q0}–{q1 - 1}) with its {TOP_LINES} strongest keys "
               f"anywhere in the input; the chosen query's in orange.")
    allowed = A.allowed_row(n_k, qpos, kind.causal)
    st.plotly_chart(top_bars_figure(np.asarray(pattern[qpos], dtype=np.float32), k_tokens, allowed,
                                    k_title=kind.key_title,
                                    title=f"Where query {qpos}:{q_tokens[qpos]} looks: its {TOP_KEYS} strongest "
                                          f"keys{t}"),
                    key="attention.fig_bars",
                    config=chart_config("attention", sel.model_id, f"{kind.key}-l{layer}h{head}-query{qpos}"))


def pick_query(q_tokens) -> int:
    """The query token (row) that the bars and the arithmetic are about; kept in the URL as `query`."""
    return pick_index(URL.query, "Query token", len(q_tokens), len(q_tokens) - 1,
                        fmt=lambda i: f"{i}: {q_tokens[i]}", buttons=0, width=280,
                        help="The row of the pattern the bar chart and the arithmetic are about.")


def _vector_latex(v: np.ndarray, dims: int = SHOWN_DIMS) -> str:
    """A vector as a LaTeX row, the first `dims` components to 3 decimals."""
    shown = " & ".join(f"{x:.3f}" for x in v[:dims])
    more = r" & \cdots" if v.size > dims else ""
    return r"\begin{pmatrix}" + shown + more + r"\end{pmatrix}"


def _two_lines(name: str, formula: str, vector: str) -> str:
    """`name = formula = vector` with the vector on a second line (aligned at '='): on one line the formula
    and SHOWN_DIMS numbers ran past the column beside the sidebar on a 1024-wide screen."""
    return r"\begin{aligned}" + name + " &= " + formula + r" \\ &= " + vector + r"\end{aligned}"


def head_arithmetic(sel: Selection, kind: A.AttentionKind, layer: int, head: int, qpos: int, q_tokens, k_tokens,
                    temperature: float):
    """The arithmetic of one real query, recomputed from the model's q, k, v and checked against it."""
    cfg = sel.model.cfg
    cache = run_steps(sel, kind, layer, head, temperature)
    steps, checks = A.head_steps(cache, cfg, kind, layer, head, qpos, [f"{j}:{t}" for j, t in enumerate(k_tokens)],
                                 f"{qpos}:{q_tokens[qpos]}", temperature)
    rope = cfg.pos == "rope" and kind.module == "attn"
    if cfg.kv_heads < cfg.n_heads:
        group = cfg.n_heads // cfg.kv_heads
        st.caption(f"This model shares its keys and values (grouped-query attention): {cfg.n_heads} query heads read "
                   f"{cfg.kv_heads} key/value heads, {group} each. Head {head} reads key/value head {head // group}, "
                   f"as heads {head // group * group} to {head // group * group + group - 1} do.")
    st.markdown(f"**1. The query.** Token {qpos}:`{q_tokens[qpos]}` is projected to a query vector with "
                f"d_head = {cfg.d_head} numbers" + (" (after the RoPE rotation)" if rope else "") +
                (", scaled to length 1 (this model uses cosine scores)" if cfg.score == "cosine" else "") + ":")
    st.latex(_two_lines(r"q", r"x\,W_Q", _vector_latex(steps.q)))
    best = int(np.argmax(np.where(steps.allowed, steps.scores, -np.inf)))
    st.markdown(f"**2. Compare with every key.** Each key token gets its own key vector k_j; the dot product "
                f"q·k_j says how well they match. The best match here is key {best}, `{k_tokens[best]}`:")
    st.latex(r"k_{" + str(best) + "} = " + _vector_latex(steps.keys[best]))
    st.latex(r"q\cdot k_{" + str(best) + r"} = \sum_{i=1}^{" + str(steps.q.size) + r"} q_i\,(k_{" + str(best)
             + r"})_i = " + f"{steps.dots[best]:.4f}")
    st.markdown("**3. Scale** (so scores do not grow with the width of the head), **4. add the mask** (0 where "
                "the query may look, −∞ where it may not), **5. softmax** (exponentiate and divide by the sum, so "
                "the weights are positive and add up to 1):")
    st.latex(r"s_j = q\cdot k_j \times " + steps.scale_latex + r",\qquad s_{" + str(best) + "} = "
             + f"{steps.dots[best]:.4f}" + r" \times " + f"{steps.scale:.4f} = {steps.scores[best]:.4f}")
    st.latex(r"\alpha_j = \frac{e^{s_j + M_j}}{\sum_i e^{s_i + M_i}},\qquad \alpha_{" + str(best) + "} = "
             + rf"\frac{{e^{{{steps.scores[best]:.4f} - {steps.shift:.4f}}}}}{{{steps.total:.4f}}} = "
             + f"{steps.weights[best]:.4f}")
    st.caption(f"We subtract the largest allowed score ({steps.shift:.4f}) before exponentiating so nothing "
               f"overflows; it cancels in the fraction, so the weights are unchanged. The denominator "
               f"{steps.total:.4f} is the sum of the exp(score − max) column below; masked keys add 0.")
    rows = steps.rows()
    st.dataframe(rows_table(rows), hide_index=True, width="stretch", key="attention.steps_table",
                 column_config={c: st.column_config.NumberColumn(format="%.4f") for c, v in rows[0].items()
                                if isinstance(v, float)})
    shown = np.arange(len(steps.key_labels))
    if len(shown) > WINDOW_MAX:  # a thousand pairs of bars are slivers: the keys with the most weight
        seen = np.flatnonzero(steps.allowed)
        shown = np.sort(seen[np.argsort(-steps.weights[seen], kind="stable")[:TOP_KEYS]])
        st.caption(f"The bars: the {len(shown)} keys with the most weight, in position order (the table above "
                   f"has all {len(steps.key_labels):,}).")
    st.plotly_chart(steps_figure(steps.scores[shown], steps.weights[shown], [steps.key_labels[j] for j in shown],
                                 steps.allowed[shown]),
                    key="attention.fig_steps_bars",
                    config=chart_config("attention", sel.model_id, f"steps-{kind.key}-l{layer}h{head}-query{qpos}"))
    st.markdown("**6. Weighted sum of the values.** The head's output for this query is the average of the "
                "value vectors, each weighted by its α:")
    st.latex(_two_lines(r"z", r"\sum_j \alpha_j v_j", _vector_latex(steps.output)))
    worst = max(checks.values())
    msg = (f"Recomputed here from q, k and v, these numbers match the model's own scores, weights and output "
           f"(largest difference {worst:.1e}).")
    (st.success if worst < 1e-4 else st.error)(msg, icon=":material/check_circle:" if worst < 1e-4 else None)


def reset_toy() -> None:
    """Put the scalar example back to the seeds' worked numbers (a button callback)."""
    for param in (URL.toy_q, URL.toy_keys, URL.toy_values, URL.toy_dk):
        st.session_state[param.key] = param.default


def _toy_scale_latex(d_k: int, temperature: float) -> str:
    """The divisor of the scalar example's scores as written in its formula ('' when it is 1)."""
    if d_k == 1 and temperature == 1:
        return ""
    if temperature == 1:
        return rf"\,/\sqrt{{{d_k}}}"
    if d_k == 1:
        return rf"\,/\,{temperature:g}"
    return rf"\,/\,(\sqrt{{{d_k}}}\cdot {temperature:g})"


def _toy_leader_text(steps: A.AttentionSteps) -> str:
    """Which key wins the most weight in the scalar example, and why (said truthfully for any q)."""
    n = len(steps.key_labels)
    lead = A.scalar_leader(steps)
    q = float(steps.q[0])
    if lead.all_tied:
        return (f"Every key has the same score here, so every weight is 1/{n} = {1 / n:.4f} and the output "
                f"({steps.output[0]:.4f}) is the plain mean of the values.")
    names = [f"k{i + 1} = {steps.keys[i, 0]:g} (q·k = {steps.dots[i]:.4g}, score s = {steps.scores[i]:.4g})"
             for i in lead.indices]
    if len(names) == 1:
        text = (f"The key with the largest score q·k, {names[0]}, gets the largest weight "
                f"({steps.weights[lead.indices[0]]:.4f}), so the output ({steps.output[0]:.4f}) is pulled "
                f"towards its value v{lead.indices[0] + 1} = {steps.values[lead.indices[0], 0]:g}.")
    else:
        text = (f"The keys {' and '.join(names)} share the largest score q·k, so they share the largest weight "
                f"({steps.weights[lead.indices[0]]:.4f} each).")
    if q < 0 and lead.rank == "smallest":
        text += (f" Because q = {q:g} is negative, the largest score belongs to the **smallest** key: a negative "
                 f"query turns the order of the keys around.")
    elif q > 0 and lead.rank == "largest":
        text += " With q positive, that is also the largest key."
    return text + f" The output is still a blend of all {n} values: softmax never gives exactly 0 to an allowed key."


def toy_arithmetic(temperature: float = 1.0):
    """The seeds' one-number example, editable: q, keys, values and d_k; T comes from the page's slider."""

    st.markdown("Everything here is a single number (d_k = 1), so you can follow it with a calculator. "
                "The preset is the worked example from our reading: query q = 2, keys 0.1, 0.2, 0.5 and "
                "values 1, −1, 3. The temperature slider above divides these scores too.")
    c1, c2, c3, c4 = st.columns([1, 2, 2, 1])
    with c1:
        q = URL.toy_q.widget(st.number_input, "query q", step=0.5)
    with c2:
        keys_text = URL.toy_keys.widget(st.text_input, "keys k (numbers)")
    with c3:
        values_text = URL.toy_values.widget(st.text_input, "values v (one per key)")
    with c4:
        d_k = URL.toy_dk.widget(st.number_input, "d_k", step=1,
                                help="The key width: scores are divided by its square root.")
    st.button("Reset to the worked example (q = 2)", on_click=reset_toy, key="attention.toy_reset",
              icon=":material/restart_alt:")
    try:
        keys = A.parse_numbers(keys_text, "keys")
        values = A.parse_numbers(values_text, "values")
        steps = A.scalar_example(q, keys, values, d_k=int(d_k), temperature=temperature)
        d_k = int(d_k)
    except ValueError as exc:
        st.error(f"{exc}. Showing the worked example instead.")
        steps, d_k = A.scalar_example(temperature=temperature), 1
    scores = ", ".join(f"{s:.4g}" for s in steps.scores)
    scale = _toy_scale_latex(d_k, temperature)
    st.latex(rf"s_i = \frac{{q\,k_i}}{{\sqrt{{d_k}}\,T}}:\qquad s = {steps.q[0]:g}\times({', '.join(f'{k:g}' for k in steps.keys[:, 0])}){scale}"
             rf" = ({scores})")
    if temperature != 1:
        st.caption(f"T = {temperature:g} comes from the temperature slider above (T = 1 gives the worked "
                   f"example's numbers).")
    raw = bool(np.all(np.abs(steps.scores) < 30))
    e = np.exp(steps.scores) if raw else steps.exps
    total = float(e.sum())
    e_label = "e^{s_i}" if raw else r"e^{s_i - \max s}"
    st.latex(rf"{e_label} = ({', '.join(f'{x:.4f}' for x in e)}),\qquad \sum = {total:.4f}")
    st.latex(r"\alpha_i = \frac{" + e_label + r"}{\sum_j " + e_label.replace("i", "j") + "} = ("
             + ", ".join(f"{w:.4f}" for w in steps.weights) + ")")
    terms = " + ".join(f"{w:.4f}\\times({v:g})" for w, v in zip(steps.weights, steps.values[:, 0]))
    st.latex(r"o = \sum_i \alpha_i v_i = " + terms + f" = {steps.output[0]:.4f}")
    st.plotly_chart(steps_figure(steps.scores, steps.weights, steps.key_labels), key="attention.fig_toy_bars",
                    config=chart_config("attention", None, "steps-toy"))
    st.markdown(_toy_leader_text(steps))
    try_this("Raise q to 20: the same keys now give one weight close to 1. A longer query acts like a lower "
             "temperature: it narrows the focus (the one-hot limit, a hard lookup).",
             "Set q to −2: now the smallest key, 0.1, has the largest score and takes the most weight.",
             "Set q to 0: every score is 0 and the weights are uniform (1/3 each); the output is the plain mean.",
             "Move the temperature slider above to 0.1: the scores grow tenfold and nearly all the weight goes "
             "to one key; at 10 the weights are almost uniform.",
             "Add a fourth key 40 with value −100: one huge key takes almost all the weight even though the others "
             "match just as well in direction. This is how an oversized key can hijack attention.",
             "Set d_k to 100: the scores shrink tenfold and the weights flatten. Why real heads divide by √d_k "
             "at all is a question about many random numbers, not one: open the **Why divide by √d_k** view "
             "(the button below, or the view buttons above).")
    if st.button("Open 'Why divide by √d_k'", on_click=_open_view, args=(VIEW_SCALE,), key="attention.to_scale",
                 icon=":material/arrow_forward:"):
        st.rerun(scope="app")  # the view picker is outside this section: rerun the whole page


def _open_view(view: str) -> None:
    """Switch the page to another view (a button callback; the URL follows on the rerun)."""
    st.session_state[URL.view.key] = view


def arithmetic_panel(sel: Selection):
    """Step by step for one query: a real head, or the seeds' scalar example."""
    st.subheader("The arithmetic, step by step")
    st.latex(r"s_j = \frac{q\cdot k_j}{\sqrt{d_k}\,T},\quad \alpha_j = \operatorname{softmax}_j(s_j + M_j),"
             r"\quad z = \sum_j \alpha_j\, v_j")
    arithmetic_steps(sel)


# local: its radio, query slider and toy inputs redraw only the radio and the steps below it
@S.section("steps.numbers", reads=("kind", "layer", "head", "temp"), view=VIEW_STEPS)
def arithmetic_steps(sel: Selection):
    """Which numbers to follow (this head or the scalar example) and their steps. The heading and the
    general formula above do not depend on these controls, so a click leaves them as drawn."""
    v = picked(sel)
    kind, layer, head, qpos, q_tokens, k_tokens, temperature = v.kind, v.layer, v.head, v.qpos, v.q_tokens, \
        v.k_tokens, v.temperature
    labels = {STEPS_HEAD: f"This head: layer {layer}, head {head}, query {qpos}:{q_tokens[qpos]}",
              STEPS_TOY: "Worked example with single numbers (q = 2)"}
    mode = URL.steps.widget(st.radio, "Numbers from", format_func=labels.get, horizontal=True)
    if mode == STEPS_TOY:
        toy_arithmetic(temperature)
    else:
        qpos = pick_query(q_tokens)
        head_arithmetic(sel, kind, layer, head, qpos, q_tokens, k_tokens, temperature)


def temperature_panel(sel: Selection):
    """Entropy of each row and the model's predictions, at T = 1 and at the chosen T."""
    st.subheader("Sharper or flatter: the temperature")
    lead("Dividing every score by T changes how peaked each row is; the **entropy** of a row measures it (0 bits: all "
         "on one key).",
         "Read more: entropy, and the maths",
         "Dividing every score by a temperature T before softmax changes how peaked each row is, in every head of "
         "every layer at once. We measure peakedness with the **entropy** of a row: 0 bits when all weight sits on one"
         " key, log₂(n) bits when it is spread evenly over n keys. Turning T down makes attention a hard lookup; "
         "turning it up makes it a plain average. The model was trained at T = 1, so both extremes usually hurt its "
         "predictions.",
         r"H(\alpha_{i\cdot}) = -\sum_j \alpha_{ij}\log_2 \alpha_{ij}")
    temperature_entropy(sel)
    if temperature_predictions(sel):
        st.caption("p is the probability the model gives to its predicted token. ✓ = the prediction is the right "
                   "answer, ✗ = it is not.")


@S.section("temp.entropy", reads=("kind", "layer", "head", "temp"), view=VIEW_TEMP)
def temperature_entropy(sel: Selection) -> None:
    """The open head's mean entropy at T = 1 and at T, the mean over every head, and each row's entropy."""
    v = picked(sel)
    kind, layer, head, q_tokens, temperature = v.kind, v.layer, v.head, v.q_tokens, v.temperature
    base = summary(sel, kind, 1.0, layer)
    hot = base if temperature == 1 else summary(sel, kind, temperature, layer)
    allowed = A.causal_allowed(len(q_tokens), base.n_k, kind.causal)
    before = base.entropy[layer, head]
    after = hot.entropy[layer, head]
    # Short labels under one heading: in three columns beside the sidebar a long label ends in '...'.
    st.markdown("**Mean entropy of a row**")
    c1, c2, c3 = st.columns(3)
    c1.metric("this head, T = 1", f"{before.mean():.2f} bits", help="Mean entropy of this head's rows at T = 1.")
    change = after.mean() - before.mean()
    c2.metric(f"this head, T = {temperature:g}", f"{after.mean():.2f} bits",
              delta=f"{change:+.2f} bits" if abs(change) >= 0.005 else None, delta_color="off",
              help=f"Mean entropy of this head's rows at T = {temperature:g}.")
    everywhere = hot.entropy.mean() - base.entropy.mean()
    c3.metric(f"all heads, T = {temperature:g}", f"{hot.entropy.mean():.2f} bits",
              delta=f"{everywhere:+.2f} bits vs T = 1" if abs(everywhere) >= 0.005 else None, delta_color="off",
              help=f"Mean entropy over all heads and layers at T = {temperature:g}.")
    figure = entropy_lines_figure if len(q_tokens) > WINDOW_MAX else entropy_figure  # a thousand bars are slivers
    st.plotly_chart(figure(before, after, A.max_entropy(allowed), q_tokens, temperature, kind.query_title),
                    key="attention.fig_entropy",
                    config=chart_config("attention", sel.model_id, f"temperature-{kind.key}-l{layer}h{head}"))


@S.section("temp.predictions", reads=("kind", "temp"), view=VIEW_TEMP)
def temperature_predictions(sel: Selection) -> bool:
    """The model's right answers and predictions at T = 1 and at T, from the kind's run (its logits differ from
    another kind's by float noise only, but they are what a full run shows). Returns whether the input has scored
    positions: that depends on the sidebar's input alone, so the caption under the table stays outside."""
    v = picked(sel)
    temperature = v.temperature
    base = summary(sel, v.kind, 1.0, v.layer)
    hot = base if temperature == 1 else summary(sel, v.kind, temperature, v.layer)
    before_rows = A.prediction_rows(base.top_ids, base.top_probs, base.target_probs, sel.targets)
    after_rows = A.prediction_rows(hot.top_ids, hot.top_probs, hot.target_probs, sel.targets)
    if not before_rows:
        if not is_text_model(sel.meta):
            st.info("This input has no scored positions, so there is no right answer to compare with.")
            return False
        top_guesses(sel, base, hot, temperature)
        return False
    vocab = sel.task.vocab
    acc_b, acc_a = A.accuracy(before_rows), A.accuracy(after_rows)
    c1, c2 = st.columns(2)
    c1.metric("right answers at T = 1", f"{sum(r['correct'] for r in before_rows)} / {len(before_rows)}",
              help="Positions the task scores, where the model's top token is the right answer.")
    c2.metric(f"right answers at T = {temperature:g}", f"{sum(r['correct'] for r in after_rows)} / {len(after_rows)}",
              delta=f"{(acc_a - acc_b) * 100:+.0f} percentage points" if acc_a != acc_b else None,
              delta_color="normal")
    out_tokens = sel.query_tokens
    table = pd.DataFrame([{
        "reads (position: token)": f"{b['position']}: {out_tokens[b['position']]}",
        "right answer": vocab.decode([b["right"]])[0],
        "predicted, T = 1": vocab.decode([b["predicted"]])[0] + ("  ✓" if b["correct"] else "  ✗"),
        "p, T = 1": f"{b['p(predicted)']:.3f}",
        f"predicted, T = {temperature:g}": vocab.decode([a["predicted"]])[0] + ("  ✓" if a["correct"] else "  ✗"),
        f"p, T = {temperature:g}": f"{a['p(predicted)']:.3f}",
    } for b, a in zip(before_rows, after_rows)])
    changed = np.array([b["predicted"] != a["predicted"] for b, a in zip(before_rows, after_rows)])
    shown_table(table, changed, "prediction")  # a plain table: every row shows, large enough for a projector
    csv_download(table, file_stem("attention", sel.model_id, f"predictions-T{temperature:g}") + ".csv",
                 "attention.temp_csv")
    return True


def shown_table(table: pd.DataFrame, changed: np.ndarray, what: str) -> None:
    """A plain table of every row while there are at most TABLE_ROWS; past that, the rows whose `what` the
    temperature changed first, then the others, TABLE_ROWS in all and in position order, with a caption saying
    so (the CSV under it holds every row)."""
    if len(table) <= TABLE_ROWS:
        st.table(table.set_index(table.columns[0]))
        return
    order = np.concatenate([np.flatnonzero(changed), np.flatnonzero(~changed)])[:TABLE_ROWS]
    st.table(table.iloc[np.sort(order)].set_index(table.columns[0]))
    st.caption(f"{TABLE_ROWS} of {len(table):,} positions: the {int(changed.sum()):,} whose {what} the temperature "
               f"changed come first{' (some of them)' if changed.sum() > TABLE_ROWS else ''}, then the others in "
               f"order. The CSV below holds every position.")


def top_guesses(sel: Selection, base: A.PatternSummary, hot: A.PatternSummary, temperature: float) -> None:
    """An encoder checkpoint's text has no right answers (an encoder is scored on words hidden behind [MASK],
    and nobody hid any): its top guess at every position at T = 1 and at T, and how many of them T changed."""
    vocab = sel.task.vocab
    top_b, top_a = base.top_ids, hot.top_ids  # [pos]
    changed = top_b != top_a
    st.metric(f"guesses changed at T = {temperature:g}", f"{int(changed.sum())} / {len(top_b)}",
              help="Positions whose top guess differs from the one at T = 1.")
    rows = [{"reads (position: token)": f"{p}: {tok}",
             "guess, T = 1": vocab.decode([int(b)])[0], "p, T = 1": f"{base.top_probs[p]:.3f}",
             f"guess, T = {temperature:g}": vocab.decode([int(a)])[0] + ("" if a == b else "  (changed)"),
             f"p, T = {temperature:g}": f"{hot.top_probs[p]:.3f}"}
            for p, (tok, b, a) in enumerate(zip(sel.query_tokens, top_b, top_a))]
    table = pd.DataFrame(rows)
    shown_table(table, changed, "guess")
    csv_download(table, file_stem("attention", sel.model_id, f"guesses-T{temperature:g}") + ".csv",
                 "attention.temp_csv")
    st.caption("An encoder is scored on words hidden behind [MASK], and your text hides none, so there is no right "
               "answer here: these are the model's top guesses for every position (for a word it can see, usually "
               "that word). p is the probability of the guess.")


def scale_controls() -> tuple[int, int, bool, int]:
    """d_k, the number of keys, scaled or not, and the random seed of the 'Why √d_k' view (all in the URL)."""
    c1, c2, c3, c4 = st.columns([3, 2, 1.3, 1.2], vertical_alignment="bottom")
    with c1:
        d_k = URL.dk.widget(st.select_slider, "d_k (width of q and k)", format_func=general,
                            help="How many numbers each query and key vector has.")
    with c2:
        n_keys = URL.dk_keys.widget(st.slider, "number of keys",
                                    help="How many keys one query is compared with (one softmax row).")
    with c3:
        scaled = URL.dk_scaled.widget(st.toggle, "divide by √d_k", help="Histogram and numbers of q·k/√d_k "
                                      "instead of raw q·k. The curves below always show both.")
    with c4:
        seed = URL.dk_seed.widget(st.number_input, "random seed", step=1,
                                  help="Which random vectors are drawn; the same seed gives the same draw.")
    return int(d_k), int(n_keys), bool(scaled), int(seed)


def scale_histogram(d_k: int, scaled: bool, seed: int) -> None:
    """Random q·k at one width: its measured spread next to √d_k, and the histogram."""
    samples = dot_samples(d_k, seed)
    measured = float(samples.std())
    # Short labels under one heading: in three columns beside the sidebar a long label ends in '...'.
    st.markdown(f"**Random q·k at d_k = {d_k}**")
    c1, c2, c3 = st.columns(3)
    c1.metric("measured spread (std)", f"{measured:.3f}",
              help=f"The measured spread (standard deviation) of q·k over the random pairs below, d_k = {d_k}.")
    c2.metric("√d_k, predicted", f"{np.sqrt(d_k):.3f}",
              help="What the sum predicts. The measured std of the random pairs below, compared with the square "
                   "root of d_k.")
    c3.metric("spread of q·k / √d_k", f"{measured / np.sqrt(d_k):.3f}",
              help="About 1 at every d_k: dividing by √d_k undoes the growth.")
    st.plotly_chart(dots_figure(samples, d_k, scaled), key="attention.fig_scale_hist",
                    config=chart_config("attention", None, f"scale-spread-dk{d_k}"))
    shown = "q·k / √d_k" if scaled else "raw q·k"
    st.caption(f"{len(samples):,} random pairs of vectors with d_k = {d_k} entries each, every entry drawn from a "
               f"normal distribution with mean 0 and variance 1. Shown: {shown}; the dashed curve is the normal "
               f"distribution with spread {'1' if scaled else f'√{d_k} = {np.sqrt(d_k):.3g}'}.")


def scale_curves(d_k: int, n_keys: int, scaled: bool, seed: int) -> None:
    """Largest weight, entropy and softmax Jacobian against d_k, scaled and unscaled."""
    sw = sweep(n_keys, seed)
    j = int(np.flatnonzero(sw.dks == d_k)[0])
    row = 0 if scaled else 1
    st.markdown(f"Now one query against **{n_keys} random keys**, drawn {sw.trials} times at every d_k and "
                f"averaged. Blue (solid) divides the scores by √d_k, orange (dashed) does not. The dotted grey "
                f"line is the d_k chosen above.")
    c1, c2, c3 = st.columns(3)
    with c1:
        st.plotly_chart(curve_figure(sw.dks, sw.max_weight[0], sw.max_weight[1], "largest weight", d_k,
                                     1.0, "one-hot", (0.0, 1.05)), key="attention.fig_scale_max",
                        config=chart_config("attention", None, f"scale-largest-weight-{n_keys}-keys"))
    with c2:
        top = float(np.log2(n_keys))
        st.plotly_chart(curve_figure(sw.dks, sw.entropy[0], sw.entropy[1], "entropy (bits)", d_k,
                                     top, f"uniform: log₂{n_keys}", (0.0, top * 1.12)),
                        key="attention.fig_scale_entropy",
                        config=chart_config("attention", None, f"scale-entropy-{n_keys}-keys"))
    with c3:
        st.plotly_chart(curve_figure(sw.dks, sw.jacobian[0], sw.jacobian[1], "‖∂α/∂s‖ (gradient size)", d_k),
                        key="attention.fig_scale_jacobian",
                        config=chart_config("attention", None, f"scale-gradient-{n_keys}-keys"))
    which = "scaled" if scaled else "unscaled"
    st.markdown(f"**{which.capitalize()}, at d_k = {d_k}**")  # the metrics' short labels below say the rest
    m1, m2, m3 = st.columns(3)
    m1.metric("largest weight", f"{sw.max_weight[row, j]:.3f}",
              help=f"Largest weight, {which}, d_k = {d_k}. The same number at d_k = 1: {sw.max_weight[row, 0]:.3f}.")
    m2.metric("entropy", f"{sw.entropy[row, j]:.2f} bits",
              help=f"Entropy, {which}, d_k = {d_k}. At most log₂{n_keys} = {np.log2(n_keys):.2f} bits (uniform "
                   f"weights).")
    m3.metric("‖∂α/∂s‖", f"{sw.jacobian[row, j]:.3f}",
              help=f"‖∂α/∂s‖, {which}, d_k = {d_k}. The same number at d_k = 1: {sw.jacobian[row, 0]:.3f}.")


@st.fragment  # local: d_k, keys, scaling and seed redraw only these controls, the histogram and the curves
def scale_draws() -> None:
    """The random-vector part of the view: its controls, the histogram at one width and the curves over all."""
    d_k, n_keys, scaled, seed = scale_controls()
    scale_histogram(d_k, scaled, seed)
    scale_curves(d_k, n_keys, scaled, seed)


@S.section("scale.model", reads=("kind",), view=VIEW_SCALE)
def scale_model_spread(sel: Selection) -> None:
    """The current model's own spread of raw q·k per layer and head, next to √d_head."""
    cfg = sel.model.cfg
    kind = picked(sel).kind
    spread = run_spread(sel, kind)
    bars = spread.dot_std.size <= SPREAD_BARS_MAX
    reference = (f"The dotted line is √d_head = √{cfg.d_head}" if bars else
                 f"Each cell holds one head's spread; a white cell is √d_head = √{cfg.d_head} (red: wider, blue: "
                 f"narrower; {spread.dot_std.size} heads are too many for readable bars)")
    st.markdown(f"**The model in the sidebar.** For every head of its {kind.label.lower()}, the spread of the raw "
                f"scores q·k over the {spread.pairs} (query, key) pairs of the sidebar's input that a query may "
                f"see, read from the hooks `hook_q` and `hook_k`"
                + (" (after the RoPE rotation: `hook_rot_q`, `hook_rot_k`)" if cfg.pos == "rope"
                   and kind.module == "attn" else "")
                + f". {reference}: the spread random unit-variance vectors would "
                  f"give. A trained head is not random: it learns how large its queries and keys are, and so how "
                  f"sharp it wants to be.")
    figure = spread_figure if bars else spread_table_figure
    st.plotly_chart(figure(spread.dot_std, spread.d_head, spread.q_std, spread.k_std),
                    key="attention.fig_scale_model",
                    config=chart_config("attention", sel.model_id, f"scale-spread-{kind.key}"))
    how = {"scaled_dot": f"divides q·k by √{cfg.d_head} = {np.sqrt(cfg.d_head):.2f} before softmax",
           "dot": "does **not** divide q·k by anything (plain dot-product scores)",
           "cosine": f"scores with cosine similarity times {cfg.cosine_scale:g}, so the raw q·k above is not what "
                     f"it feeds to softmax"}.get(cfg.score, f"uses '{cfg.score}' scores")
    note = " With one (query, key) pair there is no spread to measure." if spread.pairs < 2 else ""
    st.caption(f"This model {how}. Hover a {'bar' if bars else 'cell'} for the spread of the query and key entries "
               f"themselves.{note}")


def scale_panel(sel: Selection) -> None:
    """Why divide by √d_k: random q·k grows with the width, and unscaled softmax saturates."""
    st.subheader("Why divide by √d_k")
    lead("Random q·k spreads about √d_k; dividing by √d_k gives a spread of about 1 at every width, so softmax stays "
         "soft and trainable.",
         "Read more: why the spread matters, and the maths",
         "Take a query and a key whose d_k entries are independent random numbers with mean 0 and variance 1. Their "
         "dot product adds up d_k such products, each of variance 1, so its variance is d_k and its typical size (the "
         "standard deviation) is √d_k. A head twice as wide would score about 1.4 times as far from 0, a head of width"
         " 1024 about 32 times. Fed to softmax, scores that far apart put nearly all the weight on one key, and "
         "softmax there is almost flat: nudging a score barely moves any weight, so almost no gradient flows back to "
         "the queries and keys that training needs to adjust. Dividing by √d_k gives the scores a spread of about 1 at"
         " every width, so a freshly initialised head starts soft and trainable however wide it is. (Making scores "
         "small is not the point: scaling every score down flattens softmax, as the temperature does. The point is "
         "that the spread stops depending on d_k.)",
         r"\operatorname{Var}(q\cdot k)=\sum_{i=1}^{d_k}\operatorname{Var}(q_i "
         r"k_i)=d_k\;\Rightarrow\;\operatorname{std}\!\left(\frac{q\cdot k}{\sqrt{d_k}}\right)=1,",
         r"\frac{\partial "
         r"\alpha}{\partial s}=\operatorname{diag}(\alpha)-\alpha\alpha^{\top}")
    st.caption("This view draws random vectors, so the temperature slider above does not apply here; the "
               "model's spread at the bottom is measured at T = 1, before any scaling.")
    scale_draws()
    scale_model_spread(sel)
    try_this("Move d_k from 1 to 1024 with 'divide by √d_k' off: the histogram widens and the measured spread "
             "tracks √d_k (about 32 at 1024). Switch it on: the histogram stays at spread 1 at every width.",
             "Watch the orange curves: past d_k ≈ 64 the largest weight heads for 1, the entropy for 0 and the "
             "gradient size for 0. The blue curves stay flat.",
             "Set the number of keys to 128: the unscaled row saturates even sooner, because the largest of more "
             "draws is further out.",
             "Change the seed: the numbers move a little, the shapes of the curves do not.",
             "Compare the model's bars with √d_head: does training leave its heads sharper or softer than random "
             "vectors would be?")


def input_b_default(sel: Selection) -> str:
    """Input B starts as the task's next example after the sidebar's."""
    return example_text(sel.task, sel.arch, st.session_state.get(SEED_KEY, 0) + 1)


def seed_url(sel: Selection) -> None:
    """Read every URL parameter of this page before anything is drawn, so problems are reported at the top.

    Each widget seeds itself again when it is made (a no-op once seeded); this only moves the first
    reading, and its notes, before the page header.
    """
    cfg = sel.model.cfg
    kinds = A.attention_kinds(sel.arch)
    kind = {k.key: k for k in kinds}[URL.kind.seed(choices=tuple(k.key for k in kinds))] if len(kinds) > 1 else kinds[0]
    q_tokens, k_tokens = A.axis_tokens(kind, sel.tokens, sel.tgt_tokens)
    layer = URL.layer.seed(hi=cfg.n_layers - 1)
    head = URL.head.seed(hi=cfg.n_heads - 1)
    qpos = URL.query.seed(hi=len(q_tokens) - 1, default=len(q_tokens) - 1)
    for param in (URL.temp, URL.view, URL.steps, URL.toy_q, URL.toy_keys, URL.toy_values, URL.toy_dk, URL.cmp,
                  URL.dk, URL.dk_keys, URL.dk_scaled, URL.dk_seed, URL.win):
        param.seed()
    if is_long(len(q_tokens), len(k_tokens)):  # the One head view's window (a short input has none)
        size = int(URL.win.now())
        start_q, start_k = window_start(len(q_tokens), len(k_tokens), size, int(qpos))
        URL.wq.seed(hi=max(0, len(q_tokens) - size), default=start_q)
        URL.wk.seed(hi=max(0, len(k_tokens) - size), default=start_k)
    URL.layer2.seed(hi=cfg.n_layers - 1, default=layer)
    URL.head2.seed(hi=cfg.n_heads - 1, default=(head + 1) % cfg.n_heads)
    URL.input2.seed(default=input_b_default(sel))


def compare_panel(sel: Selection):
    """Two heads, or one head on two inputs, side by side with their difference."""
    st.subheader("Compare")
    st.markdown("Put two patterns next to each other and subtract them. In the difference, **blue** cells are "
                "where A gives more weight than B, **red** where B gives more, white where they agree. Each row "
                "of A − B adds up to 0, because both rows add up to 1.")
    compare_pair(sel)


# local: the mode, head B and input B redraw only these controls, A, B, A − B and the summary
@S.section("compare.pair", reads=("kind", "layer", "head", "temp"), view=VIEW_CMP)
def compare_pair(sel: Selection):
    """The mode and B's controls, then A, B and their difference. The heading and the reading guide above
    do not depend on them, so a click leaves those as drawn. A long input's A, B and difference are pooled."""
    v = picked(sel)
    kind, layer, head, q_tokens, k_tokens, temperature = v.kind, v.layer, v.head, v.q_tokens, v.k_tokens, \
        v.temperature
    s_a = summary(sel, kind, temperature, layer)
    labels = {CMP_HEADS: "Two heads, same input", CMP_INPUTS: "Same head, two inputs"}
    mode = URL.cmp.widget(st.radio, "Compare", format_func=labels.get, horizontal=True,
                          label_visibility="collapsed")
    n_l, n_h = s_a.overview.shape[:2]
    a_title = f"A: layer {layer}, head {head}"
    if mode == CMP_HEADS:
        c1, c2 = st.columns(2)
        with c1:
            layer_b = pick_index(URL.layer2, "Layer of B", n_l, layer)
        with c2:
            head_b = pick_index(URL.head2, "Head of B", n_h, (head + 1) % n_h)
        URL.clear("input2")
        s_b, b_q, b_k = summary(sel, kind, temperature, layer_b), q_tokens, k_tokens
        b_at = (layer_b, head_b)
        b_title = f"B: layer {layer_b}, head {head_b}"
    else:
        cap = max_tokens(sel.model)
        how = (f"Any text: the model's own tokenizer splits it; its first {cap:,} tokens are used."
               if is_text_model(sel.meta) else f"Tokens separated by spaces, at most {cap:,}.")
        text = URL.input2.widget(st.text_input, "Input B (same model, same head)", default=input_b_default(sel),
                                 help=how)
        URL.clear("layer2", "head2")
        sel_b, problem = selection_for(sel, text, "input B")
        if problem:
            st.error(f"{problem} Comparing the input with itself instead.")
            sel_b = sel
        s_b = summary(sel_b, kind, temperature, layer)
        b_at = (layer, head)
        b_q, b_k = A.axis_tokens(kind, sel_b.tokens, sel_b.tgt_tokens)
        a_title = f"A: this input, layer {layer}, head {head}"
        b_title = f"B: input B, layer {layer}, head {head}"
    a, b = s_a.head(layer, head), s_b.head(*b_at)  # [q k] each, as kept
    long = is_long(len(q_tokens), len(k_tokens)) or is_long(len(b_q), len(b_k))
    c1, c2 = st.columns(2)
    for column, s, at, q, k, title, key, name in ((c1, s_a, (layer, head), q_tokens, k_tokens, a_title, "attention.fig_cmp_a",
                                                    f"compare-a-{kind.key}-l{layer}h{head}"),
                                                   (c2, s_b, b_at, b_q, b_k, b_title,
                                                    "attention.fig_cmp_b", f"compare-b-{kind.key}")):
        with column:
            if long:
                figure = overview_figure(s.overview[at], len(q), len(k), s.block, title=title, q_title=kind.query_title,
                                         k_title=kind.key_title)
            else:
                figure = head_figure(s.layer(at[0])[at[1]], q, k, kind.query_title, kind.key_title, title=title)
            st.plotly_chart(figure, key=key, config=chart_config("attention", sel.model_id, name))
    diff, note = A.difference(a, b)  # [q k], over the positions both have
    if note:
        st.warning(note)
    if long:
        block = (pool_block(diff.shape[0]), pool_block(diff.shape[1]))
        figure = pooled_diff_figure(pool(diff.astype(np.float32), block, "absmax"), *diff.shape, block,
                                    title="A − B", q_title=kind.query_title, k_title=kind.key_title)
    else:
        figure = diff_figure(diff, q_tokens, k_tokens, title="A − B", q_title=kind.query_title, k_title=kind.key_title)
    st.plotly_chart(figure, key="attention.fig_cmp_diff",
                    config=chart_config("attention", sel.model_id, f"compare-difference-{kind.key}"))
    pooled = (" A and B are pooled as in the One head view (the largest weight of each block); the difference keeps "
              "the largest difference of each block, with its sign.") if long else ""
    st.caption(f"Largest disagreement: {np.abs(diff).max():.3f}. Mean absolute difference per cell: "
               f"{np.abs(diff).mean():.4f}.{pooled}")


def export_panel(sel: Selection):
    """Download the attention tensor of the current view as CSV and .npz; PNGs come from the chart toolbar."""
    st.subheader("Export")
    export_files(sel)
    st.caption("Load the .npz with `np.load(path)`: arrays `pattern`, `query_tokens`, `key_tokens` and the "
               "model, kind and temperature (no pickle needed).")


@S.section("export.files", reads=("kind", "layer", "head", "temp"), view=VIEW_EXPORT)
def export_files(sel: Selection) -> None:
    """The tensor's shape, kind and temperature, and the two downloads of it: the CSV of every layer, or of the
    open layer, head or window when more would pass EXPORT_CSV_ROWS rows; the .npz of every layer, or of the open
    one past EXPORT_NPZ_CELLS. Nothing is drawn; a long input's numbers are computed when the button is clicked."""
    v = picked(sel)
    kind, q_tokens, k_tokens, temperature, layer, head = v.kind, v.q_tokens, v.k_tokens, v.temperature, v.layer, \
        v.head
    cfg = sel.model.cfg
    n_l, n_h, n_q, n_k = cfg.n_layers, cfg.n_heads, len(q_tokens), len(k_tokens)
    every = n_l * n_h * n_q * n_k
    st.markdown(f"The current view's attention tensor has shape **[layer, head, query, key] = "
                f"[{n_l}, {n_h}, {n_q}, {n_k}]** ({kind.label}, T = {temperature:g}). For pictures: every chart "
                f"in the other views saves as a PNG (the camera in its toolbar: hover over the chart) or as an SVG "
                f"(the disk beside it).")
    stem = f"attention_{sel.model_id.replace(':', '-')}_{kind.key}_T{temperature:g}"
    meta = dict(model=sel.model_id, kind=kind.label, temperature=f"{temperature:g}", axes="layer head query key")
    csv = csv_part(every, n_h, n_q, n_k, layer, head)
    c1, c2 = st.columns(2)
    c1.download_button("Download CSV" if csv.whole else f"Download CSV ({csv.name})",
                       partial(csv_bytes, sel, kind, temperature, csv, q_tokens, k_tokens),
                       file_name=f"{stem}.csv" if csv.whole else f"{stem}_{csv.name.replace(' ', '').replace(',', '_')}.csv",
                       mime="text/csv", icon=":material/table:", key="attention.csv", on_click="ignore",
                       help="One row per (layer, head, query, key) with both tokens and the weight.")
    if not csv.whole:
        st.caption(f"Every layer as CSV would be {every:,} rows (one per layer, head, query and key); the CSV "
                   f"holds the {csv.name}'s {csv.rows:,} (pick another with the buttons above), and the .npz "
                   f"{'every layer' if every <= EXPORT_NPZ_CELLS else f'layer {layer}'}.")
    npz_layers = tuple(range(n_l)) if every <= EXPORT_NPZ_CELLS else (layer,)
    c2.download_button("Download .npz" if len(npz_layers) == n_l else f"Download .npz (layer {layer})",
                       partial(npz_bytes, sel, kind, temperature, npz_layers, q_tokens, k_tokens, meta),
                       file_name=f"{stem}.npz" if len(npz_layers) == n_l else f"{stem}_layer{layer}.npz",
                       mime="application/octet-stream", icon=":material/download:", key="attention.npz",
                       on_click="ignore", help="numpy arrays: the pattern and the token labels.")


@dataclass(frozen=True)
class CsvPart:
    """What the CSV download holds: every layer, or the open layer, head or One head window."""

    name: str  # "layer 2", "layer 2, head 1", or "layer 2, head 1, window"
    whole: bool
    rows: int
    layers: tuple[int, ...]
    head: Optional[int]  # None: every head of those layers
    window: Optional[tuple[int, int, int, int]]  # (q0, q1, k0, k1) of the One head view, or None


def csv_part(every: int, n_h: int, n_q: int, n_k: int, layer: int, head: int) -> CsvPart:
    """The largest of every layer, the open layer, head or window whose CSV stays within EXPORT_CSV_ROWS rows."""
    if every <= EXPORT_CSV_ROWS:
        return CsvPart("every layer", True, every, (), None, None)
    if n_h * n_q * n_k <= EXPORT_CSV_ROWS:
        return CsvPart(f"layer {layer}", False, n_h * n_q * n_k, (layer,), None, None)
    if n_q * n_k <= EXPORT_CSV_ROWS:
        return CsvPart(f"layer {layer}, head {head}", False, n_q * n_k, (layer,), head, None)
    size = int(URL.win.now())
    q0, k0 = int(URL.wq.now()), int(URL.wk.now())
    q0, k0 = min(q0, max(0, n_q - size)), min(k0, max(0, n_k - size))
    q1, k1 = min(n_q, q0 + size), min(n_k, k0 + size)
    return CsvPart(f"layer {layer}, head {head}, window", False, (q1 - q0) * (k1 - k0), (layer,), head,
                   (q0, q1, k0, k1))


def csv_bytes(sel: Selection, kind: A.AttentionKind, temperature: float, part: CsvPart, q_tokens, k_tokens) -> str:
    """The CSV download, computed when its button is clicked (a fresh run of the layers it holds)."""
    layers = part.layers or tuple(range(sel.model.cfg.n_layers))
    patterns = full_patterns(sel, kind, temperature, layers)  # [layer head q k]
    if part.head is not None:
        patterns = patterns[:, part.head:part.head + 1]  # [1 1 q k]
    if part.window is None:
        return A.export_csv(patterns, q_tokens, k_tokens, layers[0], first_head=part.head or 0)
    q0, q1, k0, k1 = part.window
    return A.export_csv(patterns[..., q0:q1, k0:k1], q_tokens[q0:q1], k_tokens[k0:k1], layers[0],
                        first_head=part.head, first=(q0, k0))


def npz_bytes(sel: Selection, kind: A.AttentionKind, temperature: float, layers: tuple[int, ...], q_tokens,
              k_tokens, meta: dict) -> bytes:
    """The .npz download, computed when its button is clicked (a fresh run of the layers it holds)."""
    extra = {} if len(layers) == sel.model.cfg.n_layers else {"layer": str(layers[0])}
    return A.export_npz(full_patterns(sel, kind, temperature, layers), q_tokens, k_tokens, **meta, **extra)


# ---------------------------------------------------------------------------------------------
# The whole view, in reading order
# ---------------------------------------------------------------------------------------------


@dataclass
class View:
    """What the student is looking at: which attention, layer, head, query row and temperature."""

    kind: A.AttentionKind
    q_tokens: list[str]
    k_tokens: list[str]
    layer: int
    head: int
    qpos: int
    temperature: float


def picked(sel: Selection) -> View:
    """The kind, layer, head, query row and temperature the controls hold now, read from the session: a fragment
    that a control reruns sees the new value (its arguments are those of the page's last full run, where the
    controls were drawn and checked)."""
    kinds = A.attention_kinds(sel.arch)
    kind = {k.key: k for k in kinds}.get(URL.kind.now(), kinds[0]) if len(kinds) > 1 else kinds[0]
    q_tokens, k_tokens = A.axis_tokens(kind, sel.tokens, sel.tgt_tokens)
    return View(kind, q_tokens, k_tokens, int(URL.layer.now()), int(URL.head.now()), int(URL.query.now()),
                URL.temp.now())


def controls(sel: Selection) -> None:
    """One compact row (it wraps on a narrow screen): the kind (encoder-decoder only), layer, head and temperature,
    seeded from and written to the URL; then the kind's caption and the query row kept for the kind's tokens. Each
    reruns only the sections of the open view that read it. Kept short so the open view's figure starts on the
    first screen."""
    cfg = sel.model.cfg
    with st.container(horizontal=True, vertical_alignment="bottom", gap="medium"):
        pick_kind(sel)
        pick_index(URL.layer, "Layer", cfg.n_layers, width=120)
        pick_index(URL.head, "Head", cfg.n_heads, width=120)
        pick_temperature()
    kind_note(sel)
    query_row(sel)


def draw(sel: Selection) -> None:
    """The view buttons, then the open view (the only one computed and drawn). Its parts read the kind, layer,
    head and temperature from the session."""
    view = pick_view()
    if view == VIEW_GRID:
        overview_panel(sel)
        try_this("Find a head whose square shows a bright diagonal (each token looks at itself) or a diagonal "
                 "shifted by one (each token looks at its neighbour). Open it with the Layer and Head buttons "
                 "above, then the 'One head' view.",
                 "Compare layer 0 with the last layer: later heads often make sharper, task-specific choices.")
    elif view == VIEW_HEAD:
        head_panel(sel)
        try_this("Change the query token above and watch its orange row, lines and bars move.",
                 "Edit the input in the sidebar (for example swap two tokens) and see which weights follow the "
                 "tokens and which stay with the positions.")
    elif view == VIEW_STEPS:
        arithmetic_panel(sel)
    elif view == VIEW_TEMP:
        temperature_panel(sel)
        try_this("Move T to 0.1: the entropy bars drop towards 0 and each row picks one key. Does the model "
                 "still get the answers right?",
                 "Move T to 10: every row approaches the uniform marker and the predictions usually fall "
                 "apart. Which positions survive longest?")
    elif view == VIEW_SCALE:
        scale_panel(sel)
    elif view == VIEW_CMP:
        compare_panel(sel)
        try_this("Compare two heads of the same layer: do they split the work (different keys) or repeat "
                 "each other?",
                 "Choose 'Same head, two inputs' and type input B as the sidebar input with one token "
                 "changed: which rows of the difference light up?")
    else:
        export_panel(sel)


def body(sel: Selection) -> None:
    """Everything below the title: the controls, then the open view, whose sections the controls rerun by key
    (the open view's alone); the view buttons rerun the page."""
    with S.group():
        controls(sel)
        draw(sel)
