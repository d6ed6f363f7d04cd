"""Hyper-connections: n parallel residual streams mixed by a learned matrix at every sublayer.

A standalone, randomly initialised decoder stack for the Depth page's gradient chart; it does
not change `core.model.Transformer`. The residual state is `[batch pos stream d_model]`. Around
each sublayer F (attention, then the MLP):

    x_{l+1} = H_res x_l + h_post (outer) F(LN(h_pre . x_l))

h_pre reads one input from the streams (a softmax, so a weighted average), h_post writes the
sublayer's output back to every stream, and H_res (n x n) mixes the streams. With
`mixing="sinkhorn"` H_res is doubly stochastic (every row and column sums to 1, made with
Sinkhorn normalisation), so the average of the streams passes every layer unchanged: an identity
path that cannot blow up or die out. With `mixing="free"` H_res is an unconstrained matrix
I + noise, whose products over many layers drift away from the identity.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, Optional

import torch
from torch import nn

from core import positional
from core.config import TransformerConfig
from core.model import MLP, Attention, CallOptions
from core.train import draws_from

Mixing = Literal["sinkhorn", "free"]
MIXINGS = ("sinkhorn", "free")
SINKHORN_TOL = 1e-7  # stop when every row sums to 1 within this (columns are exact after each pass)
SINKHORN_MAX_ITERS = 1000
CHECK_EVERY = 10


def sinkhorn(logits: torch.Tensor, tol: float = SINKHORN_TOL, max_iters: int = SINKHORN_MAX_ITERS) -> torch.Tensor:
    """A doubly-stochastic matrix from any real `[.., n, n]` logits: exp, then rows and columns
    rescaled to sum to 1 in turn until both hold within `tol` (in log space: no overflow).

    Near-identity logits converge in a few passes; logits spread over many orders of magnitude
    take more, hence the check instead of a fixed count.
    """
    if logits.dim() < 2 or logits.shape[-1] != logits.shape[-2]:
        raise ValueError(f"sinkhorn needs square matrices, got shape {tuple(logits.shape)}")
    log_m = logits
    for i in range(1, max_iters + 1):
        log_m = log_m - torch.logsumexp(log_m, dim=-1, keepdim=True)  # rows sum to 1
        log_m = log_m - torch.logsumexp(log_m, dim=-2, keepdim=True)  # columns sum to 1
        if i % CHECK_EVERY == 0:
            rows = torch.logsumexp(log_m.detach(), dim=-1).exp()  # [.. n]
            if float((rows - 1).abs().max()) < tol:
                break
    return log_m.exp()


@dataclass(frozen=True)
class HyperConfig:
    """Sizes and choices of a hyper-connected stack (a small model for the depth experiment)."""

    n_streams: int = 4  # parallel residual streams (n = 1 with identity mixing is a plain residual)
    mixing: Mixing = "sinkhorn"  # doubly-stochastic H_res (sinkhorn) or an unconstrained one (free)
    noise: float = 0.5  # how far the initial H_res logits (or entries, for free) stray from identity
    diag: float = 2.0  # sinkhorn only: the initial logits' diagonal, so H_res starts near identity
    vocab_size: int = 16  # token ids 0..vocab_size-1
    d_model: int = 32  # width of each stream
    n_heads: int = 4  # attention heads per layer
    n_layers: int = 12  # blocks, each with an attention and an MLP sublayer
    max_len: int = 64  # longest input
    gain: float = 1.0  # linear weights drawn with std gain / sqrt(fan_in)

    def __post_init__(self) -> None:
        if self.mixing not in MIXINGS:
            raise ValueError(f"mixing must be one of {list(MIXINGS)}, got {self.mixing!r}")
        for name in ("n_streams", "vocab_size", "d_model", "n_heads", "n_layers", "max_len"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        for name in ("noise", "diag", "gain"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")

    def block_config(self) -> TransformerConfig:
        """The TransformerConfig the attention and MLP sublayers are built from."""
        return TransformerConfig(arch="decoder", vocab_size=self.vocab_size, d_model=self.d_model,
                                 n_heads=self.n_heads, n_layers=1, max_len=self.max_len)


class HyperConnection(nn.Module):
    """One sublayer's connection: read with h_pre, write with h_post, mix the streams with H_res."""

    def __init__(self, cfg: HyperConfig, generator: torch.Generator):
        super().__init__()
        self.mixing = cfg.mixing
        n = cfg.n_streams
        noise = torch.randn(n, n, generator=generator, dtype=torch.float64).float() * cfg.noise
        if cfg.mixing == "sinkhorn":
            start = cfg.diag * torch.eye(n) + noise  # logits; Sinkhorn turns them doubly stochastic
        else:
            start = torch.eye(n) + noise  # the matrix itself, identity plus noise
        self.res = nn.Parameter(start)  # [n n]
        # Read and write weights, random like everything else at init (equal when noise = 0).
        self.pre_logits = nn.Parameter(torch.randn(n, generator=generator) * cfg.noise)  # softmax -> h_pre
        self.post_logits = nn.Parameter(torch.randn(n, generator=generator) * cfg.noise)  # 2 sigmoid -> h_post

    def matrix(self) -> torch.Tensor:
        """H_res `[n n]` (row i says how much of each old stream goes into new stream i)."""
        return sinkhorn(self.res) if self.mixing == "sinkhorn" else self.res

    def forward(self, x: torch.Tensor, branch, h_res: Optional[torch.Tensor] = None) -> torch.Tensor:
        """x `[batch pos stream d_model]`; `h_res` may be passed in (computed for all layers at once)."""
        h_res = self.matrix() if h_res is None else h_res  # [n n]
        h_pre = torch.softmax(self.pre_logits, dim=0)  # [n]
        h_post = 2 * torch.sigmoid(self.post_logits)  # [n]
        inp = torch.einsum("bpnd,n->bpd", x, h_pre)  # [batch pos d_model]
        out = branch(inp)  # [batch pos d_model]
        mixed = torch.einsum("mn,bpnd->bpmd", h_res, x)  # [batch pos stream d_model]
        return mixed + h_post[:, None] * out[:, :, None, :]  # [batch pos stream d_model]


class HyperBlock(nn.Module):
    """Pre-LN attention and MLP, each wrapped in a hyper-connection instead of x + F(LN(x))."""

    def __init__(self, cfg: HyperConfig, generator: torch.Generator):
        super().__init__()
        inner = cfg.block_config()
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.attn = Attention(inner)
        self.hc_attn = HyperConnection(cfg, generator)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.mlp = MLP(inner)
        self.hc_mlp = HyperConnection(cfg, generator)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, opts: CallOptions,
                h_res: Optional[torch.Tensor] = None) -> torch.Tensor:
        """x `[batch pos stream d_model]`; h_res `[2 n n]`: this block's two mixing matrices, if given."""
        h_attn, h_mlp = (None, None) if h_res is None else (h_res[0], h_res[1])
        x = self.hc_attn(x, lambda h: self.attn(self.ln1(h), mask, "causal", opts), h_attn)
        return self.hc_mlp(x, lambda h: self.mlp(self.ln2(h)), h_mlp)


class HyperTransformer(nn.Module):
    """A causal decoder whose residual path is n streams with hyper-connections.

    The embedding is copied into every stream; at the end the streams are averaged, normalised
    and unembedded. `forward(tokens, states=[])` appends the residual state entering each block
    and the final one, so a caller can take gradients there.
    """

    def __init__(self, cfg: HyperConfig, seed: int = 0, *, generator: Optional[torch.Generator] = None):
        super().__init__()
        self.cfg = cfg
        # Every weight comes from this local generator (`generator` replaces `seed` when given), never
        # from torch's process-wide one, which all threads share: the hyper-connections draw from it
        # as they are built, and `init_weights` then redraws every Linear and Embedding weight from
        # it. The draws those modules' own constructors make go to a scratch generator.
        if generator is None:
            generator = torch.Generator().manual_seed(int(seed))
        with draws_from(torch.Generator()):
            self.W_E = nn.Embedding(cfg.vocab_size, cfg.d_model)
            self.blocks = nn.ModuleList([HyperBlock(cfg, generator) for _ in range(cfg.n_layers)])
            self.ln_final = nn.LayerNorm(cfg.d_model)
            self.unembed = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.register_buffer("pos_table", positional.sinusoidal(cfg.max_len, cfg.d_model), persistent=False)
        init_weights(self, cfg.gain, generator)

    def forward(self, tokens: torch.Tensor, states: Optional[list] = None, mixing: Optional[list] = None,
                outputs: Optional[list] = None, cut: bool = False) -> torch.Tensor:
        """Logits `[batch pos vocab]`. For gradients, live tensors go into the lists given:

        states: the residual state entering each block `[batch pos stream d_model]`, then the final one;
        outputs: each block's output (the next block's input, unless `cut`);
        mixing: each block's two mixing matrices H_res `[2 n n]` (attention, MLP).
        cut: every block but the first reads a detached copy of the state (a new leaf), so a gradient
        taken at a block's output stops at that block's input: the depth experiment walks the
        backward pass one block at a time, and each step then touches one block only.
        """
        b, n = tokens.shape
        if n > self.cfg.max_len:
            raise ValueError(f"this stack was built for {self.cfg.max_len} positions, got {n}")
        x = self.W_E(tokens) + self.pos_table[:n].to(self.W_E.weight.dtype)  # [batch pos d_model]
        x = x[:, :, None, :].expand(b, n, self.cfg.n_streams, self.cfg.d_model)  # [batch pos stream d_model]
        mask = torch.ones(n, n, dtype=torch.bool, device=tokens.device).tril()
        opts = CallOptions(pos="sinusoidal")
        h_res = self.mixing_matrices(detach=False).view(len(self.blocks), 2, *([self.cfg.n_streams] * 2))  # [layer 2 n n]
        for i, block in enumerate(self.blocks):
            h = h_res[i]  # [2 n n]; indexed one by one (not unbound at once), so a gradient taken with
            # respect to one block's h does not wait on the blocks below
            if cut and i > 0:
                x = x.detach().requires_grad_(True)
            if states is not None:
                states.append(x)
            if mixing is not None:
                mixing.append(h)
            x = block(x, mask, opts, h)
            if outputs is not None:
                outputs.append(x)
        if states is not None:
            states.append(x)
        return self.unembed(self.ln_final(x.mean(dim=2)))  # [batch pos vocab]

    def mixing_matrices(self, detach: bool = True) -> torch.Tensor:
        """Every sublayer's H_res, `[2 * n_layers, n, n]` (attention, MLP, attention, ...).

        One batched Sinkhorn call for all of them: 30 iterations once, not once per sublayer.
        """
        raw = torch.stack([m.res for b in self.blocks for m in (b.hc_attn, b.hc_mlp)])  # [2L n n]
        out = sinkhorn(raw) if self.cfg.mixing == "sinkhorn" else raw
        return out.detach() if detach else out


def init_weights(module: nn.Module, gain: float, generator: torch.Generator) -> None:
    """Linear weights ~ N(0, (gain / sqrt(fan_in))^2), zero biases; embeddings ~ N(0, 1 / d_model)."""
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, nn.Linear):
                std = gain / math.sqrt(m.in_features)
                m.weight.copy_(torch.randn(m.weight.shape, generator=generator, dtype=torch.float64) * std)
                if m.bias is not None:
                    m.bias.zero_()
            elif isinstance(m, nn.Embedding):
                std = 1.0 / math.sqrt(m.embedding_dim)
                m.weight.copy_(torch.randn(m.weight.shape, generator=generator, dtype=torch.float64) * std)
