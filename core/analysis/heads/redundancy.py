"""Do two heads look at the same places, or carry the same information?

Pattern similarity is 1 - the Jensen-Shannon divergence between two heads' attention rows; the
information two heads share is a joint-Gaussian mutual-information estimate between their
outputs (hook_z), next to a noise floor measured on shuffled (independent) samples. Both run on
the repeated-token probe of core.analysis.heads.roles.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from core.analysis.attention import AttentionKind
from core.analysis.heads.roles import probe_inputs
from core.model import Transformer
from core.tasks import Vocab


def pattern_similarity(pats: np.ndarray, causal: bool) -> np.ndarray:
    """1 - Jensen-Shannon divergence (bits) between heads' attention rows, averaged over rows.

    pats `[H batch q k]` (all heads of all layers, flattened) -> `[H H]`, 1 = identical
    patterns, 0 = never looking at the same keys. Rows with one visible key are skipped.
    """
    n_q = pats.shape[2]
    rows = np.arange(1, n_q) if causal else np.arange(n_q)
    p = pats[:, :, rows, :].reshape(pats.shape[0], -1, pats.shape[3]).astype(np.float64)  # [H rows k]
    out = np.ones((p.shape[0], p.shape[0]))
    for i in range(p.shape[0]):
        for j in range(i + 1, p.shape[0]):
            m = 0.5 * (p[i] + p[j])
            js = 0.5 * (_kl_bits(p[i], m) + _kl_bits(p[j], m))  # [rows]
            out[i, j] = out[j, i] = 1.0 - float(np.clip(js, 0, 1).mean())
    return out


def _kl_bits(p: np.ndarray, m: np.ndarray) -> np.ndarray:
    """KL(p || m) in bits per row; 0 log 0 = 0."""
    safe = np.where(p > 0, p / np.where(m > 0, m, 1.0), 1.0)
    return (p * np.log2(safe)).sum(axis=-1)


def _top_components(x: np.ndarray, k: int, rel_floor: float = 1e-6) -> np.ndarray:
    """x `[n d]` centred and projected on its top-k principal axes with non-negligible variance."""
    x = x - x.mean(axis=0)
    _, s, vt = np.linalg.svd(x, full_matrices=False)
    if s.size == 0 or s[0] == 0:
        return x[:, :0]
    keep = min(k, int((s ** 2 > rel_floor * s[0] ** 2).sum()))
    return x @ vt[:keep].T  # [n keep]


def gaussian_mi(x: np.ndarray, y: np.ndarray, k: int = 4) -> float:
    """Mutual information (nats) of x `[n dx]` and y `[n dy]` under a joint-Gaussian fit.

    Each side is reduced to its top-k principal components; with canonical correlations rho_i
    between them, I = -1/2 sum log(1 - rho_i^2). It measures linearly shared information and is
    exact only for Gaussian data; with few samples it reads slightly above 0 for independent data.
    """
    a, b = _top_components(x, k), _top_components(y, k)
    if a.shape[1] == 0 or b.shape[1] == 0:
        return 0.0
    wa = _whiten(a)
    wb = _whiten(b)
    rho = np.clip(np.linalg.svd(wa.T @ wb / a.shape[0], compute_uv=False), 0.0, 1 - 1e-9)
    return float(-0.5 * np.log1p(-rho ** 2).sum())


def _whiten(x: np.ndarray) -> np.ndarray:
    """x `[n d]` (centred) times the inverse square root of its covariance."""
    cov = x.T @ x / x.shape[0]
    vals, vecs = np.linalg.eigh(cov)
    vals = np.maximum(vals, 1e-12 * vals.max())
    return x @ vecs @ np.diag(vals ** -0.5) @ vecs.T


@dataclass
class Redundancy:
    """How alike every pair of heads (of one kind, all layers) is."""

    labels: list[str]  # "L0 H1", ...
    similarity: np.ndarray  # [H H] 1 - JS divergence of patterns
    mi: np.ndarray  # [H H] Gaussian MI estimate between head outputs, nats
    noise: float  # the largest MI estimate after shuffling one head's samples (independent by construction)
    n_samples: int


def redundancy(model: Transformer, kind: AttentionKind, vocab: Vocab, n: int = 32, seed: int = 0,
               k: int = 4, src_vocab: Optional[Vocab] = None, probe: Optional[tuple] = None,
               layers: Optional[Sequence[int]] = None) -> Redundancy:
    """Pattern similarity and output MI for every pair of heads, on the repeated-token probe (or `probe`, a
    (tokens, tgt, query-side tokens) triple as `probe_inputs` returns); the heads of `layers` only if given."""
    tokens, tgt, side = probe if probe is not None else probe_inputs(model, vocab, kind, n, seed, src_vocab)
    n_h = model.cfg.n_heads
    layers = list(range(model.cfg.n_layers)) if layers is None else [int(i) for i in layers]
    names = [kind.hook(i, w) for i in layers for w in ("hook_pattern", "hook_z")]
    kwargs = {"tgt": tgt} if tgt is not None else {}
    _, cache = model.run_with_cache(tokens.to(model.device), names, **kwargs)
    pats, outs = [], []
    for i in layers:
        p = cache[kind.hook(i, "hook_pattern")].float().cpu().numpy()  # [batch head q k]
        z = cache[kind.hook(i, "hook_z")].float().cpu().numpy()  # [batch pos head d_head]
        for h in range(n_h):
            pats.append(p[:, h])
            outs.append(z[:, :, h].reshape(-1, z.shape[-1]))  # [batch*pos d_head]
    sim = pattern_similarity(np.stack(pats), kind.causal)  # [H H]
    total = len(outs)
    mi = np.zeros((total, total))
    rng = np.random.default_rng(seed)
    noise = 0.0
    for i in range(total):
        mi[i, i] = np.nan
        for j in range(i + 1, total):
            mi[i, j] = mi[j, i] = gaussian_mi(outs[i], outs[j], k)
            noise = max(noise, gaussian_mi(outs[i], outs[j][rng.permutation(len(outs[j]))], k))
    labels = [f"L{i} H{h}" for i in layers for h in range(n_h)]
    return Redundancy(labels, sim, mi, noise, int(outs[0].shape[0]) if outs else 0)
