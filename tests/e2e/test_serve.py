"""`streamlit run serve.py` warms the app up when the server starts; `streamlit run app.py` at the first visit.

The warm-up thread (ui/warmup.py) ends with one line in the server's log ("warm-up done in ... s"). Both
servers start side by side: serve.py's line must come before any browser has connected, while app.py's
must not come until a page is opened; then each serves Home.
"""

from __future__ import annotations

import re
import time
import urllib.request
from pathlib import Path

import pytest

from tests.e2e.conftest import assert_no_exception, open_page, screenshot, streamlit_server

pytestmark = pytest.mark.e2e

WARM = re.compile(r"warm-up done in [0-9.]+ s")


def wait_for_line(log: Path, pattern: re.Pattern, timeout: float) -> float:
    """Seconds until `pattern` appears in `log`; fails after `timeout`."""
    t0 = time.monotonic()
    while not pattern.search(log.read_text(errors="replace")):
        if time.monotonic() - t0 > timeout:
            pytest.fail(f"no {pattern.pattern!r} in the server log after {timeout:.0f} s:\n"
                        f"{log.read_text(errors='replace')[-2000:]}")
        time.sleep(0.2)
    return time.monotonic() - t0


def test_serve_warms_up_at_start_and_app_at_the_first_visit(page, tmp_path):
    served_log, plain_log = tmp_path / "serve.log", tmp_path / "app.log"
    with streamlit_server(log_path=plain_log, entry="app.py") as plain_url, \
            streamlit_server(log_path=served_log, entry="serve.py") as served_url:
        wait_for_line(served_log, WARM, timeout=120)  # no browser has connected to either server yet
        time.sleep(1.0)
        assert not WARM.search(plain_log.read_text(errors="replace")), "app.py warmed up with no visit"
        with urllib.request.urlopen(served_url + "/_stcore/health", timeout=5) as r:
            assert r.read().decode().strip() == "ok"

        open_page(page, plain_url + "/")  # the first visit starts app.py's warm-up
        assert_no_exception(page)
        wait_for_line(plain_log, WARM, timeout=120)

        open_page(page, served_url + "/")
        assert_no_exception(page)
        assert page.get_by_role("heading", name="Transformer Glassbox").count() >= 1
        nav = page.locator("[data-testid='stSidebarNav']").inner_text()
        assert "Look inside" in nav and "Attention" in nav  # app.py's navigation, served by serve.py
        screenshot(page, "serve_home")
    for log in (served_log, plain_log):
        text = log.read_text(errors="replace")
        assert text.count("warm-up done") == 1, text[-2000:]  # once per process
        assert "Traceback" not in text, text[-3000:]

