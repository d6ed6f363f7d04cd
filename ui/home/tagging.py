"""Home's example of an encoder-only "understanding" task: the bundled tags-encoder tags every word of a
sentence NOUN, VERB or OTHER (core.analysis.tagging), shown under the families table. pages/home.py calls
`panel()`.
"""

from __future__ import annotations

import streamlit as st

from core.analysis import tagging as A
from core.device import one_thread
from core.tasks import TAG_WORDS, get_task
from ui.shell import models
from ui.shell.memo import freeze, memo
from ui.shell.page import rows_table
from ui.shell.text import literal

MODEL_ID = "tags-encoder"
SAMPLES = 512
DEFAULT = "the old man saw a fish and the fish watch a big saw"
MAX_WORDS = 24
INPUT_KEY = "home.tags"


@memo(maxsize=2)
def score(device: str) -> A.TagScore:
    """The model's accuracy on SAMPLES fresh sentences (well under a second on a miss)."""
    model, meta = models.get_model(MODEL_ID, device)
    with one_thread():
        return freeze(A.tag_accuracy(model, get_task("tags"), SAMPLES, length=meta.get("train_length") or 10))


@memo(maxsize=64)
def tagged(device: str, words: tuple[str, ...]) -> list[dict]:
    """The model's tags and the grammar's for one sentence (ValueError for one the grammar cannot tag)."""
    model, _ = models.get_model(MODEL_ID, device)
    return A.tag_sentence(model, get_task("tags"), list(words))


def panel(device: str = "cpu") -> None:
    """The task in one paragraph, the model's accuracy, and a sentence the reader may edit, tagged word by word."""
    st.subheader("An encoder at work: a tag for every word")
    if MODEL_ID not in {e["id"] for e in models.manifest()}:
        st.info(f"The bundled {MODEL_ID} is not installed (`python -m core.train --only {MODEL_ID}` builds it).")
        return
    st.markdown(
        "Encoder-only models *understand* an input: besides one answer for the whole input (the brackets and "
        f"agreement models), they can give **one answer per token**, as taggers and named-entity recognisers do. "
        f"**{MODEL_ID}** tags every word of a tiny grammar NOUN, VERB or OTHER. Most words have one tag; *fish*, "
        "*watch* and *saw* are nouns after *the*, *a* or an adjective and verbs after a noun, so only their "
        "neighbours can tell. Each tag is read from the model's output at that word's own position.")
    s = score(device)
    c1, c2 = st.columns(2)
    c1.metric(f"words tagged right ({s.n_sentences} fresh sentences)", f"{s.accuracy:.1%}")
    c2.metric(f"fish / watch / saw tagged right ({s.ambiguous_words:,} of them)", f"{s.ambiguous_accuracy:.1%}")
    vocabulary = ", ".join(w for group in TAG_WORDS.values() for w in group)
    text = st.text_input("A sentence to tag", value=DEFAULT, key=INPUT_KEY, max_chars=200,
                         help=f"Words of the grammar only: {vocabulary}.")
    words = text.split()
    if not words:
        st.info("Type a sentence, for example: the big dog saw a fish")
        return
    if len(words) > MAX_WORDS:
        st.warning(f"At most {MAX_WORDS} words here; the first {MAX_WORDS} are tagged.")
        words = words[:MAX_WORDS]
    try:
        rows = tagged(device, tuple(words))
    except ValueError as exc:
        st.warning(literal(f"This sentence cannot be tagged: {exc}"))
        return
    right = sum(r["agree"] for r in rows)
    st.dataframe(rows_table([{**r, "agree": "✓" if r["agree"] else "✗"} for r in rows]), hide_index=True,
                 width="stretch")
    st.caption(f"{right} of {len(rows)} words tagged as the grammar tags them.")
