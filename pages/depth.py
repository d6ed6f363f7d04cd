"""Depth: the residual stream forward and backward, why 48 layers train, and how far information travels.

Thin page: widgets -> core.analysis.depth (and core.hyper) -> core.figures.depth. Panels in
reading order: the stream's size, what each sublayer writes, the logit lens, gradients along
the stream and input saliency, the depth experiment with the seed's bounds, hyper-connections,
the bundled pre-LN / post-LN twins, and long-range paths (hop model vs attention graphs vs RNN).
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pandas as pd
import streamlit as st

from core.analysis import depth as A
from core.figures import depth as F
from core.tasks import IGNORE
from ui import query
from ui.depth_runs import (PATH_NS, TWIN_SAMPLES, backward_data, experiment, forward_data, lens_data,
                            mixing_example, model_paths, path_curves, twin_ids, twins_data)
from ui.figures import cached
from ui.page import header, try_this
from ui.sidebar import shared_sidebar

VARIANT_NAMES = list(A.VARIANTS)
DEFAULT_VARIANTS = ["pre-LN", "post-LN", "no norm", "no residual", "hyper (Sinkhorn)"]
GAINS = [0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0]
MAX_PATH_DRAW = 64  # receptive-field rows drawn
MEASURES = {"stream": "stream gradient ‖∂ℓ/∂x_l‖", "weights": "weight gradient ‖∂ℓ/∂W_l‖"}
IDENTITY_STACKS = ["pre-LN", "post-LN", "hyper (Sinkhorn)"]  # drawn again on their own axis (the zoom)
OBJECTIVES = {"loss": "the loss (all scored positions)", "logit": "one logit (the right answer at the chosen position)"}

# ---------------------------------------------------------------------------------------------
# Widgets with URL state


def _int_widget(label: str, key: str, param: str, lo: int, hi: int, default: int, **kw) -> int:
    query.seed(key, param, lambda p: query.parse_int(p, lo, hi), default, valid=lambda v: lo <= v <= hi)
    return st.slider(label, lo, hi, key=key, **kw)


def _choice_widget(label: str, key: str, param: str, options: list, default, widget=st.radio, **kw):
    names = [str(o) for o in options]

    def parse(p):
        raw = query.parse_choice(p, names)
        return None if raw is None else options[names.index(raw)]

    query.seed(key, param, parse, default, valid=lambda v: v in options)
    return widget(label, options, key=key, **kw)


def _fmt_choice(labels: dict):
    """A format_func showing a long label for a short option value."""
    return lambda v: labels.get(v, str(v))


def _position_widget(tokens: list[str], default: int) -> int:
    n = len(tokens)
    query.seed_index("depth.pos", "at", n, default)
    return st.selectbox("Position", list(range(n)), key="depth.pos", format_func=lambda i: f"{i}: {tokens[i]}",
                        help="Used by the contribution waterfall and by the one-logit gradient.")


def _band(profile: A.DepthProfile) -> float:
    """max / min of a stack's gradient curve (inf when it overflowed)."""
    rel = A.relative(profile.resid_grad)
    return float(rel.max() / rel.min()) if np.isfinite(rel).all() and rel.min() > 0 else float("inf")


def _fmt(x: float) -> str:
    if x is None or not np.isfinite(x):
        return "overflow"
    return f"{x:.3g}"


# ---------------------------------------------------------------------------------------------
# The page


sel = shared_sidebar()
header(
    "Depth: the residual stream",
    "A Transformer's blocks do not hand the data from one to the next. Each block *reads* a shared "
    "vector per token, the **residual stream**, computes something, and *adds* its result back. "
    "The stream is the running sum of everything written into it, and the chain of additions is also "
    "the road the gradient travels back down. Below we follow the stream forward (how big it is, who "
    "wrote what, what it would already predict), then backward (where the gradient lands), and then "
    "ask why the identity path and the place of LayerNorm decide whether a 48-layer stack can learn at all.",
    r"x_{l+1} = x_l + F_l\big(\mathrm{LN}(x_l)\big) \qquad\Longrightarrow\qquad "
    r"\frac{\partial x_{l+1}}{\partial x_l} = I + \frac{\partial F_l}{\partial x_l}",
)

cfg = sel.model.cfg
is_encdec = sel.arch == "encoder-decoder"
out_prefix = "decoder." if is_encdec else ""
n_out = len(sel.query_tokens)
scored = A.scored_positions(sel.targets, n_out)
targets = tuple(sel.targets) if sel.targets is not None else None
st.caption(f"Sidebar model: **{sel.model_id}** · {cfg.arch} · {cfg.n_layers} layers · {cfg.n_heads} heads · "
           f"d_model {cfg.d_model} · LayerNorm **{cfg.norm}** · residual {'on' if cfg.residual else 'off'}.")

controls = st.columns([1, 2, 2]) if is_encdec else [None] + st.columns(2)
if is_encdec:
    with controls[0]:
        stack = _choice_widget("Stack", "depth.stack", "stack", ["decoder", "encoder"], "decoder",
                               help="Residual norms and gradients of this stack. The logit lens always reads the decoder.")
else:
    stack = "decoder" if sel.arch == "decoder" else "encoder"
prefix = f"{stack}." if is_encdec else ""
tokens = (sel.tokens if stack == "encoder" else sel.query_tokens) if is_encdec else sel.tokens
with controls[1]:
    position = _position_widget(sel.query_tokens, scored[-1] if scored else n_out - 1)
with controls[2]:
    kinds = ["loss", "logit"] if scored else ["logit"]
    kind = _choice_widget("Gradient of", "depth.obj", "obj", kinds, kinds[0], format_func=_fmt_choice(OBJECTIVES))
if not scored:
    st.info("This input has no position with a right answer, so there is no loss: gradients are of the "
            "model's own top logit at the chosen position.")
query.write(stack=stack if is_encdec else None, at=position, obj=kind)
query.show_notes()  # what was wrong with the URL's settings, right under the controls

stream = forward_data(sel.cache_key, prefix)
out_stream = stream if prefix == out_prefix else forward_data(sel.cache_key, out_prefix)

# ---- 1. Forward ---------------------------------------------------------------------------------
st.header("1. Forward: what the stream carries")
st.subheader("How big the stream is after every sublayer")
st.markdown(
    "Each row is one state of the stream (the embedding at the bottom, then after every attention and MLP "
    "sublayer), each column a token, the colour the vector's length. In a **pre-LN** model nothing shrinks the "
    "stream between blocks, so it grows as sublayers pile their outputs onto it. In a **post-LN** model every "
    "state after an addition is normalised again (and scaled by LayerNorm's learned gain), so those rows stay near "
    f"√d_model = {math.sqrt(cfg.d_model):.1f} instead of growing.")
st.latex(r"\|x_l\|_2 = \Big(\sum_{i=1}^{d_\text{model}} x_{l,i}^2\Big)^{1/2}")
st.plotly_chart(cached(F.stage_heatmap)(stream.norms, stream.labels, tokens, colorbar="‖x‖", value_name="‖x‖",
                                title=f"‖x‖ per residual state and token ({stack if is_encdec else cfg.arch})"),
                key="depth.norms", width="stretch")

st.subheader("What each sublayer writes")
pos_here = min(position, len(tokens) - 1)
lengths, along = A.contributions(stream, pos_here)
final_norm = float(np.linalg.norm(stream.resid[-1, pos_here]))
st.markdown(
    "Because the stream is a sum, the last state at a position can be taken apart into the pieces that were "
    "added: the token embedding, the position, and every sublayer's output. The waterfall projects each "
    "piece onto the direction of the final state; the diamonds show each piece's full length. A piece "
    "with a long diamond but a short bar wrote something the final state mostly does not point along. "
    "(a = attention, c = cross-attention in an encoder-decoder's decoder, m = MLP.)")
st.latex(r"x_L = e + p + \sum_{l}\big(a_l + [c_l] + m_l\big), \qquad "
         r"\|x_L\| = \sum_{c}\,\big\langle c,\ \hat{x}_L \big\rangle \quad (\hat{x}_L = x_L / \|x_L\|)")
if not stream.is_sum:
    st.warning("This model is post-LN (or has no residual path): every addition is followed by a LayerNorm, so "
               "the final state is **not** the plain sum of the pieces and the bars do not add up to its length. "
               "Pick a pre-LN model in the sidebar to see an exact waterfall.")
st.plotly_chart(cached(F.contribution_figure)(stream.parts, lengths, along, final_norm, stream.is_sum,
                                      title=f"Pieces of the final state at position {pos_here}: "
                                            f"{tokens[pos_here]}  (‖x_L‖ = {final_norm:.2f})"),
                key="depth.contrib", width="stretch")

st.subheader("The logit lens: what the stream would predict if it stopped here")
probs = lens_data(sel.cache_key, out_prefix)
table = A.lens_table(probs, sel.targets)
vocab = sel.task.vocab
top_tokens = np.array(vocab.decode(table.top.ravel().tolist()), dtype=object).reshape(table.top.shape)
colour, colour_name = (table.p_right, "p(right answer)") if scored else (table.p_top, "p(top prediction)")
st.markdown(
    "Decode every state with the model's own final norm and unembedding, as if the network ended there. "
    "Each cell shows the top prediction; its colour is the probability of the right answer (blank where the "
    "position is not scored). Read a column upward to see at which sublayer the answer appears. "
    + ("Post-LN states are normalised already, so the final norm is the identity here. " if cfg.norm == "post" else ""))
st.latex(r"p_l(\cdot \mid \text{position } t) = \operatorname{softmax}\big(W_U\, \mathrm{LN}_\text{final}(x_{l,t})\big)")
st.plotly_chart(cached(F.logit_lens_figure)(colour, top_tokens, table.p_top, table.p_right, out_stream.labels,
                                    sel.query_tokens, colour_name=colour_name,
                                    title="Logit lens: top prediction per state (text) and p(right answer) (colour)"),
                key="depth.lens", width="stretch")
if scored:
    first_right = [next((out_stream.labels[s] for s in range(len(out_stream.labels))
                         if table.top[s, p] == sel.targets[p]), None) for p in scored]
    found = [f for f in first_right if f is not None]
    if found:
        counts = pd.Series(found).value_counts()
        st.caption("Where the right answer first becomes the top prediction (count of scored positions): "
                   + ", ".join(f"{label}: {c}" for label, c in counts.items()) + ".")
try_this(
    "Pick **sort-decoder** and then **sort-decoder-postln** in the sidebar: compare the rows of the first "
    "heatmap (growing vs normalised) and check that only the pre-LN waterfall adds up.",
    "In the logit lens, find the first row where the colour turns bright. Which sublayer put the answer in?",
    "Type an input the model gets wrong (change one token) and watch which row the wrong prediction comes from.",
    "Pick **reverse-encdec**: in the lens the answers appear all at once right after the first cross-attention.",
)

# ---- 2. Backward --------------------------------------------------------------------------------
st.header("2. Backward: where the gradient lands")
back = backward_data(sel.cache_key, prefix, kind, position, targets)
what = ("the mean loss over the scored positions" if kind == "loss"
        else f"the logit of the right answer at position {position} ({sel.query_tokens[position]})")
if kind == "logit" and (sel.targets is None or position >= len(sel.targets) or sel.targets[position] == IGNORE):
    what = f"the model's top logit at position {position} ({sel.query_tokens[position]}), which has no right answer"
st.markdown(
    f"We take one number, here **{what}** (value {back.value:.3f}), and ask how fast it changes with every "
    "state of the stream: the gradient at every `hook_resid_*`, taken through the hooks with "
    "`run_with_cache(..., grad_of=...)` (nothing is written into the model's weights). Going down a block the "
    "gradient is multiplied by the transposed Jacobian, and the identity in it hands the gradient "
    "straight through. Blank cells are exactly zero: in a decoder a later token cannot change an earlier prediction.")
st.latex(r"g_l = \frac{\partial f}{\partial x_l}, \qquad g_l = g_{l+1}\Big(I + \frac{\partial F_l}{\partial x_l}\Big)")
st.plotly_chart(cached(F.stage_heatmap)(back.grad_norms, back.labels, tokens, log=True, colorbar="‖∂f/∂x‖",
                                value_name="‖∂f/∂x‖", title="Gradient norm per residual state and token (log colour)"),
                key="depth.grads", width="stretch")
st.subheader("Which input tokens matter: gradient × embedding")
st.markdown(
    "Multiply the gradient at each token's embedding by the embedding itself. To first order this is how much "
    "the number would change if that token's embedding were scaled down to nothing, and the bars add up to "
    "the change from scaling every embedding at once. Blue pushes the number up, orange down.")
st.latex(r"s_t = \Big\langle \frac{\partial f}{\partial e_t},\ e_t \Big\rangle, \qquad "
         r"\sum_t s_t = \frac{d}{d\alpha} f(\alpha e)\Big|_{\alpha=1}")
st.plotly_chart(cached(F.saliency_figure)(tokens, back.saliency, title=f"Saliency of each input token for {what.split(',')[0]}"),
                key="depth.saliency", width="stretch")
try_this(
    "Switch **Gradient of** to one logit and move the position: which tokens light up for a sort output, "
    "and are they the digits that belong there?",
    "Compare the gradient's rows: does its size change much from the top row to the embedding? That is the "
    "identity path at work in a trained 2-layer model.",
    "For the encoder-decoder model, choose the encoder stack: the decoder's loss reaches the source tokens only "
    "through cross-attention.",
)

# ---- 3. Depth experiment -------------------------------------------------------------------------
st.header("3. Why depth trains: gradients through 48 layers")
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
st.latex(r"\|J_l\| \le \rho < 1:\qquad \|g_{L-k}\| \;\ge\; (1-\rho)^k\,\|g_L\| \ \ \text{with } I, \qquad "
         r"\|g_{L-k}\| \;\le\; \rho^k\,\|g_L\| \ \ \text{without}")

row1 = st.columns(4)
with row1[0]:
    n_layers = _int_widget("Layers L", "depth.layers", "L", 2, A.MAX_EXPERIMENT_LAYERS, A.MAX_EXPERIMENT_LAYERS)
with row1[1]:
    gain = _choice_widget("Init gain", "depth.gain", "gain", GAINS, 1.0, widget=st.select_slider,
                          help="Weights ~ N(0, gain²/fan_in). Below about 1 the plain stack's gradient dies; "
                               "above it, it explodes.")
with row1[2]:
    init_seed = _int_widget("Init seed", "depth.seed", "iseed", 0, 20, 0)
with row1[3]:
    measure = _choice_widget("Measure", "depth.measure", "measure", list(MEASURES), "stream",
                             format_func=_fmt_choice(MEASURES))

row2 = st.columns([4, 1, 1])
with row2[0]:
    def _parse_show(p):
        raw = query.parse_text(p)
        if raw is None:
            return None
        chosen = [v for v in raw.split(",") if v in VARIANT_NAMES]
        if not chosen:
            query.note(f"URL parameter show={raw[:40]!r} names no known stack; showing the default ones.")
            return None
        return chosen

    query.seed("depth.variants", "show", _parse_show, DEFAULT_VARIANTS,
               valid=lambda v: isinstance(v, list) and all(x in VARIANT_NAMES for x in v))
    variants = st.multiselect("Stacks", VARIANT_NAMES, key="depth.variants")
with row2[1]:
    streams = _int_widget("Hyper streams n", "depth.streams", "streams", 2, 8, 4)
with row2[2]:
    noise = _choice_widget("Mixing noise", "depth.noise", "noise", [0.1, 0.25, 0.5, 0.75, 1.0], 0.5,
                           widget=st.select_slider, help="How far the hyper-connections' initial mixing strays from identity.")

profiles = {}
with st.spinner("Building and differentiating the random stacks ..."):
    for v in VARIANT_NAMES:
        hyper = "hyper" in A.VARIANTS[v]
        profiles[v] = experiment(v, n_layers, float(gain), init_seed, streams if hyper else 4,
                                 float(noise) if hyper else 0.5)
plain_factor = A.per_layer_factor(profiles["no residual"].resid_grad)


def _use_measured_rho() -> None:
    if plain_factor is not None and 0 < plain_factor < 1:
        st.session_state["depth.rho"] = float(min(max(round(plain_factor, 2), 0.01), 0.99))


query.seed("depth.rho", "rho", lambda p: query.parse_float(p, 0.01, 0.99), 0.5, valid=lambda v: 0.01 <= v <= 0.99)
rho_cols = st.columns([3, 2])
with rho_cols[0]:
    rho = st.slider("ρ: bound on each branch's Jacobian norm", 0.01, 0.99, step=0.01, key="depth.rho")
with rho_cols[1]:
    can_use = plain_factor is not None and 0 < plain_factor < 1
    st.button(f"ρ ← plain stack's factor ({_fmt(plain_factor)})", on_click=_use_measured_rho,
              disabled=not can_use, key="depth.use_rho",
              help="Only possible when the plain stack's gradient shrinks (factor below 1).")
query.write(L=n_layers, gain=gain, iseed=init_seed, measure=measure, show=",".join(variants),
            streams=streams, noise=noise, rho=f"{rho:g}")
query.show_notes()
if not variants:
    st.warning("Choose at least one stack to draw.")
lower, upper = A.bounds(rho, n_layers)
if measure == "stream":
    curves = {v: A.relative(profiles[v].resid_grad) for v in variants}
    y_title = "‖∂ℓ/∂x_l‖ / ‖∂ℓ/∂x_L‖"
    fig = cached(F.depth_chart)(curves, lower, upper, rho, y_title=y_title,
                        title=f"Gradient at each block's input, relative to the top ({n_layers} layers, gain {gain})")
else:
    curves = {v: A.relative(profiles[v].weight_grad) for v in variants}
    fig = cached(F.depth_chart)(curves, None, None, None, y_title="‖∂ℓ/∂W_l‖ / ‖∂ℓ/∂W_top‖",
                        x_title="block l (0 = input side)",
                        title=f"Gradient of each block's weights, relative to the top block ({n_layers} layers, gain {gain})")
st.plotly_chart(fig, key="depth.chart", width="stretch")
zoomed = {v: c for v, c in curves.items() if v in IDENTITY_STACKS}
if zoomed:
    st.markdown("The stacks with an identity path sit on top of each other above; on their own axis the difference "
                "between a smooth and a zigzag curve shows:")
    st.plotly_chart(cached(F.depth_chart)(zoomed, y_title="relative to the top", title="Zoom: the stacks with an identity path",
                                  x_title="layer l (0 = input side)" if measure == "stream" else "block l (0 = input side)"),
                    key="depth.zoom", width="stretch")

rows = []
for v in VARIANT_NAMES:
    p = profiles[v]
    rel = A.relative(p.resid_grad)
    steps = A.log_steps(p.resid_grad)
    rows.append({
        "stack": v, "what it is": A.VARIANTS[v]["blurb"],
        "‖g_0‖ / ‖g_L‖": _fmt(rel[0]),
        "band max/min": _fmt(_band(p)),
        "per-layer factor": _fmt(A.per_layer_factor(p.resid_grad)),
        "zigzag (std of log step)": _fmt(float(np.std(steps))) if np.isfinite(steps).all() else "overflow",
    })
st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")
pre, post, plain, nonorm = (profiles[v] for v in ("pre-LN", "post-LN", "no residual", "no norm"))
rel_pre, rel_plain, rel_nonorm = (A.relative(p.resid_grad) for p in (pre, plain, nonorm))
zig_pre, zig_post = np.std(A.log_steps(pre.resid_grad)), np.std(A.log_steps(post.resid_grad))
plain_text = (f"the gradient at the bottom is {_fmt(rel_plain[0])} times the top's, a straight line on the log "
              f"axis: the same factor ({_fmt(plain_factor)}) every layer, which is ρ^L. With a small gain it dies, "
              "with a large one it explodes; either way it is geometric.")
if not np.isfinite(rel_plain).all():
    plain_text = ("at this gain the forward pass itself overflowed (the gaps): every layer multiplied the signal "
                  f"by about {_fmt(plain_factor)}. Lower the gain to see it die instead.")
floor_text = ("above the (1 − ρ)^(L−l) floor at every layer" if np.all(rel_pre >= lower - 1e-12)
              else "below the (1 − ρ)^(L−l) floor somewhere: the bound assumed ‖J‖ ≤ ρ, and at this ρ that is false")
st.markdown(
    f"""What the measurements say at these settings:

- **No residual**: {plain_text}
- **Pre-LN**: the identity path carries the gradient through untouched and each branch adds a little, so the curve
  is smooth and stays in a band of ×{_fmt(np.nanmax(rel_pre) / np.nanmin(rel_pre))} across {n_layers} layers,
  {floor_text}.
- **Post-LN**: the gradient passes a LayerNorm in every layer. Each one divides by the spread of the sum it
  normalises and removes two directions, so every layer multiplies the gradient by its own factor and the curve
  zigzags: the spread of its per-layer log step is {_fmt(zig_post)}, against {_fmt(zig_pre)} for pre-LN
  (×{_fmt(zig_post / zig_pre)}). The seed warns that these LayerNorm factors can exceed 1 and compound into an
  explosion; at initialisation here they scatter around 1 (overall factor {_fmt(A.per_layer_factor(post.resid_grad))}
  per layer), and the cost of post-LN shows up in training (see the twins below). The floor does not apply to it:
  its path is LN(x + F(x)), not x + F(x).
- **No norm**: the identity path is there, but nothing stops the branches' outputs from compounding, so the stream
  and its gradient can grow layer after layer: here the bottom's gradient is {_fmt(rel_nonorm[0])} times the top's.
- **Hyper-connections (Sinkhorn)**: a band of ×{_fmt(_band(profiles["hyper (Sinkhorn)"]))}, like pre-LN; the same
  streams with **free** mixing matrices: ×{_fmt(_band(profiles["hyper (free mixing)"]))}.
""")

st.subheader("Hyper-connections: several residual streams, mixed doubly-stochastically")
st.markdown(
    "Instead of one stream, keep **n** of them side by side. Around every sublayer a small matrix H_res mixes the "
    "streams, h_pre reads the sublayer's input as a weighted average of them, and h_post writes its output back. "
    "If H_res were any learned matrix, its products over 2L sublayers could grow or shrink without limit (the "
    "*free mixing* curve). Making it **doubly stochastic**, every row and every column summing to 1, caps its norm "
    "at exactly 1 and passes the average of the streams through unchanged: an identity path that survives the "
    "mixing. Sinkhorn's method gets there from any matrix of logits by rescaling rows and columns in turn.")
st.latex(r"x_{l+1} = H^{\text{res}}_l\, x_l + h^{\text{post}}_l \otimes F_l\big(\mathrm{LN}(h^{\text{pre}}_l \cdot x_l)\big)")
st.latex(r"H^{\text{res}} = \operatorname{Sinkhorn}(e^{\Theta}):\quad H\mathbf{1} = \mathbf{1},\quad "
         r"\mathbf{1}^\top H = \mathbf{1}^\top \quad\Longrightarrow\quad \|H^{\text{res}}\|_2 = 1")
mats = mixing_example(n_layers, float(gain), init_seed, streams, float(noise))
hcols = st.columns([2, 1])
with hcols[0]:
    sublayer = st.slider("Sublayer of the Sinkhorn stack", 0, 2 * n_layers - 1, 0, key="depth.sublayer",
                         help="Even = attention, odd = MLP.")
    m = mats[sublayer]
    st.plotly_chart(cached(F.mixing_figure)(m, title=f"H_res of sublayer {sublayer} "
                                               f"({'attention' if sublayer % 2 == 0 else 'MLP'} of block {sublayer // 2})"),
                    key="depth.mixing", width="stretch")
with hcols[1]:
    # H_last ... H_0 (np.linalg.multi_dot would spend ~80 ms choosing an order for up to 96 equal squares)
    prod = functools.reduce(np.matmul, mats[::-1])
    def _err(sums: np.ndarray) -> str:
        return f"all 1 (largest error {np.abs(sums - 1).max():.0e})"

    st.markdown(
        "| check | value |\n|---|---|\n"
        f"| row sums | {_err(m.sum(1))} |\n"
        f"| column sums | {_err(m.sum(0))} |\n"
        f"| largest singular value | {np.linalg.norm(m, 2):.6f} |\n"
        f"| all {len(mats)} multiplied: rows | {_err(prod.sum(1))} |\n"
        f"| all {len(mats)} multiplied: columns | {_err(prod.sum(0))} |")
    st.caption("The product of doubly-stochastic matrices is doubly stochastic again: however deep the stack, "
               "the mixing path neither grows nor shrinks the streams' average.")
try_this(
    "Slide the gain from 0.5 to 1.5: the plain stack flips from vanishing to exploding, while pre-LN barely moves.",
    "Press the ρ button, then read the floor: how far above (1 − ρ)^(L−l) are the residual stacks? The bound is a worst case.",
    "Switch **Measure** to the weights: which stack gives its bottom block a usable gradient?",
    "Raise the mixing noise to 1 and compare *hyper (free mixing)* with *hyper (Sinkhorn)*.",
    "Halve the number of layers: how do the end points of the plain stack and of ρ^L move?",
)

# ---- 3b. Twins ----------------------------------------------------------------------------------
st.subheader("The bundled twins: pre-LN and post-LN after training")
twins = twin_ids()
if twins is None:
    st.warning("No bundled pre-LN / post-LN pair was found in assets/models (they are built by "
               "`python -m core.train --all`).")
else:
    data = twins_data(twins[0], twins[1], sel.device)
    st.markdown(
        f"**{twins[0]}** and **{twins[1]}** share the task, the sizes, the seed and the training recipe; only the "
        f"place of LayerNorm differs. Both are measured on the same {TWIN_SAMPLES} fresh examples, trained (solid) and "
        "as freshly initialised copies (dotted): on the left the stream's size, on the right the loss gradient at "
        "every state, divided by its value at the top state.")
    norms, grads = {}, {}
    for label in ("pre-LN", "post-LN"):
        for when in ("trained", "untrained"):
            norms[f"{label} {when}"] = data[label][when].resid_norm
            grads[f"{label} {when}"] = A.relative(data[label][when].resid_grad)
    stages = data["pre-LN"]["trained"].labels
    tcols = st.columns(2)
    with tcols[0]:
        st.plotly_chart(cached(F.twins_chart)(stages, norms, "mean ‖x‖ over tokens", title="Stream size along the depth",
                                      log=False), key="depth.twins_norm", width="stretch")
    with tcols[1]:
        st.plotly_chart(cached(F.twins_chart)(stages, grads, "‖∂ℓ/∂x‖ / ‖∂ℓ/∂x_top‖",
                                      title="Loss gradient along the stream (relative to the top)"),
                        key="depth.twins", width="stretch")
    twin_rows = []
    for label in ("pre-LN", "post-LN"):
        d = data[label]
        twin_rows.append({"model": d["id"], "norm": label, "accuracy": d["accuracy"],
                          "loss (trained)": float(f"{d['trained'].loss:.2g}"),
                          "loss (untrained)": float(f"{d['untrained'].loss:.3g}"),
                          "‖x‖ top/embed": _fmt(d["trained"].resid_norm[-1] / d["trained"].resid_norm[0]),
                          "g_embed/g_top": _fmt(A.relative(d["trained"].resid_grad)[0]),
                          "g_embed/g_top untrained": _fmt(A.relative(d["untrained"].resid_grad)[0])})
    st.dataframe(pd.DataFrame(twin_rows), hide_index=True, width="stretch")
    pre_d, post_d = data["pre-LN"]["trained"], data["post-LN"]["trained"]
    st.markdown(
        f"After training, the pre-LN stream grows from {pre_d.resid_norm[0]:.1f} at the embedding to "
        f"{pre_d.resid_norm[-1]:.1f} at the top, because every sublayer adds to it; the post-LN stream is pulled back "
        f"after every addition and ends at {post_d.resid_norm[-1]:.1f}. In two layers both get a usable gradient to "
        f"the embedding (×{_fmt(A.relative(pre_d.resid_grad)[0])} and ×{_fmt(A.relative(post_d.resid_grad)[0])} the "
        "top's): post-LN's troubles are about depth and the early steps of training, which is why the 48-layer "
        "chart above, not this pair, is where they show.")

# ---- 4. Long-range paths ---------------------------------------------------------------------------
st.header("4. Long-range paths: how many layers until the last token hears the first?")
st.markdown(
    "Follow information backwards from the last token. In one layer it can stay where it is (the residual path) "
    "or jump to whatever an attention head looks at. With H heads that is H + 1 choices per layer, so L layers "
    "can reach at most (H + 1)^L positions, and covering n positions needs about ln n / ln(H + 1) layers: "
    "logarithmic in n. An RNN has no shortcut: the first token's information passes through every step, n − 1 of "
    "them. Below, the formula is drawn beside layer counts **measured** by following attention edges from the last "
    "token, layer by layer: perfectly spread heads (head j of layer l looks back exactly j·(H+1)^l), random sharp "
    "heads (each looks at one earlier key drawn at random; mean of 16 draws), and the sidebar model's own attention "
    "thresholded into edges (with `core.masks.receptive_field`).")
st.latex(r"(H+1)^L \ge n \iff L \ge \frac{\ln n}{\ln (H+1)} \qquad\text{vs.}\qquad L_\text{RNN} = n - 1")
pcols = st.columns(3)
with pcols[0]:
    n_path = _choice_widget("Sequence length n", "depth.n", "n", PATH_NS, 64, widget=st.select_slider)
with pcols[1]:
    heads = _int_widget("Heads H", "depth.H", "H", 1, 16, 4)
with pcols[2]:
    tau = _choice_widget("Edge threshold τ (the model)", "depth.tau", "tau",
                         [0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9], 0.1, widget=st.select_slider,
                         help="A head's weight from query q to key k counts as an edge when it is at least τ.")
query.write(n=n_path, H=heads, tau=tau)
query.show_notes()
curves_p = path_curves(heads)
m1, m2, m3, m4 = st.columns(4)
m1.metric("ln n / ln(H+1)", f"{A.hop_formula(n_path, heads):.2f}")
m2.metric("spread heads", f"{A.strided_head_layers(n_path, heads)} layers")
m3.metric("random heads (mean)", f"{A.random_head_mean(n_path, heads):.2f} layers")
m4.metric("RNN", f"{A.rnn_path(n_path)} steps")

path_prefix = "encoder." if is_encdec else ""
path_tokens = sel.tokens
needed, fields, model_layers = model_paths(sel.cache_key, path_prefix, float(tau))
point = None
if needed is not None:
    point = (len(path_tokens), needed, f"{sel.model_id} (H={cfg.n_heads}, τ={tau})")
st.plotly_chart(cached(F.paths_chart)(curves_p["ns"], curves_p["formula"], curves_p["ideal"], curves_p["random"],
                              curves_p["rnn"], heads, chosen_n=n_path, model_point=point,
                              title="Layers needed for the last token to reach the first"),
                key="depth.paths", width="stretch")
below = curves_p["random"] < curves_p["formula"]  # [n]
beats = [int(curves_p["ns"][i]) for i in range(len(below)) if below[i:].all()]  # from here on, always below
st.markdown(
    "Spread heads need exactly the formula's count, rounded up: they cover every earlier position, and no layout "
    "of H heads can cover more than (H + 1)^L. "
    + (f"From n = {beats[0]} on, random sharp heads need fewer layers than the formula: they only need *one* path "
       "to the first token, not a path to every position, and a random jump back lands on average halfway. "
       if beats else "")
    + "Every Transformer curve grows like ln n; the RNN's grows like n.")

st.subheader(f"The sidebar model's own attention graph ({'encoder' if is_encdec else cfg.arch}, {model_layers} layers)")
where = f"the last token ({len(path_tokens) - 1}: {path_tokens[-1]})"
if needed is None:
    st.warning(f"With τ = {tau}, no chain of edges connects the first token to {where}, however many of this model's "
               "layers are stacked: lower τ so weaker attention counts as an edge.")
else:
    repeat = "" if needed <= model_layers else (f" The model has only {model_layers} layers, so its layers are "
                                                f"repeated in order to ask how many such layers it would take.")
    st.markdown(f"With τ = {tau}, the first token reaches {where} after **{needed}** stacked layer(s). "
                f"An RNN would need {len(path_tokens) - 1} steps.{repeat}")
if len(fields):
    shown = fields[:MAX_PATH_DRAW]
    names = [f"{k + 1} (layer {k % model_layers})" for k in range(len(shown))]
    st.plotly_chart(cached(F.receptive_field_figure)(shown, path_tokens, names,
                                             title="Tokens that can reach the last token after k stacked layers"),
                    key="depth.field", width="stretch")
try_this(
    "Double n several times at H = 1: the formula adds one layer per doubling, the RNN doubles.",
    "Raise H from 1 to 8 at n = 1024 and watch the layers fall like 1 / ln(H + 1).",
    "Raise τ on the model until the star disappears: how sharp must attention be for the first token to get through?",
)
