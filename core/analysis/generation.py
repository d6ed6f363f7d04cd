"""How an encoder-decoder actually runs, measured on our model: which hooks each family has and the
shapes of their tensors, two identities of a layer, the shapes of the three attention types, and
greedy decoding step by step with and without a key-value cache.

In reading order:

1. Anatomy: each family's hook points, the axis names of each tensor, its real shape for an input;
   the concat-heads-then-W_O = sum-of-heads identity, and the MLP acting on each position alone.
2. Shapes: the tensors of encoder self-, decoder self- and cross-attention for given lengths.
3. The decoding stepper: `model.generate` observed through per-call hook functions (the model is
   never changed), split into steps, with counts of projections and multiply-adds, measured time
   per token, and the largest difference between cached and recomputed logits.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch

from core.config import TransformerConfig
from core.hooks import RunState, running
from core.model import Transformer

FAMILIES = ("encoder", "decoder", "encoder-decoder")
FAMILY_NAMES = {"encoder": "Encoder-only (BERT-like)", "decoder": "Decoder-only (GPT-like)",
                "encoder-decoder": "Encoder-decoder (T5-like)"}


# ---------------------------------------------------------------------------------------------
# 1. Anatomy: hook points, axis names, shapes
# ---------------------------------------------------------------------------------------------


def stack_of(name: str) -> str:
    """The stack a hook name belongs to: "encoder", "decoder" or "" (a single-stack model)."""
    head = name.split(".", 1)[0]
    return head if head in ("encoder", "decoder") else ""


def layer_of(name: str) -> Optional[int]:
    """The block index in a hook name, or None outside the blocks (embeddings, final norm, logits)."""
    parts = name.split(".")
    return int(parts[parts.index("blocks") + 1]) if "blocks" in parts else None


def sublayer_of(name: str) -> str:
    """Which box of the block diagram a hook point sits in (a norm's hooks: its sublayer's box)."""
    if ".cross_attn." in name or name.endswith(("hook_cross_attn_out", "hook_resid_mid_cross")) or ".ln_cross." in name:
        return "cross-attention"
    if ".attn." in name or name.endswith("hook_attn_out") or ".ln1." in name:
        return "self-attention"
    if ".mlp." in name or name.endswith("hook_mlp_out") or ".ln2." in name:
        return "MLP"
    if name.endswith(("hook_embed", "hook_pos_embed", "hook_token_type_embed")) or "ln_embed." in name:
        return "embedding"
    if name.endswith("hook_logits") or name.startswith("mlm_norm."):
        return "unembedding"
    if "ln_final." in name:
        return "final norm"
    return "residual stream"


def length_axis(name: str, arch: str) -> str:
    """The axis name of a hook's own positions: L_e in an encoder stack, L_d in a decoder stack of
    an encoder-decoder, L in a single-stack model."""
    if arch != "encoder-decoder":
        return "L"
    return "L_d" if stack_of(name) == "decoder" or name == "hook_logits" else "L_e"


KV_HOOKS = ("hook_k_raw", "hook_k", "hook_v", "hook_rot_k")  # an attention's keys and values


def axis_names(name: str, arch: str, grouped: bool = False) -> tuple[str, ...]:
    """The axis names of the tensor at hook `name` in a model of family `arch`, in the hook's order.

    B batch, L / L_e / L_d positions, h heads, d_h head size, d_model, d_mlp, V vocabulary, 1 a
    kept axis of size one (a norm's divisor `hook_scale`); an attention pattern is [B h L_q L_k]
    with the keys from the encoder in cross-attention. `grouped` (grouped-query attention, fewer
    key/value heads than query heads): keys and values have h_kv heads."""
    own = length_axis(name, arch)
    cross = ".cross_attn." in name
    kv = "h_kv" if grouped else "h"
    if name.endswith(("hook_attn_scores", "hook_mask", "hook_pattern")):
        return ("B", "h", own, "L_e" if cross else own)
    if name.endswith(KV_HOOKS) and cross:
        return ("B", "L_e", kv, "d_h")
    if name.endswith(KV_HOOKS):
        return ("B", own, kv, "d_h")
    if name.endswith(("hook_q", "hook_rot_q", "hook_z")):
        return ("B", own, "h", "d_h")
    if name.endswith(("mlp.hook_pre", "mlp.hook_pre_linear", "mlp.hook_post")):
        return ("B", own, "d_mlp")
    if name.endswith("hook_scale"):
        return ("B", own, "1")
    if name.endswith("hook_logits"):
        return ("B", own, "V")
    return ("B", own, "d_model")


@dataclass(frozen=True)
class HookInfo:
    """One hook point of a model: where it sits in the diagram and what its tensor's axes are."""

    name: str
    stack: str  # "encoder", "decoder" or "" (single stack)
    layer: Optional[int]  # block index, None outside the blocks
    sublayer: str  # box of the diagram: embedding, self-attention, cross-attention, MLP, ...
    axes: tuple[str, ...]
    shape: Optional[tuple[int, ...]] = None  # the real shape for an input (None: not measured)


def family_config(cfg: TransformerConfig, arch: str) -> TransformerConfig:
    """The current model's sizes in another family (same widths, heads and depth). What only one kind of
    stack takes is left out where the other has no place for it: a separate source vocabulary outside an
    encoder-decoder, token types (BERT's sentence A / B) in one."""
    if arch not in FAMILIES:
        raise ValueError(f"arch must be one of {list(FAMILIES)}, got {arch!r}")
    if arch == "encoder-decoder":
        return dataclasses.replace(cfg, arch=arch, n_token_types=0)
    return dataclasses.replace(cfg, arch=arch, src_vocab_size=None)


def grouped(cfg: TransformerConfig) -> bool:
    """Whether keys and values have fewer heads than queries (grouped-query attention)."""
    return cfg.kv_heads != cfg.n_heads


def family_hooks(cfg: TransformerConfig, arch: str) -> list[HookInfo]:
    """Every hook point a model of family `arch` with `cfg`'s sizes has, in forward order.

    Built on the meta device: no memory for weights and no random numbers drawn."""
    with torch.device("meta"):
        skeleton = Transformer(family_config(cfg, arch))
    return [HookInfo(n, stack_of(n), layer_of(n), sublayer_of(n), axis_names(n, arch, grouped(cfg)))
            for n in skeleton.hook_names()]


@torch.no_grad()
def anatomy(model: Transformer, tokens: torch.Tensor, tgt: Optional[torch.Tensor] = None) -> list[HookInfo]:
    """Every hook point of `model` with its real shape for this input: one forward whose hooks note each tensor's
    shape and keep nothing else (a cache of every hook at 1,024 tokens would hold every layer's scores and
    weights: hundreds of MB for a shape)."""
    shapes: dict[str, tuple[int, ...]] = {}

    def note_shape(tensor: torch.Tensor, hook) -> None:
        shapes[hook.name] = tuple(tensor.shape)

    names = model.hook_names()
    model.run_with_hooks(tokens, fwd=[(n, note_shape) for n in names], tgt=tgt)
    arch = model.cfg.arch
    return [HookInfo(n, stack_of(n), layer_of(n), sublayer_of(n), axis_names(n, arch, grouped(model.cfg)), shapes[n])
            for n in names if n in shapes]


def attention_module(model: Transformer, prefix: str, layer: int, which: str = "attn"):
    """The Attention module `which` ("attn" or "cross_attn") of block `layer` of the stack `prefix`."""
    return getattr(model.stack_for(prefix).blocks[layer], which)


@torch.no_grad()
def heads_concat_vs_sum(model: Transformer, z: torch.Tensor, prefix: str, layer: int,
                        which: str = "attn") -> dict:
    """Two ways to combine the heads' outputs z `[batch pos head d_head]` into the layer's output:
    concatenate them and apply W_O, or send each head through its own d_head columns of W_O and
    add. They are the same linear map; this measures how far apart floating point leaves them.

    Returns the two outputs `[batch pos d_model]`, each head's contribution `[head batch pos d_model]`
    and the largest absolute difference."""
    attn = attention_module(model, prefix, layer, which)
    h, dh = model.cfg.n_heads, model.cfg.d_head
    w_o = attn.W_O.weight  # [d_model head*d_head]
    b, p = z.shape[:2]
    concat = z.reshape(b, p, h * dh) @ w_o.T  # [batch pos d_model]
    per_head = torch.stack([z[:, :, i, :] @ w_o[:, i * dh:(i + 1) * dh].T for i in range(h)])  # [head batch pos d_model]
    summed = per_head.sum(dim=0)  # [batch pos d_model]
    return {"concat": concat, "summed": summed, "per_head": per_head,
            "max_diff": float((concat - summed).abs().max())}


@torch.no_grad()
def mlp_permutation_check(model: Transformer, x: torch.Tensor, prefix: str, layer: int,
                          perm: torch.Tensor) -> dict:
    """The MLP reads each position alone: permuting the positions of its input x `[batch pos d_model]`
    permutes its output the same way. Returns both orders' outputs and their largest difference."""
    mlp = model.stack_for(prefix).blocks[layer].mlp
    permuted_first = mlp(x[:, perm])  # [batch pos d_model]
    permuted_after = mlp(x)[:, perm]  # [batch pos d_model]
    return {"permuted_first": permuted_first, "permuted_after": permuted_after,
            "max_diff": float((permuted_first - permuted_after).abs().max())}


def seeded_permutation(n: int, seed: int) -> torch.Tensor:
    """A permutation of 0..n-1 from a local generator (never torch's global one)."""
    return torch.randperm(n, generator=torch.Generator().manual_seed(int(seed)))


# ---------------------------------------------------------------------------------------------
# 2. Shapes of the three attention types
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Block:
    """One tensor of an attention layer as the Shapes panel draws it."""

    label: str  # e.g. "Q (decoder queries)"
    axes: tuple[str, ...]
    sizes: tuple[int, ...]

    @property
    def numel(self) -> int:
        return int(np.prod(self.sizes))


ATTENTION_KINDS = ("encoder self-attention", "decoder masked self-attention", "cross-attention")


def attention_shapes(cfg: TransformerConfig, kind: str, batch: int, len_dec: int, len_enc: int) -> list[Block]:
    """The tensors of one attention layer of `kind`, heads split out as the matmuls see them:
    Q, K, V `[B h L d_h]`, scores and pattern `[B h L_q L_k]`, the output `[B L_q d_model]`. With
    grouped-query attention K and V have h_kv heads, each read by h / h_kv query heads."""
    h, dh, d = cfg.n_heads, cfg.d_head, cfg.d_model
    kv, kv_axis = cfg.kv_heads, "h_kv" if grouped(cfg) else "h"
    if kind == "encoder self-attention":
        (lq, q_axis), (lk, k_axis), src = (len_enc, "L_e"), (len_enc, "L_e"), "encoder"
    elif kind == "decoder masked self-attention":
        (lq, q_axis), (lk, k_axis), src = (len_dec, "L_d"), (len_dec, "L_d"), "decoder"
    elif kind == "cross-attention":
        (lq, q_axis), (lk, k_axis), src = (len_dec, "L_d"), (len_enc, "L_e"), "encoder"
    else:
        raise ValueError(f"kind must be one of {list(ATTENTION_KINDS)}, got {kind!r}")
    queries = "decoder" if q_axis == "L_d" else "encoder"
    return [
        Block(f"Q ({queries} queries)", ("B", "h", q_axis, "d_h"), (batch, h, lq, dh)),
        Block(f"K ({src} keys)", ("B", kv_axis, k_axis, "d_h"), (batch, kv, lk, dh)),
        Block(f"V ({src} values)", ("B", kv_axis, k_axis, "d_h"), (batch, kv, lk, dh)),
        Block("scores QKᵀ/√d_h", ("B", "h", q_axis, k_axis), (batch, h, lq, lk)),
        Block("output (heads merged, W_O)", ("B", q_axis, "d_model"), (batch, lq, d)),
    ]


def attention_macs(cfg: TransformerConfig, batch: int, len_q: int, len_k: int) -> int:
    """Multiply-adds of one attention's two matmuls: scores Q Kᵀ and the weighted sum P V."""
    return 2 * batch * cfg.n_heads * len_q * len_k * cfg.d_head


# ---------------------------------------------------------------------------------------------
# 3. The decoding stepper
# ---------------------------------------------------------------------------------------------


def decoder_prefix(model: Transformer) -> str:
    """The hook-name prefix of the stack that generates: "decoder." or "" (decoder-only)."""
    if model.cfg.arch == "encoder":
        raise ValueError("an encoder has no causal mask and cannot generate; pick a decoder or encoder-decoder model")
    return "decoder." if model.is_encoder_decoder else ""


@dataclass
class Step:
    """What one greedy decoding step did (arrays for the first batch row)."""

    t: int
    fed: int  # positions fed to the decoder this step (the whole sequence without a cache)
    keys_stored: int  # self-attention keys (and values) per layer after this step
    token: int  # the token this step chose
    logits: np.ndarray  # [vocab] of the newest position
    query: np.ndarray  # [layer head d_head] the newest position's self-attention query
    keys: np.ndarray  # [layer pos kv_head*d_head] every self-attention key the newest query read
    self_row: np.ndarray  # [layer head pos] the newest query's self-attention pattern
    cross_row: Optional[np.ndarray]  # [layer head L_e] its cross-attention pattern (encoder-decoder)
    projections: dict  # rows projected this step: {"self q", "self k", "self v", "cross q", "cross k", "cross v"}
    attention_macs: int  # multiply-adds of every attention's scores and weighted sum this step


@dataclass
class Trace:
    """A greedy decoding run observed step by step."""

    use_cache: bool
    tokens: np.ndarray  # [pos] the prefix followed by the generated tokens
    prompt_len: int  # positions in the decoder's prefix
    source_len: int  # encoder positions (0 for a decoder-only model)
    setup_projections: dict  # rows projected before the first step (cross-attention K, V with a cache)
    encoder_runs: int
    steps: list[Step]

    def counters(self) -> list[dict]:
        """One row per step: positions fed, keys stored, projections and multiply-adds."""
        rows = []
        for s in self.steps:
            rows.append({"step": s.t, "cache": "with" if self.use_cache else "without", "fed": s.fed,
                         "keys per layer": s.keys_stored,
                         "projections": int(sum(s.projections.values())),
                         "cross K,V rows": int(s.projections["cross k"] + s.projections["cross v"]),
                         "attention multiply-adds": s.attention_macs})
        return rows


class _Recorder:
    """Per-call hook functions that log (hook name, the tensor's shape, the part of it the stepper reads) in
    call order; nothing on the model changes, and the log belongs to one call. Only what a Step keeps is
    copied (the newest query's row of a pattern, not the whole pattern): with a real checkpoint's sizes,
    copies of every watched tensor of every step took gigabytes. What a Step keeps as numpy is copied to
    the CPU; the final stream stays on the model's device for its unembedding."""

    def __init__(self, key_hook: str):
        self.key_hook = key_hook  # the keys a Step keeps whole (after RoPE where there is RoPE)
        self.calls: list[tuple[str, tuple, Optional[torch.Tensor]]] = []

    def __call__(self, x: torch.Tensor, hook) -> None:
        self.calls.append((hook.name, tuple(x.shape), self._kept(hook.name, x.detach())))

    def _kept(self, name: str, x: torch.Tensor) -> Optional[torch.Tensor]:
        if ".cross_attn." not in name and name.endswith(self.key_hook):
            return _to_cpu(x[:1])  # [1 pos head d_head]
        if name.endswith("hook_pattern"):
            return _to_cpu(x[:1, :, -1])  # [1 head k]: the newest query's row
        if name.endswith("attn.hook_q") and ".cross_attn." not in name:
            return _to_cpu(x[:1, -1])  # [1 head d_head]
        if name.endswith("ln_final.hook_normalized"):
            return x[:, -1].clone()  # [batch d_model]
        return None  # only its shape is read (rows projected, positions fed)


def _to_cpu(x: torch.Tensor) -> torch.Tensor:
    """A float32 copy on the CPU (a copy also when `x` is there already: the hook's tensor lives on)."""
    return x.to("cpu", torch.float32, copy=True)


def _split_steps(calls: list[tuple[str, tuple, Optional[torch.Tensor]]], marker: str) -> tuple[list, list[list]]:
    """The calls before the first step, and the calls of each step (a step starts at `marker`)."""
    setup, steps = [], []
    for call in calls:
        if call[0] == marker:
            steps.append([])
        (steps[-1] if steps else setup).append(call)
    return setup, steps


def _projection_rows(calls: list, prefix: str) -> dict:
    """Token rows put through W_Q, W_K and W_V in these calls, for self- and cross-attention."""
    rows = {f"{kind} {w}": 0 for kind in ("self", "cross") for w in "qkv"}
    for name, shape, _ in calls:
        if not name.startswith(prefix):
            continue
        for w in "qkv":
            if name.endswith(f".cross_attn.hook_{w}"):
                rows[f"cross {w}"] += shape[0] * shape[1]
            elif name.endswith(f".attn.hook_{w}") and ".cross_attn." not in name:
                rows[f"self {w}"] += shape[0] * shape[1]
    return rows


def _watched(model: Transformer, prefix: str) -> list[str]:
    """The hooks the stepper logs: the step marker, every attention's q, k, v and pattern, the final
    stream, and the encoder's first hook (to count encoder runs)."""
    names = [f"{prefix}hook_embed", f"{prefix}ln_final.hook_normalized"]
    for i in range(model.cfg.n_layers):
        for which in ("attn", "cross_attn") if prefix else ("attn",):
            names += [f"{prefix}blocks.{i}.{which}.hook_{w}" for w in ("q", "k", "v", "pattern")]
        if model.cfg.pos == "rope":
            names.append(f"{prefix}blocks.{i}.attn.hook_rot_k")
    if prefix:
        names.append("encoder.hook_embed")
    return names


@torch.no_grad()
def decode_trace(model: Transformer, tokens: torch.Tensor, steps: int, use_cache: bool,
                 tgt_prefix: Optional[torch.Tensor] = None, keep_keys: bool = True) -> Trace:
    """Run `model.generate` greedily for `steps` tokens and record every step through hooks.

    tokens: the prefix `[1 pos]` (decoder-only) or the source (encoder-decoder, with `tgt_prefix`).
    Watching the patterns makes attention take its explicit path; time it with `time_per_token`.
    With the cache, every step's `keys` are views of one array (a step's cache is the next one's
    first rows, exactly). keep_keys=False leaves each step's `keys` empty ([layer 0 kv_head*d_head]):
    a run kept only for its counts and logits then holds no copy of every key of every step."""
    prefix = decoder_prefix(model)
    n_layers, cfg = model.cfg.n_layers, model.cfg
    key_hook = "attn.hook_rot_k" if cfg.pos == "rope" else "attn.hook_k"
    recorder = _Recorder(key_hook)
    state = RunState(fwd={name: [recorder] for name in _watched(model, prefix)})
    with running(state):
        out = model.generate(tokens, steps, use_cache=use_cache, tgt_prefix=tgt_prefix).cpu()  # [1 pos]
    setup, per_step = _split_steps(recorder.calls, f"{prefix}hook_embed")
    prompt_len = (tgt_prefix if tgt_prefix is not None else tokens).shape[1]
    source_len = tokens.shape[1] if prefix else 0
    width = cfg.kv_heads * cfg.d_head
    past_keys = [None] * n_layers  # [pos kv_head*d_head] per layer: the cache as it grows (with use_cache)
    records = []
    for t, calls in enumerate(per_step):
        by_name = {}
        for name, shape, x in calls:
            by_name.setdefault(name, (shape, x))  # each watched hook is called once per layer per step
        fed = int(by_name[f"{prefix}hook_embed"][0][1])
        keys, queries, self_rows, cross_rows, macs, stored = [], [], [], [], 0, 0
        for i in range(n_layers):
            block = f"{prefix}blocks.{i}."
            new_k = by_name[block + key_hook][1][0]  # [new kv_head d_head]
            new_k = new_k.reshape(new_k.shape[0], -1)  # [new kv_head*d_head]
            all_k = new_k if past_keys[i] is None or not use_cache else torch.cat([past_keys[i], new_k])  # [pos kv_head*d_head]
            past_keys[i] = all_k
            stored = int(all_k.shape[0])
            if keep_keys and not use_cache:
                keys.append(all_k.numpy())
            queries.append(by_name[block + "attn.hook_q"][1][0].numpy())  # [head d_head]
            shape, row = by_name[block + "attn.hook_pattern"]  # [batch head q k], its newest row [1 head k]
            self_rows.append(row[0].numpy())  # [head k]
            macs += 2 * int(np.prod(shape)) * cfg.d_head
            if prefix:
                shape, row = by_name[block + "cross_attn.hook_pattern"]  # [batch head q L_e], [1 head L_e]
                cross_rows.append(row[0].numpy())  # [head L_e]
                macs += 2 * int(np.prod(shape)) * cfg.d_head
        final = by_name[f"{prefix}ln_final.hook_normalized"][1]  # [batch d_model]
        logits = model.unembed(final)[0]  # [vocab]
        records.append(Step(
            t=t, fed=fed, keys_stored=stored, token=int(out[0, prompt_len + t]),
            logits=logits.float().cpu().numpy(), query=np.stack(queries),
            keys=np.stack(keys) if keys else np.zeros((n_layers, 0, width), dtype=np.float32),
            self_row=np.stack(self_rows), cross_row=np.stack(cross_rows) if prefix else None,
            projections=_projection_rows(calls, prefix), attention_macs=int(macs)))
    if keep_keys and use_cache and records:
        every_key = np.stack([k.numpy() for k in past_keys])  # [layer pos kv_head*d_head]
        for step in records:
            step.keys = every_key[:, :step.keys_stored]  # [layer pos kv_head*d_head], a view
    encoder_runs = sum(1 for name, _, _ in recorder.calls if name == "encoder.hook_embed")
    return Trace(use_cache, out[0].numpy(), prompt_len, source_len, _projection_rows(setup, prefix),
                 encoder_runs, records)


def max_logit_difference(cached: Trace, recomputed: Trace) -> np.ndarray:
    """Per step, the largest absolute difference between the two runs' logits `[step]`."""
    return np.array([float(np.abs(a.logits - b.logits).max()) for a, b in zip(cached.steps, recomputed.steps)])


def time_per_token(model: Transformer, tokens: torch.Tensor, steps: int, use_cache: bool,
                   tgt_prefix: Optional[torch.Tensor] = None, repeats: int = 3) -> np.ndarray:
    """Wall time of each decoding step in seconds `[step]`, the fastest of `repeats` runs (other work
    on the machine only ever adds time, so the minimum is the least disturbed measurement).

    Only the step marker is watched, so attention keeps its fast fused path; the encoder and the
    one-off cross-attention keys and values come before the first step and are not counted."""
    prefix = decoder_prefix(model)
    runs = []
    for _ in range(max(1, int(repeats))):
        stamps: list[float] = []

        def stamp(x: torch.Tensor, hook) -> None:
            stamps.append(time.perf_counter())

        state = RunState(fwd={f"{prefix}hook_embed": [stamp]})
        with running(state):
            model.generate(tokens, steps, use_cache=use_cache, tgt_prefix=tgt_prefix)
        stamps.append(time.perf_counter())
        runs.append(np.diff(np.array(stamps)))  # [step]
    return np.min(np.stack(runs), axis=0)  # [step]
