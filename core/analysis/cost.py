"""What attention costs, measured on this machine against the recurrent layer it replaced.

In reading order:

1. Slopes: a least-squares line through log(cost) against log(n), and where two curves cross.
2. The counts the papers quote: FLOPs, sequential steps, path length, pattern memory, and the
   same counts at the original Transformer's and BERT-base's sizes.
3. Measuring: median wall time and peak live tensor bytes of one call.
4. Sweeps over the sequence length n: time of every method, memory of training (attention and the RNN).
5. Launch-bound points: where a time has not started to grow yet, left out of the slope fits.
6. Bytes moved: what explicit and tiled (FlashAttention-style) attention read and write, counted.
7. The gradient's path: how the last output's gradient reaches each earlier input, RNN against attention.

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
PREDICTED_MEMORY_SLOPE = {EXPLICIT: 2.0, CHUNKED: 1.0, RNN: 1.0}
TRAINING_METHODS = (EXPLICIT, CHUNKED)  # the two attentions whose training memory is compared
MEMORY_METHODS = (EXPLICIT, CHUNKED, RNN)  # every line of the memory chart (the RNN keeps one state per step)
GPU_WARMUP_CALLS = 5  # untimed calls before a GPU measurement: kernels load, cuBLAS makes its workspace
LAUNCH_BOUND_SLOPE = 0.5  # a point is launch-bound while its time grows slower than n^0.5 up to the next n
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


def warmup_calls(device: torch.device) -> int:
    """Untimed calls before measuring: one on the CPU, GPU_WARMUP_CALLS on a GPU (its first calls load kernels
    and allocate workspaces, which would land in the first, launch-bound points)."""
    return 1 if device.type == "cpu" else GPU_WARMUP_CALLS


def median_ms(fn: Callable[[], object], repeats: int, device: torch.device = torch.device("cpu"),
              min_sample_s: float = 0.002) -> float:
    """Median of ``repeats`` timed samples after the device's warm-up calls (`warmup_calls`), in milliseconds
    per call (a median is robust to a busy neighbour). A call shorter than ``min_sample_s`` is repeated within
    each sample, as timeit does, so the clock's resolution and one interruption weigh little."""
    for _ in range(warmup_calls(device) - 1):
        fn()
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
    the CPU, the allocator's peak above what was already allocated on a GPU. On a GPU ``fn`` runs once first,
    untracked: its first call allocates cuBLAS's workspace, which would otherwise count as the first point's
    memory (32 MiB, measured on an H100)."""
    if device.type == "cuda":
        fn()  # the workspace and the kernels' first allocations now count in `base`, not in the peak
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
    ns: list[int] = []
    with _on_device(s), torch.no_grad():
        for n in s.ns:
            try:
                row = {}
                for method, call in _calls(s, n, generator).items():
                    if progress is not None:
                        progress(done / total, f"{method} at n = {n:,}")
                    row[method] = median_ms(call, s.repeats, torch.device(s.device))
                    done += 1
            except torch.OutOfMemoryError:  # a GPU sweep goes on "to 16,384 or memory": stop at the first n that fails
                _free(s)
                break
            ns.append(n)
            for method, value in row.items():
                ms[method].append(value)
    if progress is not None:
        progress(1.0, "done")
    return {"ns": ns, "ms": ms, "rnn_steps": [count_rnn_steps(n) for n in ns], "d_model": s.d_model,
            "n_heads": s.n_heads, "block": s.block, "repeats": s.repeats, "out_of_memory_at": _next_n(s, ns),
            **_stamp(s)}


def _free(s: Setting) -> None:
    """Hand the failed call's memory back to the GPU (nothing to do on the CPU)."""
    if s.device == "cuda":
        torch.cuda.empty_cache()


def _next_n(s: Setting, ns: list[int]) -> Optional[int]:
    """The first n of the setting that was not measured (it ran out of memory), or None."""
    rest = [n for n in s.ns if n not in ns]
    return rest[0] if rest else None


def count_rnn_steps(n: int) -> int:
    """Steps the recurrent layer really takes over n positions, counted as it runs (width 4: the count
    does not depend on the width)."""
    steps: list[int] = []
    with torch.no_grad():
        rnn_layer(torch.zeros(1, n, 4), recurrent_weights(4, torch.Generator().manual_seed(0)), on_step=steps.append)
    return len(steps)


def _training_step(method: str, s: Setting, n: int, generator: torch.Generator) -> Callable[[], None]:
    """Forward and backward of one attention call, or of the RNN layer, at length n (what training does per
    layer)."""
    if method == RNN:
        return _rnn_training_step(s, n, generator)
    q, k, v, _ = _inputs(s, n, generator, requires_grad=True)
    grad = torch.randn(1, s.n_heads, n, s.d_head, generator=generator).to(s.device)  # [batch head pos d_head]

    def step() -> None:
        out = explicit_attention(q, k, v) if method == EXPLICIT else chunked_attention(q, k, v, block_size=s.block)
        torch.autograd.grad(out, (q, k, v), grad)
    return step


def _rnn_training_step(s: Setting, n: int, generator: torch.Generator) -> Callable[[], None]:
    """Forward and backward of the tanh RNN layer at length n: autograd keeps every step's state (n d floats)."""
    _, _, _, x = _inputs(s, n, generator)
    x.requires_grad_(True)
    weights = recurrent_weights(s.d_model, generator, s.device)
    grad = torch.randn(1, n, s.d_model, generator=generator).to(s.device)  # [batch pos d_model]

    def step() -> None:
        torch.autograd.grad(rnn_layer(x, weights), (x,), grad)
    return step


def memory_sweep(s: Setting, progress: Progress = None) -> dict:
    """Peak extra bytes of one training step (forward + backward) of explicit and chunked attention and of the
    RNN at every n, beside the patterns' own size h n^2 floats: {"ns", "bytes": {method: [n]}, "patterns"}."""
    s = s.check()
    generator = torch.Generator().manual_seed(s.seed)
    measured: dict[str, list[int]] = {m: [] for m in MEMORY_METHODS}
    total, done = len(s.ns) * len(MEMORY_METHODS), 0
    ns: list[int] = []
    with _on_device(s):
        for n in s.ns:
            try:
                row = {}
                for method in MEMORY_METHODS:
                    if progress is not None:
                        progress(done / total, f"{method} training step at n = {n:,}")
                    row[method] = peak_bytes(_training_step(method, s, n, generator), torch.device(s.device))
                    done += 1
            except torch.OutOfMemoryError:  # stop at the first n that does not fit
                _free(s)
                break
            ns.append(n)
            for method, value in row.items():
                measured[method].append(value)
    if progress is not None:
        progress(1.0, "done")
    return {"ns": ns, "bytes": measured, "patterns": [pattern_bytes(n, s.n_heads) for n in ns], "block": s.block,
            "out_of_memory_at": _next_n(s, ns), **_stamp(s)}


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
    """Each method's slope fitted over the largest ``points`` n where its time has started to grow
    (`growing_slope`; None when fewer than two have), the predicted one, and its launch-bound points."""
    rows = []
    for m in METHODS:
        bound = launch_bound(sweep["ns"], sweep["ms"][m])
        rows.append({"method": m, "fitted slope": growing_slope(sweep["ns"], sweep["ms"][m], points),
                     "predicted slope": PREDICTED_TIME_SLOPE[m], "launch-bound points": int(bound.sum())})
    return rows


def memory_table(sweep: Mapping) -> list[dict]:
    """The memory sweep as rows in MiB: n, each method's peak, the patterns' size, and explicit ÷ chunked."""
    mib = 2 ** 20
    return [{"n": n, **{f"{m} peak MiB": sweep["bytes"][m][i] / mib for m in MEMORY_METHODS if m in sweep["bytes"]},
             "h·n² patterns MiB": sweep["patterns"][i] / mib,
             "explicit ÷ chunked": sweep["bytes"][EXPLICIT][i] / max(1, sweep["bytes"][CHUNKED][i])}
            for i, n in enumerate(sweep["ns"])]


def steps_table(ns: Sequence[int]) -> list[dict]:
    """Sequential operations and the longest path (between positions 0 and n-1) of one layer, per n."""
    return [{"n": n, "RNN sequential steps": sequential_steps(RNN, n),
             "attention sequential steps": sequential_steps(EXPLICIT, n),
             "RNN longest path": path_length(RNN, n - 1), "attention longest path": path_length(EXPLICIT, n - 1)}
            for n in ns]


# ---------------------------------------------------------------------------------------------
# 5. Launch-bound points
# ---------------------------------------------------------------------------------------------


def launch_bound(ns: Sequence[float], ms: Sequence[float], min_slope: float = LAUNCH_BOUND_SLOPE) -> np.ndarray:
    """Which points [n] are launch-bound: the leading run (from the smallest n) from which the time grows with
    a local log-log slope under ``min_slope`` up to the next n. Work that grows like n^p with p >= 1 shows a
    slope near p, so such a flat start is fixed overhead (Python, dispatch, a GPU's kernel launch), not the
    power law (issue 39: on an H100, block-sparse was flat up to n = 2,048). When the whole range is flat, every
    point is."""
    order = np.argsort(np.asarray(ns, dtype=np.float64))
    x = np.log(np.asarray(ns, dtype=np.float64)[order])  # [n], increasing
    y = np.log(np.maximum(np.asarray(ms, dtype=np.float64)[order], 1e-300))  # [n]
    local = np.diff(y) / np.diff(x)  # [n - 1]: the slope from each point to the next
    flat = np.zeros(len(x), dtype=bool)
    for i, slope in enumerate(local):
        if not (np.isfinite(slope) and slope < min_slope):
            break
        flat[i] = True
    if len(x) and flat[:-1].all():  # no point ever started to grow: the last one is launch-bound too
        flat[-1] = True
    out = np.zeros(len(x), dtype=bool)
    out[order] = flat
    return out


def growing_slope(ns: Sequence[float], ms: Sequence[float], points: int = 3) -> Optional[float]:
    """The log-log slope over the largest ``points`` n that are not launch-bound; None when fewer than two
    points remain: the whole range is launch-bound and no power law can be read from it."""
    x, y = np.asarray(ns, dtype=np.float64), np.asarray(ms, dtype=np.float64)
    keep = ~launch_bound(x, y)
    if keep.sum() < 2:
        return None
    return tail_slope(x[keep], y[keep], points)


# ---------------------------------------------------------------------------------------------
# 6. Bytes moved to and from memory (counted)
# ---------------------------------------------------------------------------------------------


def explicit_traffic(n: int, d_model: int, n_heads: int) -> float:
    """Bytes one explicit attention forward reads and writes in main memory (float32): read Q, K, V, write O
    (4 n d numbers), and the h n^2 scores S and probabilities P each written once and read once (4 h n^2)."""
    return FLOAT32_BYTES * (4.0 * n * d_model + 4.0 * n_heads * n * n)


def tiled_traffic(n: int, d_model: int, n_heads: int, block: int) -> float:
    """Bytes a tiled, fused attention forward (FlashAttention's kernel) reads and writes in main memory: each
    block of b query rows is read once and keeps its scores in fast on-chip memory, while K and V are read
    again for every query block (2 n d per block, n/b blocks); then O and one log-sum-exp per row are written.
    No n x n matrix goes to main memory."""
    query_blocks = math.ceil(n / block)
    return FLOAT32_BYTES * (n * d_model + 2.0 * n * d_model * query_blocks + n * d_model + n_heads * n)


def traffic_rows(ns: Sequence[int], d_model: int, n_heads: int, block: int) -> list[dict]:
    """Per n: the bytes each forward moves (counted, MiB) and explicit / tiled."""
    mib = 2 ** 20
    return [{"n": n, "explicit MiB moved": explicit_traffic(n, d_model, n_heads) / mib,
             "tiled MiB moved": tiled_traffic(n, d_model, n_heads, block) / mib,
             "explicit ÷ tiled": explicit_traffic(n, d_model, n_heads) / tiled_traffic(n, d_model, n_heads, block)}
            for n in ns]


# ---------------------------------------------------------------------------------------------
# 7. The gradient's path: RNN against attention
# ---------------------------------------------------------------------------------------------


def _rnn_last(x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """The tanh RNN's last state [batch d] (the layer the Cost page times, weights from `generator`)."""
    weights = recurrent_weights(x.shape[-1], generator, dtype=x.dtype)
    return rnn_layer(x, weights)[:, -1]  # [batch d_model]


def _attention_last(x: torch.Tensor, n_heads: int, generator: torch.Generator) -> torch.Tensor:
    """One causal attention layer's output at the last position [batch d]: the last query against every key
    (all earlier positions and itself), projections q, k, v, o of width d scaled by 1/sqrt(d)."""
    batch, n, d = x.shape
    w_q, w_k, w_v, w_o = (torch.randn(d, d, generator=generator, dtype=x.dtype) / math.sqrt(d) for _ in range(4))
    heads = lambda t: t.reshape(batch, -1, n_heads, d // n_heads).transpose(1, 2)  # noqa: E731 [batch head pos d_head]
    q = heads(x[:, -1:] @ w_q)  # [batch head 1 d_head]
    k, v = heads(x @ w_k), heads(x @ w_v)  # [batch head pos d_head]
    z = explicit_attention(q, k, v)  # [batch head 1 d_head]
    return z.transpose(1, 2).reshape(batch, d) @ w_o  # [batch d_model]


def gradient_by_distance(n: int, d_model: int, n_heads: int, seed: int = 0) -> dict:
    """‖∂y_{n-1} / ∂x_t‖_F, the size of the last output's Jacobian with respect to each earlier input, for the
    tanh RNN and for one causal attention layer of the same width on the same random inputs, against the
    distance n - 1 - t. Exact (one backward pass per output coordinate, run as a batch of d copies) and in
    float64, so the RNN's fading gradient stays finite (no underflow to 0) far past float32's range.
    Returns {"distance": [n], "RNN": [n], "attention": [n]}."""
    if n < 2 or d_model < 1 or n_heads < 1 or d_model % n_heads:
        raise ValueError(f"need n >= 2 and d_model={d_model} split evenly over n_heads={n_heads}")
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(1, n, d_model, generator=generator, dtype=torch.float64)  # [1 pos d_model]
    eye = torch.eye(d_model, dtype=torch.float64)  # copy b asks for output coordinate b
    out = {"distance": np.arange(n - 1, -1, -1)}
    with one_thread(), torch.enable_grad():
        weights = lambda: torch.Generator().manual_seed(seed + 1)  # noqa: E731 the same draw for both layers
        for name, last in (("RNN", lambda x: _rnn_last(x, weights())),
                           ("attention", lambda x: _attention_last(x, n_heads, weights()))):
            copies = x.expand(d_model, n, d_model).clone().requires_grad_(True)  # [d_model pos d_model]
            (grad,) = torch.autograd.grad(last(copies), (copies,), eye)  # [copy pos d_model]: row b of each dy/dx_t
            out[name] = grad.pow(2).sum(dim=(0, 2)).sqrt().numpy()  # [pos]: Frobenius norm per input position
    return out
