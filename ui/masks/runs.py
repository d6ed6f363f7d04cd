"""The Masks page's cached work: hooked runs under a mask, accuracies, influence, timings, the
future-legality comparison, the leak curves, the numbers its graph section draws, and its figures.

Every cache is a process-wide ui.shell.memo memo, made once per process here (not in the page script);
results are read-only numpy arrays shared by every session. The computing is core.analysis.masks's:
this module only fetches the shared models and keeps the results.
"""

from __future__ import annotations

import numpy as np

from core.analysis import masks as A
from core.figures import masks as F
from core.tasks import get_task
from ui.server import measure_process
from ui.shell import models
from ui.shell.figures import cached
from ui.shell.memo import freeze, memo
from ui.shell.runs import model_inputs

N_SAMPLES = 256  # task examples scored for each accuracy
ACC_SEED = 7
ENC_ID, DEC_ID = "future-legality-encoder", "future-legality-decoder"
TIMED_NS = (128, 256, 512, 1024, 2048)  # sequence lengths the cost section times


@memo(maxsize=64)
def masked_run(cache_key: tuple, masks: np.ndarray | None) -> dict[str, np.ndarray]:
    """Logits, scores and patterns [layer head q k] for the input, under ``masks`` (None = default)."""
    model, ids, kwargs = model_inputs(cache_key)
    arg = None if masks is None else A.mask_argument(masks)
    return freeze(A.masked_patterns(model, ids, arg, kwargs.get("tgt")))


@memo(maxsize=64)
def masked_accuracy(model_id: str, device: str, masks: np.ndarray | None, length: int) -> float:
    """Task accuracy on N_SAMPLES fixed examples of ``length`` under ``masks`` (None = default)."""
    model, meta = models.get_model(model_id, device)
    arg = None if masks is None else A.mask_argument(masks)
    return A.masked_accuracy(model, meta["task"], arg, N_SAMPLES, ACC_SEED, length)


@memo(maxsize=64)
def influence(cache_key: tuple, masks: np.ndarray | None) -> np.ndarray:
    """Measured influence [q k] (gradient size) for the input under ``masks``."""
    model, ids, kwargs = model_inputs(cache_key)
    return freeze(A.influence(model, ids, None if masks is None else A.mask_argument(masks), kwargs.get("tgt")))


@memo(maxsize=64)
def text_fill_in(cache_key: tuple, masks: np.ndarray | None, most: int | None = None) -> dict[str, np.ndarray]:
    """An encoder checkpoint's guess for each word of the text hidden behind [MASK] in turn, under ``masks``
    (None = default): A.fill_in's arrays, plus the ``positions`` guessed (every token but the special ones; the
    first ``most`` of them when given: each is one more copy of the text to run)."""
    model, ids, _ = model_inputs(cache_key)
    tokenizer = models.text_task(cache_key[0], cache_key[1]).vocab.tokenizer
    special = set(tokenizer.special_ids.values())
    positions = [p for p, i in enumerate(ids[0].tolist()) if i not in special][:most]
    arg = None if masks is None else A.mask_argument(masks)
    out = A.fill_in(model, ids, tokenizer.mask_id, positions, arg)
    out["positions"] = np.asarray(positions, dtype=np.int64)
    return freeze(out)


@memo(maxsize=16)
def width_to_length(task_name: str, arch: str, width: int) -> int | None:
    """The task's content length whose examples are ``width`` positions wide (None if none)."""
    return A.length_for_width(get_task(task_name), arch, width)


@memo(maxsize=8)
def timing(b: int, run: int) -> list[dict]:
    """One timing run (``run`` only distinguishes a fresh measurement from the kept one). Slow on a
    miss: the view shows a spinner then. Measured in the worker process (ui.server.measure_process), not
    among the other students' page runs."""
    return measure_process.measure(A.time_attention, ns=TIMED_NS, b=b, repeats=3, seed=run)


@memo(maxsize=8)
def legality_panel_data(device: str, length: int) -> dict:
    """Accuracies of the two future-legality models under both masks, and one worked example."""
    enc, _ = models.get_model(ENC_ID, device)
    dec, _ = models.get_model(DEC_ID, device)
    return freeze(A.legality_comparison(enc, dec, get_task("future-legality"), length, N_SAMPLES, ACC_SEED))


@memo(maxsize=64)
def compare_masking(scores: np.ndarray, mask: np.ndarray) -> dict[str, np.ndarray]:
    """Right and wrong masking of one head's scores (kept: the leak controls below it rerun their section
    without changing it, and its torch calls would each wait for the interpreter lock in a busy class)."""
    return freeze(A.compare_masking(scores, mask))


@memo(maxsize=256)
def leak_table(gap: float, n_forbidden: int, eps: float) -> list[dict]:
    """The worst-case leak table (about 150 small torch calls: computed once per setting per process)."""
    return A.leak_table(gap, n_forbidden, eps)


@memo(maxsize=64)
def leak_curves(n_forbidden: int) -> dict[str, np.ndarray]:
    """The leak curve of every number format and mask constant for ``n_forbidden`` blocked keys."""
    return freeze(A.leak_curves(n_forbidden))


@memo(maxsize=64)
def real_score_leaks(scores: np.ndarray, mask: np.ndarray):
    """What each masking constant leaks on one head's real scores (kept: the leak controls do not change it)."""
    return A.real_score_leaks(scores, mask)


@memo(maxsize=64)
def graph_facts(stack: np.ndarray, layer: int, same_for_every_layer: bool) -> dict:
    """What the graph section draws for the masks ``stack`` [layer q k] (see A.graph_facts)."""
    return freeze(A.graph_facts(stack, layer, same_for_every_layer))


@memo(maxsize=128)
def receptive_fields(stacked: np.ndarray, token: int, max_rows: int) -> np.ndarray:
    """Keys that can reach ``token`` after 1, 2, ... layers of ``stacked`` [depth q k]: [layer k]."""
    return freeze(A.receptive_fields(stacked, token, max_rows))


# Figures, built once per distinct input for every session (see ui.shell.figures.cached).
mask_grid_figure = cached(F.mask_grid)
heatmap_figure = cached(F.titled_heatmap)
row_sums_figure = cached(F.row_sums_chart)
leak_figure = cached(F.leak_chart)
arcs_figure = cached(F.arc_diagram)
laplacian_figure = cached(F.laplacian_heatmap)
spectrum_figure = cached(F.spectrum_bars)
reach_figure = cached(F.reach_by_layer)
field_figure = cached(F.receptive_field_grid)
influence_figure = cached(F.influence_heatmap)
pairs_figure = cached(F.pairs_chart)
timing_figure = cached(F.timing_chart)
