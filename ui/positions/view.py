"""The Positions page's panels, in reading order: the encodings, relative position in the sinusoidal
table, RoPE, translation invariance, order blindness without positions, a live scheme swap on the
sidebar's model, and extrapolation. pages/positions.py calls them one after another.

Kept in a module (not the page file) so it is compiled once per process. Every control is a URL
parameter of the `URL` table below; cached work comes from ui.positions.runs, numbers from
core.analysis.positions.

What a click reruns: the encodings' n, d and base and the RoPE base, pair, m and n (sections 1-4) are
read by sections (ui.shell.sections: `@S.section(..., reads=...)`), and a change reruns those alone; the
other panels' controls sit inside the fragment (`@st.fragment`) they change.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np
import streamlit as st

from core import positional
from core.analysis import positions as P
from core.figures import positions as F
from core.figures.long_patterns import pooled_note
from core.model import Transformer
from core.tasks import IGNORE, get_task
from ui.shell import models, query
from ui.positions import runs as R
from ui.shell.export import chart_config
from ui.shell.page import computed, try_this, display_name
from ui.shell.params import Choice, Float, Int, Params
from ui.shell.sections import Sections
from ui.shell.sidebar import Selection

MAX_N = 256  # longest table / Gram matrix drawn (a 256 x 256 heatmap is still quick to send)
MAX_D = 256
BASES = (2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000, 1000000)
ROPE_D_HEAD = R.ROPE_D_HEAD  # the bundled models' head width: 8 rotated pairs
ROPE_MAX_POS = 64
ROPE_GRID = 48  # the q.k grid shows positions 0..47
SHIFT_KS = (1, 2, 5, 10, 50, 200)
EXT_LENGTHS = (4, 7, 10, 14, 20, 28, 40, 52)  # induction content lengths; rows are 2L+1 tokens
EXT_READY = "positions.ext_ready"  # the student asked for the extrapolation run (kept across reruns)
EXT_SAMPLES = 128
INDUCTION_IDS = {"none": "induction-none", "sinusoidal": "induction-sinusoidal",
                 "learned": "induction-learned", "rope": "induction-rope"}
SCHEME_TEXT = P.SCHEME_TEXT
DECAY_WIDTHS = (16, 32, 64, 128)  # head widths offered for the bound and the random vectors
DECAY_SOURCE = "positions.decay_source"  # (model id, device, why) of the q and k the decay section uses

# "dog bites man" pairs from bundled tasks: the same tokens in two orders, different right answers.
ORDER_PAIRS = {
    "agreement": ("agreement-encoder", "the dog near the cats <mask> loud", "the cats near the dog <mask> loud",
                  "Who is the subject? Same seven words; the verb must be 'is' for the dog and 'are' for the cats."),
    "brackets": ("brackets-encoder", "<cls> ( [ ] ) [ ( ) ]", "<cls> ( [ ) ] [ ( ] )",
                 "Same brackets, swapped order: the first string is balanced, the second is not."),
    "reverse": ("reverse-encdec", "1 2 3 4 5 6 7 8", "8 7 6 5 4 3 2 1",
                "Reverse the digits: the two sources hold the same digits, so the right outputs are mirror images."),
}

# Every URL parameter of the page, once, in the order the page reads them. Session keys that predate
# the table keep their names (key=). Ranges that depend on the model (layer, head) or on what is
# installed (order, swap) are given when the widget is drawn.
URL = Params(
    "positions",
    Int("pe_n", 64, lo=8, hi=MAX_N, key="positions.n"),
    Int("pe_d", 64, lo=4, hi=MAX_D, step=2, key="positions.d"),
    Float("base", 10000, lo=2, hi=1e6, stops=BASES, log=True),
    Choice("gram", "sinusoidal", choices=("sinusoidal", "learned"), key="positions.gram_of"),
    Int("k", 3, lo=-100, hi=100),
    Float("rope_base", 10000, lo=2, hi=1e6, stops=BASES, log=True),
    Int("pair", 0, lo=0, hi=ROPE_D_HEAD // 2 - 1),
    Int("m", 9, lo=0, hi=ROPE_MAX_POS - 1),
    Int("n", 4, lo=0, hi=ROPE_MAX_POS - 1, key="positions.n_rope"),
    Int("s", 100, lo=-1000, hi=1000),
    Int("t1", 7, lo=0, hi=5000), Int("t2", 107, lo=0, hi=5000),
    Int("window", 6, lo=1, hi=16),
    Choice("neigh", "sinusoidal", choices=P.NEIGHBOUR_SCHEMES),
    Choice("order", "agreement", choices=tuple(ORDER_PAIRS)),
    Choice("order_pos", "none", choices=("none", "own"), key="positions.order_scheme"),
    Choice("order_b", "pair", choices=("pair", "shuffle")),
    Int("shuffle", 1, lo=0, hi=9999, key="positions.shuffle_seed"),
    Choice("swap", "none", choices=positional.SCHEMES),  # narrowed to what the model can run with
    Int("layer", 0, lo=0, hi=0), Int("head", 0, lo=0, hi=0),
    Float("ext", 20, lo=2, hi=52, stops=EXT_LENGTHS),
    Float("decay_base", 10000, lo=2, hi=1e6, stops=BASES, log=True),
    Choice("decay_d", 16, choices=DECAY_WIDTHS),
)
S = Sections("positions")  # its sections say which of the encodings' and RoPE's controls they read


# ---------------------------------------------------------------------------------------------
# What is installed, and reading the URL before the header
# ---------------------------------------------------------------------------------------------


def bundled_ids() -> set[str]:
    """Ids of the models in the bundled manifest (panels that need one check it is there)."""
    return {e["id"] for e in models.manifest()}


def order_names() -> tuple[str, ...]:
    """The order pairs whose model is installed."""
    bundled = bundled_ids()
    return tuple(k for k, v in ORDER_PAIRS.items() if v[0] in bundled)


def swap_choices(sel: Selection) -> tuple[tuple[str, ...], str]:
    """(schemes the sidebar's model can run with, the one offered first: none, or sinusoidal for a model
    trained without positions)."""
    native = sel.model.cfg.pos
    return tuple(P.swap_schemes(native, sel.model.cfg.d_head)), "none" if native != "none" else "sinusoidal"


def seed_url(sel: Selection) -> None:
    """Read every URL parameter of this page before anything is drawn, so problems are reported at the top.

    Each widget seeds itself again when it is made (a no-op once seeded); this only moves the first
    reading, and its notes, before the page header. A shared link with ext= opens the extrapolation
    curves (its run is otherwise started by a button).
    """
    for param in (URL.pe_n, URL.pe_d, URL.base, URL.gram, URL.k, URL.rope_base, URL.pair, URL.m, URL.n, URL.s,
                  URL.t1, URL.t2, URL.window, URL.neigh):
        param.seed()
    names = order_names()
    if names:
        URL.order.seed(choices=names)
    for param in (URL.order_pos, URL.order_b, URL.shuffle):
        param.seed()
    swaps, default_swap = swap_choices(sel)
    URL.swap.seed(choices=swaps, default=default_swap)
    URL.layer.seed(hi=sel.model.cfg.n_layers - 1)
    URL.head.seed(hi=sel.model.cfg.n_heads - 1)
    URL.decay_base.seed()
    URL.decay_d.seed()
    st.session_state[DECAY_SOURCE] = decay_source(sel)
    if st.session_state.get(EXT_READY) is None:  # not `in`: that copies the whole session state
        st.session_state[EXT_READY] = query.parse_text(URL.ext.name) is not None
    URL.ext.seed()


def base_text(b: float) -> str:
    """A base with thousands separators, as the sliders show it."""
    return f"{b:,}"


# ---------------------------------------------------------------------------------------------
# 1. The encodings
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Table:
    """What section 1 chose, which sections 2 and 4 reuse: the sinusoidal table's size and base."""

    n: int
    d: int
    base: float


def table_now() -> Table:
    """The table the controls of section 1 hold now, read from the session: a fragment that they rerun sees the
    new values (its arguments are those of the page's last full run, where `encodings_panel` drew them)."""
    return Table(URL.pe_n.now(), URL.pe_d.now(), URL.base.now())


def learned_source(sel: Selection) -> tuple[str, Optional[np.ndarray]]:
    """(model id, what the page draws of its learned position table, R.learned_view): the sidebar's model if it
    has one, else induction-learned."""
    own = sel.model.cfg.pos == "learned" and not sel.model.is_encoder_decoder
    learned_id = sel.model_id if own else INDUCTION_IDS["learned"]
    if own or learned_id in bundled_ids():
        return learned_id, R.learned_view(learned_id, sel.device)
    return learned_id, None


def learned_size(learned_id: str, device: str) -> tuple[int, int]:
    """(positions, dimensions) of a model's whole learned table (the page may draw less of it)."""
    return R.learned_table(learned_id, device).shape


def learned_bound(learned_id: str, device: str, shown: tuple[int, ...]) -> str:
    """'' when the whole table is drawn, else a sentence saying which part is (a checkpoint's table is big)."""
    rows, columns = learned_size(learned_id, device)
    if tuple(shown) == (rows, columns):
        return ""
    return (f" Drawn: its first {shown[0]:,} positions and {shown[1]:,} dimensions of {rows:,} x {columns:,} "
            f"(a heatmap of every cell would be slow to send).")


def encodings_panel(sel: Selection) -> tuple[str, Optional[np.ndarray]]:
    """The sinusoidal table with its n, d and base, the learned table beside it, and each pair's wavelength.
    Returns the learned table's model id and the table (None when no model with one is installed)."""
    st.header("1. What the encodings look like")
    st.markdown("Each position *p* gets one row of *d* numbers: pairs of sines and cosines, each pair turning at "
                "its own speed, like the hands of a clock running at many speeds at once.")
    with st.expander("Read more: the table and its formula"):
        st.markdown(
            "The sinusoidal table gives position *p* one row of *d* numbers. Dimensions come in pairs: "
            "pair *i* is a sine and a cosine that turn at their own speed ω_i. The first pairs turn fast, "
            "once every 6 or so positions; the last pairs turn so slowly that they barely move over the whole "
            "input. Read across a row and you get a fingerprint of the position, like the hands of a clock "
            "running at many speeds at once. A learned table is just a trained matrix with one row per "
            "position, so it holds nothing for a position it was never given."
        )
        st.latex(r"PE_{p,\,2i} = \sin\!\left(\frac{p}{b^{2i/d}}\right),\quad PE_{p,\,2i+1} = \cos\!\left(\frac{p}{b^{2i/d}}\right)")
        st.latex(r"\omega_i = b^{-2i/d},\quad \lambda_i = 2\pi\, b^{2i/d}")
    c1, c2, c3 = st.columns(3)
    URL.pe_n.widget(c1.slider, "Sequence length n", help=f"Capped at {MAX_N} positions.")
    URL.pe_d.widget(c2.slider, "Model width d (even)", step=2)
    URL.base.widget(c3.select_slider, "Base b", format_func=base_text)
    left, right = st.columns(2)
    with left:
        table_chart()
    learned_id, learned = learned_source(sel)
    with right:
        learned_table_view(learned_id, learned, sel.device)
    wavelength_chart()
    try_this(
        "Set the base to 10: the slowest pair now repeats after about 60 positions, so with n = 256 rows far "
        "apart share fingerprints (look for repeating bands on the right of the table).",
        "Drop d to 8: only four pairs are left, and the table on the left becomes four sets of stripes.",
        "Compare the learned table with the sinusoidal one: does the learned one have any smooth structure?",
    )
    return learned_id, learned


@S.section("encoding.table", reads=("pe_n", "pe_d", "base"))
def table_chart() -> None:
    """The sinusoidal table at the n, d and base the controls hold now."""
    t = table_now()
    st.plotly_chart(R.encoding_figure(R.sinusoidal_table(t.n, t.d, t.base),
                                      f"Sinusoidal table, b = {t.base:,}"),
                    key="positions.fig_table",
                    config=chart_config("positions", None, f"sinusoidal-table-n{t.n}-d{t.d}-b{t.base}"))


@S.section("encoding.wavelengths", reads=("pe_n", "pe_d", "base"))
def wavelength_chart() -> None:
    """Each dimension pair's wavelength at the d and base the controls hold now, against n."""
    t = table_now()
    st.plotly_chart(R.wavelength_figure(R.wavelengths(t.d, t.base), t.n,
                                        "Wavelength of each dimension pair (log scale)"), key="positions.fig_wavelengths",
                    config=chart_config("positions", None, f"wavelengths-d{t.d}-b{t.base}"))


def learned_table_view(learned_id: str, learned: Optional[np.ndarray], device: str = "cpu") -> None:
    """The learned position table as a heatmap in its own colour range (a big one: its first positions and
    dimensions, said under it), or a note that none is installed."""
    if learned is None:
        st.info("No model with a learned position table is installed (induction-learned is missing).")
        return
    rows, columns = learned_size(learned_id, device)
    st.plotly_chart(R.encoding_figure(learned, f"Learned table, {rows:,} x {columns:,}", zmax=None),
                    key="positions.fig_learned", config=chart_config("positions", learned_id, "learned-table"))
    st.caption(f"The position table of {learned_id}. Trained, not designed: whatever pattern it has was learned "
               f"from its training data, and there is no row at all for position {rows:,} or beyond, so the model "
               f"cannot read a longer input. The colour range is this table's own largest value."
               + learned_bound(learned_id, device, learned.shape))


# ---------------------------------------------------------------------------------------------
# 2. Relative position in the sinusoidal table
# ---------------------------------------------------------------------------------------------


def relative_panel(sel: Selection, learned_id: str, has_learned: bool) -> None:
    """Why only t − u matters: the Gram matrix and its diagonals, then the shift map M_k. `learned_id`: the
    model whose learned table the Gram matrix may show instead (`has_learned`: it is installed)."""
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
    gram_panel(sel, learned_id, has_learned)
    shift_panel()
    try_this(
        "Switch the Gram matrix to the learned table: the diagonals are no longer constant (watch the spread number).",
        "Set k to 0: M_0 is the identity. Set k to 1 and hover the first block: cos ω_0 and sin ω_0 with ω_0 = 1.",
        "Make the base tiny (2): the profile on the right wiggles fast, yet each diagonal is still one number.",
    )


@S.section("encoding.gram", reads=("pe_n", "pe_d", "base"))  # local: the Gram radio redraws only this section
def gram_panel(sel: Selection, learned_id: str, has_learned: bool) -> None:
    """The Gram matrix of the sinusoidal (or learned) table, and each diagonal against t − u."""
    t = table_now()
    rows = learned_size(learned_id, sel.device)[0] if has_learned else 0
    part = f" (its first {R.LEARNED_ROWS:,} of {rows:,} positions)" if rows > R.LEARNED_ROWS else ""
    labels = {"sinusoidal": f"the sinusoidal table above (n={t.n}, d={t.d})",
              "learned": f"the learned table of {learned_id}{part}"}
    gram_of = URL.gram.widget(st.radio, "Gram matrix of", horizontal=True, format_func=labels.get,
                              choices=("sinusoidal", "learned") if has_learned else ("sinusoidal",))
    gram, profile, closed = (R.sinusoidal_gram(t.n, t.d, t.base) if gram_of == "sinusoidal"
                             else R.learned_gram(learned_id, sel.device))
    left, right = st.columns(2)
    with left:
        st.plotly_chart(R.gram_figure(gram, "Gram matrix PE · PEᵀ"), key="positions.fig_gram",
                        config=chart_config("positions", learned_id if gram_of == "learned" else None,
                                            f"gram-{gram_of}" + (f"-n{t.n}-d{t.d}" if gram_of == "sinusoidal" else "")))
    with right:
        st.plotly_chart(R.profile_figure(profile["offsets"], profile["mean"], profile["lo"], profile["hi"], closed,
                                         "Each diagonal against t − u"), key="positions.fig_profile",
                        config=chart_config("positions", learned_id if gram_of == "learned" else None,
                                            f"gram-diagonals-{gram_of}"))
    st.metric("Largest spread inside one diagonal (max − min)", f"{profile['spread']:.2e}",
              help="Zero (up to rounding) means the Gram matrix depends on t − u only.")


@S.section("encoding.shift", reads=("pe_n", "pe_d", "base"))  # local: the offset k redraws only this section
def shift_panel() -> None:
    """M_k for the chosen offset k, and how closely it moves every row of the table by k."""
    t = table_now()
    st.subheader("The shift map M_k")
    k = URL.k.widget(st.slider, "Offset k")
    m_k, err_k = R.shift_map(k, t.n, t.d, t.base)
    left, right = st.columns([3, 2])
    with left:
        st.plotly_chart(R.shift_matrix_figure(m_k, f"M_k for k = {k} (d = {t.d})"), key="positions.fig_mk",
                        config=chart_config("positions", None, f"shift-map-k{k}-d{t.d}"))
    with right:
        st.metric("Largest error of M_k", f"{err_k:.1e}",
                  help=f"max |PE(p+{k}) − M_k PE(p)| over p = 0..{t.n - 1}")
        st.dataframe(R.shift_table(tuple(sorted(set(SHIFT_KS) | {k})), t.n, t.d, t.base),
                     hide_index=True, key="positions.mk_table")
        st.caption("Computed in float64. The error is rounding only: the same matrix works for every position.")


# ---------------------------------------------------------------------------------------------
# 3. RoPE
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rope:
    """What section 3 chose: the RoPE base, the dimension pair and the query and key positions."""

    base: float
    pair: int
    m: int
    n: int


def rope_now() -> Rope:
    """The RoPE controls of section 3 as they are now, read from the session: a fragment that they rerun sees the
    new values (its arguments are those of the page's last full run, where `rope_panel` drew them)."""
    return Rope(URL.rope_base.now(), URL.pair.now(), URL.m.now(), URL.n.now())


def rope_panel(sel: Optional[Selection] = None) -> None:
    """One query and one key turned pair by pair; then q·k under a common shift; the sidebar model's own RoPE
    (when it has one); then the decay bound."""
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
             r"\quad \theta_i = b^{-2i/d_{head}}")
    st.latex(r"(R_m q)\cdot(R_n k) = q^\top R_{n-m}\,k")
    c1, c2, c3, c4 = st.columns(4)
    URL.rope_base.widget(c1.select_slider, "RoPE base b", format_func=base_text)
    URL.pair.widget(c2.slider, "Dimension pair i")
    URL.m.widget(c3.slider, "Query position m")
    URL.n.widget(c4.slider, "Key position n")
    rope_plane()
    rope_shift_panel()
    st.markdown(rope_sources(sel))
    try_this(
        "Pick pair 0 and step m by one: the query arrow turns by a full radian each step. Pick pair 7: it barely moves.",
        "Set m = n: whatever the shift, q·k is the same number (the arrows keep their starting angle).",
        "Lower the RoPE base to 10: the slow pairs speed up and the stripes in the grid get narrower.",
    )
    if sel is not None:
        model_rope_panel(sel)
    decay_panel(st.session_state.get(DECAY_SOURCE) or decay_source(None))


ROPE_SHIFT = 100  # the model's own q and k moved by this many positions in its shift check
ROPE_SOURCES = ("RoPE was introduced by RoFormer (Su et al., 2021, *RoFormer: Enhanced Transformer with Rotary Position "
                "Embedding*) and is the position scheme of the LLaMA models (Touvron et al., 2023, *LLaMA: Open and "
                "Efficient Foundation Language Models*) and of the Llama-layout families that followed them (Qwen2, "
                "Mistral): no position table at all, every layer turns its queries and keys.")


def is_llama_rope(sel: Optional[Selection]) -> bool:
    """Whether the sidebar's model is a Llama-layout checkpoint that uses RoPE (opened from a folder)."""
    return sel is not None and sel.meta.get("family") == "llama" and sel.model.cfg.pos == "rope"


def rope_sources(sel: Optional[Selection]) -> str:
    """The scheme's sources, and where this page shows it on a real Llama-layout checkpoint."""
    if is_llama_rope(sel):
        return (f"{ROPE_SOURCES} The sidebar's model, {display_name(sel.model_id)}, is one: its own RoPE is "
                "described and checked below.")
    return (f"{ROPE_SOURCES} Open a Llama-layout checkpoint folder in the sidebar and this section describes its "
            "own RoPE (the base from its config's rope_theta, its pairing, partial rotary) and checks the "
            "relative-position property on its own queries and keys.")


def model_rope_panel(sel: Selection) -> None:
    """The sidebar model's own RoPE: which dimensions it turns together (its layout), its base and how many of a
    head's dimensions it turns, each checked against its hooks on the sidebar's input; or, for a checkpoint
    without RoPE, one sentence saying so."""
    cfg = sel.model.cfg
    if cfg.pos != "rope":
        if models.is_text_model(sel.meta):
            how = {"learned": "adds a learned position table to its embeddings (section 1 draws it)",
                   "sinusoidal": "adds the sinusoidal table to its embeddings (section 1)",
                   "none": "has no positional scheme at all"}[cfg.pos]
            st.info(f"{display_name(sel.model_id)} does not use RoPE: it {how}. The query and key above are the page's own "
                    "example.")
        return
    if sel.model.is_encoder_decoder:
        return
    r, half, d_head, base = cfg.rope_dim, cfg.rope_dim // 2, cfg.d_head, cfg.rope_base
    st.subheader(f"RoPE in {display_name(sel.model_id)}: its pairs, its base, its turned dimensions")
    halves = cfg.rope_layout == "halves"
    pairing = (f"dimension **i with dimension i + {half}** (i = 0 .. {half - 1}: the \"halves\" layout of Hugging "
               f"Face's Llama code, x·cos + rotate_half(x)·sin)" if halves else
               f"dimension **2i with 2i + 1** (i = 0 .. {half - 1}: the \"pairs\" layout drawn above)")
    turned = (f"all {d_head} dimensions of each head" if r == d_head else
              f"only the first r = {r} of each head's {d_head} dimensions (partial rotary); the other {d_head - r} "
              f"pass through unturned and add the same amount to q·k at every distance")
    st.markdown(
        f"{display_name(sel.model_id)} turns its queries and keys with base b = **{base:,g}** (read from its config"
        + (": `rope_theta`, the LLaMA family's name for it" if is_llama_rope(sel) else "") + ") and turns "
        f"{turned}. It pairs {pairing}. Pair i turns by m·θ_i at position m, θ_i = b^(−2i/{r}), as above. "
        + ("Only the pairing differs from the picture, so q·k still depends on m − n alone. The pairing is not a "
           "detail, though: the model's W_Q and W_K were trained for it, and turning (2i, 2i + 1) instead would be "
           "another function. " if halves else "")
        + "Below, RoPE is written out pair by pair from this description and checked against what the model "
          "itself turned on your text (every layer and head: `hook_q` before, `hook_rot_q` after, and the same for "
          "the keys).")
    a, b = ("x_i", f"x_{{i+{half}}}") if halves else ("x_{2i}", "x_{2i+1}")
    st.latex(rf"\begin{{pmatrix}} {a}' \\ {b}' \end{{pmatrix}} = "
             rf"\begin{{pmatrix}} \cos m\theta_i & -\sin m\theta_i \\ \sin m\theta_i & \cos m\theta_i \end{{pmatrix}}"
             rf"\begin{{pmatrix}} {a} \\ {b} \end{{pmatrix}},\quad \theta_i = {base:g}^{{-2i/{r}}},\ "
             rf"i = 0, \dots, {half - 1}")
    check = R.rope_check(sel.cache_key, ROPE_SHIFT)
    other = "pairs" if halves else "halves"
    names = {"halves": f"(i, i + {half})", "pairs": "(2i, 2i + 1)"}
    c1, c2, c3 = st.columns(3)
    c1.metric(f"Its pairing {names[cfg.rope_layout]}: error", f"{check.error[cfg.rope_layout]:.1e}",
              help="Largest |written-out RoPE − the model's hook_rot_q / hook_rot_k| over every layer, head and "
                   "token, relative to the largest value: float32 rounding.")
    c2.metric(f"The other pairing {names[other]}: error", f"{check.error[other]:.2f}",
              help="The same comparison with the other pairing: not the model's rotation at all.")
    m, n, shift = check.shift_at
    c3.metric(f"q·k at ({m}, {n}) and at ({m + shift}, {n + shift})",
              f"{check.shift[0]:.4f} / {check.shift[1]:.4f}",
              help=f"Layer 0, head 0: the query of token {m} ({sel.tokens[m]}) and the key of token {n} "
                   f"({sel.tokens[n]}), turned at their positions and again both moved by {shift}.")
    dims = np.stack(P.rope_pair_dims(cfg.rope_layout, r), axis=1)  # [pair 2]
    st.plotly_chart(R.wavelength_figure(R.model_wavelengths(sel.model_id, sel.device), cfg.max_len,
                                        f"Wavelength of each of its {half} turned pairs (log scale), against its "
                                        f"context", dims=dims, n_label="context"),
                    key="positions.fig_model_rope", config=chart_config("positions", sel.model_id, "rope-wavelengths"))
    slow = int((R.model_wavelengths(sel.model_id, sel.device) > cfg.max_len).sum())
    st.caption(f"Hover a bar for the two dimensions the pair turns. {slow} of its {half} pairs turn less than once "
               f"over its whole context of {cfg.max_len:,} tokens, so they can only tell near from far. RoPE is "
               f"defined at every position, but {display_name(sel.model_id)}'s context is {cfg.max_len:,} tokens, the longest input "
               f"it was made for: beyond that its heads meet angles they never saw.")


def decay_source(sel: Optional[Selection]) -> tuple[Optional[str], str, str]:
    """(model id whose q and k the decay section uses, its device, a sentence saying which and why): the
    sidebar's model when it uses RoPE, else the bundled induction-rope (None when that is not installed)."""
    if sel is not None and sel.model.cfg.pos == "rope":
        return sel.model_id, sel.device, f"the sidebar's model, {sel.model_id}, which uses RoPE"
    device = sel.device if sel is not None else "cpu"
    fallback = INDUCTION_IDS["rope"]
    if fallback not in bundled_ids():
        return None, device, f"none: the sidebar's model does not use RoPE and {fallback} is not installed"
    why = (f", because the sidebar's model ({sel.model_id}) uses {SCHEME_TEXT[sel.model.cfg.pos]}, not RoPE"
           if sel is not None else "")
    return fallback, device, f"the bundled {fallback} model{why}"


def decay_panel(source: tuple[Optional[str], str, str]) -> None:
    """RoFormer's upper bound on |q·k| against m − n, next to the mean |q·k| of random and of trained vectors."""
    st.subheader("Does RoPE make far-apart tokens score lower? Only the bound says so")
    st.markdown(
        "The RoPE paper (RoFormer) argues that attention fades with distance. Write pair i of q and of k as a "
        "complex number, so the score is the real part of a sum of $h_i = \\tilde q_i \\overline{\\tilde k_i}$, "
        "each turned by the angle $(m-n)\\theta_i$. Summing by parts (Abel summation) moves the distance into the "
        "partial sums $S_j$ of those turns and bounds $|q\\cdot k|$ by the largest step $|h_j - h_{j-1}|$ times "
        "$\\sum_j |S_j|$. The distance enters only through $\\sum_j |S_j|$, and that sum shrinks on average as "
        "m − n grows, because the turns point in more and more scattered directions. **That is a statement about "
        "the bound, not about the scores.** For random q and k the mean |q·k| stays flat at every distance: "
        "turning a random key gives just another random key. Whether a trained model's scores fade is up to its "
        "weights."
    )
    st.latex(r"(R_m q)^\top (R_n k) = \mathrm{Re}\sum_{i=0}^{d/2-1} h_i\, e^{\mathrm{i}(m-n)\theta_i}"
             r" = -\mathrm{Re}\sum_{j=1}^{d/2} S_j\,(h_j - h_{j-1})")
    st.latex(r"S_j = \sum_{i<j} e^{\mathrm{i}(m-n)\theta_i},\qquad h_{d/2} = 0")
    st.latex(r"\big|(R_m q)^\top (R_n k)\big| \le \max_j |h_{j} - h_{j-1}| \sum_{j=1}^{d/2} |S_j|")
    st.latex(r"\text{relative bound} = \frac{\sum_{j=1}^{d/2} |S_j(m-n)|}{\sum_{j=1}^{d/2} |S_j(0)|}"
             r" = \frac{\sum_j |S_j(m-n)|}{\tfrac{d}{4}\left(\tfrac{d}{2}+1\right)}")
    decay_curves(source)
    try_this(
        "Set d to 128 and b to 10,000 (the paper's setting): the black bound falls to about a quarter by m − n = 200, "
        "while the blue random curve stays on 1.",
        "Slide the base down to 10: the bound drops within a few positions and then wobbles: the fast pairs "
        "scatter the turns almost at once.",
        "Compare the dotted model curve with the bound: do the trained queries and keys really score far keys lower?",
    )


@st.fragment  # local: the base and head width redraw only these controls, the decay curves and their metrics
def decay_curves(source: tuple[Optional[str], str, str]) -> None:
    """The decay section's controls, the bound and the mean |q·k| curves, and their far-half numbers: all
    that reads the base and the head width (the derivation above and the prompts below are drawn once)."""
    model_id, device, why = source
    c1, c2 = st.columns(2)
    base = URL.decay_base.widget(c1.select_slider, "Base b (for all three curves)", format_func=base_text)
    d_head = URL.decay_d.widget(c2.radio, "Head width d (bound and random vectors)", horizontal=True)
    curves = R.decay(int(d_head), float(base), model_id, device)
    model_rel = None if curves.model_mean is None else curves.relative(curves.model_mean)
    model_width = ROPE_D_HEAD if model_id is None else models.get_model(model_id, device)[0].cfg.d_head
    st.plotly_chart(R.decay_figure(curves.distances, curves.bound, curves.relative(curves.random_mean),
                                   curves.random_mean, model_rel, curves.model_mean, int(d_head),
                                   f"{model_id} q, k (its d = {model_width})",
                                   f"RoPE with b = {base:,}: mean |q·k| over {R.DECAY_PAIRS:,} pairs, and the bound"),
                    key="positions.fig_decay", config=chart_config("positions", model_id, f"rope-decay-d{d_head}-b{base}"))
    st.caption(f"Queries and keys of a trained model: {why}, taken before RoPE turns them "
               f"({decay_inputs(model_id, device)}, a query paired only with keys of the key head it reads), then "
               "turned at this base. Each curve is divided by its own value at m − n = 0; "
               "hover for the raw mean." + own_base_note(model_id, device, float(base)))
    far = curves.distances >= len(curves.distances) // 2
    c1, c2, c3 = st.columns(3)
    far_from = int(curves.distances[far][0])
    c1.metric("Bound, far half", f"{curves.bound[far].mean():.2f}",
              help=f"The bound's mean over the far half, m − n from {far_from} on; 1 at distance 0.")
    c2.metric("Random |q·k|, far", f"{curves.relative(curves.random_mean)[far].mean():.2f}",
              help=f"Mean |q·k| of random vectors over the far half (m − n from {far_from} on), "
                   "relative to distance 0.")
    if model_rel is not None:
        c3.metric("Model |q·k|, far", f"{model_rel[far].mean():.2f}",
                  help=f"Mean |q·k| of the model's queries and keys over the far half (m − n from {far_from} on), "
                       "relative to distance 0.")


def decay_inputs(model_id: Optional[str], device: str) -> str:
    """What the model's queries and keys in the decay chart were read from, in words."""
    heads = "every self-attention head"
    if model_id is not None:
        cfg = models.get_model(model_id, device)[0].cfg
        total = cfg.n_layers * cfg.n_heads * (2 if cfg.arch == "encoder-decoder" else 1)
        if total > R.DECAY_HEADS:
            heads = f"{R.DECAY_HEADS} of its {total:,} self-attention heads, spread evenly over its layers"
    if model_id is not None and models.is_text_model(models.get_model(model_id, device)[1]):
        return f"its tokens in {R.DECAY_SAMPLES} example sentences, padding left out, {heads}"
    return f"{R.DECAY_SAMPLES} fresh task examples, {heads}"


def own_base_note(model_id: Optional[str], device: str, base: float) -> str:
    """A sentence on the model's own RoPE (base, pairing, turned width) when it differs from what the chart uses."""
    if model_id is None:
        return ""
    cfg = models.get_model(model_id, device)[0].cfg
    notes = []
    if float(cfg.rope_base) != base:
        notes.append(f"its own base is b = {cfg.rope_base:,g}, not the {base:,g} of the slider")
    if cfg.rope_layout == "halves":
        notes.append(f"its dimension i is paired with i + {cfg.rope_dim // 2}, as its RoPE pairs them")
    if cfg.rope_dim != cfg.d_head:
        notes.append(f"only its first {cfg.rope_dim} dimensions are turned, the rest add the same q·k at every "
                     f"distance")
    return f" For {model_id}: " + "; ".join(notes) + "." if notes else ""


@S.section("encoding.rope_plane", reads=("rope_base", "pair", "m", "n"))
def rope_plane() -> None:
    """Where one pair of q and of k lands at every position, with the chosen m and n marked."""
    rope = rope_now()
    rope_base, pair, m_pos, n_pos = rope.base, rope.pair, rope.m, rope.n
    theta, trail_q, trail_k = R.rope_pair(rope_base, pair, ROPE_MAX_POS)  # trails: [pos 2]
    left, right = st.columns([3, 2])
    with left:
        st.plotly_chart(R.rope_plane_figure(trail_q, trail_k, list(range(ROPE_MAX_POS)), m_pos, n_pos,
                                            f"Pair {pair}: θ = {theta:.4f} rad per position"),
                        key="positions.fig_rope_plane",
                        config=chart_config("positions", None, f"rope-plane-pair{pair}-m{m_pos}-n{n_pos}"))
    with right:
        part = float(trail_q[m_pos] @ trail_k[n_pos])
        st.metric(f"Pair {pair}'s share of q·k", f"{part:.4f}",
                  help=f"At (m, n) = ({m_pos}, {n_pos}): the cosine of the angle between the arrows.")
        st.markdown(f"Pair {pair} makes a full turn every {2 * math.pi / theta:,.1f} positions. "
                    f"The angle between the two arrows is (m − n)·θ = {(m_pos - n_pos) * theta:.3f} rad plus the "
                    f"angle the pair started with. Move m and n by the same amount: both arrows turn together.")


@S.section("encoding.rope_shift", reads=("rope_base", "m", "n"))  # local: the shift s redraws only it
def rope_shift_panel() -> None:
    """q·k before and after shifting both positions by s, and the q·k grid over (m, n)."""
    rope = rope_now()
    rope_base, m_pos, n_pos = rope.base, rope.m, rope.n
    st.subheader("Shift both positions: q·k stays put")
    s = URL.s.widget(st.slider, "Shift s (added to m and n)")
    if m_pos + s < 0 or n_pos + s < 0:
        st.warning(f"m + s and n + s must not be negative (positions start at 0); using s = {-min(m_pos, n_pos)}.")
        s = -min(m_pos, n_pos)
    before, after = R.rope_shift_check(m_pos, n_pos, s, rope_base)
    c1, c2, c3 = st.columns(3)
    c1.metric(f"q·k with q at {m_pos}, k at {n_pos}", f"{before:.6f}")
    c2.metric(f"q·k with q at {m_pos + s}, k at {n_pos + s}", f"{after:.6f}")
    c3.metric("Difference", f"{abs(after - before):.1e}")
    grid = np.arange(0, ROPE_GRID)
    marks = [(a, b) for a, b in ((m_pos, n_pos), (m_pos + s, n_pos + s)) if a in grid and b in grid]
    st.plotly_chart(R.rope_score_figure(R.rope_grid(len(grid), rope_base), list(grid), marks,
                                        "q·k for the same q and k at every (m, n): stripes along the diagonals"),
                    key="positions.fig_rope_grid", config=chart_config("positions", None, f"rope-scores-shift{s}"))
    if len(marks) < 2:
        st.caption(f"The shifted cell ({m_pos + s}, {n_pos + s}) lies outside this {ROPE_GRID} x {ROPE_GRID} "
                   "window; the stripes carry on forever, which is why the two numbers above agree.")


# ---------------------------------------------------------------------------------------------
# 4. Translation invariance
# ---------------------------------------------------------------------------------------------


def neighbour_positions(window: int, t1: int, t2: int) -> tuple[int, int]:
    """The two query positions, moved up to `window` (with a warning) when the window would reach below 0."""
    moved = [f"{t}" for t in (t1, t2) if t < window]
    if moved:
        st.warning(f"A window of {window} needs the query at position {window} or later (there are no negative "
                   f"positions); moved {', '.join(moved)} to {window}.")
    return max(t1, window), max(t2, window)


def neighbour_panel() -> None:
    """Attention built from positions alone around two query positions: the same pattern at 7 and 107."""
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
    neighbour_draws()
    try_this(
        "Choose 'sinusoidal + projections': the two bar sets now differ. Then choose 'rope': identical again.",
        "Move the second query to 4000: the raw sinusoidal and RoPE patterns still match to rounding.",
    )


@S.section("encoding.neighbours", reads=("pe_d", "base", "rope_base"))  # local: its controls redraw only it
def neighbour_draws() -> None:
    """The neighbours' controls, the two attention patterns and their largest gap: all that reads the window,
    the query positions and the score source, or section 1's d and base and section 3's RoPE base (the
    explanation above and the prompts below are drawn once)."""
    c1, c2, c3, c4 = st.columns(4)
    window = URL.window.widget(c3.slider, "Window w (neighbours each side)")
    t1 = URL.t1.widget(c1.number_input, "First query position")
    t2 = URL.t2.widget(c2.number_input, "Second query position")
    neigh = URL.neigh.widget(c4.radio, "Scores from")
    t1, t2 = neighbour_positions(window, t1, t2)
    t, rope = table_now(), rope_now()
    d, base = (t.d, t.base) if neigh != "rope" else (ROPE_D_HEAD, rope.base)
    offsets, w1 = R.neighbour_attention(neigh, int(t1), window, d, base)
    _, w2 = R.neighbour_attention(neigh, int(t2), window, d, base)
    left, right = st.columns([3, 1])
    with left:
        st.plotly_chart(R.neighbour_figure(offsets, w1, w2, f"query at {t1}", f"query at {t2}",
                                           f"{neigh}: attention over neighbours<br>d = {d}, b = {base:,}"),
                        key="positions.fig_neigh",
                        config=chart_config("positions", None, f"neighbours-{neigh}-queries{t1}-{t2}-w{window}"))
    with right:
        st.metric("Max difference", f"{np.abs(w1 - w2).max():.1e}", help="Largest gap between the two attention patterns.")
        st.caption("Sinusoidal uses the d and base of section 1; RoPE those of section 3.")


def encoding_sections(sel: Selection) -> None:
    """Sections 1 to 4 (the encodings, relative position, RoPE, neighbours), whose figures read the encodings'
    and RoPE's controls: each part that does is a section the controls rerun by key, so a change redraws those
    parts and nothing else."""
    with S.group():
        learned_id, learned = encodings_panel(sel)
        relative_panel(sel, learned_id, learned is not None)
        rope_panel(sel)
        neighbour_panel()


# ---------------------------------------------------------------------------------------------
# 5. Order blindness
# ---------------------------------------------------------------------------------------------


def order_panel(sel: Selection) -> None:
    """An encoder run on one input in two orders: with no positions, B's rows are A's rows reordered."""
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
    names = order_names()
    if not names:
        st.info("The bundled encoder models for this panel (agreement-encoder, brackets-encoder, reverse-encdec) "
                "are not installed.")
        URL.clear("order", "order_pos", "order_b", "shuffle")
    else:
        order_pair(sel, names)
    try_this(
        "Pick the agreement pair with no positions: the model gives the dog and the cats the same verb. "
        "Switch to its own positions: both right.",
        "Choose 'a random shuffle' and change the seed: with no positions every row still finds its zero-distance twin.",
        "Pick the reverse pair: with no positions, the encoder-decoder writes the same digits for both sources.",
    )


@dataclass(frozen=True)
class OrderPair:
    """The two inputs of section 5 and how to run them."""

    model_id: str
    model: Transformer  # the bundled model (shared: never changed)
    scheme_choice: str  # "none", or "own": the model's own scheme
    tokens_a: list[str]
    tokens_b: list[str]  # A in the other order, or shuffled
    blurb: str


def order_inputs(sel: Selection, names: tuple[str, ...]) -> OrderPair:
    """The pair's controls. B is the pair's other order, or A shuffled (an encoder's leading special
    token stays first)."""
    c1, c2, c3 = st.columns([2, 2, 2])
    order_name = URL.order.widget(c1.selectbox, "Example pair", choices=names,
                                  format_func=lambda k: f"{k} ({ORDER_PAIRS[k][0]})")
    scheme_choice = URL.order_pos.widget(c2.radio, "Run it with", horizontal=True,
                                         format_func=lambda v: "no positions" if v == "none" else "its own positions")
    b_mode = URL.order_b.widget(c3.radio, "Second input", horizontal=True,
                                format_func=lambda v: "the pair's other order" if v == "pair" else "a random shuffle")
    model_id, text_a, text_b, blurb = ORDER_PAIRS[order_name]
    model, _ = models.get_model(model_id, sel.device)
    tokens_a = text_a.split()
    if b_mode == "shuffle":
        seed = URL.shuffle.widget(c3.number_input, "Shuffle seed")
        keep = model.cfg.arch == "encoder" and tokens_a[0].startswith("<")
        tokens_b = P.shuffled(tokens_a, int(seed), keep_first=keep)
    else:
        URL.shuffle.clear()
        tokens_b = text_b.split()
    return OrderPair(model_id, model, scheme_choice, tokens_a, tokens_b, blurb)


@st.fragment  # local: the example pair, scheme and shuffle redraw only these controls, the answers and the check
def order_pair(sel: Selection, names: tuple[str, ...]) -> None:
    """The two inputs, what the model answers for each, and the equivariance check under one scheme: all that
    reads the pair, scheme and shuffle controls (the explanation above and the prompts below are drawn once)."""
    pair = order_inputs(sel, names)
    model_id, model, tokens_a, tokens_b = pair.model_id, pair.model, pair.tokens_a, pair.tokens_b
    own = model.cfg.pos
    st.markdown(f"{pair.blurb}  \n**A:** `{' '.join(tokens_a)}`  \n**B:** `{' '.join(tokens_b)}`")
    st.dataframe(R.order_answers(model_id, sel.device, tuple(tokens_a), tuple(tokens_b),
                                 tuple(dict.fromkeys(["none", own]))),
                 hide_index=True, key="positions.order_answers")
    st.caption("With no positions the model must give A and B the same answer (same row, same prediction), "
               "so it cannot be right on both. With its own positions it can.")
    scheme = "none" if pair.scheme_choice == "none" else own
    check, _, _ = R.order(model_id, sel.device, tuple(tokens_a), tuple(tokens_b), scheme)
    st.markdown(f"**Below: {model_id} run with {SCHEME_TEXT[scheme]}.**")
    c1, c2 = st.columns(2)
    c1.metric("Rows: max |out_B − shuffled out_A|", f"{check.row_error:.1e}",
              help="0 (up to float32 rounding) means B's output rows are A's rows, reordered.")
    c2.metric("Mean-pooled: max |pool(A) − pool(B)|", f"{check.pooled_error:.1e}",
              help="0 means the two orders give the same pooled vector.")
    left, right = st.columns(2)
    what = "encoder" if model.is_encoder_decoder else "output"
    with left:
        st.plotly_chart(R.row_distance_figure(check.distances, tokens_a, tokens_b,
                                              f"Distance of each {what} row<br>of B to each of A"),
                        key="positions.fig_rows", config=chart_config("positions", model_id, f"order-rows-{scheme}"))
    with right:
        st.plotly_chart(R.pooled_figure(check.pooled_a, check.pooled_b, "mean of A's rows", "mean of B's rows",
                                        "Mean pooling: one vector per input"), key="positions.fig_pooled",
                        config=chart_config("positions", model_id, f"order-pooled-{scheme}"))
    st.caption("A '0' in a cell marks a row of B that equals a row of A (up to float32 rounding). With no "
               "positions every row of B has its twin. With positions each row also depends on where its token "
               "and the others sit, so the twins drift apart. (A causal decoder is left out on purpose: its "
               "mask already treats early and late tokens differently, even without positions.)")


# ---------------------------------------------------------------------------------------------
# 6. Live swap on the sidebar's model
# ---------------------------------------------------------------------------------------------


def swap_panel(sel: Selection) -> None:
    """The sidebar's model run with its trained scheme and with another: one head's pattern and accuracy."""
    native = sel.model.cfg.pos
    st.header(f"6. Swap the scheme of {display_name(sel.model_id)}")
    st.markdown(
        f"The model in the sidebar was trained with **{SCHEME_TEXT[native]}**. The scheme is an argument of "
        "each forward pass here, so the same weights can be run with another one. The weights were tuned to "
        "the positions they saw; give them different ones and the attention heads that relied on position "
        "lose their footing. Compare one head's pattern and the task accuracy before and after."
    )
    st.latex(r"\text{model}(x;\ \text{pos}=\text{trained}) \quad\text{vs}\quad \text{model}(x;\ \text{pos}=\text{other})")
    note = context_note(sel)
    if note:
        st.info(note, icon=":material/straighten:")
    swap_draws(sel)
    if sel.model.is_encoder_decoder:
        st.caption("For this encoder-decoder the pattern shown is the encoder's self-attention; the accuracy "
                   "swaps the scheme in both stacks.")
    try_this(
        "Pick induction-sinusoidal, layer 0: the stripe just below the diagonal (attention to the previous token, the "
        "first step of an induction circuit) fades when you swap to RoPE or to none.",
        "Pick induction-none and give it sinusoidal positions it never saw: does adding information help or hurt?",
        "Pick sort-decoder and remove its positions: sorting needs no order in the input, but the output side does.",
    )


@st.fragment  # local: the swapped scheme, layer and head redraw only these controls, the patterns and the accuracy
def swap_draws(sel: Selection) -> None:
    """The swap's controls, one head's pattern under both schemes and the accuracy under both: all that reads
    the scheme, layer and head (the explanation above and the prompts below are drawn once)."""
    swap, layer, head = swap_controls(sel)
    swap_patterns(sel, swap, layer, head)
    swap_accuracy_panel(sel, swap)


def swap_controls(sel: Selection) -> tuple[str, int, int]:
    """(scheme to swap in, layer, head): a layer or head slider only when the model has more than one."""
    cfg = sel.model.cfg
    swaps, default_swap = swap_choices(sel)
    c1, c2, c3 = st.columns(3)
    swap = URL.swap.widget(c1.selectbox, "Run it with", choices=swaps, default=default_swap,
                           format_func=SCHEME_TEXT.get)
    picked = []
    for param, col, label, count in ((URL.layer, c2, "Layer", cfg.n_layers), (URL.head, c3, "Head", cfg.n_heads)):
        if count > 1:
            picked.append(param.widget(col.slider, label, hi=count - 1))
        else:  # one layer (or head): nothing to pick, but the URL still says which
            picked.append(param.seed(hi=0))
            param.write(picked[-1])
    return swap, picked[0], picked[1]


def swap_patterns(sel: Selection, swap: str, layer: int, head: int) -> None:
    """One head's pattern under the trained scheme and under the swapped one, side by side."""
    native = sel.model.cfg.pos
    prefix = "encoder." if sel.model.is_encoder_decoder else ""
    name = f"{prefix}blocks.{layer}.attn.hook_pattern"
    try:
        swap_runs = [(scheme, R.swap_view(sel.cache_key, name, scheme)) for scheme in (native, swap)]
    except ValueError as exc:
        st.error(f"This model cannot run with {swap!r}: {exc}")
        swap_runs = []
    for i, (col, (scheme, (patterns, top))) in enumerate(zip(st.columns(2), swap_runs)):
        with col:
            st.markdown(f"**{'Trained' if i == 0 else 'Swapped'}: {SCHEME_TEXT[scheme]}** "
                        f"({prefix}layer {layer}, head {head})")
            st.plotly_chart(R.attention_figure(patterns[head], sel.tokens, sel.tokens, narrow=True),
                            key=f"positions.fig_swap_{i}",
                            config=chart_config("positions", sel.model_id, f"{scheme}-positions-l{layer}h{head}"))
            right_count, scored = scored_count(sel.targets, top)
            if scored:
                what = "next tokens" if models.is_text_model(sel.meta) else "scored positions"
                st.caption(f"This input: {right_count} of {scored} {what} right.")
    pooled = pooled_note(len(sel.tokens), len(sel.tokens))
    if pooled and swap_runs:
        st.caption(pooled)


def scored_count(targets, top: np.ndarray) -> tuple[int, int]:
    """(right, scored): how many of an input's scored positions the top tokens `[pos]` get right."""
    if targets is None:
        return 0, 0
    scored = [p for p, t in enumerate(targets) if t != IGNORE and p < len(top)]
    return sum(int(top[p]) == int(targets[p]) for p in scored), len(scored)


def swap_samples(sel: Selection) -> int:
    """How many examples the swap's accuracy is measured on: fresh task samples, or a checkpoint's example
    sentences (each once)."""
    return R.TEXT_SAMPLES if models.is_text_model(sel.meta) else EXT_SAMPLES


def swap_accuracy(sel: Selection, scheme: str) -> float:
    """The model's accuracy on fresh examples under `scheme`, with a spinner while it is first computed."""
    args = (sel.model_id, sel.device, scheme, swap_samples(sel))
    what = "the example sentences" if models.is_text_model(sel.meta) else "fresh task samples"
    return computed(f"Scoring on {what} ...", R.swap_accuracy, *args)


def swap_accuracy_text(sel: Selection) -> tuple[str, str]:
    """(the accuracy chart's title, the sentence under the metric): what was scored, and how."""
    n = swap_samples(sel)
    if not models.is_text_model(sel.meta):
        return (f"Accuracy on {n} fresh examples",
                f"Scored with the task's own metric ({sel.task.metric} accuracy) on {n} examples the model never "
                "saw, at its training length.")
    length = sel.task.default_length
    if sel.arch == "decoder":
        return (f"Next-token accuracy on {n} example sentences",
                f"Each of the app's {n} example sentences (its first {length} tokens) is read once; a position counts "
                "as right when the model's top prediction is the text's next token.")
    return (f"Masked-word accuracy on {n} example sentences",
            f"In each of the app's {n} example sentences (its first {length} tokens) about "
            f"{sel.task.MASK_SHARE:.0%} of the words are hidden behind [MASK]; a word counts as right when the model's "
            "top prediction there is the hidden word.")


def swap_accuracy_panel(sel: Selection, swap: str) -> None:
    """Task accuracy on fresh examples with the trained scheme and with the swapped one."""
    native = sel.model.cfg.pos
    acc_col, note_col = st.columns([3, 2])
    try:
        acc_native = swap_accuracy(sel, native)
        acc_swap = swap_accuracy(sel, swap)
    except ValueError as exc:
        st.warning(f"Could not score this model on fresh task examples: {exc}")
        return
    title, how = swap_accuracy_text(sel)
    with acc_col:
        st.plotly_chart(R.accuracy_figure([f"trained: {native}", f"swapped: {swap}"], [acc_native, acc_swap],
                                          [F.COLOURS[native], F.COLOURS[swap]], title),
                        key="positions.fig_swap_acc",
                        config=chart_config("positions", sel.model_id, f"accuracy-{native}-vs-{swap}"))
    with note_col:
        st.metric(f"Accuracy change with {swap}", f"{acc_swap:.0%}", delta=f"{acc_swap - acc_native:+.0%}")
        st.caption(how)


def context_note(sel: Selection) -> Optional[str]:
    """For a checkpoint: how far its trained scheme reaches (a learned table has max_len rows and nothing
    beyond; RoPE is defined everywhere but was trained up to the context). None for a bundled model."""
    if not models.is_text_model(sel.meta):
        return None
    cfg, name = sel.model.cfg, sel.model_id
    if cfg.pos == "learned":
        return (f"{name}'s learned table has {cfg.max_len:,} rows, one per position it was trained on. It has "
                f"nothing to add at position {cfg.max_len:,} or beyond, so the model cannot read a longer text (the "
                "sidebar keeps at most that many tokens), and no swap gives it trained positions there: sinusoidal "
                "and RoPE are defined at every position, but these weights never saw them.")
    if cfg.pos == "rope":
        return (f"RoPE is defined at every position, so {name} can run on any length, but it was trained on at most "
                f"{cfg.max_len:,} tokens (its context): beyond that its heads meet angles they never saw. It has no "
                "learned table to swap to.")
    return None


# ---------------------------------------------------------------------------------------------
# 7. Extrapolation
# ---------------------------------------------------------------------------------------------


def training_tokens() -> tuple[int, int]:
    """(the induction models' longest training repeat L, the tokens in such a row: <bos> and two copies)."""
    rows = {e["id"]: e for e in models.manifest()}
    train_len = int(rows.get(INDUCTION_IDS["sinusoidal"], {}).get("train_length",
                                                                  get_task("induction").default_length))
    return train_len, 2 * train_len + 1


def extrapolation_panel(sel: Selection) -> None:
    """The four induction models scored at longer and longer inputs (run when asked, or by a link with ext=)."""
    st.header("7. Longer than anything seen in training")
    bundled = bundled_ids()
    ext_ids = tuple((scheme, mid) for scheme, mid in INDUCTION_IDS.items() if mid in bundled)
    train_len, train_tokens = training_tokens()
    st.markdown(
        "The four induction models have the same size and training; only their scheme differs. They saw "
        f"repeats of up to {train_len} letters (inputs of up to {train_tokens} tokens). Here each is scored on "
        "longer repeats. A sinusoidal or RoPE model can at least *run* on any length, since its positions come "
        "from a formula; whether its heads still work there is another matter. A learned table simply has no "
        f"row for position {train_tokens} and beyond, so that model refuses."
    )
    st.latex(r"\text{learned: } PE_p \text{ exists for } p < L_{train} \text{ only}")
    st.latex(r"\text{sinusoidal / RoPE: defined for every } p")
    if not ext_ids:
        st.info("The induction models (induction-none, -sinusoidal, -learned, -rope) are not installed.")
        URL.ext.clear()
    elif not st.session_state[EXT_READY]:  # only the button below changes it, and it reruns the whole page
        extrapolation_ask(ext_ids)
    else:
        extrapolation_curves(sel, ext_ids, train_tokens)
    try_this(
        f"Slide to L = {train_len}, the longest training length: all four should be near their best.",
        "Slide past it: which scheme degrades slowest? Is it the one with no positions at all?",
        f"In the sidebar pick induction-learned and type more than {train_tokens} tokens: the sidebar refuses it too.",
    )


@st.fragment  # local: the Evaluate button redraws only this note and itself (then reruns the whole page)
def extrapolation_ask(ext_ids: tuple) -> None:
    """What the evaluation costs and the button that starts it; a click sets EXT_READY and reruns the whole
    page, which then draws the curves instead."""
    st.markdown(f"Scoring {len(ext_ids)} models at {len(EXT_LENGTHS)} lengths on {EXT_SAMPLES} examples each "
                "takes a few seconds, so it runs when you ask (and is then kept for everyone).")
    URL.ext.clear()
    if st.button("Evaluate the induction models at every length", key="positions.ext_go",
                 icon=":material/play_arrow:"):
        st.session_state[EXT_READY] = True
        st.rerun()


def extrapolation_curves(sel: Selection, ext_ids: tuple, train_tokens: int) -> None:
    """Accuracy against input length for each scheme, then one length up close with any refusals."""
    args = (ext_ids, sel.device, EXT_LENGTHS, EXT_SAMPLES)
    if R.curves.has(*args):
        chart_data = R.curve_points(*args)
    else:
        with st.spinner("Evaluating the four induction models at every length ..."):
            chart_data = R.curve_points(*args)
    st.plotly_chart(R.extrapolation_figure(chart_data, train_tokens,
                                           f"Induction accuracy against input length ({EXT_SAMPLES} examples a point)"),
                    key="positions.fig_ext", config=chart_config("positions", None, "extrapolation-accuracy"))
    st.caption("x marks on the floor: the learned model refused those lengths (it was not scored as 0; it could not run).")
    extrapolation_length(args)


@st.fragment  # local: the length slider redraws only itself, the refusals and the table at that length
def extrapolation_length(args: tuple) -> None:
    """One length up close: the slider, any refusals and the accuracy table at that length (the curves above
    do not read the slider, so they are drawn once)."""
    ext_len = URL.ext.widget(st.select_slider, "Look at one length (repeat of up to L letters)",
                             format_func=lambda L: f"L = {L} ({2 * L + 1} tokens)")
    ext_table, refusals = R.length_view(*args, ext_len)
    for refused_id, refused_at, error in refusals:
        st.error(f"**{refused_id}** at {refused_at} tokens: {error}", icon=":material/block:")
    st.dataframe(ext_table, hide_index=True, key="positions.ext_table")


def default_measurements(device: str) -> list:
    """(memo, arguments) of what a default visit measures, for the server's warm-up (ui.server.warmup): the
    sidebar opens on the first bundled model, and section 6 scores it with its own scheme and with the first
    one offered instead (swap_choices)."""
    model_id = models.manifest()[0]["id"]
    native = models._load_bundled(model_id, device)[0].cfg.pos
    swap = "none" if native != "none" else "sinusoidal"
    return [(R.swap_accuracy, (model_id, device, scheme, EXT_SAMPLES)) for scheme in (native, swap)]
