"""ui.shell.params: a URL parameter declared once seeds, clamps with a note, binds its widget and writes back."""

from __future__ import annotations

from streamlit.testing.v1 import AppTest

from tests.app.conftest import TIMEOUT, assert_ok


def script():
    import streamlit as st

    from ui.shell import query
    from ui.shell.params import Choice, Float, Int, Multi, Params, Text

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

    from ui.shell.params import Int, Params
    with pytest.raises(ValueError, match="twice"):
        Params("p", Int("a", 0, lo=0, hi=1), Int("a", 1, lo=0, hi=1))


def keyed_script():
    import streamlit as st

    from ui.shell.params import Int, Params
    from ui.shell.sections import Sections

    url = Params("keyed", Int("n", 4, lo=1, hi=10), Int("m", 1, lo=1, hi=10), Int("k", 1, lo=1, hi=10))
    S = Sections("keyed")

    @S.section("reads_n", reads=("n",))
    def reads_n():
        st.session_state["runs"].append("n")
        st.caption(f"n is {url.n.now()}")

    @S.section("reads_m", reads=("m",))
    def reads_m():
        st.session_state["runs"].append("m")
        st.caption(f"m is {url.m.now()}")

    @S.section("maybe", reads=("n",))
    def maybe():
        st.session_state["runs"].append("maybe")

    st.title("keyed")
    st.session_state.setdefault("runs", [])
    url.n.widget(st.slider, "n")
    url.m.widget(st.slider, "m")
    url.k.widget(st.slider, "k")  # read by no section: its change reruns the page
    st.markdown("static text")
    reads_n()
    reads_m()
    if st.query_params.get("maybe") != "no":
        maybe()


def test_a_control_with_reruns_reruns_only_the_fragments_that_read_it_and_writes_the_url():
    from tests.app.fragments import click

    at = AppTest.from_function(keyed_script, default_timeout=TIMEOUT).run()
    assert_ok(at)
    page, runs = at._tree, len(at.session_state["runs"])
    click(at, "keyed.n", 7, page)
    assert_ok(at)
    assert not at.title and "static text" not in [m.value for m in at.markdown], "only the fragments reran"
    assert at.session_state["runs"][runs:] == ["n", "maybe"]
    assert at.query_params["n"] == "7"  # the control is not drawn again: its callback writes the URL
    assert [c.value for c in at.caption] == ["n is 7"]  # the fragment read the new value
    runs = len(at.session_state["runs"])
    click(at, "keyed.m", 3, page)  # a second control of the same page, after the first
    assert at.session_state["runs"][runs:] == ["m"] and at.query_params["m"] == "3"


def test_a_control_whose_fragment_was_not_drawn_reruns_the_whole_page():
    from tests.app.fragments import click

    at = AppTest.from_function(keyed_script, default_timeout=TIMEOUT)
    at.query_params["maybe"] = "no"  # one of the fragments n reruns is not on the page
    at.run()
    click(at, "keyed.n", 7, at._tree)
    assert_ok(at)
    assert at.title, "an unknown fragment key falls back to a full rerun, not an error"
    assert at.query_params["n"] == "7"


def test_a_control_that_no_section_reads_reruns_the_whole_page():
    from tests.app.fragments import click

    at = AppTest.from_function(keyed_script, default_timeout=TIMEOUT).run()
    page, runs = at._tree, len(at.session_state["runs"])
    click(at, "keyed.k", 5, page)
    assert_ok(at)
    assert at.title and at.session_state["runs"][runs:] == ["n", "m", "maybe"]
    assert at.query_params["k"] == "5"


def test_sections_name_the_open_views_readers_in_declared_order_or_the_empty_section():
    from ui.shell import sections
    from ui.shell.sections import Sections

    shown = ["grid"]
    S = Sections("views_demo", open_view=lambda: shown[0])
    for name, reads, view in [("row", ("kind",), None), ("grid.chart", ("kind", "layer"), "grid"),
                              ("scale.model", ("kind",), "scale")]:
        S.section(name, reads=reads, view=view)(lambda: None)
    assert S.readers("kind") == ("views_demo.row", "views_demo.grid.chart")
    assert S.readers("layer") == ("views_demo.grid.chart",)
    shown[0] = "scale"  # named when the control changes: the view shown then
    assert S.readers("kind") == ("views_demo.row", "views_demo.scale.model")
    assert S.readers("layer") == ("views_demo.nothing",)
    assert sections.readers_of("views_demo", "layer")() == ("views_demo.nothing",)
    assert sections.readers_of("views_demo", "temp") is None  # read by no section: the page reruns
    assert sections.readers_of("no_such_page", "layer") is None


def test_a_section_declared_twice_is_refused():
    import pytest

    from ui.shell.sections import Sections

    S = Sections("twice_demo")
    S.section("a", reads=("x",))(lambda: None)
    with pytest.raises(ValueError, match="twice"):
        S.section("a", reads=("y",))(lambda: None)


def test_a_control_holding_a_value_of_the_wrong_kind_reads_as_its_default():
    """A forged (or stale) widget message once left the text '2: 0' under the Attention page's layer key, and
    int() of it crashed the page: `now()` reads such a value as the parameter's default."""
    from streamlit.testing.v1 import AppTest

    def script():
        import streamlit as st

        from ui.shell.params import Float, Int

        st.session_state["p.layer"], st.session_state["p.temp"] = "2: 0", float("nan")
        layer, temp = Int("layer", 1, key="p.layer", lo=0, hi=3), Float("temp", 1.0, key="p.temp", lo=0.1, hi=10.0)
        st.session_state["p.ok"] = 2
        st.write(repr((layer.now(), temp.now(), Int("ok", 0, key="p.ok").now())))

    at = AppTest.from_function(script).run()
    assert not at.exception
    assert at.markdown[0].value == "(1, 1.0, 2)"
