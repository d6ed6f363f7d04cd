"""The Depth page's trained hyper-connections: the stored table of bench/hyper_trained.py (a pair with and
without hyper-connections, trained over several seeds) drawn under the hyper-connections section.
pages/depth.py calls `panel()` right after that section.
"""

from __future__ import annotations

import numpy as np
import streamlit as st

from core.analysis import hyper_trained as H
from core.figures.hyper_trained import hyper_trained_figure
from ui.shell.export import chart_config
from ui.shell.figures import cached
from ui.shell.page import rows_table

figure = cached(hyper_trained_figure)


def rows(table: dict) -> list[dict]:
    """One row per variant: accuracy per seed and its mean, the final loss, the gradient ratio bottom/top."""
    out = []
    for variant in H.VARIANTS:
        runs = H.runs_of(table, variant)
        out.append({
            "variant": variant,
            "accuracy per seed": ", ".join(f"{r.accuracy:.3f}" for r in runs),
            "mean accuracy": round(float(np.mean([r.accuracy for r in runs])), 3),
            "final loss (mean)": round(float(np.mean([r.losses[-1] for r in runs])), 4),
            "gradient L0 ÷ top, init": round(float(np.mean([r.grad_init[0] / r.grad_init[-1] for r in runs])), 2),
            "gradient L0 ÷ top, trained": round(float(np.mean([r.grad_trained[0] / r.grad_trained[-1] for r in runs])), 2),
        })
    return out


def summary(table: dict) -> str:
    """One sentence with the numbers: which variant trained to the higher accuracy, by how much, over how many seeds."""
    means = {v: float(np.mean([r.accuracy for r in H.runs_of(table, v)])) for v in H.VARIANTS}
    hyper, single = list(H.VARIANTS)
    n = len(H.runs_of(table, hyper))
    better = hyper if means[hyper] > means[single] else single
    wins = sum(a.accuracy > b.accuracy for a, b in zip(H.runs_of(table, hyper), H.runs_of(table, single)))
    return (f"After {H.STEPS} steps the **{better}** model is ahead on average ({means[hyper]:.1%} with hyper-connections "
            f"against {means[single]:.1%} with one stream, on {H.EVAL_SAMPLES} fresh examples; hyper-connections win "
            f"{wins} of {n} seeds). Measured on one toy task at one size: a fact about this pair, not a law.")


def panel() -> None:
    """The trained pair: the figure, the table and the sentence; or why they are missing."""
    st.subheader("Hyper-connections after training")
    st.markdown(
        f"The chart above is at initialisation. Here a pair is **trained**: two {H.SIZES['n_layers']}-layer stacks "
        f"(d_model {H.SIZES['d_model']}, {H.SIZES['n_heads']} heads) with the same code, seed and recipe, one with 4 "
        "residual streams mixed by Sinkhorn hyper-connections and one with a single stream (n = 1: each sublayer "
        f"adds its output, scaled by a learned gain, to the one stream), on the sort task ({H.LENGTH} digits, decoder), "
        f"{H.STEPS} AdamW steps, seeds {', '.join(map(str, H.SEEDS))}. Measured once by `python -m bench.hyper_trained "
        "--write` (minutes of CPU) and shipped with the app.")
    table = H.load_table()
    if table is None:
        st.info("The stored table (assets/precomputed/hyper_trained.json) is missing or was made with other settings; "
                "`python -m bench.hyper_trained --write` rebuilds it.")
        return
    names = list(H.VARIANTS)
    first = H.runs_of(table, names[0])[0]
    losses = {v: np.array([r.losses for r in H.runs_of(table, v)]) for v in names}
    init = {v: np.mean([r.grad_init for r in H.runs_of(table, v)], axis=0) for v in names}
    trained = {v: np.mean([r.grad_trained for r in H.runs_of(table, v)], axis=0) for v in names}
    st.plotly_chart(figure(first.curve_steps, losses, init, trained), key="depth.hyper_trained", width="stretch",
                    config=chart_config("depth", None, "hyper-connections-trained"))
    st.dataframe(rows_table(rows(table)), hide_index=True, width="stretch")
    st.markdown(summary(table))
