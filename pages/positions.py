"""Positions: why attention needs them, what each scheme looks like, and what breaks when you swap them.

Thin page: widgets -> ui.positions_runs (memoised core.analysis / core.figures.positions). Panels in reading order:
the encodings, relative position in the sinusoidal table, RoPE, translation invariance, order
blindness without positions, a live scheme swap on the sidebar's model, and extrapolation.
"""

from __future__ import annotations

import math

import numpy as np
import streamlit as st

from core import positional
from core.analysis import positions as P
from core.figures import positions as F
from core.tasks import get_task
from ui import models, query, runs
from ui import positions_runs as R
from ui.page import header, try_this
from ui.sidebar import shared_sidebar

MAX_N = 256  # longest table / Gram matrix drawn (a 256 x 256 heatmap is still quick to send)
MAX_D = 256
BASES = [2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000, 1000000]
ROPE_D_HEAD = R.ROPE_D_HEAD  # the bundled models' head width: 8 rotated pairs
ROPE_MAX_POS = 64
SHIFT_KS = (1, 2, 5, 10, 50, 200)
EXT_LENGTHS = (4, 7, 10, 14, 20, 28, 40, 52)  # induction content lengths; rows are 2L+1 tokens
EXT_READY = "positions.ext_ready"  # the student asked for the extrapolation run (kept across reruns)
EXT_SAMPLES = 128
INDUCTION_IDS = {"none": "induction-none", "sinusoidal": "induction-sinusoidal",
                 "learned": "induction-learned", "rope": "induction-rope"}
SCHEME_TEXT = R.SCHEME_TEXT

# "dog bites man" pairs from bundled tasks: the same tokens in two orders, different right answers.
ORDER_PAIRS = {
    "agreement": ("agreement-encoder", "the dog near the cats <mask> loud", "the cats near the dog <mask> loud",
                  "Who is the subject? Same seven words; the verb must be 'is' for the dog and 'are' for the cats."),
    "brackets": ("brackets-encoder", "<cls> ( [ ] ) [ ( ) ]", "<cls> ( [ ) ] [ ( ] )",
                 "Same brackets, swapped order: the first string is balanced, the second is not."),
    "reverse": ("reverse-encdec", "1 2 3 4 5 6 7 8", "8 7 6 5 4 3 2 1",
                "Reverse the digits: the two sources hold the same digits, so the right outputs are mirror images."),
}


# ---------------------------------------------------------------------------------------------
# URL parsing helpers (untrusted values are clamped or snapped, with a note)


def _even(name: str, lo: int, hi: int):
    """An even integer URL parameter (rounded down to even, with a note)."""
    value = query.parse_int(name, lo, hi)
    if value is not None and value % 2:
        query.note(f"URL parameter {name}={value} must be even; using {value - 1}.")
        value -= 1
    return value


def _snap(name: str, options, lo: float, hi: float, log: bool = True):
    """A number from the URL snapped to the nearest allowed option (log distance for bases)."""
    value = query.parse_float(name, lo, hi)
    if value is None:
        return None
    dist = [abs(math.log(o) - math.log(value)) if log else abs(o - value) for o in options]
    best = options[int(np.argmin(dist))]
    if not math.isclose(best, value):
        query.note(f"URL parameter {name}={value:g} is not one of the slider's values; using {best:g}.")
    return best


def _bundled_ids() -> set[str]:
    """Ids of the models in the bundled manifest (panels that need one check it is there)."""
    return {e["id"] for e in models.manifest()}


# ---------------------------------------------------------------------------------------------
# The page

sel = shared_sidebar()
bundled = _bundled_ids()
native = sel.model.cfg.pos
swap_options = [s for s in positional.SCHEMES  # learned needs its own table, RoPE an even d_head
                if (s != "learned" or native == "learned") and (s != "rope" or sel.model.cfg.d_head % 2 == 0)]
n_layers, n_heads = sel.model.cfg.n_layers, sel.model.cfg.n_heads
neighbour_schemes = list(P.NEIGHBOUR_SCHEMES)
order_names = [k for k, v in ORDER_PAIRS.items() if v[0] in bundled]
ext_positions = {L: 2 * L + 1 for L in EXT_LENGTHS}

# All page state is seeded from the URL before the header shows the URL notes.
query.seed("positions.n", "pe_n", lambda p: query.parse_int(p, 8, MAX_N), 64)
query.seed("positions.d", "pe_d", lambda p: _even(p, 4, MAX_D), 64, valid=lambda v: v % 2 == 0)
query.seed("positions.base", "base", lambda p: _snap(p, BASES, 2, 1e6), 10000, valid=lambda v: v in BASES)
query.seed("positions.gram_of", "gram", lambda p: query.parse_choice(p, ["sinusoidal", "learned"]), "sinusoidal")
query.seed("positions.k", "k", lambda p: query.parse_int(p, -100, 100), 3)
query.seed("positions.rope_base", "rope_base", lambda p: _snap(p, BASES, 2, 1e6), 10000, valid=lambda v: v in BASES)
query.seed("positions.pair", "pair", lambda p: query.parse_int(p, 0, ROPE_D_HEAD // 2 - 1), 0)
query.seed("positions.m", "m", lambda p: query.parse_int(p, 0, ROPE_MAX_POS - 1), 9)
query.seed("positions.n_rope", "n", lambda p: query.parse_int(p, 0, ROPE_MAX_POS - 1), 4)
query.seed("positions.s", "s", lambda p: query.parse_int(p, -1000, 1000), 100)
query.seed("positions.t1", "t1", lambda p: query.parse_int(p, 0, 5000), 7)
query.seed("positions.t2", "t2", lambda p: query.parse_int(p, 0, 5000), 107)
query.seed("positions.window", "window", lambda p: query.parse_int(p, 1, 16), 6)
query.seed("positions.neigh", "neigh", lambda p: query.parse_choice(p, neighbour_schemes), "sinusoidal")
if order_names:
    query.seed("positions.order", "order", lambda p: query.parse_choice(p, order_names), order_names[0],
               valid=lambda v: v in order_names)
query.seed("positions.order_scheme", "order_pos", lambda p: query.parse_choice(p, ["none", "own"]), "none")
query.seed("positions.order_b", "order_b", lambda p: query.parse_choice(p, ["pair", "shuffle"]), "pair")
query.seed("positions.shuffle_seed", "shuffle", lambda p: query.parse_int(p, 0, 9999), 1)
default_swap = "none" if native != "none" else "sinusoidal"
query.seed("positions.swap", "swap", lambda p: query.parse_choice(p, swap_options), default_swap,
           valid=lambda v: v in swap_options)
query.seed_index("positions.layer", "layer", n_layers, 0)
query.seed_index("positions.head", "head", n_heads, 0)
if st.session_state.get(EXT_READY) is None:  # not `in`: that copies the whole session state
    st.session_state[EXT_READY] = query.parse_text("ext") is not None  # a shared link with ext= shows the curves
query.seed("positions.ext", "ext", lambda p: _snap(p, list(EXT_LENGTHS), 2, 52, log=False), 20,
           valid=lambda v: v in EXT_LENGTHS)

header(
    "Positions",
    "Attention compares every query with every key and adds up values, and none of that cares where a "
    "token sits. Shuffle the words and each word gets the same result as before, just in a new place: "
    "*dog bites man* and *man bites dog* look alike. A positional scheme breaks the tie. The **sinusoidal** "
    "scheme adds a fixed wave pattern to each token, a **learned** scheme adds a trained vector per "
    "position, and **RoPE** turns queries and keys by an angle that grows with position. Below you can see "
    "each scheme, check the algebra that makes them work, and swap schemes on trained models to watch "
    "what breaks.",
    r"x_p = E[t_p] + PE_p \qquad\qquad \mathrm{Attn}(\Pi X) = \Pi\,\mathrm{Attn}(X)\ \text{ when no position enters}",
)

# ---- 1. The encodings ------------------------------------------------------------------------------

st.header("1. What the encodings look like")
st.markdown(
    "The sinusoidal table gives position *p* one row of *d* numbers. Dimensions come in pairs: "
    "pair *i* is a sine and a cosine that turn at their own speed ω_i. The first pairs turn fast, "
    "once every 6 or so positions; the last pairs turn so slowly that they barely move over the whole "
    "input. Read across a row and you get a fingerprint of the position, like the hands of a clock "
    "running at many speeds at once. A learned table is just a trained matrix with one row per "
    "position, so it holds nothing for a position it was never given."
)
st.latex(r"PE_{p,\,2i} = \sin\!\left(\frac{p}{b^{2i/d}}\right),\quad PE_{p,\,2i+1} = \cos\!\left(\frac{p}{b^{2i/d}}\right),"
         r"\quad \omega_i = b^{-2i/d},\quad \lambda_i = 2\pi\, b^{2i/d}")
c1, c2, c3 = st.columns(3)
n = c1.slider("Sequence length n", 8, MAX_N, key="positions.n", help=f"Capped at {MAX_N} positions.")
d = c2.slider("Model width d (even)", 4, MAX_D, step=2, key="positions.d")
base = c3.select_slider("Base b", BASES, key="positions.base", format_func=lambda b: f"{b:,}")
table = R.sinusoidal_table(n, d, base)  # [n d]
left, right = st.columns(2)
with left:
    st.plotly_chart(R.encoding_figure(table, f"Sinusoidal table (n = {n}, d = {d}, b = {base:,})"),
                    key="positions.fig_table")
own_table = native == "learned" and not sel.model.is_encoder_decoder
learned_id = sel.model_id if own_table else INDUCTION_IDS["learned"]
learned = None
if own_table or learned_id in bundled:
    learned = R.learned_table(learned_id, sel.device)
with right:
    if learned is None:
        st.info("No model with a learned position table is installed (induction-learned is missing).")
    else:
        st.plotly_chart(R.encoding_figure(learned, f"Learned table of {learned_id} "
                                                   f"({learned.shape[0]} x {learned.shape[1]})", zmax=None),
                        key="positions.fig_learned")
        st.caption(f"Trained, not designed: whatever pattern it has was learned from the task, and there is no "
                   f"row at all for position {learned.shape[0]} or beyond. The colour range is this table's own "
                   f"largest value.")
st.plotly_chart(R.wavelength_figure(R.wavelengths(d, base), n,
                                    "Wavelength of each dimension pair (log scale)"), key="positions.fig_wavelengths")
try_this(
    "Set the base to 10: the slowest pair now repeats after about 60 positions, so with n = 256 rows far "
    "apart share fingerprints (look for repeating bands on the right of the table).",
    "Drop d to 8: only four pairs are left, and the table on the left becomes four sets of stripes.",
    "Compare the learned table with the sinusoidal one: does the learned one have any smooth structure?",
)

# ---- 2. Relative position in the sinusoidal table -----------------------------------------------

st.header("2. Relative position: only the offset t − u matters")
st.markdown(
    "Take the dot product of two rows of the table. Each pair contributes "
    "sin·sin + cos·cos, which is the cosine of the difference of the angles, so the whole product is a "
    "sum of cosines of ω_i (t − u): the absolute positions drop out. The Gram matrix PE·PEᵀ is "
    "therefore constant along every diagonal. A second fact makes offsets easy to learn: moving every "
    "row by k positions is one fixed linear map M_k (a rotation inside each pair), the same for all p."
)
st.latex(r"PE_t\cdot PE_u = \sum_i \cos\big(\omega_i (t-u)\big)")
st.latex(r"PE_{p+k} = M_k\, PE_p,\qquad "
         r"M_k = \mathrm{diag}_i\begin{pmatrix}\cos k\omega_i & \sin k\omega_i\\ -\sin k\omega_i & \cos k\omega_i\end{pmatrix}")
options_gram = ["sinusoidal"] + (["learned"] if learned is not None else [])
if st.session_state["positions.gram_of"] not in options_gram:
    st.session_state["positions.gram_of"] = "sinusoidal"
gram_of = st.radio("Gram matrix of", options_gram, key="positions.gram_of", horizontal=True,
                   format_func=lambda v: f"the sinusoidal table above (n={n}, d={d})" if v == "sinusoidal"
                   else f"the learned table of {learned_id}")
gram, profile, closed = (R.sinusoidal_gram(n, d, base) if gram_of == "sinusoidal"
                         else R.learned_gram(learned_id, sel.device))
left, right = st.columns(2)
with left:
    st.plotly_chart(R.gram_figure(gram, "Gram matrix PE · PEᵀ"), key="positions.fig_gram")
with right:
    st.plotly_chart(R.profile_figure(profile["offsets"], profile["mean"], profile["lo"], profile["hi"], closed,
                                     "Each diagonal against t − u"), key="positions.fig_profile")
st.metric("Largest spread inside one diagonal (max − min)", f"{profile['spread']:.2e}",
          help="Zero (up to rounding) means the Gram matrix depends on t − u only.")

st.subheader("The shift map M_k")
k = st.slider("Offset k", -100, 100, key="positions.k")
m_k, err_k = R.shift_map(k, n, d, base)
left, right = st.columns([3, 2])
with left:
    st.plotly_chart(R.shift_matrix_figure(m_k, f"M_k for k = {k} (d = {d})"), key="positions.fig_mk")
with right:
    st.metric(f"max |PE(p+{k}) − M_k PE(p)| over p = 0..{n - 1}", f"{err_k:.1e}")
    st.dataframe(R.shift_table(tuple(sorted(set(SHIFT_KS) | {k})), n, d, base),
                 hide_index=True, key="positions.mk_table")
    st.caption("Computed in float64. The error is rounding only: the same matrix works for every position.")
try_this(
    "Switch the Gram matrix to the learned table: the diagonals are no longer constant (watch the spread number).",
    "Set k to 0: M_0 is the identity. Set k to 1 and hover the first block: cos ω_0 and sin ω_0 with ω_0 = 1.",
    "Make the base tiny (2): the profile on the right wiggles fast, yet each diagonal is still one number.",
)

# ---- 3. RoPE --------------------------------------------------------------------------------------

st.header("3. RoPE: turn q and k instead of adding a table")
st.markdown(
    "Rotary embeddings leave the residual stream alone. Inside attention, each pair of a query's "
    "dimensions is turned by the angle m·θ_i at position m, and each key pair by n·θ_i at position n. "
    "A dot product only sees the angle between two arrows, and that angle is (m − n)·θ_i plus whatever "
    "angle the unrotated pair had. So q·k depends on the offset m − n, not on m and n themselves. Below, "
    f"one random query and one random key (d_head = {ROPE_D_HEAD}, as in the bundled models) are placed at "
    "positions of your choice."
)
st.latex(r"R(m\theta_i) = \begin{pmatrix}\cos m\theta_i & -\sin m\theta_i\\ \sin m\theta_i & \cos m\theta_i\end{pmatrix},"
         r"\quad \theta_i = b^{-2i/d_{head}},\qquad (R_m q)\cdot(R_n k) = q^\top R_{n-m}\,k")
c1, c2, c3, c4 = st.columns(4)
rope_base = c1.select_slider("RoPE base b", BASES, key="positions.rope_base", format_func=lambda b: f"{b:,}")
pair = c2.slider("Dimension pair i", 0, ROPE_D_HEAD // 2 - 1, key="positions.pair")
m_pos = c3.slider("Query position m", 0, ROPE_MAX_POS - 1, key="positions.m")
n_pos = c4.slider("Key position n", 0, ROPE_MAX_POS - 1, key="positions.n_rope")
theta, trail_q, trail_k = R.rope_pair(rope_base, pair, ROPE_MAX_POS)  # trails: [pos 2]
track = list(range(ROPE_MAX_POS))
left, right = st.columns([3, 2])
with left:
    st.plotly_chart(R.rope_plane_figure(trail_q, trail_k, track, m_pos, n_pos,
                                        f"Pair {pair}: θ = {theta:.4f} rad per position "
                                        f"(a full turn every {2 * math.pi / theta:,.1f} positions)"),
                    key="positions.fig_rope_plane")
with right:
    part = float(trail_q[m_pos] @ trail_k[n_pos])
    st.metric(f"Pair {pair}'s share of q·k", f"{part:.4f}", help=f"At (m, n) = ({m_pos}, {n_pos}): the cosine of the angle between the arrows.")
    st.markdown(f"The angle between the two arrows is (m − n)·θ = {(m_pos - n_pos) * theta:.3f} rad plus the "
                f"angle the pair started with. Move m and n by the same amount: both arrows turn together.")
st.subheader("Shift both positions: q·k stays put")
s = st.slider("Shift s (added to m and n)", -1000, 1000, key="positions.s")
if m_pos + s < 0 or n_pos + s < 0:
    st.warning(f"m + s and n + s must not be negative (positions start at 0); using s = {-min(m_pos, n_pos)}.")
    s = -min(m_pos, n_pos)
before, after = R.rope_shift_check(m_pos, n_pos, s, rope_base)
c1, c2, c3 = st.columns(3)
c1.metric(f"q·k with q at {m_pos}, k at {n_pos}", f"{before:.6f}")
c2.metric(f"q·k with q at {m_pos + s}, k at {n_pos + s}", f"{after:.6f}")
c3.metric("Difference", f"{abs(after - before):.1e}")
grid = np.arange(0, 48)
scores = R.rope_grid(len(grid), rope_base)  # [m n]
marks = [(a, b) for a, b in ((m_pos, n_pos), (m_pos + s, n_pos + s)) if a in grid and b in grid]
st.plotly_chart(R.rope_score_figure(scores, list(grid), marks,
                                    "q·k for the same q and k at every (m, n): stripes along the diagonals"),
                key="positions.fig_rope_grid")
if len(marks) < 2:
    st.caption(f"The shifted cell ({m_pos + s}, {n_pos + s}) lies outside this 48 x 48 window; the stripes "
               "carry on forever, which is why the two numbers above agree.")
try_this(
    "Pick pair 0 and step m by one: the query arrow turns by a full radian each step. Pick pair 7: it barely moves.",
    "Set m = n: whatever the shift, q·k is the same number (the arrows keep their starting angle).",
    "Lower the RoPE base to 10: the slow pairs speed up and the stripes in the grid get narrower.",
)

# ---- 4. Translation invariance ------------------------------------------------------------------

st.header("4. Translation invariance: position 7 and position 107 see the same neighbourhood")
st.markdown(
    "Build attention from positions alone: the query at t scores its neighbours u = t − w .. t + w and a "
    "softmax turns the scores into weights. With the raw sinusoidal table (q = PE_t, k = PE_u) or with "
    "RoPE, the score depends on u − t only, so the pattern around position 7 is the pattern around 107. "
    "A trained layer does not use PE_t raw: it multiplies by W_Q and W_K first. For sinusoids those random "
    "projections spoil the exact sameness; RoPE keeps it, because it rotates after projecting."
)
st.latex(r"a_t(u) = \mathrm{softmax}_{u\in[t-w,\,t+w]}\ \frac{q_t\cdot k_u}{\sqrt d}")
st.latex(r"q_t\cdot k_u = f(u - t)\ \Rightarrow\ a_7(7+\delta) = a_{107}(107+\delta)")
c1, c2, c3, c4 = st.columns(4)
window = c3.slider("Window w (neighbours each side)", 1, 16, key="positions.window")
t1 = c1.number_input("First query position", 0, 5000, key="positions.t1")
t2 = c2.number_input("Second query position", 0, 5000, key="positions.t2")
neigh = c4.radio("Scores from", neighbour_schemes, key="positions.neigh")
fixed = []
if t1 < window:
    fixed.append(f"{t1}")
    t1 = window
if t2 < window:
    fixed.append(f"{t2}")
    t2 = window
if fixed:
    st.warning(f"A window of {window} needs the query at position {window} or later (there are no negative "
               f"positions); moved {', '.join(fixed)} to {window}.")
neigh_d = d if neigh != "rope" else ROPE_D_HEAD
neigh_base = base if neigh != "rope" else rope_base
offsets, w1 = R.neighbour_attention(neigh, int(t1), window, neigh_d, neigh_base)
_, w2 = R.neighbour_attention(neigh, int(t2), window, neigh_d, neigh_base)
left, right = st.columns([3, 1])
with left:
    st.plotly_chart(R.neighbour_figure(offsets, w1, w2, f"query at {t1}", f"query at {t2}",
                                       f"{neigh}: attention over neighbours (d = {neigh_d}, b = {neigh_base:,})"),
                    key="positions.fig_neigh")
with right:
    st.metric("Max difference", f"{np.abs(w1 - w2).max():.1e}", help="Largest gap between the two attention patterns.")
    st.caption("Sinusoidal uses the d and base of section 1; RoPE those of section 3.")
try_this(
    "Choose 'sinusoidal + projections': the two bar sets now differ. Then choose 'rope': identical again.",
    "Move the second query to 4000: the raw sinusoidal and RoPE patterns still match to rounding.",
)

# ---- 5. Order blindness -------------------------------------------------------------------------

st.header("5. Without positions, order is invisible")
st.markdown(
    "Run a bidirectional encoder with `pos=\"none\"`. Reorder its input and every token gets exactly the "
    "output row it had before, only in its new place: attention is **permutation equivariant**. Average "
    "the rows (mean pooling, as a sentence classifier might) and the two orders give one and the same "
    "vector: the model is **permutation invariant**, and it cannot answer any question whose answer "
    "depends on order. Turn the model's own positions back on and the symmetry breaks."
)
st.latex(r"\mathrm{Enc}(\Pi X) = \Pi\,\mathrm{Enc}(X),\qquad \tfrac1n \mathbf 1^\top \mathrm{Enc}(\Pi X) = "
         r"\tfrac1n \mathbf 1^\top \mathrm{Enc}(X)")
if not order_names:
    st.info("The bundled encoder models for this panel (agreement-encoder, brackets-encoder, reverse-encdec) "
            "are not installed.")
else:
    c1, c2, c3 = st.columns([2, 2, 2])
    order_name = c1.selectbox("Example pair", order_names, key="positions.order",
                              format_func=lambda k: f"{k} ({ORDER_PAIRS[k][0]})")
    scheme_choice = c2.radio("Run it with", ["none", "own"], key="positions.order_scheme", horizontal=True,
                             format_func=lambda v: "no positions" if v == "none" else "its own positions")
    b_mode = c3.radio("Second input", ["pair", "shuffle"], key="positions.order_b", horizontal=True,
                      format_func=lambda v: "the pair's other order" if v == "pair" else "a random shuffle")
    order_model_id, text_a, text_b, blurb = ORDER_PAIRS[order_name]
    order_model, order_meta = models.get_model(order_model_id, sel.device)
    own = order_model.cfg.pos
    tokens_a = text_a.split()
    if b_mode == "shuffle":
        seed_shuffle = c3.number_input("Shuffle seed", 0, 9999, key="positions.shuffle_seed")
        keep = order_model.cfg.arch == "encoder" and tokens_a[0].startswith("<")
        tokens_b = P.shuffled(tokens_a, int(seed_shuffle), keep_first=keep)
    else:
        tokens_b = text_b.split()
    st.markdown(f"{blurb}  \n**A:** `{' '.join(tokens_a)}`  \n**B:** `{' '.join(tokens_b)}`")
    st.dataframe(R.order_answers(order_model_id, sel.device, tuple(tokens_a), tuple(tokens_b),
                                 tuple(dict.fromkeys(["none", own]))),
                 hide_index=True, key="positions.order_answers")
    st.caption("With no positions the model must give A and B the same answer (same row, same prediction), "
               "so it cannot be right on both. With its own positions it can.")
    scheme = "none" if scheme_choice == "none" else own
    check, _, _ = R.order(order_model_id, sel.device, tuple(tokens_a), tuple(tokens_b), scheme)
    st.markdown(f"**Below: {order_model_id} run with {SCHEME_TEXT[scheme]}.**")
    c1, c2 = st.columns(2)
    c1.metric("Rows: max |out_B − shuffled out_A|", f"{check.row_error:.1e}",
              help="0 (up to float32 rounding) means B's output rows are A's rows, reordered.")
    c2.metric("Mean-pooled: max |pool(A) − pool(B)|", f"{check.pooled_error:.1e}",
              help="0 means the two orders give the same pooled vector.")
    left, right = st.columns(2)
    what = "encoder" if order_model.is_encoder_decoder else "output"
    with left:
        st.plotly_chart(R.row_distance_figure(check.distances, tokens_a, tokens_b,
                                              f"Distance of each {what} row of B to each of A"),
                        key="positions.fig_rows")
    with right:
        st.plotly_chart(R.pooled_figure(check.pooled_a, check.pooled_b, "mean of A's rows", "mean of B's rows",
                                        "Mean pooling: one vector per input"), key="positions.fig_pooled")
    st.caption("A '0' in a cell marks a row of B that equals a row of A (up to float32 rounding). With no "
               "positions every row of B has its twin. With positions each row also depends on where its token "
               "and the others sit, so the twins drift apart. (A causal decoder is left out on purpose: its "
               "mask already treats early and late tokens differently, even without positions.)")
try_this(
    "Pick the agreement pair with no positions: the model gives the dog and the cats the same verb. "
    "Switch to its own positions: both right.",
    "Choose 'a random shuffle' and change the seed: with no positions every row still finds its zero-distance twin.",
    "Pick the reverse pair: with no positions, the encoder-decoder writes the same digits for both sources.",
)

# ---- 6. Live swap on the sidebar's model -----------------------------------------------------------

st.header(f"6. Swap the scheme of {sel.model_id}")
st.markdown(
    f"The model in the sidebar was trained with **{SCHEME_TEXT[native]}**. The scheme is an argument of "
    "each forward pass here, so the same weights can be run with another one. The weights were tuned to "
    "the positions they saw; give them different ones and the attention heads that relied on position "
    "lose their footing. Compare one head's pattern and the task accuracy before and after."
)
st.latex(r"\text{model}(x;\ \text{pos}=\text{trained}) \quad\text{vs}\quad \text{model}(x;\ \text{pos}=\text{other})")
c1, c2, c3 = st.columns(3)
swap = c1.selectbox("Run it with", swap_options, key="positions.swap", format_func=lambda v: SCHEME_TEXT[v])
layer = c2.slider("Layer", 0, n_layers - 1, key="positions.layer") if n_layers > 1 else 0
head = c3.slider("Head", 0, n_heads - 1, key="positions.head") if n_heads > 1 else 0
prefix = "encoder." if sel.model.is_encoder_decoder else ""
name = f"{prefix}blocks.{layer}.attn.hook_pattern"
try:
    swap_runs = [(native, runs.run(sel, [name], pos=native)), (swap, runs.run(sel, [name], pos=swap))]
except ValueError as exc:
    st.error(f"This model cannot run with {swap!r}: {exc}")
    swap_runs = []
for i, (col, (scheme, run_out)) in enumerate(zip(st.columns(2), swap_runs)):
    with col:
        st.markdown(f"**{'Trained' if i == 0 else 'Swapped'}: {SCHEME_TEXT[scheme]}** ({prefix}layer {layer}, head {head})")
        st.plotly_chart(R.attention_figure(run_out[name][0, head], sel.tokens, sel.tokens),
                        key=f"positions.fig_swap_{i}")
        right_count, scored = R.scored_positions(sel.targets, run_out["logits"])
        if scored:
            st.caption(f"This input: {right_count} of {scored} scored positions right.")
acc_col, note_col = st.columns([3, 2])
try:
    acc_native = R.swap_accuracy(sel.model_id, sel.device, native, EXT_SAMPLES)
    acc_swap = R.swap_accuracy(sel.model_id, sel.device, swap, EXT_SAMPLES)
    with acc_col:
        st.plotly_chart(R.accuracy_figure([f"trained: {native}", f"swapped: {swap}"], [acc_native, acc_swap],
                                          [F.COLOURS[native], F.COLOURS[swap]],
                                          f"Accuracy on {EXT_SAMPLES} fresh examples"),
                        key="positions.fig_swap_acc")
    with note_col:
        st.metric(f"Accuracy change with {swap}", f"{acc_swap:.0%}", delta=f"{acc_swap - acc_native:+.0%}")
        st.caption(f"Scored with the task's own metric ({sel.task.metric} accuracy) on {EXT_SAMPLES} examples "
                   "the model never saw, at its training length.")
except ValueError as exc:
    st.warning(f"Could not score this model on fresh task examples: {exc}")
if sel.model.is_encoder_decoder:
    st.caption("For this encoder-decoder the pattern shown is the encoder's self-attention; the accuracy "
               "swaps the scheme in both stacks.")
try_this(
    "Pick induction-sinusoidal, layer 0: the stripe just below the diagonal (attention to the previous token, the "
    "first step of an induction circuit) fades when you swap to RoPE or to none.",
    "Pick induction-none and give it sinusoidal positions it never saw: does adding information help or hurt?",
    "Pick sort-decoder and remove its positions: sorting needs no order in the input, but the output side does.",
)

# ---- 7. Extrapolation --------------------------------------------------------------------------------

st.header("7. Longer than anything seen in training")
ext_ids = tuple((scheme, mid) for scheme, mid in INDUCTION_IDS.items() if mid in bundled)
manifest_rows = {e["id"]: e for e in models.manifest()}
train_len = int(manifest_rows.get(INDUCTION_IDS["sinusoidal"], {}).get("train_length",
                                                                      get_task("induction").default_length))
train_tokens = 2 * train_len + 1  # <bos> and two copies of the repeat
st.markdown(
    "The four induction models have the same size and training; only their scheme differs. They saw "
    f"repeats of up to {train_len} letters (inputs of up to {train_tokens} tokens). Here each is scored on "
    "longer repeats. A sinusoidal or RoPE model can at least *run* on any length, since its positions come "
    "from a formula; whether its heads still work there is another matter. A learned table simply has no "
    f"row for position {train_tokens} and beyond, so that model refuses."
)
st.latex(r"\text{learned: } PE_p \text{ exists for } p < L_{train} \text{ only};\qquad "
         r"\text{sinusoidal / RoPE: defined for every } p")
if not ext_ids:
    st.info("The induction models (induction-none, -sinusoidal, -learned, -rope) are not installed.")
elif not st.session_state[EXT_READY]:
    st.markdown(f"Scoring {len(ext_ids)} models at {len(EXT_LENGTHS)} lengths on {EXT_SAMPLES} examples each "
                "takes a few seconds, so it runs when you ask (and is then kept for everyone).")
    if st.button("Evaluate the induction models at every length", key="positions.ext_go", icon=":material/play_arrow:"):
        st.session_state[EXT_READY] = True
        st.rerun()
else:
    chart_data = R.curve_points(ext_ids, sel.device, EXT_LENGTHS, EXT_SAMPLES)
    st.plotly_chart(R.extrapolation_figure(chart_data, train_tokens,
                                           f"Induction accuracy against input length ({EXT_SAMPLES} examples a point)"),
                    key="positions.fig_ext")
    st.caption("x marks on the floor: the learned model refused those lengths (it was not scored as 0; it could not run).")
    ext_len = st.select_slider("Look at one length (repeat of up to L letters)", list(EXT_LENGTHS), key="positions.ext",
                               format_func=lambda L: f"L = {L} ({2 * L + 1} tokens)")
    ext_table, refusals = R.length_view(ext_ids, sel.device, EXT_LENGTHS, EXT_SAMPLES, ext_len)
    for refused_id, refused_at, error in refusals:
        st.error(f"**{refused_id}** at {refused_at} tokens: {error}", icon=":material/block:")
    st.dataframe(ext_table, hide_index=True, key="positions.ext_table")
try_this(
    f"Slide to L = {train_len}, the longest training length: all four should be near their best.",
    "Slide past it: which scheme degrades slowest? Is it the one with no positions at all?",
    f"In the sidebar pick induction-learned and type more than {train_tokens} tokens: the sidebar refuses it too.",
)

query.write(pe_n=n, pe_d=d, base=base, gram=gram_of, k=k, rope_base=rope_base, pair=pair, m=m_pos, n=n_pos,
            s=st.session_state["positions.s"], t1=st.session_state["positions.t1"],
            t2=st.session_state["positions.t2"], window=window, neigh=neigh,
            order=st.session_state.get("positions.order"), order_pos=st.session_state["positions.order_scheme"],
            order_b=st.session_state["positions.order_b"],
            shuffle=st.session_state["positions.shuffle_seed"] if st.session_state["positions.order_b"] == "shuffle" else None,
            swap=swap, layer=layer, head=head,
            ext=st.session_state["positions.ext"] if st.session_state[EXT_READY] else None)
