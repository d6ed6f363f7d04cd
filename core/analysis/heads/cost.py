"""What splitting one attention layer into h heads costs (issue 39): the parameters and the matrix FLOPs stay those
of one wide head, while the attention patterns, h of n x n, grow with h. Counted for any width and length, and
measured: the peak memory of one training step of explicit attention (core.analysis.cost's tracker).
"""

from __future__ import annotations

import torch

from core.analysis import cost as C
from core.device import one_thread

MAX_HEADS = 8
FLOAT32_BYTES = 4


def head_counts(d_model: int, max_heads: int = MAX_HEADS) -> list[int]:
    """The head counts 1 .. max_heads that split d_model evenly (each head gets d_model / h dimensions)."""
    return [h for h in range(1, max_heads + 1) if d_model % h == 0]


def counted_row(d_model: int, n_heads: int, n: int) -> dict:
    """One layer's costs at n tokens with h heads of d_model / h: W_Q, W_K, W_V, W_O (4 d^2, whatever h), the
    FLOPs of its products (8 n d^2 for the projections, 4 n^2 d for scores and weighted sums, whatever h), and
    the patterns training keeps (h n^2 float32 numbers)."""
    return {"heads": n_heads, "d_head": d_model // n_heads, "parameters": 4 * d_model * d_model,
            "MFLOP": (8.0 * n * d_model * d_model + 4.0 * n * n * d_model) / 1e6,
            "patterns MiB (counted)": n_heads * n * n * FLOAT32_BYTES / 2 ** 20}


def measured_peak(d_model: int, n_heads: int, n: int, seed: int = 0) -> int:
    """Peak bytes of one training step (forward + backward) of explicit attention with h heads of d_model / h
    at n tokens, measured as the Cost page measures it (core.analysis.cost.peak_bytes, CPU)."""
    s = C.Setting(ns=(n,), d_model=d_model, n_heads=n_heads, seed=seed).check()
    with one_thread():
        return C.peak_bytes(C._training_step(C.EXPLICIT, s, n, torch.Generator().manual_seed(seed)))


def measured_peaks(d_model: int, n: int) -> tuple[int, ...]:
    """measured_peak for every head count of head_counts(d_model), in that order: the part of the rows that
    costs seconds and does not depend on the input's length."""
    return tuple(measured_peak(d_model, h, n) for h in head_counts(d_model))


def head_cost_rows(d_model: int, n_counted: int, n_measured: int,
                   peaks: tuple[int, ...] | None = None) -> list[dict]:
    """Per head count: counted at the input's length `n_counted`, and the peak measured at `n_measured`
    (`peaks`: measured_peaks(d_model, n_measured) already at hand, so a new input length measures nothing)."""
    if peaks is None:
        peaks = measured_peaks(d_model, n_measured)
    counts = head_counts(d_model)
    if len(peaks) != len(counts):
        raise ValueError(f"{len(peaks)} measured peaks for {len(counts)} head counts of d_model = {d_model}")
    return [{**counted_row(d_model, h, n_counted),
             "patterns MiB at the measured n (counted)": counted_row(d_model, h, n_measured)["patterns MiB (counted)"],
             "peak MiB at the measured n (measured)": peak / 2 ** 20}
            for h, peak in zip(counts, peaks)]
