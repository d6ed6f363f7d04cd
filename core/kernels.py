"""Attention without the n x n matrix, and the recurrent layer it replaced, in plain torch.

`chunked_attention` is the FlashAttention idea written for reading, not for speed: walk over the
keys one block at a time, keep for every query only a running maximum, a running sum of
exponentials and a running weighted sum of values, and rescale them whenever a new block raises
the maximum (the online softmax). No query ever holds more than one block of scores, so memory
grows like n instead of n^2. Its backward pass recomputes each block's probabilities from the
saved log-sum-exp instead of keeping them, so training stays linear in n too.

`explicit_attention` is the textbook reference that builds the whole [batch head q k] matrix, and
`rnn_layer` a plain tanh recurrence run one position after another: the sequential baseline the
Cost page measures attention against.
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple, Optional

import torch


# ---------------------------------------------------------------------------------------------
# Checking the arguments
# ---------------------------------------------------------------------------------------------


def _check_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    """q [batch head q d_head], k [batch head k d_head], v [batch head k d_v], all on one device and dtype."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or t.dim() != 4:
            raise ValueError(f"{name} must be a 4-d tensor [batch head pos d_head], got "
                             f"{getattr(t, 'shape', type(t).__name__)}")
        if not t.is_floating_point():
            raise ValueError(f"{name} must be a floating-point tensor, got {t.dtype}")
    if q.shape[:2] != k.shape[:2] or k.shape[:3] != v.shape[:3] or q.shape[-1] != k.shape[-1]:
        raise ValueError(f"shapes do not fit together: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
    if len({q.dtype, k.dtype, v.dtype}) > 1 or len({q.device, k.device, v.device}) > 1:
        raise ValueError("q, k and v must share one dtype and one device")


def _check_mask(mask: Optional[torch.Tensor], q: torch.Tensor, k: torch.Tensor) -> Optional[torch.Tensor]:
    """The mask as a bool tensor that broadcasts to [batch head q k] (True = may attend), or None."""
    if mask is None:
        return None
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        raise ValueError(f"mask must be a bool tensor (True = may attend), got {getattr(mask, 'dtype', type(mask))}")
    target = torch.Size((q.shape[0], q.shape[1], q.shape[2], k.shape[2]))
    try:
        fits = mask.dim() <= 4 and torch.broadcast_shapes(mask.shape, target) == target
    except RuntimeError:
        fits = False
    if not fits:
        raise ValueError(f"mask of shape {tuple(mask.shape)} does not broadcast to [batch head q k] = {tuple(target)}")
    return mask.to(q.device)


def _scale(scale: Optional[float], d_head: int) -> float:
    """The score scale: 1/sqrt(d_head) unless given."""
    if scale is None:
        return 1.0 / math.sqrt(d_head)
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale):
        raise ValueError(f"scale must be a finite number, got {scale!r}")
    return float(scale)


# ---------------------------------------------------------------------------------------------
# The reference: every score at once
# ---------------------------------------------------------------------------------------------


def explicit_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: Optional[torch.Tensor] = None,
                       scale: Optional[float] = None) -> torch.Tensor:
    """softmax(q k^T * scale, masked) v with the whole [batch head q k] matrix in memory.

    The same contract as :func:`chunked_attention` (a query row with no allowed key gives zeros),
    so the two can be compared directly.
    """
    _check_qkv(q, k, v)
    mask = _check_mask(mask, q, k)
    scores = (q @ k.transpose(-2, -1)) * _scale(scale, q.shape[-1])  # [batch head q k]
    if mask is None:
        return torch.softmax(scores, dim=-1) @ v  # [batch head q d_v]
    scores = scores.masked_fill(~mask, float("-inf"))
    pattern = torch.softmax(scores, dim=-1).nan_to_num(0.0).masked_fill(~mask, 0.0)  # [batch head q k]
    return pattern @ v  # [batch head q d_v]


# ---------------------------------------------------------------------------------------------
# Chunked attention: the online softmax
# ---------------------------------------------------------------------------------------------


def _key_blocks(n_keys: int, block_size: int):
    """(start, stop) of each block of keys; the last block may be shorter."""
    return [(start, min(start + block_size, n_keys)) for start in range(0, n_keys, block_size)]


def _block_scores(q, k, mask, scale, start, stop) -> torch.Tensor:
    """Scores of every query against keys start..stop, -inf where the mask forbids: [batch head q block]."""
    scores = (q @ k[:, :, start:stop].transpose(-2, -1)) * scale  # [batch head q block]
    if mask is not None:
        scores = scores.masked_fill(~mask[..., start:stop], float("-inf"))
    return scores


def _online_forward(q, k, v, mask, scale, block_size) -> tuple[torch.Tensor, torch.Tensor]:
    """The output [batch head q d_v] and each row's log-sum-exp [batch head q] (-inf for a row with no key)."""
    batch, heads, n_q, _ = q.shape
    running_max = q.new_full((batch, heads, n_q, 1), float("-inf"))  # [batch head q 1]
    running_sum = q.new_zeros((batch, heads, n_q, 1))  # [batch head q 1]
    acc = q.new_zeros((batch, heads, n_q, v.shape[-1]))  # [batch head q d_v]
    for start, stop in _key_blocks(k.shape[2], block_size):
        scores = _block_scores(q, k, mask, scale, start, stop)  # [batch head q block]
        new_max = torch.maximum(running_max, scores.amax(dim=-1, keepdim=True))  # [batch head q 1]
        shift = torch.where(torch.isfinite(new_max), new_max, torch.zeros_like(new_max))  # no -inf - -inf
        weights = torch.exp(scores - shift)  # [batch head q block], 0 where forbidden
        rescale = torch.exp(running_max - shift)  # shrinks what was summed under the old maximum
        running_sum = running_sum * rescale + weights.sum(dim=-1, keepdim=True)
        acc = acc * rescale + weights @ v[:, :, start:stop]  # [batch head q d_v]
        running_max = new_max
    seen = running_sum > 0  # [batch head q 1]: False for a row with no allowed key
    out = torch.where(seen, acc / torch.where(seen, running_sum, torch.ones_like(running_sum)), torch.zeros_like(acc))
    lse = torch.where(seen, running_max + torch.log(torch.where(seen, running_sum, torch.ones_like(running_sum))),
                      torch.full_like(running_sum, float("-inf")))
    return out, lse.squeeze(-1)  # [batch head q d_v], [batch head q]


def _online_backward(q, k, v, mask, scale, block_size, out, lse, grad_out):
    """Gradients of q, k, v, recomputing each block's probabilities from the saved log-sum-exp
    (FlashAttention's backward): nothing of size q x k is ever kept."""
    grad_q, grad_k, grad_v = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    finite_lse = torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse)).unsqueeze(-1)  # [batch head q 1]
    row_dot = (grad_out * out).sum(dim=-1, keepdim=True)  # [batch head q 1]: sum_j p_ij dP_ij
    for start, stop in _key_blocks(k.shape[2], block_size):
        scores = _block_scores(q, k, mask, scale, start, stop)  # [batch head q block]
        probs = torch.exp(scores - finite_lse)  # [batch head q block]; 0 where forbidden or the row is empty
        probs = torch.where(torch.isfinite(lse).unsqueeze(-1), probs, torch.zeros_like(probs))
        grad_v[:, :, start:stop] += probs.transpose(-2, -1) @ grad_out  # [batch head block d_v]
        grad_probs = grad_out @ v[:, :, start:stop].transpose(-2, -1)  # [batch head q block]
        grad_scores = probs * (grad_probs - row_dot) * scale  # [batch head q block]
        grad_q += grad_scores @ k[:, :, start:stop]  # [batch head q d_head]
        grad_k[:, :, start:stop] += grad_scores.transpose(-2, -1) @ q  # [batch head block d_head]
    return grad_q, grad_k, grad_v


class _ChunkedAttention(torch.autograd.Function):
    """Online-softmax attention whose backward recomputes, so training keeps no q x k tensor."""

    @staticmethod
    def forward(ctx, q, k, v, mask, scale, block_size):
        out, lse = _online_forward(q, k, v, mask, scale, block_size)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.mask, ctx.scale, ctx.block_size = mask, scale, block_size
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, out, lse = ctx.saved_tensors
        grads = _online_backward(q, k, v, ctx.mask, ctx.scale, ctx.block_size, out, lse, grad_out)
        return (*grads, None, None, None)


def chunked_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: Optional[torch.Tensor] = None,
                      block_size: int = 64, scale: Optional[float] = None) -> torch.Tensor:
    """Exact attention computed one block of ``block_size`` keys at a time (online softmax).

    q, k, v: [batch head pos d_head]; mask: bool, broadcastable to [batch head q k], True = may
    attend; scale defaults to 1/sqrt(d_head). A query row with no allowed key gives zeros. Equal
    to :func:`explicit_attention` up to rounding, finite for any finite scores however large, and
    its memory (forward and backward) grows linearly in the number of queries and keys.
    """
    _check_qkv(q, k, v)
    mask = _check_mask(mask, q, k)
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise ValueError(f"block_size must be a whole number >= 1, got {block_size!r}")
    return _ChunkedAttention.apply(q, k, v, mask, _scale(scale, q.shape[-1]), block_size)


# ---------------------------------------------------------------------------------------------
# The recurrent baseline
# ---------------------------------------------------------------------------------------------


class RecurrentWeights(NamedTuple):
    """A tanh RNN cell of width d: h_t = tanh(x_t W_x + h_{t-1} W_h + b)."""

    w_x: torch.Tensor  # [d_model d_model]
    w_h: torch.Tensor  # [d_model d_model]
    bias: torch.Tensor  # [d_model]


def recurrent_weights(d_model: int, generator: torch.Generator, device: torch.device | str = "cpu",
                      dtype: torch.dtype = torch.float32) -> RecurrentWeights:
    """Random weights scaled by 1/sqrt(d) (the state neither explodes nor dies), from a local generator."""
    if isinstance(d_model, bool) or not isinstance(d_model, int) or d_model < 1:
        raise ValueError(f"d_model must be a whole number >= 1, got {d_model!r}")
    std = 1.0 / math.sqrt(d_model)
    w_x = torch.randn(d_model, d_model, generator=generator, dtype=dtype) * std
    w_h = torch.randn(d_model, d_model, generator=generator, dtype=dtype) * std
    return RecurrentWeights(w_x.to(device), w_h.to(device), torch.zeros(d_model, dtype=dtype, device=device))


def rnn_cell(x_t: torch.Tensor, h: torch.Tensor, weights: RecurrentWeights) -> torch.Tensor:
    """One step: the new state [batch d_model] from this position's input and the previous state."""
    return torch.tanh(x_t @ weights.w_x + h @ weights.w_h + weights.bias)


def rnn_layer(x: torch.Tensor, weights: RecurrentWeights,
              on_step: Optional[Callable[[int], None]] = None) -> torch.Tensor:
    """Run the cell over x [batch pos d_model] one position after another: [batch pos d_model].

    Position t cannot start before position t-1 has finished, so a layer is n sequential steps,
    and what position 0 says reaches position t through t applications of the cell. ``on_step(t)``
    is called once per step (tests count them).
    """
    if not isinstance(x, torch.Tensor) or x.dim() != 3 or x.shape[-1] != weights.w_h.shape[0]:
        raise ValueError(f"x must be [batch pos d_model={weights.w_h.shape[0]}], got {getattr(x, 'shape', x)}")
    h = x.new_zeros((x.shape[0], x.shape[2]))  # [batch d_model]
    states = []
    for t in range(x.shape[1]):
        h = rnn_cell(x[:, t], h, weights)  # [batch d_model]
        states.append(h)
        if on_step is not None:
            on_step(t)
    if not states:
        return x.new_zeros(x.shape)
    return torch.stack(states, dim=1)  # [batch pos d_model]
