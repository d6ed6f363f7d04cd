"""Word senses and coreference on a model of English: "river bank" against "money bank", and "it" -> "animal".

The principles text says a token's vector is rebuilt from its context, so "bank" beside "river" and "bank"
beside "money" end up in different places, and that some head resolves "it" to "animal". Here both are
measured on a model of English (the bundled English models, or any checkpoint opened with its tokenizer):

1. `compare_senses`: the vector of "bank" at every layer in four sentences, two per sense; the mean cosine
   between uses of different senses beside the mean cosine between uses of the same sense (the control), and
   which tokens "bank" attends to;
2. `coreference_head`: the head whose "it" row puts the most attention on "animal", with the same head's
   mass on "street" and on "animal" in the sentence where "it" is the street.

A word split into pieces is read at its LAST piece (the only one a decoder has read the whole word at).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from core.model import Transformer

# sense -> two sentences that use "bank" in it. Chosen so that, in the bundled English models' tokenizer, "bank"
# sits at the same token position in all four: the position's own vector then cannot tell the uses apart,
# and "bank" comes last, so a decoder has read the whole context when it reaches it.
SENSES = {
    "river": ("He fished from the river bank.", "She sat by the river bank."),
    "money": ("The loan was paid to the bank.", "He put his cash in the bank."),
}
WORD = "bank"
COREF = "The animal didn't cross the street because it was too tired."
COREF_OTHER = "The animal didn't cross the street because it was too wide."  # here "it" is the street


def word_positions(tokenizer, ids: Sequence[int], text: str, word: str) -> list[int]:
    """The token positions that spell the first whole-word occurrence of `word` in `text` (the tokenizer's own ids).

    Found by decoding growing prefixes of `ids`: a token belongs to the word when it adds characters inside the
    word's character span. Raises ValueError when the word is not in the text."""
    start = _word_start(text, word)
    end = start + len(word)
    out, before = [], 0
    for i in range(len(ids)):
        after = len(tokenizer.decode(list(ids[:i + 1])))
        if after > before and before < end and after > start:
            out.append(i)
        before = after
    if not out:
        raise ValueError(f"{word!r} could not be located among the tokens of {text!r}")
    return out


def _word_start(text: str, word: str) -> int:
    """The character index of the first occurrence of `word` as a whole word (case-insensitive)."""
    lower, target = text.lower(), word.lower()
    at = lower.find(target)
    while at >= 0:
        left_ok = at == 0 or not lower[at - 1].isalnum()
        right = at + len(target)
        if left_ok and (right == len(lower) or not lower[right].isalnum()):
            return at
        at = lower.find(target, at + 1)
    raise ValueError(f"{word!r} is not a word of {text!r}")


def _run(model: Transformer, ids: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """(states [layer+1 pos d_model]: the stream after the embedding and after every block,
    patterns [layer head q k]) of one input."""
    n_layers = model.cfg.n_layers
    names = ["blocks.0.hook_resid_pre"] + [f"blocks.{i}.hook_resid_post" for i in range(n_layers)]
    names += [f"blocks.{i}.attn.hook_pattern" for i in range(n_layers)]
    tokens = torch.tensor([list(ids)], dtype=torch.long, device=model.device)  # [1 pos]
    _, cache = model.run_with_cache(tokens, names=names)
    states = torch.stack([cache[n][0] for n in names[:n_layers + 1]]).double().cpu().numpy()  # [layer+1 pos d_model]
    patterns = torch.stack([cache[f"blocks.{i}.attn.hook_pattern"][0]
                            for i in range(n_layers)]).double().cpu().numpy()  # [layer head q k]
    return states, patterns


def layer_labels(n_layers: int) -> list[str]:
    """'embed', 'L0', 'L1', ...: the stream after the embedding and after each block."""
    return ["embed"] + [f"L{i}" for i in range(n_layers)]


@dataclass
class SenseComparison:
    """"bank" in two senses, two sentences each, at every layer."""

    layers: list[str]
    across: np.ndarray  # [layer] mean cosine between a river use and a money use (4 pairs)
    within: np.ndarray  # [layer] mean cosine between the two uses of the same sense (2 pairs)
    sentences: list[str]
    tokens: list[list[str]]  # each sentence's token labels
    at: list[int]  # each sentence's position of "bank" (its last piece)
    rows: list[np.ndarray]  # each sentence's [layer key] attention of "bank", the mean over heads

    @property
    def gap(self) -> np.ndarray:
        """[layer] within - across: above 0 where the same sense is closer than the other sense."""
        return self.within - self.across


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    """The cosine of two vectors, in float64."""
    return float(F.cosine_similarity(torch.from_numpy(a), torch.from_numpy(b), dim=0))


def compare_senses(model: Transformer, tokenizer) -> SenseComparison:
    """The cosine of "bank" across and within senses at every layer, and where "bank" looks (see the module doc)."""
    sentences = [s for pair in SENSES.values() for s in pair]  # river, river, money, money
    vectors, rows, labels, at = [], [], [], []
    for text in sentences:
        ids = tokenizer.encode(text)
        pos = word_positions(tokenizer, ids, text, WORD)[-1]
        states, patterns = _run(model, ids)
        vectors.append(states[:, pos])  # [layer+1 d_model]
        rows.append(patterns[:, :, pos].mean(axis=1))  # [layer k]
        labels.append(tokenizer.labels(ids))
        at.append(pos)
    n = vectors[0].shape[0]
    within = np.array([(_cosine(vectors[0][i], vectors[1][i]) + _cosine(vectors[2][i], vectors[3][i])) / 2
                       for i in range(n)])
    across = np.array([np.mean([_cosine(vectors[a][i], vectors[b][i]) for a in (0, 1) for b in (2, 3)])
                       for i in range(n)])
    return SenseComparison(layer_labels(model.cfg.n_layers), across, within, sentences, labels, at, rows)


@dataclass
class CorefHead:
    """The head whose "it" row puts the most weight on "animal"."""

    tokens: list[str]
    it: int  # the position of "it"
    animal: list[int]  # the positions of "animal"'s pieces
    street: list[int]
    mass: np.ndarray  # [layer head] attention from "it" to "animal" (its pieces summed)
    street_mass: np.ndarray  # [layer head] the same to "street"
    other_mass: np.ndarray  # [layer head] "it" -> "animal" in COREF_OTHER, where "it" is the street
    layer: int
    head: int
    row: np.ndarray  # [key] the chosen head's "it" row
    uniform: float  # the mass on "animal" of a row spread evenly over every key "it" may see

    @property
    def best(self) -> float:
        return float(self.mass[self.layer, self.head])


def coreference_head(model: Transformer, tokenizer) -> CorefHead:
    """Find the head with the most attention from "it" to "animal" in COREF, and measure it (see the module doc)."""
    ids = tokenizer.encode(COREF)
    it = word_positions(tokenizer, ids, COREF, "it")[-1]
    animal = word_positions(tokenizer, ids, COREF, "animal")
    street = word_positions(tokenizer, ids, COREF, "street")
    _, patterns = _run(model, ids)
    rows = patterns[:, :, it]  # [layer head k]
    mass = rows[:, :, animal].sum(-1)  # [layer head]
    street_mass = rows[:, :, street].sum(-1)
    other_ids = tokenizer.encode(COREF_OTHER)
    other_it = word_positions(tokenizer, other_ids, COREF_OTHER, "it")[-1]
    other_animal = word_positions(tokenizer, other_ids, COREF_OTHER, "animal")
    other_mass = _run(model, other_ids)[1][:, :, other_it][:, :, other_animal].sum(-1)
    layer, head = (int(v) for v in np.unravel_index(int(np.argmax(mass)), mass.shape))
    visible = it + 1 if model.cfg.arch == "decoder" else len(ids)
    return CorefHead(tokenizer.labels(ids), it, animal, street, mass, street_mass, other_mass, layer, head,
                     rows[layer, head].copy(), len(animal) / visible)


SEPARATED = 2.0  # different-sense distance over same-sense distance at the top layer that counts as separated
FOUND = 0.4  # attention mass that counts as a head found (the English models' README uses the same bar)


def senses_sentence(c: SenseComparison, model_id: str) -> str:
    """What the comparison shows, with its numbers, saying plainly when the effect is weak."""
    near, far = 1.0 - c.within[-1], 1.0 - c.across[-1]
    ratio = far / near if near > 0 else float("inf")
    numbers = (f"at the top of {model_id} ({c.layers[-1]}), two uses of 'bank' in different senses are {far:.3g} "
               f"apart (1 − cosine) and two uses in the same sense {near:.3g}: a ratio of {ratio:.2f}")
    if ratio >= SEPARATED:
        return f"The senses separate: {numbers}, at least the {SEPARATED:g}× this panel asks for."
    if ratio > 1:
        return (f"The effect is weak: {numbers}. The same sense is closer, but by less than the {SEPARATED:g}× "
                "this panel asks for; a model this small, trained this briefly, mostly keeps 'bank' one vector.")
    return (f"No separation: {numbers}. The same sense is not closer than the other sense; this model does not "
            "tell the two banks apart.")


def coref_sentence(h: CorefHead, model_id: str, arch: str) -> str:
    """What the chosen head does, with its numbers, saying plainly when it is no coreference head."""
    best, street = h.best, float(h.street_mass[h.layer, h.head])
    other = float(h.other_mass[h.layer, h.head])
    numbers = (f"the head of {model_id} whose 'it' looks most at 'animal' is L{h.layer}H{h.head}, with {best:.2f} of "
               f"its weight (an even spread would give {h.uniform:.2f}); it gives 'street' {street:.2f}, and in "
               f"\"...because it was too wide\", where 'it' is the street, it still gives 'animal' {other:.2f}")
    if best >= FOUND and other < best / 2:
        return f"A coreference head: {numbers}."
    tail = (" A decoder cannot do better here: 'it' comes before 'tired' or 'wide', the word that decides what it "
            "refers to, so its row is the same in both sentences." if arch == "decoder" else "")
    return (f"No coreference head: {numbers}. That is below the {FOUND:g} this panel asks for, or unchanged when "
            f"the referent changes, so this head does not resolve 'it'.{tail}")
