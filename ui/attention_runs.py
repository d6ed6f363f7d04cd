"""The Attention page's cached work: one hooked run per (input, temperature), shared by every panel,
and its figures, built once per distinct input (see ui.figures.cached)."""

from __future__ import annotations

import numpy as np

from core.analysis import attention as A
from core.figures import attention as F
from ui import runs
from ui.figures import cached
from ui.sidebar import Selection

grid_figure = cached(F.overview_grid)
head_figure = cached(F.head_heatmap)
lines_figure = cached(F.lines_view)
bars_figure = cached(F.query_bars)
steps_figure = cached(F.steps_bars)
entropy_figure = cached(F.entropy_bars)
diff_figure = cached(F.difference_heatmap)


def run_patterns(sel: Selection, kind: A.AttentionKind, temperature: float) -> tuple[np.ndarray, np.ndarray]:
    """(patterns [layer head q k], logits [1 pos vocab]) of one kind of attention at a temperature."""
    out = runs.run(sel, A.pattern_names(kind, sel.model.cfg.n_layers), temperature=temperature)
    return A.stack_patterns(out, kind, sel.model.cfg.n_layers), out["logits"]


def run_steps(sel: Selection, kind: A.AttentionKind, layer: int, temperature: float) -> dict:
    """q, k, v, mask, scores, pattern and z of one layer (what the arithmetic panel recomputes)."""
    return runs.run(sel, A.step_names(kind, layer, sel.model.cfg.pos), temperature=temperature)
