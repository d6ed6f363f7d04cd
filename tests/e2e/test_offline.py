"""Every page loads without an exception, and the app works in an offline classroom: no request leaves the
server, and none is answered with an error.

The browser test opens every page (ui/shell/nav.py's PAGES) and a teacher's deep link in one chromium tab,
screenshots each page (test-artifacts/screenshots/page_<name>.png; the whole page's height with
GLASSBOX_TALL_SCREENSHOTS=1 or GLASSBOX_THUMBNAILS=1, which also saves each page's first chart, shrunk, as the
home page's picture in assets/images/<url_path>.png),
records every request and websocket the tab makes, and checks that each goes to the server's own origin
and that no answer is a 4xx or 5xx. Two things broke that: the favicon, a ":material/...:" icon that
Streamlit fetches from Google's font host, and the frontend asking a page's own address
(`/attention/_stcore/health`, `/attention/_stcore/host-config`) before the server's, two 404s on every page
opened from its link (serve.py's ui/server/page_address.ServerAddress says where the server is;
tests/app/test_page_address.py checks it as ASGI, without a browser).
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit

import pytest

from tests.e2e.conftest import SCREENSHOTS, assert_no_exception, fit_viewport_to_page, open_page, screenshot, wait_for_run
from ui.shell.nav import IMAGES, PAGES

DEEP_LINK = "/attention?model=induction-rope&layer=1&head=2&temp=2"  # a teacher's link
LOCAL_SCHEMES = ("data", "blob", "about")  # never leave the browser
ICON_HREF = "() => { const l = document.querySelector(\"link[rel~='icon']\"); return l ? l.href : null; }"
THUMBNAILS = os.environ.get("GLASSBOX_THUMBNAILS") == "1"
TALL = THUMBNAILS or os.environ.get("GLASSBOX_TALL_SCREENSHOTS") == "1"
THUMB_WIDTH, THUMB_HEIGHT = 560, 300


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


def page_screenshot(page, name: str, width: int) -> None:
    """The page as a student sees it: its first screen, or (TALL) the whole page with the window grown to its
    height (Streamlit scrolls inside its main block, so a full-page shot of the window stops at the first screen)."""
    if TALL:
        fit_viewport_to_page(page, width=width, cap=9000, pad=0)
        page.wait_for_timeout(700)  # plotly charts and data grids redraw for the new viewport
        wait_for_run(page)
        page.wait_for_function("() => !document.querySelector(\"[data-testid='stSkeleton']\")", timeout=60_000)
    screenshot(page, name)
    if TALL:
        page.set_viewport_size({"width": width, "height": 900})


def thumbnail(page, name: str) -> None:
    """The page's first chart (or its top when it has none), shrunk for the home page's map (THUMBNAILS only)."""
    from PIL import Image

    target = SCREENSHOTS / f"thumb_{name}.png"
    charts = page.locator("[data-testid='stPlotlyChart']")
    if charts.count():
        charts.first.scroll_into_view_if_needed()
        charts.first.screenshot(path=str(target))
    else:
        box = page.locator("[data-testid='stMain']").bounding_box()
        page.screenshot(path=str(target), clip=dict(x=box["x"], y=box["y"], width=box["width"],
                                                     height=min(box["height"], 800)))
    IMAGES.mkdir(parents=True, exist_ok=True)
    with Image.open(target) as img:
        img = img.convert("RGB")
        img.thumbnail((THUMB_WIDTH, THUMB_HEIGHT))
        card = Image.new("RGB", (THUMB_WIDTH, THUMB_HEIGHT), "white")  # one shape for every card
        card.paste(img, ((THUMB_WIDTH - img.width) // 2, (THUMB_HEIGHT - img.height) // 2))
        card.save(IMAGES / f"{name}.png", optimize=True)


@pytest.mark.e2e
def test_every_page_loads_without_an_exception_and_asks_only_the_server(browser, server_url):
    missing = [p.path for p in PAGES if not p.exists]
    assert not missing, f"pages listed in the menu whose files are missing: {missing}"
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
            open_page(page, server_url + path, timeout=180_000)
            assert_no_exception(page)
            wait_until_quiet(page, requests)
            icons.append((path, page.evaluate(ICON_HREF)))
            if path != DEEP_LINK:
                name = path.strip("/") or "home"
                page_screenshot(page, f"page_{name}", 1440)
                if THUMBNAILS and name != "home":
                    thumbnail(page, name)
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
