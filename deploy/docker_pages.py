"""Open every page of a running Glassbox server in chromium and check what a student would see.

Used by deploy/docker_check.sh on the server inside the Docker image: each page's script run ends,
no exception is shown, its charts are drawn, and a screenshot of each page goes to
test-artifacts/docker/. Prints one line per page; exits non-zero if any page fails.

    python deploy/docker_pages.py http://127.0.0.1:8501
"""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.e2e.conftest import CHROMIUM_ARGS, assert_no_exception, open_page  # noqa: E402
from ui.shell.nav import sections  # noqa: E402

SHOTS = ROOT / "test-artifacts" / "docker"


_COUNT = """() => {
  const charts = Array.from(document.querySelectorAll("[data-testid='stPlotlyChart'], [data-testid='stVegaLiteChart']"));
  return [charts.length, charts.filter(c => c.querySelector('.main-svg, canvas, svg')).length];
}"""


def settled_charts(page, timeout: float = 60.0) -> tuple[int, int]:
    """(chart elements, charts drawn) once every chart is drawn and the count held for 2 s: charts arrive
    after the script's last element (their drawing code loads on first use), so one look is too early."""
    deadline, last, steady = time.monotonic() + timeout, None, 0
    while time.monotonic() < deadline:
        charts, drawn = page.evaluate(_COUNT)
        steady = steady + 1 if (charts, drawn) == last and drawn >= charts else 0
        if steady >= (4 if charts else 8):  # no chart yet: wait longer, their code may still be loading
            return charts, drawn
        last = (charts, drawn)
        page.wait_for_timeout(500)
    return last or (0, 0)


def check_pages(url: str) -> list[str]:
    """Open each listed page once (one browser, a new context per page); return the failures."""
    from playwright.sync_api import sync_playwright

    failures: list[str] = []
    SHOTS.mkdir(parents=True, exist_ok=True)
    pages = [p for group in sections().values() for p in group if p.exists]
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=shutil.which("chromium"), headless=True, args=CHROMIUM_ARGS)
        for info in pages:
            context = browser.new_context(viewport={"width": 1400, "height": 1000})
            page = context.new_page()
            start = time.monotonic()
            try:
                open_page(page, f"{url}/{info.url_path}")
                assert_no_exception(page)
                charts, drawn = settled_charts(page)
                if drawn < charts:
                    raise AssertionError(f"{charts} chart elements, {drawn} drawn")
                page.screenshot(path=str(SHOTS / f"{info.url_path or 'home'}.png"))
                print(f"{info.title:<11} ok   {time.monotonic() - start:5.1f} s  {charts:2d} charts")
            except Exception as exc:  # one page's failure is reported, the others still checked
                failures.append(f"{info.title}: {str(exc)[:300]}")
                print(f"{info.title:<11} FAIL {exc!s:.300}")
            finally:
                context.close()
        browser.close()
    return failures


if __name__ == "__main__":
    failed = check_pages(sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8501")
    sys.exit(1 if failed else 0)
