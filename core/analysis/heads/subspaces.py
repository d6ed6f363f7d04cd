"""What each head of one layer can read from or write to the residual stream, as subspaces.

W_Q, W_K, W_V (read) and W_O (write) of every head, as `[head d_model d_head]` matrices; the
principal angles and cross-Gram norms between every pair of heads' column spaces; each head's
entropy effective rank; and the budget h_max = floor(d_model / d_v) of heads whose value spaces
can be pairwise orthogonal. Kept apart because it reads weights only: no forward pass, no task.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from core.analysis.attention import AttentionKind
from core.model import Transformer

MATRICES = ("W_Q", "W_K", "W_V", "W_O")


def head_matrices(model: Transformer, kind: AttentionKind, layer: int, which: str) -> torch.Tensor:
    """One layer's per-head matrix as `[head d_model d_head]`, float64; W_O is transposed to that shape.

    The columns of W_V^h span the subspace head h reads values from; the columns of (W_O^h)^T
    span the subspace it writes to.
    """
    if which not in MATRICES:
        raise ValueError(f"which must be one of {list(MATRICES)}, got {which!r}")
    weights = model.head_weights(layer, kind.prefix, kind.module)
    w = weights[which].double()
    return w.transpose(1, 2) if which == "W_O" else w  # [head d_model d_head]


def column_basis(w: torch.Tensor, rtol: float = 1e-9) -> torch.Tensor:
    """An orthonormal basis `[d r]` of the column space of w `[d k]` (r = its numerical rank)."""
    u, s, _ = torch.linalg.svd(w.double(), full_matrices=False)
    if s.numel() == 0 or float(s[0]) == 0.0:
        return u[:, :0]
    rank = int((s > rtol * s[0]).sum())
    return u[:, :rank]


def principal_angles(a: torch.Tensor, b: torch.Tensor) -> np.ndarray:
    """The principal angles (radians, ascending) between the column spaces of a `[d k1]` and b `[d k2]`.

    With orthonormal bases Q1, Q2 the singular values of Q1^T Q2 are the cosines of the angles:
    all 0 means the spaces share those directions, all pi/2 means they are orthogonal.
    """
    if a.shape[0] != b.shape[0]:
        raise ValueError(f"both matrices need the same number of rows (d_model), got {a.shape[0]} and {b.shape[0]}")
    q1, q2 = column_basis(a), column_basis(b)
    if q1.shape[1] == 0 or q2.shape[1] == 0:
        return np.zeros(0)
    cosines = torch.linalg.svdvals(q1.T @ q2).clamp(0.0, 1.0)  # [min(r1, r2)], descending
    return np.sort(torch.arccos(cosines).numpy())


def angle_matrix(w: torch.Tensor, reduce: str = "mean") -> tuple[np.ndarray, list[list[np.ndarray]]]:
    """Principal angles between every pair of heads' subspaces, w `[head d_model d_head]`.

    Returns (matrix `[head head]` in degrees, reduced by "mean" or "min" over the angles of a
    pair, and the full list of angles per pair, in degrees, for hover text).
    """
    if reduce not in ("mean", "min"):
        raise ValueError(f"reduce must be 'mean' or 'min', got {reduce!r}")
    n = w.shape[0]
    out = np.zeros((n, n))
    every: list[list[np.ndarray]] = [[np.zeros(0)] * n for _ in range(n)]
    for i in range(n):
        for j in range(n):
            angles = np.degrees(principal_angles(w[i], w[j]))
            every[i][j] = angles
            out[i, j] = (angles.mean() if reduce == "mean" else angles.min()) if angles.size else 90.0
    return out, every


def cross_gram_norms(w: torch.Tensor, normalise: bool = False) -> np.ndarray:
    """||(W^i)^T W^j||_F for every pair of heads, w `[head d_model d_head]` -> `[head head]`.

    Zero exactly when the two heads' subspaces are orthogonal. normalise=True divides by
    ||W^i||_F ||W^j||_F, so the number no longer depends on the weights' overall size.
    """
    gram = torch.einsum("imk,jml->ijkl", w, w)  # [head head d_head d_head]: (W^i)^T W^j
    norms = gram.flatten(2).norm(dim=-1)  # [head head]
    if normalise:
        size = w.flatten(1).norm(dim=-1)  # [head]
        norms = norms / (size[:, None] * size[None, :]).clamp_min(1e-30)
    return norms.numpy()


def effective_rank(w: torch.Tensor) -> float:
    """Entropy-based effective rank exp(H(p)) with p = sigma / sum(sigma) (Roy and Vetterli, 2007).

    It is 1 when one direction carries everything and k when k singular values are equal, so it
    counts how many of a head's d_head directions it really uses.
    """
    s = torch.linalg.svdvals(w.double())
    total = float(s.sum())
    if total == 0.0:
        return 0.0
    p = s / total
    p = p[p > 0]
    return float(torch.exp(-(p * p.log()).sum()))


def h_max(d_model: int, d_v: int) -> int:
    """How many heads with pairwise orthogonal d_v-dimensional value spaces fit: floor(d_model / d_v)."""
    for name, value in (("d_model", d_model), ("d_v", d_v)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(d_model) // int(d_v)


@dataclass
class SubspaceReport:
    """Everything the subspace panel draws for one layer and one matrix."""

    which: str  # W_Q, W_K, W_V or W_O
    angles: np.ndarray  # [head head] degrees (mean or smallest principal angle)
    all_angles: list  # per pair, every principal angle in degrees
    gram: np.ndarray  # [head head] ||(W^i)^T W^j||_F
    gram_normalised: np.ndarray  # [head head] the same divided by ||W^i|| ||W^j||
    eff_rank: np.ndarray  # [head] entropy effective rank of each head
    joint_rank: int  # numerical rank of all heads' columns side by side
    joint_eff_rank: float  # entropy effective rank of the same
    d_model: int
    d_head: int
    n_heads: int

    @property
    def h_max(self) -> int:
        """floor(d_model / d_head) for this layer."""
        return h_max(self.d_model, self.d_head)


def subspace_report(model: Transformer, kind: AttentionKind, layer: int, which: str = "W_V",
                    reduce: str = "mean") -> SubspaceReport:
    """Principal angles, cross-Gram norms and effective ranks of one layer's heads for one matrix."""
    w = head_matrices(model, kind, layer, which)  # [head d_model d_head]
    angles, every = angle_matrix(w, reduce)
    joint = w.transpose(0, 1).reshape(w.shape[1], -1)  # [d_model head*d_head]
    return SubspaceReport(
        which=which, angles=angles, all_angles=every, gram=cross_gram_norms(w),
        gram_normalised=cross_gram_norms(w, normalise=True),
        eff_rank=np.array([effective_rank(w[h]) for h in range(w.shape[0])]),
        joint_rank=int(column_basis(joint, rtol=1e-6).shape[1]), joint_eff_rank=effective_rank(joint),
        d_model=int(w.shape[1]), d_head=int(w.shape[2]), n_heads=int(w.shape[0]),
    )
