"""core.analysis.heads.cost: h heads of d_model / h keep one wide head's parameters and FLOPs, while the
patterns, counted and measured, grow with h."""

from __future__ import annotations

import pytest

from core.analysis.heads import cost as H


def test_parameters_and_flops_stay_and_pattern_memory_grows_with_the_head_count(one_thread):
    assert H.head_counts(48) == [1, 2, 3, 4, 6, 8] and H.head_counts(64) == [1, 2, 4, 8]
    rows = H.head_cost_rows(32, n_counted=20, n_measured=128)
    assert len({r["parameters"] for r in rows}) == 1 and len({r["MFLOP"] for r in rows}) == 1
    patterns = [r["patterns MiB at the measured n (counted)"] for r in rows]
    assert patterns == [r["heads"] * patterns[0] for r in rows]
    peaks = [r["peak MiB at the measured n (measured)"] for r in rows]
    assert all(b > a for a, b in zip(peaks, peaks[1:]))
    assert all(p >= c for p, c in zip(peaks, patterns))  # training keeps at least the patterns


def test_rows_built_from_given_peaks_equal_the_measured_ones_and_refuse_a_wrong_count(one_thread):
    peaks = H.measured_peaks(32, 64)
    assert len(peaks) == len(H.head_counts(32))
    measured = H.head_cost_rows(32, n_counted=20, n_measured=64)
    given = H.head_cost_rows(32, n_counted=20, n_measured=64, peaks=peaks)
    assert [r["peak MiB at the measured n (measured)"] for r in given] == [p / 2 ** 20 for p in peaks]
    # the measurement itself is deterministic on one thread: the same step, the same live bytes
    assert [r["peak MiB at the measured n (measured)"] for r in measured] == [p / 2 ** 20 for p in peaks]
    longer = H.head_cost_rows(32, n_counted=500, n_measured=64, peaks=peaks)
    assert [r["MFLOP"] for r in longer] != [r["MFLOP"] for r in given]  # counted at the new length
    with pytest.raises(ValueError, match="measured peaks"):
        H.head_cost_rows(32, n_counted=20, n_measured=64, peaks=peaks[:-1])
