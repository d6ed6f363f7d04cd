"""A GPT-2 checkpoint folder with a context of 1,024 tokens and a tiny width, for the long-input tests (issue 38).

Written straight in GPT-2's layout (config.json, model.safetensors with Conv1D weights `[in out]`, a byte-level BPE
tokenizer trained here) from a seeded generator, without importing `transformers` (5 s of a test file's budget):
core/pretrained.py reads it as it reads a folder saved by `save_pretrained`, which tests/core/test_pretrained*.py
check against Hugging Face's own model.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from tests.app.conftest import app_at, assert_ok
from tests.core.pretrained_models import BPE_VOCAB, write_tokenizer

LONG_MODEL = "folder:long-gpt2"
CONTEXT = 1024
WIDTH, LAYERS, HEADS = 16, 2, 2


def gpt2_tensors(d: int, layers: int, context: int, vocab: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """Random GPT-2 weights by their Hugging Face names (tied unembedding: no lm_head)."""
    g = torch.Generator().manual_seed(seed)

    def rand(*shape: int, scale: float = 0.2) -> torch.Tensor:
        return (scale * torch.randn(*shape, generator=g)).contiguous()

    out = {"wte.weight": rand(vocab, d), "wpe.weight": rand(context, d, scale=0.05),
           "ln_f.weight": 1 + rand(d, scale=0.05), "ln_f.bias": rand(d, scale=0.05)}
    for i in range(layers):
        h = f"h.{i}."
        out.update({h + "ln_1.weight": 1 + rand(d, scale=0.05), h + "ln_1.bias": rand(d, scale=0.05),
                    h + "attn.c_attn.weight": rand(d, 3 * d), h + "attn.c_attn.bias": rand(3 * d, scale=0.05),
                    h + "attn.c_proj.weight": rand(d, d), h + "attn.c_proj.bias": rand(d, scale=0.05),
                    h + "ln_2.weight": 1 + rand(d, scale=0.05), h + "ln_2.bias": rand(d, scale=0.05),
                    h + "mlp.c_fc.weight": rand(d, 4 * d), h + "mlp.c_fc.bias": rand(4 * d, scale=0.05),
                    h + "mlp.c_proj.weight": rand(4 * d, d), h + "mlp.c_proj.bias": rand(d, scale=0.05)})
    return out


def build_long_model(root: Path) -> Path:
    """root/long-gpt2: a random GPT-2 of width WIDTH, LAYERS layers, HEADS heads and a context of CONTEXT; returns
    root (a models folder for GLASSBOX_MODELS_DIR)."""
    folder = root / "long-gpt2"
    if (folder / "config.json").exists():
        return root
    folder.mkdir(parents=True, exist_ok=True)
    save_file(gpt2_tensors(WIDTH, LAYERS, CONTEXT, BPE_VOCAB), str(folder / "model.safetensors"))
    config = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_embd": WIDTH, "n_layer": LAYERS,
              "n_head": HEADS, "n_positions": CONTEXT, "vocab_size": BPE_VOCAB, "bos_token_id": 0, "eos_token_id": 0,
              "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5, "tie_word_embeddings": True}
    (folder / "config.json").write_text(json.dumps(config))
    write_tokenizer(folder, "bpe")
    return root


def long_text() -> str:
    """An English text longer than the context: the sidebar reads its first 1,024 tokens (the tiny tokenizer splits
    English into short pieces)."""
    from core.text_task import EXAMPLES

    return " ".join(EXAMPLES * 12)


@pytest.fixture(scope="session")
def long_models_dir(tmp_path_factory) -> Path:
    return build_long_model(tmp_path_factory.mktemp("long-models"))


@pytest.fixture
def long_model(long_models_dir, tmp_path, monkeypatch) -> str:
    """The app sees the 1,024-context GPT-2 (and no Hugging Face cache); returns its id."""
    monkeypatch.setenv("GLASSBOX_MODELS_DIR", str(long_models_dir))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hf-cache"))
    return LONG_MODEL


# -- what the long-input page tests share --------------------------------------------------------------------------

N = 1024
FIGURE_BYTES = 1 << 20  # what one figure may send at most


def at_page(page: str, **query):
    """The app switched to `page` with the long model and a 1,024-token text."""
    at = app_at(f"pages/{page}.py", {"model": LONG_MODEL, "input": long_text(), **query})
    assert_ok(at)
    return at


def texts(at) -> str:
    return " ".join(e.value for kind in ("caption", "info", "markdown", "warning") for e in getattr(at, kind))


def figure(at, key: str) -> tuple[dict, int]:
    """(the plotly spec of the chart created with `key`, the bytes it sends)."""
    for el in at.get("plotly_chart"):
        if el.proto.id.endswith(key):
            return json.loads(el.proto.spec), el.proto.ByteSize()
    raise AssertionError(f"no chart {key}; have {[el.proto.id.rsplit('-', 1)[-1] for el in at.get('plotly_chart')]}")


def assert_every_figure_light(at) -> None:
    sizes = {el.proto.id.rsplit("-", 1)[-1]: el.proto.ByteSize() for el in at.get("plotly_chart")}
    assert sizes and max(sizes.values()) <= FIGURE_BYTES, sizes
