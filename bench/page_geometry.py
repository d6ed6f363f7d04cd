"""Where everything on every page is drawn, in chromium: a before/after check for restructurings that
must not move anything a student sees.

    python bench/page_geometry.py --out before.json                 # this checkout
    python bench/page_geometry.py --root /tmp/base --out before.json   # another checkout
    python bench/page_geometry.py --compare before.json             # this checkout against that file
    python bench/page_geometry.py --extra "attention?view=scale" --out before.json   # and a page at a URL state

Starts `streamlit run serve.py` (as bench/first_visit.py does), opens each page in a 1400x1000 window with
the skipping rule of ui/shell/offscreen.py switched off (so every block is laid out), waits until the page is
finished, and records every element of the main area: what it is (its Streamlit test id), its text (the
first 60 characters), its position and size in whole pixels, and the page's height. `--compare` lists
every element whose kind, text, position or size differs, and any difference in the number of elements
or the page height. Timings and other measured numbers can differ in their text between runs: a
difference in text alone is reported apart from a difference in place. It asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from first_visit import CHROMIUM_ARGS, free_port, page_list, start_server, stop_server, wait_settled  # noqa: E402
from ui.shell.offscreen import RULE_OFF  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent

# Every leaf element of the main area, with its place (page coordinates) and a short text.
ELEMENTS_JS = """() => {
  const main = document.querySelector("[data-testid='stMain']");
  const out = [];
  for (const el of main.querySelectorAll("[data-testid='stElementContainer']")) {
    const r = el.getBoundingClientRect();
    if (r.width === 0 && r.height === 0) continue;  // hidden helpers (style, script, empty)
    const inner = el.firstElementChild;
    out.push({
      kind: inner ? (inner.getAttribute('data-testid') || inner.tagName.toLowerCase()) : 'empty',
      text: (el.innerText || '').replace(/\\s+/g, ' ').trim().slice(0, 60),
      box: [Math.round(r.left + scrollX), Math.round(r.top + scrollY), Math.round(r.width), Math.round(r.height)],
    });
  }
  return {height: document.querySelector("[data-testid='stMain']").scrollHeight, elements: out};
}"""


def snapshot(root: Path, pages: list[str], settle: float, timeout: float) -> dict:
    """{page address: {height, elements}} for every page address (url path and query), each opened in a new
    tab of one browser."""
    from playwright.sync_api import sync_playwright

    port = free_port()
    server = start_server(root, port)
    result = {}
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=shutil.which("chromium"), args=CHROMIUM_ARGS)
            context = browser.new_context(viewport={"width": 1400, "height": 1000})
            for path in pages:
                page = context.new_page()
                page.goto(f"http://127.0.0.1:{port}/{path}", wait_until="commit", timeout=timeout * 1000)
                page.add_style_tag(content=RULE_OFF)
                wait_settled(page, time.perf_counter(), settle, timeout)
                page.add_style_tag(content=RULE_OFF)  # again: Streamlit may have replaced the head's styles
                page.wait_for_timeout(int(settle * 1000))
                result[path or "home"] = page.evaluate(ELEMENTS_JS)
                page.close()
            browser.close()
    finally:
        stop_server(server)
    return result


def compare(before: dict, after: dict) -> int:
    """Print every difference; return how many elements moved, resized, appeared or vanished."""
    moved = 0
    for page in sorted(set(before) | set(after)):
        a, b = before.get(page), after.get(page)
        if a is None or b is None:
            print(f"{page}: only in {'after' if a is None else 'before'}")
            moved += 1
            continue
        if a["height"] != b["height"]:
            print(f"{page}: page height {a['height']} -> {b['height']}")
            moved += 1
        if len(a["elements"]) != len(b["elements"]):
            print(f"{page}: {len(a['elements'])} -> {len(b['elements'])} elements")
        texts = 0
        for i, (x, y) in enumerate(zip(a["elements"], b["elements"])):
            if x["kind"] != y["kind"] or x["box"] != y["box"]:
                print(f"{page} #{i}: {x['kind']} {x['box']} {x['text'][:30]!r} -> {y['kind']} {y['box']} "
                      f"{y['text'][:30]!r}")
                moved += 1
            elif x["text"] != y["text"]:
                texts += 1
        n = max(len(a["elements"]), len(b["elements"]))
        moved += abs(len(a["elements"]) - len(b["elements"]))
        print(f"{page}: {n} elements, {texts} with another text in the same place")
    print(f"\n{moved} differences in place, size or count")
    return moved


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=str(ROOT), help="the checkout to serve (default: this one)")
    parser.add_argument("--out", help="write the snapshot here (JSON)")
    parser.add_argument("--compare", help="compare with this earlier snapshot")
    parser.add_argument("--pages", default="", help="comma-separated url paths (default: every page)")
    parser.add_argument("--extra", action="append", default=[],
                        help="also this page address, url path and query (e.g. 'heads?view=roles'); repeatable")
    parser.add_argument("--settle", type=float, default=1.0)
    parser.add_argument("--timeout", type=float, default=90.0)
    args = parser.parse_args()
    root = Path(args.root)
    pages = [path for _, path in page_list(root, {p for p in args.pages.split(",") if p} or None)] + args.extra
    snap = snapshot(root, pages, args.settle, args.timeout)
    if args.out:
        Path(args.out).write_text(json.dumps(snap))
    if args.compare:
        compare(json.loads(Path(args.compare).read_text()), snap)
    if not (args.out or args.compare):
        for page, s in snap.items():
            print(f"{page}: {len(s['elements'])} elements, {s['height']} px")


if __name__ == "__main__":
    main()
