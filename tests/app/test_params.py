"""ui.params: a URL parameter declared once seeds, clamps with a note, binds its widget and writes back."""

from __future__ import annotations

from streamlit.testing.v1 import AppTest

from tests.app.conftest import TIMEOUT, assert_ok


def script():
    import streamlit as st

    from ui import query
    from ui.params import Choice, Float, Int, Multi, Params, Text

    url = Params(
        "demo",
        Int("n", 4, lo=1, hi=10), Int("even", 8, lo=2, hi=64, step=2),
        Float("t", 1.0, lo=0.1, hi=10.0, stops=(0.1, 0.5, 1.0, 2.0, 10.0), log=True, omit_default=True),
        Choice("pick", "b", choices=("a", "b", "c")), Multi("many", ("x",), choices=("x", "y", "z")),
        Text("words", "hello"), Int("layer", 0, lo=0, hi=0),
    )
    for p in url:
        if p.name != "layer":
            p.seed()
    query.show_notes()
    hi = st.session_state.get("demo.hi", 3)
    st.write("n", url.n.widget(st.slider, "n"))
    st.write("even", url.even.widget(st.slider, "even", step=2))
    st.write("t", url.t.widget(st.select_slider, "t"))
    st.write("pick", url.pick.widget(st.radio, "pick"))
    st.write("many", url.many.widget(st.multiselect, "many"))
    st.write("words", url.words.widget(st.text_input, "words"))
    st.write("layer", url.layer.widget(st.slider, "layer", hi=hi))


def run(**params) -> AppTest:
    at = AppTest.from_function(script, default_timeout=TIMEOUT)
    for k, v in params.items():
        at.query_params[k] = v
    return at.run()


def shown(at: AppTest) -> dict:
    values = [m.value for m in at.markdown]
    return {values[i]: values[i + 1] for i in range(0, len(values) - 1, 2) if values[i] in
            ("n", "even", "t", "pick", "many", "words", "layer")}


def notes(at: AppTest) -> str:
    return " ".join(w.value for w in at.warning)


def test_defaults_are_written_to_the_url_except_the_ones_left_out_at_default():
    at = run()
    assert_ok(at)
    assert at.query_params["n"] == "4" and at.query_params["pick"] == "b" and at.query_params["many"] == "x"
    assert "t" not in at.query_params  # omit_default
    assert not at.warning


def test_out_of_range_values_are_clamped_snapped_and_noted():
    at = run(n="99", even="7", t="0.6", pick="zzz", many="y,bogus,z")
    assert_ok(at)
    assert at.slider(key="demo.n").value == 10
    assert at.slider(key="demo.even").value == 6  # 2 + a multiple of 2, rounded down
    assert at.select_slider(key="demo.t").value == 0.5
    assert at.radio(key="demo.pick").value == "b"
    assert at.multiselect(key="demo.many").value == ["y", "z"]
    text = notes(at)
    for fragment in ("n=99", "even=7", "t=0.6", "zzz", "bogus"):
        assert fragment in text, (fragment, text)
    assert at.query_params["n"] == "10" and at.query_params["many"] == "y,z"


def test_hostile_values_never_crash():
    at = run(n="nan", t="inf", even="-4", words="x" * 5000, pick="\u202e\x00")
    assert_ok(at)
    assert at.slider(key="demo.n").value == 4  # unreadable: the default
    assert at.slider(key="demo.even").value == 2
    assert "too long" in notes(at)


def test_a_widget_change_is_written_back_and_a_default_is_left_out():
    at = run(t="2")
    assert at.query_params["t"] == "2.0"  # str() unless a fmt is given
    at.select_slider(key="demo.t").set_value(1.0).run()
    assert "t" not in at.query_params
    at.slider(key="demo.n").set_value(7).run()
    assert at.query_params["n"] == "7"


def test_a_range_that_shrinks_clamps_the_value_and_a_single_value_slider_is_a_caption():
    at = run(layer="3")
    assert at.slider(key="demo.layer").value == 3
    at.session_state["demo.hi"] = 1
    at.run()
    assert_ok(at)
    assert at.slider(key="demo.layer").value == 1  # clamped into the new range, not reset
    at.session_state["demo.hi"] = 0
    at.run()
    assert_ok(at)  # a 0..0 slider would raise StreamlitInvalidMinMaxError
    assert any("the only value" in c.value for c in at.caption)
    assert at.query_params["layer"] == "0"


def test_a_parameter_listed_twice_is_refused():
    import pytest

    from ui.params import Int, Params
    with pytest.raises(ValueError, match="twice"):
        Params("p", Int("a", 0, lo=0, hi=1), Int("a", 1, lo=0, hi=1))
