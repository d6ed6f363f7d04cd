"""AppTest for the Positions page: it runs, its widgets change its figures, bad URL values are clamped."""

from __future__ import annotations

import json

import numpy as np
import pytest

from core import checkpoints
from core.analysis import positions as P
from core.tasks import get_task
from tests.app.conftest import assert_ok, decode_array, page_at
from tests.app.fragments import click

PAGE = "pages/positions.py"

pytestmark = pytest.mark.skipif(not checkpoints.MANIFEST.is_file(),
                                reason="bundled models not built (python -m core.train --all)")


def chart(at, key: str) -> dict:
    """The plotly spec of the chart created with `key`."""
    for el in at.get("plotly_chart"):
        if el.proto.id.endswith(key):
            return json.loads(el.proto.spec)
    raise AssertionError(f"no chart {key}; have {[el.proto.id.rsplit('-', 1)[-1] for el in at.get('plotly_chart')]}")


def frame(at, column: str):
    """The pandas value of the first dataframe that has `column`."""
    for el in at.dataframe:
        if column in el.value.columns:
            return el.value
    raise AssertionError(f"no dataframe with a {column!r} column")


def z(at, key: str, trace: int = 0) -> np.ndarray:
    """The decoded z array of one trace of a chart."""
    return decode_array(chart(at, key)["data"][trace]["z"])


def test_page_runs_with_every_panel():
    at = page_at(PAGE)
    assert_ok(at)
    assert at.title[0].value == "Positions"
    headers = [h.value for h in at.header]
    assert len([h for h in headers if h[:2] in {f"{i}." for i in range(1, 8)}]) == 7
    for key in ("fig_table", "fig_learned", "fig_wavelengths", "fig_gram", "fig_profile", "fig_mk",
                "fig_rope_plane", "fig_rope_grid", "fig_neigh", "fig_rows", "fig_pooled", "fig_swap_0",
                "fig_swap_1", "fig_swap_acc"):
        chart(at, "positions." + key)
    assert len(at.get("latex")) >= 7 and not at.error
    # the sinusoidal table is exact and its Gram diagonals constant (the metric on the page says so)
    assert np.allclose(z(at, "positions.fig_table"), P.sinusoidal_table(64, 64), atol=1e-6)
    assert float(at.metric[0].value) < 1e-9


def test_base_and_width_sliders_change_the_table():
    at = page_at(PAGE)
    before = z(at, "positions.fig_table")
    page = at._tree  # the controls rerun only the figures that read them (keyed fragments), not themselves
    click(at, "positions.base", 10, page)
    assert_ok(at)
    after = z(at, "positions.fig_table")
    assert after.shape == before.shape and not np.allclose(after, before)
    assert np.allclose(after, P.sinusoidal_table(64, 64, 10), atol=1e-6)
    click(at, "positions.d", 16, page)
    assert z(at, "positions.fig_table").shape == (64, 16)
    assert z(at, "positions.fig_mk").shape == (16, 16)
    assert at.query_params["base"] == "10" and at.query_params["pe_d"] == "16"  # the view is in the URL


def test_swap_selector_changes_attention_and_accuracy():
    at = page_at(PAGE, {"model": "induction-sinusoidal"})
    assert_ok(at)
    trained = z(at, "positions.fig_swap_0")
    swapped_none = z(at, "positions.fig_swap_1")
    assert at.selectbox(key="positions.swap").value == "none"
    at.selectbox(key="positions.swap").set_value("rope").run()
    assert_ok(at)
    assert np.allclose(z(at, "positions.fig_swap_0"), trained)  # the trained run stays
    swapped_rope = z(at, "positions.fig_swap_1")
    assert not np.allclose(swapped_rope, swapped_none)
    acc = chart(at, "positions.fig_swap_acc")["data"][0]
    assert list(acc["x"]) == ["trained: sinusoidal", "swapped: rope"]
    from ui.shell.models import get_model
    model, _ = get_model("induction-sinusoidal")
    assert decode_array(acc["y"])[1] == pytest.approx(
        P.scheme_accuracy(model, get_task("induction"), "rope", n_samples=128))
    assert "learned" not in at.selectbox(key="positions.swap").options  # no table to swap to


def test_order_pair_gives_one_answer_without_positions():
    at = page_at(PAGE)
    table = frame(at, "run with")
    none = table[table["run with"].str.startswith("none")]
    assert list(none["input"]) == ["A", "B"]
    assert none["model says"].nunique() == 1  # dog bites man = man bites dog
    assert "0" in {t for row in chart(at, "positions.fig_rows")["data"][0]["text"] for t in row}
    assert rows_metric(at) < 1e-5  # B's rows are A's rows, reordered
    at.radio(key="positions.order_scheme").set_value("own").run()
    assert_ok(at)
    assert rows_metric(at) > 1e-3  # with positions they are not
    own = frame(at, "run with")
    assert set(own["run with"]) == {"none (no positions)", "sinusoidal (added table)"}


def rows_metric(at) -> float:
    """The order panel's row-error metric as a number."""
    return float(next(m.value for m in at.metric if m.label.startswith("Rows:")))


def test_url_params_are_clamped_with_a_note():
    at = page_at(PAGE, {"pe_n": "99999", "pe_d": "7", "base": "123", "k": "abc", "layer": "99",
                        "swap": "alibi", "t1": "-5", "ext": "3"})
    assert_ok(at)
    assert at.slider(key="positions.n").value == 256
    assert at.slider(key="positions.d").value == 6
    assert at.select_slider(key="positions.base").value == 100
    assert at.slider(key="positions.k").value == 3
    assert at.slider(key="positions.layer").value == 1
    assert at.number_input(key="positions.t1").value == 0
    notes = " ".join(w.value for w in at.warning)
    for fragment in ("pe_n=99999", "pe_d=7", "base=123", "'abc'", "layer=99", "'alibi'"):
        assert fragment in notes
    assert z(at, "positions.fig_table").shape == (256, 6)
    assert at.select_slider(key="positions.ext").value == 4  # ext=3 snapped to the nearest length on the slider


def test_extrapolation_runs_on_request_and_the_learned_model_refuses_politely():
    at = page_at(PAGE)
    assert not [c for c in at.get("plotly_chart") if c.proto.id.endswith("positions.fig_ext")]
    at.button(key="positions.ext_go").click().run()
    assert_ok(at)
    data = chart(at, "positions.fig_ext")["data"]
    names = [t["name"] for t in data]
    assert {"none", "sinusoidal", "learned", "rope", "learned: refused"} <= set(names)
    learned = data[names.index("learned")]
    assert max(decode_array(learned["x"])) == 21  # nothing drawn past its table
    assert min(decode_array(data[names.index("learned: refused")]["x"])) > 21
    sin = data[names.index("sinusoidal")]
    assert max(decode_array(sin["x"])) == 105  # it runs at five times its training length
    errors = [e.value for e in at.error]  # default view: L = 20, 41 tokens
    assert len(errors) == 1 and "cannot extrapolate" in errors[0] and "21 positions" in errors[0]
    at.select_slider(key="positions.ext").set_value(10).run()
    assert_ok(at)
    assert not at.error


@pytest.mark.parametrize("query", [{"model": "induction-rope", "input": "<bos>"},
                                   {"model": "reverse-encdec", "input": "1"}])
def test_a_one_token_input_renders_every_panel(query):
    at = page_at(PAGE, query)
    assert_ok(at)
    assert len([h for h in at.header if h.value[:2] in {f"{i}." for i in range(1, 8)}]) == 7
    assert z(at, "positions.fig_swap_0").shape == (1, 1)  # one query, one key
    assert z(at, "positions.fig_swap_1").shape == (1, 1)
    if query["model"] == "induction-rope":  # <bos> alone scores nothing (reverse-encdec scores its output)
        assert not [c for c in at.caption if "scored positions right" in c.value]
    at.slider(key="positions.layer").set_value(1).run()
    assert_ok(at)


def test_decay_base_and_width_change_the_decay_figure():
    at = page_at(PAGE)  # the default model does not use RoPE: the page says it uses induction-rope's q and k
    assert_ok(at)
    spec = chart(at, "positions.fig_decay")
    names = [t["name"] for t in spec["data"]]
    assert names == ["upper bound (d = 16)", "random q, k (d = 16)", "induction-rope q, k (its d = 16)"]
    assert any("induction-rope" in c.value and "not RoPE" in c.value for c in at.caption)
    bound, model = (decode_array(spec["data"][i]["y"]) for i in (0, 2))
    assert np.allclose(bound, P.rope_decay_bound(np.arange(256), 16, 10000))
    at.select_slider(key="positions.decay_base").set_value(100).run()
    assert_ok(at)
    spec2 = chart(at, "positions.fig_decay")
    assert np.allclose(decode_array(spec2["data"][0]["y"]), P.rope_decay_bound(np.arange(256), 16, 100))
    assert not np.allclose(decode_array(spec2["data"][2]["y"]), model)  # the model's vectors turn at the new base
    assert at.query_params["decay_base"] == "100"
    at.radio(key="positions.decay_d").set_value(128).run()
    assert_ok(at)
    assert chart(at, "positions.fig_decay")["data"][0]["name"] == "upper bound (d = 128)"
    assert at.query_params["decay_d"] == "128"


def test_decay_uses_the_sidebars_rope_model():
    at = page_at(PAGE, {"model": "induction-rope", "decay_base": "500"})
    assert_ok(at)
    assert at.select_slider(key="positions.decay_base").value == 500
    assert any("the sidebar's model, induction-rope" in c.value for c in at.caption)
