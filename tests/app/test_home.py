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
    assert "Encoder-decoder, T5-like" in " ".join(c.value for c in at.sidebar.caption)  # the sidebar names it too
