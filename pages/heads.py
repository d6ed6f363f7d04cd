"""Heads: each head's subspace, its QK and OV circuits, its role, how redundant it is, what breaks
without it, a two-head toy trained on the spot, and the orthogonal-query identity.

Thin page: the sidebar's model and input, the idea, then ui.heads.view's controls and tabs (which
call core.analysis.heads and core.figures.heads; the cached work is in ui.heads.runs).
"""

from __future__ import annotations

import streamlit as st

from ui.heads import view as V
from ui.shell.page import header
from ui.shell.sidebar import max_tokens, shared_sidebar

sel = shared_sidebar()
cfg = sel.model.cfg
V.seed_url(sel)  # read the URL first, so any problem with it is reported under the title
header(
    "Heads",
    "A layer does not ask one question; it asks several at once. Each **head** has its own $W_Q$, $W_K$ and "
    "$W_V$, so it compares tokens and copies information in its own small subspace of the residual stream "
    "($d_{head} = d_{model} / h$ dimensions: h heads have the parameters and matrix FLOPs of one wide head, but keep h "
    "attention patterns of n×n where it keeps one, so their memory grows with h). Here we look at those subspaces, "
    "read what each head looks for and what it writes straight from its weights, name the jobs some heads do, "
    "check whether heads repeat each other, and remove heads to see what breaks.",
    r"\mathrm{MultiHead}(X) = \sum_{h=1}^{H} \operatorname{softmax}\!\Big(\tfrac{X W_Q^h (X W_K^h)^{\top}}"
    r"{\sqrt{d_{\text{head}}}} + M\Big)\, X W_V^h\, W_O^h",
    lead="Each **head** compares and copies tokens in its own small subspace.",
)
V.body(sel)  # kind, layer and head rerun only the parts of the open tab that read them
# Under the tabs rather than above them, so the open tab's first figure starts on the first screen.
st.caption(f"This model: {cfg.n_layers} layers × {cfg.n_heads} heads, d_model = {cfg.d_model}, d_head = {cfg.d_head}. "
           f"Inputs are capped at {max_tokens(sel.model):,} tokens (this model's context, in the sidebar); the role, "
           f"redundancy and ablation numbers use their own batches, named in each tab.")
