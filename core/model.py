"""The Glassbox Transformer: encoder, decoder or encoder-decoder, with a named hook at every step.

Read it top to bottom: attention, MLP, block, stack, and the model that ties them together.
Per-call choices (masks, positional scheme, temperature, what to capture) are arguments of a
call, never attributes flipped on the shared model; see core/hooks.py for how hooks see a call.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Mapping, Optional, Sequence, Union

import torch
import torch.nn.functional as F
from torch import nn

from core import positional
from core.config import TransformerConfig
from core.hooks import Cache, HookFn, HookPoint, NameFilter, RunState, current_state, resolve_names, running

__all__ = ["TransformerConfig", "Transformer", "MaskArg"]

# A mask argument: one bool tensor for every layer, or {layer index: bool tensor}.
MaskArg = Union[torch.Tensor, Mapping[int, torch.Tensor], None]

ATTN_IMPLS = ("auto", "explicit")


@dataclass(frozen=True)
class CallOptions:
    """Per-call choices that flow down the stack (never stored on modules)."""

    pos: str  # effective positional scheme for this call
    temperature: float = 1.0  # attention scores are divided by this before softmax
    force_explicit: bool = False  # skip the fused SDPA fast path


# ---------------------------------------------------------------------------------------------
# Attention


class Attention(nn.Module):
    """Multi-head attention: softmax(q k^T / sqrt(d_head) + mask) v, one hook per step.

    Self-attention when `memory` is None; cross-attention (queries from x, keys and values from
    `memory`) otherwise. No biases in the projections, so W_Q W_K^T and W_V W_O are exact circuits.
    """

    def __init__(self, cfg: TransformerConfig, cross: bool = False):
        super().__init__()
        self.cfg = cfg
        self.cross = cross
        h, dh = cfg.n_heads, cfg.d_head
        self.W_Q = nn.Linear(cfg.d_model, h * dh, bias=False)
        self.W_K = nn.Linear(cfg.d_model, h * dh, bias=False)
        self.W_V = nn.Linear(cfg.d_model, h * dh, bias=False)
        self.W_O = nn.Linear(h * dh, cfg.d_model, bias=False)
        self.hook_q = HookPoint()  # [batch pos head d_head]
        self.hook_k = HookPoint()  # [batch pos head d_head]
        self.hook_v = HookPoint()  # [batch pos head d_head]
        if not cross:
            self.hook_rot_q = HookPoint()  # [batch pos head d_head], after RoPE
            self.hook_rot_k = HookPoint()
        self.hook_attn_scores = HookPoint()  # [batch head q k], scaled, before the mask
        self.hook_mask = HookPoint()  # [batch head q k] bool, True = may attend
        self.hook_pattern = HookPoint()  # [batch head q k], softmax; masked entries exactly 0
        self.hook_z = HookPoint()  # [batch pos head d_head], the weighted sum of values

    def split_heads(self, x: torch.Tensor, proj: nn.Linear) -> torch.Tensor:
        b, p, _ = x.shape
        return proj(x).view(b, p, self.cfg.n_heads, self.cfg.d_head)  # [batch pos head d_head]

    def forward(self, x: torch.Tensor, mask: torch.Tensor, mask_kind: str, opts: CallOptions,
                rope: Optional[tuple[torch.Tensor, torch.Tensor]] = None,
                memory: Optional[torch.Tensor] = None, kv: Optional[dict] = None) -> torch.Tensor:
        cfg = self.cfg
        q = self.hook_q(self.split_heads(x, self.W_Q))
        if self.cross and kv is not None and "k" in kv:
            k, v = kv["k"], kv["v"]  # cross-attention keys/values: computed once per source
        else:
            source = memory if self.cross else x
            k = self.split_heads(source, self.W_K)
            if cfg.key_norm_clip is not None:
                norms = k.norm(dim=-1, keepdim=True).clamp_min(1e-12)
                k = k * (cfg.key_norm_clip / norms).clamp(max=1.0)
            k = self.hook_k(k)
            v = self.hook_v(self.split_heads(source, self.W_V))
            if not self.cross and rope is not None:
                q = self.hook_rot_q(positional.apply_rope(q, *rope))
                k = self.hook_rot_k(positional.apply_rope(k, *rope))
            if kv is not None:
                if not self.cross and "k" in kv:
                    k = torch.cat([kv["k"], k], dim=1)  # [batch past+pos head d_head]
                    v = torch.cat([kv["v"], v], dim=1)
                kv["k"], kv["v"] = k, v

        if cfg.score == "cosine":
            q = F.normalize(q, dim=-1)
            k = F.normalize(k, dim=-1)
            scale = cfg.cosine_scale
        elif cfg.score == "dot":
            scale = 1.0
        else:
            scale = 1.0 / math.sqrt(cfg.d_head)
        scale = scale / opts.temperature

        qh, kh, vh = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # [batch head pos d_head]
        if self._wants_explicit(opts, mask, mask_kind):
            z = self._explicit(qh, kh, vh, mask, mask_kind, scale)
        else:
            z = self._fused(qh, kh, vh, mask, mask_kind, scale)
        z = self.hook_z(z.transpose(1, 2))  # [batch pos head d_head]
        b, p = z.shape[:2]
        return self.W_O(z.reshape(b, p, cfg.n_heads * cfg.d_head))  # [batch pos d_model]

    def _wants_explicit(self, opts: CallOptions, mask: torch.Tensor, mask_kind: str) -> bool:
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

    def _explicit(self, q, k, v, mask, mask_kind, scale):
        scores = self.hook_attn_scores((q * scale) @ k.transpose(-2, -1))  # [batch head q k]
        given = mask.expand(scores.shape)  # [batch head q k]
        mask = self.hook_mask(given)
        if mask_kind == "full" and mask is given:
            pattern = torch.softmax(scores, dim=-1)  # nothing hidden: skip the masking passes
        else:
            pattern = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)  # masked -> exactly 0
            if mask_kind != "causal" or mask is not given:
                empty = ~mask.any(dim=-1, keepdim=True)  # [batch head q 1]: queries that may see nothing
                if bool(empty.any()):
                    pattern = pattern.masked_fill(empty, 0.0)  # their softmax is NaN; give zeros instead
        return self.hook_pattern(pattern) @ v  # [batch head q d_head]

    def _fused(self, q, k, v, mask, mask_kind, scale):
        if mask_kind == "full":
            return F.scaled_dot_product_attention(q, k, v, scale=scale)
        if mask_kind == "causal" and q.shape[-2] == k.shape[-2]:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)


# ---------------------------------------------------------------------------------------------
# MLP, LayerNorm with a hook, and the block


class MLP(nn.Module):
    """Two linear maps with a non-linearity between them, applied to each position alone."""

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.W_in = nn.Linear(cfg.d_model, cfg.d_mlp)
        self.hook_pre = HookPoint()  # [batch pos d_mlp]
        self.hook_post = HookPoint()  # [batch pos d_mlp]
        self.W_out = nn.Linear(cfg.d_mlp, cfg.d_model)
        self.act = nn.GELU() if cfg.act == "gelu" else nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.W_out(self.hook_post(self.act(self.hook_pre(self.W_in(x)))))


class Norm(nn.Module):
    """LayerNorm (or the identity when the config has none) followed by `hook_normalized`."""

    def __init__(self, cfg: TransformerConfig, enabled: bool):
        super().__init__()
        self.ln = nn.LayerNorm(cfg.d_model, eps=cfg.ln_eps) if enabled else nn.Identity()
        self.hook_normalized = HookPoint()  # [batch pos d_model]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.hook_normalized(self.ln(x))


class Block(nn.Module):
    """One layer: self-attention, (cross-attention,) MLP, each wrapped in residual + LayerNorm.

    pre-LN:  x = x + f(LN(x))     post-LN:  x = LN(x + f(x))     norm="none": x = x + f(x)
    """

    def __init__(self, cfg: TransformerConfig, cross: bool = False):
        super().__init__()
        self.cfg = cfg
        has_ln = cfg.norm != "none"
        self.hook_resid_pre = HookPoint()  # [batch pos d_model]
        self.ln1 = Norm(cfg, has_ln)
        self.attn = Attention(cfg)
        self.hook_attn_out = HookPoint()
        self.hook_resid_mid = HookPoint()
        if cross:
            self.ln_cross = Norm(cfg, has_ln)
            self.cross_attn = Attention(cfg, cross=True)
            self.hook_cross_attn_out = HookPoint()
            self.hook_resid_mid_cross = HookPoint()
        self.ln2 = Norm(cfg, has_ln)
        self.mlp = MLP(cfg)
        self.hook_mlp_out = HookPoint()
        self.hook_resid_post = HookPoint()

    def sublayer(self, x: torch.Tensor, norm: Norm, f: Callable[[torch.Tensor], torch.Tensor],
                 hook_out: HookPoint, hook_resid: HookPoint) -> torch.Tensor:
        """Wrap f in the residual and LayerNorm placement the config asks for."""
        if self.cfg.norm == "post":
            out = hook_out(f(x))
            return hook_resid(norm(x + out if self.cfg.residual else out))
        out = hook_out(f(norm(x)))
        return hook_resid(x + out if self.cfg.residual else out)

    def forward(self, x, mask, mask_kind, opts, rope=None, memory=None, cross_mask=None,
                cross_kind="full", kv=None):
        x = self.hook_resid_pre(x)
        self_kv = kv.setdefault("self", {}) if kv is not None else None
        x = self.sublayer(x, self.ln1, lambda h: self.attn(h, mask, mask_kind, opts, rope, kv=self_kv),
                          self.hook_attn_out, self.hook_resid_mid)
        if memory is not None:
            cross_kv = kv.setdefault("cross", {}) if kv is not None else None
            x = self.sublayer(
                x, self.ln_cross,
                lambda h: self.cross_attn(h, cross_mask, cross_kind, opts, memory=memory, kv=cross_kv),
                self.hook_cross_attn_out, self.hook_resid_mid_cross)
        return self.sublayer(x, self.ln2, self.mlp, self.hook_mlp_out, self.hook_resid_post)


# ---------------------------------------------------------------------------------------------
# A stack of blocks with its embeddings


class Stack(nn.Module):
    """Token embedding + positions, n_layers blocks, and the final norm."""

    def __init__(self, cfg: TransformerConfig, vocab_size: int, causal: bool, cross: bool):
        super().__init__()
        self.cfg = cfg
        self.causal = causal
        self.W_E = nn.Embedding(vocab_size, cfg.d_model)
        self.hook_embed = HookPoint()  # [batch pos d_model]
        if cfg.pos == "learned":
            self.W_pos = nn.Embedding(cfg.max_len, cfg.d_model)
        self.hook_pos_embed = HookPoint()  # [batch pos d_model]; zeros for "none" and "rope"
        self.blocks = nn.ModuleList([Block(cfg, cross=cross) for _ in range(cfg.n_layers)])
        self.ln_final = Norm(cfg, cfg.norm == "pre")  # post-LN outputs are normalised already
        # Fixed tables up to max_len, extended on the fly beyond it (non-persistent: not in checkpoints).
        self.register_buffer("sin_table", positional.sinusoidal(cfg.max_len, cfg.d_model), persistent=False)
        if cfg.d_head % 2 == 0:
            cos, sin = positional.rope_cos_sin(cfg.max_len, cfg.d_head, cfg.rope_base)
            self.register_buffer("rope_cos", cos, persistent=False)
            self.register_buffer("rope_sin", sin, persistent=False)

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

    def rope_tables(self, n: int, offset: int, like: torch.Tensor):
        end = offset + n
        if end <= self.rope_cos.shape[0]:
            return self.rope_cos[offset:end].to(like.dtype), self.rope_sin[offset:end].to(like.dtype)
        return positional.rope_cos_sin(n, self.cfg.d_head, self.cfg.rope_base, offset,
                                       dtype=like.dtype, device=like.device)

    def forward(self, tokens, masks, opts: CallOptions, memory=None, cross_masks=None,
                offset: int = 0, kv: Optional[list] = None):
        b, n = tokens.shape
        embed = self.hook_embed(self.W_E(tokens))  # [batch pos d_model]
        pos = self.hook_pos_embed(self.positions(opts.pos, n, offset, embed).expand(b, n, -1))
        x = embed + pos
        rope = self.rope_tables(n, offset, x) if opts.pos == "rope" else None
        for i, block in enumerate(self.blocks):
            mask, kind = masks[i]
            cross_mask, cross_kind = cross_masks[i] if cross_masks is not None else (None, "full")
            x = block(x, mask, kind, opts, rope, memory, cross_mask, cross_kind,
                      kv=kv[i] if kv is not None else None)
        return self.ln_final(x)


# ---------------------------------------------------------------------------------------------
# The model


class Transformer(nn.Module):
    """Encoder, decoder or encoder-decoder Transformer with TransformerLens-style hook names.

    `model(tokens)` -> logits `[batch pos vocab]`; encoder-decoder: `model(src, tgt)`.
    `run_with_cache`, `run_with_hooks` and `generate` are the ways pages look inside.
    """

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.cfg = cfg
        if cfg.arch == "encoder-decoder":
            self.encoder = Stack(cfg, cfg.source_vocab_size, causal=False, cross=False)
            self.decoder = Stack(cfg, cfg.vocab_size, causal=True, cross=True)
        else:
            self.stack = Stack(cfg, cfg.vocab_size, causal=cfg.arch == "decoder", cross=False)
        self.unembed = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.hook_logits = HookPoint()  # [batch pos vocab]
        self.apply(_init_weights)
        self._hooks: dict[str, HookPoint] = {}
        for path, module in self.named_modules():
            if isinstance(module, HookPoint):
                name = path[len("stack."):] if path.startswith("stack.") else path
                module.name = name
                self._hooks[name] = module

    # -- names --------------------------------------------------------------------------------

    def hook_names(self, pos: Optional[str] = None) -> list[str]:
        """Every hook name in the order a forward pass visits them.

        The RoPE hooks (`hook_rot_q`, `hook_rot_k`) are listed when the (per-call) scheme is "rope".
        """
        scheme = pos or self.cfg.pos
        return [n for n in self._hooks if scheme == "rope" or not n.endswith(("hook_rot_q", "hook_rot_k"))]

    def hook_point(self, name: str) -> HookPoint:
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
                attn_impl: str = "auto") -> torch.Tensor:
        """Logits `[batch pos vocab]` (encoder-decoder: over the target positions)."""
        opts = self._options(pos, temperature, attn_impl)
        tokens = self._check_tokens(tokens, self._input_vocab(), "tokens" if tgt is None else "src")
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
            x = self.stack(tokens, masks, opts)
        return self.hook_logits(self.unembed(x))

    def encode(self, src, src_mask, opts):
        n = src.shape[1]
        return self.encoder(src, self._layer_masks(src_mask, n, n, False, "src_mask"), opts)

    def decode(self, tgt, memory, tgt_mask, cross_mask, opts, offset: int = 0, kv=None):
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
        kv = [dict() for _ in range(self.cfg.n_layers)] if use_cache else None
        fed = 0  # how many positions the cache already holds
        for _ in range(steps):
            chunk = out[:, fed:] if use_cache else out
            offset = fed if use_cache else 0
            if memory is not None:
                x = self.decode(chunk, memory, None, None, opts, offset=offset, kv=kv)
            else:
                n = chunk.shape[1]
                masks = self._layer_masks(None, n, offset + n, True, "mask", offset)
                x = self.stack(chunk, masks, opts, offset=offset, kv=kv)
            logits = self.unembed(x[:, -1])  # [batch vocab]
            if use_cache:
                fed = out.shape[1]
            out = torch.cat([out, logits.argmax(-1, keepdim=True)], dim=1)  # [batch pos+1]
        return out

    # -- weights, for the circuit pages -------------------------------------------------------

    def head_weights(self, layer: int, prefix: str = "", which: str = "attn") -> dict[str, torch.Tensor]:
        """W_Q, W_K, W_V `[head d_model d_head]` and W_O `[head d_head d_model]` of one layer, detached."""
        stack = self.stack_for(prefix)
        attn = getattr(stack.blocks[layer], which)
        h, dh, d = self.cfg.n_heads, self.cfg.d_head, self.cfg.d_model
        def per_head(lin: nn.Linear) -> torch.Tensor:
            return lin.weight.detach().view(h, dh, d).transpose(1, 2)  # [head d_model d_head]

        return {
            "W_Q": per_head(attn.W_Q), "W_K": per_head(attn.W_K), "W_V": per_head(attn.W_V),
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
        if scheme == "rope" and self.cfg.d_head % 2:
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

    def _layer_masks(self, mask: MaskArg, n_q: int, n_k: int, causal: bool, what: str,
                     offset: int = 0) -> list[tuple[torch.Tensor, str]]:
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


def _init_weights(module: nn.Module) -> None:
    """GPT-2 style initialisation: small normal weights, zero biases."""
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, mean=0.0, std=0.02)
    if isinstance(module, nn.Linear) and module.bias is not None:
        nn.init.zeros_(module.bias)
