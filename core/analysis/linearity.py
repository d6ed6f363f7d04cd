"""Attention's output is linear in the values and not in the queries or keys (issue 39).

out(q) = softmax(scale * K q) V: V enters once, outside the softmax, so out(q, K, c V) = c out(q, K, V) for any
c. Q and K enter inside the softmax: scaling either sharpens or flattens the pattern, and the output moves
between the values' mean and the best key's value instead of growing with c. The one exception is a uniform
pattern (every score equal, e.g. q = 0): no factor changes it, so the output does not move at all.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

SCALED = ("values", "queries", "keys")  # what a factor can multiply
FACTORS = np.logspace(-1, 1, 41)  # 0.1 .. 10, the curves' x axis


def attention_output(q: np.ndarray, keys: np.ndarray, values: np.ndarray, scale: float = 1.0) -> np.ndarray:
    """softmax(scale * keys q) values for one query q [d], keys [n d], values [n d_v]: [d_v]."""
    scores = scale * (keys @ q)  # [n]
    weights = np.exp(scores - scores.max())
    return (weights / weights.sum()) @ values  # [d_v]


def scaled_output(q: np.ndarray, keys: np.ndarray, values: np.ndarray, which: str, factor: float,
                  scale: float = 1.0) -> np.ndarray:
    """The output with one of values, queries or keys multiplied by `factor`."""
    if which not in SCALED:
        raise ValueError(f"which must be one of {', '.join(SCALED)}, got {which!r}")
    c = float(factor)
    if which == "values":
        return attention_output(q, keys, c * values, scale)
    if which == "queries":
        return attention_output(c * q, keys, values, scale)
    return attention_output(q, c * keys, values, scale)


@dataclass(frozen=True)
class ScaleCurves:
    """‖out with X scaled by c‖ / ‖out‖ for every factor c and every X in SCALED."""

    factors: np.ndarray  # [f]
    ratio: dict  # which -> [f]
    uniform: bool  # the pattern is uniform (every score equal): Q and K change nothing


def output_scale(q: np.ndarray, keys: np.ndarray, values: np.ndarray, factors: Sequence[float] = FACTORS,
                 scale: float = 1.0) -> ScaleCurves:
    """The output's norm, relative to the unscaled output's, as values, queries or keys are scaled."""
    base = float(np.linalg.norm(attention_output(q, keys, values, scale)))
    if not base > 0:
        raise ValueError("the unscaled output is zero: pick values whose weighted mean is not zero")
    f = np.asarray(factors, dtype=np.float64)
    ratio = {which: np.array([np.linalg.norm(scaled_output(q, keys, values, which, c, scale)) / base for c in f])
             for which in SCALED}
    scores = keys @ q  # [n]
    return ScaleCurves(f, ratio, bool(np.ptp(scores) <= 1e-12 * max(1.0, float(np.abs(scores).max()))))


def example(seed: int = 0, n: int = 6, d: int = 4, d_v: int = 3, uniform: bool = False) -> tuple:
    """(q [d], keys [n d], values [n d_v]) drawn from a local generator; values are shifted so their mean is
    not zero. `uniform`: q = 0, so every score is equal and the pattern is flat."""
    rng = np.random.default_rng(seed)
    keys = rng.normal(size=(n, d))  # [n d]
    values = rng.normal(size=(n, d_v)) + 1.0  # [n d_v]
    q = np.zeros(d) if uniform else 1.5 * rng.normal(size=d)  # [d]
    return q, keys, values
