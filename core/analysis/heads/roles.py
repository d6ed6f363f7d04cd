"""How much each head behaves like a known kind of head: previous-token, induction, subject, sink.

Scores are measured on a probe of repeated random tokens (`[<bos>] r1..rk r1..rk`, where an
induction head can find each token's earlier copy) and, for the subject score, on the agreement
task's own sentences; each comes with the score an evenly spread head would get (chance). The
probe (`probe_inputs`) is shared with core.analysis.heads.redundancy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np
import torch

from core.analysis.attention import AttentionKind
from core.model import Transformer
from core.tasks import Task, Vocab

ROLES = ("previous token", "induction", "subject", "first-token sink")


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


def random_text_probe(vocab, arch: str, max_len: int, n: int = 8, k: int = 50, seed: int = 0) -> torch.Tensor:
    """The repeated random-token probe for a model that reads text (a TextVocab), as the induction-head literature
    draws it: each of n rows is the begin token, k distinct ids from the whole vocabulary (special tokens left
    out), the same ids again, and an encoder's end token. `[n pos]`; k shrinks to fit the context."""
    special = set(vocab.tokenizer.special_ids.values())
    known = min(len(vocab), vocab.tokenizer.vocab_size)
    pool = np.setdiff1d(np.arange(known), np.fromiter(special, dtype=np.int64, count=len(special)))
    end = [vocab.sep_id] if arch == "encoder" and vocab.tokenizer.sep_id is not None else []
    k = min(k, (max_len - 1 - len(end)) // 2, len(pool))
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(n):
        r = rng.choice(pool, size=k, replace=False).tolist()
        rows.append([vocab.bos_id] + r + r + end)
    return torch.tensor(rows, dtype=torch.long)  # [n pos]


def repeated_text_probe(vocab, arch: str, max_len: int, text: str) -> torch.Tensor:
    """A sentence read twice, `[1 pos]`: begin token, its pieces, the same pieces again (and an encoder's end
    token). The second reading is where an induction head finds each piece's earlier copy on real text. The
    sentence is cut so that both copies fit the context."""
    end = [vocab.sep_id] if arch == "encoder" and vocab.tokenizer.sep_id is not None else []
    special = set(vocab.tokenizer.special_ids.values())
    ids = [i for i in vocab.encode(text) if i not in special][: (max_len - 1 - len(end)) // 2]  # pieces only
    if len(ids) < 2:
        raise ValueError("the repeated-sentence probe needs a sentence of at least 2 tokens")
    return torch.tensor([[vocab.bos_id] + ids + ids + end], dtype=torch.long)  # [1 pos]


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
                n: int = 32, seed: int = 0, src_vocab: Optional[Vocab] = None,
                probe: Optional[tuple] = None) -> RoleScores:
    """Previous-token, induction, subject and first-token-sink scores of every head of one kind.

    The first, second and fourth are measured on repeated random tokens (`repeated_probe`, or `probe`: a
    (tokens, tgt, query-side tokens) triple such as `probe_inputs` returns, for a caller that draws its own);
    the subject score on the agreement task's own sentences, only when `task` is agreement.
    """
    if kind.module == "cross_attn":
        raise ValueError("role scores compare a sequence with itself; cross-attention reads another sequence")
    n_l, n_h = model.cfg.n_layers, model.cfg.n_heads
    tokens, tgt, side = probe if probe is not None else probe_inputs(model, vocab, kind, n, seed, src_vocab)
    n = side.shape[0]
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
