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
from typing import Sequence

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
