"""The Retrieval page's cached work: the kernel toy, the beta sweep, the recall models' accuracies,
their key-span residuals and the hijack curves, and the page's figures.

Every cache is a process-wide ui.shell.memo memo made once per process here; results are read-only and
shared by every session. The computing is core.analysis.retrieval's (math) and
core.analysis.recall's (models): this module fetches the shared models and keeps the results.
"""

from __future__ import annotations

import numpy as np

from core.analysis import recall as AR
from core.analysis import retrieval as A
from core.figures import retrieval as F
from core.train import evaluate
from ui.shell import models
from ui.shell.figures import cached
from ui.shell.memo import freeze, memo

TIED_PAIR = ("recall-decoder", "recall-tied")  # panel 3: the same recipe, with and without W_V
DEFENDED = ("recall-decoder", "recall-keyclip", "recall-cosine")  # panel 4: no defence, then the two defences
MODEL_NAMES = {"recall-decoder": "no defence", "recall-tied": "V = K (tied)", "recall-keyclip": "key-norm clip",
               "recall-cosine": "cosine scores"}
N_ACCURACY = 512  # fresh examples for each clean accuracy
N_ATTACK = 256  # examples for each point of the hijack curve
ACC_SEED = 4242
ALPHAS = tuple(float(a) for a in np.logspace(0, 3, 13))  # 1 .. 1000, four points a decade


@memo(maxsize=64)
def smoothing(x: np.ndarray, y: np.ndarray, query_x: float, query_norm: float, tilt: float) -> A.SmoothingResult:
    """The kernel toy's curves (see core.analysis.retrieval.smooth)."""
    return freeze(A.smooth(x, y, query_x, query_norm, tilt))


@memo(maxsize=4)
def bandwidths(query_norms: tuple) -> tuple:
    """The bandwidth table's rows, predicted and measured kernel widths (the same for everyone; measuring
    the widths takes a few ms, once). A tuple of dicts shared by every session: never change it."""
    return tuple(A.bandwidth_table(query_norms))


@memo(maxsize=64)
def sweep(keys: np.ndarray, values: np.ndarray, query_angle: float, betas: np.ndarray) -> A.LookupSweep:
    """The soft database read at every beta."""
    return freeze(A.lookup_sweep(keys, values, A.unit(query_angle), betas))


@memo(maxsize=16)
def clean_accuracy(model_id: str, device: str) -> float:
    """The model's recall accuracy on N_ACCURACY fresh examples (a stream training never saw)."""
    model, _ = models.get_model(model_id, device)
    return evaluate(model, AR.TASK, n_samples=N_ACCURACY, seed=ACC_SEED, length=5)


@memo(maxsize=8)
def span_report(model_id: str, device: str) -> AR.SpanReport:
    """Every head's output against the span of its keys, on 64 examples."""
    model, _ = models.get_model(model_id, device)
    return freeze(AR.key_span_residuals(model))


@memo(maxsize=4)
def span_table(device: str) -> tuple[tuple[dict, ...], float, float]:
    """Panel 3's table (largest and median relative residual of every head of both models), the tied
    model's largest residual and the untied model's median: once per device, not on every click."""
    reports = {mid: span_report(mid, device) for mid in TIED_PAIR}
    rows = tuple({"model": mid, "layer": lay, "head": h, "largest relative residual": float(reports[mid].worst()[lay, h]),
                  "median relative residual": float(np.median(reports[mid].relative[lay, h]))}
                 for mid in TIED_PAIR for lay in range(2) for h in range(2))
    return rows, float(reports["recall-tied"].worst().max()), float(np.median(reports["recall-decoder"].relative))


@memo(maxsize=32)
def hijack_rows(device: str, position: int) -> tuple[tuple[dict, ...], tuple[dict, ...]]:
    """Panel 4's two tables for one scaled position, once rather than on every α click: per model its clean
    accuracy, its accuracy at α = 1 and at the largest α and the attention on the key there; and every point
    of the three curves (the CSV)."""
    curves = {mid: hijack_curve(mid, device, position) for mid in DEFENDED}
    summary = []
    for mid in DEFENDED:
        worst = curves[mid][-1]
        summary.append({"model": f"{MODEL_NAMES[mid]} ({mid})", "clean accuracy": clean_accuracy(mid, device),
                        "accuracy at α = 1": curves[mid][0].accuracy, f"accuracy at α = {worst.alpha:g}": worst.accuracy,
                        f"attention on the key at α = {worst.alpha:g}": worst.mass})
    points = tuple({"model": m, "alpha": p.alpha, "accuracy": p.accuracy, "attention_on_key": p.mass,
                    "attention_on_key_all_queries": p.mass_all_queries} for m in DEFENDED for p in curves[m])
    return tuple(summary), points


@memo(maxsize=32)
def hijack_curve(model_id: str, device: str, position: int) -> list[AR.HijackPoint]:
    """The attack at every alpha of ALPHAS on N_ATTACK examples."""
    model, _ = models.get_model(model_id, device)
    return AR.hijack_curve(model, position, ALPHAS, n=N_ATTACK)


@memo(maxsize=64)
def hijack_example(model_id: str, device: str, position: int, alpha: float) -> tuple[AR.HijackPoint, np.ndarray, list]:
    """The attack at one alpha: its numbers on N_ATTACK examples, the first example's last-layer
    pattern `[q k]` and that example's tokens."""
    model, meta = models.get_model(model_id, device)
    batch = AR.recall_batch(N_ATTACK, 5, 5)
    point, pattern = AR.hijack_run(model, batch, position, alpha)
    tokens = [meta["vocab"][int(i)] for i in batch.tokens[0]]
    return point, freeze(pattern), tokens


kernel_figure = cached(F.kernel_figure)
estimate_figure = cached(F.estimate_figure)
arrows_figure = cached(F.arrows_figure)
sweep_figure = cached(F.sweep_figure)
weights_figure = cached(F.weights_comparison)
span_figure = cached(F.span_figure)
hijack_figure = cached(F.hijack_figure)
pattern_figure = cached(F.pattern_figure)
scale_figure = cached(F.scale_figure)
