"""The Depth page's cross-attention panel: does the decoder's gradient reach the source tokens without
fading through the encoder's depth? Measured on every bundled encoder-decoder model (core.analysis.cross_path).

Kept out of ui.depth.view so that module stays the page's reading order; pages/depth.py calls `panel()`.
"""

from __future__ import annotations

import numpy as np
import streamlit as st

from core.analysis import cross_path as A
from core.device import one_thread
from core.figures.cross_path import cross_path_figure
from core.tasks import get_task
from ui.shell import models
from ui.shell.export import chart_config
from ui.shell.figures import cached
from ui.shell.memo import freeze, memo
from ui.shell.page import computed, rows_table

SAMPLES = 64  # fresh task examples per model
SEED = 5
BARS = ("all paths", "identity path only")
figure = cached(cross_path_figure)


def encdec_ids() -> tuple[str, ...]:
    """The bundled encoder-decoder models that are built properly (not the leaky 'peek' one)."""
    return tuple(r["id"] for r in models.manifest() if r.get("arch") == "encoder-decoder" and "peek" not in r["id"])


@memo(maxsize=4)
def measured(model_ids: tuple[str, ...], device: str) -> dict:
    """Each model's CrossPath on SAMPLES fresh examples at its training length (a few seconds on a miss)."""
    out = {}
    for model_id in model_ids:
        model, meta = models.get_model(model_id, device)
        with one_thread():
            out[model_id] = A.cross_path(model, get_task(meta["task"]), SAMPLES, seed=SEED,
                                         length=meta.get("train_length"))
    return freeze(out)


def rows(data: dict) -> list[dict]:
    """One table row per model: the numbers the sentence below the chart quotes."""
    out = []
    for model_id, p in data.items():
        row = {"model": model_id, "loss": f"{p.loss:.2g}",
               "embeddings ÷ top of stream": round(p.embed_over_top, 3),
               "identity path's share": round(p.identity_share, 3),
               "cosine (identity, all)": round(p.identity_cosine, 3)}
        for j, v in enumerate(p.via_layer):
            row[f"via decoder L{j} cross-attn ÷ output"] = round(float(v / p.encoder_grad[-1]), 3)
        out.append(row)
    return out


def panel(device: str) -> None:
    """The claim, the measurement on every bundled encoder-decoder model, the figure, the table and the verdicts."""
    st.subheader("Cross-attention: a short gradient path to the source?")
    st.markdown(
        "The principles text calls cross-attention a direct hotline to the encoder's final representation that gives "
        "\"a short, efficient gradient path that bypasses the full depth of the encoder\". Measured here on the "
        f"bundled encoder-decoder models, over {SAMPLES} fresh examples each: the decoder's loss gradient at every "
        "state of the encoder's residual stream; at the source embeddings with every path open and with the residual "
        "identity alone (every encoder sublayer's output detached: same forward pass, no gradient through their "
        "weights); and at the encoder's output, the part each decoder layer's cross-attention delivers on its own.")
    ids = encdec_ids()
    if not ids:
        st.info("No bundled encoder-decoder model was found in assets/models (`python -m core.train --all` builds them).")
        return
    data = computed("Measuring the gradient paths ...", measured, ids, device)
    first = next(iter(data.values()))
    along = {m: p.encoder_grad / p.encoder_grad[-2] for m, p in data.items()}
    at_embed = {m: np.array([p.embed_grad, p.identity_grad]) / p.encoder_grad[-2] for m, p in data.items()}
    st.plotly_chart(figure(first.labels, along, at_embed, BARS), key="depth.cross_path", width="stretch",
                    config=chart_config("depth", None, "cross-attention-gradient-path"))
    st.dataframe(rows_table(rows(data)), hide_index=True, width="stretch")
    for model_id, p in data.items():
        st.markdown(A.verdict(p, model_id))
