"""The Cost page's cached work: the time and memory sweeps, per device and setting, and its figures.

A sweep takes seconds, so it runs once per process for each setting (ui.shell.memo) and every later student
gets it at once; the view shows a progress bar while one runs. The measuring is core.analysis.cost's.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Callable, Optional

from core.analysis import cost as A
from core.analysis import scaling as SC
from core.figures import cost as F
from ui.server import measure_process
from ui.shell.figures import cached
from ui.shell.memo import freeze, memo

# Set by the view around a sweep that will run: called with (fraction done, what is being measured).
# A context variable, so it never becomes part of the memo's key.
SWEEP_PROGRESS: ContextVar[Optional[Callable[[float, str], None]]] = ContextVar("cost_progress", default=None)


@memo(maxsize=32)
def time_sweep(setting: A.Setting, run: int = 0) -> dict:
    """Median times of every method at every n (``run`` only tells a fresh measurement from the kept one),
    measured in the worker process (ui.server.measure_process): thousands of tiny torch calls, each of which
    would wait for the interpreter lock while other students' pages are drawn."""
    return measure_process.measure(A.time_sweep, setting, progress=SWEEP_PROGRESS.get())


@memo(maxsize=32)
def memory_sweep(setting: A.Setting) -> dict:
    """Peak memory of a training step of explicit and chunked attention at every n (deterministic on the CPU;
    in the worker process too, so it does not hold the server up)."""
    return measure_process.measure(A.memory_sweep, setting, progress=SWEEP_PROGRESS.get())


TAIL_POINTS = 3  # slopes are fitted over the largest three n, where per-call overheads matter least


@memo(maxsize=32)
def time_summary(setting: A.Setting, run: int = 0) -> dict:
    """What the time section reads off a time sweep: each method's slope over the largest n, the n where explicit
    attention overtakes the RNN, the slope table and the table of times. Kept with the sweep, so that a click does
    not fit them again (a tenth of the Cost page's click)."""
    sweep = time_sweep(setting, run)
    slope_rows = A.slope_table(sweep, TAIL_POINTS)
    return {"slopes": {row["method"]: row["fitted slope"] for row in slope_rows},
            "launch_bound": {m: A.launch_bound(sweep["ns"], sweep["ms"][m]) for m in A.METHODS},
            "crossover": A.crossover(sweep["ns"], sweep["ms"][A.EXPLICIT], sweep["ms"][A.RNN]),
            "slope_rows": slope_rows, "table": A.time_table(sweep)}


@memo(maxsize=32)
def steps_rows(setting: A.Setting, run: int = 0) -> list[dict]:
    """Sequential steps and longest paths per n, with the RNN's steps as counted in the time sweep."""
    sweep = time_sweep(setting, run)
    rows = A.steps_table(sweep["ns"])
    for row, counted in zip(rows, sweep["rnn_steps"]):
        row["RNN sequential steps"] = counted
    return rows


@memo(maxsize=32)
def memory_summary(setting: A.Setting) -> dict:
    """What the memory section reads off a memory sweep: each training method's log-log slope and the table."""
    sweep = memory_sweep(setting)
    return {"slopes": {m: A.fit_loglog(sweep["ns"], sweep["bytes"][m])[0] for m in A.MEMORY_METHODS
                       if m in sweep["bytes"]},
            "table": A.memory_table(sweep)}


@memo(maxsize=16)
def gradient_by_distance(n: int, d_model: int, n_heads: int) -> dict:
    """The last output's gradient with respect to every earlier input, RNN and attention (exact, float64)."""
    return freeze(A.gradient_by_distance(n, d_model, n_heads))


@memo(maxsize=16)
def small_model(n_layers: int, d_model: int) -> dict:
    """One small model's measured parameters, FLOPs and training memory (core.analysis.scaling), in the worker
    process like the sweeps: hundreds of small torch calls."""
    return measure_process.measure(SC.measure_small, n_layers, d_model)


def scaling_rows(vary: str) -> list[dict]:
    """The small models varied along depth or width, measured (each model once per process) beside counted."""
    shapes = ([(L, SC.SMALL_DEPTH_WIDTH) for L in SC.SMALL_DEPTHS] if vary == "depth"
              else [(SC.SMALL_WIDTH_DEPTH, d) for d in SC.SMALL_WIDTHS])
    return SC.small_rows(vary, {shape: small_model(*shape) for shape in shapes})


# Figures, built once per distinct input for every session (see ui.shell.figures.cached).
time_figure = cached(F.time_chart)
steps_figure = cached(F.steps_chart)
memory_figure = cached(F.memory_chart)
preset_figure = cached(F.preset_chart)
traffic_figure = cached(F.traffic_chart)
gradient_figure = cached(F.gradient_chart)
scaling_figure = cached(F.scaling_chart)
