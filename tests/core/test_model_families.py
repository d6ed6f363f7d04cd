"""Real model families inside our Transformer: the config fields they need, parity with Hugging Face.

Tiny random GPT-2, BERT, Llama (grouped keys and values), Mistral and Qwen2 models are built offline
with `transformers` (a test-only dependency), their weights copied into our model by a small mapping
written here (the real loader is core/pretrained.py), and their logits, attention patterns and a
head ablation compared with Hugging Face's own. The rest checks each new field on its own: the
norm's `hook_scale`, grouped-query hooks, partial and "halves" RoPE against a rotation written out
by hand, token types, tied embeddings through a checkpoint, and loading onto the meta device.
"""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load as st_load
from torch import nn

from core import checkpoints, positional
from core.config import TransformerConfig
from core.model import TABLE_POSITIONS, Transformer

transformers = pytest.importorskip("transformers")

NEW_FIELDS = ("qkv_bias", "attn_out_bias", "mlp_bias", "unembed_bias", "tie_embeddings", "gated_mlp", "norm_type",
              "embed_norm", "n_token_types", "n_kv_heads", "rope_layout", "rotary_dim", "mlm_head")
VOCAB, D_MODEL, N_HEADS, N_LAYERS, MAX_LEN = 50, 32, 4, 2, 32


# ---------------------------------------------------------------------------------------------
# Helpers: a tiny random Hugging Face model, and its weights under our names


def randomized(hf_model: nn.Module, seed: int = 0) -> nn.Module:
    """`hf_model` in eval mode with every weight redrawn (seeded here, inside the test): norms'
    weights near 1 and biases near 0 would hide a wrongly mapped norm or bias."""
    torch.manual_seed(seed)
    norms = {id(m.weight) for m in hf_model.modules()
             if isinstance(m, nn.LayerNorm) or type(m).__name__.endswith("RMSNorm")}
    with torch.no_grad():
        for p in hf_model.parameters():
            p.normal_(0.0, 0.2)
            if id(p) in norms:
                p.add_(1.0)
    return hf_model.eval()


def hf_model(kind: str) -> nn.Module:
    """A tiny random Hugging Face model of one family (eager attention, so patterns can be read)."""
    torch.manual_seed(0)
    T = transformers
    common = dict(vocab_size=VOCAB, attn_implementation="eager")
    if kind == "gpt2":
        cfg = T.GPT2Config(n_positions=MAX_LEN, n_embd=D_MODEL, n_layer=N_LAYERS, n_head=N_HEADS,
                           bos_token_id=0, eos_token_id=0, **common)
        return randomized(T.GPT2LMHeadModel(cfg))
    if kind == "bert":
        cfg = T.BertConfig(hidden_size=D_MODEL, num_hidden_layers=N_LAYERS, num_attention_heads=N_HEADS,
                           intermediate_size=64, max_position_embeddings=MAX_LEN, type_vocab_size=2, **common)
        return randomized(T.BertForMaskedLM(cfg))
    sizes = dict(hidden_size=D_MODEL, intermediate_size=48, num_hidden_layers=N_LAYERS, num_attention_heads=N_HEADS,
                 num_key_value_heads=2, max_position_embeddings=MAX_LEN, rms_norm_eps=1e-6,
                 rope_parameters={"rope_type": "default", "rope_theta": 500.0}, bos_token_id=0, eos_token_id=0,
                 **common)
    if kind == "llama":
        return randomized(T.LlamaForCausalLM(T.LlamaConfig(**sizes)))
    if kind == "mistral":
        return randomized(T.MistralForCausalLM(T.MistralConfig(sliding_window=None, **sizes)))
    if kind == "qwen2":
        return randomized(T.Qwen2ForCausalLM(T.Qwen2Config(**sizes)))
    raise ValueError(kind)


def our_config(kind: str, hf: nn.Module) -> TransformerConfig:
    """Our config for a Hugging Face model of family `kind`."""
    c = hf.config
    if kind == "gpt2":
        return TransformerConfig(arch="decoder", vocab_size=c.vocab_size, d_model=c.n_embd, n_heads=c.n_head,
                                 n_layers=c.n_layer, max_len=c.n_positions, pos="learned", act="gelu_tanh",
                                 ln_eps=c.layer_norm_epsilon, qkv_bias=True, attn_out_bias=True, tie_embeddings=True)
    if kind == "bert":
        return TransformerConfig(arch="encoder", vocab_size=c.vocab_size, d_model=c.hidden_size,
                                 n_heads=c.num_attention_heads, n_layers=c.num_hidden_layers,
                                 d_mlp=c.intermediate_size, max_len=c.max_position_embeddings, pos="learned",
                                 norm="post", act="gelu", ln_eps=c.layer_norm_eps, qkv_bias=True,
                                 attn_out_bias=True, embed_norm=True, n_token_types=c.type_vocab_size,
                                 mlm_head=True, unembed_bias=True, tie_embeddings=True)
    return TransformerConfig(arch="decoder", vocab_size=c.vocab_size, d_model=c.hidden_size,
                             n_heads=c.num_attention_heads, n_kv_heads=c.num_key_value_heads,
                             d_head=getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads,
                             n_layers=c.num_hidden_layers, d_mlp=c.intermediate_size,
                             max_len=c.max_position_embeddings, pos="rope", rope_layout="halves",
                             rope_base=c.rope_parameters["rope_theta"], norm_type="rmsnorm", ln_eps=c.rms_norm_eps,
                             gated_mlp=True, act="silu", mlp_bias=False, qkv_bias=kind == "qwen2",
                             tie_embeddings=c.tie_word_embeddings)


def gpt2_tensors(hf: nn.Module) -> dict[str, torch.Tensor]:
    """GPT-2's weights under our names. Its Conv1D layers store [in, out]: transposed; c_attn
    holds q, k and v side by side."""
    sd, d, out = hf.state_dict(), hf.config.n_embd, {}

    def copy(ours: str, theirs: str, conv1d: bool = False) -> None:
        weight = sd[theirs + ".weight"]
        out[ours + ".weight"], out[ours + ".bias"] = (weight.T if conv1d else weight), sd[theirs + ".bias"]

    out["stack.W_E.weight"] = sd["transformer.wte.weight"]
    out["stack.W_pos.weight"] = sd["transformer.wpe.weight"]
    for i in range(hf.config.n_layer):
        p, o = f"transformer.h.{i}.", f"stack.blocks.{i}."
        copy(o + "ln1.ln", p + "ln_1")
        weights = sd[p + "attn.c_attn.weight"].split(d, dim=1)  # 3 x [d_model d_model], [in out]
        biases = sd[p + "attn.c_attn.bias"].split(d)
        for name, w, b in zip("QKV", weights, biases):
            out[o + f"attn.W_{name}.weight"], out[o + f"attn.W_{name}.bias"] = w.T, b
        copy(o + "attn.W_O", p + "attn.c_proj", conv1d=True)
        copy(o + "ln2.ln", p + "ln_2")
        copy(o + "mlp.W_in", p + "mlp.c_fc", conv1d=True)
        copy(o + "mlp.W_out", p + "mlp.c_proj", conv1d=True)
    copy("stack.ln_final.ln", "transformer.ln_f")
    return out  # no unembed.weight: tied to W_E


def bert_tensors(hf: nn.Module) -> dict[str, torch.Tensor]:
    """BertForMaskedLM's weights under our names (its nn.Linear layers are [out, in], as ours)."""
    sd, out = hf.state_dict(), {}

    def linear(ours: str, theirs: str) -> None:
        out[ours + ".weight"], out[ours + ".bias"] = sd[theirs + ".weight"], sd[theirs + ".bias"]

    e = "bert.embeddings."
    out["stack.W_E.weight"] = sd[e + "word_embeddings.weight"]
    out["stack.W_pos.weight"] = sd[e + "position_embeddings.weight"]
    out["stack.W_token_type.weight"] = sd[e + "token_type_embeddings.weight"]
    linear("stack.ln_embed.ln", e + "LayerNorm")
    for i in range(hf.config.num_hidden_layers):
        p, o = f"bert.encoder.layer.{i}.", f"stack.blocks.{i}."
        for name, theirs in (("W_Q", "query"), ("W_K", "key"), ("W_V", "value")):
            linear(o + "attn." + name, p + "attention.self." + theirs)
        linear(o + "attn.W_O", p + "attention.output.dense")
        linear(o + "ln1.ln", p + "attention.output.LayerNorm")
        linear(o + "mlp.W_in", p + "intermediate.dense")
        linear(o + "mlp.W_out", p + "output.dense")
        linear(o + "ln2.ln", p + "output.LayerNorm")
    linear("mlm_dense", "cls.predictions.transform.dense")
    linear("mlm_norm.ln", "cls.predictions.transform.LayerNorm")
    out["unembed.bias"] = sd["cls.predictions.decoder.bias"]
    return out  # no unembed.weight: tied to W_E


def llama_tensors(hf: nn.Module) -> dict[str, torch.Tensor]:
    """Llama / Mistral / Qwen2 weights under our names: gate -> W_gate, up -> W_in, down -> W_out."""
    sd, out = hf.state_dict(), {}
    out["stack.W_E.weight"] = sd["model.embed_tokens.weight"]
    names = {"self_attn.q_proj": "attn.W_Q", "self_attn.k_proj": "attn.W_K", "self_attn.v_proj": "attn.W_V",
             "self_attn.o_proj": "attn.W_O", "mlp.gate_proj": "mlp.W_gate", "mlp.up_proj": "mlp.W_in",
             "mlp.down_proj": "mlp.W_out", "input_layernorm": "ln1.ln", "post_attention_layernorm": "ln2.ln"}
    for i in range(hf.config.num_hidden_layers):
        for theirs, ours in names.items():
            for part in ("weight", "bias"):
                key = f"model.layers.{i}.{theirs}.{part}"
                if key in sd:
                    out[f"stack.blocks.{i}.{ours}.{part}"] = sd[key]
    out["stack.ln_final.ln.weight"] = sd["model.norm.weight"]
    out["unembed.weight"] = sd["lm_head.weight"]
    return out


def converted(kind: str, hf: nn.Module) -> Transformer:
    """Our model holding `hf`'s weights, loaded as the real loader does: a skeleton on the meta
    device (no random init allocated), assign=True, tie_weights, init_tables."""
    tensors = {"gpt2": gpt2_tensors, "bert": bert_tensors}.get(kind, llama_tensors)(hf)
    with torch.device("meta"):
        model = Transformer(our_config(kind, hf))
    model.load_state_dict({k: v.clone() for k, v in tensors.items()}, strict=True, assign=True)
    model.tie_weights()
    model.init_tables()
    return model.eval()


def ids(batch: int, n: int, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, VOCAB, (batch, n), generator=g)


# ---------------------------------------------------------------------------------------------
# 1. The new config fields refuse bad values by name


@pytest.mark.parametrize("fields,message", [
    ({"n_heads": 8, "d_model": 64, "n_kv_heads": 3}, r"n_kv_heads \(3\) must divide n_heads \(8\)"),
    ({"n_kv_heads": 0}, "n_kv_heads must be a positive integer"),
    ({"rotary_dim": 5}, r"rotary_dim \(5\) must be even and at most d_head \(16\)"),
    ({"rotary_dim": 18}, r"rotary_dim \(18\) must be even and at most d_head \(16\)"),
    ({"act": "swish"}, r"act must be one of \['relu', 'gelu', 'gelu_tanh', 'silu'\]"),
    ({"norm_type": "batchnorm"}, r"norm_type must be one of \['layernorm', 'rmsnorm'\]"),
    ({"rope_layout": "interleaved"}, r"rope_layout must be one of \['pairs', 'halves'\]"),
    ({"n_token_types": -1}, "n_token_types must be a whole number >= 0"),
    ({"n_token_types": 2, "arch": "encoder-decoder"}, "n_token_types is for single-stack models"),
    ({"qkv_bias": "yes"}, "qkv_bias must be True or False"),
    ({"tie_embeddings": 1}, "tie_embeddings must be True or False"),
])
def test_new_fields_refuse_bad_values_by_name(fields, message):
    with pytest.raises(ValueError, match=message):
        TransformerConfig(**fields)


def test_new_fields_default_to_todays_model_and_old_config_dicts_still_load():
    cfg = TransformerConfig()
    assert (cfg.qkv_bias, cfg.attn_out_bias, cfg.mlp_bias, cfg.unembed_bias, cfg.tie_embeddings) == \
        (False, False, True, False, False)
    assert (cfg.gated_mlp, cfg.norm_type, cfg.embed_norm, cfg.n_token_types, cfg.n_kv_heads, cfg.rope_layout,
            cfg.rotary_dim, cfg.mlm_head) == (False, "layernorm", False, 0, None, "pairs", None, False)
    assert cfg.kv_heads == cfg.n_heads and cfg.rope_dim == cfg.d_head
    # Every bundled checkpoint was saved before these fields existed: its stored config lacks them.
    entry = checkpoints.read_manifest()[0]
    with safe_open(str(checkpoints.MODELS_DIR / entry["file"]), "pt") as f:
        stored = json.loads(f.metadata()[checkpoints.META_KEY])["config"]
    assert not set(NEW_FIELDS) & set(stored)
    assert TransformerConfig.from_dict(stored) == TransformerConfig(**stored)
    model, _ = checkpoints.load_bundled(entry["id"])
    assert not any(isinstance(m, nn.RMSNorm) for m in model.modules())
    assert all(lin.bias is None for b in model.stack_for("decoder." if model.is_encoder_decoder else "").blocks
               for lin in (b.attn.W_Q, b.attn.W_K, b.attn.W_O))


# ---------------------------------------------------------------------------------------------
# 2. Parity with Hugging Face's own modules


@pytest.mark.parametrize("kind", ["gpt2", "llama", "mistral", "qwen2"])
def test_decoder_logits_and_patterns_match_hugging_face(kind):
    hf = hf_model(kind)
    ours = converted(kind, hf)
    if kind == "llama":
        assert ours.cfg.kv_heads == 2 < ours.cfg.n_heads  # grouped-query attention is exercised
    for n in (1, 7, 19):
        x = ids(2, n)
        with torch.no_grad():
            out = hf(x, output_attentions=True)
        logits, cache = ours.run_with_cache(x, names="*hook_pattern")
        torch.testing.assert_close(logits, out.logits, atol=1e-4, rtol=0)
        torch.testing.assert_close(ours(x), out.logits, atol=1e-4, rtol=0)  # the fused path too
        for i, pattern in enumerate(out.attentions):
            torch.testing.assert_close(cache[f"blocks.{i}.attn.hook_pattern"], pattern, atol=1e-5, rtol=0)


def test_bert_logits_and_patterns_match_hugging_face_with_padding_and_token_types():
    hf = hf_model("bert")
    ours = converted("bert", hf)
    x = ids(2, 12)
    keep = torch.ones(2, 12, dtype=torch.long)
    keep[1, 7:] = 0  # the second sequence is 7 tokens long, then padding
    types = torch.zeros(2, 12, dtype=torch.long)
    types[:, 4:] = 1
    with torch.no_grad():
        out = hf(x, attention_mask=keep, token_type_ids=types, output_attentions=True)
    mask = keep.bool()[:, None, None, :].expand(2, 1, 12, 12)  # [batch 1 q k], True = may attend
    for impl in ("auto", "explicit"):
        logits = ours(x, mask=mask, token_type_ids=types, attn_impl=impl)
        torch.testing.assert_close(logits[0], out.logits[0], atol=1e-4, rtol=0)
        torch.testing.assert_close(logits[1, :7], out.logits[1, :7], atol=1e-4, rtol=0)
    _, cache = ours.run_with_cache(x, names="*hook_pattern", mask=mask, token_type_ids=types)
    for i, pattern in enumerate(out.attentions):
        ours_pattern = cache[f"blocks.{i}.attn.hook_pattern"]
        torch.testing.assert_close(ours_pattern[0], pattern[0], atol=1e-5, rtol=0)
        torch.testing.assert_close(ours_pattern[1, :, :7], pattern[1, :, :7], atol=1e-5, rtol=0)
        assert bool((ours_pattern[1, :, :, 7:] == 0).all())  # nobody attends to padding
    # Without padding or token types, at a second length.
    x = ids(1, 20, seed=3)
    with torch.no_grad():
        expected = hf(x).logits
    torch.testing.assert_close(ours(x), expected, atol=1e-4, rtol=0)


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_zeroing_one_heads_z_equals_the_same_edit_in_hugging_face(kind):
    hf = hf_model(kind)
    ours = converted(kind, hf)
    head, dh = 1, ours.cfg.d_head
    x = ids(2, 9)

    def zero_head(z, hook):
        z = z.clone()
        z[:, :, head] = 0.0
        return z

    def zero_slice(module, args):  # the merged heads W_O reads: [batch pos head*d_head]
        merged = args[0].clone()
        merged[..., head * dh:(head + 1) * dh] = 0.0
        return (merged,)

    out_proj = hf.transformer.h[0].attn.c_proj if kind == "gpt2" else hf.model.layers[0].self_attn.o_proj
    handle = out_proj.register_forward_pre_hook(zero_slice)
    try:
        with torch.no_grad():
            expected = hf(x).logits
    finally:
        handle.remove()
    ablated = ours.run_with_hooks(x, fwd=[("blocks.0.attn.hook_z", zero_head)])
    torch.testing.assert_close(ablated, expected, atol=1e-4, rtol=0)
    assert (ablated - ours(x)).abs().max() > 1e-2  # the edit changed something


# ---------------------------------------------------------------------------------------------
# 3. hook_scale, grouped-query hooks, RoPE layouts


def tiny(**fields) -> Transformer:
    """A small random model of ours with extra config fields (weights scaled up for sharp patterns)."""
    torch.manual_seed(0)
    base = dict(vocab_size=VOCAB, d_model=D_MODEL, n_heads=N_HEADS, n_layers=N_LAYERS, max_len=MAX_LEN)
    model = Transformer(TransformerConfig(**{**base, **fields})).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * (0.1 if p.dim() == 1 else 0.3))
    return model


@pytest.mark.parametrize("norm_type", ["layernorm", "rmsnorm"])
def test_hook_scale_is_the_norms_divisor_and_touching_it_changes_nothing(norm_type):
    model = tiny(norm_type=norm_type, embed_norm=True)
    x = ids(2, 9)
    plain = model(x)
    logits, cache = model.run_with_cache(x, names=["*hook_scale", "*hook_resid_pre", "*hook_normalized"])
    torch.testing.assert_close(logits, plain, atol=1e-5, rtol=1e-5)  # explicit formula == fused kernel
    resid = cache["blocks.1.hook_resid_pre"]
    centred = resid - resid.mean(-1, keepdim=True) if norm_type == "layernorm" else resid
    expected = (centred.pow(2).mean(-1, keepdim=True) + model.cfg.ln_eps).sqrt()  # [batch pos 1]
    assert cache["blocks.1.ln1.hook_scale"].shape == (2, 9, 1)
    torch.testing.assert_close(cache["blocks.1.ln1.hook_scale"], expected, atol=1e-6, rtol=1e-6)
    fused = model.stack.blocks[1].ln1.ln(resid)
    torch.testing.assert_close(cache["blocks.1.ln1.hook_normalized"], fused, atol=1e-6, rtol=0)
    assert {"ln_embed.hook_scale", "ln_final.hook_scale", "blocks.0.ln2.hook_scale"} <= set(cache)
    if norm_type == "rmsnorm":  # a weight only: no bias, no mean subtracted
        assert [name for name, _ in model.stack.blocks[0].ln1.ln.named_parameters()] == ["weight"]
    # Doubling the divisor halves what the norm hands on (before its weight and bias).
    _, doubled = model.run_with_cache(x, names="blocks.1.ln1.hook_normalized",
                                      fwd=[("blocks.1.ln1.hook_scale", lambda s, hook: 2 * s)])
    ln = model.stack.blocks[1].ln1.ln
    shift = ln.bias if getattr(ln, "bias", None) is not None else 0.0
    torch.testing.assert_close(doubled["blocks.1.ln1.hook_normalized"] - shift,
                               (cache["blocks.1.ln1.hook_normalized"] - shift) / 2, atol=1e-5, rtol=0)


def test_norm_without_weights_has_no_hook_scale():
    model = tiny(norm="none")
    assert not any(n.endswith("hook_scale") for n in model.hook_names())
    post = tiny(norm="post")
    assert "ln_final.hook_scale" not in post.hook_names() and "blocks.0.ln1.hook_scale" in post.hook_names()


def test_grouped_query_hooks_keep_kv_heads_and_head_weights_repeat_them():
    model = tiny(n_heads=8, n_kv_heads=2, pos="rope", rope_layout="halves")
    x = ids(2, 7)
    _, cache = model.run_with_cache(x)
    assert cache["blocks.0.attn.hook_q"].shape == (2, 7, 8, 4)
    for name in ("hook_k_raw", "hook_k", "hook_v", "hook_rot_k"):
        assert cache[f"blocks.0.attn.{name}"].shape == (2, 7, 2, 4), name
    assert cache["blocks.0.attn.hook_pattern"].shape == (2, 8, 7, 7)
    assert cache["blocks.0.attn.hook_z"].shape == (2, 7, 8, 4)
    assert model.stack.blocks[0].attn.W_K.weight.shape == (2 * 4, D_MODEL)
    # Query head h reads kv head h // 4: its scores are its rotated query against that head's keys.
    q, k = cache["blocks.0.attn.hook_rot_q"], cache["blocks.0.attn.hook_rot_k"]
    for h in (0, 3, 4, 7):
        scores = q[:, :, h] @ k[:, :, h // 4].transpose(-1, -2) / math.sqrt(4)  # [batch q k]
        torch.testing.assert_close(cache["blocks.0.attn.hook_attn_scores"][:, h], scores, atol=1e-5, rtol=0)
    w = model.head_weights(0)
    assert w["W_K"].shape == w["W_V"].shape == w["W_Q"].shape == (8, D_MODEL, 4)
    assert torch.equal(w["W_K"][4], w["W_K"][7]) and not torch.equal(w["W_K"][3], w["W_K"][4])
    # The fused kernel's grouped mode equals the explicit path, and the cache keeps kv heads only.
    torch.testing.assert_close(model(x), model(x, attn_impl="explicit"), atol=1e-5, rtol=0)
    assert torch.equal(model.generate(x, 6, use_cache=True), model.generate(x, 6, use_cache=False))


def reference_rope(x: torch.Tensor, positions: range, rotary_dim: int, base: float, layout: str) -> torch.Tensor:
    """RoPE written out one pair at a time in float64: pair i turns by position * base^(-2i/r)."""
    out = x.double().clone()  # [batch pos head d_head]
    for p_index, m in enumerate(positions):
        for i in range(rotary_dim // 2):
            a, b = (2 * i, 2 * i + 1) if layout == "pairs" else (i, i + rotary_dim // 2)
            angle = m * base ** (-2 * i / rotary_dim)
            xa, xb = x[:, p_index, :, a].double(), x[:, p_index, :, b].double()
            out[:, p_index, :, a] = xa * math.cos(angle) - xb * math.sin(angle)
            out[:, p_index, :, b] = xa * math.sin(angle) + xb * math.cos(angle)
    return out


@pytest.mark.parametrize("layout", ["pairs", "halves"])
@pytest.mark.parametrize("rotary_dim", [4, None])
def test_rope_rotates_the_pairs_its_layout_names_and_partial_rotary_leaves_the_rest(layout, rotary_dim):
    model = tiny(pos="rope", rope_layout=layout, rotary_dim=rotary_dim, d_model=24, n_heads=2, rope_base=100.0)
    x = ids(1, 6)
    _, cache = model.run_with_cache(x, names="blocks.0.attn.hook_*q")
    q, rotated = cache["blocks.0.attn.hook_q"], cache["blocks.0.attn.hook_rot_q"]
    r = rotary_dim or 12
    expected = reference_rope(q, range(6), r, 100.0, layout)
    torch.testing.assert_close(rotated.double(), expected, atol=1e-5, rtol=0)
    if rotary_dim is not None:
        assert torch.equal(rotated[..., r:], q[..., r:])  # the unrotated dimensions pass through
    assert model.stack.rope_cos.shape == (MAX_LEN, r // 2)


def test_halves_layout_keeps_ropes_relative_property():
    cos, sin = positional.rope_cos_sin(40, 8, 10000.0)
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(1, 1, 1, 8, generator=g), torch.randn(1, 1, 1, 8, generator=g)

    def score(m, n):
        qm = positional.apply_rotary(q, cos[m:m + 1], sin[m:m + 1], layout="halves")
        kn = positional.apply_rotary(k, cos[n:n + 1], sin[n:n + 1], layout="halves")
        return float((qm * kn).sum())

    assert score(5, 2) == pytest.approx(score(33, 30), abs=1e-5)
    assert score(5, 2) != pytest.approx(score(5, 3), abs=1e-3)
    with pytest.raises(ValueError, match="rope layout"):
        positional.apply_rotary(q, cos[:1], sin[:1], layout="spiral")


# ---------------------------------------------------------------------------------------------
# 4. Gated MLP, token types, tied weights, meta-device loading, tables


def test_gated_mlp_hooks_are_gate_linear_and_their_product():
    model = tiny(gated_mlp=True, act="silu", mlp_bias=False)
    mlp = model.stack.blocks[0].mlp
    assert mlp.W_in.bias is None and mlp.W_gate.bias is None and mlp.W_out.bias is None
    _, cache = model.run_with_cache(ids(2, 5), names=["blocks.0.ln2.hook_normalized", "blocks.0.mlp.*"])
    x = cache["blocks.0.ln2.hook_normalized"]
    torch.testing.assert_close(cache["blocks.0.mlp.hook_pre"], mlp.W_gate(x))
    torch.testing.assert_close(cache["blocks.0.mlp.hook_pre_linear"], mlp.W_in(x))
    torch.testing.assert_close(cache["blocks.0.mlp.hook_post"], torch.nn.functional.silu(mlp.W_gate(x)) * mlp.W_in(x))
    names = model.hook_names()
    assert names.index("blocks.0.mlp.hook_pre") < names.index("blocks.0.mlp.hook_pre_linear") \
        < names.index("blocks.0.mlp.hook_post")


@pytest.mark.parametrize("fields", [
    dict(arch="encoder", pos="learned", norm="post", embed_norm=True, n_token_types=2, mlm_head=True,
         qkv_bias=True, attn_out_bias=True, unembed_bias=True, tie_embeddings=True, ln_eps=1e-12),
    dict(pos="rope", rope_layout="halves", rotary_dim=4, norm_type="rmsnorm", gated_mlp=True, act="silu",
         mlp_bias=False, n_kv_heads=2),
])
def test_new_hooks_fire_in_the_order_hook_names_lists(fields):
    model = tiny(**fields)
    fired = []
    model.run_with_hooks(ids(2, 6), fwd=[("*", lambda t, hook: fired.append(hook.name))])
    assert fired == model.hook_names()
    assert len(set(fired)) == len(fired)
    if fields.get("n_token_types"):
        assert fired[:5] == ["hook_embed", "hook_pos_embed", "hook_token_type_embed", "ln_embed.hook_scale",
                             "ln_embed.hook_normalized"]
        assert fired[-3:] == ["mlm_norm.hook_scale", "mlm_norm.hook_normalized", "hook_logits"]


def test_token_types_change_the_embedding_and_bad_ids_are_refused():
    model = tiny(arch="encoder", pos="learned", n_token_types=2)
    x = ids(2, 6)
    types = torch.tensor([[0, 0, 0, 1, 1, 1], [0, 1, 0, 1, 0, 1]])
    assert torch.equal(model(x), model(x, token_type_ids=torch.zeros_like(x)))
    assert not torch.allclose(model(x), model(x, token_type_ids=types))
    _, cache = model.run_with_cache(x, names="hook_token_type_embed", token_type_ids=types)
    assert torch.equal(cache["hook_token_type_embed"], model.stack.W_token_type.weight[types])
    with pytest.raises(ValueError, match=r"token_type_ids has id 2, outside this model's 2 token types \(0..1\)"):
        model(x, token_type_ids=types + 1)
    with pytest.raises(ValueError, match="token_type_ids must have the tokens' shape"):
        model(x, token_type_ids=types[:, :3])
    with pytest.raises(ValueError, match="integer ids"):
        model(x, token_type_ids=types.float())
    with pytest.raises(ValueError, match="no token-type table"):
        tiny()(x, token_type_ids=types)


def test_tied_model_saves_once_and_loads_tied(tmp_path):
    model = tiny(tie_embeddings=True, unembed_bias=True, qkv_bias=True, n_kv_heads=2, pos="rope",
                 rope_layout="halves", norm_type="rmsnorm", gated_mlp=True, act="silu")
    assert model.unembed.weight is model.stack.W_E.weight
    data = checkpoints.to_bytes(model, {"id": "tied-test"})
    stored = st_load(data)
    assert "unembed.weight" not in stored and "stack.W_E.weight" in stored
    x = ids(2, 8)
    for trusted in (False, True):
        loaded, meta = checkpoints.from_bytes(data, trusted=trusted)
        assert loaded.unembed.weight is loaded.stack.W_E.weight
        assert loaded.cfg == model.cfg and meta["id"] == "tied-test"
        assert torch.equal(loaded(x), model(x))
    path = tmp_path / "tied.safetensors"
    checkpoints.save(model, path, {"id": "tied-test"})
    assert torch.equal(checkpoints.load(path)[0](x), model(x))


def test_meta_build_then_assign_gives_a_working_model_with_tables_on_the_weights_device():
    model = tiny(arch="encoder", pos="sinusoidal", tie_embeddings=True, embed_norm=True, n_token_types=2)
    state = {k: v.clone() for k, v in model.state_dict().items() if k not in model.shared_keys()}
    with torch.device("meta"):
        skeleton = Transformer(model.cfg)
    assert skeleton.stack.sin_table.is_meta and skeleton.unembed.weight.is_meta
    skeleton.load_state_dict(state, strict=True, assign=True)
    skeleton.tie_weights()
    skeleton.init_tables()
    assert skeleton.unembed.weight is skeleton.stack.W_E.weight
    assert not any(t.is_meta for t in [*skeleton.parameters(), *skeleton.buffers()])
    assert torch.equal(skeleton.stack.sin_table, model.stack.sin_table)
    x = ids(2, 7)
    assert torch.equal(skeleton.eval()(x), model(x))


def test_fixed_tables_are_capped_and_extend_past_the_cap():
    cfg = dict(pos="rope", max_len=131072, rope_layout="halves", rope_base=500000.0, n_kv_heads=2)
    with torch.device("meta"):
        skeleton = Transformer(TransformerConfig(**{**dict(vocab_size=VOCAB, d_model=D_MODEL, n_heads=N_HEADS), **cfg}))
    assert skeleton.stack.rope_cos.shape[0] == skeleton.stack.sin_table.shape[0] == TABLE_POSITIONS
    model = tiny(**cfg)
    assert model.stack.rope_cos.shape == (TABLE_POSITIONS, 4)
    like = torch.zeros(1)
    cos, sin = model.stack.rope_tables(4, TABLE_POSITIONS - 2, like)  # two positions inside, two beyond
    want_cos, want_sin = positional.rope_cos_sin(4, 8, 500000.0, offset=TABLE_POSITIONS - 2)
    torch.testing.assert_close(cos, want_cos)
    torch.testing.assert_close(sin, want_sin)
    table = model.stack.positions("sinusoidal", 3, TABLE_POSITIONS - 1, like)
    torch.testing.assert_close(table, positional.sinusoidal(3, D_MODEL, offset=TABLE_POSITIONS - 1))


def test_dataclass_replace_keeps_grouping_unset_when_heads_change():
    cfg = dataclasses.replace(TransformerConfig(n_heads=4), n_heads=8)
    assert cfg.n_kv_heads is None and cfg.kv_heads == 8
