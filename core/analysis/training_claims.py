"""Two claims about training, measured over seeds instead of told from one run (issue 39): whether the plain
dot-product score slows learning at d_model 128 with 2 heads, and how often pre-LN and post-LN stacks learn
without a warm-up. `bench/training_claims.py --write` runs every cell and stores the table the Train and
Depth pages quote (assets/precomputed/training_claims.json); a test re-runs the first steps of one cell and
checks they match it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Iterable, Optional

from core.analysis.train import TrainSettings
from core.device import one_thread
from core.train import evaluate

TABLE_PATH = Path(__file__).resolve().parents[2] / "assets" / "precomputed" / "training_claims.json"
LOSS_TARGET = 1.0  # "the loss falls": the first step whose training-batch loss is under this
CHECK_STEP = 40  # the stored loss after this many steps lets a test re-run a cell cheaply
LEARNED = 0.99  # a run "learned" the task when its accuracy on fresh examples is at least this
EVAL_SAMPLES = 512  # fresh examples for the final accuracy (core.train.evaluate's stream)
SEEDS = (0, 1, 2, 3, 4)

# The Train page's settings for each claim (ui.train.view): the default reverse task on an encoder, 300 steps.
BASE = TrainSettings(task="reverse", arch="encoder", steps=300)
SCORE_BASE = replace(BASE, d_model=128, n_heads=2)  # the plain-dot hint's sizes
SCORES = ("scaled_dot", "dot")
NORM_LR = 0.007  # the Train page's "no warm-up" preset (PRESET_LR)
NORMS = ("pre", "post")
DEPTHS = (2, 4, 6)
WARMUPS = (0, 30, 100)  # none, the default for 300 steps (a tenth), and the page's "now set it to 100"


@dataclass(frozen=True)
class RunOutcome:
    """What one seeded run did: when its loss first fell under LOSS_TARGET, its loss after CHECK_STEP steps
    and at the end (mean of the last 10 steps), and its accuracy on fresh examples."""

    seed: int
    steps_to_target: Optional[int]  # None: the loss never fell under LOSS_TARGET
    loss_at_check: float
    final_loss: float
    accuracy: float


def run_cell(settings: TrainSettings) -> RunOutcome:
    """Train one seeded run to the end and summarise it (10-30 s on one thread of a shared CPU)."""
    trainer = settings.trainer("cpu")
    with one_thread():  # small models: a thread pool only adds waiting (and the stored losses were made so)
        trainer.run()
    losses = [h["loss"] for h in trainer.history]
    first = next((i + 1 for i, loss in enumerate(losses) if loss < LOSS_TARGET), None)
    tail = losses[-10:]
    return RunOutcome(settings.seed, first, losses[CHECK_STEP - 1], sum(tail) / len(tail),
                      float(evaluate(trainer.model, settings.task, n_samples=EVAL_SAMPLES)))


def loss_after(settings: TrainSettings, steps: int = CHECK_STEP) -> float:
    """The training-batch loss after the first `steps` steps of this run (same schedule as the full run): a few
    seconds, so a test can check a stored cell without training it to the end."""
    trainer = settings.trainer("cpu")
    with one_thread():
        trainer.run(steps)
    return trainer.history[-1]["loss"]


def score_settings(score: str, seed: int) -> TrainSettings:
    """The plain-dot hint's run: d_model 128, 2 heads, default warm-up, one score function."""
    return replace(SCORE_BASE, score=score, seed=seed)


def norm_settings(norm: str, n_layers: int, warmup: int, seed: int) -> TrainSettings:
    """The warm-up comparison's run: the preset's learning rate, one LayerNorm placement, depth and warm-up."""
    return replace(BASE, norm=norm, n_layers=n_layers, warmup=warmup, lr=NORM_LR, seed=seed)


def cell_key(**fields) -> str:
    """A stable text key of one cell of the table (its settings but the seed)."""
    return ",".join(f"{k}={fields[k]}" for k in sorted(fields))


def all_cells() -> Iterable[tuple[str, str, TrainSettings]]:
    """(table, key, settings) of every run, the cheapest first (the scores, then 2, 4 and 6 layers)."""
    for seed in SEEDS:
        for score in SCORES:
            yield "score", cell_key(score=score), score_settings(score, seed)
    for depth in DEPTHS:
        for seed in SEEDS:
            for norm in NORMS:
                for warmup in WARMUPS:
                    yield "norm", cell_key(norm=norm, layers=depth, warmup=warmup), norm_settings(norm, depth,
                                                                                                  warmup, seed)


def load_table(path: Path = TABLE_PATH) -> dict:
    """The stored table: {"score": {key: [outcome dicts]}, "norm": {...}, "settings": {...}}; empty if absent."""
    if not path.exists():
        return {"score": {}, "norm": {}}
    return json.loads(path.read_text())


def outcomes(table: dict, kind: str, **fields) -> list[RunOutcome]:
    """The stored runs of one cell, in seed order."""
    rows = table.get(kind, {}).get(cell_key(**fields), [])
    return sorted((RunOutcome(**row) for row in rows), key=lambda o: o.seed)


def learned_count(runs: list[RunOutcome]) -> tuple[int, int]:
    """(runs that reached LEARNED accuracy, runs)."""
    return sum(o.accuracy >= LEARNED for o in runs), len(runs)


def rate(table: dict, norm: str, n_layers: int, warmup: int) -> str:
    """'3 of 5': how many stored seeds of one warm-up cell reached LEARNED accuracy."""
    learned, n = learned_count(outcomes(table, "norm", norm=norm, layers=n_layers, warmup=warmup))
    return f"{learned} of {n}"


def rate_rows(table: dict) -> list[dict]:
    """The warm-up table as rows: depth and norm, then "learned / seeds" for each warm-up (stored cells only)."""
    rows = []
    for depth in DEPTHS:
        for norm in NORMS:
            cells = {w: learned_count(outcomes(table, "norm", norm=norm, layers=depth, warmup=w)) for w in WARMUPS}
            if any(n for _, n in cells.values()):
                rows.append({"layers": depth, "LayerNorm": f"{norm}-LN",
                             **{f"warm-up {w}": f"{k} of {n}" for w, (k, n) in cells.items()}})
    return rows


def score_steps(table: dict, score: str) -> list[Optional[int]]:
    """The step at which each stored seed's loss first fell under LOSS_TARGET, in seed order."""
    return [o.steps_to_target for o in outcomes(table, "score", score=score)]


def spread_text(table: dict) -> str:
    """' (their spread is 0.38 without the division, 0.05 with it)' from the stored first scores; '' if absent."""
    spread = table.get("initial_score_std", {})
    if not {"dot", "scaled_dot"} <= set(spread):
        return ""
    return f" (their spread is {spread['dot']:.2f} without the division, {spread['scaled_dot']:.2f} with it)"


def initial_score_spread(settings: TrainSettings) -> float:
    """The standard deviation of layer 0's attention scores on the run's first batch, before any step: how
    large the scores start (a saturated softmax needs spreads of several units)."""
    trainer = settings.trainer("cpu")
    batch = trainer.batch_for(0)
    _, cache = trainer.model.run_with_cache(batch.tokens, names="blocks.0.attn.hook_attn_scores")
    return float(next(iter(cache.values())).std())


def add_outcome(table: dict, kind: str, key: str, outcome: RunOutcome) -> None:
    """Put one run into the table (replacing an earlier run of the same seed)."""
    rows = [r for r in table.setdefault(kind, {}).setdefault(key, []) if r["seed"] != outcome.seed]
    table[kind][key] = sorted(rows + [asdict(outcome)], key=lambda r: r["seed"])


def settings_record() -> dict:
    """The fixed settings of both tables, stored beside them so the pages can quote them."""
    return {"task": BASE.task, "arch": BASE.arch, "steps": BASE.steps, "score_d_model": SCORE_BASE.d_model,
            "score_heads": SCORE_BASE.n_heads, "score_lr": SCORE_BASE.lr, "norm_lr": NORM_LR,
            "norm_d_model": BASE.d_model, "norm_heads": BASE.n_heads, "loss_target": LOSS_TARGET,
            "check_step": CHECK_STEP, "learned": LEARNED, "eval_samples": EVAL_SAMPLES}
