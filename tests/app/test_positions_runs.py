"""The Positions page's cached work (ui.positions.runs): each memo gives what the page used to compute inline."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from core import checkpoints
from core.analysis import positions as P
from core.tasks import get_task
from ui.shell import models
from ui.positions import runs as R
from ui.shell.sidebar import Selection, prediction_table

needs_models = pytest.mark.skipif(not checkpoints.MANIFEST.is_file(),
                                  reason="bundled models not built (python -m core.train --all)")


def test_sinusoidal_gram_is_the_table_gram_profile_and_closed_form_read_only_and_shared():
    gram, profile, closed = R.sinusoidal_gram(40, 12, 100)
    table = P.sinusoidal_table(40, 12, 100)
    expected = P.diagonal_profile(P.gram_matrix(table))
    assert np.array_equal(gram, P.gram_matrix(table))
    for key in ("offsets", "mean", "lo", "hi"):
        assert np.array_equal(profile[key], expected[key])
    assert profile["spread"] == expected["spread"]
    assert np.array_equal(closed, P.closed_form_gram(expected["offsets"], 12, 100))
    assert np.array_equal(R.sinusoidal_table(40, 12, 100), table)
    assert R.sinusoidal_gram(40, 12, 100)[0] is gram  # one result for every session
    with pytest.raises(ValueError):
        gram[0, 0] = 1.0  # shared, so read-only


def test_shift_table_is_the_formatted_error_table():
    ks = (1, 5, 200)
    table = R.shift_table(ks, 16, 8, 10000).to_pandas()
    rows = P.shift_errors(ks, 16, 8, 10000)
    assert list(table["k"]) == [1, 5, 200]
    assert list(table["max error"]) == [f"{r['max error']:.1e}" for r in rows]
    assert R.shift_map(5, 16, 8, 10000)[1] == P.shift_map(5, 16, 8, 10000)[1]


def test_rope_helpers_use_the_pages_query_and_key():
    q, k = P.unit_pair_vectors(R.ROPE_D_HEAD, seed=R.ROPE_VECTOR_SEED)
    theta, trail_q, trail_k = R.rope_pair(500, 3, 10)
    assert theta == float(P.rope_angles(R.ROPE_D_HEAD, 500)[3])
    assert np.array_equal(trail_q, P.rope_trajectory(q[6:8], range(10), theta))
    assert np.array_equal(trail_k, P.rope_trajectory(k[6:8], range(10), theta))
    grid = np.arange(12)
    assert np.array_equal(R.rope_grid(12, 500), P.rope_scores(q, k, grid, grid, 500))
    assert R.rope_shift_check(9, 4, 100, 500) == P.rope_shift_check(q, k, 9, 4, 100, 500)
    offsets, weights = R.neighbour_attention("rope", 20, 3, 16, 500)
    expected = P.neighbour_attention("rope", 20, 3, 16, 500)
    assert np.array_equal(offsets, expected[0]) and np.array_equal(weights, expected[1])


@needs_models
def test_order_answers_lists_each_scheme_and_input():
    a = tuple("the dog near the cats <mask> loud".split())
    b = tuple("the cats near the dog <mask> loud".split())
    table = R.order_answers("agreement-encoder", "cpu", a, b, ("none", "sinusoidal")).to_pandas()
    assert list(table.columns) == ["run with", "input", "position", "token", "model says", "right answer", "correct"]
    for scheme in ("none", "sinusoidal"):
        _, ra, rb = R.order("agreement-encoder", "cpu", a, b, scheme)
        rows = table[table["run with"] == P.SCHEME_TEXT[scheme]]
        assert list(rows["input"]) == ["A"] * len(ra) + ["B"] * len(rb)
        assert list(rows["model says"]) == [r["predicted"] for r in ra + rb]


@needs_models
def test_scored_positions_counts_like_the_prediction_table():
    model, meta = models.get_model("induction-sinusoidal", "cpu")
    task = get_task(meta["task"])
    tokens = [t for t in task.example(model.cfg.arch, seed=3) if t != "<pad>"]
    ids = torch.tensor([task.vocab.encode(tokens)])
    sel = Selection("induction-sinusoidal", model, meta, task, "cpu", tokens, ids,
                    targets=task.label(tokens, model.cfg.arch))
    for pos in ("sinusoidal", "none"):
        with torch.no_grad():
            logits = model(ids, pos=pos).numpy()
        rows = prediction_table(sel, logits)
        assert P.scored_positions(sel.targets, logits) == (
            sum(r["correct"] for r in rows), len(rows))
    assert P.scored_positions(None, logits) == (0, 0)


@needs_models
def test_length_view_reports_a_refusal_as_text_and_an_error():
    ids = (("learned", "induction-learned"),)
    table, refusals = R.length_view(ids, "cpu", (4, 20), 8, 20)
    assert table.to_pandas().equals(pd.DataFrame([{"scheme": P.SCHEME_TEXT["learned"], "accuracy": "refused"}]))
    assert len(refusals) == 1 and refusals[0][:2] == ("induction-learned", 41)
    table, refusals = R.length_view(ids, "cpu", (4, 20), 8, 4)
    assert table.to_pandas()["accuracy"][0].endswith("%") and not refusals
    positions, accuracy = R.curve_points(ids, "cpu", (4, 20), 8)["learned"]
    assert positions == [9, 41] and accuracy[1] is None
