"""The stored trained hyper-connections table (assets/precomputed/hyper_trained.json, bench/hyper_trained.py):
made with today's settings, complete, and its initial gradient profiles are what today's code measures."""

from __future__ import annotations

import numpy as np
import pytest

from core.analysis import hyper_trained as H


@pytest.fixture(scope="module")
def table() -> dict:
    table = H.load_table()
    assert table is not None, "stale or missing: run python -m bench.hyper_trained --write"
    return table


def test_table_has_every_seed_of_both_variants(table):
    for variant in H.VARIANTS:
        runs = H.runs_of(table, variant)
        assert [r.seed for r in runs] == list(H.SEEDS)
        for r in runs:
            assert 0 <= r.accuracy <= 1 and len(r.losses) == len(r.curve_steps)
            assert r.curve_steps[-1] == H.STEPS - 1
            assert len(r.grad_init) == len(r.grad_trained) == H.SIZES["n_layers"] + 1
            assert np.all(np.isfinite(r.losses)) and r.losses[-1] < r.losses[0]  # training lowered the loss


@pytest.mark.parametrize("variant", list(H.VARIANTS))
def test_stored_initial_gradients_are_todays(table, variant):
    """One cheap cell re-measured: the seed-0 model at initialisation (no training) gives the stored profile."""
    stored = H.runs_of(table, variant)[0]
    fresh = H.gradient_profile(H.build(H.VARIANTS[variant], stored.seed), stored.seed)
    np.testing.assert_allclose(fresh, stored.grad_init, rtol=1e-4)
