"""What skipping blocks out of sight (ui/shell/offscreen.py) saves when a page opens in chromium: the rule
on against the same rule switched off in the browser, in turns on one server, one table.

    python bench/offscreen.py                              # the long pages, reached from the sidebar
    python bench/offscreen.py --how load                   # each visit a new tab of one browser (scripts cached)
    python bench/offscreen.py --pages Positions,Masks --repeats 10

Starts `streamlit run serve.py` as bench/first_visit.py does, opens Home, visits every page once
(so nothing measured is a first visit since the server started), then visits each page `--repeats`
times with the rule and as many without, alternating which goes first. "off" adds a style to the
browser that sets the top-level blocks back to `content-visibility: visible`; everything else, the
server included, is the same. A visit is timed as in bench/first_visit.py (to the last change of the
finished page). Prints medians and ranges in seconds, and the ratio on/off; asserts nothing.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from first_visit import (CHROMIUM_ARGS, ROOT, start_server, stop_server, time_click,  # noqa: E402
                         wait_settled)

from deploy.cluster import free_port  # noqa: E402

from ui.shell.offscreen import RULE_OFF  # noqa: E402

SET_STYLE = """(css) => { let s = document.getElementById('bench-offscreen');
  if (s) s.remove(); s = document.createElement('style'); s.id = 'bench-offscreen'; s.textContent = css;
  document.head.appendChild(s); }"""
LONG_PAGES = "Positions,Masks,Depth,Retrieval,Generation,Cost"


def by_sidebar(browser, url: str, pages: list[str], repeats: int) -> dict:
    """One tab: each visit a click on the page's sidebar link from Home, with the rule on or off."""
    tab = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
    t0 = time.perf_counter()
    tab.goto(url, wait_until="commit", timeout=120_000)
    wait_settled(tab, t0, 0.6, 120)
    times = {(p, mode): [] for p in pages for mode in ("on", "off")}
    for page in pages:  # the first visit of each page since the server started: not counted
        time_click(tab, page, page.lower(), 0.6, 120)
        time_click(tab, "Home", "", 0.6, 120)
    for r in range(repeats):
        for page in pages:
            for mode in (("on", "off") if r % 2 == 0 else ("off", "on")):
                tab.evaluate(SET_STYLE, "" if mode == "on" else RULE_OFF)
                times[(page, mode)].append(time_click(tab, page, page.lower(), 0.6, 120))
                time_click(tab, "Home", "", 0.6, 120)
    return times


def by_new_tab(browser, url: str, pages: list[str], repeats: int) -> dict:
    """Each visit a new tab (one browser profile each for on and off, scripts cached after the first)."""
    contexts = {mode: browser.new_context(viewport={"width": 1400, "height": 1000}) for mode in ("on", "off")}
    contexts["off"].add_init_script("document.addEventListener('DOMContentLoaded', () => (%s)(%r));"
                                    % (SET_STYLE, RULE_OFF))
    times = {(p, mode): [] for p in pages for mode in ("on", "off")}

    def visit(mode: str, page: str) -> float:
        tab = contexts[mode].new_page()
        try:
            t0 = time.perf_counter()
            tab.goto(f"{url}{page.lower()}", wait_until="commit", timeout=120_000)
            return wait_settled(tab, t0, 0.6, 120)
        finally:
            tab.close()

    for page in pages:  # not counted: first visits, and each profile's first load of the app's scripts
        visit("on", page), visit("off", page)
    for r in range(repeats):
        for page in pages:
            for mode in (("on", "off") if r % 2 == 0 else ("off", "on")):
                times[(page, mode)].append(visit(mode, page))
    for context in contexts.values():
        context.close()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", default=LONG_PAGES, help="comma-separated page titles as in the sidebar")
    parser.add_argument("--repeats", type=int, default=6)
    parser.add_argument("--how", choices=("sidebar", "load"), default="sidebar",
                        help="sidebar: click the page's link in an open app; load: a new tab per visit")
    args = parser.parse_args()
    exe = shutil.which("chromium")
    if exe is None:
        raise SystemExit("Debian chromium is not installed: apt-get install -y chromium")
    from playwright.sync_api import sync_playwright

    pages = args.pages.split(",")
    port = free_port()
    server = start_server(ROOT, port)
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=exe, headless=True, args=CHROMIUM_ARGS)
            measure = by_sidebar if args.how == "sidebar" else by_new_tab
            times = measure(browser, f"http://127.0.0.1:{port}/", pages, args.repeats)
            browser.close()
    finally:
        stop_server(server)
    print(f"blocks out of sight skipped (on) or not (off); {args.how}; {args.repeats} visits each, in turns; "
          "seconds to the last element drawn, median (range)")
    print(f"{'page':12} {'off':>18} {'on':>18} {'on/off':>7}")
    print("-" * 58)
    for page in pages:
        off, on = times[(page, "off")], times[(page, "on")]
        cell = lambda xs: f"{statistics.median(xs):.2f} ({min(xs):.2f}-{max(xs):.2f})"  # noqa: E731
        print(f"{page:12} {cell(off):>18} {cell(on):>18} {statistics.median(on) / statistics.median(off):6.2f}x")


if __name__ == "__main__":
    main()
