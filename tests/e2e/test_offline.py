"""The app works in an offline classroom: no request leaves the server, and none is answered with an error.

The browser test opens every page (ui/shell/nav.py's PAGES) and a teacher's deep link in one chromium tab,
records every request and websocket the tab makes, and checks that each goes to the server's own origin
and that no answer is a 4xx or 5xx. Two things broke that: the favicon, a ":material/...:" icon that
Streamlit fetches from Google's font host, and the frontend asking a page's own address
(`/attention/_stcore/health`, `/attention/_stcore/host-config`) before the server's, two 404s on every page
opened from its link (serve.py's ui/server/page_address.ServerAddress says where the server is;
tests/app/test_page_address.py checks it as ASGI, without a browser).
"""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest

from tests.e2e.conftest import assert_no_exception, open_page, screenshot
from ui.shell.nav import PAGES

DEEP_LINK = "/attention?model=induction-rope&layer=1&head=2&temp=2"  # a teacher's link
LOCAL_SCHEMES = ("data", "blob", "about")  # never leave the browser
ICON_HREF = "() => { const l = document.querySelector(\"link[rel~='icon']\"); return l ? l.href : null; }"


def origin(url: str) -> str:
    """scheme-less host:port of `url` (a websocket to the server counts as the server's origin)."""
    return urlsplit(url).netloc


def wait_until_quiet(page, log: list, quiet_ms: int = 1000, timeout_ms: int = 30_000) -> None:
    """Wait until the tab has asked for nothing new for `quiet_ms` (what a page fetches once idle, such as
    ui/shell/preload.py's code, comes after its run ends); gives up quietly after `timeout_ms`."""
    seen, still, step = len(log), 0, 250
    for _ in range(timeout_ms // step):
        page.wait_for_timeout(step)
        still = still + step if len(log) == seen else 0
        seen = len(log)
        if still >= quiet_ms:
            return


@pytest.mark.e2e
def test_every_page_and_a_deep_link_ask_only_the_server_and_get_no_errors(browser, server_url):
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    requests: list[tuple[str, str]] = []  # (page opened, URL)
    errors: list[str] = []
    opened = ["?"]
    context.on("request", lambda r: requests.append((opened[0], r.url)))
    context.on("response", lambda r: errors.append(f"{opened[0]}: {r.status} {r.url}") if r.status >= 400 else None)
    page = context.new_page()
    page.on("websocket", lambda ws: requests.append((opened[0], ws.url)))
    icons = []
    try:
        for path in [f"/{p.url_path}" for p in PAGES] + [DEEP_LINK]:
            opened[0] = path
            open_page(page, server_url + path)
            assert_no_exception(page)
            wait_until_quiet(page, requests)
            icons.append((path, page.evaluate(ICON_HREF)))
        screenshot(page, "offline_deep_link")
    finally:
        context.close()

    server = origin(server_url)
    outside = sorted({f"{where}: {url}" for where, url in requests
                      if urlsplit(url).scheme not in LOCAL_SCHEMES and origin(url) != server})
    assert not outside, "requests outside the server:\n" + "\n".join(outside)
    assert not errors, "error answers:\n" + "\n".join(sorted(set(errors)))
    assert any(url.startswith(server_url + "/") for _, url in requests)  # the recording worked
    for path, href in icons:  # the app's own icon, served by the app, on every page
        assert href and origin(href) == server and href.endswith(".png"), f"{path}: favicon {href}"
    assert any(url == icons[-1][1] for _, url in requests), "the favicon was never fetched"
