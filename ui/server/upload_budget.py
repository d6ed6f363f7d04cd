"""What one browser session may hold in uploads, in all: SESSION_UPLOAD_BUDGET bytes.

Streamlit keeps every uploaded file in memory until its session ends, and each upload request is checked only
on its own (server.maxUploadSize, 20 MiB here): a visitor could ask for any number of upload slots and fill each,
so one session held 5 x 190 MB before that limit, and could still hold n x 20 MiB after it. This ASGI middleware
(installed by serve.py) looks at each PUT to `/_stcore/upload_file/<session>/<file>` before a byte of its body is
read: it adds the request's Content-Length to what the session already holds (Streamlit's upload manager) and
answers 413 when the sum passes the budget, or 411 when the request does not say its length (a browser's upload
always does). The app itself keeps at most three uploaded models a session (ui/train/view.py), so the budget is
three models at the limit, plus room for lesson files.
"""

from __future__ import annotations

import re
from typing import Any, Awaitable, Callable, Optional

Message = dict[str, Any]
Send = Callable[[Message], Awaitable[None]]

MIB = 1024 * 1024
SESSION_UPLOAD_BUDGET = 64 * MIB  # 3 models of 20 MiB, lesson files, and the forms' framing
UPLOAD_PATH = re.compile(r"/_stcore/upload_file/(?P<session>[^/]+)/[^/]+$")


def held_by(session_id: str) -> int:
    """Bytes of uploaded files Streamlit holds for this session now (0 when there is no runtime)."""
    try:
        from streamlit.runtime import Runtime

        manager = Runtime.instance()._uploaded_file_mgr  # the runtime's own MemoryUploadedFileManager
        files = getattr(manager, "file_storage", {}).get(session_id, {})
        return sum(len(record.data) for record in list(files.values()))
    except Exception:  # noqa: BLE001 - no runtime (a unit test), or another manager: nothing held is known
        return 0


class UploadBudget:
    """ASGI middleware: refuse an upload that would take its session past `budget` bytes (module docstring)."""

    def __init__(self, app, budget: int = SESSION_UPLOAD_BUDGET,
                 held: Optional[Callable[[str], int]] = None) -> None:
        self.app, self.budget, self.held = app, int(budget), held or held_by

    async def __call__(self, scope, receive, send: Send) -> None:
        match = UPLOAD_PATH.search(scope.get("path", "")) if scope.get("type") == "http" else None
        if match is None or scope.get("method") != "PUT":
            await self.app(scope, receive, send)
            return
        length = dict(scope.get("headers", [])).get(b"content-length")
        if length is None or not length.isdigit():
            await _refuse(send, 411, "An upload must say its length.")
            return
        held = self.held(match["session"])
        if held + int(length) > self.budget:
            await _refuse(send, 413, f"This session already holds {held / MIB:.1f} MiB of uploads; at most "
                                     f"{self.budget / MIB:.0f} MiB in all. Remove a file, or open a new tab.")
            return
        await self.app(scope, receive, send)


async def _refuse(send: Send, status: int, text: str) -> None:
    """A plain-text answer with `status`, before any of the request's body was read."""
    body = text.encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
