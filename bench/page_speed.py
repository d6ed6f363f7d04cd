"""How fast each page reruns, next to a floor measured in the same run; and heatmap payload sizes.

For every page in ui/nav.py (that exists), time repeated AppTest reruns at default settings and
print the median, two ways:
- alone: the page file run by itself, like the floor (the page's own script: sidebar, controls,
  figures). This is the number the 1.5x target is about.
- in app: through app.py, as a browser session runs it. This adds the shell every page shares
  (set_page_config and st.navigation over all the pages), so its floor is the same bare page
  behind a shell of the same shape: the same sections and number of pages (written to a
  temporary folder).
The floor is a bare page that draws one plotly heatmap of the same size as the page's head (n x n
for the default input; 128 x 128 for the 128-token rows), plus one with as many cells as the grid
of every head. Times are the AppTest wall time of `at.run()` and the time inside the script alone.

Run: python bench/page_speed.py [--repeats 15] [--pages attention,home] [--views grid,head]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
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
from ui.nav import PAGES, sections  # noqa: E402

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

SHELL = """
import streamlit as st

st.set_page_config(page_title="floor", layout="wide")
PAGES = {pages!r}
st.navigation({{section: [st.Page(path, title=title, default=i == 0 and n == 0)
                         for i, (path, title) in enumerate(items)]
               for n, (section, items) in enumerate(PAGES.items())}}).run()
"""


_FOLDERS: list[Path] = []  # temporary apps, removed when the run ends


def floor_in_shell(rows: int, cols: int) -> AppTest:
    """The bare heatmap page as the first page of a navigation shaped like app.py's."""
    folder = Path(tempfile.mkdtemp(prefix="glassbox-floor-"))
    _FOLDERS.append(folder)
    (folder / "pages").mkdir()
    shape = {}
    for section, infos in sections().items():
        for info in infos:
            (folder / info.path).write_text(FLOOR.format(rows=rows, cols=cols))
            shape.setdefault(section, []).append((info.path, info.title))
    (folder / "app.py").write_text(SHELL.format(pages=shape))
    return AppTest.from_file(str(folder / "app.py"), default_timeout=TIMEOUT)


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


def page_alone(path: str, query: dict | None = None) -> AppTest:
    """The page file run by itself, with URL parameters."""
    at = AppTest.from_file(str(ROOT / path), default_timeout=TIMEOUT)
    for k, v in (query or {}).items():
        at.query_params[k] = v
    return at


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
    parser.add_argument("--views", default="grid,head,steps,temp,compare,export",
                        help="the Attention page's views to time (comma-separated; the first is also timed at "
                             "128 tokens, and 'head' too when listed)")
    args = parser.parse_args(argv)
    if not read_manifest():
        print("no bundled models (assets/models/manifest.json); run python -m core.train --all first")
        return 1
    wanted = {p for p in args.pages.split(",") if p}
    apps: list[tuple[str, AppTest]] = []
    rows: list[tuple[str, str]] = []  # (page, the floor it is compared with)

    def floor(q: int, k: int, label: str = "") -> str:
        name = f"floor: bare {q}x{k} plotly heatmap{label}"
        apps.append((f"{name} | alone", AppTest.from_string(FLOOR.format(rows=q, cols=k), default_timeout=TIMEOUT)))
        apps.append((f"{name} | in app", floor_in_shell(q, k)))
        return name

    def page(name: str, path: str, query: dict | None, against: str) -> None:
        apps.append((f"{name} | alone", page_alone(path, query)))
        apps.append((f"{name} | in app", page_app(path, query)))
        rows.append((name, against))

    # The Attention page's default input decides the floor's size.
    probe = page_app("pages/attention.py")
    probe.run()
    n = len(probe.session_state["glassbox.input"].split())
    cfg = page_model_config(probe.session_state["glassbox.model"])
    small = floor(n, n)
    floor(cfg.n_layers * n, cfg.n_heads * n, " (the grid's cells)")
    for info in PAGES:
        if not info.exists or (wanted and (info.url_path or "home") not in wanted):
            continue
        if info.url_path != "attention":
            page(info.url_path or "home", info.path, None, small)
            continue
        views = [v for v in args.views.split(",") if v]
        for view in views:
            page(f"attention (view={view})", info.path, {"view": view}, small)
        long_input = " ".join(["<bos>"] + ["A", "B", "C", "D"] * 31 + ["A", "B", "C"])  # the 128-token cap
        large = floor(128, 128)
        floor(256, 512, " (the 128-token grid's cells)")
        for view in [v for v in ("grid", "head") if v in views]:
            query = {"model": "induction-sinusoidal", "input": long_input, "view": view}
            page(f"attention (view={view}, 128 tokens)", info.path, query, large)
    try:
        times = {name: (wall, script) for name, wall, script in median_reruns(apps, args.repeats)}
    finally:
        for folder in _FOLDERS:
            shutil.rmtree(folder, ignore_errors=True)

    print(f"\nAppTest reruns, median of {args.repeats} (ms), every app rerun in turns in this one run.\n"
          f"ratio = page / its floor (the bare heatmap of the same size, named on its row), run the same way:\n"
          f"alone = the page file by itself (wall time of at.run()), script = time inside that script only,\n"
          f"in app = through app.py, against the floor behind a navigation shell of the same shape.\n")
    print(f"{'floor':60s} {'alone':>7s} {'script':>7s} {'in app':>7s}")
    for name in dict.fromkeys(n.rsplit(" | ", 1)[0] for n in times if n.startswith("floor")):
        wall, script = times[f"{name} | alone"]
        print(f"{name:60s} {wall:7.1f} {script:7.1f} {times[f'{name} | in app'][0]:7.1f}")
    print(f"\n{'page':36s} {'alone':>7s} {'ratio':>6s} {'script':>7s} {'ratio':>6s} {'in app':>7s} {'ratio':>6s}"
          f"  floor")
    for name, against in rows:
        f_wall, f_script = times[f"{against} | alone"]
        f_app, _ = times[f"{against} | in app"]
        wall, script = times[f"{name} | alone"]
        app_wall, _ = times[f"{name} | in app"]
        print(f"{name:36s} {wall:7.1f} {wall / f_wall:6.2f} {script:7.1f} {script / f_script:6.2f} "
              f"{app_wall:7.1f} {app_wall / f_app:6.2f}  {against.split(':')[1].split(' plotly')[0].strip()}")
    print("\nHeatmap payload (plotly.io.to_json, what st.plotly_chart sends):")
    for size in (128, 256, 512):
        print(f"  {size:4d}-token head: {payload_bytes_per_cell(size):5.2f} bytes per cell")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
