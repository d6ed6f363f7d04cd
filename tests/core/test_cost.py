"""core.analysis.cost: the log-log fit recovers known slopes from synthetic timings, the crossover
is found where it must be, the quoted counts agree with torch's own FLOP counter, the live-bytes
tracker counts what it should, and the sweeps return well-formed tables (never timed)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from core.analysis import cost as C
from core.families import SIZE_PRESETS
from core.kernels import explicit_attention, recurrent_weights, rnn_layer

NS = np.array([64, 128, 256, 512, 1024, 2048], dtype=np.float64)


@pytest.mark.parametrize("slope", [0.5, 1.0, 2.0, 3.0])
def test_fit_recovers_the_slope_of_exact_power_laws(slope):
    fitted, intercept = C.fit_loglog(NS, 3e-4 * NS ** slope)
    assert fitted == pytest.approx(slope, abs=1e-9)
    assert intercept == pytest.approx(np.log(3e-4), abs=1e-9)


@pytest.mark.parametrize("slope", [1.0, 2.0])
def test_fit_recovers_the_slope_through_multiplicative_noise(slope):
    rng = np.random.default_rng(0)
    noisy = 1e-3 * NS ** slope * np.exp(rng.normal(0, 0.1, NS.size))
    assert C.fit_loglog(NS, noisy)[0] == pytest.approx(slope, abs=0.15)


def test_tail_slope_sees_past_a_fixed_overhead():
    timings = 0.5 + 1e-5 * NS ** 2  # a 0.5 ms floor hides the n^2 at small n
    assert C.fit_loglog(NS, timings)[0] < 1.5  # the whole range is fooled by the floor
    assert C.tail_slope(NS, timings, points=2) > 1.8  # the largest n are not


@pytest.mark.parametrize("ns, values", [([1, 1], [1, 2]), ([1, 2], [1, 0]), ([1, 2], [1, float("nan")]),
                                        ([1, 2, 3], [1, 2])])
def test_fit_rejects_what_it_cannot_fit(ns, values):
    with pytest.raises(ValueError):
        C.fit_loglog(ns, values)


def test_crossover_of_n_squared_d_against_n_d_squared_is_n_equals_d():
    for d in (32, 100, 512):
        attention = [C.attention_flops(n, d) for n in NS]
        recurrent = [C.recurrent_flops(n, d) for n in NS]
        found = C.crossover(NS, attention, recurrent)
        if NS[0] <= d <= NS[-1]:
            assert found == pytest.approx(d, rel=1e-9)
        else:
            assert found is None


def test_counts_agree_with_torch_flop_counter():
    n, heads, d_head = 48, 4, 8
    q = k = v = torch.zeros(1, heads, n, d_head)
    with FlopCounterMode(display=False) as counter:
        explicit_attention(q, k, v)
    assert counter.get_total_flops() == C.attention_flops(n, heads * d_head)
    weights = recurrent_weights(24, torch.Generator().manual_seed(0))
    with FlopCounterMode(display=False) as counter:
        rnn_layer(torch.zeros(1, n, 24), weights)
    assert counter.get_total_flops() == C.recurrent_flops(n, 24)


def test_sequential_steps_and_paths():
    assert [C.sequential_steps(C.RNN, n) for n in (1, 8, 100)] == [1, 8, 100]
    assert all(C.sequential_steps(m, 100) == 1 for m in C.ATTENTION_METHODS)
    assert C.path_length(C.RNN, 99) == 99 and C.path_length(C.EXPLICIT, 99) == 1
    rows = C.steps_table([4, 16])
    assert rows[1]["RNN longest path"] == 15 and rows[1]["attention longest path"] == 1


def test_presets_count_quadratic_patterns_and_linear_chunked_memory():
    assert C.attention_maps(SIZE_PRESETS["original"]) == 18  # 6 encoder + 6 decoder self + 6 cross
    assert C.attention_maps(SIZE_PRESETS["bert-base"]) == 12
    rows = C.preset_rows("bert-base", [512, 1024])
    assert rows[1]["patterns kept, MiB (all maps)"] == pytest.approx(4 * rows[0]["patterns kept, MiB (all maps)"])
    assert rows[1]["chunked keeps, MiB (all maps)"] == pytest.approx(2 * rows[0]["chunked keeps, MiB (all maps)"])
    assert rows[0]["attention ÷ RNN"] == pytest.approx(512 / 768)


def test_tracker_counts_a_storage_once_and_releases_it():
    with C.PeakLiveBytes() as tracker:
        x = torch.empty(1000, dtype=torch.float32)
        views = [x.view(10, 100), x[::2], x.unsqueeze(0)]
        assert tracker.live == 4000
        del x, views
        assert tracker.live == 0
        y = torch.empty(250, dtype=torch.float64)
        y.add_(1)  # in place: nothing new
        assert tracker.live == 2000
    assert tracker.peak == 4000


def test_memory_sweep_is_quadratic_for_explicit_and_linear_for_chunked():
    sweep = C.memory_sweep(C.Setting(ns=(128, 256, 512), d_model=32, n_heads=2, block=16))
    assert C.fit_loglog(sweep["ns"], sweep["bytes"][C.EXPLICIT])[0] > 1.7
    assert abs(C.fit_loglog(sweep["ns"], sweep["bytes"][C.CHUNKED])[0] - 1.0) < 0.1
    rows = C.memory_table(sweep)
    assert rows[-1]["explicit ÷ chunked"] > rows[0]["explicit ÷ chunked"]
    assert rows[-1]["explicit peak MiB"] >= rows[-1]["h·n² patterns MiB"]  # the patterns are kept


def test_time_sweep_measures_every_method_with_progress():
    seen = []
    sweep = C.time_sweep(C.Setting(ns=(16, 32), d_model=16, n_heads=2, block=8, repeats=1),
                         progress=lambda f, text: seen.append(f))
    assert set(sweep["ms"]) == set(C.METHODS)
    assert all(len(v) == 2 and all(t > 0 for t in v) for v in sweep["ms"].values())
    assert seen[0] == 0.0 and seen[-1] == 1.0 and seen == sorted(seen)
    assert {"device", "measured_at"} <= set(sweep)
    assert len(C.time_table(sweep)) == 2 and len(C.slope_table(sweep)) == len(C.METHODS)


@pytest.mark.parametrize("bad", [dict(ns=()), dict(ns=(1,)), dict(ns=(8,), d_model=30, n_heads=4),
                                 dict(ns=(8,), block=0)])
def test_bad_settings_are_named(bad):
    with pytest.raises(ValueError):
        C.Setting(**bad).check()
