"""AppTest of the shell: navigation over every page, the shared sidebar (model, input, device),
input validation, and the URL carrying model and input across a reload."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as hst

from core.checkpoints import read_manifest
from core.tasks import get_task
from tests.app.conftest import app_at, assert_ok
from tests.app.fragments import click
from ui.shell import query
from ui.shell.nav import PAGES
from ui.shell.sidebar import FREE_POSITION_TOKENS, GREEDY, TYPED, example_text

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
    toy = [e.get("title", e["id"]) for e in manifest]
    assert picker.options[:len(toy)] == toy  # the toy-task models first, then the English ones
    assert [o.split(" ")[0] for o in picker.options[len(toy):]] == ["english-decoder", "english-encoder"]
    assert picker.value == "english-decoder"  # Home opens on the English decoder
    assert at.sidebar.text_area(key="glassbox.input").value.strip()
    assert at.query_params["model"] == "english-decoder"  # written into the link like any choice


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
    """A toy model's positions extend to any length: its cap is FREE_POSITION_TOKENS, not the 21 it was trained on."""
    at = app_at(None, {"model": "induction-sinusoidal"})
    at.sidebar.text_area(key="glassbox.input").input(" ".join(["A"] * (FREE_POSITION_TOKENS + 1))).run()
    assert_ok(at)
    assert any(f"at most {FREE_POSITION_TOKENS}" in str(e.value) for e in at.sidebar.error)
    at.sidebar.text_area(key="glassbox.input").input(" ".join(["A"] * FREE_POSITION_TOKENS)).run()
    assert_ok(at)
    assert not at.sidebar.error


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
    bad = app_at(None, {"model": "gpt-17", "input": "x" * (query.MAX_TEXT_PARAM_CHARS + 1)})
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


TYPED_INPUT = "8 6 5 2 3 0 0 0"  # the reverse model's example: digits the induction models do not know


def _example(model_id: str) -> str:
    """The sidebar's first example for a bundled model (its task's example 0 for its architecture)."""
    meta = next(e for e in read_manifest() if e["id"] == model_id)
    return example_text(get_task(meta["task"]), meta["arch"], 0)


def _unescaped(markdown: str) -> str:
    """What a Markdown body shows as text, as far as escapes go: backslash escapes and word joiners removed."""
    return re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", markdown).replace("\u2060", "")


def _unescaped_part(markdown: str) -> str:
    """A Markdown body without its escaped characters: what Markdown may still read as formatting."""
    return re.sub(r"\\[!-/:-@\[-`{-~]", "", markdown)


@pytest.mark.parametrize("new_model", ["induction-rope", "sort-decoder"])
def test_switching_model_starts_from_the_new_models_example_on_the_page_and_in_the_url(new_model):
    # A student's first switch: the link's input belongs to the old model (issue 35, defect 1).
    at = app_at(None, {"model": "reverse-encdec", "input": TYPED_INPUT})
    assert at.sidebar.text_area(key="glassbox.input").value == TYPED_INPUT
    click(at, "glassbox.model", new_model)
    assert_ok(at)
    example = _example(new_model)
    assert at.sidebar.text_area(key="glassbox.input").value == example
    assert at.query_params["input"] == example and at.query_params["model"] == new_model
    assert "tgt" not in at.query_params
    assert not at.error, [e.value for e in at.error]
    assert not at.info, [i.value for i in at.info]  # e.g. "decoder input must start with <bos>"
    at.run()  # and it stays so on the next run, which reads the URL's input no more
    assert at.sidebar.text_area(key="glassbox.input").value == example


def test_switching_between_encoder_decoders_drops_the_typed_decoder_input():
    source, tgt = "3 1 2", "<bos> 2 1"
    at = app_at(None, {"model": "reverse-encdec", "input": source, "tgt": tgt})
    assert at.sidebar.radio(key="glassbox.tgt_mode").value == TYPED
    click(at, "glassbox.model", "sort-encdec")
    assert_ok(at)
    assert at.sidebar.text_area(key="glassbox.input").value == _example("sort-encdec")
    assert at.sidebar.radio(key="glassbox.tgt_mode").value == GREEDY  # the model writes its own again
    assert "tgt" not in at.query_params and at.query_params["input"] == _example("sort-encdec")
    assert not at.error, [e.value for e in at.error]


def test_a_pages_own_switch_button_also_starts_from_the_new_models_example():
    # Generation offers "Switch to reverse-encdec" to a decoder-only model: a callback that sets the model.
    at = app_at("pages/generation.py", {"model": "sort-decoder", "input": "<bos> 3 1 2 <sep> 1 2 3 <eos>"})
    click(at, "generation.switch_shapes", None, at._tree)
    assert_ok(at)
    assert at.session_state["glassbox.model"] == "reverse-encdec"
    assert at.session_state["glassbox.input"] == _example("reverse-encdec")
    assert at.query_params["input"] == _example("reverse-encdec") and not at.error


def test_a_link_with_a_valid_input_and_decoder_input_still_opens_them():
    source, tgt = "3 1 2", "<bos> 2 1"
    at = app_at(None, {"model": "reverse-encdec", "input": source, "tgt": tgt})
    assert_ok(at)
    assert at.sidebar.text_area(key="glassbox.input").value == source
    assert at.sidebar.text_input(key="glassbox.tgt").value == tgt
    at.switch_page("pages/attention.py").run()  # and a page switch keeps them
    assert at.sidebar.text_area(key="glassbox.input").value == source
    assert at.query_params["input"] == source and at.query_params["tgt"] == tgt


def test_a_bad_input_is_said_under_the_title_with_the_example_shown_instead():
    typed = "A **x** [a](http://h) B"
    at = app_at("pages/attention.py", {"model": "induction-sinusoidal"})
    at.sidebar.text_area(key="glassbox.input").input(typed).run()
    assert_ok(at)
    elements = list(at.main)
    kinds = [getattr(e, "type", "") if type(e).__name__ == "UnknownElement" else type(e).__name__ for e in elements]
    title, said = kinds.index("Title"), kinds.index("Error")
    # Under the title, before the page's idea and its first figure: where the student is looking (issue 35, 2).
    assert title < said < min(kinds.index("Markdown", title), kinds.index("plotly_chart")), kinds[:title + 6]
    said = elements[said]
    example = _example("induction-sinusoidal")
    assert "does not know" in said.value and example in said.value
    assert "the task's example instead" in _unescaped(said.value)  # says which example is shown
    # The typed tokens are echoed literally: Markdown would make **x** bold and [a](http://h) a link.
    assert not re.search(r"[*\[\]]|http:(?!\u2060)", _unescaped_part(said.value)), said.value
    assert "'**x**'" in _unescaped(said.value) and "'[a](http://h)'" in _unescaped(said.value)
    sidebar = " ".join(e.value for e in at.sidebar.error)  # the sidebar keeps its own message
    assert "does not know" in sidebar and "'**x**'" in _unescaped(sidebar)
    assert not re.search(r"[*\[\]]|http:(?!\u2060)", _unescaped_part(sidebar)), sidebar
    at.sidebar.text_area(key="glassbox.input").input(example).run()  # fixed: the message goes
    assert not at.error


def test_a_bad_decoder_input_is_said_under_the_title_with_the_models_own_shown_instead():
    at = app_at(None, {"model": "reverse-encdec", "input": "3 1 2", "tgt": "<bos> 2 zz"})
    assert_ok(at)
    said = " ".join(e.value for e in at.main.error)
    greedy = at.sidebar.radio(key="glassbox.tgt_mode").proto.captions[0].strip("`")
    assert "decoder input" in said and "zz" in said and greedy in said


def test_url_notes_echo_the_url_literally():
    at = app_at(None, {"model": "**x** [a](http://h) __import__"})
    assert_ok(at)
    notes = " ".join(w.value for w in at.warning)
    assert "does not know" not in notes and "model=" in notes
    assert not re.search(r"[*\[\]]|http:(?!\u2060)|__", _unescaped_part(notes)), notes
    assert "**x** [a](http://h) __import__" in _unescaped(notes)


# literal() itself (ui/shell/text.py, which query's notes use) is checked in tests/core/test_text.py.


@given(text=hst.text(alphabet="`ab ", max_size=12))
def test_code_spans_hold_any_backticks(text):
    span = query.code(text)
    fence = re.match(r"`+", span).group()
    inside = span[len(fence):-len(fence)]
    assert span.endswith(fence) and fence not in inside  # no run inside closes the span early
    assert inside == text or inside == f" {text} "  # CommonMark strips one space each side of a padded span


def test_device_is_shown():
    at = app_at()
    captions = " ".join(str(c.value) for c in at.sidebar.caption)
    selects = [s.label for s in at.sidebar.selectbox]
    assert "Running on **CPU**" in captions or "Device" in selects


def test_parameter_counts_read_as_people_say_them():
    """One decimal below ten million, so the 1.3M-parameter English decoder is not shown as 1M."""
    from ui.shell.models import parameter_count

    assert [parameter_count(n) for n in (230_400, 1_317_504, 9_960_000, 124_439_808, 1_100_048_384)] == \
        ["230K", "1.3M", "10M", "124M", "1.1B"]
