"""The three Transformer families, named the way the field names them, for every place a model is listed.

An encoder-only model (BERT-like) reads the whole input both ways and labels it; a decoder-only
model (GPT-like) reads left to right and continues a sequence; an encoder-decoder (T5-like, the
original Transformer) reads a source with one stack and writes a target with another. The
`arch` field of TransformerConfig says which family a model belongs to.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Family:
    """One architecture family: its name, a well-known member, and the kind of task it suits."""

    arch: str  # TransformerConfig.arch
    name: str
    like: str
    attention: str  # which attention it has
    suits: str


FAMILIES: dict[str, Family] = {
    "encoder": Family("encoder", "encoder-only", "BERT",
                      "bidirectional self-attention: every token sees every other",
                      "understanding a whole input at once: classify it, tag each token, fill in a blank"),
    "decoder": Family("decoder", "decoder-only", "GPT",
                      "causal (masked) self-attention: each token sees only the past",
                      "continuing a sequence one token at a time: generation, completion, copying patterns"),
    "encoder-decoder": Family("encoder-decoder", "encoder-decoder", "T5",
                              "the original Transformer's layout: encoder self-attention, decoder masked "
                              "self-attention, and cross-attention from the decoder to the encoder",
                              "turning one sequence into another: translation, summarising, reversing or "
                              "sorting a list"),
}


def family_of(arch: str) -> Family:
    """The family of a model with this `arch` (ValueError naming the allowed ones otherwise)."""
    try:
        return FAMILIES[arch]
    except KeyError:
        raise ValueError(f"arch must be one of {list(FAMILIES)}, got {arch!r}") from None


def family_label(arch: str) -> str:
    """A short label such as 'decoder-only, GPT-like'."""
    family = family_of(arch)
    return f"{family.name}, {family.like}-like"


@dataclass(frozen=True)
class SizePreset:
    """The sizes of a famous model, for the panels that compute sizes or costs."""

    name: str
    short: str  # for a button
    n_layers: str  # as the paper states it (e.g. "6 + 6": encoder + decoder)
    d_model: int
    n_heads: int
    d_head: int
    d_ff: int


SIZE_PRESETS: dict[str, SizePreset] = {
    "original": SizePreset("the original Transformer (base)", "Original Transformer", "6 + 6", 512, 8, 64, 2048),
    "bert-base": SizePreset("BERT-base", "BERT-base", "12", 768, 12, 64, 3072),
}
