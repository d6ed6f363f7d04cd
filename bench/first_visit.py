"""How long each page takes to appear in a real browser: the first visit after a server start, and the next.

    python bench/first_visit.py                     # every page in ui/shell/nav.py, one table
    python bench/first_visit.py --root /tmp/base    # the same bench against another checkout
    python bench/first_visit.py --pages masks,depth
    python bench/first_visit.py --same-browser      # every tab in one browser that has the app's scripts cached
    python bench/first_visit.py --navigate          # one tab: open Home, then click each page in the sidebar
    python bench/first_visit.py --navigate --served # the same, on a server that served every page once before
    python bench/first_visit.py --entry app.py      # served as `streamlit run app.py`: the warm-up waits for a visit
    python bench/first_visit.py --wait 10           # the server left idle 10 s after it is up (a teacher's start)
    python bench/first_visit.py --network 20,20     # every tab on a 20 Mbit/s network with 20 ms latency
    python bench/first_visit.py --server-env GLASSBOX_COMPRESS_STATIC=0   # Streamlit's code sent uncompressed

Starts `streamlit run serve.py` on a free 127.0.0.1 port (stopped by PID), waits until it answers
/_stcore/health (the server is up; no page has run yet; serve.py's warm-up has started), then opens every page in Debian's
chromium through Playwright, one tab at a time, as one new visitor would: first every page once
("cold": the first visit of that page since the server started; the first page also pays the
torch import), then every page again ("warm", a new tab). A visit is timed from the request to
the moment the page's last element was drawn: the app's `data-test-script-state` is notRunning,
no spinner or skeleton is showing, every chart is drawn, and nothing in the page changed for
`--settle` seconds (the time reported is the last change, not the end of that wait).
With `--navigate` the visits are what a student in the app does: one tab opens Home, then every
page is reached by clicking its link in the sidebar (no new page load: the shell and the chart
library stay loaded), timed from the click to the new page's last element; cold and warm as above.
Prints one table; it asserts nothing (these machines are shared).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the project root, for deploy/
from deploy.cluster import free_port, wait_healthy  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
TARGET_S = 2.0

# What the page shows right now, as one comparable snapshot (see `time_visit`).
SNAPSHOT_JS = """() => {
  const app = document.querySelector("[data-testid='stApp']");
  const main = document.querySelector("[data-testid='stMain']");
  const q = (s) => document.querySelectorAll(s).length;
  return {
    state: app ? app.getAttribute('data-test-script-state') : null,
    nodes: main ? main.querySelectorAll('*').length : 0,
    busy: q("[data-testid='stSpinner']") + q("[data-testid='stSkeleton']"),
    charts: q("[data-testid='stPlotlyChart']"),
    drawn: q("[data-testid='stPlotlyChart'] .js-plotly-plot .main-svg"),
    title: q("[data-testid='stMain'] h1"),
    heading: (document.querySelector("[data-testid='stMain'] h1") || {}).textContent || "",
    path: location.pathname,
  };
}"""


def start_server(root: Path, port: int, entry: str = "serve.py", extra_env: dict | None = None) -> subprocess.Popen:
    """`streamlit run serve.py` (or `entry`) in `root`, as tests/e2e/conftest.py starts it; waits for /_stcore/health."""
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="33554432", MALLOC_TRIM_THRESHOLD_="4294967296", **(extra_env or {}))
    if not (root / entry).exists():  # a checkout from before serve.py (--root)
        entry = "app.py"
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", entry, "--server.headless", "true",
         "--server.address", "127.0.0.1", "--server.port", str(port),
         "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none"],
        cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
    )
    try:
        wait_healthy(f"http://127.0.0.1:{port}", proc, timeout=60, log=Path(os.devnull))
    except RuntimeError:
        stop_server(proc)
        raise SystemExit("streamlit did not become healthy") from None
    return proc


def stop_server(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def is_done(snap: dict) -> bool:
    """The run finished and everything it drew is on screen."""
    return (snap["state"] == "notRunning" and snap["title"] > 0 and snap["busy"] == 0
            and snap["drawn"] >= snap["charts"])


def wait_settled(page, t0: float, settle: float, timeout: float, arrived=lambda snap: True) -> float:
    """Seconds from `t0` to the last change of `page` once it is finished (and `arrived` holds), or nan
    after `timeout`."""
    last_change, last_snap = time.perf_counter(), None
    while True:
        snap = page.evaluate(SNAPSHOT_JS)
        now = time.perf_counter()
        if snap != last_snap:
            last_change, last_snap = now, snap
        elif arrived(snap) and is_done(snap) and now - last_change >= settle:
            return last_change - t0
        if now - t0 > timeout:
            return float("nan")
        page.wait_for_timeout(40)


def limit_network(page, network: tuple[float, float] | None) -> None:
    """Give `page` a network of `network` = (megabits per second down and up, milliseconds of latency), as
    Chromium's developer tools do (the bytes on the wire count: compressed ones when the server compresses)."""
    if network is None:
        return
    mbit, latency_ms = network
    cdp = page.context.new_cdp_session(page)
    cdp.send("Network.enable")
    cdp.send("Network.emulateNetworkConditions", {"offline": False, "latency": latency_ms,
                                                  "downloadThroughput": mbit * 1e6 / 8, "uploadThroughput": mbit * 1e6 / 8})


def time_visit(browser, url: str, settle: float, timeout: float, shared=None, network=None) -> float:
    """Seconds from the request to the last change of a finished page, in a fresh tab: of a new browser
    profile (nothing cached), or with `shared`, a new tab of that browser context (its cache kept)."""
    context = shared or browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    limit_network(page, network)
    try:
        t0 = time.perf_counter()
        page.goto(url, wait_until="commit", timeout=timeout * 1000)
        return wait_settled(page, t0, settle, timeout)
    finally:
        page.close() if shared else context.close()


def time_click(page, title: str, path: str, settle: float, timeout: float) -> float:
    """Seconds from clicking `title` in the sidebar of an app already open in `page` to the last change
    of the page it leads to: the URL is that page's, its title is a new one, and it is finished."""
    before = page.evaluate(SNAPSHOT_JS)["heading"]
    link = page.locator("[data-testid='stSidebarNav']").get_by_role("link", name=title, exact=True)
    t0 = time.perf_counter()
    link.click()
    return wait_settled(page, t0, settle, timeout, lambda snap: snap["heading"] != before
                        and snap["path"].rstrip("/") == f"/{path}".rstrip("/"))


def navigate(browser, home_url: str, pages, settle: float, timeout: float, pause: float = 0.0,
             network=None) -> tuple[dict, dict]:
    """One tab, as a student in the app: open Home (its cold figure is that page load), wait `pause`
    seconds, then reach every page by its sidebar link, twice (cold, then warm). Returns {title: seconds}
    for each pass."""
    tab = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
    limit_network(tab, network)
    t0 = time.perf_counter()
    tab.goto(home_url, wait_until="commit", timeout=timeout * 1000)
    opened = wait_settled(tab, t0, settle, timeout)
    tab.wait_for_timeout(pause * 1000)
    cold, warm = {}, {}
    for times in (cold, warm):
        for title, path in pages:
            if not path and times is cold:
                times[title] = opened
            else:
                times[title] = time_click(tab, title, path, settle, timeout)
    return cold, warm


def page_list(root: Path, only: set[str] | None) -> list[tuple[str, str]]:
    """(title, url_path) of every page of `root`'s ui/shell/nav.py whose file exists."""
    sys.path.insert(0, str(root))
    from ui.shell.nav import PAGES

    return [(p.title, p.url_path) for p in PAGES
            if p.exists and (only is None or (p.url_path or "home") in only)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout whose app.py to serve")
    parser.add_argument("--pages", default="", help="comma-separated url paths (home for the home page)")
    parser.add_argument("--settle", type=float, default=0.6, help="seconds without change that end a visit")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds before a visit counts as failed")
    parser.add_argument("--same-browser", action="store_true",
                        help="every visit in a new tab of one browser profile that opened Home first (the "
                             "app's scripts cached, as for a student who opened the app before), not a new one")
    parser.add_argument("--navigate", action="store_true",
                        help="one tab: open Home, then reach every page by clicking its sidebar link")
    parser.add_argument("--pause", type=float, default=0.0,
                        help="with --navigate: seconds on Home before the first click (the warm-up that the first "
                             "visit started runs meanwhile)")
    parser.add_argument("--served", action="store_true",
                        help="before the timed visits, another browser opens every page once: the server has "
                             "served each page before (a class's second student), the timed browser has not")
    parser.add_argument("--wait", type=float, default=0.0,
                        help="seconds to leave the healthy server idle before the first visit")
    parser.add_argument("--network", default="",
                        help="MBIT,MS: every tab on a network of MBIT megabits per second with MS milliseconds of "
                             "latency (a school's Wi-Fi: 20,20), as Chromium's developer tools throttle")
    parser.add_argument("--server-env", action="append", default=[],
                        help="KEY=VALUE for the server's environment, e.g. GLASSBOX_COMPRESS_STATIC=0")
    parser.add_argument("--entry", default="serve.py",
                        help="the script to serve: serve.py (warm-up from the server's start) or app.py (from the first visit)")
    args = parser.parse_args()
    root = args.root.resolve()
    try:
        network = tuple(float(x) for x in args.network.split(",")) if args.network else None
    except ValueError:
        parser.error(f"--network takes MBIT,MS (two numbers), not {args.network!r}")
    if network is not None and (len(network) != 2 or network[0] <= 0 or network[1] < 0):
        parser.error(f"--network takes MBIT,MS: megabits per second above 0, latency of 0 ms or more, not {args.network!r}")
    if any("=" not in item for item in args.server_env):
        parser.error("--server-env takes KEY=VALUE")
    server_env = dict(item.split("=", 1) for item in args.server_env)
    entry = args.entry if (root / args.entry).exists() else "app.py"  # a checkout from before serve.py (--root)
    pages = page_list(root, set(args.pages.split(",")) if args.pages else None)
    exe = shutil.which("chromium")
    if exe is None:
        raise SystemExit("Debian chromium is not installed: apt-get install -y chromium")
    from playwright.sync_api import sync_playwright

    port = free_port()
    server = start_server(root, port, entry, server_env)
    cold, warm = {}, {}
    try:
        time.sleep(args.wait)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=exe, headless=True, args=CHROMIUM_ARGS)
            shared = None
            if args.served:
                for title, path in pages:
                    time_visit(browser, f"http://127.0.0.1:{port}/{path}", args.settle, args.timeout, network=network)
            if args.same_browser:
                shared = browser.new_context(viewport={"width": 1400, "height": 1000})
                time_visit(browser, f"http://127.0.0.1:{port}/", args.settle, args.timeout, shared, network)
            if args.navigate:
                cold, warm = navigate(browser, f"http://127.0.0.1:{port}/", pages, args.settle, args.timeout,
                                      args.pause, network)
            else:
                for times in (cold, warm):
                    for title, path in pages:
                        times[title] = time_visit(browser, f"http://127.0.0.1:{port}/{path}", args.settle,
                                                  args.timeout, shared, network)
            browser.close()
    finally:
        stop_server(server)
    print(f"first visits to {root.name}/{entry} "
          f"{' '.join(args.server_env)}{' network ' + args.network if network else ''} "
          f"({os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}); "
          f"seconds to the last element drawn; target <= {TARGET_S:g} s")
    print(f"{'page':12} {'cold':>7} {'warm':>7}")
    print("-" * 28)
    for title, _ in pages:
        print(f"{title:12} {cold[title]:7.2f} {warm[title]:7.2f}")
    print("cold: the first visit of that page since the server started (the first row also pays the "
          "torch import); warm: a second visit, in a new tab"
          + ("; the server had served every page once before" if args.served else "")
          + ("; one tab that opened Home, every other page reached by its sidebar link" if args.navigate
             else "; every tab in one browser profile that opened Home first (scripts cached)" if args.same_browser
             else "; every tab in a new browser profile (nothing cached)"))


if __name__ == "__main__":
    main()
