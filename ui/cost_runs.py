"""The Cost page's cached work: the time and memory sweeps, per device and setting, and its figures.

A sweep takes seconds, so it runs once per process for each setting (ui.memo) and every later student
gets it at once; the view shows a progress bar while one runs. The measuring is core.analysis.cost's.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Callable, Optional

from core.analysis import cost as A
from core.figures import cost as F
from ui import measure_process
from ui.figures import cached
from ui.memo import memo

# Set by the view around a sweep that will run: called with (fraction done, what is being measured).
# A context variable, so it never becomes part of the memo's key.
SWEEP_PROGRESS: ContextVar[Optional[Callable[[float, str], None]]] = ContextVar("cost_progress", default=None)


@memo(maxsize=32)
def time_sweep(setting: A.Setting, run: int = 0) -> dict:
    """Median times of every method at every n (``run`` only tells a fresh measurement from the kept one),
    measured in the worker process (ui.measure_process): thousands of tiny torch calls, each of which
    would wait for the interpreter lock while other students' pages are drawn."""
    return measure_process.measure(A.time_sweep, setting, progress=SWEEP_PROGRESS.get())


@memo(maxsize=32)
def memory_sweep(setting: A.Setting) -> dict:
    """Peak memory of a training step of explicit and chunked attention at every n (deterministic on the CPU;
    in the worker process too, so it does not hold the server up)."""
    return measure_process.measure(A.memory_sweep, setting, progress=SWEEP_PROGRESS.get())


# Figures, built once per distinct input for every session (see ui.figures.cached).
time_figure = cached(F.time_chart)
steps_figure = cached(F.steps_chart)
memory_figure = cached(F.memory_chart)
preset_figure = cached(F.preset_chart)
