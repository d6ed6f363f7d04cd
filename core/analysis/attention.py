"""Attention taken apart: which attention a model has, one query's arithmetic, entropy, export.

Everything here works on numpy arrays read from a hooked run (see `ui.shell.runs.run`) or on plain
numbers, so the Attention page and its tests share one implementation of every step:
q . k, the scale, the mask, softmax, and the weighted sum of values.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np
import pandas as pd
import torch

# The seeds' scalar example: one query, three keys, three values, everything one number (d_k = 1).
TOY_QUERY = 2.0
TOY_KEYS = (0.1, 0.2, 0.5)
TOY_VALUES = (1.0, -1.0, 3.0)
TOY_MAX_ITEMS = 12  # the toy table stays readable on a projector


# ---------------------------------------------------------------------------------------------
# Which attention: the three kinds a Transformer can have


@dataclass(frozen=True)
class AttentionKind:
    """One family of attention layers in a model: where its queries and keys come from."""

    key: str  # short id used in the URL: self, enc, dec, cross
    label: str  # what the page calls it
    prefix: str  # hook prefix: "", "encoder." or "decoder."
    module: str  # "attn" or "cross_attn"
    queries: str  # "input", "source" or "target": which tokens label the query axis
    keys: str  # which tokens label the key axis
    causal: bool  # True when each query may only see keys at or before its own position
    blurb: str  # one sentence for the page

    def hook(self, layer: int, what: str) -> str:
        """The full hook name, e.g. `decoder.blocks.1.cross_attn.hook_pattern`."""
        return f"{self.prefix}blocks.{layer}.{self.module}.{what}"

    @property
    def query_title(self) -> str:
        """Axis title for queries, naming the side they come from."""
        return {"input": "query token", "source": "query (source token)",
                "target": "query (target token)"}[self.queries]

    @property
    def key_title(self) -> str:
        """Axis title for keys, naming the side they come from."""
        return {"input": "key token", "source": "key (source token)",
                "target": "key (target token)"}[self.keys]


ENCODER_SELF = AttentionKind(
    "self", "Encoder self-attention", "", "attn", "input", "input", False,
    "Every token may look at every token, before and after it (bidirectional).")
DECODER_SELF = AttentionKind(
    "self", "Masked self-attention (decoder)", "", "attn", "input", "input", True,
    "Each token may only look at itself and earlier tokens: the causal mask hides the future.")
ENCDEC_ENCODER = AttentionKind(
    "enc", "Encoder self-attention", "encoder.", "attn", "source", "source", False,
    "The encoder reads the source: every source token may look at every source token.")
ENCDEC_DECODER = AttentionKind(
    "dec", "Decoder masked self-attention", "decoder.", "attn", "target", "target", True,
    "The decoder reads what it has written so far: each target token sees itself and earlier ones.")
ENCDEC_CROSS = AttentionKind(
    "cross", "Cross-attention (decoder to encoder)", "decoder.", "cross_attn", "target", "source", False,
    "Queries come from the target (decoder), keys and values from the source (encoder output).")


def attention_kinds(arch: str) -> list[AttentionKind]:
    """The kinds of attention a model of this architecture has, in reading order."""
    if arch == "encoder":
        return [ENCODER_SELF]
    if arch == "decoder":
        return [DECODER_SELF]
    if arch == "encoder-decoder":
        return [ENCDEC_ENCODER, ENCDEC_DECODER, ENCDEC_CROSS]
    raise ValueError(f"arch must be 'encoder', 'decoder' or 'encoder-decoder', got {arch!r}")


def axis_tokens(kind: AttentionKind, tokens: Sequence[str],
                tgt_tokens: Optional[Sequence[str]]) -> tuple[list[str], list[str]]:
    """(query labels, key labels) for a kind: source tokens, target tokens, or the one input."""
    def side(which: str) -> list[str]:
        if which == "target":
            if tgt_tokens is None:
                raise ValueError("this attention reads the target side, but no target tokens were given")
            return list(tgt_tokens)
        return list(tokens)
    return side(kind.queries), side(kind.keys)


def pattern_names(kind: AttentionKind, n_layers: int) -> list[str]:
    """The hook names holding this kind's patterns, one per layer."""
    return [kind.hook(layer, "hook_pattern") for layer in range(n_layers)]


def stack_patterns(cache: dict, kind: AttentionKind, n_layers: int) -> np.ndarray:
    """Every layer's pattern of one kind as one array `[layer head q k]` (batch item 0)."""
    return np.stack([np.asarray(cache[name])[0] for name in pattern_names(kind, n_layers)])  # [layer head q k]


# ---------------------------------------------------------------------------------------------
# Long inputs: what the page keeps of a run


@dataclass(frozen=True)
class PatternSummary:
    """One kind of attention on one input, reduced while the model runs to what the Attention page draws:
    every head pooled into an overview, every row's entropy, some layers at full resolution, and the model's
    predictions. A 1,024-token run of every pattern is a gigabyte on a GPT-2-sized model; this stays megabytes."""

    n_q: int
    n_k: int
    block: tuple[int, int]  # tokens (rows, columns) per overview cell; (1, 1): the overview is exact
    overview: np.ndarray  # [layer head q/bq k/bk] the largest weight of each block (float16 once pooled)
    entropy: np.ndarray  # [layer head q] bits per row (row_entropy)
    layers: tuple[int, ...]  # the layers kept at full resolution, in `patterns`' order
    patterns: np.ndarray  # [kept head q k]: float32, or float16 (3 significant digits) for a long input
    top_ids: np.ndarray  # [pos] the model's most likely token at each output position
    top_probs: np.ndarray  # [pos] its probability
    target_probs: np.ndarray  # [pos] the probability of the right answer (nan where nothing is scored)

    def layer(self, layer: int) -> np.ndarray:
        """One kept layer's patterns `[head q k]` as float32 (KeyError for a layer not kept)."""
        return np.asarray(self.head(layer, slice(None)), dtype=np.float32)  # [head q k]

    def head(self, layer: int, head) -> np.ndarray:
        """One kept head's pattern `[q k]` as stored (float16 for a long input: convert the slice you draw, not
        the million cells; KeyError for a layer not kept)."""
        if layer not in self.layers:
            raise KeyError(f"layer {layer} is not kept at full resolution (kept: {self.layers})")
        return self.patterns[self.layers.index(layer)][head]  # [q k]


def prediction_rows(top_ids: np.ndarray, top_probs: np.ndarray, target_probs: np.ndarray,
                    targets: Optional[Sequence[int]], ignore: int = -100) -> list[dict]:
    """`predictions`' rows from a run's top tokens and right-answer probabilities (what a PatternSummary keeps
    instead of the logits, which are pos x vocab: 200 MB for GPT-2 at 1,024 tokens)."""
    if targets is None:
        return []
    rows = []
    for p, target in enumerate(targets):
        if target == ignore or p >= len(top_ids):
            continue
        top = int(top_ids[p])
        rows.append({"position": p, "predicted": top, "p(predicted)": float(top_probs[p]),
                     "right": int(target), "p(right)": float(target_probs[p]), "correct": top == int(target)})
    return rows


PREDICTION_ROWS = 128  # positions at once: GPT-2's 50,257 logits x 128 in float32 are 26 MB


def top_predictions(logits: torch.Tensor, targets: Optional[Sequence[int]],
                    ignore: int = -100) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(top id, its probability, the right answer's probability or nan) at each position of logits
    `[1 pos vocab]`, PREDICTION_ROWS positions at a time. The top id is the largest logit; a probability is
    exp(logit - largest) over the softmax's denominator sum(exp(logits - largest)), whose terms are taken in
    float32 and summed in float64: the numbers of `predictions`' float64 softmax to about 1e-7, at a third of
    its time (the work of every temperature change on a 1,024-token input)."""
    scores = logits[0]  # [pos vocab]
    n = scores.shape[0]
    top_ids, top_probs = np.zeros(n, dtype=np.int64), np.zeros(n)
    right = np.full(n, np.nan)
    terms = torch.empty(min(n, PREDICTION_ROWS), scores.shape[-1], device=scores.device)  # [rows vocab], reused
    for start in range(0, n, PREDICTION_ROWS):
        rows = scores[start:start + PREDICTION_ROWS].float()  # [rows vocab]
        best, ids = rows.max(dim=-1)  # [rows] each: the first of equal largest logits, as argmax takes it
        chunk = torch.sub(rows, best[:, None], out=terms[:len(rows)]).exp_()  # [rows vocab]: exp(logit - largest)
        total = chunk.sum(dim=-1, dtype=torch.float64)  # [rows]: the softmax's denominator
        top_ids[start:start + len(ids)], top_probs[start:start + len(ids)] = ids.numpy(), (1.0 / total).numpy()
        if targets is not None:
            for p in range(start, start + len(ids)):
                if p < len(targets) and targets[p] != ignore:
                    gap = float(rows[p - start, int(targets[p])]) - float(best[p - start])  # <= 0
                    right[p] = math.exp(gap) / float(total[p - start])
    return top_ids, top_probs, right


# ---------------------------------------------------------------------------------------------
# One query, step by step


@dataclass
class AttentionSteps:
    """Every intermediate number of attention for ONE query, in the order it is computed.

    q `[d]`, keys `[n d]`, values `[n dv]`; dots = keys @ q; scores = dots * scale; masked keys
    get -inf; weights = softmax(scores); output = weights @ values.
    """

    q: np.ndarray  # [d]
    keys: np.ndarray  # [n d]
    values: np.ndarray  # [n dv]
    allowed: np.ndarray  # [n] bool, True = this key may be attended to
    scale: float  # what q.k is multiplied by (1/sqrt(d_k) / temperature, or the cosine scale)
    scale_latex: str  # the scale as an expression, e.g. \frac{1}{\sqrt{16}}
    dots: np.ndarray  # [n] q . k
    scores: np.ndarray  # [n] dots * scale
    exps: np.ndarray  # [n] exp(score - max score), 0 where masked
    weights: np.ndarray  # [n] softmax of the allowed scores, 0 where masked
    output: np.ndarray  # [dv] the weighted sum of values
    key_labels: list[str]
    query_label: str = "q"

    @property
    def shift(self) -> float:
        """The largest allowed score, subtracted before exp so nothing overflows (softmax is unchanged)."""
        allowed = self.scores[self.allowed]
        return float(allowed.max()) if allowed.size else 0.0

    @property
    def total(self) -> float:
        """The softmax denominator: the sum of exp(score - shift) over allowed keys."""
        return float(self.exps.sum())

    def rows(self, dims: int = 4) -> list[dict]:
        """One dict per key (for a table): its score at each step and its share of the output."""
        out = []
        for i, label in enumerate(self.key_labels):
            v = self.values[i]
            row = {"key": label, "q·k": float(self.dots[i]), "score = q·k × scale": float(self.scores[i]),
                   "mask": "allowed" if self.allowed[i] else "masked (−∞)",
                   "exp(score − max)": float(self.exps[i]), "weight α": float(self.weights[i])}
            if v.size == 1:
                row["value v"] = float(v[0])
                row["α·v"] = float(self.weights[i] * v[0])
            else:
                shown = ", ".join(f"{x:+.2f}" for x in v[:dims]) + (" …" if v.size > dims else "")
                row[f"value v (first {min(dims, v.size)} of {v.size})"] = shown
                row["‖α·v‖"] = float(np.linalg.norm(self.weights[i] * v))
            out.append(row)
        return out


def softmax_masked(scores: np.ndarray, allowed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(exp(score - max) with masked entries 0, weights): a softmax over the allowed keys only.

    A query that may see nothing gets all-zero weights (as the model's hook_pattern does), not NaN.
    """
    scores = np.asarray(scores, dtype=np.float64)
    allowed = np.asarray(allowed, dtype=bool)
    if not allowed.any():
        zeros = np.zeros_like(scores)
        return zeros, zeros.copy()
    shift = scores[allowed].max()
    exps = np.where(allowed, np.exp(np.where(allowed, scores - shift, 0.0)), 0.0)
    return exps, exps / exps.sum()


def steps_from_vectors(q, keys, values, scale: float, allowed=None, key_labels: Sequence[str] | None = None,
                       query_label: str = "q", scale_latex: str | None = None) -> AttentionSteps:
    """The full arithmetic of one query against n keys and values, in float64."""
    q = np.atleast_1d(np.asarray(q, dtype=np.float64))  # [d]
    keys = np.asarray(keys, dtype=np.float64)
    keys = keys.reshape(-1, q.size) if keys.ndim < 2 else keys  # [n d]
    values = np.asarray(values, dtype=np.float64)
    values = values.reshape(-1, 1) if values.ndim < 2 else values  # [n dv]
    n = keys.shape[0]
    if keys.shape[1] != q.size:
        raise ValueError(f"the query has {q.size} numbers but each key has {keys.shape[1]}; they must match")
    if values.shape[0] != n:
        raise ValueError(f"there are {n} keys but {values.shape[0]} values; give one value per key")
    if not math.isfinite(scale) or scale <= 0:
        raise ValueError(f"the scale must be a positive number, got {scale!r}")
    allowed = np.ones(n, dtype=bool) if allowed is None else np.asarray(allowed, dtype=bool).reshape(n)
    dots = keys @ q  # [n]
    scores = dots * scale  # [n]
    exps, weights = softmax_masked(scores, allowed)
    output = weights @ values  # [dv]
    labels = list(key_labels) if key_labels is not None else [f"k{i + 1}" for i in range(n)]
    return AttentionSteps(q, keys, values, allowed, float(scale), scale_latex or f"{scale:.4g}",
                          dots, scores, exps, weights, output, labels, query_label)


def scalar_example(q: float = TOY_QUERY, keys: Sequence[float] = TOY_KEYS, values: Sequence[float] = TOY_VALUES,
                   d_k: int = 1, temperature: float = 1.0) -> AttentionSteps:
    """The seeds' one-number example: scores q*k_i / (sqrt(d_k) * T), softmax, sum of weights * values.

    With the defaults the scores are 0.2, 0.4 and 1.0 and the output is about 1.4516.
    """
    if len(keys) != len(values):
        raise ValueError(f"{len(keys)} keys but {len(values)} values: give one value per key")
    if not 1 <= len(keys) <= TOY_MAX_ITEMS:
        raise ValueError(f"give between 1 and {TOY_MAX_ITEMS} keys, got {len(keys)}")
    if not isinstance(d_k, (int, np.integer)) or d_k < 1:
        raise ValueError(f"d_k must be a positive whole number, got {d_k!r}")
    if not math.isfinite(temperature) or temperature <= 0:
        raise ValueError(f"the temperature must be a positive number, got {temperature!r}")
    scale = 1.0 / (math.sqrt(d_k) * temperature)
    latex = rf"\frac{{1}}{{\sqrt{{{d_k}}}}}" if temperature == 1 else rf"\frac{{1}}{{\sqrt{{{d_k}}}\cdot {temperature:g}}}"
    return steps_from_vectors([q], np.asarray(keys, dtype=np.float64)[:, None], values, scale,
                              key_labels=[f"k{i + 1}" for i in range(len(keys))], scale_latex=latex)


@dataclass(frozen=True)
class Leader:
    """Which keys of a one-number example get the largest weight, and where they sit among the keys."""

    indices: tuple[int, ...]  # the keys (0-based) sharing the largest score, in order
    all_tied: bool  # every key has the same score: uniform weights
    rank: str  # the leader's key value among all keys: "largest", "smallest" or "middle" ("" when tied)


def scalar_leader(steps: AttentionSteps, rtol: float = 1e-12) -> Leader:
    """The key(s) with the largest score q.k / (sqrt(d_k) T): they get the largest weight.

    The score is q times the key, so with q > 0 the leader is the largest key and with q < 0
    the smallest one; `rank` says which it is, read from the keys themselves.
    """
    scores = np.where(steps.allowed, steps.scores, -np.inf)
    top = float(scores.max())
    tol = rtol * max(1.0, abs(top))
    leaders = tuple(int(i) for i in np.flatnonzero(scores >= top - tol))
    allowed = int(steps.allowed.sum())
    keys = steps.keys[:, 0] if steps.keys.ndim == 2 else steps.keys
    if len(leaders) == allowed:
        return Leader(leaders, True, "")
    value = keys[leaders[0]]
    rank = "largest" if value >= keys[steps.allowed].max() else (
        "smallest" if value <= keys[steps.allowed].min() else "middle")
    return Leader(leaders, False, rank)


def parse_numbers(text: str, what: str, lo: int = 1, hi: int = TOY_MAX_ITEMS, limit: float = 1e6) -> list[float]:
    """Numbers typed by a student ("0.1, 0.2 0.5"), checked: count within lo..hi, finite, |x| <= limit."""
    parts = [p for p in str(text).replace(",", " ").replace(";", " ").split() if p]
    if not lo <= len(parts) <= hi:
        raise ValueError(f"{what}: give between {lo} and {hi} numbers separated by spaces or commas "
                         f"(got {len(parts)})")
    out = []
    for p in parts:
        try:
            x = float(p)
        except ValueError:
            raise ValueError(f"{what}: {p[:20]!r} is not a number") from None
        if not math.isfinite(x) or abs(x) > limit:
            raise ValueError(f"{what}: {p[:20]!r} must be a finite number between -{limit:g} and {limit:g}")
        out.append(x)
    return out


def score_scale(cfg, temperature: float = 1.0) -> tuple[float, str]:
    """What the model multiplies q.k by for this config and temperature, as (number, LaTeX)."""
    t = "" if temperature == 1 else rf" \cdot {temperature:g}"
    if cfg.score == "cosine":
        return cfg.cosine_scale / temperature, (rf"\frac{{{cfg.cosine_scale:g}}}{{{temperature:g}}}"
                                                if temperature != 1 else f"{cfg.cosine_scale:g}")
    if cfg.score == "dot":
        return 1.0 / temperature, (rf"\frac{{1}}{{{temperature:g}}}" if temperature != 1 else "1")
    return 1.0 / (math.sqrt(cfg.d_head) * temperature), rf"\frac{{1}}{{\sqrt{{{cfg.d_head}}}{t}}}"


def step_names(kind: AttentionKind, layer: int, pos_scheme: str) -> list[str]:
    """The hooks `head_steps` needs: q, k (after RoPE when the model rotates), v, mask, scores, pattern, z."""
    rot = pos_scheme == "rope" and kind.module == "attn"
    q, k = ("hook_rot_q", "hook_rot_k") if rot else ("hook_q", "hook_k")
    return [kind.hook(layer, n) for n in (q, k, "hook_v", "hook_mask", "hook_attn_scores", "hook_pattern", "hook_z")]


def head_steps(cache: dict, cfg, kind: AttentionKind, layer: int, head: int, query: int,
               key_labels: Sequence[str], query_label: str, temperature: float = 1.0,
               pos_scheme: Optional[str] = None) -> tuple[AttentionSteps, dict]:
    """One query of one real head, recomputed from the cached q, k, v; plus how far it is from the model.

    Returns (steps, checks) where checks holds the largest absolute difference between our scores,
    weights and output and the model's own hook_attn_scores, hook_pattern and hook_z. A scores, pattern or
    mask array with one head `[1 1 q k]` holds `head`'s alone (a long input's run keeps no other).
    """
    names = step_names(kind, layer, pos_scheme or cfg.pos)
    q_all, k_all, v_all, mask, scores, pattern, z = (np.asarray(cache[n]) for n in names)
    n_q = q_all.shape[1]
    if not 0 <= query < n_q:
        raise ValueError(f"query position must be in 0..{n_q - 1}, got {query}")
    if not 0 <= head < cfg.n_heads:
        raise ValueError(f"head must be in 0..{cfg.n_heads - 1}, got {head}")
    q = q_all[0, query, head].astype(np.float64)  # [d_head]
    keys = k_all[0, :, head].astype(np.float64)  # [k d_head]
    values = v_all[0, :, head].astype(np.float64)  # [k d_head]
    if cfg.score == "cosine":
        q = q / max(np.linalg.norm(q), 1e-12)
        keys = keys / np.maximum(np.linalg.norm(keys, axis=-1, keepdims=True), 1e-12)
    scale, latex = score_scale(cfg, temperature)
    allowed = mask[0, head, query] if mask.shape[1] > 1 else mask[0, 0, query]  # [k]
    steps = steps_from_vectors(q, keys, values, scale, allowed, key_labels, query_label, latex)
    checks = {
        "scores": float(np.abs(steps.scores - _head_row(scores, head, query)).max()),
        "weights": float(np.abs(steps.weights - _head_row(pattern, head, query)).max()),
        "output": float(np.abs(steps.output - z[0, query, head]).max()),
    }
    return steps, checks


def _head_row(array: np.ndarray, head: int, query: int) -> np.ndarray:
    """One query's row `[k]` of a `[1 head q k]` array, or of a `[1 1 q k]` one that holds that head alone."""
    return array[0, head if array.shape[1] > 1 else 0, query]


# ---------------------------------------------------------------------------------------------
# How peaked a row is: entropy


def row_entropy(pattern: np.ndarray) -> np.ndarray:
    """Entropy in bits of each row of a pattern `[... q k]` (0 = all weight on one key)."""
    p = np.asarray(pattern, dtype=np.float64)
    logs = np.log2(np.where(p > 0, p, 1.0))
    return -(p * logs).sum(axis=-1)  # [... q]


def entropy_bits(pattern: torch.Tensor, scratch: Optional[torch.Tensor] = None) -> torch.Tensor:
    """row_entropy in torch for a float32 pattern `[.. q k]` on the hot path (a temperature change at 1,024
    tokens): the same numbers to about 1e-6 bits. A zero weight meets the logarithm of the smallest float, not of
    0, so no nan needs masking. With the reused temporary, about five times faster than torch.special.entr
    summed in float64 (bench/attention_summary.py). The terms go into `scratch` (the pattern's shape) when given: reused head after head, its pages are touched once, where a
    fresh tensor of a megabyte or more faults them in every time."""
    terms = torch.clamp(pattern, min=torch.finfo(pattern.dtype).tiny, out=scratch)  # [.. q k]
    return terms.log2_().mul_(pattern).sum(-1).neg_()  # [.. q]


def max_entropy(allowed: np.ndarray) -> np.ndarray:
    """The largest possible entropy of each row: log2 of how many keys it may see (uniform weights)."""
    counts = np.asarray(allowed, dtype=bool).sum(axis=-1)
    return np.log2(np.maximum(counts, 1))  # [... q]


def causal_allowed(n_q: int, n_k: int, causal: bool) -> np.ndarray:
    """The default mask `[q k]` of a kind: lower-triangular for causal attention, all True otherwise."""
    full = np.ones((n_q, n_k), dtype=bool)
    return np.tril(full) if causal else full


def allowed_row(n_k: int, query: int, causal: bool) -> np.ndarray:
    """One query's row `[k]` of causal_allowed, without building the n_q x n_k mask."""
    return np.arange(n_k) <= query if causal else np.ones(n_k, dtype=bool)


# ---------------------------------------------------------------------------------------------
# Why divide by sqrt(d_k): dot products of random vectors, and what softmax does with them

SCALE_DKS = tuple(2 ** i for i in range(11))  # d_k from 1 to 1024, log-spaced (powers of two)
SCALINGS = ("scaled", "unscaled")  # the rows of a ScaleSweep's arrays
_CHUNK = 1 << 21  # numbers drawn at once, so d_k = 1024 with many keys stays in a few megabytes


def random_dot_products(d_k: int, n_pairs: int, seed: int) -> np.ndarray:
    """q.k for `n_pairs` independent pairs of random vectors with unit-variance entries, `[n_pairs]`.

    Each q.k is a sum of d_k products of independent N(0, 1) numbers, so its variance is d_k and
    its spread (standard deviation) grows like sqrt(d_k). Drawn from a local generator seeded here.
    """
    if d_k < 1 or n_pairs < 1:
        raise ValueError(f"d_k and n_pairs must be at least 1, got d_k={d_k}, n_pairs={n_pairs}")
    gen = torch.Generator().manual_seed(int(seed))
    out, step = [], max(1, _CHUNK // d_k)
    for start in range(0, n_pairs, step):
        m = min(step, n_pairs - start)
        q = torch.randn(m, 1, d_k, generator=gen)  # [pair 1 d_k]
        k = torch.randn(m, d_k, 1, generator=gen)  # [pair d_k 1]
        out.append(torch.bmm(q, k).reshape(m).double())  # [pair]
    return torch.cat(out).numpy()


def softmax_jacobian_norm(weights: np.ndarray) -> np.ndarray:
    """Frobenius norm of the softmax Jacobian d alpha / d s at each row of weights `[... n]`.

    The Jacobian is diag(alpha) - alpha alpha^T, whose squared Frobenius norm is
    sum(a^2) - 2 sum(a^3) + (sum(a^2))^2. It is largest for spread-out weights and goes to 0 as
    one weight approaches 1: then a small change of any score barely moves the weights, so little
    gradient flows back through softmax to the queries and keys.
    """
    a = np.asarray(weights, dtype=np.float64)
    s2 = (a ** 2).sum(-1)
    s3 = (a ** 3).sum(-1)
    return np.sqrt(np.maximum(s2 - 2 * s3 + s2 ** 2, 0.0))  # [...]


def softmax_rows(scores: np.ndarray) -> np.ndarray:
    """Softmax over the last axis, shifted by the row maximum so large scores do not overflow."""
    x = np.asarray(scores, dtype=np.float64)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


@dataclass(frozen=True)
class ScaleSweep:
    """Softmax of one query against n random keys, averaged over trials, at each d_k; scaled and not.

    Every array is `[scaling d_k]` with rows in SCALINGS order: 0 = scores q.k / sqrt(d_k),
    1 = raw q.k. Both rows use the same random vectors.
    """

    dks: np.ndarray  # [d_k]
    n_keys: int
    trials: int
    max_weight: np.ndarray  # [scaling d_k] mean largest weight of a row
    entropy: np.ndarray  # [scaling d_k] mean entropy of a row, bits (log2 n_keys at most)
    jacobian: np.ndarray  # [scaling d_k] mean Frobenius norm of the softmax Jacobian
    score_std: np.ndarray  # [scaling d_k] spread of the scores fed to softmax


def scale_sweep(n_keys: int, seed: int, dks: Sequence[int] = SCALE_DKS, trials: int = 64) -> ScaleSweep:
    """One random query against `n_keys` random keys (unit-variance entries), `trials` times per d_k.

    Unscaled, the scores spread like sqrt(d_k), so softmax sharpens towards one key as d_k grows (the
    largest weight goes to 1, the entropy and the Jacobian to 0). Divided by sqrt(d_k), the scores keep
    unit spread and all three stay about where they are at d_k = 1.
    """
    if n_keys < 2 or trials < 1:
        raise ValueError(f"need at least 2 keys and 1 trial, got n_keys={n_keys}, trials={trials}")
    gen = torch.Generator().manual_seed(int(seed))
    dks = np.asarray(dks, dtype=np.int64)
    stats = np.zeros((4, 2, dks.size))  # [stat scaling d_k]
    for j, d in enumerate(dks):
        raw = []
        step = max(1, _CHUNK // (n_keys * int(d)))
        for start in range(0, trials, step):
            m = min(step, trials - start)
            q = torch.randn(m, int(d), 1, generator=gen)  # [trial d_k 1]
            k = torch.randn(m, n_keys, int(d), generator=gen)  # [trial key d_k]
            raw.append(torch.bmm(k, q).reshape(m, n_keys).double())  # [trial key]
        raw_scores = torch.cat(raw).numpy()  # [trial key]
        for row, scores in enumerate((raw_scores / math.sqrt(d), raw_scores)):
            w = softmax_rows(scores)  # [trial key]
            stats[:, row, j] = (w.max(-1).mean(), row_entropy(w).mean(), softmax_jacobian_norm(w).mean(),
                                scores.std())
    return ScaleSweep(dks, int(n_keys), int(trials), stats[0], stats[1], stats[2], stats[3])


def spread_names(kind: AttentionKind, n_layers: int, pos_scheme: str) -> list[str]:
    """The query and key hooks of every layer of a kind: hook_q / hook_k, or the rotated ones under RoPE
    (hook_rot_q / hook_rot_k: those are the vectors the model multiplies)."""
    rot = pos_scheme == "rope" and kind.module == "attn"
    q, k = ("hook_rot_q", "hook_rot_k") if rot else ("hook_q", "hook_k")
    return [kind.hook(layer, n) for layer in range(n_layers) for n in (q, k)]


@dataclass(frozen=True)
class HeadSpread:
    """How spread out the raw scores q.k of a real model are, per layer and head, on one input."""

    dot_std: np.ndarray  # [layer head] standard deviation of q.k over the (query, key) pairs a query may see
    q_std: np.ndarray  # [layer head] standard deviation of the query vectors' entries
    k_std: np.ndarray  # [layer head] standard deviation of the key vectors' entries
    d_head: int
    pairs: int  # how many (query, key) pairs each std is taken over


def head_dot_spread(cache: dict, kind: AttentionKind, n_layers: int, pos_scheme: str) -> HeadSpread:
    """The spread of raw q.k (before any scaling) per layer and head, from a hooked run's q and k.

    Only the pairs the kind's default mask allows count (a causal head never scores later keys).
    """
    names = spread_names(kind, n_layers, pos_scheme)
    dot_std, q_std, k_std = [], [], []
    pairs, d_head = 0, 0
    for layer in range(n_layers):
        q = np.asarray(cache[names[2 * layer]], dtype=np.float64)[0]  # [q head d_head]
        k = np.asarray(cache[names[2 * layer + 1]], dtype=np.float64)[0]  # [k head d_head]
        d_head = q.shape[-1]
        dots = np.einsum("qhd,khd->hqk", q, k)  # [head q k]
        allowed = causal_allowed(q.shape[0], k.shape[0], kind.causal)  # [q k]
        pairs = int(allowed.sum())
        dot_std.append(dots[:, allowed].std(axis=-1))  # [head]
        q_std.append(q.std(axis=(0, 2)))  # [head]
        k_std.append(k.std(axis=(0, 2)))  # [head]
    return HeadSpread(np.stack(dot_std), np.stack(q_std), np.stack(k_std), d_head, pairs)


# ---------------------------------------------------------------------------------------------
# Predictions before and after a change


def predictions(logits: np.ndarray, targets: Optional[Sequence[int]], ignore: int = -100) -> list[dict]:
    """Per scored position: predicted id, its probability, the right id, and whether they agree."""
    if targets is None:
        return []
    x = np.asarray(logits, dtype=np.float64)
    x = x[0] if x.ndim == 3 else x  # [pos vocab]
    x = x - x.max(axis=-1, keepdims=True)
    probs = np.exp(x) / np.exp(x).sum(axis=-1, keepdims=True)  # [pos vocab]
    rows = []
    for p, target in enumerate(targets):
        if target == ignore or p >= probs.shape[0]:
            continue
        top = int(probs[p].argmax())
        rows.append({"position": p, "predicted": top, "p(predicted)": float(probs[p, top]),
                     "right": int(target), "p(right)": float(probs[p, target]), "correct": top == int(target)})
    return rows


def accuracy(rows: list[dict]) -> Optional[float]:
    """Share of scored positions predicted right, or None when nothing is scored."""
    return sum(r["correct"] for r in rows) / len(rows) if rows else None


# ---------------------------------------------------------------------------------------------
# Compare two patterns


def difference(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, Optional[str]]:
    """a - b over the positions both have, and a note when the shapes differed (else None)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.ndim != 2 or b.ndim != 2:
        raise ValueError("difference needs two 2-D [q, k] patterns")
    nq, nk = min(a.shape[0], b.shape[0]), min(a.shape[1], b.shape[1])
    note = None
    if a.shape != b.shape:
        note = (f"The two patterns have different sizes ({a.shape[0]}×{a.shape[1]} and {b.shape[0]}×{b.shape[1]}); "
                f"the difference covers the first {nq} queries and {nk} keys, position by position.")
    return a[:nq, :nk] - b[:nq, :nk], note  # [q k]


# ---------------------------------------------------------------------------------------------
# Export


def export_csv(patterns: np.ndarray, q_tokens: Sequence[str], k_tokens: Sequence[str], first_layer: int = 0,
               first_head: int = 0, first: tuple[int, int] = (0, 0)) -> str:
    """A `[layer head q k]` tensor as long-format CSV: one row per (layer, head, query, key). `first_layer`,
    `first_head` and `first` (query, key) are the model's numbers of the tensor's first layer, head and positions
    (a slice keeps its own numbers)."""
    patterns = np.asarray(patterns)
    if patterns.ndim != 4 or patterns.shape[2:] != (len(q_tokens), len(k_tokens)):
        raise ValueError(f"need [layer head q k] with q={len(q_tokens)}, k={len(k_tokens)}, got {patterns.shape}")
    n_l, n_h, n_q, n_k = patterns.shape
    layer, head, qi, ki = np.meshgrid(np.arange(n_l), np.arange(n_h), np.arange(n_q), np.arange(n_k),
                                      indexing="ij")  # each [layer head q k]
    table = pd.DataFrame({
        "layer": layer.ravel() + int(first_layer), "head": head.ravel() + int(first_head),
        "query_pos": qi.ravel() + int(first[0]), "query_token": np.asarray(list(q_tokens), dtype=object)[qi.ravel()],
        "key_pos": ki.ravel() + int(first[1]), "key_token": np.asarray(list(k_tokens), dtype=object)[ki.ravel()],
        "weight": patterns.astype(np.float64).ravel(),
    })
    return table.to_csv(index=False, float_format="%.6g", lineterminator="\n")


def export_npz(patterns: np.ndarray, q_tokens: Sequence[str], k_tokens: Sequence[str], **meta: str) -> bytes:
    """A `[layer head q k]` tensor and its token labels as .npz bytes (plain arrays; loads without pickle)."""
    buf = io.BytesIO()
    extra = {k: np.asarray(str(v)) for k, v in meta.items()}
    np.savez_compressed(buf, pattern=np.asarray(patterns, dtype=np.float32),
                        query_tokens=np.asarray(list(q_tokens), dtype=str),
                        key_tokens=np.asarray(list(k_tokens), dtype=str), **extra)
    return buf.getvalue()
