"""Training: a seeded AdamW loop with warm-up and decay, a progress callback, and a CLI.

`train(config, task)` trains a fresh Transformer on a toy task and returns a `TrainResult`.
`Trainer` is the same loop cut into chunks (`trainer.run(50)`), so a Streamlit page can train a
little on each rerun and keep the optimizer between reruns. `evaluate` scores a model on fresh
samples. `python -m core.train --all` rebuilds every bundled checkpoint from the `BUNDLE` table.

Reproducibility: nothing here seeds or depends on the global RNGs (torch's is shared by every
thread of a Streamlit server, so seeding it would race). Model initialisation draws from a local
torch.Generator seeded from `seed`; every training batch comes from `task.batch(..., seed=s)` (a
local numpy Generator) with s derived from (seed, step), and evaluation batches from a separate
derived stream, so evaluation data never coincides with training data drawn from the same seed.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Literal, Optional, Sequence, Union

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode

from core.config import TransformerConfig
from core.hooks import RunState, resolve_names, running
from core.model import Transformer
from core.tasks import IGNORE, Batch, Task, get_task

__all__ = [
    "StepInfo", "TrainResult", "Trainer", "train", "evaluate", "default_config", "format_width",
    "Recipe", "BUNDLE", "build_recipe", "build_bundle", "init_model", "draws_from", "derive_seed", "lr_factor", "main",
    "head_mi", "head_mi_penalty", "forward_with_z", "MI_HOOK", "MI_RIDGE",
]

Schedule = Literal["cosine", "linear", "constant"]
LengthArg = Union[int, tuple[int, int], None]

_TRAIN_STREAM = 0  # tags that keep training and evaluation seeds in disjoint streams
_EVAL_STREAM = 1
_LENGTH_STREAM = 2


def derive_seed(*parts: int) -> int:
    """A 32-bit seed derived from integers (e.g. seed, stream, step); spreads nearby seeds apart."""
    return int(np.random.SeedSequence([int(p) for p in parts]).generate_state(1)[0])


def _resolve_task(task: Union[str, Task]) -> Task:
    """A Task from its name or itself."""
    return get_task(task) if isinstance(task, str) else task


def format_width(task: Union[str, Task], arch: str, length: Optional[int] = None) -> int:
    """The longest row (tokens or decoder input) the task produces for `arch` at `length`.

    Read off a real one-example batch, so it follows the task's format exactly.
    """
    task = _resolve_task(task)
    batch = task.batch(1, arch, seed=0, length=length)
    widths = [batch.tokens.shape[1], batch.targets.shape[1]]
    if batch.tgt is not None:
        widths.append(batch.tgt.shape[1])
    return max(widths)


def _lengths(task: Task, length: LengthArg) -> list[int]:
    """The content lengths to train on: one int, or every valid length in an inclusive (min, max)."""
    if length is None or isinstance(length, (int, np.integer)) and not isinstance(length, bool):
        return [task.check_length(length)]
    if not isinstance(length, (tuple, list)) or len(length) != 2:
        raise ValueError(f"length must be None, an int or a (min, max) pair, got {length!r}")
    lo, hi = (int(v) for v in length)
    if lo > hi:
        raise ValueError(f"length range must be (min, max) with min <= max, got {length!r}")
    valid = []
    for n in range(lo, hi + 1):
        try:
            valid.append(task.check_length(n))
        except ValueError:
            continue  # e.g. odd lengths for brackets
    if not valid:
        raise ValueError(f"no length in {lo}..{hi} is valid for task {task.name!r} "
                         f"(allowed {task.min_length}..{task.max_length})")
    return valid


def check_compatible(config: TransformerConfig, task: Task, lengths: Sequence[int]) -> None:
    """Raise a clear ValueError if the config cannot be trained on the task at these lengths."""
    task.check_arch(config.arch)
    n = len(task.vocab)
    if config.vocab_size < n:
        raise ValueError(f"vocab_size is {config.vocab_size}, but task {task.name!r} has {n} tokens; "
                         f"set vocab_size >= {n}")
    if config.arch == "encoder-decoder" and config.source_vocab_size < n:
        raise ValueError(f"src_vocab_size is {config.source_vocab_size}, but task {task.name!r} has "
                         f"{n} tokens; set src_vocab_size >= {n} (or None)")
    if config.pos == "learned":
        need = max(format_width(task, config.arch, L) for L in lengths)
        if config.max_len < need:
            raise ValueError(f"max_len is {config.max_len}, but a learned position table needs {need} "
                             f"positions for task {task.name!r} at length {max(lengths)}")


def _forward(model: nn.Module, batch: Batch, arch: str) -> torch.Tensor:
    """Logits [batch pos_out vocab] for a task batch (encoder-decoder feeds source and tgt)."""
    if arch == "encoder-decoder":
        return model(batch.tokens, batch.tgt)
    return model(batch.tokens)


def _to(batch: Batch, device: torch.device) -> Batch:
    """The batch with its tensors on `device`."""
    tgt = None if batch.tgt is None else batch.tgt.to(device)
    return Batch(tokens=batch.tokens.to(device), targets=batch.targets.to(device), tgt=tgt, meta=batch.meta)


def _loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over the scored positions (IGNORE elsewhere)."""
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=IGNORE)  # [batch*pos vocab]


MI_HOOK = "*attn.hook_z"  # every attention's per-head output (self-attention, and cross-attention too)
MI_RIDGE = 1e-3  # added to each correlation matrix: keeps every log-determinant finite (MI <= d_head * 3.5 nats)
_MI_EPS = 1e-8  # under the square root of each coordinate's variance: a dead coordinate stays finite


def head_mi(z: torch.Tensor, ridge: float = MI_RIDGE) -> torch.Tensor:
    """Gaussian mutual-information estimate between every pair of heads of one attention layer.

    z `[batch pos head d_head]` (hook_z) -> `[head head]` in nats, 0 on the diagonal. Every
    (example, position) is one sample; each coordinate of a head's output is standardised, and
    with R the correlation matrix of two heads' coordinates (plus `ridge` on its diagonal),
    I(i; j) = 1/2 (log det R_ii + log det R_jj - log det R_{ij,ij}). For one coordinate per head
    this is -1/2 log(1 - rho^2). Computed in float64 (float32 on MPS, which has no float64),
    clamped at 0, finite and differentiable whatever the heads output.
    """
    if z.dim() != 4:
        raise ValueError(f"z must be [batch pos head d_head], got shape {tuple(z.shape)}")
    dtype = torch.float32 if z.device.type == "mps" else torch.float64
    b, p, h, d = z.shape
    x = z.to(dtype).reshape(b * p, h * d)  # [n head*d_head]
    x = x - x.mean(dim=0)
    x = x / torch.sqrt(x.pow(2).mean(dim=0) + _MI_EPS)  # [n head*d_head], unit variance
    eye = torch.eye(h * d, dtype=dtype, device=z.device)
    r = (x.T @ x / x.shape[0] + ridge * eye).reshape(h, d, h, d)  # [head d_head head d_head]
    own = torch.linalg.slogdet(torch.stack([r[i, :, i, :] for i in range(h)]))[1]  # [head]
    out = torch.zeros(h, h, dtype=dtype, device=z.device)
    if h < 2:
        return out
    ii, jj = torch.triu_indices(h, h, offset=1, device=z.device)  # [pairs]
    joint = torch.stack([torch.cat([torch.cat([r[i, :, i, :], r[i, :, j, :]], dim=1),
                                    torch.cat([r[j, :, i, :], r[j, :, j, :]], dim=1)], dim=0)
                         for i, j in zip(ii.tolist(), jj.tolist())])  # [pairs 2*d_head 2*d_head]
    mi = (0.5 * (own[ii] + own[jj] - torch.linalg.slogdet(joint)[1])).clamp_min(0.0)  # [pairs]
    out = out.index_put((ii, jj), mi).index_put((jj, ii), mi)
    return out


def head_mi_penalty(zs: Sequence[torch.Tensor], ridge: float = MI_RIDGE) -> torch.Tensor:
    """The mean of `head_mi` over every pair of heads in the same layer, over all layers (0 with one head).

    zs: one hook_z tensor `[batch pos head d_head]` per attention layer. Returns a float64 scalar.
    """
    values = []
    for z in zs:
        h = z.shape[2]
        if h >= 2:
            m = head_mi(z, ridge)
            ii, jj = torch.triu_indices(h, h, offset=1, device=m.device)
            values.append(m[ii, jj])  # [pairs]
    if not values:
        device = zs[0].device if zs else torch.device("cpu")
        return torch.zeros((), dtype=torch.float32 if device.type == "mps" else torch.float64, device=device)
    return torch.cat(values).mean()


def forward_with_z(model: Transformer, batch: Batch, arch: str) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Logits and every attention layer's live (graph-attached) hook_z, in model order.

    The tensors are kept by a per-call RunState (core.hooks), so the model itself is not changed
    and gradients flow from a penalty on them back into the weights.
    """
    names = resolve_names(MI_HOOK, model.hook_names())
    state = RunState(capture=frozenset(names), keep_live=True)
    with running(state):
        logits = _forward(model, batch, arch)
    return logits, [state.live[n] for n in names]


def lr_factor(step: int, total: int, warmup: int, schedule: Schedule = "cosine", floor: float = 0.1) -> float:
    """The learning-rate multiplier at `step` (0-based): linear warm-up, then decay to `floor`.

    Warm-up keeps Adam's first updates small while its moment estimates are still noisy; decay
    lets the last steps settle into a minimum instead of bouncing around it.
    """
    if warmup > 0 and step < warmup:
        return (step + 1) / warmup
    if schedule == "constant" or total <= warmup:
        return 1.0
    frac = min(1.0, (step - warmup) / max(1, total - warmup))
    if schedule == "linear":
        return 1.0 - (1.0 - floor) * frac
    return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * frac))


@dataclass
class StepInfo:
    """What the progress callback sees."""

    step: int  # steps done so far
    total: int  # steps planned
    loss: float  # loss of the latest training batch
    accuracy: float  # task metric on the latest training batch
    elapsed: float  # seconds spent training so far (over all chunks)
    lr: float  # learning rate used for the latest step


@dataclass
class TrainResult:
    """A finished (or stopped) run."""

    model: Transformer  # in eval mode
    history: list[dict]  # one {"step", "loss", "accuracy", "lr"} per step
    steps: int  # steps done
    stopped_early: bool  # the callback returned False
    seconds: float  # training time

    @property
    def final_loss(self) -> float:
        """The loss of the last step (nan if none ran)."""
        return self.history[-1]["loss"] if self.history else float("nan")


Callback = Callable[[StepInfo], Optional[bool]]


def init_model(config: TransformerConfig, seed: int = 0, embed_std: Optional[float] = None, *,
               generator: Optional[torch.Generator] = None) -> Transformer:
    """A fresh model whose initial weights depend only on `seed`, whatever other threads do.

    Every draw comes from a local `torch.Generator` seeded with `seed` (or from `generator`, which
    then replaces the seed), never from torch's process-wide one: that is shared by every thread of
    the server, so two sessions seeding it at once would get each other's draws. The model's own
    initialisers run unchanged, in their order, only drawing from the local generator (see
    `draws_from`), so the weights are exactly those the old global-seed build of Transformer(config)
    gave, and the global generator is neither read nor moved.

    embed_std: re-draw the token embeddings W_E at this std. The model's default (0.02) makes
    tokens tiny next to a unit-amplitude sinusoidal table, so after LayerNorm a sinusoidal model
    barely sees which token it holds and learns slowly; std ~1 puts both on the same scale (the
    original paper scales embeddings by sqrt(d_model) for the same reason).
    """
    if generator is None:
        generator = torch.Generator().manual_seed(int(seed))
    with draws_from(generator):
        model = Transformer(config)
    if embed_std is not None:
        with torch.no_grad():
            for name, param in model.named_parameters():
                if name.endswith("W_E.weight"):
                    param.normal_(0.0, embed_std, generator=generator)
    return model


# Calls that draw random numbers and take a `generator` (nn.init's initialisers pass theirs by keyword).
_RANDOM_CALLS = frozenset({
    torch.Tensor.uniform_, torch.Tensor.normal_, torch.Tensor.random_, torch.Tensor.bernoulli_,
    torch.Tensor.exponential_, torch.Tensor.geometric_, torch.Tensor.cauchy_, torch.Tensor.log_normal_,
    torch.Tensor.bernoulli, torch.rand, torch.randn, torch.randint, torch.randperm, torch.normal,
    torch.bernoulli, torch.multinomial, torch.poisson, torch.rand_like, torch.randn_like, torch.randint_like,
})


class _DrawsFrom(TorchFunctionMode):
    def __init__(self, generator: torch.Generator):
        super().__init__()
        self.generator = generator

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if kwargs.get("generator") is None and ("generator" in kwargs or func in _RANDOM_CALLS):
            kwargs["generator"] = self.generator
        return func(*args, **kwargs)


def draws_from(generator: torch.Generator) -> TorchFunctionMode:
    """A context in which this thread's random draws come from `generator`, not the global RNG.

    `with draws_from(g): model = Transformer(cfg)` runs the constructors unchanged; each random
    call they make without a generator of its own (nn.init.kaiming_uniform_, normal_, uniform_,
    Tensor.normal_, torch.randn, ...) is handed `g`. It is a torch function mode, and those live on
    the calling thread's own stack, so builds in other threads at the same moment are untouched.
    """
    return _DrawsFrom(generator)


class Trainer:
    """The training loop as an object, so it can run in chunks: `trainer.run(100)` twice equals 200 steps.

    Holds the model, AdamW optimizer, learning-rate schedule, step count and history. Batches are
    a pure function of (seed, step), so resuming continues exactly where a single run would be.
    Arguments are those of `train`; `model` continues training an existing model in place (its
    config wins; pass a copy.deepcopy of a model that is shared, e.g. a cached bundled one), and
    `device` defaults to the model's device, else the CPU.
    """

    def __init__(self, config: TransformerConfig, task: Union[str, Task], steps: int = 2000,
                 batch_size: int = 64, lr: float = 3e-3, seed: int = 0, length: LengthArg = None,
                 model: Optional[Transformer] = None, warmup: int = 100, weight_decay: float = 0.01,
                 grad_clip: Optional[float] = 1.0, schedule: Schedule = "cosine", log_every: int = 25,
                 device: Union[str, torch.device, None] = None, embed_std: Optional[float] = None,
                 head_mi: float = 0.0):
        self.task = _resolve_task(task)
        for name, value in (("steps", steps), ("batch_size", batch_size), ("log_every", log_every)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if not lr > 0:
            raise ValueError(f"lr must be positive, got {lr!r}")
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
        if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
            raise ValueError(f"warmup must be a non-negative integer (0: no warm-up), got {warmup!r}")
        if isinstance(head_mi, bool) or not isinstance(head_mi, (int, float)) or not math.isfinite(head_mi) \
                or head_mi < 0:
            raise ValueError(f"head_mi must be a finite number >= 0 (0: no penalty), got {head_mi!r}")
        if schedule not in ("cosine", "linear", "constant"):
            raise ValueError(f"schedule must be one of ['cosine', 'linear', 'constant'], got {schedule!r}")
        if model is not None:
            config = model.cfg
        self.config = config
        self.lengths = _lengths(self.task, length)
        check_compatible(config, self.task, self.lengths)
        if device is None:
            device = _model_device(model) if model is not None else "cpu"
        self.device = torch.device(device)
        self.total, self.batch_size, self.lr, self.seed = steps, batch_size, lr, seed
        self.warmup, self.schedule, self.grad_clip, self.log_every = warmup, schedule, grad_clip, log_every
        self.head_mi = float(head_mi)  # weight of the head-diversity penalty (0: the plain cross-entropy)
        if model is None:
            model = init_model(config, seed, embed_std)
        self.model = model.to(self.device)
        self.optimizer = torch.optim.AdamW(self._param_groups(weight_decay), lr=lr, betas=(0.9, 0.98))
        self.step = 0
        self.history: list[dict] = []
        self.seconds = 0.0
        self.stopped_early = False

    def _param_groups(self, weight_decay: float) -> list[dict]:
        """Decay matrices only; biases and LayerNorm gains are left alone (the usual AdamW practice)."""
        decay = [p for p in self.model.parameters() if p.requires_grad and p.dim() >= 2]
        rest = [p for p in self.model.parameters() if p.requires_grad and p.dim() < 2]
        return [{"params": decay, "weight_decay": weight_decay}, {"params": rest, "weight_decay": 0.0}]

    @property
    def done(self) -> bool:
        """True once every planned step ran (or the callback stopped the run)."""
        return self.step >= self.total or self.stopped_early

    def batch_for(self, step: int) -> Batch:
        """The training batch of `step`: a pure function of (seed, step)."""
        length = self.lengths[0]
        if len(self.lengths) > 1:
            pick = derive_seed(self.seed, _LENGTH_STREAM, step) % len(self.lengths)
            length = self.lengths[pick]
        batch = self.task.batch(self.batch_size, self.config.arch, seed=derive_seed(self.seed, _TRAIN_STREAM, step),
                                length=length)
        return _to(batch, self.device)

    def train_step(self) -> dict:
        """One optimizer step on a fresh batch; returns its history record."""
        lr = self.lr * lr_factor(self.step, self.total, self.warmup, self.schedule)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        batch = self.batch_for(self.step)
        extra = {}
        if self.head_mi > 0:
            logits, zs = forward_with_z(self.model, batch, self.config.arch)
            ce = _loss(logits, batch.targets)
            mi = head_mi_penalty(zs)
            loss = ce + (self.head_mi * mi).to(ce.dtype)
            extra = {"ce": float(ce.detach()), "head_mi": float(mi.detach())}
        else:
            logits = _forward(self.model, batch, self.config.arch)
            loss = _loss(logits, batch.targets)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if self.grad_clip is not None:
            nn.utils.clip_grad_norm_(self.model.parameters(), self.grad_clip)
        self.optimizer.step()
        self.step += 1
        with torch.no_grad():
            accuracy = self.task.accuracy(logits.detach(), batch)
        record = {"step": self.step, "loss": float(loss.detach()), "accuracy": accuracy, "lr": lr, **extra}
        self.history.append(record)
        return record

    def run(self, n_steps: Optional[int] = None, callback: Optional[Callback] = None) -> bool:
        """Train up to `n_steps` more steps (None: to the end). Returns True if the run is finished.

        `callback(StepInfo)` is called every `log_every` steps and after the chunk's last step;
        returning False stops the run for good (`stopped_early`).
        """
        if n_steps is None:
            n_steps = self.total - self.step
        if isinstance(n_steps, bool) or not isinstance(n_steps, int) or n_steps < 0:
            raise ValueError(f"n_steps must be a non-negative integer, got {n_steps!r}")
        end = min(self.total, self.step + n_steps)
        self.model.train()
        try:
            while self.step < end and not self.stopped_early:
                start = time.perf_counter()
                record = self.train_step()
                self.seconds += time.perf_counter() - start
                if callback is not None and (self.step % self.log_every == 0 or self.step == end):
                    info = StepInfo(self.step, self.total, record["loss"], record["accuracy"], self.seconds,
                                    record["lr"])
                    if callback(info) is False:
                        self.stopped_early = True
        finally:
            self.model.eval()
        return self.done

    def result(self) -> TrainResult:
        """The run so far as a TrainResult (the model in eval mode)."""
        return TrainResult(self.model.eval(), list(self.history), self.step, self.stopped_early, self.seconds)


def train(config: TransformerConfig, task: Union[str, Task], steps: int = 2000, batch_size: int = 64,
          lr: float = 3e-3, seed: int = 0, callback: Optional[Callback] = None, length: LengthArg = None,
          model: Optional[Transformer] = None, warmup: int = 100, weight_decay: float = 0.01,
          grad_clip: Optional[float] = 1.0, device: Union[str, torch.device, None] = None,
          schedule: Schedule = "cosine", log_every: int = 25, embed_std: Optional[float] = None,
          head_mi: float = 0.0) -> TrainResult:
    """Train `config` (or continue `model`) on `task` for `steps` AdamW steps; see `Trainer`.

    length: None (the task's default), an int, or an inclusive (min, max) range sampled per step
    (a curriculum over lengths, e.g. so an induction model sees every length up to its train length).
    head_mi: weight of a penalty on the mutual information between heads of the same layer
    (`head_mi_penalty`); 0 trains on the cross-entropy alone.
    """
    trainer = Trainer(config, task, steps=steps, batch_size=batch_size, lr=lr, seed=seed, length=length,
                      model=model, warmup=warmup, weight_decay=weight_decay, grad_clip=grad_clip,
                      schedule=schedule, log_every=log_every, device=device, embed_std=embed_std,
                      head_mi=head_mi)
    trainer.run(callback=callback)
    return trainer.result()


def _model_device(model: nn.Module) -> torch.device:
    """Where the model's parameters live (CPU for a parameter-free stub)."""
    for p in model.parameters():
        return p.device
    return torch.device("cpu")


@torch.no_grad()
def evaluate(model: nn.Module, task_name: Union[str, Task], n_samples: int = 512, seed: int = 1234,
             length: Optional[int] = None, batch_size: int = 256, arch: Optional[str] = None) -> float:
    """The task's metric on `n_samples` freshly sampled examples (a stream disjoint from training's).

    Aggregated exactly over batches: "token" weights each batch by its scored positions,
    "sequence" by its scored examples. The model is put in eval mode; no gradients.
    """
    task = _resolve_task(task_name)
    arch = arch or model.cfg.arch
    if isinstance(n_samples, bool) or not isinstance(n_samples, int) or n_samples < 1:
        raise ValueError(f"n_samples must be a positive integer, got {n_samples!r}")
    model.eval()
    device = _model_device(model)
    right, total = 0.0, 0
    for i, start in enumerate(range(0, n_samples, batch_size)):
        n = min(batch_size, n_samples - start)
        batch = _to(task.batch(n, arch, seed=derive_seed(seed, _EVAL_STREAM, i), length=length), device)
        logits = _forward(model, batch, arch)
        scored = batch.targets != IGNORE  # [batch pos_out]
        weight = int(scored.sum()) if task.metric == "token" else int(scored.any(dim=1).sum())
        right += task.accuracy(logits, batch) * weight
        total += weight
    return right / total


def default_config(task_name: Union[str, Task], arch: str, pos: str = "sinusoidal", norm: str = "pre",
                   length: LengthArg = None, **overrides) -> TransformerConfig:
    """A config sized for the task: its vocabulary, max_len = the longest row at the training length.

    Defaults to the project's teaching size (2 layers, d_model 64, 4 heads); `overrides` set any
    other TransformerConfig field. With a (min, max) length range, max_len fits the max.
    """
    task = _resolve_task(task_name)
    task.check_arch(arch)
    lengths = _lengths(task, length)
    fields = dict(arch=arch, pos=pos, norm=norm, vocab_size=len(task.vocab), d_model=64, n_heads=4,
                  n_layers=2, max_len=max(format_width(task, arch, L) for L in lengths))
    fields.update(overrides)
    return TransformerConfig(**fields)


# ---------------------------------------------------------------------------------------------
# The bundle: every checkpoint shipped in assets/models, rebuilt by `python -m core.train --all`


@dataclass(frozen=True)
class Recipe:
    """How one bundled model is trained."""

    id: str
    title: str
    description: str  # one line for the model picker
    task: str
    arch: str
    pos: str = "sinusoidal"
    norm: str = "pre"
    n_layers: int = 2
    d_model: int = 64
    n_heads: int = 4
    steps: int = 2000
    lr: float = 3e-3
    batch_size: int = 64
    train_length: int = 8  # the longest content length seen in training
    min_length: Optional[int] = None  # train on every length in min_length..train_length (curriculum)
    seed: int = 0
    warmup: int = 100
    embed_std: Optional[float] = 1.0  # token-embedding init (see init_model); None keeps the model's
    config: dict = field(default_factory=dict)  # further TransformerConfig fields

    @property
    def length(self) -> LengthArg:
        """What `train` gets as its length argument."""
        return self.train_length if self.min_length is None else (self.min_length, self.train_length)


# Induction: a length curriculum (repeats of 2..10 letters) makes the skill appear early.
_IND = dict(task="induction", arch="decoder", train_length=10, min_length=4, lr=3e-3)

BUNDLE: list[Recipe] = [
    Recipe("reverse-encdec", "Reverse (encoder-decoder)",
           "Encoder-decoder that writes 8 digits back to front; cross-attention reads the source anti-diagonally.",
           task="reverse", arch="encoder-decoder", steps=800, config={"d_mlp": 128}),  # two stacks: keep < 1 MB
    Recipe("induction-none", "Induction, no positions",
           "2-layer decoder without positional encoding: only the causal mask tells it where it is, a fuzzy "
           "sense of position that blurs with length; it needs more steps than its siblings to reach 99%.",
           pos="none", steps=5000, **{**_IND, "min_length": 10}),  # trained on the full length only: 99.0% vs 98.4%
    Recipe("induction-sinusoidal", "Induction, sinusoidal positions",
           "2-layer decoder with sinusoidal positions, trained on repeats of up to 10 letters (21 positions).",
           pos="sinusoidal", steps=1200, **_IND),
    Recipe("induction-learned", "Induction, learned positions",
           "2-layer decoder with a learned table of exactly 21 positions: it cannot read longer inputs.",
           pos="learned", steps=1500, **_IND),
    Recipe("induction-rope", "Induction, RoPE",
           "2-layer decoder with rotary positions, trained on repeats of up to 10 letters (21 positions).",
           pos="rope", steps=1200, **_IND),
    Recipe("sort-decoder", "Sort (decoder, pre-LN)",
           "Decoder that sorts 8 digits after <sep>; pre-LN twin of sort-decoder-postln.",
           task="sort", arch="decoder", norm="pre", steps=1200),
    Recipe("sort-decoder-postln", "Sort (decoder, post-LN)",
           "Same task, sizes and seed as sort-decoder, with LayerNorm after each residual add.",
           task="sort", arch="decoder", norm="post", steps=1200),
    Recipe("agreement-encoder", "Agreement (encoder)",
           "Encoder that fills <mask> with is/are by the subject, ignoring the noun in between.",
           task="agreement", arch="encoder", steps=400),
    Recipe("future-legality-encoder", "Future legality (encoder)",
           "Bidirectional encoder: it reads the rule at the end and marks every digit right.",
           task="future-legality", arch="encoder", steps=300),
    Recipe("future-legality-decoder", "Future legality (decoder)",
           "Causal decoder on the same task: it cannot see the rule, so it stays near 50% chance. That is the lesson.",
           task="future-legality", arch="decoder", steps=300),
    Recipe("peaks-encoder", "Local peaks (encoder)",
           "Bidirectional encoder on a series of readings: it sees the next reading and marks every local peak.",
           task="peaks", arch="encoder", steps=600),
    Recipe("peaks-decoder", "Local peaks (decoder)",
           "Causal twin of peaks-encoder (same sizes, seed, steps): it cannot see the next reading, so it can only "
           "guess, and no causal model beats 87.5% at length 8.",
           task="peaks", arch="decoder", steps=600),
    Recipe("tags-encoder", "Tags (encoder)",
           "Encoder that tags every word NOUN, VERB or OTHER; 'fish', 'watch' and 'saw' by their neighbours.",
           task="tags", arch="encoder", steps=600, train_length=10),
    Recipe("brackets-encoder", "Brackets (encoder)",
           "Encoder that answers yes at <cls> when ( ) [ ] are balanced, no otherwise.",
           task="brackets", arch="encoder", steps=5000),
]

# Key-value recall for the Retrieval page: four models with one recipe, differing in one config field.
_RECALL = dict(task="recall", arch="decoder", n_heads=2, steps=2000, lr=1e-3, train_length=5)
BUNDLE += [
    Recipe("recall-decoder", "Recall (decoder)",
           "2-layer decoder that reads letter-digit pairs and answers the digit stored with the query letter.",
           **_RECALL),
    Recipe("recall-tied", "Recall, values tied to keys (V = K)",
           "Same recipe with no W_V: every head's values are its keys, so what it copies is what it matched on.",
           config={"tie_vk": True}, **_RECALL),
    Recipe("recall-keyclip", "Recall, key norms clipped",
           "Same recipe with every key's norm clipped to 2: a defence against one huge key taking all the attention.",
           config={"key_norm_clip": 2.0}, **_RECALL),
    Recipe("recall-cosine", "Recall, cosine scores",
           "Same recipe scoring by cosine(q, k) times 8: a key's length no longer changes its score.",
           config={"score": "cosine"}, **_RECALL),
]

# The Generation page's leakage case study: twins that differ only in the task. The leaky one's encoder
# also reads the sorted answer, so it copies instead of sorting (see core.analysis.leakage).
BUNDLE += [
    Recipe("sort-peek-encdec", "Sort, leaky encoder (encoder-decoder)",
           "Encoder-decoder whose encoder is also shown the sorted answer: it scores 100% by copying it, a leak.",
           task="sort-peek", arch="encoder-decoder", steps=1500, config={"d_mlp": 128}),
    Recipe("sort-encdec", "Sort (encoder-decoder)",
           "Twin of sort-peek-encdec built properly: the encoder reads only the digits.",
           task="sort", arch="encoder-decoder", steps=1500, config={"d_mlp": 128}),
]


def build_recipe(recipe: Recipe, callback: Optional[Callback] = None, eval_samples: int = 1024,
                 device: Union[str, torch.device, None] = None) -> tuple[TrainResult, float]:
    """Train one bundled model and evaluate it on fresh samples at its train length."""
    length = recipe.length
    config = default_config(recipe.task, recipe.arch, pos=recipe.pos, norm=recipe.norm, length=length,
                            n_layers=recipe.n_layers, d_model=recipe.d_model, n_heads=recipe.n_heads,
                            **recipe.config)
    result = train(config, recipe.task, steps=recipe.steps, batch_size=recipe.batch_size, lr=recipe.lr,
                   seed=recipe.seed, callback=callback, length=length, warmup=recipe.warmup, device=device,
                   embed_std=recipe.embed_std)
    accuracy = evaluate(result.model, recipe.task, n_samples=eval_samples, seed=recipe.seed,
                        length=recipe.train_length)
    return result, accuracy


def recipe_meta(recipe: Recipe, result: TrainResult, accuracy: float) -> dict:
    """The checkpoint metadata of a bundled model."""
    return {
        "id": recipe.id, "title": recipe.title, "description": recipe.description, "task": recipe.task,
        "config": result.model.cfg.to_dict(), "vocab": list(get_task(recipe.task).vocab.tokens),
        "steps": result.steps, "seed": recipe.seed, "accuracy": accuracy, "train_length": recipe.train_length,
    }


def manifest_row(recipe: Recipe, file: str, accuracy: float) -> dict:
    """The manifest entry of a bundled model."""
    return {"id": recipe.id, "file": file, "title": recipe.title, "description": recipe.description,
            "task": recipe.task, "arch": recipe.arch, "pos": recipe.pos, "norm": recipe.norm,
            "accuracy": round(accuracy, 4), "train_length": recipe.train_length}


# ---------------------------------------------------------------------------------------------
# The command line (the only place that prints)


class _ProgressBar:
    """A one-line text progress bar on stderr (no tqdm dependency)."""

    def __init__(self, label: str, stream=sys.stderr, width: int = 30):
        self.label, self.stream, self.width = label, stream, width

    def __call__(self, info: StepInfo) -> None:
        filled = int(self.width * info.step / max(1, info.total))
        bar = "#" * filled + "." * (self.width - filled)
        self.stream.write(f"\r{self.label} [{bar}] {info.step}/{info.total} loss {info.loss:.4f} "
                          f"acc {info.accuracy:.3f} {info.elapsed:.0f}s")
        if info.step >= info.total:
            self.stream.write("\n")
        self.stream.flush()


def _recipe_bar(recipe: Recipe) -> _ProgressBar:
    """A progress bar labelled with a bundle recipe's id."""
    return _ProgressBar(f"{recipe.id:<24}")


def _parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m core.train", description=__doc__.splitlines()[0])
    p.add_argument("--all", action="store_true", help="rebuild every bundled checkpoint and the manifest")
    p.add_argument("--only", action="append", metavar="ID", help="with --all semantics, rebuild only this id")
    p.add_argument("--list", action="store_true", help="list the bundle recipes and exit")
    p.add_argument("--task", default="induction")
    p.add_argument("--arch", default=None, help="default: the task's first architecture")
    p.add_argument("--pos", default="sinusoidal", choices=["none", "sinusoidal", "learned", "rope"])
    p.add_argument("--norm", default="pre", choices=["pre", "post", "none"])
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--embed-std", type=float, default=1.0,
                   help="token-embedding init std, as in the bundle (0: keep the model's own init)")
    p.add_argument("--length", type=int, default=None, help="content length (default: the task's)")
    p.add_argument("--min-length", type=int, default=None, help="train on lengths min-length..length")
    p.add_argument("--out", default=None, help="where to save the .safetensors checkpoint")
    p.add_argument("--eval-samples", type=int, default=1024)
    p.add_argument("--threads", type=int, default=1, help="torch threads (1 is fastest for these sizes)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--english", action="store_true",
                   help="build the English decoder and encoder instead (see python -m core.train --english --help)")
    return p.parse_args(argv)


def build_bundle(ids: Optional[Sequence[str]] = None, eval_samples: int = 1024,
                 device: Union[str, torch.device, None] = None,
                 progress: Optional[Callable[[Recipe], Optional[Callback]]] = None) -> list[dict]:
    """Rebuild the chosen (default: all) bundled checkpoints and rewrite the manifest.

    Entries of models not rebuilt are kept. Returns one {"id", "accuracy", "bytes", "seconds"
    (training wall time), "cpu_seconds" (process CPU time, training and evaluation)} per model built. `progress(recipe)` may return a training callback for that recipe.
    """
    from core import checkpoints

    known = {r.id: r for r in BUNDLE}
    unknown = [i for i in ids or [] if i not in known]
    if unknown:
        raise ValueError(f"unknown bundle id(s) {unknown}; known: {list(known)}")
    chosen = [known[i] for i in ids] if ids else BUNDLE
    checkpoints.MODELS_DIR.mkdir(parents=True, exist_ok=True)
    rows = {e["id"]: e for e in checkpoints.read_manifest() if e.get("id") in known}
    built = []
    for recipe in chosen:
        callback = progress(recipe) if progress is not None else None
        cpu_start = time.process_time()
        result, accuracy = build_recipe(recipe, callback=callback, eval_samples=eval_samples, device=device)
        cpu_seconds = time.process_time() - cpu_start
        file = f"{recipe.id}.safetensors"
        checkpoints.save(result.model.cpu(), checkpoints.MODELS_DIR / file, recipe_meta(recipe, result, accuracy))
        rows[recipe.id] = manifest_row(recipe, file, accuracy)
        checkpoints.write_manifest([rows[r.id] for r in BUNDLE if r.id in rows])  # after each: a crash keeps the rest
        built.append({"id": recipe.id, "accuracy": accuracy, "bytes": (checkpoints.MODELS_DIR / file).stat().st_size,
                      "seconds": result.seconds, "cpu_seconds": cpu_seconds})
    return built


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Command-line entry: train one model (--task ... --out PATH), rebuild the bundle (--all), or build the
    English models (--english: every other argument goes to core.english.pipeline)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--english" in argv:
        from core.english.pipeline import main as english_main

        return english_main([a for a in argv if a != "--english"])
    args = _parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.list:
        for r in BUNDLE:
            print(f"{r.id:<26}{r.task:<17}{r.arch:<17}{r.pos:<12}{r.norm:<6}{r.steps:>6} steps  {r.description}")
        return 0
    if args.all or args.only:
        try:
            built = build_bundle(args.only, args.eval_samples, args.device,
                                 progress=_recipe_bar)
        except ValueError as exc:
            print(exc, file=sys.stderr)
            return 2
        print(f"{'id':<26}{'accuracy':>10}{'size KB':>10}{'train s':>10}{'cpu s':>8}")
        for row in built:
            print(f"{row['id']:<26}{row['accuracy']:>10.4f}{row['bytes'] / 1024:>10.0f}{row['seconds']:>10.1f}"
                  f"{row['cpu_seconds']:>8.1f}")
        print(f"total: train {sum(r['seconds'] for r in built):.0f} s wall, "
              f"{sum(r['cpu_seconds'] for r in built):.0f} s CPU")
        return 0
    task = get_task(args.task)
    arch = args.arch or task.archs[0]
    length: LengthArg = args.length if args.min_length is None else (args.min_length, args.length or task.default_length)
    config = default_config(task, arch, pos=args.pos, norm=args.norm, length=length, n_layers=args.layers,
                            d_model=args.d_model, n_heads=args.heads)
    result = train(config, task, steps=args.steps, batch_size=args.batch_size, lr=args.lr, seed=args.seed,
                   callback=_ProgressBar(task.name), length=length, warmup=args.warmup, device=args.device,
                   embed_std=args.embed_std or None)
    train_length = max(_lengths(task, length))
    accuracy = evaluate(result.model, task, n_samples=args.eval_samples, seed=args.seed, length=train_length)
    print(f"{task.name} {arch}: {task.metric} accuracy {accuracy:.4f} on {args.eval_samples} fresh samples "
          f"after {result.steps} steps ({result.seconds:.1f} s)")
    if args.out:
        from core import checkpoints

        meta = {"id": Path(args.out).stem, "title": f"{task.title} ({arch})", "description": task.description,
                "task": task.name, "config": config.to_dict(), "vocab": list(task.vocab.tokens),
                "steps": result.steps, "seed": args.seed, "accuracy": accuracy, "train_length": train_length}
        checkpoints.save(result.model.cpu(), args.out, meta)
        print(f"saved {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
