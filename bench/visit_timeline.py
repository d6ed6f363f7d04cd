"""Where a page's visit in a new tab spends its time: the phases in the browser, and its JavaScript by file.

    python bench/visit_timeline.py                          # Home, Attention, Positions, Masks, Train
    python bench/visit_timeline.py --pages positions --runs 3 --profile

bench/first_visit.py gives one number per visit (seconds to the last element). This splits a visit
into what a student waits for, one after the other, each timed in the page itself (performance.now(),
from the request): the page shell (its HTML, scripts and style sheets until DOMContentLoaded), the
websocket to the server opened, the page's title shown, the script's run ended on the
server (the app's state leaves "running"), and the last chart drawn (the last change of the page, as
first_visit counts it). A MutationObserver installed before the page's own scripts records
first_visit's snapshot of the page at every change, so a long stretch of the browser's
own work shows as a gap between two records rather than a missed poll.

`--profile` also samples the tab's JavaScript (Chrome's CPU profiler, 1 ms) and prints the busy time by
the file it ran in: Plotly's chunk, the rest of Streamlit's frontend, and the browser's own work
("(program)": style, layout, paint, compiling; "(garbage collector)"). The profiler slows a visit a
little, so its phases are printed apart from the unprofiled ones.

Starts `streamlit run serve.py` on a free 127.0.0.1 port as bench/first_visit.py does, leaves it `--wait`
seconds (its start-up warm-up finishes), opens every page once so that the server has computed it, then
times `--runs` new tabs per page, each in a new browser profile (nothing cached), and prints medians.
Prints tables; asserts nothing (these machines are shared).
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.first_visit import CHROMIUM_ARGS, SNAPSHOT_JS, is_done, page_list, start_server, stop_server  # noqa: E402
from deploy.cluster import free_port  # noqa: E402

DEFAULT_PAGES = "home,attention,positions,masks,train"
# Installed before the page's own scripts: at every change of the page, first_visit's snapshot of it (the same
# definition of a change: the elements under the main area counted, so a chart still drawing is one) with its
# time, in window.__timeline; and the moment the websocket opened. The recorder's own work runs in the tab it
# measures; its last change came out as first_visit's within the noise (Positions 4.11-4.28 s / 4.2-4.4 s).
RECORDER_JS = """(() => {
  const snapshot = %s;
  const log = window.__timeline = [];
  let last = '';
  const record = () => {
    const snap = snapshot();
    const key = JSON.stringify(snap);
    if (key !== last) { last = key; log.push(Object.assign({t: performance.now()}, snap)); }
  };
  new MutationObserver(record).observe(document, {subtree: true, childList: true, attributes: true});
  const Socket = window.WebSocket;
  window.WebSocket = function (...args) {
    const ws = new Socket(...args);
    ws.addEventListener('open', () => { if (!window.__socketOpen) window.__socketOpen = performance.now(); });
    return ws;
  };
  window.WebSocket.prototype = Socket.prototype;
  Object.assign(window.WebSocket, {CONNECTING: 0, OPEN: 1, CLOSING: 2, CLOSED: 3});
})();""" % SNAPSHOT_JS
READ_JS = """() => ({now: performance.now(), log: window.__timeline || [], socket: window.__socketOpen || null,
  shell: performance.getEntriesByType('navigation')[0].domContentLoadedEventEnd,
  plotly: (performance.getEntriesByType('resource').find(e => e.name.includes('/PlotlyChart.')) || {}).responseEnd || null})"""
LATEST_JS = "() => { const log = window.__timeline || []; return [log.length, log[log.length - 1]]; }"
PHASES = ("shell", "socket", "title shown", "run ended", "Plotly code", "last change")


def phases(read: dict) -> dict[str, float]:
    """Seconds from the request to each phase of one visit (nan where it did not happen)."""
    log = read["log"]
    title = next((r["t"] for r in log if r["title"] > 0), None)
    ran = [i for i, r in enumerate(log) if r["state"] == "running"]
    ended = next((r["t"] for r in log[ran[0]:] if r["state"] == "notRunning"), None) if ran else None
    last = log[-1]["t"] if log and is_done(log[-1]) else None  # not finished (timed out): no last change
    ms = {"shell": read["shell"], "socket": read["socket"], "title shown": title, "run ended": ended,
          "Plotly code": read["plotly"], "last change": last}
    return {name: (value / 1000 if value is not None else float("nan")) for name, value in ms.items()}


def settle(page, settle_s: float, timeout: float) -> None:
    """Wait until the page is finished and its records have not changed for `settle_s` seconds."""
    t0, count, since = time.perf_counter(), -1, time.perf_counter()
    while time.perf_counter() - t0 < timeout:  # only the count and the last record: a light poll
        now_count, latest = page.evaluate(LATEST_JS)
        if now_count != count:
            count, since = now_count, time.perf_counter()
        elif latest and is_done(latest) and time.perf_counter() - since >= settle_s:
            return
        page.wait_for_timeout(50)


def js_by_file(profile: dict, now_ms: float, until_ms: float) -> collections.Counter:
    """Milliseconds of samples by the file (or the browser's own category) each sample ran in, counting
    the samples taken up to `until_ms` of the page's clock; the profile ended at `now_ms` of that clock."""
    nodes = {n["id"]: n["callFrame"] for n in profile["nodes"]}
    spent = collections.Counter()
    at = profile["startTime"]  # microseconds, the profiler's clock
    for sample, delta in zip(profile["samples"], profile["timeDeltas"]):
        at += delta
        if now_ms - (profile["endTime"] - at) / 1000 > until_ms:
            break
        frame = nodes[sample]
        name = frame["url"].rsplit("/", 1)[-1] or frame["functionName"]
        kind = ("Plotly's chunk" if name.startswith("PlotlyChart.") else
                name if name.startswith("(") else "Streamlit's frontend")
        spent[kind] += delta / 1000
    return spent


def visit(browser, url: str, settle_s: float, timeout: float, profile: bool):
    """One visit in a new browser profile: its phases, and with `profile` its JavaScript by file."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    context.add_init_script(RECORDER_JS)
    page = context.new_page()
    try:
        cdp = None
        if profile:
            cdp = context.new_cdp_session(page)
            cdp.send("Profiler.enable")
            cdp.send("Profiler.setSamplingInterval", {"interval": 1000})
            cdp.send("Profiler.start")
        page.goto(url, wait_until="commit", timeout=timeout * 1000)
        settle(page, settle_s, timeout)
        read = page.evaluate(READ_JS)
        times = phases(read)
        if cdp is None:
            return times, None
        profile = cdp.send("Profiler.stop")["profile"]  # straight after READ_JS: it ended at read["now"]
        return times, js_by_file(profile, read["now"], 1000 * times["last change"])
    finally:
        context.close()


def print_phases(title: str, rows: dict[str, list[dict]]) -> None:
    print(title)
    print(f"{'page':12}" + "".join(f"{name:>15}" for name in PHASES))
    for page, runs in rows.items():
        cells = [statistics.median(run[name] for run in runs) for name in PHASES]
        print(f"{page:12}" + "".join(f"{c:15.2f}" for c in cells))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout to serve")
    parser.add_argument("--pages", default=DEFAULT_PAGES, help="comma-separated url paths (home for Home)")
    parser.add_argument("--runs", type=int, default=2, help="new tabs per page (medians are printed)")
    parser.add_argument("--wait", type=float, default=8.0, help="seconds to leave the server idle after it is up")
    parser.add_argument("--settle", type=float, default=0.6, help="seconds without change that end a visit")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds before a visit is given up")
    parser.add_argument("--profile", action="store_true", help="also sample each tab's JavaScript, by file")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs takes 1 or more")
    root = args.root.resolve()
    pages = page_list(root, set(args.pages.split(",")))
    if not pages:
        parser.error(f"no page of {root.name}'s ui/shell/nav.py matches {args.pages!r}")
    exe = shutil.which("chromium")
    if exe is None:
        raise SystemExit("Debian chromium is not installed: apt-get install -y chromium")
    from playwright.sync_api import sync_playwright

    port = free_port()
    server = start_server(root, port)
    plain, profiled, spent = {}, {}, {}
    try:
        time.sleep(args.wait)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=exe, headless=True, args=CHROMIUM_ARGS)
            urls = {title: f"http://127.0.0.1:{port}/{path}" for title, path in pages}
            for url in urls.values():  # the server computes every page once; these are not timed
                visit(browser, url, args.settle, args.timeout, profile=False)
            for _ in range(args.runs):
                for title, url in urls.items():
                    plain.setdefault(title, []).append(visit(browser, url, args.settle, args.timeout, False)[0])
                    if args.profile:
                        times, by_file = visit(browser, url, args.settle, args.timeout, True)
                        profiled.setdefault(title, []).append(times)
                        spent.setdefault(title, []).append(by_file)
            browser.close()
    finally:
        stop_server(server)
    print(f"visits in a new tab to {root.name}/serve.py ({os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}); "
          f"seconds from the request, medians of {args.runs}; every tab a new browser profile")
    print_phases("phases", plain)
    if args.profile:
        print()
        print_phases("phases with the profiler on", profiled)
        kinds = ("Plotly's chunk", "Streamlit's frontend", "(program)", "(garbage collector)")
        print()
        print("the tab's main thread until the last change, ms (medians): JavaScript by file, the browser's "
              "own work, and all of it against the time to the last change")
        print(f"{'page':12}" + "".join(f"{k:>22}" for k in kinds) + f"{'busy / visit':>14}")
        for title, runs in spent.items():
            busy = statistics.median(sum(v for k, v in r.items() if k != "(idle)") for r in runs)
            visit_ms = 1000 * statistics.median(run["last change"] for run in profiled[title])
            print(f"{title:12}" + "".join(f"{statistics.median(r[k] for r in runs):22.0f}" for k in kinds)
                  + f"{busy / visit_ms:14.0%}")
    print("shell: DOMContentLoaded; socket: the websocket to the server open; title shown: the page's title drawn; "
          "run ended: the script's state left running; Plotly code: its chunk downloaded (a page without charts "
          "fetches it once its run has ended, ui/shell/preload.py); last change: the page finished, as "
          "bench/first_visit.py counts it")

if __name__ == "__main__":
    main()
