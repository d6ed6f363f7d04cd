"""AppTest of the shell: navigation over every page, the shared sidebar (model, input, device),
input validation, and the URL carrying model and input across a reload."""

from __future__ import annotations

import pytest

from core.checkpoints import read_manifest
from tests.app.conftest import app_at, assert_ok
from ui.shell.nav import PAGES

pytestmark = pytest.mark.usefixtures("bundled_models")


@pytest.fixture(scope="module")
def bundled_models():
    if not read_manifest():
        pytest.fail("assets/models/manifest.json is missing or empty: run `python -m core.train --all`")


def test_every_page_in_the_menu_has_a_file():
    missing = [p.path for p in PAGES if not p.exists]
    assert not missing, f"pages listed in ui/shell/nav.py without a file: {missing}"
    assert len({p.url_path for p in PAGES}) == len(PAGES)


def test_app_opens_on_home_with_the_shared_sidebar():
    at = app_at()
    assert_ok(at)
    assert at.title[0].value == "Transformer Glassbox"
    picker = at.sidebar.selectbox(key="glassbox.model")
    manifest = read_manifest()
    assert picker.options == [e.get("title", e["id"]) for e in manifest]
    assert at.sidebar.text_area(key="glassbox.input").value.strip()
    assert at.query_params["model"] == manifest[0]["id"]


def test_model_picker_describes_the_model_and_changes_the_input():
    at = app_at()
    manifest = {e["id"]: e for e in read_manifest()}
    at.sidebar.selectbox(key="glassbox.model").set_value("reverse-encdec").run()
    assert_ok(at)
    captions = " ".join(str(c.value) for c in at.sidebar.caption)
    assert manifest["reverse-encdec"]["description"][:30] in captions
    decoder_input = at.sidebar.radio(key="glassbox.tgt_mode")  # encoder-decoder: the target side is shown
    assert decoder_input.label == "Decoder input"
    assert decoder_input.proto.captions[0].startswith("`<bos> ")  # the model's own greedy output, written out
    assert at.query_params["model"] == "reverse-encdec"


def test_bad_input_token_gets_a_clear_message_and_the_page_keeps_working():
    at = app_at("pages/attention.py", {"model": "induction-sinusoidal"})
    at.sidebar.text_area(key="glassbox.input").input("A B notatoken C").run()
    assert_ok(at)
    errors = " ".join(str(e.value) for e in at.sidebar.error)
    assert "does not know" in errors and "notatoken" in errors
    assert at.get("plotly_chart")  # the page still draws, on the task's example


def test_too_long_input_is_refused_with_the_cap():
    at = app_at(None, {"model": "induction-sinusoidal"})
    at.sidebar.text_area(key="glassbox.input").input(" ".join(["A"] * 500)).run()
    assert_ok(at)
    assert any("at most" in str(e.value) for e in at.sidebar.error)


def test_random_example_button_changes_the_input():
    at = app_at(None, {"model": "sort-decoder"})
    before = at.sidebar.text_area(key="glassbox.input").value
    at.sidebar.button[0].click().run()
    assert_ok(at)
    assert at.sidebar.text_area(key="glassbox.input").value != before


def test_url_model_and_input_open_that_view_and_bad_ones_are_reported():
    text = "<bos> 3 1 2 <sep>"
    at = app_at(None, {"model": "sort-decoder", "input": text})
    assert_ok(at)
    assert at.sidebar.selectbox(key="glassbox.model").value == "sort-decoder"
    assert at.sidebar.text_area(key="glassbox.input").value == text
    bad = app_at(None, {"model": "gpt-17", "input": "x" * 5000})
    assert_ok(bad)
    warnings = " ".join(str(w.value) for w in bad.warning)
    assert "gpt-17" in warnings and "too long" in warnings


def test_choices_survive_a_page_switch():
    at = app_at(None, {"model": "agreement-encoder"})
    at.switch_page("pages/attention.py").run()
    assert_ok(at)
    assert at.sidebar.selectbox(key="glassbox.model").value == "agreement-encoder"
    at.switch_page("pages/home.py").run()
    assert at.sidebar.selectbox(key="glassbox.model").value == "agreement-encoder"


def test_device_is_shown():
    at = app_at()
    captions = " ".join(str(c.value) for c in at.sidebar.caption)
    selects = [s.label for s in at.sidebar.selectbox]
    assert "Running on **CPU**" in captions or "Device" in selects
