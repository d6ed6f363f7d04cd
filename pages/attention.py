"""Attention: every head at a glance, one head up close, and one query taken apart to the arithmetic.

Thin page: the sidebar's model and input, the idea, then ui.attention.view's controls and views
(which call core.analysis.attention and core.figures.attention).
"""

from __future__ import annotations


from ui.attention import senses
from ui.attention import view as V
from ui.shell.page import header
from ui.shell.sidebar import shared_sidebar

sel = shared_sidebar()
V.seed_url(sel)  # read the URL first, so any problem with it is reported under the title
header(
    "Attention",
    "Attention is how a token gathers information from the other tokens. Each token asks a **query** (what am "
    "I looking for?), every token offers a **key** (what do I hold?) and a **value** (what I hand over if "
    "picked). The query is compared with each key by a dot product, the scores are scaled and a mask hides "
    "keys that may not be seen, softmax turns the scores into weights that are positive and add up to 1, and "
    "the token receives the weighted average of the values. A **head** is one such set of queries, keys and "
    "values; each layer runs several heads side by side, each free to look for something different.",
    # two lines (gathered): on one line the mask's cases ran past a 1024-wide screen's column
    r"\begin{gathered}\mathrm{Attention}(Q,K,V)=\operatorname{softmax}\!\left(\frac{QK^{\top}}{\sqrt{d_k}}+M\right)V,"
    r"\\ M_{ij}=\begin{cases}0 & \text{query } i \text{ may see key } j\\ -\infty & \text{otherwise}\end{cases}"
    r"\end{gathered}",
    lead="A **query** is scored against every **key**; softmax weights then average the **values**.",
)
V.body(sel)  # the bar's controls rerun only the parts of the shown view that read them
senses.panel(sel)  # 'river bank' / 'money bank' and 'it' -> 'animal' on the English models (issue 39)
