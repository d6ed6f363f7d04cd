"""Export: a trained Glassbox model -> a Hugging Face model folder (Qwen2ForCausalLM, GPT2LMHeadModel,
RoFormerForMaskedLM or BertForMaskedLM).

The tensor names and layouts are core.pretrained's own recipes run backwards, so export and import are
exact inverses by construction: each recipe names a Glassbox tensor, the checkpoint tensor it comes from,
the slice it is (GPT-2's fused q | k | v) and whether it is turned (GPT-2's Conv1D stores `[in out]`).
The weights are stored as float16 (the loaders upcast them to float32; RoFormer's sin/cos table, a formula,
stays float32); config.json is the one transformers writes for the layout, and glassbox.json beside it
records how the model was made.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import torch
from safetensors.torch import save_file

from core import positional
from core.model import Transformer
from core.pretrained import _translate  # the family's name mapping, shared with the loader

TRANSFORMERS_VERSION = "5.23.0"  # the version whose config.json layout these mirror (tests check against it)


def gpt2_config(model: Transformer, eot_id: int) -> dict:
    """config.json as transformers writes it for GPT2LMHeadModel."""
    c = model.cfg
    return {
        "activation_function": "gelu_new", "add_cross_attention": False, "architectures": ["GPT2LMHeadModel"],
        "attn_pdrop": 0.0, "bos_token_id": eot_id, "dtype": "float16", "embd_pdrop": 0.0, "eos_token_id": eot_id,
        "initializer_range": 0.02, "layer_norm_epsilon": c.ln_eps, "model_type": "gpt2", "n_ctx": c.max_len,
        "n_embd": c.d_model, "n_head": c.n_heads, "n_inner": c.d_mlp, "n_layer": c.n_layers,
        "n_positions": c.max_len, "pad_token_id": None, "reorder_and_upcast_attn": False, "resid_pdrop": 0.0,
        "scale_attn_by_inverse_layer_idx": False, "scale_attn_weights": True, "summary_activation": None,
        "summary_first_dropout": 0.1, "summary_proj_to_labels": True, "summary_type": "cls_index",
        "summary_use_proj": True, "tie_word_embeddings": True, "transformers_version": TRANSFORMERS_VERSION,
        "use_cache": True, "vocab_size": c.vocab_size,
    }


def qwen2_config(model: Transformer, eot_id: int) -> dict:
    """config.json as transformers writes it for Qwen2ForCausalLM (no sliding window; RoPE's base given)."""
    c = model.cfg
    return {
        "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": eot_id, "dtype": "float16",
        "eos_token_id": eot_id, "hidden_act": "silu", "hidden_size": c.d_model, "initializer_range": 0.02,
        "intermediate_size": c.d_mlp, "layer_types": ["full_attention"] * c.n_layers,
        "max_position_embeddings": c.max_len, "max_window_layers": c.n_layers, "model_type": "qwen2",
        "num_attention_heads": c.n_heads, "num_hidden_layers": c.n_layers,
        "num_key_value_heads": c.n_kv_heads or c.n_heads, "pad_token_id": None, "rms_norm_eps": c.ln_eps,
        "rope_parameters": {"rope_theta": c.rope_base, "rope_type": "default"}, "sliding_window": None,
        "tie_word_embeddings": True, "transformers_version": TRANSFORMERS_VERSION, "use_cache": True,
        "use_sliding_window": False, "vocab_size": c.vocab_size,
    }


def decoder_config(model: Transformer, eot_id: int) -> dict:
    """config.json for the English decoder's layout (its config's positions tell which)."""
    return gpt2_config(model, eot_id) if model.cfg.pos == "learned" else qwen2_config(model, eot_id)


def bert_config(model: Transformer, pad_id: int) -> dict:
    """config.json as transformers writes it for BertForMaskedLM."""
    c = model.cfg
    return {
        "add_cross_attention": False, "architectures": ["BertForMaskedLM"], "attention_probs_dropout_prob": 0.0,
        "bos_token_id": None, "classifier_dropout": None, "dtype": "float16", "eos_token_id": None,
        "hidden_act": "gelu", "hidden_dropout_prob": 0.0, "hidden_size": c.d_model, "initializer_range": 0.02,
        "intermediate_size": c.d_mlp, "is_decoder": False, "layer_norm_eps": c.ln_eps,
        "max_position_embeddings": c.max_len, "model_type": "bert", "num_attention_heads": c.n_heads,
        "num_hidden_layers": c.n_layers, "pad_token_id": pad_id,
        "tie_word_embeddings": True, "transformers_version": TRANSFORMERS_VERSION, "type_vocab_size": c.n_token_types,
        "use_cache": True, "vocab_size": c.vocab_size,
    }


def roformer_config(model: Transformer, pad_id: int) -> dict:
    """config.json as transformers writes it for RoFormerForMaskedLM (RoPE on pairs, base 10000: RoFormer's own)."""
    c = model.cfg
    return {
        "add_cross_attention": False, "architectures": ["RoFormerForMaskedLM"], "attention_probs_dropout_prob": 0.0,
        "bos_token_id": None, "dtype": "float16", "embedding_size": c.d_model, "eos_token_id": None,
        "hidden_act": "gelu", "hidden_dropout_prob": 0.0, "hidden_size": c.d_model, "initializer_range": 0.02,
        "intermediate_size": c.d_mlp, "is_decoder": False, "layer_norm_eps": c.ln_eps,
        "max_position_embeddings": c.max_len, "model_type": "roformer", "num_attention_heads": c.n_heads,
        "num_hidden_layers": c.n_layers, "pad_token_id": pad_id, "rotary_value": False,
        "tie_word_embeddings": True, "transformers_version": TRANSFORMERS_VERSION, "type_vocab_size": c.n_token_types,
        "use_cache": True, "vocab_size": c.vocab_size,
    }


def encoder_config(model: Transformer, pad_id: int) -> dict:
    """config.json for the English encoder's layout (its config's positions tell which)."""
    return bert_config(model, pad_id) if model.cfg.pos == "learned" else roformer_config(model, pad_id)


def hf_tensors(model: Transformer, config: dict, dtype: torch.dtype = torch.float16) -> dict[str, torch.Tensor]:
    """The checkpoint's tensors under Hugging Face's names: every loader recipe run backwards."""
    t = _translate(config)
    ours = {k: v.detach().to("cpu", torch.float32) for k, v in model.state_dict().items()}
    pieces: dict[str, dict[int, torch.Tensor]] = defaultdict(dict)  # key -> {part index: tensor}
    shapes = {}
    for recipe in t.recipes():
        key = (t.body_prefixes[0] if recipe.body else "") + recipe.source
        weight = ours[recipe.target]
        if recipe.transpose:
            weight = weight.T  # back to Conv1D's [in out]
        pieces[key][recipe.part[0] if recipe.part else 0] = weight
        shapes[key] = recipe.shape
    out = {}
    for key, parts in pieces.items():
        whole = torch.cat([parts[i] for i in sorted(parts)], dim=-1) if len(parts) > 1 else parts[0]
        if tuple(whole.shape) != shapes[key]:
            raise AssertionError(f"{key}: built {tuple(whole.shape)}, the loader expects {shapes[key]}")
        out[key] = whole.to(dtype).contiguous()
    if config.get("model_type") == "roformer":
        c = model.cfg
        out[t.body_prefixes[0] + "encoder.embed_positions.weight"] = roformer_positions(c.max_len, c.d_head)
    return out


def roformer_positions(n_positions: int, d_head: int) -> torch.Tensor:
    """RoFormer's sin/cos table `[pos d_head]` in transformers' layout (sines of the angles pos * theta_i in the
    first half, cosines in the second), from the same RoPE angles Glassbox rotates with (core.positional), kept
    in float32: a rounded copy would turn transformers' angles away from the trained ones."""
    cos, sin = positional.rope_cos_sin(n_positions, d_head)  # [pos d_head/2] each, base 10000 as RoFormer's
    return torch.cat([sin, cos], dim=1).contiguous()  # [pos d_head]


def save_folder(model: Transformer, folder: Path, config: dict, manifest: dict) -> Path:
    """config.json, model.safetensors (float16) and glassbox.json into folder (the tokenizer is saved apart)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    weights = folder / "model.safetensors"
    save_file(hf_tensors(model, config), str(weights), metadata={"format": "pt"})
    weights.chmod(0o644)  # safetensors writes 0600; the app's server may run as another user
    write_manifest(folder, manifest)
    return folder


def write_manifest(folder: Path, manifest: dict) -> None:
    (folder / "glassbox.json").write_text(json.dumps(manifest, indent=2, default=_plain) + "\n", encoding="utf-8")


def _plain(value):
    """JSON for the few non-JSON values a manifest holds (tuples come out as lists already)."""
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, torch.device):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON")


def rounded(model: Transformer, dtype: torch.dtype = torch.float16) -> dict[str, torch.Tensor]:
    """The model's state dict with every weight rounded to `dtype` and back (what the folder holds)."""
    return {k: v.detach().to(dtype).to(v.dtype) for k, v in model.state_dict().items()}
