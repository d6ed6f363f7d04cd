"""AppTest for the Cost page: one test per panel with a widget change that changes its figure, the
URL written back and bad URL values reported, CSV exports, the link to the Depth page, and a fresh
measurement on request. Sweeps stay short (longest n = 128 through the URL) so a run takes seconds."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.app.conftest import app_at, assert_ok, decode_array, plotly_specs
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
    assert [h[:2] for h in headers] == ["1.", "2.", "3.", "4."]
    assert len(opened.get("plotly_chart")) == 4
    assert len(opened.get("download_button")) == 5  # slopes, times, steps, memory, preset counts
    # n up to 128 is one of the settings measured when the app was built (ui.shell.precompute.EXPLORED_ANY_MODEL)
    assert any("measured when this copy of the app was built" in c.value for c in opened.caption)
    assert opened.query_params["nmax"] == ["128"] or opened.query_params["nmax"] == "128"


def test_a_setting_two_changes_away_is_measured_by_this_server():
    at = app_at(PAGE, {"nmax": "64", "b": "16"})
    assert_ok(at)
    assert any("Measured on this machine" in c.value for c in at.caption)


def test_time_panel_d_moves_the_predicted_crossover():
    at = app_at(PAGE, dict(SHORT))
    spec = chart(at, "measured: d = 64")
    assert xs(trace(spec, "predicted crossover"))[0] == 64
    names = [t["name"] for t in spec["data"]]
    assert any(n.startswith("explicit: slope") and "(predicted 2)" in n for n in names)
    assert any(n.startswith("RNN: slope") and "(predicted 1)" in n for n in names)
    at.select_slider(key="cost.d").set_value(128).run()
    assert_ok(at)
    assert xs(trace(chart(at, "measured: d = 128"), "predicted crossover"))[0] == 128
    assert at.metric[0].value == "128"


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
    at = app_at(PAGE, dict(SHORT))
    before = chart(at, "measured peak of one training step: 4 heads")
    at.segmented_control(key="cost.heads").set_value(8).run()
    assert_ok(at)
    after = chart(at, "measured peak of one training step: 8 heads")
    np.testing.assert_allclose(ys(trace(after, "h·n²")), 2 * ys(trace(before, "h·n²")))
    assert np.all(ys(trace(after, "explicit")) > ys(trace(before, "explicit")))
    explicit, chunked = ys(trace(after, "explicit")), ys(trace(after, "chunked"))
    assert explicit[-1] / explicit[0] > chunked[-1] / chunked[0]  # quadratic outgrows linear


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
    assert len(at.get("plotly_chart")) == 4


def test_tables_are_formatted_by_the_browser_not_by_a_styler(opened):
    """The five tables go out as data plus column formats, never as a pandas Styler (formatted cell by
    cell on the server on every rerun); the model-size counts keep their thousands separators."""
    at = opened
    assert len(at.dataframe) == 5 and not any(d.proto.arrow_data.HasField("styler") for d in at.dataframe)
    columns = {name: c.get("type_config", {}) for d in at.dataframe for name, c in json.loads(d.proto.columns).items()}
    assert columns["explicit ms"]["format"] == "%.3g" and columns["explicit peak MiB"]["format"] == "%.3g"
    assert columns["n"] == {"type": "number", "format": "localized", "step": 1}
    assert columns["attention GFLOP (one layer)"] == {"type": "number", "format": "localized", "step": 0.01}
