"""The Depth page's panels, in reading order: the stream forward (its size, what each sublayer writes,
the logit lens), the gradient backward (along the stream, input saliency), the depth experiment on
random 48-layer stacks with the seed's bounds, hyper-connections, the bundled pre-LN / post-LN twins,
and long-range paths (hop model vs attention graphs vs RNN). pages/depth.py calls them one after another.

Kept in a module (not the page file) so it is compiled once per process. Every control a shared link
may set is a URL parameter of the `URL` table below; cached work comes from ui.depth.runs, the
numbers from core.analysis.depth and core.analysis.depth_tables.

What a click reruns: the stack, position and objective (sections 1 and 2) and the experiment's controls
(section 3 and the Sinkhorn mixing) are read by sections (ui.shell.sections: `@S.section(..., reads=...)`),
and a change reruns those alone; ρ, the Sinkhorn sublayer and the long-range paths' n, H and τ sit inside
the fragment they change.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Optional

import numpy as np
import streamlit as st

from core.analysis import bounds as B
from core.analysis import depth as A
from core.analysis import depth_tables as T
from core.analysis import training_claims as TC
from core.tasks import IGNORE
from ui.depth import runs as R
from ui.shell import query
from ui.shell.export import chart_config
from ui.shell.page import computed, rows_table, try_this, display_name
from ui.shell.params import Choice, Float, Int, Multi, Params, general
from ui.shell.sections import Sections
from ui.shell.sidebar import Selection

VARIANT_NAMES = tuple(A.VARIANTS)
DEFAULT_VARIANTS = ("pre-LN", "post-LN", "no norm", "no residual", "hyper (Sinkhorn)")
IDENTITY_STACKS = ("pre-LN", "post-LN", "hyper (Sinkhorn)")  # drawn again on their own axis (the zoom)
GAINS = (0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0)
NOISES = (0.1, 0.25, 0.5, 0.75, 1.0)
TAUS = (0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9)
MEASURES = {"stream": "stream gradient ‖∂ℓ/∂x_l‖", "weights": "weight gradient ‖∂ℓ/∂W_l‖"}
OBJECTIVES = {"loss": "the loss (all scored positions)", "logit": "one logit (the right answer at the chosen position)"}
STACKS = ("decoder", "encoder")  # an encoder-decoder's two stacks
MAX_PATH_DRAW = 64  # receptive-field rows drawn
DEFAULT_RHO = 0.1  # the bounds' rho when a link names none
SUBLAYER_KEY, USE_RHO_KEY = "depth.sublayer", "depth.use_rho"  # controls outside the URL


@dataclass(frozen=True)
class Stacks(Multi):
    """The random stacks drawn: a Multi that keeps the default ones (with a note) when the URL names
    none it knows, so a bad link never opens on an empty chart."""

    def parse(self, raw_name: str, bounds: dict) -> Optional[list]:
        """The stacks the URL names (unknown ones dropped with a note); None, with a note, when it names none."""
        raw = query.parse_text(raw_name)
        if raw is not None and not any(self.known(part, bounds) for part in raw.split(self.sep)):
            query.note(f"URL parameter {raw_name}={raw[:40]!r} names no known stack; showing the default ones.")
            return None
        return super().parse(raw_name, bounds)

    def known(self, part: str, bounds: dict) -> bool:
        """Whether `part` of the URL's list names a stack (matched as Multi matches it)."""
        word = "".join(part.split()).lower()
        return any(word == "".join(self.label(c).split()).lower() for c in bounds["choices"])


# Every URL parameter of the page, once, in the order the page reads them. Session keys that predate
# the table keep their names (key=). The position's range depends on the input, given when drawn.
URL = Params(
    "depth",
    Choice("stack", "decoder", choices=STACKS),
    Int("at", 0, lo=0, hi=0, key="depth.pos"),
    Choice("obj", "loss", choices=tuple(OBJECTIVES)),  # narrowed to "logit" when no position is scored
    Int("L", A.MAX_EXPERIMENT_LAYERS, lo=2, hi=A.MAX_EXPERIMENT_LAYERS, key="depth.layers"),
    Choice("gain", 1.0, choices=GAINS),
    Int("iseed", 0, lo=0, hi=20, key="depth.seed"),
    Choice("measure", "stream", choices=tuple(MEASURES)),
    Stacks("show", DEFAULT_VARIANTS, choices=VARIANT_NAMES, key="depth.variants"),
    Int("streams", 4, lo=2, hi=8),
    Choice("noise", 0.5, choices=NOISES),
    # A small rho by default: there the floor (1 - rho)^L stays far above the ceiling rho^L (at 0.5 they coincide).
    Float("rho", DEFAULT_RHO, lo=0.01, hi=0.99, fmt=general),
    Choice("n", 64, choices=tuple(R.PATH_NS)),
    Int("H", 4, lo=1, hi=16),
    Choice("tau", 0.1, choices=TAUS),
)
S = Sections("depth")  # its sections say which of the focus and experiment controls they read

# ---------------------------------------------------------------------------------------------
# Reading the URL before the header, and the controls of sections 1 and 2
# ---------------------------------------------------------------------------------------------


def is_encdec(sel: Selection) -> bool:
    """Whether the sidebar's model has two stacks (a Stack control)."""
    return sel.arch == "encoder-decoder"


def default_position(sel: Selection) -> int:
    """The position picked first: the last scored one, or the last output position when none is scored."""
    scored = A.scored_positions(sel.targets, len(sel.query_tokens))
    return scored[-1] if scored else len(sel.query_tokens) - 1


def objectives(sel: Selection) -> tuple[str, ...]:
    """What the gradient may be of: the loss needs a scored position, one logit always works."""
    return tuple(OBJECTIVES) if A.scored_positions(sel.targets, len(sel.query_tokens)) else ("logit",)


def seed_url(sel: Selection) -> None:
    """Read every URL parameter of this page before anything is drawn, so problems are reported at the top.

    Each widget seeds itself again when it is drawn (a no-op once seeded); this only moves the first
    reading, and its notes, before the page header."""
    if is_encdec(sel):
        URL.stack.seed()
    URL.at.seed(hi=len(sel.query_tokens) - 1, default=default_position(sel))
    URL.obj.seed(choices=objectives(sel))
    for param in (URL.L, URL.gain, URL.iseed, URL.measure, URL.show, URL.streams, URL.noise, URL.rho,
                  URL.n, URL.H, URL.tau):
        param.seed()


@dataclass(frozen=True)
class Focus:
    """What sections 1 and 2 look at: one stack of the model, a position and what the gradient is of."""

    stack: str  # "decoder" or "encoder" (a one-stack model's own)
    prefix: str  # that stack's hook prefix ("" for a one-stack model)
    out_prefix: str  # the hook prefix of the stack that predicts (the logit lens reads it)
    tokens: list[str]  # that stack's token labels
    position: int  # an output position
    kind: str  # "loss" or "logit"
    scored: list[int]  # output positions with a right answer


def model_facts(sel: Selection) -> None:
    """The sidebar model's facts that the first heatmap depends on (its norm placement above all)."""
    cfg = sel.model.cfg
    st.caption(f"Sidebar model: **{display_name(sel.model_id)}** · {cfg.arch} · {cfg.n_layers} layers · {cfg.n_heads} heads · "
               f"d_model {cfg.d_model} · {norm_name(cfg)} **{cfg.norm}** · "
               f"residual {'on' if cfg.residual else 'off'}.")


def stack_control(sel: Selection) -> None:
    """The stack whose stream the first heatmap shows: a compact horizontal choice, drawn only for an
    encoder-decoder (another model has one stack, and the URL's stack= is cleared)."""
    if is_encdec(sel):
        URL.stack.widget(st.radio, "Stack", horizontal=True,
                         help="Residual norms and gradients of this stack. The logit lens always reads the decoder.")
    else:
        URL.stack.clear()


def controls(sel: Selection) -> None:
    """The position and objective controls of sections 1 and 2, under the first heatmap (which reads neither).
    Each control reruns only the sections that read it."""
    cols = st.columns(2)
    labels = sel.query_tokens
    URL.at.widget(cols[0].selectbox, "Position", hi=len(labels) - 1, default=default_position(sel),
                  format_func=lambda i: f"{i}: {labels[i]}",
                  help="Used by the contribution waterfall and by the one-logit gradient.")
    URL.obj.widget(cols[1].radio, "Gradient of", choices=objectives(sel), format_func=OBJECTIVES.get)
    if not A.scored_positions(sel.targets, len(sel.query_tokens)):
        st.info("This input has no position with a right answer, so there is no loss: gradients are of the "
                "model's own top logit at the chosen position.")


def focus(sel: Selection) -> Focus:
    """The focus the controls hold now, read from the session: a fragment that a control reruns sees the new
    value (its arguments are those of the page's last full run, where `controls` drew and checked them)."""
    encdec = is_encdec(sel)
    if encdec:
        stack = URL.stack.now()
    else:
        stack = "decoder" if sel.arch == "decoder" else "encoder"
    tokens = (sel.tokens if stack == "encoder" else sel.query_tokens) if encdec else sel.tokens
    position = int(URL.at.now(default_position(sel)))
    kind = URL.obj.now(objectives(sel)[0])
    scored = A.scored_positions(sel.targets, len(sel.query_tokens))
    return Focus(stack, f"{stack}." if encdec else "", "decoder." if encdec else "", tokens, position, kind, scored)


def focus_sections(sel: Selection) -> None:
    """Sections 1 (forward) and 2 (backward) with their focus controls (the stack beside the first heatmap, the
    position and objective under it), whose figures read them: each figure that does is a section the controls
    rerun by key, so a change redraws those figures and nothing else."""
    with S.group("depth-focus"):
        forward_panel(sel)
        backward_panel(sel)


def experiment_sections() -> None:
    """Section 3 (the depth experiment) and section 4 (hyper-connections), which draws its stacks. The
    experiment's controls rerun only the sections that read them: the bounds, charts and tables of section 3
    and the Sinkhorn mixing, not the text around them."""
    with S.group("depth-experiment"):
        experiment_panel()
        hyper_panel()


# ---------------------------------------------------------------------------------------------
# 1. Forward
# ---------------------------------------------------------------------------------------------


def stream_size_section(sel: Selection) -> None:
    """The stream's length after every sublayer, per token: a short lead and the stack beside it, the chart,
    then the rest of the explanation one click away."""
    cfg = sel.model.cfg
    st.subheader("How big the stream is after every sublayer")
    lead, stack = st.columns([3, 1]) if is_encdec(sel) else (st.container(), None)
    lead.markdown("One row per state of the stream, one column per token; the colour is the vector's length. "
                  "Pre-LN streams grow, post-LN ones stay near √d_model.")
    if stack is not None:
        with stack:
            stack_control(sel)
    else:
        stack_control(sel)
    norms_chart(sel)
    model_facts(sel)
    with st.expander("How to read this chart"):
        st.markdown(
            "Each row is one state of the stream (the embedding at the bottom, then after every attention and MLP "
            "sublayer), each column a token, the colour the vector's length. In a **pre-LN** model nothing shrinks the "
            "stream between blocks, so it grows as sublayers pile their outputs onto it. In a **post-LN** model every "
            "state after an addition is normalised again (and scaled by LayerNorm's learned gain), so those rows stay "
            f"near √d_model = {math.sqrt(cfg.d_model):.1f} instead of growing.")
        st.latex(r"\|x_l\|_2 = \Big(\sum_{i=1}^{d_\text{model}} x_{l,i}^2\Big)^{1/2}")
    controls(sel)


@S.section("focus.norms", reads=("stack",))
def norms_chart(sel: Selection) -> None:
    """‖x‖ per residual state and token of the chosen stack."""
    f = focus(sel)
    stream = R.forward_data(sel.cache_key, f.prefix)
    which = f.stack if is_encdec(sel) else sel.model.cfg.arch
    st.plotly_chart(R.stage_figure(stream.norms, stream.labels, f.tokens, colorbar="‖x‖", value_name="‖x‖",
                                   title=f"‖x‖ per residual state and token ({which})"),
                    key="depth.norms", width="stretch", config=chart_config("depth", sel.model_id, f"norms-{which}"))


def contributions_section(sel: Selection) -> None:
    """The waterfall of what each piece added to the final state at the chosen position."""
    st.subheader("What each sublayer writes")
    st.markdown(
        "Because the stream is a sum, the last state at a position can be taken apart into the pieces that were "
        "added: the token embedding, the position, and every sublayer's output. The waterfall projects each "
        "piece onto the direction of the final state; the diamonds show each piece's full length. A piece "
        "with a long diamond but a short bar wrote something the final state mostly does not point along. "
        "(a = attention, c = cross-attention in an encoder-decoder's decoder, m = MLP.)")
    st.latex(r"\begin{gathered} x_L = e + p + \sum_{l}\big(a_l + [c_l] + m_l\big) \\ "
             r"\|x_L\| = \sum_{c}\,\big\langle c,\ \hat{x}_L \big\rangle \quad (\hat{x}_L = x_L / \|x_L\|) \end{gathered}")
    contribution_chart(sel)


@S.section("focus.contrib", reads=("stack", "at"))
def contribution_chart(sel: Selection) -> None:
    """The waterfall at the chosen position of the chosen stack (and why it does not add up, post-LN)."""
    f = focus(sel)
    stream = R.forward_data(sel.cache_key, f.prefix)
    pos_here = min(f.position, len(f.tokens) - 1)
    lengths, along = A.contributions(stream, pos_here)
    final_norm = float(np.linalg.norm(stream.resid[-1, pos_here]))
    if not stream.is_sum:
        st.warning("This model is post-LN (or has no residual path): every addition is followed by a LayerNorm, so "
                   "the final state is **not** the plain sum of the pieces and the bars do not add up to its length. "
                   "Pick a pre-LN model in the sidebar to see an exact waterfall.")
    st.plotly_chart(R.contribution_figure(stream.parts, lengths, along, final_norm, stream.is_sum,
                                          title=f"Pieces of the final state at position {pos_here}: "
                                                f"{f.tokens[pos_here]}  (‖x_L‖ = {final_norm:.2f})"),
                    key="depth.contrib", width="stretch",
                    config=chart_config("depth", sel.model_id, f"pieces-{f.stack}-position{pos_here}"))
    if sel.model.cfg.pos in ("rope", "none"):
        st.caption(f"This model adds no position vector to the stream (its scheme: {sel.model.cfg.pos}), so the "
                   "'pos' piece is zero" + (": RoPE puts positions in by turning queries and keys inside attention."
                                            if sel.model.cfg.pos == "rope" else "."))


LENS_BUDGET = 1.6e10  # multiply-adds of unembedding the lens may spend on one input (GPT-2 small: 16 positions, ~2 s)
LENS_MIN_POSITIONS = 8  # a window never narrower than this, however big the model
LENS_SHOWN = 16  # positions the lens draws at once: each cell writes a token, and 16 columns stay readable at 1024 px


def lens_bound(sel: Selection, prefix: str = "") -> B.Bound:
    """How many output positions the logit lens decodes at once, and why: LENS_SHOWN (each cell writes its top
    prediction, and more columns could not be read), or fewer when unembedding every state at that many positions
    would cost more than LENS_BUDGET multiply-adds (a real vocabulary: GPT-2 small pays 25 x 50,257 x 768 per
    position)."""
    cfg = sel.model.cfg
    stages = len(A.resid_names(sel.model, prefix))
    width = max(LENS_MIN_POSITIONS, int(LENS_BUDGET // (stages * cfg.vocab_size * cfg.d_model)))
    if width < LENS_SHOWN:
        return B.Bound(width, f"Decoding every state takes {stages} unembeddings into {cfg.vocab_size:,} tokens per "
                              f"position, so the lens decodes {width} positions at a time")
    return B.Bound(LENS_SHOWN, f"The lens writes its top prediction in every cell, and {LENS_SHOWN} columns are as "
                               f"many as stay readable, so it decodes {LENS_SHOWN} positions at a time")


def lens_window(sel: Selection, position: int, prefix: str = "") -> tuple[int, int]:
    """(start, stop): the output positions the logit lens decodes. Every one when they fit `lens_bound`; else a
    window of as many as it allows, ending at `position` (or starting at 0)."""
    n, width = len(sel.query_tokens), lens_bound(sel, prefix).limit
    if width >= n:
        return 0, n
    stop = min(n, max(width, position + 1))
    return stop - width, stop


def lens_section(sel: Selection) -> None:
    """The logit lens: every state decoded as if the network ended there, and where the answer first appears.
    It reads the stack that predicts, at every position (a big model: a window of them around the chosen
    position, `lens_window`)."""
    st.subheader("The logit lens: what the stream would predict if it stopped here")
    f = focus(sel)
    st.markdown(
        f"Decode every state with the model's own {head_words(sel)}, as if the network ended there. "
        + ("Each cell shows the top prediction; its colour is the probability of the right answer (blank where the "
           "position is not scored). Read a column upward to see at which sublayer the answer appears. "
           if f.scored else
           "Each cell shows the top prediction and its colour that prediction's probability: this input has no "
           "position with a right answer. ")
        + ("Post-LN states are normalised already, so the final norm is the identity here. "
           if sel.model.cfg.norm == "post" else "")
        + f"Hover a cell for its {R.LENS_TOP} likeliest tokens.")
    st.latex(lens_formula(sel))
    lens_chart(sel)


@S.section("focus.lens", reads=("at",))  # a big model's window follows the chosen position
def lens_chart(sel: Selection) -> None:
    """The lens table of the output stack (a window of positions for a big model, said under it) and where the
    right answer first becomes the top prediction."""
    f = focus(sel)
    out_stream = R.forward_data(sel.cache_key, f.out_prefix)
    start, stop = lens_window(sel, f.position, f.out_prefix)
    targets = tuple(int(t) for t in sel.targets) if sel.targets is not None else None
    table = R.lens_data(sel.cache_key, f.out_prefix, targets, start, stop)
    top_tokens, alternatives = R.lens_labels(sel.cache_key, f.out_prefix, targets, start, stop)
    colour, colour_name = (table.p_right, "p(right answer)") if f.scored else (table.p_top, "p(top prediction)")
    window = (start, stop) != (0, len(sel.query_tokens))  # its positions are said in the caption (a title ran off)
    st.plotly_chart(R.lens_figure(colour, top_tokens, table.p_top, table.p_right, out_stream.labels,
                                  sel.query_tokens[start:stop], colour_name=colour_name, alternatives=alternatives,
                                  first_position=start,
                                  title=f"Logit lens: top prediction per state (text) and {colour_name} (colour)"),
                    key="depth.lens", width="stretch", config=chart_config("depth", sel.model_id, "logit-lens"))
    if window:
        st.caption(f"{lens_bound(sel, f.out_prefix).why}: positions {start} to {stop - 1} of your "
                   f"{len(sel.query_tokens):,}, up to the chosen one (move **Position** to move the window).")
    scored = [p - start for p in f.scored if start <= p < stop]
    counts = (T.first_right_counts(table.top, list(sel.targets)[start:stop], scored, out_stream.labels)
              if scored else [])
    if counts:
        st.caption("Where the right answer first becomes the top prediction (count of scored positions): "
                   + ", ".join(f"{label}: {c}" for label, c in counts) + ".")


def norm_name(cfg) -> str:
    """The model's kind of norm: LayerNorm, or RMSNorm (Llama family)."""
    return "RMSNorm" if getattr(cfg, "norm_type", "layernorm") == "rmsnorm" else "LayerNorm"


def head_words(sel: Selection) -> str:
    """What turns a state into a prediction in this model, in words (its final norm, any masked-LM transform,
    the unembedding and whether it is tied to the token embedding)."""
    cfg = sel.model.cfg
    parts = [f"final {norm_name(cfg)}" if cfg.norm != "post" else "final norm"]
    if cfg.mlm_head:
        parts.append(f"masked-LM head (a dense layer, {cfg.act}, {norm_name(cfg)}: the transform BERT was trained "
                     "with before its unembedding)")
    unembed = "unembedding"
    if cfg.tie_embeddings:
        unembed += " (tied: the token embedding W_E itself, transposed)"
    if cfg.unembed_bias:
        unembed += " with its bias"
    return ", ".join(parts[:-1]) + (", " if len(parts) > 1 else "") + parts[-1] + " and " + unembed


def lens_formula(sel: Selection) -> str:
    """The lens as this model computes it: norm, masked-LM head, unembedding (tied or not), bias."""
    cfg = sel.model.cfg
    norm = r"\mathrm{RMSNorm}" if norm_name(cfg) == "RMSNorm" else r"\mathrm{LN}"
    inner = rf"{norm}_\text{{final}}(x_{{l,t}})"
    if cfg.mlm_head:
        inner = rf"\mathrm{{MLM}}\big({inner}\big)"
    weight = r"W_E^{\top}" if cfg.tie_embeddings else "W_U"
    bias = " + b_U" if cfg.unembed_bias else ""
    return (r"p_l(\cdot \mid \text{position } t) = "
            rf"\operatorname{{softmax}}\big({weight}\, {inner}{bias}\big)")


def forward_panel(sel: Selection) -> None:
    """Section 1: the stream's size, what each sublayer writes, and the logit lens."""
    st.header("1. Forward: what the stream carries")
    stream_size_section(sel)
    contributions_section(sel)
    lens_section(sel)
    try_this(
        "Pick **sort-decoder** and then **sort-decoder-postln** in the sidebar: compare the rows of the first "
        "heatmap (growing vs normalised) and check that only the pre-LN waterfall adds up.",
        "In the logit lens, find the first row where the colour turns bright. Which sublayer put the answer in?",
        "Type an input the model gets wrong (change one token) and watch which row the wrong prediction comes from.",
        "Pick **reverse-encdec**: in the lens the answers appear all at once right after the first cross-attention.",
    )


# ---------------------------------------------------------------------------------------------
# 2. Backward
# ---------------------------------------------------------------------------------------------


def objective_text(sel: Selection, f: Focus) -> str:
    """What the gradient is of, in words."""
    labels = sel.query_tokens
    if f.kind == "loss":
        return "the mean loss over the scored positions"
    if sel.targets is None or f.position >= len(sel.targets) or sel.targets[f.position] == IGNORE:
        return f"the model's top logit at position {f.position} ({labels[f.position]}), which has no right answer"
    return f"the logit of the right answer at position {f.position} ({labels[f.position]})"


GRADIENT_COPIES = 3.5  # a backward pass held 3.4 copies of every layer's attention weights (the English decoder, 512 tokens)
GRADIENT_BYTES = 48 << 20  # what the gradient run may hold: with the page's other results, a view stays under 100 MB


def gradient_bound(sel: Selection) -> B.Bound:
    """How many tokens the gradient run reads: a backward pass keeps every attention layer's weights and makes
    their gradients, n² numbers per head and layer, so it reads as many tokens as fit a panel's memory."""
    layers = sum(name.endswith("hook_pattern") for name in sel.model.hook_names())
    n = max(len(sel.tokens), len(sel.query_tokens))
    return B.memory_bound(n, layers, sel.model.cfg.n_heads, "The gradient run", copies=GRADIENT_COPIES,
                          budget=GRADIENT_BYTES)


def backward_data(sel: Selection) -> tuple[Focus, Any, str, Optional[str]]:
    """(the focus, the gradient run of its stack, position and objective, that objective in words, the note on
    the tokens it reads). An input longer than `gradient_bound` is cut to its first tokens (in a decoder, what
    a position's logit depends on is all there); the focus then holds the cut tokens, and a position past them
    moves to the last one read."""
    f = focus(sel)
    bound = gradient_bound(sel)
    targets = tuple(sel.targets) if sel.targets is not None else None
    key, note = sel.cache_key, bound.note(max(len(sel.tokens), len(sel.query_tokens)))
    if note is not None:
        limit = bound.limit
        model_id, device, ids, tgt = key
        key = (model_id, device, ids[:limit], None if tgt is None else tgt[:limit])
        targets = None if targets is None else targets[:limit]
        f = replace(f, tokens=f.tokens[:limit], position=min(f.position, limit - 1),
                    scored=[p for p in f.scored if p < limit])
        if f.kind == "loss" and not f.scored:
            f = replace(f, kind="logit")
    back = R.backward_data(key, f.prefix, f.kind, f.position, targets)
    return f, back, objective_text(sel, f), note


@S.section("focus.grads", reads=("stack", "at", "obj"))
def gradient_chart(sel: Selection) -> None:
    """What the gradient is of, with its value, and its norm at every state of the stream."""
    f, back, what, note = backward_data(sel)
    st.markdown(
        f"We take one number, here **{what}** (value {back.value:.3f}), and ask how fast it changes with every "
        "state of the stream: the gradient at every `hook_resid_*`, taken through the hooks with "
        "`run_with_cache(..., grad_of=...)` (nothing is written into the model's weights). Going down a block the "
        "gradient is multiplied by the transposed Jacobian, and the identity in it hands the gradient "
        "straight through. Blank cells are exactly zero: in a decoder a later token cannot change an earlier "
        "prediction.")
    st.latex(r"g_l = \frac{\partial f}{\partial x_l}, \qquad "
             r"g_l = g_{l+1}\Big(I + \frac{\partial F_l}{\partial x_l}\Big)")
    st.plotly_chart(R.stage_figure(back.grad_norms, back.labels, f.tokens, log=True, colorbar="‖∂f/∂x‖",
                                   value_name="‖∂f/∂x‖",
                                   title="Gradient norm per residual state and token (log colour)"),
                    key="depth.grads", width="stretch", config=chart_config("depth", sel.model_id, f"gradients-{f.stack}"))
    if note:
        st.caption(note, help="The saliency below reads the same tokens. In a decoder the gradient at a position "
                              "depends only on the tokens up to it, so what is shown is exact for those tokens.")


@S.section("focus.saliency", reads=("stack", "at", "obj"))
def saliency_chart(sel: Selection) -> None:
    """Gradient × embedding per input token, for the chosen number."""
    f, back, what, _ = backward_data(sel)
    st.plotly_chart(R.saliency_figure(f.tokens, back.saliency,
                                      title=f"Saliency of each input token for {what.split(',')[0]}"),
                    key="depth.saliency", width="stretch", config=chart_config("depth", sel.model_id, "saliency"))


def backward_panel(sel: Selection) -> None:
    """Section 2: the gradient of the chosen number at every state of the stream, and input saliency."""
    st.header("2. Backward: where the gradient lands")
    gradient_chart(sel)
    st.subheader("Which input tokens matter: gradient × embedding")
    st.markdown(
        "Multiply the gradient at each token's embedding by the embedding itself. To first order this is how much "
        "the number would change if that token's embedding were scaled down to nothing, and the bars add up to "
        "the change from scaling every embedding at once. Blue pushes the number up, orange down.")
    st.latex(r"\begin{gathered} s_t = \Big\langle \frac{\partial f}{\partial e_t},\ e_t \Big\rangle \\ "
             r"\sum_t s_t = \frac{d}{d\alpha} f(\alpha e)\Big|_{\alpha=1} \end{gathered}")
    saliency_chart(sel)
    try_this(
        "Switch **Gradient of** to one logit and move the position: which tokens light up for a sort output, "
        "and are they the digits that belong there?",
        "Compare the gradient's rows: does its size change much from the top row to the embedding? That is the "
        "identity path at work in a trained 2-layer model.",
        "For the encoder-decoder model, choose the encoder stack: the decoder's loss reaches the source tokens only "
        "through cross-attention.",
    )


# ---------------------------------------------------------------------------------------------
# 3. The depth experiment
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Experiment:
    """The random stacks' settings, and each stack's measured profile."""

    n_layers: int
    gain: float
    seed: int
    measure: str
    variants: list[str]  # the stacks drawn
    streams: int
    noise: float
    profiles: dict[str, A.DepthProfile]  # every stack of A.VARIANTS, in that order (filled in last)

    def run_args(self, variant: str) -> tuple:
        """The arguments of ui.depth.runs.experiment for `variant` (streams and noise only matter to hyper stacks)."""
        hyper = "hyper" in A.VARIANTS[variant]
        return (variant, self.n_layers, float(self.gain), self.seed, self.streams if hyper else 4,
                float(self.noise) if hyper else 0.5)


def experiment_intro() -> None:
    """What the random stacks are, and the seed's bounds."""
    st.header(f"3. Why depth trains: gradients through up to {A.MAX_EXPERIMENT_LAYERS} layers")
    st.markdown(
        "Now build stacks of random, untrained blocks (d_model 32, 4 heads, 12 tokens, float64) and measure the "
        "gradient of the loss at the input of every block, divided by its value at the top. Every stack is the "
        "same code with one change: where LayerNorm sits, whether there is a residual path at all, or several "
        "residual streams mixed by hyper-connections. Weights are drawn with standard deviation gain/√fan_in.")
    st.markdown(
        "**The seed's bounds.** Suppose every branch is gentle: its Jacobian has norm at most ρ < 1. With an "
        "identity path each block's Jacobian is I + J, which can shrink a vector by at most 1 − ρ, so k layers "
        "down the gradient keeps **at least** (1 − ρ)^k of its size. Without the identity path the Jacobian is J "
        "alone and k layers down the gradient keeps **at most** ρ^k: it dies geometrically. Pick ρ with the slider; "
        "the button sets it to the per-layer factor measured on the plain stack.")
    st.latex(r"\begin{gathered} \|J_l\| \le \rho < 1:\qquad \|g_{L-k}\| \;\ge\; (1-\rho)^k\,\|g_L\| \ \ \text{with } I \\ "
             r"\|g_{L-k}\| \;\le\; \rho^k\,\|g_L\| \ \ \text{without} \end{gathered}")


def experiment_controls() -> None:
    """The stacks' settings (two rows of controls). Each control reruns only the sections that read it, which
    build and differentiate the stacks (`experiment`): L, gain, seed, streams and noise build them (the bounds
    and the mixing), the measure and the stacks shown choose what the charts draw of them (the bounds)."""
    row1 = st.columns(4)
    URL.L.widget(row1[0].slider, "Layers L")
    URL.gain.widget(row1[1].select_slider, "Init gain",
                    help="Weights ~ N(0, gain²/fan_in). Below about 1 the plain stack's gradient dies; "
                         "above it, it explodes.")
    URL.iseed.widget(row1[2].slider, "Init seed")
    URL.measure.widget(row1[3].radio, "Measure", format_func=MEASURES.get)
    row2 = st.columns([4, 1, 1])
    URL.show.widget(row2[0].multiselect, "Stacks")
    URL.streams.widget(row2[1].slider, "Hyper streams n")
    URL.noise.widget(row2[2].select_slider, "Mixing noise",
                     help="How far the hyper-connections' initial mixing strays from identity.")


def experiment_settings() -> Experiment:
    """The stacks' settings the controls hold now, read from the session (no profiles yet): a fragment that a
    control reruns sees the new value (its arguments are those of the page's last full run, where
    `experiment_controls` drew and checked them)."""
    return Experiment(int(URL.L.now()), URL.gain.now(), int(URL.iseed.now()), URL.measure.now(),
                      list(URL.show.now()), int(URL.streams.now()), URL.noise.now(), {})


def experiment() -> Experiment:
    """The stacks' settings the controls hold now, with every stack built and differentiated (memoised)."""
    e = experiment_settings()
    return replace(e, profiles=stack_profiles(e))


def stack_profiles(e: Experiment) -> dict[str, A.DepthProfile]:
    """Every stack of A.VARIANTS at these settings, with a spinner while one is first built."""
    args = {v: e.run_args(v) for v in VARIANT_NAMES}
    if all(R.experiment.has(*a) for a in args.values()):
        return {v: R.experiment(*a) for v, a in args.items()}
    with st.spinner("Building and differentiating the random stacks ..."):
        return {v: R.experiment(*a) for v, a in args.items()}


def use_measured_rho(factor: Optional[float]) -> None:
    """Button callback: set ρ to the plain stack's measured per-layer factor (when it is below 1)."""
    if factor is not None and 0 < factor < 1:
        st.session_state[URL.rho.key] = float(min(max(round(factor, 2), 0.01), 0.99))


def rho_control(plain_factor: Optional[float]) -> float:
    """The ρ slider and the button that sets it to the plain stack's factor."""
    left, right = st.columns([3, 2])
    rho = URL.rho.widget(left.slider, "ρ: bound on each branch's Jacobian norm", step=0.01)
    right.button(f"ρ ← plain stack's factor ({T.number_text(plain_factor)})", on_click=use_measured_rho,
                 args=(plain_factor,), disabled=not (plain_factor is not None and 0 < plain_factor < 1),
                 key=USE_RHO_KEY, help="Only possible when the plain stack's gradient shrinks (factor below 1).")
    return rho


def bounds_caption(rho: float, n_layers: int, lower: np.ndarray, upper: np.ndarray) -> None:
    """What the two dashed bounds promise and what they do not, beside the measured curves."""
    st.caption(
        f"**What the dashed lines promise** (only for branches with ‖J‖ ≤ ρ = {rho:g}): the identity path gives a "
        f"*floor*, (1 − ρ)^(L−l), which still falls exponentially with depth but, for a small ρ, far more slowly "
        f"than the *ceiling* ρ^(L−l) of a stack without it (at the bottom, {n_layers} layers down: "
        f"{lower[0]:.2g} against {upper[0]:.2g}). A floor says how low a curve *may* go and a ceiling how high, so "
        "the two are different kinds of statement (above ρ = 0.5 the floor even lies under the ceiling, which "
        "contradicts nothing): the measured curves, not the bounds, show how the stacks really behave.")


def depth_charts(e: Experiment, rho: float, lower: np.ndarray, upper: np.ndarray) -> None:
    """The chosen stacks' gradient curves beside the bounds, and the identity-path stacks zoomed."""
    if not e.variants:
        st.warning("Choose at least one stack to draw.")
    if e.measure == "stream":
        curves = {v: A.relative(e.profiles[v].resid_grad) for v in e.variants}
        fig = R.depth_figure(curves, lower, upper, rho, y_title="‖∂ℓ/∂x_l‖ / ‖∂ℓ/∂x_L‖",
                             title=f"Gradient at each block's input, relative to the top ({e.n_layers} layers, "
                                   f"gain {e.gain})")
    else:
        curves = {v: A.relative(e.profiles[v].weight_grad) for v in e.variants}
        fig = R.depth_figure(curves, None, None, None, y_title="‖∂ℓ/∂W_l‖ / ‖∂ℓ/∂W_top‖",
                             x_title="block l (0 = input side)",
                             title=f"Gradient of each block's weights, relative to the top block ({e.n_layers} layers, "
                                   f"gain {e.gain})")
    st.plotly_chart(fig, key="depth.chart", width="stretch",
                    config=chart_config("depth", None, f"gradients-{e.measure}-{e.n_layers}-layers-gain{e.gain:g}"))
    if e.measure == "stream":
        bounds_caption(rho, e.n_layers, lower, upper)
    zoomed = {v: c for v, c in curves.items() if v in IDENTITY_STACKS}
    if zoomed:
        st.markdown("The stacks with an identity path sit on top of each other above; on their own axis the difference "
                    "between a smooth and a zigzag curve shows:")
        st.plotly_chart(R.depth_figure(zoomed, y_title="relative to the top",
                                       title="Zoom: the stacks with an identity path",
                                       x_title="layer l (0 = input side)" if e.measure == "stream"
                                       else "block l (0 = input side)"),
                        key="depth.zoom", width="stretch",
                        config=chart_config("depth", None, f"gradients-{e.measure}-{e.n_layers}-layers-zoom"))


def stacks_summary(e: Experiment, s: T.StackSummary) -> None:
    """What the measurements say about each kind of stack at these settings."""
    fmt = T.number_text
    plain_text = (f"the gradient at the bottom is {fmt(s.plain_bottom)} times the top's, a straight line on the log "
                  f"axis: the same factor ({fmt(s.plain_factor)}) every layer, which is ρ^L. With a small gain it "
                  "dies, with a large one it explodes; either way it is geometric.")
    if not s.plain_finite:
        plain_text = ("at this gain the forward pass itself overflowed (the gaps): every layer multiplied the signal "
                      f"by about {fmt(s.plain_factor)}. Lower the gain to see it die instead.")
    floor_text = ("above the (1 − ρ)^(L−l) floor at every layer" if s.pre_above_floor
                  else "below the (1 − ρ)^(L−l) floor somewhere: the bound assumed ‖J‖ ≤ ρ, and at this ρ that is "
                       "false")
    st.markdown(
        f"""What the measurements say at these settings:

- **No residual**: {plain_text}
- **Pre-LN**: the identity path carries the gradient through untouched and each branch adds a little, so the curve
  is smooth and stays in a band of ×{fmt(s.pre_band)} across {e.n_layers} layers,
  {floor_text}.
- **Post-LN**: the gradient passes a LayerNorm in every layer. Each one divides by the spread of the sum it
  normalises and removes two directions, so every layer multiplies the gradient by its own factor and the curve
  zigzags: the spread of its per-layer log step is {fmt(s.zig_post)}, against {fmt(s.zig_pre)} for pre-LN
  (×{fmt(s.zig_ratio)}). The seed warns that these LayerNorm factors can exceed 1 and compound into an
  explosion; at initialisation here they scatter around 1 (overall factor {fmt(s.post_factor)}
  per layer), and the cost of post-LN shows up in training (see the twins below). The floor does not apply to it:
  its path is LN(x + F(x)), not x + F(x).
- **No norm**: the identity path is there, but nothing stops the branches' outputs from compounding, so the stream
  and its gradient can grow layer after layer: here the bottom's gradient is {fmt(s.nonorm_bottom)} times the top's.
- **Hyper-connections (Sinkhorn)**: a band of ×{fmt(s.sinkhorn_band)}, like pre-LN; the same
  streams with **free** mixing matrices: ×{fmt(s.free_band)}.
""")


def experiment_panel() -> None:
    """Section 3: random stacks of up to 48 layers, their gradient curves against the seed's bounds, a
    table per stack and what it says."""
    experiment_intro()
    experiment_controls()
    bounds_section()


# local: ρ and its button redraw only the bounds, the charts and the tables of this experiment
@S.section("experiment.bounds", reads=("L", "gain", "iseed", "measure", "show", "streams", "noise"))
def bounds_section() -> None:
    """The seed's bounds for the chosen ρ over the experiment's curves, the table per stack and its summary."""
    e = experiment()
    runs = tuple(e.run_args(v) for v in e.profiles)  # every stack, in the table's order
    rho = rho_control(R.per_layer_factor(e.run_args("no residual")))
    lower, upper = A.bounds(rho, e.n_layers)
    depth_charts(e, rho, lower, upper)
    st.dataframe(rows_table(R.stack_table(runs)), hide_index=True, width="stretch")
    stacks_summary(e, R.stack_summary(runs, rho))


# ---------------------------------------------------------------------------------------------
# 3a. Hyper-connections
# ---------------------------------------------------------------------------------------------


def sums_text(error: float) -> str:
    """A row or column check: every sum is 1, up to the largest error."""
    return f"all 1 (largest error {error:.0e})"


def mixing_table(checks: dict[str, Any]) -> str:
    """The doubly-stochastic checks as a markdown table."""
    return ("| check | value |\n|---|---|\n"
            f"| row sums | {sums_text(checks['row'])} |\n"
            f"| column sums | {sums_text(checks['column'])} |\n"
            f"| largest singular value | {checks['sigma']:.6f} |\n"
            f"| all {checks['count']} multiplied: rows | {sums_text(checks['product_row'])} |\n"
            f"| all {checks['count']} multiplied: columns | {sums_text(checks['product_column'])} |")


def hyper_panel() -> None:
    """Hyper-connections: one Sinkhorn mixing matrix, its doubly-stochastic checks, and section 3's prompts."""
    st.subheader("Hyper-connections: several residual streams, mixed doubly-stochastically")
    st.markdown(
        "Instead of one stream, keep **n** of them side by side. Around every sublayer a small matrix H_res mixes the "
        "streams, h_pre reads the sublayer's input as a weighted average of them, and h_post writes its output back. "
        "If H_res were any learned matrix, its products over 2L sublayers could grow or shrink without limit (the "
        "*free mixing* curve). Making it **doubly stochastic**, every row and every column summing to 1, caps its norm "
        "at exactly 1 and passes the average of the streams through unchanged: an identity path that survives the "
        "mixing. Sinkhorn's method gets there from any matrix of logits by rescaling rows and columns in turn.")
    st.latex(r"x_{l+1} = H^{\text{res}}_l\, x_l + "
             r"h^{\text{post}}_l \otimes F_l\big(\mathrm{LN}(h^{\text{pre}}_l \cdot x_l)\big)")
    st.latex(r"\begin{gathered} H^{\text{res}} = \operatorname{Sinkhorn}(e^{\Theta}):\quad H\mathbf{1} = \mathbf{1},\quad "
             r"\mathbf{1}^\top H = \mathbf{1}^\top \\ \Longrightarrow\quad \|H^{\text{res}}\|_2 = 1 \end{gathered}")
    hyper_mixing()
    try_this(
        "Slide the gain from 0.5 to 1.5: the plain stack flips from vanishing to exploding, while pre-LN barely moves.",
        "Press the ρ button, then read the floor: how far above (1 − ρ)^(L−l) are the residual stacks? The bound "
        "is a worst case.",
        "Slide ρ up to 0.5: the floor and the ceiling meet; past it the floor lies under the ceiling. Nothing broke: "
        "a lower bound for one kind of stack and an upper bound for another need not be ordered.",
        "Switch **Measure** to the weights: which stack gives its bottom block a usable gradient?",
        "Raise the mixing noise to 1 and compare *hyper (free mixing)* with *hyper (Sinkhorn)*.",
        "Halve the number of layers: how do the end points of the plain stack and of ρ^L move?",
    )


# local: the Sinkhorn sublayer redraws only its slider, the mixing matrix and the checks beside it
@S.section("experiment.mixing", reads=("L", "gain", "iseed", "streams", "noise"))
def hyper_mixing() -> None:
    """One sublayer's Sinkhorn mixing matrix and its doubly-stochastic checks; the text above and the prompts
    below do not read the sublayer or the experiment's controls."""
    e = experiment_settings()
    mats = R.mixing_example(e.n_layers, float(e.gain), e.seed, e.streams, float(e.noise))
    left, right = st.columns([2, 1])
    with left:
        sublayer = st.slider("Sublayer of the Sinkhorn stack", 0, 2 * e.n_layers - 1, 0, key=SUBLAYER_KEY,
                             help="Even = attention, odd = MLP.")
        st.plotly_chart(R.mixing_figure(mats[sublayer], title=f"H_res of sublayer {sublayer} "
                                        f"({'attention' if sublayer % 2 == 0 else 'MLP'} of block {sublayer // 2})"),
                        key="depth.mixing", width="stretch",
                        config=chart_config("depth", None, f"hyper-mixing-sublayer{sublayer}"))
    with right:
        st.markdown(mixing_table(R.mixing_checks(e.n_layers, float(e.gain), e.seed, e.streams, float(e.noise),
                                                 sublayer)))
        st.caption("The product of doubly-stochastic matrices is doubly stochastic again: however deep the stack, "
                   "the mixing path neither grows nor shrinks the streams' average.")


# ---------------------------------------------------------------------------------------------
# 3b. The bundled twins
# ---------------------------------------------------------------------------------------------


def twin_measurements(pre_id: str, post_id: str, device: str) -> dict:
    """The twins' gradients (ui.depth.runs.twins_data), with a spinner while they are first measured."""
    return computed("Measuring the twins' gradients ...", R.twins_data, pre_id, post_id, device)


def twins_panel(sel: Selection) -> None:
    """The bundled pre-LN / post-LN pair, trained and freshly initialised: stream size, gradient, table."""
    st.subheader("The bundled twins: pre-LN and post-LN after training")
    twins = R.twin_ids()
    if twins is None:
        st.warning("No bundled pre-LN / post-LN pair was found in assets/models (they are built by "
                   "`python -m core.train --all`).")
        return
    data = twin_measurements(twins[0], twins[1], sel.device)
    st.markdown(
        f"**{twins[0]}** and **{twins[1]}** share the task, the sizes, the seed and the training recipe; only the "
        f"place of LayerNorm differs. Both are measured on the same {R.TWIN_SAMPLES} fresh examples, trained "
        "(solid) and as freshly initialised copies (dotted): on the left the stream's size, on the right the loss "
        "gradient at every state, divided by its value at the top state.")
    norms, grads = T.twin_curves(data)
    stages = data["pre-LN"]["trained"].labels
    left, right = st.columns(2)
    left.plotly_chart(R.twins_figure(stages, norms, "mean ‖x‖ over tokens", title="Stream size along the depth",
                                     log=False),
                      key="depth.twins_norm", width="stretch",
                      config=chart_config("depth", None, "twins-pre-post-ln-stream-size"))
    right.plotly_chart(R.twins_figure(stages, grads, "‖∂ℓ/∂x‖ / ‖∂ℓ/∂x_top‖",
                                      title="Loss gradient along the stream<br>(relative to the top)"),
                       key="depth.twins", width="stretch",
                       config=chart_config("depth", None, "twins-pre-post-ln-gradient"))
    st.dataframe(rows_table(T.twin_rows(data)), hide_index=True, width="stretch")
    pre, post = data["pre-LN"]["trained"], data["post-LN"]["trained"]
    st.markdown(
        f"After training, the pre-LN stream grows from {pre.resid_norm[0]:.1f} at the embedding to "
        f"{pre.resid_norm[-1]:.1f} at the top, because every sublayer adds to it; the post-LN stream is pulled back "
        f"after every addition and ends at {post.resid_norm[-1]:.1f}. In two layers both get a usable gradient to "
        f"the embedding (×{T.number_text(grads['pre-LN trained'][0])} and "
        f"×{T.number_text(grads['post-LN trained'][0])} "
        "the top's): post-LN's troubles are about depth and the early steps of training, which is why the 48-layer "
        "chart above, not this pair, is where they show.")
    warmup_rates()


def warmup_rates() -> None:
    """How often pre-LN and post-LN stacks learn without and with a warm-up, measured over seeds and depths
    (core.analysis.training_claims; the table is stored, `python -m bench.training_claims --write` remakes it)."""
    st.markdown("#### Does post-LN need a warm-up? Measured over seeds")
    table = TC.load_table()
    rows = TC.rate_rows(table)
    if not rows:
        st.info("The measured table (assets/precomputed/training_claims.json) is missing: "
                "`python -m bench.training_claims --write` measures it.")
        return
    cfg = table["settings"]
    st.markdown(
        f"One seed says little: the bundled pair is one draw. Below, the {cfg['task']} task on an {cfg['arch']} "
        f"(d_model {cfg['norm_d_model']}, {cfg['norm_heads']} heads, {cfg['steps']} steps, peak learning rate "
        f"{cfg['norm_lr']:g}) was trained from scratch for 5 seeds at each depth, LayerNorm placement and warm-up; "
        f"each cell counts the seeds that reached {cfg['learned']:.0%} accuracy on fresh examples. Pre-LN learned "
        f"without warm-up in {TC.rate(table, 'pre', 2, 0)} seeds at 2 layers and {TC.rate(table, 'pre', 4, 0)} at 4; "
        f"post-LN in {TC.rate(table, 'post', 2, 0)} at 2 layers and {TC.rate(table, 'post', 4, 0)} at 4, and with "
        f"100 warm-up steps in {TC.rate(table, 'post', 2, 100)} and {TC.rate(table, 'post', 4, 100)} (at 6 layers: "
        f"{TC.rate(table, 'post', 6, 0)} without warm-up, {TC.rate(table, 'post', 6, 100)} with 100 steps; pre-LN "
        f"{TC.rate(table, 'pre', 6, 0)}). So "
        "\"post-LN needs a warm-up\" is a rate that worsens with depth, not a rule: a lucky seed trains without one, "
        "and a short warm-up is not always enough.")
    st.dataframe(rows_table(rows), hide_index=True, width="stretch")
    st.caption("Measured on a CPU by `python -m bench.training_claims --write` (core.train, the Train page's "
               "settings); a test re-runs the first steps of one cell and checks they match the stored table.")


# ---------------------------------------------------------------------------------------------
# 4. Long-range paths
# ---------------------------------------------------------------------------------------------


def hop_section() -> tuple[int, int, float]:
    """The n, H and τ controls and the four layer counts at n; returns (n, H, τ)."""
    cols = st.columns(3)
    n_path = URL.n.widget(cols[0].select_slider, "Sequence length n")
    heads = URL.H.widget(cols[1].slider, "Heads H")
    tau = URL.tau.widget(cols[2].select_slider, "Edge threshold τ",
                         help="A head's weight from query q to key k counts as an edge when it is at least τ: "
                              "in the dense-versus-sharp count below and on the sidebar model's own graph.")
    m1, m2, m3, m4 = st.columns(4)
    m1.metric("ln n / ln(H+1)", f"{A.hop_formula(n_path, heads):.2f}")
    m2.metric("spread heads", f"{A.strided_head_layers(n_path, heads)} layers")
    random_mean = R.path_curves(heads)["random"][R.PATH_NS.index(n_path)]  # simulated once per H (a memo)
    m3.metric("random heads (mean)", f"{random_mean:.2f} layers")
    m4.metric("RNN", f"{A.rnn_path(n_path)} steps")
    return n_path, heads, tau


def paths_chart_section(sel: Selection, n_path: int, heads: int, tau: float,
                        needed: Optional[int]) -> None:
    """The hop formula, spread and random heads, the RNN and the sidebar model's point, and what they show."""
    curves = R.path_curves(heads)
    point = None if needed is None else \
        (len(sel.tokens), needed, f"{display_name(sel.model_id)} (H={sel.model.cfg.n_heads}, τ={tau})")
    st.plotly_chart(R.paths_figure(curves["ns"], curves["formula"], curves["ideal"], curves["random"], curves["rnn"],
                                   heads, chosen_n=n_path, model_point=point,
                                   title="Layers needed for the last token to reach the first"),
                    key="depth.paths", width="stretch",
                    config=chart_config("depth", sel.model_id, f"layers-to-reach-n{n_path}-h{heads}"))
    beats = T.random_beats_formula_from(curves)
    st.markdown(
        "Spread heads need exactly the formula's count, rounded up: they cover every earlier position, and no layout "
        "of H heads can cover more than (H + 1)^L. "
        + (f"From n = {beats} on, random sharp heads need fewer layers than the formula: they only need *one* path "
           "to the first token, not a path to every position, and a random jump back lands on average halfway. "
           if beats is not None else "")
        + "Every Transformer curve grows like ln n; the RNN's grows like n.")


def links_section(n_path: int, heads: int, tau: float) -> None:
    """Dense soft attention (every pair in one layer) against sharp heads (the logarithm), joined by τ."""
    st.subheader("One layer or ln n layers? It depends on what counts as a link")
    st.markdown(
        "Two claims seem to clash. The architecture's summary says any two positions are O(1) layers apart, and "
        "the Masks page shows why: a dense soft head gives *every* earlier key a weight above zero, so one layer "
        "links every pair. The hop model above says about ln n / ln(H + 1) layers. Both hold, for different heads. "
        "A soft head (a high softmax temperature) spreads its weight thinly: at the last of n positions a uniform "
        "head gives each key just 1/n. A sharp head puts all its weight on one key and follows one edge. The "
        "threshold τ says how thin a link may be and still count. A head's weights add up to 1, so it can give at "
        "least τ to no more than ⌊1/τ⌋ keys, and one layer of H heads plus the residual path reaches at most "
        "H⌊1/τ⌋ + 1 positions. Lower τ and thinner links count, each head covers more keys, and the layers needed "
        "fall to one (every dense link counts once τ ≤ 1/n); raise τ above ½ and only one-edge heads are left: the "
        "logarithm.")
    st.latex(r"\begin{gathered} L_\tau = \left\lceil \frac{\ln n}{\ln\!\big(H \lfloor 1/\tau \rfloor + 1\big)} \right\rceil \\ "
             r"\tau \le \tfrac{1}{n}:\ L_\tau = 1 \qquad "
             r"\tau > \tfrac{1}{2}:\ L_\tau = \left\lceil \frac{\ln n}{\ln (H+1)} \right\rceil \end{gathered}")
    keys, layers = A.keys_per_head(float(tau), n_path), A.linked_layers(n_path, heads, float(tau))
    sharp = A.ideal_layers(n_path, heads)
    m1, m2, m3, m4 = st.columns(4)
    m1.metric("dense soft", "1 layer", help="Dense soft attention: every pair linked with a weight above zero.")
    m2.metric("dense link weight", f"1/n = {A.dense_link_weight(n_path):.3g}", help="The weight of each dense link.")
    m3.metric(f"links ≥ τ = {tau:g}", f"{layers} layer{'s' if layers != 1 else ''}",
              help=f"Each head gives τ to at most {keys} key(s).")
    m4.metric("sharp heads", f"{sharp} layer{'s' if sharp != 1 else ''}", help="Sharp heads: one edge each.")
    curve = R.linked_curve(n_path, heads)
    st.plotly_chart(R.linked_figure(curve["taus"], curve["layers"], curve["keys"], n_path, heads, sharp, float(tau),
                                    layers, title=f"Layers to reach all n = {n_path} positions when only weights "
                                                  f"≥ τ count (H = {heads})"),
                    key="depth.links", width="stretch",
                    config=chart_config("depth", None, f"layers-by-threshold-n{n_path}-h{heads}"))
    st.caption("The steps are reached exactly by spread soft heads (each splits its weight evenly over ⌊1/τ⌋ keys, "
               "their offsets written in base H⌊1/τ⌋ + 1, one digit per layer), and no layout of H heads can do "
               "better. So O(1) is about *whether* two positions are linked at all, ln n about how many layers "
               "links of real weight need.")


def model_graph_section(sel: Selection, tau: float, needed: Optional[int], fields: np.ndarray,
                        model_layers: int) -> None:
    """How many of the sidebar model's thresholded layers connect the first token to the last."""
    tokens = sel.tokens
    st.subheader(f"The sidebar model's own attention graph ({'encoder' if is_encdec(sel) else sel.model.cfg.arch}, "
                 f"{model_layers} layers)")
    where = f"the last token ({len(tokens) - 1}: {tokens[-1]})"
    if needed is None:
        st.warning(f"With τ = {tau}, no chain of edges connects the first token to {where}, however many of this "
                   "model's layers are stacked: lower τ so weaker attention counts as an edge.")
    else:
        repeat = "" if needed <= model_layers else (f" The model has only {model_layers} layers, so its layers are "
                                                    f"repeated in order to ask how many such layers it would take.")
        st.markdown(f"With τ = {tau}, the first token reaches {where} after **{needed}** stacked layer(s). "
                    f"An RNN would need {len(tokens) - 1} steps.{repeat}")
    if len(fields):
        shown = fields[:MAX_PATH_DRAW]
        names = [f"{k + 1} (layer {k % model_layers})" for k in range(len(shown))]
        st.plotly_chart(R.field_figure(shown, tokens, names,
                                       title="Tokens that can reach the last token after k stacked layers"),
                        key="depth.field", width="stretch",
                        config=chart_config("depth", sel.model_id, f"reach-threshold{tau:g}"))


def paths_panel(sel: Selection) -> None:
    """Section 4: layers needed for the last token to hear the first, by formula, simulation and the model."""
    st.header("4. Long-range paths: how many layers until the last token hears the first?")
    st.markdown(
        "Follow information backwards from the last token. In one layer it can stay where it is (the residual path) "
        "or jump to whatever an attention head looks at. With H heads that is H + 1 choices per layer, so L layers "
        "can reach at most (H + 1)^L positions, and covering n positions needs about ln n / ln(H + 1) layers: "
        "logarithmic in n. An RNN has no shortcut: the first token's information passes through every step, n − 1 of "
        "them. Below, the formula is drawn beside layer counts **measured** by following attention edges from the last "
        "token, layer by layer: perfectly spread heads (head j of layer l looks back exactly j·(H+1)^l), random sharp "
        "heads (each looks at one earlier key drawn at random; mean of 16 draws), and the sidebar model's own "
        "attention thresholded into edges (with `core.masks.receptive_field`).")
    st.latex(r"(H+1)^L \ge n \iff L \ge \frac{\ln n}{\ln (H+1)} \qquad\text{vs.}\qquad L_\text{RNN} = n - 1")
    paths_measured(sel)
    try_this(
        "Double n several times at H = 1: the formula adds one layer per doubling, the RNN doubles.",
        "Raise H from 1 to 8 at n = 1024 and watch the layers fall like 1 / ln(H + 1).",
        "At n = 64 and H = 4, lower τ from 0.9 to 0.02: the layers needed fall from 3 through 2 to 1, as each head "
        "may spread over more keys; at n = 4096 and H = 1 the same sweep runs from 12 down to 3.",
        "Raise τ on the model until the star disappears: how sharp must attention be for the first token to get "
        "through?",
    )


@st.fragment  # local: n, H and τ redraw only these controls, the counts, the charts and the model's graph
def paths_measured(sel: Selection) -> None:
    """The controls and everything that reads them: the layer counts, the hop chart, dense against sharp links
    and the sidebar model's graph; the section's introduction and prompts do not."""
    n_path, heads, tau = hop_section()
    needed, fields, model_layers = R.model_paths(sel.cache_key, "encoder." if is_encdec(sel) else "", float(tau))
    paths_chart_section(sel, n_path, heads, tau, needed)
    links_section(n_path, heads, tau)
    model_graph_section(sel, tau, needed, fields, model_layers)


def default_measurements(device: str) -> list:
    """(memo, arguments) of what a default visit measures, for the server's warm-up (ui.server.warmup): each
    variant's experiment at the URL's defaults, and the twin models' data where the twins are bundled."""
    U = URL
    e = Experiment(U.L.default, U.gain.default, U.iseed.default, U.measure.default, list(U.show.default),
                   U.streams.default, U.noise.default, {})
    wanted = [(R.experiment, e.run_args(variant)) for variant in VARIANT_NAMES]
    twins = R.twin_ids()
    return wanted + ([(R.twins_data, (*twins, device))] if twins is not None else [])
