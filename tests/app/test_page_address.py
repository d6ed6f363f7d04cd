"""ui/server/page_address.py as ASGI, without a browser (as tests/app/test_compressed_static.py drives
CompressedStatic): Streamlit's page gets the script that names the server, first in its head, gzipped again where
it was gzipped; every other answer passes as it was. tests/e2e/test_offline.py checks the effect in chromium
(no 404 when a page is opened from its link)."""

from __future__ import annotations

import asyncio
import gzip
from concurrent.futures import ThreadPoolExecutor

import pytest

from ui.server import page_address as pa


INDEX = (b"<!DOCTYPE html>\n<html lang=\"en\">\n  <head>\n    <meta charset=\"UTF-8\" />\n"
         b"    <script type=\"module\" crossorigin src=\"./static/js/index.DormvYxC.js\"></script>\n"
         b"  </head>\n  <body><div id=\"root\"></div></body>\n</html>\n")


class FakeServer:
    """Answers every request with `body` of `content_type`, in `chunk`-byte pieces as Starlette's FileResponse
    does, with a file's validators."""

    def __init__(self, body=INDEX, content_type=b"text/html; charset=utf-8", status=200, chunk=4096, encoding=None):
        self.body, self.content_type, self.status, self.chunk = body, content_type, status, chunk
        self.encoding = encoding

    async def __call__(self, scope, receive, send):
        headers = [(b"content-type", self.content_type), (b"content-length", str(len(self.body)).encode()),
                   (b"etag", b'"abc"'), (b"last-modified", b"Thu, 01 Jan 2026 00:00:00 GMT"),
                   (b"cache-control", b"no-cache")]
        if self.encoding:
            headers.append((b"content-encoding", self.encoding))
        await send({"type": "http.response.start", "status": self.status, "headers": headers})
        for i in range(0, max(len(self.body), 1), self.chunk):
            await send({"type": "http.response.body", "body": self.body[i:i + self.chunk],
                        "more_body": i + self.chunk < len(self.body)})


def fetch(app, path="/attention", method="GET"):
    """One request through `app` (in a thread of its own: Playwright's sync API marks this thread's loop
    running); returns (status, headers as a dict, body, number of messages)."""
    sent = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": method, "path": path, "headers": []}
    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, app(scope, receive, send)).result()
    body = b"".join(m.get("body", b"") for m in sent[1:])
    return sent[0]["status"], {k.decode(): v.decode() for k, v in sent[0]["headers"]}, body, len(sent)


def test_streamlit_page_names_the_server_before_its_code_runs():
    status, headers, body, _ = fetch(pa.ServerAddress(FakeServer(chunk=100)))
    assert status == 200 and int(headers["content-length"]) == len(body)
    assert body.index(pa.BASE_SCRIPT) < body.index(b'type="module"')  # set before Streamlit's code reads it
    assert body.replace(pa.BASE_SCRIPT, b"") == INDEX
    assert "etag" not in headers and "last-modified" not in headers  # no 304 keeps an older page


def test_a_gzipped_page_is_sent_gzipped_with_the_script():
    """Streamlit gzips its page at a page's address (`/attention`), where the browser first goes wrong."""
    status, headers, body, _ = fetch(pa.ServerAddress(FakeServer(body=gzip.compress(INDEX), encoding=b"gzip")))
    assert headers["content-encoding"] == "gzip" and int(headers["content-length"]) == len(body)
    assert gzip.decompress(body).replace(pa.BASE_SCRIPT, b"") == INDEX and pa.BASE_SCRIPT in gzip.decompress(body)


@pytest.mark.parametrize("server", [
    FakeServer(body=b"<html><head></head><body>a component</body></html>"),  # HTML, but not Streamlit's page
    FakeServer(content_type=b"application/javascript"),
    FakeServer(status=404),
    FakeServer(body=INDEX + b" " * pa.MAX_PAGE_BYTES),  # too large to hold: sent as it comes
])
def test_every_other_answer_passes_as_it_was(server):
    status, headers, body, _ = fetch(pa.ServerAddress(server))
    assert (status, body, headers["etag"]) == (server.status, server.body, '"abc"')


def test_a_head_request_passes_as_it_was():
    status, headers, body, _ = fetch(pa.ServerAddress(FakeServer()), method="HEAD")
    assert body == INDEX and headers["etag"] == '"abc"'


def test_an_answer_in_another_encoding_passes_as_it_was():
    server = FakeServer(body=b"\x00not html a browser could read", encoding=b"br")
    assert fetch(pa.ServerAddress(server))[2] == server.body
