"""Hyper-connections trained, not only at initialisation: a small pair with and without, on a toy task.

Both models are `core.hyper.HyperTransformer` stacks of the same sizes, seed and recipe: one with n = 4
residual streams mixed by Sinkhorn hyper-connections, one with a single stream (n = 1: H_res = [1], h_pre = 1,
so each sublayer adds h_post * F(LN(x)) to one stream, a pre-LN residual with a learned output gain). Each is
trained with AdamW on the sort task (decoder) and records its loss curve, its accuracy on fresh examples, and
the loss gradient at the residual state entering every block, at initialisation and after training.

`bench/hyper_trained.py --write` runs every seed and stores the table the Depth page shows
(assets/precomputed/hyper_trained.json); a test re-measures one cheap cell of it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional

import numpy as np
import torch
import torch.nn.functional as F

from core.hyper import HyperConfig, HyperTransformer
from core.tasks import IGNORE, get_task
from core.train import derive_seed, evaluate, format_width, lr_factor

TABLE_PATH = Path(__file__).resolve().parents[2] / "assets" / "precomputed" / "hyper_trained.json"
TASK, LENGTH = "sort", 8
VARIANTS = {"hyper (4 streams, Sinkhorn)": 4, "single stream": 1}  # label -> n_streams
SIZES = dict(d_model=32, n_heads=4, n_layers=6, noise=0.5)
STEPS, BATCH, LR, WARMUP = 600, 64, 3e-3, 50
SEEDS = (0, 1, 2)
CURVE_EVERY = 20  # steps between recorded losses
GRAD_SAMPLES = 64  # the fixed batch the gradient profile is measured on
EVAL_SAMPLES = 512
_TRAIN_STREAM, _GRAD_STREAM = 0, 3


def build(n_streams: int, seed: int) -> HyperTransformer:
    """A fresh stack for the task: every weight from a local generator seeded with `seed`."""
    task = get_task(TASK)
    cfg = HyperConfig(n_streams=n_streams, mixing="sinkhorn", vocab_size=len(task.vocab),
                      max_len=format_width(task, "decoder", LENGTH), **SIZES)
    return HyperTransformer(cfg, seed=seed)


def _loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy over the scored positions (logits [batch pos vocab])."""
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=IGNORE)


def gradient_profile(model: HyperTransformer, seed: int = 0) -> np.ndarray:
    """[n_layers + 1] ||d loss / d x_l|| at the state entering each block (last: the final state), on a fixed
    batch of GRAD_SAMPLES examples. Gradients by torch.autograd.grad: no `.grad` is written."""
    batch = get_task(TASK).batch(GRAD_SAMPLES, "decoder", seed=derive_seed(seed, _GRAD_STREAM), length=LENGTH)
    states: list[torch.Tensor] = []
    with torch.enable_grad():
        loss = _loss(model(batch.tokens, states), batch.targets)
        grads = torch.autograd.grad(loss, states)
    return np.array([float(g.double().norm()) for g in grads])


@dataclass
class HyperRun:
    """One trained model's record."""

    variant: str
    seed: int
    curve_steps: list[int]
    losses: list[float]  # training loss at curve_steps
    accuracy: float  # on EVAL_SAMPLES fresh examples
    grad_init: list[float]  # [n_layers + 1] gradient profile before training
    grad_trained: list[float]  # the same after training


def run_cell(variant: str, seed: int, steps: int = STEPS) -> HyperRun:
    """Train one variant from `seed` for `steps` steps (seeded batches, AdamW with warm-up and cosine decay)."""
    task = get_task(TASK)
    model = build(VARIANTS[variant], seed)
    grad_init = gradient_profile(model, seed)
    optim = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.0)
    curve_steps, losses = [], []
    model.train()
    for step in range(steps):
        for group in optim.param_groups:
            group["lr"] = LR * lr_factor(step, steps, WARMUP)
        batch = task.batch(BATCH, "decoder", seed=derive_seed(seed, _TRAIN_STREAM, step), length=LENGTH)
        loss = _loss(model(batch.tokens), batch.targets)
        optim.zero_grad(set_to_none=True)
        loss.backward()  # a private model built here, never a shared one
        optim.step()
        if step % CURVE_EVERY == 0 or step == steps - 1:
            curve_steps.append(step)
            losses.append(float(loss.detach()))
    accuracy = evaluate(model, task, n_samples=EVAL_SAMPLES, seed=seed, length=LENGTH, arch="decoder")
    return HyperRun(variant, seed, curve_steps, losses, accuracy, grad_init.tolist(),
                    gradient_profile(model, seed).tolist())


def settings() -> dict:
    """Everything a stored table depends on, so a stale table is recognised."""
    return {"task": TASK, "length": LENGTH, "variants": VARIANTS, "sizes": SIZES, "steps": STEPS, "batch": BATCH,
            "lr": LR, "warmup": WARMUP, "curve_every": CURVE_EVERY, "grad_samples": GRAD_SAMPLES,
            "eval_samples": EVAL_SAMPLES}


def load_table(path: Path = TABLE_PATH) -> Optional[dict]:
    """The stored table {"settings", "runs": [HyperRun as dict]}, or None when absent or made with other settings."""
    if not path.is_file():
        return None
    table = json.loads(path.read_text())
    return table if table.get("settings") == json.loads(json.dumps(settings())) else None


def save_table(runs: list[HyperRun], path: Path = TABLE_PATH) -> None:
    path.write_text(json.dumps({"settings": settings(), "runs": [asdict(r) for r in runs]}, indent=1) + "\n")


def runs_of(table: dict, variant: str) -> list[HyperRun]:
    """The stored runs of one variant, by seed."""
    return sorted((HyperRun(**r) for r in table["runs"] if r["variant"] == variant), key=lambda r: r.seed)
