"""What a careless visitor or an attacker can make the real server (`streamlit run serve.py`) do, over plain HTTP
and Streamlit's own websocket protocol: every answer carries the security headers (ui/server/security_headers.py),
a return visit revalidates the compressed frontend code with a 304 (ui/server/compressed_static.py), and the
server refuses an upload larger than the app accepts as it streams in (.streamlit/config.toml maxUploadSize)."""

from __future__ import annotations

import gzip
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest

from core.checkpoints import MAX_UPLOAD_BYTES
from tests.e2e.test_serve import get, static_scripts

pytestmark = pytest.mark.e2e

SECURITY = {"x-content-type-options": "nosniff", "referrer-policy": "same-origin",
            "content-security-policy": "frame-ancestors 'self'"}


def answer(url: str, method: str = "GET", data: bytes | None = None, **headers) -> tuple[int, dict, bytes]:
    """(status, headers in lower case, body) for one request, whatever its status (urllib raises for 304/4xx)."""
    request = urllib.request.Request(url, data=data, method=method,
                                     headers={k.replace("_", "-"): v for k, v in headers.items()})
    try:
        with urllib.request.urlopen(request, timeout=60) as r:
            return r.status, {k.lower(): v for k, v in r.headers.items()}, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, {k.lower(): v for k, v in exc.headers.items()}, exc.read()


def plotly_path() -> str:
    import streamlit

    return "/static/js/" + next((Path(streamlit.__file__).parent / "static" / "static" / "js").glob("PlotlyChart.*.js")).name


def test_every_kind_of_answer_carries_the_security_headers(server_url):
    main = static_scripts(server_url)[0]
    kinds = [("/", {}), ("/attention?layer=1", {}), ("/_stcore/health", {}), ("/_stcore/host-config", {}),
             (main, {}), (main, {"accept_encoding": "gzip"}), ("/static/js/no-such-file.js", {}),
             ("/_stcore/upload_file/nobody/nothing", {"method": "PUT", "data": b"x"})]
    for path, extra in kinds:
        status, headers, _ = answer(server_url + path, **extra)
        assert status < 500, (path, status)
        for name, value in SECURITY.items():
            assert headers.get(name) == value, (path, status, name, headers)


def test_a_return_visit_revalidates_plotly_with_a_304_not_the_whole_file(server_url):
    """The browser sends back the validator it was given, weak as it came or made strong by a proxy, for the
    compressed file or the plain one: 304 and no body each time (Plotly's chunk is 4.7 MB uncompressed)."""
    path = plotly_path()
    status, compressed, body = answer(server_url + path, accept_encoding="gzip, deflate, br")
    assert status == 200 and compressed["content-encoding"] == "gzip" and len(gzip.decompress(body)) > 1_000_000
    _, plain, _ = answer(server_url + path)
    gzip_tag, plain_tag = compressed["etag"], plain["etag"]
    assert gzip_tag.startswith('W/"gzip-') and gzip_tag != plain_tag
    held = [gzip_tag, gzip_tag.removeprefix("W/"), plain_tag, "W/" + plain_tag, f'"stale", {gzip_tag}']
    for tag in held:
        status, headers, body = answer(server_url + path, accept_encoding="gzip, deflate, br", if_none_match=tag)
        assert (status, body) == (304, b""), (tag, status, len(body))
        assert headers["etag"] in (gzip_tag, plain_tag) and headers.get("x-content-type-options") == "nosniff"
    status, headers, body = answer(server_url + path, accept_encoding="gzip", if_none_match='W/"gzip-stale"')
    assert status == 200 and headers["content-encoding"] == "gzip"  # another version: the file, compressed


def upload_slot(server_url: str):
    """(an upload URL of a live session, its cookies, its open websocket): what the browser gets by asking the server for a slot
    over the websocket, as any client of Streamlit's protocol can."""
    import websocket
    from streamlit.proto.BackMsg_pb2 import BackMsg
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

    with urllib.request.urlopen(server_url + "/_stcore/health", timeout=30) as r:  # the browser's XSRF cookie
        cookies = dict(c.split(";", 1)[0].split("=", 1) for c in r.headers.get_all("Set-Cookie") or [])
    ws = websocket.create_connection("ws" + server_url[4:] + "/_stcore/stream", subprotocols=["streamlit"],
                                     origin=server_url, timeout=60,
                                     cookie="; ".join(f"{k}={v}" for k, v in cookies.items()) or None)
    msg = BackMsg()
    msg.file_urls_request.request_id = "slot"
    msg.file_urls_request.file_names.append("big.safetensors")
    ws.send_binary(msg.SerializeToString())
    while True:
        data = ws.recv()
        if isinstance(data, bytes):
            forward = ForwardMsg()
            forward.ParseFromString(data)
            if forward.WhichOneof("type") == "file_urls_response":
                return server_url + forward.file_urls_response.file_urls[0].upload_url, cookies, ws


def multipart(size: int) -> tuple[bytes, str]:
    boundary = uuid.uuid4().hex
    head = (f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="big.safetensors"\r\n'
            "Content-Type: application/octet-stream\r\n\r\n").encode()
    return head + b"\0" * size + f"\r\n--{boundary}--\r\n".encode(), f"multipart/form-data; boundary={boundary}"


def refused_before_the_body(url: str, size: int, headers: dict[str, str]) -> int:
    """The status the server answers to a PUT announcing a `size`-byte body, before any of the body is sent (a
    server that would take it waits for the body instead: the read times out)."""
    import http.client
    import urllib.parse

    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=20)
    try:
        conn.putrequest("PUT", parts.path)
        for name, value in {**headers, "Content-Length": str(size)}.items():
            conn.putheader(name, value)
        conn.endheaders()
        return conn.getresponse().status
    finally:
        conn.close()


def test_the_server_refuses_an_upload_larger_than_the_app_accepts(server_url):
    """Streamlit's default took 200 MB per file into memory before any widget looked at it; the server's limit is
    the app's (20 MB): a larger upload is refused with 413 before its body is read, a file just under it still
    goes in; and however many slots a session fills, it holds at most 64 MiB."""
    url, cookies, ws = upload_slot(server_url)
    try:
        headers = {"Cookie": "; ".join(f"{k}={v}" for k, v in cookies.items())}
        headers["X-Xsrftoken"] = cookies["_streamlit_xsrf"]  # the frontend sends it back as a header
        # Streamlit compares the whole request (the file and its multipart framing, a few hundred bytes) with
        # the limit: a file a few kB under 20 MB is what goes in (teaching models are a few hundred kB).
        body, kind = multipart(MAX_UPLOAD_BYTES - 4096)
        headers["Content-Type"] = kind
        assert refused_before_the_body(url, 190 * 2 ** 20, headers) == 413
        assert refused_before_the_body(url, MAX_UPLOAD_BYTES + 2 ** 20, headers) == 413
        status, _, _ = answer(url, method="PUT", data=body, **{k.lower().replace("-", "_"): v for k, v in headers.items()})
        assert status == 204
        # More slots of the same session: together they stay within the session's 64 MiB (ui/server/upload_budget.py).
        # Two more files near the limit go in (about 60 MiB held); the next is refused before its body is read.
        slot = url.rsplit("/", 1)[0]
        for extra in ("second", "third"):
            status, _, _ = answer(f"{slot}/{extra}", method="PUT", data=body,
                                  **{k.lower().replace("-", "_"): v for k, v in headers.items()})
            assert status == 204, extra
        assert refused_before_the_body(f"{slot}/fourth", len(body), headers) == 413
    finally:
        ws.close()
