"""The Train page's panels: the settings (bound to the URL), Train and the live view, the snapshot
scrubber, keeping the model, and opening a checkpoint. pages/train.py calls them in reading order.

Kept in a module (not the page file) so it is compiled once per process; the training itself
and the page's cached work are in ui.train.runs, the numbers in core.analysis.train.

The page's first figure is the learning-rate schedule of the planned run (`schedule`), drawn before any
training under the three settings it shows (steps, learning rate, warm-up).

What a click reruns: every setting but the task feeds "settings", read by three sections
(ui.shell.sections: `@S.section(..., reads=...)`), the learning-rate chart (`schedule`), the notes and
summary (`summary`) and the buttons (`controls`), which read the settings from the session
(`settings_now`); a change reruns those alone. A
typed number that had to be clamped, or steps that move the automatic warm-up, rerun the whole page
instead, so that the boxes show the values used (`settle_typed`); so do the task (it changes the
architectures offered) and the two presets (they change three boxes). The buttons start, pause or stop
the run that everything below shows, so each reruns the whole page (`then_page`, `train`); the live view
reruns itself while a run trains. The snapshot pickers redraw only their own fragment (`history_views`),
the snapshot slider only its own (`scrubber`). Keeping or opening a model changes the sidebar: the whole
page.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import plotly.graph_objects as go
import streamlit as st
from streamlit.errors import StreamlitAPIException

from core.analysis import train as A
from core.analysis import training_claims as TC
from core.analysis.train import TrainSettings
from core.checkpoints import MAX_UPLOAD_BYTES, describe_limits
from core.families import SIZE_PRESETS
from core.figures import train as F
from core.tasks import TASKS, get_task
from core.train import lr_factor
from ui.shell import models
from ui.train import runs as R
from ui.shell.export import chart_config
from ui.shell.page import try_this
from ui.shell import query
from ui.shell.params import Choice, Float, Int, Params, general
from ui.shell.sections import Sections
from ui.shell.sidebar import MODEL_KEY

POS_LABELS = {"sinusoidal": "Sinusoidal (fixed waves)", "learned": "Learned table", "rope": "RoPE (rotate q, k)",
              "none": "None (only the mask)"}
NORM_LABELS = {"pre": "Pre-LN: x + F(LN(x))", "post": "Post-LN: LN(x + F(x))", "none": "No LayerNorm"}
SCORE_LABELS = {"scaled_dot": "Scaled dot: q·k / √d_head", "dot": "Plain dot: q·k", "cosine": "Cosine × 8"}
ACT_LABELS = {"gelu": "GELU", "relu": "ReLU"}
PRESET_LR = TC.NORM_LR  # 0.007: over 5 seeds (bench/training_claims.py, assets/precomputed/training_claims.json)
# pre-LN reaches 99% with or without warm-up at 2 and 4 layers; post-LN without warm-up in 3 of 5 seeds at 2
# layers and 0 of 5 at 4; the prompts below quote the stored table, so they follow it when it is measured again
CLAIMS = TC.load_table()  # the measured rates and steps the prompts quote (a small JSON asset, read once)
DEFAULT = TrainSettings(task="reverse", arch="encoder", steps=300)  # learns in well under a minute
ARCHS = tuple(dict.fromkeys(arch for task in TASKS.values() for arch in task.archs))  # a task offers some of them
NOTES_KEY = "train.notes"  # messages about typed values that were clamped, shown once under the settings
AUTO_KEY = "train.auto_warmup"  # the automatic warm-up the warm-up box's placeholder shows (the last full run's)
VIEW_KIND_KEY, VIEW_LAYER_KEY = "train.view_kind", "train.view_layer"  # which heatmaps (not in the URL)
MAX_MB = MAX_UPLOAD_BYTES // (1024 * 1024)  # uploads over this are refused (a teaching model is ~KB)
# px: select boxes wide enough to show their longest option whole at any screen width (a row wraps instead)
TASK_BOX, WIDE_BOX, MID_BOX, NARROW_BOX = 280, 240, 225, 150
MAX_SESSION_UPLOADS = 3  # uploaded models a session keeps: each stays in the server's memory (19 MB files: ~55 MB each)


def run_chart(run: R.TrainingRun, view: str) -> dict:
    """The chart config (ui.shell.export) of a figure of this run: named after the model it is becoming,
    or, once finished, the id it is kept under on every page."""
    return chart_config("train", run.model_id or f"{run.settings.task}-{run.settings.arch}-run", view)


class AutoInt(Int):
    """A whole number in [lo, hi], or None for 'automatic' (an empty box; absent from the URL, or `auto`)."""

    def parse(self, raw_name: str, bounds: dict):
        raw = query.parse_text(raw_name)
        if raw is not None and raw.strip().lower() == "auto":
            return None
        return super().parse(raw_name, bounds)


# Every URL parameter of the page, once. The architectures offered depend on the task (given when
# the widget is drawn). Session keys keep the TrainSettings field names (train.n_layers, train.n_heads).
URL = Params(
    "train",
    Choice("task", DEFAULT.task, choices=tuple(TASKS)),
    Choice("arch", DEFAULT.arch, choices=ARCHS),
    Choice("pos", DEFAULT.pos, choices=A.POS_SCHEMES),
    Choice("norm", DEFAULT.norm, choices=A.NORMS),
    Int("layers", DEFAULT.n_layers, key="train.n_layers", lo=A.LIMITS["n_layers"][0], hi=A.LIMITS["n_layers"][1]),
    Int("d_model", DEFAULT.d_model, lo=A.LIMITS["d_model"][0], hi=A.LIMITS["d_model"][1]),
    Int("heads", DEFAULT.n_heads, key="train.n_heads", lo=A.LIMITS["n_heads"][0], hi=A.LIMITS["n_heads"][1]),
    Int("steps", DEFAULT.steps, lo=A.LIMITS["steps"][0], hi=A.LIMITS["steps"][1]),
    Float("lr", DEFAULT.lr, lo=A.LIMITS["lr"][0], hi=A.LIMITS["lr"][1], fmt=general),
    Int("seed", DEFAULT.seed, lo=A.LIMITS["seed"][0], hi=A.LIMITS["seed"][1]),
    AutoInt("warmup", None, lo=A.LIMITS["warmup"][0], hi=A.LIMITS["warmup"][1], omit_default=True),
    Choice("score", DEFAULT.score, choices=A.SCORES),
    Float("clip", DEFAULT.key_norm_clip, key="train.key_norm_clip", lo=A.LIMITS["key_norm_clip"][0],
          hi=A.LIMITS["key_norm_clip"][1], fmt=general),
    Choice("act", DEFAULT.act, choices=A.ACTS),
    Float("head_mi", DEFAULT.head_mi, lo=A.LIMITS["head_mi"][0], hi=A.LIMITS["head_mi"][1], fmt=general),
)
FIELDS = {"n_layers": URL.layers, "d_model": URL.d_model, "n_heads": URL.heads, "steps": URL.steps,
          "seed": URL.seed, "lr": URL.lr, "warmup": URL.warmup, "key_norm_clip": URL.clip,
          "head_mi": URL.head_mi}  # TrainSettings field -> its URL parameter, in the order the URL is read
# Every setting but the task feeds "settings" (the number boxes through `settle_typed`, which keeps its own
# on_change): the sections that read it are the summary and the buttons.
S = Sections("train")


def task_archs() -> tuple:
    """The architectures the task in the settings supports."""
    return tuple(get_task(st.session_state[URL.task.key]).archs)


def seed_url() -> None:
    """Read every URL parameter before anything is drawn, so problems are reported under the title."""
    URL.task.seed()
    URL.arch.seed(choices=task_archs())
    for param in (URL.pos, URL.norm, URL.score, URL.act, *FIELDS.values()):
        param.seed()


# ---------------------------------------------------------------------------------------------
# 1 · Settings: URL -> widgets -> TrainSettings (clamped, with notes)
# ---------------------------------------------------------------------------------------------


def _range(name: str) -> str:
    """'from lo to hi' for a numeric setting."""
    lo, hi = A.LIMITS[name]
    return f"from {lo:g} to {hi:g}"


def clamp_typed(name: str) -> bool:
    """A typed value out of range is clamped, and a note under the settings says so; whether the value changed."""
    key = FIELDS[name].key
    if name == "warmup" and st.session_state.get(key) is None:
        return False  # an empty warm-up box means the default warm-up
    typed = st.session_state.get(key)
    value, note = A.clamp_number(name, typed, getattr(DEFAULT, name))
    st.session_state[key] = value
    if note:
        st.session_state.setdefault(NOTES_KEY, []).append(note)
    return bool(note) or value != typed


def auto_warmup(steps) -> int:
    """The warm-up an empty warm-up box stands for (a tenth of the run, at most 100), shown as its placeholder."""
    return max(1, min(100, int(steps or DEFAULT.steps) // 10))


def settle_typed(name: str) -> None:
    """on_change of a number box: clamp the typed value (`clamp_typed`), then rerun what the change reaches. Only
    the sections that read the settings, by key (`S.rerun`, which writes the URL: the box is not drawn
    again), unless a box must show something new: a value that had to be clamped, or steps that move the
    automatic warm-up in the warm-up box's placeholder. Then the whole page reruns, and draws the boxes."""
    param = FIELDS[name]
    changed = clamp_typed(name)
    if changed or (name == "steps" and auto_warmup(st.session_state.get(param.key)) != st.session_state.get(AUTO_KEY)):
        st.rerun()  # the whole page (scope "app"), which writes the URL as it draws the box
    S.rerun("settings", param=param, key=param.key)


def number(col, label: str, name: str, step, help: str, fmt: str | None = None, **kwargs):
    """A number box without hard limits in the browser: out-of-range values are clamped with a message."""
    return FIELDS[name].widget(col.number_input, label, min_value=None, max_value=None, step=step, format=fmt,
                               help=help, on_change=settle_typed, args=(name,), **kwargs)


def apply_preset(norm: str) -> None:
    """Button callback: set up one side of 'pre-LN vs post-LN, both without warm-up' (same everything else)."""
    st.session_state[URL.norm.key] = norm
    st.session_state[URL.warmup.key] = 0
    st.session_state[URL.lr.key] = PRESET_LR


def preset_buttons() -> None:
    """The warm-up comparison: two buttons that differ only in where the LayerNorm sits."""
    with st.container(horizontal=True):
        st.caption(f"Compare without warm-up (warm-up 0, learning rate {PRESET_LR:g}):")
        for norm, label in (("pre", "Pre-LN, no warm-up"), ("post", "Post-LN, no warm-up")):
            st.button(label, key=f"train.preset_{norm}", icon=":material/tune:", on_click=apply_preset,
                      args=(norm,), help=f"Sets LayerNorm placement to {norm}-LN, warm-up to 0 and the learning "
                                         f"rate to {PRESET_LR:g}; every other setting stays as it is.")


def schedule_widgets() -> None:
    """The three settings the learning-rate chart draws, in one row above it: steps, peak learning rate and
    warm-up (reading the steps to show the automatic warm-up in the warm-up box)."""
    c1, c2, c3 = st.columns(3)
    steps = number(c1, "Steps", "steps", 50, f"AdamW steps of {A.BATCH_SIZE} fresh examples each, {_range('steps')}: "
                                             "the cap keeps one run from hogging the shared server.")
    number(c2, "Learning rate", "lr", 1e-4, f"The peak step size, reached after the warm-up; {_range('lr')}.",
           fmt="%.4f")
    auto = st.session_state[AUTO_KEY] = auto_warmup(steps)  # `settle_typed` reruns the page when steps move it
    number(c3, "Warm-up steps", "warmup", 10, f"Steps over which the learning rate climbs to its peak, "
           f"{_range('warmup')}; 0 starts at the full rate. Empty: a tenth of the run, at most 100.",
           placeholder=f"auto ({auto})")


def variant_widgets() -> None:
    """The fourth row: the attention score, key-norm clipping, the MLP's activation, head diversity."""
    with st.container(horizontal=True):  # wraps on a narrow screen rather than cutting the score's name
        URL.score.widget(st.selectbox, "Attention score", format_func=SCORE_LABELS.get, feeds="settings",
                         help="How a query and a key become a score before the softmax.", width=WIDE_BOX)
        number(st, "Key-norm clip", "key_norm_clip", 0.5,
               f"Shrink every key longer than this back to this length, {_range('key_norm_clip')}; 0 = off.",
               fmt="%.2f", width=NARROW_BOX)
        URL.act.widget(st.selectbox, "MLP activation", format_func=ACT_LABELS.get, feeds="settings",
                       width=NARROW_BOX)
        number(st, "Head diversity λ", "head_mi", 0.01,
               f"Weight of the penalty on the information heads of a layer share, {_range('head_mi')}; 0 = off.",
               fmt="%.3f", width=NARROW_BOX)


def model_widgets() -> None:
    """The rows under the schedule: the task and the model's shape, its variants, and the presets. Every control
    but the task reruns only the sections that read the settings ("settings"); the task changes the
    architectures offered, so it reruns the page."""
    with st.container(horizontal=True):  # wraps on a narrow screen rather than cutting the options' names
        URL.task.widget(st.selectbox, "Task", format_func=lambda n: TASKS[n].title, width=TASK_BOX,
                        help="The toy task the model learns; each says which positions are scored.")
        URL.arch.widget(st.selectbox, "Architecture", choices=task_archs(), feeds="settings", width=NARROW_BOX,
                        help="Only the architectures this task supports are offered.")
        URL.pos.widget(st.selectbox, "Positions", format_func=POS_LABELS.get, feeds="settings", width=MID_BOX)
        URL.norm.widget(st.selectbox, "LayerNorm", format_func=NORM_LABELS.get, feeds="settings", width=MID_BOX,
                        help="Where each block's LayerNorm sits.")
    c1, c2, c3, c4 = st.columns(4)
    number(c1, "Layers", "n_layers", 1, f"Blocks per stack, {_range('n_layers')}.")
    number(c2, "d_model", "d_model", 8, f"Width of the residual stream, {_range('d_model')}; it must divide evenly "
                                        "by the number of heads.")
    number(c3, "Heads", "n_heads", 1, f"Attention heads per layer, {_range('n_heads')}.")
    number(c4, "Seed", "seed", 1, f"Fixes the initial weights and the order of the batches; {_range('seed')}.")
    variant_widgets()
    preset_buttons()


def settings_now() -> tuple[TrainSettings, list[str]]:
    """The settings the controls hold now, read from the session and clamped, with a note for every value that had
    to change: what the sections read, since a setting's change reruns them alone (their arguments would
    be those of the page's last full run)."""
    raw = {"task": URL.task.now(), "arch": URL.arch.now(), "pos": URL.pos.now(), "norm": URL.norm.now(),
           **{name: param.now() for name, param in FIELDS.items()},
           "score": URL.score.now(), "act": URL.act.now()}
    return A.clamp_settings(raw)


@S.section("summary", reads=("settings",))
def summary() -> None:
    """The notes about values that had to be clamped, and what the settings the controls hold now add up to."""
    settings, notes = settings_now()
    for note in dict.fromkeys(st.session_state.pop(NOTES_KEY, []) + notes):
        st.warning(note, icon=":material/tune:")
    describe_settings(settings)


def describe_settings(settings: TrainSettings) -> None:
    """One line of derived numbers (head width, parameter count), or what is wrong with the settings."""
    problems = settings.problems()
    if problems:
        for p in problems:
            st.error(p, icon=":material/error:")
        return
    n_params = R.param_count(settings.config().to_dict())
    wu = "default, a tenth of the run" if settings.warmup is None else "chosen"
    st.caption(f"Each head works in d_model / heads = {settings.d_model} / {settings.n_heads} = "
               f"**{settings.d_head}** dimensions · **{n_params:,}** parameters · warm-up **{settings.warmup_steps}** "
               f"steps ({wu}) · batches of **{A.BATCH_SIZE}** fresh examples · at most **{A.MAX_STEPS}** steps per run.")
    config = settings.config().to_dict()
    sizes = []
    for preset, p in SIZE_PRESETS.items():
        count = R.original_param_count(config, preset)
        sizes.append(f"at {p.name}'s sizes ({p.n_layers} layers, d_model {p.d_model}, {p.n_heads} heads of "
                     f"{p.d_head}, d_ff {p.d_ff}) it would have **{count:,}** ({count / n_params:,.0f}×)")
    st.caption("The same design " + "; ".join(sizes) + ": far too many to train here in a lesson, which is why the "
               "models in this app are small.")
    if settings.warmup_steps >= settings.steps:
        st.caption(f"The warm-up ({settings.warmup_steps} steps) is as long as the run ({settings.steps}): the "
                   "learning rate never reaches its peak.")


def schedule_figure(settings: TrainSettings) -> go.Figure:
    """The learning rate η_t of every step of the planned run (core.train.lr_factor, the factor the Trainer
    applies): a linear climb over the warm-up, then a cosine down to a tenth of the peak."""
    steps = np.arange(settings.steps)
    warmup = settings.warmup_steps
    eta = np.array([settings.lr * lr_factor(int(t), settings.steps, warmup) for t in steps])
    fig = go.Figure(go.Scatter(x=steps, y=eta, mode="lines", name="η_t", line=dict(color="#1f77b4", width=3),
                               hovertemplate="step %{x}: η = %{y:.3g}<extra></extra>"))
    if 0 < warmup < settings.steps:
        fig.add_vrect(x0=0, x1=warmup, fillcolor="#f2b134", opacity=0.18, line_width=0)  # the warm-up, shaded
    fig.update_xaxes(title_text="training step t", range=[0, max(1, settings.steps - 1)])
    fig.update_yaxes(title_text="learning rate η_t", rangemode="tozero", exponentformat="none")
    fig.update_layout(title=dict(text=f"Learning rate over the run: peak {settings.lr:g}, "
                                      f"warm-up {warmup} of {settings.steps} steps (shaded)",
                                 x=0, xanchor="left", font=dict(size=15)),
                      height=250, margin=dict(l=10, r=10, t=40, b=10), showlegend=False, font=dict(size=13))
    return fig


@S.section("schedule", reads=("settings",))
def schedule() -> None:
    """The learning-rate chart for the steps, learning rate and warm-up the controls hold now: a setting's change
    redraws it with the summary and the buttons."""
    settings, _ = settings_now()
    st.plotly_chart(schedule_figure(settings), key="train.schedule",
                    config=chart_config("train", f"{settings.task}-{settings.arch}-run",
                                        f"learning-rate-{settings.steps}steps-warmup{settings.warmup_steps}"))


def setup_panel() -> None:
    """Section 1: the schedule's settings and its live chart first, then the task and the model's shape, and
    (a section) the notes about clamped values and what the settings add up to. The long explanation and the
    equations are one click away."""
    st.subheader("1 · Set up the run")
    st.markdown("The learning rate climbs during a warm-up, then eases down along a cosine: the chart follows the "
                "three settings above it. The task and the model's shape come below it.")
    with st.expander("Read more: the schedule, the scored positions and the model's variants, with the maths"):
        st.markdown(
            "The sum runs over the scored positions S only (which ones depends on the task). "
            "Each step uses 64 new random examples, so the model cannot memorise them. The learning rate "
            "climbs linearly during a short warm-up (Adam's running averages are unreliable at first, and "
            f"post-LN models often fail without it: at learning rate {PRESET_LR:g}, {TC.rate(CLAIMS, 'post', 4, 0)} "
            "seeds of a 4-layer post-LN model learned the reverse task, against "
            f"{TC.rate(CLAIMS, 'post', 4, 100)} with 100 warm-up steps), then eases down along a cosine so the last "
            "steps settle instead of bouncing around. Each of the h heads reads a slice of width d_model / h. "
            "The last row of settings changes the model itself: how a query and a key are scored (divided by the "
            "square root of the head width, not divided, or the cosine of their angle times 8), a cap on how long "
            "a key may be, the MLP's bend (GELU or ReLU), and an optional penalty that makes heads of the same "
            "layer carry different information (section 3 shows how much they share)."
        )
        st.latex(r"\eta_t = \eta\cdot\begin{cases}\dfrac{t+1}{W} & t < W \\[4pt] 0.1 + 0.9\cdot\tfrac12\left(1+\cos\pi\,"
                 r"\dfrac{t-W}{T-W}\right) & t \ge W\end{cases}")
        st.latex(r"d_{\text{head}} = \dfrac{d_{\text{model}}}{h}")
    schedule_widgets()
    schedule()
    model_widgets()
    summary()


SETUP_PROMPTS = (
    "Train the default (reverse, encoder, 300 steps). Somewhere around step 75-150 the loss falls off a "
    "cliff: that is when the heads find the mirror pattern. Seeds 1 and 2 move the cliff a little; it "
    "always comes.",
    "Same run with **Positions: None**. Without positions every slot looks identical to the encoder, "
    "so it cannot know where to read from: the loss stalls.",
    "Set d_model to 60 with 8 heads and read the message; then pick 64.",
    "Train the **future legality** task as a **decoder**, then as an **encoder**: the decoder stays near "
    "chance because the rule arrives after the digits it must judge.",
    f"Press **Pre-LN, no warm-up** and train the default reverse task; then **Post-LN, no warm-up**. At "
    f"learning rate {PRESET_LR:g}, measured over 5 seeds, pre-LN reached 99% in {TC.rate(CLAIMS, 'pre', 2, 0)} "
    f"seeds at 2 layers and {TC.rate(CLAIMS, 'pre', 4, 0)} at 4; post-LN without warm-up in "
    f"{TC.rate(CLAIMS, 'post', 2, 0)} at 2 layers and {TC.rate(CLAIMS, 'post', 4, 0)} at 4, with 100 warm-up "
    f"steps in {TC.rate(CLAIMS, 'post', 2, 100)} and {TC.rate(CLAIMS, 'post', 4, 100)}. A rate, not a rule: "
    "post-LN's gradient passes through every block's LayerNorm, and full-size first steps, taken while Adam's "
    "averages are still noise, throw some seeds somewhere they do not recover from. Try seeds 0 to 4, then 4 "
    "layers, then the warm-up at 100.",
    "Pick **Plain dot** as the score with d_model 128 and 2 heads. Measured over 5 seeds, the loss falls under "
    f"1 *earlier* without the division by √64: at steps {', '.join(map(str, TC.score_steps(CLAIMS, 'dot')))} "
    f"against {', '.join(map(str, TC.score_steps(CLAIMS, 'scaled_dot')))} with the scaled score, and every run "
    "reaches 100%. Here the first scores are small either way" + TC.spread_text(CLAIMS) + ", so the softmax is far "
    "from saturated and the larger plain scores only sharpen the pattern sooner. The division matters when "
    "scores grow large: wide heads, or queries and keys that grow in training. The Attention page's **Why √d_k** "
    "view (link below) shows the spread of q·k growing like √d_k and the softmax saturating without it.",
)  # shown under the live view, next to the Train button they are about


# ---------------------------------------------------------------------------------------------
# 2 · Train and watch: the buttons and the self-rerunning live view
# ---------------------------------------------------------------------------------------------


def then_page(action: Callable[[], None]) -> None:
    """on_click of a button in `controls`: `action`, then a rerun of the whole page (`st.rerun()`, scope "app"),
    not of the fragment the button is drawn in: the run it pauses, resumes, stops or clears is what the live view
    (whose `run_every` a full run sets) and the sections below show."""
    action()
    st.rerun()


def train(device: str) -> None:
    """Train's on_click: a new run with the settings the controls hold when it is pressed (`settings_now`, never
    those of an older run of the buttons' fragment), then a rerun of the whole page, which draws the live view."""
    R.start(settings_now()[0], device)
    st.rerun()


@S.section("buttons", reads=("settings",))  # its buttons rerun the page
def controls(device: str) -> None:
    """Train / Pause / Resume / Stop / Reset, depending on where the run is, for the settings the controls hold
    now (`settings_now`): whether Train can be pressed, and whether they differ from the run's."""
    settings, _ = settings_now()
    run = R.current()
    can_train = not settings.problems()
    with st.container(horizontal=True):
        if run is None or run.status == "done":
            st.button("Train" if run is None else "Train a new model", type="primary",
                      icon=":material/play_arrow:", key="train.go", disabled=not can_train,
                      on_click=train, args=(device,))
        elif run.status == "running":
            st.button("Pause", icon=":material/pause:", key="train.pause", on_click=then_page, args=(R.pause,))
        else:
            st.button("Resume", type="primary", icon=":material/play_arrow:", key="train.resume",
                      on_click=then_page, args=(R.resume,))
            st.button("Stop here and keep this model", icon=":material/stop:", key="train.stop",
                      on_click=then_page, args=(R.stop_here,), disabled=run.step == 0)
        st.button("Reset", icon=":material/restart_alt:", key="train.reset", on_click=then_page, args=(R.reset,),
                  disabled=run is None)
    error = st.session_state.get(R.ERROR_KEY)
    if error:
        st.error(error)
    if run is not None and run.settings != settings and run.status != "done":
        st.info("The settings above changed, but this run keeps the ones it started with. "
                "Press **Reset** and then **Train** to use the new ones.", icon=":material/info:")


def current_view(run: R.TrainingRun) -> tuple:
    """(attention kind, layer) the heatmaps show; stale choices from an earlier run fall back to the first."""
    kinds = A.kinds_of(run.settings.arch)
    if st.session_state.get(VIEW_KIND_KEY) not in [k.key for k in kinds]:
        st.session_state[VIEW_KIND_KEY] = kinds[0].key
    if st.session_state.get(VIEW_LAYER_KEY) not in range(run.settings.n_layers):
        st.session_state[VIEW_LAYER_KEY] = 0
    kind = next(k for k in kinds if k.key == st.session_state[VIEW_KIND_KEY])
    return kind, st.session_state[VIEW_LAYER_KEY]


def view_pickers(run: R.TrainingRun) -> tuple:
    """Which attention (for encoder-decoder) and which layer the heatmaps show."""
    kinds = A.kinds_of(run.settings.arch)
    current_view(run)
    cols = st.columns(3)
    if len(kinds) > 1:
        cols[0].selectbox("Heatmaps show", [k.key for k in kinds], key=VIEW_KIND_KEY,
                          format_func=lambda key: next(k.label for k in kinds if k.key == key))
    layer_col = cols[1] if len(kinds) > 1 else cols[0]
    layer_col.selectbox("Heatmaps show layer", list(range(run.settings.n_layers)), key=VIEW_LAYER_KEY,
                        format_func=lambda i: f"layer {i}")
    return current_view(run)


def head_grid(run: R.TrainingRun, snap: R.Snapshot, kind, layer: int, key: str) -> None:
    """The heatmaps of every head of one layer at one snapshot, in one figure (one shared colour bar)."""
    q_tokens, k_tokens = run.example.axis_tokens(kind)
    per_row = 4 if len(k_tokens) <= 12 else 2
    fig = F.heads_figure(snap.patterns[kind.key][layer], q_tokens, k_tokens, per_row=per_row,
                         title=f"{kind.label}, layer {layer}, at step {snap.step}")
    st.plotly_chart(fig, key=key,
                    config=run_chart(run, f"{key.rsplit('.', 1)[-1]}-{kind.key}-l{layer}-step{snap.step}"))


def progress_line(run: R.TrainingRun) -> None:
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
    run = R.current()
    if run is None:
        st.info("Press **Train** to start. The loss curve, the progress bar and the heatmaps below update "
                "about once a second while the model learns.", icon=":material/model_training:")
        return
    was_running = run.status == "running"
    busy = R.advance(run) if was_running else None
    if was_running and run.status == "done":
        st.rerun()  # the whole page: the finished panels appear and the auto-rerun stops
    progress_line(run)
    if busy:
        st.warning(busy, icon=":material/hourglass_top:")
    steps, loss, acc = run.curves()
    metric = f"{run.task.metric} accuracy"
    st.plotly_chart(F.training_curves(steps, loss, acc, run.total, metric=metric,
                                      final_accuracy=run.final_accuracy),
                    key="train.curves", config=run_chart(run, "loss-and-accuracy"))
    if run.status != "running":
        return
    st.markdown(f"**The newest attention snapshot** of the fixed example (a new one every {run.every} steps; "
                "when the run ends or you pause, a slider lets you go back through all of them).")
    kind, layer = view_pickers(run)
    head_grid(run, run.snapshots[-1], kind, layer, key="train.live")


def train_panel(device: str) -> None:
    """Section 2: what the live view shows, the buttons (a section), and the live view (a fragment that
    reruns itself while a run trains)."""
    st.subheader("2 · Train and watch")
    st.markdown("Press **Train**: the loss curve and the newest attention snapshot update about once a second while "
                "the model learns.")
    with st.expander("Read more: what the live view shows, and how training shares the server"):
        st.markdown(
            "The curves share their x axis with the whole planned run, so they also show how far along it is. "
            "The thin line is each batch's value, the thick one a moving average. The heatmaps show the newest "
            "snapshot of the attention on one fixed example; brighter cells carry more weight (0 to 1). "
            f"Training runs in short bursts, at most {R.MAX_CONCURRENT} runs train at the same moment on this "
            f"server, and while other students use it training gets at most {R.TRAIN_SHARE:.0%} of its time, so "
            "everyone's pages stay quick. It only advances while this page is open; come back "
            "and it continues where it stopped."
        )
    controls(device)
    run = R.current()
    running = run is not None and run.status == "running"
    st.fragment(live_panel, run_every=R.TICK_SECONDS if running else None)()
    try_this(*SETUP_PROMPTS)
    try:
        st.page_link("pages/attention.py", label="Attention: Why √d_k", icon=":material/functions:",
                     query_params={"view": "scale"})
    except StreamlitAPIException:  # st.page_link needs st.navigation's pages; run alone, name the URL
        st.markdown("See the **Attention** page's *Why √d_k* view (`/attention?view=scale`).")


# ---------------------------------------------------------------------------------------------
# 3 · Watch the heads form: scrub the snapshots of a paused or finished run
# ---------------------------------------------------------------------------------------------


@st.fragment  # local: the snapshot slider redraws only itself, the spread curves and the heatmaps
def scrubber(run: R.TrainingRun, kind, layer: int) -> None:
    """A slider over the stored snapshots, their heatmaps and how sharp each head became. Its own fragment
    inside `history_views`: the step reaches nothing below it (the pickers above redraw it with the rest)."""
    steps = [s.step for s in run.snapshots]
    if len(steps) < 2:
        st.info("Train a few steps first: snapshots are taken every "
                f"{run.every} steps.", icon=":material/info:")
        return
    if st.session_state.get(R.SCRUB_KEY) not in steps:
        st.session_state[R.SCRUB_KEY] = steps[-1]
    step = st.select_slider("Training step of the snapshot", steps, key=R.SCRUB_KEY,
                            help=f"{len(steps)} snapshots, one every {run.every} steps (at most {A.MAX_SNAPSHOTS}).")
    snap = run.snapshots[steps.index(step)]
    spread = np.stack([s.spread[kind.key][layer] for s in run.snapshots])  # [snapshot head]
    st.plotly_chart(F.entropy_curves(steps, spread, current=step,
                                     title=f"How spread out each head's attention is ({kind.label}, layer {layer})"),
                    key="train.spread", config=run_chart(run, f"head-spread-{kind.key}-l{layer}"))
    head_grid(run, snap, kind, layer, key="train.scrub_fig")


def history_panel() -> None:
    """Section 3, once a run is paused or finished: scrub its snapshots and watch each head sharpen."""
    run = R.current()
    if run is None or run.status == "running":
        return
    st.subheader("3 · Watch the heads form")
    st.markdown(
        "Every few steps the page saved the attention of every head on the same example. Slide through "
        "them: early patterns are a blur, later ones sharpen into a rule (a diagonal, a mirror, a look at "
        "one special token). The line chart condenses each snapshot to one number per head, how spread out "
        "its attention is, 1 for even weight over every key it may see and 0 for all weight on one key."
    )
    st.latex(r"\text{spread}(\text{head}) = \frac{1}{|Q|}\sum_{i\in Q}\frac{-\sum_j a_{ij}\log_2 a_{ij}}"
             r"{\log_2 \#\{j : i \text{ may see } j\}}")
    history_views()


@st.fragment  # local: the heatmaps' attention and layer redraw only the pickers, the snapshots and the heads' overlap
def history_views() -> None:
    """The pickers and all that reads them: the scrubber (its own fragment inside this one), the prompts and
    the information the heads share (the section's header and explanation above are drawn once)."""
    run = R.current()
    if run is None or run.status == "running":  # as on the full run that drew the header: buttons rerun the page
        return
    kind, layer = view_pickers(run)
    scrubber(run, kind, layer)
    try_this(
        "Slide to the step just before the loss dropped and to the one just after: which head changed most?",
        "Train again with 1 head instead of 4: does that single head have to do every job at once?",
        f"Set the learning rate to {PRESET_LR:g}, keep the warm-up at 30 and train once with Pre-LN, once with "
        f"Post-LN. Over 5 seeds pre-LN reached 99% in {TC.rate(CLAIMS, 'pre', 2, 30)} at 2 layers, post-LN in "
        f"{TC.rate(CLAIMS, 'post', 2, 30)} (and {TC.rate(CLAIMS, 'post', 4, 30)} at 4 layers). In Post-LN the "
        "gradient has to pass through the LayerNorm of every block on its way down, and each can scale it up; in "
        "Pre-LN the identity path carries it down untouched. Then go back to the default 0.003 and compare again.",
    )
    mi_section(run, kind)


def mi_section(run: R.TrainingRun, kind) -> None:
    """How much information every two heads of a layer share, at step 0 and now, for one attention kind."""
    st.markdown("#### Do the heads say the same thing?")
    st.markdown(
        f"Two heads that output the same information waste a slot. Here every head's output (hook_z) is "
        f"measured on {A.MI_SAMPLES} fixed examples of the task, each position one sample, and for every two "
        "heads of a layer the page estimates how much one tells about the other, as if their outputs were "
        "jointly Gaussian: with one number per head it is the formula on the left, with d_head numbers per "
        "head the log-determinants on the right (R is the correlation matrix of the outputs). 0 means "
        "nothing shared; two copies of one head would hit the ceiling the small ridge ε sets. The **Head "
        "diversity λ** setting adds λ times the mean of these numbers (the same layer's pairs) to the loss, "
        "so training pushes them down."
    )
    st.latex(r"I = -\tfrac12\log\left(1-\rho^2\right)\qquad I(i;j) = \tfrac12\left(\log\det R_{ii} + "
             r"\log\det R_{jj} - \log\det R_{ij,ij}\right),\quad R \leftarrow R + \varepsilon I"
             r"\qquad \mathcal{L}' = \mathcal{L} + \lambda\,\overline{I(i;j)}")
    if run.settings.n_heads < 2:
        st.info("With one head per layer there is no pair of heads to compare; train with 2 or more heads.",
                icon=":material/info:")
        return
    before, after = R.head_mi_pair(run)
    fig = F.head_mi_figure(before[kind.key], after[kind.key], (0, run.step),
                           title=f"Information shared between heads ({kind.label}), nats")
    st.plotly_chart(fig, key="train.head_mi_fig", config=run_chart(run, f"shared-information-{kind.key}"))
    off = ~np.eye(run.settings.n_heads, dtype=bool)
    st.caption(f"Mean over pairs of heads: **{before[kind.key][:, off].mean():.2f}** nats before training, "
               f"**{after[kind.key][:, off].mean():.2f}** at step {run.step} (head diversity λ = "
               f"{run.settings.head_mi:g}).")
    try_this(
        "Train the default run with λ = 0 and read the mean after training; then train again with λ = 0.1. "
        "The after-training heatmap gets darker (less shared), and the loss curve shows what the accuracy "
        "paid for it, if anything.",
        "Push λ to 1 or more: the penalty outweighs the task, and the heads learn to differ before they learn "
        "to be useful.",
    )


# ---------------------------------------------------------------------------------------------
# 4 · Keep your model, 5 · Open a checkpoint
# ---------------------------------------------------------------------------------------------


def keep_metrics(run: R.TrainingRun) -> None:
    """Final accuracy on fresh samples, 'use on every page', and the download."""
    task = run.task
    c1, c2, c3 = st.columns(3)
    c1.metric("Accuracy on fresh examples", f"{run.final_accuracy:.1%}",
              help=f"{task.metric.capitalize()} accuracy on {R.EVAL_SAMPLES} examples drawn after training "
                   "(core.train.evaluate).")
    c2.metric("Steps trained", f"{run.step}")
    c3.metric("Final training loss", f"{run.trainer.history[-1]['loss']:.4f}" if run.trainer.history else "-")
    st.caption(f"Scored: {task.scored_for(run.settings.arch)}")
    selected = st.session_state.get(MODEL_KEY) == run.model_id
    with st.container(horizontal=True):
        st.button("Use this model on every page", type="primary", icon=":material/check_circle:",
                  key="train.use", on_click=R.use_everywhere, args=(run.model_id,), disabled=selected)
        st.download_button("Download .safetensors", data=run.checkpoint, key="train.download",
                           file_name=f"glassbox-{run.settings.task}-{run.settings.arch}-{run.step}steps.safetensors",
                           mime="application/octet-stream", icon=":material/download:", on_click="ignore")
    if selected:
        st.success("The sidebar now shows this model on every page (Attention, Heads, Masks, ...).",
                   icon=":material/check_circle:")
    else:
        st.caption("It is already in the sidebar's model list as "
                   f"“{models.model_choices().get(run.model_id, 'your model')}”.")


def keep_panel() -> None:
    """Section 4, once a run is finished: how good the model is, and keeping it."""
    run = R.current()
    if run is None or run.status != "done":
        return
    st.subheader("4 · Keep your model")
    st.markdown(
        "The accuracy below is measured on examples the model never trained on, drawn fresh from the task. "
        "The model is already in the sidebar's list for this session; one click selects it so the "
        "Attention, Heads, Masks, Positions and Depth pages look inside it. Download it to keep it: the "
        "file is a single .safetensors with the config, the vocabulary and this accuracy inside."
    )
    keep_metrics(run)


def upload_widget() -> None:
    """Open a checkpoint (.safetensors only) and add it to this session's models."""
    file = st.file_uploader("Open a .safetensors checkpoint saved by this app", key="train.upload",
                            max_upload_size=MAX_MB,
                            help="Only safetensors is read; pickles (.pt, .pth) are refused without being opened.")
    if file is None:
        return
    if file.size > MAX_UPLOAD_BYTES:
        st.error(f"{file.name} is {file.size / 1e6:.1f} MB; the limit is {MAX_MB} MB.")
        return
    opened = st.session_state.get(R.UPLOADS_KEY, {})
    if file.file_id not in opened and len(set(opened.values()) & set(models.user_models())) >= MAX_SESSION_UPLOADS:
        st.error(f"This session already holds {MAX_SESSION_UPLOADS} uploaded models, the most it keeps: each stays "
                 "in the server's memory. Use one of them from the sidebar, or open the app in a new tab (a fresh "
                 "session) to open another.", icon=":material/block:")
        return
    try:
        model_id, meta, new = R.open_upload(file.file_id, file.name, file.getvalue())
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
    acc_text = f", {acc:.1%} right on {R.EVAL_SAMPLES} fresh examples (measured here)" if isinstance(acc, float) else ""
    st.success(f"Opened **{file.name}**: a {meta['config'].get('arch')} model for the {meta.get('task')} task"
               f"{acc_text}. It is in the sidebar's model list for this session.", icon=":material/check_circle:")
    selected = st.session_state.get(MODEL_KEY) == model_id
    st.button("Use the uploaded model on every page", key="train.use_upload", on_click=R.use_everywhere,
              args=(model_id,), disabled=selected)


def upload_panel() -> None:
    """Section 5: why only safetensors is opened, and the uploader."""
    st.subheader("5 · Open a checkpoint")
    st.markdown(
        "Upload a .safetensors file this app saved (yours, or a classmate's) to use it on every page. The file "
        "is checked before anything is built: wrong shapes, a truncated file, an unknown task or a vocabulary "
        "that does not match are refused with a reason. Pickle files (.pt, .pth) are never opened, because "
        f"opening one can run code hidden inside it. Files over {MAX_MB} MB are refused."
    )
    st.caption(describe_limits() + " The accuracy shown is measured here on fresh examples, never read from the file.")
    upload_widget()
