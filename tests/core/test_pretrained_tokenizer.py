"""core/pretrained.py's Tokenizer: the ids transformers gives, text back unchanged, labels a person can read.

A byte-level BPE (GPT-2's kind) and a WordPiece (BERT's) are trained offline on a few sentences and
saved as tokenizer.json, as vocab.json + merges.txt / vocab.txt, and as both. Glassbox's ids equal those
of transformers' GPT2TokenizerFast / BertTokenizerFast on the same files; decode(encode(text)) gives the
text back (any text for byte-level BPE; lowercase words in the vocabulary for BERT, which lowercases and
strips accents); labels show text, with visible spaces and newlines, never bare ids.
"""

from __future__ import annotations

import pytest
from tokenizers import AddedToken, Tokenizer as Backend, decoders, models, pre_tokenizers, trainers

from core.pretrained import PretrainedError, Tokenizer, load_tokenizer
from tests.core.pretrained_models import EOT, SENTENCES, write_tokenizer

TEXTS = ["", "Hello world", "the cat sat on the mat.", "  two spaces and a\nnewline\ttab",
         "Café crème 世界 🙂 — unicode", "unseen: zyxw QQQ", f"a{EOT}b"]
LAYOUTS = ["tokenizer.json", "files", "both"]


@pytest.fixture(scope="module")
def hf():
    import transformers

    return transformers


@pytest.mark.parametrize("layout", LAYOUTS)
def test_byte_level_bpe_ids_equal_transformers(layout, tmp_path, hf):
    folder = write_tokenizer(tmp_path / "bpe", "bpe", layout)
    ours = load_tokenizer(folder, "gpt2")
    theirs = hf.GPT2TokenizerFast.from_pretrained(str(folder))
    for text in TEXTS:
        assert ours.encode(text) == theirs(text)["input_ids"], text


@pytest.mark.parametrize("layout", LAYOUTS)
def test_wordpiece_ids_equal_transformers(layout, tmp_path, hf):
    folder = write_tokenizer(tmp_path / "wp", "wordpiece", layout)
    ours = load_tokenizer(folder, "bert")
    theirs = hf.BertTokenizerFast.from_pretrained(str(folder))
    for text in TEXTS + ["The QUICK brown fox, UNBELIEVABLE!"]:
        ids = ours.encode(text)
        assert ids == theirs(text)["input_ids"], text
        assert ours.decode(ids) == theirs.decode(ids, skip_special_tokens=True), text


def test_wordpiece_settings_from_tokenizer_config(tmp_path, hf):
    """A cased BERT says do_lower_case: false in tokenizer_config.json; both tokenizers then keep case."""
    folder = write_tokenizer(tmp_path / "wp", "wordpiece", "files")
    (folder / "tokenizer_config.json").write_text('{"do_lower_case": false, "strip_accents": false}')
    ours = load_tokenizer(folder, "bert")
    theirs = hf.BertTokenizerFast.from_pretrained(str(folder))
    for text in ["The Cat", "the cat", "Café"]:
        assert ours.encode(text) == theirs(text)["input_ids"], text
    assert ours.encode("The cat") != ours.encode("the cat")


@pytest.mark.parametrize("layout", LAYOUTS)
def test_byte_level_bpe_round_trips_any_text(layout, tmp_path):
    tok = load_tokenizer(write_tokenizer(tmp_path / "bpe", "bpe", layout), "gpt2")
    for text in TEXTS + SENTENCES:
        assert tok.decode(tok.encode(text), skip_special=False) == text
        if EOT not in text:
            assert tok.decode(tok.encode(text)) == text
    assert tok.decode(tok.encode(f"a{EOT}b")) == "ab"  # special tokens dropped by default
    assert tok.encode("") == [] and tok.decode([]) == ""


def test_wordpiece_round_trips_lowercase_text_and_adds_cls_sep(tmp_path):
    tok = load_tokenizer(write_tokenizer(tmp_path / "wp", "wordpiece", "files"), "bert")
    for text in ["the cat sat on the mat.", "unbelievable tokenization of tokenizers", ""]:
        ids = tok.encode(text)
        assert ids[0] == tok.cls_id and ids[-1] == tok.sep_id
        assert tok.decode(ids) == text
    assert tok.decode(tok.encode("THE Café"), skip_special=False) == "[CLS] the cafe [SEP]"


def test_special_ids(tmp_path):
    gpt2 = load_tokenizer(write_tokenizer(tmp_path / "bpe", "bpe"), "gpt2")
    eot = gpt2.encode(EOT)
    assert eot == [gpt2.bos_id] and gpt2.eos_id == gpt2.bos_id and gpt2.cls_id is None
    bert = load_tokenizer(write_tokenizer(tmp_path / "wp", "wordpiece"), "bert")
    assert {bert.cls_id, bert.sep_id, bert.mask_id, bert.pad_id, bert.unk_id} == {0, 1, 2, 3, 4}
    assert bert.bos_id is None
    assert bert.labels([bert.cls_id, bert.mask_id]) == ["[CLS]", "[MASK]"]


def test_byte_level_labels_show_spaces_newlines_and_characters(tmp_path):
    tok = load_tokenizer(write_tokenizer(tmp_path / "bpe", "bpe"), "gpt2")
    ids = tok.encode("the cat\nsat")
    labels = tok.labels(ids)
    assert "".join(labels) == "the␣cat↵sat"
    assert any(label.startswith("␣") for label in labels) and "↵" in labels
    for i, label in enumerate(tok.labels(range(tok.vocab_size))):  # characters, not byte soup like "Ã©"
        text = tok.decode([i], skip_special=False)
        shown = text.replace(" ", "␣").replace("\n", "↵").replace("\t", "⇥").replace("\r", "␍")
        if shown.isprintable() and "\ufffd" not in shown:
            assert label == shown, (label, text)
        else:  # a piece of a multi-byte character, or a control byte: in hex
            assert "\\x" in label, (label, text)


def test_wordpiece_labels_keep_continuation_marks(tmp_path):
    tok = load_tokenizer(write_tokenizer(tmp_path / "wp", "wordpiece"), "bert")
    labels = tok.labels(tok.encode("tokenization zyx"))
    assert labels[0] == "[CLS]" and labels[-1] == "[SEP]"
    assert any(label.startswith("##") for label in labels)


@pytest.mark.parametrize("kind, family", [("bpe", "gpt2"), ("wordpiece", "bert")])
def test_labels_are_text_never_bare_ids(kind, family, tmp_path):
    tok = load_tokenizer(write_tokenizer(tmp_path / kind, kind), family)
    ids = list(range(tok.vocab_size))
    labels = tok.labels(ids)
    assert len(labels) == tok.vocab_size
    assert all(label and label != str(i) for i, label in zip(ids, labels))
    assert all(label.isprintable() for label in labels)


def test_metaspace_labels(tmp_path):
    """A SentencePiece-style tokenizer.json (Llama's kind): "▁" marks a space, <0x0A> is a newline byte."""
    backend = Backend(models.BPE(unk_token="<unk>", byte_fallback=True))
    backend.pre_tokenizer = pre_tokenizers.Metaspace()
    backend.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                         decoders.Strip(" ", 1, 0)])
    bytes_ = [f"<0x{b:02X}>" for b in range(256)]
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<unk>", "<s>", "</s>", *bytes_])
    backend.train_from_iterator(SENTENCES, trainer)
    backend.add_special_tokens([AddedToken(t, special=True) for t in ("<unk>", "<s>", "</s>")])
    backend.save(str(tmp_path / "tokenizer.json"))
    tok = load_tokenizer(tmp_path, "llama")
    assert tok.style == "metaspace" and (tok.bos_id, tok.eos_id, tok.unk_id) == (1, 2, 0)
    labels = tok.labels(tok.encode("the cat\nsat"))
    assert labels[0].startswith("␣") and "↵" in labels
    assert tok.decode(tok.encode("the cat sat")) == "the cat sat"


def test_bad_ids_and_text_are_refused(tmp_path):
    tok = load_tokenizer(write_tokenizer(tmp_path / "bpe", "bpe"), "gpt2")
    for bad in ([-1], [tok.vocab_size], [1.5], [True]):
        with pytest.raises(ValueError, match="outside"):
            tok.decode(bad)
    with pytest.raises(ValueError, match="string"):
        tok.encode(b"bytes")


def test_damaged_tokenizer_file(tmp_path):
    folder = write_tokenizer(tmp_path / "bpe", "bpe")
    (folder / "tokenizer.json").write_text('{"model": "nothing like a tokenizer"}')
    with pytest.raises(PretrainedError, match="could not be read"):
        load_tokenizer(folder, "gpt2")
    assert isinstance(load_tokenizer(write_tokenizer(tmp_path / "ok", "bpe"), "gpt2"), Tokenizer)


def test_byte_pieces_of_one_character_are_labelled_with_that_character():
    """A small byte-level vocabulary splits "é" into two pieces and an emoji into four: each piece's label names
    the character it is part of, `…` on the side it continues, never raw `\\xNN` bytes; whole pieces are unchanged."""
    from core.pretrained import _join_split_characters

    pieces = [b"Caf", b"\xc3", b"\xa9", b" ", b"\xf0\x9f", b"\x99", b"\x82", b"!", b"\xff", b"\xf0", b"\x9f", b"\x99\x82"]
    labels = ["Caf", "\\xc3", "\\xa9", "␣", "\\xf0\\x9f", "\\x99", "\\x82", "!", "\\xff", "\\xf0", "\\x9f", "\\x99\\x82"]
    _join_split_characters(labels, pieces)
    assert labels == ["Caf", "é…", "…é", "␣", "🙂₁₂…", "…🙂₃…", "…🙂", "!", "\\xff",  # a stray byte stays as it was
                      "🙂…", "…🙂₂…", "…🙂₃₄"]  # the same character split otherwise: other labels, each one piece
    specials = [b"\xc3", None, b"\xa9"]  # a special token between two halves: nothing to join
    kept = ["\\xc3", "<s>", "\\xa9"]
    _join_split_characters(kept, specials)
    assert kept == ["\\xc3", "<s>", "\\xa9"]


def test_the_labels_of_a_text_map_back_to_its_ids():
    """What the pages show under each token (joined characters included) turns back into the same ids, so a view
    that re-encodes the sidebar's tokens reads the same input."""
    from core.checkpoints import ENGLISH_DIR
    from core.pretrained import load_tokenizer
    from core.text_task import TextVocab

    tokenizer = load_tokenizer(ENGLISH_DIR / "english-decoder", "llama")
    vocab = TextVocab(tokenizer, tokenizer.vocab_size)
    for text in ("Café déjà vu 🙂 — 東京", "naïve ☃ x\ttab\nline", "plain words"):
        ids = vocab.encode(text)
        labels = vocab.labels(ids)
        assert vocab.encode(labels) == ids
        assert not any(label.startswith("\\x") for label in labels)
