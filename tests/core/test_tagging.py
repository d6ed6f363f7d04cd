"""The tags task and core.analysis.tagging: ambiguous words are tagged by their left neighbour, an undecidable
one is refused with its reason, and the bundled tags-encoder's scores count what they say they count."""

from __future__ import annotations

import pytest

from core.analysis import tagging as A
from core.checkpoints import load_bundled
from core.tasks import get_task


def test_ambiguous_words_follow_their_context():
    task = get_task("tags")
    assert task.tags("the fish saw a saw".split()) == ["OTHER", "NOUN", "VERB", "OTHER", "NOUN"]
    assert task.tags("a old man watch the big watch".split())[3] == "VERB"
    with pytest.raises(ValueError, match="follows neither"):
        task.tags(["fish", "sees", "a", "dog"])  # an ambiguous first word: nothing before it decides
    with pytest.raises(ValueError, match="not a word"):
        task.tags(["the", "NOUN"])


def test_tag_accuracy_counts_words_and_ambiguous_words():
    model, meta = load_bundled("tags-encoder")
    task = get_task("tags")
    s = A.tag_accuracy(model.eval(), task, 64, seed=5, length=meta["train_length"])
    batch = task.batch(64, "encoder", seed=5, length=meta["train_length"])
    assert s.words == 64 * meta["train_length"]
    assert s.ambiguous_words == sum(len(m["ambiguous"]) for m in batch.meta) > 0
    assert 0 <= s.ambiguous_accuracy <= 1 and 0 <= s.accuracy <= 1
    rows = A.tag_sentence(model, task, "the big dog saw a fish".split())
    assert [r["right tag"] for r in rows] == ["OTHER", "OTHER", "NOUN", "VERB", "OTHER", "NOUN"]
    assert all(r["agree"] == (r["right tag"] == r["model's tag"]) for r in rows)
