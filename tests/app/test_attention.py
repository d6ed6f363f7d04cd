"""AppTest of the Attention page: every view runs, widgets change the figures, the URL opens a view,
absurd URL values are clamped with a message, and all three kinds of attention are drawn."""

from __future__ import annotations

import numpy as np
import pytest

from tests.app.conftest import app_at, assert_ok, decode_array, page_at, plotly_specs
from tests.app.fragments import click

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
    # the note under the controls' row (a caption, so the figure stays on the first screen) names the one kind
    assert any("one kind" in str(c.value) and "Masked self-attention" in str(c.value) for c in at.caption)


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
    page = at._tree  # the kind reruns only the parts of the view that read it (keyed fragments)
    click(at, "attention.kind", "dec", page)
    assert_ok(at)
    z = decode_array(plotly_specs(at)[0]["data"][0]["z"])
    assert z.shape[0] == z.shape[1] and np.all(np.triu(z, k=1) == 0)
    click(at, "attention.kind", "enc", page)
    z = decode_array(plotly_specs(at)[0]["data"][0]["z"])
    assert z.shape == (len(src), len(src))
    assert at.query_params["kind"] == "enc"


# -- the scalar example: which key wins, and the temperature -----------------------------------------

def _toy_leader(at) -> str:
    return next(str(m.value) for m in at.markdown if "gets the largest weight" in str(m.value)
                or "same score" in str(m.value) or "share the largest" in str(m.value))


def test_scalar_example_names_the_key_with_the_largest_score():
    at = page_at(PAGE, {"model": DECODER, "view": "steps", "steps": "toy"})
    assert_ok(at)
    text = _toy_leader(at)
    assert "k3 = 0.5" in text and "0.5005" in text and "largest key" in text
    # With a negative query the smallest key has the largest score: the page says so, and names it.
    at.number_input(key="attention.toy_q").set_value(-2.0).run()
    assert_ok(at)
    text = _toy_leader(at)
    assert "k1 = 0.1" in text and "smallest" in text
    assert "The largest key" not in text
    weights = [float(w) for w in plotly_specs(at)[0]["data"][1]["text"]]
    assert np.argmax(weights) == 0 and f"({max(weights):.4f})" in text
    at.number_input(key="attention.toy_q").set_value(0.0).run()
    assert "same score" in _toy_leader(at)


def test_scalar_example_follows_the_temperature_slider():
    at = page_at(PAGE, {"model": DECODER, "view": "steps", "steps": "toy"})
    latex = " ".join(str(e.value) for e in at.latex)
    assert "(0.2249, 0.2747, 0.5005)" in latex and r"\sqrt{d_k}\,T" in latex
    bars = decode_array(plotly_specs(at)[0]["data"][1]["y"])
    at.select_slider(key="attention.temp").set_value(0.1).run()
    assert_ok(at)
    latex = " ".join(str(e.value) for e in at.latex)
    assert "0.2249" not in latex and "(2, 4, 10)" in latex  # scores q k / T
    assert r"\,/\,0.1" in latex  # T is written in the formula
    cold = decode_array(plotly_specs(at)[0]["data"][1]["y"])
    assert cold.max() > 0.99 > bars.max()  # a low temperature sharpens the example's weights


def test_scalar_tip_points_to_the_scale_view():
    at = page_at(PAGE, {"model": DECODER, "view": "steps", "steps": "toy"})
    texts = _texts(at)
    assert "this is why real heads divide" not in texts and "Why divide by √d_k" in texts
    at.button(key="attention.to_scale").click().run()
    assert_ok(at)
    assert at.query_params["view"] == "scale"
    assert any("Why divide by √d_k" == str(h.value) for h in at.subheader)


# -- why divide by sqrt(d_k) -----------------------------------------------------------------------------

def _metric(at, start: str) -> float:
    return float(next(m.value for m in at.metric if m.label.startswith(start)).split()[0])


def test_scale_view_histogram_follows_dk_and_the_scaling():
    at = page_at(PAGE, {"model": DECODER, "view": "scale"})
    assert_ok(at)
    hist, max_w, entropy, jac, model = plotly_specs(at)
    assert _metric(at, "measured spread") == pytest.approx(8.0, rel=0.05)  # d_k = 64 by default
    x0 = decode_array(hist["data"][0]["x"])
    at.select_slider(key="attention.dk").set_value(1024).run()
    assert_ok(at)
    assert at.query_params["dk"] == "1024"
    assert _metric(at, "measured spread") == pytest.approx(32.0, rel=0.05)
    x1 = decode_array(plotly_specs(at)[0]["data"][0]["x"])
    assert np.ptp(x1) > 3 * np.ptp(x0)  # the histogram widens like sqrt(d_k)
    at.toggle(key="attention.dk_scaled").set_value(True).run()
    assert_ok(at)
    assert at.query_params["dk_scaled"] == "1"
    x2 = decode_array(plotly_specs(at)[0]["data"][0]["x"])
    assert np.ptp(x2) < np.ptp(x1) / 10  # divided by sqrt(1024) = 32
    assert _metric(at, "spread of q·k / √d_k") == pytest.approx(1.0, rel=0.05)


def test_scale_view_curves_show_unscaled_softmax_saturating():
    at = page_at(PAGE, {"model": DECODER, "view": "scale", "dk_keys": "8"})
    assert_ok(at)
    _, max_w, entropy, jac, _ = plotly_specs(at)
    dks = decode_array(max_w["data"][0]["x"])
    assert dks[0] == 1 and dks[-1] == 1024
    scaled, unscaled = (decode_array(t["y"]) for t in max_w["data"])
    assert unscaled[-1] > 0.9 and unscaled[-1] > scaled[-1] + 0.4
    assert decode_array(entropy["data"][1]["y"])[-1] < decode_array(entropy["data"][0]["y"])[-1]
    assert decode_array(jac["data"][1]["y"])[-1] < 0.3 * decode_array(jac["data"][0]["y"])[-1]
    assert entropy["layout"]["shapes"][1]["y0"] == pytest.approx(3.0)  # log2(8): the uniform limit
    # More keys, or another seed: the curves are redrawn from new draws.
    at.slider(key="attention.dk_keys").set_value(64).run()
    assert_ok(at)
    assert at.query_params["dk_keys"] == "64"
    assert not np.allclose(decode_array(plotly_specs(at)[1]["data"][1]["y"]), unscaled)
    before = decode_array(plotly_specs(at)[0]["data"][0]["y"])
    at.number_input(key="attention.dk_seed").set_value(7).run()
    assert_ok(at)
    assert at.query_params["dk_seed"] == "7"
    assert not np.allclose(decode_array(plotly_specs(at)[0]["data"][0]["y"]), before)


def test_scale_view_shows_the_models_own_spread_per_head():
    at = page_at(PAGE, {"model": DECODER, "view": "scale"})
    model = plotly_specs(at)[-1]
    assert [t["name"] for t in model["data"]] == ["layer 0", "layer 1"]
    assert all(len(decode_array(t["y"])) == 4 for t in model["data"])  # 4 heads
    assert model["layout"]["shapes"][0]["y0"] == pytest.approx(4.0)  # d_head = 16
    at = page_at(PAGE, {"model": ENCDEC, "view": "scale", "kind": "cross"})
    assert_ok(at)
    assert "cross-attention" in _texts(at)


def test_scale_view_url_values_snap_with_a_message():
    at = page_at(PAGE, {"model": DECODER, "view": "scale", "dk": "100", "dk_keys": "5000", "dk_seed": "-3"})
    assert_ok(at)
    warnings = " ".join(_warnings(at))
    assert "dk=100" in warnings and "dk_keys" in warnings
    assert at.select_slider(key="attention.dk").value == 128  # the nearest stop on a log scale
    assert at.slider(key="attention.dk_keys").value == 128
