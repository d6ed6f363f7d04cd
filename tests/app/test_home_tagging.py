"""AppTest: Home's tagging example. The tags-encoder's accuracy and a sentence tagged word by word (the right tag
beside the model's); a typed sentence is retagged; a word outside the grammar gets a message, not a crash."""

from __future__ import annotations

from tests.app.conftest import assert_ok, page_at
from ui.home import tagging as T

PAGE = "pages/home.py"


def table_rows(at) -> list[dict]:
    frame = at.dataframe[-1].value
    return frame.to_dict("records")


def test_default_sentence_is_tagged_with_the_grammar_beside():
    at = page_at(PAGE)
    assert_ok(at)
    assert "An encoder at work: a tag for every word" in [s.value for s in at.subheader]
    labels = {m.label: m.value for m in at.metric}
    accuracy = next(v for k, v in labels.items() if k.startswith("words tagged right"))
    assert 0 <= float(accuracy.rstrip("%")) <= 100
    rows = table_rows(at)
    assert [r["word"] for r in rows] == T.DEFAULT.split()
    assert {r["right tag"] for r in rows} <= {"NOUN", "VERB", "OTHER"}
    assert {r["agree"] for r in rows} <= {"✓", "✗"}
    # the two uses of "saw" and of "fish" differ by context
    saws = [r["right tag"] for r in rows if r["word"] == "saw"]
    assert saws == ["VERB", "NOUN"]


def test_typed_sentence_and_a_bad_word():
    at = page_at(PAGE)
    at.text_input(key=T.INPUT_KEY).set_value("a red bird watch the cat").run()
    assert_ok(at)
    rows = table_rows(at)
    assert [r["word"] for r in rows] == ["a", "red", "bird", "watch", "the", "cat"]
    assert rows[3]["right tag"] == "VERB"
    at.text_input(key=T.INPUT_KEY).set_value("the *zebra* runs").run()
    assert_ok(at)
    assert any("cannot be tagged" in w.value and "zebra" in w.value for w in at.warning)
