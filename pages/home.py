"""Home: what the Glassbox is, in a few lines, and a map of the pages with a picture each.

Thin page: the sidebar, the idea, then ui.home.view's map of the pages.
"""

from __future__ import annotations

from ui.home import view as V
from ui.shell.page import header, try_this
from ui.shell.sidebar import shared_sidebar

sel = shared_sidebar()
header(
    "Transformer Glassbox",
    "A small Transformer you can open up and poke. The models here were trained by this project on toy tasks "
    "(reverse or sort a list of digits, continue a repeated pattern, check subject-verb agreement, match "
    "brackets), small enough that their attention can be read by eye. Every page takes one idea from the "
    "Transformer and lets you see it and change it on a real model.\n\n"
    "**How to use it.** Pick a model and an input in the sidebar: every page uses them. Each page opens with "
    "a line on its idea and its live figure; *Read more* holds the idea in full with its equation, and *try this* "
    "suggestions follow the figures. Everything you set is kept "
    "in the address bar, so copying the URL shares exactly the view you are looking at.",
    r"\mathrm{Attention}(Q,K,V)=\operatorname{softmax}\!\left(\frac{QK^{\top}}{\sqrt{d_k}}\right)V",
    lead='A small Transformer, trained here on toy tasks, that you can open up and poke. Pick a model and an input in the sidebar, then a page below: everything you set stays in the address bar.',
)
V.current_model(sel)
V.page_map()
V.families_table()

try_this("Start with **Attention**: pick the *reverse-encdec* model and look at cross-attention, where each "
         "output digit looks back at the input digit it copies.",
         "Change the input in the sidebar, then switch pages: the model and input come with you.",
         "Copy the address bar into a new tab: the same view opens, down to the layer, head and query token.")
