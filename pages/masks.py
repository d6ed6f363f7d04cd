"""Masks: draw who may attend to whom, watch the model react, and read the mask as a graph."""

from __future__ import annotations

import hashlib

import numpy as np
import pandas as pd
import streamlit as st
import torch

from core import masks as M
from core.analysis import tensor_from
from core.analysis import masks as A
from core.figures import masks as F
from core.figures.heatmaps import unique_labels
from core.tasks import get_task
from ui import models, query
from ui.figures import cached
from ui.masks_runs import (DEC_ID, ENC_ID, N_SAMPLES, graph_facts, influence, legality_panel_data,
                            masked_accuracy, masked_run, receptive_fields, timing, width_to_length)
from ui.page import header, try_this
from ui.sidebar import Selection, prediction_table, shared_sidebar

MAX_EDIT_N = 32  # the editor, the graph and the influence map draw every pair; 32 tokens stay readable
MAX_FIELD_ROWS = 12  # receptive-field rows drawn (layers)
SAME, PER_LAYER = "Same mask for every layer", "A different mask per layer"
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
DEFAULT_FORMULA = "abs(i - j) <= 2"

# ---------------------------------------------------------------------------------------------
# The editor
# ---------------------------------------------------------------------------------------------


def _int_slider(label: str, key: str, lo: int, hi: int, default: int, param: str | None, help: str) -> int:
    """A slider whose state is seeded from the URL (clamped) and kept inside [lo, hi] as n changes."""
    default = min(max(default, lo), hi)
    if param:
        query.seed(key, param, lambda p: query.parse_int(p, lo, hi), default)
    value = st.session_state.get(key, default)
    st.session_state[key] = min(max(int(value), lo), hi)
    if lo == hi:
        st.caption(f"{label}: {lo} (the only value for this length)")
        return lo
    return st.slider(label, lo, hi, key=key, help=help)


def _base_mask(prefix: str, n: int, preset: str, url: bool) -> tuple[np.ndarray, str, dict]:
    """Build the mask a preset or formula describes; returns (mask, description, URL values)."""
    p = (lambda name: name) if url else (lambda name: None)
    k = lambda name: f"{prefix}.{name}"  # noqa: E731 - a key builder for this editor
    if preset == "full":
        return M.full(n).numpy(), "every query sees every key", {}
    if preset == "causal":
        return M.causal(n).numpy(), "each query sees itself and the past", {}
    if preset == "sliding":
        w = _int_slider("window w", k("w"), 0, n - 1, 2, p("w"), "keys within w positions on each side")
        causal = st.checkbox("only the past side (causal window)", key=k("causal"))
        return M.sliding_window(n, w, causal).numpy(), f"window w = {w}{', causal' if causal else ''}", {"w": w}
    if preset == "block":
        b = _int_slider("block size b", k("b"), 1, n, 4, p("b"),
                        "tokens are cut into blocks of b; no talk across blocks")
        return M.block_diagonal(n, b).numpy(), f"blocks of b = {b}", {"b": b}
    if preset == "strided":
        s = _int_slider("stride s", k("s"), 1, n, 3, p("s"), "query i sees keys i, i ± s, i ± 2s, ...")
        causal = st.checkbox("only the past side (causal stride)", key=k("causal"))
        return M.strided(n, s, causal).numpy(), f"stride s = {s}{', causal' if causal else ''}", {"s": s}
    if preset == "global":
        g = _int_slider("global tokens g", k("g"), 0, n, 1, p("g"), "the first g tokens see and are seen by all")
        w = _int_slider("local window w", k("w"), 0, n - 1, 1, p("w"), "everyone else: |i − j| ≤ w")
        return M.global_local(n, g, w).numpy(), f"{g} global token(s), window w = {w}", {"g": g, "w": w}
    if preset == "padding":
        real = _int_slider("real tokens", k("real"), 1, n, max(1, n - 2), p("real"),
                           "keys from this position on are padding and hidden from every query")
        return M.padding(n, real).numpy(), f"the last {n - real} key(s) are padding", {"real": real}
    if preset == "random":
        if url:
            query.seed(k("density"), "density", lambda v: query.parse_float(v, 0.0, 1.0), 0.3)
            query.seed(k("seed"), "rseed", lambda v: query.parse_int(v, 0, 10_000), 0)
        st.session_state.setdefault(k("density"), 0.3)
        st.session_state.setdefault(k("seed"), 0)
        density = st.slider("density", 0.0, 1.0, step=0.05, key=k("density"),
                            help="chance that a cell may attend (the diagonal always may)")
        seed = st.number_input("seed", 0, 10_000, step=1, key=k("seed"))
        return (M.random_mask(n, float(density), int(seed)).numpy(), f"random, density {density:.2f}, seed {seed}",
                {"density": f"{density:.2f}", "rseed": int(seed)})
    # A formula typed by the student: parsed by core.masks, never evaluated by Python.
    if url:
        query.seed(k("formula"), "formula", query.parse_text, DEFAULT_FORMULA)
    st.session_state.setdefault(k("formula"), DEFAULT_FORMULA)
    text = st.text_input("formula in i (query), j (key) and n", key=k("formula"),
                         help="e.g. abs(i - j) <= 2, j <= i, i // 4 == j // 4, j == 0 or abs(i - j) <= 1")
    try:
        return M.from_formula(text, n).numpy(), f"formula `{text}`", {"formula": text}
    except ValueError as exc:
        st.error(f"This formula cannot be used: {exc}")
        st.code(M.describe_formula_grammar(), language=None)
        return None, "", {"formula": text}


def _cells(prefix: str, base: np.ndarray, labels: list[str]) -> np.ndarray:
    """Cell-by-cell editing of ``base`` in a checkbox grid; edits reset when the base mask changes."""
    key, base_key = f"{prefix}.cells", f"{prefix}.cells_base"
    signature = hashlib.sha1(np.packbits(base).tobytes() + str(base.shape).encode()).hexdigest()
    if st.session_state.get(base_key) != signature:
        st.session_state.pop(key, None)  # a new starting mask: forget edits made to the old one
        st.session_state[base_key] = signature
    frame = pd.DataFrame(base, index=labels, columns=labels)
    config = {c: st.column_config.CheckboxColumn(c, width=56, help=f"key {c}") for c in labels}
    edited = st.data_editor(frame, key=key, num_rows="fixed", column_config=config,
                            height=min(36 * (len(labels) + 1) + 3, 460), width="stretch")
    return edited.to_numpy(dtype=bool)


def mask_editor(prefix: str, n: int, tokens: list[str], default_preset: str, url: bool,
                name: str) -> tuple[np.ndarray, str, dict]:
    """Preset or formula, then cell edits; returns (mask [q k], description, URL values)."""
    key = f"{prefix}.preset"
    if url:
        query.seed(key, "preset", lambda v: query.parse_choice(v, list(PRESETS)), default_preset)
    st.session_state.setdefault(key, default_preset)
    left, right = st.columns([1, 2], gap="large")
    with left:
        preset = st.selectbox("Start from", list(PRESETS), key=key, format_func=PRESETS.get,
                              help="A preset or your own formula; then tick or untick single cells below.")
        base, description, params = _base_mask(prefix, n, preset, url)
        if base is None:
            base = M.causal(n).numpy() if default_preset == "causal" else M.full(n).numpy()
            description = f"the formula has an error, so the model's own {default_preset} mask is used"
            st.warning(f"Using the model's own **{default_preset}** mask until the formula is fixed.")
    st.markdown("**Edit single cells.** A tick means the query (row) may attend to the key (column). "
                "Changing the preset or formula above starts again from it.")
    mask = _cells(prefix, base, unique_labels(tokens))
    edited = int((mask != base).sum())
    if edited:
        description += f", with {edited} cell(s) edited by hand"
    with right:  # drawn above the cell editor, showing the mask after the cell edits
        st.plotly_chart(cached(F.mask_grid)(mask, tokens, tokens, title=f"{name}: {description}"),
                        key=f"{prefix}.grid")
    return mask, description, dict(params, preset=preset)


def default_mask(arch: str, n: int) -> tuple[np.ndarray, str]:
    """The model's own mask for its masked side: causal for decoders (and the decoder of an
    encoder-decoder), full for encoders."""
    if arch == "encoder":
        return M.full(n).numpy(), "full"
    return M.causal(n).numpy(), "causal"


# ---------------------------------------------------------------------------------------------
# Panels
# ---------------------------------------------------------------------------------------------


def panel_editor(sel: Selection, n: int) -> tuple[np.ndarray, np.ndarray, str]:
    """Draw the mask(s). Returns (per-layer masks [layer q k], the masks argument for the model, scope)."""
    layers = sel.model.cfg.n_layers
    _, own = default_mask(sel.arch, n)
    st.header("1. Draw the mask")
    where = ("the decoder's own self-attention (the encoder and cross-attention keep their masks)"
             if sel.arch == "encoder-decoder" else f"every attention layer of this {sel.arch}")
    st.markdown(
        f"A mask is a table of yes/no: may query *i* read key *j*? It applies to {where}. Start from a preset "
        f"or a formula, then tick or untick single cells. The model's own mask here is **{own}**. "
        f"This page edits masks for up to {MAX_EDIT_N} tokens (your input has {n})."
    )
    st.latex(r"\text{scores}_{ij} = \frac{q_i \cdot k_j}{\sqrt{d}} + M_{ij},\qquad M_{ij} = "
             r"\begin{cases} 0 & \text{query } i \text{ may read key } j \\ -\infty & \text{otherwise}\end{cases}")
    scopes = {"all": SAME, "layer": PER_LAYER}
    query.seed("masks.scope", "scope", lambda v: scopes.get(query.parse_choice(v, list(scopes))), SAME)
    scope = st.radio("Layers", [SAME, PER_LAYER], key="masks.scope", horizontal=True,
                     help="One mask everywhere, or a separate mask for each of this model's layers.")
    if scope == SAME:
        mask, _, params = mask_editor("masks.all", n, sel.query_tokens, own, url=True,
                                      name="your mask (every layer)")
        stack = np.stack([mask] * layers)  # [layer q k]
        query.write(scope="all", **{name: params.get(name) for name in
                                    ("preset", "w", "b", "s", "g", "real", "density", "rseed", "formula")})
        arg = mask
    else:
        tabs = st.tabs([f"Layer {i}" for i in range(layers)])
        per = []
        for i, tab in enumerate(tabs):
            with tab:
                per.append(mask_editor(f"masks.layer{i}", n, sel.query_tokens, own, url=False,
                                       name=f"layer {i}")[0])
        stack = np.stack(per)  # [layer q k]
        query.write(scope="layer", preset=None, w=None, b=None, s=None, g=None, real=None, density=None,
                    rseed=None, formula=None)
        arg = stack
    query.show_notes()  # what was wrong with the URL's mask settings, right under the editor
    empty = [(layer, q) for layer in range(layers) for q in np.nonzero(~stack[layer].any(axis=1))[0]]
    if empty:
        shown = ", ".join(f"layer {layer}: {unique_labels(sel.query_tokens)[q]}" for layer, q in empty[:8])
        st.warning(
            f"Some query rows may read **no key at all** ({shown}{' ...' if len(empty) > 8 else ''}). "
            "A plain softmax over a row of −∞ is 0/0 = NaN, and one NaN would spread through every later layer. "
            "This model gives such a row an all-zero pattern instead, so that token's attention output is "
            "exactly zero and only the residual stream carries it forward. Look for the empty rows in the "
            "heatmaps below.", icon=":material/block:")
    try_this(
        "Pick **Causal** for an encoder model, or **Full** for a decoder: the predictions below change at once.",
        "Type the formula `j == 0 or abs(i - j) <= 1`, then a broken one such as `i ** 2 < j`: "
        "the error says what is allowed.",
        "Untick every cell of one row: that query reads nothing, and its pattern row in section 2 is all zeros.",
        "Switch to **a different mask per layer** and give layer 0 a window and the last layer Full.",
    )
    return stack, arg, scope


def _heatmap(pattern: np.ndarray, tokens: list[str], title: str, key: str) -> None:
    """One attention pattern [q k] on the shared 0..1 heatmap, its title clear of the key labels."""
    height = min(760, 120 + 28 * len(tokens))  # bigger cells than the default: these sit two abreast
    st.plotly_chart(cached(F.titled_heatmap)(pattern, tokens, title, height), key=key)


def _prediction_frame(sel: Selection, base_logits: np.ndarray, edit_logits: np.ndarray) -> pd.DataFrame:
    """Per position: the right answer, the model's prediction with its own mask and with yours."""
    base = prediction_table(sel, base_logits)
    edit = prediction_table(sel, edit_logits)
    if base:
        rows = [{"position": f"{a['position']}:{a['token']}", "right answer": a["right answer"],
                 "own: predicts": a["predicted"], "own: p(right)": a["p(right)"],
                 "yours: predicts": b["predicted"], "yours: p(right)": b["p(right)"],
                 "changed": "CHANGED" if a["predicted"] != b["predicted"] else ""} for a, b in zip(base, edit)]
        return pd.DataFrame(rows)
    vocab = sel.task.vocab
    top_a, top_b = base_logits[0].argmax(-1), edit_logits[0].argmax(-1)  # [pos]
    rows = [{"position": label, "own: predicts": vocab.decode([int(a)])[0],
             "yours: predicts": vocab.decode([int(b)])[0], "changed": "CHANGED" if a != b else ""}
            for label, a, b in zip(unique_labels(sel.query_tokens), top_a, top_b)]
    return pd.DataFrame(rows)


def panel_effect(sel: Selection, stack: np.ndarray, arg: np.ndarray, base: dict, edit: dict) -> tuple[int, int]:
    """Default vs edited: patterns, predictions and task accuracy. Returns the chosen (layer, head)."""
    cfg = sel.model.cfg
    st.header("2. What the model does with it")
    st.markdown(
        "The mask is an argument of each call, so the same trained weights run twice: once with the mask the "
        "model was trained with, once with yours. Weights on blocked keys are exactly 0; the freed share goes "
        "to the keys that are left, because each row of the softmax must still sum to 1."
    )
    st.latex(r"a_{ij} = \frac{e^{s_{ij}}\,[M_{ij}\text{ allows}]}{\sum_{j'} e^{s_{ij'}}\,[M_{ij'}\text{ allows}]}")
    c1, c2 = st.columns(2)
    with c1:
        query.seed_index("masks.layer", "layer", cfg.n_layers, 0)
        layer = st.selectbox("Layer", list(range(cfg.n_layers)), key="masks.layer")
    with c2:
        query.seed_index("masks.head", "head", cfg.n_heads, 0)
        head = st.selectbox("Head", list(range(cfg.n_heads)), key="masks.head")
    query.write(layer=layer, head=head)
    query.show_notes()
    tokens = sel.query_tokens
    left, right = st.columns(2)
    with left:
        _heatmap(base["pattern"][layer, head], tokens, f"own mask · layer {layer} head {head}", "masks.pattern_own")
    with right:
        _heatmap(edit["pattern"][layer, head], tokens, f"your mask · layer {layer} head {head}", "masks.pattern_yours")
    changed = float(np.abs(base["pattern"][layer, head] - edit["pattern"][layer, head]).max())
    st.caption(f"Largest change of one attention weight in this head: {changed:.3f}.")

    st.subheader("Predictions and accuracy")
    st.dataframe(_prediction_frame(sel, base["logits"], edit["logits"]), hide_index=True, width="stretch",
                 column_config={c: st.column_config.NumberColumn(c, format="%.3f")
                                for c in ("own: p(right)", "yours: p(right)")})
    n = stack.shape[-1]
    length = width_to_length(sel.task.name, sel.arch, n)
    if length is None:
        st.info(f"Accuracy on a batch needs task examples exactly {n} tokens wide, like your mask, and this task "
                "never makes inputs of that width. Press **Random example** in the sidebar to get one that fits.")
    else:
        own_acc = masked_accuracy(sel.model_id, sel.device, None, length)
        your_acc = masked_accuracy(sel.model_id, sel.device, arg, length)
        m1, m2, m3 = st.columns(3)
        m1.metric("accuracy, own mask", f"{own_acc:.1%}")
        m2.metric("accuracy, your mask", f"{your_acc:.1%}", delta=f"{(your_acc - own_acc) * 100:+.1f} points")
        m3.metric("examples scored", f"{N_SAMPLES} × {n} tokens", help="Fresh task examples of the same length as your input, so your mask fits them.")
        st.caption(f"Task: {sel.task.title}. {sel.task.scored_for(sel.arch)} The same {N_SAMPLES} examples are scored both times.")
    try_this(
        "Hide the last key with **Padding** (real tokens = n − 1) on the future-legality encoder: the rule is the "
        "last token, so accuracy falls to chance.",
        "On a decoder, choose **Full**: it now sees the future it was never trained with. Does that help or hurt?",
        "Find the smallest sliding window that keeps the accuracy of your model near its own.",
    )
    return layer, head


def panel_right_wrong(sel: Selection, stack: np.ndarray, edit: dict, layer: int, head: int) -> None:
    """Mask before softmax vs zero after, on the real scores of the chosen head; then the leak table."""
    st.header("3. Right and wrong ways to mask")
    st.markdown(
        "**Right:** add a huge negative number to each blocked score, then take the softmax; the blocked keys get "
        "nothing and the rest share all of the probability. **Wrong:** take the softmax over every key, then set "
        "the blocked weights to zero; the blocked keys still took their share of the denominator, so a row now "
        "sums to less than 1 and the output shrinks. Both use this head's real scores with your mask."
    )
    st.latex(r"\text{right: } \operatorname{softmax}(s + M) \qquad\quad \text{wrong: } "
             r"\operatorname{softmax}(s) \odot [M = 0] \;\Rightarrow\; \textstyle\sum_j a_{ij} < 1")
    mask = stack[layer]
    both = A.compare_masking(edit["scores"][layer, head], mask)
    tokens = sel.query_tokens
    left, right = st.columns(2)
    with left:
        _heatmap(both["right"], tokens, "right: mask before softmax", "masks.right")
    with right:
        _heatmap(both["wrong"], tokens, "wrong: zero after softmax", "masks.wrong")
    st.plotly_chart(cached(F.row_sums_chart)(both["right_sums"], both["wrong_sums"], tokens,
                                     title="each row's total weight"), key="masks.row_sums")
    lowest = float(both["wrong_sums"].min())
    st.caption(f"Smallest row sum the wrong way: {lowest:.3f}. A fully blocked row sums to 0 either way here.")

    st.subheader("How large must the mask constant be?")
    st.markdown(
        "Computers cannot always use −∞, so code often adds a finite constant C such as −1e4 or −1e9. Then a "
        "little probability can **leak** to blocked keys. It is worst when the blocked keys are the ones the query "
        "likes best: one allowed key at logit 0, k blocked keys at logit g (the gap). The table computes this row "
        "in each number format; the chart moves the gap."
    )
    st.latex(r"\text{leak} = \frac{k\,e^{g+C}}{1 + k\,e^{g+C}} \le \varepsilon"
             r"\iff |C| \ge g + \ln\frac{k\,(1-\varepsilon)}{\varepsilon}")
    c1, c2, c3 = st.columns(3)
    gaps = [1, 10, 100, 1000, 3000, 10_000, 20_000, 60_000, 100_000, 10**6, 10**8, 2 * 10**9]
    gap = c1.select_slider("gap g (blocked logit minus allowed logit)", gaps, value=20_000, key="masks.gap",
                           format_func=lambda v: f"{v:,}")
    k = c2.slider("blocked keys k", 1, 64, 7, key="masks.k")
    eps = c3.select_slider("tolerance ε", [1e-3, 1e-5, 1e-7, 1e-9], value=1e-7, key="masks.eps",
                           format_func=lambda v: f"{v:g}")
    rows = A.leak_table(float(gap), k, eps)
    frame = pd.DataFrame(rows)
    frame["stored as"] = frame["stored as"].map(lambda v: f"{v:g}")
    frame["leaked mass"] = frame["leaked mass"].map(lambda v: "NaN" if np.isnan(v) else f"{v:.3g}")
    st.dataframe(frame, hide_index=True, width="stretch")
    st.caption(f"Smallest |C| that keeps this row within ε: {A.min_constant(gap, k, eps):,.1f}. float16 holds "
               "numbers only up to 65,504, so −1e9 is stored as −∞ there, and a gap beyond 65,504 overflows "
               "by itself (NaN in the table; the float16 lines stop there).")
    st.plotly_chart(cached(F.leak_chart)(A.LEAK_GAPS, A.leak_curves(k), eps, gap,
                                         title="leaked probability as the gap grows"),
                    key="masks.leak")
    real = tensor_from(edit["scores"][layer, head], dtype=torch.float32)
    m = torch.as_tensor(mask)
    partial = m.any(-1) & ~m.all(-1)  # rows with both allowed and blocked keys
    if bool(partial.any()):
        blocked_max = real.masked_fill(m, float("-inf")).max(-1).values  # [q]
        allowed_max = real.masked_fill(~m, float("-inf")).max(-1).values  # [q]
        real_gap = float((blocked_max - allowed_max)[partial].max())
        leaks = {c: float(A.leak_mass(real[partial], m[partial], v, torch.float16).max())
                 for c, v in A.MASK_CONSTANTS.items()}
        st.info(f"This head's real scores under your mask: the largest gap is {real_gap:.2f}, so the worst float16 "
                f"leak is {leaks['-1e4']:.3g} with −1e4, {leaks['-1e9']:.3g} with −1e9 and "
                f"{leaks['-inf']:.3g} with −∞. "
                "Small trained models have small gaps; the trouble starts with huge logits or low precision.")
    try_this(
        "Set the gap to 20,000: −1e4 leaks almost everything in both formats, −1e9 nothing. At 2,000,000,000 "
        "−1e9 leaks in float32 too: no finite constant is safe for every gap.",
        "Look at the column *row with every key masked*: −∞ gives NaN, a finite constant spreads the row evenly "
        "over "
        "blocked keys. Neither is right; this model masks again after the softmax and gives zeros.",
        "Make ε smaller and watch the smallest safe |C| grow only by about 2.3 per factor of 10.",
    )


def panel_graph(sel: Selection, stack: np.ndarray, scope: str, layer: int) -> None:
    """The mask as a graph: arc diagram, Laplacian and spectrum, reach by layer, receptive field, influence."""
    n = stack.shape[-1]
    tokens = sel.query_tokens
    layers = sel.model.cfg.n_layers
    mask = stack[layer]
    st.header("4. The mask as a graph")
    st.markdown(
        f"Each token is a node and each allowed pair (query *i* reads key *j*) is an edge from *j* to *i*. "
        f"Below: the mask of layer {layer} (the layer chosen in section 2). Arcs **above** the line carry "
        "information forward from an earlier token, arcs **below** carry it backward from a later one: a causal "
        "mask draws only the upper half."
    )
    st.plotly_chart(cached(F.arc_diagram)(mask, tokens), key="masks.arcs")
    back, ahead = int(np.tril(mask, -1).sum()), int(np.triu(mask, 1).sum())
    st.caption(f"{back} edge(s) look back (above), {ahead} look ahead (below), and {int(np.trace(mask))} of {n} "
               "tokens may attend to themselves.")
    st.subheader("Laplacian and algebraic connectivity")
    st.markdown(
        "Forget directions for a moment: link i and j if either may read the other. The Laplacian L = D − A puts "
        "each token's number of links on the diagonal and −1 for every link. Its smallest eigenvalue is always 0; "
        "the second smallest, **λ2**, measures how hard it is to cut the graph in two. It is **n** for the complete "
        "graph (full and causal masks both give it), **0** exactly when some tokens can never exchange anything, "
        "and small for a thin chain such as a window of 1 (2 − 2cos(π/n))."
    )
    st.latex(r"L = D - A \qquad 0 = \lambda_1 \le \lambda_2 \le \dots \le \lambda_n")
    st.latex(r"\lambda_2(K_n) = n \qquad \lambda_2 = 0 \iff \text{the graph falls apart}")
    facts = graph_facts(stack, layer, scope == SAME)
    spectrum, lam2, pieces = facts["spectrum"], facts["lambda2"], facts["pieces"]
    m1, m2, m3 = st.columns(3)
    m1.metric("λ2 (algebraic connectivity)", f"{lam2:.3f}")
    m2.metric("complete graph would give", f"{n}")
    m3.metric("separate pieces (zero eigenvalues)", f"{pieces}")
    left, right = st.columns(2)
    with left:
        st.plotly_chart(cached(F.laplacian_heatmap)(facts["laplacian"], tokens, title="L = D − A"),
                        key="masks.laplacian")
    with right:
        st.plotly_chart(cached(F.spectrum_bars)(spectrum, title="spectrum of L, λ2 highlighted"),
                        key="masks.spectrum")

    st.subheader("How many layers until everyone has heard from everyone?")
    st.markdown(
        "One layer moves information one edge (plus the residual path, which keeps each token's own). Stacking "
        "layers composes the masks, so a window of w reaches w further per layer, and blocks that never talk "
        "stay apart however deep the model."
    )
    st.latex(r"R_L = (M_L \lor I)\circ\cdots\circ(M_1 \lor I)")
    shares, full_at = facts["shares"], facts["full_at"]
    st.plotly_chart(cached(F.reach_by_layer)(shares, layers, full_at), key="masks.reach")
    st.caption(("Never: some pairs have no route at any depth." if full_at is None else
                f"Every token reaches every other after {full_at} layer(s).")
               + ("" if scope == SAME else " Past this model's layers the last layer's mask is repeated."))
    query.seed_index("masks.token", "token", n, n - 1)
    token = st.slider("receptive field of query token", 0, n - 1, key="masks.token",
                      help="Which keys can influence this token after 1, 2, ... layers?")
    query.write(token=token)
    query.show_notes()
    fields = receptive_fields(facts["stacked"], token, MAX_FIELD_ROWS)  # [layer k]
    st.plotly_chart(cached(F.receptive_field_grid)(
        fields, tokens, token, title=f"what can reach {unique_labels(tokens)[token]}, layer by layer"),
        key="masks.field")

    st.subheader("The model agrees: measured influence")
    st.markdown(
        "Does the trained model really obey the graph? We ask it: how much does the output at position q move when "
        "the embedding at position k moves (the size of a gradient)? Crosses mark pairs with **no route** through "
        f"this model's {layers} layers; their gradient must be exactly zero."
    )
    reach = facts["reach"]  # [q k]
    measured = influence(sel.cache_key, stack)
    leaks = int(((measured > 0) & ~reach).sum())
    st.plotly_chart(cached(F.influence_heatmap)(measured, reach, tokens, tokens,
                                                title="|∂ output q / ∂ embedding k|"),
                    key="masks.influence")
    st.caption(f"Pairs with no route: {int((~reach).sum())}; of those with a nonzero gradient: {leaks}. "
               f"Pairs with a route: {int(reach.sum())}; of those with a zero gradient: "
               f"{int(((measured == 0) & reach).sum())}.")
    try_this(
        "**Block-diagonal** with b = 4: the arcs split into islands, λ2 drops to 0 and the reach curve never "
        "reaches 100%.",
        "**Sliding window** w = 1: λ2 is tiny; the receptive field grows by one key per side per layer.",
        "**Global + local** with g = 1, w = 1: one global token connects everyone in two layers.",
    )


def panel_cost(stack: np.ndarray | None, params_w: int) -> None:
    """Allowed pairs against n^2, and measured dense vs block-sparse time."""
    n = stack.shape[-1] if stack is not None else None
    st.header("5. What sparsity saves")
    st.markdown(
        "Dense attention scores every pair: n² of them per head, so doubling the input quadruples the work. A "
        "block-diagonal mask with blocks of b scores only n·b pairs, and a kernel that skips the blocked pairs does "
        "n/b small b×b problems. The work then shrinks by the factor b/n. Below it is timed on this machine, in one "
        f"run, for n up to 2,048 (longer than the {MAX_EDIT_N}-token editor: no pattern is drawn here)."
    )
    st.latex(r"\text{dense: } O(n^2 d) \qquad \text{block-sparse: } O(n\,b\,d)"
             r"\qquad \frac{\text{block-sparse}}{\text{dense}} = \frac{b}{n}")
    if stack is not None:
        pairs = int(stack[0].sum())
        c1, c2, c3 = st.columns(3)
        c1.metric("pairs your mask allows (layer 0)", f"{pairs:,}")
        c2.metric("dense pairs n²", f"{n * n:,}")
        c3.metric("share of the dense work", f"{pairs / (n * n):.1%}")
    b = st.select_slider("block size b", [8, 16, 32, 64], value=32, key="masks.cost_b")
    ns = [8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096]
    st.plotly_chart(cached(F.pairs_chart)(ns, b, params_w, None if stack is None else (n, int(stack[0].sum())),
                                  title="allowed pairs as n grows"), key="masks.pairs")
    run = st.session_state.setdefault("masks.timing_run", 0)
    if st.button("Measure again", key="masks.remeasure", icon=":material/timer:"):
        st.session_state["masks.timing_run"] = run = run + 1
    rows = timing(b, run)
    st.plotly_chart(cached(F.timing_chart)(rows, title=f"measured on this machine (4 heads of 16, b = {b}, one CPU thread)"),
                    key="masks.timing")
    frame = pd.DataFrame(rows)[["n", "dense ms", "block-sparse ms", "measured ratio", "predicted ratio b/n"]]
    st.dataframe(frame.style.format({"dense ms": "{:.2f}", "block-sparse ms": "{:.2f}", "measured ratio": "{:.3f}",
                                     "predicted ratio b/n": "{:.3f}"}), hide_index=True, width="stretch")
    st.caption("Best of 3 calls each. At small n fixed overheads dominate and the ratio stays above b/n; as n grows "
               "the dense n×n buffer gets expensive (memory as well as arithmetic) and the gap opens up.")
    try_this(
        "Double b: the predicted ratio doubles. Does the measured one follow at large n?",
        "Press **Measure again**: how much do the times move from run to run on a shared machine?",
    )


def panel_encoder_decoder(device: str) -> None:
    """The future-legality task: the bidirectional encoder solves it, the causal decoder cannot."""
    st.header("6. Encoder vs decoder: a rule that comes last")
    st.markdown(
        "Each digit must be marked *ok* or *bad* by a rule (even or odd) written **after** all the digits. The "
        "encoder's full mask lets every digit read the rule; the decoder's causal mask hides it, so the decoder can "
        "only guess, and a guess is right half of the time. Same task, same size of model: the mask alone decides. "
        "(The same reasoning warns about leaks: if a decoder cross-attends to an encoder that has read the answer, "
        "the future reaches the decoder through the encoder.)"
    )
    available = {e["id"] for e in models.manifest()}
    if not {ENC_ID, DEC_ID} <= available:
        st.info("The bundled future-legality models are not installed, so this comparison cannot run. Build them "
                "with `python -m core.train --all`.")
        return
    length = st.slider("digits per example", 2, 16, 8, key="masks.legality_len",
                       help="Both models were trained on 8 digits; other lengths test how they generalise.")
    data = legality_panel_data(device, length)
    width = length + 2
    tokens = data["tokens"]
    left, right = st.columns(2)
    for col, name, own, other in ((left, "encoder", "full", "causal"), (right, "decoder", "causal", "full")):
        with col:
            mask = M.full(width) if own == "full" else M.causal(width)
            st.plotly_chart(cached(F.mask_grid)(mask.numpy(), tokens, tokens, title=f"{name}: its own {own} mask"),
                            key=f"masks.legality_{name}")
            m1, m2 = st.columns(2)
            m1.metric(f"own mask: {own}", f"{data['acc'][(name, own)]:.1%}")
            m2.metric(f"given the {other} mask", f"{data['acc'][(name, other)]:.1%}",
                      delta=f"{(data['acc'][(name, other)] - data['acc'][(name, own)]) * 100:+.1f} points")
    st.caption(f"{N_SAMPLES} examples of {length} digits, the same for every cell. core.train.evaluate on 512 fresh "
               f"examples: encoder {data['evaluate']['encoder']:.1%}, decoder {data['evaluate']['decoder']:.1%}.")
    vocab = get_task("future-legality").vocab
    rows = []
    for p, target in enumerate(data["targets"]):
        if target < 0:
            continue
        rows.append({"position": f"{p}:{tokens[p]}", "right answer": vocab.decode([target])[0],
                     "encoder says": data["encoder_pred"][p], "decoder says": data["decoder_pred"][p],
                     "encoder: pull of the rule": float(data["encoder_rule"][p]),
                     "decoder: pull of the rule": float(data["decoder_rule"][p])})
    st.markdown(f"One example, `{' '.join(tokens)}`. *Pull of the rule* is the size of the gradient of that "
                "position's output with respect to the rule token: the decoder's is exactly 0.")
    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch",
                 column_config={c: st.column_config.NumberColumn(c, format="%.4f")
                                for c in ("encoder: pull of the rule", "decoder: pull of the rule")})
    try_this(
        "Give the encoder the causal mask (right-hand metric on the left): it falls to about 50%.",
        f"In the sidebar pick **{ENC_ID}** and untick the last column (the rule) in section 1.",
        "Give the decoder the full mask: it can now see the rule, but was never trained to use it.",
    )


# ---------------------------------------------------------------------------------------------
# The page
# ---------------------------------------------------------------------------------------------

sel = shared_sidebar()
header(
    "Masks",
    "A mask decides who may talk to whom. Every attention layer scores each query against each key; the mask "
    "forbids some of those pairs before the softmax, so a forbidden key gets exactly zero weight. Change the mask "
    "and the same trained model reads its input differently. Read the mask as a graph and its connectivity tells "
    "you how far information can travel, and how fast, through a stack of layers.",
    r"\operatorname{Attention}(Q, K, V) = \operatorname{softmax}\!\Big(\frac{QK^\top}{\sqrt{d}} + M\Big)V",
)
n_tokens = len(sel.query_tokens)
stack = None
cost_w = 2
if n_tokens > MAX_EDIT_N:
    st.warning(f"Your input has {n_tokens} tokens; the mask editor, the graph and the model panels draw every pair "
               f"and are limited to {MAX_EDIT_N} tokens. Shorten the input in the sidebar (or press **Random "
               "example**). The cost and encoder-vs-decoder sections below still work.")
else:
    stack, mask_arg, scope = panel_editor(sel, n_tokens)
    own_run = masked_run(sel.cache_key, None)
    your_run = masked_run(sel.cache_key, mask_arg)
    chosen_layer, chosen_head = panel_effect(sel, stack, mask_arg, own_run, your_run)
    panel_right_wrong(sel, stack, your_run, chosen_layer, chosen_head)
    panel_graph(sel, stack, scope, chosen_layer)
    cost_w = int(st.session_state.get("masks.all.w", 2))
panel_cost(stack, cost_w)
panel_encoder_decoder(sel.device)
