"""The Glassbox Transformer: encoder, decoder or encoder-decoder, with a named hook at every step.

Read it top to bottom: the per-call options and the decoding cache, attention, MLP, block, stack,
and the model that ties them together. Per-call choices (masks, positional scheme, temperature,
what to capture) are arguments of a call, never attributes flipped on the shared model; see
core/hooks.py for how hooks see a call. Shapes use one vocabulary: `batch pos head d_head
d_model`, `kv_head` for the key/value heads of grouped-query attention, and `q k` for the two
axes of an attention pattern.

The same classes hold real checkpoints converted into them (GPT-2, BERT, Llama, Mistral, Qwen2):
config fields switch on biases, tied embeddings, a gated MLP, RMSNorm, token types, grouped keys
and values, and Llama's RoPE layout. Each defaults to the model this project trains itself.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Callable, Mapping, Optional, Sequence, Union

import torch
import torch.nn.functional as F
from torch import nn

from core import positional
from core.config import TransformerConfig
from core.hooks import Cache, HookFn, HookPoint, NameFilter, RunState, current_state, resolve_names, running

__all__ = ["TransformerConfig", "Transformer", "MaskArg", "KVCache", "SelfKV", "CrossKV"]

# A mask argument: one bool tensor for every layer, or {layer index: bool tensor}.
MaskArg = Union[torch.Tensor, Mapping[int, torch.Tensor], None]
# One layer's mask as the stack receives it: (bool `[.., q, k]`, True = may attend; its kind),
# kind "full" (hides nothing), "causal" (the default lower triangle) or "custom" (anything else).
LayerMask = tuple[torch.Tensor, str]
# RoPE's cos and sin tables for the positions of one call, `[pos rope_dim/2]` each.
RopeTables = tuple[torch.Tensor, torch.Tensor]

ATTN_IMPLS = ("auto", "explicit")
# The positions a fixed table (sinusoidal, RoPE) is precomputed for; longer inputs extend it on the
# fly. A Llama config declares max_len 131072: tables that long would cost gigabytes for nothing.
TABLE_POSITIONS = 4096
# The MLP's non-linearity by config name: gelu is the erf form (BERT), gelu_tanh GPT-2's "gelu_new".
ACTIVATIONS: dict[str, Callable[[], nn.Module]] = {
    "relu": nn.ReLU, "gelu": nn.GELU, "gelu_tanh": functools.partial(nn.GELU, approximate="tanh"), "silu": nn.SiLU,
}


@dataclass(frozen=True)
class CallOptions:
    """Per-call choices that flow down the stack (never stored on modules)."""

    pos: str  # effective positional scheme for this call
    temperature: float = 1.0  # attention scores are divided by this before softmax
    force_explicit: bool = False  # skip the fused SDPA fast path


# ---------------------------------------------------------------------------------------------
# Keys and values kept between decoding steps (made by `Transformer.generate`, one per call)


@dataclass
class SelfKV:
    """One layer's self-attention keys and values for every position fed so far.

    Each decoding step appends the keys and values of its new positions (RoPE already applied),
    so a step projects only the newest token and attends to all of them.
    """

    k: Optional[torch.Tensor] = None  # [batch past kv_head d_head]
    v: Optional[torch.Tensor] = None  # [batch past kv_head d_head]

    @property
    def length(self) -> int:
        """How many positions are stored."""
        return 0 if self.k is None else self.k.shape[1]

    def extend(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append this step's keys and values; return all of them, the past positions first."""
        if self.k is not None:
            k = torch.cat([self.k, k], dim=1)  # [batch past+pos kv_head d_head]
            v = torch.cat([self.v, v], dim=1)  # [batch past+pos kv_head d_head]
        self.k, self.v = k, v
        return k, v


@dataclass(frozen=True)
class CrossKV:
    """One decoder layer's cross-attention keys and values, computed once from the encoder output."""

    k: torch.Tensor  # [batch src kv_head d_head]
    v: torch.Tensor  # [batch src kv_head d_head]


@dataclass
class KVCache:
    """What greedy decoding keeps between steps, per layer: the growing self-attention keys and
    values, and (encoder-decoder only) the fixed cross-attention ones."""

    self_attn: list[SelfKV]  # one per layer
    cross_attn: Optional[list[CrossKV]] = None  # one per decoder layer; None without an encoder

    @classmethod
    def empty(cls, n_layers: int, cross_attn: Optional[list[CrossKV]] = None) -> KVCache:
        """A cache holding no positions yet (and the cross-attention keys and values, if given)."""
        return cls([SelfKV() for _ in range(n_layers)], cross_attn)

    @property
    def length(self) -> int:
        """How many positions the cache holds: the position of the next step's first token."""
        return self.self_attn[0].length

    def layer(self, i: int) -> tuple[SelfKV, Optional[CrossKV]]:
        """Layer i's self-attention cache and its cross-attention keys and values (or None)."""
        return self.self_attn[i], None if self.cross_attn is None else self.cross_attn[i]


# ---------------------------------------------------------------------------------------------
# Attention


class Attention(nn.Module):
    """Multi-head attention, one hook per step of

        z = softmax(mask(scale * q k^T)) v,    out = z W_O,    q = x W_Q, k = s W_K, v = s W_V

    with s = x (self-attention) or s = the encoder output `memory` (cross-attention), and
    scale = 1 / (sqrt(d_head) * temperature) for the default score. The projections have no
    biases unless the config asks (cfg.qkv_bias for W_Q, W_K, W_V as GPT-2, BERT and Qwen2 have;
    cfg.attn_out_bias for W_O): without them W_Q W_K^T and W_V W_O are exact circuits. With
    cfg.tie_vk there is no W_V: values are s W_K, the keys' own projection (taken before clipping
    and RoPE), so V = K.

    Grouped-query attention (cfg.n_kv_heads < n_heads, Llama-family): W_K and W_V project to
    n_kv_heads heads only, and query head h reads key/value head h // (n_heads / n_kv_heads). The
    key and value hooks show the kv heads, `[batch pos kv_head d_head]`, as TransformerLens does;
    the keys and values are repeated per query head only inside the attention itself.

    Keys pass two hooks: `hook_k_raw` sees the projection s W_K before cfg.key_norm_clip, and
    `hook_k` the keys after clipping. An intervention on `hook_k_raw` therefore goes through the
    clip (a defence is tested, not bypassed); one on `hook_k` replaces the clipped keys.
    """

    def __init__(self, cfg: TransformerConfig, cross: bool = False):
        super().__init__()
        self.cfg = cfg
        self.cross = cross
        h, kv, dh = cfg.n_heads, cfg.kv_heads, cfg.d_head
        self.W_Q = nn.Linear(cfg.d_model, h * dh, bias=cfg.qkv_bias)
        self.W_K = nn.Linear(cfg.d_model, kv * dh, bias=cfg.qkv_bias)
        if not cfg.tie_vk:
            self.W_V = nn.Linear(cfg.d_model, kv * dh, bias=cfg.qkv_bias)
        self.W_O = nn.Linear(h * dh, cfg.d_model, bias=cfg.attn_out_bias)
        # The hook points, in the order forward calls them.
        self.hook_q = HookPoint()  # [batch pos head d_head]
        self.hook_k_raw = HookPoint()  # [batch pos kv_head d_head], s W_K before key_norm_clip
        self.hook_k = HookPoint()  # [batch pos kv_head d_head], after key_norm_clip
        self.hook_v = HookPoint()  # [batch pos kv_head d_head]
        if not cross:
            self.hook_rot_q = HookPoint()  # [batch pos head d_head], after RoPE
            self.hook_rot_k = HookPoint()  # [batch pos kv_head d_head]
        self.hook_attn_scores = HookPoint()  # [batch head q k], scaled, before the mask
        self.hook_mask = HookPoint()  # [batch head q k] bool, True = may attend
        self.hook_pattern = HookPoint()  # [batch head q k], softmax; masked entries exactly 0
        self.hook_z = HookPoint()  # [batch pos head d_head], the weighted sum of values

    def forward(self, x: torch.Tensor, mask: torch.Tensor, mask_kind: str, opts: CallOptions,
                rope: Optional[RopeTables] = None, memory: Optional[torch.Tensor] = None,
                self_kv: Optional[SelfKV] = None, cross_kv: Optional[CrossKV] = None) -> torch.Tensor:
        """x `[batch pos d_model]` -> `[batch pos d_model]`.

        mask: bool `[.., q, k]`, True = may attend; mask_kind: "full", "causal" or "custom" (lets
        the common cases skip work). rope: this call's RoPE tables (self-attention only). memory:
        the encoder output `[batch src d_model]` (cross-attention). self_kv / cross_kv: this
        layer's decoding cache, when `generate` runs with use_cache.
        """
        q, k, v = self.project(x, memory, cross_kv)  # q [batch pos head d_head], k, v [batch pos kv_head d_head]
        if rope is not None and not self.cross:
            q, k = self.rotate(q, k, rope)
        if self_kv is not None:
            k, v = self_kv.extend(k, v)  # [batch past+pos kv_head d_head] each
        q, k, scale = self.score_inputs(q, k, opts)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # [batch head|kv_head pos d_head]
        if self.wants_explicit(opts, mask, mask_kind):
            k, v = self.per_query_head(k), self.per_query_head(v)  # [batch head pos d_head] each
            z = self.attend(q, k, v, mask, mask_kind, scale)  # [batch head q d_head]
        else:
            z = fused_attention(q, k, v, mask, mask_kind, scale)  # [batch head q d_head]
        z = self.hook_z(z.transpose(1, 2))  # [batch pos head d_head]
        return self.W_O(self.merge_heads(z))  # [batch pos d_model]

    # -- the steps, in the order forward takes them --------------------------------------------

    def project(self, x: torch.Tensor, memory: Optional[torch.Tensor] = None,
                cross_kv: Optional[CrossKV] = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Queries from x `[batch pos head d_head]`; keys and values `[batch pos kv_head d_head]` from
        x, or from `memory` for cross-attention (or taken from `cross_kv` when computed once already)."""
        q = self.hook_q(self.split_heads(self.W_Q(x)))  # [batch pos head d_head]
        if cross_kv is not None:
            return q, cross_kv.k, cross_kv.v
        k, v = self.keys_values(memory if self.cross else x)
        return q, k, v

    def keys_values(self, source: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys (norm-clipped when the config asks) and values of `source` `[batch pos d_model]`,
        `[batch pos kv_head d_head]` each.

        The raw keys pass `hook_k_raw` before the clip and `hook_k` after it. Tied models (V = K)
        take their values from the same projection, before either hook.
        """
        projected = self.split_heads(self.W_K(source))  # [batch pos kv_head d_head]
        k = self.hook_k(self.clip_keys(self.hook_k_raw(projected)))  # [batch pos kv_head d_head]
        values = projected if self.cfg.tie_vk else self.split_heads(self.W_V(source))  # [batch pos kv_head d_head]
        return k, self.hook_v(values)

    @property
    def value_weight(self) -> nn.Linear:
        """The value projection: W_V, or W_K itself for a tied (V = K) model."""
        return self.W_K if self.cfg.tie_vk else self.W_V

    def clip_keys(self, k: torch.Tensor) -> torch.Tensor:
        """Shrink every key whose norm exceeds cfg.key_norm_clip back to that norm (no-op when None)."""
        if self.cfg.key_norm_clip is None:
            return k
        norms = k.norm(dim=-1, keepdim=True).clamp_min(1e-12)  # [batch pos kv_head 1]
        return k * (self.cfg.key_norm_clip / norms).clamp(max=1.0)  # [batch pos kv_head d_head]

    def rotate(self, q: torch.Tensor, k: torch.Tensor, rope: RopeTables) -> tuple[torch.Tensor, torch.Tensor]:
        """RoPE: rotate pairs of q's and k's leading cfg.rope_dim dimensions by an angle proportional
        to the position, pairing them as cfg.rope_layout says."""
        layout = self.cfg.rope_layout
        q = self.hook_rot_q(positional.apply_rotary(q, *rope, layout=layout))  # [batch pos head d_head]
        k = self.hook_rot_k(positional.apply_rotary(k, *rope, layout=layout))  # [batch pos kv_head d_head]
        return q, k

    def score_inputs(self, q: torch.Tensor, k: torch.Tensor,
                     opts: CallOptions) -> tuple[torch.Tensor, torch.Tensor, float]:
        """The score function as (q, k, scale) with score = scale * q.k:
        scaled_dot 1/sqrt(d_head), dot 1, cosine (unit q and k) cosine_scale; all over temperature."""
        cfg = self.cfg
        if cfg.score == "cosine":
            q = F.normalize(q, dim=-1)  # [batch pos head d_head], unit length
            k = F.normalize(k, dim=-1)
            scale = cfg.cosine_scale
        elif cfg.score == "dot":
            scale = 1.0
        else:
            scale = 1.0 / math.sqrt(cfg.d_head)
        return q, k, scale / opts.temperature

    def wants_explicit(self, opts: CallOptions, mask: torch.Tensor, mask_kind: str) -> bool:
        """The fused kernel hides scores and pattern; use the explicit path when they are asked for."""
        if opts.force_explicit:
            return True
        state = current_state()
        if state is not None and (
            state.touches(self.hook_attn_scores.name)
            or state.touches(self.hook_pattern.name)
            or state.touches(self.hook_mask.name)
        ):
            return True
        # A query that may attend to nothing gets zeros here; the fused kernel would give NaN.
        return mask_kind == "custom" and not bool(mask.any(dim=-1).all())

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor,
               mask_kind: str, scale: float) -> torch.Tensor:
        """The explicit path: score, mask, softmax, weighted sum; q, k, v `[batch head pos d_head]`."""
        state = current_state()
        private = state is None or state.lets_go(self.hook_attn_scores.name)  # no one keeps the scores
        scores = self.score(q, k, scale, state if private else None)  # [batch head q k]
        mask, mask_kind = self.mask_for(scores, mask, mask_kind)  # [batch head q k]
        pattern = self.hook_pattern(masked_softmax(scores, mask, mask_kind, in_place=private))  # [batch head q k]
        return pattern @ v  # [batch head q d_head]

    def score(self, q: torch.Tensor, k: torch.Tensor, scale: float,
              reuse: Optional[RunState] = None) -> torch.Tensor:
        """scale * q.k for every query and key, before the mask (scaling q, not the bigger scores). With `reuse`
        (a call in which nothing keeps the scores past their hook) they are written into that call's scratch
        tensor, layer after layer, where autograd does not need them."""
        q, k_t = q * scale, k.transpose(-2, -1)
        if reuse is not None and not (torch.is_grad_enabled() and (q.requires_grad or k_t.requires_grad)):
            shape = torch.broadcast_shapes(q.shape[:-2], k_t.shape[:-2]) + (q.shape[-2], k_t.shape[-1])
            out = reuse.scratch(shape, q)  # [batch head q k]
            return self.hook_attn_scores(torch.matmul(q, k_t, out=out))
        return self.hook_attn_scores(q @ k_t)  # [batch head q k]

    def mask_for(self, scores: torch.Tensor, mask: torch.Tensor, mask_kind: str) -> tuple[torch.Tensor, str]:
        """The bool mask this call applies, `[batch head q k]` (hook_mask may replace it), and its kind."""
        given = mask.expand(scores.shape)  # [batch head q k]
        applied = self.hook_mask(given)
        return applied, (mask_kind if applied is given else "custom")  # a replaced mask promises nothing

    # -- head bookkeeping ----------------------------------------------------------------------

    def split_heads(self, t: torch.Tensor) -> torch.Tensor:
        """`[batch pos head*d_head]` -> `[batch pos head d_head]` (queries: n_heads, keys and values:
        n_kv_heads, read off the width)."""
        b, p, _ = t.shape
        return t.view(b, p, -1, self.cfg.d_head)  # [batch pos head d_head]

    def per_query_head(self, t: torch.Tensor) -> torch.Tensor:
        """Keys or values `[batch kv_head pos d_head]` -> `[batch head pos d_head]`: each kv head
        repeated for the n_heads / n_kv_heads query heads it serves (a no-op without grouping)."""
        groups = self.cfg.n_heads // t.shape[1]
        return t if groups == 1 else t.repeat_interleave(groups, dim=1)  # [batch head pos d_head]

    def merge_heads(self, z: torch.Tensor) -> torch.Tensor:
        """`[batch pos head d_head]` -> `[batch pos head*d_head]`, ready for W_O."""
        b, p = z.shape[:2]
        return z.reshape(b, p, self.cfg.n_heads * self.cfg.d_head)  # [batch pos head*d_head]

    def hook_points(self) -> list[HookPoint]:
        """This module's hook points in the order forward calls them (their order in __init__)."""
        return own_hook_points(self)


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor, mask_kind: str,
                   in_place: bool = False) -> torch.Tensor:
    """Softmax over the keys each query may attend to, `[batch head q k]`; masked weights are exactly 0.

    "full" hides nothing (a plain softmax); under "causal" every query sees at least itself; any
    other mask may leave a query with no key at all, and that query's row is zeros, never NaN.
    `in_place` lets the mask be written into `scores` itself (when nothing keeps them past their hook): at
    1,024 tokens that saves a fresh tensor as large as the scores in every layer.
    """
    if mask_kind == "full":
        return torch.softmax(scores, dim=-1)  # [batch head q k]
    fill = scores.masked_fill_ if in_place else scores.masked_fill
    pattern = torch.softmax(fill(hidden_keys(mask), float("-inf")), dim=-1)  # [batch head q k]
    if mask_kind != "causal":
        empty = ~mask.any(dim=-1, keepdim=True)  # [batch head q 1]: queries that may see nothing
        if bool(empty.any()):
            pattern = pattern.masked_fill(empty, 0.0)  # their softmax is NaN; give zeros instead
    return pattern


def hidden_keys(mask: torch.Tensor) -> torch.Tensor:
    """~mask, `[batch head q k]`, inverting each distinct entry once: a mask expanded over the batch and the
    heads (stride 0 there: one `[q k]` for all) is inverted at its own size and expanded again, not heads times."""
    own = tuple(slice(0, 1) if stride == 0 else slice(None) for stride in mask.stride())
    return (~mask[own]).expand(mask.shape)  # [batch head q k], a view


def fused_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor,
                    mask_kind: str, scale: float) -> torch.Tensor:
    """The same weighted sum through `scaled_dot_product_attention` (no scores or pattern to show).

    q `[batch head pos d_head]`, k and v `[batch kv_head pos d_head]` -> `[batch head q d_head]`
    (fewer kv heads: the kernel's grouped-query mode, query head h reading kv head h // groups).
    Callers make sure every query may attend to some key (the kernel would give NaN where the
    explicit path gives zeros).
    """
    gqa = {"enable_gqa": True} if k.shape[1] != q.shape[1] else {}
    if mask_kind == "full":
        return F.scaled_dot_product_attention(q, k, v, scale=scale, **gqa)
    if mask_kind == "causal" and q.shape[-2] == k.shape[-2]:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale, **gqa)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, **gqa)


def own_hook_points(module: nn.Module) -> list[HookPoint]:
    """The hook points inside `module`, in the order its __init__ registered them."""
    return [m for m in module.modules() if isinstance(m, HookPoint)]


# ---------------------------------------------------------------------------------------------
# MLP, LayerNorm with a hook, and the block


class MLP(nn.Module):
    """Two linear maps with a non-linearity between them, applied to each position alone.

    plain:  W_out act(W_in x)          gated (cfg.gated_mlp, SwiGLU):  W_out (act(W_gate x) * W_in x)

    `hook_pre` is what the non-linearity reads (W_in x, or W_gate x when gated), `hook_pre_linear`
    the gated model's linear branch W_in x, `hook_post` what W_out reads (TransformerLens's names).
    """

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.gated = cfg.gated_mlp
        self.W_in = nn.Linear(cfg.d_model, cfg.d_mlp, bias=cfg.mlp_bias)  # the "up" projection when gated
        if cfg.gated_mlp:
            self.W_gate = nn.Linear(cfg.d_model, cfg.d_mlp, bias=cfg.mlp_bias)
        self.hook_pre = HookPoint()  # [batch pos d_mlp]
        if cfg.gated_mlp:
            self.hook_pre_linear = HookPoint()  # [batch pos d_mlp]
        self.hook_post = HookPoint()  # [batch pos d_mlp]
        self.W_out = nn.Linear(cfg.d_mlp, cfg.d_model, bias=cfg.mlp_bias)  # the "down" projection
        self.act = ACTIVATIONS[cfg.act]()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """`[batch pos d_model]` -> `[batch pos d_model]`."""
        if not self.gated:
            return self.W_out(self.hook_post(self.act(self.hook_pre(self.W_in(x)))))
        gate = self.act(self.hook_pre(self.W_gate(x)))  # [batch pos d_mlp]
        linear = self.hook_pre_linear(self.W_in(x))  # [batch pos d_mlp]
        return self.W_out(self.hook_post(gate * linear))

    def hook_points(self) -> list[HookPoint]:
        """hook_pre, (hook_pre_linear,) hook_post: the order forward calls them."""
        return own_hook_points(self)


class Norm(nn.Module):
    """LayerNorm or RMSNorm (or the identity when the config has none), then `hook_normalized`.

        LayerNorm: (x - mean(x)) / sqrt(var(x) + eps) * w + b        RMSNorm: x / sqrt(mean(x^2) + eps) * w

    `hook_scale` `[batch pos 1]` is the divisor. A call that touches it gets the explicit formula
    above; every other call takes torch's fused kernel (the two agree to about 1e-7).
    """

    def __init__(self, cfg: TransformerConfig, enabled: bool):
        super().__init__()
        self.has_scale = enabled  # the identity has no divisor to show
        if not enabled:
            self.ln = nn.Identity()
        elif cfg.norm_type == "rmsnorm":
            self.ln = nn.RMSNorm(cfg.d_model, eps=cfg.ln_eps)
        else:
            self.ln = nn.LayerNorm(cfg.d_model, eps=cfg.ln_eps)
        if enabled:
            self.hook_scale = HookPoint()  # [batch pos 1]
        self.hook_normalized = HookPoint()  # [batch pos d_model]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """`[batch pos d_model]` -> `[batch pos d_model]`."""
        if self.has_scale:
            state = current_state()
            if state is not None and state.touches(self.hook_scale.name):
                return self.hook_normalized(self.explicit(x))
        return self.hook_normalized(self.ln(x))

    def explicit(self, x: torch.Tensor) -> torch.Tensor:
        """The norm written out, so `hook_scale` can show (or change) the divisor."""
        ln = self.ln
        if isinstance(ln, nn.LayerNorm):
            x = x - x.mean(dim=-1, keepdim=True)  # [batch pos d_model], centred
        scale = self.hook_scale((x.pow(2).mean(dim=-1, keepdim=True) + ln.eps).sqrt())  # [batch pos 1]
        out = x / scale * ln.weight  # [batch pos d_model]
        return out + ln.bias if getattr(ln, "bias", None) is not None else out

    def hook_points(self) -> list[HookPoint]:
        """(hook_scale,) hook_normalized: the order forward calls them."""
        return own_hook_points(self)


class Block(nn.Module):
    """One layer: self-attention, (cross-attention,) MLP, each wrapped in residual + norm (LN or RMSNorm).

    pre-LN:  x = x + f(LN(x))     post-LN:  x = LN(x + f(x))     norm="none": x = x + f(x)

    (without the residual path, `x +` drops out). Each sublayer is two lines of forward: what f
    reads (`sublayer_input`), and how its output joins the stream (`add_residual`).
    """

    def __init__(self, cfg: TransformerConfig, cross: bool = False):
        super().__init__()
        self.cfg = cfg
        has_ln = cfg.norm != "none"
        self.hook_resid_pre = HookPoint()  # [batch pos d_model]
        self.ln1 = Norm(cfg, has_ln)
        self.attn = Attention(cfg)
        self.hook_attn_out = HookPoint()  # [batch pos d_model]
        self.hook_resid_mid = HookPoint()  # [batch pos d_model]
        if cross:
            self.ln_cross = Norm(cfg, has_ln)
            self.cross_attn = Attention(cfg, cross=True)
            self.hook_cross_attn_out = HookPoint()  # [batch pos d_model]
            self.hook_resid_mid_cross = HookPoint()  # [batch pos d_model]
        self.ln2 = Norm(cfg, has_ln)
        self.mlp = MLP(cfg)
        self.hook_mlp_out = HookPoint()  # [batch pos d_model]
        self.hook_resid_post = HookPoint()  # [batch pos d_model]

    def forward(self, x: torch.Tensor, mask: torch.Tensor, mask_kind: str, opts: CallOptions,
                rope: Optional[RopeTables] = None, memory: Optional[torch.Tensor] = None,
                cross_mask: Optional[torch.Tensor] = None, cross_kind: str = "full",
                self_kv: Optional[SelfKV] = None, cross_kv: Optional[CrossKV] = None) -> torch.Tensor:
        """The residual stream `[batch pos d_model]` in and out.

        mask / mask_kind: this layer's self-attention mask; memory: the encoder output
        `[batch src d_model]` (decoder blocks of an encoder-decoder), with cross_mask / cross_kind;
        rope, self_kv, cross_kv: as in Attention.forward.
        """
        x = self.hook_resid_pre(x)  # [batch pos d_model]
        out = self.hook_attn_out(self.attn(self.sublayer_input(x, self.ln1), mask, mask_kind, opts, rope,
                                           self_kv=self_kv))
        x = self.add_residual(x, out, self.ln1, self.hook_resid_mid)
        if memory is not None:
            out = self.hook_cross_attn_out(self.cross_attn(self.sublayer_input(x, self.ln_cross), cross_mask,
                                                           cross_kind, opts, memory=memory, cross_kv=cross_kv))
            x = self.add_residual(x, out, self.ln_cross, self.hook_resid_mid_cross)
        out = self.hook_mlp_out(self.mlp(self.sublayer_input(x, self.ln2)))
        return self.add_residual(x, out, self.ln2, self.hook_resid_post)

    def sublayer_input(self, x: torch.Tensor, norm: Norm) -> torch.Tensor:
        """What a sublayer reads: LN(x) (pre-LN, and the identity for norm="none"), or x itself (post-LN)."""
        return x if self.cfg.norm == "post" else norm(x)

    def add_residual(self, x: torch.Tensor, out: torch.Tensor, norm: Norm, hook_resid: HookPoint) -> torch.Tensor:
        """The stream after a sublayer: x + out, normalised afterwards for post-LN (out alone without residual)."""
        y = x + out if self.cfg.residual else out  # [batch pos d_model]
        return hook_resid(norm(y) if self.cfg.norm == "post" else y)

    def sublayers(self) -> list[tuple[Norm, Attention | MLP, HookPoint, HookPoint]]:
        """(norm, f, hook_out, hook_resid) of each sublayer, in forward order."""
        subs = [(self.ln1, self.attn, self.hook_attn_out, self.hook_resid_mid)]
        if hasattr(self, "cross_attn"):
            subs.append((self.ln_cross, self.cross_attn, self.hook_cross_attn_out, self.hook_resid_mid_cross))
        subs.append((self.ln2, self.mlp, self.hook_mlp_out, self.hook_resid_post))
        return subs

    def hook_points(self) -> list[HookPoint]:
        """This block's hook points in the order forward calls them: post-LN normalises after f."""
        points = [self.hook_resid_pre]
        for norm, f, hook_out, hook_resid in self.sublayers():
            if self.cfg.norm == "post":
                points += [*f.hook_points(), hook_out, *norm.hook_points(), hook_resid]
            else:
                points += [*norm.hook_points(), *f.hook_points(), hook_out, hook_resid]
        return points


# ---------------------------------------------------------------------------------------------
# A stack of blocks with its embeddings


class Stack(nn.Module):
    """Token embedding + positions (+ token types, + a norm: BERT), n_layers blocks, and the final norm."""

    def __init__(self, cfg: TransformerConfig, vocab_size: int, causal: bool, cross: bool):
        super().__init__()
        self.cfg = cfg
        self.causal = causal
        self.W_E = nn.Embedding(vocab_size, cfg.d_model)
        self.hook_embed = HookPoint()  # [batch pos d_model]
        if cfg.pos == "learned":
            self.W_pos = nn.Embedding(cfg.max_len, cfg.d_model)
        self.hook_pos_embed = HookPoint()  # [batch pos d_model]; zeros for "none" and "rope"
        if cfg.n_token_types:
            self.W_token_type = nn.Embedding(cfg.n_token_types, cfg.d_model)
            self.hook_token_type_embed = HookPoint()  # [batch pos d_model]
        if cfg.embed_norm:
            self.ln_embed = Norm(cfg, True)
        self.blocks = nn.ModuleList([Block(cfg, cross=cross) for _ in range(cfg.n_layers)])
        self.ln_final = Norm(cfg, cfg.norm == "pre")  # post-LN outputs are normalised already
        # Fixed tables for the first positions, extended on the fly beyond them (non-persistent: not
        # in checkpoints; `init_tables` recomputes them after a load onto the meta device).
        for name, table in self.fixed_tables().items():
            self.register_buffer(name, table, persistent=False)

    def fixed_tables(self, device: Optional[torch.device] = None,
                     dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
        """The sinusoidal table `[n d_model]`, and RoPE's cos and sin `[n rope_dim/2]` when RoPE can
        run here (an even rope_dim), for the first n = min(max_len, TABLE_POSITIONS) positions.

        device None: torch's current default (the meta device while a loader builds a skeleton)."""
        cfg = self.cfg
        n = min(cfg.max_len, TABLE_POSITIONS)
        sin_table = positional.sinusoidal(n, cfg.d_model, dtype=dtype)  # [n d_model]
        tables = {"sin_table": sin_table if device is None else sin_table.to(device)}
        if cfg.rope_dim % 2 == 0:
            tables["rope_cos"], tables["rope_sin"] = positional.rope_cos_sin(
                n, cfg.rope_dim, cfg.rope_base, dtype=dtype, device=device)
        return tables

    def init_tables(self) -> None:
        """(Re)compute the fixed tables on the device and in the dtype of the embedding weights."""
        weight = self.W_E.weight
        dtype = weight.dtype if weight.is_floating_point() else torch.float32
        for name, table in self.fixed_tables(weight.device, dtype).items():
            setattr(self, name, table)  # replaces the registered (non-persistent) buffer

    def forward(self, tokens: torch.Tensor, masks: Sequence[LayerMask], opts: CallOptions,
                memory: Optional[torch.Tensor] = None, cross_masks: Optional[Sequence[LayerMask]] = None,
                offset: int = 0, kv: Optional[KVCache] = None,
                token_type_ids: Optional[torch.Tensor] = None) -> torch.Tensor:
        """tokens `[batch pos]` -> the final normalised residual stream `[batch pos d_model]`.

        masks: one (mask, kind) per layer; memory and cross_masks: the encoder output and the
        cross-attention masks (decoder of an encoder-decoder). offset: the position of the first
        token (decoding steps with a cache); kv: that cache. token_type_ids `[batch pos]`: each
        token's segment (models with a token-type table; zeros when None).
        """
        x = self.embed(tokens, opts, offset, token_type_ids)  # [batch pos d_model]
        n = tokens.shape[1]
        rope = self.rope_tables(n, offset, x) if opts.pos == "rope" else None
        for i, block in enumerate(self.blocks):
            mask, kind = masks[i]
            cross_mask, cross_kind = cross_masks[i] if cross_masks is not None else (None, "full")
            self_kv, cross_kv = kv.layer(i) if kv is not None else (None, None)
            x = block(x, mask, kind, opts, rope, memory, cross_mask, cross_kind,
                      self_kv=self_kv, cross_kv=cross_kv)  # [batch pos d_model]
        return self.ln_final(x)

    def embed(self, tokens: torch.Tensor, opts: CallOptions, offset: int = 0,
              token_type_ids: Optional[torch.Tensor] = None) -> torch.Tensor:
        """The stream entering the first block `[batch pos d_model]`: token embedding + positions
        (+ the token-type embedding, then a norm, where the config has them: BERT)."""
        b, n = tokens.shape
        embed = self.hook_embed(self.W_E(tokens))  # [batch pos d_model]
        pos = self.hook_pos_embed(self.positions(opts.pos, n, offset, embed).expand(b, n, -1))  # [batch pos d_model]
        x = embed + pos  # [batch pos d_model]
        if self.cfg.n_token_types:
            types = torch.zeros_like(tokens) if token_type_ids is None else token_type_ids  # [batch pos]
            x = x + self.hook_token_type_embed(self.W_token_type(types))  # [batch pos d_model]
        return self.ln_embed(x) if self.cfg.embed_norm else x

    def positions(self, scheme: str, n: int, offset: int, like: torch.Tensor) -> torch.Tensor:
        """The additive positional embedding `[n, d_model]` for positions offset..offset+n-1."""
        end = offset + n
        if scheme == "sinusoidal":
            if end <= self.sin_table.shape[0]:
                return self.sin_table[offset:end]
            return positional.sinusoidal(n, self.cfg.d_model, offset=offset).to(like)
        if scheme == "learned":
            if end > self.cfg.max_len:
                raise ValueError(
                    f"this model learned a position table for {self.cfg.max_len} positions only, and "
                    f"the input needs {end}. A learned table cannot extrapolate: shorten the input "
                    f"to {self.cfg.max_len} tokens, or use a sinusoidal or RoPE model."
                )
            return self.W_pos.weight[offset:end]
        return like.new_zeros(n, self.cfg.d_model)

    def rope_tables(self, n: int, offset: int, like: torch.Tensor) -> RopeTables:
        """RoPE's cos and sin `[n, rope_dim/2]` for positions offset..offset+n-1, in like's dtype."""
        end = offset + n
        if end <= self.rope_cos.shape[0]:
            return self.rope_cos[offset:end].to(like.dtype), self.rope_sin[offset:end].to(like.dtype)
        return positional.rope_cos_sin(n, self.cfg.rope_dim, self.cfg.rope_base, offset,
                                       dtype=like.dtype, device=like.device)

    def cross_keys_values(self, memory: torch.Tensor) -> list[CrossKV]:
        """Every block's cross-attention keys and values of the encoder output, for a KVCache."""
        return [CrossKV(*block.cross_attn.keys_values(memory)) for block in self.blocks]

    def hook_points(self) -> list[HookPoint]:
        """This stack's hook points in the order forward calls them."""
        points = [self.hook_embed, self.hook_pos_embed]
        if self.cfg.n_token_types:
            points.append(self.hook_token_type_embed)
        if self.cfg.embed_norm:
            points += self.ln_embed.hook_points()
        for block in self.blocks:
            points += block.hook_points()
        return points + self.ln_final.hook_points()


# ---------------------------------------------------------------------------------------------
# The model


class Transformer(nn.Module):
    """Encoder, decoder or encoder-decoder Transformer with TransformerLens-style hook names.

    `model(tokens)` -> logits `[batch pos vocab]`; encoder-decoder: `model(src, tgt)`.
    `run_with_cache`, `run_with_hooks` and `generate` are the ways pages look inside.

    A converted checkpoint is loaded without a random initialisation first: build the skeleton on
    the meta device, `load_state_dict(tensors, strict=True, assign=True)`, then `tie_weights()`
    and `init_tables()`. With cfg.tie_embeddings the unembedding IS the output stack's W_E: a
    state dict may leave `unembed.weight` out (checkpoints do), and loading re-ties it.
    """

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.cfg = cfg
        if cfg.arch == "encoder-decoder":
            self.encoder = Stack(cfg, cfg.source_vocab_size, causal=False, cross=False)
            self.decoder = Stack(cfg, cfg.vocab_size, causal=True, cross=True)
        else:
            self.stack = Stack(cfg, cfg.vocab_size, causal=cfg.arch == "decoder", cross=False)
        if cfg.mlm_head:  # BERT's transform before the unembedding: norm(act(dense(x)))
            self.mlm_dense = nn.Linear(cfg.d_model, cfg.d_model)
            self.mlm_act = ACTIVATIONS[cfg.act]()
            self.mlm_norm = Norm(cfg, True)
        self.unembed = nn.Linear(cfg.d_model, cfg.vocab_size, bias=cfg.unembed_bias)
        self.hook_logits = HookPoint()  # [batch pos vocab]
        self.apply(_init_weights)
        self.tie_weights()
        self.register_load_state_dict_pre_hook(_fill_tied_weights)
        self.register_load_state_dict_post_hook(_retie_after_load)
        for path, module in self.named_modules():
            if isinstance(module, HookPoint):
                module.name = path.removeprefix("stack.")
        self._hooks = {hook.name: hook for hook in self.hook_points()}  # in forward order

    # -- shared weights and fixed tables ------------------------------------------------------

    @property
    def output_stack(self) -> Stack:
        """The stack whose stream the unembedding reads: the decoder, or the single stack."""
        return self.decoder if self.is_encoder_decoder else self.stack

    def tie_weights(self) -> None:
        """With cfg.tie_embeddings, make the unembedding's weight the very Parameter of W_E (again:
        `load_state_dict(..., assign=True)` puts a new Parameter in each place)."""
        if self.cfg.tie_embeddings:
            self.unembed.weight = self.output_stack.W_E.weight

    def shared_keys(self) -> set[str]:
        """State-dict keys whose tensor is another key's (left out of a checkpoint, re-tied on load)."""
        return {"unembed.weight"} if self.cfg.tie_embeddings else set()

    def init_tables(self) -> None:
        """(Re)compute the fixed positional tables (sin_table, rope_cos, rope_sin: not in any state
        dict) on the device and in the dtype of the weights, e.g. after a load onto the meta device."""
        stacks = [self.encoder, self.decoder] if self.is_encoder_decoder else [self.stack]
        for stack in stacks:
            stack.init_tables()

    # -- names --------------------------------------------------------------------------------

    def hook_points(self) -> list[HookPoint]:
        """Every hook point in the order a forward pass (with everything captured) calls them."""
        stacks = [self.encoder, self.decoder] if self.is_encoder_decoder else [self.stack]
        head = self.mlm_norm.hook_points() if self.cfg.mlm_head else []
        return [hook for stack in stacks for hook in stack.hook_points()] + head + [self.hook_logits]

    def hook_names(self, pos: Optional[str] = None) -> list[str]:
        """Every hook name in the order a forward pass (with everything captured) calls them.

        The RoPE hooks (`hook_rot_q`, `hook_rot_k`) are listed when the (per-call) scheme is "rope".
        Keys pass `attn.hook_k_raw` (s W_K, before cfg.key_norm_clip) and then `attn.hook_k` (after
        it): an intervention on the raw keys goes through the clip, one on `hook_k` replaces its output.
        Post-LN blocks call a sublayer's `ln*.hook_normalized` after its output hook, not before.
        Every norm with weights has `hook_scale` `[batch pos 1]` (its divisor) just before `hook_normalized`.
        """
        scheme = pos or self.cfg.pos
        return [n for n in self._hooks if scheme == "rope" or not n.endswith(("hook_rot_q", "hook_rot_k"))]

    def hook_point(self, name: str) -> HookPoint:
        """The hook point called `name` (a ValueError naming hook_names() if there is none)."""
        if name not in self._hooks:
            raise ValueError(f"no hook point named {name!r}; see model.hook_names()")
        return self._hooks[name]

    @property
    def is_encoder_decoder(self) -> bool:
        return self.cfg.arch == "encoder-decoder"

    @property
    def device(self) -> torch.device:
        return self.unembed.weight.device

    # -- the forward pass ---------------------------------------------------------------------

    def forward(self, tokens: torch.Tensor, tgt: Optional[torch.Tensor] = None, *,
                mask: MaskArg = None, src_mask: MaskArg = None, tgt_mask: MaskArg = None,
                cross_mask: MaskArg = None, pos: Optional[str] = None, temperature: float = 1.0,
                attn_impl: str = "auto", token_type_ids: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Logits `[batch pos vocab]` (encoder-decoder: over the target positions).

        token_type_ids `[batch pos]`: each token's segment, 0..n_token_types-1 (BERT's sentence A / B),
        for a model with a token-type table; zeros when None.
        """
        opts = self._options(pos, temperature, attn_impl)
        tokens = self._check_tokens(tokens, self._input_vocab(), "tokens" if tgt is None else "src")
        token_type_ids = self._check_token_types(token_type_ids, tokens)
        if self.is_encoder_decoder:
            if tgt is None:
                raise ValueError("an encoder-decoder model needs both a source and a target: model(src, tgt)")
            if mask is not None:
                raise ValueError("encoder-decoder models take src_mask, tgt_mask and cross_mask, not mask")
            tgt = self._check_tokens(tgt, self.cfg.vocab_size, "tgt")
            memory = self.encode(tokens, src_mask, opts)
            x = self.decode(tgt, memory, tgt_mask, cross_mask, opts)
        else:
            if tgt is not None:
                raise ValueError(f"a {self.cfg.arch} model takes one token tensor; tgt is for encoder-decoder")
            if src_mask is not None or tgt_mask is not None or cross_mask is not None:
                raise ValueError(f"a {self.cfg.arch} model takes mask=..., not src/tgt/cross masks")
            masks = self._layer_masks(mask, tokens.shape[1], tokens.shape[1], self.stack.causal, "mask")
            x = self.stack(tokens, masks, opts, token_type_ids=token_type_ids)
        return self.hook_logits(self.unembed(self.head_input(x)))

    def head_input(self, x: torch.Tensor) -> torch.Tensor:
        """What the unembedding reads `[.. d_model]`: the final stream, through BERT's MLM transform
        norm(act(dense(x))) when the config has one."""
        if not self.cfg.mlm_head:
            return x
        return self.mlm_norm(self.mlm_act(self.mlm_dense(x)))

    def encode(self, src: torch.Tensor, src_mask: MaskArg, opts: CallOptions) -> torch.Tensor:
        """The encoder's output `[batch src d_model]` (the memory cross-attention reads)."""
        n = src.shape[1]
        return self.encoder(src, self._layer_masks(src_mask, n, n, False, "src_mask"), opts)

    def decode(self, tgt: torch.Tensor, memory: torch.Tensor, tgt_mask: MaskArg, cross_mask: MaskArg,
               opts: CallOptions, offset: int = 0, kv: Optional[KVCache] = None) -> torch.Tensor:
        """The decoder's final stream `[batch tgt d_model]`; tgt starts at position `offset`."""
        n_q, n_k = tgt.shape[1], offset + tgt.shape[1]
        masks = self._layer_masks(tgt_mask, n_q, n_k, True, "tgt_mask", offset)
        cross = self._layer_masks(cross_mask, n_q, memory.shape[1], False, "cross_mask")
        return self.decoder(tgt, masks, opts, memory=memory, cross_masks=cross, offset=offset, kv=kv)

    # -- looking inside -----------------------------------------------------------------------

    def run_with_cache(self, tokens: torch.Tensor, names: NameFilter = None, *,
                       tgt: Optional[torch.Tensor] = None,
                       grad_of: Optional[Callable[[torch.Tensor], torch.Tensor]] = None,
                       fwd: Sequence[tuple[str, HookFn]] = (), **options) -> tuple[torch.Tensor, Cache]:
        """Run once and return (logits, cache of the chosen activations, as detached copies).

        names: a name, glob, list or predicate (None = every hook). grad_of: a function of the
        logits returning a scalar; its gradient with respect to every captured floating-point
        activation is stored as `cache[name + "_grad"]` (torch.autograd.grad; no param.grad written).
        fwd: interventions as in run_with_hooks. Other options go to forward (mask, pos, ...).
        """
        available = self.hook_names(options.get("pos"))
        state = RunState(capture=frozenset(resolve_names(names, available)),
                         fwd=self._resolve_fwd(fwd, available), keep_live=grad_of is not None)
        with running(state):
            if grad_of is None:
                with torch.no_grad():
                    logits = self(tokens, tgt, **options)
                return logits, Cache(state.cache)
            with torch.enable_grad():
                logits = self(tokens, tgt, **options)
                scalar = grad_of(logits)
                if not isinstance(scalar, torch.Tensor) or scalar.numel() != 1:
                    raise ValueError("grad_of must return a single-number tensor (e.g. the loss, or one logit)")
                live_names = list(state.live)
                grads = torch.autograd.grad(scalar.reshape(()), [state.live[n] for n in live_names],
                                            allow_unused=True)
        cache = Cache(state.cache)
        for name, grad in zip(live_names, grads):
            cache[name + "_grad"] = torch.zeros_like(cache[name]) if grad is None else grad.detach()
        return logits.detach(), cache

    def run_with_hooks(self, tokens: torch.Tensor, fwd: Sequence[tuple[str, HookFn]] = (), *,
                       tgt: Optional[torch.Tensor] = None, **options) -> torch.Tensor:
        """Run with interventions: each fn(tensor, hook) may return a replacement tensor (same shape).

        Names may be globs ("blocks.*.attn.hook_z"). Functions must not modify the tensor in place.
        """
        available = self.hook_names(options.get("pos"))
        state = RunState(fwd=self._resolve_fwd(fwd, available))
        with running(state), torch.no_grad():
            return self(tokens, tgt, **options)

    # -- generation ---------------------------------------------------------------------------

    @torch.no_grad()
    def generate(self, tokens: torch.Tensor, steps: int, use_cache: bool = True,
                 tgt_prefix: Optional[torch.Tensor] = None, pos: Optional[str] = None) -> torch.Tensor:
        """Greedy decoding of `steps` tokens; returns the prefix followed by them.

        Decoder: `tokens` is the prefix. Encoder-decoder: `tokens` is the source and `tgt_prefix`
        the decoder's start (e.g. `[[bos]]`); the encoder runs once and cross-attention keys and
        values are computed once. With use_cache, each step feeds only the newest token and reuses
        the stored keys and values; the result equals recomputing everything (use_cache=False).
        """
        if self.cfg.arch == "encoder":
            raise ValueError("an encoder has no causal mask and cannot generate; use a decoder model")
        if not isinstance(steps, int) or steps < 0:
            raise ValueError(f"steps must be a non-negative integer, got {steps!r}")
        opts = self._options(pos, 1.0, "auto")
        memory = None
        if self.is_encoder_decoder:
            if tgt_prefix is None:
                raise ValueError("encoder-decoder generation needs tgt_prefix, e.g. torch.tensor([[bos_id]])")
            src = self._check_tokens(tokens, self.cfg.source_vocab_size, "src")
            out = self._check_tokens(tgt_prefix, self.cfg.vocab_size, "tgt_prefix")
            memory = self.encode(src, None, opts)
        else:
            out = self._check_tokens(tokens, self.cfg.vocab_size, "tokens")
        kv = None
        if use_cache:
            cross = self.decoder.cross_keys_values(memory) if memory is not None else None
            kv = KVCache.empty(self.cfg.n_layers, cross)
        for _ in range(steps):
            past = kv.length if kv is not None else 0  # positions whose keys and values are stored
            chunk = out[:, past:]  # [batch new]: every position without a cache, the newest with one
            if memory is not None:
                x = self.decode(chunk, memory, None, None, opts, offset=past, kv=kv)  # [batch new d_model]
            else:
                n = chunk.shape[1]
                masks = self._layer_masks(None, n, past + n, True, "mask", past)
                x = self.stack(chunk, masks, opts, offset=past, kv=kv)  # [batch new d_model]
            logits = self.unembed(self.head_input(x[:, -1]))  # [batch vocab]
            out = torch.cat([out, logits.argmax(-1, keepdim=True)], dim=1)  # [batch pos+1]
        return out

    # -- weights, for the circuit pages -------------------------------------------------------

    def head_weights(self, layer: int, prefix: str = "", which: str = "attn") -> dict[str, torch.Tensor]:
        """W_Q, W_K, W_V `[head d_model d_head]` and W_O `[head d_head d_model]` of one layer, detached.

        With grouped keys and values, W_K and W_V are given per QUERY head (each kv head repeated
        for the query heads it serves), so every head has its own four matrices. Biases are left out.
        """
        stack = self.stack_for(prefix)
        attn = getattr(stack.blocks[layer], which)
        h, dh, d = self.cfg.n_heads, self.cfg.d_head, self.cfg.d_model
        def per_head(lin: nn.Linear) -> torch.Tensor:
            w = lin.weight.detach().view(-1, dh, d).transpose(1, 2)  # [head|kv_head d_model d_head]
            return w.repeat_interleave(h // w.shape[0], dim=0)  # [head d_model d_head]

        return {
            "W_Q": per_head(attn.W_Q), "W_K": per_head(attn.W_K), "W_V": per_head(attn.value_weight),
            "W_O": attn.W_O.weight.detach().view(d, h, dh).permute(1, 2, 0),  # [head d_head d_model]
        }

    def embedding_matrix(self, prefix: str = "") -> torch.Tensor:
        """W_E `[vocab d_model]` of a stack, detached."""
        return self.stack_for(prefix).W_E.weight.detach()

    def stack_for(self, prefix: str = "") -> Stack:
        """The stack behind a hook-name prefix: "" for a single-stack model, "encoder." or "decoder."."""
        if self.is_encoder_decoder:
            if prefix not in ("encoder.", "decoder.", "encoder", "decoder"):
                raise ValueError("an encoder-decoder model needs prefix 'encoder.' or 'decoder.'")
            return self.encoder if prefix.startswith("encoder") else self.decoder
        if prefix:
            raise ValueError(f"a {self.cfg.arch} model has one stack; use prefix '' (got {prefix!r})")
        return self.stack

    # -- validation ---------------------------------------------------------------------------

    def _input_vocab(self) -> int:
        return self.cfg.source_vocab_size if self.is_encoder_decoder else self.cfg.vocab_size

    def _options(self, pos, temperature, attn_impl) -> CallOptions:
        scheme = pos or self.cfg.pos
        if scheme not in positional.SCHEMES:
            raise ValueError(f"pos must be one of {list(positional.SCHEMES)}, got {scheme!r}")
        if scheme == "learned" and self.cfg.pos != "learned":
            raise ValueError(f"this model was built with pos={self.cfg.pos!r} and has no learned "
                             f"position table; choose 'none', 'sinusoidal' or 'rope' instead")
        if scheme == "rope" and self.cfg.rope_dim % 2:
            raise ValueError(f"RoPE needs an even d_head; this model has d_head={self.cfg.d_head}")
        if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) \
                or not math.isfinite(temperature) or temperature <= 0:
            raise ValueError(f"temperature must be a positive number, got {temperature!r}")
        if attn_impl not in ATTN_IMPLS:
            raise ValueError(f"attn_impl must be one of {list(ATTN_IMPLS)}, got {attn_impl!r}")
        return CallOptions(scheme, float(temperature), attn_impl == "explicit")

    def _check_tokens(self, tokens, vocab_size: int, what: str) -> torch.Tensor:
        if not isinstance(tokens, torch.Tensor):
            raise ValueError(f"{what} must be a torch tensor of token ids, got {type(tokens).__name__}")
        if tokens.dtype == torch.bool or tokens.is_floating_point() or tokens.is_complex():
            raise ValueError(f"{what} must hold integer token ids (torch.long), got dtype {tokens.dtype}")
        if tokens.dim() != 2:
            raise ValueError(f"{what} must have shape [batch, pos], got {tuple(tokens.shape)}; "
                             f"for one sequence use tokens[None]")
        if tokens.numel() == 0:
            raise ValueError(f"{what} is empty: give at least one token")
        lo, hi = int(tokens.min()), int(tokens.max())
        if lo < 0 or hi >= vocab_size:
            raise ValueError(f"{what} has id {lo if lo < 0 else hi}, outside this model's vocabulary "
                             f"of {vocab_size} ids (0..{vocab_size - 1})")
        return tokens.to(device=self.device, dtype=torch.long)

    def _check_token_types(self, token_type_ids, tokens: torch.Tensor) -> Optional[torch.Tensor]:
        """token_type_ids as the stack takes them: None, or ids in 0..n_token_types-1 shaped like tokens."""
        if token_type_ids is None:
            return None
        n_types = self.cfg.n_token_types
        if not n_types:
            raise ValueError("this model has no token-type table (n_token_types = 0): leave token_type_ids out")
        if not isinstance(token_type_ids, torch.Tensor) or token_type_ids.is_floating_point() \
                or token_type_ids.is_complex() or token_type_ids.dtype == torch.bool:
            raise ValueError("token_type_ids must be a tensor of integer ids (torch.long), one per token")
        if tuple(token_type_ids.shape) != tuple(tokens.shape):
            raise ValueError(f"token_type_ids must have the tokens' shape {tuple(tokens.shape)}, "
                             f"got {tuple(token_type_ids.shape)}")
        lo, hi = int(token_type_ids.min()), int(token_type_ids.max())
        if lo < 0 or hi >= n_types:
            raise ValueError(f"token_type_ids has id {lo if lo < 0 else hi}, outside this model's "
                             f"{n_types} token types (0..{n_types - 1})")
        return token_type_ids.to(device=self.device, dtype=torch.long)

    def _layer_masks(self, mask: MaskArg, n_q: int, n_k: int, causal: bool, what: str,
                     offset: int = 0) -> list[LayerMask]:
        """One (mask [.., q, k] bool, kind) per layer: kind is 'full', 'causal' or 'custom'."""
        if causal:
            default = (torch.ones(n_q, n_k, dtype=torch.bool, device=self.device).tril(diagonal=offset), "causal")
        else:
            default = (torch.ones(n_q, n_k, dtype=torch.bool, device=self.device), "full")
        n_layers = self.cfg.n_layers
        if mask is None:
            return [default] * n_layers
        if isinstance(mask, Mapping):
            bad = [k for k in mask if not isinstance(k, int) or not 0 <= k < n_layers]
            if bad:
                raise ValueError(f"{what} keys must be layer indices 0..{n_layers - 1}, got {bad}")
            return [(self._check_mask(mask[i], n_q, n_k, what), "custom") if i in mask else default
                    for i in range(n_layers)]
        return [(self._check_mask(mask, n_q, n_k, what), "custom")] * n_layers

    def _check_mask(self, mask, n_q: int, n_k: int, what: str) -> torch.Tensor:
        if not isinstance(mask, torch.Tensor):
            try:
                mask = torch.as_tensor(mask)
            except Exception as exc:  # noqa: BLE001 - anything unconvertible is a user error here
                raise ValueError(f"{what} must be a bool tensor [q, k], got {type(mask).__name__}") from exc
        if mask.dtype != torch.bool:
            raise ValueError(f"{what} must be a bool tensor (True = may attend), got dtype {mask.dtype}")
        if mask.dim() < 2 or mask.dim() > 4 or tuple(mask.shape[-2:]) != (n_q, n_k):
            raise ValueError(f"{what} must have shape [q, k] = [{n_q}, {n_k}] (or broadcast to "
                             f"[batch, head, {n_q}, {n_k}]), got {tuple(mask.shape)}")
        if mask.dim() >= 3 and mask.shape[-3] not in (1, self.cfg.n_heads):
            raise ValueError(f"{what}'s head dimension must be 1 or {self.cfg.n_heads}, got {mask.shape[-3]}")
        return mask.to(self.device)

    def _resolve_fwd(self, fwd, available) -> dict[str, list[HookFn]]:
        out: dict[str, list[HookFn]] = {}
        for item in fwd:
            if not isinstance(item, (tuple, list)) or len(item) != 2 or not callable(item[1]):
                raise ValueError("fwd must be a list of (hook name, function) pairs")
            for name in resolve_names(item[0], available):
                out.setdefault(name, []).append(item[1])
        return out


def _fill_tied_weights(model: Transformer, state_dict: dict, prefix: str, *args) -> None:
    """A load_state_dict pre-hook: a tied model's state dict may leave `unembed.weight` out (a
    checkpoint does); it is W_E's tensor, so strict loading finds every key."""
    if model.cfg.tie_embeddings and prefix + "unembed.weight" not in state_dict:
        source = prefix + ("decoder." if model.is_encoder_decoder else "stack.") + "W_E.weight"
        if source in state_dict:
            state_dict[prefix + "unembed.weight"] = state_dict[source]


def _retie_after_load(model: Transformer, incompatible_keys) -> None:
    """A load_state_dict post-hook: loading with assign=True gives W_E and the unembedding two
    Parameters; a tied model shares one again."""
    model.tie_weights()


def _init_weights(module: nn.Module) -> None:
    """GPT-2 style initialisation: small normal weights, zero biases."""
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, mean=0.0, std=0.02)
    if isinstance(module, nn.Linear) and module.bias is not None:
        nn.init.zeros_(module.bias)
