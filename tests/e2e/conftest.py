"""Real-browser fixtures: `streamlit run serve.py` (app.py, warming up from the server's start) on 127.0.0.1 and Debian's chromium via Playwright.

The server is started and stopped (by PID) by the session fixture; readiness comes from
/_stcore/health and a finished script run from the app's data-test-script-state attribute.
Screenshots go to $GLASSBOX_SCREENSHOTS (default test-artifacts/screenshots).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = Path(os.environ.get("GLASSBOX_SCREENSHOTS", ROOT / "test-artifacts" / "screenshots"))
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
RUN_DONE = "[data-testid='stApp'][data-test-script-state='notRunning']"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def streamlit_server(extra_env: dict | None = None, log_path: Path | None = None, entry: str = "serve.py"):
    """Start `streamlit run serve.py` (or `entry`) on a free 127.0.0.1 port; yield its URL; stop it by PID.
    `extra_env` is added to its environment; `log_path`, if given, receives its output."""
    port = _free_port()
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="33554432", MALLOC_TRIM_THRESHOLD_="4294967296", **(extra_env or {}))
    log = open(log_path, "wb") if log_path else None  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", entry, "--server.headless", "true",
         "--server.address", "127.0.0.1", "--server.port", str(port),
         "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none"],
        cwd=ROOT, stdout=log or subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    try:
        while True:
            try:
                with urllib.request.urlopen(url + "/_stcore/health", timeout=2) as r:
                    if r.read().decode().strip() == "ok":
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                out = proc.stdout.read().decode(errors="replace") if proc.stdout else log_path.read_text(errors="replace")
                pytest.fail(f"streamlit did not become healthy:\n{out[-3000:]}")
            time.sleep(0.25)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if log:
            log.close()


@pytest.fixture(scope="session")
def server_url(tmp_path_factory, browser):
    """The session's server, its home page opened once in the browser: the very first script run of a fresh
    server uses Streamlit's old pages/-folder mode (app.py does not run: no sections, no wide layout) until
    st.navigation has been called once, so every test sees the app as every later visitor does, whichever
    test file comes first (with pytest-xdist each worker has its own server)."""
    # Its output goes to a file: a pipe nobody reads would stop the server once 64 KB of log filled it.
    with streamlit_server(log_path=tmp_path_factory.mktemp("server") / "streamlit.log") as url:
        warm = browser.new_page()
        try:
            open_page(warm, url, timeout=180_000)
        finally:
            warm.close()
        yield url


@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import sync_playwright

    exe = shutil.which("chromium")
    if exe is None:
        pytest.fail("Debian chromium is not installed: apt-get install -y chromium")
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=exe, headless=True, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    p = context.new_page()
    yield p
    context.close()


def wait_for_run(page, timeout: float = 90_000, last: str | None = None) -> None:
    """Wait until the script run finished (and `last`, the page's final element, is drawn)."""
    page.wait_for_selector("[data-testid='stApp']", timeout=timeout)
    page.wait_for_function(
        "() => { const a = document.querySelector(\"[data-testid='stApp']\");"
        " return a && a.getAttribute('data-test-script-state') === 'notRunning'; }",
        timeout=timeout,
    )
    if last:
        page.wait_for_selector(last, timeout=timeout)


RUNS_STARTED = """() => { const a = document.querySelector("[data-testid='stApp']"); if (!a) return 0;
  if (a.__glassboxRuns === undefined) { a.__glassboxRuns = 0;
    new MutationObserver(() => { if (a.getAttribute('data-test-script-state') === 'running') a.__glassboxRuns++; })
      .observe(a, {attributes: true, attributeFilter: ['data-test-script-state']}); }
  return a.__glassboxRuns; }"""


def runs_started(page) -> int:
    """Script runs (whole or fragment) that started since this was first called on the page: a test that sends a
    keypress learns from it whether the press reached the app, instead of pressing again and undoing it."""
    return int(page.evaluate(RUNS_STARTED))


def pick_option(page, select, option, tries: int = 3) -> None:
    """Open the select box `select` (a locator) and click `option` (a locator of the list's option). While a
    long page is still drawing its charts, the box can move under the pointer and its list close again as it
    opens; a student clicks again, and so does this (up to `tries` times)."""
    for attempt in range(tries):
        select.click()
        try:
            option.click(timeout=5_000)
            return
        except PlaywrightTimeout:
            if attempt == tries - 1:
                raise
            page.keyboard.press("Escape")
            page.wait_for_timeout(500)


def open_page(page, url: str, timeout: float = 120_000, last: str | None = None) -> None:
    page.goto(url, wait_until="commit", timeout=timeout)
    # The first render pays the torch import; wait for the run to start and finish.
    page.wait_for_selector("[data-testid='stApp']", timeout=timeout)
    # Something drawn in the main column: the run has begun (before it, the app reads "not running" too, and on a
    # loaded machine the first run can start more than a moment after the page).
    page.wait_for_selector("[data-testid='stMain'] [data-testid='stElementContainer']", state="attached",
                           timeout=timeout)
    page.wait_for_timeout(300)
    wait_for_run(page, timeout, last)


def assert_no_exception(page) -> None:
    errors = page.locator("[data-testid='stException']")
    assert errors.count() == 0, (errors.first.text_content() or "")[:2000]  # laid out or not


def screenshot(page, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def fit_viewport_to_page(page, width: int = 1400, cap: int = 20_000, least: int = 1000, pad: int = 40) -> int:
    """Grow the window to the main column's height (Streamlit scrolls inside it, so a full-page shot
    would stop at the first screen); returns that height.

    Blocks out of sight count with an estimated height until drawn (ui/shell/offscreen.py), so the height
    read before growing is not yet the real one: grow, let the new blocks draw, read again, until
    it holds."""
    height = -1
    for _ in range(6):
        new = page.evaluate("() => { const m = document.querySelector(\"[data-testid='stMain']\");"
                            " return m ? m.scrollHeight : document.body.scrollHeight; }")
        if new == height:
            break
        height = new
        page.set_viewport_size({"width": width, "height": int(max(least, min(height + pad, cap)))})
        page.wait_for_timeout(800)  # blocks now in sight draw; plotly charts redraw at the new size
    return height


def tall_screenshot(page, name: str, last: str | None = None) -> Path:
    """A screenshot of the whole page: the window grown to the content's height first."""
    fit_viewport_to_page(page)
    page.wait_for_timeout(700)  # plotly charts redraw at the new size
    wait_for_run(page, last=last)
    page.wait_for_timeout(1000)
    path = screenshot(page, name)
    page.set_viewport_size({"width": 1400, "height": 1000})
    return path


_NTH_PLOT = ("(i) => { if (typeof i === 'string') return document.querySelector('.st-key-' + i + ' .js-plotly-plot');"
             " const c = document.querySelectorAll(\"[data-testid='stPlotlyChart']\")[i];"
             " return c ? c.querySelector('.js-plotly-plot') : null; }")


def plotly_data(page, index: int | str = 0, timeout: float = 60_000):
    """The `data` of the index-th plotly chart on the page, in page order (as the browser holds it), or of the
    chart whose Streamlit key gives the class `st-key-<index>` when `index` is a string.

    A chart's element appears only once its plot is mounted, and plots mount in no fixed order, even after the
    run is over (CI once found the Heads page's second chart first): while the page is still drawing, or
    while a rerun redraws it, the n-th chart need not be the one meant. A key names one chart for sure.
    """
    page.wait_for_function(
        f"(i) => {{ const g = ({_NTH_PLOT})(i); return !!(g && g.data && g.data.length); }}",
        arg=index, timeout=timeout,
    )
    return page.evaluate(
        f"(i) => {{ const g = ({_NTH_PLOT})(i);"
        " return g ? JSON.parse(JSON.stringify(g.data, (k, v) => ArrayBuffer.isView(v) ? Array.from(v) : v)) : null; }",
        index,
    )


def drawn_heatmaps(page) -> list[tuple[str, object]]:
    """(title, z of the first trace) of every heatmap chart drawn right now, in page order.

    Reads the page once and waits for nothing: while a section reruns, a chart counted a moment ago
    can be replaced or gone, so a loop that polls this is safer than asking for chart number i.
    """
    import numpy as np

    from tests.app.conftest import decode_array

    found = page.evaluate(
        "() => Array.from(document.querySelectorAll(\"[data-testid='stPlotlyChart'] .js-plotly-plot\"))"
        ".filter(g => g.data && g.data.length && g.data[0].type === 'heatmap' && g.data[0].z)"
        ".map(g => JSON.parse(JSON.stringify({title: (g.layout && g.layout.title && g.layout.title.text) || '',"
        " z: g.data[0].z}, (k, v) => ArrayBuffer.isView(v) ? Array.from(v) : v)))"
    )
    return [(item["title"], np.asarray(decode_array(item["z"]), dtype=float)) for item in found]


def wait_for_charts_to_settle(page, quiet_ms: int = 2_000, timeout_ms: int = 60_000) -> int:
    """Wait until the number of drawn plotly charts has not changed for `quiet_ms` (plots mount in no fixed
    order, some after the run is over); returns that number."""
    count, still, step = -1, 0, 250
    for _ in range(timeout_ms // step):
        now = page.evaluate("() => document.querySelectorAll(\"[data-testid='stPlotlyChart'] .js-plotly-plot\").length")
        still = still + step if now == count else 0
        count = now
        if still >= quiet_ms:
            return count
        page.wait_for_timeout(step)
    raise AssertionError(f"the page's charts kept changing for {timeout_ms / 1000:.0f} s")


def wait_for_charts(page, count: int, timeout: float = 120_000) -> None:
    """Wait until at least `count` plotly charts are drawn (they can lag the script's last element)."""
    page.wait_for_function(
        "(n) => document.querySelectorAll(\"[data-testid='stPlotlyChart'] .js-plotly-plot\").length >= n",
        arg=count, timeout=timeout,
    )


def chart_z(page, index: int | str = 0):
    """The z array of the index-th plotly chart as the browser holds it (base64 arrays decoded)."""
    import numpy as np

    from tests.app.conftest import decode_array

    data = plotly_data(page, index)
    assert data, f"no plotly chart number {index} on the page"
    if "z" not in data[0]:  # seen once in CI: the chart read mid-redraw; wait for its heatmap
        try:
            page.wait_for_function(
                f"(i) => {{ const g = ({_NTH_PLOT})(i); return !!(g && g.data && g.data[0] && g.data[0].z); }}",
                arg=index, timeout=30_000,
            )
        except Exception as exc:  # noqa: BLE001 - report what the chart holds instead
            raise AssertionError(f"chart {index} has no heatmap: first trace keys {sorted(data[0])}") from exc
        data = plotly_data(page, index)
    return np.asarray(decode_array(data[0]["z"]), dtype=float)


def wait_for_z_change(page, before, index: int | str = 0, timeout_ms: int = 90_000):
    """Wait until chart `index` shows a different z than `before` (a rerun replaced the figure)."""
    import numpy as np

    step = 250
    for _ in range(timeout_ms // step):
        wait_for_run(page)
        now = chart_z(page, index)
        if now.shape != before.shape or not np.allclose(now, before):
            return now
        page.wait_for_timeout(step)
    raise AssertionError(f"chart {index} did not change")
