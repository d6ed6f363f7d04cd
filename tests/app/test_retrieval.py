"""AppTest for the Retrieval page: one widget change per panel changes that panel's figure, a bad
link is reported and clamped, and the measured sentences come from the bundled models."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from tests.app.conftest import TIMEOUT, assert_ok, decode_array, plotly_specs

PAGE = str(Path(__file__).resolve().parents[2] / "pages" / "retrieval.py")


def open_page(**query) -> AppTest:
    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT)
    for k, v in query.items():
        at.query_params[k] = v
    return at.run()


@pytest.fixture(scope="module")
def page() -> AppTest:
    at = open_page()
    assert_ok(at)
    return at


def chart(at: AppTest, title: str) -> dict:
    """The plotly spec whose title starts with `title`."""
    for spec in plotly_specs(at):
        text = (spec["layout"].get("title") or {}).get("text") or ""
        if text.startswith(title):
            return spec
    raise AssertionError(f"no chart titled {title!r}: {[s['layout'].get('title') for s in plotly_specs(at)]}")


def trace(spec: dict, index: int, axis: str = "y") -> np.ndarray:
    return np.asarray(decode_array(spec["data"][index][axis]), dtype=np.float64)


def test_the_page_renders_every_panel(page):
    headers = [h.value for h in page.header]
    assert len([h for h in headers if h[:2] in ("1.", "2.", "3.", "4.", "5.", "6.")]) == 6
    assert len(page.get("plotly_chart")) == 10
    assert not page.error and not page.warning
    assert len(page.get("download_button")) == 6


def test_kernel_panel_query_norm_narrows_the_kernel_and_tilt_breaks_the_identity():
    at = open_page()
    before = trace(chart(at, "the kernel"), 0)
    assert "differ by at most" in at.success[0].value
    at.select_slider(key="retrieval.qnorm").set_value(300.0).run()
    assert_ok(at)
    after = trace(chart(at, "the kernel"), 0)
    assert (after > 0.5 * after.max()).sum() < (before > 0.5 * before.max()).sum()  # a narrower kernel
    at.slider(key="retrieval.tilt").set_value(1.0).run()
    assert_ok(at)
    assert any("unequal norm" in w.value for w in at.warning)


def points_y(at: AppTest) -> list[float]:
    """The y of the estimate chart's first trace: the points the panel is using."""
    return [float(v) for v in trace(chart(at, "the estimate"), 0)]


def test_a_closed_table_builds_no_editor_and_edits_survive_closing_and_reopening():
    """The points' editor is built only while its expander is open (a closed one costs no editor on every
    click); the edits are kept when it closes, and a reopened editor starts from them."""
    at = open_page()
    assert not at.data_editor  # closed by default: no editor built
    preset = points_y(at)
    at.session_state["retrieval.points_open"] = True  # what opening it in the browser sets
    at.run()
    assert_ok(at)
    assert len(at.data_editor) == 1
    editor = at.data_editor[0]
    at.session_state[editor.key] = {"edited_rows": {0: {"y": 9.0}}, "added_rows": [], "deleted_rows": []}
    at.run()
    assert points_y(at)[0] == 9.0 and points_y(at)[1:] == preset[1:]
    at.session_state["retrieval.points_open"] = False  # closed: no editor, the edit still drawn
    at.run()
    assert_ok(at)
    assert not at.data_editor
    assert points_y(at)[0] == 9.0
    at.slider(key="retrieval.qx").set_value(0.6).run()  # another click in the panel keeps it too
    assert points_y(at)[0] == 9.0
    at.session_state["retrieval.points_open"] = True  # reopened: a fresh editor holding the edit
    at.run()
    assert at.data_editor[0].key != editor.key
    assert float(at.data_editor[0].value["y"].iloc[0]) == 9.0
    assert points_y(at)[0] == 9.0
    at.segmented_control(key="retrieval.points").set_value("step").run()  # another preset: its own table
    step = points_y(at)
    assert step != preset and 9.0 not in step
    at.segmented_control(key="retrieval.points").set_value("sine").run()  # and back: the edit is still there
    assert points_y(at)[0] == 9.0
    assert_ok(at)


def test_lookup_panel_beta_and_the_tie_preset():
    at = open_page()
    weights_text = lambda: [d["text"][0] for d in chart(at, "keys (arrows)")["data"] if d.get("text")]
    before = weights_text()
    sweep = chart(at, "from the mean of all values")
    axes = [v for k, v in sweep["layout"].items() if k.startswith("xaxis")]
    assert len(axes) == 3 and all(a.get("type") == "log" for a in axes)  # shared axes must share their type
    output = trace(sweep, 0)
    assert output[0] > output[-1]  # from the mean (3) down to the best key's value (1) in the spread preset
    at.select_slider(key="retrieval.beta").set_value(100.0).run()
    assert_ok(at)
    assert weights_text() != before
    assert "β* =" in " ".join(i.value for i in at.info)
    at.segmented_control(key="retrieval.table").set_value("tie").run()
    assert_ok(at)
    assert any("A tie" in i.value and "midpoint" in i.value for i in at.info)


def test_tied_panel_head_choice_changes_the_span_figure_and_tied_stays_in_span():
    at = open_page()
    spec = chart(at, "layer 1, head 0")
    tied_outside = trace(spec, 1)
    assert tied_outside.max() < 1e-4 * max(1.0, trace(spec, 1, "x").max())
    assert np.median(trace(spec, 0)) > 0.1  # the untied model's outputs leave the key span
    at.segmented_control(key="retrieval.head").set_value(1).run()
    assert_ok(at)
    assert not np.array_equal(trace(chart(at, "layer 1, head 1"), 0), trace(spec, 0))
    assert "What you just saw" in " ".join(m.value for m in at.markdown)


def test_hijack_panel_position_changes_the_curves_and_the_defences_are_measured():
    at = open_page()
    before = trace(chart(at, "scaling the key at position 3"), 1)  # undefended: attention on the key
    at.selectbox(key="retrieval.pos").set_value(2).run()
    assert_ok(at)
    after = trace(chart(at, "scaling the key at position 2"), 1)
    assert not np.allclose(before, after)
    verdict = " ".join(m.value for m in at.markdown if m.value.startswith("**Measured.**"))
    assert "key-norm clip" in verdict and "cosine scores" in verdict
    at.select_slider(key="retrieval.alpha").set_value(1000.0).run()
    assert_ok(at)
    assert "α = 1000" in chart(at, "no defence, α = 1000")["layout"]["title"]["text"]


def test_equivalence_panel_stretch_switches_the_winner():
    at = open_page()
    equal = trace(chart(at, "attention against the Gaussian kernel"), 0)
    assert np.allclose(equal, trace(chart(at, "attention against the Gaussian kernel"), 1), atol=1e-9)
    assert "the same key" in " ".join(m.value for m in at.markdown)
    at.slider(key="retrieval.stretch").set_value(3.0).run()
    assert_ok(at)
    stretched = chart(at, "attention against the Gaussian kernel")
    assert not np.allclose(trace(stretched, 0), trace(stretched, 1), atol=1e-3)
    assert "not the same key" in " ".join(m.value for m in at.markdown)


def test_linearity_panel_factor_moves_the_markers_and_a_zero_query_flattens_q_and_k():
    at = open_page()
    markers = lambda: trace(chart(at, "only the values scale the output"), 3)  # the c markers: values, queries, keys
    assert markers()[0] == pytest.approx(2.0)  # the default c: the values' marker on y = c
    at.select_slider(key="retrieval.c").set_value(10.0).run()
    assert_ok(at)
    values, queries, keys = markers()
    assert values == pytest.approx(10.0) and abs(queries - 10.0) > 5 and abs(keys - 10.0) > 5
    at.segmented_control(key="retrieval.lq").set_value("zero").run()
    assert_ok(at)
    assert markers()[1:] == pytest.approx([1.0, 1.0])
    assert any("uniform" in m.value for m in at.markdown)


def test_a_bad_link_is_reported_and_clamped():
    at = open_page(qnorm="12345", beta="nan", pos="99", points="nope", stretch="-4")
    assert_ok(at)
    assert at.warning or at.error
    assert at.select_slider(key="retrieval.qnorm").value == 1000.0
    assert at.selectbox(key="retrieval.pos").value == 9
    assert at.slider(key="retrieval.stretch").value == 0.5


def test_tables_are_formatted_by_the_browser_not_by_a_styler(page):
    """Every table goes out as data plus a column format (no pandas Styler: it formats every cell on the
    server on each rerun); the residuals in scientific notation, the hijack summary as percentages."""
    assert page.dataframe and not any(d.proto.arrow_data.HasField("styler") for d in page.dataframe)
    formats = {name: column.get("type_config", {}) for d in page.dataframe
               for name, column in json.loads(d.proto.columns or "{}").items()}
    assert formats["largest relative residual"]["format"] == "%.2e"
    assert formats["clean accuracy"] == {"type": "number", "format": "percent", "step": 0.001}
    summary = next(d.value for d in page.dataframe if "clean accuracy" in d.value.columns)
    assert ((summary["clean accuracy"] >= 0) & (summary["clean accuracy"] <= 1)).all()  # fractions, shown as %
