"""The recall models on the Retrieval page: where a head's output lives (V = K), and a key hijack.

Two measurements on trained `recall` models (see core.tasks.RecallTask):

- `key_span_residuals`: for each head, how far its output z (the weighted sum of values) lies
  outside the span of the keys that query could see. With tied values (V = K) z is a mix of
  keys, so the residual is rounding error; with a separate W_V it is not.
- `hijack`: scale one position's raw keys by alpha in every layer and head (a per-call hook on
  `hook_k_raw`, which comes before any key-norm clip, so a clipping defence is tested rather than
  bypassed) and measure accuracy and the attention the answer position pays to that key.

Nothing here changes a model: interventions are hooks passed with one call.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from core.model import Transformer
from core.tasks import IGNORE, Batch, get_task

TASK = "recall"
RAW_KEYS = "blocks.*.attn.hook_k_raw"


def recall_batch(n: int, seed: int, length: int) -> Batch:
    """n recall examples of `length` pairs (deterministic per seed)."""
    return get_task(TASK).batch(n, "decoder", seed=seed, length=length)


def answer_position(batch: Batch) -> int:
    """The one scored position (the query letter), the same in every row of a recall batch."""
    scored = (batch.targets != IGNORE).nonzero()  # [n_scored 2] (row, position)
    positions = scored[:, 1].unique()
    if positions.numel() != 1:
        raise ValueError("a recall batch has exactly one scored position per row, at the same place")
    return int(positions[0])


# ---------------------------------------------------------------------------------------------
# Values tied to keys: is a head's output inside the span of its keys?


def span_residual(vectors: np.ndarray, basis_rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(|P v|, |v - P v|) for each row v of `vectors` [n d], P the projection onto the span of `basis_rows` [m d]."""
    vectors = np.asarray(vectors, dtype=np.float64)
    basis = np.asarray(basis_rows, dtype=np.float64).T  # [d m]
    coef, *_ = np.linalg.lstsq(basis, vectors.T, rcond=None)  # [m n]
    inside = (basis @ coef).T  # [n d]
    return np.linalg.norm(inside, axis=-1), np.linalg.norm(vectors - inside, axis=-1)


@dataclass(frozen=True)
class SpanReport:
    """Each head's outputs at the answer position against the span of the keys it could see."""

    inside: np.ndarray  # [layer head example] |P z|
    outside: np.ndarray  # [layer head example] |z - P z|

    @property
    def relative(self) -> np.ndarray:
        """|z - P z| / |z| `[layer head example]` (0 where z is 0)."""
        total = np.sqrt(self.inside**2 + self.outside**2)
        return np.where(total > 0, self.outside / np.where(total > 0, total, 1.0), 0.0)

    def worst(self) -> np.ndarray:
        """The largest relative residual of each head `[layer head]`."""
        return self.relative.max(axis=-1)


def key_span_residuals(model: Transformer, n: int = 64, seed: int = 11, length: int = 5) -> SpanReport:
    """Project every head's output z at the answer position onto the span of the keys at positions
    0..answer (the keys its causal query could attend to), for n examples."""
    batch = recall_batch(n, seed, length)
    pos = answer_position(batch)
    _, cache = model.run_with_cache(batch.tokens.to(model.device), names=["*attn.hook_k", "*attn.hook_z"])
    layers, heads = model.cfg.n_layers, model.cfg.n_heads
    inside = np.zeros((layers, heads, n))
    outside = np.zeros((layers, heads, n))
    for layer in range(layers):
        keys = cache[f"blocks.{layer}.attn.hook_k"].double().cpu().numpy()  # [batch pos head d_head]
        z = cache[f"blocks.{layer}.attn.hook_z"].double().cpu().numpy()  # [batch pos head d_head]
        for head in range(heads):
            for i in range(n):
                a, b = span_residual(z[i, pos, head][None, :], keys[i, : pos + 1, head])
                inside[layer, head, i], outside[layer, head, i] = a[0], b[0]
    return SpanReport(inside=inside, outside=outside)


# ---------------------------------------------------------------------------------------------
# Hijacking by a large-norm key


def scale_position(position: int, alpha: float):
    """A hook function that multiplies the keys at `position` by alpha (every head), leaving the rest.

    It returns a new tensor and never writes into the one it is given.
    """

    def scale(keys: torch.Tensor, hook) -> torch.Tensor:  # keys [batch pos head d_head]
        factor = torch.ones(keys.shape[1], dtype=keys.dtype, device=keys.device)  # [pos]
        factor[position] = alpha
        return keys * factor[None, :, None, None]  # [batch pos head d_head]

    return scale


@dataclass(frozen=True)
class HijackPoint:
    """The attack at one alpha."""

    alpha: float
    accuracy: float  # on the batch, at the answer position
    mass: float  # mean attention (last layer, every head) from the answer position to the scaled key
    mass_all_queries: float  # the same averaged over every query position that can see the key


def hijack_run(model: Transformer, batch: Batch, position: int, alpha: float) -> tuple[HijackPoint, np.ndarray]:
    """Run the batch with one position's raw keys scaled by alpha; the result and the last layer's
    pattern of the first example, averaged over heads `[q k]`."""
    task = get_task(TASK)
    pos = answer_position(batch)
    last = model.cfg.n_layers - 1
    name = f"blocks.{last}.attn.hook_pattern"
    logits, cache = model.run_with_cache(batch.tokens.to(model.device), names=[name],
                                         fwd=[(RAW_KEYS, scale_position(position, alpha))])
    pattern = cache[name].double().cpu()  # [batch head q k]
    to_key = pattern[:, :, :, position]  # [batch head q]
    point = HijackPoint(
        alpha=float(alpha), accuracy=task.accuracy(logits.cpu(), batch),
        mass=float(to_key[:, :, pos].mean()), mass_all_queries=float(to_key[:, :, position:].mean()),
    )
    return point, pattern[0].mean(dim=0).numpy()  # [q k]


def hijack_curve(model: Transformer, position: int, alphas, n: int = 256, seed: int = 5,
                 length: int = 5) -> list[HijackPoint]:
    """The attack at every alpha on the same n examples."""
    batch = recall_batch(n, seed, length)
    if not 0 <= position < answer_position(batch):
        raise ValueError(f"position must be in 0..{answer_position(batch) - 1} (before the query), got {position}")
    return [hijack_run(model, batch, position, float(a))[0] for a in alphas]


def key_norms_under_attack(model: Transformer, position: int, alpha: float, n: int = 32, seed: int = 5,
                           length: int = 5) -> np.ndarray:
    """The norms of every key the attention uses (after any clip) while the attack runs `[layer batch pos head]`."""
    batch = recall_batch(n, seed, length)
    _, cache = model.run_with_cache(batch.tokens.to(model.device), names="*attn.hook_k",
                                    fwd=[(RAW_KEYS, scale_position(position, alpha))])
    return np.stack([cache[f"blocks.{i}.attn.hook_k"].norm(dim=-1).cpu().numpy()
                     for i in range(model.cfg.n_layers)])
