"""The Train page's runs: per-session training in short chunks under a server-wide cap, and its cached work.

A run lives in `st.session_state[RUN_KEY]` (the Trainer with its model and optimizer, the
snapshots, the status), so a rerun in the middle of training, or a trip to another page, loses
nothing. The page calls `advance(run)` from a fragment that reruns itself every `TICK_SECONDS`;
each call trains for at most `CHUNK_SECONDS` while holding one of `MAX_CONCURRENT` process-wide
slots, and while other students use the server all training together gets at most `TRAIN_SHARE`
of its time (`ShareClock`), so a classroom of students training at once shares the CPU in turns
instead of starving everyone else's page. The one cached result of the page, the parameter count of a
config, is a `ui.shell.memo` memo shared by every session.
"""

from __future__ import annotations

import contextlib
import copy
import threading
import time
from dataclasses import dataclass, field
from typing import Iterator, Optional

import numpy as np
import streamlit as st
import torch

from core import checkpoints
from core.analysis import train as analysis
from core.analysis.train import Example, TrainSettings
from core.config import TransformerConfig
from core.tasks import get_task
from core.train import Trainer, evaluate
from ui.shell import models, sidebar
from ui.shell.memo import memo

RUN_KEY = "train.run"  # the session's TrainingRun
UPLOADS_KEY = "train.uploads"  # uploaded file id -> registered model id (so a rerun does not add it twice)
ERROR_KEY = "train.error"  # why the last Train press could not start a run
SCRUB_KEY = "train.scrub"  # the snapshot step the scrubber shows (a new run has its own steps)
MAX_CONCURRENT = 2  # training runs a server process trains in turns; a third waits for a free slot
CHUNK_SECONDS = 0.8  # training time per fragment run: short, so Pause and other pages stay responsive
TICK_SECONDS = 1.0  # how often the training fragment reruns itself while a run is going
TORCH_THREADS = 1  # intra-op threads for a training chunk (see `advance`)
SLOT_WAIT_SECONDS = 0.5  # how long a chunk waits for a free slot (a holder frees it within a chunk)
# While other students use the server, all training chunks together get at most this share of its
# time: a chunk is mostly Python (the interpreter lock), so two students training at full speed
# doubled everyone else's clicks (bench/classroom.py). Alone on the server, training runs flat out.
TRAIN_SHARE = 0.3
SHARED_CHUNK_SECONDS = 0.3  # a chunk's length while the share applies (then 0.7 s for everyone else)
STEP_GRAIN = 5  # steps between clock checks inside a chunk
EVAL_SAMPLES = 512  # fresh examples for the final accuracy
EVAL_SEED_OFFSET = 7919  # evaluation samples differ from the training batches (and from seed to seed)

_SLOTS = threading.BoundedSemaphore(MAX_CONCURRENT)  # shared by every session of this server process


class ShareClock:
    """Hands out training time so that all chunks together use at most `share` of the wall clock.

    One chunk runs at a time; after a chunk of d seconds the next may start d * (1/share - 1) seconds
    after it ended. Shared by every session of the server process (a lock guards it)."""

    def __init__(self, share: float):
        self.share = share
        self._lock = threading.Lock()
        self._free_at = 0.0  # time.monotonic() from which the next chunk may start
        self._running = False

    def start(self, wait: float) -> bool:
        """Wait up to `wait` seconds for this caller's turn; True if it may train now (then call `done`)."""
        deadline = time.monotonic() + wait
        while True:
            with self._lock:
                now = time.monotonic()
                if not self._running and now >= self._free_at:
                    self._running = True
                    return True
                ready = self._free_at if not self._running else now + 0.02
            pause = min(ready, deadline) - now
            if pause <= 0 and now >= deadline:
                return False
            time.sleep(max(0.005, pause))

    def done(self, seconds: float) -> None:
        """A chunk that trained for `seconds` ended: the next one waits its share."""
        with self._lock:
            self._running = False
            self._free_at = time.monotonic() + seconds * (1.0 / self.share - 1.0)


_SHARE = ShareClock(TRAIN_SHARE)


def others_online() -> bool:
    """Whether other students used this server in the last seconds (ui.shell.activity; idle open tabs do not count)."""
    from ui.shell import activity

    return activity.others_active()


@contextlib.contextmanager
def training_slot(wait: float = SLOT_WAIT_SECONDS) -> Iterator[bool]:
    """Hold one of the server's training slots for a chunk; yields False (and holds none) if all are busy."""
    got = _SLOTS.acquire(timeout=wait)
    try:
        yield got
    finally:
        if got:
            _SLOTS.release()


@memo(maxsize=64)
def original_param_count(config: dict, preset: str) -> int:
    """Parameters of the same design at a famous model's sizes (a memo: the count is the same for everyone)."""
    return analysis.param_count(analysis.at_original_size(TransformerConfig.from_dict(config), preset))


@memo(maxsize=64)
def param_count(config: dict) -> int:
    """How many numbers a model of this config (`TransformerConfig.to_dict()`) learns; one build per config."""
    return analysis.param_count(TransformerConfig.from_dict(config))


@dataclass
class Snapshot:
    """The attention of the fixed example at one step, and how spread out each head was."""

    step: int
    patterns: dict[str, np.ndarray]  # kind key -> [layer head q k] float16
    spread: dict[str, np.ndarray]  # kind key -> [layer head] normalised entropy in 0..1


@dataclass
class TrainingRun:
    """One session's training run: settings, the Trainer, snapshots and what became of it."""

    settings: TrainSettings
    trainer: Trainer
    example: Example
    every: int  # steps between snapshots
    snapshots: list[Snapshot] = field(default_factory=list)
    status: str = "running"  # "running", "paused" or "done"
    waited: int = 0  # chunks skipped because the server was busy
    clock: Optional[tuple[float, int]] = None  # (wall time, step) when the run last started or resumed
    final_accuracy: Optional[float] = None
    head_mi: dict[int, dict] = field(default_factory=dict)  # step -> {kind key: [layer head head]} shared information
    model_id: Optional[str] = None  # the id under which the finished model is on every page
    checkpoint: Optional[bytes] = None  # the finished model as .safetensors bytes

    @property
    def task(self):
        """The Task object being trained on."""
        return get_task(self.settings.task)

    @property
    def step(self) -> int:
        """Steps done so far."""
        return self.trainer.step

    @property
    def total(self) -> int:
        """Steps planned (or done, for a run stopped early)."""
        return self.trainer.step if self.trainer.stopped_early else self.trainer.total

    def seconds_left(self) -> Optional[float]:
        """Wall-clock estimate of the time to the end (drawing and waiting included), None if unknown."""
        if self.clock is None or self.step <= self.clock[1]:
            return None
        rate = (self.step - self.clock[1]) / max(1e-6, time.perf_counter() - self.clock[0])  # steps per second
        return (self.total - self.step) / rate

    def take_snapshot(self) -> None:
        """Record the attention on the fixed example at the current step (once per step)."""
        if self.snapshots and self.snapshots[-1].step == self.step:
            return
        patterns = analysis.attention_snapshot(self.trainer.model, self.example)
        causal = {k.key: k.causal for k in analysis.kinds_of(self.settings.arch)}
        spread = {key: analysis.normalised_entropy(p, causal[key]) for key, p in patterns.items()}
        self.snapshots.append(Snapshot(self.step, patterns, spread))

    def curves(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(steps, cross-entropy, accuracy) of every step so far (without the head-diversity penalty)."""
        h = self.trainer.history
        return (np.array([r["step"] for r in h], dtype=np.int32), np.array([r.get("ce", r["loss"]) for r in h]),
                np.array([r["accuracy"] for r in h]))

    def measure_head_mi(self) -> dict:
        """The heads' shared information at the current step (measured once per step)."""
        if self.step not in self.head_mi:
            self.head_mi[self.step] = analysis.head_mi_matrices(self.trainer.model, self.settings.task)
        return self.head_mi[self.step]


def current() -> Optional[TrainingRun]:
    """This session's run, or None."""
    run = st.session_state.get(RUN_KEY)
    return run if isinstance(run, TrainingRun) else None


def start(settings: TrainSettings, device: str = "cpu") -> None:
    """Begin a new run on `device` (a button callback); a finished run's model stays on every page."""
    problems = settings.problems()
    if problems:
        st.session_state[ERROR_KEY] = " ".join(problems)
        return
    try:
        trainer = settings.trainer(str(models.torch_device(device)))
    except ValueError as exc:
        st.session_state[ERROR_KEY] = f"These settings cannot be trained: {exc}"
        return
    st.session_state.pop(ERROR_KEY, None)
    st.session_state.pop(SCRUB_KEY, None)  # the new run has its own snapshot steps
    example = analysis.fixed_example(settings.task, settings.arch)
    run = TrainingRun(settings, trainer, example, analysis.snapshot_every(settings.steps))
    run.take_snapshot()  # step 0: the random model
    if settings.n_heads > 1:
        run.measure_head_mi()  # step 0: what random heads share, for the before/after comparison
    st.session_state[RUN_KEY] = run


def head_mi_pair(run: TrainingRun) -> tuple[dict, dict]:
    """The heads' shared information at step 0 and at the run's current step ({kind key: [layer head head]})."""
    if 0 not in run.head_mi:
        raise ValueError("the run has no step-0 measurement (it was started with one head)")
    return run.head_mi[0], run.measure_head_mi()


def pause() -> None:
    """Stop training after the current chunk; everything is kept."""
    run = current()
    if run is not None and run.status == "running":
        run.status = "paused"
        run.clock = None


def resume() -> None:
    """Continue a paused run."""
    run = current()
    if run is not None and run.status == "paused":
        run.status = "running"


def stop_here() -> None:
    """End a paused run at the current step and keep the model as it is."""
    run = current()
    if run is not None and run.status == "paused" and run.step > 0:
        run.trainer.stopped_early = True
        finish(run)


def reset() -> None:
    """Forget the run (models already put on every page stay there)."""
    st.session_state.pop(RUN_KEY, None)
    st.session_state.pop(ERROR_KEY, None)
    st.session_state.pop(SCRUB_KEY, None)


def advance(run: TrainingRun, budget: Optional[float] = None) -> Optional[str]:
    """Train for up to `budget` seconds in one server slot; returns a message if the server was busy.

    Snapshots are taken on their schedule; when the last step is done the run is finished.
    No streamlit call happens inside, so a rerun cannot interrupt the chunk half-way.

    Torch runs the chunk on one intra-op thread: the server already runs one thread per
    session, and on a small shared machine two OpenMP threads per training fought each other
    (measured here: 13 steps/s on one thread, under 1 step/s on two, for the default model).
    """
    if run.status != "running":
        return None
    budget = CHUNK_SECONDS if budget is None else budget
    if run.clock is None:
        run.clock = (time.perf_counter(), run.step)
    if torch.get_num_threads() != TORCH_THREADS:
        torch.set_num_threads(TORCH_THREADS)  # this thread (and threads started later)
    with training_slot() as got:
        if not got:
            run.waited += 1
            return (f"The server is already training {MAX_CONCURRENT} models for other people, its cap. "
                    "Your run waits its turn and continues by itself; nothing is lost.")
        shared = others_online()
        if shared:
            if not _SHARE.start(wait=2 * TICK_SECONDS):
                run.waited += 1
                return ("Other students are using this server, so training gets under a third of its time and "
                        "runs in turns. Your run continues by itself; nothing is lost.")
            budget = min(budget, SHARED_CHUNK_SECONDS)
        start_time = time.perf_counter()
        try:
            while not run.trainer.done and time.perf_counter() - start_time < budget:
                next_snap = (run.step // run.every + 1) * run.every
                run.trainer.run(max(1, min(STEP_GRAIN, next_snap - run.step)))
                if run.step % run.every == 0:
                    run.take_snapshot()
        finally:
            if shared:
                _SHARE.done(time.perf_counter() - start_time)
        if run.trainer.done:
            finish(run)
    return None


def finish(run: TrainingRun) -> None:
    """Final snapshot, accuracy on fresh samples, a place on every page, and the checkpoint bytes."""
    run.take_snapshot()
    model = run.trainer.model.eval()
    run.final_accuracy = evaluate(model, run.settings.task, n_samples=EVAL_SAMPLES,
                                  seed=run.settings.seed + EVAL_SEED_OFFSET)
    meta = run_meta(run)
    run.model_id = models.add_user_model(copy.deepcopy(model).eval(), meta)
    run.checkpoint = checkpoints.to_bytes(model, meta)
    run.status = "done"


def run_meta(run: TrainingRun) -> dict:
    """Checkpoint metadata of a finished run (what the sidebar and a later upload read)."""
    s, task = run.settings, run.task
    title = f"Your {s.task} {s.arch} ({s.n_layers}L, d{s.d_model}, {s.n_heads}h, {s.pos})"
    return {
        "id": "trained-" + "-".join(str(v) for v in (s.task, s.arch, s.pos, s.norm, s.n_layers, s.d_model,
                                                        s.n_heads, s.seed)),
        "title": title,
        "description": (f"Trained on this page: {run.step} steps, {task.metric} accuracy "
                        f"{run.final_accuracy:.1%} on {EVAL_SAMPLES} fresh examples."),
        "task": s.task, "vocab": list(task.vocab.tokens), "config": run.trainer.model.cfg.to_dict(),
        "steps": run.step, "seed": s.seed, "accuracy": run.final_accuracy,
        "train_length": task.default_length, "lr": s.lr, "batch_size": analysis.BATCH_SIZE,
        "warmup": run.trainer.warmup, "head_mi": s.head_mi,
    }


def use_everywhere(model_id: str) -> None:
    """Select a session model in the shared sidebar (a button callback, so it runs before the sidebar)."""
    if model_id not in models.user_models():
        return
    st.session_state[sidebar.MODEL_KEY] = model_id
    # the new model may not read the old input: start from its task's first example
    st.session_state.pop(sidebar.INPUT_KEY, None)
    st.session_state.pop(sidebar.TGT_KEY, None)
    st.session_state[sidebar.SEED_KEY] = 0


def open_upload(file_id: str, name: str, data: bytes) -> tuple[str, dict, bool]:
    """Validate an uploaded checkpoint and put it on every page; returns (model id, meta, newly added).

    Raises ValueError with a message for the student. Never unpickles: only safetensors is read.
    """
    seen = st.session_state.setdefault(UPLOADS_KEY, {})
    if file_id in seen and seen[file_id] in models.user_models():
        model_id = seen[file_id]
        return model_id, models.user_models()[model_id][1], False
    model, meta = analysis.read_checkpoint(name, data)
    # The file's own accuracy claim is kept apart by core.checkpoints; this one is measured here.
    meta["accuracy"] = evaluate(model, meta["task"], n_samples=EVAL_SAMPLES, arch=model.cfg.arch)
    model_id = models.add_user_model(model, meta)
    seen[file_id] = model_id
    return model_id, meta, True
