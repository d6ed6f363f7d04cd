"""Cached work of the Heads page: one computation per (model, options), shared by every session.

Process-wide memos (ui.shell.memo) keyed on the model id, never on the model: each function re-gets the
model with ui.shell.models.get_model, as ui.shell.runs does. Results are shared, so they are frozen (numpy
arrays read-only, also inside the analysis dataclasses) and must never be changed by a page.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Callable, Optional

import numpy as np
import torch

from core.analysis.heads.ablation import (AblationResult, ablate_each, ablation_hooks, all_heads, head_means,
                                          kinds_by_key, run_ablated)
from core.analysis.heads.cost import head_cost_rows, measured_peaks
from core.analysis.heads.circuits import ov_available, ov_circuit, ov_circuit_on, qk_circuit, qk_circuit_on
from core.analysis.heads.redundancy import Redundancy, redundancy as redundancy_report
from core.analysis.heads.roles import RoleScores, role_scores
from core.analysis.heads.subspaces import SubspaceReport, subspace_report
from core.analysis.heads.toy import ToyReport, few_threads, toy_model, toy_report, toy_trainer
from core.tasks import Task, TwoLookupTask, get_task
from core.text_task import EXAMPLES, TEXT_TASK, TextTask
from ui.shell import models
from ui.shell.memo import freeze, memo

ABLATION_EXAMPLES = 256  # task examples scored with and without the chosen heads
ABLATION_SEED = 4321
PROBE_SEQUENCES = 32  # repeated random sequences for the role scores and redundancy
MI_COMPONENTS = 4
# A checkpoint from a folder (core.text_task): its probe, its batch and the bounds that keep a GPT-2 small
# (12 layers x 12 heads, vocabulary 50,257) to a few seconds.
TEXT_PROBE_SEQUENCES = 8  # repeated random-token sequences: 8 x 101 positions
TEXT_PROBE_TOKENS = 50  # random tokens in each half (as in the induction-head literature), fewer for a short context
TEXT_ABLATION_EXAMPLES = len(EXAMPLES)  # each example sentence once (more would repeat them)
CIRCUIT_TOKENS = 40  # distinct tokens of the input drawn as a circuit table's rows and columns
PAIRS_ALL_MAX = 16  # heads compared pairwise over all layers; more: the picked layer's heads
RANK_ALL_MAX = 32  # heads removed one by one over all layers; more: the picked layer's heads
RANK_ON_REQUEST_PARAMETERS = 20_000_000  # a larger model removes heads one by one when asked (GPT-2 small: ~1.5 s each)


def _kind(model_id: str, device: str, kind_key: str) -> tuple:
    """(model, meta, attention kind) for a memoised function's arguments."""
    model, meta = models.get_model(model_id, device)
    return model, meta, kinds_by_key(model)[kind_key]


def _task(model_id: str, device: str, task_name: str) -> Task | TextTask:
    """The task named in a memoised function's arguments: a toy task, or a checkpoint's text."""
    return models.text_task(model_id, device) if task_name == TEXT_TASK else get_task(task_name)


def text_probe(model, task: TextTask, seed: int = 0) -> tuple:
    """The repeated random-token probe for a checkpoint, as the induction-head literature draws it: each of
    TEXT_PROBE_SEQUENCES rows is its begin token, TEXT_PROBE_TOKENS distinct ids drawn from the model's whole
    vocabulary (special tokens left out), the same ids once more, and an encoder's end token: (tokens `[n pos]`,
    None, the tokens as numpy), what core.analysis.heads.roles.probe_inputs returns."""
    vocab = task.vocab
    special = set(vocab.tokenizer.special_ids.values())
    known = min(len(vocab), vocab.tokenizer.vocab_size)
    pool = np.setdiff1d(np.arange(known), np.fromiter(special, dtype=np.int64, count=len(special)))
    end = [vocab.sep_id] if model.cfg.arch == "encoder" and vocab.tokenizer.sep_id is not None else []
    k = min(TEXT_PROBE_TOKENS, (model.cfg.max_len - 1 - len(end)) // 2, len(pool))
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(TEXT_PROBE_SEQUENCES):
        r = rng.choice(pool, size=k, replace=False).tolist()
        rows.append([vocab.bos_id] + r + r + end)
    tokens = torch.tensor(rows, dtype=torch.long)  # [n pos]
    return tokens, None, tokens.numpy()


@memo(maxsize=64)
def subspaces(model_id: str, device: str, kind_key: str, layer: int, which: str, reduce: str) -> SubspaceReport:
    """Principal angles, cross-Gram norms and effective ranks of one layer's heads."""
    model, _, kind = _kind(model_id, device, kind_key)
    return freeze(subspace_report(model, kind, layer, which, reduce))


@memo(maxsize=64)
def circuits(model_id: str, device: str, kind_key: str, layer: int, head: int,
             q_labels: tuple, k_labels: tuple, out_labels: tuple) -> tuple:
    """(QK circuit, OV circuit or None) of one head."""
    model, _, kind = _kind(model_id, device, kind_key)
    qk = qk_circuit(model, kind, layer, head, q_labels, k_labels)
    ov = ov_circuit(model, kind, layer, head, k_labels, out_labels) if ov_available(model, kind) else None
    return freeze((qk, ov))


@memo(maxsize=32)
def roles(model_id: str, device: str, kind_key: str, task_name: str) -> RoleScores:
    """Role scores of every head of one attention kind (on the repeated-token probe and the task; a checkpoint's
    on text_probe, with no subject score: that needs the agreement task)."""
    model, _, kind = _kind(model_id, device, kind_key)
    task = _task(model_id, device, task_name)
    if isinstance(task, TextTask):
        return freeze(role_scores(model, kind, task.vocab, None, probe=text_probe(model, task)))
    return freeze(role_scores(model, kind, task.vocab, task, n=PROBE_SEQUENCES))


@memo(maxsize=32)
def redundancy(model_id: str, device: str, kind_key: str, task_name: str, layer: int | None = None) -> Redundancy:
    """Pattern similarity and output mutual information for every pair of heads of one kind (of one layer when
    `layer` is given: a model with too many heads to compare all pairs of)."""
    model, _, kind = _kind(model_id, device, kind_key)
    task = _task(model_id, device, task_name)
    probe = text_probe(model, task) if isinstance(task, TextTask) else None
    layers = None if layer is None else [layer]
    return freeze(redundancy_report(model, kind, task.vocab, n=PROBE_SEQUENCES, k=MI_COMPONENTS, probe=probe,
                                    layers=layers))


def ablation_batch(task: Task | TextTask, arch: str):
    """The fixed batch every ablation on this page is scored on (a checkpoint's: each example sentence once)."""
    n = TEXT_ABLATION_EXAMPLES if isinstance(task, TextTask) else ABLATION_EXAMPLES
    return task.batch(n, arch, seed=ABLATION_SEED)


@memo(maxsize=32)
def means(model_id: str, device: str, task_name: str) -> dict:
    """Each head's mean output over the ablation batch (what mean-ablation puts in its place)."""
    model, _ = models.get_model(model_id, device)
    task = _task(model_id, device, task_name)
    return freeze(head_means(model, ablation_batch(task, model.cfg.arch), task.vocab.pad_id))


@memo(maxsize=128)
def ablation(model_id: str, device: str, task_name: str, heads: tuple, mode: str) -> AblationResult:
    """Accuracy and loss on the ablation batch with `heads` removed (none: the intact model)."""
    model, _ = models.get_model(model_id, device)
    task = _task(model_id, device, task_name)
    mean = means(model_id, device, task_name) if mode == "mean" else None
    return freeze(run_ablated(model, task, ablation_batch(task, model.cfg.arch), heads, mode, mean))


@memo(maxsize=32)
def ranking(model_id: str, device: str, task_name: str, mode: str, layer: int | None = None) -> tuple:
    """Every head (of `layer` alone, when given) removed alone, most important first (a tuple: shared, never to
    be changed)."""
    model, _ = models.get_model(model_id, device)
    task = _task(model_id, device, task_name)
    mean = means(model_id, device, task_name) if mode == "mean" else None
    heads = None if layer is None else [ref for ref in all_heads(model) if ref[1] == layer]
    return freeze(tuple(ablate_each(model, task, ablation_batch(task, model.cfg.arch), mode, mean, heads)))


@memo(maxsize=64)
def text_circuits(model_id: str, device: str, kind_key: str, layer: int, head: int, ids: tuple,
                  labels: tuple) -> tuple:
    """(QK circuit, (OV circuit, top outputs) or None) of one head of a checkpoint on the tokens `ids` (labelled
    `labels`): rows and columns are these tokens, never the whole vocabulary; the singular values are the whole
    tables'."""
    model, _, kind = _kind(model_id, device, kind_key)
    qk = qk_circuit_on(model, kind, layer, head, ids, ids, labels, labels)
    ov = ov_circuit_on(model, kind, layer, head, ids, ids, labels, labels) if ov_available(model, kind) else None
    return freeze((qk, ov))


@memo(maxsize=64)
def input_predictions(model_id: str, device: str, ids: tuple, tgt: tuple | None, task_name: str, heads: tuple,
                      mode: str) -> np.ndarray:
    """The top token at each output position `[pos]` for the sidebar's input with the chosen heads ablated (no
    heads: the model as it is). Only the top tokens are kept: a 1,024-token input's logits over a real vocabulary
    are 16 MB (4,096 tokens) to 200 MB (GPT-2's 50,257)."""
    model, _ = models.get_model(model_id, device)
    mean = means(model_id, device, task_name) if mode == "mean" and heads else None
    fwd = ablation_hooks(model, heads, mode, mean) if heads else []
    kwargs = {"tgt": torch.tensor([tgt], device=model.device)} if tgt is not None else {}
    logits = model.run_with_hooks(torch.tensor([ids], device=model.device), fwd, **kwargs)  # [1 pos vocab]
    return freeze(logits[0].argmax(-1).cpu().numpy())


@memo(maxsize=16)
def untrained_toy(seed: int, n_heads: int = 2) -> ToyReport:
    """The toy before any training (random heads), for the 'before' picture."""
    return freeze(toy_report(toy_model(TwoLookupTask(), seed, n_heads)))


# Set by the view around a call of trained_toy that will train: called with the Trainer after every chunk
# (a progress bar). A context variable, so it never becomes part of the memo's key.
TOY_PROGRESS: ContextVar[Optional[Callable]] = ContextVar("toy_progress", default=None)
TOY_CHUNK = 50  # training steps between progress reports


@memo(maxsize=32)
def trained_toy(n_heads: int, seed: int, steps: int) -> dict:
    """The toy with n_heads heads trained for `steps` steps from `seed` (the same recipe at every head count):
    {"history", "seconds", "report"}. Trained once per (heads, seed, steps) for every session."""
    trainer = toy_trainer(seed=seed, steps=steps, n_heads=n_heads)
    progress = TOY_PROGRESS.get()
    with few_threads():
        while not trainer.done:
            trainer.run(TOY_CHUNK)
            if progress is not None:
                progress(trainer)
    return freeze({"history": trainer.history, "seconds": trainer.seconds, "report": toy_report(trainer.model)})


@memo(maxsize=16)
def head_peaks(d_model: int, n_measured: int) -> tuple:
    """The peak bytes of one explicit training step for each head count of this width at n_measured (a few
    seconds on a miss: one step per head count under the live-bytes tracker). Keyed by width and measured length
    only: every input length shares it."""
    return tuple(measured_peaks(d_model, n_measured))


def head_costs(d_model: int, n_counted: int, n_measured: int) -> tuple:
    """What 1 .. 8 heads of one layer of this width cost: counted at the input's length (arithmetic, not
    remembered), with the peaks measured at n_measured (head_peaks, remembered)."""
    return freeze(tuple(head_cost_rows(d_model, n_counted, n_measured, head_peaks(d_model, n_measured))))
