"""Retrieval: attention as kernel smoothing, as a soft database, keys against values, a hijacked key, and which
of values, queries and keys scales the output.

Thin page: the sidebar, the idea, then ui.retrieval.view's panels in reading order (which call
core.analysis.retrieval / core.analysis.recall and core.figures.retrieval through ui.retrieval.runs).
"""

from __future__ import annotations

from ui.retrieval import view as V
from ui.shell.page import header
from ui.shell.sidebar import shared_sidebar

sel = shared_sidebar()
V.seed_url(sel)  # read the URL first, so any problem with it is reported under the title
header(
    "Retrieval",
    "Attention looks things up. A query is compared with every key, the scores become weights, and the "
    "answer is the weighted mix of the values. Read that as statistics and it is a kernel smoother whose "
    "bandwidth the query's length sets; read it as a database and it is a soft lookup that hardens into an "
    "exact one as the scores grow. Below you can check both readings on small examples, see on trained models "
    "why keys and values should be different things, and hijack a model's attention with one oversized key.",
    r"\operatorname{out}(q) = \sum_j \frac{\exp(q\cdot k_j)}{\sum_i \exp(q\cdot k_i)}\, v_j",
    lead='Attention looks things up: a query scores every key, and the answer is the weighted mix of the values. Below: that lookup as a kernel smoother, live.',
)
V.kernel_panel()
V.lookup_panel()
if V.models_present(V.ALL_MODELS):
    V.tied_panel(sel)
    V.hijack_panel(sel)
V.equivalence_panel()
V.linearity_panel()
