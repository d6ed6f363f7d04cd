"""core.analysis.cost, issue 39: launch-bound points found and left out of the slope on synthetic GPU-like
timings, the RNN's training memory linear in n, the byte counts of explicit and tiled attention, and the last
output's gradient against distance (fading for the RNN, not for attention, always finite). Nothing is timed."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from core.analysis import cost as C
from core.figures.cost import gradient_chart, time_chart, traffic_chart

GPU_NS = [2 ** k for k in range(5, 15)]  # 32 .. 16,384, the sweep a GPU gets


def launch_then_square(ns, floor_ms=0.05, knee=512):
    """A GPU-like timing: a flat launch cost, then n^2 work that equals it at n = knee."""
    return [floor_ms * (1 + (n / knee) ** 2) for n in ns]


def test_a_flat_launch_bound_start_is_marked_and_left_out_of_the_slope():
    ms = launch_then_square(GPU_NS)
    bound = C.launch_bound(GPU_NS, ms)
    assert bound.tolist() == [True] * 3 + [False] * 7  # n = 32 ... 128 flat; from 256 on the time grows
    assert C.growing_slope(GPU_NS, ms) == pytest.approx(2.0, abs=0.05)
    assert C.fit_loglog(GPU_NS, ms)[0] < 1.5  # a fit over every point, as before, is far from 2


def test_a_range_that_never_leaves_the_launch_bound_regime_has_no_slope():
    ms = [0.03 * (1 + 0.01 * np.sin(n)) for n in GPU_NS]  # block-sparse on an H100: flat with noise
    assert C.launch_bound(GPU_NS, ms).all()
    assert C.growing_slope(GPU_NS, ms) is None
    sweep = {"ns": GPU_NS, "ms": {m: ms if m == C.SPARSE else launch_then_square(GPU_NS) for m in C.METHODS}}
    rows = {r["method"]: r for r in C.slope_table(sweep)}
    assert rows[C.SPARSE]["fitted slope"] is None and rows[C.SPARSE]["launch-bound points"] == len(GPU_NS)
    assert rows[C.EXPLICIT]["fitted slope"] == pytest.approx(2.0, abs=0.05)


def test_cpu_like_timings_that_grow_from_the_start_lose_no_point():
    ns = [32, 64, 128, 256]
    assert not C.launch_bound(ns, [n ** 1.0 for n in ns]).any()
    assert C.growing_slope(ns, [n ** 2.0 for n in ns]) == pytest.approx(2.0)


def test_the_time_chart_rings_the_launch_bound_points_and_says_when_there_is_no_slope():
    ms = {C.EXPLICIT: launch_then_square(GPU_NS), C.SPARSE: [0.03] * len(GPU_NS)}
    bound = {m: C.launch_bound(GPU_NS, v) for m, v in ms.items()}
    slopes = {m: C.growing_slope(GPU_NS, v) for m, v in ms.items()}
    fig = time_chart(GPU_NS, ms, slopes, C.PREDICTED_TIME_SLOPE, 64, None, launch_bound=bound)
    ringed = [t for t in fig.data if t.name and t.name.startswith("launch-bound")]
    assert sum(len(t.x) for t in ringed) == 3 + len(GPU_NS)
    assert any(t.name.startswith("block-sparse: launch-bound throughout") for t in fig.data)


def test_warm_up_calls_are_more_on_a_gpu():
    assert C.warmup_calls(torch.device("cpu")) == 1
    assert C.warmup_calls(torch.device("cuda")) == C.GPU_WARMUP_CALLS > 1
    calls = []
    C.median_ms(lambda: calls.append(1), repeats=1, min_sample_s=0.0)
    assert len(calls) == 2  # one warm-up, one timed sample


def test_the_rnn_training_memory_is_linear_in_n_and_ignores_the_heads(one_thread):
    def rnn_peak(n, heads):
        s = C.Setting(ns=(n,), d_model=32, n_heads=heads)
        return C.peak_bytes(C._training_step(C.RNN, s, n, torch.Generator().manual_seed(0)))

    ns = [64, 128, 256]
    rnn = [rnn_peak(n, 2) for n in ns]
    assert C.fit_loglog(ns, rnn)[0] == pytest.approx(1.0, abs=0.1)
    assert rnn_peak(128, 4) == rnn[1]  # no heads in a recurrence
    assert rnn[-1] >= 256 * 32 * 4  # at least one float32 state of width d per step is kept
    sweep = C.memory_sweep(C.Setting(ns=(16, 32), d_model=16, n_heads=2, block=8))
    assert "RNN peak MiB" in C.memory_table(sweep)[0]


def test_byte_counts_explicit_quadratic_tiled_gains_2b_over_d_head():
    d, h, b = 64, 4, 32
    assert C.explicit_traffic(1024, d, h) == 4 * (4 * 1024 * d + 4 * h * 1024 ** 2)
    assert C.tiled_traffic(1024, d, h, b) == 4 * (2 * 1024 * d + 2 * 1024 * d * 32 + h * 1024)
    rows = C.traffic_rows([2 ** k for k in range(6, 16)], d, h, b)
    ratios = [r["explicit ÷ tiled"] for r in rows]
    assert ratios == sorted(ratios)  # the gain grows with n ...
    assert ratios[-1] == pytest.approx(2 * b / (d // h), rel=0.05)  # ... towards 2b / d_head
    assert C.tiled_traffic(4096, d, h, 2 * b) < C.tiled_traffic(4096, d, h, b)  # bigger blocks, fewer re-reads
    fig = traffic_chart(rows)
    assert fig.layout.yaxis.type == "log" and len(fig.data) == 2


def test_the_rnn_gradient_fades_with_distance_and_attention_does_not(one_thread):
    grads = C.gradient_by_distance(64, 32, 4)
    assert grads["distance"][0] == 63 and grads["distance"][-1] == 0
    rnn, att = grads["RNN"], grads["attention"]
    assert np.all(np.isfinite(rnn)) and np.all(rnn > 0) and np.all(np.isfinite(att))
    assert rnn[0] < 1e-6 * rnn[-1]  # 63 steps back: millions of times smaller
    assert np.all(np.diff(np.log(rnn[::8])) > 0)  # steadily larger towards the last position
    assert att[:-1].max() / att[:-1].min() < 100  # attention: one hop at every distance
    assert att[0] > 1e3 * rnn[0]


def test_the_gradient_stays_finite_far_past_float32_and_the_chart_is_log_scale(one_thread):
    grads = C.gradient_by_distance(256, 16, 2)
    assert np.all(np.isfinite(grads["RNN"])) and np.all(grads["RNN"] > 0)
    assert grads["RNN"][0] < 1e-38  # below float32's smallest normal number, still represented
    fig = gradient_chart(grads["distance"], {"RNN": grads["RNN"], "attention": grads["attention"]})
    assert fig.layout.yaxis.type == "log" and [t.name for t in fig.data] == ["RNN", "attention"]
    with pytest.raises(ValueError):
        C.gradient_by_distance(16, 30, 4)


def test_a_sweep_that_runs_out_of_memory_stops_at_the_last_n_that_fit(monkeypatch):
    real = C.median_ms

    def failing(fn, repeats, device, **kw):
        if failing.n >= 64:
            raise torch.OutOfMemoryError("synthetic: the GPU is full")
        return real(fn, repeats, device, **kw)

    calls = C._calls
    monkeypatch.setattr(C, "_calls", lambda s, n, g: (setattr(failing, "n", n), calls(s, n, g))[1])
    monkeypatch.setattr(C, "median_ms", failing)
    sweep = C.time_sweep(C.Setting(ns=(16, 32, 64, 128), d_model=16, n_heads=2, block=8, repeats=1))
    assert sweep["ns"] == [16, 32] and sweep["out_of_memory_at"] == 64
    assert all(len(v) == 2 for v in sweep["ms"].values())
