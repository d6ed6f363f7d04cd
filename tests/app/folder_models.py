"""Checkpoint folders for the page tests: a tiny random GPT-2, BERT and Llama (GQA, SwiGLU), saved by
Hugging Face's `transformers` (test-only) with tokenizers trained here, in a folder the app is pointed at
through GLASSBOX_MODELS_DIR (and an empty Hugging Face cache, so a developer's own cache never shows up)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.core.pretrained_models import save_hf, tiny_hf_model

FOLDER_MODELS = {"gpt2": "folder:tiny-gpt2", "bert": "folder:tiny-bert", "llama": "folder:tiny-llama"}


def build_models_dir(root: Path) -> Path:
    """Save the three tiny checkpoints under root/<tiny-kind>; returns root."""
    for kind in FOLDER_MODELS:
        if not (root / f"tiny-{kind}" / "config.json").exists():
            save_hf(tiny_hf_model(kind), root / f"tiny-{kind}")
    return root


@pytest.fixture(scope="session")
def models_dir(tmp_path_factory) -> Path:
    return build_models_dir(tmp_path_factory.mktemp("models"))


@pytest.fixture
def folder_models(models_dir, tmp_path, monkeypatch) -> dict[str, str]:
    """The app sees the three tiny checkpoints; returns {kind: model id}."""
    monkeypatch.setenv("GLASSBOX_MODELS_DIR", str(models_dir))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hf-cache"))
    return dict(FOLDER_MODELS)
