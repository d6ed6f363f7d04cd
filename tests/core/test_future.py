"""A state that attends to its future (core.analysis.future, the peaks task): the causal ceiling is exact, the
bundled bidirectional twin beats the causal one on fresh series by a stated margin, and its attention puts weight
on later readings while the causal twin's is exactly zero."""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict

import numpy as np
import pytest

from core.analysis import future as A
from core.checkpoints import load_bundled
from core.tasks import get_task

MARGIN = 0.08  # the encoder's lead over the decoder; the causal ceiling alone leaves 12.5 points at length 8
N = 256


@pytest.fixture(scope="module")
def comparison() -> A.FutureComparison:
    enc, _ = load_bundled("peaks-encoder")
    dec, _ = load_bundled("peaks-decoder")
    return A.compare(enc.eval(), dec.eval(), get_task("peaks"), N, 8, seed=11)


def test_causal_ceiling_is_the_best_prefix_guess():
    """Enumerate every series of 3 readings: the best guess per seen prefix scores exactly causal_ceiling(3)."""
    task = get_task("peaks")
    right = 0
    series = list(itertools.product(range(10), repeat=3))
    for i in range(3):
        by_prefix: dict[tuple, Counter] = defaultdict(Counter)
        for s in series:
            by_prefix[s[:i + 1]][task.verdicts([str(x) for x in s])[i]] += 1
        right += sum(c.most_common(1)[0][1] for c in by_prefix.values())
    assert right / (3 * len(series)) == pytest.approx(task.causal_ceiling(3))
    assert task.causal_ceiling(8) == pytest.approx(0.875)


def test_fresh_series_come_from_a_local_generator_and_are_labelled_by_the_rule():
    task = get_task("peaks")
    a, ta = A.fresh_series(task, 8, 6, seed=3)
    b, tb = A.fresh_series(task, 8, 6, seed=3)
    assert a.equal(b) and ta.equal(tb)
    assert not a.equal(A.fresh_series(task, 8, 6, seed=4)[0])
    assert a.shape == (8, 7) and (ta[:, 0] == -100).all() and (ta[:, 1:] >= 0).all()


def test_bidirectional_twin_beats_the_causal_one(comparison):
    acc = comparison.accuracy
    assert acc["encoder"] - acc["decoder"] >= MARGIN, acc
    scored = N * 8
    assert acc["decoder"] <= comparison.ceiling + 4 * np.sqrt(0.875 * 0.125 / scored)  # no causal model beats it


def test_attention_puts_weight_on_the_future(comparison):
    enc, dec = comparison.future["encoder"], comparison.future["decoder"]
    assert np.all(dec == 0) and np.all(comparison.next_one["decoder"] == 0)  # the causal mask forbids it
    assert np.all(enc > 0.1), enc
    even_later, even_next = comparison.uniform
    assert 0 < even_next < even_later < 1
    assert comparison.next_one["encoder"].max() > even_next  # some layer looks at the next reading more than evenly
    pattern = comparison.pattern
    assert pattern.shape == (2, 9, 9)
    np.testing.assert_allclose(pattern.sum(-1), 1.0, atol=1e-6)
