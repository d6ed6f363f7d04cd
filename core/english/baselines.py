"""Count-based baselines of the same tokenizer: what the Transformers must beat to have learned anything.

Unigram: P(w) = (c(w) + 1) / (N + V), add-one smoothing over the vocabulary.
Bigram, interpolated by Witten-Bell (no parameter to tune):
    P(w | v) = (c(v, w) + T(v) P_uni(w)) / (c(v) + T(v)),
with T(v) the number of different tokens seen after v; a v never seen gives P_uni.
Both are counted on the decoder's training stream and scored on the held-out targets the decoder is
scored on. The encoder's fill-in baseline scores a candidate w at a masked slot with its neighbours l, r
by P(w | l) * P(r | w), normalised over the ordinary tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Ngram:
    """Unigram and bigram probabilities of one vocabulary."""

    unigram: torch.Tensor  # [vocab]
    bigram: torch.Tensor  # [vocab vocab], row v: P(. | v)


def fit(text: torch.Tensor, vocab_size: int) -> Ngram:
    """Count a token stream `[n]`: add-one unigram, Witten-Bell bigram."""
    text = text.long()
    unigram = (torch.bincount(text, minlength=vocab_size).double() + 1) / (text.numel() + vocab_size)  # [vocab]
    pairs = text[:-1] * vocab_size + text[1:]  # [n-1]
    counts = torch.bincount(pairs, minlength=vocab_size * vocab_size).reshape(vocab_size, vocab_size)  # [v w]
    after = counts.sum(dim=1, keepdim=True).double()  # [vocab 1], c(v)
    types = (counts > 0).sum(dim=1, keepdim=True).double()  # [vocab 1], T(v)
    bigram = (counts.double() + types * unigram[None, :]) / (after + types).clamp_min(1e-300)  # [v w]
    unseen = (after + types).squeeze(1) == 0
    bigram[unseen] = unigram
    return Ngram(unigram.float(), bigram.float())


def perplexities(model: Ngram, text: torch.Tensor) -> dict:
    """Held-out perplexity of each baseline on every next-token target of `text` `[n]` (n - 1 targets)."""
    text = text.long()
    prev, nxt = text[:-1], text[1:]
    uni = -model.unigram.double()[nxt].log().mean()
    bi = -model.bigram[prev, nxt].double().log().mean()
    return {"unigram": math.exp(float(uni)), "bigram": math.exp(float(bi)), "targets": int(nxt.numel())}


def fill_scores(model: Ngram, tokens: torch.Tensor, slots: torch.Tensor, mask_id: int, n_special: int,
                chunk: int = 1024) -> torch.Tensor:
    """log q(w) at each masked slot, q(w) proportional to P(w | left) P(right | w) over ordinary tokens.

    tokens `[batch pos]` (the masked input); slots `[m 2]` (row, position) of the masked tokens. A
    neighbour that is special or masked itself tells nothing: P(w | left) becomes P(w), P(right | w) 1.
    Returns `[m vocab]` (minus infinity on the special ids).
    """
    vocab = model.unigram.numel()
    out = []
    for i in range(0, slots.shape[0], chunk):
        rows, cols = slots[i:i + chunk, 0], slots[i:i + chunk, 1]
        left = tokens[rows, cols - 1]  # [m], position 0 is [CLS], so cols - 1 >= 0
        right = tokens[rows, (cols + 1).clamp_max(tokens.shape[1] - 1)]  # [m]
        left_ok = (left >= n_special) & (left != mask_id) & (cols > 0)
        right_ok = (right >= n_special) & (right != mask_id) & (cols + 1 < tokens.shape[1])
        before = torch.where(left_ok[:, None], model.bigram[left], model.unigram[None, :])  # [m vocab]
        after = torch.where(right_ok[:, None], model.bigram[:, right].T, torch.ones(1, vocab))  # [m vocab]
        score = before.double().log() + after.double().log()  # [m vocab]
        score[:, :n_special] = -math.inf
        out.append(torch.log_softmax(score, dim=1).float())
    return torch.cat(out) if out else torch.empty(0, vocab)


def fill_metrics(log_q: torch.Tensor, answers: torch.Tensor) -> dict:
    """Accuracy (the top candidate is the hidden token) and perplexity of fill-in scores `[m vocab]`."""
    if answers.numel() == 0:
        return {"accuracy": math.nan, "perplexity": math.nan, "slots": 0}
    accuracy = float((log_q.argmax(dim=1) == answers).double().mean())
    nll = -log_q[torch.arange(answers.numel()), answers].double().mean()
    return {"accuracy": accuracy, "perplexity": math.exp(float(nll)), "slots": int(answers.numel())}
