"""Masks: draw who may attend to whom, watch the model react, and read the mask as a graph.

Thin page: the sidebar's model and input, the idea, then ui.masks_view's panels in reading order
(which call core.analysis.masks and core.figures.masks through ui.masks_runs).
"""

from __future__ import annotations

from ui import masks_view as V
from ui.page import header
from ui.sidebar import shared_sidebar

sel = shared_sidebar()
V.seed_url(sel)  # read the URL first, so any problem with it is reported under the title
header(
    "Masks",
    "A mask decides who may talk to whom. Every attention layer scores each query against each key; the mask "
    "forbids some of those pairs before the softmax, so a forbidden key gets exactly zero weight. Change the mask "
    "and the same trained model reads its input differently. Read the mask as a graph and its connectivity tells "
    "you how far information can travel, and how fast, through a stack of layers.",
    r"\operatorname{Attention}(Q, K, V) = \operatorname{softmax}\!\Big(\frac{QK^\top}{\sqrt{d}} + M\Big)V",
)
drawn = V.mask_panel(sel)  # the mask(s) drawn and the model's runs; None for an input too long to draw
if drawn is not None:
    V.model_sections(sel, drawn)  # sections 2-4: the layer and head pickers rerun only the parts that read them
V.cost_panel(drawn)
V.legality_panel(sel.device)
