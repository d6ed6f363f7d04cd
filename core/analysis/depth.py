"""Depth: what flows along the residual stream forward and backward, and why depth trains.

Four parts, in the order of the Depth page:
1. forward: residual norms per layer and position, each sublayer's contribution, the logit lens;
2. backward: gradients at every `hook_resid_*` (via `run_with_cache(grad_of=...)`) and input
   saliency (gradient x embedding);
3. the depth experiment: random-init stacks of up to 48 layers (pre-LN, post-LN, no norm, no
   residual, hyper-connections), gradient norm per layer, beside the bounds (1-rho)^L and rho^L;
   and the bundled pre-LN / post-LN twins compared;
4. long-range paths: layers needed to connect the last token to the first, from the hop model
   L ~ ln(n) / ln(H + 1), from simulated heads, and from a real model's attention graphs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from core.analysis import tensor_from
from core.config import TransformerConfig
from core.hooks import RunState, running
from core.hyper import HyperConfig, HyperTransformer, init_weights
from core.device import one_thread
from core.model import Transformer
from core.tasks import IGNORE, Task
from core.train import draws_from, init_model

# ---------------------------------------------------------------------------------------------
# 1. The residual stream, forward


def resid_names(model: Transformer, prefix: str = "") -> list[str]:
    """The residual stream's hook names, bottom to top, each state once.

    `blocks.0.hook_resid_pre` (embeddings + positions), then after every sublayer of every block
    (`hook_resid_mid`, decoder blocks' `hook_resid_mid_cross`, `hook_resid_post`). The
    `hook_resid_pre` of block i > 0 is the same tensor as the `hook_resid_post` of block i - 1.
    """
    return [f"{prefix}blocks.0.hook_resid_pre"] + _per_sublayer(
        model, prefix, "hook_resid_mid", "hook_resid_mid_cross", "hook_resid_post")


def _per_sublayer(model: Transformer, prefix: str, attn: str, cross: str, mlp: str) -> list[str]:
    """One hook name per sublayer, block by block: `attn`, `cross` (decoder blocks that have it), `mlp`."""
    names = []
    for i, block in enumerate(model.stack_for(prefix).blocks):
        names.append(f"{prefix}blocks.{i}.{attn}")
        if hasattr(block, cross):
            names.append(f"{prefix}blocks.{i}.{cross}")
        names.append(f"{prefix}blocks.{i}.{mlp}")
    return names


def stage_label(name: str) -> str:
    """A short row label for a residual hook: 'embed', 'L0 +attn', 'L0 +cross', 'L0 +mlp'."""
    short = name.split("blocks.", 1)[-1]
    layer, _, hook = short.partition(".")
    if hook == "hook_resid_pre":
        return "embed" if layer == "0" else f"L{layer} in"
    what = {"hook_resid_mid": "+attn", "hook_resid_mid_cross": "+cross", "hook_resid_post": "+mlp"}[hook]
    return f"L{layer} {what}"


def sublayer_names(model: Transformer, prefix: str = "") -> list[str]:
    """What each sublayer writes into the stream, in order (attn, cross, mlp per block)."""
    return _per_sublayer(model, prefix, "hook_attn_out", "hook_cross_attn_out", "hook_mlp_out")


def sublayer_label(name: str) -> str:
    """'L0 attn', 'L0 cross', 'L0 mlp' for a sublayer-output hook."""
    short = name.split("blocks.", 1)[-1]
    layer, _, hook = short.partition(".")
    return f"L{layer} " + {"hook_attn_out": "attn", "hook_cross_attn_out": "cross", "hook_mlp_out": "mlp"}[hook]


@dataclass
class ForwardStream:
    """One input's residual stream: every state, every sublayer output, and the logits."""

    names: list[str]  # residual hook names, bottom to top
    labels: list[str]  # their short labels
    resid: np.ndarray  # [stage pos d_model]
    parts: list[str]  # component labels: embed, pos, then each sublayer
    part_vectors: np.ndarray  # [component pos d_model]
    logits: Optional[np.ndarray]  # [pos vocab] (encoder-decoder: the decoder's positions); None when not kept
    is_sum: bool  # True when the final state is exactly the sum of the components (no post-LN)

    @property
    def norms(self) -> np.ndarray:
        """||x|| per stage and position, `[stage pos]`."""
        return np.linalg.norm(self.resid, axis=-1)


def forward_stream(model: Transformer, ids: torch.Tensor, prefix: str = "", keep_logits: bool = True,
                   dtype: torch.dtype = torch.float64, **kwargs) -> ForwardStream:
    """Run once and collect the residual stream of one stack for one input (batch of 1).

    kwargs complete the call (tgt= for encoder-decoder, mask=, pos=). keep_logits=False leaves the logits
    out (None): with a real vocabulary they are the biggest thing here (GPT-2: 50,257 per position). `dtype`:
    what the states are kept in (float32 halves a long input's stream; float64 keeps sums exact to 1e-12).
    """
    names = resid_names(model, prefix)
    subs = sublayer_names(model, prefix)
    embeds = [f"{prefix}hook_embed", f"{prefix}hook_pos_embed"]
    logits, cache = model.run_with_cache(ids, names=names + subs + embeds, **kwargs)
    resid = np.stack([cache.pop(n)[0].to(dtype).cpu().numpy() for n in names])  # [stage pos d_model]
    parts = np.stack([cache.pop(n)[0].to(dtype).cpu().numpy() for n in embeds + subs])  # [component pos d_model]
    is_sum = model.cfg.norm != "post" and model.cfg.residual
    return ForwardStream(names, [stage_label(n) for n in names], resid,
                         ["embed", "pos"] + [sublayer_label(n) for n in subs], parts,
                         logits[0].float().cpu().numpy() if keep_logits else None, is_sum)


def contributions(stream: ForwardStream, position: int) -> tuple[np.ndarray, np.ndarray]:
    """Each component's length and its signed projection on the final state's direction, at one position.

    When the stream is a plain sum (pre-LN or no norm, with residuals) the projections add up
    exactly to ||x_final||: that is what makes the residual stream a shared workspace.
    """
    final = stream.resid[-1, position]  # [d_model]
    unit = final / max(np.linalg.norm(final), 1e-12)
    vectors = stream.part_vectors[:, position]  # [component d_model]
    return np.linalg.norm(vectors, axis=-1), vectors @ unit


def write_ratio(stream: ForwardStream) -> np.ndarray:
    """||sublayer output|| / ||stream it was added to||, `[sublayer pos]`: how loudly each one writes."""
    sub = stream.part_vectors[2:]  # [sublayer pos d_model]
    before = stream.resid[:-1]  # the state each sublayer read, [sublayer pos d_model]
    return np.linalg.norm(sub, axis=-1) / np.maximum(np.linalg.norm(before, axis=-1), 1e-12)


@torch.no_grad()
def logit_lens(model: Transformer, resid: np.ndarray | torch.Tensor, prefix: str = "") -> np.ndarray:
    """Decode every residual state as if it were the last: softmax(unembed(head(ln_final(x)))).

    resid `[stage pos d_model]` -> probabilities `[stage pos vocab]`. The final norm is the
    model's own (identity for post-LN, whose states are normalised already), and so is the head:
    BERT's masked-LM transform (dense, activation, norm) before the unembedding, which is tied to
    the token embedding where the model ties it (GPT-2). For a large vocabulary use `lens_summary`,
    which never holds more than one state's logits.
    """
    stack = model.stack_for(prefix)
    x = tensor_from(np.asarray(resid), dtype=model.unembed.weight.dtype, device=model.device)
    logits = model.unembed(model.head_input(stack.ln_final(x)))  # [stage pos vocab]
    return torch.softmax(logits.double(), dim=-1).cpu().numpy()


@torch.no_grad()
def lens_summary(model: Transformer, resid: np.ndarray | torch.Tensor, prefix: str = "",
                 targets: Optional[Sequence[int]] = None, top_k: int = 5) -> LensTable:
    """`lens_table(logit_lens(model, resid, prefix), targets)`, one state at a time: the logits of a
    50,257-token vocabulary are never held for more than one state `[pos vocab]`. Also keeps each cell's
    `top_k` predictions and their probabilities (for the hover)."""
    stack = model.stack_for(prefix)
    resid = np.asarray(resid)
    stages, n = resid.shape[:2]
    top = np.zeros((stages, n, top_k), dtype=np.int64)
    p_top = np.zeros((stages, n, top_k))
    p_right = np.full((stages, n), np.nan)
    scored = [(p, int(t)) for p, t in enumerate(list(targets or [])[:n]) if t != IGNORE]
    for s in range(stages):
        x = tensor_from(resid[s], dtype=model.unembed.weight.dtype, device=model.device)  # [pos d_model]
        logp = torch.log_softmax(model.unembed(model.head_input(stack.ln_final(x))).double(), dim=-1)  # [pos vocab]
        values, ids = logp.topk(min(top_k, logp.shape[-1]), dim=-1)  # [pos k]
        top[s, :, : ids.shape[-1]], p_top[s, :, : ids.shape[-1]] = ids.cpu().numpy(), values.exp().cpu().numpy()
        for p, t in scored:
            p_right[s, p] = float(logp[p, t].exp())
    return LensTable(top[..., 0], p_top[..., 0], p_right, top, p_top)


@dataclass
class LensTable:
    """The logit lens as a table: top token, its probability, and p(right answer) per cell."""

    top: np.ndarray  # [stage pos] token ids
    p_top: np.ndarray  # [stage pos]
    p_right: np.ndarray  # [stage pos], NaN where the position is not scored
    top_k: Optional[np.ndarray] = None  # [stage pos k] the k likeliest token ids (lens_summary), best first
    p_top_k: Optional[np.ndarray] = None  # [stage pos k] their probabilities


def lens_table(probs: np.ndarray, targets: Optional[Sequence[int]]) -> LensTable:
    """Summarise lens probabilities `[stage pos vocab]` against the right answers (IGNORE = unscored)."""
    top = probs.argmax(-1)  # [stage pos]
    p_top = np.take_along_axis(probs, top[..., None], -1)[..., 0]
    p_right = np.full(top.shape, np.nan)
    if targets is not None:
        for p, t in enumerate(targets[: probs.shape[1]]):
            if t != IGNORE:
                p_right[:, p] = probs[:, p, t]
    return LensTable(top, p_top, p_right)


# ---------------------------------------------------------------------------------------------
# 2. The residual stream, backward

OBJECTIVES = ("loss", "logit")


def scored_positions(targets: Optional[Sequence[int]], n: int) -> list[int]:
    """Positions (below n) that have a right answer."""
    return [] if targets is None else [p for p, t in enumerate(targets[:n]) if t != IGNORE]


def objective(kind: str, targets: Optional[Sequence[int]], position: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """A `grad_of` function of the logits `[1 pos vocab]`.

    "loss": mean cross-entropy over the scored positions. "logit": the logit of the right answer
    at `position` (of the model's own top token there when the position has no right answer).
    """
    if kind not in OBJECTIVES:
        raise ValueError(f"objective must be one of {list(OBJECTIVES)}, got {kind!r}")
    if kind == "loss":
        if not scored_positions(targets, 10**9):
            raise ValueError("this input has no scored positions, so there is no loss; use the logit instead")
        tgt = torch.tensor(list(targets), dtype=torch.long)

        def loss(logits: torch.Tensor) -> torch.Tensor:
            n = logits.shape[1]
            return F.cross_entropy(logits[0].double(), tgt[:n].to(logits.device), ignore_index=IGNORE)
        return loss

    def logit(logits: torch.Tensor) -> torch.Tensor:
        if not 0 <= position < logits.shape[1]:
            raise ValueError(f"position must be in 0..{logits.shape[1] - 1}, got {position}")
        t = targets[position] if targets is not None and position < len(targets) else IGNORE
        token = int(logits[0, position].argmax()) if t == IGNORE else int(t)
        return logits[0, position, token]
    return logit


@dataclass
class BackwardStream:
    """Gradients of one scalar at every residual state of one stack, and input saliency."""

    names: list[str]
    labels: list[str]
    grad_norms: np.ndarray  # [stage pos] ||d scalar / d x||
    saliency: np.ndarray  # [pos] gradient . token embedding
    value: float  # the scalar itself


def backward_stream(model: Transformer, ids: torch.Tensor, grad_of: Callable, prefix: str = "",
                    **kwargs) -> BackwardStream:
    """Gradients at every `hook_resid_*` state of the stack and gradient x embedding per token.

    Uses `run_with_cache(..., grad_of=...)`; no parameter's `.grad` is written.
    """
    names = resid_names(model, prefix)
    embed = f"{prefix}hook_embed"
    seen: dict[str, float] = {}

    def record(logits: torch.Tensor) -> torch.Tensor:
        out = grad_of(logits)
        seen["value"] = float(out.detach())
        return out

    _, cache = model.run_with_cache(ids, names=names + [embed], grad_of=record, **kwargs)
    grads = np.stack([cache[n + "_grad"][0].double().cpu().numpy() for n in names])  # [stage pos d_model]
    e = cache[embed][0].double()  # [pos d_model]
    saliency = (cache[embed + "_grad"][0].double() * e).sum(-1).cpu().numpy()  # [pos]
    return BackwardStream(names, [stage_label(n) for n in names], np.linalg.norm(grads, axis=-1),
                          saliency, seen["value"])


# ---------------------------------------------------------------------------------------------
# 3. The depth experiment: random-init stacks, gradient norm per layer

# variant -> (how it is built, one line for the page)
VARIANTS: dict[str, dict] = {
    "pre-LN": dict(norm="pre", residual=True, blurb="x + F(LN(x)): the identity path is untouched"),
    "post-LN": dict(norm="post", residual=True, blurb="LN(x + F(x)): every layer's LayerNorm sits on the path"),
    "no norm": dict(norm="none", residual=True, blurb="x + F(x): identity path, nothing keeps sizes in check"),
    "no residual": dict(norm="none", residual=False, blurb="F(x): a plain deep network, no identity path"),
    "hyper (Sinkhorn)": dict(hyper="sinkhorn", blurb="n streams mixed by doubly-stochastic matrices"),
    "hyper (free mixing)": dict(hyper="free", blurb="n streams mixed by unconstrained matrices I + noise"),
}
EXPERIMENT_D_MODEL = 32
EXPERIMENT_HEADS = 4
EXPERIMENT_VOCAB = 16
EXPERIMENT_TOKENS = 12
EXPERIMENT_BATCH = 4
MAX_EXPERIMENT_LAYERS = 48


@dataclass
class DepthProfile:
    """One random stack's gradient per layer (index 0 = the input side, n_layers = the output).

    The gradients are carried down the stack in log space (see `depth_profile`), so the logs are
    finite even where a norm is beyond float64's range; there the plain value is inf.
    """

    variant: str
    resid_grad: np.ndarray  # [n_layers + 1] ||d loss / d x_l|| for the state entering block l (last: output)
    weight_grad: np.ndarray  # [n_layers] ||d loss / d W|| over block l's weight matrices
    resid_norm: np.ndarray  # [n_layers + 1] ||x_l||
    log_resid_grad: Optional[np.ndarray] = None  # [n_layers + 1] ln ||d loss / d x_l||, finite past 1e308
    log_weight_grad: Optional[np.ndarray] = None  # [n_layers] ln ||d loss / d W_l||


def random_stack(variant: str, n_layers: int, gain: float = 1.0, seed: int = 0, n_streams: int = 4,
                 noise: float = 0.5) -> torch.nn.Module:
    """A randomly initialised float64 stack for the experiment (linear weights ~ N(0, gain^2 / fan_in))."""
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {list(VARIANTS)}, got {variant!r}")
    if isinstance(n_layers, bool) or not isinstance(n_layers, int) or not 1 <= n_layers <= MAX_EXPERIMENT_LAYERS:
        raise ValueError(f"n_layers must be an integer in 1..{MAX_EXPERIMENT_LAYERS}, got {n_layers!r}")
    spec = VARIANTS[variant]
    if "hyper" in spec:
        cfg = HyperConfig(n_streams=n_streams, mixing=spec["hyper"], noise=noise, vocab_size=EXPERIMENT_VOCAB,
                          d_model=EXPERIMENT_D_MODEL, n_heads=EXPERIMENT_HEADS, n_layers=n_layers,
                          max_len=EXPERIMENT_TOKENS, gain=gain)
        return HyperTransformer(cfg, seed=seed).double()
    cfg = TransformerConfig(arch="decoder", vocab_size=EXPERIMENT_VOCAB, d_model=EXPERIMENT_D_MODEL,
                            n_heads=EXPERIMENT_HEADS, n_layers=n_layers, max_len=EXPERIMENT_TOKENS,
                            norm=spec["norm"], residual=spec["residual"])
    with draws_from(torch.Generator()):  # a scratch generator: `init_weights` redraws all of these
        model = Transformer(cfg)
    # Every Linear and Embedding weight from a local generator (biases zeroed; LayerNorms start at
    # ones and zeros), never from torch's process-wide one, which other threads share.
    init_weights(model, gain, torch.Generator().manual_seed(int(seed)))
    return model.double()


def _experiment_batch(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Random tokens and random targets: at initialisation every task looks like this."""
    g = torch.Generator().manual_seed(10_000 + seed)
    shape = (EXPERIMENT_BATCH, EXPERIMENT_TOKENS)
    return torch.randint(0, EXPERIMENT_VOCAB, shape, generator=g), torch.randint(0, EXPERIMENT_VOCAB, shape, generator=g)


def _block_weights(model: torch.nn.Module) -> list[list[torch.Tensor]]:
    """The weight matrices of each block (the parameters an optimiser would update)."""
    blocks = model.blocks if isinstance(model, HyperTransformer) else model.stack.blocks
    return [[p for p in b.parameters() if p.dim() == 2] for b in blocks]


def _block_run(model: Transformer, tokens: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor], list[torch.Tensor]]:
    """Logits and, per block, its input and its output as live (graph-attached) tensors.

    The hooks `blocks.{l}.hook_resid_pre` and `hook_resid_post`, read as `run_with_cache(grad_of=...)`
    does, with one intervention: every block but the first reads a detached copy of its input (a
    new leaf, same values), so a gradient taken at a block's output stops at its input and the
    block-by-block backward of `depth_profile` touches one block per step. Without LayerNorm
    attention takes the explicit path (see `depth_profile`); with it, scores stay small and the
    fused kernel is kept.
    """
    n_layers = model.cfg.n_layers
    pre = [f"blocks.{i}.hook_resid_pre" for i in range(n_layers)]
    post = [f"blocks.{i}.hook_resid_post" for i in range(n_layers)]
    state = RunState(capture=frozenset(pre + post), fwd={name: [_cut] for name in pre[1:]}, keep_live=True)
    with running(state):
        logits = model(tokens, attn_impl="explicit" if model.cfg.norm == "none" else "auto")
    return logits, [state.live[n] for n in pre], [state.live[n] for n in post]


def _cut(x: torch.Tensor, hook) -> torch.Tensor:
    """The same values as a new leaf: the backward pass stops here."""
    return x.detach().requires_grad_(True)


def depth_profile(variant: str, n_layers: int, gain: float = 1.0, seed: int = 0, n_streams: int = 4,
                  noise: float = 0.5) -> DepthProfile:
    """Gradient of the cross-entropy on random targets at every block's input, for one random stack.

    Transformer variants are read at the hooks `blocks.{l}.hook_resid_pre` and `hook_resid_post`
    (the live tensors, as `run_with_cache(grad_of=...)` does); the hyper-connected stack hands its
    states over itself. The weights' gradients come from the same `torch.autograd.grad` calls on
    this private model; no `.grad` is written.

    Without LayerNorm the stream grows geometrically, so attention scores and gradients get huge:
    - the stacks without LayerNorm run attention on the explicit path (softmax, then its plain
      backward): the fused kernel's backward turns such scores into NaN on some CPUs (an AVX2
      AMD EPYC, from 48 layers at gain 1);
    - the gradient goes down one block at a time (`_log_space_backward`), rescaled by a power of
      two at every block and the exponent kept aside, so nothing overflows on the way. Powers of
      two scale exactly, so every value that fits in a float64 is the one a single backward pass
      gives, bit for bit; past ~1e308 the plain value is inf and its log (`log_resid_grad`) is
      still finite.
    """
    with one_thread():
        return _depth_profile(variant, n_layers, gain, seed, n_streams, noise)


def _depth_profile(variant, n_layers, gain, seed, n_streams, noise) -> DepthProfile:
    model = random_stack(variant, n_layers, gain, seed, n_streams, noise)
    tokens, targets = _experiment_batch(seed)
    weights = _block_weights(model)
    mixing: list[torch.Tensor] = []
    mixed = None
    with torch.enable_grad():
        if isinstance(model, HyperTransformer):
            inputs: list[torch.Tensor] = []
            outputs: list[torch.Tensor] = []
            logits = model(tokens, inputs, mixing, outputs, cut=True)
            inputs.pop()  # the final state: it is outputs[-1]
            mixed = [[b.hc_attn.res, b.hc_mlp.res] for b in model.blocks]
        else:
            logits, inputs, outputs = _block_run(model, tokens)
        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())  # [batch*pos vocab]
        log_resid, log_weight = _log_space_backward(loss, inputs, outputs, weights, mixing or None, mixed)
    resid_norm = np.array([float(x.detach().norm()) for x in inputs + outputs[-1:]])
    return DepthProfile(variant, _from_log2(*log_resid), _from_log2(*log_weight), resid_norm,
                        _natural_log(*log_resid), _natural_log(*log_weight))


def _log_space_backward(loss: torch.Tensor, inputs: list[torch.Tensor], outputs: list[torch.Tensor],
                        weights: list[list[torch.Tensor]], mixing: Optional[list[torch.Tensor]] = None,
                        mixed: Optional[list[list[torch.Tensor]]] = None
                        ) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """The gradient norms at every block's input and the output, and at every block's weights,
    as (mantissa, base-2 exponent) pairs: `[n_layers + 1]` and `[n_layers]`.

    Block l maps `inputs[l]` to `outputs[l]` (and `outputs[l]` is `inputs[l + 1]` in value). The
    gradient at its input is (d output / d input)^T g_out, and its weights get theirs from the same
    product, so one `autograd.grad` per block, from the top down, gives both. Before each, the
    incoming gradient is divided by a power of two 2^e (e from its norm) and e is added to a running
    exponent: the vector handed on stays near unit size, and the true norm is mantissa * 2^exponent.
    Scaling by 2^e is exact in binary floating point, so each block does the very arithmetic a
    single backward pass would, only shifted in exponent (the mantissas are bit-identical wherever
    that pass neither overflows nor underflows).

    Hyper-connected stacks: `mixing[l]` is the `[2 n n]` pair of matrices block l used and
    `mixed[l]` the two `res` weights (in `weights[l]`) they come from. All blocks' pairs come out
    of one batched Sinkhorn, so a `res` gradient asked for block by block would run the Sinkhorn's
    backward once per block; instead each step returns the gradient at `mixing[l]`, at its own
    scale, and one last pass through the Sinkhorn turns them all into `res` gradients (its
    operations act on each matrix alone, so each keeps its block's scale).
    """
    n_layers = len(inputs)
    mant = np.zeros(n_layers + 1)
    expo = np.zeros(n_layers + 1, dtype=np.int64)
    w_expo = np.zeros(n_layers, dtype=np.int64)
    squares: list[list[float]] = [[0.0] * len(ws) for ws in weights]  # per weight matrix, at its block's scale
    mix_grads: list[Optional[torch.Tensor]] = [None] * n_layers
    (grad,) = torch.autograd.grad(loss, outputs[-1], retain_graph=True)
    shift = 0  # the true gradient at the current state is grad * 2**shift
    mant[-1] = float(grad.norm())
    stopped = None  # the block below which the descent stopped on a zero or NaN gradient
    for layer in range(n_layers - 1, -1, -1):
        norm = float(grad.norm())
        if not math.isfinite(norm) or norm == 0.0:  # NaN stays NaN; a zero gradient stays zero below
            stopped = (layer, norm)
            break
        e = math.frexp(norm)[1]  # 2^(e-1) <= norm < 2^e
        grad = grad * math.ldexp(1.0, -e)  # exact: a power of two
        shift += e
        skip = mixed[layer] if mixed is not None else []
        direct = [i for i, w in enumerate(weights[layer]) if not any(w is m for m in skip)]
        wanted = [inputs[layer]] + [weights[layer][i] for i in direct] + ([mixing[layer]] if mixing else [])
        out = torch.autograd.grad(outputs[layer], wanted, grad_outputs=grad, retain_graph=True, allow_unused=True)
        grad = out[0]
        mant[layer], expo[layer], w_expo[layer] = float(grad.norm()), shift, shift
        for i, g in zip(direct, out[1: 1 + len(direct)]):
            squares[layer][i] = 0.0 if g is None else float(g.pow(2).sum())
        if mixing:
            mix_grads[layer] = out[-1]
    done = [layer for layer in range(n_layers) if mix_grads[layer] is not None]
    if done:
        params = [m for layer in done for m in mixed[layer]]
        found = iter(torch.autograd.grad([mixing[layer] for layer in done], params,
                                         grad_outputs=[mix_grads[layer] for layer in done], allow_unused=True))
        for layer in done:
            for m in mixed[layer]:
                g = next(found)
                i = next(i for i, w in enumerate(weights[layer]) if w is m)
                squares[layer][i] = 0.0 if g is None else float(g.pow(2).sum())
    w_mant = np.array([math.sqrt(sum(sq)) for sq in squares])
    if stopped is not None:
        layer, norm = stopped
        mant[: layer + 1] = norm
        w_mant[: layer + 1] = norm
        expo[: layer + 1] = w_expo[: layer + 1] = 0
    return (mant, expo), (w_mant, w_expo)


def _from_log2(mant: np.ndarray, expo: np.ndarray) -> np.ndarray:
    """mant * 2^expo as float64 (exact; inf where it is beyond float64's range)."""
    with np.errstate(over="ignore"):
        return np.ldexp(mant, expo)


def _natural_log(mant: np.ndarray, expo: np.ndarray) -> np.ndarray:
    """ln(mant * 2^expo), finite for any finite positive mantissa (-inf for 0, NaN for NaN)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log(mant) + expo * math.log(2.0)


def relative(values: np.ndarray) -> np.ndarray:
    """Values divided by the last one (the output side), so every curve starts at 1 at the top."""
    values = np.asarray(values, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # past float64's range: inf
        return values / values[-1]


def bounds(rho: float, n_layers: int) -> tuple[np.ndarray, np.ndarray]:
    """The seed's bounds at layers 0..n_layers, relative to the top: ((1-rho)^(L-l), rho^(L-l)).

    If every branch Jacobian has norm at most rho < 1, a residual stack keeps at least
    (1 - rho)^k of the gradient k layers down (the identity path), while a plain stack keeps at
    most rho^k of it.
    """
    if not 0 < rho < 1:
        raise ValueError(f"rho must be strictly between 0 and 1, got {rho!r}")
    k = n_layers - np.arange(n_layers + 1, dtype=np.float64)  # layers below the top
    return (1 - rho) ** k, rho ** k


def per_layer_factor(values: np.ndarray, skip_input: bool = True) -> Optional[float]:
    """The factor r by which a curve is multiplied per layer going down (r < 1: it shrinks).

    A least-squares line through log ||g_l|| against l, over the finite positive values; None if
    fewer than 3 are left. The input layer is skipped by default: embeddings are scaled
    differently from the stream above them.
    """
    values = np.asarray(values, dtype=np.float64)
    layers = np.arange(len(values), dtype=np.float64)
    if skip_input:
        values, layers = values[1:], layers[1:]
    ok = np.isfinite(values) & (values > 0)
    if ok.sum() < 3:
        return None
    slope = np.polyfit(layers[ok], np.log(values[ok]), 1)[0]  # d log g / d layer, going up
    return float(np.exp(-slope))


def log_steps(values: np.ndarray, skip_input: bool = True) -> np.ndarray:
    """log(g_l / g_{l+1}) for each layer: how much one layer changes the gradient (0 = not at all)."""
    values = np.asarray(values, dtype=np.float64)
    if skip_input:
        values = values[1:]
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log(values[:-1] / values[1:])


# ---------------------------------------------------------------------------------------------
# 3b. The bundled twins: the same task, sizes and seed, LayerNorm before or after the add


@dataclass
class TaskGradients:
    """A trained (or fresh) model's loss gradient at every residual state, over a task batch."""

    labels: list[str]
    resid_grad: np.ndarray  # [stage] ||d loss / d x|| over the whole batch
    resid_norm: np.ndarray  # [stage] mean ||x|| over the batch's tokens
    weight_grad: np.ndarray  # [layer]
    loss: float


def task_gradients(model: Transformer, task: Task, n_samples: int = 64, seed: int = 0,
                   length: Optional[int] = None) -> TaskGradients:
    """The mean task loss on a fresh batch and its gradient at every residual state and block.

    States: `run_with_cache(grad_of=...)`. Weights: a second forward and `torch.autograd.grad`
    (no `.grad` is written, so a shared model is safe). Encoder-decoder: the decoder's stack.
    """
    arch = model.cfg.arch
    batch = task.batch(n_samples, arch, seed=seed, length=length)
    prefix = "decoder." if model.is_encoder_decoder else ""
    names = resid_names(model, prefix)
    tokens = batch.tokens.to(model.device)
    kwargs = {"tgt": batch.tgt.to(model.device)} if batch.tgt is not None else {}
    targets = batch.targets.to(model.device)

    def loss_of(logits: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits.flatten(0, 1).double(), targets.flatten(), ignore_index=IGNORE)

    logits, cache = model.run_with_cache(tokens, names=names, grad_of=loss_of, **kwargs)
    resid_grad = np.array([float(cache[n + "_grad"].double().norm()) for n in names])
    resid_norm = np.array([float(cache[n].double().norm(dim=-1).mean()) for n in names])
    blocks = model.stack_for(prefix).blocks
    weights = [[p for p in b.parameters() if p.dim() == 2] for b in blocks]
    flat = [w for ws in weights for w in ws]
    with torch.enable_grad():
        grads = torch.autograd.grad(loss_of(model(tokens, **kwargs)), flat, allow_unused=True)
    squares = iter([0.0 if g is None else float(g.double().pow(2).sum()) for g in grads])
    weight_grad = np.sqrt([sum(next(squares) for _ in ws) for ws in weights])
    return TaskGradients([stage_label(n) for n in names], resid_grad, resid_norm, weight_grad,
                         float(loss_of(logits)))


def fresh_twin(model: Transformer, seed: int = 0) -> Transformer:
    """An untrained model with the same config (the project's own init), to compare before/after training."""
    fresh = init_model(TransformerConfig.from_dict(model.cfg.to_dict()), seed)
    return fresh.to(model.device).eval()


# ---------------------------------------------------------------------------------------------
# 4. Long-range paths: how many layers until the last token hears the first

MAX_PATH_N = 4096
MAX_PATH_HEADS = 64


def _check_nh(n: int, heads: int) -> None:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 1 <= n <= MAX_PATH_N:
        raise ValueError(f"n must be an integer in 1..{MAX_PATH_N}, got {n!r}")
    if isinstance(heads, bool) or not isinstance(heads, (int, np.integer)) or not 1 <= heads <= MAX_PATH_HEADS:
        raise ValueError(f"heads must be an integer in 1..{MAX_PATH_HEADS}, got {heads!r}")


def hop_formula(n: int, heads: int) -> float:
    """The hop model's estimate L = ln(n) / ln(H + 1): each layer multiplies the reachable
    positions by H + 1 (H heads plus the residual path), and n positions must be covered."""
    _check_nh(n, heads)
    return math.log(n) / math.log(heads + 1)


def ideal_layers(n: int, heads: int) -> int:
    """The smallest L with (H + 1)^L >= n: what perfectly spread heads achieve (exact, integer)."""
    _check_nh(n, heads)
    layers, reach = 0, 1
    while reach < n:
        layers, reach = layers + 1, reach * (heads + 1)
    return layers


def strided_masks(n: int, heads: int, layers: int) -> list[torch.Tensor]:
    """Causal masks of perfectly spread heads: in layer l, head j looks back exactly j (H+1)^l.

    With the residual path this lets the last token reach every earlier one in `ideal_layers`
    layers (offsets written in base H + 1, one digit per layer).
    """
    _check_nh(n, heads)
    q = torch.arange(n)[:, None]
    k = torch.arange(n)[None, :]
    out = []
    for layer in range(layers):
        step = (heads + 1) ** layer
        allowed = torch.zeros(n, n, dtype=torch.bool)
        for j in range(1, heads + 1):
            allowed |= (q - k) == j * step  # [q, k]
        out.append(allowed)
    return out


def strided_head_layers(n: int, heads: int, max_layers: int = 64) -> Optional[int]:
    """Layers until the last token reaches the first along the edges of `strided_masks`.

    Measured by following the edges (the last token's field grows by every offset j (H+1)^l in
    layer l), without building n x n masks, so n = 4096 stays cheap.
    """
    _check_nh(n, heads)
    field = np.zeros(n, dtype=bool)
    field[n - 1] = True
    for layer in range(1, max_layers + 1):
        if field[0]:
            return layer - 1
        step = (heads + 1) ** (layer - 1)
        idx = np.nonzero(field)[0]
        for j in range(1, heads + 1):
            back = idx - j * step
            field[back[back >= 0]] = True
    return max_layers if field[0] else None


def layers_to_connect(layer_masks: Sequence[torch.Tensor], max_layers: Optional[int] = None,
                      source: int = 0, target: Optional[int] = None) -> tuple[Optional[int], np.ndarray]:
    """Stack the given per-layer graphs (repeating them in order) until `source` reaches `target`.

    Attention edges plus the residual path, as `core.masks.receptive_field` counts them. Returns (layers
    needed or None if never within max_layers, the target's receptive field after each stacked layer
    `[layers n]`). Default target is the last token; default max_layers is n.

    The stack repeats with period P = len(layer_masks), so after l = qP + r layers the reach is
    (S_r ... S_1) C^q with C = S_P ... S_1: the target's field is its row of S_r ... S_1 times C, q times. That
    is P matrix products and then one vector-matrix product per layer (a 1,024-token chain needs 1,023
    layers: 0.1 s, where a matrix product per layer took a minute). It stops at the first layer that connects,
    or once a whole period adds nothing (reach only grows, so nothing ever will).
    """
    if not layer_masks:
        raise ValueError("give at least one layer's graph")
    n = int(layer_masks[0].shape[-1])
    target = n - 1 if target is None else target
    max_layers = n if max_layers is None else max_layers
    if n == 1 or source == target:
        return 0, np.zeros((0, n), dtype=bool)
    eye = torch.eye(n)
    steps = [(torch.as_tensor(m).to(torch.bool) | eye.bool()).to(torch.float32) for m in layer_masks]  # [q k] each
    period = len(steps)
    prefix_rows = [_reach_row(eye[target], steps[:r]) for r in range(period)]  # the target's row of S_r ... S_1
    cycle = steps[0]
    for step in steps[1:]:
        cycle = ((step @ cycle) > 0).to(torch.float32)  # C = S_P ... S_1, [q k]
    fields = []
    rows = list(prefix_rows)  # rows[r]: the field after q whole periods and r more layers
    for layer in range(1, max_layers + 1):
        r = layer % period
        if r == 0:
            rows = [((v @ cycle) > 0).to(torch.float32) for v in rows]  # one more whole period, [k] each
        field = rows[r] > 0  # [k]
        fields.append(field.numpy())
        if field[source]:
            return layer, np.stack(fields)
        if layer > period and np.array_equal(fields[-1], fields[-1 - period]):
            break  # a whole period added nothing: a fixed point short of the source
    fields_arr = np.stack(fields)  # [layers n]
    # Not reached: show only the layers where the field still grew.
    grew = np.nonzero(np.r_[True, (fields_arr[1:] != fields_arr[:-1]).any(axis=1)])[0]
    return None, fields_arr[: grew[-1] + 1]


def _reach_row(row: torch.Tensor, steps: Sequence[torch.Tensor]) -> torch.Tensor:
    """`row` [k] (a query's reach) times S_r ... S_1 for steps = [S_1 .. S_r]: the last-applied layer first."""
    for step in reversed(steps):
        row = ((row @ step) > 0).to(torch.float32)  # [k]
    return row


def random_head_layers(n: int, heads: int, seed: int = 0, max_layers: int = 256) -> Optional[int]:
    """Layers until the last token reaches the first when every head is sharp and random.

    In each fresh layer, each head at each position looks at one key drawn uniformly from the
    keys it may see (itself and earlier ones); with the residual path the last token's field
    grows from {n-1}. Returns the layer count, or None if it did not happen within max_layers.
    """
    _check_nh(n, heads)
    if n == 1:
        return 0
    rng = np.random.default_rng(seed)
    field = np.zeros(n, dtype=bool)
    field[n - 1] = True
    q = np.arange(n)
    for layer in range(1, max_layers + 1):
        picks = np.floor(rng.random((n, heads)) * (q[:, None] + 1)).astype(np.int64)  # [pos head] key index
        field = field.copy()
        field[picks[field].ravel()] = True
        if field[0]:
            return layer
    return None


def random_head_mean(n: int, heads: int, seeds: int = 16) -> float:
    """Mean of `random_head_layers` over several seeds (runs that never connect are left out)."""
    runs = [random_head_layers(n, heads, seed=s) for s in range(seeds)]
    runs = [r for r in runs if r is not None]
    return float(np.mean(runs)) if runs else float("nan")


# Dense soft links against sharp ones: what counts as a link decides O(1) or ln n.


def _check_tau(tau: float) -> None:
    if isinstance(tau, bool) or not isinstance(tau, (int, float, np.floating)) or not 0 < tau <= 1:
        raise ValueError(f"tau must be a number in (0, 1], got {tau!r}")


def dense_link_weight(n: int) -> float:
    """The weight a dense, uniform causal head at the last position gives each of its n keys: 1/n.

    Every pair is linked in one layer (the weight is > 0), but each link carries only 1/n.
    """
    _check_nh(n, 1)
    return 1.0 / n


def keys_per_head(tau: float, n: int) -> int:
    """The most keys one head can give a weight of at least tau: floor(1/tau) (its weights sum to 1),
    and never more than the n keys there are."""
    _check_tau(tau)
    _check_nh(n, 1)
    return max(1, min(n, math.floor(1.0 / tau + 1e-9)))  # 1e-9: 1/0.1 must give 10, not 9


def linked_layers(n: int, heads: int, tau: float) -> int:
    """The fewest layers in which the last token can reach every position when only weights >= tau count as links.

    Each head links at most k = keys_per_head(tau, n) keys, so a layer fans out to at most H k + 1
    positions (with the residual path) and L layers to (H k + 1)^L: L = ceil(ln n / ln(H k + 1)),
    counted exactly in integers. tau near 1 (k = 1, sharp heads) gives ideal_layers(n, H); tau <= 1/n
    (every dense link counts) gives one layer. `spread_soft_patterns` reaches the count.
    """
    _check_nh(n, heads)
    fan_out = heads * keys_per_head(tau, n) + 1
    layers, reach = 0, 1
    while reach < n:
        layers, reach = layers + 1, reach * fan_out
    return layers


def linked_layers_curve(n: int, heads: int, taus: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """keys_per_head and linked_layers at every tau of `taus`: (keys `[tau]`, layers `[tau]`)."""
    return (np.array([keys_per_head(t, n) for t in taus], dtype=np.int64),
            np.array([linked_layers(n, heads, t) for t in taus], dtype=np.int64))


def spread_soft_patterns(n: int, heads: int, keys: int, layers: int) -> np.ndarray:
    """Causal attention patterns `[layer head q k]` of heads that each split their weight evenly over `keys` keys.

    In layer l, head j (1..H) looks back d (Hk+1)^l for the k digits d = (j-1)k+1 .. jk, so together
    the heads write offsets in base H k + 1, one digit per layer (`strided_masks` is k = 1). Near the
    start, where fewer of those keys exist, a head splits its weight over the ones that do (or keeps
    it on its own position when none does). Every row sums to 1 and every nonzero weight is >= 1/k.
    """
    _check_nh(n, heads)
    if not 1 <= keys <= n:
        raise ValueError(f"keys must be in 1..{n}, got {keys!r}")
    base = heads * keys + 1
    q = np.arange(n)[:, None]
    k = np.arange(n)[None, :]
    out = np.zeros((layers, heads, n, n))
    for layer in range(layers):
        step = base ** layer
        for j in range(heads):
            digits = np.arange(j * keys + 1, (j + 1) * keys + 1)
            hit = np.zeros((n, n), dtype=bool)
            for d in digits:
                hit |= (q - k) == d * step  # [q k]
            hit[~hit.any(axis=1), :] = np.eye(n, dtype=bool)[~hit.any(axis=1)]  # no key left: itself
            out[layer, j] = hit / hit.sum(axis=1, keepdims=True)
    return out


def rnn_path(n: int) -> int:
    """An RNN's path from the first token to the last: one step per token, n - 1."""
    return max(n - 1, 0)


def attention_graphs(model: Transformer, ids: torch.Tensor, threshold: float, prefix: str = "",
                     **kwargs) -> np.ndarray:
    """Each layer's attention as a graph: edge q <- k where some head puts weight >= threshold.

    Returns bool `[layer q k]` (union over heads). kwargs complete the call (tgt=, mask=). Each layer's weights
    are read as the forward pass makes them and only their edges kept (a cache of every layer's weights at 1,024
    tokens is 16 MB per head and layer).
    """
    if not 0 < threshold <= 1:
        raise ValueError(f"threshold must be in (0, 1], got {threshold!r}")
    n_layers = len(model.stack_for(prefix).blocks)
    graphs: dict[str, np.ndarray] = {}

    def keep_edges(pattern: torch.Tensor, hook) -> None:
        graphs[hook.name] = (pattern[0] >= threshold).any(dim=0).cpu().numpy()  # [q k]; the weights are not kept

    names = [f"{prefix}blocks.{i}.attn.hook_pattern" for i in range(n_layers)]
    model.run_with_hooks(ids, fwd=[(name, keep_edges) for name in names], **kwargs)
    return np.stack([graphs[n] for n in names])  # [layer q k]
