"""Positions: why attention needs them, what each scheme looks like, and what breaks when you swap them.

Thin page: the sidebar's model, the idea, then ui.positions.view's panels in reading order (the
encodings, relative position, RoPE, translation invariance, order blindness, a live scheme swap,
extrapolation), which call ui.positions.runs, core.analysis.positions and core.figures.positions.
"""

from __future__ import annotations

from ui.positions import view as V
from ui.shell.page import header
from ui.shell.sidebar import shared_sidebar

sel = shared_sidebar()
V.seed_url(sel)  # read the URL first, so any problem with it is reported under the title
header(
    "Positions",
    "Attention compares every query with every key and adds up values, and none of that cares where a "
    "token sits. Shuffle the words and each word gets the same result as before, just in a new place: "
    "*dog bites man* and *man bites dog* look alike. A positional scheme breaks the tie. The **sinusoidal** "
    "scheme adds a fixed wave pattern to each token, a **learned** scheme adds a trained vector per "
    "position, and **RoPE** turns queries and keys by an angle that grows with position. Below you can see "
    "each scheme, check the algebra that makes them work, and swap schemes on trained models to watch "
    "what breaks.",
    r"\begin{gathered} x_p = E[t_p] + PE_p \\ "
    r"\mathrm{Attn}(\Pi X) = \Pi\,\mathrm{Attn}(X)\ \text{ when no position enters} \end{gathered}",
    lead='Attention alone cannot tell word order: *dog bites man* looks like *man bites dog*. Below: the positional scheme that breaks the tie, as this model sees it.',
)
V.encoding_sections(sel)  # sections 1-4: the encodings' and RoPE's controls rerun only the figures that read them
V.order_panel(sel)
V.swap_panel(sel)
V.extrapolation_panel(sel)
