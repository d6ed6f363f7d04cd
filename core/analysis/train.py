"""Training a model in a page: settings a student may choose, checked and clamped, and attention snapshots.

The Train page lets anyone on the server start a training run, so every setting has a hard range
(steps at most `MAX_STEPS`, at most `MAX_LAYERS` layers, ...). `clamp_settings` brings any value
(from widgets or a pasted URL) into range and says what it changed; `TrainSettings.problems`
lists combinations that cannot be built (d_model not divisible by the heads, an architecture the
task does not support). Snapshots are the attention patterns of one fixed example input, taken
every few steps, so a student can scrub through training and watch heads form.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Optional

import numpy as np
import torch

from core.analysis.attention import AttentionKind, attention_kinds, causal_allowed, max_entropy, row_entropy
from core.config import TransformerConfig
from core.model import Transformer
from core.tasks import TASKS, Task, get_task
from core.train import Trainer, default_config, head_mi, init_model

POS_SCHEMES = ("sinusoidal", "learned", "rope", "none")
NORMS = ("pre", "post", "none")
SCORES = ("scaled_dot", "dot", "cosine")  # TransformerConfig.score
ACTS = ("gelu", "relu")  # TransformerConfig.act
MAX_STEPS = 3000  # one student's run must not hog a shared 2-core server
MIN_STEPS = 10
MAX_LAYERS = 4
MAX_HEADS = 8
MIN_D_MODEL, MAX_D_MODEL = 8, 128
MIN_LR, MAX_LR = 1e-4, 1e-2
MAX_SEED = 9999
MAX_WARMUP = 1000  # warm-up steps; 0 = none, None (the default) = a tenth of the run, at most 100
MAX_KEY_CLIP = 100.0  # key-norm clip; 0 = off
MAX_HEAD_MI = 5.0  # weight of the head-diversity penalty; 0 = off (random heads already share ~1-10 nats)
MI_SAMPLES = 64  # examples of the task the head-MI matrices are measured on
MI_SEED = 4242  # their seed (fixed: before and after use the same examples)
EMBED_STD = 1.0  # token-embedding init, as the bundled recipes use (core.train.init_model): learns much sooner
BATCH_SIZE = 64  # examples per step (fixed: the page varies what teaches, not throughput knobs)
MAX_SNAPSHOTS = 40  # attention snapshots kept per run (the first, every `every` steps, the last)
EXAMPLE_SEEDS = range(16)  # the fixed example input is the longest of these seeds' examples

# name -> (lowest, highest) for the numeric settings
LIMITS = {
    "n_layers": (1, MAX_LAYERS),
    "d_model": (MIN_D_MODEL, MAX_D_MODEL),
    "n_heads": (1, MAX_HEADS),
    "steps": (MIN_STEPS, MAX_STEPS),
    "lr": (MIN_LR, MAX_LR),
    "seed": (0, MAX_SEED),
    "warmup": (0, MAX_WARMUP),
    "key_norm_clip": (0.0, MAX_KEY_CLIP),
    "head_mi": (0.0, MAX_HEAD_MI),
}
FLOATS = {"lr", "key_norm_clip", "head_mi"}  # the numeric settings that are not whole numbers
LABELS = {"n_layers": "layers", "d_model": "d_model", "n_heads": "heads", "steps": "steps",
          "lr": "learning rate", "seed": "seed", "warmup": "warm-up steps", "key_norm_clip": "key-norm clip",
          "head_mi": "head-diversity weight"}


@dataclass(frozen=True)
class TrainSettings:
    """Everything a student picks for one run (the rest uses the project's defaults)."""

    task: str = "induction"  # a name in core.tasks.TASKS
    arch: str = "decoder"  # one of the task's architectures
    pos: str = "sinusoidal"  # positional scheme
    norm: str = "pre"  # LayerNorm placement
    n_layers: int = 2  # blocks (per stack for encoder-decoder)
    d_model: int = 64  # residual stream width
    n_heads: int = 4  # heads per attention layer
    steps: int = 600  # AdamW steps (at most MAX_STEPS)
    lr: float = 3e-3  # peak learning rate
    seed: int = 0  # initial weights and the order of training batches
    warmup: Optional[int] = None  # warm-up steps (0: none); None: a tenth of the run, at most 100
    score: str = "scaled_dot"  # attention score: q.k / sqrt(d_head), q.k, or scaled cosine
    key_norm_clip: float = 0.0  # clip every key's norm to this (0: off)
    act: str = "gelu"  # the MLP's non-linearity
    head_mi: float = 0.0  # weight of the penalty on the mutual information between heads (0: off)

    @property
    def d_head(self) -> Optional[int]:
        """Width of each head, or None when d_model does not split evenly."""
        return self.d_model // self.n_heads if self.n_heads and self.d_model % self.n_heads == 0 else None

    @property
    def warmup_steps(self) -> int:
        """Warm-up steps used: the chosen number, or by default a tenth of the run, at most 100."""
        if self.warmup is not None:
            return self.warmup
        return max(1, min(100, self.steps // 10))

    def problems(self) -> list[str]:
        """Why these settings cannot be trained, in words a student can act on (empty: all fine)."""
        out = []
        if self.task not in TASKS:
            return [f"Unknown task {self.task!r}; choose one of {', '.join(TASKS)}."]
        task = get_task(self.task)
        if self.arch not in task.archs:
            out.append(f"The {task.title!r} task works with {', '.join(task.archs)}, not {self.arch}.")
        if self.pos not in POS_SCHEMES:
            out.append(f"Positional scheme must be one of {', '.join(POS_SCHEMES)}, not {self.pos!r}.")
        if self.norm not in NORMS:
            out.append(f"Norm placement must be one of {', '.join(NORMS)}, not {self.norm!r}.")
        if self.score not in SCORES:
            out.append(f"Score function must be one of {', '.join(SCORES)}, not {self.score!r}.")
        if self.act not in ACTS:
            out.append(f"MLP activation must be one of {', '.join(ACTS)}, not {self.act!r}.")
        if self.d_model % self.n_heads:
            lower = self.d_model - self.d_model % self.n_heads
            upper = lower + self.n_heads
            options = " or ".join(str(v) for v in (lower, upper) if MIN_D_MODEL <= v <= MAX_D_MODEL)
            out.append(f"d_model = {self.d_model} does not divide into {self.n_heads} heads: each head gets "
                       f"d_model / heads dimensions, so pick a d_model divisible by {self.n_heads}"
                       f"{' (e.g. ' + options + ')' if options else ''} or change the number of heads.")
        elif self.pos == "rope" and self.d_head % 2:
            out.append(f"RoPE rotates pairs of dimensions, so each head needs an even width; "
                       f"d_model / heads = {self.d_model} / {self.n_heads} = {self.d_head} is odd.")
        return out

    def config(self) -> TransformerConfig:
        """The model's config (vocabulary and max_len from the task); call only when `problems()` is empty."""
        return default_config(self.task, self.arch, pos=self.pos, norm=self.norm, n_layers=self.n_layers,
                              d_model=self.d_model, n_heads=self.n_heads, score=self.score, act=self.act,
                              key_norm_clip=self.key_norm_clip if self.key_norm_clip > 0 else None)

    def trainer(self, device: str = "cpu") -> Trainer:
        """A fresh Trainer for these settings (seeded, with warm-up and cosine decay)."""
        return Trainer(self.config(), self.task, steps=self.steps, batch_size=BATCH_SIZE, lr=self.lr,
                       seed=self.seed, warmup=self.warmup_steps, device=device, embed_std=EMBED_STD,
                       head_mi=self.head_mi)

    def to_dict(self) -> dict:
        """Plain values (for metadata and URLs)."""
        return asdict(self)


def param_count(config: TransformerConfig) -> int:
    """How many numbers a model of this config learns.

    Counted on a skeleton built on the meta device: no memory, no random numbers (so it works for
    the original Transformer's sizes too, and never touches torch's shared generator)."""
    with torch.device("meta"):
        return sum(p.numel() for p in Transformer(config).parameters())


def at_original_size(config: TransformerConfig, preset: str = "original") -> TransformerConfig:
    """The same design (task, family, positions, norm, score) at a famous model's sizes
    (core.families.SIZE_PRESETS: the original Transformer base, 6 layers per stack, d_model 512,
    8 heads of 64, d_ff 2048; or BERT-base)."""
    from core.families import SIZE_PRESETS

    p = SIZE_PRESETS[preset]
    layers = int(p.n_layers.split("+")[0])  # "6 + 6": per stack, as TransformerConfig counts them
    return TransformerConfig(**{**config.to_dict(), "d_model": p.d_model, "n_heads": p.n_heads, "d_head": p.d_head,
                                "d_mlp": p.d_ff, "n_layers": layers, "max_len": max(config.max_len, 512)})


def clamp_number(name: str, value, default):
    """`value` as the setting's type, clamped into LIMITS[name]; returns (value, note or None)."""
    lo, hi = LIMITS[name]
    try:
        if isinstance(value, bool):
            raise ValueError
        number = float(value)
        if not math.isfinite(number):
            raise ValueError
    except (TypeError, ValueError, OverflowError):
        shown = "the default" if default is None else f"{default:g}"
        return default, f"{LABELS[name]} = {str(value)[:40]!r} is not a number; using {shown}."
    if name not in FLOATS:
        number = int(round(number))
    if number < lo or number > hi:
        clamped = min(max(number, lo), hi)
        why = " (the server's cap, so one run cannot hog it)" if name == "steps" else ""
        return clamped, f"{LABELS[name]} = {number:g} is outside {lo:g}..{hi:g}{why}; using {clamped:g}."
    return number, None


def clamp_settings(raw: dict) -> tuple[TrainSettings, list[str]]:
    """Settings from untrusted values: unknown choices fall back to defaults, numbers are clamped.

    Returns (settings, notes): one note per value that was changed, to show on the page.
    """
    base = TrainSettings()
    notes: list[str] = []
    task = raw.get("task", base.task)
    if task not in TASKS:
        notes.append(f"Unknown task {task!r}; using {base.task}.")
        task = base.task
    archs = get_task(task).archs
    arch = raw.get("arch", archs[0])
    if arch not in archs:
        notes.append(f"The {task} task works with {', '.join(archs)}; using {archs[0]} instead of {arch!r}.")
        arch = archs[0]
    values = {"task": task, "arch": arch}
    for name, allowed in (("pos", POS_SCHEMES), ("norm", NORMS), ("score", SCORES), ("act", ACTS)):
        value = raw.get(name, getattr(base, name))
        if value not in allowed:
            notes.append(f"{name} = {value!r} is not one of {', '.join(allowed)}; using {getattr(base, name)}.")
            value = getattr(base, name)
        values[name] = value
    for name in LIMITS:
        if name == "warmup" and raw.get(name) is None:
            values[name] = None  # the default warm-up: a tenth of the run
            continue
        value, note = clamp_number(name, raw.get(name, getattr(base, name)), getattr(base, name))
        values[name] = value
        if note:
            notes.append(note)
    return TrainSettings(**values), notes


def snapshot_every(total_steps: int, max_snapshots: int = MAX_SNAPSHOTS) -> int:
    """Steps between snapshots so a run keeps at most `max_snapshots` (step 0 and the last included)."""
    return max(1, math.ceil(total_steps / max(1, max_snapshots - 1)))


# ---------------------------------------------------------------------------------------------
# The fixed example input and its attention


@dataclass
class Example:
    """One fixed input of the task: what every snapshot runs the model on."""

    tokens: list[str]  # the input (encoder-decoder: the source)
    ids: torch.Tensor  # [1 pos]
    tgt_tokens: Optional[list[str]] = None  # encoder-decoder: the decoder's input (<bos> + right answer)
    tgt_ids: Optional[torch.Tensor] = None  # [1 tgt_pos]

    def axis_tokens(self, kind: AttentionKind) -> tuple[list[str], list[str]]:
        """(query labels, key labels) of an attention kind on this example."""
        side = {"input": self.tokens, "source": self.tokens, "target": self.tgt_tokens}
        return list(side[kind.queries]), list(side[kind.keys])


def fixed_example(task: Task | str, arch: str) -> Example:
    """The longest example among a few fixed seeds: the same input for the whole run, so frames compare."""
    task = get_task(task) if isinstance(task, str) else task
    best = None
    for seed in EXAMPLE_SEEDS:
        batch = task.batch(1, arch, seed=seed)
        tokens = [t for t in task.vocab.decode(batch.tokens[0]) if t != "<pad>"]
        if best is None or len(tokens) > len(best[0]):
            best = (tokens, batch)
    tokens, batch = best
    ids = torch.tensor([task.vocab.encode(tokens)])  # [1 pos]
    if arch != "encoder-decoder":
        return Example(tokens, ids)
    tgt_tokens = task.vocab.decode(batch.tgt[0])
    return Example(tokens, ids, tgt_tokens, batch.tgt[:1].clone())  # tgt: [1 tgt_pos]


@torch.no_grad()
def attention_snapshot(model: Transformer, example: Example) -> dict[str, np.ndarray]:
    """Every attention pattern of `model` on `example`: {kind key: float16 array [layer head q k]}."""
    device = next(model.parameters()).device
    kwargs = {"tgt": example.tgt_ids.to(device)} if example.tgt_ids is not None else {}
    was_training = model.training
    model.eval()
    try:
        _, cache = model.run_with_cache(example.ids.to(device), "*hook_pattern", **kwargs)
    finally:
        model.train(was_training)
    out = {}
    for kind in attention_kinds(model.cfg.arch):
        layers = [cache[kind.hook(i, "hook_pattern")][0].float().cpu().numpy() for i in range(model.cfg.n_layers)]
        out[kind.key] = np.stack(layers).astype(np.float16)  # [layer head q k]
    return out


def normalised_entropy(patterns: np.ndarray, causal: bool) -> np.ndarray:
    """Mean entropy of each head's rows divided by the most it could be: `[layer head q k]` -> `[layer head]`.

    1 means the head spreads its weight evenly over every key it may see; 0 means every query
    looks at exactly one key. Rows that can see only one key (always 0) are left out.
    """
    p = np.asarray(patterns, dtype=np.float64)
    n_q, n_k = p.shape[-2:]
    allowed = causal_allowed(n_q, n_k, causal)  # [q k]
    top = max_entropy(allowed)  # [q]
    rows = top > 0
    if not rows.any():
        return np.zeros(p.shape[:-2])
    h = row_entropy(p)  # [layer head q]
    return (h[..., rows] / top[rows]).mean(axis=-1)  # [layer head]


@torch.no_grad()
def head_mi_matrices(model: Transformer, task: Task | str, n: int = MI_SAMPLES,
                     seed: int = MI_SEED) -> dict[str, np.ndarray]:
    """How much information every two heads of a layer share: {kind key: float64 array [layer head head]}, nats.

    The same Gaussian estimate the training penalty pushes down (core.train.head_mi), on `n`
    examples of the task drawn from a fixed seed (so matrices from different steps compare),
    every (example, position) one sample of each head's output hook_z. 0 on the diagonal.
    """
    task = get_task(task) if isinstance(task, str) else task
    arch = model.cfg.arch
    batch = task.batch(n, arch, seed=seed)
    device = next(model.parameters()).device
    kinds = attention_kinds(arch)
    names = [kind.hook(i, "hook_z") for kind in kinds for i in range(model.cfg.n_layers)]
    kwargs = {"tgt": batch.tgt.to(device)} if batch.tgt is not None else {}
    was_training = model.training
    model.eval()
    try:
        _, cache = model.run_with_cache(batch.tokens.to(device), names, **kwargs)
    finally:
        model.train(was_training)
    return {kind.key: np.stack([head_mi(cache[kind.hook(i, "hook_z")]).cpu().numpy()
                                for i in range(model.cfg.n_layers)])  # [layer head head]
            for kind in kinds}


def kinds_of(arch: str) -> list[AttentionKind]:
    """The attention kinds a model of `arch` has (re-exported for the page)."""
    return attention_kinds(arch)


# ---------------------------------------------------------------------------------------------
# Opening a checkpoint someone uploaded

PICKLE_SUFFIXES = (".pt", ".pth", ".pkl", ".pickle", ".ckpt", ".bin")


def read_checkpoint(name: str, data: bytes) -> tuple[Transformer, dict]:
    """(model, meta) from uploaded bytes, or a ValueError that says what is wrong, in plain words.

    Only safetensors is parsed (`core.checkpoints.from_bytes`); a pickle is refused before any
    byte of it is interpreted. The metadata must name a known task whose vocabulary fits the model.
    """
    from core import checkpoints  # here, so importing this module stays light

    name = str(name or "upload")
    if len(data) > checkpoints.MAX_UPLOAD_BYTES:
        raise ValueError(f"{name} is {len(data) / 1e6:.1f} MB; a Glassbox checkpoint is a few hundred KB "
                         f"(limit {checkpoints.MAX_UPLOAD_BYTES // (1024 * 1024)} MB).")
    if name.lower().endswith(PICKLE_SUFFIXES):
        raise ValueError(f"{name} looks like a PyTorch pickle file. Opening a pickle can run any code hidden in "
                         "it, so Glassbox never does; upload a .safetensors file saved by this app instead.")
    if len(data) == 0:
        raise ValueError(f"{name} is empty.")
    model, meta = checkpoints.from_bytes(data)  # bounds every declared size before anything is built
    task_name = meta.get("task")
    if task_name not in TASKS:
        raise ValueError(f"the checkpoint says its task is {task_name!r}, which this app does not know "
                         f"(known: {', '.join(TASKS)}).")
    task = get_task(task_name)
    if model.cfg.arch not in task.archs:
        raise ValueError(f"the checkpoint is a {model.cfg.arch} model, but the {task_name} task is for "
                         f"{', '.join(task.archs)} models.")
    if model.cfg.vocab_size < len(task.vocab):
        raise ValueError(f"the model knows {model.cfg.vocab_size} tokens, but the {task_name} task has "
                         f"{len(task.vocab)}.")
    vocab = meta.get("vocab")
    if vocab is not None and list(vocab) != list(task.vocab.tokens):
        raise ValueError(f"the checkpoint's vocabulary differs from this app's {task_name} vocabulary, so its "
                         "token ids would mean different things.")
    meta = dict(meta)
    meta["title"] = f"Uploaded: {str(meta.get('title') or name)[:60]}"
    meta.setdefault("description", f"Opened from {name}.")
    return model, meta


