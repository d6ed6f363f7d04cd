"""What attention costs, measured on this machine against the recurrent layer it replaced.

In reading order:

1. Slopes: a least-squares line through log(cost) against log(n), and where two curves cross.
2. The counts the papers quote: FLOPs, sequential steps, path length, pattern memory, and the
   same counts at the original Transformer's and BERT-base's sizes.
3. Measuring: median wall time and peak live tensor bytes of one call.
4. Sweeps over the sequence length n: time of every method, memory of training.

Nothing here imports streamlit; the Cost page (ui.cost.runs) caches the sweeps per device and setting.
"""

from __future__ import annotations

import contextlib
import math
import statistics
import time
import weakref
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Callable, Mapping, Optional, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from core.analysis.masks import block_sparse_attention
from core.device import one_thread
from core.families import SIZE_PRESETS, SizePreset
from core.kernels import chunked_attention, explicit_attention, recurrent_weights, rnn_layer

EXPLICIT, FUSED, SPARSE, CHUNKED, RNN = "explicit", "fused SDPA", "block-sparse", "chunked", "RNN"
METHODS = (EXPLICIT, FUSED, SPARSE, CHUNKED, RNN)
ATTENTION_METHODS = (EXPLICIT, FUSED, SPARSE, CHUNKED)
PREDICTED_TIME_SLOPE = {EXPLICIT: 2.0, FUSED: 2.0, SPARSE: 1.0, CHUNKED: 2.0, RNN: 1.0}
PREDICTED_MEMORY_SLOPE = {EXPLICIT: 2.0, CHUNKED: 1.0}
TRAINING_METHODS = (EXPLICIT, CHUNKED)
FLOAT32_BYTES = 4


# ---------------------------------------------------------------------------------------------
# 1. Slopes and crossovers
# ---------------------------------------------------------------------------------------------


def fit_loglog(ns: Sequence[float], values: Sequence[float]) -> tuple[float, float]:
    """Slope and intercept of the least-squares line through (log n, log value): value ~ e^b n^slope.

    Needs at least two distinct n and positive values (ValueError otherwise)."""
    x, y = np.asarray(ns, dtype=np.float64), np.asarray(values, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"ns and values must be two lists of one length, got {x.shape} and {y.shape}")
    if len(np.unique(x)) < 2 or np.any(x <= 0) or np.any(~np.isfinite(y)) or np.any(y <= 0):
        raise ValueError("a log-log fit needs at least two distinct positive n and positive, finite values")
    slope, intercept = np.polyfit(np.log(x), np.log(y), 1)
    return float(slope), float(intercept)


def tail_slope(ns: Sequence[float], values: Sequence[float], points: int = 3) -> float:
    """The log-log slope over the largest ``points`` n (where fixed per-call overheads matter least)."""
    order = np.argsort(np.asarray(ns, dtype=np.float64))[-max(2, points):]
    return fit_loglog(np.asarray(ns, dtype=np.float64)[order], np.asarray(values, dtype=np.float64)[order])[0]


def crossover(ns: Sequence[float], first: Sequence[float], second: Sequence[float]) -> Optional[float]:
    """The n at which ``first`` stops being cheaper than ``second`` (the first sign change of
    log(first / second), interpolated in log-log), or None when they do not cross in range."""
    x = np.log(np.asarray(ns, dtype=np.float64))
    gap = np.log(np.asarray(first, dtype=np.float64)) - np.log(np.asarray(second, dtype=np.float64))  # [n]
    for i in range(len(gap) - 1):
        if gap[i] < 0 <= gap[i + 1]:
            t = -gap[i] / (gap[i + 1] - gap[i])
            return float(math.exp(x[i] + t * (x[i + 1] - x[i])))
    return None


# ---------------------------------------------------------------------------------------------
# 2. The counts the papers quote
# ---------------------------------------------------------------------------------------------


def attention_flops(n: int, d_model: int) -> float:
    """Multiply-adds x 2 of one self-attention core (scores q k^T and the weighted sum of v): 4 n^2 d."""
    return 4.0 * n * n * d_model


def recurrent_flops(n: int, d_model: int) -> float:
    """Multiply-adds x 2 of one recurrent layer of width d over n steps (x W_x and h W_h each step): 4 n d^2."""
    return 4.0 * n * d_model * d_model


def sequential_steps(method: str, n: int) -> int:
    """Operations that must wait for the one before: n for a recurrence, 1 for attention (all pairs at once)."""
    return n if method == RNN else 1


def path_length(method: str, distance: int) -> int:
    """Layer-steps a signal takes between two positions ``distance`` apart: the distance through a
    recurrence, one hop through any attention layer that lets the pair attend."""
    return distance if method == RNN else min(distance, 1)


def pattern_bytes(n: int, n_heads: int, maps: int = 1, batch: int = 1) -> float:
    """What training keeps of the attention patterns for the backward pass: h n^2 floats per map."""
    return float(batch) * maps * n_heads * n * n * FLOAT32_BYTES


def chunked_bytes(n: int, n_heads: int, d_head: int, block: int, maps: int = 1, batch: int = 1) -> float:
    """What chunked attention keeps instead: its output and one log-sum-exp per row (h n (d_head + 1)
    floats per map), plus one block of scores in flight (h n b)."""
    kept = float(batch) * maps * n_heads * n * (d_head + 1)
    return (kept + batch * n_heads * n * block) * FLOAT32_BYTES


def attention_maps(preset: SizePreset) -> int:
    """Attention patterns one forward pass computes: one per self-attention layer, and for an
    encoder-decoder ("6 + 6") also one cross-attention per decoder layer."""
    parts = [int(p) for p in preset.n_layers.split("+")]
    return sum(parts) + (parts[-1] if len(parts) > 1 else 0)


def preset_rows(name: str | SizePreset, ns: Sequence[int], block: int = 64) -> list[dict]:
    """Per n, at a famous model's size (a SIZE_PRESETS name, or any SizePreset, e.g. a checkpoint's own):
    FLOPs of one attention core and of one recurrent layer of the same width, and the training memory of
    every pattern against the chunked version."""
    p = name if isinstance(name, SizePreset) else SIZE_PRESETS[name]
    maps = attention_maps(p)
    return [{"n": n, "attention GFLOP (one layer)": attention_flops(n, p.d_model) / 1e9,
             "RNN GFLOP (one layer)": recurrent_flops(n, p.d_model) / 1e9,
             "attention ÷ RNN": attention_flops(n, p.d_model) / recurrent_flops(n, p.d_model),
             "patterns kept, MiB (all maps)": pattern_bytes(n, p.n_heads, maps) / 2 ** 20,
             "chunked keeps, MiB (all maps)": chunked_bytes(n, p.n_heads, p.d_head, block, maps) / 2 ** 20}
            for n in ns]


# ---------------------------------------------------------------------------------------------
# 3. Measuring one call
# ---------------------------------------------------------------------------------------------


def _sync(device: torch.device) -> None:
    """Wait for queued GPU work (a CPU call has finished when it returns)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def median_ms(fn: Callable[[], object], repeats: int, device: torch.device = torch.device("cpu"),
              min_sample_s: float = 0.002) -> float:
    """Median of ``repeats`` timed samples after one warm-up, in milliseconds per call (a median is robust
    to a busy neighbour). A call shorter than ``min_sample_s`` is repeated within each sample, as timeit
    does, so the clock's resolution and one interruption weigh little."""
    start = time.perf_counter()
    fn()
    _sync(device)
    first = time.perf_counter() - start
    calls = max(1, min(100, math.ceil(min_sample_s / max(first, 1e-7))))
    times = []
    for _ in range(max(1, repeats)):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        _sync(device)
        times.append((time.perf_counter() - start) / calls)
    return statistics.median(times) * 1000.0


class PeakLiveBytes(TorchDispatchMode):
    """Counts the bytes of every tensor storage an operation creates while they are alive, and the peak.

    Deterministic (no allocator, no wall clock), so it works on the CPU and in tests. A storage is
    counted once however many views share it, and released when the last tensor using it is freed.
    Tensors made before the mode started (the inputs) are not counted, and neither is scratch
    space a fused kernel uses inside one call: only what operations hand back.
    """

    def __init__(self):
        super().__init__()
        self.live, self.peak = 0, 0
        self._storages: dict[int, list[int]] = {}  # data_ptr -> [bytes, tensors alive]
        self._refs: dict[int, weakref.ref] = {}  # id(tensor) -> weak reference that releases it

    def _release(self, tensor_id: int, key: int) -> Callable:
        def released(_ref) -> None:
            self._refs.pop(tensor_id, None)
            entry = self._storages.get(key)
            if entry is None:
                return
            entry[1] -= 1
            if entry[1] == 0:
                del self._storages[key]
                self.live -= entry[0]
        return released

    def _track(self, tensor: torch.Tensor) -> None:
        if id(tensor) in self._refs:  # an in-place op hands back a tensor already counted
            return
        storage = tensor.untyped_storage()
        key = storage.data_ptr()
        if key not in self._storages:
            self._storages[key] = [storage.nbytes(), 0]
            self.live += storage.nbytes()
        self._storages[key][1] += 1
        self._refs[id(tensor)] = weakref.ref(tensor, self._release(id(tensor), key))

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for value in tree_flatten(out)[0]:
            if isinstance(value, torch.Tensor):
                self._track(value)
        self.peak = max(self.peak, self.live)
        return out


def peak_bytes(fn: Callable[[], object], device: torch.device = torch.device("cpu")) -> int:
    """Peak extra memory of one call of ``fn``: live tensor bytes counted by :class:`PeakLiveBytes` on
    the CPU, the allocator's peak above what was already allocated on a GPU."""
    if device.type == "cuda":
        _sync(device)
        base = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        fn()
        _sync(device)
        return int(torch.cuda.max_memory_allocated(device) - base)
    with PeakLiveBytes() as tracker:
        fn()
    return int(tracker.peak)


# ---------------------------------------------------------------------------------------------
# 4. Sweeps over n
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Setting:
    """One sweep: sequence lengths, width d (split over heads), block size b, repeats, device."""

    ns: tuple[int, ...]
    d_model: int = 64
    n_heads: int = 4
    block: int = 32
    repeats: int = 5
    device: str = "cpu"
    seed: int = 0

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads

    def check(self) -> "Setting":
        """ValueError naming the bad field; the setting itself when it is fine."""
        if not self.ns or any(not isinstance(n, int) or n < 2 for n in self.ns):
            raise ValueError(f"ns must be whole numbers >= 2, got {self.ns!r}")
        if self.n_heads < 1 or self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} must split evenly over n_heads={self.n_heads}")
        if self.block < 1 or self.repeats < 1:
            raise ValueError(f"block and repeats must be >= 1, got {self.block} and {self.repeats}")
        return self


def _inputs(s: Setting, n: int, generator: torch.Generator, requires_grad: bool = False):
    """q, k, v [1 head n d_head] and the recurrent layer's input x [1 n d_model], on the device."""
    device = torch.device(s.device)
    q, k, v = (torch.randn(1, s.n_heads, n, s.d_head, generator=generator).to(device).requires_grad_(requires_grad)
               for _ in range(3))  # [batch head pos d_head]
    x = torch.randn(1, n, s.d_model, generator=generator).to(device)  # [batch pos d_model]
    return q, k, v, x


def _calls(s: Setting, n: int, generator: torch.Generator) -> dict[str, Callable[[], object]]:
    """One forward call of every method at length n, on fresh random inputs of the setting's sizes."""
    q, k, v, x = _inputs(s, n, generator)
    weights = recurrent_weights(s.d_model, generator, s.device)
    b = min(s.block, n)  # block-sparse needs b to divide n: n and b are powers of two on the page
    return {EXPLICIT: lambda: explicit_attention(q, k, v),
            FUSED: lambda: F.scaled_dot_product_attention(q, k, v),
            SPARSE: lambda: block_sparse_attention(q[0], k[0], v[0], b),  # [head n d_head]
            CHUNKED: lambda: chunked_attention(q, k, v, block_size=s.block),
            RNN: lambda: rnn_layer(x, weights)}


def _stamp(s: Setting) -> dict:
    """Where and when a sweep ran."""
    return {"device": s.device, "threads": 1 if s.device == "cpu" else None,
            "measured_at": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}


def _on_device(s: Setting):
    """One CPU thread on the CPU (a shared 2-core machine disturbs it far less); nothing on a GPU."""
    return one_thread() if s.device == "cpu" else contextlib.nullcontext()


Progress = Optional[Callable[[float, str], None]]


def time_sweep(s: Setting, progress: Progress = None) -> dict:
    """Median forward time (ms) of every method at every n: {"ns", "ms": {method: [n]}, device, time}."""
    s = s.check()
    generator = torch.Generator().manual_seed(s.seed)
    ms: dict[str, list[float]] = {m: [] for m in METHODS}
    total, done = len(s.ns) * len(METHODS), 0
    with _on_device(s), torch.no_grad():
        for n in s.ns:
            for method, call in _calls(s, n, generator).items():
                if progress is not None:
                    progress(done / total, f"{method} at n = {n:,}")
                ms[method].append(median_ms(call, s.repeats, torch.device(s.device)))
                done += 1
    if progress is not None:
        progress(1.0, "done")
    return {"ns": list(s.ns), "ms": ms, "rnn_steps": [count_rnn_steps(n) for n in s.ns], "d_model": s.d_model,
            "n_heads": s.n_heads, "block": s.block, "repeats": s.repeats, **_stamp(s)}


def count_rnn_steps(n: int) -> int:
    """Steps the recurrent layer really takes over n positions, counted as it runs (width 4: the count
    does not depend on the width)."""
    steps: list[int] = []
    with torch.no_grad():
        rnn_layer(torch.zeros(1, n, 4), recurrent_weights(4, torch.Generator().manual_seed(0)), on_step=steps.append)
    return len(steps)


def _training_step(method: str, s: Setting, n: int, generator: torch.Generator) -> Callable[[], None]:
    """Forward and backward of one attention call at length n (what training does per layer)."""
    q, k, v, _ = _inputs(s, n, generator, requires_grad=True)
    grad = torch.randn(1, s.n_heads, n, s.d_head, generator=generator).to(s.device)  # [batch head pos d_head]

    def step() -> None:
        out = explicit_attention(q, k, v) if method == EXPLICIT else chunked_attention(q, k, v, block_size=s.block)
        torch.autograd.grad(out, (q, k, v), grad)
    return step


def memory_sweep(s: Setting, progress: Progress = None) -> dict:
    """Peak extra bytes of one training step (forward + backward) of explicit and chunked attention
    at every n, beside the patterns' own size h n^2 floats: {"ns", "bytes": {method: [n]}, "patterns"}."""
    s = s.check()
    generator = torch.Generator().manual_seed(s.seed)
    measured: dict[str, list[int]] = {m: [] for m in TRAINING_METHODS}
    total, done = len(s.ns) * len(TRAINING_METHODS), 0
    with _on_device(s):
        for n in s.ns:
            for method in TRAINING_METHODS:
                if progress is not None:
                    progress(done / total, f"{method} training step at n = {n:,}")
                measured[method].append(peak_bytes(_training_step(method, s, n, generator), torch.device(s.device)))
                done += 1
    if progress is not None:
        progress(1.0, "done")
    return {"ns": list(s.ns), "bytes": measured,
            "patterns": [pattern_bytes(n, s.n_heads) for n in s.ns], "block": s.block, **_stamp(s)}


# ---------------------------------------------------------------------------------------------
# Tables
# ---------------------------------------------------------------------------------------------


def time_table(sweep: Mapping) -> list[dict]:
    """The time sweep as rows: n, each method's ms, and explicit ÷ fused (the fused kernel's advantage)."""
    rows = []
    for i, n in enumerate(sweep["ns"]):
        row = {"n": n, **{f"{m} ms": sweep["ms"][m][i] for m in METHODS}}
        row["explicit ÷ fused"] = sweep["ms"][EXPLICIT][i] / sweep["ms"][FUSED][i]
        row["explicit ÷ RNN"] = sweep["ms"][EXPLICIT][i] / sweep["ms"][RNN][i]
        rows.append(row)
    return rows


def slope_table(sweep: Mapping, points: int = 3) -> list[dict]:
    """Each method's fitted slope over the largest ``points`` n against the predicted one."""
    return [{"method": m, "fitted slope": tail_slope(sweep["ns"], sweep["ms"][m], points),
             "predicted slope": PREDICTED_TIME_SLOPE[m]} for m in METHODS]


def memory_table(sweep: Mapping) -> list[dict]:
    """The memory sweep as rows in MiB: n, each method's peak, the patterns' size, and explicit ÷ chunked."""
    mib = 2 ** 20
    return [{"n": n, **{f"{m} peak MiB": sweep["bytes"][m][i] / mib for m in TRAINING_METHODS},
             "h·n² patterns MiB": sweep["patterns"][i] / mib,
             "explicit ÷ chunked": sweep["bytes"][EXPLICIT][i] / max(1, sweep["bytes"][CHUNKED][i])}
            for i, n in enumerate(sweep["ns"])]


def steps_table(ns: Sequence[int]) -> list[dict]:
    """Sequential operations and the longest path (between positions 0 and n-1) of one layer, per n."""
    return [{"n": n, "RNN sequential steps": sequential_steps(RNN, n),
             "attention sequential steps": sequential_steps(EXPLICIT, n),
             "RNN longest path": path_length(RNN, n - 1), "attention longest path": path_length(EXPLICIT, n - 1)}
            for n in ns]
