"""How fast each page reruns, next to a floor measured in the same run; and heatmap payload sizes.

For every page in ui/shell/nav.py (that exists), time repeated AppTest reruns at default settings and
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

Per section (--what sections): for one control in each section of the long pages, the time a change
of that control costs, next to a bare page that draws the same figures as the section, in the same
run. A control inside an `st.fragment` is changed as a browser does it: only its fragment reruns
(tests/app/fragments.py gives AppTest the fragment's id); a control outside every fragment reruns
the page, and its floor draws every figure of the page. Run it on an older commit (copy this file
and tests/app/fragments.py there) to see what the same clicks cost before the sections existed.

Every AppTest run here shares one ScriptCache, as a server's sessions do, so a page script is parsed and compiled
once, not on every click; and the end of a run is awaited by joining its thread, not by AppTest's poll every
millisecond, which took the interpreter lock from the running script and added up to a millisecond
(`--apptest-as-is`: AppTest as it comes, as the tables before 2026-11-26 were measured).

Run: python bench/page_speed.py [--repeats 15] [--pages attention,home] [--views grid,head]
     [--what pages,sections] [--apptest-as-is]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import plotly.io as pio  # noqa: E402
import streamlit.runtime.scriptrunner.script_runner as script_runner  # noqa: E402
from streamlit.testing.v1 import AppTest  # noqa: E402

from core.checkpoints import read_manifest  # noqa: E402
from core.figures.heatmaps import attention_heatmap  # noqa: E402
from tests.app.fragments import fragment_id, graft, scoped_to, widget  # noqa: E402
from ui.shell.nav import PAGES, sections  # noqa: E402

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


def compile_once_per_process() -> None:
    """Let every AppTest run share one ScriptCache, as a server's sessions do (the Runtime's ScriptCache keeps each
    script's bytecode until the file changes). AppTest makes a new one for every run, so each click paid a parse,
    Streamlit's magic pass and a compile of its page script that a server pays once: 0.3-0.5 ms a click, more than
    the floor's short script paid. Module attributes of a bench process, never of the app."""
    import streamlit.testing.v1.app_test as app_test
    import streamlit.testing.v1.local_script_runner as local_script_runner
    from streamlit.runtime.scriptrunner.script_cache import ScriptCache

    shared = ScriptCache()
    app_test.ScriptCache = local_script_runner.ScriptCache = lambda: shared


def wait_by_join() -> None:
    """Let AppTest wait for a run by joining its script thread, not by waking every millisecond to look. The main
    thread's wake-ups took the interpreter lock from the script thread up to a thousand times a second and left up
    to a millisecond between the run's end and the clock's, which made the short floors' times fall in two groups
    from run to run. The script thread ends with the run (AppTest starts one per run). Bench process only."""
    import streamlit.testing.v1.local_script_runner as local_script_runner

    def joined(runner, timeout: float = 3) -> None:
        thread = runner._script_thread
        if thread is not None:
            thread.join(timeout)
            if thread.is_alive():
                runner.request_stop()
                runner.join()
                raise RuntimeError(f"AppTest script run timed out after {timeout}(s)")

    local_script_runner.require_widgets_deltas = joined


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


# ---------------------------------------------------------------------------------------------
# Per section: what a click costs, next to a bare page drawing that section's figures
# ---------------------------------------------------------------------------------------------

PAGE_WIDE = None  # a control that reruns the page or its body ([page], [body]): its floor draws every figure of the page


@dataclass(frozen=True)
class Section:
    """One control of a section: the page (and URL) it is on, its session key, two values a click
    moves between, and the keys of the plotly charts a click on it redraws (PAGE_WIDE: every chart its rerun
    draws). The bench checks the list against what a click draws, and the floor draws exactly those charts."""

    page: str
    name: str
    key: str
    values: tuple
    charts: Optional[tuple]
    query: tuple = ()


ENCDEC = (("model", "reverse-encdec"),)  # every Generation panel draws for an encoder-decoder

SECTIONS = [
    Section("attention", "layer/head/T bar: temperature [shown view]", "attention.temp", (1.0, 2.0),
            ("attention.fig_grid",),
            (("view", "grid"),)),
    Section("attention", "One head: query row", "attention.query", (0, 1),
            ("attention.fig_head", "attention.fig_lines", "attention.fig_bars"), (("view", "head"),)),
    Section("attention", "Why divide by sqrt(d_k): d_k", "attention.dk", (64, 16),
            ("attention.fig_scale_hist", "attention.fig_scale_max", "attention.fig_scale_entropy",
             "attention.fig_scale_jacobian"), (("view", "scale"),)),
    Section("attention", "Compare: head of B", "attention.head2", (0, 1),
            ("attention.fig_cmp_a", "attention.fig_cmp_b", "attention.fig_cmp_diff"), (("view", "compare"),)),
    Section("positions", "Encodings: n [sections 1-4]", "positions.n", (64, 32),
            ("positions.fig_table", "positions.fig_wavelengths", "positions.fig_gram", "positions.fig_profile",
             "positions.fig_mk")),
    Section("positions", "Shift map: k", "positions.k", (3, 7), ("positions.fig_mk",)),
    Section("positions", "Neighbours: window", "positions.window", (6, 4), ("positions.fig_neigh",)),
    Section("positions", "RoPE decay: base", "positions.decay_base", (10000, 1000), ("positions.fig_decay",)),
    Section("heads", "Layer [open tab]", "heads.layer", (0, 1), ("heads.fig_angles", "heads.fig_gram", "heads.fig_erank")),
    Section("heads", "Subspaces: matrix", "heads.which", ("W_V", "W_Q"),
            ("heads.fig_angles", "heads.fig_gram", "heads.fig_erank")),
    Section("masks", "Draw: preset [what reads the mask]", "masks.all.preset", ("causal", "full"),
            ("masks.all.grid", "masks.pattern_own", "masks.pattern_yours", "masks.right", "masks.wrong",
             "masks.row_sums", "masks.arcs", "masks.laplacian", "masks.spectrum", "masks.reach", "masks.field",
             "masks.influence", "masks.pairs", "masks.timing")),
    Section("masks", "Effect: layer [sections 2-4]", "masks.layer", (0, 1),
            ("masks.pattern_own", "masks.pattern_yours", "masks.right", "masks.wrong", "masks.row_sums",
             "masks.arcs", "masks.laplacian", "masks.spectrum")),
    Section("masks", "Leak: blocked keys k", "masks.k", (7, 3), ("masks.leak",)),
    Section("masks", "Receptive field: token", "masks.token", (2, 3), ("masks.field",)),
    Section("masks", "Cost: block b", "masks.cost_b", (32, 16), ("masks.pairs", "masks.timing")),
    Section("masks", "Legality: digits", "masks.legality_len", (8, 6),
            ("masks.legality_encoder", "masks.legality_decoder")),
    Section("depth", "Focus: position [sections 1-2]", "depth.pos", (0, 1),
            ("depth.contrib", "depth.grads", "depth.saliency")),
    Section("depth", "Experiment: layers L [sections 3-4]", "depth.layers", (48, 24),
            ("depth.chart", "depth.zoom", "depth.mixing")),
    Section("depth", "Bounds: rho", "depth.rho", (0.1, 0.3), ("depth.chart", "depth.zoom")),
    Section("depth", "Hyper-connections: sublayer", "depth.sublayer", (0, 1), ("depth.mixing",)),
    Section("depth", "Long-range paths: heads H", "depth.H", (4, 2), ("depth.paths", "depth.links", "depth.field")),
    Section("train", "Settings: layers [summary, buttons]", "train.n_layers", (2, 1), ()),  # no chart: text, buttons
    Section("cost", "Setting: heads [sections 1-3]", "cost.heads", (4, 2),
            ("cost.chart.time", "cost.chart.steps", "cost.chart.memory")),
    Section("cost", "Model sizes: preset", "cost.preset", ("original", "bert-base"), ("cost.chart.preset",)),
    Section("retrieval", "Kernel smoother: |q|", "retrieval.qnorm", (30.0, 100.0),
            ("retrieval.kernel", "retrieval.estimate")),
    Section("retrieval", "Soft database: beta", "retrieval.beta", (1.0, 10.0), ("retrieval.arrows", "retrieval.sweep")),
    Section("retrieval", "V = K: head", "retrieval.head", (0, 1), ("retrieval.span",)),
    Section("retrieval", "Hijacking: alpha", "retrieval.alpha", (100.0, 10.0), ("retrieval.hijack", "retrieval.pattern")),
    Section("retrieval", "Equivalences: stretch", "retrieval.stretch", (1.0, 2.5),
            ("retrieval.eq_arrows", "retrieval.eq_weights")),
    Section("generation", "Anatomy: hook", "generation.hook",
            ("decoder.blocks.0.cross_attn.hook_pattern", "encoder.blocks.1.attn.hook_k"),
            ("generation.diagram", "generation.tensor"), ENCDEC),
    Section("generation", "Shapes: L_e", "generation.le", (4, 3), ("generation.shapes",), ENCDEC),
    Section("generation", "Decoding: step t", "generation.t", (0, 2),
            ("generation.rows", "generation.cache", "generation.query", "generation.counters"),
            ENCDEC),
    Section("generation", "Leak: example", "generation.ex", (0, 3), ("generation.gradients",), ENCDEC),
]

FIGURES_FLOOR = """
import json

import plotly.io as pio
import streamlit as st

from ui.shell.figures import ShippedFigure  # serialised once, as the pages' cached figures are


@st.cache_resource
def figures():
    with open({path!r}) as f:
        return [ShippedFigure(pio.from_json(spec, skip_invalid=True)) for spec in json.load(f)]


for i, fig in enumerate(figures()):
    st.plotly_chart(fig, key=f"floor{{i}}")
"""


def chart_keys(at: AppTest) -> list[str]:
    """The keys of the plotly charts the last run drew, in order (a fragment's run: its charts only)."""
    return [element.proto.id.rsplit("-", 1)[-1] for element in at.get("plotly_chart")]


def chart_specs(at: AppTest, keys: Optional[tuple]) -> list[str]:
    """The plotly specs the run drew, in order: those with these chart keys, or every one."""
    specs = []
    for element in at.get("plotly_chart"):
        key = element.proto.id.rsplit("-", 1)[-1]
        if keys is None or key in keys:
            specs.append(element.proto.spec)
    return specs


def figures_floor(specs: list[str]) -> AppTest:
    """A bare page that draws these figures, built and serialised once per process (ui.shell.figures.ShippedFigure),
    as the pages' cached figures are: what is left is Streamlit's own per-chart work."""
    folder = Path(tempfile.mkdtemp(prefix="glassbox-section-floor-"))
    _FOLDERS.append(folder)
    (folder / "figures.json").write_text(json.dumps(specs))
    (folder / "floor.py").write_text(FIGURES_FLOOR.format(path=str(folder / "figures.json")))
    return AppTest.from_file(str(folder / "floor.py"), default_timeout=TIMEOUT)


def page_path(url_path: str) -> str:
    return next(info.path for info in PAGES if (info.url_path or "home") == url_path)


def click_times(at: AppTest, s: Section, repeats: int, page) -> tuple[list[float], list[float], bool]:
    """Wall and script seconds of `repeats` clicks on the section's control (moving between its two
    values); whether they reran fragments only (its own, or those it reruns by key), not the page."""
    at._tree = page  # the page as the browser shows it: the last full run's tree (see tests.app.fragments.click)
    fragment = fragment_id(at, s.key)
    walls, scripts = [], []
    for i in range(repeats + 2):  # two warm clicks: both values computed and cached
        # As tests.app.fragments.click, with the fragment looked up and the widget states of the page (which the
        # browser sends with every click; AppTest builds them by walking its tree) made before the clock starts.
        at._tree = page
        widget(at, s.key).set_value(s.values[i % 2])
        states = page.get_widget_states()
        with ScriptClock() as clock:
            t = time.perf_counter()
            if fragment is None:
                at._run(states)
            else:
                with scoped_to(fragment):
                    at._run(states)
            wall = time.perf_counter() - t
        graft(page, at._tree)  # the redrawn controls replace theirs, as in the browser (outside the clock)
        if at.exception:
            raise RuntimeError(f"exception in {s.page} / {s.name}: {[e.value for e in at.exception]}")
        if i >= 2:
            walls.append(wall)
            scripts.append(clock.total)
    return walls, scripts, fragment is not None or not at.title  # a control outside every fragment may rerun
    # only the fragments that read it (ui.shell.sections.rerun_readers): then the title is not drawn again either


def floor_times(at: AppTest, repeats: int) -> tuple[list[float], list[float]]:
    """Wall and script seconds of `repeats` reruns of a floor page."""
    at.run()
    walls, scripts = [], []
    for _ in range(repeats):
        states = at._tree.get_widget_states()  # outside the clock, as for a click
        with ScriptClock() as clock:
            t = time.perf_counter()
            at._run(states)
            walls.append(time.perf_counter() - t)
        scripts.append(clock.total)
    return walls, scripts


def section_table(repeats: int, wanted: set[str], check_charts: bool = True) -> None:
    """Time a click in each section and its floor, alternating the two (so load touches both alike);
    print one row per section."""
    rows = []
    for s in SECTIONS:
        if wanted and s.page not in wanted:
            continue
        at = page_alone(page_path(s.page), dict(s.query))
        at.run()
        if at.exception:
            raise RuntimeError(f"exception in {s.page}: {[e.value for e in at.exception]}")
        page = at._tree
        click_times(at, s, 1, page)  # the element tree now holds what a click redraws: the floor draws those charts
        drawn = chart_keys(at)
        if s.charts is not None and set(drawn) != set(s.charts) and check_charts:
            raise RuntimeError(f"{s.page} / {s.name}: a click redraws the charts {drawn}, the bench lists "
                               f"{list(s.charts)}")
        floor = figures_floor(chart_specs(at, None))
        page_walls, page_scripts, floor_walls, floor_scripts, local = [], [], [], [], False
        for _ in range(3):  # in turns, a third of the repeats each
            w, sc, local = click_times(at, s, max(1, repeats // 3), page)
            page_walls += w
            page_scripts += sc
            fw, fs = floor_times(floor, max(1, repeats // 3))
            floor_walls += fw
            floor_scripts += fs
        rows.append((s, local, len(chart_specs(floor, None)),
                     *(statistics.median(v) * 1000 for v in (page_walls, page_scripts, floor_walls, floor_scripts))))
    print(f"\nA click in each section: AppTest, median of {3 * max(1, repeats // 3)} clicks (ms), against a bare "
          f"page drawing the same figures (floor), in turns in this one run.\nreruns: 'section' = only the "
          f"control's st.fragment reran, or only the fragments it reruns by key; 'page' = the whole page reran. "
          f"The floor draws the charts the click drew. wall = at.run(), script = time inside the script.\n")
    print(f"{'page':10s} {'section: control':42s} {'reruns':>7s} {'figs':>4s} {'wall':>7s} {'floor':>7s} "
          f"{'ratio':>6s} {'script':>7s} {'floor':>7s} {'ratio':>6s}")
    for s, local, figs, wall, script, f_wall, f_script in rows:
        print(f"{s.page:10s} {s.name:42s} {'section' if local else 'page':>7s} {figs:4d} {wall:7.1f} {f_wall:7.1f} "
              f"{wall / f_wall:6.2f} {script:7.1f} {f_script:7.1f} {script / max(f_script, 1e-3):6.2f}")


TEXT_ABOVE, TEXT_BELOW = 'st.title("A page"); st.markdown("Some text. " * 60)\n', 'st.markdown("More text. " * 60)\n'
ONE_SLIDER = '''
@st.fragment
def section():
    st.slider("k", 1, 10, 3, key="k")
    st.plotly_chart(figures()[0], key="c")
section()
'''
MORE_WIDGETS = '''
for i in range(13):
    st.slider(f"other {i}", 1, 10, 3, key=f"other{i}")
    st.selectbox(f"choice {i}", ["a", "b", "c"], key=f"choice{i}")
'''
SECTION_WITH_EXTRAS = '''
@st.fragment
def section():
    c1, c2 = st.columns(2)
    c1.slider("k", 1, 10, 3, key="k")
    c2.slider("j", 1, 10, 3, key="j")
    st.plotly_chart(figures()[0], key="c")
    st.caption("A caption.")
    st.metric("a number", "1.0")
section()
'''
MINIMAL_SECTIONS = {  # a section in its simplest forms, on a page with text around it: what a fragment costs
    "one slider and the chart, no fragment": 'st.slider("k", 1, 10, 3, key="k")\nst.plotly_chart(figures()[0], key="c")\n',
    "a fragment: one slider and the chart": TEXT_ABOVE + ONE_SLIDER + TEXT_BELOW,
    "a fragment: one slider and the chart, 26 more widgets on the page": TEXT_ABOVE + MORE_WIDGETS + ONE_SLIDER
    + TEXT_BELOW,
    "a fragment: two sliders in columns, the chart, a caption, a metric": TEXT_ABOVE + SECTION_WITH_EXTRAS + TEXT_BELOW,
}


def minimal_table(repeats: int) -> None:
    """The Shift map's chart drawn alone (the floor), and in the simplest sections around it, a slider moved as in
    the section table: how much of a section click the fragment and a few controls cost by themselves."""
    at = page_alone(page_path("positions"), {})
    at.run()
    specs = chart_specs(at, ("positions.fig_mk",))
    floor = figures_floor(specs)
    folder = Path(tempfile.mkdtemp(prefix="glassbox-minimal-"))
    _FOLDERS.append(folder)
    header = FIGURES_FLOOR.format(path=str(folder / "figures.json")).split("for i, fig in enumerate")[0]
    (folder / "figures.json").write_text(json.dumps(specs))
    rows = []
    for name, body in MINIMAL_SECTIONS.items():
        path = folder / f"page{len(rows)}.py"
        path.write_text(header + body)
        page_at = AppTest.from_file(str(path), default_timeout=TIMEOUT)
        page_at.run()
        section = Section("minimal", name, "k", (3, 4), None)
        walls, floors = [], []
        for _ in range(3):  # in turns with the floor
            walls += click_times(page_at, section, max(1, repeats // 3), page_at._tree)[0]
            floors += floor_times(floor, max(1, repeats // 3))[0]
        rows.append((name, statistics.median(walls) * 1000, statistics.median(floors) * 1000))
    print(f"\nThe simplest sections around one chart (Positions' shift map), a slider moved {3 * max(1, repeats // 3)} "
          f"times, against the chart drawn alone, in turns (medians, ms):\n")
    for name, wall, f_wall in rows:
        print(f"{name:66s} {wall:6.2f} {f_wall:6.2f} {wall / f_wall:6.2f}x")


def main(argv=None) -> int:
    """Build every app under test, rerun them in turns, print the table and the payload sizes."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--pages", default="", help="comma-separated url paths (default: every page)")
    parser.add_argument("--views", default="grid,head,steps,temp,compare,export",
                        help="the Attention page's views to time (comma-separated; the first is also timed at "
                             "128 tokens, and 'head' too when listed)")
    parser.add_argument("--what", default="pages,sections",
                        help="pages: whole-page reruns against a heatmap floor; sections: a click in each section; "
                             "minimal: the simplest sections around one chart, against the chart alone")
    parser.add_argument("--apptest-as-is", action="store_true",
                        help="AppTest's own harness: a compile of the script for every run and a 1 ms poll for its end "
                             "(the tables before 2026-11-26 were measured so); by default one ScriptCache serves every "
                             "run, as on a server, and a run's end is awaited by joining its thread")
    parser.add_argument("--any-charts", action="store_true",
                        help="sections: do not check the charts a click draws against each section's list (to run "
                             "this bench on an older checkout, whose clicks drew other charts)")
    args = parser.parse_args(argv)
    # As in the app: app.py sets one torch thread on every run, and so the process's count. A page run
    # alone here skips app.py, and each AppTest run is a new thread whose first parallel torch op would
    # start an OpenMP team (a few ms each time) that the app's runs never pay.
    import torch

    torch.set_num_threads(1)
    if not args.apptest_as_is:
        compile_once_per_process()
        wait_by_join()
    if not read_manifest():
        print("no bundled models (assets/models/manifest.json); run python -m core.train --all first")
        return 1
    wanted = {p for p in args.pages.split(",") if p}
    what = set(args.what.split(","))
    try:
        if "sections" in what:
            section_table(args.repeats, wanted, not args.any_charts)
        if "minimal" in what:
            minimal_table(args.repeats)
    finally:  # the floors' scratch folders
        for folder in _FOLDERS:
            shutil.rmtree(folder, ignore_errors=True)
        _FOLDERS.clear()
    if "pages" not in what:
        return 0
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
