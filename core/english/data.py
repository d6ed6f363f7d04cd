"""Training and evaluation windows: packed text for the decoder, masked text for the encoder.

Each split becomes one token stream, documents joined by a separator (<|endoftext|> for the decoder,
[SEP] for the encoder). Training windows start at random places in the stream; every random draw comes
from a local torch.Generator on the CPU, so the batches are a pure function of the seed on any device.

Decoder windows may carry a repeated passage (`repeat_share` of them): a stretch of the window is copied
to a later place in the same window, so copying what followed an earlier occurrence pays off, which is
what an induction head does. Some (`random_share`) also carry a stretch of random tokens said again and
again (from twice to the whole window): no bigram or topic predicts those tokens, only the earlier copy does, so the gradient asks
for a previous-token head and an induction head reading it from the first steps (on English text alone
the model stays a bigram model for longer than a CPU budget lasts). Encoder windows are [CLS] text [SEP]; a share
of the ordinary tokens is chosen (BERT's 15% by default; the recipe trains at 40%), of those 80% become [MASK],
10% a random token and 10% stay, as BERT was trained; `short_share` of the
batches are short windows, so sentences of a few words look like what the encoder has seen.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

IGNORE = -100  # target of a position that is not scored


def stream(docs: Sequence[Sequence[int]], separator: int) -> torch.Tensor:
    """One long `[n]` stream: separator doc separator doc ... (each document after a separator)."""
    pieces = []
    for ids in docs:
        pieces.append(separator)
        pieces.extend(ids)
    return torch.tensor(pieces, dtype=torch.long)  # [n]


@dataclass(frozen=True)
class DecoderBatch:
    tokens: torch.Tensor  # [batch pos]
    targets: torch.Tensor  # [batch pos], the next token of each position
    repeated: int  # windows of this batch that carry a repeated passage
    random_repeats: int = 0  # windows of this batch that carry a repeated stretch of random tokens


def decoder_batch(text: torch.Tensor, batch: int, length: int, generator: torch.Generator,
                  repeat_share: float = 0.0, repeat_span: tuple[int, int] = (16, 128),
                  random_share: float = 0.0, random_span: tuple[int, int] = (8, 64),
                  random_ids: tuple[int, int] = (0, 0)) -> DecoderBatch:
    """`batch` windows of `length` tokens at random places in `text`, each with its next-token targets.
    random_ids: the [low, high) range random stretches draw from (the ordinary tokens)."""
    if text.numel() < length + 2:
        raise ValueError(f"the text has {text.numel()} tokens, fewer than one window of {length} + 1")
    starts = torch.randint(0, text.numel() - length, (batch,), generator=generator)  # [batch]
    windows = text[starts[:, None] + torch.arange(length + 1)]  # [batch pos+1]
    repeat = torch.rand(batch, generator=generator) < repeat_share  # [batch]
    lo, hi = repeat_span
    hi = min(hi, (length + 1) // 2)
    lo = min(lo, hi)
    for row in range(batch):
        span = int(torch.randint(lo, hi + 1, (), generator=generator))
        first = int(torch.randint(0, length + 2 - 2 * span, (), generator=generator))
        second = int(torch.randint(first + span, length + 2 - span, (), generator=generator))
        if repeat[row]:
            windows[row, second:second + span] = windows[row, first:first + span].clone()
    tiled = _random_repeats(windows, random_share, random_span, random_ids, generator) if random_share > 0 else 0
    return DecoderBatch(windows[:, :-1], windows[:, 1:], int(repeat.sum()), tiled)


def _random_repeats(windows: torch.Tensor, share: float, span: tuple[int, int], ids: tuple[int, int],
                    generator: torch.Generator) -> int:
    """In `share` of the rows of `windows` `[batch pos+1]` (in place), a stretch of random tokens from
    ids = [low, high), repeated back to back (twice, up to filling the row) at a random place; returns how many
    rows got one. The copies, not the first saying, carry the signal: half a window on average."""
    low, high = ids
    if high - low < 2:
        raise ValueError(f"random stretches need a range of at least 2 token ids, got [{low}, {high})")
    batch, width = windows.shape
    chosen = torch.rand(batch, generator=generator) < share  # [batch]
    hi = max(1, min(span[1], width // 2))
    lo = max(1, min(span[0], hi))
    for row in range(batch):
        period = int(torch.randint(lo, hi + 1, (), generator=generator))
        copies = int(torch.randint(2, max(2, width // period) + 1, (), generator=generator))
        start = int(torch.randint(0, width - copies * period + 1, (), generator=generator))
        stretch = torch.randint(low, high, (period,), generator=generator)  # [period]
        if chosen[row]:
            windows[row, start:start + copies * period] = stretch.repeat(copies)  # [copies*period]
    return int(chosen.sum())


def eval_windows(text: torch.Tensor, length: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Consecutive windows `([1 pos], [1 pos])` of inputs and next-token targets: every token of `text`
    after the first is a target exactly once, each read with up to `length` tokens before it."""
    out = []
    for start in range(0, text.numel() - 1, length):
        end = min(start + length, text.numel() - 1)
        out.append((text[None, start:end], text[None, start + 1:end + 1]))
    return out


@dataclass(frozen=True)
class EncoderBatch:
    tokens: torch.Tensor  # [batch pos], [CLS] text [SEP] with some tokens masked or replaced
    targets: torch.Tensor  # [batch pos], the original token where one was chosen, IGNORE elsewhere


@dataclass(frozen=True)
class MaskIds:
    """The special ids encoder windows need."""

    cls: int
    sep: int
    mask: int
    n_special: int  # ids below this are special tokens, never chosen and never a random replacement
    vocab_size: int


def encoder_windows(text: torch.Tensor, batch: int, length: int, generator: torch.Generator,
                    ids: MaskIds) -> torch.Tensor:
    """`batch` windows [CLS] + (length - 2) tokens at random places + [SEP]: `[batch length]`."""
    inner = length - 2
    if text.numel() < inner + 1:
        raise ValueError(f"the text has {text.numel()} tokens, fewer than one window of {inner}")
    starts = torch.randint(0, text.numel() - inner + 1, (batch,), generator=generator)  # [batch]
    body = text[starts[:, None] + torch.arange(inner)]  # [batch inner]
    cls = torch.full((batch, 1), ids.cls, dtype=torch.long)
    sep = torch.full((batch, 1), ids.sep, dtype=torch.long)
    return torch.cat([cls, body, sep], dim=1)  # [batch length]


def mask_tokens(tokens: torch.Tensor, generator: torch.Generator, ids: MaskIds, share: float = 0.15,
                replace: bool = True) -> EncoderBatch:
    """BERT's masking: `share` of the ordinary tokens chosen; 80% -> [MASK], 10% random, 10% kept
    (replace=False: every chosen token becomes [MASK], for evaluation)."""
    ordinary = tokens >= ids.n_special  # [batch pos]
    chosen = (torch.rand(tokens.shape, generator=generator) < share) & ordinary  # [batch pos]
    roll = torch.rand(tokens.shape, generator=generator)  # [batch pos]
    randoms = torch.randint(ids.n_special, ids.vocab_size, tokens.shape, generator=generator)  # [batch pos]
    out = tokens.clone()
    if replace:
        out[chosen & (roll < 0.8)] = ids.mask
        swap = chosen & (roll >= 0.8) & (roll < 0.9)
        out[swap] = randoms[swap]
    else:
        out[chosen] = ids.mask
    targets = torch.where(chosen, tokens, torch.full_like(tokens, IGNORE))  # [batch pos]
    return EncoderBatch(out, targets)


def encoder_batch(text: torch.Tensor, batch: int, length: int, generator: torch.Generator, ids: MaskIds,
                  short_share: float = 0.0, short_range: tuple[int, int] = (8, 128),
                  mask_share: float = 0.15) -> EncoderBatch:
    """A masked training batch; with probability short_share every window of it is short (a length drawn
    from short_range), so the encoder also sees [SEP] a few tokens after [CLS]."""
    short = float(torch.rand((), generator=generator)) < short_share
    short_length = int(torch.randint(short_range[0], min(short_range[1], length) + 1, (), generator=generator))
    windows = encoder_windows(text, batch, short_length if short else length, generator, ids)
    return mask_tokens(windows, generator, ids, mask_share)


def encoder_eval_batches(text: torch.Tensor, length: int, generator: torch.Generator, ids: MaskIds,
                         batch: int = 8) -> list[EncoderBatch]:
    """Consecutive held-out windows, every chosen token masked (no random or kept ones): a fill-in test."""
    inner = length - 2
    rows = [text[start:start + inner] for start in range(0, text.numel() - inner + 1, inner)]
    if not rows:
        rows = [text]
    out = []
    for i in range(0, len(rows), batch):
        group = rows[i:i + batch]
        n = min(r.numel() for r in group)
        body = torch.stack([r[:n] for r in group])  # [batch inner]
        cls = torch.full((len(group), 1), ids.cls, dtype=torch.long)
        sep = torch.full((len(group), 1), ids.sep, dtype=torch.long)
        out.append(mask_tokens(torch.cat([cls, body, sep], dim=1), generator, ids, replace=False))
    return out
