"""The orthogonal-query identity: the part of a query orthogonal to every key changes no score.

q . k_j is unchanged when q gains any vector orthogonal to every k_j, so the scores and the
attention weights stay exactly the same; a random part of the same length, for contrast, moves
them. Plain numpy on one query and its keys (taken from a run).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np


def orthogonal_complement(keys: np.ndarray, rtol: float = 1e-6) -> np.ndarray:
    """An orthonormal basis `[d r]` of the directions orthogonal to every key (rows of keys `[n d]`).

    Empty (r = 0) when the keys span all d dimensions.
    """
    keys = np.asarray(keys, dtype=np.float64)
    d = keys.shape[1]
    if keys.shape[0] == 0:
        return np.eye(d)
    _, s, vt = np.linalg.svd(keys, full_matrices=True)
    rank = int((s > rtol * s[0]).sum()) if s.size and s[0] > 0 else 0
    return vt[rank:].T  # [d d-rank]


def orthogonal_direction(keys: np.ndarray, seed: int = 0) -> Optional[np.ndarray]:
    """A random unit vector orthogonal to every key, or None when no such direction exists."""
    basis = orthogonal_complement(keys)
    if basis.shape[1] == 0:
        return None
    c = np.random.default_rng(seed).standard_normal(basis.shape[1])
    u = basis @ c
    return u / np.linalg.norm(u)


def dot_scores(q: np.ndarray, keys: np.ndarray, scale: float) -> np.ndarray:
    """Attention scores of one query against keys `[n d]`: (keys @ q) * scale."""
    return np.asarray(keys, dtype=np.float64) @ np.asarray(q, dtype=np.float64) * scale


def softmax(x: np.ndarray) -> np.ndarray:
    """A numerically safe softmax of one row."""
    e = np.exp(x - x.max())
    return e / e.sum()


@dataclass
class OrthogonalQuery:
    """A query, the same query plus a part orthogonal to every key, and a same-size random part for contrast."""

    q: np.ndarray  # [d]
    q_orth: np.ndarray  # [d] q + alpha |q| u, u orthogonal to every key
    q_rand: np.ndarray  # [d] q + alpha |q| r, r a random unit vector (not orthogonal)
    scores: np.ndarray  # [n] original scores
    scores_orth: np.ndarray  # [n]
    scores_rand: np.ndarray  # [n]
    free_dims: int  # dimension of the space orthogonal to every key

    @property
    def max_change_orth(self) -> float:
        """The largest score change the orthogonal part causes (0 up to rounding)."""
        return float(np.abs(self.scores_orth - self.scores).max())

    @property
    def max_change_rand(self) -> float:
        """The largest score change a random part of the same length causes."""
        return float(np.abs(self.scores_rand - self.scores).max())


def orthogonal_query(q: np.ndarray, keys: np.ndarray, alpha: float, scale: float,
                     seed: int = 0) -> Optional[OrthogonalQuery]:
    """Add alpha * |q| along a direction orthogonal to every key: the scores stay exactly the same.

    Returns None when the keys fill every dimension (no orthogonal direction left).
    """
    q = np.asarray(q, dtype=np.float64)
    keys = np.asarray(keys, dtype=np.float64)
    u = orthogonal_direction(keys, seed)
    if u is None:
        return None
    r = np.random.default_rng(seed + 1).standard_normal(q.shape[0])
    r /= np.linalg.norm(r)
    size = alpha * max(float(np.linalg.norm(q)), 1e-12)
    q_orth, q_rand = q + size * u, q + size * r
    return OrthogonalQuery(q, q_orth, q_rand, dot_scores(q, keys, scale), dot_scores(q_orth, keys, scale),
                           dot_scores(q_rand, keys, scale), orthogonal_complement(keys).shape[1])
