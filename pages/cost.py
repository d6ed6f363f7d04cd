"""Cost: attention against recurrence, measured on this machine, and attention without the n x n matrix.

Thin page: the sidebar (for the device), the idea, the sweep's controls, then ui.cost.view's panels in
reading order (time, sequential steps, path length and the gradient along it, memory and the bytes moved,
famous models' sizes, scaling with depth and width), which call
ui.cost.runs, core.analysis.cost, core.kernels and core.figures.cost.
"""

from __future__ import annotations

from ui.cost import view as V
from ui.shell.page import header
from ui.shell.sidebar import shared_sidebar

sel = shared_sidebar()
V.seed_url(sel)  # read the URL first, so any problem with it is reported under the title
header(
    "Cost of attention",
    "Transformers replaced recurrent networks for three reasons that can be measured. A self-attention layer "
    "does n²·d work against the recurrent layer's n·d², so it is cheaper while the input is shorter than the "
    "width. It does all of that work in one step, where a recurrence needs n steps in a row. And any two "
    "positions are one hop apart, where a recurrence passes information along n steps. The price is the n×n "
    "matrix of scores: memory that grows with the square of the input, unless attention is computed in chunks "
    "that never hold it whole. Every curve below is measured, on this server or on the machine that built "
    "this copy of the app (each caption says which).",
    r"\begin{gathered}\underbrace{O(n^2 d)}_{\text{attention}} \text{ vs } \underbrace{O(n d^2)}_{\text{RNN}} \\ "
    r"\text{steps: } O(1) \text{ vs } O(n) \qquad \text{path: } O(1) \text{ vs } O(n)\end{gathered}",  # two lines: fits 1024
    lead='Attention does n²·d work in one parallel step; a recurrent network does n·d² work in n steps. Below: both timed on this machine, and where the curves cross.',
)
setting = V.controls(sel)  # each control reruns only the measured parts that read it (keyed fragments)
V.time_panel(setting)
V.steps_panel(setting)
V.memory_panel(setting)
V.presets_panel(setting, sel)
V.scaling_panel()
