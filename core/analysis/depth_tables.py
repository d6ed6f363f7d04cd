"""The Depth page's statistics and tables: what its text, tables and captions say about the runs.

core.analysis.depth measures (streams, gradients, random stacks, twins, paths); this module turns
those measurements into the numbers the page prints: where the logit lens first finds the answer,
each random stack's row of the stacks table and the summary under it, the twins' table and curves,
the checks on the hyper-connections' mixing matrices, and where random heads beat the hop formula.
Pure numpy (and pandas for one count), so each number is unit-tested without a browser.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

import numpy as np
import pandas as pd

from core.analysis import depth as A

# ---------------------------------------------------------------------------------------------
# Numbers as the page writes them


def number_text(x: Optional[float]) -> str:
    """A measured number in three significant digits, or "overflow" when it is missing or not finite."""
    if x is None or not np.isfinite(x):
        return "overflow"
    return f"{x:.3g}"


# ---------------------------------------------------------------------------------------------
# 1. The logit lens


def first_right_counts(top: np.ndarray, targets: Sequence[int], scored: Sequence[int],
                       labels: Sequence[str]) -> list[tuple[str, int]]:
    """For each scored position, the first state (label) whose top prediction `top` [stage pos] is the
    right answer; returned as (label, count of positions), most frequent first. Positions the lens
    never gets right are left out."""
    first = [next((labels[s] for s in range(len(labels)) if top[s, p] == targets[p]), None) for p in scored]
    found = [f for f in first if f is not None]
    if not found:
        return []
    counts = pd.Series(found).value_counts()
    return [(str(label), int(c)) for label, c in counts.items()]


# ---------------------------------------------------------------------------------------------
# 3. The random stacks


def band(resid_grad: np.ndarray) -> float:
    """max / min of a stack's gradient curve relative to the top (inf when it overflowed or reached 0)."""
    rel = A.relative(resid_grad)
    return float(rel.max() / rel.min()) if np.isfinite(rel).all() and rel.min() > 0 else float("inf")


def stack_rows(profiles: Mapping[str, A.DepthProfile]) -> list[dict]:
    """One row per random stack (in the order given): its bottom-to-top gradient ratio, band, per-layer
    factor and zigzag (spread of the per-layer log step), written as the page shows them."""
    rows = []
    for variant, p in profiles.items():
        rel = A.relative(p.resid_grad)
        steps = A.log_steps(p.resid_grad)
        rows.append({
            "stack": variant, "what it is": A.VARIANTS[variant]["blurb"],
            "‖g_0‖ / ‖g_L‖": number_text(rel[0]),
            "band max/min": number_text(band(p.resid_grad)),
            "per-layer factor": number_text(A.per_layer_factor(p.resid_grad)),
            "zigzag (std of log step)": number_text(float(np.std(steps))) if np.isfinite(steps).all() else "overflow",
        })
    return rows


@dataclass(frozen=True)
class StackSummary:
    """The numbers the text under the stacks table quotes (ratios are relative to the top)."""

    plain_bottom: float  # no residual: g_0 / g_L
    plain_factor: Optional[float]  # no residual: per-layer factor
    plain_finite: bool  # no residual: every value finite (False: the forward pass overflowed)
    pre_band: float  # pre-LN: max / min over layers (NaNs ignored)
    pre_above_floor: bool  # pre-LN: at or above (1 - rho)^(L - l) at every layer
    zig_pre: float  # spread of the per-layer log step, pre-LN
    zig_post: float  # the same for post-LN
    zig_ratio: float  # zig_post / zig_pre
    post_factor: Optional[float]  # post-LN: per-layer factor
    nonorm_bottom: float  # no norm: g_0 / g_L
    sinkhorn_band: float
    free_band: float


def stack_summary(profiles: Mapping[str, A.DepthProfile], lower: np.ndarray) -> StackSummary:
    """The summary of the stacks `profiles` (every variant of A.VARIANTS), against the floor `lower`
    [n_layers + 1] of A.bounds."""
    pre, post, plain, nonorm = (profiles[v] for v in ("pre-LN", "post-LN", "no residual", "no norm"))
    rel_pre, rel_plain, rel_nonorm = (A.relative(p.resid_grad) for p in (pre, plain, nonorm))
    zig_pre, zig_post = np.std(A.log_steps(pre.resid_grad)), np.std(A.log_steps(post.resid_grad))
    with np.errstate(divide="ignore", invalid="ignore"):
        pre_band, zig_ratio = np.nanmax(rel_pre) / np.nanmin(rel_pre), zig_post / zig_pre
    return StackSummary(
        plain_bottom=rel_plain[0], plain_factor=A.per_layer_factor(plain.resid_grad),
        plain_finite=bool(np.isfinite(rel_plain).all()), pre_band=pre_band,
        pre_above_floor=bool(np.all(rel_pre >= lower - 1e-12)), zig_pre=zig_pre, zig_post=zig_post,
        zig_ratio=zig_ratio, post_factor=A.per_layer_factor(post.resid_grad), nonorm_bottom=rel_nonorm[0],
        sinkhorn_band=band(profiles["hyper (Sinkhorn)"].resid_grad),
        free_band=band(profiles["hyper (free mixing)"].resid_grad),
    )


def mixing_checks(mats: np.ndarray, sublayer: int) -> dict[str, float]:
    """How doubly stochastic the mixing matrices `mats` [2L n n] are: the largest row- and column-sum
    error and the largest singular value of sublayer `sublayer`'s, and the sum errors of their product
    H_last ... H_0 (as the stack applies them), with `count` the number multiplied."""
    m = mats[sublayer]
    # H_last ... H_0 (np.linalg.multi_dot would spend ~80 ms choosing an order for up to 96 equal squares)
    prod = functools.reduce(np.matmul, mats[::-1])
    return {"row": float(np.abs(m.sum(1) - 1).max()), "column": float(np.abs(m.sum(0) - 1).max()),
            "sigma": float(np.linalg.norm(m, 2)), "count": len(mats),
            "product_row": float(np.abs(prod.sum(1) - 1).max()),
            "product_column": float(np.abs(prod.sum(0) - 1).max())}


# ---------------------------------------------------------------------------------------------
# 3b. The bundled twins


TWIN_NORMS = ("pre-LN", "post-LN")
TWIN_STATES = ("trained", "untrained")


def twin_curves(data: Mapping[str, Mapping]) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The twins' curves by "<norm> <state>": the stream's size and the loss gradient relative to the top."""
    norms, grads = {}, {}
    for label in TWIN_NORMS:
        for when in TWIN_STATES:
            norms[f"{label} {when}"] = data[label][when].resid_norm
            grads[f"{label} {when}"] = A.relative(data[label][when].resid_grad)
    return norms, grads


def twin_rows(data: Mapping[str, Mapping]) -> list[dict]:
    """One row per twin: accuracy, losses trained and untrained, the stream's growth and the gradient
    reaching the embedding (relative to the top), written as the page shows them."""
    rows = []
    for label in TWIN_NORMS:
        d = data[label]
        rows.append({"model": d["id"], "norm": label, "accuracy": d["accuracy"],
                     "loss (trained)": float(f"{d['trained'].loss:.2g}"),
                     "loss (untrained)": float(f"{d['untrained'].loss:.3g}"),
                     "‖x‖ top/embed": number_text(d["trained"].resid_norm[-1] / d["trained"].resid_norm[0]),
                     "g_embed/g_top": number_text(A.relative(d["trained"].resid_grad)[0]),
                     "g_embed/g_top untrained": number_text(A.relative(d["untrained"].resid_grad)[0])})
    return rows


# ---------------------------------------------------------------------------------------------
# 4. Long-range paths


def random_beats_formula_from(curves: Mapping[str, np.ndarray]) -> Optional[int]:
    """The smallest n from which random sharp heads need fewer layers than ln n / ln(H + 1) at every
    larger n of the curves (None if they never settle below it)."""
    below = np.asarray(curves["random"]) < np.asarray(curves["formula"])  # [n]
    for i in range(len(below)):
        if below[i:].all():
            return int(curves["ns"][i])
    return None
