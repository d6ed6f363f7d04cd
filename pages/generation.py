"""Generation: the three families' anatomy, attention shapes live, decoding step by step with and
without a key-value cache, a leak through a bidirectional encoder, and why the decoder is masked.

Thin page: the sidebar's model and input, the idea, then ui.generation.view's panels in reading order
(which call core.analysis.generation and core.analysis.leakage through ui.generation.runs).
"""

from __future__ import annotations

from ui.generation import view as V
from ui.shell.page import header
from ui.shell.sidebar import shared_sidebar

sel = shared_sidebar()
V.seed_url(sel)  # read the URL first, so any problem with it is reported under the title
header(
    "Generation",
    "How a Transformer writes. An encoder reads a whole input at once; a decoder writes one token at a time, "
    "each step reading what it wrote so far; an encoder-decoder does both, its decoder asking the encoder's "
    "output through cross-attention. This page opens each family's layers, measures the shapes of every "
    "attention, steps through greedy decoding with and without a key-value cache, and shows two ways a model "
    "can cheat by seeing the answer it is meant to predict.",
    r"p(y_1,\dots,y_n \mid x)=\prod_{t=1}^{n} p\big(y_t \mid y_{<t},\, x\big)",
    lead="An encoder reads the whole input at once; a decoder writes one token at a time; an encoder-decoder does both. Below: the three families' layers side by side.",
)
V.anatomy_panel(sel)
V.shapes_panel(sel)
V.stepper_panel(sel)
V.leakage_panel(sel)
V.masking_panel(sel)
