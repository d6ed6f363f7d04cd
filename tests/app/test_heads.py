"""AppTest for the Heads page: every tab runs, widgets change figures, ablation changes accuracy,
URL parameters are clamped, and the two-head toy trains on the page."""

from __future__ import annotations

import numpy as np
import pytest

from tests.app.conftest import assert_ok, decode_array, page_at, plotly_specs

PAGE = "pages/heads.py"
VIEWS = ("subspaces", "circuits", "qk", "roles", "ablation", "toy", "orthogonal")


def _metric(at, label_start: str):
    for m in at.metric:
        if m.label.startswith(label_start):
            return m
    raise AssertionError(f"no metric starting with {label_start!r}: {[m.label for m in at.metric]}")


def _chart(at, key: str) -> dict:
    for el in at.get("plotly_chart"):
        if el.proto.id and key in el.proto.id or getattr(el, "key", None) == key:
            import json
            return json.loads(el.proto.spec)
    specs = plotly_specs(at)
    raise AssertionError(f"no chart {key!r} among {len(specs)} charts")


@pytest.mark.parametrize("view", VIEWS)
def test_every_view_runs_without_exception(view):
    at = page_at(PAGE, {"model": "induction-sinusoidal", "view": view})
    assert_ok(at)
    assert not at.error, [e.value for e in at.error]
    assert plotly_specs(at), f"view {view} drew no chart"


@pytest.mark.parametrize("model", ["agreement-encoder", "reverse-encdec", "induction-rope"])
def test_other_architectures_run(model):
    for view in ("subspaces", "circuits", "qk", "roles", "orthogonal"):
        at = page_at(PAGE, {"model": model, "view": view})
        assert_ok(at)


def test_changing_the_matrix_changes_the_angle_heatmap():
    at = page_at(PAGE, {"model": "induction-sinusoidal", "layer": "1"})
    before = decode_array(_chart(at, "heads.fig_angles")["data"][0]["z"])
    at.button_group(key="heads.which").set_value("W_Q").run()
    assert_ok(at)
    after = decode_array(_chart(at, "heads.fig_angles")["data"][0]["z"])
    assert before.shape == after.shape == (4, 4)
    assert not np.allclose(before, after)
    assert at.query_params["matrix"] == ["W_Q"] or at.query_params["matrix"] == "W_Q"


def test_changing_the_head_changes_the_qk_circuit():
    at = page_at(PAGE, {"model": "induction-sinusoidal", "view": "circuits", "layer": "1"})
    before = decode_array(_chart(at, "heads.fig_qk")["data"][0]["z"])
    at.button_group(key="heads.head").set_value(2).run()
    assert_ok(at)
    after = decode_array(_chart(at, "heads.fig_qk")["data"][0]["z"])
    assert before.shape == after.shape and not np.allclose(before, after)


def test_ablating_the_induction_layer_drops_accuracy():
    at = page_at(PAGE, {"model": "induction-sinusoidal", "view": "ablation"})
    base = _metric(at, "accuracy").value
    assert _metric(at, "heads removed").value.startswith("0 of")
    at.multiselect(key="heads.ablate").set_value([("self", 1, h) for h in range(4)]).run()
    assert_ok(at)
    acc = _metric(at, "accuracy")
    assert acc.value != base
    assert float(acc.value.rstrip("%")) < float(base.rstrip("%")) - 20  # the induction heads live in layer 1
    assert _metric(at, "heads removed").value.startswith("4 of")
    assert "L1H0" in str(at.query_params["ablate"])
    table = at.dataframe[-1].value  # the ranking: every head, most important first
    assert len(table) == 8 and list(table["rank"]) == list(range(1, 9))


def test_mean_ablation_from_the_url():
    at = page_at(PAGE, {"model": "induction-sinusoidal", "view": "ablation", "ablate": "L1H0,L1H1,L1H2,L1H3",
                        "mode": "mean"})
    assert_ok(at)
    assert at.button_group(key="heads.mode").value == "mean"
    assert len(at.multiselect(key="heads.ablate").value) == 4


def test_url_params_are_clamped_with_a_message():
    at = page_at(PAGE, {"model": "induction-sinusoidal", "layer": "99", "head": "-4", "view": "nonsense",
                        "ablate": "L7H9,zzz", "matrix": "W_X"})
    assert_ok(at)
    assert at.button_group(key="heads.layer").value == 1
    assert at.button_group(key="heads.head").value == 0
    warnings = " ".join(w.value for w in at.warning)
    assert "layer=99" in warnings and "head=-4" in warnings and "view" in warnings and "matrix" in warnings
    at2 = page_at(PAGE, {"model": "induction-sinusoidal", "view": "ablation", "ablate": "L7H9,zzz"})
    assert_ok(at2)
    assert "ablate" in " ".join(w.value for w in at2.warning)
    assert at2.multiselect(key="heads.ablate").value == []


def test_two_head_toy_trains_on_the_page():
    at = page_at(PAGE, {"model": "induction-sinusoidal", "view": "toy"})
    assert_ok(at)
    assert any("Before training" in m.value for m in at.markdown)
    at.button(key="heads.toy_train").click().run(timeout=180)
    assert_ok(at)
    assert at.success, [w.value for w in at.warning]
    assert "each head took one subspace" in at.success[0].value
    curve = _chart(at, "heads.fig_toy_curve")
    assert len(decode_array(curve["data"][0]["x"])) > 100


def test_orthogonal_query_leaves_scores_unchanged_on_the_page():
    at = page_at(PAGE, {"model": "agreement-encoder", "view": "orthogonal", "layer": "1", "head": "2"})
    assert_ok(at)
    assert float(_metric(at, "max change, orthogonal").value) < 1e-5
    assert float(_metric(at, "max change, random").value) > 1e-3


def test_toy_head_count_changes_the_figures():
    at = page_at(PAGE, {"model": "induction-sinusoidal", "view": "toy", "toy_steps": "200", "toy_seed": "2"})
    assert_ok(at)
    assert at.segmented_control(key="heads.toy_heads").value == 2
    assert at.select_slider(key="heads.toy_steps").value == 200
    at.button(key="heads.toy_train").click().run(timeout=180)
    assert_ok(at)
    two = _chart(at, "heads.fig_toy_match")
    two_curve = _chart(at, "heads.fig_toy_curve")
    assert len(two["data"][0]["x"]) == 2
    at.segmented_control(key="heads.toy_heads").set_value(1).run()
    assert_ok(at)
    assert at.query_params["toy_heads"] == "1"
    assert any("Before training" in m.value and "one head" in m.value for m in at.markdown)
    at.button(key="heads.toy_train").click().run(timeout=180)
    assert_ok(at)
    one = _chart(at, "heads.fig_toy_match")
    assert len(one["data"][0]["x"]) == 1 and one != two
    assert _chart(at, "heads.fig_toy_curve") != two_curve
    assert any("Trained so far with seed 2, 200 steps" in m.value for m in at.markdown)
    # back to two heads: the trained toy is kept (no second training), figure as before
    at.segmented_control(key="heads.toy_heads").set_value(2).run()
    assert _chart(at, "heads.fig_toy_match") == two


def test_the_budget_presets_load_the_original_and_bert_sizes():
    from tests.app.conftest import app_at
    at = app_at("pages/heads.py", {"model": "induction-rope"})
    assert_ok(at)
    at.button(key="heads.budget_original").click().run()
    assert_ok(at)
    assert any("h_max = ⌊512 / 64⌋ = 8" in c.value for c in at.caption)
    at.button(key="heads.budget_bert-base").click().run()
    assert any("h_max = ⌊768 / 64⌋ = 12" in c.value for c in at.caption)
    at.button(key="heads.budget_this").click().run()
    assert any("h_max = ⌊64 / 16⌋ = 4" in c.value for c in at.caption)
