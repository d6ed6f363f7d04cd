"""One head read through the token embeddings: its QK and OV circuits, and a 2-D picture of it.

The QK circuit is the score a query token gives a key token through that head alone; the OV
circuit is what the head adds to each output logit when it attends fully to a token. Both read
only the direct path from the embeddings (weights, no forward pass). `pca_2d` projects one
head's queries and keys (taken from a run) onto shared principal axes, so the page can draw them
in one plane.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np
import torch

from core.analysis.attention import AttentionKind
from core.model import Transformer


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


# ---------------------------------------------------------------------------------------------
# The same circuits for a real vocabulary: a few tokens' rows and columns, never the V x V table


def _into(model: Transformer, kind: AttentionKind, layer: int, side: str, ids: Optional[Sequence[int]] = None
          ) -> torch.Tensor:
    """One side's ("q" or "k") token embeddings as the layer's attention sees them (as `_embeddings_into`, plus
    the stack's embedding norm where the model has one, BERT's), for `ids` or the whole vocabulary: float32."""
    with torch.no_grad():
        if kind.module == "cross_attn":
            stack = model.decoder if side == "q" else model.encoder
        else:
            stack = model.stack_for(kind.prefix)
        e = stack.W_E.weight.detach()
        e = e if ids is None else e[torch.as_tensor(list(ids), dtype=torch.long, device=e.device)]  # [n d_model]
        if model.cfg.embed_norm:
            e = stack.ln_embed(e)
        if model.cfg.norm == "pre":
            if kind.module == "cross_attn":
                e = model.decoder.blocks[layer].ln_cross(e) if side == "q" else model.encoder.ln_final(e)
            else:
                e = stack.blocks[layer].ln1(e)
        return e.float()


def product_singular_values(a: torch.Tensor, b: torch.Tensor) -> np.ndarray:
    """The singular values of a @ b.T (a `[m r]`, b `[n r]`) without forming the m x n product: with a = Q_a R_a
    and b = Q_b R_b, a b^T = Q_a (R_a R_b^T) Q_b^T, whose singular values are those of the r x r middle."""
    ra = torch.linalg.qr(a.double(), mode="r").R  # [r r]
    rb = torch.linalg.qr(b.double(), mode="r").R  # [r r]
    return torch.linalg.svdvals(ra @ rb.T).cpu().numpy()


def _padded(values: np.ndarray, rank_cap: int, n: int) -> np.ndarray:
    """Singular values of a table of min-side n whose rank is at most rank_cap: the computed ones, then the zeros
    that follow them (up to 4 of them, as singular_value_bars shows)."""
    extra = max(0, min(n, rank_cap + 4) - values.size)
    return np.concatenate([values, np.zeros(extra)])


def qk_circuit_on(model: Transformer, kind: AttentionKind, layer: int, head: int, q_ids: Sequence[int],
                  k_ids: Sequence[int], q_tokens: Sequence[str], k_tokens: Sequence[str]) -> Circuit:
    """qk_circuit on chosen tokens only (rows q_ids, columns k_ids), for a vocabulary far too large to draw whole.
    Its singular values are still those of the whole-vocabulary table, computed from its two factors."""
    w = model.head_weights(layer, kind.prefix, kind.module)
    w_q, w_k = w["W_Q"][head].float(), w["W_K"][head].float()
    scale = math.sqrt(model.cfg.d_head)
    q = _into(model, kind, layer, "q", q_ids).double() @ w_q.double()  # [n_q d_head]
    k = _into(model, kind, layer, "k", k_ids).double() @ w_k.double()  # [n_k d_head]
    table = (q @ k.T / scale).cpu().numpy()  # [n_q n_k]
    e_q = _into(model, kind, layer, "q")  # [vocab_q d_model]: GPT-2's is 154 MB, made once for both sides
    full_q = e_q @ w_q  # [vocab_q d_head]
    full_k = (e_q if kind.module != "cross_attn" else _into(model, kind, layer, "k")) @ w_k  # [vocab_k d_head]
    del e_q
    values = product_singular_values(full_q, full_k) / scale
    return Circuit(table, list(q_tokens), list(k_tokens), _padded(values, model.cfg.d_head,
                                                                   min(full_q.shape[0], full_k.shape[0])))


@dataclass
class TopOutputs:
    """For each of a few attended tokens: the output tokens whose logits the head raises most, over the whole
    vocabulary (OV circuit rows, never drawn whole)."""

    ids: np.ndarray  # [token k] output ids, strongest first
    values: np.ndarray  # [token k] their logit changes
    copies: np.ndarray  # [token] bool: the strongest output is the attended token itself


def ov_circuit_on(model: Transformer, kind: AttentionKind, layer: int, head: int, k_ids: Sequence[int],
                  out_ids: Sequence[int], k_tokens: Sequence[str], out_tokens: Sequence[str],
                  top: int = 5) -> tuple[Circuit, TopOutputs]:
    """ov_circuit on chosen tokens (rows k_ids, columns out_ids), the singular values of the whole-vocabulary
    table (from its factors), and each row's `top` strongest outputs over the whole vocabulary."""
    if not ov_available(model, kind):
        raise ValueError("the encoder's heads write into the encoder output, which the decoder reads through "
                         "cross-attention; there is no direct path to the unembedding to read")
    w = model.head_weights(layer, kind.prefix, kind.module)
    w_v, w_o = w["W_V"][head].float(), w["W_O"][head].float()  # [d_model d_head], [d_head d_model]
    w_u = model.unembed.weight.detach().float()  # [vocab d_model]
    with torch.no_grad():
        written = _into(model, kind, layer, "k", k_ids) @ w_v @ w_o  # [n d_model]
        logits = written @ w_u.T  # [n vocab]: a few rows of the V x V table
        cols = torch.as_tensor(list(out_ids), dtype=torch.long, device=logits.device)
        table = logits[:, cols].double().cpu().numpy()  # [n n_out]
        best = torch.topk(logits, min(top, logits.shape[1]), dim=-1)
        full_v = _into(model, kind, layer, "k") @ w_v  # [vocab d_head]
        out_side = w_u @ w_o.T  # [vocab d_head]: W_U W_O^T
    values = product_singular_values(full_v, out_side)
    rows = torch.as_tensor(list(k_ids), dtype=torch.long)
    tops = TopOutputs(best.indices.cpu().numpy(), best.values.double().cpu().numpy(),
                      (best.indices[:, 0].cpu() == rows).numpy())
    return Circuit(table, list(k_tokens), list(out_tokens), _padded(values, model.cfg.d_head,
                                                                    min(full_v.shape[0], out_side.shape[0]))), tops


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
# One head's queries and keys in 2-D


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
