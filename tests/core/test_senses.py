"""core.analysis.senses on the bundled English models: words are found at the right tokens, the numbers are
finite cosines and attention weights, the chosen head is the argmax, and the sentences say what the numbers say."""

from __future__ import annotations

import numpy as np
import pytest

from core import pretrained
from core.analysis import senses as A
from core.checkpoints import english_ids, load_english

pytestmark = pytest.mark.skipif(not english_ids(), reason="the English models are not installed")


@pytest.fixture(scope="module", params=["english-decoder", "english-encoder"])
def english(request):
    model, meta = load_english(request.param)
    return request.param, model.eval(), pretrained.load_tokenizer(meta["folder"], meta["family"])


def test_word_positions_spell_the_word(english):
    _, _, tok = english
    for text, word in ((A.COREF, "animal"), (A.COREF, "it"), (A.SENSES["river"][0], "bank")):
        ids = tok.encode(text)
        at = A.word_positions(tok, ids, text, word)
        assert at == list(range(at[0], at[-1] + 1))  # contiguous
        assert tok.decode([ids[i] for i in at]).strip().lower() == word
    with pytest.raises(ValueError, match="not a word"):
        A.word_positions(tok, tok.encode("The bankers met."), "The bankers met.", "bank")


def test_bank_sits_at_one_position_in_all_four_sentences(english):
    _, model, tok = english
    c = A.compare_senses(model, tok)
    assert len(set(c.at)) == 1
    assert c.layers == ["embed"] + [f"L{i}" for i in range(model.cfg.n_layers)]
    for curve in (c.within, c.across):
        assert curve.shape == (model.cfg.n_layers + 1,) and np.all(np.isfinite(curve))
        assert np.all(np.abs(curve) <= 1 + 1e-9)
    # same token, same position: the embedding layer cannot tell the four uses apart
    assert c.within[0] == pytest.approx(1.0) and c.across[0] == pytest.approx(1.0)
    for row, tokens in zip(c.rows, c.tokens):
        assert row.shape == (model.cfg.n_layers, len(tokens))
        np.testing.assert_allclose(row.sum(-1), 1.0, atol=1e-6)


def test_coreference_head_is_the_argmax(english):
    model_id, model, tok = english
    h = A.coreference_head(model, tok)
    assert h.mass.shape == (model.cfg.n_layers, model.cfg.n_heads)
    assert np.all(np.isfinite(h.mass)) and np.all((h.mass >= 0) & (h.mass <= 1 + 1e-9))
    assert h.best == pytest.approx(h.mass.max())
    assert h.row[h.animal].sum() == pytest.approx(h.best)
    assert h.tokens[h.it].strip("␣ ") == "it"
    if model.cfg.arch == "decoder":  # the two sentences share everything up to "it": a causal row cannot differ
        np.testing.assert_allclose(h.other_mass, h.mass, atol=1e-6)
        assert np.all(h.row[h.it + 1:] == 0)
    sentence = A.coref_sentence(h, model_id, model.cfg.arch)
    assert f"L{h.layer}H{h.head}" in sentence and f"{h.best:.2f}" in sentence
    verdict_is_found = h.best >= A.FOUND and h.other_mass[h.layer, h.head] < h.best / 2
    assert sentence.startswith("A coreference head" if verdict_is_found else "No coreference head")
