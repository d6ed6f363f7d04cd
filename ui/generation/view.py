"""The Generation page's panels: the three families' anatomy, attention shapes live, the decoding
stepper with and without a key-value cache, a leak through a bidirectional encoder, and why the
decoder is masked. pages/generation.py calls them in reading order.

The numbers come from core.analysis.generation and core.analysis.leakage, the cached runs and
figures from ui.generation.runs.

What a click reruns: the sidebar (model, input) feeds every panel and reruns the whole page. A panel's
own controls sit inside its fragments and redraw only those (1: `hook_explorer`, `hook_table`,
`identity_checks`; 2: `shapes_live`; 4: `leak_gradients`; 5: `masked_training`). Panel 3's prompt, number
of steps and step are read by sections (ui.shell.sections: `@S.section(..., reads=...)`), and a change
reruns those alone. The "Switch to reverse-encdec" buttons (`offer_encdec`, a fragment of its own) change
the sidebar's model, so they rerun the whole page (`st.rerun(scope="app")`).
"""

from __future__ import annotations

from functools import partial

import numpy as np
import pandas as pd
import streamlit as st

from core.analysis import bounds as B
from core.analysis import generation as G
from core.analysis import leakage as L
from core.figures import generation as FG
from ui.generation import runs as R
from ui.shell import models, precomputed
from ui.shell.export import chart_config
from ui.shell.page import computed, csv_download, lazy_expander, rows_table, try_this, display_name
from ui.shell.params import Choice, Int, Params
from ui.shell.sections import Sections
from ui.shell.sidebar import Selection
from ui.shell.text import code, literal, plotly_literal

MAX_STEPS = 64  # decoding steps the stepper draws
MAX_TIMED = 128  # tokens the timing chart generates
# A checkpoint from a folder (GPT-2 small: 12 layers, d_model 768, 50,257 tokens) pays a whole forward pass per
# step without the cache, and the stepper watches every attention: on one CPU thread a 128-token prompt and 32 steps
# took 25 s to recompute, so it reads a shorter prompt and writes fewer tokens, and is timed only when asked.
MAX_PROMPT = 64  # prompt tokens the stepper reads (any model): it records every attention of every step
MAX_TEXT_STEPS = 16  # decoding steps the stepper draws for one
MAX_TEXT_TIMED = 16  # tokens the timing chart generates for one
MAX_VOCAB_COLUMNS = 64  # a vocabulary axis longer than this is drawn for the input's own tokens only
STEPPER_BOUND = B.Bound(MAX_PROMPT, "The stepper records every attention of every decoding step, with and without "
                                    "the cache (without it each step recomputes every earlier position)")
FILL_TOP_K = 5  # an encoder's guesses shown for each hidden token
TINY_STEPS = 250  # training steps of each tiny decoder
ATTENTIONS = {"self": "self-attention", "cross": "cross-attention (decoder)", "enc": "encoder self-attention"}

URL = Params(
    "generation",
    Choice("hook", "", choices=()),  # the current model's hook names, given when drawn
    Choice("attn", "self", choices=tuple(ATTENTIONS)),
    Int("layer", 0, lo=0, hi=0),
    Int("perm", 1, lo=0, hi=10_000),
    Int("le", 1, lo=1, hi=128),
    Int("ld", 1, lo=1, hi=128),
    Int("prompt", 1, lo=1, hi=128),
    Int("steps", 1, lo=1, hi=MAX_STEPS),
    Int("t", 0, lo=0, hi=MAX_STEPS - 1),
    Int("kvlayer", 0, lo=0, hi=0),
    Int("tlen", 64, lo=1, hi=MAX_TIMED),
    Int("ex", 0, lo=0, hi=10_000),
    Int("tseed", 0, lo=0, hi=10_000),
)
S = Sections("generation")  # the stepper's sections say which of prompt, steps and t they read
TIMING_RUN_KEY = "generation.timing_run"
DIAGRAM_KEY, CLICKED_KEY = "generation.diagram", "generation.clicked"
THIS_MODEL = "★"  # marks the diagram columns of the sidebar's model


@st.fragment  # local: the switch button reruns only this note, which then reruns the whole page
def offer_encdec(sel: Selection, what: str, key: str) -> None:
    """Say that `what` needs an encoder-decoder model, with a button that switches the sidebar to one. It reads
    no panel's controls, so it is a fragment of its own, outside the panel's (the button stays in a fragment)."""
    st.info(f"{what} needs an encoder-decoder model; **{display_name(sel.model_id)}** is {G.FAMILY_NAMES[sel.arch].lower()}.",
            icon=":material/info:")
    if st.button(f"Switch to {R.ENCDEC_ID}", key=key, on_click=R.switch_model, args=(R.ENCDEC_ID,),
                 icon=":material/swap_horiz:"):
        st.rerun(scope="app")  # the sidebar's model is outside this panel: rerun the whole page


# ---------------------------------------------------------------------------------------------
# The URL, read before the title
# ---------------------------------------------------------------------------------------------


def attention_choices(sel: Selection) -> tuple[str, ...]:
    """The attentions the identity check can take: an encoder-decoder has three kinds."""
    return tuple(ATTENTIONS) if sel.arch == "encoder-decoder" else ("self",)


def default_hook(sel: Selection) -> str:
    """The hook shown first: cross-attention's pattern where there is one, else the first self-attention's."""
    return "decoder.blocks.0.cross_attn.hook_pattern" if sel.arch == "encoder-decoder" else "blocks.0.attn.hook_pattern"


def is_text(sel: Selection) -> bool:
    """Whether the sidebar's model is a checkpoint from a folder, reading free text."""
    return models.is_text_model(sel.meta)


def room(sel: Selection) -> int:
    """How many positions the generating stack may hold: a decoder's learned table stops at max_len."""
    cfg = sel.model.cfg
    return cfg.max_len if cfg.pos == "learned" and sel.arch == "decoder" else 10_000


def stepper_bounds(sel: Selection) -> dict:
    """Prompt and step ranges the stepper allows for this model and input: an encoder-decoder starts
    from <bos> and writes the source's length plus <eos>; a decoder's prompt runs up to <sep> (or
    half the input) and it writes the rest."""
    n = len(sel.tokens)
    if sel.arch == "encoder-decoder":
        return {"prompt": 1, "prompt_hi": 1, "steps": min(MAX_STEPS, n + 1), "steps_hi": MAX_STEPS}
    cut = sel.tokens.index("<sep>") + 1 if "<sep>" in sel.tokens else max(1, n // 2)
    prompt_hi = max(1, min(n, room(sel) - 1, MAX_PROMPT))
    prompt = min(cut, prompt_hi)
    return {"prompt": prompt, "prompt_hi": prompt_hi, "steps": max(1, min(n - prompt, steps_hi(sel, prompt))),
            "steps_hi": steps_hi(sel, prompt)}


def steps_hi(sel: Selection, prompt: int) -> int:
    """The most tokens the stepper may write after a prompt of `prompt` tokens."""
    return max(1, min(MAX_TEXT_STEPS if is_text(sel) else MAX_STEPS, room(sel) - prompt))


def seed_url(sel: Selection) -> None:
    """Read the page's URL parameters before the title, so what was wrong with them shows under it."""
    URL.hook.seed(choices=tuple(sel.model.hook_names()), default=default_hook(sel))
    URL.attn.seed(choices=attention_choices(sel))
    URL.layer.seed(hi=sel.model.cfg.n_layers - 1)
    URL.perm.seed()
    if sel.arch != "encoder":
        b = stepper_bounds(sel)
        prompt = URL.prompt.seed(hi=b["prompt_hi"], default=b["prompt"])
        steps = URL.steps.seed(hi=steps_hi(sel, prompt), default=b["steps"])
        URL.t.seed(hi=steps - 1)
        URL.kvlayer.seed(hi=sel.model.cfg.n_layers - 1)
        URL.tlen.seed(hi=timing_cap(sel, prompt))
    URL.ex.seed()
    URL.tseed.seed()


def timing_cap(sel: Selection, prompt: int) -> int:
    """How many tokens the timing chart may generate (a learned position table stops at max_len)."""
    return max(1, min(MAX_TEXT_TIMED if is_text(sel) else MAX_TIMED, room(sel) - prompt))


# ---------------------------------------------------------------------------------------------
# 1. Anatomy
# ---------------------------------------------------------------------------------------------


def diagram_columns(sel: Selection) -> tuple:
    """One column per stack of each family (the current model's sizes), with the hooks of block 0
    and those outside the blocks, as (title, ((name, sublayer, axes text), ...))."""
    columns = []
    for arch in G.FAMILIES:
        hooks = R.family_hooks(sel.model_id, sel.device, arch)
        mine = arch == sel.arch
        stacks = ("encoder", "decoder") if arch == "encoder-decoder" else ("",)
        for stack in stacks:
            kept = tuple((h.name, h.sublayer, " × ".join(h.axes)) for h in hooks
                         if (h.stack == stack or (h.name == "hook_logits" and stack in ("", "decoder")))
                         and h.layer in (None, 0))
            columns.append((column_heading(arch, stack, mine), kept, mine))
    return tuple(columns)


def column_heading(arch: str, stack: str, mine: bool) -> str:
    """A diagram column's heading, one line short enough for a quarter of a 1024-wide screen (a second
    line would run into the first box): the family (the encoder-decoder's shortened, with its stack),
    marked ★ when it is this model's."""
    family = G.FAMILY_NAMES[arch].split(" (")[0]
    title = f"Enc-dec: {stack}" if stack else family
    return title + (f" {THIS_MODEL}" if mine else "")


def axes_text(info: G.HookInfo) -> str:
    """`(1, 5, 4, 16) = B × L_e × h × d_h`."""
    return f"{tuple(info.shape)} = {' × '.join(info.axes)}"


def as_matrix(values: np.ndarray, axes: tuple[str, ...]) -> tuple[np.ndarray, str, str]:
    """A hook's tensor for the first batch row as a matrix: positions down, everything else flattened
    across (a pattern: queries down, heads × keys across). Returns (matrix, row axis, column axes)."""
    x = values[0]  # [..] without the batch axis
    rest = axes[1:]
    if len(rest) == 3 and rest[0] == "h":  # [h q k] -> [q h*k]
        return x.transpose(1, 0, 2).reshape(x.shape[1], -1), rest[1], f"{rest[0]} × {rest[2]}"
    if len(rest) == 3:  # [pos h d_h] -> [pos h*d_h]
        return x.reshape(x.shape[0], -1), rest[0], f"{rest[1]} × {rest[2]}"
    return x, rest[0], rest[1]


def clicked_dot(names: tuple[str, ...]) -> None:
    """A dot clicked in the diagram picks that hook (when this model has it), once per click: the
    click is read before the hook's select box is drawn, on the rerun the click started."""
    event = st.session_state.get(DIAGRAM_KEY)
    points = (event or {}).get("selection", {}).get("points", []) if isinstance(event, dict) else []
    data = points[0].get("customdata") if points else None
    name = data[0] if isinstance(data, (list, tuple)) and data else None
    if name is None or name == st.session_state.get(CLICKED_KEY):
        return
    st.session_state[CLICKED_KEY] = name
    if name in names:
        st.session_state[URL.hook.key] = name
    else:
        st.toast(f"{name} belongs to another family's diagram; this model has no such hook.")


def anatomy_panel(sel: Selection) -> None:
    """Panel 1: the families' block diagrams, a tensor at any hook, and two identities of a layer. Its
    three interactive parts are fragments of their own; the text around them is drawn on full runs only."""
    st.subheader("1 · Anatomy of the three families")
    st.markdown("Each box is a sublayer, each dot a hook point, in this model's sizes; pick a hook (or click a dot) "
                "to see its tensor for your input.")
    with st.expander("Read more: encoder, decoder, encoder-decoder"):
        st.markdown(
            "Three ways to stack the same parts. An **encoder** (BERT-like) lets every token see every other; a "
            "**decoder** (GPT-like) lets each token see only the past, so it can write one token after another; an "
            "**encoder-decoder** (T5-like, the original Transformer) reads the source with an encoder and writes the "
            "output with a decoder whose extra **cross-attention** sublayer takes its queries from the decoder and its "
            "keys and values from the encoder's output. Each box below is a sublayer, each dot a hook point; the "
            "diagrams use this model's sizes. Pick a hook of this model to see its tensor for your input.")
    hook_explorer(sel)
    hook_table(sel)
    identities_section(sel)
    try_this(
        "Pick `decoder.blocks.0.cross_attn.hook_k` on reverse-encdec: its length axis is **L_e**, the source's. "
        "Then `...cross_attn.hook_q`: **L_d**. Queries come from the decoder, keys from the encoder.",
        "Type a longer source in the sidebar: every tensor with L_e grows, the decoder's L_d follows its own input.",
        "Compare the columns: the encoder-only and decoder-only columns have the same boxes; only the mask differs.",
    )


@st.fragment  # local: the hook picker and a dot clicked redraw only the picker, the diagram and the tensor
def hook_explorer(sel: Selection) -> None:
    """The hook picker, the diagram (a dot clicked picks a hook) and the picked hook's tensor."""
    hooks = R.anatomy(sel.cache_key)
    by_name = {h.name: h for h in hooks}
    names = tuple(by_name)
    clicked_dot(names)
    picked = URL.hook.widget(st.selectbox, "Hook point of this model", choices=names, default=default_hook(sel),
                             help="Every hook point, in the order a forward pass calls them.")
    st.plotly_chart(R.diagram_figure(diagram_columns(sel), sel.model.cfg.n_layers, picked,
                                     "Sublayers (boxes) and hook points (dots), one block shown"),
                    key=DIAGRAM_KEY, on_select="rerun", selection_mode="points",
                    config=chart_config("generation", sel.model_id, "hook-diagram"))
    st.caption(f"Click a dot in a column marked {THIS_MODEL} (this model's) or choose above to see its tensor.")
    info = by_name[picked]
    st.markdown(f"**`{picked}`**: shape **{axes_text(info)}** ({info.sublayer}).")
    columns = vocab_columns(sel, info)
    if columns is None:
        matrix, row_axis, col_axes = as_matrix(R.hook_tensor(sel.cache_key, picked), info.axes)
        col_labels = None
    else:  # a real vocabulary: the logits of the input's own tokens, never all 50,257 columns
        matrix, row_axis = R.hook_columns(sel.cache_key, picked, columns)[0], info.axes[1]
        col_axes = "V: your input's tokens"
        col_labels = [plotly_literal(f"{label} (id {i})") for label, i in zip(sel.task.vocab.decode(columns), columns)]
        st.caption(f"The vocabulary axis has {info.shape[-1]:,} tokens; the figure shows the logits of the "
                   f"{len(columns)} different tokens of your input" +
                   (f" (the first {MAX_VOCAB_COLUMNS})" if len(columns) == MAX_VOCAB_COLUMNS else "") + ".")
    labels = sel.query_tokens if row_axis == "L_d" else sel.tokens
    rows = labels if len(labels) == matrix.shape[0] else [str(i) for i in range(matrix.shape[0])]
    st.plotly_chart(R.tensor_figure(matrix, rows, col_axes, row_axis, f"{picked} for your input (batch row 0)",
                                    picked.endswith("hook_pattern"), col_labels),
                    key="generation.tensor", config=chart_config("generation", sel.model_id, picked))
    blocks = FG.tensor_blocks(*matrix.shape)
    if blocks != (1, 1):
        how = "its largest weight" if picked.endswith("hook_pattern") else "its value of largest size, with its sign"
        st.caption(f"This tensor is {matrix.shape[0]:,} × {matrix.shape[1]:,} numbers, more than a figure can send "
                   f"and show cell by cell: it is drawn in blocks of {blocks[0]} × {blocks[1]} cells, each showing "
                   f"{how} (the labels name the positions each block spans). The Attention page reads one head's "
                   "weights token by token.")


def vocab_columns(sel: Selection, info: G.HookInfo) -> tuple[int, ...] | None:
    """For a hook whose last axis is a vocabulary too long to draw (a real checkpoint's), the ids of the input's
    own tokens, each once, in order (at most MAX_VOCAB_COLUMNS); None for every other hook."""
    if info.axes[-1] != "V" or info.shape[-1] <= MAX_VOCAB_COLUMNS:
        return None
    ids = sel.tgt_ids if info.axes[1] == "L_d" and sel.tgt_ids is not None else sel.ids
    return tuple(dict.fromkeys(int(i) for i in ids[0].tolist()))[:MAX_VOCAB_COLUMNS]


@st.fragment  # local: opening or closing the expander redraws only the expander
def hook_table(sel: Selection) -> None:
    """Every hook of the model with its shape, in an expander built only while open. It reads no hook
    picked, so a hook click does not redraw it, and opening it reruns only this."""
    every_hook = lazy_expander("Every hook of this model with its shape", "generation.hooks_open")
    if every_hook is not None:  # built only while open: a closed one costs nothing on the panel's clicks
        table = rows_table([{"hook": h.name, "sublayer": h.sublayer, "axes": " × ".join(h.axes),
                             "shape": "×".join(map(str, h.shape))} for h in R.anatomy(sel.cache_key)])
        with every_hook:
            st.dataframe(table, hide_index=True)
            csv_download(table, f"hooks-{sel.model_id}.csv", "generation.hooks_csv")


def identities_section(sel: Selection) -> None:
    """The concat-heads-then-W_O = sum-of-heads identity and the MLP's permutation check."""
    st.markdown("#### Two facts about a layer, checked on your input")
    st.markdown(
        "Concatenating the heads and applying W_O is the same as sending each head through its own d_h rows of "
        "W_O and adding the results: each head writes its own contribution into the residual stream. The MLP "
        "reads each position alone: shuffle the positions of its input and its output is shuffled the same way.")
    st.latex(r"\mathrm{Concat}(z_1,\dots,z_h)\,W_O=\sum_{i=1}^{h} z_i\,W_O^{(i)},\qquad "
             r"\mathrm{MLP}(P x) = P\,\mathrm{MLP}(x)")
    identity_checks(sel)


@st.fragment  # local: the attention, layer and permutation seed redraw only these controls, the metrics and the heads
def identity_checks(sel: Selection) -> None:
    """The attention, layer and permutation seed, and both identities measured there with each head's share."""
    c1, c2, c3 = st.columns(3)
    with c1:
        which = URL.attn.widget(st.selectbox, "Attention", choices=attention_choices(sel), format_func=ATTENTIONS.get)
    with c2:
        layer = URL.layer.widget(st.selectbox, "Layer", hi=sel.model.cfg.n_layers - 1)
    with c3:
        perm_seed = URL.perm.widget(st.number_input, "Permutation seed", step=1)
    prefix = {"enc": "encoder.", "cross": "decoder.", "self": "decoder." if sel.arch == "encoder-decoder" else ""}[which]
    module = "cross_attn" if which == "cross" else "attn"
    checks = R.identities(sel.cache_key, prefix, int(layer), module, int(perm_seed))
    tokens = sel.tokens if prefix == "encoder." else sel.query_tokens
    m1, m2 = st.columns(2)
    m1.metric("max |concat·W_O − Σ heads|", f"{checks['heads_diff']:.2e}")
    m2.metric("max |MLP(Px) − P·MLP(x)|", f"{checks['mlp_diff']:.2e}",
              help=f"P reorders the positions as {list(checks['perm'])}")
    st.plotly_chart(R.heads_figure(checks["norms"], list(tokens),
                                   f"Each head's share of {prefix}blocks.{layer}.{module}'s output"),
                    key="generation.heads",
                    config=chart_config("generation", sel.model_id, f"head-shares-{prefix}{module}-l{layer}"))
    csv_download(lambda: head_norms_table(checks["norms"], tokens), "head-contributions.csv", "generation.heads_csv")


def head_norms_table(norms: np.ndarray, tokens) -> pd.DataFrame:
    """Each head's share of the layer's output at each token: a row per token, a column per head."""
    table = pd.DataFrame(norms.T, columns=[f"head {h}" for h in range(norms.shape[0])])  # [token head]
    table.insert(0, "token", list(tokens))
    return table


# ---------------------------------------------------------------------------------------------
# 2. Shapes, live
# ---------------------------------------------------------------------------------------------


def shapes_panel(sel: Selection) -> None:
    """Panel 2: the tensors of the three attention types as blocks with their real sizes. The heading,
    explanation, the offer of an encoder-decoder and 'Try this' sit outside the fragment."""
    st.subheader("2 · Shapes, live")
    st.markdown(
        "The original architecture has three attentions. The encoder's self-attention compares the source with "
        "itself (L_e × L_e scores); the decoder's masked self-attention compares the output so far with itself "
        "(L_d × L_d, lower triangle); cross-attention compares each decoder position with every source position "
        "(L_d × L_e). Each block below is drawn at its size: height and width are its last two axes.")
    st.latex(r"\begin{gathered} \underbrace{Q}_{B\times h\times L_d\times d_h}\;\underbrace{K^{\top}}_{B\times h\times d_h\times L_e}"
             r"=\underbrace{S}_{B\times h\times L_d\times L_e} \\ \mathrm{softmax}(S)\,\underbrace{V}_{B\times h\times L_e\times d_h}"
             r" \end{gathered}")
    if sel.arch != "encoder-decoder":
        offer_encdec(sel, "Cross-attention", "generation.switch_shapes")
    shapes_live(sel)
    try_this(
        "Drag **L_e** down: the keys, values and cross-attention scores shrink; the decoder's queries do not move.",
        "Drag **L_d** instead: only the decoder's blocks change. Cross-attention costs L_d × L_e, so doubling the "
        "source doubles it.",
    )


@st.fragment  # local: L_e and L_d redraw only these controls, the blocks, the multiply-adds and the download
def shapes_live(sel: Selection) -> None:
    """L_e and L_d, the attention tensors drawn at those sizes and their multiply-adds."""
    n_src = len(sel.tokens)
    n_tgt = len(sel.query_tokens)
    c1, c2 = st.columns(2)
    with c1:
        src_len = URL.le.widget(st.slider, "source tokens used (L_e)" if sel.arch == "encoder-decoder"
                                else "input tokens used (L)", hi=n_src, default=n_src)
    with c2:
        if sel.arch == "encoder-decoder":
            tgt_len = URL.ld.widget(st.slider, "decoder tokens used (L_d)", hi=n_tgt, default=n_tgt)
        else:
            URL.ld.clear()
            tgt_len = src_len
    rows = R.shape_rows(sel.model_id, sel.device, int(src_len), int(tgt_len))
    own = {"encoder": ("encoder self-attention",), "decoder": ("decoder masked self-attention",)}.get(
        sel.arch, G.ATTENTION_KINDS)
    shown = tuple(r for r in rows if r[0] in own)
    st.plotly_chart(R.shapes_figure(shown, f"L_e = {src_len}, L_d = {tgt_len}, h = {sel.model.cfg.n_heads}, "
                                           f"d_h = {sel.model.cfg.d_head}"), key="generation.shapes",
                    config=chart_config("generation", sel.model_id, f"shapes-le{src_len}-ld{tgt_len}"))
    table = lambda: pd.DataFrame([{"attention": kind, "tensor": label, "axes": " × ".join(axes),  # noqa: E731
                                   "sizes": " × ".join(map(str, sizes)), "numbers": int(np.prod(sizes))}
                                  for kind, blocks in shown for label, axes, sizes in blocks])  # built on a press
    macs = [{"attention": kind, "multiply-adds (QKᵀ and PV)":
             G.attention_macs(sel.model.cfg, 1, blocks[0][2][2], blocks[1][2][2])} for kind, blocks in shown]
    st.dataframe(rows_table(macs), hide_index=True)
    csv_download(table, "attention-shapes.csv", "generation.shapes_csv")


# ---------------------------------------------------------------------------------------------
# 3. The decoding stepper
# ---------------------------------------------------------------------------------------------


def move_step(delta: int, hi: int) -> None:
    """Button callback: step the slider by `delta`, within 0..hi, then rerun only the sections that read the step
    (`step_shown` among them, which holds the slider: it shows the new step and writes it to the URL)."""
    key = URL.t.key
    st.session_state[key] = int(min(max(st.session_state.get(key, 0) + delta, 0), hi))
    S.rerun("t")


def stepper_now(sel: Selection) -> tuple[int, int, int]:
    """Prompt length, number of steps and the step the controls hold now, read from the session and kept in
    their ranges: a section that a control reruns sees the new values (its arguments are those of the page's
    last full run), whichever of the sections a change reruns comes first."""
    b = stepper_bounds(sel)
    prompt = 1 if sel.arch == "encoder-decoder" else \
        URL.prompt.fit(URL.prompt.now(b["prompt"]), URL.prompt.bounds(hi=b["prompt_hi"])) or b["prompt"]
    steps = URL.steps.fit(URL.steps.now(b["steps"]), URL.steps.bounds(hi=steps_hi(sel, prompt))) or b["steps"]
    t = URL.t.fit(URL.t.now(0), URL.t.bounds(hi=steps - 1))
    return int(prompt), int(steps), int(t or 0)


def stepper_controls(sel: Selection) -> None:
    """Prompt length (or, for an encoder-decoder, why there is none) and the number of steps, whose range
    follows the prompt (`step_count`, a section that reads the prompt)."""
    b = stepper_bounds(sel)
    c1, c2 = st.columns(2)
    with c1:
        if sel.arch == "encoder-decoder":
            st.caption("The decoder starts from `<bos>` and reads the whole source through cross-attention.")
            URL.prompt.clear()
        else:
            URL.prompt.widget(st.slider, "prompt tokens", hi=b["prompt_hi"], default=b["prompt"],
                              help="The input's first tokens; the model writes the rest.")
    with c2:
        step_count(sel)


@S.section("stepper.steps", reads=("prompt",))  # first: it keeps the number of steps in the prompt's range
def step_count(sel: Selection) -> None:
    """The number of steps, up to what the prompt leaves room for."""
    b = stepper_bounds(sel)
    prompt = stepper_now(sel)[0]
    URL.steps.widget(st.slider, "tokens to generate", hi=steps_hi(sel, prompt), default=b["steps"])


def stepper_panel(sel: Selection) -> None:
    """Panel 3: greedy decoding one token at a time, with and without the key-value cache. The heading,
    explanation and 'Try this' sit outside the fragments (an encoder gets the offer of a switch instead)."""
    st.subheader("3 · Decoding, one token at a time")
    st.markdown(
        "To write, a decoder predicts one token, appends it and runs again. Without a cache it recomputes every "
        "key and value of every earlier token at each step; with a **key-value cache** it keeps them, feeds only "
        "the newest token and adds one row of K and V per layer. In an encoder-decoder the encoder runs once and "
        "cross-attention's K_e and V_e are computed once, before the first step, and reused. Same outputs, less work.")
    st.latex(r"q_t = x_t W_Q,\quad K_{\le t} = \begin{bmatrix}K_{<t}\\ x_t W_K\end{bmatrix},\quad "
             r"V_{\le t} = \begin{bmatrix}V_{<t}\\ x_t W_V\end{bmatrix}")
    st.latex(r"o_t = \mathrm{softmax}\!\Big(\frac{q_t K_{\le t}^{\top}}{\sqrt{d_h}}\Big)V_{\le t}")
    if sel.arch == "encoder" and is_text(sel):
        fill_mask_section(sel)
        return
    if sel.arch == "encoder":
        offer_encdec(sel, "Generation", "generation.switch_stepper")
        st.caption("An encoder lets every token see the future, so it cannot write left to right. A decoder-only "
                   "model (for example sort-decoder) works here too.")
        return
    note = STEPPER_BOUND.note(len(sel.tokens), verb="takes its prompt from") if sel.arch == "decoder" else None
    if note:
        st.caption(note)
    if is_text(sel):
        st.caption(f"A checkpoint from a folder writes at most {MAX_TEXT_STEPS} tokens here (timing: {MAX_TEXT_TIMED}, "
                   "measured when you press **Measure**): without the cache every step is a whole forward pass of the "
                   "real model.")
    decoding_steps(sel)
    try_this(
        "Step through with ▶: with the cache, *positions fed* stays at 1 and the key cache gains one outlined row "
        "per step; the recomputed run feeds t + 1 positions.",
        "Watch the last metric: the cached and recomputed logits agree to about 1e-6 at every step.",
        "On reverse-encdec, the cross-attention row moves right to left over the source as the answer is written.",
    )


def fill_mask_section(sel: Selection) -> None:
    """What a text encoder (BERT) does instead of writing: why it cannot generate, and its guesses for a token of
    the sidebar's text hidden behind [MASK] (or for the [MASK] tokens the text holds)."""
    vocab = sel.task.vocab
    st.info(f"**{literal(sel.meta.get('title', sel.model_id))}** is an encoder: every token attends to every other, "
            "in both directions, so it was never trained to predict a token from the tokens before it alone, and it cannot "
            "write left to right. What it does instead is fill in blanks: it was trained to guess the token hidden "
            "behind each `[MASK]` from the words on both sides.", icon=":material/info:")
    if vocab.mask_id is None:
        st.warning("This checkpoint's tokenizer has no [MASK] token, so it cannot be asked to fill one in.")
        return
    st.markdown("#### Fill in the blank")
    masks = tuple(p for p, i in enumerate(sel.ids[0].tolist()) if i == vocab.mask_id)
    special = set(vocab.tokenizer.special_ids.values())
    ordinary = [p for p, i in enumerate(sel.ids[0].tolist()) if i not in special]
    if masks:
        positions = masks
        st.caption(f"Your text holds {len(masks)} {code(vocab.decode([vocab.mask_id])[0])} token(s): below, the "
                   "model's guesses for each.")
    elif ordinary:
        choice = st.selectbox("Token to hide behind [MASK]", ordinary, index=len(ordinary) // 2,
                              format_func=lambda p: f"{p}: {sel.tokens[p]}", key="generation.fill_position",
                              help="The model reads your text with this token replaced by [MASK] and guesses it.")
        positions = (int(choice),)
    else:
        st.warning("Your text has only special tokens; type a sentence in the sidebar.")
        return
    guess = R.fill_mask(sel.cache_key, positions, vocab.mask_id, FILL_TOP_K)
    mask = vocab.decode([vocab.mask_id])[0]
    st.markdown("Reads: " + " ".join(code(mask if q in positions else tok) for q, tok in enumerate(sel.tokens)))
    rows = []
    for n, p in enumerate(positions):
        hidden = vocab.decode([int(guess["hidden"][n])])[0]
        for rank, (i, prob) in enumerate(zip(guess["ids"][n], guess["probs"][n]), start=1):
            rows.append({"position": p, "rank": rank, "guess": vocab.decode([int(i)])[0], "probability": float(prob),
                         "was there": "✓" if int(i) == int(guess["hidden"][n]) else ""})
        if not masks:
            st.caption(f"The token that was there, {code(hidden)}, gets probability {float(guess['p_hidden'][n]):.3f} "
                       f"(rank {int(guess['rank_hidden'][n]):,} of {len(vocab):,}).")
    st.dataframe(rows_table(rows), hide_index=True, column_config={"probability": st.column_config.ProgressColumn(
        "probability", min_value=0.0, max_value=1.0, format="%.3f")})
    try_this("Hide a word whose meaning the sentence gives away on both sides: the encoder reads the words after "
             "the blank too, which a decoder writing left to right never sees.",
             "Type `[MASK]` into your text in the sidebar: each one is guessed at once, reading the others as blanks.")


def decoding_steps(sel: Selection) -> None:
    """The stepper's controls, the step shown with and without the cache, and the timing (which follows the
    prompt). Each part that reads a control is a section that the control reruns by key."""
    stepper_controls(sel)
    step_shown(sel)
    kv_cache(sel)
    work_per_step(sel)
    timing_section(sel)


def traces_now(sel: Selection) -> tuple:
    """(prompt, steps, t, with the cache, without it, the logits' differences) for the controls' values now
    (memoised traces)."""
    prompt, steps, t = stepper_now(sel)
    return (prompt, steps, t, *R.traces(sel.cache_key, prompt, steps, sel.task.vocab.bos_id))


@S.section("stepper.step", reads=("prompt", "steps", "t"))  # ◀ / ▶ rerun it too (as "t")
def step_shown(sel: Selection) -> None:
    """◀ step / step ▶ and the step slider (its range follows the number of steps), then the step shown: the
    decoder's input so far, the metrics of both runs, the encoder-decoder's setup, and where the newest token
    looks."""
    _, steps, _ = stepper_now(sel)
    b1, b2, b3 = st.columns([3, 3, 10])  # wide enough for "◀ step" and "step ▶" on a 1024-wide screen
    b1.button("◀ step", key="generation.prev", on_click=move_step, args=(-1, steps - 1))
    b2.button("step ▶", key="generation.next", on_click=move_step, args=(1, steps - 1))
    with b3:
        URL.t.widget(st.slider, "step t", hi=steps - 1, default=0)
    _, _, t, with_cache, without, diff = traces_now(sel)
    step, plain = with_cache.steps[t], without.steps[t]
    vocab = sel.task.vocab
    tokens = vocab.decode(with_cache.tokens.tolist())
    prefix_len = with_cache.prompt_len
    written = tokens[:prefix_len + t]
    st.markdown("Decoder input so far: " + " ".join(code(tok) for tok in written)
                + f" → step {t} writes **{code(vocab.decode([step.token])[0])}**")
    m = st.columns(3) + st.columns(2)  # two rows: five labels side by side are cut on a 1024-wide screen
    m[0].metric("positions fed", step.fed, delta=step.fed - plain.fed, delta_color="inverse",
                help="with the cache; the delta compares with recomputing")
    m[1].metric("K, V rows stored per layer", step.keys_stored)
    m[2].metric("projections (rows)", int(sum(step.projections.values())),
                delta=int(sum(step.projections.values()) - sum(plain.projections.values())), delta_color="inverse")
    m[3].metric("attention multiply-adds", f"{step.attention_macs:,}",
                delta=f"{step.attention_macs - plain.attention_macs:,}", delta_color="inverse")
    m[4].metric("max |Δ logits|", f"{diff[t]:.1e}", help="The largest difference between the logits of the cached "
                "step and of recomputing everything: rounding only.")
    if with_cache.source_len:
        st.caption(f"Before step 0: the encoder ran {with_cache.encoder_runs} time(s); cross-attention projected "
                   f"{with_cache.setup_projections['cross k']} key rows and {with_cache.setup_projections['cross v']} "
                   f"value rows once (L_e × layers). Without the cache: "
                   f"{plain.projections['cross k']} key rows again at every step.")
    src_labels = sel.tokens if with_cache.source_len else ()
    st.plotly_chart(R.rows_figure(step.self_row, tokens[:step.self_row.shape[2]], step.cross_row, list(src_labels),
                                  f"Step {t}: where the newest token looks"), key="generation.rows",
                    config=chart_config("generation", sel.model_id, f"decoding-step{t}-rows"))


# local: the cache's layer redraws only itself, the key cache and the query
@S.section("stepper.cache", reads=("prompt", "steps", "t"))
def kv_cache(sel: Selection) -> None:
    """The cache's layer, that layer's key cache after the step and the step's new query there."""
    kv_layer = URL.kvlayer.widget(st.selectbox, "layer of the cache", hi=sel.model.cfg.n_layers - 1)
    _, _, t, with_cache, _, _ = traces_now(sel)
    step = with_cache.steps[t]
    tokens = sel.task.vocab.decode(with_cache.tokens.tolist())
    new_rows = step.fed
    cfg = sel.model.cfg
    c1, c2 = st.columns([2, 1])
    with c1:
        st.plotly_chart(R.cache_figure(step.keys[kv_layer], tokens[:step.keys_stored], new_rows,
                                       f"Layer {kv_layer}'s key cache after step {t} (new rows outlined)",
                                       "key/value head" if G.grouped(cfg) else "head"),
                        key="generation.cache",
                        config=chart_config("generation", sel.model_id, f"key-cache-l{kv_layer}-step{t}"))
        st.caption(cache_size_text(cfg, step.keys_stored, with_cache.source_len))
    with c2:
        st.plotly_chart(R.tensor_figure(step.query[kv_layer], [f"head {h}" for h in range(step.query.shape[1])],
                                        "d_h", "head", f"new query q_{t}, layer {kv_layer}"),
                        key="generation.query",
                        config=chart_config("generation", sel.model_id, f"new-query-l{kv_layer}-step{t}"))


def cache_size_text(cfg, positions: int, source_len: int = 0) -> str:
    """What the key-value cache holds after a step, in numbers and float32 bytes: K and V of every stored position,
    for each key/value head (fewer than the query heads under grouped-query attention) in every layer."""
    kv, dh, layers = cfg.kv_heads, cfg.d_head, cfg.n_layers
    numbers = 2 * layers * positions * kv * dh
    text = (f"The cache holds K and V for {positions} positions × {kv} key/value heads × d_h {dh} in each of "
            f"{layers} layers: 2 × {layers} × {positions} × {kv} × {dh} = {numbers:,} numbers "
            f"({_bytes(4 * numbers)} in float32)")
    if source_len:
        cross = 2 * layers * source_len * kv * dh
        text += f", plus cross-attention's K_e and V_e for the {source_len} source positions: {cross:,} numbers"
    if kv != cfg.n_heads:
        text += (f". Grouped-query attention: the {cfg.n_heads} query heads share {kv} key/value heads, so the cache "
                 f"is {cfg.n_heads // kv}× smaller than with a K and V for every query head")
    return text + "."


def _bytes(n: int) -> str:
    return f"{n / 2**20:.1f} MB" if n >= 2**20 else f"{n / 2**10:.1f} KB" if n >= 2**10 else f"{n} bytes"


@S.section("stepper.counters", reads=("prompt", "steps", "t"))
def work_per_step(sel: Selection) -> None:
    """The work of every step both ways, the step marked, and its download."""
    _, _, t, with_cache, without, diff = traces_now(sel)
    st.plotly_chart(R.counters_figure(tuple(with_cache.counters()), tuple(without.counters()), t,
                                      "Work per step, with and without the cache"), key="generation.counters",
                    config=chart_config("generation", sel.model_id, f"work-per-step-step{t}"))
    st.caption("With the cache the work per step stays flat (projections) or grows linearly (attention); "
               "without it, it keeps growing.")
    csv_download(lambda: decoding_counters(with_cache, without, diff), "decoding-counters.csv",
                 "generation.counters_csv")


def decoding_counters(with_cache, without, diff) -> pd.DataFrame:
    """Both runs' counters, one row per step and run, with the largest logit difference at that step."""
    counters = pd.DataFrame(with_cache.counters() + without.counters())
    counters["max |logit difference|"] = list(diff) * 2
    return counters


def timing_section(sel: Selection) -> None:
    """Measured milliseconds per token as the output grows, with and without the cache. The heading is drawn
    on full runs only."""
    st.markdown("#### Time per token")
    timing_measured(sel)


# local: the timing length and Measure again redraw only these controls, the chart, its caption and download
@S.section("stepper.timing", reads=("prompt",))
def timing_measured(sel: Selection) -> None:
    """The timing length (up to what the prompt leaves room for), Measure again, and the measured chart."""
    prompt = stepper_now(sel)[0]
    cap = timing_cap(sel, prompt)
    c1, c2 = st.columns([2, 1])  # room for the whole "Measure again" on a 1024-wide screen
    with c1:
        n = URL.tlen.widget(st.slider, "tokens to generate for timing", hi=cap, default=min(64, cap))
    source_len = sel.ids.shape[1] if sel.model.is_encoder_decoder else prompt

    def args_for(run: int) -> tuple:
        return sel.model_id, sel.device, int(source_len), int(prompt), int(n), sel.task.vocab.bos_id, run

    # a checkpoint from a folder is timed only on a press: real sizes make each measurement many forward passes
    run = st.session_state.get(TIMING_RUN_KEY, 0)
    on_demand = models.is_folder_model(sel.model_id) and not R.timings.has(*args_for(run))
    with c2:
        pressed = st.button("Measure" if on_demand else "Measure again", key="generation.remeasure",
                            icon=":material/timer:")
        if pressed and not on_demand:
            st.session_state[TIMING_RUN_KEY] = st.session_state.get(TIMING_RUN_KEY, 0) + 1
    if on_demand and not pressed:
        st.caption(f"Press **Measure** to time {n} tokens both ways on this server: a checkpoint from a folder is "
                   f"timed only when asked, as it runs the real model {2 * R.timing_repeats(sel.model_id)} times "
                   "(with and without the cache, fastest of "
                   f"{R.timing_repeats(sel.model_id)}), and without the cache each token is a whole forward pass.")
        return
    args = args_for(st.session_state.get(TIMING_RUN_KEY, 0))
    times = computed("Timing both ways ...", R.timings, *args)
    shipped = precomputed.note(R.timings, *args)
    st.plotly_chart(R.time_figure(times["with cache"], times["without cache"],
                                  f"{'Measured at build time' if shipped else 'Measured on this server'}, fastest of "
                                  f"{R.timing_repeats(sel.model_id)} runs, {n} tokens"), key="generation.time",
                    config=chart_config("generation", sel.model_id, f"time-per-token-{n}-tokens"))
    st.caption("Timed on a stand-in input of your lengths (which tokens are read does not change the work), once per "
               "model and length for every student" + (f": {shipped}; **Measure again** times this server. "
                                                       if shipped else ". ") +
               "Past the lengths the model was trained on its output is no longer right, but the work is the same: "
               "this chart is about cost. Tiny models spend most of a step in Python, so the gap is smaller than "
               "the multiply-add counts suggest. Other programs on the machine add spikes; the fastest of "
               f"{R.timing_repeats(sel.model_id)} runs hides most of them.")
    frame = partial(pd.DataFrame, {"step": range(len(times["with cache"])), "ms with cache": times["with cache"],
                                   "ms without cache": times["without cache"]})  # built on a press
    csv_download(frame, "time-per-token.csv", "generation.time_csv")


# ---------------------------------------------------------------------------------------------
# 4. Leakage through the encoder
# ---------------------------------------------------------------------------------------------


def leakage_panel(sel: Selection) -> None:
    """Panel 4: a model whose encoder sees the answer, its gradient map, and the fix. Only the gradient
    map reads the example; the text, the fix and its accuracy table sit outside the fragment."""
    st.subheader("4 · A leak through the encoder")
    st.markdown(
        f"An encoder-decoder is only honest if the answer reaches it through the causal decoder. **{R.LEAKY_ID}** "
        f"was trained to sort digits while its encoder was also shown the sorted answer after `<sep>`: the "
        f"bidirectional encoder passes it to every decoder step through cross-attention, so the model can copy "
        f"instead of sorting. Its score looks perfect. The gradient of the prediction at step t with respect to the "
        f"embedding of a future target token y_k (k > t) exposes it: non-zero for the leaky model, exactly zero for "
        f"**{R.PROPER_ID}**, whose encoder reads only the digits.")
    st.latex(r"G_{t,k}=\Big\lVert \frac{\partial\, \mathrm{logit}_t(\hat y_t)}{\partial\, e(y_k)} \Big\rVert,"
             r"\qquad k>t:\; G_{t,k}=0 \text{ for an honest model}")
    leak_gradients(sel)
    st.markdown("**The fix:** the encoder reads only the input; the target enters only through the decoder, "
                "shifted right and causally masked. Hide the answer from the leaky encoder (replace it by `<pad>`) "
                "and see what it really learned:")
    acc = list(R.leakage_accuracy(sel.device))
    st.dataframe(rows_table(acc), hide_index=True, column_config={"accuracy": st.column_config.ProgressColumn(
        "accuracy", min_value=0.0, max_value=1.0, format="percent")})
    csv_download(lambda: pd.DataFrame(acc), "leakage-accuracy.csv", "generation.acc_csv")
    try_this(
        "Read the leaky map above the dotted line: step t already depends on the target token at t + 1, the one "
        "it is about to predict. The proper map is exactly 0 there (hover: 0).",
        "Compare the accuracy rows: perfect with the answer shown, far lower when it is hidden. The proper "
        "model never needed it.",
        "Change the example: the leak is there for every input, not a fluke of one.",
    )


@st.fragment  # local: the example redraws only its box, the sources, the gradient maps and their metrics
def leak_gradients(sel: Selection) -> None:
    """One example taken apart: both models' sources and the gradients of each step on future targets."""
    seed = URL.ex.widget(st.number_input, "example", step=1, help="Which sorted example to take apart.")
    data = R.leakage_example(sel.device, int(seed))
    st.markdown(f"Leaky source: `{' '.join(data['leaky source'])}`  \n"  # a line each: code does not wrap
                f"Proper source: `{' '.join(data['proper source'])}`")
    # Short panel titles: two long ones ran into each other on a 1024-wide screen.
    maps = (("leaky: reads the answer", data["leaky"]), ("proper: reads the digits", data["proper"]))
    st.plotly_chart(R.gradients_figure(maps, list(data["answer"]), list(data["tgt"]),
                                       "Gradient of the prediction at step t with respect to target token y_k"),
                    key="generation.gradients", config=chart_config("generation", None, f"leak-gradients-example{seed}"))
    m1, m2 = st.columns(2)
    m1.metric("largest future gradient, leaky", f"{L.future_mass(data['leaky']):.3g}")
    m2.metric("largest future gradient, proper", f"{L.future_mass(data['proper']):.3g}")
    grads = lambda: pd.DataFrame([{"model": name, "t": t, "k": k + 1, "grad norm": float(g[t, k])}  # noqa: E731
                                  for name, g in (("leaky", data["leaky"]), ("proper", data["proper"]))
                                  for t in range(g.shape[0]) for k in range(g.shape[1])])  # built on a press
    csv_download(grads, "leakage-gradients.csv", "generation.grads_csv")


# ---------------------------------------------------------------------------------------------
# 5. Why the decoder is masked
# ---------------------------------------------------------------------------------------------


def masking_panel(sel: Selection) -> None:
    """Panel 5: a tiny decoder trained with the full mask, and its causal twin, trained here. The heading
    and explanation sit outside the fragment."""
    st.subheader("5 · Why the decoder is masked")
    st.markdown(
        "Train a tiny decoder to copy 4 digits with the **full** mask instead of the causal one. In training, "
        "position t must predict token t + 1, and with the full mask it can simply look at it: the loss falls to "
        "about zero. At generation time the next token does not exist yet, so there is nothing to look at. The "
        "causal twin, the same model with the same seed and data, has to learn the task itself.")
    st.latex(r"M^{\text{causal}}_{ij}=\begin{cases}0 & j\le i\\ -\infty & j>i\end{cases}\qquad "
             r"M^{\text{full}}_{ij}=0")
    masked_training(sel)


@st.fragment  # local: the seed and the training button redraw only these, the losses, the table and 'Try this'
def masked_training(sel: Selection) -> None:
    """The seed, the two decoders (trained on the button) and what they learned. 'Try this' stays here: it
    shows only once the decoders are trained, which a click here decides."""
    seed = int(URL.tseed.widget(st.number_input, "training seed", step=1))
    ready = R.tiny_decoders_ready(seed, TINY_STEPS)
    if not ready:
        st.caption(f"Two decoders of {TINY_STEPS} steps each take a few seconds; a seed someone trained already "
                   "shows at once.")
        if not st.button("Train both decoders", key="generation.train", icon=":material/play_arrow:"):
            return
        with st.spinner("Training the causal and the full-mask decoder ..."):
            R.tiny_decoders(seed, TINY_STEPS)
    runs = R.tiny_decoders(seed, TINY_STEPS)
    st.plotly_chart(R.loss_figure((("causal mask", runs["causal"]["losses"]), ("full mask", runs["full"]["losses"])),
                                  f"Training loss, seed {seed}"), key="generation.loss",
                    config=chart_config("generation", None, f"causal-vs-full-mask-loss-seed{seed}"))
    table = rows_table([{"mask": kind, "final loss (mean of last 20)": float(np.mean(runs[kind]["losses"][-20:])),
                           "teacher-forced accuracy": runs[kind]["teacher-forced accuracy"],
                           "greedy generation accuracy": runs[kind]["greedy accuracy"],
                           "prompt": " ".join(runs[kind]["example prompt"]),
                           "generated": " ".join(runs[kind]["example generated"]),
                           "right answer": " ".join(runs[kind]["example right answer"])} for kind in L.MASKS])
    st.dataframe(table, hide_index=True)
    loss = pd.DataFrame({"step": range(1, TINY_STEPS + 1), "loss causal": runs["causal"]["losses"],
                         "loss full": runs["full"]["losses"]})
    csv_download(loss, "tiny-decoder-losses.csv", "generation.loss_csv")
    try_this(
        "Compare the two loss curves: the full-mask model reaches a low loss first; it found the shortcut.",
        "Then the table: teacher-forced, both look right; generating, the full-mask model fails and the causal "
        "one copies correctly.",
        "Try another seed: the pattern holds.",
    )
