"""AppTest for the Cost page: one test per panel with a widget change that changes its figure, the
URL written back and bad URL values reported, CSV exports, the link to the Depth page, and a fresh
measurement on request, and the defaults showing the crossover the page is about. Sweeps stay short (longest
n = 128 through the URL) so a run takes seconds, except the one default visit (marked slow)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from tests.app.conftest import ROOT, app_at, assert_ok, decode_array, plotly_specs
from tests.app.fragments import click

PAGE = "pages/cost.py"
SHORT = {"nmax": "128"}  # n = 32, 64, 128


def chart(at, title: str) -> dict:
    """The plotly spec whose title starts with `title`."""
    for spec in plotly_specs(at):
        text = (spec["layout"].get("title") or {}).get("text") or ""
        if text.startswith(title):
            return spec
    raise AssertionError(f"no chart titled {title!r}: {[s['layout'].get('title') for s in plotly_specs(at)]}")


def trace(spec: dict, name_start: str) -> dict:
    return next(t for t in spec["data"] if t.get("name", "").startswith(name_start))


def xs(t: dict) -> np.ndarray:
    return np.asarray(decode_array(t["x"]), dtype=np.float64)


def ys(t: dict) -> np.ndarray:
    return np.asarray(decode_array(t["y"]), dtype=np.float64)


@pytest.fixture(scope="module")
def opened():
    at = app_at(PAGE, dict(SHORT))
    assert_ok(at)
    return at


def test_page_draws_every_panel_with_its_exports(opened):
    headers = [h.value for h in opened.header]
    assert [h[:2] for h in headers] == ["1.", "2.", "3.", "4.", "5."]
    assert len(opened.get("plotly_chart")) == 7  # time, steps, gradient, memory, bytes moved, presets, scaling
    assert len(opened.get("download_button")) == 8  # slopes, times, steps, memory, bytes, presets, 2 x scaling
    # n up to 128 is one of the settings measured when the app was built (ui.shell.precompute.EXPLORED_ANY_MODEL)
    assert any("measured when this copy of the app was built" in c.value for c in opened.caption)
    assert opened.query_params["nmax"] == ["128"] or opened.query_params["nmax"] == "128"


def test_a_setting_two_changes_away_is_measured_by_this_server():
    at = app_at(PAGE, {"nmax": "64", "b": "16"})
    assert_ok(at)
    assert any("Measured on this machine" in c.value for c in at.caption)


def test_time_panel_d_moves_the_predicted_crossover():
    at = app_at(PAGE, dict(SHORT))
    spec = chart(at, "measured: d = 128")
    assert xs(trace(spec, "predicted crossover"))[0] == 128
    names = [t["name"] for t in spec["data"]]
    assert any(n.startswith("explicit: slope") and "(predicted 2)" in n for n in names)
    assert any(n.startswith("RNN: slope") and "(predicted 1)" in n for n in names)
    at.select_slider(key="cost.d").set_value(256).run()
    assert_ok(at)
    assert xs(trace(chart(at, "measured: d = 256"), "predicted crossover"))[0] == 256
    assert at.metric[0].value == "256"


def test_the_default_predicted_crossover_lies_well_inside_the_sweep():
    """The page's headline, n²·d against n·d² crossing at n = d, must be where a default visit looks: the
    predicted crossover at least two doublings from either end of the default sweep (d = 64 in 32 ... 1,024 sat
    one doubling from its start, and the measured lines crossed at the sweep's last point or not at all)."""
    from ui.cost.view import N_MIN, URL

    d, nmax = URL.d.default, URL.nmax.default
    assert 4 * N_MIN <= d <= nmax // 4, (N_MIN, d, nmax)


def crossover_metric(at) -> str:
    """The value of the "measured crossover" metric, e.g. 'n ≈ 512' or 'none in range'."""
    return next(m.value for m in at.metric if m.label.startswith("measured crossover"))


@pytest.mark.slow
def test_a_default_visit_shows_the_measured_lines_cross_with_margin():
    """Opened with no settings, the time chart shows what the page is about: the measured explicit-attention and
    RNN lines cross inside the sweep, at least a doubling from its longest n, and explicit attention ends at
    least twice the RNN's time (it had been 1.4-2.7x at the old defaults, and "none in range" where the matrix
    products run faster than here). Measured on this machine, or read from the shipped results a visit shows."""
    from ui.cost.view import N_MIN, URL

    # the defaults: a full sweep (5-15 s alone, minutes on a loaded machine) unless the shipped results hold it
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=600)
    at.run()
    at.switch_page(PAGE).run()
    assert_ok(at)
    nmax = URL.nmax.default
    shown = crossover_metric(at)
    assert shown.startswith("n ≈ "), f"the default view says {shown!r}"
    n_cross = float(shown.removeprefix("n ≈ ").replace(",", ""))
    assert 2 * N_MIN <= n_cross <= nmax / 2
    spec = chart(at, f"measured: d = {URL.d.default}")
    explicit, rnn = trace(spec, "explicit: slope"), trace(spec, "RNN: slope")
    assert xs(explicit)[-1] == xs(rnn)[-1] == nmax
    assert ys(explicit)[0] < ys(rnn)[0] and ys(explicit)[-1] >= 2 * ys(rnn)[-1]


def test_steps_panel_counts_grow_with_the_longest_n():
    at = app_at(PAGE, {"nmax": "64"})
    spec = chart(at, "one layer")
    assert ys(trace(spec, "RNN"))[-1] == 64
    assert at.get("page_link"), "the Depth page's layers-needed model is linked, not copied"
    click(at, "cost.nmax", 128, at._tree)  # reruns only the parts that read n (keyed fragments)
    assert_ok(at)
    spec = chart(at, "one layer")
    rnn, attention = ys(trace(spec, "RNN")), ys(trace(spec, "attention"))
    np.testing.assert_array_equal(rnn[:3], [32, 64, 128])
    assert np.all(attention == 1)


def test_memory_panel_more_heads_more_pattern_memory():
    at = app_at(PAGE, {**SHORT, "heads": "4"})
    before = chart(at, "measured peak of one training step: 4 heads")
    at.segmented_control(key="cost.heads").set_value(8).run()  # the default
    assert_ok(at)
    after = chart(at, "measured peak of one training step: 8 heads")
    np.testing.assert_allclose(ys(trace(after, "h·n²")), 2 * ys(trace(before, "h·n²")))
    assert np.all(ys(trace(after, "explicit")) > ys(trace(before, "explicit")))
    explicit, chunked = ys(trace(after, "explicit")), ys(trace(after, "chunked"))
    assert explicit[-1] / explicit[0] > chunked[-1] / chunked[0]  # quadratic outgrows linear


def test_memory_chart_has_the_rnn_line_linear_in_n(opened):
    rnn = trace(chart(opened, "measured peak of one training step"), "RNN")
    y = ys(rnn)
    assert rnn["line"]["dash"] == "dot"
    assert np.all(np.diff(y) > 0) and 1.6 < y[-1] / y[-2] < 2.2  # doubling n about doubles the states kept


def test_gradient_panel_length_changes_the_measured_curves():
    at = app_at(PAGE, dict(SHORT))
    before = chart(at, "measured: d = 128, 8 heads, n = 64")
    rnn = ys(trace(before, "RNN"))
    assert np.all(np.isfinite(rnn)) and rnn[0] < 1e-6 * rnn[-1]  # fades over 63 steps
    assert before["layout"]["yaxis"]["type"] == "log"
    at.select_slider(key="cost.gn").set_value(128).run()
    assert_ok(at)
    after = chart(at, "measured: d = 128, 8 heads, n = 128")
    assert len(ys(trace(after, "RNN"))) == 128 and ys(trace(after, "RNN"))[0] < rnn[0]
    assert at.query_params["gn"] in (["128"], "128")


def test_traffic_panel_counts_fewer_bytes_with_bigger_blocks():
    at = app_at(PAGE, dict(SHORT))
    before = ys(trace(chart(at, "counted, not measured: d = 128, 8 heads, b = 32"), "tiled"))
    explicit = ys(trace(chart(at, "counted, not measured: d = 128"), "explicit"))
    assert np.all(explicit > before)
    at.segmented_control(key="cost.b").set_value(64).run()
    assert_ok(at)
    after = ys(trace(chart(at, "counted, not measured: d = 128, 8 heads, b = 64"), "tiled"))
    assert np.all(after <= before) and after[-1] < before[-1]
    assert any("Counts from the formulas" in c.value for c in at.caption)


def test_scaling_panel_switches_from_depth_to_width_and_counts_match_measurements():
    at = app_at(PAGE, dict(SHORT))
    spec = chart(at, "small models")
    measured = next(t for t in spec["data"] if t["name"].startswith("measured"))
    assert xs(measured).tolist() == [1, 2, 4, 8]
    counted = next(t for t in spec["data"] if t["name"].startswith("counted"))
    np.testing.assert_allclose(ys(counted), ys(measured))  # the parameter formula holds exactly here
    large = next(d.value for d in at.dataframe if "model" in d.value.columns)
    assert int(large.loc[large["model"] == "GPT-2 small", "parameters (counted)"].iloc[0]) == 124_439_808
    at.segmented_control(key="cost.vary").set_value("width").run()
    assert_ok(at)
    measured = next(t for t in chart(at, "small models")["data"] if t["name"].startswith("measured"))
    assert xs(measured).tolist() == [32, 64, 128, 256]


def test_presets_panel_switches_to_bert_base():
    at = app_at(PAGE, dict(SHORT))
    original = chart(at, "the original Transformer")
    at.segmented_control(key="cost.preset").set_value("bert-base").run()
    assert_ok(at)
    bert = chart(at, "BERT-base")
    ratio = ys(trace(bert, "attention"))[0] / ys(trace(original, "attention"))[0]
    assert ratio == pytest.approx(768 / 512)
    assert at.query_params["preset"] in (["bert-base"], "bert-base")


def test_measure_again_takes_a_fresh_measurement():
    at = app_at(PAGE, dict(SHORT))
    stamp = at.session_state["cost.run"]
    at.button(key="cost.remeasure").click().run()
    assert_ok(at)
    assert at.session_state["cost.run"] == stamp + 1
    assert any("Measured on this machine" in c.value for c in at.caption)  # no longer the build's figures


@pytest.mark.parametrize("query", [{"d": "7", "nmax": "99999999"}, {"heads": "three", "b": "-4", "nmax": "128"},
                                   {"preset": "<script>", "nmax": "128"}])
def test_bad_url_values_are_reported_and_replaced(query):
    at = app_at(PAGE, query)
    assert_ok(at)
    assert at.warning or at.error
    assert len(at.get("plotly_chart")) == 7


def test_tables_are_formatted_by_the_browser_not_by_a_styler(opened):
    """The five tables go out as data plus column formats, never as a pandas Styler (formatted cell by
    cell on the server on every rerun); the model-size counts keep their thousands separators."""
    at = opened
    assert len(at.dataframe) == 8 and not any(d.proto.arrow_data.HasField("styler") for d in at.dataframe)
    columns = {name: c.get("type_config", {}) for d in at.dataframe for name, c in json.loads(d.proto.columns).items()}
    assert columns["explicit ms"]["format"] == "%.3g" and columns["explicit peak MiB"]["format"] == "%.3g"
    assert columns["n"] == {"type": "number", "format": "localized", "step": 1}
    assert columns["attention GFLOP (one layer)"] == {"type": "number", "format": "localized", "step": 0.01}
