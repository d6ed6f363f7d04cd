"""One byte-level BPE tokenizer for both English models, trained with Hugging Face's `tokenizers`.

Byte-level: every text is first spelled as UTF-8 bytes, and all 256 bytes are in the vocabulary, so any
text (emoji, CJK, accents, control characters, empty text) becomes tokens and decodes back unchanged;
nothing is ever an unknown token. Merges learned on the training documents make common words one token.

The vocabulary and merges are shared; each model folder gets its own tokenizer.json that differs only in
what encoding adds around the text, as GPT-2's and BERT's own files do: nothing for the decoder (GPT-2
layout), [CLS] text [SEP] for the encoder (BERT layout). tokenizer_config.json names the special tokens, so
core.pretrained's loader and transformers both find them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

from core.pretrained import is_encoder_family

VOCAB_SIZE = 4096
MAX_VOCAB = 8192
PAD, EOT, CLS, SEP, MASK = "[PAD]", "<|endoftext|>", "[CLS]", "[SEP]", "[MASK]"
SPECIALS = (PAD, EOT, CLS, SEP, MASK)  # ids 0..4, in this order
# [MASK] takes the space before it (lstrip, as RoBERTa's <mask>): "the [MASK] sat" reads the, [MASK], ␣sat, as
# in training, where a masked token such as "␣cat" took its own space with it.


def train_tokenizer(texts: Sequence[str], vocab_size: int = VOCAB_SIZE) -> Tokenizer:
    """A byte-level BPE tokenizer trained on `texts` (no post-processor: see `for_decoder` / `for_encoder`)."""
    if not 256 + len(SPECIALS) < vocab_size <= MAX_VOCAB:
        raise ValueError(f"vocab_size must be above {256 + len(SPECIALS)} (the bytes and the special tokens) "
                         f"and at most {MAX_VOCAB}, got {vocab_size}")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = [AddedToken(t, special=True, normalized=False, lstrip=t == MASK) for t in SPECIALS]
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(list(texts), trainer=trainer)
    return tok


def special_id(tok: Tokenizer, token: str) -> int:
    found = tok.token_to_id(token)
    if found is None:
        raise ValueError(f"the tokenizer has no {token}")
    return found


def for_decoder(tok: Tokenizer) -> Tokenizer:
    """A copy that adds nothing around the text (GPT-2 adds no <|endoftext|> when encoding)."""
    copy = Tokenizer.from_str(tok.to_str())
    copy.post_processor = processors.ByteLevel(trim_offsets=False)
    return copy


def for_encoder(tok: Tokenizer) -> Tokenizer:
    """A copy that encodes as BERT does: [CLS] text [SEP] (and [CLS] A [SEP] B [SEP] for a pair)."""
    copy = Tokenizer.from_str(tok.to_str())
    cls, sep = special_id(tok, CLS), special_id(tok, SEP)
    copy.post_processor = processors.TemplateProcessing(
        single=f"{CLS}:0 $A:0 {SEP}:0", pair=f"{CLS}:0 $A:0 {SEP}:0 $B:1 {SEP}:1",
        special_tokens=[(CLS, cls), (SEP, sep)])
    return copy


# What each folder's tokenizer_config.json names (the family's loader reads these names).
DECODER_SPECIALS = {"bos_token": EOT, "eos_token": EOT, "unk_token": EOT}
ENCODER_SPECIALS = {"cls_token": CLS, "sep_token": SEP, "mask_token": MASK, "pad_token": PAD}


def save(tok: Tokenizer, folder: Path, family: str, context: int) -> None:
    """tokenizer.json (the family's copy: an encoder's (bert, roformer) adds [CLS] and [SEP], a decoder's (gpt2,
    qwen2) nothing) and tokenizer_config.json into a model folder."""
    folder.mkdir(parents=True, exist_ok=True)
    encoder = is_encoder_family(family)
    copy, names = (for_encoder(tok), ENCODER_SPECIALS) if encoder else (for_decoder(tok), DECODER_SPECIALS)
    copy.save(str(folder / "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": context,
              "clean_up_tokenization_spaces": False, **names}
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")


def encode_plain(tok: Tokenizer, texts: Sequence[str]) -> list[list[int]]:
    """Each text's ids with nothing added around them (the training streams add their own separators)."""
    return [e.ids for e in tok.encode_batch(list(texts), add_special_tokens=False)]
