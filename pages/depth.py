"""Depth: the residual stream forward and backward, why 48 layers train, and how far information travels.

Thin page: the sidebar's model and input, the idea, then ui.depth.view's panels in reading order
(the stream forward, the gradient backward, the depth experiment with the seed's bounds,
hyper-connections, the bundled pre-LN / post-LN twins, long-range paths), which call ui.depth.runs,
core.analysis.depth, core.analysis.depth_tables and core.figures.depth.
"""

from __future__ import annotations

from ui.depth import cross_path, hyper_trained
from ui.depth import view as V
from ui.shell.page import header
from ui.shell.sidebar import shared_sidebar

sel = shared_sidebar()
V.seed_url(sel)  # read the URL first, so any problem with it is reported under the title
header(
    "Depth: residual stream",
    "A Transformer's blocks do not hand the data from one to the next. Each block *reads* a shared "
    "vector per token, the **residual stream**, computes something, and *adds* its result back. "
    "The stream is the running sum of everything written into it, and the chain of additions is also "
    "the road the gradient travels back down. Below we follow the stream forward (how big it is, who "
    "wrote what, what it would already predict), then backward (where the gradient lands), and then "
    "ask why the identity path and the place of LayerNorm decide whether a 48-layer stack can learn at all.",
    r"x_{l+1} = x_l + F_l\big(\mathrm{LN}(x_l)\big) \qquad\Longrightarrow\qquad "
    r"\frac{\partial x_{l+1}}{\partial x_l} = I + \frac{\partial F_l}{\partial x_l}",
    lead='Each block reads the **residual stream**, computes, and adds its result back; the same chain of additions carries the gradient down. Below: how big the stream grows, layer by layer.',
)
V.focus_sections(sel)  # sections 1-2: the stack, position and objective rerun only the figures that read them
V.experiment_sections()  # sections 3-4: the experiment's controls rerun only the figures that read them
hyper_trained.panel()  # the hyper-connections section's trained pair (issue 39)
V.twins_panel(sel)
cross_path.panel(sel.device)  # cross-attention as a gradient path (issue 39)
V.paths_panel(sel)
