"""Free text for a real checkpoint: the task-shaped object the pages read, built on the model's own tokenizer.

The toy tasks (core/tasks.py) have a vocabulary of a few dozen whitespace-free tokens and a rule that
gives every position a right answer. A checkpoint opened from a folder (core/pretrained.py) reads any
text through its tokenizer instead, and the only right answer a language model has on a student's text
is the text itself: a decoder is scored on each next token, an encoder on nothing (it fills in [MASK]
tokens, whose hidden words nobody typed). `TextVocab` and `TextTask` give the pages what they read
from a Task (`vocab.decode`, `vocab.tokens`, `title`, `scored_for`, `example`), so most views work
unchanged, and `batch` gives real sentences for what is measured over many inputs. What needs a toy
task's own rule (a trained twin, a task's accuracy curve) raises `NeedsToyTask`, which a page turns into
one sentence.
"""

from __future__ import annotations

import functools
from typing import Sequence

import numpy as np
import torch

from core.pretrained import Tokenizer
from core.tasks import IGNORE, Batch, Task

# Sentences a student can start from. The first and the two "bank" lines are the source texts' own
# examples (what "it" refers to; one word, two meanings); the last repeats itself, so an induction head
# has something to copy.
EXAMPLES = (
    "The animal didn't cross the street because it was too tired.",
    "I sat on the bank of the river and watched the water.",
    "I paid the money into my account at the bank.",
    "The keys to the cabinet are on the table.",
    "Alice gave the book to Bob because he asked for it.",
    "one two three four five one two three four five",
    "The teacher wrote the answer on the board, and the students copied it.",
    "When the rain stopped, the children ran outside to play in the park.",
    "A small dog barked at the postman every morning at eight.",
    "She opened the window because the room was too warm.",
    "The first train leaves at six and the last one at midnight.",
    "Water boils at one hundred degrees at sea level.",
    "He read the letter twice before he put it back in the drawer.",
    "The cat that the dog chased climbed up the old tree.",
    "We planted tomatoes, beans and potatoes in the garden this spring.",
    "The museum was closed on Monday, so we went on Tuesday instead.",
)
TEXT_TASK = "text"  # meta["task"] of every checkpoint opened from a folder


class NeedsToyTask(ValueError):
    """A panel asked a real checkpoint for what only a toy task has (a sampler, a rule, an accuracy)."""


class TextVocab:
    """A tokenizer seen as a Vocab: ids <-> the labels a page shows (GPT-2's "Ġthe" as "␣the").

    Labels are for reading, not for typing: text goes in through `encode(text)`. Labels are not always
    unique (two byte pieces may print alike), so `id(label)` gives the first id that shows it.
    """

    def __init__(self, tokenizer: Tokenizer, size: int):
        self.tokenizer = tokenizer
        self.size = int(size)  # the model's vocabulary (may exceed the tokenizer's: padded embeddings)
        self.bos_id = _first(tokenizer.bos_id, tokenizer.cls_id, tokenizer.eos_id, 0)
        self.eos_id = _first(tokenizer.eos_id, tokenizer.sep_id, self.bos_id)
        self.pad_id = _first(tokenizer.pad_id, self.eos_id)
        self.sep_id = _first(tokenizer.sep_id, self.eos_id)
        self.mask_id = tokenizer.mask_id

    def __len__(self) -> int:
        return self.size

    def __contains__(self, token: object) -> bool:
        return isinstance(token, str) and token in self._index

    def __repr__(self) -> str:
        return f"<TextVocab of {self.size} ids>"

    @functools.cached_property
    def tokens(self) -> list[str]:
        """Every id's label, in id order (ids the tokenizer does not know show as <id>)."""
        known = min(self.size, self.tokenizer.vocab_size)
        return [self.tokenizer.labels([i])[0] for i in range(known)] + [f"<{i}>" for i in range(known, self.size)]

    @functools.cached_property
    def _index(self) -> dict[str, int]:
        index: dict[str, int] = {}
        for i, label in enumerate(self.tokens):
            index.setdefault(label, i)
        return index

    def id(self, token: str) -> int:
        """The first id whose label is `token`, or that a text's `labels` showed as `token` (ValueError if none)."""
        if token in self._index:
            return self._index[token]
        if token in self._joined:
            return self._joined[token]
        raise ValueError(f"no token of this model shows as {token!r}")

    @functools.cached_property
    def _joined(self) -> dict[str, int]:
        return {}

    def labels(self, ids: Sequence[int] | torch.Tensor | np.ndarray) -> list[str]:
        """The labels of a text's ids, read together: byte pieces of one character show that character
        (`é…`, `…é`; core.pretrained.Tokenizer.labels). `id` maps each such label back to its piece."""
        ids = [int(i) for i in (ids.tolist() if isinstance(ids, (torch.Tensor, np.ndarray)) else ids)]
        known = [i for i in ids if 0 <= i < min(self.size, self.tokenizer.vocab_size)]
        if len(known) < len(ids):
            return self.decode(ids)
        labels = self.tokenizer.labels(ids)
        for i, label in zip(ids, labels):
            if label not in self._index:
                self._joined.setdefault(label, i)
        return labels

    def encode(self, text_or_tokens: str | Sequence[str]) -> list[int]:
        """Text through the tokenizer; a list of labels through `id`."""
        if isinstance(text_or_tokens, str):
            return self.tokenizer.encode(text_or_tokens)
        return [self.id(token) for token in text_or_tokens]

    def decode(self, ids: Sequence[int] | torch.Tensor | np.ndarray) -> list[str]:
        """The label of each id."""
        ids = ids.tolist() if isinstance(ids, (torch.Tensor, np.ndarray)) else list(ids)
        return [self.tokens[int(i)] if 0 <= int(i) < self.size else f"<{int(i)}>" for i in ids]


class TextTask(Task):
    """A checkpoint's "task": any text, scored on the next token (decoders) or on masked words (encoders).

    `batch` draws from EXAMPLES, real sentences, so a panel that measures something over many inputs
    (attention decay, accuracy) measures it on text: a decoder predicts each next token, an encoder the
    words hidden behind [MASK] (about 15% of each sentence, as BERT was trained)."""

    name = TEXT_TASK
    title = "Your own text"
    description = "Any text, read by the model's own tokenizer."
    metric = "token"
    archs = ("encoder", "decoder")
    scored = "Each position is scored on the next token of the text."
    default_length = 16  # tokens of each example in a batch (longer ones are cut, shorter ones padded)
    min_length = 2
    MASK_SHARE = 0.15

    def __init__(self, tokenizer: Tokenizer, vocab_size: int, arch: str, context: int = 1024):
        self.vocab = TextVocab(tokenizer, vocab_size)
        self.arch = arch
        self.max_length = max(self.min_length, int(context))

    def __repr__(self) -> str:
        return f"<TextTask for a {self.arch}, vocab={len(self.vocab)}>"

    def scored_for(self, arch: str) -> str:
        if arch == "decoder":
            return "Each position is scored on the next token of your own text."
        return ("Nothing is scored: an encoder predicts the word behind each [MASK], and the hidden word is not "
                "in your text.")

    def example_text(self, seed: int) -> str:
        """Example sentence number `seed` (cycling through EXAMPLES)."""
        return EXAMPLES[int(seed) % len(EXAMPLES)]

    def targets(self, ids: Sequence[int], arch: str) -> list[int] | None:
        """The right answer at each position: the next token of the text for a decoder (IGNORE at the
        last position), None for an encoder (no right answer is known)."""
        ids = list(ids)
        if arch != "decoder":
            return None
        return ids[1:] + [IGNORE]

    def label(self, tokens, arch: str, tgt=None) -> list[int]:
        """Targets from labels (what a toy task's `label` does); a decoder's text is its own answer."""
        targets = self.targets(self.vocab.encode(list(tokens)), arch)
        if targets is None:
            raise NeedsToyTask(self.scored_for(arch))
        return targets

    def batch(self, n: int, arch: str, seed: int, length: int | None = None) -> Batch:
        """n example sentences (starting at a seeded one), each cut or right-padded to `length` tokens.

        Decoder: targets are the next tokens (IGNORE on padding and the last position). Encoder: about
        MASK_SHARE of each sentence's ordinary tokens (at least one) become [MASK]; the targets are the words
        they hid, IGNORE elsewhere."""
        self.check_arch(arch)
        length = self.check_length(length)
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise ValueError(f"n must be a positive int, got {n!r}")
        rng = np.random.default_rng(int(seed))
        start = int(rng.integers(len(EXAMPLES)))
        rows, targets, metas = [], [], []
        for i in range(n):
            ids = self.vocab.encode(EXAMPLES[(start + i) % len(EXAMPLES)])[:length]
            pad = [self.vocab.pad_id] * (length - len(ids))
            if arch == "decoder":
                rows.append(ids + pad)
                targets.append(ids[1:] + [IGNORE] * (len(pad) + 1))
            else:
                masked, hidden = self._mask(ids, rng)
                rows.append(masked + pad)
                targets.append(hidden + [IGNORE] * len(pad))
            metas.append({"example": (start + i) % len(EXAMPLES), "length": len(ids)})
        tokens = torch.tensor(rows, dtype=torch.long)  # [batch, pos]
        return Batch(tokens=tokens, targets=torch.tensor(targets, dtype=torch.long), tgt=None, meta=metas)

    def _mask(self, ids: list[int], rng: np.random.Generator) -> tuple[list[int], list[int]]:
        """(ids with some ordinary tokens replaced by [MASK], the hidden ids there and IGNORE elsewhere)."""
        mask_id = self.vocab.mask_id
        if mask_id is None:
            raise NeedsToyTask("this encoder's tokenizer has no [MASK] token, so it cannot be scored on text")
        special = self.vocab.tokenizer.special_ids.values()
        ordinary = [p for p, i in enumerate(ids) if i not in special]
        if not ordinary:
            return list(ids), [IGNORE] * len(ids)
        k = max(1, round(self.MASK_SHARE * len(ordinary)))
        chosen = set(rng.choice(ordinary, size=min(k, len(ordinary)), replace=False).tolist())
        masked = [mask_id if p in chosen else i for p, i in enumerate(ids)]
        hidden = [i if p in chosen else IGNORE for p, i in enumerate(ids)]
        return masked, hidden

    def example(self, arch: str, seed: int, length=None) -> list[str]:
        return self.vocab.decode(self.vocab.encode(self.example_text(seed)))


def _first(*values):
    return next(v for v in values if v is not None)
