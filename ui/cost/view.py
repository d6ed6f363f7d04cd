"""The Cost page's panels: time against n for attention and a recurrent layer (launch-bound points marked and
left out of the slopes), sequential steps, path length and the gradient along that path, the memory of
training (attention and the RNN) and the bytes attention moves, the same counts at famous models' sizes, and
parameters, FLOPs and memory against depth and width. pages/cost.py calls them in reading order.

The measuring is core.analysis.cost's, cached per device and setting in ui.cost.runs; the figures
come from core.figures.cost.

Layout: the controls sit in one compact row right above the time chart, the page's first figure; each
section opens with a one- or two-sentence lead, its long explanation and equations one click away in an
expander (the time section's under its chart), so the figure starts on the first screen even at 1024x768.

What a click reruns: d, heads, b and the longest n feed the measured parts of every section, and
Measure again those of the time and steps sections: they are sections (ui.shell.sections:
`@S.section(..., reads=...)`) reading the setting from the session (`setting`), and a change reruns them
alone. The model-size picker sits inside the section it changes (`preset_counts`, which b reruns too).
"""

from __future__ import annotations

from typing import Optional

import streamlit as st
import torch
from streamlit.errors import StreamlitAPIException

from core.analysis import cost as A
from core.analysis import scaling as SC
from core.families import SIZE_PRESETS, SizePreset
from ui.cost import runs as R
from ui.shell import models, precomputed
from ui.shell.export import chart_config
from ui.shell.page import csv_download, number_table, rows_table, try_this, display_name
from ui.shell.params import Choice, Params
from ui.shell.sections import Sections
from ui.shell.sidebar import Selection

D_CHOICES = (16, 32, 64, 128, 256, 512)
HEAD_CHOICES = (1, 2, 4, 8)
BLOCK_CHOICES = (8, 16, 32, 64)
NMAX_CHOICES = (64, 128, 256, 512, 1024, 2048)  # 2,048: a training step of explicit attention stays < 1 GB
# On a GPU the small sizes are launch-bound (an H100 fitted explicit attention's slope at 1.52 and block-sparse's
# at -0.12 over n <= 2,048, issue 39): the sweep may go on to 16,384, where explicit attention's patterns fill
# about 8.6 GB (8 heads, float32). Not yet run on a GPU with these choices.
GPU_NMAX_CHOICES = NMAX_CHOICES + (4096, 8192, 16384)
GRADIENT_NS = (16, 32, 64, 128, 256)  # the gradient's path: float64 keeps 256 steps of fading finite (~1e-50)
N_MIN = 32
PRESET_NS = (256, 512, 1024, 2048, 4096, 8192, 16384, 32768)
RUN_KEY, REMEASURE_KEY = "cost.run", "cost.remeasure"

# The defaults show the page's headline on any machine: the predicted crossover n = d = 128 sits two doublings
# inside the sweep (32 ... 2,048), and the measured lines cross with room to spare. The RNN pays a fixed cost per
# step that n·d² leaves out, so they cross above n = d: at n ≈ 280-650 in seven runs on a busy 2-core machine,
# where explicit attention took 3-17× the RNN's time at the longest n. With d = 64, 4 heads and n up to 1,024 that
# was 1.4-2.7×, crossing at the last point or not at all ("none in range", seen here too). 8 heads add their h·n²
# softmax and patterns to attention's side; n up to 2,048 doubles the margin again (8 x 2,048² patterns, 128 MiB,
# fit no CPU cache). The default sweeps take about 6 s of one core where nothing shipped holds them.
URL = Params(
    "cost",
    Choice("d", 128, choices=D_CHOICES),
    Choice("heads", 8, choices=HEAD_CHOICES),
    Choice("b", 32, choices=BLOCK_CHOICES),
    Choice("nmax", 2048, choices=GPU_NMAX_CHOICES),  # the CPU offers NMAX_CHOICES only (`nmax_choices`)
    Choice("preset", "original", choices=tuple(SIZE_PRESETS)),
    Choice("gn", 64, choices=GRADIENT_NS),
    Choice("vary", "depth", choices=("depth", "width")),
)
S = Sections("cost")  # its sections say which of d, heads, b, nmax and run (Measure again) they read


def powers_of_two(lo: int, hi: int) -> tuple[int, ...]:
    """lo, 2 lo, 4 lo, ... up to hi: the sequence lengths of a sweep."""
    out, n = [], lo
    while n <= hi:
        out.append(n)
        n *= 2
    return tuple(out)


def nmax_choices(device: str) -> tuple[int, ...]:
    """The longest n offered: up to 16,384 on a GPU (past its launch-bound sizes), 2,048 elsewhere."""
    return GPU_NMAX_CHOICES if device == "cuda" else NMAX_CHOICES


def seed_url(sel: Selection) -> None:
    """Read the page's URL parameters before the title, so what was wrong with them shows under it (the model
    size may name the sidebar's checkpoint when it is one; the longest n depends on the device)."""
    for param in URL:
        if param is URL.preset and sidebar_preset(sel) is not None:
            param.seed(choices=(*SIZE_PRESETS, SIDEBAR_PRESET))
        elif param is URL.nmax:
            param.seed(choices=nmax_choices(sel.device))
        else:
            param.seed()


def controls(sel: Selection) -> A.Setting:
    """The sweep's controls in one compact row (it wraps where the screen is narrow): width d, heads, block b and
    the longest n, right above the time chart that reads all four. Each control reruns only the sections that
    read it, which read the setting from the session (`setting`); the setting returned is this full run's, of
    which the panels read only the device (a sidebar choice: full runs only)."""
    with st.container(horizontal=True, gap="medium", vertical_alignment="bottom"):
        d = URL.d.widget(st.select_slider, "width d", width=200,
                         help="d_model of attention and of the RNN. Attention costs about n²·d, the recurrent layer "
                              "n·d²: d moves the crossover.")
        heads = URL.heads.widget(st.segmented_control, "heads h", required=True, format_func=str,
                                 help="d is split over h heads of d/h; memory of the patterns grows with h.")
        b = URL.b.widget(st.segmented_control, "block b", required=True, format_func=str,
                         help="Block size of block-sparse attention and of the chunked attention's key blocks.")
        nmax = URL.nmax.widget(st.selectbox, "longest n", format_func=lambda n: f"{n:,}", width=110,
                               choices=nmax_choices(sel.device),
                               help="The sweep doubles n from 32 up to this (up to 16,384 on a GPU, where the "
                                    "small sizes only measure the kernel launch).")
    return A.Setting(ns=powers_of_two(N_MIN, nmax), d_model=d, n_heads=heads, block=b, device=sel.device)


def measured_note(device: str) -> None:
    """What 'measured' means on this page, and on which device: one click away under the time chart."""
    st.markdown(f"**What is measured, on a real `{device}`.** Every figure below marked *measured* was timed or "
                "counted by this app, never copied from a paper: on this server when you pick a setting nobody picked "
                "before or press **Measure again**, and for the settings a default visit or a lesson opens, on the "
                "machine that built this copy (each caption says which).")


def setting(device: str) -> A.Setting:
    """The setting the controls hold now, read from the session: a section that a control reruns sees the new
    value (its arguments are those of the page's last full run, where `controls` drew and checked them)."""
    return A.Setting(ns=powers_of_two(N_MIN, int(URL.nmax.now())), d_model=int(URL.d.now()),
                     n_heads=int(URL.heads.now()), block=int(URL.b.now()), device=device)


def measured_times(device: str) -> tuple[A.Setting, int, dict]:
    """(the setting now, the Measure again count, the time sweep at both): memoised, measured (with a progress
    bar) only the first time."""
    s, run = setting(device), st.session_state.setdefault(RUN_KEY, 0)
    return s, run, with_progress(R.time_sweep, s, run, label="Timing five attention layers and an RNN")


def remeasure() -> None:
    """Measure again's on_click: a new count for the time sweep (a fresh measurement), then a rerun of only the
    sections that read it ("run")."""
    st.session_state[RUN_KEY] = st.session_state.get(RUN_KEY, 0) + 1
    S.rerun("run")


def with_progress(fn, *args, label: str):
    """fn(*args), kept for every session; the first time with a progress bar while it measures."""
    if fn.has(*args):
        return fn(*args)
    bar = st.progress(0.0, text=label)
    token = R.SWEEP_PROGRESS.set(lambda fraction, text: bar.progress(min(1.0, fraction), text=f"{label}: {text}"))
    try:
        return fn(*args)
    finally:
        R.SWEEP_PROGRESS.reset(token)
        bar.empty()


def download(rows: list[dict], name: str, label: str = "Download CSV") -> None:
    """A CSV export of one measured table, written when the button is pressed (not on every rerun)."""
    csv_download(rows, f"glassbox-cost-{name}.csv", f"cost.csv.{name}", label)


def stamp(sweep: dict, shipped: Optional[str] = None) -> str:
    """Where and when a sweep was measured (`shipped`: ui.shell.precomputed's note when the build measured it)."""
    if shipped:
        return (f"A cached measurement, {shipped} (one CPU thread), shown to every student at this setting; "
                "**Measure again** times this server.")
    where = "this machine's CPU, one thread" if sweep["device"] == "cpu" else f"this machine's {sweep['device']}"
    return (f"Measured on {where}, {sweep['measured_at']}: a cached measurement, taken once per server for each "
            "setting and shown to every student.")


# ---------------------------------------------------------------------------------------------
# 1. Time against n
# ---------------------------------------------------------------------------------------------


def time_panel(s: A.Setting) -> None:
    """Section 1: measured time of every method against n, fitted slopes, and the attention-vs-RNN crossover.
    The chart comes first, under a one-line lead; what is timed, how, and the maths are one click away under it.
    `s`: the full run's setting, of which only the device is read."""
    st.header("1. Time: n²·d against n·d²")
    time_intro()
    time_measured(s.device)
    st.button("Measure again", key=REMEASURE_KEY, icon=":material/timer:", on_click=remeasure)
    try_this(
        "Move d from 128 to 512: the predicted crossover (grey dashes) moves right with d. Does the measured one?",
        "Read the slopes: explicit, fused and chunked should be near 2, block-sparse and the RNN near 1. Which "
        "line bends at small n, where fixed overheads hide the power law?",
        "Compare chunked with explicit: the same n²·d work, so the same slope; it pays a Python loop over key "
        "blocks. Its gain is memory (section 3), not time.",
        "Press **Measure again** and see how much the times move on a shared machine; the slopes move less.",
    )


@S.section("sweep.intro", reads=("nmax",))
def time_intro() -> None:
    """One line on what the chart below times, up to the longest n the control holds now (the full explanation
    is under the chart, `time_explained`)."""
    ns = powers_of_two(N_MIN, int(URL.nmax.now()))
    st.markdown(f"Five ways to compute one attention layer, and a recurrent layer, timed here for n from 32 to "
                f"{ns[-1]:,}. On these log-log axes a cost of n^p is a straight line of slope p.")


def time_explained(ns: tuple[int, ...], device: str) -> None:
    """What is timed, what 'measured' means on this device, and the maths: one click away under the chart."""
    with st.expander("How to read this chart: what is timed, and the maths"):
        st.markdown(
            "A self-attention layer compares every position with every other: n² scores of width d, so doubling the "
            "input quadruples the work. A recurrent layer does one d×d step per position: n·d². Attention is the "
            "cheaper of the two while n < d, and for sentences (n of a few hundred, d of 512 or more) it usually is. "
            "Below, five ways to compute one layer are timed here for n from 32 to "
            f"{ns[-1]:,}: the textbook **explicit** attention that builds the n×n matrix, PyTorch's **fused** "
            "`scaled_dot_product_attention`, **block-sparse** attention with blocks of b (n·b·d work), our "
            "**chunked** attention that never holds the n×n matrix (same n²·d work, less memory), and a tanh **RNN** "
            "of width d run one position after another. On log-log axes a cost of n^p is a straight line of slope p."
        )
        st.latex(r"\text{attention: } O(n^2 d) \qquad \text{recurrent: } O(n\, d^2)")
        st.latex(r"\frac{n^2 d}{n\, d^2} = \frac{n}{d} \;\Rightarrow\; \text{crossover at } n = d")
        measured_note(device)


def time_metrics(s: A.Setting, measured: Optional[float], advantage: float) -> None:
    """The time chart's three numbers under it, with labels short enough for a 1024-wide screen (the rest of
    what each means is in its help)."""
    m1, m2, m3 = st.columns(3)
    m1.metric("predicted crossover", f"{s.d_model:,}", help="Where n²·d = n·d², that is n = d.")
    m2.metric("measured crossover", "none in range" if measured is None else f"n ≈ {measured:,.0f}",
              help="Explicit attention against the RNN: where the explicit attention line rises above the RNN line "
                   "(interpolated on log-log axes).")
    m3.metric("fused speed-up", f"{advantage:.1f}×",
              help=f"At the longest n = {s.ns[-1]:,}: explicit time divided by fused scaled_dot_product_attention "
                   "time.")


@S.section("sweep.time", reads=("d", "heads", "b", "nmax", "run"))
def time_measured(device: str) -> None:
    """The time sweep at the setting the controls hold now: the crossovers, the chart, where it was measured, the
    slopes and the times (with their downloads)."""
    s, run, sweep = measured_times(device)
    summary = R.time_summary(s, run)
    slopes, measured = summary["slopes"], summary["crossover"]
    st.plotly_chart(R.time_figure(sweep["ns"], sweep["ms"], slopes, A.PREDICTED_TIME_SLOPE, s.d_model, measured,
                                  title=f"measured: d = {s.d_model}, {s.n_heads} heads of {s.d_head}, b = {s.block}",
                                  launch_bound=summary["launch_bound"]),
                    key="cost.chart.time",
                    config=chart_config("cost", None, f"time-d{s.d_model}-h{s.n_heads}-b{s.block}"))
    advantage = sweep["ms"][A.EXPLICIT][-1] / sweep["ms"][A.FUSED][-1]
    time_metrics(s, measured, advantage)
    time_explained(s.ns, device)
    warmups = A.warmup_calls(torch.device(sweep["device"]))
    if measured is None:
        cheaper = sweep["ms"][A.EXPLICIT][-1] < sweep["ms"][A.RNN][-1]
        st.info(f"The lines do not cross between n = {s.ns[0]} and {s.ns[-1]:,}: "
                + ("attention stays cheaper over the whole range." if cheaper else
                   "the RNN is cheaper over the whole range."))
    st.caption(stamp(sweep, precomputed.note(R.time_sweep, s, run)) + f" Median of {sweep['repeats']} calls each, batch 1, after {warmups} untimed warm-up "
               f"call{'s' if warmups > 1 else ''}. "
               "Attention here is the core only (scores, softmax, weighted sum), without the q, k, v and output "
               "projections, which cost n·d² like the RNN. Slopes are fitted over the largest three n whose time has "
               "started to grow: a ringed point is **launch-bound** (from it to the next n the time grows slower than "
               f"n^{A.LAUNCH_BOUND_SLOPE:g}), where fixed per-call overhead (Python, dispatch, a GPU's kernel launch) "
               "hides the power law, and it is left out of the fit. The RNN pays a "
               "fixed Python and dispatch cost on every step, which the n·d² count leaves out, so the measured "
               "crossover sits above n = d: constants matter as well as exponents. Where the n×n matrix stops fitting "
               "in the CPU's cache, explicit attention jumps, and its slope over that stretch comes out above 2.")
    if s.device == "cuda":
        st.info(f"On the GPU the fused kernel never writes the n×n matrix to memory: here it is {advantage:.1f}× "
                "faster than the explicit computation at the longest n, and the step-by-step RNN waits for one "
                "tiny kernel launch per position.")
    if sweep.get("out_of_memory_at"):
        st.info(f"The sweep stopped at n = {sweep['ns'][-1]:,}: n = {sweep['out_of_memory_at']:,} did not fit in the "
                f"{s.device}'s memory.")
    slope_rows = summary["slope_rows"]
    number_table(slope_rows, {"fitted slope": "%.2f", "predicted slope": "%g"})
    download(slope_rows, "slopes", "Download slopes (CSV)")
    table = summary["table"]
    number_table(table, {c: "%.3g" for c in table[0] if c != "n"}, width="stretch")
    download(table, "time", "Download times (CSV)")


# ---------------------------------------------------------------------------------------------
# 2. Sequential steps and path length
# ---------------------------------------------------------------------------------------------


def depth_link() -> None:
    """A link to the Depth page's layers-needed model (its URL when the page runs without navigation)."""
    try:
        st.page_link("pages/depth.py", label="Depth, section 4: how many layers until the last token hears the "
                                              "first", icon=":material/layers:")
    except StreamlitAPIException:  # st.page_link needs st.navigation's pages; run alone, use the URL
        st.markdown("See the **Depth** page (`/depth`), section 4, for how many layers it takes.")


def steps_panel(s: A.Setting) -> None:
    """Section 2: sequential operations and the longest path of one layer, RNN against attention. `s`: the full
    run's setting, of which only the device is read."""
    st.header("2. Waiting and distance: steps and path length")
    st.markdown("An RNN needs n steps in a row and n hops from the first position to the last; attention needs one "
                "of each. The RNN counts below were **counted** while it ran.")
    with st.expander("Read more: why steps and distance matter, and the maths"):
        st.markdown(
            "Time on one core is not the whole story. An RNN cannot start position t before position t − 1 is done, "
            "so a layer is n steps in a row, however many cores wait idle. Attention computes every pair at once: one "
            "step, spread over as many cores as there are. The same holds for distance: what position 0 says reaches "
            "position n − 1 through n − 1 applications of the RNN cell, each a chance to fade, but through one hop in "
            "any attention layer whose mask lets the pair attend. The RNN counts below were **counted** while it ran."
        )
        st.latex(r"\text{sequential steps: RNN } O(n),\ \text{attention } O(1)")
        st.latex(r"\text{path length: RNN } O(n),\ \text{attention } O(1)")
    steps_counted(s.device)
    st.markdown("With a mask that limits who may attend (a window, blocks), one layer no longer links every pair, "
                "and it takes several layers to connect the ends. The Depth page measures how many:")
    depth_link()
    try_this(
        "Raise the longest n in the controls: the RNN's steps double with every n, attention's stay at 1.",
        "On the Depth page, set H = 1 and double n: the layers needed grow by one per doubling, the RNN's path by n.",
    )
    gradient_panel()


def gradient_panel() -> None:
    """Section 2b: the last output's gradient with respect to every earlier input, measured on the tanh RNN timed
    above and on one attention layer of the same width: a long path fades, one hop does not."""
    st.subheader("What a long path does to the gradient")
    st.markdown(
        "A path of n − 1 steps is not only slow: learning has to send the gradient back along it. In the RNN, the "
        "gradient of the last output with respect to an input t positions back is a product of t Jacobians, one per "
        "step, each a tanh slope (at most 1) times the recurrent matrix, so it shrinks by about the same factor at "
        "every step: it **fades exponentially** with the distance. In attention the last position reads every input "
        "through one softmax, and the gradient reaching an input does not depend on how far back it sits. Below, "
        "both are **measured** on the same random inputs, as the size of the exact Jacobian ∂y_last/∂x_t "
        "(in float64, so the RNN's tiny values stay finite).")
    st.latex(r"\begin{gathered}\frac{\partial h_{n-1}}{\partial x_t} = W_x\, D_t \prod_{u=t+1}^{n-1} W_h D_u,\quad "
             r"D_u = \operatorname{diag}\!\big(1 - h_u^2\big) \\ "
             r"\frac{\partial y_{n-1}}{\partial x_t} = \frac{\partial}{\partial x_t}\sum_j \alpha_{n-1,j}\, x_j W_V W_O"
             r"\end{gathered}")
    gradient_measured()
    try_this(
        "Read the slope of the RNN's line on the log axis: the same factor is lost at every step, so the line is "
        "straight. How many orders of magnitude does it lose over 64 steps?",
        "Raise n to 256: at the default width the RNN's gradient falls to around 10⁻⁵⁰, while attention's stays in "
        "the same band at every distance.",
    )


@S.section("gradient.path", reads=("d", "heads", "gn"))
def gradient_measured() -> None:
    """The length picker and the gradient against distance for the width and heads the controls hold now."""
    n = URL.gn.widget(st.select_slider, "sequence length n for the gradient", width=320,
                      help="The last output's gradient is taken with respect to all n inputs.")
    d, heads = int(URL.d.now()), int(URL.heads.now())
    grads = R.gradient_by_distance(int(n), d, heads)
    st.plotly_chart(R.gradient_figure(grads["distance"], {A.RNN: grads[A.RNN], "attention": grads["attention"]},
                                      title=f"measured: d = {d}, {heads} heads, n = {n}"),
                    key="cost.chart.gradient", config=chart_config("cost", None, f"gradient-d{d}-h{heads}-n{n}"))
    far = int(n) - 1
    rnn_near, rnn_far = float(grads[A.RNN][-1]), float(grads[A.RNN][0])
    att = grads["attention"][:-1]  # every input but the last position's own (which also feeds its query)
    st.caption(f"The RNN's gradient falls from {rnn_near:.2g} at distance 0 to {rnn_far:.2g} at distance {far}: "
               f"a factor of about {(rnn_far / rnn_near) ** (1 / far):.2f} per step. Attention's stays between "
               f"{float(att.min()):.2g} and {float(att.max()):.2g} at distances 1 to {far}. Measured on this server's CPU "
               "in float64; random weights scaled by 1/√d (as the timed RNN's), inputs of unit variance, one seed.")


@S.section("sweep.steps", reads=("d", "heads", "b", "nmax", "run"))  # after the time sweep, which it reads
def steps_counted(device: str) -> None:
    """The steps and path lengths up to the longest n, with the RNN's steps counted in the time sweep at the
    setting the controls hold now (memoised: the time section has just measured it): chart, table, download."""
    s, run, sweep = measured_times(device)
    ns, rows = sweep["ns"], R.steps_rows(s, run)
    st.plotly_chart(R.steps_figure(ns, [r["RNN sequential steps"] for r in rows],
                                   [r["attention sequential steps"] for r in rows],
                                   [r["RNN longest path"] for r in rows], [r["attention longest path"] for r in rows],
                                   title=f"one layer, n from {ns[0]} to {ns[-1]:,}"), key="cost.chart.steps",
                    config=chart_config("cost", None, f"steps-and-paths-d{s.d_model}"))
    st.dataframe(rows_table(rows), hide_index=True, width="stretch")
    download(rows, "steps", "Download steps (CSV)")


# ---------------------------------------------------------------------------------------------
# 3. Memory
# ---------------------------------------------------------------------------------------------


def memory_panel(s: A.Setting) -> None:
    """Section 3: measured peak memory of a training step, explicit (keeps h n² patterns) against chunked. `s`:
    the full run's setting, of which only the device is read."""
    st.header("3. Memory: the h·n² patterns that training keeps")
    st.markdown("Training keeps every attention pattern for the backward pass, h·n² numbers per layer; chunked "
                "attention never holds them. Below: the peak memory of one forward + backward, **measured**.")
    with st.expander("Read more: how chunked attention avoids the n×n matrix, and the maths"):
        st.markdown(
            "To train, the backward pass needs every attention pattern of the forward pass: h·n² numbers per layer, "
            "so doubling the input quadruples the memory. Chunked attention (the FlashAttention idea) walks over the "
            "keys one block at a time, keeps a running maximum and a running sum per query, and rescales them when a "
            "new block raises the maximum, so it never holds more than a block of scores. Its backward pass "
            "recomputes each block's probabilities from one saved number per query (the log-sum-exp) instead of "
            "keeping them. Both give the same output within 1e-5; below is the peak memory of one forward + "
            "backward, **measured**."
        )
        st.latex(r"m_j = \max(m_{j-1}, \max_k s_k) \qquad \ell_j = \ell_{j-1} e^{m_{j-1} - m_j} + \sum_k e^{s_k - m_j}")
        st.latex(r"\text{memory: } O(h\,n^2) \to O(h\,n\,(d_\text{head} + b))")
    memory_measured(s.device)
    try_this(
        "Switch h from 8 to 4: explicit attention's memory halves (h·n²), chunked attention's too, but it stays a "
        "line of slope 1.",
        "Make the block b bigger: chunked attention holds h·n·b scores at a time, so its memory grows with b while "
        "explicit attention's does not move.",
        "Find the RNN's dotted line: it keeps one state of d numbers per step for its backward pass, n·d in all, "
        "a line of slope 1 that does not depend on h.",
    )
    traffic_panel()


def traffic_panel() -> None:
    """Section 3b: the bytes explicit and tiled attention move to and from main memory, counted from formulas
    beside the measured peak above: FlashAttention's gain is traffic, not only the memory it holds."""
    st.subheader("Memory traffic: the bytes read and written")
    st.markdown(
        "Holding less is half of FlashAttention's point; the other half is **moving** less. A GPU computes far faster "
        "than it reads and writes its main memory, so an attention layer's time is mostly the bytes it moves. "
        "Explicit attention writes the h·n² scores to memory, reads them back for the softmax, writes the "
        "probabilities and reads them again for the weighted sum. A tiled kernel keeps a block of b query rows and "
        "their scores in fast on-chip memory, so no n×n matrix ever reaches main memory; it pays instead by reading "
        "K and V once for every block of queries. The chart below **counts** those bytes from the formulas (one "
        "forward, float32); nothing here is timed.")
    st.latex(r"\begin{gathered}\text{explicit: } 4\,(4nd + 4hn^2) \qquad "
             r"\text{tiled: } 4\,\big(2nd + 2nd\,\lceil n/b\rceil + hn\big) \\ "
             r"\frac{\text{explicit}}{\text{tiled}} \to \frac{4hn^2}{2n^2 d / b} = \frac{2b}{d_\text{head}}"
             r"\end{gathered}")
    traffic_counted()
    try_this(
        "Raise the block b: every block of queries re-reads K and V, so bigger blocks mean fewer re-reads and the "
        "tiled line drops. A real kernel makes its blocks as large as the fast on-chip memory allows.",
        "Compare the ratio with the measured peak above: chunked attention in this app is written in PyTorch, one "
        "operation at a time, so its blocks do pass through main memory: it saves the memory held (the peak), but "
        "only a fused kernel (FlashAttention, or SDPA on a GPU) also saves the traffic counted here.",
    )


@S.section("sweep.traffic", reads=("d", "heads", "b", "nmax"))
def traffic_counted() -> None:
    """The counted bytes at the setting the controls hold now: chart, the ratio at the longest n, the table."""
    d, heads, b = int(URL.d.now()), int(URL.heads.now()), int(URL.b.now())
    ns = powers_of_two(N_MIN, int(URL.nmax.now()))
    rows = A.traffic_rows(ns, d, heads, b)
    st.plotly_chart(R.traffic_figure(rows, title=f"counted, not measured: d = {d}, {heads} heads, b = {b}"),
                    key="cost.chart.traffic", config=chart_config("cost", None, f"traffic-d{d}-h{heads}-b{b}"))
    st.caption(f"At n = {ns[-1]:,} explicit attention moves {rows[-1]['explicit MiB moved']:,.1f} MiB and the tiled "
               f"kernel {rows[-1]['tiled MiB moved']:,.1f} MiB: {rows[-1]['explicit ÷ tiled']:.1f}× fewer bytes "
               f"(2b / d_head = {2 * b / (d // heads):.1f} once n is large). Counts from the formulas above, for one "
               "forward pass in float32, not a measurement.")
    number_table(rows, {c: "%.3g" for c in rows[0] if c != "n"}, width="stretch")
    download(rows, "traffic", "Download byte counts (CSV)")


@S.section("sweep.memory", reads=("d", "heads", "b", "nmax"))
def memory_measured(device: str) -> None:
    """The memory sweep at the setting the controls hold now: chart, ratio and slopes, how it was measured, the
    table and its download."""
    s = setting(device)
    sweep = with_progress(R.memory_sweep, s, label="Measuring the memory of a training step")
    summary = R.memory_summary(s)
    slopes = summary["slopes"]
    st.plotly_chart(R.memory_figure(sweep["ns"], sweep["bytes"], sweep["patterns"], slopes, A.PREDICTED_MEMORY_SLOPE,
                                    title=f"measured peak of one training step: {s.n_heads} heads of {s.d_head}, "
                                          f"b = {s.block}"), key="cost.chart.memory",
                    config=chart_config("cost", None, f"memory-d{s.d_model}-h{s.n_heads}-b{s.block}"))
    table = summary["table"]
    m1, m2 = st.columns(2)
    m1.metric(f"explicit ÷ chunked at n = {s.ns[-1]:,}", f"{table[-1]['explicit ÷ chunked']:.1f}×")
    m2.metric("fitted slopes (explicit, chunked, RNN)",
              ", ".join(f"{slopes[m]:.2f}" for m in A.MEMORY_METHODS if m in slopes), help="Predicted: 2, 1 and 1.")
    how = ("the bytes of every tensor alive at once, counted as operations create and free them (a dispatch-mode "
           "tracker; exact and the same on every run)" if sweep["device"] == "cpu" else
           "the GPU allocator's peak above what was already allocated")
    st.caption(stamp(sweep, precomputed.note(R.memory_sweep, s)) + f" Memory is {how}; the inputs q, k, v are not counted. The dashed line is the "
               "patterns' own size, h·n² float32 numbers: explicit attention's peak sits a small factor above it "
               "(scores, probabilities and their gradients), chunked attention's far below it. The dotted line is "
               "the tanh RNN of width d, trained the same way: it keeps n states of d numbers.")
    if sweep.get("out_of_memory_at"):
        st.info(f"The sweep stopped at n = {sweep['ns'][-1]:,}: a training step at n = {sweep['out_of_memory_at']:,} "
                f"did not fit in the {s.device}'s memory.")
    number_table(table, {c: "%.3g" for c in table[0] if c != "n"}, width="stretch")
    download(table, "memory", "Download memory (CSV)")


# ---------------------------------------------------------------------------------------------
# 4. At the sizes of real models
# ---------------------------------------------------------------------------------------------


SIDEBAR_PRESET = "sidebar"  # the model-size choice that stands for the sidebar's checkpoint


def sidebar_preset(sel: Selection) -> Optional[SizePreset]:
    """The sizes of the sidebar's model when it is a checkpoint from a folder (a real model's sizes belong
    next to the famous ones); None for a bundled or trained toy model."""
    if not models.is_text_model(sel.meta):
        return None
    cfg = sel.model.cfg
    return SizePreset(f"{display_name(sel.model_id)} (the sidebar's checkpoint)", sel.model_id, str(cfg.n_layers), cfg.d_model,
                      cfg.n_heads, cfg.d_head, cfg.d_mlp)


def presets_panel(s: A.Setting, sel: Optional[Selection] = None) -> None:
    """Section 4: the same counts at the original Transformer's and BERT-base's sizes, and at the sidebar's
    model's when it is a checkpoint from a folder (b read from the session)."""
    own = sidebar_preset(sel) if sel is not None else None
    st.header("4. At the size of real models")
    st.markdown("The same counts, computed (not measured) at the sizes of two famous models"
                + (" and of the checkpoint in the sidebar" if own is not None else "")
                + ", for every attention map of a forward pass.")
    with st.expander("Read more: what is counted, and the maths"):
        st.markdown(
            "The measured curves above stay on sizes this machine can run in seconds (n ≤ 2,048, d ≤ 512, one "
            "layer). The counts below are computed, not measured, at the sizes of two famous models, for every "
            "attention map a forward pass makes (the original Transformer has 6 encoder layers and 6 decoder layers, "
            "each decoder layer with a self- and a cross-attention: 18 maps)."
        )
        st.latex(r"\text{FLOPs: } 4 n^2 d \text{ vs } 4 n d^2")
        st.latex(r"\text{kept for training: } 4\,\text{bytes} \times h\, n^2 \times \text{maps}")
    preset_counts(own, sel.model.cfg.max_len if own is not None else 0)


# local: the model size redraws only the picker, the counts, their chart, table and prompts
@S.section("sweep.presets", reads=("b",))  # the chunked counts hold blocks of b
def preset_counts(own: Optional[SizePreset] = None, context: int = 0) -> None:
    """The model-size picker and everything that reads it: the size's numbers, the counted curves, the table,
    its download and the prompts quoting its numbers (the explanation above is drawn once). The chunked counts
    hold blocks of the b the control holds now. `own`: the sidebar checkpoint's sizes (a choice of its own),
    `context` its longest input."""
    presets = dict(SIZE_PRESETS)
    if own is not None:
        presets[SIDEBAR_PRESET] = own
    name = URL.preset.widget(st.segmented_control, "model size", required=True, choices=tuple(presets),
                             format_func=lambda key: presets[key].short)
    p = presets[name]
    rows = A.preset_rows(p, PRESET_NS, int(URL.b.now()))
    m1, m2, m3 = st.columns(3)
    m1.metric("d_model, heads, layers", f"{p.d_model}, {p.n_heads}, {p.n_layers}")
    m2.metric("attention = RNN at n = d", f"{p.d_model:,}")
    at = next(r for r in rows if r["n"] == 8192)
    m3.metric("patterns at n = 8,192 (batch 1)", f"{at['patterns kept, MiB (all maps)'] / 1024:,.1f} GiB")
    if name == SIDEBAR_PRESET and context:
        st.caption(f"{own.short}'s context is {context:,} tokens, the longest input it was made for: the rows above "
                   f"n = {context:,} count what its attention would cost at lengths it never read. Its heads have width "
                   f"{p.d_head} and it keeps one pattern per query head, {p.n_heads} per layer.")
    st.plotly_chart(R.preset_figure(rows, title=f"{p.name}: counted, not measured"), key="cost.chart.preset",
                    config=chart_config("cost", None, f"preset-{name}"))
    number_table(rows, {"n": ("localized", 1), **{k: ("localized", 0.01) for k in rows[0] if k != "n"}},
                 width="stretch")
    download(rows, f"preset-{name}", "Download counts (CSV)")
    try_this(
        f"Find the n where attention's GFLOP pass the RNN's: exactly d_model ({p.d_model:,}).",
        f"At n = {rows[-1]['n']:,}, {p.name} would keep {rows[-1]['patterns kept, MiB (all maps)'] / 1024:,.0f} GiB "
        "of patterns for one example, against "
        f"{rows[-1]['chunked keeps, MiB (all maps)'] / 1024:,.1f} GiB chunked: this is why long-context models use chunked "
        "(flash) attention.",
    )


# ---------------------------------------------------------------------------------------------
# 5. Scaling with depth and width
# ---------------------------------------------------------------------------------------------


def scaling_panel() -> None:
    """Section 5: parameters, FLOPs and training memory against depth and width, measured on small models built
    here and counted at GPT-2's and BERT-base's sizes with the same formulas."""
    st.header("5. Scaling: depth and width")
    st.markdown(
        "Stacking layers multiplies every cost by the depth L: parameters, FLOPs and memory all grow in a straight "
        "line with L. Widening the stream is dearer: every projection and the MLP are d×d matrices, so parameters "
        "and most FLOPs grow with d², while attention's n²·d part grows only with d. Below, small decoders in GPT-2's "
        "layout are **built and measured here** (their tensors counted, torch's FLOP counter, the peak memory of a "
        "training step), beside the formulas' **counts**; the table under them uses the same formulas at the sizes "
        "of GPT-2 and BERT-base, which are **counted, not measured**.")
    st.latex(r"\begin{gathered}\text{parameters} \approx 12\,L\,d^2 + V d \\ "
             r"\text{FLOPs (forward, } n \text{ tokens)} = 24\,L\,n\,d^2 + 4\,L\,n^2 d + 2\,n\,d\,V \\ "
             r"\text{activations kept (16-bit)} = L\,n\,d\,\Big(34 + \frac{5\,h\,n}{d}\Big)\ \text{bytes}"
             r"\end{gathered}")
    scaling_measured()
    st.markdown("**At the sizes of published models: counted, not measured.** Parameters and FLOPs by the formulas "
                "that match the small models above exactly; activation memory by Korthikanti et al. (2022, eq. 1: "
                "16-bit training, batch 1, dropout masks included), at each model's full context.")
    large = SC.large_rows()
    number_table(large, {c: ("localized", 0.1 if "GFLOP" in c or "MiB" in c else 1) for c in large[0] if c != "model"},
                 width="stretch")
    download(large, "scaling-large", "Download counted sizes (CSV)")
    try_this(
        "Switch between depth and width: doubling L doubles the parameters; doubling d nearly quadruples them.",
        "Check GPT-2 small's 124,439,808 parameters in the table against the published 124M, then read how GPT-2 "
        "large reaches 774M: three times the layers and 1.7 times the width.",
    )


@S.section("scaling", reads=("vary",))
def scaling_measured() -> None:
    """The depth-or-width picker, the measured and counted curves and their table."""
    vary = URL.vary.widget(st.segmented_control, "vary", required=True,
                           format_func={"depth": f"depth (width {SC.SMALL_DEPTH_WIDTH})",
                                        "width": f"width ({SC.SMALL_WIDTH_DEPTH} layers)"}.get)
    rows = R.scaling_rows(vary)
    st.plotly_chart(R.scaling_figure(rows, vary, title=f"small models, {SC.SMALL_HEADS} heads, n = {SC.SMALL_N} "
                                                      f"tokens: measured and counted"),
                    key="cost.chart.scaling", config=chart_config("cost", None, f"scaling-{vary}"))
    st.caption(f"Measured on this server's CPU: decoders with a vocabulary of {SC.SMALL_VOCAB}, learned positions, "
               "biases on every projection and a tied unembedding (GPT-2's layout). FLOPs are torch's count of one "
               f"forward on {SC.SMALL_N} tokens; memory is the peak of tensors alive during one training step "
               "(forward + backward, float32, the weights not counted).")
    number_table(rows, {c: ("localized", 1 if c.startswith(("layers", "d_model", "parameters")) else 0.01)
                        for c in rows[0]}, width="stretch")
    download(rows, f"scaling-{vary}", "Download measured sizes (CSV)")


def default_measurements(device: str) -> list:
    """(memo, arguments) of what a default visit measures, for the server's warm-up (ui.server.warmup): the
    time and memory sweeps at the URL's defaults."""
    setting = A.Setting(ns=powers_of_two(N_MIN, URL.nmax.default), d_model=URL.d.default,
                        n_heads=URL.heads.default, block=URL.b.default, device=device)
    return [(R.time_sweep, (setting, 0)), (R.memory_sweep, (setting,))]
