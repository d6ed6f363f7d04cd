"""AppTest of the home page: what the app is, and a map with a picture and a link for every page."""

from __future__ import annotations

import pytest

from core.checkpoints import read_manifest
from tests.app.conftest import app_at, assert_ok, page_at
from ui.shell.nav import PAGES

pytestmark = pytest.mark.usefixtures("bundled_models")


@pytest.fixture(scope="module")
def bundled_models():
    if not read_manifest():
        pytest.fail("assets/models/manifest.json is missing or empty: run `python -m core.train --all`")


def _link_targets(at) -> list[str]:
    return [el.proto.page for el in at.get("page_link")]


def test_home_from_the_app_links_every_page_with_a_picture():
    at = app_at()
    assert_ok(at)
    assert at.title[0].value == "Transformer Glassbox"
    pages = [p for p in PAGES if p.url_path and p.exists]
    links = _link_targets(at)
    for p in pages:
        assert any(p.url_path in link or p.path in link for link in links), (p.path, links)
    assert len(at.get("image")) == len(pages)


def test_every_page_has_its_picture_on_disk():
    for p in PAGES:
        if p.url_path:
            assert p.image.is_file(), f"missing {p.image}: run the e2e test with GLASSBOX_THUMBNAILS=1"
            assert p.image.stat().st_size < 400_000  # small enough for a fast home page


def test_home_alone_falls_back_to_plain_links():
    at = page_at("pages/home.py")
    assert_ok(at)
    md = " ".join(str(m.value) for m in at.markdown)
    assert "[Open Attention](/attention)" in md


def test_home_follows_the_sidebar_model():
    at = app_at(None, {"model": "reverse-encdec"})
    assert_ok(at)
    assert any("encoder-decoder" in str(c.value) for c in at.caption)


def test_home_names_the_three_families_with_their_bundled_models():
    at = app_at()
    assert_ok(at)
    table = at.table[0].value
    families = list(table.index)
    assert families == ["encoder-only (BERT-like)", "decoder-only (GPT-like)", "encoder-decoder (T5-like)"]
    listed = " ".join(table["bundled models here"])
    for entry in read_manifest():
        assert entry["title"] in listed
    assert "english-decoder (English)" in table.loc["decoder-only (GPT-like)", "bundled models here"]
    assert "english-encoder (English)" in table.loc["encoder-only (BERT-like)", "bundled models here"]
    assert "Decoder-only, GPT-like" in " ".join(c.value for c in at.sidebar.caption)  # the English decoder's family


def _heatmap_labels(at) -> tuple[list, list]:
    """The query (y) and key (x) labels of the Home page's attention figure."""
    import json

    fig = json.loads(at.get("plotly_chart")[0].proto.spec)
    trace = fig["data"][0]
    return list(trace.get("y", [])), list(trace.get("x", []))


def _text(labels: list) -> str:
    """The text the labels spell (`3:␣an`, `4:imal` -> ` animal`)."""
    return "".join(str(t).split(":", 1)[1] for t in labels).replace("␣", " ")


def test_home_opens_on_the_english_decoder_with_attention_on_the_sentence():
    """A newcomer's first page: the English decoder, the example sentence in the sidebar, and one head's pattern
    labelled with the sentence's pieces; a typed sentence relabels it, and any text is accepted."""
    at = app_at()
    assert_ok(at)
    assert at.sidebar.selectbox[0].value == "english-decoder"
    assert "animal" in at.sidebar.text_area[0].value
    y, x = _heatmap_labels(at)
    assert "animal didn't cross the street" in _text(x) and len(x) == len(y)
    at.sidebar.text_area[0].set_value("Café déjà vu 🙂 — 東京 and the river bank.").run()
    assert_ok(at)
    y, x = _heatmap_labels(at)
    text = _text(x)  # every character read, none refused; a character split into byte pieces is named on each
    assert "Caf" in text and "é……é" in text and "🙂…" in text and "…東" in text and "the river bank." in text
    at.sidebar.text_area[0].set_value("").run()  # empty text: a message, and the example instead
    assert_ok(at)
    assert any("empty" in str(e.value) for e in [*at.sidebar.warning, *at.sidebar.error, *at.sidebar.info])


def test_a_pasted_page_of_ten_thousand_characters_is_cut_to_the_context_with_a_note():
    at = app_at()
    at.sidebar.text_area[0].set_value("The cat sat on the mat and looked at the river. " * 210).run()  # 10,080 chars
    assert_ok(at)
    notes = " ".join(str(i.value) for i in at.sidebar.info)
    assert "tokens long; the pages show its first 1,024" in notes
    y, _ = _heatmap_labels(at)
    assert len(y) <= 1024


def test_a_model_named_in_the_link_wins_over_the_english_default():
    at = app_at(None, {"model": "sort-decoder"})
    assert_ok(at)
    assert at.sidebar.selectbox[0].value == "sort-decoder"
