"""Heads: per-head subspaces, circuits, roles, redundancy and ablations, plus the two-head toy.

Read top to bottom: (1) the geometry of one layer's heads (principal angles, cross-Gram norms,
effective rank, the h * d_v <= d_model budget); (2) QK and OV circuits read through the token
embeddings; (3) a 2-D picture of one head's queries and keys; (4) role scores against known
head types; (5) how alike heads are (patterns, and a mutual-information estimate between their
outputs); (6) ablation through `run_with_hooks` on `hook_z` (the shared model is never changed);
(7) the orthogonal-query identity; (8) a tiny two-lookup task whose two heads split the work.

Which attention a function looks at is an `AttentionKind` (core.analysis.attention): its hook
prefix ("", "encoder.", "decoder.") and module ("attn" or "cross_attn").
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Iterable, Optional, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from core.analysis.attention import AttentionKind, attention_kinds
from core.config import TransformerConfig
from core.device import one_thread
from core.model import Transformer
from core.tasks import IGNORE, Batch, Formatted, Task, Vocab

MATRICES = ("W_Q", "W_K", "W_V", "W_O")
ROLES = ("previous token", "induction", "subject", "first-token sink")
ABLATION_MODES = ("zero", "mean")


# ---------------------------------------------------------------------------------------------
# 1. Subspaces: what each head can read (W_Q, W_K, W_V) or write (W_O) in the residual stream


def head_matrices(model: Transformer, kind: AttentionKind, layer: int, which: str) -> torch.Tensor:
    """One layer's per-head matrix as `[head d_model d_head]`, float64; W_O is transposed to that shape.

    The columns of W_V^h span the subspace head h reads values from; the columns of (W_O^h)^T
    span the subspace it writes to.
    """
    if which not in MATRICES:
        raise ValueError(f"which must be one of {list(MATRICES)}, got {which!r}")
    weights = model.head_weights(layer, kind.prefix, kind.module)
    w = weights[which].double()
    return w.transpose(1, 2) if which == "W_O" else w  # [head d_model d_head]


def column_basis(w: torch.Tensor, rtol: float = 1e-9) -> torch.Tensor:
    """An orthonormal basis `[d r]` of the column space of w `[d k]` (r = its numerical rank)."""
    u, s, _ = torch.linalg.svd(w.double(), full_matrices=False)
    if s.numel() == 0 or float(s[0]) == 0.0:
        return u[:, :0]
    rank = int((s > rtol * s[0]).sum())
    return u[:, :rank]


def principal_angles(a: torch.Tensor, b: torch.Tensor) -> np.ndarray:
    """The principal angles (radians, ascending) between the column spaces of a `[d k1]` and b `[d k2]`.

    With orthonormal bases Q1, Q2 the singular values of Q1^T Q2 are the cosines of the angles:
    all 0 means the spaces share those directions, all pi/2 means they are orthogonal.
    """
    if a.shape[0] != b.shape[0]:
        raise ValueError(f"both matrices need the same number of rows (d_model), got {a.shape[0]} and {b.shape[0]}")
    q1, q2 = column_basis(a), column_basis(b)
    if q1.shape[1] == 0 or q2.shape[1] == 0:
        return np.zeros(0)
    cosines = torch.linalg.svdvals(q1.T @ q2).clamp(0.0, 1.0)  # [min(r1, r2)], descending
    return np.sort(torch.arccos(cosines).numpy())


def angle_matrix(w: torch.Tensor, reduce: str = "mean") -> tuple[np.ndarray, list[list[np.ndarray]]]:
    """Principal angles between every pair of heads' subspaces, w `[head d_model d_head]`.

    Returns (matrix `[head head]` in degrees, reduced by "mean" or "min" over the angles of a
    pair, and the full list of angles per pair, in degrees, for hover text).
    """
    if reduce not in ("mean", "min"):
        raise ValueError(f"reduce must be 'mean' or 'min', got {reduce!r}")
    n = w.shape[0]
    out = np.zeros((n, n))
    every: list[list[np.ndarray]] = [[np.zeros(0)] * n for _ in range(n)]
    for i in range(n):
        for j in range(n):
            angles = np.degrees(principal_angles(w[i], w[j]))
            every[i][j] = angles
            out[i, j] = (angles.mean() if reduce == "mean" else angles.min()) if angles.size else 90.0
    return out, every


def cross_gram_norms(w: torch.Tensor, normalise: bool = False) -> np.ndarray:
    """||(W^i)^T W^j||_F for every pair of heads, w `[head d_model d_head]` -> `[head head]`.

    Zero exactly when the two heads' subspaces are orthogonal. normalise=True divides by
    ||W^i||_F ||W^j||_F, so the number no longer depends on the weights' overall size.
    """
    gram = torch.einsum("imk,jml->ijkl", w, w)  # [head head d_head d_head]: (W^i)^T W^j
    norms = gram.flatten(2).norm(dim=-1)  # [head head]
    if normalise:
        size = w.flatten(1).norm(dim=-1)  # [head]
        norms = norms / (size[:, None] * size[None, :]).clamp_min(1e-30)
    return norms.numpy()


def effective_rank(w: torch.Tensor) -> float:
    """Entropy-based effective rank exp(H(p)) with p = sigma / sum(sigma) (Roy and Vetterli, 2007).

    It is 1 when one direction carries everything and k when k singular values are equal, so it
    counts how many of a head's d_head directions it really uses.
    """
    s = torch.linalg.svdvals(w.double())
    total = float(s.sum())
    if total == 0.0:
        return 0.0
    p = s / total
    p = p[p > 0]
    return float(torch.exp(-(p * p.log()).sum()))


def h_max(d_model: int, d_v: int) -> int:
    """How many heads with pairwise orthogonal d_v-dimensional value spaces fit: floor(d_model / d_v)."""
    for name, value in (("d_model", d_model), ("d_v", d_v)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(d_model) // int(d_v)


@dataclass
class SubspaceReport:
    """Everything the subspace panel draws for one layer and one matrix."""

    which: str  # W_Q, W_K, W_V or W_O
    angles: np.ndarray  # [head head] degrees (mean or smallest principal angle)
    all_angles: list  # per pair, every principal angle in degrees
    gram: np.ndarray  # [head head] ||(W^i)^T W^j||_F
    gram_normalised: np.ndarray  # [head head] the same divided by ||W^i|| ||W^j||
    eff_rank: np.ndarray  # [head] entropy effective rank of each head
    joint_rank: int  # numerical rank of all heads' columns side by side
    joint_eff_rank: float  # entropy effective rank of the same
    d_model: int
    d_head: int
    n_heads: int

    @property
    def h_max(self) -> int:
        """floor(d_model / d_head) for this layer."""
        return h_max(self.d_model, self.d_head)


def subspace_report(model: Transformer, kind: AttentionKind, layer: int, which: str = "W_V",
                    reduce: str = "mean") -> SubspaceReport:
    """Principal angles, cross-Gram norms and effective ranks of one layer's heads for one matrix."""
    w = head_matrices(model, kind, layer, which)  # [head d_model d_head]
    angles, every = angle_matrix(w, reduce)
    joint = w.transpose(0, 1).reshape(w.shape[1], -1)  # [d_model head*d_head]
    return SubspaceReport(
        which=which, angles=angles, all_angles=every, gram=cross_gram_norms(w),
        gram_normalised=cross_gram_norms(w, normalise=True),
        eff_rank=np.array([effective_rank(w[h]) for h in range(w.shape[0])]),
        joint_rank=int(column_basis(joint, rtol=1e-6).shape[1]), joint_eff_rank=effective_rank(joint),
        d_model=int(w.shape[1]), d_head=int(w.shape[2]), n_heads=int(w.shape[0]),
    )


# ---------------------------------------------------------------------------------------------
# 2. Circuits: a head read through the token embeddings


@dataclass
class Circuit:
    """A token x token table with its labels and singular values."""

    table: np.ndarray  # [rows cols]
    rows: list[str]  # labels of the rows (query tokens, or attended-to tokens)
    cols: list[str]  # labels of the columns (key tokens, or output tokens)
    singular_values: np.ndarray  # descending

    def top_pairs(self, k: int = 8) -> list[tuple[str, str, float]]:
        """The k largest entries as (row token, column token, value)."""
        flat = np.argsort(self.table, axis=None)[::-1][:k]
        return [(self.rows[i], self.cols[j], float(self.table[i, j]))
                for i, j in zip(*np.unravel_index(flat, self.table.shape))]


def _vocab_tokens(meta_vocab: Optional[Sequence[str]], n: int) -> list[str]:
    """Token labels for a vocabulary of n ids: the model's own list when it fits, else the ids."""
    if meta_vocab is not None and len(meta_vocab) >= n:
        return [str(t) for t in meta_vocab[:n]]
    return [str(i) for i in range(n)]


def _embeddings_into(model: Transformer, kind: AttentionKind, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(query-side, key-side) token embeddings as the layer's attention sees them at layer 0.

    Each row is one token's embedding passed through the LayerNorm placed before the sublayer
    (pre-LN only). Positions are left out; for cross-attention the keys come from the encoder's
    embeddings passed through the encoder's final LayerNorm.
    """
    pre = model.cfg.norm == "pre"
    with torch.no_grad():
        if kind.module == "cross_attn":
            block = model.decoder.blocks[layer]
            e_q = model.embedding_matrix("decoder.")
            e_k = model.embedding_matrix("encoder.")
            if pre:
                e_q, e_k = block.ln_cross(e_q), model.encoder.ln_final(e_k)
            return e_q.double(), e_k.double()
        stack = model.stack_for(kind.prefix)
        e = model.embedding_matrix(kind.prefix)
        if pre:
            e = stack.blocks[layer].ln1(e)
        return e.double(), e.double()


def qk_circuit(model: Transformer, kind: AttentionKind, layer: int, head: int,
               q_tokens: Sequence[str], k_tokens: Sequence[str]) -> Circuit:
    """The score a query token gives a key token through head h alone: (E_q W_Q)(E_k W_K)^T / sqrt(d_head).

    Row = query token, column = key token. Only the direct path from the embeddings is read.
    """
    w = model.head_weights(layer, kind.prefix, kind.module)
    e_q, e_k = _embeddings_into(model, kind, layer)
    q = e_q @ w["W_Q"][head].double()  # [vocab_q d_head]
    k = e_k @ w["W_K"][head].double()  # [vocab_k d_head]
    table = (q @ k.T / math.sqrt(model.cfg.d_head)).numpy()  # [vocab_q vocab_k]
    return Circuit(table, list(q_tokens), list(k_tokens), np.linalg.svd(table, compute_uv=False))


def ov_available(model: Transformer, kind: AttentionKind) -> bool:
    """True when a head's output reaches the unembedding directly (not for an encoder feeding a decoder)."""
    return not (model.is_encoder_decoder and kind.prefix == "encoder.")


def ov_circuit(model: Transformer, kind: AttentionKind, layer: int, head: int,
               k_tokens: Sequence[str], out_tokens: Sequence[str]) -> Circuit:
    """What head h adds to each output logit when it attends fully to a token: E_k W_V W_O W_U^T.

    Row = the token attended to, column = the output token. The final LayerNorm is skipped.
    """
    if not ov_available(model, kind):
        raise ValueError("the encoder's heads write into the encoder output, which the decoder reads through "
                         "cross-attention; there is no direct path to the unembedding to read")
    w = model.head_weights(layer, kind.prefix, kind.module)
    _, e_k = _embeddings_into(model, kind, layer)
    written = e_k @ w["W_V"][head].double() @ w["W_O"][head].double()  # [vocab_k d_model]
    table = (written @ model.unembed.weight.detach().double().T).numpy()  # [vocab_k vocab_out]
    return Circuit(table, list(k_tokens), list(out_tokens), np.linalg.svd(table, compute_uv=False))


# ---------------------------------------------------------------------------------------------
# 3. One head's queries and keys in 2-D


@dataclass
class QKProjection:
    """Queries and keys of one head projected on the top two principal axes of all of them together."""

    q2: np.ndarray  # [q 2]
    k2: np.ndarray  # [k 2]
    explained: np.ndarray  # [2] share of the variance each axis keeps


def pca_2d(q: np.ndarray, k: np.ndarray) -> QKProjection:
    """Joint PCA of q `[nq d]` and k `[nk d]`: one shared 2-D picture, so q_i near k_j is meaningful-ish."""
    both = np.concatenate([q, k]).astype(np.float64)  # [nq+nk d]
    centred = both - both.mean(axis=0)
    _, s, vt = np.linalg.svd(centred, full_matrices=False)
    axes = vt[:2]  # [2 d]
    if axes.shape[0] < 2:
        axes = np.vstack([axes, np.zeros((2 - axes.shape[0], both.shape[1]))])
    var = s ** 2
    explained = var[:2] / var.sum() if var.sum() > 0 else np.zeros(2)
    explained = np.pad(explained, (0, 2 - explained.size))
    coords = centred @ axes.T  # [nq+nk 2]
    return QKProjection(coords[: len(q)], coords[len(q):], explained)


# ---------------------------------------------------------------------------------------------
# 4. Roles: how much each head behaves like a known kind of head


def content_tokens(vocab: Vocab) -> list[int]:
    """Ids of the ordinary tokens (not <pad>, <bos>, <sep>, <eos>, <cls>, <mask>)."""
    return [i for i, t in enumerate(vocab.tokens) if not (t.startswith("<") and t.endswith(">"))]


def probe_length(vocab: Vocab, max_len: Optional[int], want: int = 8) -> int:
    """How many distinct tokens the repeated probe uses: up to `want`, fewer for small vocabularies
    or a learned position table (1 + 2k positions must fit)."""
    k = min(want, len(content_tokens(vocab)))
    if max_len is not None:
        k = min(k, (max_len - 1) // 2)
    if k < 2:
        raise ValueError("the probe needs at least 2 distinct ordinary tokens and room for 5 positions")
    return k


def repeated_probe(vocab: Vocab, n: int, k: int, seed: int, bos: bool = True) -> torch.Tensor:
    """n sequences `[<bos>] r1..rk r1..rk` of k distinct random ordinary tokens: `[n pos]`.

    Inside the repeat an induction head can find each token's earlier copy and look one step on.
    """
    pool = np.array(content_tokens(vocab))
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(n):
        r = list(pool[rng.permutation(len(pool))[:k]])
        rows.append(([vocab.bos_id] if bos else []) + r + r)
    return torch.tensor(rows, dtype=torch.long)  # [n pos]


def induction_targets(tokens: np.ndarray) -> np.ndarray:
    """For each position t, the position after the most recent earlier copy of tokens[t], or -1.

    tokens `[batch pos]` -> `[batch pos]`. Positions whose answer would be t itself (a token
    repeated right away) get -1, so attending to oneself never counts as induction.
    """
    out = np.full(tokens.shape, -1, dtype=np.int64)
    for b in range(tokens.shape[0]):
        last: dict[int, int] = {}
        for t, tok in enumerate(tokens[b].tolist()):
            s = last.get(tok)
            if s is not None and s + 1 < t:
                out[b, t] = s + 1
            last[tok] = t
    return out


def previous_token_score(pattern: np.ndarray) -> np.ndarray:
    """Mean weight from position t to t-1 over t >= 1; pattern `[batch head q k]` -> `[head]`."""
    n = min(pattern.shape[2], pattern.shape[3])
    t = np.arange(1, n)
    return pattern[:, :, t, t - 1].mean(axis=(0, 2))


def induction_score(pattern: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    """Mean weight from t to the token after the previous copy of token t; `[batch head q k]` -> `[head]`."""
    target = induction_targets(tokens)  # [batch pos]
    b, t = np.nonzero(target >= 0)
    if b.size == 0:
        return np.full(pattern.shape[1], np.nan)
    return pattern[b, :, t, target[b, t]].mean(axis=0)  # [head]


def sink_score(pattern: np.ndarray) -> np.ndarray:
    """Mean weight on position 0 from queries t >= 1 (a head 'parking' its attention on the first token)."""
    return pattern[:, :, 1:, 0].mean(axis=(0, 2))


def subject_score(pattern: np.ndarray, meta: Sequence[dict]) -> np.ndarray:
    """Mean weight from the verb slot (<mask>) to the sentence's subject, per head (agreement task meta)."""
    rows = [pattern[i, :, m["verb_pos"], m["subject_pos"]] for i, m in enumerate(meta)]
    return np.mean(rows, axis=0)


def uniform_pattern(batch: int, n: int, causal: bool) -> np.ndarray:
    """A head that spreads its attention evenly over the keys it may see: `[batch 1 n n]` (a chance level)."""
    allowed = np.tril(np.ones((n, n))) if causal else np.ones((n, n))
    return np.broadcast_to(allowed / allowed.sum(axis=1, keepdims=True), (batch, 1, n, n))


@dataclass
class RoleScores:
    """Layer x head tables of role scores, with the score an evenly spread head would get."""

    scores: dict  # role -> [layer head] (nan where the role cannot be measured)
    chance: dict  # role -> float (nan where not measured)
    notes: dict  # role -> one sentence on how it was measured
    probe: np.ndarray  # the probe tokens [batch pos] (query side)


def _patterns(model: Transformer, kind: AttentionKind, tokens: torch.Tensor,
              tgt: Optional[torch.Tensor]) -> np.ndarray:
    """Every layer's pattern of one kind on a batch: `[layer batch head q k]`."""
    names = [kind.hook(i, "hook_pattern") for i in range(model.cfg.n_layers)]
    kwargs = {"tgt": tgt} if tgt is not None else {}
    _, cache = model.run_with_cache(tokens.to(model.device), names, **kwargs)
    return np.stack([cache[n].float().cpu().numpy() for n in names])  # [layer batch head q k]


def probe_inputs(model: Transformer, vocab: Vocab, kind: AttentionKind, n: int = 32, seed: int = 0,
                 src_vocab: Optional[Vocab] = None) -> tuple[torch.Tensor, Optional[torch.Tensor], np.ndarray]:
    """(tokens, tgt or None, the query-side tokens as numpy) of the repeated-random-token probe.

    Encoder-decoder: the source is r r, the target <bos> r r (each from its own vocabulary).
    """
    max_len = model.cfg.max_len if model.cfg.pos == "learned" else None
    if model.is_encoder_decoder:
        src_vocab = src_vocab or vocab
        k = min(probe_length(vocab, max_len), probe_length(src_vocab, max_len))
        src = repeated_probe(src_vocab, n, k, seed, bos=False)
        tgt = repeated_probe(vocab, n, k, seed + 1, bos=True)
        side = tgt if kind.queries == "target" else src
        return src, tgt, side.numpy()
    tokens = repeated_probe(vocab, n, probe_length(vocab, max_len), seed, bos=True)
    return tokens, None, tokens.numpy()


def role_scores(model: Transformer, kind: AttentionKind, vocab: Vocab, task: Optional[Task] = None,
                n: int = 32, seed: int = 0, src_vocab: Optional[Vocab] = None) -> RoleScores:
    """Previous-token, induction, subject and first-token-sink scores of every head of one kind.

    The first, second and fourth are measured on repeated random tokens (`repeated_probe`); the
    subject score on the agreement task's own sentences, only when `task` is agreement.
    """
    if kind.module == "cross_attn":
        raise ValueError("role scores compare a sequence with itself; cross-attention reads another sequence")
    n_l, n_h = model.cfg.n_layers, model.cfg.n_heads
    tokens, tgt, side = probe_inputs(model, vocab, kind, n, seed, src_vocab)
    pats = _patterns(model, kind, tokens, tgt)  # [layer batch head q k]
    uniform = uniform_pattern(side.shape[0], side.shape[1], kind.causal)
    scores = {
        "previous token": np.stack([previous_token_score(p) for p in pats]),
        "induction": np.stack([induction_score(p, side) for p in pats]),
        "first-token sink": np.stack([sink_score(p) for p in pats]),
    }
    chance = {
        "previous token": float(previous_token_score(uniform)[0]),
        "induction": float(induction_score(uniform, side)[0]),
        "first-token sink": float(sink_score(uniform)[0]),
    }
    k = (side.shape[1] - (1 if side[0, 0] == vocab.bos_id else 0)) // 2
    notes = {
        "previous token": "weight from each token to the one just before it",
        "induction": f"weight from each token of the repeat to the token after its earlier copy "
                     f"({n} random sequences of {k} distinct tokens, then the same {k} again)",
        "first-token sink": "weight on the very first position, from every later position",
    }
    if task is not None and task.name == "agreement" and not model.is_encoder_decoder:
        batch = task.batch(max(n, 64), model.cfg.arch, seed=seed)
        sent = _patterns(model, kind, batch.tokens, None)  # [layer batch head q k]
        scores["subject"] = np.stack([subject_score(p, batch.meta) for p in sent])
        mask = (batch.tokens != vocab.pad_id).numpy()  # [batch pos]
        chance["subject"] = float(np.mean([1.0 / mask[i].sum() for i in range(len(batch.meta))]))
        notes["subject"] = "weight from the <mask> (verb) slot to the subject noun, on the task's own sentences"
    else:
        scores["subject"] = np.full((n_l, n_h), np.nan)
        chance["subject"] = float("nan")
        notes["subject"] = "needs a model trained on the agreement task (it knows where the subject is)"
    return RoleScores({r: scores[r] for r in ROLES}, {r: chance[r] for r in ROLES}, {r: notes[r] for r in ROLES},
                      side)


# ---------------------------------------------------------------------------------------------
# 5. Redundancy: do two heads look at the same places, or carry the same information?


def pattern_similarity(pats: np.ndarray, causal: bool) -> np.ndarray:
    """1 - Jensen-Shannon divergence (bits) between heads' attention rows, averaged over rows.

    pats `[H batch q k]` (all heads of all layers, flattened) -> `[H H]`, 1 = identical
    patterns, 0 = never looking at the same keys. Rows with one visible key are skipped.
    """
    n_q = pats.shape[2]
    rows = np.arange(1, n_q) if causal else np.arange(n_q)
    p = pats[:, :, rows, :].reshape(pats.shape[0], -1, pats.shape[3]).astype(np.float64)  # [H rows k]
    out = np.ones((p.shape[0], p.shape[0]))
    for i in range(p.shape[0]):
        for j in range(i + 1, p.shape[0]):
            m = 0.5 * (p[i] + p[j])
            js = 0.5 * (_kl_bits(p[i], m) + _kl_bits(p[j], m))  # [rows]
            out[i, j] = out[j, i] = 1.0 - float(np.clip(js, 0, 1).mean())
    return out


def _kl_bits(p: np.ndarray, m: np.ndarray) -> np.ndarray:
    """KL(p || m) in bits per row; 0 log 0 = 0."""
    safe = np.where(p > 0, p / np.where(m > 0, m, 1.0), 1.0)
    return (p * np.log2(safe)).sum(axis=-1)


def _top_components(x: np.ndarray, k: int, rel_floor: float = 1e-6) -> np.ndarray:
    """x `[n d]` centred and projected on its top-k principal axes with non-negligible variance."""
    x = x - x.mean(axis=0)
    _, s, vt = np.linalg.svd(x, full_matrices=False)
    if s.size == 0 or s[0] == 0:
        return x[:, :0]
    keep = min(k, int((s ** 2 > rel_floor * s[0] ** 2).sum()))
    return x @ vt[:keep].T  # [n keep]


def gaussian_mi(x: np.ndarray, y: np.ndarray, k: int = 4) -> float:
    """Mutual information (nats) of x `[n dx]` and y `[n dy]` under a joint-Gaussian fit.

    Each side is reduced to its top-k principal components; with canonical correlations rho_i
    between them, I = -1/2 sum log(1 - rho_i^2). It measures linearly shared information and is
    exact only for Gaussian data; with few samples it reads slightly above 0 for independent data.
    """
    a, b = _top_components(x, k), _top_components(y, k)
    if a.shape[1] == 0 or b.shape[1] == 0:
        return 0.0
    wa = _whiten(a)
    wb = _whiten(b)
    rho = np.clip(np.linalg.svd(wa.T @ wb / a.shape[0], compute_uv=False), 0.0, 1 - 1e-9)
    return float(-0.5 * np.log1p(-rho ** 2).sum())


def _whiten(x: np.ndarray) -> np.ndarray:
    """x `[n d]` (centred) times the inverse square root of its covariance."""
    cov = x.T @ x / x.shape[0]
    vals, vecs = np.linalg.eigh(cov)
    vals = np.maximum(vals, 1e-12 * vals.max())
    return x @ vecs @ np.diag(vals ** -0.5) @ vecs.T


@dataclass
class Redundancy:
    """How alike every pair of heads (of one kind, all layers) is."""

    labels: list[str]  # "L0 H1", ...
    similarity: np.ndarray  # [H H] 1 - JS divergence of patterns
    mi: np.ndarray  # [H H] Gaussian MI estimate between head outputs, nats
    noise: float  # the largest MI estimate after shuffling one head's samples (independent by construction)
    n_samples: int


def redundancy(model: Transformer, kind: AttentionKind, vocab: Vocab, n: int = 32, seed: int = 0,
               k: int = 4, src_vocab: Optional[Vocab] = None) -> Redundancy:
    """Pattern similarity and output MI for every pair of heads, on the repeated-token probe."""
    tokens, tgt, side = probe_inputs(model, vocab, kind, n, seed, src_vocab)
    n_l, n_h = model.cfg.n_layers, model.cfg.n_heads
    names = [kind.hook(i, w) for i in range(n_l) for w in ("hook_pattern", "hook_z")]
    kwargs = {"tgt": tgt} if tgt is not None else {}
    _, cache = model.run_with_cache(tokens.to(model.device), names, **kwargs)
    pats, outs = [], []
    for i in range(n_l):
        p = cache[kind.hook(i, "hook_pattern")].float().cpu().numpy()  # [batch head q k]
        z = cache[kind.hook(i, "hook_z")].float().cpu().numpy()  # [batch pos head d_head]
        for h in range(n_h):
            pats.append(p[:, h])
            outs.append(z[:, :, h].reshape(-1, z.shape[-1]))  # [batch*pos d_head]
    sim = pattern_similarity(np.stack(pats), kind.causal)  # [H H]
    total = len(outs)
    mi = np.zeros((total, total))
    rng = np.random.default_rng(seed)
    noise = 0.0
    for i in range(total):
        mi[i, i] = np.nan
        for j in range(i + 1, total):
            mi[i, j] = mi[j, i] = gaussian_mi(outs[i], outs[j], k)
            noise = max(noise, gaussian_mi(outs[i], outs[j][rng.permutation(len(outs[j]))], k))
    labels = [f"L{i} H{h}" for i in range(n_l) for h in range(n_h)]
    return Redundancy(labels, sim, mi, noise, int(outs[0].shape[0]) if outs else 0)


# ---------------------------------------------------------------------------------------------
# 6. Ablation: replace chosen heads' outputs (hook_z) with zeros or their mean, per call

HeadRef = tuple[str, int, int]  # (attention kind key, layer, head)


class ReplaceHeads:
    """A hook function for `hook_z` `[batch pos head d_head]`: returns a copy with chosen heads replaced.

    fill None -> zeros; else fill `[head d_head]` holds each head's mean output.
    """

    def __init__(self, heads: Sequence[int], fill: Optional[torch.Tensor] = None):
        self.heads = sorted(set(int(h) for h in heads))
        self.fill = fill

    def __call__(self, z: torch.Tensor, hook) -> torch.Tensor:
        z = z.clone()
        for h in self.heads:
            z[:, :, h] = 0.0 if self.fill is None else self.fill[h].to(z)
        return z


def kinds_by_key(model: Transformer) -> dict[str, AttentionKind]:
    """The model's attention kinds keyed by their short id (self; or enc, dec, cross)."""
    return {k.key: k for k in attention_kinds(model.cfg.arch)}


def ablation_hooks(model: Transformer, heads: Iterable[HeadRef], mode: str = "zero",
                   means: Optional[dict] = None) -> list[tuple[str, Callable]]:
    """The `fwd` list for run_with_hooks that ablates `heads` (one function per hook_z touched)."""
    if mode not in ABLATION_MODES:
        raise ValueError(f"mode must be one of {list(ABLATION_MODES)}, got {mode!r}")
    kinds = kinds_by_key(model)
    grouped: dict[str, list[int]] = {}
    for key, layer, head in heads:
        if key not in kinds:
            raise ValueError(f"this model has no attention kind {key!r}; it has {list(kinds)}")
        if not 0 <= layer < model.cfg.n_layers or not 0 <= head < model.cfg.n_heads:
            raise ValueError(f"no head L{layer} H{head}: the model has {model.cfg.n_layers} layers "
                             f"x {model.cfg.n_heads} heads")
        grouped.setdefault(kinds[key].hook(layer, "hook_z"), []).append(head)
    if mode == "mean" and means is None:
        raise ValueError("mean ablation needs each head's mean output: pass means=head_means(...)")
    return [(name, ReplaceHeads(hs, None if mode == "zero" else means[name])) for name, hs in grouped.items()]


def _query_side(batch: Batch, kind: AttentionKind) -> torch.Tensor:
    """The token ids whose positions a kind's hook_z runs over (target side for decoder kinds)."""
    return batch.tgt if (kind.queries == "target" and batch.tgt is not None) else batch.tokens


def head_means(model: Transformer, batch: Batch, pad_id: int) -> dict[str, torch.Tensor]:
    """Each hook_z's mean output per head over the batch's real (non-<pad>) positions: name -> `[head d_head]`."""
    kinds = attention_kinds(model.cfg.arch)
    names = [k.hook(i, "hook_z") for k in kinds for i in range(model.cfg.n_layers)]
    kwargs = {"tgt": batch.tgt.to(model.device)} if batch.tgt is not None else {}
    _, cache = model.run_with_cache(batch.tokens.to(model.device), names, **kwargs)
    out = {}
    for k in kinds:
        real = (_query_side(batch, k) != pad_id).to(model.device)  # [batch pos]
        for i in range(model.cfg.n_layers):
            z = cache[k.hook(i, "hook_z")]  # [batch pos head d_head]
            out[k.hook(i, "hook_z")] = z[real].mean(dim=0)  # [head d_head]
    return out


@dataclass
class AblationResult:
    """The task metric and loss of one (possibly ablated) run on a batch."""

    accuracy: float
    loss: float


def run_ablated(model: Transformer, task: Task, batch: Batch, heads: Iterable[HeadRef] = (),
                mode: str = "zero", means: Optional[dict] = None) -> AblationResult:
    """Accuracy and mean cross-entropy (scored positions) with `heads` ablated; the model is untouched."""
    fwd = ablation_hooks(model, list(heads), mode, means)
    kwargs = {"tgt": batch.tgt.to(model.device)} if batch.tgt is not None else {}
    logits = model.run_with_hooks(batch.tokens.to(model.device), fwd, **kwargs)  # [batch pos vocab]
    targets = batch.targets.to(logits.device)
    loss = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), ignore_index=IGNORE)  # [batch*pos vocab]
    return AblationResult(task.accuracy(logits, batch), float(loss))


def all_heads(model: Transformer) -> list[HeadRef]:
    """Every head of every attention kind, in reading order."""
    return [(k.key, i, h) for k in attention_kinds(model.cfg.arch)
            for i in range(model.cfg.n_layers) for h in range(model.cfg.n_heads)]


def head_label(model: Transformer, ref: HeadRef) -> str:
    """'L1 H2' (single-stack) or 'cross L1 H2' (encoder-decoder)."""
    key, layer, head = ref
    return f"L{layer} H{head}" if not model.is_encoder_decoder else f"{key} L{layer} H{head}"


def ablate_each(model: Transformer, task: Task, batch: Batch, mode: str = "zero",
                means: Optional[dict] = None) -> list[dict]:
    """Ablate every head alone; rows sorted by how much the loss rises (most important first)."""
    base = run_ablated(model, task, batch)
    rows = []
    for ref in all_heads(model):
        res = run_ablated(model, task, batch, [ref], mode, means)
        rows.append({"head": head_label(model, ref), "kind": ref[0], "layer": ref[1], "index": ref[2],
                     "accuracy": res.accuracy, "accuracy change": res.accuracy - base.accuracy,
                     "loss": res.loss, "loss change": res.loss - base.loss})
    rows.sort(key=lambda r: r["loss change"], reverse=True)
    for rank, row in enumerate(rows, 1):
        row["rank"] = rank
    return rows


# ---------------------------------------------------------------------------------------------
# 7. The orthogonal part of a query changes nothing


def orthogonal_complement(keys: np.ndarray, rtol: float = 1e-6) -> np.ndarray:
    """An orthonormal basis `[d r]` of the directions orthogonal to every key (rows of keys `[n d]`).

    Empty (r = 0) when the keys span all d dimensions.
    """
    keys = np.asarray(keys, dtype=np.float64)
    d = keys.shape[1]
    if keys.shape[0] == 0:
        return np.eye(d)
    _, s, vt = np.linalg.svd(keys, full_matrices=True)
    rank = int((s > rtol * s[0]).sum()) if s.size and s[0] > 0 else 0
    return vt[rank:].T  # [d d-rank]


def orthogonal_direction(keys: np.ndarray, seed: int = 0) -> Optional[np.ndarray]:
    """A random unit vector orthogonal to every key, or None when no such direction exists."""
    basis = orthogonal_complement(keys)
    if basis.shape[1] == 0:
        return None
    c = np.random.default_rng(seed).standard_normal(basis.shape[1])
    u = basis @ c
    return u / np.linalg.norm(u)


def dot_scores(q: np.ndarray, keys: np.ndarray, scale: float) -> np.ndarray:
    """Attention scores of one query against keys `[n d]`: (keys @ q) * scale."""
    return np.asarray(keys, dtype=np.float64) @ np.asarray(q, dtype=np.float64) * scale


def softmax(x: np.ndarray) -> np.ndarray:
    """A numerically safe softmax of one row."""
    e = np.exp(x - x.max())
    return e / e.sum()


@dataclass
class OrthogonalQuery:
    """A query, the same query plus a part orthogonal to every key, and a same-size random part for contrast."""

    q: np.ndarray  # [d]
    q_orth: np.ndarray  # [d] q + alpha |q| u, u orthogonal to every key
    q_rand: np.ndarray  # [d] q + alpha |q| r, r a random unit vector (not orthogonal)
    scores: np.ndarray  # [n] original scores
    scores_orth: np.ndarray  # [n]
    scores_rand: np.ndarray  # [n]
    free_dims: int  # dimension of the space orthogonal to every key

    @property
    def max_change_orth(self) -> float:
        """The largest score change the orthogonal part causes (0 up to rounding)."""
        return float(np.abs(self.scores_orth - self.scores).max())

    @property
    def max_change_rand(self) -> float:
        """The largest score change a random part of the same length causes."""
        return float(np.abs(self.scores_rand - self.scores).max())


def orthogonal_query(q: np.ndarray, keys: np.ndarray, alpha: float, scale: float,
                     seed: int = 0) -> Optional[OrthogonalQuery]:
    """Add alpha * |q| along a direction orthogonal to every key: the scores stay exactly the same.

    Returns None when the keys fill every dimension (no orthogonal direction left).
    """
    q = np.asarray(q, dtype=np.float64)
    keys = np.asarray(keys, dtype=np.float64)
    u = orthogonal_direction(keys, seed)
    if u is None:
        return None
    r = np.random.default_rng(seed + 1).standard_normal(q.shape[0])
    r /= np.linalg.norm(r)
    size = alpha * max(float(np.linalg.norm(q)), 1e-12)
    q_orth, q_rand = q + size * u, q + size * r
    return OrthogonalQuery(q, q_orth, q_rand, dot_scores(q, keys, scale), dot_scores(q_orth, keys, scale),
                           dot_scores(q_rand, keys, scale), orthogonal_complement(keys).shape[1])


# ---------------------------------------------------------------------------------------------
# 8. The two-head toy: two lookups in two orthogonal feature subspaces

TOY_LETTERS = ("a", "b", "c", "d")
TOY_DIGITS = ("1", "2", "3", "4")
TOY_D_MODEL = 16  # dims 0-3 letters, 4-7 digits, 8 "query", 9 "memory", 10-15 free for the model
TOY_D_HEAD = 4
TOY_FEATURES = [f"letter {x}" for x in TOY_LETTERS] + [f"digit {x}" for x in TOY_DIGITS] + ["is query", "is memory"]
LETTER_DIMS, DIGIT_DIMS = slice(0, 4), slice(4, 8)
TOY_SEED = 0  # a seed whose two heads split the work cleanly in TOY_STEPS steps (others may share it)
TOY_STEPS = 600
TOY_LR = 3e-2


class TwoLookupTask(Task):
    """Memory items are letter-digit pairs (a3 c1 d2); a query `b1?` asks two questions at once.

    Its answer is a pair too: the LETTER of the memory item that has the query's digit, and the
    DIGIT of the memory item that has the query's letter. With memory `a3 c1 d2` the query `a1?`
    answers `c3` (digit 1 belongs to c, letter a holds 3). The query's letter and digit always
    come from two different memory items, so the two lookups never land on the same item.
    Format (decoder): n memory items, then n queries; each query position is scored.
    """

    name = "two-lookups"
    title = "Two lookups"
    description = "Answer with the letter of the item sharing my digit and the digit of the item sharing my letter."
    archs = ("decoder",)
    metric = "token"
    scored = "Every query position (a token ending in ?) is scored on its answer pair."
    default_length = 3
    min_length = 2
    max_length = 4

    def __init__(self):
        memory = [l + d for l in TOY_LETTERS for d in TOY_DIGITS]
        self.vocab = Vocab(memory + [m + "?" for m in memory])

    def _sample(self, rng: np.random.Generator, length: int) -> dict:
        """Memory: `length` pairs with distinct letters and digits; queries mix two different items."""
        letters = [int(x) for x in rng.permutation(len(TOY_LETTERS))[:length]]
        digits = [int(x) for x in rng.permutation(len(TOY_DIGITS))[:length]]
        queries = []
        for _ in range(length):
            i, j = (int(x) for x in rng.permutation(length)[:2])  # two different memory items
            queries.append((letters[i], digits[j]))
        return {"memory": list(zip(letters, digits)), "queries": queries}

    def _format(self, sample: dict, arch: str, length: int) -> Formatted:
        """Tokens `m1..mn q1?..qn?`; each query is scored on its answer pair."""
        memory, queries = sample["memory"], sample["queries"]
        digit_of = {l: d for l, d in memory}
        letter_of = {d: l for l, d in memory}
        tokens = [TOY_LETTERS[l] + TOY_DIGITS[d] for l, d in memory]
        tokens += [TOY_LETTERS[l] + TOY_DIGITS[d] + "?" for l, d in queries]
        targets: list = [None] * length
        targets += [TOY_LETTERS[letter_of[d]] + TOY_DIGITS[digit_of[l]] for l, d in queries]
        return tokens, targets, None, {"memory": memory, "queries": queries}

    def label(self, tokens: list[str], arch: str, tgt: Optional[list[str]] = None) -> list[int]:
        """Targets for typed input: memory items first, then queries whose letter and digit occur in memory."""
        self.check_arch(arch)
        tokens = self._tokens(tokens)
        memory = [t for t in tokens if not t.endswith("?")]
        n = len(memory)
        if tokens[:n] != memory:
            raise ValueError("memory items (like a3) must all come before the queries (like b1?)")
        digit_of = {t[0]: t[1] for t in memory}
        letter_of = {t[1]: t[0] for t in memory}
        if len(digit_of) != n or len(letter_of) != n:
            raise ValueError("memory items must use each letter and each digit at most once")
        out = [IGNORE] * len(tokens)
        for p in range(n, len(tokens)):
            letter, digit = tokens[p][0], tokens[p][1]
            if letter not in digit_of or digit not in letter_of:
                raise ValueError(f"query {tokens[p]} asks about a letter or digit that is not in memory")
            out[p] = self.vocab.id(letter_of[digit] + digit_of[letter])
        return out


def toy_embedding(vocab: Vocab) -> torch.Tensor:
    """The fixed token embedding `[vocab d_model]`: one-hot letter in dims 0-3, one-hot digit in 4-7, a role bit.

    Letters and digits live in two orthogonal subspaces by construction; specials are all zeros.
    """
    e = torch.zeros(len(vocab), TOY_D_MODEL)
    for i, tok in enumerate(vocab.tokens):
        if tok.startswith("<"):
            continue
        e[i, TOY_LETTERS.index(tok[0])] = 1.0
        e[i, 4 + TOY_DIGITS.index(tok[1])] = 1.0
        e[i, 8 if tok.endswith("?") else 9] = 1.0
    return e


def toy_config(task: TwoLookupTask) -> TransformerConfig:
    """One layer, two heads of width 4, no positions and no LayerNorm: nothing but the two lookups."""
    return TransformerConfig(arch="decoder", vocab_size=len(task.vocab), d_model=TOY_D_MODEL, n_heads=2,
                             d_head=TOY_D_HEAD, n_layers=1, d_mlp=32, max_len=2 * task.max_length,
                             pos="none", norm="none")


def toy_model(task: TwoLookupTask, seed: int = 0) -> Transformer:
    """A fresh toy model (seeded, without touching the global RNG) whose embedding is fixed and frozen."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Transformer(toy_config(task))
    with torch.no_grad():
        model.stack.W_E.weight.copy_(toy_embedding(task.vocab))
    model.stack.W_E.weight.requires_grad_(False)  # the inputs' subspaces stay put while the heads learn
    return model


def toy_trainer(seed: int = TOY_SEED, steps: int = TOY_STEPS, lr: float = TOY_LR, batch_size: int = 64):
    """A core.train.Trainer for the toy (the page runs it in chunks to show progress)."""
    from core.train import Trainer  # imported here: training is only needed by this toy

    task = TwoLookupTask()
    return Trainer(toy_config(task), task, steps=steps, batch_size=batch_size, lr=lr, seed=seed,
                   model=toy_model(task, seed), warmup=20, log_every=25)


few_threads = one_thread  # the toy's 16-wide matrices run fastest on one thread (core.device.one_thread)


@dataclass
class ToyReport:
    """Where each toy head looks and which subspace its QK form lives in."""

    accuracy: float
    letter_attention: np.ndarray  # [head] mean weight from a query to the memory item sharing its letter
    digit_attention: np.ndarray  # [head] ... sharing its digit
    block_share: np.ndarray  # [head 3] share of ||W_Q W_K^T||^2 in letter x letter, digit x digit, the rest
    qk_forms: np.ndarray  # [head feature feature] W_Q W_K^T on the 10 input features
    example_tokens: list[str] = field(default_factory=list)
    example_pattern: Optional[np.ndarray] = None  # [head q k]

    @property
    def roles(self) -> list[str]:
        """'letters', 'digits' or 'mixed' per head: which lookup the head does.

        A head does a lookup when at least half its query attention lands on that item and the
        other item gets at most a quarter of what this one gets ((L - D) / (L + D) >= 0.6).
        """
        out = []
        for lt, dg in zip(self.letter_attention, self.digit_attention):
            spec = (lt - dg) / max(lt + dg, 1e-12)
            out.append("letters" if spec >= 0.6 and lt >= 0.5 else "digits" if spec <= -0.6 and dg >= 0.5 else "mixed")
        return out

    @property
    def separated(self) -> bool:
        """True when one head does the letter lookup and the other the digit lookup."""
        return sorted(self.roles) == ["digits", "letters"]


def toy_report(model: Transformer, n: int = 256, seed: int = 12345, example_seed: int = 7) -> ToyReport:
    """Measure the toy model on fresh examples: accuracy, match attention per head, QK block shares."""
    task = TwoLookupTask()
    batch = task.batch(n, "decoder", seed=seed)
    logits, cache = model.run_with_cache(batch.tokens, ["blocks.0.attn.hook_pattern"])
    pat = cache["blocks.0.attn.hook_pattern"].numpy()  # [batch head q k]
    n_mem = task.default_length
    letter, digit = np.zeros(pat.shape[1]), np.zeros(pat.shape[1])
    count = 0
    for b, meta in enumerate(batch.meta):
        mem_letters = [l for l, _ in meta["memory"]]
        mem_digits = [d for _, d in meta["memory"]]
        for j, (l, d) in enumerate(meta["queries"]):
            qpos = n_mem + j
            letter += pat[b, :, qpos, mem_letters.index(l)]
            digit += pat[b, :, qpos, mem_digits.index(d)]
            count += 1
    w = model.head_weights(0)
    feats = len(TOY_FEATURES)
    forms = np.stack([(w["W_Q"][h] @ w["W_K"][h].T)[:feats, :feats].double().numpy()
                      for h in range(model.cfg.n_heads)])  # [head feature feature]
    total = (forms ** 2).sum(axis=(1, 2))
    ll = (forms[:, LETTER_DIMS, LETTER_DIMS] ** 2).sum(axis=(1, 2))
    dd = (forms[:, DIGIT_DIMS, DIGIT_DIMS] ** 2).sum(axis=(1, 2))
    share = np.stack([ll, dd, total - ll - dd], axis=1) / np.maximum(total, 1e-30)[:, None]  # [head 3]
    example = task.batch(1, "decoder", seed=example_seed)
    _, ex_cache = model.run_with_cache(example.tokens, ["blocks.0.attn.hook_pattern"])
    return ToyReport(task.accuracy(logits, batch), letter / count, digit / count, share, forms,
                     task.vocab.decode(example.tokens[0]), ex_cache["blocks.0.attn.hook_pattern"][0].numpy())
