"""ui/server/compressed_static.py: Streamlit's static files sent gzip-compressed, compressed once per path.

Driven as ASGI directly (no HTTP client needed): a fake inner app stands in for Streamlit's static handler
and counts how often it is asked. The real server's answers are checked in tests/e2e/test_serve.py."""

from __future__ import annotations

import asyncio
import gzip
import os
from concurrent.futures import ThreadPoolExecutor

import pytest

from ui.server import compressed_static as cs

JS = b"/* a content-hashed bundle */ " + os.urandom(600).hex().encode() * 20  # compressible, over MIN_BYTES
IMMUTABLE = b"public, immutable, max-age=31536000"


class FakeStatic:
    """Serves `body` for every path, in 4 KB chunks as Starlette's FileResponse does; counts the calls."""

    def __init__(self, body=JS, content_type=b"application/javascript", cache=IMMUTABLE, status=200, pathsend=False):
        self.body, self.content_type, self.cache, self.status, self.pathsend = body, content_type, cache, status, pathsend
        self.calls = 0
        self.asked: list[bytes] = []  # the If-None-Match values it was sent

    async def __call__(self, scope, receive, send):
        self.calls += 1
        await asyncio.sleep(0)  # let concurrent requests interleave
        asked = dict(scope.get("headers", [])).get(b"if-none-match")
        if asked is not None:  # Starlette's StaticFiles.is_not_modified: its tag, strong or weak, in the list
            self.asked.append(asked)
            if asked.strip() == b"*" or b'"abc123"' in [tag.strip().removeprefix(b"W/") for tag in asked.split(b",")]:
                await send({"type": "http.response.start", "status": 304,
                            "headers": [(b"etag", b'"abc123"'), (b"cache-control", self.cache)]})
                await send({"type": "http.response.body", "body": b"", "more_body": False})
                return
        headers = [(b"content-type", self.content_type), (b"content-length", str(len(self.body)).encode()),
                   (b"etag", b'"abc123"'), (b"accept-ranges", b"bytes"), (b"cache-control", self.cache)]
        await send({"type": "http.response.start", "status": self.status, "headers": headers})
        if self.pathsend:
            await send({"type": "http.response.pathsend", "path": "/somewhere"})
            return
        for i in range(0, len(self.body), 4096):
            await send({"type": "http.response.body", "body": self.body[i:i + 4096],
                        "more_body": i + 4096 < len(self.body)})


def run(coroutine):
    """asyncio.run in a thread of its own: a thread that ran Playwright's sync API (the e2e tests, in the same
    pytest process) has an event loop marked running, where asyncio.run refuses to start."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


def request(path="/static/js/index.abc.js", method="GET", **headers):
    encoded = [(k.replace("_", "-").encode(), v.encode()) for k, v in headers.items()]
    return {"type": "http", "method": method, "path": path, "headers": encoded}


async def download(app, sent: list, scope=None) -> None:
    """One request through `app`, its answer's messages appended to `sent` (for tests that interleave requests)."""
    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    await app(scope or request(accept_encoding="gzip"), receive, send)


def fetch(app, scope):
    """Run one request; returns (status, headers as a dict, body, message types)."""
    sent = []
    run(download(app, sent, scope))
    start = sent[0]
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], {k.decode(): v.decode() for k, v in start["headers"]}, body, [m["type"] for m in sent]


def test_a_served_bundle_is_sent_compressed_and_later_requests_come_from_memory():
    inner = FakeStatic()
    app = cs.CompressedStatic(inner)
    status, headers, body, _ = fetch(app, request(accept_encoding="gzip, deflate, br"))
    assert status == 200 and headers["content-encoding"] == "gzip" and headers["vary"] == "Accept-Encoding"
    assert gzip.decompress(body) == JS and int(headers["content-length"]) == len(body) < len(JS) / 2
    assert headers["cache-control"] == IMMUTABLE.decode() and headers["content-type"] == "application/javascript"
    assert headers["etag"] == 'W/"gzip-abc123"' and "accept-ranges" not in headers  # not the plain file's validator
    again = fetch(app, request(accept_encoding="gzip"))
    assert again[2] == body and inner.calls == 1  # answered from memory, Streamlit not asked again
    assert app.stored_bytes == len(body)


def test_concurrent_first_requests_compress_the_file_once(monkeypatch):
    compressions = []
    real = cs.compress
    monkeypatch.setattr(cs, "compress", lambda start, body: compressions.append(1) or real(start, body))
    inner = FakeStatic()
    app = cs.CompressedStatic(inner)
    answers = []

    async def one():
        sent = []
        await download(app, sent)
        answers.append(b"".join(m.get("body", b"") for m in sent[1:]))

    async def class_arrives():
        await asyncio.gather(*(one() for _ in range(30)))

    run(class_arrives())
    assert len(answers) == 30 and all(gzip.decompress(a) == JS for a in answers)
    assert len(compressions) == 1, f"{len(compressions)} compressions for one file"


def test_a_student_who_leaves_mid_compression_cancels_only_their_own_download(monkeypatch):
    import time

    compressions = []
    real = cs.compress

    def slow(start, body):
        compressions.append(1)
        time.sleep(0.3)
        return real(start, body)

    monkeypatch.setattr(cs, "compress", slow)
    app = cs.CompressedStatic(FakeStatic())

    async def one_leaves():
        first, second = [], []
        leaving = asyncio.create_task(download(app, first))
        await asyncio.sleep(0.1)  # the first request is waiting for its compression
        staying = asyncio.create_task(download(app, second))
        await asyncio.sleep(0.05)
        leaving.cancel()
        await staying
        with pytest.raises(asyncio.CancelledError):
            await leaving
        return first, second

    first, second = run(one_leaves())
    assert first == [] and gzip.decompress(b"".join(m.get("body", b"") for m in second[1:])) == JS
    assert len(compressions) == 1 and app.stored_bytes > 0  # the one compression finished and was kept


def test_a_request_that_arrives_during_the_compression_waits_for_it_without_reading_the_file(monkeypatch):
    import time

    real = cs.compress
    monkeypatch.setattr(cs, "compress", lambda start, body: time.sleep(0.3) or real(start, body))
    inner = FakeStatic()
    app = cs.CompressedStatic(inner)

    async def two_students():
        first, second = [], []
        task = asyncio.create_task(download(app, first))
        await asyncio.sleep(0.1)  # the first is being compressed
        await download(app, second)
        await task
        return first, second

    first, second = run(two_students())
    assert inner.calls == 1  # Streamlit served the file once
    assert [m.get("body") for m in first] == [m.get("body") for m in second]


def test_a_failed_compression_sends_the_file_as_streamlit_served_it(monkeypatch):
    def broken(start, body):
        raise RuntimeError("zlib failed")

    monkeypatch.setattr(cs, "compress", broken)
    app = cs.CompressedStatic(FakeStatic())
    status, headers, body, _ = fetch(app, request(accept_encoding="gzip"))
    assert status == 200 and body == JS and "content-encoding" not in headers and app.stored_bytes == 0


@pytest.mark.parametrize("scope", [
    request(),  # no Accept-Encoding
    request(accept_encoding="br, deflate"),
    request(accept_encoding="gzip;q=0, br"),
    request(accept_encoding="gzip", range="bytes=0-99"),
    request(accept_encoding="gzip", method="HEAD"),
    request("/_stcore/health", accept_encoding="gzip"),
    request("/", accept_encoding="gzip"),
])
def test_anything_else_passes_through_untouched(scope):
    inner = FakeStatic()
    app = cs.CompressedStatic(inner)
    status, headers, body, _ = fetch(app, scope)
    assert status == 200 and body == JS and "content-encoding" not in headers and headers["etag"] == '"abc123"'
    assert app.stored_bytes == 0


@pytest.mark.parametrize("inner", [
    FakeStatic(content_type=b"text/html; charset=utf-8", cache=b"no-cache"),  # index.html for an unknown path
    FakeStatic(content_type=b"font/woff2"),  # already compressed
    FakeStatic(cache=b"no-cache"),  # not content-hashed
    FakeStatic(status=404, content_type=b"text/plain"),
    FakeStatic(body=b"tiny();"),  # under MIN_BYTES
])
def test_answers_that_are_not_hashed_text_bundles_are_sent_as_they_came_and_not_kept(inner):
    app = cs.CompressedStatic(inner)
    for _ in range(2):
        status, headers, body, _ = fetch(app, request(accept_encoding="gzip"))
        assert status == inner.status and body == inner.body and "content-encoding" not in headers
    assert app.stored_bytes == 0 and inner.calls == 2


def test_an_answer_sent_another_way_is_replayed_as_it_came():
    app = cs.CompressedStatic(FakeStatic(pathsend=True))
    _, headers, _, types = fetch(app, request(accept_encoding="gzip"))
    assert types == ["http.response.start", "http.response.pathsend"] and "content-encoding" not in headers


def test_the_store_is_capped_and_keyed_by_path(monkeypatch):
    inner = FakeStatic()
    app = cs.CompressedStatic(inner)
    fetch(app, {**request("/static/js/a.js", accept_encoding="gzip"), "query_string": b"v=1"})
    fetch(app, {**request("/static/js/a.js", accept_encoding="gzip"), "query_string": b"v=2"})
    assert inner.calls == 1  # the query does not make a new entry
    one_file = app.stored_bytes
    monkeypatch.setattr(cs, "MAX_BYTES", one_file + 10)
    for _ in range(2):
        status, headers, body, _ = fetch(app, request("/static/js/b.js", accept_encoding="gzip"))
        assert headers["content-encoding"] == "gzip" and gzip.decompress(body) == JS  # still compressed
    assert app.stored_bytes == one_file and inner.calls == 3  # but not kept: the cap holds


def test_under_a_base_url_path_the_files_under_it_are_compressed():
    inner = FakeStatic()
    app = cs.CompressedStatic(inner, base_url_path="/glassbox/")
    assert app.prefix == "/glassbox/static/"
    _, headers, body, _ = fetch(app, request("/glassbox/static/js/index.abc.js", accept_encoding="gzip"))
    assert headers["content-encoding"] == "gzip" and gzip.decompress(body) == JS
    _, headers, body, _ = fetch(app, request("/static/js/index.abc.js", accept_encoding="gzip"))
    assert "content-encoding" not in headers and body == JS  # not where this server keeps its files
    assert cs.CompressedStatic(inner).prefix == "/static/"  # no base URL set in this process's config


@pytest.mark.parametrize("header, takes", [
    ("gzip, deflate, br, zstd", True), ("GZIP", True), ("br", False), ("", False), ("gzip;q=0", False),
    ("gzip; q=0.5", True), ("*", True), ("*;q=0", False), ("gzip;q=0, *", False), ("br, *;q=0.1", True),
    ("gzip;q=nonsense", False),
])
def test_accept_encoding_is_read_with_its_weights(header, takes):
    assert cs.accepts_gzip([(b"accept-encoding", header.encode())]) is takes


# Revalidations, as browsers send them: the validator they were given, weak or strong, sometimes in a list.
HELD_GZIP = ['W/"gzip-abc123"', '"gzip-abc123"', 'w/"gzip-abc123"', '"other", W/"gzip-abc123"']
HELD_PLAIN = ['"abc123"', 'W/"abc123"', '"other", "abc123"', "*"]


@pytest.mark.parametrize("held", HELD_GZIP)
@pytest.mark.parametrize("kept", [False, True], ids=["first-request", "kept-in-memory"])
def test_a_browser_holding_the_compressed_file_is_answered_304_with_its_validator(held, kept):
    """The compressed answer's own validator (W/"gzip-...") comes back on every return visit: a 304, never the
    whole uncompressed file again, whether the file is kept here already or Streamlit is asked."""
    inner = FakeStatic()
    app = cs.CompressedStatic(inner)
    if kept:
        fetch(app, request(accept_encoding="gzip"))
    status, headers, body, _ = fetch(app, request(accept_encoding="gzip, deflate, br", if_none_match=held))
    assert status == 304 and body == b""
    assert headers["etag"] == 'W/"gzip-abc123"' and headers["vary"] == "Accept-Encoding"
    assert "immutable" in headers["cache-control"] and "content-encoding" not in headers
    assert inner.calls == 1  # answered from memory when kept; when not, Streamlit compared its own tag
    if not kept:
        assert b'"abc123"' in inner.asked[0] and b"gzip-" not in inner.asked[0]


@pytest.mark.parametrize("held", HELD_PLAIN)
@pytest.mark.parametrize("kept", [False, True], ids=["first-request", "kept-in-memory"])
def test_a_browser_holding_the_uncompressed_file_is_answered_304(held, kept):
    inner = FakeStatic()
    app = cs.CompressedStatic(inner)
    if kept:
        fetch(app, request(accept_encoding="gzip"))
    status, headers, body, _ = fetch(app, request(accept_encoding="gzip", if_none_match=held))
    assert status == 304 and body == b"" and headers["etag"] == '"abc123"'


@pytest.mark.parametrize("accept", ["", "br"])
def test_a_browser_that_no_longer_takes_gzip_is_still_answered_304_for_its_compressed_copy(accept):
    app = cs.CompressedStatic(FakeStatic())
    status, headers, body, _ = fetch(app, request(accept_encoding=accept, if_none_match='W/"gzip-abc123"'))
    assert status == 304 and body == b"" and headers["etag"] == 'W/"gzip-abc123"'


@pytest.mark.parametrize("kept", [False, True], ids=["first-request", "kept-in-memory"])
def test_a_revalidation_of_another_version_gets_the_file_compressed(kept):
    inner = FakeStatic()
    app = cs.CompressedStatic(inner)
    if kept:
        fetch(app, request(accept_encoding="gzip"))
    status, headers, body, _ = fetch(app, request(accept_encoding="gzip", if_none_match='W/"gzip-old999"'))
    assert status == 200 and headers["content-encoding"] == "gzip" and gzip.decompress(body) == JS
    assert headers["etag"] == 'W/"gzip-abc123"'


def test_a_revalidation_outside_the_static_files_passes_as_it_was():
    inner = FakeStatic()
    app = cs.CompressedStatic(inner)
    status, headers, body, _ = fetch(app, request("/_stcore/health", accept_encoding="gzip",
                                                  if_none_match='W/"gzip-abc123"'))
    assert status == 200 and body == JS and inner.asked == [b'W/"gzip-abc123"']
