"""The Attention page's English panel: "river bank" against "money bank", and the head whose "it" looks at
"animal", measured on the bundled English models (core.analysis.senses); with any other model, one sentence
and a button that opens the English decoder. pages/attention.py calls `panel(sel)`.
"""

from __future__ import annotations

import streamlit as st

from core.analysis import senses as A
from core.figures.senses import coref_figure, sense_distance_figure, word_rows_figure
from ui.shell import models
from ui.shell.export import chart_config
from ui.shell.figures import cached
from ui.shell.memo import freeze, memo
from ui.shell.page import computed, switch_model
from ui.shell.sidebar import Selection

ENGLISH_ID = "english-decoder"  # what the button opens
distance_figure = cached(sense_distance_figure)
rows_figure = cached(word_rows_figure)
head_figure = cached(coref_figure)


@memo(maxsize=8)
def measured(model_id: str, device: str) -> tuple[A.SenseComparison, A.CorefHead]:
    """The sense comparison and the coreference head of one English model (a few forward passes)."""
    model, _ = models.get_model(model_id, device)
    tokenizer = models.text_task(model_id, device).vocab.tokenizer
    return freeze((A.compare_senses(model, tokenizer), A.coreference_head(model, tokenizer)))


def panel(sel: Selection) -> None:
    """The heading, then the measurements on an English model, or the offer to open one."""
    st.subheader("Context on real sentences: 'river bank', 'money bank', and 'it' → 'animal'")
    if sel.model_id not in models.english_models():
        st.info("This panel reads English sentences with one of the English models this project trained "
                f"({', '.join(sorted(models.english_models())) or 'none is installed'}); the model open now reads "
                "another vocabulary.", icon=":material/translate:")
        if ENGLISH_ID in models.english_models():
            st.button(f"Open {ENGLISH_ID} here", key="attention.senses.open", on_click=switch_model,
                      args=(ENGLISH_ID,), icon=":material/swap_horiz:")
        return
    senses, coref = computed("Reading the sentences ...", measured, sel.model_id, sel.device)
    st.markdown(
        "Attention rebuilds a word's vector from its context, so 'bank' beside 'river' should drift away from 'bank' "
        "beside 'money'. Four sentences, two per sense, put 'bank' at the same token position (so its position "
        "cannot tell them apart); at every layer the chart compares two uses in **different** senses with two "
        "uses in the **same** sense, the control. A word split into pieces is read at its last piece, and the "
        "vector is the residual stream after each block.")
    st.markdown("\n".join(f"- *{text}*" for text in senses.sentences))
    st.plotly_chart(distance_figure(senses.layers[1:], senses.within[1:], senses.across[1:],
                                    title="How far apart two uses of 'bank' are"),
                    key="attention.senses.distance", width="stretch",
                    config=chart_config("attention", sel.model_id, "bank-senses"))
    st.caption("Not drawn: the embedding layer, where the four vectors are the same token at the same position, so "
               "their cosine is exactly 1.")
    st.markdown(A.senses_sentence(senses, sel.model_id))
    titles = [f"'bank' (piece '{t[i]}'): {s}" for s, t, i in zip(senses.sentences, senses.tokens, senses.at)]
    st.plotly_chart(rows_figure(senses.rows, senses.tokens, titles, senses.layers[1:],
                                title="Where 'bank' looks (its attention row, mean over heads, per layer)"),
                    key="attention.senses.rows", width="stretch",
                    config=chart_config("attention", sel.model_id, "bank-attention"))
    st.markdown(
        f"Coreference: in *{A.COREF}* the word 'it' means the animal. Below, every head's attention from 'it' to "
        "'animal', and the row of the head that gives it the most.")
    st.plotly_chart(head_figure(coref.mass, coref.row, coref.tokens, coref.animal, coref.layer, coref.head,
                                title=f"'it' → 'animal': L{coref.layer}H{coref.head} gives {coref.best:.2f}"),
                    key="attention.senses.coref", width="stretch",
                    config=chart_config("attention", sel.model_id, "it-animal-head"))
    st.markdown(A.coref_sentence(coref, sel.model_id, sel.arch))
