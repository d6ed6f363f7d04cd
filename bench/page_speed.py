"""How fast each page reruns, next to a floor measured in the same run; and heatmap payload sizes.

For every page in ui/nav.py (that exists): open it from app.py with AppTest, then time repeated
reruns at default settings and print the median. The floor is a bare page that draws one plotly
heatmap of the same size as the Attention page's head (n x n for the default input), and one with as
many cells as its grid of every head (layers*n x heads*n). Both are
reported as the AppTest wall time of `at.run()` and as the time inside the page script alone.
The Attention page is timed once per view (tab), and once more at the 128-token input cap.

Run: python bench/page_speed.py [--repeats 15] [--pages attention,home]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import plotly.io as pio  # noqa: E402
import streamlit.runtime.scriptrunner.script_runner as script_runner  # noqa: E402
from streamlit.testing.v1 import AppTest  # noqa: E402

from core.checkpoints import read_manifest  # noqa: E402
from core.figures.heatmaps import attention_heatmap  # noqa: E402
from ui.nav import PAGES  # noqa: E402

TIMEOUT = 120
FLOOR = """
import numpy as np
import plotly.graph_objects as go
import streamlit as st

rows, cols = {rows}, {cols}
z = np.random.default_rng(0).dirichlet(np.ones(cols), size=rows).astype(np.float32)  # [q k]
x, y = [f"{{i}}:t" for i in range(cols)], [f"{{i}}:t" for i in range(rows)]
st.plotly_chart(go.Figure(go.Heatmap(z=z, x=x, y=y, zmin=0, zmax=1, colorscale="Cividis")), key="floor")
"""


class ScriptClock:
    """Adds up the time spent inside page scripts (AppTest runs them in their own thread)."""

    def __init__(self):
        self.total = 0.0
        self._orig = script_runner.exec_func_with_error_handling

    def __enter__(self):
        def timed(func, ctx):
            t = time.perf_counter()
            try:
                return self._orig(func, ctx)
            finally:
                self.total += time.perf_counter() - t
        script_runner.exec_func_with_error_handling = timed
        return self

    def __exit__(self, *exc):
        script_runner.exec_func_with_error_handling = self._orig


def median_reruns(apps: list[tuple[str, AppTest]], repeats: int) -> list[tuple[str, float, float]]:
    """(name, median wall ms of at.run(), median ms inside the script) for each app.

    The apps are rerun in turns (one rerun of each, `repeats` times), so a change in the machine's
    load during the run touches the floor and the pages alike.
    """
    walls = {name: [] for name, _ in apps}
    scripts = {name: [] for name, _ in apps}
    for _, at in apps:
        at.run()  # warm: caches filled, widgets registered
    for _ in range(repeats):
        for name, at in apps:
            with ScriptClock() as clock:
                t = time.perf_counter()
                at.run()
                walls[name].append(time.perf_counter() - t)
            scripts[name].append(clock.total)
            if at.exception:
                raise RuntimeError(f"exception in {name}: {[e.value for e in at.exception]}")
    return [(name, statistics.median(walls[name]) * 1000, statistics.median(scripts[name]) * 1000)
            for name, _ in apps]


def page_app(path: str, query: dict | None = None) -> AppTest:
    """The app from app.py, switched to `path`, with URL parameters."""
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    for k, v in (query or {}).items():
        at.query_params[k] = v
    at.run()
    return at.switch_page(path)


def page_model_config(model_id: str):
    """The config of a bundled model (for the grid-sized floor)."""
    from core.checkpoints import load_bundled

    return load_bundled(model_id)[0].cfg


def payload_bytes_per_cell(n: int) -> float:
    """Bytes st.plotly_chart ships (plotly.io.to_json) per cell of an n-token head."""
    z = np.random.default_rng(0).dirichlet(np.ones(n), size=n).astype(np.float32)  # [q k]
    labels = [f"t{i}" for i in range(n)]
    return len(pio.to_json(attention_heatmap(z, labels, labels), validate=False)) / (n * n)


def main(argv=None) -> int:
    """Build every app under test, rerun them in turns, print the table and the payload sizes."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--pages", default="", help="comma-separated url paths (default: every page)")
    args = parser.parse_args(argv)
    if not read_manifest():
        print("no bundled models (assets/models/manifest.json); run python -m core.train --all first")
        return 1
    wanted = {p for p in args.pages.split(",") if p}
    apps: list[tuple[str, AppTest]] = []

    def floor(q: int, k: int, label: str) -> None:
        at = AppTest.from_string(FLOOR.format(rows=q, cols=k), default_timeout=TIMEOUT)
        apps.append((f"floor: bare {q}x{k} plotly heatmap{label}", at))

    # The Attention page's default input decides the floor's size.
    probe = page_app("pages/attention.py")
    probe.run()
    n = len(probe.session_state["glassbox.input"].split())
    cfg = page_model_config(probe.session_state["glassbox.model"])
    floor(n, n, "")
    floor(cfg.n_layers * n, cfg.n_heads * n, " (the grid's cells)")
    for info in PAGES:
        if not info.exists or (wanted and (info.url_path or "home") not in wanted):
            continue
        if info.url_path != "attention":
            apps.append((info.url_path or "home", page_app(info.path)))
            continue
        for view in ("grid", "head", "steps", "temp", "compare", "export"):
            apps.append((f"attention (view={view})", page_app(info.path, {"view": view})))
        long_input = " ".join(["<bos>"] + ["A", "B", "C", "D"] * 31 + ["A", "B", "C"])  # the 128-token cap
        for view in ("grid", "head"):
            query = {"model": "induction-sinusoidal", "input": long_input, "view": view}
            apps.append((f"attention (view={view}, 128 tokens)", page_app(info.path, query)))
        floor(128, 128, "")
        floor(256, 512, " (the 128-token grid's cells)")
    rows = median_reruns(apps, args.repeats)
    f_wall, f_script = rows[0][1], rows[0][2]

    print(f"\nAppTest reruns, median of {args.repeats} (ms); ratio = page / the {n}x{n} floor, measured in this "
          f"run, interleaved.\nwall = at.run() as a test sees it; script = time inside the page script only.\n")
    print(f"{'page':50s} {'wall':>8s} {'ratio':>6s} {'script':>8s} {'ratio':>6s}")
    for name, wall, script in rows:
        print(f"{name:50s} {wall:8.1f} {wall / f_wall:6.2f} {script:8.1f} {script / f_script:6.2f}")
    print("\nHeatmap payload (plotly.io.to_json, what st.plotly_chart sends):")
    for size in (128, 256, 512):
        print(f"  {size:4d}-token head: {payload_bytes_per_cell(size):5.2f} bytes per cell")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
