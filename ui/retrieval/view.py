"""The Retrieval page's panels: attention as kernel smoothing, as a soft database that hardens into a
lookup, values tied to keys (V = K) on trained models, hijacking by a large-norm key and two
defences, where the equivalences hold, and which of values, queries and keys scales the output.
pages/retrieval.py calls them in reading order.

The numbers come from core.analysis.retrieval (math) and core.analysis.recall (models), the
cached runs and figures from ui.retrieval.runs.

What a click reruns: the five panels share nothing but the sidebar (the device the models run on),
so each panel holds a fragment (`@st.fragment`) and its controls redraw only that fragment: the points
preset, their table, x₀, |q| and the tilt (1, `kernel_smoother`); the database preset, its table, the
query direction and β (2, `lookup_sweep`); layer and head (3, `tied_span`: the pickers and the span
figure only); the scaled position, α and the model shown (4, `hijack_attack`); the stretch and |q|
(5, `equivalence_keys`); the factor c and the query (6, `linearity_curves`). A panel's heading, explanation and "Try this" sit outside its fragment, and so
do panel 3's accuracies and table over every head, so a click does not redraw them. The sidebar
reruns the whole page. A fragment rerun still writes its parameters to the URL.
"""

from __future__ import annotations

from functools import partial
from typing import Callable, Optional

import numpy as np
import pandas as pd
import streamlit as st
from streamlit.errors import StreamlitAPIException

from core.analysis import linearity as L
from core.analysis import retrieval as A
from ui.shell import models
from ui.retrieval import runs as R
from ui.shell.export import chart_config
from ui.shell.page import csv_download, lazy_expander, number_table, try_this, display_name
from ui.shell.params import Choice, Float, Int, Params, general
from ui.shell.sidebar import Selection

QUERY_NORMS = (1.0, 1.5, 2.0, 3.0, 5.0, 7.0, 10.0, 15.0, 20.0, 30.0, 50.0, 70.0, 100.0, 150.0, 200.0, 300.0,
               500.0, 700.0, 1000.0)
BETAS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0)
ALPHAS = (1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0)
BANDWIDTH_NORMS = (2.0, 5.0, 10.0, 30.0, 100.0, 300.0, 1000.0)
SWEEP_BETAS = np.logspace(-2, 3, 241)
RECALL_PAIRS = 5  # the recall models' training length: positions 0..9 hold the pairs
MODEL_NAMES = R.MODEL_NAMES
SCALE_FACTORS = (0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0)  # panel 6: what multiplies the values, queries or keys
HELD = 0.02  # a defence "held" when accuracy at the largest alpha stays within this of its clean accuracy

URL = Params(
    "retrieval",
    Choice("points", "sine", choices=A.PRESET_POINTS),
    Float("qx", 0.3, lo=0.0, hi=1.0, fmt=general),
    Float("qnorm", 30.0, lo=1.0, hi=1000.0, stops=QUERY_NORMS, log=True, fmt=general),
    Float("tilt", 0.0, lo=-2.0, hi=2.0, fmt=general),
    Choice("table", "spread", choices=tuple(A.PRESET_TABLES)),
    Float("angle", 0.0, lo=-180.0, hi=180.0, fmt=general),
    Float("beta", 1.0, lo=0.01, hi=1000.0, stops=BETAS, log=True, fmt=general),
    Int("layer", 1, lo=0, hi=1),
    Int("head", 0, lo=0, hi=1),
    Int("pos", 3, lo=0, hi=2 * RECALL_PAIRS - 1),
    Float("alpha", 100.0, lo=1.0, hi=1000.0, stops=ALPHAS, log=True, fmt=general),
    Choice("seen", "recall-decoder", choices=R.DEFENDED),
    Float("stretch", 1.0, lo=0.5, hi=5.0, fmt=general),
    Float("qn5", 5.0, lo=1.0, hi=1000.0, stops=QUERY_NORMS, log=True, fmt=general),
    Float("c", 2.0, lo=0.1, hi=10.0, stops=SCALE_FACTORS, log=True, fmt=general),
    Choice("lq", "real", choices=("real", "zero")),
)


def seed_url(sel: Selection) -> None:
    """Read every URL parameter before the title, so what was wrong with a link shows under it."""
    for param in URL:
        param.seed()


def csv_button(frame, name: str, key: str) -> None:
    """A download of one measured table or curve as CSV (a table, or a function that builds it on the press)."""
    csv_download(frame, f"{name}.csv", key)


def edited_table(label: str, build: Callable[[], pd.DataFrame], key: str, columns: dict,
                 open_key: str) -> Optional[pd.DataFrame]:
    """The table `build()` makes, as the student edited it (cells changed, rows added or deleted; the
    caller checks the result) in a table inside a closed expander; None while it is closed and was never
    edited (the preset as it is: no frame is built on every click). The table is built only while the expander is open
    (ui.shell.page.lazy_expander), so a closed one costs no editor on every click of its panel. The last
    edits are kept in the session: closing the expander keeps them, and opening it again starts a
    fresh editor on the edited table (Streamlit drops a widget's own state in a run that does not
    draw it). `open_key` keys the expander, one per panel, so it stays open when the preset changes."""
    kept, drawn = f"{key}.kept", f"{open_key}.editor"  # the table as last edited; the editor drawn last
    box = lazy_expander(label, open_key)
    if box is None:
        st.session_state.pop(drawn, None)
        return st.session_state.get(kept)
    editor = st.session_state.get(drawn)  # (table key, editor key, the table it started from)
    if editor is None or editor[0] != key:  # just opened, or another preset: a new editor on the last edits
        count = st.session_state[f"{open_key}.count"] = st.session_state.get(f"{open_key}.count", 0) + 1
        start = st.session_state[kept] if kept in st.session_state else build()
        editor = st.session_state[drawn] = (key, f"{key}.{count}", start)
    _, editor_key, start = editor
    config = {name: st.column_config.NumberColumn(name, help=text, format="%.3f") for name, text in columns.items()}
    with box:
        edited = st.data_editor(start, key=editor_key, num_rows="dynamic", column_config=config,
                                hide_index=True, width="stretch", height=min(300, 38 + 35 * (len(start) + 1)))
    st.session_state[kept] = edited
    return edited


# ---------------------------------------------------------------------------------------------
# 1. Kernel smoothing
# ---------------------------------------------------------------------------------------------


def points_table() -> tuple[np.ndarray, np.ndarray]:
    """The toy's points: a preset, edited in a table; a bad table falls back to the preset with a message.
    The preset and the table's expander share one row, so the first figure starts on the first screen."""
    pick, edit = st.columns(2, vertical_alignment="bottom")
    with pick:
        preset = URL.points.widget(st.segmented_control, "Points", required=True,
                                   help="A preset fills the table; edit any cell, add or delete rows (up to 64).")
    x0, y0 = A.preset_points(preset)
    with edit:
        frame = edited_table("Edit the points (x in [0, 1])", lambda: pd.DataFrame({"x": x0, "y": y0}),
                             f"retrieval.points_table.{preset}",
                             {"x": "position in [0, 1]", "y": "the value stored there"}, "retrieval.points_open")
    if frame is None:
        return A.check_points(x0, y0)
    try:
        return A.check_points(frame["x"].to_numpy(), frame["y"].to_numpy())
    except (ValueError, KeyError) as exc:
        st.error(f"The table cannot be used: {exc}. Showing the preset instead.")
        return x0, y0


def kernel_panel() -> None:
    """Panel 1: the kernel-smoothing reading; its heading, explanation and 'Try this' sit outside the fragment."""
    st.header("1. Attention is a kernel smoother")
    st.markdown("A query weighs each point by how near its key is: a kernel smoother.")
    with st.expander("Read more: why the two are the same function"):
        kernel_maths()
    kernel_smoother()
    kernel_try_this()


def kernel_maths() -> None:
    """Panel 1's full explanation and its two formulas, drawn inside the 'Read more' expander."""
    st.markdown(
        "Put points $(x_j, y_j)$ on a line and ask for the value at a new position. A **kernel smoother** "
        "(Nadaraya-Watson) answers with a weighted average of the $y_j$, the weights falling off with distance "
        "through a Gaussian. Attention does the same thing: the query is the new position, the keys are a fixed "
        "feature map of the $x_j$ (here a point on half a circle, $k_j = (\\cos\\pi x_j, \\sin\\pi x_j)$), and the "
        "values are the $y_j$. Because every key has length 1, $e^{q\\cdot k}$ differs from a Gaussian in "
        "$|q - k|$ only by factors that cancel in the softmax, so the two estimators are the same function. The "
        "query's norm $|q|$ is the inverse bandwidth: a longer query makes a narrower kernel.")
    st.latex(r"e^{q\cdot k} = e^{-|q-k|^2/2}\; e^{|q|^2/2}\; e^{|k|^2/2}")
    st.latex(r"\begin{gathered} \text{all } |k_j| \text{ equal},\ q = |q|\,u: \\ \operatorname{softmax}_j(q\cdot k_j) = "
             r"\frac{\exp(-|u-k_j|^2\,|q|/2)}{\sum_i \exp(-|u-k_i|^2\,|q|/2)} \end{gathered}")


def kernel_try_this() -> None:
    """Panel 1's prompts, under its figures and tables."""
    try_this(
        "Raise |q| from 5 to 500: the kernel narrows and the estimate follows the points more closely (and more "
        "noisily). The measured width falls like 1/√|q|.",
        "Read the last column of the bandwidth table: the prediction is a few percent off for a short query (a "
        "wide kernel is not yet a Gaussian: it wraps round the circle) and within a fraction of a percent from "
        "|q| ≈ 30 on.",
        "Set the tilt to 1: the blue and orange curves come apart, most where the keys' norms differ most from "
        "the query's side. Back to 0, the printed difference drops to about 1e-16.",
        "Pick the step preset and a large |q|: the estimate jumps sharply at 0.5. A small |q| blurs the step.")


@st.fragment  # local: the points, x₀, |q| and the tilt redraw only these controls, the figures and tables
def kernel_smoother() -> None:
    """The points, the query's controls, the kernel and the estimate. The bandwidth table does not read them,
    but it sits between the estimate's message and the downloads row (whose first button does), so it stays."""
    x, y = points_table()
    c1, c2, c3 = st.columns(3)
    qx = URL.qx.widget(c1.slider, "Query position x₀", step=0.01)
    qnorm = URL.qnorm.widget(c2.select_slider, "Query norm |q|", help="The kernel's inverse width.")
    tilt = URL.tilt.widget(c3.slider, "Key-norm tilt γ", step=0.1,
                           help="|k(x)| = exp(γ(x − ½)). 0 keeps every key on the unit circle; any other value "
                                "makes the keys' norms differ.")
    result = R.smoothing(x, y, float(qx), float(qnorm), float(tilt))
    left, right = st.columns(2)
    with left:
        st.plotly_chart(R.kernel_figure(x, result.weights, result.kernel_x, result.kernel_curve, float(qx),
                                        title=f"the kernel a query at x₀ = {qx:g} applies<br>(|q| = {qnorm:g})"),
                        key="retrieval.kernel", config=chart_config("retrieval", None, f"kernel-x{qx:g}-q{qnorm:g}"))
    with right:
        st.plotly_chart(R.estimate_figure(x, y, result.grid, result.attention, result.nadaraya_watson, result.nw_in_x,
                                          float(qx), title="the estimate at every x"), key="retrieval.estimate",
                        config=chart_config("retrieval", None, f"estimate-q{qnorm:g}"))
    if result.equal_norms:
        st.success(f"Keys of equal norm: attention and the key-space Nadaraya-Watson estimate differ by at most "
                   f"**{result.max_difference:.1e}** over the whole grid (rounding error). The kernel's variance in "
                   f"key space is 1/|q| = {A.kernel_variance(qnorm):.3g}.")
    else:
        st.warning(f"Keys of unequal norm (γ = {tilt:g}): the curves differ by up to **{result.max_difference:.3g}**, "
                   f"most at x = {result.worst_x:.2f}. "
                   f"The factor e^(|k|²·|q|/2) no longer cancels, so every query leans toward the "
                   f"{'right' if tilt > 0 else 'left'}, where the keys are longer, and more so the longer the query.")
    rows = list(R.bandwidths(BANDWIDTH_NORMS))
    st.markdown("**Bandwidth: read off the curve against predicted.** The kernel $e^{|q|\\cos\\pi(x-x_0)}$ is close to "
                "a Gaussian in $x$ of width $1/(\\pi\\sqrt{|q|})$ when that width is small (the small-angle picture); "
                "its measured width is its half width at half height divided by $\\sqrt{2\\ln 2}$.")
    number_table(rows, {"query norm |q|": "%g", "predicted width": "%.4f", "measured width": "%.4f",
                        "measured / predicted": "%.3f"})
    curves = partial(pd.DataFrame, {"x": result.grid, "attention": result.attention,  # built on a press
                                    "nadaraya_watson_key_space": result.nadaraya_watson,
                                    "nadaraya_watson_x": result.nw_in_x})
    c1, c2 = st.columns(2)
    with c1:
        csv_button(curves, "retrieval_estimates", "retrieval.csv_estimates")
    with c2:
        csv_button(rows, "retrieval_bandwidths", "retrieval.csv_bandwidths")


# ---------------------------------------------------------------------------------------------
# 2. Soft database to hard lookup
# ---------------------------------------------------------------------------------------------


def database_table() -> tuple[np.ndarray, np.ndarray]:
    """The database: a preset, edited in a table; a bad table falls back to the preset with a message."""
    preset = URL.table.widget(st.segmented_control, "Database", required=True,
                              format_func=lambda name: A.PRESET_TABLES[name])
    keys0, values0 = A.preset_table(preset)
    frame = edited_table("Edit the keys and values",
                         lambda: pd.DataFrame({"key x": keys0[:, 0], "key y": keys0[:, 1], "value": values0}),
                         f"retrieval.db_table.{preset}",
                         {"key x": "first coordinate", "key y": "second coordinate", "value": "what it returns"},
                         "retrieval.db_open")
    if frame is None:
        return A.check_table(keys0, values0)
    try:
        return A.check_table(frame[["key x", "key y"]].to_numpy(), frame["value"].to_numpy())
    except (ValueError, KeyError) as exc:
        st.error(f"The table cannot be used: {exc}. Showing the preset instead.")
        return keys0, values0


def lookup_panel() -> None:
    """Panel 2: the soft lookup; its heading, explanation and 'Try this' sit outside the fragment."""
    st.header("2. A soft database that hardens into a lookup")
    st.markdown(
        "Read attention as a database query. Every row holds a key and a value; the query scores every key, and "
        "the answer is a weighted mix of the values. With inverse temperature $\\beta$ near 0 the weights are "
        "equal and the answer is the mean of all values. As $\\beta$ grows, the key with the largest score takes "
        "over, until the answer is its value alone: a differentiable lookup turned into an exact one. When two keys "
        "tie for the largest score, neither can win and the answer stops halfway between their values.")
    st.latex(r"\begin{gathered} \text{out}(\beta) = \sum_j \frac{e^{\beta\, q\cdot k_j}}{\sum_i e^{\beta\, q\cdot k_i}}\, v_j"
             r"\;\xrightarrow{\ \beta\to 0\ }\; \frac{1}{n}\sum_j v_j \\ "
             r"\xrightarrow{\ \beta\to\infty\ }\; \frac{1}{|J^*|}\sum_{j\in J^*} v_j,\quad J^* = \arg\max_j q\cdot k_j "
             r"\end{gathered}")
    lookup_sweep()
    try_this(
        "Slide β from 0.01 to 1000: the output leaves the dotted mean line and settles on the best key's value; "
        "the entropy falls from ln n to 0.",
        "Choose the tie preset: two keys sit 30° either side of the query. The output stops at 4, halfway between "
        "2 and 6, and the best weight flattens at 0.5. Turn the query a few degrees and the tie breaks.",
        "Choose the long key preset: the arrow far from the query still wins at large β, because it has the largest "
        "dot product. Panel 5 asks when the winner is the nearest key.")


@st.fragment  # local: the database, the direction and β redraw only these controls and the two figures
def lookup_sweep() -> None:
    """The database, the query's direction and β, the keys with their weights and the sweep over β: all of
    it follows the table and the two sliders."""
    keys, values = database_table()
    c1, c2 = st.columns(2)
    angle = URL.angle.widget(c1.slider, "Query direction (degrees from the first axis)", step=1.0)
    beta = URL.beta.widget(c2.select_slider, "β (log scale)")
    result = R.sweep(keys, values, float(angle), SWEEP_BETAS)
    query = A.unit(float(angle))
    weights = A.attention_weights(beta * query, keys)
    labels = [f"v={v:g}" for v in values]
    left, right = st.columns(2)
    with left:
        st.plotly_chart(R.arrows_figure(keys, labels, query, tuple(int(i) for i in result.best), weights,
                                        title=f"keys (arrows), query (green);<br>weights at β = {beta:g}"),
                        key="retrieval.arrows", config=chart_config("retrieval", None, f"lookup-keys-beta{beta:g}"))
    with right:
        st.plotly_chart(R.sweep_figure(result.betas, result.output, result.best_weight, result.entropy,
                                       result.mean_value, result.limit_value, result.beta_one_hot, float(beta),
                                       title="from the mean of all values<br>to one value"), key="retrieval.sweep",
                        config=chart_config("retrieval", None, "lookup-beta-sweep"))
    output = float(weights @ values)
    if len(result.best) > 1:
        st.info(f"A tie: {len(result.best)} keys share the largest score, so the best weight never passes "
                f"{1 / len(result.best):.2f} and the output stops at their midpoint, {result.limit_value:g}.")
    else:
        st.info(f"At β = {beta:g} the output is {output:.4g} (mean of all values {result.mean_value:g}, best key's "
                f"value {result.limit_value:g}). The best key's weight passes {A.ONE_HOT} at β* = "
                f"{result.beta_one_hot:.4g}.")
    csv_button(partial(pd.DataFrame, {"beta": result.betas, "output": result.output, "best_weight": result.best_weight,
                                      "entropy_nats": result.entropy}), "retrieval_beta_sweep", "retrieval.csv_sweep")


# ---------------------------------------------------------------------------------------------
# 3. Keys address, values carry content
# ---------------------------------------------------------------------------------------------


def sidebar_model_note(sel: Selection) -> None:
    """For a checkpoint from a folder: one sentence on why panels 3 and 4 run the bundled recall models
    rather than it (the rest of the page uses no model at all)."""
    if models.is_text_model(sel.meta):
        st.info(f"Panels 3 and 4 run the bundled recall models, not {display_name(sel.model_id)}: they compare models trained "
                "with the same recipe and one change (values tied to keys, a defence against large keys), and they "
                "score each on a key-value recall task whose right answer is known, which free text does not have. "
                "Panels 1, 2 and 5 use no model.", icon=":material/info:")


def tied_panel(sel: Selection) -> None:
    """Panel 3: the tied and untied recall models. Only the span figure reads layer and head; the
    accuracies, the table over every head and the text around them sit outside the fragment."""
    st.header("3. Keys address, values carry content (V = K)")
    sidebar_model_note(sel)
    st.markdown(
        "A key says *where* to look; a value says *what* to bring back. Two models were trained on the same "
        "key-value recall task with the same recipe: one with its own value projection $W_V$, one whose values "
        "are its keys ($W_V$ tied to $W_K$). Each example stores letter-digit pairs and then asks for one letter, "
        "e.g. `a 3 c 7 b 1 <sep> c` → `7`. With tied values, whatever a head copies is a mix of the keys it "
        "matched on, so its output can never leave the span of those keys.")
    st.latex(r"\begin{gathered} z = \sum_j a_j v_j;\qquad V = K \;\Rightarrow\; z = \sum_j a_j k_j \in \operatorname{span}\{k_j\} \\ "
             r"\text{residual} = \frac{|z - P_K z|}{|z|} \end{gathered}")
    accuracies = {mid: R.clean_accuracy(mid, sel.device) for mid in R.TIED_PAIR}
    cols = st.columns(2)
    for col, mid in zip(cols, R.TIED_PAIR):
        col.metric(f"{MODEL_NAMES[mid]} ({mid})", f"{accuracies[mid]:.1%}",
                   help=f"accuracy on {R.N_ACCURACY} fresh recall examples")
    tied_span(sel)
    rows, tied_worst, untied_median = R.span_table(sel.device)
    number_table(rows, {"largest relative residual": "%.2e", "median relative residual": "%.2e"})
    st.markdown(
        f"**What you just saw.** Every head of the tied model writes inside the span of its keys (largest residual "
        f"{tied_worst:.1e}, rounding error), while the untied model's outputs leave it (median residual "
        f"{untied_median:.2f}): its values live in their own subspace. The tied model reaches {accuracies['recall-tied']:.1%} "
        f"against {accuracies['recall-decoder']:.1%}: one vector must now both match the query and carry the answer.")
    csv_button(rows, "retrieval_key_span", "retrieval.csv_span")
    try:
        st.page_link("pages/heads.py", label="Related: the Heads page", icon=":material/hub:")
        st.caption("The Heads page checks a related identity: orthogonal heads, (W_V^i)ᵀ W_V^j = 0, do not "
                   "interfere.")
    except StreamlitAPIException:  # run alone (not through app.py's navigation): no page registry
        st.caption("The Heads page checks a related identity: orthogonal heads do not interfere.")
    try_this(
        "Switch between the layers and heads: the orange points (tied) lie on the horizontal axis every time.",
        "Compare the two accuracies. With the same recipe and steps, the tied model has no separate place to "
        "carry the digit: the one vector per position must be found by the query and also hold the answer. "
        "How far above chance (one in five pairs) does it get?")


@st.fragment  # local: layer and head redraw only these two controls and the span figure
def tied_span(sel: Selection) -> None:
    """The layer and head pickers and one head's outputs split against the span of its keys: the only
    part of the panel that reads them."""
    c1, c2 = st.columns(2)
    layer = URL.layer.widget(c1.segmented_control, "Layer", required=True)
    head = URL.head.widget(c2.segmented_control, "Head", required=True)
    reports = {mid: R.span_report(mid, sel.device) for mid in R.TIED_PAIR}
    points = {f"{MODEL_NAMES[mid]}": (reports[mid].inside[layer, head], reports[mid].outside[layer, head])
              for mid in R.TIED_PAIR}
    st.plotly_chart(R.span_figure(points, title=f"layer {layer}, head {head}: each output z at the answer position,<br>"
                                                f"split against the span of the keys it could see"),
                    key="retrieval.span", config=chart_config("retrieval", None, f"tied-keys-span-l{layer}h{head}"))


# ---------------------------------------------------------------------------------------------
# 4. Hijacking by a large-norm key
# ---------------------------------------------------------------------------------------------


def hijack_panel(sel: Selection) -> None:
    """Panel 4: one huge key; its heading, explanation and 'Try this' sit outside the fragment."""
    st.header("4. Hijacking attention with one huge key")
    st.markdown(
        "A dot product grows with the length of the key, so one key made long enough outscores every other, "
        "whatever it means. Below, one position's keys are multiplied by $\\alpha$ in every layer and head of a "
        "trained recall model (a hook on this call only, `hook_k_raw`, before any clipping; the shared model is "
        "untouched), and the accuracy on 256 examples is measured. The same attack runs on two models trained "
        "with a defence: every key's norm clipped to 2, and cosine scores that ignore the key's length.")
    st.latex(r"\begin{gathered} k_p \leftarrow \alpha\, k_p:\qquad \text{dot: } q\cdot(\alpha k_p) = \alpha\, q\cdot k_p \\ "
             r"\text{clip: } |k_p| \le c,\qquad \text{cosine: } \cos(q, \alpha k_p) = \cos(q, k_p) \end{gathered}")
    hijack_attack(sel)
    try_this(
        "Raise α from 1 to 10 on the undefended model: heads whose query has a positive dot product with the "
        "scaled key swing to it (those with a negative one are pushed off it instead), and accuracy falls.",
        "Switch the heatmap to cosine scores: the column of the scaled key stays as it was for every α.",
        "Scale a letter position (even) and then a digit position (odd): which one hurts the undefended model "
        "more, and why might that be?")


@st.fragment  # local: position, α and the model shown redraw only the attack: controls, figures, table
def hijack_attack(sel: Selection) -> None:
    """The attack's controls, the accuracy curves and one pattern, and the measured table for the scaled
    position (which follows the position)."""
    c1, c2, c3 = st.columns(3)
    position = URL.pos.widget(c1.selectbox, "Position whose key is scaled",
                              format_func=lambda p: f"{p} ({'letter' if p % 2 == 0 else 'digit'} of pair {p // 2 + 1})")
    alpha = URL.alpha.widget(c2.select_slider, "α (log scale)")
    seen = URL.seen.widget(c3.selectbox, "Attention shown for", format_func=lambda m: f"{MODEL_NAMES[m]} ({m})")
    curves = {mid: R.hijack_curve(mid, sel.device, int(position)) for mid in R.DEFENDED}
    alphas = np.array(R.ALPHAS)
    accuracy = {MODEL_NAMES[m]: np.array([p.accuracy for p in curves[m]]) for m in R.DEFENDED}
    mass = {MODEL_NAMES[m]: np.array([p.mass for p in curves[m]]) for m in R.DEFENDED}
    st.plotly_chart(R.hijack_figure(alphas, accuracy, mass, float(alpha),
                                    title=f"scaling the key at position {position}"), key="retrieval.hijack",
                    config=chart_config("retrieval", None, f"hijack-position{position}"))
    point, pattern, tokens = R.hijack_example(seen, sel.device, int(position), float(alpha))
    st.plotly_chart(R.pattern_figure(pattern, tokens, title=f"{MODEL_NAMES[seen]}, α = {alpha:g}: last layer, "
                                                            f"mean over heads, first example"), key="retrieval.pattern",
                    config=chart_config("retrieval", seen, f"hijack-pattern-position{position}-alpha{alpha:g}"))
    st.caption(f"At α = {alpha:g}, {MODEL_NAMES[seen]}: accuracy {point.accuracy:.1%}; the answer position gives "
               f"{point.mass:.1%} of its attention to position {position}; every query after it gives "
               f"{point.mass_all_queries:.1%} on average.")
    summary, points = R.hijack_rows(sel.device, int(position))
    number_table(summary, {c: ("percent", 0.001) for c in summary[0] if c != "model"})
    st.markdown(hijack_verdict(summary))
    csv_button(points, "retrieval_hijack", "retrieval.csv_hijack")


def hijack_verdict(summary: tuple[dict, ...]) -> str:
    """One sentence per defence from the measured table (R.hijack_rows): did it hold, and what did it cost
    when clean."""
    clean = [float(row["clean accuracy"]) for row in summary]
    attacked = [float(list(row.values())[3]) for row in summary]  # the accuracy at the largest α
    lines = [f"**Measured.** Undefended: {clean[0]:.1%} clean, {attacked[0]:.1%} at the largest α."]
    for i in (1, 2):
        held = float(summary[i]["accuracy at α = 1"]) - attacked[i] <= HELD
        cost = clean[0] - clean[i]
        compared = "the same as" if abs(cost) < 0.0005 else f"{abs(cost):.1%} {'below' if cost > 0 else 'above'}"
        lines.append(f"{summary[i]['model']}: {'held' if held else 'did not hold'} "
                     f"({attacked[i]:.1%} at the largest α); its clean accuracy is {clean[i]:.1%}, "
                     f"{compared} the undefended model's.")
    return " ".join(lines)


# ---------------------------------------------------------------------------------------------
# 5. Where the equivalences hold
# ---------------------------------------------------------------------------------------------


def equivalence_panel() -> None:
    """Panel 5: where the equivalences hold; its heading, explanation and 'Try this' sit outside the fragment."""
    st.header("5. Where the equivalences hold")
    st.markdown(
        "Both slogans above have a condition. Attention weights equal Nadaraya-Watson weights only when every key "
        "has the same norm; then the kernel is a Gaussian around the query's direction $u$ with variance "
        "$1/(\\text{scale}\\cdot|q|)$. And the one-hot limit picks the key with the **largest dot product**, which "
        "is the **nearest** key only when the norms are equal. Stretch one key and watch both statements fail.")
    st.latex(r"\begin{gathered} \operatorname{softmax}_j(q\cdot k_j) = \operatorname{NW}_j \iff |k_j| \text{ equal} \\ "
             r"\arg\max_j q\cdot k_j = \arg\min_j |u - k_j| \iff |k_j| \text{ equal} \end{gathered}")
    equivalence_keys()
    try_this(
        "At stretch 1 the bars match to about 1e-16 and A (nearest) wins. Stretch B to 1.5: the bars part.",
        "Stretch B past 2 (its dot product 2·cos 60° passes A's cos 15°): the winner switches to B even though A "
        "is still the nearest key.",
        "Shrink B below 1: the kernel now favours B more than attention does, the other way round.")


@st.fragment  # local: the stretch and |q| redraw only these controls, the two figures and the verdict
def equivalence_keys() -> None:
    """The stretch of key B and |q|, the keys, attention against the Gaussian kernel and which key wins."""
    c1, c2 = st.columns(2)
    stretch = URL.stretch.widget(c1.slider, "Stretch of key B (1 = equal norms)", step=0.1)
    qnorm = URL.qn5.widget(c2.select_slider, "Query norm |q|")
    keys = A.stretched_keys(float(stretch))
    result = A.equivalence(keys, 0.0, float(qnorm))
    names = ["A", "B", "C"]
    labels = [f"{n} |k|={result.norms[i]:.2f}" for i, n in enumerate(names)]
    left, right = st.columns(2)
    with left:
        st.plotly_chart(R.arrows_figure(keys, labels, A.unit(0.0), (result.argmax_dot,), result.attention,
                                        title="the query's direction u and three keys"), key="retrieval.eq_arrows",
                        config=chart_config("retrieval", None, f"equivalence-keys-stretch{stretch:g}"))
    with right:
        st.plotly_chart(R.weights_figure(names, result.attention, result.kernel,
                                         title=f"attention against the Gaussian kernel<br>(variance {result.variance:.3g})"),
                        key="retrieval.eq_weights",
                        config=chart_config("retrieval", None, f"attention-vs-kernel-stretch{stretch:g}"))
    same = result.argmax_dot == result.nearest
    st.markdown(
        f"Largest difference between the two weightings: **{result.max_difference:.2e}**. The largest dot product "
        f"is key **{names[result.argmax_dot]}**, the nearest key to u is **{names[result.nearest]}**: "
        + ("the same key." if same else "not the same key, so a hard lookup here is not a nearest-neighbour search."))
    csv_button(partial(pd.DataFrame, {"key": names, "norm": result.norms, "attention": result.attention,
                                      "gaussian_kernel": result.kernel}), "retrieval_equivalence", "retrieval.csv_eq")


# ---------------------------------------------------------------------------------------------
# 6. What scales the output: the values, not the queries or keys
# ---------------------------------------------------------------------------------------------


def linearity_panel() -> None:
    """Panel 6: scale the values, then the queries, then the keys by a factor c, and see which scales the output;
    its heading, explanation and 'Try this' sit outside the fragment."""
    st.header("6. Scale the values, the queries or the keys")
    st.markdown(
        "The values enter attention once, after the softmax: multiply every value by c and the answer, a weighted "
        "mean of values with weights that did not move, is multiplied by c too. The queries and keys enter inside "
        "the softmax: multiplying them by c multiplies every score by c, which only sharpens (c > 1) or flattens "
        "(c < 1) the pattern. The answer then slides between the mean of all values and the best key's value; it "
        "does not grow with c. Below, one query against six keys with three-dimensional values (drawn at random, "
        "fixed), scaled by the c you pick.")
    st.latex(r"\begin{gathered}\operatorname{out}(q, K, cV) = c\,\operatorname{out}(q, K, V) \\ "
             r"\operatorname{out}(cq, K, V) = \operatorname{softmax}(c\,Kq)\,V \ne c\,\operatorname{out}(q, K, V)"
             r"\end{gathered}")
    linearity_curves()
    try_this(
        "Set c to 10: the values' marker sits at 10, the queries' near 1, because a sharper pattern only picks the "
        "best key's value instead of a mix.",
        "Pick the query of zeros: every score is 0 whatever c does to q or K, the pattern stays uniform, and the "
        "query and key curves lie flat at 1. Only the values still scale the answer.")


@st.fragment  # local: the factor and the query redraw only these controls, the figure and the numbers
def linearity_curves() -> None:
    """The factor c and the query, the three curves with c marked, and the output's scale at c."""
    c1, c2 = st.columns(2)
    factor = float(URL.c.widget(c1.select_slider, "Factor c (log scale)"))
    query = URL.lq.widget(c2.segmented_control, "Query", required=True,
                          format_func={"real": "a random query", "zero": "q = 0 (uniform pattern)"}.get)
    q, keys, values = L.example(seed=0, uniform=query == "zero")
    factors = np.union1d(L.FACTORS, [factor])  # the chosen c among the curve's points: its markers are exact
    curves = L.output_scale(q, keys, values, factors)
    st.plotly_chart(R.scale_figure(curves.factors, curves.ratio, factor,
                                   title="only the values scale the output"), key="retrieval.scale",
                    config=chart_config("retrieval", None, f"output-scale-c{factor:g}-{query}"))
    at = {which: float(curves.ratio[which][np.searchsorted(curves.factors, factor)]) for which in L.SCALED}
    st.markdown(f"At c = {factor:g} the output is multiplied by **{at['values']:.4g}** when the values are scaled, "
                f"by **{at['queries']:.4g}** when the queries are and by **{at['keys']:.4g}** when the keys are"
                + (" (the pattern is uniform: no factor on q or K changes it)." if curves.uniform else "."))


def not_found_note(missing: list[str]) -> None:
    """Say which bundled models are missing (a checkout without them) instead of failing."""
    st.error(f"The bundled recall models {', '.join(missing)} are missing; rebuild them with "
             f"`python -m core.train --only <id>`.")


def models_present(ids) -> bool:
    """Whether every bundled model the model panels need is in the manifest (else a message is shown)."""
    known = {e["id"] for e in models.manifest()}
    missing = [m for m in ids if m not in known]
    if missing:
        not_found_note(missing)
    return not missing


ALL_MODELS = tuple(dict.fromkeys(R.TIED_PAIR + R.DEFENDED))
