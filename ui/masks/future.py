"""The Masks page's section 7: a reading that depends on later readings (the local-peaks twins). The
bidirectional encoder and the causal decoder side by side on the same fresh series, the best any causal model
can do, and where the encoder's attention looks (core.analysis.future). pages/masks.py calls `panel(device)`.
"""

from __future__ import annotations

import streamlit as st

from core.analysis import future as A
from core.device import one_thread
from core.figures.future import future_mass_figure
from core.figures.heatmaps import attention_heatmap
from core.tasks import get_task
from ui.shell import models
from ui.shell.export import chart_config
from ui.shell.figures import cached
from ui.shell.memo import freeze, memo
from ui.shell.page import computed, lead, rows_table, try_this

ENC_ID, DEC_ID = "peaks-encoder", "peaks-decoder"
SAMPLES = 512  # fresh series, the same for both models
LENGTH = 8  # the twins' training length
mass_figure = cached(future_mass_figure)
pattern_figure = cached(attention_heatmap)


@memo(maxsize=4)
def measured(device: str) -> A.FutureComparison:
    """Both twins on the same SAMPLES fresh series (about a second on a miss)."""
    enc, _ = models.get_model(ENC_ID, device)
    dec, _ = models.get_model(DEC_ID, device)
    with one_thread():
        return freeze(A.compare(enc, dec, get_task("peaks"), SAMPLES, LENGTH))


def example_rows(c: A.FutureComparison) -> list[dict]:
    """The worked example: each reading, its right label, and what each twin says."""
    return [{"position": f"{p}:{c.tokens[p]}", "right answer": get_task("peaks").vocab.tokens[t],
             "encoder says": c.predictions["encoder"][p], "decoder says": c.predictions["decoder"][p]}
            for p, t in enumerate(c.targets) if t >= 0]


def panel(device: str) -> None:
    """Section 7: the claim, the accuracies side by side, attention to the future per layer, one example."""
    st.header("7. A state that attends to its future: local peaks in a series")
    lead("Is each reading of a series a **local peak**, higher than both neighbours? That depends on the *next* "
         "reading: the encoder's full mask lets each reading see it, the decoder's causal mask does not.",
         "Read more: the task, and the best a causal model can do",
         "The principles text pictures a state at time t asking what the future holds and attending to later "
         "states. Here the states are readings (digits 0-9) and the question is whether each one is a peak. A causal "
         "model at reading i has not seen reading i + 1; the best it can do is guess from reading i itself (a high "
         "reading that rose is probably a peak: with reading r it is one with probability r/10). Averaged over the "
         "series that guessing has a ceiling, computed exactly below; no causal model can beat it. A bidirectional "
         "encoder of the same size, trained with the same seed and steps, simply looks.")
    if not {ENC_ID, DEC_ID} <= {e["id"] for e in models.manifest()}:
        st.info(f"The bundled {ENC_ID} and {DEC_ID} are not installed, so this comparison cannot run. Build them with "
                f"`python -m core.train --only {ENC_ID} --only {DEC_ID}`.")
        return
    if not st.toggle("Score both models here (about a second)", key="masks.future.show",
                     help="Off by default, so that opening the Masks page computes only the mask above."):
        return
    c = computed("Scoring both models ...", measured, device)
    m1, m2, m3 = st.columns(3)
    m1.metric(f"{ENC_ID} (full mask)", f"{c.accuracy['encoder']:.1%}")
    m2.metric(f"{DEC_ID} (causal mask)", f"{c.accuracy['decoder']:.1%}")
    m3.metric("best any causal model can do", f"{c.ceiling:.1%}",
              help="Exact expected accuracy of the best guess from the readings seen so far (PeaksTask.causal_ceiling).")
    st.caption(f"The same {c.n_examples} fresh series of {c.length} readings for both models (drawn from a seeded "
               "local torch.Generator), every reading scored.")
    even_later, even_next = c.uniform
    st.plotly_chart(mass_figure(c.future, c.next_one, even_later, even_next,
                                title="Where a reading looks: weight on later readings, per layer"),
                    key="masks.future_mass", width="stretch", config=chart_config("masks", ENC_ID, "peaks-future-mass"))
    enc_next = c.next_one["encoder"]
    top = int(enc_next.argmax())
    st.markdown(
        "The decoder's weight on later readings is exactly 0 in every layer (its mask forbids it). The encoder puts "
        + ", ".join(f"{v:.2f}" for v in c.future["encoder"])
        + f" of each reading's attention on later readings (layers L0..L{len(enc_next) - 1}; an even spread would put "
        f"{even_later:.2f}), and in L{top} {enc_next[top]:.2f} on the very next reading, "
        f"{enc_next[top] / even_next:.1f}× an even spread's {even_next:.2f}: the reading the label depends on.")
    left, right = st.columns([3, 2])
    layer = top
    left.markdown(f"**{ENC_ID}, layer L{layer}, mean over heads, on one series**")
    left.plotly_chart(pattern_figure(c.pattern[layer], c.tokens, c.tokens),
                      key="masks.future_pattern", width="stretch",
                      config=chart_config("masks", ENC_ID, f"peaks-pattern-L{layer}"))
    right.dataframe(rows_table(example_rows(c)), hide_index=True, width="stretch")
    try_this(
        f"In the sidebar pick **{ENC_ID}**, then give it the causal mask in section 1: does it fall to the causal ceiling?",
        f"Pick **{DEC_ID}** and type a series whose peaks come right before a drop (`<bos> 1 9 0 8 2`): which does it miss?",
    )
