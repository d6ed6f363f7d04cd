"""A checkpoint loaded by core/pretrained.py computes what transformers computes from the same folder.

Tiny random GPT-2, BERT, RoFormer (BERT with RoPE on pairs), Llama (grouped-query attention, SwiGLU), Mistral
and Qwen2 (biases on q, k, v;
one key/value head) models are saved by transformers as one file and as ~20 KB shards, in float32 and in
bfloat16, and loaded both ways: transformers' own model (eager attention, float32; for bfloat16 files
that is the stored weights, upcast) and Glassbox's. Their logits agree within 1e-4 at several lengths,
BERT's with padding and token types too. Variants cover the config switches the loader reads.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from core.pretrained import describe, load_pretrained, padding_mask, sliding_window_masks
from tests.core.pretrained_models import reference, save_hf, tiny_hf_model

LENGTHS = (1, 6, 17)
KINDS = ("gpt2", "bert", "roformer", "llama", "mistral", "qwen2")


def random_tokens(vocab: int, n: int, batch: int = 2, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, vocab, (batch, n), generator=torch.Generator().manual_seed(seed + n))


def assert_same_logits(ours: torch.Tensor, theirs: torch.Tensor) -> None:
    assert ours.shape == theirs.shape
    torch.testing.assert_close(ours, theirs, atol=1e-4, rtol=0)


def compare(kind: str, folder: Path, lengths=LENGTHS, hf_model=None, **options) -> None:
    """Logits of Glassbox's load of `folder` against transformers' (its reload, unless hf_model is given)."""
    theirs_model = hf_model if hf_model is not None else reference(kind, folder)
    ours_model, _ = load_pretrained(folder)
    vocab = theirs_model.config.vocab_size
    for n in lengths:
        tokens = random_tokens(vocab, n)
        with torch.no_grad():
            assert_same_logits(ours_model(tokens, **options), theirs_model(tokens).logits)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("sharded", [False, True], ids=["single", "sharded"])
@pytest.mark.parametrize("kind", KINDS)
def test_logits_match_transformers(kind, sharded, dtype, tmp_path, one_thread):
    folder = save_hf(tiny_hf_model(kind), tmp_path / kind, sharded=sharded, dtype=dtype)
    shards = list(folder.glob("*.safetensors"))
    assert len(shards) > 1 if sharded else shards == [folder / "model.safetensors"]
    assert describe(folder).dtype == {torch.float32: "float32", torch.bfloat16: "bfloat16"}[dtype]
    compare(kind, folder)


@pytest.mark.parametrize("kind", ["bert", "roformer"])
def test_bert_with_padding_and_token_types(kind, tmp_path, one_thread):
    folder = save_hf(tiny_hf_model(kind), tmp_path / kind)
    theirs_model = reference(kind, folder)
    ours_model, _ = load_pretrained(folder)
    tokens = random_tokens(theirs_model.config.vocab_size, 9)
    attention = torch.ones(2, 9, dtype=torch.long)
    attention[1, 5:] = 0  # the second sentence is 5 tokens and 4 of padding
    types = torch.zeros(2, 9, dtype=torch.long)
    types[:, 4:] = 1  # sentence B from position 4
    with torch.no_grad():
        theirs = theirs_model(tokens, attention_mask=attention, token_type_ids=types).logits
        ours = ours_model(tokens, mask=padding_mask(attention), token_type_ids=types)
        assert_same_logits(ours, theirs)
        ours_unpadded = ours_model(tokens, token_type_ids=types)
    assert not torch.allclose(ours_unpadded[1], theirs[1], atol=1e-3)  # the padding mask matters


def test_gpt2_model_without_its_lm_head_class(tmp_path, one_thread):
    """GPT2Model (no "transformer." prefix, no lm_head): the unembedding is the tied token embedding."""
    hf_model = tiny_hf_model("gpt2-base")
    folder = save_hf(hf_model, tmp_path / "gpt2-base")
    ours_model, _ = load_pretrained(folder)
    tokens = random_tokens(hf_model.config.vocab_size, 6)
    with torch.no_grad():
        theirs = hf_model(tokens).last_hidden_state @ hf_model.wte.weight.T  # [batch pos vocab]
        assert_same_logits(ours_model(tokens), theirs)


def test_gpt2_lm_head_model_saved_without_the_prefix(tmp_path, one_thread):
    """The published gpt2 checkpoint names its tensors h.0... (no "transformer.") under GPT2LMHeadModel."""
    hf_model = tiny_hf_model("gpt2")
    folder = save_hf(hf_model, tmp_path / "gpt2")
    tensors = load_file(folder / "model.safetensors")
    assert all(key.startswith("transformer.") for key in tensors)
    save_file({key.removeprefix("transformer."): t for key, t in tensors.items()}, folder / "model.safetensors",
              metadata={"format": "pt"})
    compare("gpt2", folder, hf_model=hf_model)


def test_gpt2_without_attention_scaling(tmp_path, one_thread):
    folder = save_hf(tiny_hf_model("gpt2", scale_attn_weights=False), tmp_path / "gpt2")
    compare("gpt2", folder)


def test_gpt2_untied_unembedding(tmp_path, one_thread):
    folder = save_hf(tiny_hf_model("gpt2", tie_word_embeddings=False), tmp_path / "gpt2")
    compare("gpt2", folder)


@pytest.mark.parametrize("variant", [dict(tie_word_embeddings=True), dict(attention_bias=True, mlp_bias=True),
                                     dict(head_dim=16), dict(num_key_value_heads=4)],
                         ids=["tied", "biases", "wide-heads", "no-gqa"])
def test_llama_variants(variant, tmp_path, one_thread):
    folder = save_hf(tiny_hf_model("llama", **variant), tmp_path / "llama")
    compare("llama", folder)


def test_llama_config_with_the_old_rope_theta_key(tmp_path, one_thread):
    """Files from before transformers 5 give rope_theta at the top level and no rope_parameters."""
    hf_model = tiny_hf_model("llama", rope_parameters={"rope_type": "default", "rope_theta": 500.0})
    folder = save_hf(hf_model, tmp_path / "llama")
    config = json.loads((folder / "config.json").read_text())
    del config["rope_parameters"]
    config["rope_theta"] = 500.0
    (folder / "config.json").write_text(json.dumps(config))
    compare("llama", folder, hf_model=hf_model)
    config["rope_theta"] = 10000.0  # the base matters: a wrong one would not match
    (folder / "config.json").write_text(json.dumps(config))
    ours_model, _ = load_pretrained(folder)
    tokens = random_tokens(hf_model.config.vocab_size, 12)
    with torch.no_grad():
        assert not torch.allclose(ours_model(tokens), hf_model(tokens).logits, atol=1e-3)


def test_bert_with_old_layer_norm_names(tmp_path, one_thread):
    """Early BERT files call LayerNorm's weight and bias gamma and beta."""
    hf_model = tiny_hf_model("bert")
    folder = save_hf(hf_model, tmp_path / "bert")
    tensors = load_file(folder / "model.safetensors")
    renamed = {k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta"): t
               for k, t in tensors.items()}
    save_file(renamed, folder / "model.safetensors", metadata={"format": "pt"})
    compare("bert", folder, hf_model=hf_model)


def test_mistral_sliding_window_masks_make_long_inputs_exact(tmp_path, one_thread):
    hf_model = tiny_hf_model("mistral", sliding_window=4)
    folder = save_hf(hf_model, tmp_path / "mistral")
    info = describe(folder)
    ours_model, _ = load_pretrained(folder)
    tokens = random_tokens(hf_model.config.vocab_size, 11)
    with torch.no_grad():
        theirs = hf_model(tokens).logits
        assert_same_logits(ours_model(tokens, mask=sliding_window_masks(info, 11)), theirs)
        assert not torch.allclose(ours_model(tokens), theirs, atol=1e-3)  # the note is true: no window by default
    compare("mistral", folder, lengths=(4,), hf_model=hf_model)  # within the window nothing is needed


def test_qwen2_sliding_window_on_some_layers(tmp_path, one_thread):
    hf_model = tiny_hf_model("qwen2", use_sliding_window=True, sliding_window=3, max_window_layers=1)
    folder = save_hf(hf_model, tmp_path / "qwen2")
    info = describe(folder)
    assert info.sliding_layers == (1,)
    ours_model, _ = load_pretrained(folder)
    tokens = random_tokens(hf_model.config.vocab_size, 9)
    with torch.no_grad():
        assert_same_logits(ours_model(tokens, mask=sliding_window_masks(info, 9)), hf_model(tokens).logits)


@pytest.mark.parametrize("kind", KINDS)
def test_every_hook_runs_on_a_loaded_model(kind, tmp_path, one_thread):
    folder = save_hf(tiny_hf_model(kind), tmp_path / kind)
    model, tokenizer = load_pretrained(folder)
    tokens = torch.tensor([tokenizer.encode("the cat sat on the mat")])
    logits, cache = model.run_with_cache(tokens)
    assert set(cache) == set(model.hook_names())
    assert torch.allclose(logits, model(tokens), atol=1e-5)


def test_generation_matches_transformers_greedy(tmp_path, one_thread):
    hf_model = tiny_hf_model("llama")
    folder = save_hf(hf_model, tmp_path / "llama")
    model, _ = load_pretrained(folder)
    prefix = random_tokens(hf_model.config.vocab_size, 5, batch=1)
    with torch.no_grad():
        theirs = hf_model.generate(prefix, max_new_tokens=8, do_sample=False, pad_token_id=0)
    assert torch.equal(model.generate(prefix, 8), theirs)


def test_loaded_weights_are_owned_memory_not_file_mappings(tmp_path, one_thread):
    """Deleting the files after loading leaves the model intact (its tensors are copies, not mmaps)."""
    folder = save_hf(tiny_hf_model("gpt2"), tmp_path / "gpt2")
    model, tokenizer = load_pretrained(folder)
    tokens = torch.tensor([tokenizer.encode("hello world")])
    before = model(tokens)
    shutil.rmtree(folder)
    assert torch.equal(model(tokens), before)
