"""The Heads page's controls and panels: subspaces, circuits, queries and keys, roles and
redundancy, ablation, the two-head toy and the orthogonal query. pages/heads.py calls them in
reading order.

Kept in a module (not the page file) so it is compiled once per process: Streamlit recompiles a
page script's source on every AppTest run, and this is most of the page's code. The cached work
is in ui.heads.runs; figures come from core.figures.heads through ui.shell.figures.cached.

What a click reruns: the attention kind, layer and head above the tabs are read by sections
(ui.shell.sections: `@S.section(..., reads=..., view=...)`), and a change reruns those of the open tab alone;
the tabs' own controls (matrix, budget, line threshold, heads removed, toy, orthogonal query) sit inside the
section or fragment they change. Switching tabs reruns the page (only the open tab is drawn).
"""

from __future__ import annotations


import numpy as np
import streamlit as st

from core.analysis.heads.ablation import ABLATION_MODES, all_heads
from core.analysis.heads.circuits import pca_2d
from core.analysis.heads.orthogonal import orthogonal_query, softmax
from core.analysis.heads.subspaces import MATRICES, h_max
from core.analysis.heads.toy import TOY_FEATURES, TOY_HEADS, TOY_SEED, TOY_STEPS
from core.analysis.attention import AttentionKind, attention_kinds, axis_tokens
from core.families import SIZE_PRESETS
from core.figures import heads as FH
from core.figures.heatmaps import attention_heatmap
from core.figures.long_patterns import pattern_figure, pooled_note, reduce_patterns
from core.figures.train import training_curves
from core.tasks import IGNORE, Task
from ui.heads import runs as R
from ui.shell.export import chart_config
from ui.shell.figures import cached
from ui.heads.runs import ABLATION_EXAMPLES, MI_COMPONENTS
from ui.shell.kinds import KIND_HELP, short_kind
from ui.shell.models import is_text_model
from ui.shell.page import computed, lead, needs_toy_task, number_table, pick_index, rows_table, try_this
from ui.shell.params import Choice, Int, Multi, Params
from ui.shell.runs import run
from ui.shell.sections import Sections
from ui.shell.sidebar import Selection
from ui.shell.text import literal

VIEW_SUB, VIEW_CIRC, VIEW_PCA, VIEW_ROLES, VIEW_ABL, VIEW_TOY, VIEW_ORTH = (
    "subspaces", "circuits", "qk", "roles", "ablation", "toy", "orthogonal")
# Short tab titles, so all seven fit one strip beside the sidebar on a 1024-wide screen (longer ones pushed the
# last tabs out of sight there); each tab's heading says it in full.
VIEWS = {VIEW_SUB: "Subspaces", VIEW_CIRC: "Circuits", VIEW_PCA: "Q & K", VIEW_ROLES: "Roles",
         VIEW_ABL: "Ablation", VIEW_TOY: "Toy", VIEW_ORTH: "Orthogonal"}
VIEW_OF_LABEL = {label: view for view, label in VIEWS.items()}
TOY_STEP_CHOICES = [200, 300, 400, 600, 800, 1000, 1500]


def view_word(label: str) -> str:
    """A tab's short URL name ('qk') for its title ('Q & K')."""
    return VIEW_OF_LABEL.get(label, label)


def head_word(ref) -> str:
    """A head as the `ablate` URL writes it: 'L1H2', or 'crossL0H1' for an encoder-decoder's."""
    return _label(ref).replace(" ", "")


# Every URL parameter of the page, once; model-dependent ranges (layers, heads, query rows, the heads
# that can be ablated) are given when the widget is drawn.
URL = Params(
    "heads",
    Choice("kind", "enc", choices=("enc", "dec", "cross")),
    Int("layer", 0, lo=0, hi=0), Int("head", 0, lo=0, hi=0),
    Choice("view", VIEWS[VIEW_SUB], choices=tuple(VIEWS.values()), label=view_word, omit_default=True),
    Choice("matrix", "W_V", choices=tuple(MATRICES), key="heads.which", omit_default=True),
    Multi("ablate", (), label=head_word, omit_default=True),
    Choice("mode", "zero", choices=tuple(ABLATION_MODES), omit_default=True),
    Int("oq", 0, lo=0, hi=0, key="heads.orth_query"),
    Choice("toy_heads", 2, choices=TOY_HEADS, key="heads.toy_heads", omit_default=True),
    Int("toy_seed", TOY_SEED, lo=0, hi=999, key="heads.toy_seed", omit_default=True),
    Choice("toy_steps", TOY_STEPS, choices=tuple(TOY_STEP_CHOICES), key="heads.toy_steps", omit_default=True),
)
# Figures memoised on their data and shipped pre-serialised (ui.shell.figures.cached), wrapped once per process
angle_fig = cached(FH.angle_heatmap)
gram_fig = cached(FH.gram_heatmap)
erank_fig = cached(FH.effective_rank_bars)
budget_fig = cached(FH.budget_figure)
circuit_fig = cached(FH.circuit_heatmap)
sv_fig = cached(FH.singular_value_bars)
scatter_fig = cached(FH.qk_scatter)
pattern_fig = cached(attention_heatmap)
long_pattern_fig = cached(pattern_figure)
roles_fig = cached(FH.role_tables)
pair_fig = cached(FH.pair_heatmap)
ablation_fig = cached(FH.ablation_bars)
orth_fig = cached(FH.orthogonal_bars)
head_cost_fig = cached(FH.head_cost_chart)
toy_match_fig = cached(FH.toy_match_bars)
toy_share_fig = cached(FH.toy_share_bars)
toy_forms_fig = cached(FH.toy_qk_forms)
curve_fig = cached(training_curves)


# ---------------------------------------------------------------------------------------------
# The view: attention kind, layer, head and tab (all in the URL)
# ---------------------------------------------------------------------------------------------

def open_view() -> str:
    """The open tab's short name, from the session (where `pick_view`'s tabs keep its title)."""
    return VIEW_OF_LABEL.get(URL.view.now(), VIEW_SUB)


S = Sections("heads", open_view=open_view)  # its sections say which of kind, layer and head they read


def pick_kind(sel: Selection) -> AttentionKind:
    """Which attention: only encoder-decoder models have more than one kind. A change reruns the sections of
    the open tab that read it."""
    kinds = attention_kinds(sel.arch)
    if len(kinds) == 1:
        URL.kind.clear()
        return kinds[0]
    by_key = {k.key: k for k in kinds}
    key = URL.kind.widget(st.selectbox, "Which attention", choices=tuple(by_key),
                          format_func=lambda k: short_kind(by_key[k]), width=250, help=KIND_HELP)
    return by_key[key]


def picked(sel: Selection) -> tuple[AttentionKind, int, int]:
    """The kind, layer and head the pickers hold now, read from the session: a fragment that a picker reruns
    sees the new value (its arguments are those of the page's last full run, where the pickers were drawn and
    checked)."""
    kinds = attention_kinds(sel.arch)
    kind = {k.key: k for k in kinds}.get(URL.kind.now(), kinds[0]) if len(kinds) > 1 else kinds[0]
    return kind, int(URL.layer.now()), int(URL.head.now())


def seed_url(sel: Selection) -> None:
    """Read every URL parameter of this page before anything is drawn, so notes about bad values
    appear at the top of this very run."""
    cfg = sel.model.cfg
    kinds = attention_kinds(sel.arch)
    by_key = {k.key: k for k in kinds}
    kind = by_key[URL.kind.seed(choices=tuple(by_key))] if len(kinds) > 1 else kinds[0]
    URL.layer.seed(hi=cfg.n_layers - 1)
    URL.head.seed(hi=cfg.n_heads - 1)
    for param in (URL.view, URL.matrix, URL.mode, URL.toy_heads, URL.toy_seed, URL.toy_steps):
        param.seed()
    URL.ablate.seed(choices=tuple(all_heads(sel.model)))
    n_q = len(axis_tokens(kind, sel.tokens, sel.tgt_tokens)[0])
    URL.oq.seed(hi=n_q - 1, default=orth_default(cfg, n_q))


def orth_default(cfg, n_q: int) -> int:
    """The orthogonal-query tab's first query: early enough that its keys leave free directions."""
    return min(n_q - 1, max(0, cfg.d_head // 2))


def pick_view() -> dict:
    """The tabs; only the open one is computed, and it is in the URL as `view`."""
    URL.view.seed()
    tabs = st.tabs(list(VIEWS.values()), key=URL.view.key, on_change="rerun")
    URL.view.write(st.session_state.get(URL.view.key, VIEWS[VIEW_SUB]))
    return dict(zip(VIEWS, tabs))


def vocab_labels(task: Task, n: int) -> tuple:
    """Labels for ids 0..n-1: the task's tokens, then bare ids if the model's vocabulary is larger."""
    tokens = list(task.vocab.tokens[:n])
    return tuple(tokens + [f"id{i}" for i in range(len(tokens), n)])


# ---------------------------------------------------------------------------------------------
# Panels
# ---------------------------------------------------------------------------------------------


def set_budget(keys: list[str], d_model: int, d_v: int, n_heads: int) -> None:
    """A preset button's callback: put a model's sizes into the budget's three boxes."""
    for key, value in zip(keys, (d_model, d_v, n_heads)):
        st.session_state[key] = value


def subspace_panel(sel: Selection):
    """Principal angles, cross-Gram norms, effective ranks and the h * d_v <= d_model budget. Each part: a short
    lead, its figure, and the longer explanation and formulas one click away."""
    subspace_heading(sel)
    subspace_explorer(sel)
    with st.expander("The maths: principal angles"):
        st.markdown(
            "Each head reads the residual stream through its own matrices. The columns of $W_V^h$ span the "
            "**value subspace** of head $h$: the only directions it can copy information from. Two heads look at "
            "the same information when their subspaces overlap. We measure the overlap with **principal "
            r"angles**: take an orthonormal basis $Q$ of each subspace; the singular values of $Q_i^\top Q_j$ are "
            "the cosines of the angles. 0° means a shared direction, 90° means none. Heads are fully independent "
            r"only when *every* angle is 90°, which is the same as $(W_V^i)^\top W_V^j = 0$.")
        st.latex(r"\cos\theta_k = \sigma_k\!\left(Q_i^{\top} Q_j\right),\qquad Q_i = \operatorname{orth}(W_V^{i})")
        st.latex(r"\text{heads } i, j \text{ orthogonal} \iff (W_V^{i})^{\top} W_V^{j} = 0")
    st.markdown("**The budget.** Heads can be mutually orthogonal only while their subspaces fit side by side in "
                r"the stream: $h \cdot d_v \le d_{model}$. Change the numbers to see other sizes (the model is "
                "not changed).")
    subspace_budget(sel)
    with st.expander("Read more: the budget"):
        st.markdown(
            "If every head had its own orthogonal $d_v$-dimensional subspace, the subspaces would "
            r"have to fit side by side in the $d_{model}$-dimensional residual stream: $h \cdot d_v \le d_{model}$, "
            r"so at most $h_{max} = \lfloor d_{model} / d_v \rfloor$ heads can be mutually orthogonal. The usual "
            "choice $d_v = d_{model} / h$ uses the budget exactly: however many heads share the width, the layer "
            "keeps the parameters and the matrix FLOPs of one wide head. It does not keep its memory: each head "
            "makes its own n×n attention pattern, so training keeps h·n² numbers where one wide head keeps n² (the "
            "chart under the budget measures it). Change the numbers to see the picture for other sizes (the "
            "model is not changed).")
        st.latex(r"h \cdot d_v \le d_{\text{model}} \;\Longrightarrow\; h_{\max} = \left\lfloor \frac{d_{\text{model}}}{d_v}"
                 r"\right\rfloor")
    head_cost_panel(sel)
    try_this("Switch the matrix between W_Q, W_K and W_V. Are the heads more alike in what they look for (W_Q, "
             "W_K) or in what they copy (W_V)?",
             "Pick a randomly initialised model you trained on the Train page (few steps) and compare its angles "
             "with a trained bundled model: random subspaces of a wide space are already far apart, but not 90°.",
             "Set d_v to 24 with d_model 64: only 2 heads fit orthogonally and the third box turns red.")


@S.section("subspaces.heading", reads=("layer",), view=VIEW_SUB)
def subspace_heading(sel: Selection) -> None:
    """The tab's heading, which names the layer, as the bold start of its one-line lead (a heading of its own
    pushed the first figure off a 1024 x 768 screen)."""
    st.markdown(f"**Which directions each head uses (layer {picked(sel)[1]}).** Each head reads the stream through "
                f"its own subspace; overlapping subspaces (**0°**) share information, **90°** means none.")


# local: the matrix, angle and norm controls redraw only these controls, the angles, overlaps and ranks
@S.section("subspaces.explorer", reads=("kind", "layer"), view=VIEW_SUB)
def subspace_explorer(sel: Selection) -> None:
    """The explorer of one layer's head subspaces: its controls, the angle and overlap heatmaps, the effective
    ranks and the joint-rank metrics (all read the matrix picked here; the budget below does not)."""
    cfg = sel.model.cfg
    kind, layer, _ = picked(sel)
    with st.container(horizontal=True, vertical_alignment="bottom", gap="medium"):  # one row; wraps when narrow
        which = URL.matrix.widget(st.segmented_control, "Matrix", required=True,
                                  help="W_Q, W_K, W_V: what a head reads from the residual stream. W_O (transposed): where it writes.")
        reduce = st.segmented_control("Angle shown in each cell", ["mean", "min"], key="heads.reduce",
                                      default="mean", required=True,
                                      format_func={"mean": "mean of all", "min": "smallest"}.get)
    rep = R.subspaces(sel.model_id, sel.device, kind.key, layer, which, reduce)
    labels = [f"H{h}" for h in range(cfg.n_heads)]
    left, right = st.columns(2)
    with left:
        st.markdown(f"**Angles between {which} subspaces** (°)",
                    help=f"Principal angles between the heads' {which} subspaces, in degrees: the "
                         f"{'mean of all' if reduce == 'mean' else 'smallest'} of each pair's angles.")
        st.plotly_chart(angle_fig(rep.angles, rep.all_angles, labels, which, reduce),
                        key="heads.fig_angles",
                        config=chart_config("heads", sel.model_id, f"angles-{which}-{kind.key}-l{layer}"))
    with right:
        title, chart = st.container(), st.container()  # filled once the toggle under them is read
        # under the chart it changes (in the row above it took a row of its own on a narrow screen)
        normalised = st.toggle("Scale-free norms", key="heads.norm_gram",
                               help="Divide each norm by ‖W^i‖ ‖W^j‖, so it no longer depends on how large the "
                                    "weights are.")
        title.markdown(f"**Overlap** $\\|(W^i)^\\top W^j\\|_F$ for {which}" + (" divided by $\\|W^i\\|_F\\|W^j\\|_F$"
                                                                              if normalised else ""))
        chart.plotly_chart(gram_fig(rep.gram_normalised if normalised else rep.gram, labels, which, normalised),
                           key="heads.fig_gram",
                           config=chart_config("heads", sel.model_id, f"overlap-{which}-{kind.key}-l{layer}"))
    st.caption("The diagonal compares a head with itself (0°). Hover a cell to see every principal angle of the "
               f"pair: there are d_head = {cfg.d_head} of them.")

    st.markdown("**How many directions does a head really use?** The **effective rank** is 1 when one direction "
                "carries everything and $d_{head}$ when all are used equally.")
    with st.expander("The maths: effective rank"):
        st.markdown(
            "A head has $d_{head}$ columns, but training may put "
            "most of the weight into a few of them. The **effective rank** (entropy-based: the exponential of the "
            "entropy of the singular values divided by their sum) is 1 when one direction carries everything and "
            "$d_{head}$ when all are used equally.")
        st.latex(r"\operatorname{erank}(W) = \exp\Big(-\sum_k p_k \ln p_k\Big),\qquad p_k = \frac{\sigma_k}{\sum_j \sigma_j}")
    left, right = st.columns([3, 2])
    with left:
        st.markdown(f"**Effective rank of each head's {which}**")
        st.plotly_chart(erank_fig(rep.eff_rank, labels, cfg.d_head, which), key="heads.fig_erank",
                        config=chart_config("heads", sel.model_id, f"effective-rank-{which}-{kind.key}-l{layer}"))
    with right:
        # short labels: a metric cuts a long one with '...' in a narrow column; the help says it in full
        st.metric(f"rank, {cfg.n_heads} heads' {which}", f"{rep.joint_rank} of {cfg.d_model}",
                  help=f"All {cfg.n_heads} heads' {which} side by side: their rank. How many residual-stream "
                       "dimensions the heads of this layer reach together.")
        st.metric("effective rank, together", f"{rep.joint_eff_rank:.1f}",
                  help=f"The effective rank of all {cfg.n_heads} heads' {which} side by side.")
        st.metric("h_max = ⌊d_model / d_v⌋", f"{rep.h_max}", help="The most heads whose value spaces can be "
                  "pairwise orthogonal in this model's width.")


@st.fragment  # local: the budget's presets and number boxes redraw only themselves and the budget picture
def subspace_budget(sel: Selection) -> None:
    """The h * d_v <= d_model calculator: preset buttons, three number boxes and the picture. It does not read
    the explorer's controls above, and they do not read it, so each redraws alone."""
    cfg = sel.model.cfg
    keys = [f"heads.budget_{name}.{sel.model_id}" for name in ("dmodel", "dv", "h")]
    presets = st.columns(1 + len(SIZE_PRESETS))
    presets[0].button("This model's sizes", key="heads.budget_this", on_click=set_budget,
                      args=(keys, cfg.d_model, cfg.d_head, cfg.n_heads))
    for col, (name, p) in zip(presets[1:], SIZE_PRESETS.items()):
        col.button(f"{p.short}: {p.d_model}, {p.n_heads} × {p.d_head}", help=f"The sizes of {p.name}.",
                   key=f"heads.budget_{name}", on_click=set_budget, args=(keys, p.d_model, p.d_head, p.n_heads))
    c1, c2, c3 = st.columns(3)
    d_model = c1.number_input("d_model", 1, 4096, cfg.d_model, key=keys[0])
    d_v = c2.number_input("d_v (width of one head)", 1, 4096, cfg.d_head, key=keys[1])
    n_heads = c3.number_input("heads h", 1, 64, cfg.n_heads, key=keys[2])
    if d_model // d_v > FH.MAX_BOXES:
        st.caption(f"Only the first {FH.MAX_BOXES} boxes of a row are drawn.")
    st.plotly_chart(budget_fig(int(d_model), int(d_v), int(n_heads)), key="heads.fig_budget",
                    config=chart_config("heads", None, f"budget-d{int(d_model)}-dv{int(d_v)}-h{int(n_heads)}"))
    st.caption(f"h_max = ⌊{int(d_model)} / {int(d_v)}⌋ = {h_max(int(d_model), int(d_v))}. This model: "
               f"{cfg.n_heads} heads × d_v = {cfg.d_head} = {cfg.n_heads * cfg.d_head} of d_model = {cfg.d_model}.")


HEAD_COST_NS = (256, 512, 1024)  # the lengths the measured memory can be taken at (1,024: the Cost page's figure)


def head_cost_panel(sel: Selection) -> None:
    """What stays and what grows when one layer's width is split into more heads: counted at the input's length,
    the memory also measured (its own fragment: the length picker redraws only it)."""
    cfg = sel.model.cfg
    st.markdown("**What stays and what grows with the head count.** Splitting d_model over h heads keeps a layer's "
                "parameters and its matrix FLOPs: W_Q, W_K, W_V and W_O are d_model × d_model whatever h is, and the "
                "scores and weighted sums of h heads of width d_model / h add up to one wide head's. The memory does "
                "not stay: every head makes its own n×n pattern, and training keeps all of them for the backward "
                "pass, h·n² numbers instead of n².")
    st.latex(r"\begin{gathered}\text{parameters} = 4\,d_{model}^2, \quad "
             r"\text{FLOPs} = 8\,n\,d_{model}^2 + 4\,n^2 d_{model} \\ "
             r"(\text{both whatever } h), \qquad \text{patterns kept} = h\,n^2\end{gathered}")
    head_cost_chart(cfg.d_model, len(sel.tokens))


@st.fragment  # local: the measured length redraws only the chart, its caption and the table
def head_cost_chart(d_model: int, n_input: int) -> None:
    """The length picker, the stays / grows chart, what it says in numbers, and the table."""
    n = st.select_slider("n for the measured memory", HEAD_COST_NS, value=HEAD_COST_NS[-1], key="heads.cost_n",
                         format_func=lambda v: f"{v:,}",
                         help="The peak memory of one training step of explicit attention is measured at this length.")
    rows = [dict(r) for r in R.head_costs(d_model, n_input, int(n))]
    st.plotly_chart(head_cost_fig(rows, n_input, int(n)), key="heads.fig_cost",
                    config=chart_config("heads", None, f"head-count-cost-d{d_model}-n{n}"))
    first, last = rows[0], rows[-1]
    measured = "peak MiB at the measured n (measured)"
    st.caption(f"d_model = {d_model}, this input's n = {n_input:,}: {first['parameters']:,} parameters and "
               f"{first['MFLOP']:.3g} MFLOP per layer for every head count (counted). At n = {int(n):,} one training "
               f"step of explicit attention peaked at {first[measured]:.0f} MiB with 1 head and {last[measured]:.0f} "
               f"MiB with {last['heads']} (measured on this server's CPU, core.analysis.cost's tracker; the inputs q, "
               f"k, v not counted). Head counts that do not divide d_model are left out.")
    number_table(rows, {"parameters": ("localized", 1), "MFLOP": "%.3g", "patterns MiB (counted)": "%.3g",
                        "patterns MiB at the measured n (counted)": "%.3g", measured: "%.3g"}, width="stretch")
    try_this("Move n from 1,024 to 256: a quarter of the length, and the measured memory falls by about sixteen "
             "(n², a little less where the q, k, v gradients, linear in n, weigh more); 8 heads still keep about 8 "
             "times what 1 head keeps.")


def circuits_panel(sel: Selection):
    """The QK and OV circuits of one head as token x token tables, with their singular values."""
    circuits_heading(sel)
    lead("A head's **QK circuit** decides *where to look*, its **OV circuit** *what to write*; both are read straight "
         "from the weights.",
         "Read more: how the tables are made, and the maths",
         "A head does two separate jobs. Its **QK circuit** decides *where to look*: the score a query token gives a "
         "key token. Its **OV circuit** decides *what to write*: how attending to a token changes the logits of every "
         "output token. Both can be read straight from the weights by feeding in the token embeddings. The tables skip"
         " the positional encodings and every earlier layer (we pass each embedding through the LayerNorm in front of "
         "this layer, as a pre-LN model does), so they are exact for layer 0 of a model without positions and a first "
         "approximation otherwise.",
         r"\text{QK}^h = \frac{(E\,W_Q^h)(E\,W_K^h)^{\top}}{\sqrt{d_{\text{head}}}},",
         r"\text{OV}^h = E\,W_V^h\,W_O^h\,W_U^{\top}")
    circuit_tables(sel)
    try_this("On an induction model, find the head in layer 1 whose OV table has a bright diagonal: it copies the "
             "token it attends to. Then look at the same head's QK table.",
             "Compare the number of large singular values with d_head: a head that uses only a few directions "
             "has only a few large ones.")


@S.section("circuits.heading", reads=("layer", "head"), view=VIEW_CIRC)
def circuits_heading(sel: Selection) -> None:
    """The tab's heading, which names the layer and the head."""
    _, layer, head = picked(sel)
    st.subheader(f"Circuits of layer {layer}, head {head}")


@S.section("circuits.tables", reads=("kind", "layer", "head"), view=VIEW_CIRC)
def circuit_tables(sel: Selection) -> None:
    """The picked head's QK table, its singular values and strongest pairs, then the same for its OV table
    (or why an encoder head of an encoder-decoder has none)."""
    cfg = sel.model.cfg
    kind, layer, head = picked(sel)
    if is_text_model(sel.meta):
        text_circuit_tables(sel, kind, layer, head)
        return
    n_q = cfg.source_vocab_size if kind.queries == "source" else cfg.vocab_size
    n_k = cfg.source_vocab_size if kind.keys == "source" else cfg.vocab_size
    q_labels, k_labels = vocab_labels(sel.task, n_q), vocab_labels(sel.task, n_k)
    out_labels = vocab_labels(sel.task, cfg.vocab_size)
    qk, ov = R.circuits(sel.model_id, sel.device, kind.key, layer, head, q_labels, k_labels, out_labels)
    if kind.module == "cross_attn":
        st.caption("Cross-attention: the queries are decoder (target) token embeddings, the keys and values are "
                   "encoder (source) token embeddings passed through the encoder's final LayerNorm.")
    right = circuit_block(sel, kind, layer, head, "qk", qk, "**Its singular values**")
    with right:
        st.markdown("**Strongest pairs** (query → key)")
        st.markdown("\n".join(f"- `{a}` → `{b}`: {v:.2f}" for a, b, v in qk.top_pairs(6)))
    st.caption(f"At most d_head = {cfg.d_head} singular values can be non-zero (those after the dashed line are 0): "
               f"the table is a product of two rank-{cfg.d_head} factors, however large the vocabulary.")
    if ov is None:
        st.info("This is an encoder head of an encoder-decoder model: it writes into the encoder output, which "
                "the decoder reads only through cross-attention, so there is no direct path to the output logits "
                "to read as an OV table. Pick the decoder or cross-attention above to see one.")
    else:
        right = circuit_block(sel, kind, layer, head, "ov", ov, "**Its singular values**")
        with right:
            if ov.table.shape[0] == ov.table.shape[1]:
                share = float((np.argmax(ov.table, axis=1) == np.arange(ov.table.shape[0])).mean())
                st.metric("copying score", f"{share:.0%}",
                          help="Share of tokens whose strongest output is the token itself. A copying head has a "
                               "blue diagonal: attending to token x raises the logit of x.")
            st.markdown("**Strongest pairs** (attended → output)")
            st.markdown("\n".join(f"- `{a}` → `{b}`: {v:.2f}" for a, b, v in ov.top_pairs(6)))


CIRCUIT_TEXT = {  # which circuit: its heading's words, its table's axes, what a cell holds
    "qk": ("looks", "the query token, column = the key token", "blue = a high score (attend more), red = a low one",
           ("query token", "key token"), "score"),
    "ov": ("writes", "the token it attends to, column = an output token",
           "blue = that output's logit goes up, red = down", ("attended token", "output token"), "logit"),
}


def circuit_block(sel: Selection, kind: AttentionKind, layer: int, head: int, which: str, circuit, sv_title: str,
                  whence: str = ""):
    """One circuit table (which: "qk" or "ov") with its heading, and its singular values beside a column that is
    returned for the caller's own notes. `whence` says where the tokens come from, after the axes."""
    verb, axes_text, colours, axes, value = CIRCUIT_TEXT[which]
    st.markdown(f"**{which.upper()}: what L{layer} H{head} {verb}.** Row = {axes_text}{whence}; {colours}."
                if which == "ov" else
                f"**{which.upper()}: where L{layer} H{head} {verb}.** Row = {axes_text}{whence}; {colours}.")
    st.plotly_chart(circuit_fig(circuit.table, circuit.rows, circuit.cols, *axes, value_name=value),
                    key=f"heads.fig_{which}", config=chart_config("heads", sel.model_id, f"{which}-{kind.key}-l{layer}h{head}"))
    left, right = st.columns([3, 2])
    with left:
        st.markdown(sv_title)
        st.plotly_chart(sv_fig(circuit.singular_values, sel.model.cfg.d_head), key=f"heads.fig_{which}_sv",
                        config=chart_config("heads", sel.model_id, f"{which}-singular-values-{kind.key}-l{layer}h{head}"))
    return right


def quoted(token: str) -> str:
    """A token of a checkpoint's text in Markdown, in quotes and shown exactly as it reads (ui.shell.text.literal):
    a student's text may hold backticks, stars or links."""
    return f"“{literal(token)}”"


def circuit_tokens(sel: Selection) -> tuple[tuple, tuple]:
    """(ids, labels) of the distinct tokens of the sidebar's text in reading order, at most R.CIRCUIT_TOKENS: the
    rows and columns of a checkpoint's circuit tables. A label two ids share gets its id added (plotly merges
    equal category labels)."""
    ids = list(dict.fromkeys(int(i) for i in sel.ids[0].tolist()))[:R.CIRCUIT_TOKENS]
    labels = sel.task.vocab.decode(ids)
    seen = {}
    for label in labels:
        seen[label] = seen.get(label, 0) + 1
    return tuple(ids), tuple(f"{t} (id {i})" if seen[t] > 1 else t for i, t in zip(ids, labels))


def text_circuit_tables(sel: Selection, kind: AttentionKind, layer: int, head: int) -> None:
    """A checkpoint's QK and OV tables on the distinct tokens of the sidebar's text (a vocabulary of tens of
    thousands is never drawn whole), with the whole tables' singular values and each token's strongest outputs
    over the whole vocabulary."""
    cfg = sel.model.cfg
    ids, labels = circuit_tokens(sel)
    distinct = len(dict.fromkeys(sel.ids[0].tolist()))
    qk, ov = computed("Reading the head's circuits from its weights ...", R.text_circuits, sel.model_id, sel.device,
                      kind.key, layer, head, ids, labels)
    cut = f" (the first {len(ids)} of its {distinct})" if distinct > len(ids) else ""
    st.caption(f"This model's vocabulary has {cfg.vocab_size:,} tokens, so each table below keeps only the "
               f"{len(ids)} distinct tokens of your text{cut} as its rows and columns. Type other text in the sidebar "
               f"to read other tokens. The singular values are those of the whole {cfg.vocab_size:,} × "
               f"{cfg.vocab_size:,} table, computed from its two thin factors without building it.")
    right = circuit_block(sel, kind, layer, head, "qk", qk, "**Singular values of the whole table**")
    with right:
        st.markdown("**Strongest pairs** among your tokens (query → key)")
        st.markdown("\n".join(f"- {quoted(a)} → {quoted(b)}: {v:.2f}" for a, b, v in qk.top_pairs(6)))
    st.caption(f"At most d_head = {cfg.d_head} singular values can be non-zero: the table is a product of two "
               f"rank-{cfg.d_head} factors, however large the vocabulary.")
    if ov is None:
        st.info("This is an encoder head of an encoder-decoder model: there is no direct path to the output logits "
                "to read as an OV table.")
        return
    ov_table, tops = ov
    right = circuit_block(sel, kind, layer, head, "ov", ov_table, "**Singular values of the whole table**",
                          " (both from your text)")
    with right:
        st.metric("copying score", f"{tops.copies.mean():.0%}",
                  help=f"Share of your text's {len(ids)} distinct tokens whose strongest output, over the whole "
                       f"vocabulary of {cfg.vocab_size:,}, is the token itself. A copying head has a blue diagonal: "
                       f"attending to token x raises the logit of x.")
        vocab = sel.task.vocab
        order = np.argsort(-tops.values[:, 0])[:6]
        st.markdown("**Strongest outputs over the whole vocabulary** (attended → output)")
        st.markdown("\n".join(f"- {quoted(labels[r])} → " + ", ".join(f"{quoted(vocab.decode([int(i)])[0])} {v:.2f}"
                                                                  for i, v in zip(tops.ids[r, :3], tops.values[r, :3]))
                              for r in order))
    st.caption("The tables read only the direct path from the token embeddings (through the norm in front of this "
               "layer): positions, earlier layers" + (" and the masked-LM head's transform" if cfg.mlm_head else "")
               + " are left out, so they are a first approximation beyond layer 0.")


def rotated(sel: Selection, kind: AttentionKind) -> bool:
    """Whether this kind's queries and keys are rotated before scoring (RoPE on self-attention)."""
    return sel.model.cfg.pos == "rope" and kind.module == "attn"


def head_run(sel: Selection, kind: AttentionKind, layer: int, head: int, third: str) -> tuple:
    """(rope, queries [q d_head], keys [k d_head], hook `third` [q k]) of one head for the sidebar's input.

    Under RoPE (self-attention) the queries and keys are the rotated ones: those whose dot products
    give the scores.
    """
    rope = rotated(sel, kind)
    names = [kind.hook(layer, "hook_rot_q" if rope else "hook_q"), kind.hook(layer, "hook_rot_k" if rope else "hook_k"),
             kind.hook(layer, third)]
    out = run(sel, names, logits=False)  # nothing here reads the logits
    keys = out[names[1]][0]  # [k kv_head d_head]: grouped-query attention keeps one key head per group of heads
    kv = head // (sel.model.cfg.n_heads // keys.shape[1])  # the key head query head `head` reads
    return rope, out[names[0]][0, :, head], keys[:, kv], out[names[2]][0, head]


def projection_panel(sel: Selection):
    """One head's queries and keys for the current input, in a shared 2-D PCA plane."""
    projection_heading(sel)
    lead("Each token's query and key, on the two directions along which they vary most; lines join a query to the keys"
         " it attends to.",
         "How to read this chart",
         "Each token of your input gets a query vector and a key vector of $d_{head}$ numbers. We project all of them "
         "onto the two directions along which they vary most (principal component analysis, queries and keys together,"
         " so both live in one picture). Lines join each query to the keys it gives a large share of its attention. "
         "The picture keeps only part of the geometry (see the percentages on the axes); the attention itself uses all"
         " $d_{head}$ directions.",
         r"s_{ij} = \frac{q_i\cdot k_j}{\sqrt{d_{\text{head}}}},",
         r"[\,\tilde q_i\;\tilde k_j\,] = "
         r"[\,q_i\;k_j\,]\,V_{2}\quad (V_2:\ \text{top two principal axes})")
    projection_plane(sel)
    rope_note(sel)
    try_this("Find a previous-token head (Roles tab) and look at it here: each query should sit near the key of "
             "the token before it.",
             "Type an input with a repeated token in the sidebar. Do the two copies' keys land in the same place?")


@S.section("qk.heading", reads=("layer", "head"), view=VIEW_PCA)
def projection_heading(sel: Selection) -> None:
    """The tab's heading, which names the layer and the head."""
    _, layer, head = picked(sel)
    st.subheader(f"Queries and keys of layer {layer}, head {head} for your input")


# local: the line threshold redraws only itself, the PCA plane and the pattern beside it
@S.section("qk.plane", reads=("kind", "layer", "head"), view=VIEW_PCA)
def projection_plane(sel: Selection) -> None:
    """The line-threshold slider, the shared PCA plane of queries and keys, and the head's pattern. Only
    these depend on the slider; the heading, the formula and the notes around them stay as drawn."""
    kind, layer, head = picked(sel)
    _, q, k, pattern = head_run(sel, kind, layer, head, "hook_pattern")  # q [q d_head], k [k d_head], [q k]
    q_tokens, k_tokens = axis_tokens(kind, sel.tokens, sel.tgt_tokens)
    min_w = st.slider("Draw a line when the weight is at least", 0.05, 0.95, 0.3, 0.05, key="heads.pca_min")
    proj = pca_2d(q, k)
    long = max(len(q_tokens), len(k_tokens)) > FH.SCATTER_LABELS  # a long input: each chart gets the full width
    left, right = (st.container(), st.container()) if long else st.columns([3, 2])
    with left:
        st.markdown("**Queries** (orange circles) **and keys** (blue diamonds)")
        st.plotly_chart(scatter_fig(proj.q2, proj.k2, q_tokens, k_tokens, pattern, proj.explained, min_w),
                        key="heads.fig_pca",
                        config=chart_config("heads", sel.model_id, f"queries-keys-plane-{kind.key}-l{layer}h{head}"))
        if long:
            st.caption(f"{len(q_tokens):,} queries and {len(k_tokens):,} keys would write their tokens over each "
                       f"other: past {FH.SCATTER_LABELS} tokens the plane names each point in its hover only, and draws "
                       "one line per query, to its strongest key when that key gets at least the weight above.")
    with right:
        st.markdown("**The same head's attention pattern**")
        st.plotly_chart(long_pattern_fig(reduce_patterns(pattern), q_tokens, k_tokens, height=480),
                        key="heads.fig_pca_pattern",
                        config=chart_config("heads", sel.model_id, f"pattern-{kind.key}-l{layer}h{head}"))
        pooled = pooled_note(len(q_tokens), len(k_tokens))
        if pooled:
            st.caption(pooled)


@S.section("qk.rope", reads=("kind",), view=VIEW_PCA)
def rope_note(sel: Selection) -> None:
    """Under RoPE (self-attention only), a note that the plane shows the rotated queries and keys."""
    if rotated(sel, picked(sel)[0]):
        st.caption("This model uses RoPE, so these are the rotated queries and keys: the vectors whose dot products "
                   "give the scores.")


def roles_panel(sel: Selection):
    """Role scores per layer x head, then pattern similarity and output mutual information."""
    st.subheader("What kind of head is it?")
    lead("Some heads do a job we can name: **previous-token**, **induction**, **subject** or **first-token sink**.",
         "Read more: the four roles and how they are measured",
         "Some heads do a job we can name. We score every head against four such jobs. A **previous-token** head sends"
         " each token's attention to the token just before it. An **induction** head, at a token t, looks at the token"
         " that *followed* the previous copy of t (so it can predict that the pattern repeats). A **subject** head, at"
         " the verb slot of the agreement task, looks at the sentence's subject. A **first-token sink** parks "
         "attention on the very first position when it has nothing better to do. Previous-token, induction and sink "
         "are measured on random sequences repeated twice (the same for every model); the subject score on the "
         "agreement task's own sentences.",
         r"\text{induction}(h) = \operatorname{mean}_{t}\; A^h_{t,\;s(t)+1},", r"s(t) = \max\{\,s<t : x_s = x_t\,\}")
    role_scores(sel)
    redundancy_tables(sel)


@S.section("roles.scores", reads=("kind",), view=VIEW_ROLES)
def role_scores(sel: Selection) -> None:
    """The role scores of every head of the picked kind (a checkpoint's: the heads that score highest named
    first, and the subject score, which needs the agreement task, offered on a bundled model)."""
    kind = picked(sel)[0]
    if kind.module == "cross_attn":
        st.info("These roles compare a sequence with itself; cross-attention reads another sequence. Pick the "
                "encoder or decoder self-attention above.")
        return
    try:
        roles = computed("Scoring every head against known roles ...", R.roles, sel.model_id, sel.device,
                         kind.key, sel.task.name)
    except ValueError as exc:
        st.error(f"Could not probe this model's heads: {exc}")
        return
    text = is_text_model(sel.meta)
    scores = {r: v for r, v in roles.scores.items() if not (text and r == "subject")}
    if text:
        strongest_heads(roles)
    st.plotly_chart(roles_fig(scores, roles.chance), key="heads.fig_roles",
                    config=chart_config("heads", sel.model_id, f"roles-{kind.key}"))
    st.caption("Each cell is a mean attention weight (0 to 1). Under each title: the score of a head that spreads "
               "its attention evenly, for comparison. " + " ".join(f"**{r}**: {n}." for r, n in roles.notes.items()
                                                                    if r in scores))
    if text:
        needs_toy_task("The subject score", "agreement-encoder", "heads.roles_toy",
                       "it looks for the subject of the agreement task's own sentences, at their verb slot")


def strongest_heads(roles, shown: int = 3) -> None:
    """The heads that score highest as previous-token and induction heads, each with its score and the score of
    an evenly spread head (what 'high' is measured against)."""
    lines = []
    for role in ("previous token", "induction"):
        table = np.asarray(roles.scores[role], dtype=np.float64)  # [layer head]
        if np.isnan(table).all():
            continue
        flat = np.argsort(np.nan_to_num(table, nan=-1.0), axis=None)[::-1][:shown]
        best = ", ".join(f"**L{layer} H{head}** {table[layer, head]:.2f}"
                         for layer, head in zip(*np.unravel_index(flat, table.shape)))
        lines.append(f"- {role} heads: {best} (an evenly spread head: {roles.chance[role]:.2f})")
    if lines:
        st.markdown("**Strongest heads of each role** (score: mean attention weight)\n" + "\n".join(lines))


def many_heads(sel: Selection) -> bool:
    """Whether the model has more heads than every pair of them can be compared for (or every one removed alone)
    in a few seconds: then those tables cover the layer picked above."""
    cfg = sel.model.cfg
    return cfg.n_layers * cfg.n_heads > R.PAIRS_ALL_MAX


@S.section("roles.redundancy", reads=("kind", "layer"), view=VIEW_ROLES)
def redundancy_tables(sel: Selection) -> None:
    """Whether heads repeat each other: its heading, text and formula, the two tables and the 'Try this' box
    (cross-attention, whose roles are not measured, leaves them out). A model with many heads compares those of
    the picked layer."""
    kind, layer, _ = picked(sel)
    if kind.module == "cross_attn":
        return
    bounded = many_heads(sel)
    try:
        args = (sel.model_id, sel.device, kind.key, sel.task.name) + ((layer,) if bounded else ())
        red = computed("Comparing every pair of heads ...", R.redundancy, *args)
    except ValueError as exc:
        st.error(f"Could not probe this model's heads: {exc}")
        return
    st.subheader("Do heads repeat each other?")
    lead("Left: how alike two heads' patterns are (1 = the same weights). Right: how much information their outputs "
         "share.",
         "Read more: how both are estimated, and the maths",
         "Several heads are only useful if they do different things. Left: how alike two heads' attention "
         "patterns are, as 1 minus the Jensen-Shannon divergence between their rows (1 = the same weights, 0 = "
         "never the same keys). Right: how much information two heads' outputs share, estimated as the mutual "
         "information of a Gaussian fitted to them: each head's output z is reduced to its top "
         f"{MI_COMPONENTS} principal components, and with canonical correlations ρ between the two heads, "
         "I = −½ Σ ln(1 − ρ²). This counts information shared linearly and is exact only for Gaussian data.",
         r"\operatorname{sim}(h,g) = 1 - \operatorname{mean}_i "
         r"\operatorname{JS}\big(A^h_{i\cdot}\,\|\,A^g_{i\cdot}\big),",
         r"\hat I(z^h; z^g) = -\tfrac12 \sum_k "
         r"\ln\!\big(1-\rho_k^2\big)")
    if bounded:
        cfg = sel.model.cfg
        st.caption(f"This model has {cfg.n_layers} layers × {cfg.n_heads} heads = {cfg.n_layers * cfg.n_heads} "
                   f"heads, too many pairs to compare at once: the tables compare the {cfg.n_heads} heads of layer "
                   f"{layer}, the layer picked above.")
    left, right = st.columns(2)
    with left:
        st.markdown("**Pattern similarity** (1 − JS divergence)")
        st.plotly_chart(pair_fig(red.similarity, red.labels, 0, 1, "similarity"), key="heads.fig_sim",
                        config=chart_config("heads", sel.model_id, f"pattern-similarity-{kind.key}"))
    with right:
        st.markdown("**Mutual information between outputs** (nats)")
        top = max(float(np.nanmax(red.mi)) if np.isfinite(red.mi).any() else 1.0, 0.5)
        fmt = "{:.2f}" if top < 10 else "{:.1f}"
        st.plotly_chart(pair_fig(red.mi, red.labels, 0, top, "nats", fmt), key="heads.fig_mi",
                        config=chart_config("heads", sel.model_id, f"mutual-information-{kind.key}"))
    st.caption(f"Estimated from {red.n_samples} positions. After shuffling one head's positions (so the two are "
               f"independent by construction) the estimate still reads up to {red.noise:.3f} nats: values near "
               f"that are noise.")
    if is_text_model(sel.meta):
        try_this("Find the strongest induction head above, then look at the layers before it: is there a "
                 "previous-token head there for it to build on?",
                 "Open the strongest previous-token head in the Q & K tab: each query should sit near the key of the "
                 "token before it.",
                 "Look for two heads with high pattern similarity: ablate both on the Ablation tab, then one at a "
                 "time.")
        return
    try_this("Pick an induction model: which layer holds the previous-token head and which the induction head? "
             "An induction head needs a previous-token head in an earlier layer.",
             "Pick agreement-encoder: which head has the highest subject score? Ablate it on the Ablation tab and "
             "watch the accuracy.",
             "Look for two heads with high pattern similarity: ablate both on the Ablation tab, then one at a time.")


def _label(ref) -> str:
    """'L1 H2' for a self-attention head, 'cross L0 H1' for an encoder-decoder's."""
    key, layer, head = ref
    return f"L{layer} H{head}" if key == "self" else f"{key} L{layer} H{head}"


def scored_on(sel: Selection) -> str:
    """What the ablation scores: a toy task's fresh examples, or a checkpoint's example sentences."""
    task = sel.task
    if not is_text_model(sel.meta):
        return (f"We score {ABLATION_EXAMPLES} fresh examples of the task *{task.title}* (the mean is taken over the "
                f"same examples).")
    what = ("each next token" if sel.arch == "decoder" else
            f"the words hidden behind [MASK] (about {task.MASK_SHARE:.0%} of each sentence, as BERT was trained)")
    return (f"We score the {R.TEXT_ABLATION_EXAMPLES} example sentences of this page (their first "
            f"{task.default_length} tokens) on {what}; the mean is taken over the same sentences.")


def ablation_panel(sel: Selection):
    """Zero- or mean-ablate any set of heads; then every head alone, ranked."""
    st.subheader("What breaks without a head?")
    lead("Remove heads and measure the damage: **zero ablation** replaces a head's output by zeros, **mean ablation** "
         "by its average.",
         "Read more: the two ablations, and the maths",
         f"To learn what a head is for, take it away and measure the damage. **Zero ablation** replaces the head's "
         f"output $z^h$ by zeros; **mean ablation** replaces it by its average over many inputs, which removes what "
         f"the head says about *this* input while keeping its usual offset. The model itself is never changed: "
         f"each run passes a replacement function for `blocks.ℓ.attn.hook_z`. {scored_on(sel)}",
         r"\text{head } h \text{ removed:}\quad z^h \leftarrow 0 \;\;\text{or}\;\; z^h \leftarrow "
         r"\mathbb{E}_{x}\big[z^h(x)\big],",
         r"\Delta\mathcal{L} = \mathcal{L}_{\text{ablated}} - \mathcal{L}")
    ablation_results(sel)


# local: the heads removed and the replacement redraw only these controls, the scores and the ranking; the layer
# picked above too (a model with many heads ranks that layer's)
@S.section("ablation.results", reads=("layer",), view=VIEW_ABL)
def ablation_results(sel: Selection) -> None:
    """The heads to remove and their replacement, then the scores, the sidebar input and every head alone (every
    head of the picked layer, for a model with more than R.RANK_ALL_MAX heads). The heading and the explanation
    above do not depend on them; the 'Try this' box stays here because an error in scoring (which may depend on
    the replacement) leaves it out."""
    model, task = sel.model, sel.task
    layer = picked(sel)[1]
    cfg = model.cfg
    bounded = cfg.n_layers * cfg.n_heads > R.RANK_ALL_MAX
    options = all_heads(model)
    c1, c2 = st.columns([4, 1])
    with c1:
        chosen = URL.ablate.widget(st.multiselect, "Heads to remove", choices=tuple(options),
                                   format_func=_label, placeholder="Pick one or more heads")
    with c2:
        mode = URL.mode.widget(st.segmented_control, "Replace by", required=True,
                               format_func={"zero": "zeros", "mean": "mean"}.get)
    try:
        base = R.ablation(sel.model_id, sel.device, task.name, (), mode)
        result = R.ablation(sel.model_id, sel.device, task.name, tuple(chosen), mode)
    except ValueError as exc:
        st.error(f"Could not score this model on its task: {exc}")
        return
    c1, c2, c3 = st.columns(3)
    c1.metric("heads removed", f"{len(chosen)} of {len(options)}")
    c2.metric(f"accuracy ({task.metric})", f"{result.accuracy:.1%}",
              delta=f"{(result.accuracy - base.accuracy) * 100:+.1f} points vs {base.accuracy:.1%}" if chosen else None)
    c3.metric("loss (cross-entropy)", f"{result.loss:.3f}",
              delta=f"{result.loss - base.loss:+.3f} vs {base.loss:.3f}" if chosen else None, delta_color="inverse")
    if chosen:
        args = (sel.model_id, sel.device, tuple(sel.ids[0].tolist()),
                tuple(sel.tgt_ids[0].tolist()) if sel.tgt_ids is not None else None, task.name)
        ablated = R.input_predictions(*args, tuple(chosen), mode)
        clean = R.input_predictions(*args, (), "zero")  # the model as it is
        rows = input_rows(sel, clean, ablated)
        if rows:
            st.markdown("**Your input** (from the sidebar), scored positions only:")
            st.dataframe(rows_table(rows), hide_index=True, width="stretch", key="heads.abl_input")
        elif is_text_model(sel.meta):
            st.caption("Your text is not scored here: an encoder's right answers are words hidden behind [MASK], "
                       "and your text hides none. The scores above are on the example sentences.")
    if bounded:
        st.markdown(f"**Every head of layer {layer} alone** (the layer picked above). Each row removes one head and "
                    f"nothing else; the heads are sorted by how much the loss rises without them.")
        st.caption(f"This model has {cfg.n_layers * cfg.n_heads} heads; removing each alone costs one run of the "
                   f"model, so this table ranks the {cfg.n_heads} heads of one layer at a time. Pick another layer "
                   f"above to rank its heads.")
    else:
        st.markdown("**Every head alone.** Each row removes one head and nothing else; the heads are sorted by how "
                    "much the loss rises without them.")
    size = sum(p.numel() for p in model.parameters())
    if size > R.RANK_ON_REQUEST_PARAMETERS:
        st.caption(f"This model has {size / 1e6:,.0f}M parameters: each head removed is one more run of it on the "
                   f"example sentences, several seconds on a CPU, so the heads are removed when you ask.")
        asked = st.toggle(f"Remove each head of layer {layer} in turn" if bounded else "Remove each head in turn",
                          key="heads.rank_on")
    else:
        asked = True
    if asked:
        try:
            ranking = computed("Removing each head in turn ...", R.ranking, sel.model_id, sel.device, task.name,
                               mode, *((layer,) if bounded else ()))
        except ValueError as exc:
            st.error(f"Could not score this model on its task: {exc}")
            return
        ranking_table(sel, ranking)
    try_this("Remove the top-ranked head alone, then together with the second: is the damage the sum of the two?",
             "Switch between zeros and mean. A head whose output is mostly a constant offset hurts far less under "
             "mean ablation.",
             "Remove every head of layer 0 of an induction model: the induction heads in layer 1 lose the "
             "previous-token information they build on.")


def ranking_table(sel: Selection, ranking) -> None:
    """Every head removed alone, as bars and as a table, most important first."""
    labels = [_label((r["kind"], r["layer"], r["index"])) for r in ranking]
    st.plotly_chart(ablation_fig(labels, np.array([r["loss change"] for r in ranking]),
                                     np.array([r["accuracy change"] for r in ranking])),
                    key="heads.fig_ablation", config=chart_config("heads", sel.model_id, "ablation-ranking"))
    table = rows_table([{"rank": r["rank"], "head": lab, "accuracy": r["accuracy"],
                           "accuracy change": r["accuracy change"], "loss": r["loss"], "loss change": r["loss change"]}
                          for r, lab in zip(ranking, labels)])
    st.dataframe(table, hide_index=True, width="stretch", key="heads.abl_table",
                 column_config={"accuracy": st.column_config.NumberColumn(format="percent"),
                                "accuracy change": st.column_config.NumberColumn(format="percent"),
                                "loss": st.column_config.NumberColumn(format="%.3f"),
                                "loss change": st.column_config.NumberColumn(format="%+.3f")})


def input_rows(sel: Selection, clean: np.ndarray, ablated: np.ndarray) -> list[dict]:
    """Right answer, clean prediction and ablated prediction (the top tokens `[pos]`) at each scored position of
    the sidebar input."""
    if sel.targets is None:
        return []
    vocab = sel.task.vocab
    rows = []
    for p, target in enumerate(sel.targets):
        if target == IGNORE or p >= clean.shape[0]:
            continue
        before, after = int(clean[p]), int(ablated[p])
        rows.append({"position": f"{p}:{sel.query_tokens[p]}", "right answer": vocab.decode([target])[0],
                     "with every head": vocab.decode([before])[0] + (" ✓" if before == target else " ✗"),
                     "heads removed": vocab.decode([after])[0] + (" ✓" if after == target else " ✗")})
    return rows


def toy_panel():
    """Train a 1-layer model with 1, 2 or 4 heads on a task that needs one lookup in each of two orthogonal subspaces."""
    st.subheader("Two heads, two subspaces: train it yourself")
    lead("A toy where we *know* the answer: each query needs one lookup on letters and one on digits, in **two "
         "orthogonal subspaces**.",
         "Read more: the task, and the maths",
         "A toy where we *know* the answer. Each memory item is a letter-digit pair such as `a3`; its embedding puts "
         "the letter in dimensions 0-3 and the digit in dimensions 4-7 (one-hot), so letters and digits live in **two "
         "orthogonal subspaces**. A query such as `a1?` asks two questions at once: the answer's letter is the letter "
         "of the item holding digit 1, and its digit is the digit of the item holding letter a. With memory `a3 c1 "
         "d2`, the query `a1?` answers `c3`. One lookup matches on letters, the other on digits. A model with one "
         "layer ($d_{head}$ = 4, no positions, no LayerNorm, embedding frozen) learns it in a few seconds here. With "
         "two heads, watch whether each head takes one subspace. With one head, the single attention pattern has to "
         "serve both lookups at once; with four, there are spare heads.",
         r"x = \big[\,\underbrace{e_{\text{letter}}}_{\text{dims } "
         r"0\text{-}3}\;\big|\;\underbrace{e_{\text{digit}}}_{\text{dims } 4\text{-}7}\;\big|\;\text{query/memory "
         r"flag}\,\big],",
         r"q\cdot k = x_q^{\top}\, W_Q^h W_K^{h\top}\, x_k")  # a line of its own: together they overflowed
    st.markdown("A head that matches only on letters has its $W_Q^h W_K^{h\\top}$ inside the letter × letter "
                "block; a digit head inside the digit × digit block.")
    toy_run()
    try_this("Pick 1 head and 200 training steps and train, then 2 heads at 200 steps: one head is still well "
             "short (about 55-80% on seeds 0-5) where two are at 87-100%. Train both for 600 steps: one head "
             "catches up, by leaning on the letter item, keeping some weight on the digit item and letting the MLP "
             "untangle the mix.",
             "Train 2 heads with seeds 0 to 5. Does every seed split the work one head per subspace? When a run stays "
             r"'mixed', look at its $W_Q W_K^\top$ blocks: both heads use a bit of both.",
             "Train 4 heads: how many of them end up doing a lookup, and what do the others look at?")


@st.fragment  # local: the toy's heads, seed, steps and Train button redraw only these controls and the toy's results
def toy_run() -> None:
    """The toy's controls and Train button, then its curve or untrained accuracy, the comparison and the
    figures. The task's description above does not depend on them, so a click leaves it as drawn."""
    n_heads, seed, steps = toy_controls()
    done = R.trained_toy(n_heads, seed, steps) if R.trained_toy.has(n_heads, seed, steps) else None
    if done is None:
        report = R.untrained_toy(seed, n_heads)
        st.markdown(f"**Before training** ({toy_name(n_heads)}, seed {seed}): random heads, accuracy "
                    f"{report.accuracy:.0%} (chance is about 1 in 16). Press the button to train.")
    else:
        report = done["report"]
        hist = done["history"]
        st.plotly_chart(curve_fig([h["step"] for h in hist], [h["loss"] for h in hist],
                                  [h["accuracy"] for h in hist], steps, height=300),
                        key="heads.fig_toy_curve",
                        config=chart_config("heads", None, f"toy-{n_heads}-heads-seed{seed}-training"))
        toy_verdict(n_heads, done["seconds"], report)
    toy_comparison(seed, steps)
    toy_figures(report)


def toy_name(n_heads: int) -> str:
    """'one head', 'two heads', 'four heads'."""
    return {1: "one head", 2: "two heads", 4: "four heads"}[n_heads] if n_heads in (1, 2, 4) else f"{n_heads} heads"


def toy_controls() -> tuple[int, int, int]:
    """(heads, seed, steps), all in the URL, and the train button: a click trains (with a progress bar) unless
    that (heads, seed, steps) toy is already kept."""
    c0, c1, c2, c3 = st.columns([2, 1, 2, 2])
    n_heads = int(URL.toy_heads.widget(c0.segmented_control, "heads", required=True, format_func=str))
    seed = int(URL.toy_seed.widget(c1.number_input, "seed",
                                   help="Initial weights and training batches follow the seed."))
    steps = int(URL.toy_steps.widget(c2.select_slider, "training steps"))
    c3.write("")
    label = f"Train the {toy_name(n_heads).split()[0]}-head toy"
    clicked = c3.button(label, icon=":material/model_training:", key="heads.toy_train", type="primary", width="stretch")
    if clicked and not R.trained_toy.has(n_heads, seed, steps):
        bar = st.progress(0.0, text="training ...")

        def progress(trainer) -> None:
            last = trainer.history[-1]
            bar.progress(trainer.step / trainer.total, text=f"step {trainer.step} / {trainer.total}: loss "
                                                             f"{last['loss']:.3f}, accuracy {last['accuracy']:.0%}")

        token = R.TOY_PROGRESS.set(progress)
        try:
            R.trained_toy(n_heads, seed, steps)
        finally:
            R.TOY_PROGRESS.reset(token)
        bar.empty()
    return n_heads, seed, steps


def toy_verdict(n_heads: int, seconds: float, report) -> None:
    """One line on the trained toy: its accuracy, and whether (and how) its heads split the two lookups."""
    roles = ", ".join(report.roles)
    head = f"Trained in {seconds:.1f} s: accuracy {report.accuracy:.0%} on fresh examples"
    if n_heads == 1:
        (st.success if report.accuracy > 0.95 else st.warning)(
            f"{head}. One head has one pattern for both lookups: it puts {report.letter_attention[0]:.0%} of a "
            f"query's attention on the item sharing its letter and {report.digit_attention[0]:.0%} on the one sharing "
            f"its digit (role: {roles}).")
    elif report.separated:
        what = "each head took one subspace" if n_heads == 2 else "one head took the letters and another the digits"
        st.success(f"{head}; {what} (head roles: {roles}).")
    else:
        st.warning(f"{head}; the heads did not split the work cleanly this time (head roles: {roles}).")


def toy_comparison(seed: int, steps: int) -> None:
    """The accuracies of the toys already trained at this seed and step count, one per head count."""
    kept = {h: R.trained_toy(h, seed, steps)["report"].accuracy for h in TOY_HEADS if R.trained_toy.has(h, seed, steps)}
    if len(kept) > 1:
        st.markdown(f"**Trained so far with seed {seed}, {steps} steps:** " +
                    ", ".join(f"{toy_name(h)} {acc:.0%}" for h, acc in kept.items()))


def toy_figures(report) -> None:
    """Where each head's queries look, where its QK form lives, and every head's pattern on one example."""
    n = len(report.roles)
    left, right = st.columns(2)
    with left:
        st.markdown("**Where each head's queries look** (mean weight)")
        st.plotly_chart(toy_match_fig(report.letter_attention, report.digit_attention),
                        key="heads.fig_toy_match", config=chart_config("heads", None, "toy-where-queries-look"))
    with right:
        st.markdown("**Which block each head's $W_Q W_K^\\top$ lives in** (share of its squared entries)")
        st.plotly_chart(toy_share_fig(report.block_share), key="heads.fig_toy_shares",
                        config=chart_config("heads", None, "toy-qk-blocks"))
        st.caption("'Everything else' is mostly the query/memory flag, which a head uses to skip other queries.")
    st.markdown("**$W_Q^h W_K^{h\\top}$ of each head on the input features** (framed: the letter × letter and "
                "digit × digit blocks)")
    st.plotly_chart(toy_forms_fig(report.qk_forms, TOY_FEATURES, report.roles), key="heads.fig_toy_forms",
                    config=chart_config("heads", None, "toy-qk-forms"))
    tokens = report.example_tokens
    st.markdown(f"**Every head on one example:** memory `{' '.join(tokens[:3])}`, queries "
                f"`{' '.join(tokens[3:])}`. Each query row should light up the item sharing its letter (letter "
                f"head) or its digit (digit head).")
    cols = st.columns(min(n, 2))
    for h in range(n):
        with cols[h % 2]:
            st.markdown(f"head {h} ({report.roles[h]})")
            st.plotly_chart(pattern_fig(report.example_pattern[h], tokens, tokens, height=330),
                            key=f"heads.fig_toy_pat{h}", config=chart_config("heads", None, f"toy-head{h}-pattern"))


def orthogonal_panel(sel: Selection):
    """Add to a real query a part orthogonal to every key: every score stays the same."""
    cfg = sel.model.cfg
    st.subheader("The part of a query that no key can see")
    lead("Add to a query any vector orthogonal to every key: the scores, the weights and the output stay exactly the "
         "same.",
         "Read more: when such a vector exists, and the maths",
         "A score is a dot product q·k, and a dot product only sees the part of q that points along k. So if we "
         "add to q any vector u that is orthogonal to *every* key, every score stays exactly the same, and so do "
         "the weights and the output, however large u is. Such a u exists only when the keys do not fill all "
         f"d_head = {cfg.d_head} dimensions, for example when a query sees fewer than {cfg.d_head} keys. Below we "
         "take a real query of this head, add such a u, and for contrast a random vector of the same length.",
         r"u \perp k_j\ \ \forall j \;\Longrightarrow\; (q + u)\cdot k_j = q\cdot k_j + \underbrace{u\cdot k_j}_{=\,0}")
    orthogonal_scores(sel)


# local: the query token and the size of the added part redraw only these controls, the scores and the notes
@S.section("orthogonal.scores", reads=("kind", "layer", "head"), view=VIEW_ORTH)
def orthogonal_scores(sel: Selection) -> None:
    """The query and the size of u, then the metrics, the score bars and the notes. The heading and the
    formula above do not depend on them; the 'Try this' box stays here because a query whose keys fill
    every direction ends the section early, without it."""
    cfg = sel.model.cfg
    kind, layer, head = picked(sel)
    _, q_all, k_all, all_scores = head_run(sel, kind, layer, head, "hook_attn_scores")  # [q d_head], [k d_head]
    q_tokens, k_tokens = axis_tokens(kind, sel.tokens, sel.tgt_tokens)
    default = orth_default(cfg, len(q_tokens))
    c1, c2 = st.columns(2)
    with c1:
        qpos = pick_index(URL.oq, "Query token", len(q_tokens), default, fmt=lambda i: f"{i}: {q_tokens[i]}",
                          buttons=0)
    with c2:
        alpha = st.slider("Size of the added part (times |q|)", 0.0, 10.0, 3.0, 0.5, key="heads.orth_alpha")
    visible = np.arange(qpos + 1) if kind.causal else np.arange(len(k_tokens))
    keys = k_all[visible]
    scale = 1.0 / np.sqrt(cfg.d_head) if cfg.score == "scaled_dot" else 1.0
    res = orthogonal_query(q_all[qpos], keys, alpha, scale)
    if res is None:
        st.warning(f"Query {qpos}:{q_tokens[qpos]} sees {len(visible)} keys and they fill all {cfg.d_head} "
                   f"dimensions, so no direction is orthogonal to all of them. Pick an earlier query"
                   f"{' (it sees fewer keys)' if kind.causal else ''} or a shorter input.")
        return
    model_scores = all_scores[qpos, visible]
    c1, c2, c3 = st.columns(3)
    # short labels (in three columns beside the sidebar a long one ends in '...'); the help says each in full
    c1.metric("free directions", f"{res.free_dims} of {cfg.d_head}", help="Directions orthogonal to every key.")
    c2.metric("max change, orthogonal", f"{res.max_change_orth:.1e}",
              help="Largest score change, orthogonal part: what adding u did to the scores.")
    c3.metric("max change, random", f"{res.max_change_rand:.3f}",
              help="Largest score change, random part: what a random vector of the same length did.")
    st.markdown(f"**Scores of query {qpos}:`{q_tokens[qpos]}` against the keys it sees** (layer {layer}, head {head})")
    st.plotly_chart(orth_fig([k_tokens[j] for j in visible], res.scores, res.scores_orth, res.scores_rand),
                    key="heads.fig_orth",
                    config=chart_config("heads", sel.model_id, f"orthogonal-part-{kind.key}-l{layer}h{head}-query{qpos}"))
    weights_gap = float(np.abs(softmax(res.scores_orth) - softmax(res.scores)).max())
    if cfg.score == "scaled_dot":
        gap = float(np.abs(model_scores - res.scores).max())
        st.caption(f"The grey bars are the model's own scores for this query (largest difference from our "
                   f"recomputation: {gap:.1e}). |q| = {np.linalg.norm(res.q):.2f}, |q + u| = "
                   f"{np.linalg.norm(res.q_orth):.2f}; the attention weights move by at most {weights_gap:.1e}.")
    else:
        st.caption(f"This model scores with {cfg.score!r}; the bars show plain dot products. With cosine scores "
                   f"the query is rescaled to length 1 first, so a longer q does change them.")
    later = ("Move the query token later: once it sees as many keys as there are dimensions, the orthogonal "
             "direction disappears." if kind.causal else
             f"Type an input of more than {cfg.d_head} tokens in the sidebar: every query now sees that many keys, "
             f"they fill all {cfg.d_head} dimensions, and no orthogonal direction is left.")
    try_this("Drag the size to 10: the query is now more than ten times longer, and the green bars still sit "
             "exactly on the grey ones.", later,
             "Compare the orange bars: a random addition of the same length moves every score, because it has a "
             "part along the keys.")


# ---------------------------------------------------------------------------------------------
# The controls above the tabs, and the open tab
# ---------------------------------------------------------------------------------------------


def controls(sel: Selection) -> None:
    """One compact row (it wraps on a narrow screen): the attention kind (encoder-decoder only), layer and head;
    all in the URL. Each reruns only the sections of the open tab that read it."""
    cfg = sel.model.cfg
    with st.container(horizontal=True, vertical_alignment="bottom", gap="medium"):
        pick_kind(sel)
        pick_index(URL.layer, "Layer", cfg.n_layers, width=120)
        pick_index(URL.head, "Head", cfg.n_heads, width=120)


def draw(sel: Selection) -> None:
    """The tabs; only the open one is drawn. Its parts read the kind, layer and head from the session."""
    views = pick_view()
    with views[VIEW_SUB]:
        if views[VIEW_SUB].open:
            subspace_panel(sel)
    with views[VIEW_CIRC]:
        if views[VIEW_CIRC].open:
            circuits_panel(sel)
    with views[VIEW_PCA]:
        if views[VIEW_PCA].open:
            projection_panel(sel)
    with views[VIEW_ROLES]:
        if views[VIEW_ROLES].open:
            roles_panel(sel)
    with views[VIEW_ABL]:
        if views[VIEW_ABL].open:
            ablation_panel(sel)
    with views[VIEW_TOY]:
        if views[VIEW_TOY].open:
            toy_panel()
    with views[VIEW_ORTH]:
        if views[VIEW_ORTH].open:
            orthogonal_panel(sel)


def body(sel: Selection) -> None:
    """The controls above the tabs, then the open tab, whose sections the controls rerun by key (the open tab's
    alone); switching tabs reruns the page."""
    with S.group():
        controls(sel)
        draw(sel)
