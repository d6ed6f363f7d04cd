"""Issue 37 in a real browser: a newcomer with a GPT-2, a BERT and a Llama folder opens each from the sidebar
and walks the pages with no exception (GPT-2 every page; BERT and Llama the pages where they differ most), types a sentence and sees its tokens on the axes.

The server is started with GLASSBOX_MODELS_DIR pointing at tiny random checkpoints saved by Hugging Face's
`transformers` (test-only) with tokenizers trained here (tests/app/folder_models.py), and an empty Hugging
Face cache. Screenshots land in test-artifacts/screenshots/folder-*.png."""

from __future__ import annotations

import urllib.parse

import pytest

from tests.app.folder_models import FOLDER_MODELS, build_models_dir
from tests.e2e.conftest import assert_no_exception, open_page, plotly_data, streamlit_server, tall_screenshot, wait_for_run

pytestmark = pytest.mark.e2e

# Every page with a GPT-2 folder at 1,024 tokens: tests/e2e/test_long_inputs.py. Here, the pages whose first screen
# differs most with a checkpoint (a screenshot each) and Home.
GPT2_PAGES = ("", "attention", "positions", "depth", "generation")
# BERT and Llama on the pages where their designs differ most from GPT-2's (an encoder's generation page, RoPE
# and grouped keys); every page of every model is also opened by the AppTests (tests/app/test_folder_*.py).
BERT_PAGES = ("attention", "generation")
LLAMA_PAGES = ("attention", "positions")


@pytest.fixture(scope="module")
def folder_server(tmp_path_factory):
    models = build_models_dir(tmp_path_factory.mktemp("models"))
    env = {"GLASSBOX_MODELS_DIR": str(models), "HF_HUB_CACHE": str(tmp_path_factory.mktemp("empty-hf-cache"))}
    with streamlit_server(extra_env=env, log_path=tmp_path_factory.mktemp("server") / "streamlit.log") as url:
        yield url


def link(url: str, page: str, model: str, **params) -> str:
    return f"{url}/{page}?" + urllib.parse.urlencode({"model": model, **params})


@pytest.mark.parametrize("kind, pages", [("gpt2", GPT2_PAGES), ("bert", BERT_PAGES), ("llama", LLAMA_PAGES)])
def test_every_page_opens_with_a_checkpoint_from_a_folder(folder_server, page, kind, pages):
    model = FOLDER_MODELS[kind]
    for name in pages:
        open_page(page, link(folder_server, name, model), timeout=180_000)
        assert_no_exception(page)
        sidebar = page.locator("[data-testid='stSidebar']").inner_text()
        assert "checkpoint" in sidebar and "from a folder" in sidebar, (name, sidebar[:500])
        if name in ("attention", "positions", "depth", "generation"):
            tall_screenshot(page, f"folder-{kind}-{name or 'home'}")


def test_a_typed_sentence_is_tokenised_and_labels_the_heatmap(folder_server, page):
    """The student's first act: type a sentence. The model's own tokenizer splits it (no token is refused) and
    the every-head grid's axes carry the pieces' text."""
    open_page(page, link(folder_server, "attention", FOLDER_MODELS["gpt2"]), timeout=180_000)
    box = page.locator("[data-testid='stSidebar'] textarea").first
    box.fill("The cat sat on the mat.")
    box.press("Control+Enter")
    page.wait_for_timeout(500)
    wait_for_run(page, timeout=180_000)
    assert_no_exception(page)
    assert "unknown token" not in page.locator("[data-testid='stSidebar']").inner_text()
    labels = set()
    for trace in plotly_data(page, "attention-fig_grid"):  # by its key: plots mount in no fixed order
        for axis in ("x", "y"):
            labels |= {str(v) for v in (trace.get(axis) or [])}
    text = " ".join(labels)
    assert "at" in text and "." in text, sorted(labels)[:40]  # pieces of "cat", "sat", "mat" and the full stop
    assert not all(label.isdigit() for label in labels)  # text, never ids alone
    tall_screenshot(page, "folder-gpt2-typed-sentence")
