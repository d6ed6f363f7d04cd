"""`streamlit run serve.py` warms the app up when the server starts; `streamlit run app.py` at the first visit.

The warm-up thread (ui/server/warmup.py) ends with one line in the server's log ("warm-up done in ... s"). Both
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


def static_scripts(url: str) -> list[str]:
    """The /static/ script paths that the app's HTML page loads."""
    with urllib.request.urlopen(url + "/", timeout=10) as r:
        html = r.read().decode()
    return re.findall(r'src="\.?(/static/js/[^"]+\.js)"', html)


def get(url: str, **headers) -> tuple[dict, bytes]:
    request = urllib.request.Request(url, headers={k.replace("_", "-"): v for k, v in headers.items()})
    with urllib.request.urlopen(request, timeout=30) as r:
        return {k.lower(): v for k, v in r.headers.items()}, r.read()


def test_served_frontend_code_is_compressed_once_and_decodes_to_streamlits_file(server_url, page):
    """serve.py's ui/server/compressed_static.py on the real server: the app's main script and Plotly's chunk
    (the largest) come gzip-compressed to a browser that takes gzip and decode to exactly the bytes
    Streamlit sends uncompressed; a chart page in chromium draws from them."""
    import gzip

    import streamlit

    scripts = static_scripts(server_url)
    assert scripts, "no script in the app's page"
    plotly = next((Path(streamlit.__file__).parent / "static" / "static" / "js").glob("PlotlyChart.*.js")).name
    for path in [scripts[0], f"/static/js/{plotly}"]:
        plain_headers, plain = get(server_url + path)
        assert "content-encoding" not in plain_headers
        for _ in range(2):  # compressed the first time, from memory the second: the same bytes both times
            headers, body = get(server_url + path, accept_encoding="gzip, deflate, br")
            assert headers["content-encoding"] == "gzip" and "immutable" in headers["cache-control"]
            assert gzip.decompress(body) == plain
            assert len(body) < 0.5 * len(plain)
    open_page(page, server_url + "/attention", last="[data-testid='stPlotlyChart'] .js-plotly-plot")
    assert_no_exception(page)
