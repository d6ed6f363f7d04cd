"""No URL can put a link, an image or a script into a page (issue 36, "Text injection").

Every page is opened in a real browser with every one of its URL parameters (its own table, the sidebar's,
and the lesson, step, class, preset and stack names the bar and pages read) set to Markdown, HTML and
`javascript:` text at once. Whatever the page echoes back (the notes under the title, the sidebar's
messages) must show as text: no element that links or fetches from the payload's host appears, no request
leaves the server, nothing runs, and no exception is shown. The payload's host is `.invalid`, which never
resolves, so a request that left would show here as an attempt, not a fetch.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from urllib.parse import urlencode, urlsplit

import pytest

from tests.e2e.conftest import assert_no_exception, open_page
from ui.shell import sidebar_url
from ui.shell.nav import PAGES

pytestmark = pytest.mark.e2e

HOST = "evil.invalid"
PAYLOADS = {
    "markdown": f"[Log in here](http://{HOST}/phish) ![a](http://{HOST}/md.png)",
    "html": f"<img src=http://{HOST}/tag.png onerror=window.__injected=1><script>window.__injected=2</script>",
    "javascript": "javascript:window.__injected=3",
    "autolink": f"<http://{HOST}/auto> www.{HOST}",
}
# Read by the lesson bar, the class strip and pages' presets, on every page.
SHARED_NAMES = ("lesson", "step", "class", "preset", "stack", "present")
HOSTILE = (f"a[href*='{HOST}'], img[src*='{HOST}'], [src*='{HOST}'], a[href^='javascript:'],"
           " [onerror], script:not([src])")


def url_names(info) -> list[str]:
    """Every URL parameter the page reads: its own table, the sidebar's, and the shared names."""
    names = [p.name for p in sidebar_url.URL.params.values()] + list(SHARED_NAMES)
    try:
        view = importlib.import_module(f"ui.{Path(info.path).stem}.view")
        names += [p.name for p in getattr(view, "URL").params.values()]
    except (ModuleNotFoundError, AttributeError):
        pass
    return sorted(set(names))


PAYLOAD = " ".join(PAYLOADS.values())  # all four at once: each must come out as text wherever it lands


def test_no_url_parameter_becomes_a_link_an_image_or_a_script(browser, server_url):
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    outside: list[str] = []
    server = urlsplit(server_url).netloc
    context.on("request", lambda r: outside.append(r.url)
               if urlsplit(r.url).scheme not in ("data", "blob", "about") and urlsplit(r.url).netloc != server
               else None)
    page = context.new_page()
    try:
        for info in PAGES:
            query = urlencode({name: PAYLOAD for name in url_names(info)})
            open_page(page, f"{server_url}/{info.url_path}?{query}", timeout=180_000)
            assert_no_exception(page)
            # Scripts the app itself sends (the copy-link button, preload) are ours; the markup check looks in
            # the rendered text areas, where an echoed value would land.
            found = page.evaluate(
                "(sel) => Array.from(document.querySelectorAll("
                "\"[data-testid='stMarkdownContainer'], [data-testid='stAlert'], [data-testid='stCaptionContainer']\"))"
                ".flatMap(b => Array.from(b.querySelectorAll(sel))).map(e => e.outerHTML.slice(0, 200))", HOSTILE)
            assert not found, f"{info.title}: the URL made markup {found}"
            assert page.evaluate("() => window.__injected === undefined"), f"{info.title}: the URL ran code"
        shown = page.locator("[data-testid='stAlert']").all_inner_texts()
        assert any(f"{HOST}/phish" in text for text in shown), (  # literal() breaks "http:" from its host
            "the notes should repeat the bad value as text", shown)
        assert not outside, f"requests left the server: {outside[:5]}"
    finally:
        context.close()
