"""Masks: draw who may attend to whom, watch the model react, and read the mask as a graph.

Thin page: the sidebar's model and input, the idea, then ui.masks.view's panels in reading order
(which call core.analysis.masks and core.figures.masks through ui.masks.runs).
"""

from __future__ import annotations

from ui.masks import future
from ui.masks import view as V
from ui.shell.page import header
from ui.shell.sidebar import shared_sidebar

sel, cut = V.editable(shared_sidebar())  # a checkpoint's text: its first tokens that the editor can draw
V.seed_url(sel)  # read the URL first, so any problem with it is reported under the title
header(
    "Masks",
    "A mask decides who may talk to whom. Every attention layer scores each query against each key; the mask "
    "forbids some of those pairs before the softmax, so a forbidden key gets exactly zero weight. Change the mask "
    "and the same trained model reads its input differently. Read the mask as a graph and its connectivity tells "
    "you how far information can travel, and how fast, through a stack of layers.",
    r"\operatorname{Attention}(Q, K, V) = \operatorname{softmax}\!\Big(\frac{QK^\top}{\sqrt{d}} + M\Big)V",
    lead="A mask decides which keys each query may read; a forbidden key gets exactly zero weight. Below: this model's mask, ready to edit.",
)
if V.mask_panel(sel, cut):  # section 1; False for an input too long to draw every pair of
    V.model_sections(sel)  # sections 2-4: the pickers and the editor rerun only the parts that read them
V.cost_panel(sel)
V.legality_panel(sel.device)
future.panel(sel.device)  # section 7: a reading that depends on later readings (issue 39)
