"""One attention pattern drawn at any length, for the pages other than Attention (issue 38).

Up to DRAWN_EXACT tokens a side a pattern is drawn cell by cell with token labels (core.figures.heatmaps'
`attention_heatmap`). A longer one is pooled on the server into at most OVERVIEW_CELLS cells a side, each the
largest weight of its block of tokens (heatmaps' `pool` and `overview_heatmap`, shared with the Attention page),
so a 1,024-token head sends ~0.1 MB instead of ~1.4 MB, and a thin diagonal stays visible. Pure: arrays in,
figure out.
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import plotly.graph_objects as go

from core.figures.heatmaps import OVERVIEW_CELLS, attention_heatmap, overview_heatmap, pool, pool_block

DRAWN_EXACT = 256  # tokens a side drawn cell by cell (uint8 cells, ~0.1 MB); longer patterns are pooled


def pattern_blocks(n_q: int, n_k: int) -> tuple[int, int]:
    """The block of tokens (queries, keys) one drawn cell stands for: 1 x 1 up to DRAWN_EXACT tokens a side."""
    if max(n_q, n_k) <= DRAWN_EXACT:
        return 1, 1
    return pool_block(n_q, OVERVIEW_CELLS), pool_block(n_k, OVERVIEW_CELLS)


def reduce_patterns(patterns: np.ndarray) -> np.ndarray:
    """What a page keeps of patterns `[.. q k]` to draw them: the patterns themselves up to DRAWN_EXACT tokens a
    side, else their pooled overviews `[.. q/bq k/bk]` (a 1,024-token layer of four heads: 1 MB, not 16 MB)."""
    patterns = np.asarray(patterns, dtype=np.float32)
    block = pattern_blocks(*patterns.shape[-2:])
    return patterns if block == (1, 1) else pool(patterns, block, "max")


def pattern_figure(pattern: np.ndarray, q_tokens: Sequence[str], k_tokens: Sequence[str], title: str = "",
                   height: Optional[int] = None, narrow: bool = False) -> go.Figure:
    """One head's pattern `[q k]` (or its `reduce_patterns` overview) for queries `q_tokens` and keys `k_tokens`:
    every cell with token labels while it fits DRAWN_EXACT, else the pooled overview on axes in token positions
    (hover says the block's largest weight). `narrow`: for a column beside another figure, the overview has no
    colour bar (the attention scale is 0..1 on every page), leaving the pattern the width: with it, two patterns
    side by side at 1024 px were 90 px wide each."""
    pattern = np.asarray(pattern, dtype=np.float32)
    n_q, n_k = len(q_tokens), len(k_tokens)
    block = pattern_blocks(n_q, n_k)
    if block == (1, 1):
        return attention_heatmap(pattern, q_tokens, k_tokens, title=title, height=height)
    if pattern.shape == (n_q, n_k):
        pattern = pool(pattern, block, "max")  # [q/bq k/bk]
    expected = (-(-n_q // block[0]), -(-n_k // block[1]))
    if pattern.shape != expected:
        raise ValueError(f"a pooled {n_q}x{n_k} pattern is {expected[0]}x{expected[1]} cells, got {pattern.shape}")
    fig = overview_heatmap(pattern, n_q, n_k, block, title=title, height=height or 420, how="max")
    if narrow:
        fig.update_traces(showscale=False)
    return fig


def pooled_note(n_q: int, n_k: int) -> Optional[str]:
    """What a page says under a pooled pattern (None when every cell is drawn)."""
    bq, bk = pattern_blocks(n_q, n_k)
    if (bq, bk) == (1, 1):
        return None
    return (f"{n_q:,} × {n_k:,} weights are more than a figure can send and label cell by cell: each cell is the "
            f"largest weight of a block of {bq} × {bk} tokens (axes in token positions; hover for the block). The "
            "Attention page reads one head token by token in a window you move.")
