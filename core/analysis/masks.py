"""What a mask does to a real computation: the right and wrong way to apply it, how much
probability leaks through a finite mask constant, what sparsity buys in measured time, and
how a model's predictions and accuracy change under a mask a student drew.

In reading order:

1. Right vs wrong masking (add a large negative constant before softmax, or zero after it).
2. Leak: the probability mass a finite constant lets through, in float32 and float16.
3. Cost: dense vs block-sparse attention, timed on this machine.
4. A model under a mask: masked runs, task accuracy, and measured influence (gradients).
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Mapping, Sequence
from typing import Optional, Union

import numpy as np
import torch

from core import masks as M
from core.analysis import tensor_from
from core.device import one_thread
from core.tasks import IGNORE, Task, get_task

MASK_CONSTANTS: dict[str, float] = {"-1e4": -1e4, "-1e9": -1e9, "-inf": float("-inf")}
DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "float16": torch.float16}



def _whole(name: str, value: object, low: int, high: int) -> int:
    """``value`` as an int in [low, high], else a ValueError naming the argument."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not low <= value <= high:
        raise ValueError(f"{name} must be a whole number from {low} to {high}, got {value!r}")
    return int(value)


# ---------------------------------------------------------------------------------------------
# 1. Right vs wrong masking
# ---------------------------------------------------------------------------------------------


def constant_in_dtype(constant: float, dtype: torch.dtype) -> float:
    """The value a mask constant actually becomes when stored in ``dtype`` (-1e9 is -inf in float16)."""
    return float(torch.tensor(float(constant), dtype=torch.float64).to(dtype))


def softmax_add_constant(scores: torch.Tensor, mask: torch.Tensor, constant: float = float("-inf"),
                         dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The right way: add ``constant`` to every forbidden logit, THEN softmax, all in ``dtype``.

    No clean-up afterwards, so what a finite constant lets through (and the NaN of a row
    whose every key is -inf) stays visible. ``scores`` and ``mask`` share the shape ``[.., q, k]``.
    """
    s = scores.to(dtype)
    c = torch.tensor(float(constant), dtype=torch.float64).to(dtype)  # overflow to -inf, as hardware does
    bias = torch.where(mask.to(s.device), torch.zeros((), dtype=dtype), c)  # [.. q k]
    return torch.softmax(s + bias, dim=-1)


def softmax_zero_after(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The wrong way: softmax over ALL keys, then zero the forbidden weights.

    The forbidden keys still took their share of the normaliser, so the rows no longer sum to 1.
    """
    return torch.softmax(scores.float(), dim=-1) * mask.to(scores.device)  # [.. q k]


def compare_masking(scores: np.ndarray, mask: np.ndarray, constant: float = float("-inf")) -> dict[str, np.ndarray]:
    """Both ways on one head's scores ``[q, k]``: the patterns and their row sums.

    The right pattern here follows the model's convention for a fully masked row (zeros,
    never NaN), so the sums are 1 for every row that may attend to something and 0 otherwise.
    """
    s, m = tensor_from(scores, dtype=torch.float32), tensor_from(mask, dtype=torch.bool)
    right = torch.nan_to_num(softmax_add_constant(s, m, constant), nan=0.0).masked_fill(~m, 0.0)  # [q k]
    wrong = softmax_zero_after(s, m)  # [q k]
    return {"right": right.numpy(), "wrong": wrong.numpy(),
            "right_sums": right.sum(-1).numpy(), "wrong_sums": wrong.sum(-1).numpy()}


# ---------------------------------------------------------------------------------------------
# 2. Leak through a finite constant
# ---------------------------------------------------------------------------------------------


def leak_mass(scores: torch.Tensor, mask: torch.Tensor, constant: float,
              dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Per query row, the probability that lands on forbidden keys when masking with ``constant``
    in ``dtype`` (computed in that dtype, returned as float64; NaN where the softmax gave NaN)."""
    p = softmax_add_constant(scores, mask, constant, dtype).to(torch.float64)  # [.. q k]
    return (p * (~mask.to(p.device)).to(torch.float64)).sum(-1)  # [.. q]


def gap_row(gap: float, n_forbidden: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A worst-case row: one allowed key with logit 0 and ``n_forbidden`` forbidden keys whose
    logits sit ``gap`` ABOVE it (the forbidden keys are the ones the query likes best)."""
    n_forbidden = _whole("n_forbidden", n_forbidden, 1, M.MAX_N)
    scores = torch.tensor([0.0] + [float(gap)] * n_forbidden, dtype=torch.float64)  # [k]
    mask = torch.zeros(n_forbidden + 1, dtype=torch.bool)
    mask[0] = True
    return scores, mask


def min_constant(gap: float, n_forbidden: int, eps: float) -> float:
    """The smallest |C| that keeps the worst-case leak at most ``eps`` (exact arithmetic):
    leak = k e^(g+C) / (1 + k e^(g+C)) <= eps  <=>  |C| >= g + ln(k (1 - eps) / eps)."""
    if not 0.0 < eps < 1.0:
        raise ValueError(f"eps must be between 0 and 1 (exclusive), got {eps}")
    return float(gap) + math.log(n_forbidden * (1.0 - eps) / eps)


def leak_table(gap: float, n_forbidden: int, eps: float,
               constants: Mapping[str, float] = MASK_CONSTANTS,
               dtypes: Mapping[str, torch.dtype] = DTYPES) -> list[dict]:
    """One row per (dtype, constant): what the constant is stored as, the leaked mass on the
    worst-case row, whether it stays within ``eps``, and what a row with EVERY key masked gives."""
    scores, mask = gap_row(gap, n_forbidden)
    rows = []
    for dname, dtype in dtypes.items():
        overflow = abs(float(gap)) > torch.finfo(dtype).max
        for cname, constant in constants.items():
            leak = float(leak_mass(scores, mask, constant, dtype))
            everything = softmax_add_constant(scores, torch.zeros_like(mask), constant, dtype).to(torch.float64)
            if bool(torch.isnan(everything).any()):
                all_masked = "NaN (0/0)"
            else:
                all_masked = f"weights sum to {float(everything.sum()):.3g}: all of it leaks"
            if math.isnan(leak):
                verdict = "NaN" + (" (the logit itself overflows)" if overflow else "")
            else:
                verdict = "yes" if leak <= eps else "no: leaks"
            rows.append({"dtype": dname, "constant": cname, "stored as": constant_in_dtype(constant, dtype),
                         "leaked mass": leak, f"within eps = {eps:g}?": verdict,
                         "row with every key masked": all_masked})
    return rows


def leak_curve(gaps: Sequence[float], n_forbidden: int, constant: float, dtype: torch.dtype) -> np.ndarray:
    """Leaked mass on the worst-case row for each gap (NaN where the dtype overflows)."""
    return np.array([float(leak_mass(*gap_row(g, n_forbidden), constant, dtype)) for g in gaps])


LEAK_GAPS = np.logspace(0, 10, 121)  # the gaps the leak chart is drawn over, 1 to 1e10
LEAK_GAPS.flags.writeable = False


@functools.lru_cache(maxsize=64)
def leak_curves(n_forbidden: int) -> dict[str, np.ndarray]:
    """The leak curve over LEAK_GAPS of every number format and mask constant, named "<format> <constant>".

    A pure function of the number of blocked keys, so it is kept: 726 softmaxes per call. The arrays
    are read-only because every caller shares them.
    """
    curves = {f"{d} {c}": leak_curve(LEAK_GAPS, n_forbidden, value, dtype)
              for d, dtype in DTYPES.items() for c, value in MASK_CONSTANTS.items()}
    for curve in curves.values():
        curve.flags.writeable = False
    return curves


# ---------------------------------------------------------------------------------------------
# 3. Cost: dense vs block-sparse attention, measured
# ---------------------------------------------------------------------------------------------


def dense_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """softmax(q k^T / sqrt(d)) v over every pair: n^2 scores per head. q, k, v: [head n d]."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # [head n n]
    return torch.softmax(scores, dim=-1) @ v  # [head n d]


def block_sparse_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, b: int) -> torch.Tensor:
    """The same attention restricted to blocks of ``b`` consecutive tokens, computed as n/b small
    b x b problems (n*b scores per head), never building the n x n matrix. Needs b to divide n."""
    h, n, d = q.shape
    if n % b:
        raise ValueError(f"block size b={b} must divide n={n}")
    qb, kb, vb = (t.reshape(h, n // b, b, d) for t in (q, k, v))  # [head block b d]
    scores = qb @ kb.transpose(-2, -1) / math.sqrt(d)  # [head block b b]
    out = torch.softmax(scores, dim=-1) @ vb  # [head block b d]
    return out.reshape(h, n, d)  # [head n d]


def _best_ms(fn, repeats: int) -> float:
    """Fastest of ``repeats`` timed calls after one warm-up, in milliseconds (the least disturbed)."""
    fn()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best * 1000.0


def time_attention(ns: Sequence[int] = (128, 256, 512, 1024, 2048), b: int = 32, n_heads: int = 4,
                   d_head: int = 16, repeats: int = 3, seed: int = 0) -> list[dict]:
    """Time dense and block-sparse attention for each n on this machine, in one run.

    One row per n: both times (best of ``repeats``), the measured ratio sparse/dense, the
    predicted ratio b/n, and the number of scored pairs of each. Sizes are those of the
    teaching model (4 heads of 16); n must be a multiple of b. Runs on one CPU thread.
    """
    b = _whole("b (block size)", b, 1, M.MAX_N)
    generator = torch.Generator().manual_seed(seed)
    with one_thread():  # one thread: a busy shared machine disturbs the timing far less
        return _time_rows(ns, b, n_heads, d_head, repeats, generator)


def _time_rows(ns, b, n_heads, d_head, repeats, generator) -> list[dict]:
    """The timing loop of :func:`time_attention` (one row per n)."""
    rows = []
    with torch.no_grad():
        for n in ns:
            n = _whole("n", n, b, M.MAX_N)
            q, k, v = (torch.randn(n_heads, n, d_head, generator=generator) for _ in range(3))  # [head n d]
            dense_ms = _best_ms(lambda: dense_attention(q, k, v), repeats)
            sparse_ms = _best_ms(lambda: block_sparse_attention(q, k, v, b), repeats)
            rows.append({"n": n, "b": b, "dense ms": dense_ms, "block-sparse ms": sparse_ms,
                         "measured ratio": sparse_ms / dense_ms, "predicted ratio b/n": b / n,
                         "dense pairs": n * n, "block-sparse pairs": n * b})
    return rows


# ---------------------------------------------------------------------------------------------
# 4. A model under a mask
# ---------------------------------------------------------------------------------------------

MaskArray = Union[np.ndarray, torch.Tensor]


def mask_argument(masks: MaskArray | Sequence[MaskArray]) -> Union[torch.Tensor, dict[int, torch.Tensor]]:
    """A model's mask argument from one ``[q, k]`` mask (every layer) or a per-layer stack
    ``[layer, q, k]`` / list (one per layer, first layer first)."""
    if isinstance(masks, (np.ndarray, torch.Tensor)) and np.ndim(masks) == 2:
        return torch.tensor(np.array(masks, dtype=bool))  # a copy: cached arrays are read-only
    return {i: torch.tensor(np.array(m, dtype=bool)) for i, m in enumerate(masks)}


def mask_kwargs(model, mask_arg) -> dict:
    """Where the mask goes in a call: ``mask=`` for one stack, ``tgt_mask=`` (the decoder's own
    self-attention) for an encoder-decoder."""
    if mask_arg is None:
        return {}
    return {"tgt_mask" if model.cfg.arch == "encoder-decoder" else "mask": mask_arg}


def run_masked(model, ids: torch.Tensor, names, mask_arg=None, tgt: Optional[torch.Tensor] = None):
    """(logits, cache) of one call with the mask (None = the model's own default mask)."""
    extra = {"tgt": tgt} if tgt is not None else {}
    return model.run_with_cache(ids, names, **extra, **mask_kwargs(model, mask_arg))


def length_for_width(task: Task, arch: str, width: int) -> Optional[int]:
    """The content length whose examples are exactly ``width`` positions wide on the masked side
    (the decoder input for encoder-decoder), or None if the task never makes that width."""
    for length in range(task.min_length, task.max_length + 1):
        try:
            batch = task.batch(1, arch, seed=0, length=length)
        except ValueError:
            continue  # e.g. odd lengths for brackets
        side = batch.tgt if batch.tgt is not None else batch.tokens
        if side.shape[1] == width:
            return length
    return None


def masked_accuracy(model, task: Union[str, Task], mask_arg=None, n_samples: int = 256, seed: int = 7,
                    length: Optional[int] = None) -> float:
    """The task's metric on ``n_samples`` examples of ``length`` with the given mask (None = default).

    The examples are fixed by ``seed``, so two calls with different masks score the same inputs.
    """
    task = get_task(task) if isinstance(task, str) else task
    arch = model.cfg.arch
    batch = task.batch(n_samples, arch, seed=seed, length=length)
    device = model.device
    tgt = batch.tgt.to(device) if batch.tgt is not None else None
    model.eval()
    with torch.no_grad():
        logits = model(batch.tokens.to(device), tgt, **mask_kwargs(model, mask_arg))  # [batch pos vocab]
    return task.accuracy(logits, batch)


def influence(model, ids: torch.Tensor, mask_arg=None, tgt: Optional[torch.Tensor] = None,
              seed: int = 0) -> np.ndarray:
    """Measured flow of information: entry [q, k] is the size of the gradient of the output at
    position q with respect to the token embedding at position k.

    The input is repeated once per query position (examples in a batch never mix), and copy q
    is asked only about its own output q, so one backward pass gives every row. The output is
    read through a fixed random direction, so a zero means "no path", not a coincidence.
    Attention is the only place positions mix, so this is zero wherever the stacked masks
    (plus the residual path) give no route from k to q.
    """
    prefix = "decoder." if model.cfg.arch == "encoder-decoder" else ""
    n_q = (tgt if tgt is not None else ids).shape[1]
    direction = torch.randn(model.cfg.vocab_size, generator=torch.Generator().manual_seed(seed))  # [vocab]
    direction = direction.to(model.device)
    rows = torch.arange(n_q, device=model.device)

    def read(logits: torch.Tensor) -> torch.Tensor:
        return (logits[rows, rows].float() * direction).sum()  # copy q, output q

    extra = {"tgt": tgt.expand(n_q, -1)} if tgt is not None else {}  # [q pos]
    _, cache = model.run_with_cache(ids.expand(n_q, -1), [prefix + "hook_embed"], grad_of=read, **extra,
                                    **mask_kwargs(model, mask_arg))
    grad = cache[prefix + "hook_embed_grad"]  # [q k d_model]: copy q's gradient at position k
    return grad.float().norm(dim=-1).cpu().numpy()  # [q k]


def scored_positions(targets: Optional[Sequence[int]]) -> list[int]:
    """Positions a task scores (not IGNORE)."""
    return [] if targets is None else [p for p, t in enumerate(targets) if t != IGNORE]
