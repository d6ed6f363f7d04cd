"""ui.server.upload_budget: a session's uploads together stay within the budget, refused before any of the body
is read; other requests pass untouched (issue 36, "Uploads held in memory")."""

from __future__ import annotations

import asyncio
import concurrent.futures

from ui.server.upload_budget import MIB, SESSION_UPLOAD_BUDGET, UploadBudget


def call(middleware, method: str, path: str, length: int | None) -> tuple[int, bool, bool]:
    """(status, whether the app was reached, whether any body was read) for one request."""
    reached, read, sent = [], [], []

    async def app(scope, receive, send):
        reached.append(True)
        await receive()
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async def receive():
        read.append(True)
        return {"type": "http.request", "body": b"x", "more_body": False}

    async def send(message):
        sent.append(message)

    headers = [] if length is None else [(b"content-length", str(length).encode())]
    scope = {"type": "http", "method": method, "path": path, "headers": headers}
    with concurrent.futures.ThreadPoolExecutor(1) as pool:  # its own event loop, whatever runs in this thread
        pool.submit(asyncio.run, UploadBudget(app, held=middleware)(scope, receive, send)).result()
    return sent[0]["status"], bool(reached), bool(read)


UPLOAD = "/_stcore/upload_file/session-a/file-1"


def test_an_upload_that_would_pass_the_sessions_budget_is_refused_unread():
    def holding(session: str) -> int:
        return {"session-a": 50 * MIB}.get(session, 0)
    status, reached, read = call(holding, "PUT", UPLOAD, 19 * MIB)
    assert (status, reached, read) == (413, False, False)
    assert call(holding, "PUT", UPLOAD, 10 * MIB)[:2] == (204, True)  # within what is left: it goes in
    assert call(holding, "PUT", "/_stcore/upload_file/session-b/file-1", 19 * MIB)[:2] == (204, True)  # holds none


def test_an_upload_without_its_length_is_refused_and_other_requests_pass():
    assert call(lambda s: 0, "PUT", UPLOAD, None)[:3] == (411, False, False)
    assert call(lambda s: SESSION_UPLOAD_BUDGET, "GET", "/_stcore/health", None)[:2] == (204, True)
    assert call(lambda s: SESSION_UPLOAD_BUDGET, "DELETE", UPLOAD, None)[:2] == (204, True)  # freeing is allowed


def test_serve_installs_it():
    from pathlib import Path

    source = (Path(__file__).resolve().parents[2] / "serve.py").read_text()
    assert "Middleware(UploadBudget)" in source  # the real server: tests/e2e/test_hardening.py's uploads pass it
