"""Streamlit's own JavaScript and style sheets sent gzip-compressed, each file compressed once per process.

A student's first visit downloads about 10 MB of Streamlit's frontend code (Plotly's chunk alone is 4.7 MB),
and Streamlit sends it uncompressed: it leaves compression to a proxy, because compressing on every request
would cost its server CPU on every first load. On a classroom's shared Wi-Fi those bytes are most of a first
visit. This ASGI middleware (added by serve.py) lets Streamlit serve each file as usual, compresses the answer
the first time a path is asked for, and keeps the compressed bytes: every later request for that path is
answered from memory. Only what Streamlit served itself is kept: a 200 answer for a path under /static/ with
a content-hashed name (Streamlit marks those immutable), JavaScript, CSS, SVG or JSON; the path, not the
query, is the key, and the whole store is capped (`MAX_BYTES`), so made-up URLs cannot grow it. Everything
else (other paths, a browser that does not accept gzip, ranges, HEAD) passes through as it was.

Revalidations: a browser that kept the compressed file sends its validator back (`If-None-Match:
W/"gzip-<tag>"`), which Streamlit's own handler does not know (its tag is `"<tag>"`): it answered 200 with the
whole uncompressed file, so every return visit downloaded Plotly's 4.7 MB again. Such a tag is read as the
file's own tag before Streamlit compares it, and a 304 goes back with the validator the browser holds; a kept
file's revalidation is answered 304 from memory. A revalidation that does not match gets the file as above.
"""

from __future__ import annotations

import asyncio
import gzip
import threading
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Optional

from streamlit.logger import get_logger

log = get_logger(__name__)

PREFIX = "/static/"
COMPRESSIBLE = ("javascript", "text/css", "image/svg+xml", "application/json")  # fonts and images are compressed
LEVEL = 6  # gzip's default: within 3% of level 9's size here, at a third of its time
MIN_BYTES = 1024
MAX_BYTES = 64 * 1024 * 1024  # all of Streamlit's compressible frontend is about 8 MB compressed

Message = dict[str, Any]
Send = Callable[[Message], Awaitable[None]]


@dataclass(frozen=True)
class Compressed:
    """One static file as it is sent to browsers that accept gzip: the response's headers and body."""

    headers: list[tuple[bytes, bytes]]
    body: bytes


def _header(headers, name: bytes) -> Optional[bytes]:
    """The value of header `name` (lower case) in an ASGI header list, or None."""
    for key, value in headers:
        if key.lower() == name:
            return value
    return None


def accepts_gzip(headers) -> bool:
    """Whether the request's Accept-Encoding takes gzip: listed (or `*`) with a weight above zero."""
    accepted = (_header(headers, b"accept-encoding") or b"").decode("latin-1").lower()
    star = False
    for item in accepted.split(","):
        coding, *params = [part.strip() for part in item.split(";")]
        weight = 1.0
        for param in params:
            if param.replace(" ", "").startswith("q="):
                try:
                    weight = float(param.replace(" ", "")[2:])
                except ValueError:
                    weight = 0.0
        if coding == "gzip":
            return weight > 0
        if coding == "*":
            star = weight > 0
    return star


def static_prefix(base_url_path: str = "") -> str:
    """Where Streamlit serves its frontend: /static/, under `server.baseUrlPath` when one is set."""
    base = base_url_path.strip("/")
    return f"/{base}{PREFIX}" if base else PREFIX


def eligible_request(scope, prefix: str = PREFIX) -> bool:
    """A GET for a file under `prefix` from a browser that takes gzip, not for a range (a revalidation may be)."""
    if scope.get("type") != "http" or scope.get("method") != "GET" or not scope.get("path", "").startswith(prefix):
        return False
    headers = scope.get("headers", [])
    if _header(headers, b"range") is not None:
        return False
    return accepts_gzip(headers)


GZIP_TAG = b"gzip-"  # the compressed answer's validator is W/"gzip-<the file's own tag>" (see `compress`)


def entity_tags(value: bytes) -> list[bytes]:
    """The opaque tags of an If-None-Match value, weak or strong alike (`W/"x"` and `"x"` are both `x`)."""
    tags = []
    for item in value.split(b","):
        item = item.strip()
        if item.startswith((b"W/", b"w/")):
            item = item[2:]
        tags.append(item.strip().strip(b'"'))
    return [tag for tag in tags if tag]


def plain_tag(tag: bytes) -> bytes:
    """The file's own tag behind a compressed answer's tag (`gzip-x` is `x`); any other tag as it is."""
    return tag[len(GZIP_TAG):] if tag.startswith(GZIP_TAG) else tag


def held_variants(scope) -> tuple[Any, set[bytes]]:
    """The request with its compressed-answer tags read as the file's own, so that Streamlit can compare them,
    and the file tags the browser holds compressed (empty, and the request as it was, when there are none)."""
    headers = scope.get("headers", [])
    value = _header(headers, b"if-none-match")
    if value is None or value.strip() == b"*":
        return scope, set()
    tags = entity_tags(value)
    gzipped = {plain_tag(tag) for tag in tags if tag.startswith(GZIP_TAG)}
    if not gzipped:
        return scope, set()
    rewritten = b", ".join(b'"' + plain_tag(tag) + b'"' for tag in tags)
    headers = [(k, v) for k, v in headers if k.lower() != b"if-none-match"] + [(b"if-none-match", rewritten)]
    return {**scope, "headers": headers}, gzipped


def gzip_etag(tag: bytes) -> bytes:
    """The compressed answer's validator for a file whose own tag is `tag`: weak, its bytes differ."""
    return b'W/"' + GZIP_TAG + tag + b'"'


def not_modified_from(start: Message, gzipped: set[bytes]) -> Message:
    """Streamlit's 304 for a browser that holds the compressed file: it names the validator that browser holds
    (the plain tag would make it store the compressed body under the plain file's validator)."""
    headers = start.get("headers", [])
    etag = _header(headers, b"etag")
    if start.get("status") != 304 or etag is None or not gzipped:
        return start
    tag = entity_tags(etag)[0] if entity_tags(etag) else b""
    if tag not in gzipped:
        return start
    kept = [(k, v) for k, v in headers if k.lower() not in (b"etag", b"vary")]
    return {**start, "headers": kept + [(b"etag", gzip_etag(tag)), (b"vary", b"Accept-Encoding")]}


def matches(scope, answer: "Compressed") -> Optional[bool]:
    """Whether the request's If-None-Match names the kept answer (True: a 304 will do), names only other
    versions (False: send it), or is absent (None: Streamlit decides, e.g. on If-Modified-Since)."""
    value = _header(scope.get("headers", []), b"if-none-match")
    if value is None:
        return None
    if value.strip() == b"*":
        return True
    own = entity_tags(_header(answer.headers, b"etag") or b"")
    return bool(own) and plain_tag(own[0]) in {plain_tag(tag) for tag in entity_tags(value)}


NOT_MODIFIED_HEADERS = (b"etag", b"cache-control", b"vary", b"last-modified", b"expires", b"content-location", b"date")


def compressible_response(start: Message, body: bytes) -> bool:
    """A full 200 answer, content-hashed (immutable) and of a text type, not already encoded, worth compressing."""
    headers = start.get("headers", [])
    content_type = (_header(headers, b"content-type") or b"").decode("latin-1").lower()
    cache = (_header(headers, b"cache-control") or b"").decode("latin-1").lower()
    return (start.get("status") == 200 and _header(headers, b"content-encoding") is None
            and "immutable" in cache and any(kind in content_type for kind in COMPRESSIBLE)
            and len(body) >= MIN_BYTES)


def compress(start: Message, body: bytes) -> Compressed:
    """The gzip answer for a served file: its headers less the length and validators, plus the encoding."""
    data = gzip.compress(body, compresslevel=LEVEL, mtime=0)  # mtime 0: the same bytes every time
    kept = [(k, v) for k, v in start.get("headers", [])
            if k.lower() not in (b"content-length", b"content-encoding", b"accept-ranges", b"etag", b"vary")]
    etag = _header(start.get("headers", []), b"etag")
    if etag is not None and entity_tags(etag):  # a weak validator of its own: the bytes differ from the file's
        kept.append((b"etag", gzip_etag(entity_tags(etag)[0])))
    kept += [(b"content-encoding", b"gzip"), (b"vary", b"Accept-Encoding"), (b"content-length", str(len(data)).encode())]
    return Compressed(headers=kept, body=data)


class CompressedStatic:
    """ASGI middleware: /static/ files compressed once per path and then answered from memory (module docstring)."""

    def __init__(self, app, base_url_path: Optional[str] = None) -> None:
        """`base_url_path`: Streamlit's `server.baseUrlPath` (read from its config when not given)."""
        if base_url_path is None:
            from streamlit import config

            base_url_path = config.get_option("server.baseUrlPath") or ""
        self.app = app
        self.prefix = static_prefix(base_url_path)
        self._store: dict[str, Compressed] = {}
        self._pending: dict[str, asyncio.Future] = {}
        self._bytes = 0
        self._lock = threading.Lock()  # the store is shared by every event loop of the process

    @property
    def stored_bytes(self) -> int:
        return self._bytes

    async def __call__(self, scope, receive, send: Send) -> None:
        if scope.get("type") != "http" or not scope.get("path", "").startswith(self.prefix):
            await self.app(scope, receive, send)
            return
        scope, gzipped = held_variants(scope)  # W/"gzip-x" read as "x": Streamlit can answer 304 to it
        if not eligible_request(scope, self.prefix):
            await self.app(scope, receive, self._naming_held(send, gzipped))
            return
        path = scope["path"]
        with self._lock:
            hit = self._store.get(path)
            pending = self._pending.get(path)
        if hit is None and pending is not None and pending.get_loop() is asyncio.get_running_loop():
            try:  # being compressed for another student: no need to read the file again
                hit = await asyncio.shield(pending)
            except Exception:  # noqa: BLE001 - that compression failed: serve this request as below
                hit = None
        decided = None if hit is None else matches(scope, hit)
        if decided is True:
            await self._send_not_modified(send, hit, gzipped)
            return
        if hit is not None and (decided is False or _header(scope.get("headers", []), b"if-modified-since") is None):
            await self._send(send, hit)
            return
        messages: list[Message] = []

        async def keep(message: Message) -> None:
            messages.append(message)

        await self.app(scope, receive, keep)  # Streamlit serves the file (its path checks, its headers)
        start, body = self._whole_response(messages)
        if start is None or not compressible_response(start, body):
            if messages and messages[0].get("type") == "http.response.start":
                messages[0] = not_modified_from(messages[0], gzipped)
            for message in messages:
                await send(message)
            return
        try:
            answer = await self._compressed_once(path, start, body)
        except Exception:  # noqa: BLE001 - never a failed download: the file goes as Streamlit served it
            log.exception("compressing %s failed; sent uncompressed", path)
            for message in messages:
                await send(message)
            return
        await self._send(send, answer)

    @staticmethod
    def _whole_response(messages: list[Message]) -> tuple[Optional[Message], bytes]:
        """The start message and the whole body, or (None, b"") if the answer was anything but start + body."""
        if not messages or messages[0].get("type") != "http.response.start":
            return None, b""
        bodies = messages[1:]
        if not bodies or any(m.get("type") != "http.response.body" for m in bodies) or bodies[-1].get("more_body"):
            return None, b""
        return messages[0], b"".join(m.get("body", b"") for m in bodies)

    async def _compressed_once(self, path: str, start: Message, body: bytes) -> Compressed:
        """Compress `path`'s answer in a worker thread; requests that arrive meanwhile wait for the same result.
        The compression is nobody's own: a student who leaves while it runs cancels only their own wait."""
        loop = asyncio.get_running_loop()
        with self._lock:
            if path in self._store:  # finished while Streamlit served this request
                return self._store[path]
            pending = self._pending.get(path)
            if pending is None or pending.get_loop() is not loop:
                pending = loop.run_in_executor(None, compress, start, body)  # zlib lets go of the interpreter lock
                self._pending[path] = pending
                pending.add_done_callback(lambda done: self._keep(path, done))
        return await asyncio.shield(pending)

    def _keep(self, path: str, done: asyncio.Future) -> None:
        """When a compression ends: keep its answer if the store has room, and let the next miss start afresh."""
        with self._lock:
            if self._pending.get(path) is done:
                del self._pending[path]
            if done.cancelled() or done.exception() is not None:
                return
            answer = done.result()
            if path not in self._store and self._bytes + len(answer.body) <= MAX_BYTES:
                self._store[path] = answer
                self._bytes += len(answer.body)

    @staticmethod
    def _naming_held(send: Send, gzipped: set[bytes]) -> Send:
        """`send`, with a 304 for a browser holding the compressed file naming that file's validator."""
        if not gzipped:
            return send

        async def forward(message: Message) -> None:
            if message.get("type") == "http.response.start":
                message = not_modified_from(message, gzipped)
            await send(message)

        return forward

    @staticmethod
    async def _send_not_modified(send: Send, answer: Compressed, gzipped: set[bytes]) -> None:
        """304 for a kept file the browser already holds: the validator of the copy it holds (compressed or
        not) and the caching headers, no body."""
        headers = [(k, v) for k, v in answer.headers if k.lower() in NOT_MODIFIED_HEADERS and k.lower() != b"etag"]
        own = entity_tags(_header(answer.headers, b"etag") or b"")
        if own:
            tag = plain_tag(own[0])
            headers.append((b"etag", gzip_etag(tag) if tag in gzipped else b'"' + tag + b'"'))
        await send({"type": "http.response.start", "status": 304, "headers": headers})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    @staticmethod
    async def _send(send: Send, answer: Compressed) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": list(answer.headers)})
        await send({"type": "http.response.body", "body": answer.body, "more_body": False})
