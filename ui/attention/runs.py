"""The Attention page's cached work: one hooked run per (input, temperature), shared by every panel,
and its figures, built once per distinct input (see ui.shell.figures.cached)."""

from __future__ import annotations

import numpy as np

from core.analysis import attention as A
from core.figures import attention as F
from ui.shell import runs
from ui.shell.figures import cached
from ui.shell.memo import memo
from ui.shell.sidebar import Selection

grid_figure = cached(F.overview_grid)
head_figure = cached(F.head_heatmap)
lines_figure = cached(F.lines_view)
bars_figure = cached(F.query_bars)
steps_figure = cached(F.steps_bars)
entropy_figure = cached(F.entropy_bars)
diff_figure = cached(F.difference_heatmap)
dots_figure = cached(F.dot_histogram)
curve_figure = cached(F.scale_curve)
spread_figure = cached(F.head_spread_bars)
DOT_PAIRS = 4000  # random pairs in the q.k histogram: its measured spread is within about 1% of the truth


def run_patterns(sel: Selection, kind: A.AttentionKind, temperature: float) -> tuple[np.ndarray, np.ndarray]:
    """(patterns [layer head q k], logits [1 pos vocab]) of one kind of attention at a temperature."""
    out = runs.run(sel, A.pattern_names(kind, sel.model.cfg.n_layers), temperature=temperature)
    return A.stack_patterns(out, kind, sel.model.cfg.n_layers), out["logits"]


def run_steps(sel: Selection, kind: A.AttentionKind, layer: int, temperature: float) -> dict:
    """q, k, v, mask, scores, pattern and z of one layer (what the arithmetic panel recomputes)."""
    return runs.run(sel, A.step_names(kind, layer, sel.model.cfg.pos), temperature=temperature)


@memo(maxsize=64)
def dot_samples(d_k: int, seed: int) -> np.ndarray:
    """q.k of DOT_PAIRS random unit-variance pairs of width d_k (the histogram of the 'Why √d_k' view)."""
    return A.random_dot_products(d_k, DOT_PAIRS, seed)


@memo(maxsize=32)
def sweep(n_keys: int, seed: int) -> A.ScaleSweep:
    """Softmax of random scores against every d_k, scaled and not (the curves of the 'Why √d_k' view)."""
    return A.scale_sweep(n_keys, seed)


def run_spread(sel: Selection, kind: A.AttentionKind) -> A.HeadSpread:
    """The spread of the model's own raw q.k per layer and head on the sidebar's input."""
    cfg = sel.model.cfg
    out = runs.run(sel, A.spread_names(kind, cfg.n_layers, cfg.pos))
    return A.head_dot_spread(out, kind, cfg.n_layers, cfg.pos)
