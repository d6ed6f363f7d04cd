"""The Masks page's panels: the mask editor, what the model does with the mask, right and wrong
masking, the mask as a graph, what sparsity saves, and the encoder-vs-decoder comparison.
pages/masks.py calls them in reading order.

Kept in a module (not the page file) so it is compiled once per process: Streamlit recompiles a
page script's source on every run, and this is most of the page's code. The numbers come from
core.analysis.masks, the cached runs and figures from ui.masks.runs.

What a click reruns: the mask editor's controls (section 1, all feeding "mask") and the layer and head pickers
(section 2) rerun by key only the sections that read them (ui.shell.sections: `@S.section(..., reads=...)`),
the editor first: it keeps the mask it drew in the session (`drawn`), where the others read it. The leak
controls, the receptive field's token, the block size and the legality length sit inside the fragment they change.
"""

from __future__ import annotations

import dataclasses
import hashlib
import textwrap
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Callable, Optional

import numpy as np
import pandas as pd
import streamlit as st

from core import masks as M
from core.analysis import bounds as B
from core.analysis import masks as A
from core.figures import masks as F
from core.figures.heatmaps import unique_labels
from core.tasks import get_task
from ui.masks import runs as R
from ui.shell import precomputed
from ui.shell import models
from ui.shell.export import chart_config, sidebar_model
from ui.shell.figures import cached
from ui.shell.page import computed, lead, number_table, rows_table, try_this
from ui.shell.params import Choice, Float, Int, Param, Params, Text, general
from ui.shell.sections import Sections
from ui.shell.sidebar import Selection, prediction_table
from ui.shell.text import literal, plotly_literal

MAX_EDIT_N = 64  # the editor, the graph and the influence map draw every pair; 64 tokens stay readable
MAX_FIELD_ROWS = 12  # receptive-field rows drawn (layers)
SCOPE_ALL, SCOPE_LAYER = "all", "layer"
SCOPES = {SCOPE_ALL: "Same mask for every layer", SCOPE_LAYER: "A different mask per layer"}
PRESETS = {
    "full": "Full: every key",
    "causal": "Causal: j ≤ i",
    "sliding": "Sliding window: |i − j| ≤ w",
    "block": "Block-diagonal: blocks of b",
    "strided": "Strided: (i − j) % s == 0",
    "global": "Global + local",
    "padding": "Padding: last keys hidden",
    "random": "Random (seeded)",
    "formula": "Formula",
}
CAUSAL_SIDE = {"sliding": "only the past side (causal window)", "strided": "only the past side (causal stride)"}
DEFAULT_FORMULA = "abs(i - j) <= 2"
GAPS = (1, 10, 100, 1000, 3000, 10_000, 20_000, 60_000, 100_000, 10**6, 10**8, 2 * 10**9)
TOLERANCES = (1e-3, 1e-5, 1e-7, 1e-9)
COST_BLOCKS = (8, 16, 32, 64)
COST_NS = (8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)

# Session keys. The editor bound to the URL (one mask for every layer) keeps its controls under
# EDIT_ALL; the per-layer editors under EDIT_LAYER, outside the URL. The controls below are not in
# the URL either.
EDIT_ALL, EDIT_LAYER = "masks.all", "masks.layer{}"
GAP_KEY, LEAK_K_KEY, EPS_KEY = "masks.gap", "masks.k", "masks.eps"
COST_B_KEY, REMEASURE_KEY, TIMING_RUN_KEY = "masks.cost_b", "masks.remeasure", "masks.timing_run"
LEGALITY_LEN_KEY = "masks.legality_len"
INFLUENCE_KEY = "masks.influence_on"
# A larger model measures the influence map only when asked (GPT-2 small: ~6 s a mask on a CPU) and fills in the
# first FILL_IN_LARGE hidden words of an encoder's text (BERT-base: ~0.2 s a word), not every one.
LARGE_MODEL_PARAMETERS = 20_000_000
FILL_IN_LARGE = 8
LEGALITY_DEFAULT_LEN, COST_DEFAULT_BLOCK = 8, 32  # the two sliders' defaults (the warm-up measures them)
DRAWN_KEY = "masks.drawn"  # (stack [layer q k], the model's mask argument, scope) as the editor last drew it



def two_decimals(value: float) -> str:
    """A density as the URL writes it: 0.30."""
    return f"{value:.2f}"


def thousands(value: int) -> str:
    """A gap as the slider shows it: 20,000."""
    return f"{value:,}"


# Every URL parameter of the page, once. The mask's parameters are those of the EDIT_ALL editor;
# ranges that depend on the input (a window, a token) are given when the widget is drawn.
URL = Params(
    "masks",
    Choice("scope", SCOPE_ALL, choices=tuple(SCOPES)),
    Choice("preset", "causal", choices=tuple(PRESETS), key=f"{EDIT_ALL}.preset"),
    Int("w", 2, lo=0, hi=MAX_EDIT_N, key=f"{EDIT_ALL}.w"),
    Int("b", 4, lo=1, hi=MAX_EDIT_N, key=f"{EDIT_ALL}.b"),
    Int("s", 3, lo=1, hi=MAX_EDIT_N, key=f"{EDIT_ALL}.s"),
    Int("g", 1, lo=0, hi=MAX_EDIT_N, key=f"{EDIT_ALL}.g"),
    Int("real", MAX_EDIT_N, lo=1, hi=MAX_EDIT_N, key=f"{EDIT_ALL}.real"),
    Float("density", 0.3, lo=0.0, hi=1.0, fmt=two_decimals, key=f"{EDIT_ALL}.density"),
    Int("rseed", 0, lo=0, hi=10_000, key=f"{EDIT_ALL}.seed"),
    Text("formula", DEFAULT_FORMULA, key=f"{EDIT_ALL}.formula"),
    Int("layer", 0, lo=0, hi=0), Int("head", 0, lo=0, hi=0), Int("token", 0, lo=0, hi=0),
)
MASK_PARAMS = ("preset", "w", "b", "s", "g", "real", "density", "rseed", "formula")
# Its sections, declared in page order with the editor first: every control of the editor feeds "mask", and the
# editor writes the mask (DRAWN_KEY) before the others read it.
S = Sections("masks")


# ---------------------------------------------------------------------------------------------
# The editor's controls: each preset's knobs, read from the URL before the title
# ---------------------------------------------------------------------------------------------


def editor_key(prefix: str, param: Param) -> str:
    """The session key of `param` in the editor `prefix` (the URL's own key in the EDIT_ALL editor)."""
    return param.key if prefix == EDIT_ALL else prefix + param.key[len(EDIT_ALL):]


@dataclass(frozen=True)
class Knob:
    """One control of a preset: its URL parameter, widget, label and help, and default and range for this input."""

    param: Param
    widget: Callable
    label: str
    help: Optional[str] = None
    default: Any = None
    lo: Any = None
    hi: Any = None
    step: Any = None

    def seed(self) -> None:
        """Read it from the URL (once per session), clamped to this input's range."""
        self.param.seed(default=self.default, lo=self.lo, hi=self.hi)

    def draw(self, prefix: str, url: bool) -> Any:
        """The widget in editor `prefix` (bound to the URL when `url`); returns its value."""
        extra = {} if self.step is None else {"step": self.step}
        return self.param.widget(self.widget, self.label, default=self.default, url=url,
                                 key=editor_key(prefix, self.param), lo=self.lo, hi=self.hi, help=self.help,
                                 feeds="mask", **extra)


def knobs(preset: str, n: int) -> list[Knob]:
    """The controls of `preset` for an input of `n` tokens, in the order they are drawn."""
    if preset == "sliding":
        return [Knob(URL.w, st.slider, "window w", "keys within w positions on each side", 2, 0, n - 1)]
    if preset == "block":
        return [Knob(URL.b, st.slider, "block size b", "tokens are cut into blocks of b; no talk across blocks",
                     4, 1, n)]
    if preset == "strided":
        return [Knob(URL.s, st.slider, "stride s", "query i sees keys i, i ± s, i ± 2s, ...", 3, 1, n)]
    if preset == "global":
        return [Knob(URL.g, st.slider, "global tokens g", "the first g tokens see and are seen by all", 1, 0, n),
                Knob(URL.w, st.slider, "local window w", "everyone else: |i − j| ≤ w", 1, 0, n - 1)]
    if preset == "padding":
        return [Knob(URL.real, st.slider, "real tokens",
                     "keys from this position on are padding and hidden from every query", max(1, n - 2), 1, n)]
    if preset == "random":
        return [Knob(URL.density, st.slider, "density", "chance that a cell may attend (the diagonal always may)",
                     step=0.05),
                Knob(URL.rseed, st.number_input, "seed", step=1)]
    if preset == "formula":
        return [Knob(URL.formula, st.text_input, "formula in i (query), j (key) and n",
                     "e.g. abs(i - j) <= 2, j <= i, i // 4 == j // 4, j == 0 or abs(i - j) <= 1")]
    return []


def own_preset(arch: str) -> str:
    """The model's own mask on its masked side: full for encoders, causal for decoders (and the
    decoder of an encoder-decoder)."""
    return "full" if arch == "encoder" else "causal"


def seed_url(sel: Selection) -> None:
    """Read the page's URL parameters before the title, so what was wrong with them shows under it.
    An input too long to draw has none of these controls, so nothing is read (or written) then."""
    n = len(sel.query_tokens)
    if n > MAX_EDIT_N:
        return
    if URL.scope.seed() == SCOPE_ALL:
        for knob in knobs(URL.preset.seed(default=own_preset(sel.arch)), n):
            knob.seed()
    URL.layer.seed(hi=sel.model.cfg.n_layers - 1)
    URL.head.seed(hi=sel.model.cfg.n_heads - 1)
    URL.token.seed(hi=n - 1, default=n - 1)


# ---------------------------------------------------------------------------------------------
# 1. Draw the mask
# ---------------------------------------------------------------------------------------------


def preset_mask(preset: str, n: int, v: dict, causal: bool) -> tuple[np.ndarray, str]:
    """The mask [q k] a preset describes with its knobs' values `v`, and a phrase for its title.
    A formula that cannot be used raises ValueError."""
    if preset == "full":
        return M.full(n).numpy(), "every query sees every key"
    if preset == "causal":
        return M.causal(n).numpy(), "each query sees itself and the past"
    side = ", causal" if causal else ""
    if preset == "sliding":
        return M.sliding_window(n, v["w"], causal).numpy(), f"window w = {v['w']}{side}"
    if preset == "block":
        return M.block_diagonal(n, v["b"]).numpy(), f"blocks of b = {v['b']}"
    if preset == "strided":
        return M.strided(n, v["s"], causal).numpy(), f"stride s = {v['s']}{side}"
    if preset == "global":
        return M.global_local(n, v["g"], v["w"]).numpy(), f"{v['g']} global token(s), window w = {v['w']}"
    if preset == "padding":
        return M.padding(n, v["real"]).numpy(), f"the last {n - v['real']} key(s) are padding"
    if preset == "random":
        density, seed = v["density"], v["rseed"]
        return M.random_mask(n, float(density), int(seed)).numpy(), f"random, density {density:.2f}, seed {seed}"
    # A formula typed by the student: parsed by core.masks, never evaluated by Python.
    return M.from_formula(v["formula"], n).numpy(), f"formula `{plotly_literal(v['formula'])}`"  # a chart title


def base_mask(prefix: str, n: int, preset: str, url: bool) -> tuple[Optional[np.ndarray], str]:
    """The preset's controls, then the mask they describe and its phrase; (None, why) when the formula cannot
    be used (the caller shows why, and the grammar, across the page's width)."""
    values = {knob.param.name: knob.draw(prefix, url) for knob in knobs(preset, n)}
    if url:  # the other presets' parameters leave the URL
        URL.clear(*(name for name in MASK_PARAMS if name != "preset" and name not in values))
    causal = st.checkbox(CAUSAL_SIDE[preset], key=f"{prefix}.causal",
                         **S.on_change("mask", key=f"{prefix}.causal")) if preset in CAUSAL_SIDE else False
    if preset != "formula":
        return preset_mask(preset, n, values, causal)
    try:
        return preset_mask(preset, n, values, causal)
    except ValueError as exc:
        return None, str(exc)


def formula_error(why: str, own: str) -> None:
    """Why the typed formula cannot be used, what is allowed (the grammar, its lines wrapped rather than cut), and
    which mask stands in for it meanwhile."""
    st.error(literal(f"This formula cannot be used: {why}"))
    st.code(M.describe_formula_grammar(), language=None, wrap_lines=True)
    st.warning(f"Using the model's own **{own}** mask until the formula is fixed.")


def cell_editor(prefix: str, base: np.ndarray, labels: list[str]) -> np.ndarray:
    """Cell-by-cell editing of `base` in a checkbox grid; edits reset when the base mask changes."""
    key, base_key = f"{prefix}.cells", f"{prefix}.cells_base"
    signature = hashlib.sha1(np.packbits(base).tobytes() + str(base.shape).encode()).hexdigest()
    if st.session_state.get(base_key) != signature:
        st.session_state.pop(key, None)  # a new starting mask: forget edits made to the old one
        st.session_state[base_key] = signature
    frame = pd.DataFrame(base, index=labels, columns=labels)
    config = {c: st.column_config.CheckboxColumn(c, width=56, help=f"key {c}") for c in labels}
    edited = st.data_editor(frame, key=key, num_rows="fixed", column_config=config,
                            height=min(36 * (len(labels) + 1) + 3, 460), width="stretch",
                            **S.on_change("mask", key=key))
    return edited.to_numpy(dtype=bool)


def mask_editor(prefix: str, n: int, tokens: list[str], own: str, url: bool, name: str) -> np.ndarray:
    """Preset or formula, then cell edits, with the resulting grid on the right; returns the mask [q k]."""
    left, right = st.columns([1, 2], gap="large")
    with left:
        preset = URL.preset.widget(st.selectbox, "Start from", default=own, url=url,
                                   key=editor_key(prefix, URL.preset), format_func=PRESETS.get, feeds="mask",
                                   help="A preset or your own formula; then tick or untick single cells below.")
        base, description = base_mask(prefix, n, preset, url)
    if base is None:  # under both columns, full width: in the narrow left one the grammar was cut at its edge
        formula_error(description, own)
        base = M.causal(n).numpy() if own == "causal" else M.full(n).numpy()
        description = f"the formula has an error, so the model's own {own} mask is used"
    st.markdown("**Edit single cells.** A tick means the query (row) may attend to the key (column). "
                "Changing the preset or formula above starts again from it.")
    mask = cell_editor(prefix, base, unique_labels(tokens))
    edited = int((mask != base).sum())
    if edited:
        description += f", with {edited} cell(s) edited by hand"
    with right:  # drawn above the cell editor, showing the mask after the cell edits
        st.plotly_chart(titled_mask_grid(mask, tuple(tokens), f"{name}: {description}"),
                        key=f"{prefix}.grid", config=chart_config("masks", None, name))
    return mask


TITLE_CHARS = 38  # a title line that fits the editor's grid beside the sidebar on a 1024-wide screen (16 px font)
TITLE_LINE_PX = 21  # plotly's line height for that font


def wrap_title(text: str, width: int = TITLE_CHARS) -> tuple[str, int]:
    """`text` broken at spaces into lines of at most `width` characters joined by plotly's <br> (a word longer
    than that stays whole), and the number of lines. A grid's title such as "your mask (every layer): the formula
    has an error, ..." ran past the figure's right edge, cut, even on a 1440-wide screen. The text is already
    safe for a plotly title (`plotly_literal` escaped the student's formula), and its escapes hold no spaces, so
    breaking at spaces cannot split one."""
    lines = textwrap.wrap(text, width=width, break_long_words=False, break_on_hyphens=False) or [text]
    return "<br>".join(lines), len(lines)


def _mask_grid_wrapped(mask: np.ndarray, tokens: tuple, title: str):
    """core.figures.masks.mask_grid with its title wrapped (`wrap_title`), and the top margin and the height
    grown by the extra title lines so they sit above the key labels rather than on them. Plotly places a title
    of several lines by its last line, so the title is also pushed down by the lines above that (`pad`), and the
    margin grows by both (measured in chromium: with less, a third line sat level with the axis title)."""
    text, lines = wrap_title(title)
    fig = F.mask_grid(mask, tokens, tokens, title=text)
    extra = TITLE_LINE_PX * (lines - 1)
    if extra:
        fig.update_layout(margin_t=fig.layout.margin.t + 2 * extra, height=fig.layout.height + 2 * extra,
                          title_pad_t=fig.layout.title.pad.t + extra)
    return fig


titled_mask_grid = cached(_mask_grid_wrapped)  # memoised and shipped ready-serialised, like ui.masks.runs' figures


def empty_rows_warning(sel: Selection, stack: np.ndarray) -> None:
    """Say which query rows may read no key at all, and what the model does with them."""
    empty = A.empty_rows(stack)
    if not empty:
        return
    labels = unique_labels(sel.query_tokens)
    shown = ", ".join(f"layer {layer}: {labels[q]}" for layer, q in empty[:8])
    st.warning(
        f"Some query rows may read **no key at all** ({shown}{' ...' if len(empty) > 8 else ''}). "
        "A plain softmax over a row of −∞ is 0/0 = NaN, and one NaN would spread through every later layer. "
        "This model gives such a row an all-zero pattern instead, so that token's attention output is "
        "exactly zero and only the residual stream carries it forward. Look for the empty rows in the "
        "heatmaps below.", icon=":material/block:")


def editor_panel(sel: Selection, n: int) -> None:
    """Section 1: draw the mask(s). The editor (`mask_editors`) keeps what it drew in the session (DRAWN_KEY)."""
    own = own_preset(sel.arch)
    st.header("1. Draw the mask")
    where = ("the decoder's own self-attention (the encoder and cross-attention keep their masks)"
             if sel.arch == "encoder-decoder" else f"every attention layer of this {sel.arch}")
    st.markdown(f"May query *i* read key *j*? Start from a preset or a formula, then tick or untick single cells. "
                f"The model's own mask here is **{own}**.")
    with st.expander("Read more: where the mask applies, and the maths"):
        st.markdown(
            f"A mask is a table of yes/no: may query *i* read key *j*? It applies to {where}. Start from a preset "
            f"or a formula, then tick or untick single cells. The model's own mask here is **{own}**. "
            f"This page edits masks for up to {MAX_EDIT_N} tokens (your input has {n})."
        )
        # two lines: on one line the cases of M ran past the column of a 1024-wide screen
        st.latex(r"\text{scores}_{ij} = \frac{q_i \cdot k_j}{\sqrt{d}} + M_{ij}")
        st.latex(r"M_{ij} = \begin{cases} 0 & \text{query } i \text{ may read key } j \\ -\infty & \text{otherwise}"
                 r"\end{cases}")
    mask_editors(sel, n)
    try_this(
        "Pick **Causal** for an encoder model, or **Full** for a decoder: the predictions below change at once.",
        "Type the formula `j == 0 or abs(i - j) <= 1`, then a broken one such as `i ** 2 < j`: "
        "the error says what is allowed.",
        "Untick every cell of one row: that query reads nothing, and its pattern row in section 2 is all zeros.",
        "Switch to **a different mask per layer** and give layer 0 a window and the last layer Full.",
    )


@S.section("editor", reads=("mask",))  # every control in it feeds the mask: declared first, it writes it
def mask_editors(sel: Selection, n: int) -> None:
    """The scope, the editor (one, or one per layer in tabs) and the empty-rows warning; writes the mask drawn
    to the session (DRAWN_KEY) for the fragments below that read it."""
    layers, own = sel.model.cfg.n_layers, own_preset(sel.arch)
    scope = URL.scope.widget(st.radio, "Layers", format_func=SCOPES.get, horizontal=True, feeds="mask",
                             help="One mask everywhere, or a separate mask for each of this model's layers.")
    if scope == SCOPE_ALL:
        arg = mask_editor(EDIT_ALL, n, sel.query_tokens, own, url=True, name="your mask (every layer)")
        stack = np.stack([arg] * layers)  # [layer q k]
    else:
        per = []
        for i, tab in enumerate(st.tabs([f"Layer {i}" for i in range(layers)])):
            with tab:
                per.append(mask_editor(EDIT_LAYER.format(i), n, sel.query_tokens, own, url=False, name=f"layer {i}"))
        arg = stack = np.stack(per)  # [layer q k]
        URL.clear(*MASK_PARAMS)
    st.session_state[DRAWN_KEY] = (stack, arg, scope)
    empty_rows_warning(sel, stack)


@dataclass(frozen=True)
class Drawn:
    """The mask(s) drawn in section 1, and the model's runs with its own mask and with yours (memoised, looked up
    when a part first reads them: the graph's parts read the mask only)."""

    stack: np.ndarray  # [layer q k]
    arg: np.ndarray  # the model's mask argument: one mask [q k], or the stack for a mask per layer
    scope: str
    cache_key: tuple  # the sidebar's model and input (Selection.cache_key)

    @cached_property
    def own(self) -> dict:
        """masked_run with the model's own mask."""
        return R.masked_run(self.cache_key, None)

    @cached_property
    def yours(self) -> dict:
        """masked_run with the drawn mask(s)."""
        return R.masked_run(self.cache_key, self.arg)


EDIT_BOUND = B.Bound(MAX_EDIT_N, "This page draws every pair of tokens (the mask editor, the mask's graph, the "
                                 "influence map, and the patterns under your mask beside the model's own)")


def editable(sel: Selection) -> tuple[Selection, Optional[str]]:
    """An input longer than the editor draws, cut to its first MAX_EDIT_N output tokens, and the note that says so
    (EDIT_BOUND); a shorter input as it is. A checkpoint's text keeps its right answers (the next token of the
    text); a toy task's cut input is labelled again by its task, which may find no right answer in it (an
    encoder-decoder keeps its whole source: the mask is the decoder's)."""
    n = len(sel.query_tokens)
    note = EDIT_BOUND.note(n)
    if note is None:
        return sel, None
    note += " The model runs on those tokens alone."
    if models.is_text_model(sel.meta):
        cut = dataclasses.replace(sel, tokens=sel.tokens[:MAX_EDIT_N], ids=sel.ids[:, :MAX_EDIT_N],  # [1 pos]
                                  targets=None if sel.targets is None else sel.targets[:MAX_EDIT_N])
        return cut, note
    if sel.tgt_tokens is not None:  # an encoder-decoder: the decoder's side is cut, the source stays whole
        tokens, tgt_tokens = sel.tokens, sel.tgt_tokens[:MAX_EDIT_N]
        ids, tgt_ids = sel.ids, sel.tgt_ids[:, :MAX_EDIT_N]  # [1 tgt_pos]
    else:
        tokens, tgt_tokens, ids, tgt_ids = sel.tokens[:MAX_EDIT_N], None, sel.ids[:, :MAX_EDIT_N], None  # [1 pos]
    try:
        targets = sel.task.label(tokens, sel.arch, tgt=tgt_tokens)
    except ValueError:
        targets = None
    return dataclasses.replace(sel, tokens=tokens, ids=ids, tgt_tokens=tgt_tokens, tgt_ids=tgt_ids,
                               targets=targets), note


def mask_panel(sel: Selection, cut: Optional[str] = None) -> bool:
    """Section 1; False (with a warning) for an input too long to draw every pair of. `cut`: the note on a
    checkpoint's text cut to the editor's size (editable)."""
    if cut:
        st.info(cut, icon=":material/content_cut:")
    n = len(sel.query_tokens)
    if n > MAX_EDIT_N:
        st.session_state.pop(DRAWN_KEY, None)  # no mask is drawn for this input
        st.warning(f"Your input has {n} tokens; the mask editor, the graph and the model panels draw every pair "
                   f"and are limited to {MAX_EDIT_N} tokens. Shorten the input in the sidebar (or press **Random "
                   "example**). The cost and encoder-vs-decoder sections below still work.")
        return False
    editor_panel(sel, n)
    return True


def drawn(sel: Selection) -> Optional[Drawn]:
    """The mask(s) the editor drew last (in this run, or earlier in this rerun of fragments: it runs first), with
    the model's two runs looked up when read; None when no mask is drawn (an input too long for the editor)."""
    kept = st.session_state.get(DRAWN_KEY)
    if kept is None:
        return None
    stack, arg, scope = kept
    if stack.shape != (sel.model.cfg.n_layers, len(sel.query_tokens), len(sel.query_tokens)):
        st.rerun()  # drawn for another model or input (the page's full run draws the editor first): all of it
    return Drawn(stack, arg, scope, sel.cache_key)


# ---------------------------------------------------------------------------------------------
# 2. What the model does with it
# ---------------------------------------------------------------------------------------------


def heatmap(pattern: np.ndarray, tokens: list[str], title: str, key: str) -> None:
    """One attention pattern [q k] on the shared 0..1 heatmap, its title clear of the key labels."""
    height = min(760, 120 + 28 * len(tokens))  # bigger cells than the default: these sit two abreast
    st.plotly_chart(R.heatmap_figure(pattern, tokens, title, height), key=key,
                    config=chart_config("masks", sidebar_model(), title))


def fill_in_rows(sel: Selection, masks: Optional[np.ndarray]) -> list[dict]:
    """An encoder checkpoint's rows in prediction_table's shape: each word of the text hidden behind [MASK] in turn
    (R.text_fill_in), its hidden word the right answer, under ``masks`` (None = the model's own mask)."""
    out, vocab, ids = R.text_fill_in(sel.cache_key, masks, fill_in_most(sel)), sel.task.vocab, sel.ids[0].tolist()
    return [{"position": int(p), "token": sel.query_tokens[p], "predicted": vocab.decode([int(top)])[0],
             "p(predicted)": float(p_top), "right answer": vocab.decode([ids[p]])[0], "p(right)": float(p_right),
             "correct": int(top) == ids[p]}
            for p, top, p_top, p_right in zip(out["positions"], out["top"], out["p_top"], out["p_right"])]


def large(sel: Selection) -> bool:
    """Whether the model is too large for the page to run many copies of the input on every new mask."""
    return sum(p.numel() for p in sel.model.parameters()) > LARGE_MODEL_PARAMETERS


def fill_in_most(sel: Selection) -> Optional[int]:
    """How many words of the text an encoder checkpoint fills in, each in its own copy of the text: all of them
    (at most MAX_EDIT_N), or the first FILL_IN_LARGE of a large model's (a BERT-base: about 0.2 s a copy)."""
    return FILL_IN_LARGE if large(sel) else None


def fills_in(sel: Selection) -> bool:
    """Whether the predictions are an encoder checkpoint's guesses for hidden words (it has no right answer on a
    plain text, but can be asked for each word in turn)."""
    return models.is_text_model(sel.meta) and sel.arch == "encoder" and sel.task.vocab.mask_id is not None


def scored_rows(sel: Selection, d: Drawn) -> tuple[list[dict], list[dict]]:
    """(rows with the model's own mask, rows with yours), in prediction_table's shape: the task's scored positions,
    or an encoder checkpoint's hidden words."""
    if fills_in(sel):
        return fill_in_rows(sel, None), fill_in_rows(sel, d.arg)
    return prediction_table(sel, d.own["logits"]), prediction_table(sel, d.yours["logits"])


def predictions_table(sel: Selection, d: Drawn) -> None:
    """Per position: the right answer, the model's prediction with its own mask and with yours."""
    own, yours = scored_rows(sel, d)
    if fills_in(sel):
        most = fill_in_most(sel)
        words = "Each word" if most is None else f"Each of the first {most} words"
        st.markdown(f"{words} of your text is hidden behind **[MASK]** in turn (one copy of the text per word) and "
                    "the model fills it in, once with its own mask and once with yours; the right answer is the "
                    "hidden word." + ("" if most is None else f" (A model this large runs {most} copies, not one per "
                                      "word, so that a new mask answers within seconds.)"))
    if own:
        rows = A.prediction_changes(own, yours)
    else:
        rows = A.top_prediction_changes(unique_labels(sel.query_tokens), sel.task.vocab, d.own["logits"],
                                        d.yours["logits"])
    st.dataframe(rows_table(rows), hide_index=True, width="stretch",
                 column_config={c: st.column_config.NumberColumn(c, format="%.3f")
                                for c in ("own: p(right)", "yours: p(right)")})


def accuracy_metrics(sel: Selection, d: Drawn) -> None:
    """Task accuracy on a batch as wide as the input, with the model's own mask and with yours (a checkpoint's:
    on its own text, the positions of the table above)."""
    if models.is_text_model(sel.meta):
        text_accuracy(sel, d)
        return
    n = d.stack.shape[-1]
    length = R.width_to_length(sel.task.name, sel.arch, n)
    if length is None:
        st.info(f"Accuracy on a batch needs task examples exactly {n} tokens wide, like your mask, and this task "
                "never makes inputs of that width. Press **Random example** in the sidebar to get one that fits.")
        return
    own_acc = R.masked_accuracy(sel.model_id, sel.device, None, length)
    your_acc = R.masked_accuracy(sel.model_id, sel.device, d.arg, length)
    m1, m2, m3 = st.columns(3)
    m1.metric("accuracy, own mask", f"{own_acc:.1%}")
    m2.metric("accuracy, your mask", f"{your_acc:.1%}", delta=f"{(your_acc - own_acc) * 100:+.1f} points")
    m3.metric("examples scored", f"{R.N_SAMPLES} × {n} tokens",
              help="Fresh task examples of the same length as your input, so your mask fits them.")
    st.caption(f"Task: {sel.task.title}. {sel.task.scored_for(sel.arch)} "
               f"The same {R.N_SAMPLES} examples are scored both times.")


def text_accuracy(sel: Selection, d: Drawn) -> None:
    """A checkpoint's accuracy on its own text under both masks: each next token (a decoder), or each hidden word
    (an encoder). A toy task's batch of fresh examples does not exist for free text."""
    own, yours = scored_rows(sel, d)
    if not own:
        st.info("Nothing in this text is scored: " + (
            "a decoder is scored on each next token, and a text of one token has none." if sel.arch == "decoder" else
            "an encoder is scored on words hidden behind [MASK], and this text has no ordinary word to hide (or this "
            "model's tokenizer has no [MASK] token)."))
        return
    own_acc, your_acc = (sum(r["correct"] for r in rows) / len(rows) for rows in (own, yours))
    what = "hidden words" if fills_in(sel) else "next tokens"
    m1, m2, m3 = st.columns(3)
    m1.metric("accuracy, own mask", f"{own_acc:.1%}")
    m2.metric("accuracy, your mask", f"{your_acc:.1%}", delta=f"{(your_acc - own_acc) * 100:+.1f} points")
    m3.metric(f"{what} scored", f"{len(own)}", help="The positions of the table above.")
    st.caption(f"Scored on your own text: the share of its {len(own)} {what} the model guesses right, with its own "
               f"mask and with yours.")


def picked() -> tuple[int, int]:
    """The layer and head the pickers of section 2 hold now, read from the session: a fragment that a picker
    reruns sees the new value (its arguments are those of the page's last full run, where the pickers were
    drawn and checked)."""
    return int(URL.layer.now()), int(URL.head.now())


def effect_panel(sel: Selection) -> None:
    """Section 2: the layer and head pickers, default vs edited patterns, predictions and task accuracy. Each
    picker reruns only the sections that read it."""
    cfg = sel.model.cfg
    st.header("2. What the model does with it")
    lead("The same trained weights run twice: with the model's own mask and with yours. Blocked keys get exactly 0.",
         "Read more: why the other keys gain, and the maths",
         "The mask is an argument of each call, so the same trained weights run twice: once with the mask the model "
         "was trained with, once with yours. Weights on blocked keys are exactly 0; the freed share goes to the keys "
         "that are left, because each row of the softmax must still sum to 1.",
         r"a_{ij} = \frac{e^{s_{ij}}\,[M_{ij}\text{ allows}]}{\sum_{j'} e^{s_{ij'}}\,[M_{ij'}\text{ allows}]}")
    c1, c2 = st.columns(2)
    with c1:
        URL.layer.widget(st.selectbox, "Layer", hi=cfg.n_layers - 1)
    with c2:
        URL.head.widget(st.selectbox, "Head", hi=cfg.n_heads - 1)
    pattern_charts(sel)
    st.subheader("Predictions and accuracy")
    predictions_and_accuracy(sel)
    try_this(
        "Hide the last key with **Padding** (real tokens = n − 1) on the future-legality encoder: the rule is the "
        "last token, so accuracy falls to chance.",
        "On a decoder, choose **Full**: it now sees the future it was never trained with. Does that help or hurt?",
        "Find the smallest sliding window that keeps the accuracy of your model near its own.",
    )


@S.section("model.patterns", reads=("layer", "head", "mask"))
def pattern_charts(sel: Selection) -> None:
    """The picked head's pattern with the model's own mask and with yours, and the largest change between them."""
    d, (layer, head) = drawn(sel), picked()
    tokens = sel.query_tokens
    own, yours = d.own["pattern"][layer, head], d.yours["pattern"][layer, head]
    left, right = st.columns(2)
    with left:
        heatmap(own, tokens, f"own mask · layer {layer} head {head}", "masks.pattern_own")
    with right:
        heatmap(yours, tokens, f"your mask · layer {layer} head {head}", "masks.pattern_yours")
    st.caption(f"Largest change of one attention weight in this head: {float(np.abs(own - yours).max()):.3f}.")


@S.section("model.predictions", reads=("mask",))
def predictions_and_accuracy(sel: Selection) -> None:
    """The prediction table and the two accuracies, for the mask drawn now."""
    d = drawn(sel)
    predictions_table(sel, d)
    accuracy_metrics(sel, d)


def model_sections(sel: Selection) -> None:
    """Sections 2 to 4, parts of which read the layer and head picked in section 2 or the mask drawn in section 1:
    each part that does is a section the pickers and the editor rerun by key, so a pick or a new mask redraws
    those parts and nothing else."""
    with S.group("masks"):
        effect_panel(sel)
        right_wrong_panel(sel)
        graph_panel(sel)


# ---------------------------------------------------------------------------------------------
# 3. Right and wrong ways to mask
# ---------------------------------------------------------------------------------------------


def right_wrong_panel(sel: Selection) -> None:
    """Section 3: mask before softmax vs zero after, on the real scores of the chosen head; then the leak."""
    st.header("3. Right and wrong ways to mask")
    lead("**Right:** mask the scores, then softmax. **Wrong:** softmax, then zero the blocked weights: rows then sum "
         "to less than 1.",
         "Read more: why the wrong way shrinks the output, and the maths",
         "**Right:** add a huge negative number to each blocked score, then take the softmax; the blocked keys get "
         "nothing and the rest share all of the probability. **Wrong:** take the softmax over every key, then set the "
         "blocked weights to zero; the blocked keys still took their share of the denominator, so a row now sums to "
         "less than 1 and the output shrinks. Both use this head's real scores with your mask.",
         r"\text{right: } \operatorname{softmax}(s + M)",
         r"\text{wrong: } \operatorname{softmax}(s) \odot [M = 0] \;\Rightarrow\; \textstyle\sum_j a_{ij} < 1")
    masking_charts(sel)
    leak_panel(sel)


@S.section("model.masking", reads=("layer", "head", "mask"))
def masking_charts(sel: Selection) -> None:
    """Right and wrong masking of the picked head's real scores under your mask, and each row's total weight."""
    d, (layer, head) = drawn(sel), picked()
    both = R.compare_masking(d.yours["scores"][layer, head], d.stack[layer])
    tokens = sel.query_tokens
    left, right = st.columns(2)
    with left:
        heatmap(both["right"], tokens, "right: mask before softmax", "masks.right")
    with right:
        heatmap(both["wrong"], tokens, "wrong: zero after softmax", "masks.wrong")
    st.plotly_chart(R.row_sums_figure(both["right_sums"], both["wrong_sums"], tokens, title="each row's total weight"),
                    key="masks.row_sums", config=chart_config("masks", sel.model_id, f"row-sums-l{layer}h{head}"))
    st.caption(f"Smallest row sum the wrong way: {float(both['wrong_sums'].min()):.3f}. A fully blocked row sums "
               "to 0 either way here.")


def leak_panel(sel: Selection) -> None:
    """How large a finite mask constant must be: the worst-case table and chart, then this head's real gap."""
    st.subheader("How large must the mask constant be?")
    lead("Code often adds a finite constant C (−1e4, −1e9) instead of −∞; then a little probability can **leak** to "
         "blocked keys.",
         "Read more: the worst case, and the maths",
         "Computers cannot always use −∞, so code often adds a finite constant C such as −1e4 or −1e9. Then a little "
         "probability can **leak** to blocked keys. It is worst when the blocked keys are the ones the query likes "
         "best: one allowed key at logit 0, k blocked keys at logit g (the gap). The table computes this row in each "
         "number format; the chart moves the gap.",
         r"\text{leak} = \frac{k\,e^{g+C}}{1 + k\,e^{g+C}} \le \varepsilon",
         r"\iff |C| \ge g + \ln\frac{k\,(1-\varepsilon)}{\varepsilon}")
    leak_worst_case()
    real_leak(sel)
    try_this(
        "Set the gap to 20,000: −1e4 leaks almost everything in both formats, −1e9 nothing. At 2,000,000,000 "
        "−1e9 leaks in float32 too: no finite constant is safe for every gap.",
        "Look at the column *row with every key masked*: −∞ gives NaN, a finite constant spreads the row evenly "
        "over "
        "blocked keys. Neither is right; this model masks again after the softmax and gives zeros.",
        "Make ε smaller and watch the smallest safe |C| grow only by about 2.3 per factor of 10.",
    )


@st.fragment  # local: the gap, k and ε redraw only these controls, the leak table and the curves
def leak_worst_case() -> None:
    """The worst-case row for a gap, k blocked keys and ε: its controls, the table per number format and the
    curves over the gap; the rest of the section does not read them."""
    c1, c2, c3 = st.columns(3)
    gap = c1.select_slider("gap g (blocked logit minus allowed logit)", list(GAPS), value=20_000, key=GAP_KEY,
                           format_func=thousands)
    k = c2.slider("blocked keys k", 1, 64, 7, key=LEAK_K_KEY)
    eps = c3.select_slider("tolerance ε", list(TOLERANCES), value=1e-7, key=EPS_KEY, format_func=general)
    rows = [{**row, "stored as": general(row["stored as"]),  # the same columns, in order, as text
             "leaked mass": "NaN" if np.isnan(row["leaked mass"]) else f"{row['leaked mass']:.3g}"}
            for row in R.leak_table(float(gap), k, eps)]
    st.dataframe(rows_table(rows), hide_index=True, width="stretch")
    st.caption(f"Smallest |C| that keeps this row within ε: {A.min_constant(gap, k, eps):,.1f}. float16 holds "
               "numbers only up to 65,504, so −1e9 is stored as −∞ there, and a gap beyond 65,504 overflows "
               "by itself (NaN in the table; the float16 lines stop there).")
    st.plotly_chart(R.leak_figure(A.LEAK_GAPS, R.leak_curves(k), eps, gap, title="leaked probability as the gap grows"),
                    key="masks.leak", config=chart_config("masks", None, "leaked-probability"))


@S.section("model.leak", reads=("layer", "head", "mask"))
def real_leak(sel: Selection) -> None:
    """The picked head's real scores under your mask: their largest gap and what each constant leaks (nothing is
    drawn when no row has both allowed and blocked keys)."""
    d, (layer, head) = drawn(sel), picked()
    real = R.real_score_leaks(d.yours["scores"][layer, head], d.stack[layer])
    if real is not None:
        real_gap, leaks = real
        st.info(f"This head's real scores under your mask: the largest gap is {real_gap:.2f}, so the worst float16 "
                f"leak is {leaks['-1e4']:.3g} with −1e4, {leaks['-1e9']:.3g} with −1e9 and "
                f"{leaks['-inf']:.3g} with −∞. "
                "Small trained models have small gaps; the trouble starts with huge logits or low precision.")


# ---------------------------------------------------------------------------------------------
# 4. The mask as a graph
# ---------------------------------------------------------------------------------------------


@S.section("model.arcs", reads=("layer", "mask"))
def arcs_section(sel: Selection) -> None:
    """The chosen layer's mask as an arc diagram, with its edges counted."""
    layer = picked()[0]
    tokens, mask = sel.query_tokens, drawn(sel).stack[layer]
    lead(f"Layer {layer}'s mask as a graph: arcs **above** the line carry information forward, arcs **below** "
         "backward.",
         "How to read this chart",
         f"Each token is a node and each allowed pair (query *i* reads key *j*) is an edge from *j* to *i*. "
         f"Below: the mask of layer {layer} (the layer chosen in section 2). Arcs **above** the line carry "
         "information forward from an earlier token, arcs **below** carry it backward from a later one: a causal "
         "mask draws only the upper half.")
    st.plotly_chart(R.arcs_figure(mask, tokens), key="masks.arcs", config=chart_config("masks", sel.model_id, "mask-graph"))
    edges = A.edge_counts(mask)
    st.caption(f"{edges['back']} edge(s) look back (above), {edges['ahead']} look ahead (below), and "
               f"{edges['self']} of {mask.shape[-1]} tokens may attend to themselves.")


def graph_facts(d: Drawn) -> dict:
    """What the graph section draws for the drawn masks and the layer picked now (R.graph_facts). Only the
    Laplacian, its spectrum, λ2 and the pieces are the layer's: the reach by depth, `full_at`, `reach` and
    `stacked` are the same for every layer, so the parts that draw them do not read the layer."""
    return R.graph_facts(d.stack, picked()[0], d.scope == SCOPE_ALL)


def laplacian_section(sel: Selection) -> None:
    """The Laplacian of the chosen layer's mask, its spectrum and lambda_2."""
    st.subheader("Laplacian and algebraic connectivity")
    lead("**λ2** measures how hard it is to cut the graph in two: **n** for the complete graph, **0** when some tokens"
         " can never exchange anything.",
         "Read more: the Laplacian, and the maths",
         "Forget directions for a moment: link i and j if either may read the other. The Laplacian L = D − A puts each"
         " token's number of links on the diagonal and −1 for every link. Its smallest eigenvalue is always 0; the "
         "second smallest, **λ2**, measures how hard it is to cut the graph in two. It is **n** for the complete graph"
         " (full and causal masks both give it), **0** exactly when some tokens can never exchange anything, and small"
         " for a thin chain such as a window of 1 (2 − 2cos(π/n)).",
         r"L = D - A \qquad 0 = \lambda_1 \le \lambda_2 \le \dots \le \lambda_n",
         r"\lambda_2(K_n) = n \qquad \lambda_2 = 0 \iff \text{the graph falls apart}")
    laplacian_charts(sel)


@S.section("model.laplacian", reads=("layer", "mask"))
def laplacian_charts(sel: Selection) -> None:
    """The chosen layer's λ2 and pieces, its Laplacian and the Laplacian's spectrum."""
    tokens = sel.query_tokens
    n, facts = len(tokens), graph_facts(drawn(sel))
    m1, m2, m3 = st.columns(3)
    m1.metric("λ2 (algebraic connectivity)", f"{facts['lambda2']:.3f}")
    m2.metric("complete graph would give", f"{n}")
    m3.metric("separate pieces", f"{facts['pieces']}", help="Separate pieces: the number of zero eigenvalues of L.")
    left, right = st.columns(2)
    with left:
        st.plotly_chart(R.laplacian_figure(facts["laplacian"], tokens, title="L = D − A"), key="masks.laplacian",
                        config=chart_config("masks", sel.model_id, "laplacian"))
    with right:
        st.plotly_chart(R.spectrum_figure(facts["spectrum"], title="spectrum of L, λ2 highlighted"),
                        key="masks.spectrum", config=chart_config("masks", sel.model_id, "laplacian-spectrum"))


def reach_section(sel: Selection) -> None:
    """How the share of reached pairs grows with depth, and one query token's receptive field."""
    st.subheader("How many layers until everyone has heard from everyone?")
    lead("One layer moves information one edge; stacking layers composes the masks.",
         "Read more: reach through the layers, and the maths",
         "One layer moves information one edge (plus the residual path, which keeps each token's own). Stacking layers"
         " composes the masks, so a window of w reaches w further per layer, and blocks that never talk stay apart "
         "however deep the model.",
         r"R_L = (M_L \lor I)\circ\cdots\circ(M_1 \lor I)")
    reach_charts(sel)


@S.section("model.reach", reads=("mask",))  # the same for every layer
def reach_charts(sel: Selection) -> None:
    """The share of reached pairs by depth for the mask drawn now, and the receptive field below it."""
    d = drawn(sel)
    facts = graph_facts(d)
    full_at = facts["full_at"]
    st.plotly_chart(R.reach_figure(facts["shares"], sel.model.cfg.n_layers, full_at), key="masks.reach",
                    config=chart_config("masks", sel.model_id, "reach-by-layer"))
    st.caption(("Never: some pairs have no route at any depth." if full_at is None else
                f"Every token reaches every other after {full_at} layer(s).")
               + ("" if d.scope == SCOPE_ALL else " Past this model's layers the last layer's mask is repeated."))
    field_section(sel)


@st.fragment  # local: the query token redraws only its slider and its receptive field
def field_section(sel: Selection) -> None:
    """One query token's receptive field, layer by layer, through the mask drawn now; the reach curve above does
    not read the token."""
    tokens = sel.query_tokens
    n, stacked = len(tokens), graph_facts(drawn(sel))["stacked"]
    token = URL.token.widget(st.slider, "receptive field of query token", hi=n - 1, default=n - 1,
                             help="Which keys can influence this token after 1, 2, ... layers?")
    fields = R.receptive_fields(stacked, token, MAX_FIELD_ROWS)  # [layer k]
    st.plotly_chart(R.field_figure(fields, tokens, token,
                                   title=f"what can reach {unique_labels(tokens)[token]}, layer by layer"),
                    key="masks.field", config=chart_config("masks", sel.model_id, f"what-reaches-token{token}"))


def influence_section(sel: Selection) -> None:
    """The trained model's measured influence (gradient sizes) against the graph's routes."""
    st.subheader("The model agrees: measured influence")
    lead("Does the trained model obey the graph? Crosses mark pairs with **no route**: their gradient must be exactly "
         "zero.",
         "How to read this chart",
         "Does the trained model really obey the graph? We ask it: how much does the output at position q move when "
         "the embedding at position k moves (the size of a gradient)? Crosses mark pairs with **no route** through "
         f"this model's {sel.model.cfg.n_layers} layers; their gradient must be exactly zero.")
    influence_chart(sel)


@S.section("model.influence", reads=("mask",))  # the same for every layer
def influence_chart(sel: Selection) -> None:
    """The measured influence through the mask drawn now, with the routes' crosses, and the check under it."""
    tokens, d = sel.query_tokens, drawn(sel)
    reach = graph_facts(d)["reach"]
    size = sum(p.numel() for p in sel.model.parameters())
    if size > LARGE_MODEL_PARAMETERS:
        st.caption(f"This model has {size / 1e6:,.0f}M parameters: the measurement runs it on {len(tokens)} copies "
                   f"of your input at once ({len(tokens)} × {len(tokens)} tokens) and takes one gradient through "
                   f"them, several seconds on a CPU for each new mask, so it runs when you ask for it.")
        if not st.toggle("Measure the influence", key=INFLUENCE_KEY):
            return
    measured = R.influence(sel.cache_key, d.stack)
    st.plotly_chart(R.influence_figure(measured, reach, tokens, tokens, title="|∂ output q / ∂ embedding k|"),
                    key="masks.influence", config=chart_config("masks", sel.model_id, "measured-influence"))
    check = A.influence_check(measured, reach)
    st.caption(f"Pairs with no route: {check['no_route']}; of those with a nonzero gradient: {check['leaks']}. "
               f"Pairs with a route: {check['route']}; of those with a zero gradient: {check['silent']}.")


def graph_panel(sel: Selection) -> None:
    """Section 4: the mask as a graph: arcs, Laplacian and spectrum, reach by layer, receptive field, influence.
    Each reads the mask (fragments the editor reruns); the arcs and the Laplacian read the layer too, the
    reach, the receptive field and the influence map do not (the field reruns also by its own token)."""
    st.header("4. The mask as a graph")
    arcs_section(sel)
    laplacian_section(sel)
    reach_section(sel)
    influence_section(sel)
    try_this(
        "**Block-diagonal** with b = 4: the arcs split into islands, λ2 drops to 0 and the reach curve never "
        "reaches 100%.",
        "**Sliding window** w = 1: λ2 is tiny; the receptive field grows by one key per side per layer.",
        "**Global + local** with g = 1, w = 1: one global token connects everyone in two layers.",
    )


# ---------------------------------------------------------------------------------------------
# 5. What sparsity saves
# ---------------------------------------------------------------------------------------------


def timing_rows(b: int, run: int) -> list[dict]:
    """The kept timing run, or a fresh one measured under a spinner (it takes a few seconds)."""
    return computed("Timing dense and block-sparse attention on this machine ...", R.timing, b, run)


def cost_panel(sel: Selection) -> None:
    """Section 5: allowed pairs against n², and measured dense vs block-sparse time."""
    st.header("5. What sparsity saves")
    lead("Dense attention scores all n² pairs; blocks of b score only n·b, so the work shrinks by b/n. Below it is "
         "timed on a real CPU.",
         "Read more: where the saving comes from, and the maths",
         "Dense attention scores every pair: n² of them per head, so doubling the input quadruples the work. A "
         "block-diagonal mask with blocks of b scores only n·b pairs, and a kernel that skips the blocked pairs does "
         "n/b small b×b problems. The work then shrinks by the factor b/n. Below it is timed on a real CPU, in one "
         f"run, for n up to 2,048 (longer than the {MAX_EDIT_N}-token editor: no pattern is drawn here).",
         r"\text{dense: } O(n^2 d) \qquad \text{block-sparse: } O(n\,b\,d)",
         r"\frac{\text{block-sparse}}{\text{dense}} = \frac{b}{n}")
    cost_share(sel)
    cost_measured(sel)
    try_this(
        "Double b: the predicted ratio doubles. Does the measured one follow at large n?",
        "Press **Measure again**: how much do the times move from run to run on a shared machine?",
    )


def allowed_pairs(sel: Selection) -> Optional[tuple[int, int]]:
    """(n, pairs layer 0 of the drawn mask allows); None when no mask is drawn (an input too long for the editor)."""
    d = drawn(sel)
    return None if d is None else (d.stack.shape[-1], int(d.stack[0].sum()))


@S.section("cost.share", reads=("mask",))
def cost_share(sel: Selection) -> None:
    """The drawn mask's allowed pairs against n² (nothing when no mask is drawn)."""
    current = allowed_pairs(sel)
    if current is not None:
        n, pairs = current
        c1, c2, c3 = st.columns(3)
        c1.metric("pairs allowed (layer 0)", f"{pairs:,}", help="Pairs your mask allows in layer 0.")
        c2.metric("dense pairs n²", f"{n * n:,}")
        c3.metric("share of the dense work", f"{pairs / (n * n):.1%}")


@S.section("cost.measured", reads=("mask",))  # the block size and Measure again rerun it alone
def cost_measured(sel: Selection) -> None:
    """The block size, the allowed pairs as n grows (with the drawn mask's, when one is drawn) and the timed runs
    at that block size. The timing does not read the mask, but the block size reads both: one fragment redraws
    them for a new b, cheaper than two."""
    current = allowed_pairs(sel)
    b = st.select_slider("block size b", list(COST_BLOCKS), value=COST_DEFAULT_BLOCK, key=COST_B_KEY)
    w = 2 if current is None else int(st.session_state.get(URL.w.key, 2))  # the window of the mask drawn above
    st.plotly_chart(R.pairs_figure(list(COST_NS), b, w, current, title="allowed pairs as n grows"), key="masks.pairs",
                    config=chart_config("masks", None, f"allowed-pairs-b{b}-w{w}"))
    run = st.session_state.setdefault(TIMING_RUN_KEY, 0)
    if st.button("Measure again", key=REMEASURE_KEY, icon=":material/timer:"):
        st.session_state[TIMING_RUN_KEY] = run = run + 1
    rows = timing_rows(b, run)
    shipped = precomputed.note(R.timing, b, run)
    where = "measured when the app was built" if shipped else "measured on this server"
    st.plotly_chart(R.timing_figure(rows, title=f"{where} (4 heads of 16, b = {b}, one CPU thread)"),
                    key="masks.timing", config=chart_config("masks", None, f"dense-vs-block-sparse-b{b}"))
    shown = ("n", "dense ms", "block-sparse ms", "measured ratio", "predicted ratio b/n")
    number_table([{name: row[name] for name in shown} for row in rows], {"dense ms": "%.2f", "block-sparse ms": "%.2f", "measured ratio": "%.3f",
                         "predicted ratio b/n": "%.3f"}, width="stretch")
    st.caption((f"A cached measurement, {shipped}, shown to every student at b = 32" if shipped else
                "A cached measurement: timed once per server for each b and shown to every student") +
               "; **Measure again** times it afresh on this server. Best of 3 calls each. At small n fixed overheads dominate and the ratio stays above b/n; as n grows "
               "the dense n×n buffer gets expensive (memory as well as arithmetic) and the gap opens up.")


# ---------------------------------------------------------------------------------------------
# 6. Encoder vs decoder
# ---------------------------------------------------------------------------------------------


def legality_models(data: dict, length: int) -> None:
    """Each model with its own mask, its accuracy with it and with the other model's mask."""
    width, tokens = length + 2, data["tokens"]
    left, right = st.columns(2)
    for col, name, own, other in ((left, "encoder", "full", "causal"), (right, "decoder", "causal", "full")):
        with col:
            mask = M.full(width) if own == "full" else M.causal(width)
            st.plotly_chart(R.mask_grid_figure(mask.numpy(), tokens, tokens, title=f"{name}: its own {own} mask"),
                            key=f"masks.legality_{name}", config=chart_config("masks", None, f"legality-{name}-own-mask"))
            m1, m2 = st.columns(2)
            m1.metric(f"own mask: {own}", f"{data['acc'][(name, own)]:.1%}")
            m2.metric(f"given the {other} mask", f"{data['acc'][(name, other)]:.1%}",
                      delta=f"{(data['acc'][(name, other)] - data['acc'][(name, own)]) * 100:+.1f} points")


def legality_panel(device: str) -> None:
    """Section 6: the future-legality task: the bidirectional encoder solves it, the causal decoder cannot."""
    st.header("6. Encoder vs decoder: a rule that comes last")
    lead("The rule comes **after** the digits: the encoder's full mask lets each digit read it, the decoder's causal "
         "mask hides it.",
         "Read more: the task, and leaks through an encoder",
         "Each digit must be marked *ok* or *bad* by a rule (even or odd) written **after** all the digits. The "
         "encoder's full mask lets every digit read the rule; the decoder's causal mask hides it, so the decoder can "
         "only guess, and a guess is right half of the time. Same task, same size of model: the mask alone decides. "
         "(The same reasoning warns about leaks: if a decoder cross-attends to an encoder that has read the answer, "
         "the future reaches the decoder through the encoder.)")
    if not {R.ENC_ID, R.DEC_ID} <= {e["id"] for e in models.manifest()}:
        st.info("The bundled future-legality models are not installed, so this comparison cannot run. Build them "
                "with `python -m core.train --all`.")
        return
    legality_compare(device)
    try_this(
        "Give the encoder the causal mask (right-hand metric on the left): it falls to about 50%.",
        f"In the sidebar pick **{R.ENC_ID}** and untick the last column (the rule) in section 1.",
        "Give the decoder the full mask: it can now see the rule, but was never trained to use it.",
    )


@st.fragment  # local: the number of digits redraws only its slider, the two models' grids and metrics, and the table
def legality_compare(device: str) -> None:
    """The two bundled models at the chosen number of digits: masks, accuracies, one example's pull of the rule."""
    length = st.slider("digits per example", 2, 16, LEGALITY_DEFAULT_LEN, key=LEGALITY_LEN_KEY,
                       help="Both models were trained on 8 digits; other lengths test how they generalise.")
    data = R.legality_panel_data(device, length)
    legality_models(data, length)
    st.caption(f"{R.N_SAMPLES} examples of {length} digits, the same for every cell. core.train.evaluate on 512 "
               f"fresh examples: encoder {data['evaluate']['encoder']:.1%}, decoder {data['evaluate']['decoder']:.1%}.")
    st.markdown(f"One example, `{' '.join(data['tokens'])}`. *Pull of the rule* is the size of the gradient of that "
                "position's output with respect to the rule token: the decoder's is exactly 0.")
    st.dataframe(rows_table(A.legality_rows(data, get_task("future-legality").vocab)), hide_index=True,
                 width="stretch", column_config={c: st.column_config.NumberColumn(c, format="%.4f")
                                                 for c in ("encoder: pull of the rule", "decoder: pull of the rule")})


def default_measurements(device: str) -> list:
    """(memo, arguments) of what a default visit measures, for the server's warm-up (ui.server.warmup): the
    legality panel at the slider's default length and the timing at the default block size."""
    return [(R.legality_panel_data, (device, LEGALITY_DEFAULT_LEN)), (R.timing, (COST_DEFAULT_BLOCK, 0))]
