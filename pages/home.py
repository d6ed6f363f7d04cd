"""Home: what the Glassbox is, in a few lines, and a map of the pages with a picture each.

Thin page: the sidebar, the idea, then ui.home.view's map of the pages.
"""

from __future__ import annotations

from ui.home import tagging
from ui.home import view as V
from ui.shell.page import header, try_this
from ui.shell.sidebar import shared_sidebar

sel = shared_sidebar(default_model=V.HOME_MODEL)
header(
    "Transformer Glassbox",
    "A small Transformer you can open up and poke. It opens on a small model of English trained by this "
    "project, so the first thing you see is attention on a sentence you type. The other bundled models were "
    "trained here on toy tasks (reverse or sort a list of digits, continue a repeated pattern, check subject-verb "
    "agreement, match brackets): small enough that their attention can be read by eye and every mechanism "
    "checked exactly. Every page takes one idea from the Transformer and lets you see it and change it on a real "
    "model.\n\n"
    "**How to use it.** Pick a model and an input in the sidebar: every page uses them. Each page opens with "
    "a line on its idea and its live figure; *Read more* holds the idea in full with its equation, and *try this* "
    "suggestions follow the figures. Everything you set is kept "
    "in the address bar, so copying the URL shares exactly the view you are looking at.",
    r"\mathrm{Attention}(Q,K,V)=\operatorname{softmax}\!\left(\frac{QK^{\top}}{\sqrt{d_k}}\right)V",
    lead="A small Transformer you can open up and poke. Type a sentence in the sidebar and see where each word "
         "looks; pick another model (English, or a toy task's) and a page below: everything you set stays in the "
         "address bar.",
)
V.current_model(sel)
V.your_sentence(sel)
V.page_map()
V.families_table()
tagging.panel(sel.device)  # an encoder-only model that tags every word (issue 39)

try_this("Start with **Attention**: pick the *reverse-encdec* model and look at cross-attention, where each "
         "output digit looks back at the input digit it copies.",
         "Change the input in the sidebar, then switch pages: the model and input come with you.",
         "Copy the address bar into a new tab: the same view opens, down to the layer, head and query token.")
