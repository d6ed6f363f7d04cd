"""Train: pick a task and a model shape, train it live, watch heads form, keep or download the result."""

from __future__ import annotations

import numpy as np
import streamlit as st
import torch

from core.analysis import train as A
from core.analysis.train import TrainSettings
from core.checkpoints import MAX_UPLOAD_BYTES
from core.figures import train as F
from core.model import Transformer
from core.tasks import TASKS, get_task
from ui import models, query, training
from ui.page import header, try_this
from ui.sidebar import shared_sidebar

POS_LABELS = {"sinusoidal": "Sinusoidal (fixed waves)", "learned": "Learned table", "rope": "RoPE (rotate q, k)",
              "none": "None (only the mask)"}
NORM_LABELS = {"pre": "Pre-LN: x + F(LN(x))", "post": "Post-LN: LN(x + F(x))", "none": "No LayerNorm"}
DEFAULT = TrainSettings(task="reverse", arch="encoder", steps=300)  # learns in well under a minute
NOTES_KEY = "train.notes"  # messages about clamped settings, shown once
MAX_MB = MAX_UPLOAD_BYTES // (1024 * 1024)  # uploads over this are refused (a teaching model is ~KB)


# ---------------------------------------------------------------------------------------------
# Settings: URL -> widgets -> TrainSettings (clamped, with notes)


def seed_settings() -> None:
    """Initialise every setting widget from the URL (clamped, with a note) or from the defaults."""
    tasks = list(TASKS)
    query.seed("train.task", "task", lambda p: query.parse_choice(p, tasks), DEFAULT.task,
               valid=lambda v: v in tasks)
    archs = list(get_task(st.session_state["train.task"]).archs)
    arch_default = DEFAULT.arch if DEFAULT.arch in archs else archs[0]
    query.seed("train.arch", "arch", lambda p: query.parse_choice(p, archs), arch_default,
               valid=lambda v: v in archs)
    query.seed("train.pos", "pos", lambda p: query.parse_choice(p, A.POS_SCHEMES), DEFAULT.pos,
               valid=lambda v: v in A.POS_SCHEMES)
    query.seed("train.norm", "norm", lambda p: query.parse_choice(p, A.NORMS), DEFAULT.norm,
               valid=lambda v: v in A.NORMS)
    for name, param in (("n_layers", "layers"), ("d_model", "d_model"), ("n_heads", "heads"),
                        ("steps", "steps"), ("seed", "seed")):
        lo, hi = A.LIMITS[name]
        query.seed(f"train.{name}", param, lambda p, lo=lo, hi=hi: query.parse_int(p, lo, hi),
                   getattr(DEFAULT, name), valid=lambda v, lo=lo, hi=hi: isinstance(v, int) and lo <= v <= hi)
    lo, hi = A.LIMITS["lr"]
    query.seed("train.lr", "lr", lambda p: query.parse_float(p, lo, hi), DEFAULT.lr,
               valid=lambda v: isinstance(v, float) and lo <= v <= hi)


def settings_panel() -> tuple[TrainSettings, list[str]]:
    """The widgets of panel 1; returns the clamped settings and any notes about clamped values."""
    task_names = list(TASKS)
    c1, c2, c3, c4 = st.columns(4)
    task = c1.selectbox("Task", task_names, key="train.task", format_func=lambda n: TASKS[n].title,
                        help="The toy task the model learns; each says which positions are scored.")
    archs = list(get_task(task).archs)
    c2.selectbox("Architecture", archs, key="train.arch",
                 help="Only the architectures this task supports are offered.")
    c3.selectbox("Positions", A.POS_SCHEMES, key="train.pos", format_func=POS_LABELS.get)
    c4.selectbox("LayerNorm placement", A.NORMS, key="train.norm", format_func=NORM_LABELS.get)
    c1, c2, c3, c4, c5, c6 = st.columns(6)
    number(c1, "Layers", "n_layers", 1, f"Blocks per stack, {_range('n_layers')}.")
    number(c2, "d_model", "d_model", 8, f"Width of the residual stream, {_range('d_model')}; it must divide "
                                        "evenly by the number of heads.")
    number(c3, "Heads", "n_heads", 1, f"Attention heads per layer, {_range('n_heads')}.")
    number(c4, "Steps", "steps", 50, f"AdamW steps of {A.BATCH_SIZE} fresh examples each, {_range('steps')}: "
                                     "the cap keeps one run from hogging the shared server.")
    number(c5, "Learning rate", "lr", 1e-4, f"The peak step size, reached after the warm-up; {_range('lr')}.",
           fmt="%.4f")
    number(c6, "Seed", "seed", 1, f"Fixes the initial weights and the order of the batches; {_range('seed')}.")
    raw = {name: st.session_state[f"train.{name}"] for name in
           ("task", "arch", "pos", "norm", "n_layers", "d_model", "n_heads", "steps", "lr", "seed")}
    return A.clamp_settings(raw)


def _range(name: str) -> str:
    """'from lo to hi' for a numeric setting."""
    lo, hi = A.LIMITS[name]
    return f"from {lo:g} to {hi:g}"


def _clamp_widget(name: str) -> None:
    """on_change of a number box: bring a typed value into range and say so (shown under the settings)."""
    key = f"train.{name}"
    value, note = A.clamp_number(name, st.session_state.get(key), getattr(DEFAULT, name))
    st.session_state[key] = value
    if note:
        st.session_state.setdefault(NOTES_KEY, []).append(note)


def number(col, label: str, name: str, step, help: str, fmt: str | None = None) -> None:
    """A number box without hard limits in the browser: out-of-range values are clamped with a message."""
    col.number_input(label, key=f"train.{name}", step=step, format=fmt, help=help,
                     on_change=_clamp_widget, args=(name,))


def describe_settings(settings: TrainSettings) -> None:
    """One line of derived numbers (head width, parameter count), or what is wrong with the settings."""
    problems = settings.problems()
    if problems:
        for p in problems:
            st.error(p, icon=":material/error:")
        return
    n_params = _param_count(settings.config().to_dict())
    st.caption(f"Each head works in d_model / heads = {settings.d_model} / {settings.n_heads} = "
               f"**{settings.d_head}** dimensions · **{n_params:,}** parameters · warm-up **{settings.warmup}** "
               f"steps · batches of **{A.BATCH_SIZE}** fresh examples · at most **{A.MAX_STEPS}** steps per run.")


@st.cache_data(max_entries=64, show_spinner=False)
def _param_count(config: dict) -> int:
    """How many numbers a model of this config learns."""
    from core.config import TransformerConfig

    with torch.random.fork_rng(devices=[]):
        model = Transformer(TransformerConfig.from_dict(config))
    return sum(p.numel() for p in model.parameters())


# ---------------------------------------------------------------------------------------------
# Controls and the live view


def controls(settings: TrainSettings, device: str) -> None:
    """Train / Pause / Resume / Stop / Reset, depending on where the run is."""
    run = training.current()
    can_train = not settings.problems()
    with st.container(horizontal=True):
        if run is None or run.status == "done":
            st.button("Train" if run is None else "Train a new model", type="primary",
                      icon=":material/play_arrow:", key="train.go", disabled=not can_train,
                      on_click=training.start, args=(settings, device))
        elif run.status == "running":
            st.button("Pause", icon=":material/pause:", key="train.pause", on_click=training.pause)
        else:
            st.button("Resume", type="primary", icon=":material/play_arrow:", key="train.resume",
                      on_click=training.resume)
            st.button("Stop here and keep this model", icon=":material/stop:", key="train.stop",
                      on_click=training.stop_here, disabled=run.step == 0)
        st.button("Reset", icon=":material/restart_alt:", key="train.reset", on_click=training.reset,
                  disabled=run is None)
    error = st.session_state.get("train.error")
    if error:
        st.error(error)
    if run is not None and run.settings != settings and run.status != "done":
        st.info("The settings above changed, but this run keeps the ones it started with. "
                "Press **Reset** and then **Train** to use the new ones.", icon=":material/info:")


def current_view(run: training.TrainingRun) -> tuple:
    """(attention kind, layer) the heatmaps show; stale choices from an earlier run fall back to the first."""
    kinds = A.kinds_of(run.settings.arch)
    if st.session_state.get("train.view_kind") not in [k.key for k in kinds]:
        st.session_state["train.view_kind"] = kinds[0].key
    if st.session_state.get("train.view_layer") not in range(run.settings.n_layers):
        st.session_state["train.view_layer"] = 0
    kind = next(k for k in kinds if k.key == st.session_state["train.view_kind"])
    return kind, st.session_state["train.view_layer"]


def view_pickers(run: training.TrainingRun) -> tuple:
    """Which attention (for encoder-decoder) and which layer the heatmaps show."""
    kinds = A.kinds_of(run.settings.arch)
    current_view(run)
    cols = st.columns(3)
    if len(kinds) > 1:
        cols[0].selectbox("Heatmaps show", [k.key for k in kinds], key="train.view_kind",
                          format_func=lambda key: next(k.label for k in kinds if k.key == key))
    layer_col = cols[1] if len(kinds) > 1 else cols[0]
    layer_col.selectbox("Heatmaps show layer", list(range(run.settings.n_layers)), key="train.view_layer",
                        format_func=lambda i: f"layer {i}")
    return current_view(run)


def head_grid(run: training.TrainingRun, snap: training.Snapshot, kind, layer: int, key: str) -> None:
    """The heatmaps of every head of one layer at one snapshot, in one figure (one shared colour bar)."""
    q_tokens, k_tokens = run.example.axis_tokens(kind)
    per_row = 4 if len(k_tokens) <= 12 else 2
    fig = F.heads_figure(snap.patterns[kind.key][layer], q_tokens, k_tokens, per_row=per_row,
                         title=f"{kind.label}, layer {layer}, at step {snap.step}")
    st.plotly_chart(fig, key=key, config={"displayModeBar": False})


def progress_line(run: training.TrainingRun) -> None:
    """Progress bar with steps, time and speed."""
    trainer = run.trainer
    frac = min(1.0, run.step / max(1, run.total))
    speed = run.step / trainer.seconds if trainer.seconds > 0 else 0.0
    label = {"running": "Training", "paused": "Paused", "done": "Finished"}[run.status]
    eta = run.seconds_left() if run.status == "running" else None
    left = f" · about {eta:.0f} s to go" if eta is not None else ""
    st.progress(frac, text=f"{label}: step {run.step} of {run.total} · {trainer.seconds:.1f} s of compute "
                           f"({speed:.0f} steps/s){left}")


def live_panel() -> None:
    """The fragment that trains one chunk per rerun and redraws progress, curves and the newest heatmaps."""
    run = training.current()
    if run is None:
        st.info("Press **Train** to start. The loss curve, the progress bar and the heatmaps below update "
                "about once a second while the model learns.", icon=":material/model_training:")
        return
    was_running = run.status == "running"
    busy = training.advance(run) if was_running else None
    if was_running and run.status == "done":
        st.rerun()  # the whole page: the finished panels appear and the auto-rerun stops
    progress_line(run)
    if busy:
        st.warning(busy, icon=":material/hourglass_top:")
    steps, loss, acc = run.curves()
    metric = f"{run.task.metric} accuracy"
    st.plotly_chart(F.training_curves(steps, loss, acc, run.total, metric=metric,
                                      final_accuracy=run.final_accuracy),
                    key="train.curves", config={"displayModeBar": False})
    if run.status != "running":
        return
    st.markdown(f"**The newest attention snapshot** of the fixed example (a new one every {run.every} steps; "
                "when the run ends or you pause, a slider lets you go back through all of them).")
    kind, layer = view_pickers(run)
    head_grid(run, run.snapshots[-1], kind, layer, key="train.live")


# ---------------------------------------------------------------------------------------------
# After training: scrub the snapshots, keep the model


def scrubber(run: training.TrainingRun, kind, layer: int) -> None:
    """A slider over the stored snapshots, their heatmaps and how sharp each head became."""
    steps = [s.step for s in run.snapshots]
    if len(steps) < 2:
        st.info("Train a few steps first: snapshots are taken every "
                f"{run.every} steps.", icon=":material/info:")
        return
    if st.session_state.get("train.scrub") not in steps:
        st.session_state["train.scrub"] = steps[-1]
    step = st.select_slider("Training step of the snapshot", steps, key="train.scrub",
                            help=f"{len(steps)} snapshots, one every {run.every} steps (at most {A.MAX_SNAPSHOTS}).")
    snap = run.snapshots[steps.index(step)]
    spread = np.stack([s.spread[kind.key][layer] for s in run.snapshots])  # [snapshot head]
    st.plotly_chart(F.entropy_curves(steps, spread, current=step,
                                     title=f"How spread out each head's attention is ({kind.label}, layer {layer})"),
                    key="train.spread", config={"displayModeBar": False})
    head_grid(run, snap, kind, layer, key="train.scrub_fig")


def keep_panel(run: training.TrainingRun) -> None:
    """Final accuracy on fresh samples, 'use on every page', and the download."""
    task = run.task
    c1, c2, c3 = st.columns(3)
    c1.metric("Accuracy on fresh examples", f"{run.final_accuracy:.1%}",
              help=f"{task.metric.capitalize()} accuracy on {training.EVAL_SAMPLES} examples drawn after training "
                   "(core.train.evaluate).")
    c2.metric("Steps trained", f"{run.step}")
    c3.metric("Final training loss", f"{run.trainer.history[-1]['loss']:.4f}" if run.trainer.history else "-")
    st.caption(f"Scored: {task.scored_for(run.settings.arch)}")
    selected = st.session_state.get("glassbox.model") == run.model_id
    with st.container(horizontal=True):
        st.button("Use this model on every page", type="primary", icon=":material/check_circle:",
                  key="train.use", on_click=training.use_everywhere, args=(run.model_id,), disabled=selected)
        st.download_button("Download .safetensors", data=run.checkpoint, key="train.download",
                           file_name=f"glassbox-{run.settings.task}-{run.settings.arch}-{run.step}steps.safetensors",
                           mime="application/octet-stream", icon=":material/download:", on_click="ignore")
    if selected:
        st.success("The sidebar now shows this model on every page (Attention, Heads, Masks, ...).",
                   icon=":material/check_circle:")
    else:
        st.caption("It is already in the sidebar's model list as "
                   f"“{models.model_choices().get(run.model_id, 'your model')}”.")


def upload_panel() -> None:
    """Open a checkpoint (.safetensors only) and add it to this session's models."""
    file = st.file_uploader("Open a .safetensors checkpoint saved by this app", key="train.upload",
                            max_upload_size=MAX_MB,
                            help="Only safetensors is read; pickles (.pt, .pth) are refused without being opened.")
    if file is None:
        return
    if file.size > MAX_UPLOAD_BYTES:
        st.error(f"{file.name} is {file.size / 1e6:.1f} MB; the limit is {MAX_MB} MB.")
        return
    try:
        model_id, meta, new = training.open_upload(file.file_id, file.name, file.getvalue())
    except ValueError as exc:
        st.error(f"Could not open **{file.name}**: {exc}", icon=":material/block:")
        return
    except Exception as exc:  # noqa: BLE001 - an upload must never crash the page
        st.error(f"Could not open **{file.name}**: unexpected {type(exc).__name__}: {str(exc)[:300]}",
                 icon=":material/block:")
        return
    if new:
        st.rerun()  # once, so the shared sidebar (drawn above) lists the new model
    acc = meta.get("accuracy")
    acc_text = f", accuracy {acc:.1%}" if isinstance(acc, (int, float)) else ""
    st.success(f"Opened **{file.name}**: a {meta['config'].get('arch')} model for the {meta.get('task')} task"
               f"{acc_text}. It is in the sidebar's model list for this session.", icon=":material/check_circle:")
    selected = st.session_state.get("glassbox.model") == model_id
    st.button("Use the uploaded model on every page", key="train.use_upload", on_click=training.use_everywhere,
              args=(model_id,), disabled=selected)


# ---------------------------------------------------------------------------------------------
# The page

sel = shared_sidebar()
seed_settings()
header(
    "Train your own Transformer",
    "Every model in this app began as random numbers. Training shows it a batch of fresh examples, "
    "measures how unlikely it found the right answers (the loss), and moves every weight a little in "
    "the direction that lowers that number. Do this a few hundred times and the attention heads stop "
    "looking everywhere and start doing a job you can name. Here you choose the task and the shape, "
    "watch the loss fall and the heads sharpen, and keep the result: it joins the sidebar's models for "
    "this session and can be downloaded.",
    r"\mathcal{L}(\theta) = -\frac{1}{|S|}\sum_{(b,t)\in S} \log p_\theta\!\left(y_{b,t}\mid x_b\right)"
    r"\qquad \theta \leftarrow \theta - \eta_t\,\mathrm{AdamW}\!\left(\nabla_\theta \mathcal{L}\right)",
)

st.subheader("1 · Set up the run")
st.markdown(
    "The sum runs over the scored positions S only (which ones depends on the task). "
    "Each step uses 64 new random examples, so the model cannot memorise them. The learning rate "
    "climbs linearly during a short warm-up (Adam's running averages are unreliable at first, and "
    "post-LN models in particular blow up without it), then eases down along a cosine so the last "
    "steps settle instead of bouncing around. Each of the h heads reads a slice of width d_model / h."
)
st.latex(r"\eta_t = \eta\cdot\begin{cases}\dfrac{t+1}{W} & t < W \\[4pt] 0.1 + 0.9\cdot\tfrac12\left(1+\cos\pi\,"
         r"\dfrac{t-W}{T-W}\right) & t \ge W\end{cases}\qquad d_{\text{head}} = \dfrac{d_{\text{model}}}{h}")
settings, notes = settings_panel()
for note in dict.fromkeys(st.session_state.pop(NOTES_KEY, []) + notes):
    st.warning(note, icon=":material/tune:")
describe_settings(settings)
query.write(task=settings.task, arch=settings.arch, pos=settings.pos, norm=settings.norm, layers=settings.n_layers,
            d_model=settings.d_model, heads=settings.n_heads, steps=settings.steps, lr=f"{settings.lr:g}",
            seed=settings.seed)
try_this(
    "Train the default (reverse, encoder, 300 steps). Somewhere around step 75-150 the loss falls off a "
    "cliff: that is when the heads find the mirror pattern. Seeds 1 and 2 move the cliff a little; it always comes.",
    "Same run with **Positions: None**. Without positions every slot looks identical to the encoder, "
    "so it cannot know where to read from: the loss stalls.",
    "Set d_model to 60 with 8 heads and read the message; then pick 64.",
    "Train the **future legality** task as a **decoder**, then as an **encoder**: the decoder stays near "
    "chance because the rule arrives after the digits it must judge.",
)

st.subheader("2 · Train and watch")
st.markdown(
    "The curves share their x axis with the whole planned run, so they also show how far along it is. "
    "The thin line is each batch's value, the thick one a moving average. The heatmaps show the newest "
    "snapshot of the attention on one fixed example; brighter cells carry more weight (0 to 1). "
    f"Training runs in short bursts, and at most {training.MAX_CONCURRENT} runs train at the same moment "
    "on this server, so everyone's pages stay quick. It only advances while this page is open; come back "
    "and it continues where it stopped."
)
controls(settings, sel.device)
run = training.current()
running = run is not None and run.status == "running"
st.fragment(live_panel, run_every=training.TICK_SECONDS if running else None)()

if run is not None and run.status != "running":
    st.subheader("3 · Watch the heads form")
    st.markdown(
        "Every few steps the page saved the attention of every head on the same example. Slide through "
        "them: early patterns are a blur, later ones sharpen into a rule (a diagonal, a mirror, a look at "
        "one special token). The line chart condenses each snapshot to one number per head, how spread out "
        "its attention is, 1 for even weight over every key it may see and 0 for all weight on one key."
    )
    st.latex(r"\text{spread}(\text{head}) = \frac{1}{|Q|}\sum_{i\in Q}\frac{-\sum_j a_{ij}\log_2 a_{ij}}"
             r"{\log_2 \#\{j : i \text{ may see } j\}}")
    kind, layer = view_pickers(run)
    scrubber(run, kind, layer)
    try_this(
        "Slide to the step just before the loss dropped and to the one just after: which head changed most?",
        "Train again with 1 head instead of 4: does that single head have to do every job at once?",
        "Set the learning rate to 0.01 and train once with Pre-LN, once with Post-LN. Pre-LN still learns; "
        "Post-LN stalls. In Post-LN the gradient has to pass through the LayerNorm of every block on its way "
        "down, and each can scale it up; in Pre-LN the identity path carries it down untouched. At 0.003 both learn.",
    )

if run is not None and run.status == "done":
    st.subheader("4 · Keep your model")
    st.markdown(
        "The accuracy below is measured on examples the model never trained on, drawn fresh from the task. "
        "The model is already in the sidebar's list for this session; one click selects it so the "
        "Attention, Heads, Masks, Positions and Depth pages look inside it. Download it to keep it: the "
        "file is a single .safetensors with the config, the vocabulary and this accuracy inside."
    )
    keep_panel(run)

st.subheader("5 · Open a checkpoint")
st.markdown(
    "Upload a .safetensors file this app saved (yours, or a classmate's) to use it on every page. The file "
    "is checked before anything is built: wrong shapes, a truncated file, an unknown task or a vocabulary "
    "that does not match are refused with a reason. Pickle files (.pt, .pth) are never opened, because "
    f"opening one can run code hidden inside it. Files over {MAX_MB} MB are refused."
)
upload_panel()
