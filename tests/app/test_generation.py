"""AppTest for the Generation page: each panel draws, and a widget change in each panel changes its
figure; decoder-only and encoder-only models; the training button of panel 5."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from tests.app.conftest import TIMEOUT, assert_ok, decode_array, plotly_specs
from tests.app.fragments import click

PAGE = str(Path(__file__).resolve().parents[2] / "pages" / "generation.py")


def open_generation(**query) -> AppTest:
    """The Generation page run alone, with URL parameters."""
    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT * 3)
    for k, v in query.items():
        at.query_params[k] = v
    return at.run()


def chart(at: AppTest, title: str) -> dict:
    """The plotly spec whose title starts with `title`."""
    found = []
    for spec in plotly_specs(at):
        text = (spec["layout"].get("title") or {}).get("text") or ""
        found.append(text)
        if text.startswith(title):
            return spec
    raise AssertionError(f"no chart titled {title!r} among {found}")


def widget(at: AppTest, kind: str, label: str):
    for w in getattr(at, kind):
        if w.label == label:
            return w
    raise AssertionError(f"no {kind} labelled {label!r}")


@pytest.fixture(scope="module")
def encdec() -> AppTest:
    at = open_generation(model="reverse-encdec")
    assert_ok(at)
    return at


def test_every_panel_draws_for_the_encoder_decoder(encdec):
    for title in ("Sublayers (boxes)", "decoder.blocks.0.cross_attn.hook_pattern for your input", "Each head's share",
                  "L_e = ", "Step 0: where the newest token looks", "Layer 0's key cache", "Work per step",
                  "Measured ", "Gradient of the prediction"):
        chart(encdec, title)
    assert not encdec.error
    assert encdec.query_params["hook"] == "decoder.blocks.0.cross_attn.hook_pattern"


def test_the_table_of_every_hook_is_built_only_when_its_expander_opens():
    at = open_generation(model="reverse-encdec")
    hooks_tables = lambda: [d.value for d in at.dataframe if "sublayer" in d.value.columns]  # noqa: E731
    hooks_csv = lambda: [b for b in at.get("download_button") if "generation.hooks_csv" in b.proto.id]  # noqa: E731
    assert not hooks_tables() and not hooks_csv()  # closed: no table built, no download offered
    at.session_state["generation.hooks_open"] = True  # what opening it in the browser sets
    at.run()
    assert_ok(at)
    (table,) = hooks_tables()
    assert len(hooks_csv()) == 1
    names = list(table["hook"])
    assert "decoder.blocks.0.cross_attn.hook_pattern" in names and len(names) == len(set(names)) > 10


def test_anatomy_choosing_a_hook_shows_its_tensor(encdec):
    before = chart(encdec, "decoder.blocks.0.cross_attn.hook_pattern")
    widget(encdec, "selectbox", "Hook point of this model").set_value("encoder.blocks.1.attn.hook_k").run()
    assert_ok(encdec)
    after = chart(encdec, "encoder.blocks.1.attn.hook_k for your input")
    assert decode_array(after["data"][0]["z"]).shape != decode_array(before["data"][0]["z"]).shape or \
        not np.array_equal(decode_array(after["data"][0]["z"]), decode_array(before["data"][0]["z"]))
    assert any("B × L_e × h × d_h" in m.value for m in encdec.markdown)
    # the identities: one number per check, both tiny
    values = {m.label: float(m.value) for m in encdec.metric if m.label.startswith("max |")}
    assert values["max |concat·W_O − Σ heads|"] < 1e-4 and values["max |MLP(Px) − P·MLP(x)|"] < 1e-4


def test_shapes_follow_the_source_length(encdec):
    before = json.dumps(chart(encdec, "L_e = ")["layout"]["annotations"])
    slider = widget(encdec, "slider", "source tokens used (L_e)")
    slider.set_value(3).run()
    assert_ok(encdec)
    after = chart(encdec, "L_e = 3")
    assert json.dumps(after["layout"]["annotations"]) != before
    assert "L_e=3" in json.dumps(after["layout"]["annotations"])
    assert encdec.query_params["le"] == "3"


def test_stepper_slider_moves_the_step():
    at = open_generation(model="reverse-encdec")  # its own page: a step reruns only the parts that read it
    first, page = chart(at, "Step 0"), at._tree
    click(at, "generation.t", 3, page)
    assert_ok(at)
    third = chart(at, "Step 3")
    assert decode_array(third["data"][0]["z"]).shape[1] == decode_array(first["data"][0]["z"]).shape[1] + 3
    assert at.query_params["t"] == "3"
    assert not at.title and not [s for s in plotly_specs(at) if "Time per token" in str(s["layout"].get("title"))]
    click(at, widget(at, "button", "step ▶").key, None, page)
    chart(at, "Step 4")


def test_leakage_example_changes_the_map(encdec):
    before = chart(encdec, "Gradient of the prediction")["data"][0]["z"]
    widget(encdec, "number_input", "example").set_value(5).run()
    assert_ok(encdec)
    after = chart(encdec, "Gradient of the prediction")["data"][0]["z"]
    assert not np.array_equal(decode_array(before), decode_array(after))
    frame = [d.value for d in encdec.dataframe if "answer in the source" in d.value.columns][0]
    assert frame["accuracy"].iloc[0] > frame["accuracy"].iloc[1]  # shown beats hidden


def test_masking_panel_trains_on_the_button_and_the_seed_changes_the_curves():
    at = open_generation(model="reverse-encdec", tseed="7")
    assert not any((s["layout"].get("title") or {}).get("text", "").startswith("Training loss") for s in plotly_specs(at))
    widget(at, "button", "Train both decoders").click().run()
    assert_ok(at)
    first = chart(at, "Training loss, seed 7")
    table = [d.value for d in at.dataframe if "greedy generation accuracy" in d.value.columns][0]
    by_mask = table.set_index("mask")
    assert by_mask.loc["causal", "greedy generation accuracy"] > by_mask.loc["full", "greedy generation accuracy"]
    widget(at, "number_input", "training seed").set_value(8).run()
    widget(at, "button", "Train both decoders").click().run()
    assert_ok(at)
    second = chart(at, "Training loss, seed 8")
    assert not np.array_equal(decode_array(first["data"][0]["y"]), decode_array(second["data"][0]["y"]))


def test_a_decoder_only_model_steps_and_is_offered_the_encoder_decoder():
    at = open_generation(model="sort-decoder")
    assert_ok(at)
    chart(at, "Step 0")
    assert [b for b in at.button if b.label == "Switch to reverse-encdec"]
    page = at._tree
    click(at, "generation.t", 2, page)
    chart(at, "Step 2")
    click(at, "generation.switch_shapes", None, page)
    assert_ok(at)
    assert at.session_state["glassbox.model"] == "reverse-encdec"


def test_an_encoder_model_gets_the_anatomy_and_a_switch_instead_of_the_stepper():
    at = open_generation(model="agreement-encoder")
    assert_ok(at)
    chart(at, "Sublayers (boxes)")
    assert at.button(key="generation.switch_stepper")
    assert not [s for s in plotly_specs(at) if ((s["layout"].get("title") or {}).get("text") or "").startswith("Step ")]


def test_bad_url_values_are_clamped_with_a_note():
    at = open_generation(model="reverse-encdec", t="999", hook="nope", le="0")
    assert_ok(at)
    assert at.warning or at.error
    chart(at, "Step ")


def test_a_learned_position_table_bounds_the_prompt_steps_and_timing():
    at = open_generation(model="induction-learned", prompt="999", steps="999", tlen="999")
    assert_ok(at)
    assert at.warning or at.error  # the clamped values are reported
    prompt, steps, tlen = (int(at.query_params[k]) for k in ("prompt", "steps", "tlen"))
    max_len = 21
    assert prompt + steps <= max_len and prompt + tlen <= max_len
    chart(at, "Step 0")
