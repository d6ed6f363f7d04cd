"""How long Plotly alone takes to draw a page's charts in Chromium, outside Streamlit.

    python bench/chart_drawing.py                       # Positions, Masks, Depth
    python bench/chart_drawing.py --pages attention,heads --repeats 5

For each page, runs it once under AppTest at its default settings and takes the chart
specifications exactly as the server sends them (the JSON in each plotly_chart element), then
opens one bare HTML page in Debian's chromium (Playwright) with plotly.js from the plotly package
and draws every chart one after another with `Plotly.newPlot`, each in a 1200 px wide div, as
the app's wide layout does. The first round is "cold" (a new page: the JavaScript engine has not
compiled Plotly's code paths yet, as on a student's first visit); later rounds are "warm" (the
median is printed). Variants, each in its own new page: the specs as sent; without
`automargin` on the axes (Plotly then draws each chart once instead of measuring its labels and
drawing it again).

This separates Plotly's own drawing from the rest of a page visit (bench/first_visit.py: server,
Streamlit's frontend, transfer). `--streamlit` adds the floor Streamlit itself sets: a scratch app
(not this one) that draws nothing but those same specs with st.plotly_chart, timed from the request
to the last chart drawn, each visit in a new browser profile as in bench/first_visit.py: an empty
page, the page's first chart alone, all its charts, and all of them with theme=None (no Streamlit
theme). Prints tables; asserts nothing (these machines are shared).
"""

from __future__ import annotations

import argparse
import copy
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.first_visit import CHROMIUM_ARGS, start_server, stop_server  # noqa: E402
from deploy.cluster import free_port  # noqa: E402

# The scratch app of --streamlit: the specs of specs.json and nothing else.
FLOOR_APP = """import json
import streamlit as st
st.set_page_config(layout="wide")
specs = json.load(open("specs.json"))
mode = st.query_params.get("mode", "all")
if mode == "empty":
    st.write("empty page")
for i, spec in enumerate(specs[:1] if mode == "one" else [] if mode == "empty" else specs):
    st.plotly_chart(spec, key=f"chart{i}", theme=None if mode == "no theme" else "streamlit")
"""
DRAWN_JS = """(n) => { const g = document.querySelectorAll("[data-testid='stPlotlyChart'] .js-plotly-plot");
  return g.length >= n && Array.from(g).every(x => x._fullLayout); }"""

DRAW_ALL_JS = """async (figs) => {
  const root = document.getElementById('root');
  root.innerHTML = '';
  const frame = () => new Promise(r => requestAnimationFrame(() => setTimeout(r, 0)));
  await frame();
  const t0 = performance.now();
  for (const f of figs) {
    const div = document.createElement('div');
    div.style.width = '1200px';
    root.appendChild(div);
    await Plotly.newPlot(div, f.data, f.layout || {}, {displayModeBar: false});
  }
  await frame();  // style, layout and paint of what was drawn
  return performance.now() - t0;
}"""


def page_specs(page: str) -> list[dict]:
    """The plotly specifications page `page` (pages/<page>.py) sends at its default settings."""
    from tests.app.conftest import app_at

    at = app_at(f"pages/{page}.py")
    if at.exception:
        raise RuntimeError(f"{page}: the page raised {at.exception[0].value}")
    return [json.loads(el.proto.spec) for el in at.get("plotly_chart")]


def without_automargin(spec: dict) -> dict:
    """A copy of `spec` whose axes do not grow their margins to fit their labels."""
    spec = copy.deepcopy(spec)
    for name, axis in (spec.get("layout") or {}).items():
        if name.startswith(("xaxis", "yaxis")) and isinstance(axis, dict):
            axis.pop("automargin", None)
    return spec


VARIANTS = {"as sent": lambda spec: spec, "no automargin": without_automargin}


def draw_times(specs: list[dict], repeats: int) -> dict[str, tuple[float, float]]:
    """Variant -> (cold ms, warm median ms) to draw every chart of `specs` in one bare page."""
    import plotly
    from playwright.sync_api import sync_playwright

    plotly_js = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    rounds: dict[str, list[float]] = {name: [] for name in VARIANTS}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=shutil.which("chromium"), args=CHROMIUM_ARGS)
        try:
            for name, variant in VARIANTS.items():  # each variant in its own new page: its own cold round
                context = browser.new_context(viewport={"width": 1300, "height": 1000})
                page = context.new_page()
                page.set_content("<html><body><div id='root'></div></body></html>")
                page.add_script_tag(path=str(plotly_js))
                figs = [variant(s) for s in specs]
                rounds[name] = [page.evaluate(DRAW_ALL_JS, figs) for _ in range(repeats)]
                context.close()
        finally:
            browser.close()
    return {name: (times[0], statistics.median(times[1:] or times)) for name, times in rounds.items()}


def streamlit_floor(specs: list[dict], repeats: int) -> dict[str, float]:
    """Mode -> median seconds from the request to the last chart drawn, in the scratch app (FLOOR_APP)."""
    from playwright.sync_api import sync_playwright

    modes = {"empty": 0, "one": 1, "all": len(specs), "no theme": len(specs)}
    times: dict[str, list[float]] = {mode: [] for mode in modes}
    with tempfile.TemporaryDirectory(prefix="floor-") as tmp:
        (Path(tmp) / "app.py").write_text(FLOOR_APP)
        (Path(tmp) / "specs.json").write_text(json.dumps(specs))
        port = free_port()
        server = start_server(Path(tmp), port)
        try:
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=shutil.which("chromium"), args=CHROMIUM_ARGS)
                for _ in range(repeats + 1):  # the first round pays the server's first runs: dropped
                    for mode, n in modes.items():
                        context = browser.new_context(viewport={"width": 1400, "height": 1000})
                        page = context.new_page()
                        start = time.perf_counter()
                        page.goto(f"http://127.0.0.1:{port}/?mode={mode}", wait_until="commit")
                        if n:
                            page.wait_for_function(DRAWN_JS, arg=n, timeout=60_000)
                        else:
                            page.get_by_text("empty page").wait_for(timeout=60_000)
                        times[mode].append(time.perf_counter() - start)
                        context.close()
                browser.close()
        finally:
            stop_server(server)
    return {mode: statistics.median(t[1:]) for mode, t in times.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pages", default="positions,masks,depth", help="comma-separated page files (pages/<name>.py)")
    ap.add_argument("--repeats", type=int, default=4, help="rounds per page (the first is the cold one)")
    ap.add_argument("--streamlit", action="store_true", help="also time the same specs in a bare Streamlit app")
    args = ap.parse_args(argv)
    if not shutil.which("chromium"):
        print("needs Debian's chromium (apt-get install chromium)")
        return 1
    print(f"Plotly alone, drawing each page's charts in chromium (ms; cold = first round of a new page, "
          f"warm = median of the other {max(1, args.repeats - 1)})")
    print(f"{'page':<12}{'charts':>7}{'spec KB':>9}{'cold':>8}{'warm':>8}{'cold, no automargin':>21}{'warm, no automargin':>21}")
    all_specs = {}
    for page in args.pages.split(","):
        specs = all_specs[page] = page_specs(page.strip())
        times = draw_times(specs, max(1, args.repeats))
        kb = sum(len(json.dumps(s)) for s in specs) / 1024
        sent, plain = times["as sent"], times["no automargin"]
        print(f"{page:<12}{len(specs):>7}{kb:>9.0f}{sent[0]:>8.0f}{sent[1]:>8.0f}{plain[0]:>21.0f}{plain[1]:>21.0f}")
    if args.streamlit:
        print(f"\nThe same specs in a bare Streamlit app (s from the request to the last chart drawn, new browser "
              f"profile per visit, median of {max(1, args.repeats)})")
        print(f"{'page':<12}{'empty page':>11}{'first chart':>13}{'all charts':>12}{'all, theme=None':>17}")
        for page, specs in all_specs.items():
            floor = streamlit_floor(specs, max(1, args.repeats))
            print(f"{page:<12}{floor['empty']:>11.2f}{floor['one']:>13.2f}{floor['all']:>12.2f}{floor['no theme']:>17.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
