"""Ablation: replace chosen heads' outputs (hook_z) with zeros or their mean, one call at a time.

Every intervention goes through `run_with_hooks` on `hook_z`, so the shared model is never
changed; heads are named by `HeadRef` (attention kind key, layer, head). `ablate_each` removes
every head alone and ranks them by how much the task's loss rises.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Optional, Sequence

import torch
import torch.nn.functional as F

from core.analysis.attention import AttentionKind, attention_kinds
from core.model import Transformer
from core.tasks import IGNORE, Batch, Task

ABLATION_MODES = ("zero", "mean")
HeadRef = tuple[str, int, int]  # (attention kind key, layer, head)


class ReplaceHeads:
    """A hook function for `hook_z` `[batch pos head d_head]`: returns a copy with chosen heads replaced.

    fill None -> zeros; else fill `[head d_head]` holds each head's mean output.
    """

    def __init__(self, heads: Sequence[int], fill: Optional[torch.Tensor] = None):
        self.heads = sorted(set(int(h) for h in heads))
        self.fill = fill

    def __call__(self, z: torch.Tensor, hook) -> torch.Tensor:
        z = z.clone()
        for h in self.heads:
            z[:, :, h] = 0.0 if self.fill is None else self.fill[h].to(z)
        return z


def kinds_by_key(model: Transformer) -> dict[str, AttentionKind]:
    """The model's attention kinds keyed by their short id (self; or enc, dec, cross)."""
    return {k.key: k for k in attention_kinds(model.cfg.arch)}


def ablation_hooks(model: Transformer, heads: Iterable[HeadRef], mode: str = "zero",
                   means: Optional[dict] = None) -> list[tuple[str, Callable]]:
    """The `fwd` list for run_with_hooks that ablates `heads` (one function per hook_z touched)."""
    if mode not in ABLATION_MODES:
        raise ValueError(f"mode must be one of {list(ABLATION_MODES)}, got {mode!r}")
    kinds = kinds_by_key(model)
    grouped: dict[str, list[int]] = {}
    for key, layer, head in heads:
        if key not in kinds:
            raise ValueError(f"this model has no attention kind {key!r}; it has {list(kinds)}")
        if not 0 <= layer < model.cfg.n_layers or not 0 <= head < model.cfg.n_heads:
            raise ValueError(f"no head L{layer} H{head}: the model has {model.cfg.n_layers} layers "
                             f"x {model.cfg.n_heads} heads")
        grouped.setdefault(kinds[key].hook(layer, "hook_z"), []).append(head)
    if mode == "mean" and means is None:
        raise ValueError("mean ablation needs each head's mean output: pass means=head_means(...)")
    return [(name, ReplaceHeads(hs, None if mode == "zero" else means[name])) for name, hs in grouped.items()]


def _query_side(batch: Batch, kind: AttentionKind) -> torch.Tensor:
    """The token ids whose positions a kind's hook_z runs over (target side for decoder kinds)."""
    return batch.tgt if (kind.queries == "target" and batch.tgt is not None) else batch.tokens


def head_means(model: Transformer, batch: Batch, pad_id: int) -> dict[str, torch.Tensor]:
    """Each hook_z's mean output per head over the batch's real (non-<pad>) positions: name -> `[head d_head]`."""
    kinds = attention_kinds(model.cfg.arch)
    names = [k.hook(i, "hook_z") for k in kinds for i in range(model.cfg.n_layers)]
    kwargs = {"tgt": batch.tgt.to(model.device)} if batch.tgt is not None else {}
    _, cache = model.run_with_cache(batch.tokens.to(model.device), names, **kwargs)
    out = {}
    for k in kinds:
        real = (_query_side(batch, k) != pad_id).to(model.device)  # [batch pos]
        for i in range(model.cfg.n_layers):
            z = cache[k.hook(i, "hook_z")]  # [batch pos head d_head]
            out[k.hook(i, "hook_z")] = z[real].mean(dim=0)  # [head d_head]
    return out


@dataclass
class AblationResult:
    """The task metric and loss of one (possibly ablated) run on a batch."""

    accuracy: float
    loss: float


def run_ablated(model: Transformer, task: Task, batch: Batch, heads: Iterable[HeadRef] = (),
                mode: str = "zero", means: Optional[dict] = None) -> AblationResult:
    """Accuracy and mean cross-entropy (scored positions) with `heads` ablated; the model is untouched."""
    fwd = ablation_hooks(model, list(heads), mode, means)
    kwargs = {"tgt": batch.tgt.to(model.device)} if batch.tgt is not None else {}
    logits = model.run_with_hooks(batch.tokens.to(model.device), fwd, **kwargs)  # [batch pos vocab]
    targets = batch.targets.to(logits.device)
    loss = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), ignore_index=IGNORE)  # [batch*pos vocab]
    return AblationResult(task.accuracy(logits, batch), float(loss))


def all_heads(model: Transformer) -> list[HeadRef]:
    """Every head of every attention kind, in reading order."""
    return [(k.key, i, h) for k in attention_kinds(model.cfg.arch)
            for i in range(model.cfg.n_layers) for h in range(model.cfg.n_heads)]


def head_label(model: Transformer, ref: HeadRef) -> str:
    """'L1 H2' (single-stack) or 'cross L1 H2' (encoder-decoder)."""
    key, layer, head = ref
    return f"L{layer} H{head}" if not model.is_encoder_decoder else f"{key} L{layer} H{head}"


def ablate_each(model: Transformer, task: Task, batch: Batch, mode: str = "zero",
                means: Optional[dict] = None, heads: Optional[Sequence[HeadRef]] = None) -> list[dict]:
    """Ablate every head (or each of `heads`) alone; rows sorted by how much the loss rises (most important
    first)."""
    base = run_ablated(model, task, batch)
    rows = []
    for ref in (all_heads(model) if heads is None else list(heads)):
        res = run_ablated(model, task, batch, [ref], mode, means)
        rows.append({"head": head_label(model, ref), "kind": ref[0], "layer": ref[1], "index": ref[2],
                     "accuracy": res.accuracy, "accuracy change": res.accuracy - base.accuracy,
                     "loss": res.loss, "loss change": res.loss - base.loss})
    rows.sort(key=lambda r: r["loss change"], reverse=True)
    for rank, row in enumerate(rows, 1):
        row["rank"] = rank
    return rows
