"""Sequence labelling with an encoder: the `tags` task's model tags every word NOUN, VERB or OTHER.

What the source texts call an "understanding" task (tagging, named-entity recognition) made concrete: one
output per input token, read at that token's own position. `tag_accuracy` scores a model on fresh sentences,
overall and on the words only context can tag (fish, watch, saw); `tag_sentence` tags one typed sentence.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from core.model import Transformer
from core.tasks import IGNORE, TagsTask


@dataclass
class TagScore:
    """Token accuracy on fresh sentences, over every word and over the ambiguous words alone."""

    n_sentences: int
    words: int
    accuracy: float
    ambiguous_words: int
    ambiguous_accuracy: float


def tag_accuracy(model: Transformer, task: TagsTask, n: int = 512, seed: int = 99, length: int = 10) -> TagScore:
    """Score the model on n fresh sentences of `length` words (the task's local sampler, seeded)."""
    batch = task.batch(n, "encoder", seed=seed, length=length)
    with torch.no_grad():
        preds = model(batch.tokens.to(model.device)).argmax(-1).cpu()  # [n pos]
    right = preds == batch.targets  # [n pos]
    scored = batch.targets != IGNORE
    ambiguous = torch.zeros_like(scored)
    for row, meta in enumerate(batch.meta):
        ambiguous[row, meta["ambiguous"]] = True
    return TagScore(n, int(scored.sum()), float(right[scored].float().mean()), int(ambiguous.sum()),
                    float(right[ambiguous].float().mean()) if ambiguous.any() else float("nan"))


def tag_sentence(model: Transformer, task: TagsTask, words: list[str]) -> list[dict]:
    """One row per word: the word, its tag by the grammar, the model's tag and whether they agree.
    ValueError (with the reason) for a sentence the grammar cannot tag."""
    tokens = ["<bos>", *words]
    gold = task.label(tokens, "encoder")
    ids = torch.tensor([task.vocab.encode(tokens)], dtype=torch.long, device=model.device)  # [1 pos]
    with torch.no_grad():
        preds = model(ids)[0].argmax(-1).cpu().tolist()  # [pos]
    return [{"word": w, "right tag": task.vocab.tokens[gold[i + 1]], "model's tag": task.vocab.tokens[preds[i + 1]],
             "agree": gold[i + 1] == preds[i + 1]} for i, w in enumerate(words)]
