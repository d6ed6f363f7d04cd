"""Streamlit's page says where its server is, so that opening a page's link asks no wrong address first.

Added by serve.py beside ui/server/compressed_static.py (`ServerAddress`). Without it, every page opened at its
own address (a teacher's `/attention?layer=1`, any page reloaded) made two 404 requests before the first
right one; `streamlit run app.py` still makes them (the page is served before any script runs).
"""

from __future__ import annotations

import gzip
import zlib
from typing import Optional

from ui.server.compressed_static import LEVEL, Message, Send
from ui.server.compressed_static import _header as header


# The page tells Streamlit's frontend where its server is, before the frontend's own code runs (module
# scripts wait for the document; this one does not). The server sits where the page's own "./static/..."
# addresses point: the page's folder (`.`). Set by a host already, that address is kept.
BASE_SCRIPT = (b"<script>window.__streamlit = Object.assign("
               b"{BACKEND_BASE_URL: new URL('.', window.location.href).href}, window.__streamlit);</script>")
STREAMLIT_PAGE = b'src="./static/js/index.'  # in Streamlit's index.html only: its main bundle
MAX_PAGE_BYTES = 256 * 1024  # Streamlit's index.html is about 8 kB; a larger HTML answer passes as it was


def with_server_address(html: bytes) -> Optional[bytes]:
    """Streamlit's index.html with BASE_SCRIPT first in its head; None for any other document."""
    head = html.find(b"<head>")
    if head < 0 or STREAMLIT_PAGE not in html:
        return None
    at = head + len(b"<head>")
    return html[:at] + BASE_SCRIPT + html[at:]


def _is_page_start(message: Message) -> bool:
    """A 200 answer of HTML, as it is or gzipped (the start of one that may be Streamlit's index.html: Streamlit
    gzips it at a page's address, not at the root)."""
    headers = message.get("headers", [])
    content_type = (header(headers, b"content-type") or b"").decode("latin-1").lower()
    return (message.get("status") == 200 and content_type.startswith("text/html")
            and header(headers, b"content-encoding") in (None, b"gzip"))


class ServerAddress:
    """ASGI middleware: Streamlit's page says where the server is, so a page's link asks no wrong address first.

    Opened at a page's address (a teacher's `/attention?layer=1`, any page reloaded), Streamlit's frontend
    cannot tell a page's name from a base path: it asks `/attention/_stcore/health` and
    `/attention/_stcore/host-config` first, gets two 404s, and only then the server's root. Its
    `window.__streamlit.BACKEND_BASE_URL` names the server instead; this sets it in the page as it is served
    (gzipped again where Streamlit gzipped it). Every other answer, and an HTML one that is not Streamlit's page
    or is larger than MAX_PAGE_BYTES, passes as it was. The page's validators are dropped: the browser
    revalidated Streamlit's own file's, and would have kept a page without the script across an update of
    this one."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send: Send) -> None:
        if scope.get("type") != "http" or scope.get("method") != "GET":
            await self.app(scope, receive, send)
            return
        held: list[Message] = []  # an HTML answer's start and body so far, while it may be Streamlit's page

        async def forward(message: Message) -> None:
            if message.get("type") == "http.response.start" and _is_page_start(message):
                held.append(message)
                return
            if not held:
                await send(message)
                return
            held.append(message)
            size = sum(len(m.get("body", b"")) for m in held[1:])
            if message.get("type") != "http.response.body" or size > MAX_PAGE_BYTES:
                answer = list(held)  # not a plain answer read whole: as it was
            elif not message.get("more_body"):
                answer = self.page_answer(held)
            else:
                return
            held.clear()
            for out in answer:
                await send(out)

        await self.app(scope, receive, forward)

    @staticmethod
    def page_answer(held: list[Message]) -> list[Message]:
        """The messages for a whole HTML answer: with BASE_SCRIPT in Streamlit's page, any other as it was."""
        start, body = held[0], b"".join(m.get("body", b"") for m in held[1:])
        gzipped = header(start.get("headers", []), b"content-encoding") == b"gzip"
        try:
            page = with_server_address(gzip.decompress(body) if gzipped else body)
        except (OSError, EOFError, zlib.error):  # not the gzip it said: as it was
            page = None
        if page is None:
            return list(held)
        if gzipped:
            page = gzip.compress(page, compresslevel=LEVEL, mtime=0)  # about 8 kB: about 1 ms with the unzip
        headers = [(k, v) for k, v in start.get("headers", [])
                   if k.lower() not in (b"content-length", b"etag", b"last-modified")]
        headers.append((b"content-length", str(len(page)).encode()))
        return [{**start, "headers": headers}, {"type": "http.response.body", "body": page, "more_body": False}]
