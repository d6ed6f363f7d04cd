"""Work no student's input changes, done once per server process in a background thread.

The first visit of a page used to pay for torch's lazy set-up, the bundled models' loading, and
measurements that are the same for everyone at the page's default settings (timing sweeps, the
random stacks, the legality comparison). app.py calls `start()` on every run; the first call
starts one daemon thread that fills the same process-wide memos (ui.shell.memo) the pages read, with
the same arguments a default visit asks for. A page that asks while the thread is computing a
result waits for that computation instead of repeating it (ui.shell.memo.Memo); a failure here only
means the page computes the result itself, as it did before.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path
from typing import Callable, Optional

import torch

from ui.shell.memo import Memo

log = logging.getLogger(__name__)

DEVICE = "cpu"  # the sidebar's default device (ui.shell.sidebar.URL.device)
_START_LOCK = threading.Lock()
_STATE = {"thread": None, "done": []}  # the one warm-up thread of this process, and what it finished


def torch_lazy_paths() -> None:
    """torch's one-time costs: torch._dynamo (imported by the first meta-device build, which the Train
    page's parameter counts and checkpoint uploads use) and the first forward's kernel set-up."""
    from core.analysis.train import param_count
    from core.config import TransformerConfig
    from core.train import init_model

    cfg = TransformerConfig(arch="decoder", vocab_size=16, max_len=16, n_layers=1, d_model=16, n_heads=2)
    param_count(cfg)
    model = init_model(cfg, seed=0).eval()
    tokens = torch.zeros(1, 8, dtype=torch.long)  # [batch pos]
    model.run_with_cache(tokens, "*hook_pattern")
    model.generate(tokens, 2)


def page_modules() -> None:
    """Import every page's view module (and through them pandas, plotly and core.analysis), so a
    student's first visit of a page does not wait for its imports."""
    import importlib
    import importlib.util

    from ui.shell.nav import PAGES

    for page in PAGES:
        name = f"ui.{Path(page.path).stem}.view"
        if importlib.util.find_spec(name) is not None:
            importlib.import_module(name)
    first_use_modules()


# Trace types the figure builders draw (core/figures): plotly imports each class, and each of its parts,
# the first time a figure uses it.
PLOTLY_PARTS = ("layout", "heatmap", "scatter", "bar", "bar.marker", "waterfall", "heatmap.colorbar",
                "layout.xaxis", "layout.xaxis.title", "layout.yaxis", "layout.yaxis.title", "layout.title", "layout.legend",
                "layout.annotation", "layout.shape", "layout.coloraxis", "layout.coloraxis.colorbar")


def first_use_modules() -> None:
    """Import what the libraries import lazily on a page's first draw: jinja2 for pandas' Styler, plotly's
    conversion helpers, and plotly's per-property classes (about 200 modules). Found by listing the modules
    that appeared while every page ran after this warm-up; a student's first page would otherwise import
    them under the interpreter lock while thirty others wait."""
    import importlib

    import jinja2  # noqa: F401
    import pandas.io.formats.style  # noqa: F401
    import plotly.animation  # noqa: F401
    import plotly.colors  # noqa: F401
    import plotly.io._json  # noqa: F401
    import plotly.offline  # noqa: F401
    import plotly.tools  # noqa: F401
    import streamlit.emojis  # noqa: F401

    import plotly.graph_objects as go

    for trace in ("Bar", "Heatmap", "Scatter", "Waterfall"):
        getattr(go, trace)
    for optional in ("orjson", "narwhals._interchange.dataframe"):  # plotly's JSON engine; Streamlit's frames
        try:
            importlib.import_module(optional)
        except ImportError:
            pass
    for part in PLOTLY_PARTS:
        module = importlib.import_module(f"plotly.graph_objs.{part}")
        for name in getattr(module, "__all__", ()):
            getattr(module, name)


def bundled_models() -> None:
    """Load every bundled model into the shared memo (each page's sidebar asks for one)."""
    from ui.shell import models

    for entry in models.manifest():
        try:
            models._load_bundled(entry["id"], DEVICE)
        except Exception:  # noqa: BLE001 - a broken file is reported by the page that opens it
            log.exception("warm-up: could not load %s", entry["id"])


def page_results(page: str) -> list[tuple[Memo, tuple]]:
    """(memo, arguments) of the measurements a default visit of `page` asks for: its view module's
    `default_measurements(device)` (masks, depth, positions, cost). The page packages sit above the server's
    machinery, so they are found by name; tests/app/test_warmup.py checks that a default visit asks for
    exactly these."""
    import importlib

    view = importlib.import_module(f"ui.{page}.view")
    if not hasattr(view, "default_measurements"):
        raise ValueError(f"no warm-up for page {page!r}")
    return view.default_measurements(DEVICE)


def measure(page: str) -> Callable[[], None]:
    """A task computing `page`'s default measurements into their memos."""
    def task() -> None:
        for memo_, args in page_results(page):
            memo_(*args)

    task.__doc__ = f"The {page} page's default measurements."
    return task


# In the order a student meets them: what every page needs first, the slow measurements last.
TASKS: tuple[tuple[str, Callable[[], None]], ...] = (
    ("page modules", page_modules),
    ("torch's lazy paths", torch_lazy_paths),
    ("bundled models", bundled_models),
    ("masks", measure("masks")),
    ("depth", measure("depth")),
    ("positions", measure("positions")),
    ("cost", measure("cost")),
)


def run_all() -> list[tuple[str, float]]:
    """Run every task, logging (never raising) failures; returns (task, seconds) of those that finished."""
    finished = []
    for name, task in TASKS:
        t0 = time.perf_counter()
        try:
            task()
        except Exception:  # noqa: BLE001 - the page computes it itself then
            log.exception("warm-up task %r failed", name)
            continue
        finished.append((name, time.perf_counter() - t0))
        if name not in _STATE["done"]:  # run again after each class (start_afresh): listed once
            _STATE["done"].append(name)
    return finished


def _run_and_report() -> None:
    """The warm-up thread: every task, then one line in the server log on memory (the class's baseline)."""
    from ui.server import allocator

    finished = run_all()
    allocator.log_memory(f"warm-up done in {sum(seconds for _, seconds in finished):.1f} s")


def start_afresh(connected: Callable[[], Optional[int]]) -> bool:
    """When a class has left (no tab connected: `connected()` is 0), forget what it computed and warm up
    again, leaving the process as a freshly started server would be; returns whether it did.

    Called by the idle trimmer (ui.server.allocator) before it hands free memory back: the students' own
    results and figures in the memos, and the shipped results they decoded, are no use to the next
    class, and they were what kept the memory above its level before the class (docs/classroom-benchmark.md,
    "Memory"), and so is the measurement worker (ui.server.measure_process). The bundled models stay loaded.
    With a tab still open (a projector, a student who
    stepped away) nothing is forgotten; None (cannot tell) counts as open."""
    from ui.server import allocator, measure_process
    from ui.shell import memo, precomputed

    if connected() != 0:
        return False
    forgotten = memo.forget_results()
    precomputed.forget_decoded()
    worker = measure_process.stop()  # its own torch and buffers: started again by the next measurement
    if enabled():
        run_all()
    allocator.log_memory(f"nobody connected: forgot {forgotten} results{', ended the measurement worker' if worker else ''}"
                         " and warmed up again")
    return True


def enabled() -> bool:
    """Off under AppTest (tests run the pages themselves) and where GLASSBOX_WARMUP=0."""
    from ui import under_apptest

    return os.environ.get("GLASSBOX_WARMUP", "1") != "0" and not under_apptest()


def start() -> bool:
    """Start the warm-up thread once per process (later calls return at once); True if it started now."""
    if _STATE["thread"] is not None or not enabled():
        return False
    with _START_LOCK:
        if _STATE["thread"] is not None:
            return False
        thread = threading.Thread(target=_run_and_report, name="glassbox-warmup", daemon=True)
        _STATE["thread"] = thread
    thread.start()
    return True


def finished(name: str) -> bool:
    """Whether the warm-up task `name` has finished in this process."""
    return name in _STATE["done"]
