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
spread_table_figure = cached(F.head_spread_table)
DOT_PAIRS = 4000  # random pairs in the q.k histogram: its measured spread is within about 1% of the truth


def run_patterns(sel: Selection, kind: A.AttentionKind, temperature: float) -> tuple[np.ndarray, np.ndarray]:
    """(patterns [layer head q k], logits [1 pos vocab]) of one kind of attention at a temperature."""
    out = runs.run(sel, A.pattern_names(kind, sel.model.cfg.n_layers), temperature=temperature)
    return A.stack_patterns(out, kind, sel.model.cfg.n_layers), out["logits"]


def per_query_head(out: dict, n_heads: int) -> dict:
    """A run's keys and values as one per query head: grouped-query attention (Llama-family, `n_kv_heads` <
    `n_heads`) hooks them per key/value head, `[batch pos kv_head d_head]`, and query head h reads key/value head
    h // (n_heads / n_kv_heads). Other arrays, and every array of a model without grouping, pass unchanged."""
    kv_hooks = ("hook_k", "hook_v", "hook_rot_k", "hook_k_raw")
    return {name: np.repeat(value, n_heads // value.shape[2], axis=2)  # [batch pos head d_head]
            if name.endswith(kv_hooks) and np.ndim(value) == 4 and 0 < value.shape[2] < n_heads else value
            for name, value in out.items()}


def run_steps(sel: Selection, kind: A.AttentionKind, layer: int, temperature: float) -> dict:
    """q, k, v, mask, scores, pattern and z of one layer (what the arithmetic panel recomputes); keys and values
    one per query head (per_query_head)."""
    out = runs.run(sel, A.step_names(kind, layer, sel.model.cfg.pos), temperature=temperature)
    return per_query_head(out, sel.model.cfg.n_heads)


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
    out = per_query_head(runs.run(sel, A.spread_names(kind, cfg.n_layers, cfg.pos)), cfg.n_heads)
    return A.head_dot_spread(out, kind, cfg.n_layers, cfg.pos)
