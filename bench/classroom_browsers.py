"""Real Chromium pages for bench/classroom.py: open K pages at once and time each to its finished state.

Run by the classroom harness as a subprocess (Playwright's sync and async APIs do not mix with the
gevent-patched standard library that Locust needs). Debian's chromium through Playwright, never
`playwright install`. Each job is one page in its own browser context (its own Streamlit session),
opened with `wait_until="commit"`; "finished" is the app's `data-test-script-state="notRunning"`
once the page's title (every page starts with st.title) is drawn. The pages stay open for --hold
seconds beside the simulated students, then everything closes. Results go to --out as JSON.

    python bench/classroom_browsers.py --jobs '[{"url": "http://127.0.0.1:8501/attention"}]' --out r.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import time
from pathlib import Path

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
FINISHED = """() => {
  const app = document.querySelector("[data-testid='stApp']");
  return app && app.getAttribute('data-test-script-state') === 'notRunning'
    && document.querySelector("[data-testid='stMain'] h1") !== null;
}"""


async def open_one(browser, i: int, job: dict, timeout_s: float, hold_until: float) -> dict:
    result = {"i": i, "page": job.get("page"), "model": job.get("model"), "seconds": None, "error": None}
    context = await browser.new_context(viewport={"width": 1400, "height": 1000})
    try:
        page = await context.new_page()
        t0 = time.perf_counter()
        await page.goto(job["url"], wait_until="commit", timeout=timeout_s * 1000)
        await page.wait_for_function(FINISHED, timeout=timeout_s * 1000, polling=100)
        result["seconds"] = time.perf_counter() - t0
        result["exceptions"] = await page.locator("[data-testid='stException']").count()
        while time.perf_counter() < hold_until:  # stay open beside the students, as a tab would
            await asyncio.sleep(min(1.0, max(0.0, hold_until - time.perf_counter())))
    except Exception as exc:  # noqa: BLE001 - reported, never raised
        result["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
    finally:
        await context.close()
    return result


async def run(jobs: list[dict], timeout_s: float, hold_s: float) -> list[dict]:
    from playwright.async_api import async_playwright

    exe = shutil.which("chromium")
    if exe is None:
        return [{"i": i, **job, "error": "Debian chromium is not installed (apt-get install -y chromium)"}
                for i, job in enumerate(jobs)]
    hold_until = time.perf_counter() + hold_s
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=exe, headless=True, args=CHROMIUM_ARGS)
        try:
            return list(await asyncio.gather(*(open_one(browser, i, job, timeout_s, hold_until)
                                               for i, job in enumerate(jobs))))
        finally:
            await browser.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", required=True, help="JSON list of {url, page, model}")
    ap.add_argument("--timeout", type=float, default=120, help="seconds a page may take to finish")
    ap.add_argument("--hold", type=float, default=0, help="seconds to keep the pages open")
    ap.add_argument("--out", type=Path, help="write the results here (JSON); else print them")
    args = ap.parse_args(argv)
    jobs = json.loads(args.jobs)
    # Bounded: every wait has its own time-out, and the whole run has this one.
    results = asyncio.run(asyncio.wait_for(run(jobs, args.timeout, args.hold), args.timeout + args.hold + 60))
    text = json.dumps(results)
    if args.out:
        args.out.write_text(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
