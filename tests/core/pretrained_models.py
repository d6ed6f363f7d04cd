"""Tiny random Hugging Face checkpoints and tokenizers, built offline for the core/pretrained.py tests.

`transformers` is imported here and in the tests only, never in core/. Every model is a few thousand
weights with every parameter (norm weights and biases included) moved off its initial value, so a
weight mapped to the wrong place changes the logits. Tokenizers are trained on a handful of sentences
with the `tokenizers` library and saved in the three layouts core/pretrained.py reads.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import torch
from tokenizers import ByteLevelBPETokenizer, BertWordPieceTokenizer

SENTENCES = [
    "The cat sat on the mat.", "Hello world! Attention is all you need.",
    "Transformers read tokens; every head looks at the sequence.", "def f(x):\n    return x + 1\n",
    "Café crème, naïve façade, 世界 and 🙂 emoji.", "the quick brown fox jumps over the lazy dog",
    "unbelievable tokenization of tokenizers", "sentence one. sentence two? sentence three!",
]
BPE_VOCAB = 320  # byte-level BPE starts from 256 bytes; a few merges on top
WORDPIECE_VOCAB = 160
EOT = "<|endoftext|>"

SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
             max_position_embeddings=64)


def hf_classes(kind: str):
    """(config class, model class, config keyword arguments) for one kind of tiny model."""
    import transformers as hf

    kinds = {
        "gpt2": (hf.GPT2Config, hf.GPT2LMHeadModel,
                 dict(vocab_size=BPE_VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=64, bos_token_id=0,
                      eos_token_id=0)),
        "gpt2-base": (hf.GPT2Config, hf.GPT2Model,
                      dict(vocab_size=BPE_VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=64, bos_token_id=0,
                           eos_token_id=0)),
        "bert": (hf.BertConfig, hf.BertForMaskedLM, dict(SMALL, vocab_size=WORDPIECE_VOCAB)),
        "bert-base": (hf.BertConfig, hf.BertModel, dict(SMALL, vocab_size=WORDPIECE_VOCAB)),
        "roformer": (hf.RoFormerConfig, hf.RoFormerForMaskedLM, dict(SMALL, vocab_size=WORDPIECE_VOCAB)),
        "roformer-base": (hf.RoFormerConfig, hf.RoFormerModel, dict(SMALL, vocab_size=WORDPIECE_VOCAB)),
        "llama": (hf.LlamaConfig, hf.LlamaForCausalLM,
                  dict(SMALL, vocab_size=BPE_VOCAB, num_key_value_heads=2, bos_token_id=0, eos_token_id=0)),
        "mistral": (hf.MistralConfig, hf.MistralForCausalLM,
                    dict(SMALL, vocab_size=BPE_VOCAB, num_key_value_heads=2, bos_token_id=0, eos_token_id=0)),
        "qwen2": (hf.Qwen2Config, hf.Qwen2ForCausalLM,
                  dict(SMALL, vocab_size=BPE_VOCAB, num_key_value_heads=1, bos_token_id=0, eos_token_id=0)),
    }
    return kinds[kind]


def tiny_hf_model(kind: str, seed: int = 0, **config_overrides):
    """A random HF model of `kind` in eval mode, eager attention, every trainable parameter perturbed (a frozen
    one, RoFormer's sin/cos table, is a formula: perturbed, it would be another model)."""
    config_cls, model_cls, kwargs = hf_classes(kind)
    config = config_cls(**{**kwargs, **config_overrides})
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = model_cls(config).eval()
    with torch.no_grad():
        for p in model.parameters():  # tied parameters appear once
            if p.requires_grad:
                p.add_(0.2 * torch.randn_like(p))
    return model


def reference(kind: str, folder: Path):
    """HF's own model read back from `folder` in float32 (for bfloat16 files: the stored weights, upcast).
    RoFormer's sin/cos table is recomputed: a bfloat16 file stores it rounded to 8 significant bits, and
    Glassbox computes RoPE from the formula, as the model was trained."""
    _, model_cls, _ = hf_classes(kind)
    model = model_cls.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager").eval()
    for module in model.modules():
        if type(module).__name__ == "RoFormerSinusoidalPositionalEmbedding":
            with torch.no_grad():
                module.weight.copy_(module.create_weight())
    return model


def save_hf(model, folder: Path, *, sharded: bool = False, dtype: torch.dtype = torch.float32) -> Path:
    """save_pretrained into folder (sharded in ~20 KB pieces when asked), with a tokenizer beside it."""
    model = model.to(dtype)
    if sharded:
        model.save_pretrained(folder, max_shard_size="20KB")
    else:
        model.save_pretrained(folder)
    write_tokenizer(folder, "wordpiece" if model.config.model_type in ("bert", "roformer") else "bpe")
    return folder


def write_tokenizer(folder: Path, kind: str, layout: str = "tokenizer.json") -> Path:
    """A tokenizer trained on SENTENCES, saved in `layout`: "tokenizer.json", "files" (vocab.json +
    merges.txt, or vocab.txt) or "both"."""
    folder.mkdir(parents=True, exist_ok=True)
    source = _trained(kind)
    names = ["tokenizer.json"] if layout == "tokenizer.json" else \
        [n for n in ("vocab.json", "merges.txt", "vocab.txt") if (source / n).exists()]
    if layout == "both":
        names += ["tokenizer.json"]
    for name in names:
        shutil.copy(source / name, folder / name)
    return folder


_TRAINED: dict[str, Path] = {}


def _trained(kind: str) -> Path:
    """The trained tokenizer's files (made once per test session, in a temporary folder)."""
    if kind not in _TRAINED:
        import tempfile

        folder = Path(tempfile.mkdtemp(prefix=f"glassbox-tok-{kind}-"))
        if kind == "bpe":
            tok = ByteLevelBPETokenizer()
            tok.train_from_iterator(SENTENCES, vocab_size=BPE_VOCAB, min_frequency=1, special_tokens=[EOT],
                                    show_progress=False)
            tok.save_model(str(folder))
            tok.save(str(folder / "tokenizer.json"))
        else:
            from transformers import BertTokenizerFast

            tok = BertWordPieceTokenizer(lowercase=True)
            tok.train_from_iterator(SENTENCES, vocab_size=WORDPIECE_VOCAB, min_frequency=1, show_progress=False)
            tok.save_model(str(folder))
            # transformers' own save gives tokenizer.json its [CLS] ... [SEP] template, as published BERTs have
            saved = folder / "hf"
            BertTokenizerFast.from_pretrained(str(folder)).save_pretrained(str(saved))
            shutil.copy(saved / "tokenizer.json", folder / "tokenizer.json")
        _TRAINED[kind] = folder
    return _TRAINED[kind]
