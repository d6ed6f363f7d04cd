"""AppTest of the Attention page: every view runs, widgets change the figures, the URL opens a view,
absurd URL values are clamped with a message, and all three kinds of attention are drawn."""

from __future__ import annotations

import numpy as np
import pytest

from tests.app.conftest import app_at, assert_ok, decode_array, page_at, plotly_specs

PAGE = "pages/attention.py"
DECODER, ENCODER, ENCDEC = "induction-sinusoidal", "agreement-encoder", "reverse-encdec"

pytestmark = pytest.mark.usefixtures("bundled_models")


@pytest.fixture(scope="module")
def bundled_models():
    from core.checkpoints import read_manifest

    ids = {e["id"] for e in read_manifest()}
    missing = {DECODER, ENCODER, ENCDEC} - ids
    if missing:
        pytest.fail(f"bundled models missing from assets/models/manifest.json: {sorted(missing)}")


def _heatmaps(spec: dict) -> list[dict]:
    return [t for t in spec["data"] if t["type"] == "heatmap"]


def _texts(at) -> str:
    return "\n".join(str(e.value) for kind in ("markdown", "latex", "caption", "success", "error", "warning", "info")
                     for e in at.get(kind))


def _warnings(at) -> list[str]:
    return [str(w.value) for w in at.warning]


def test_page_alone_draws_the_grid_of_every_head():
    at = page_at(PAGE, {"model": DECODER})
    assert_ok(at)
    model = at.session_state["glassbox.model"]
    assert model == DECODER
    (grid,) = plotly_specs(at)
    heat = _heatmaps(grid)
    assert len(heat) == 2 * 4  # 2 layers x 4 heads
    for t in heat:
        z = decode_array(t["z"])
        np.testing.assert_allclose(z.sum(axis=1), 1.0, atol=1e-4)  # every row is a distribution
    assert grid["layout"]["coloraxis"]["cmin"] == 0 and grid["layout"]["coloraxis"]["cmax"] == 1


def test_view_buttons_open_one_view_and_put_it_in_the_url():
    at = page_at(PAGE, {"model": DECODER})
    assert at.segmented_control(key="attention.view").value == "grid"
    assert "view" not in at.query_params  # the default view keeps the link short
    assert not at.main.selectbox  # no query picker: the grid is about every query at once
    at.segmented_control(key="attention.view").set_value("head").run()
    assert_ok(at)
    heat, lines, bars = plotly_specs(at)  # only the open view is drawn
    assert "layer 0, head 0" in heat["layout"]["title"]["text"]
    last = len(at.session_state["glassbox.input"].split()) - 1
    assert at.selectbox(key="attention.query").value == last  # the last query token, by default
    assert at.query_params["view"] == "head"
    at.segmented_control(key="attention.view").set_value("export").run()
    assert_ok(at)
    assert not plotly_specs(at) and len(at.get("download_button")) == 2
    assert at.query_params["view"] == "export" and at.query_params["query"] == str(last)  # the row is kept


def test_runs_from_the_app_entry_point():
    at = app_at(PAGE, {"model": DECODER})
    assert_ok(at)
    assert len(plotly_specs(at)) == 1


def test_head_buttons_move_the_frame_and_change_the_head_view():
    at = page_at(PAGE, {"model": DECODER, "view": "head"})
    assert_ok(at)
    before = plotly_specs(at)[0]
    z0 = decode_array(_heatmaps(before)[0]["z"])
    at.segmented_control(key="attention.head").set_value(3).run()
    assert_ok(at)
    after = plotly_specs(at)[0]
    assert "head 3" in after["layout"]["title"]["text"]
    assert not np.allclose(decode_array(_heatmaps(after)[0]["z"]), z0)
    assert at.query_params["head"] == "3"
    # The query selector moves the orange outline and the bar chart.
    at.selectbox(key="attention.query").set_value(2).run()
    spec = plotly_specs(at)
    assert spec[0]["layout"]["shapes"][0]["y0"] == 1.5
    assert "query 2:" in spec[2]["layout"]["title"]["text"]


def test_url_opens_the_exact_view():
    at = page_at(PAGE, {"model": DECODER, "layer": "1", "head": "2", "query": "4", "view": "head", "temp": "0.5"})
    assert_ok(at)
    assert not _warnings(at)
    assert at.segmented_control(key="attention.layer").value == 1
    assert at.segmented_control(key="attention.head").value == 2
    assert at.selectbox(key="attention.query").value == 4
    assert at.select_slider(key="attention.temp").value == 0.5
    heat, lines, bars = plotly_specs(at)
    assert "layer 1, head 2" in heat["layout"]["title"]["text"] and "T = 0.5" in heat["layout"]["title"]["text"]
    assert "query 4:" in bars["layout"]["title"]["text"]


def test_absurd_url_values_are_clamped_with_a_message():
    at = page_at(PAGE, {"model": DECODER, "layer": "99", "head": "-7", "query": "abc", "temp": "1e9",
                        "view": "nonsense", "steps": "<script>"})
    assert_ok(at)
    warnings = " ".join(_warnings(at))
    assert "layer=99" in warnings and "0..1" in warnings
    assert "head=-7" in warnings
    assert "query='abc'" in warnings
    assert "temp" in warnings
    assert "view='nonsense'" in warnings
    assert at.segmented_control(key="attention.layer").value == 1
    assert at.segmented_control(key="attention.head").value == 0
    assert at.select_slider(key="attention.temp").value == 10.0
    assert len(plotly_specs(at)) == 1  # fell back to the grid view


def test_unknown_model_in_the_url_falls_back_with_a_message():
    at = page_at(PAGE, {"model": "no-such-model"})
    assert_ok(at)
    assert any("no-such-model" in w for w in _warnings(at))


def test_step_by_step_matches_the_model():
    at = page_at(PAGE, {"model": DECODER, "view": "steps", "layer": "1", "head": "1"})
    assert_ok(at)
    assert any("match the model" in str(s.value) for s in at.success)
    table = at.dataframe[0].value
    assert len(table) == len(at.session_state["glassbox.input"].split())
    np.testing.assert_allclose(table["weight α"].sum(), 1.0, atol=1e-5)


def test_the_seeds_scalar_example_shows_the_hand_computed_numbers():
    at = page_at(PAGE, {"model": DECODER, "view": "steps", "steps": "toy"})
    assert_ok(at)
    latex = " ".join(str(e.value) for e in at.latex)
    assert "(0.2, 0.4, 1)" in latex
    assert "(0.2249, 0.2747, 0.5005)" in latex
    assert "= 1.4516" in latex
    # Editing the numbers changes the result; a bad number is reported, never a crash.
    at.number_input(key="attention.toy_q").set_value(20.0).run()
    latex = " ".join(str(e.value) for e in at.latex)
    assert "0.5005" not in latex and "(0.0003, 0.0025, 0.9972)" in latex
    at.text_input(key="attention.toy_keys").input("0.1 oops 0.5").run()
    assert_ok(at)
    assert any("not a number" in str(e.value) for e in at.error)
    at.button(key="attention.toy_reset").click().run()
    assert "(0.2249, 0.2747, 0.5005)" in " ".join(str(e.value) for e in at.latex)


def test_temperature_changes_entropy_and_reports_predictions():
    at = page_at(PAGE, {"model": DECODER, "view": "temp"})
    assert_ok(at)
    (fig,) = plotly_specs(at)
    before, after = decode_array(fig["data"][0]["y"]), decode_array(fig["data"][1]["y"])
    np.testing.assert_allclose(before, after)  # T = 1 on both sides
    at.select_slider(key="attention.temp").set_value(0.1).run()
    assert_ok(at)
    (fig,) = plotly_specs(at)
    before, after = decode_array(fig["data"][0]["y"]), decode_array(fig["data"][1]["y"])
    assert after.mean() < before.mean()  # a lower temperature sharpens every row
    limit = decode_array(fig["data"][2]["y"])
    assert np.all(before <= limit + 1e-6)
    assert at.query_params["temp"] == "0.1"
    labels = [m.label for m in at.metric]
    assert "right answers at T = 0.1" in labels
    (table,) = at.table
    assert "predicted, T = 0.1" in table.value.columns and len(table.value) > 0


def test_compare_two_heads_and_two_inputs():
    at = page_at(PAGE, {"model": DECODER, "view": "compare", "layer2": "1", "head2": "3"})
    assert_ok(at)
    a, b, diff = plotly_specs(at)
    za, zb = decode_array(a["data"][0]["z"]), decode_array(b["data"][0]["z"])
    np.testing.assert_allclose(decode_array(diff["data"][0]["z"]), za - zb, atol=1e-5)
    assert diff["data"][0]["zmid"] == 0 and diff["data"][0]["zmin"] == -diff["data"][0]["zmax"]
    assert "layer 1, head 3" in b["layout"]["title"]["text"]
    at.radio(key="attention.cmp").set_value("inputs").run()
    assert_ok(at)
    assert len(plotly_specs(at)) == 3
    at.text_input(key="attention.input2").input("A B zzz").run()
    assert_ok(at)
    assert any("input B" in str(e.value) for e in at.error)


def test_export_offers_csv_and_npz():
    at = page_at(PAGE, {"model": DECODER, "view": "export"})
    assert_ok(at)
    labels = [b.proto.label for b in at.get("download_button")]
    assert any("CSV" in label for label in labels) and any(".npz" in label for label in labels)
    assert "[2, 4," in _texts(at)


def test_decoder_self_attention_is_masked():
    at = page_at(PAGE, {"model": DECODER, "view": "head"})
    assert_ok(at)
    z = decode_array(plotly_specs(at)[0]["data"][0]["z"])
    assert np.all(np.triu(z, k=1) == 0)  # no query sees a later key
    assert any("one kind" in str(i.value) for i in at.info)


def test_encoder_self_attention_sees_both_ways():
    at = page_at(PAGE, {"model": ENCODER, "view": "head"})
    assert_ok(at)
    z = decode_array(plotly_specs(at)[0]["data"][0]["z"])
    assert np.triu(z, k=1).sum() > 0.01  # queries do look at later keys


def test_cross_attention_queries_from_target_keys_from_source():
    at = page_at(PAGE, {"model": ENCDEC, "view": "head", "kind": "cross"})
    assert_ok(at)
    heat = plotly_specs(at)[0]
    src = at.session_state["glassbox.input"].split()
    z = decode_array(heat["data"][0]["z"])
    assert z.shape[1] == len(src)  # keys: the source tokens
    assert heat["layout"]["xaxis"]["title"]["text"] == "key (source token)"
    assert heat["layout"]["yaxis"]["title"]["text"] == "query (target token)"
    assert heat["data"][0]["y"][0].endswith("<bos>")  # the decoder's input starts with <bos>
    # The same model's other two kinds.
    at.segmented_control(key="attention.kind").set_value("dec").run()
    assert_ok(at)
    z = decode_array(plotly_specs(at)[0]["data"][0]["z"])
    assert z.shape[0] == z.shape[1] and np.all(np.triu(z, k=1) == 0)
    at.segmented_control(key="attention.kind").set_value("enc").run()
    z = decode_array(plotly_specs(at)[0]["data"][0]["z"])
    assert z.shape == (len(src), len(src))
    assert at.query_params["kind"] == "enc"
