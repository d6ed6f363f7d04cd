"""Every answer of the Glassbox's server says how browsers may use it: no type sniffing, no address sent to other
sites, framed only by the pages allowed to.

Added by serve.py beside ui/server/compressed_static.py (`SecurityHeaders`), outermost, so that it also covers
the answers those middlewares make themselves (a compressed file from memory, a 304). Streamlit sends none of
these headers except nosniff on its app-static route:
- `X-Content-Type-Options: nosniff`: a browser takes a file for the type it was sent as, never for what its
  bytes look like (an uploaded or echoed text read as a script or a page).
- `Referrer-Policy: same-origin`: a page's address (a class code, a student's input in the query) goes with
  requests to this server only, never to another site a page links to.
- `Content-Security-Policy: frame-ancestors ...`: which pages may show the app in a frame; only the app's own
  by default ('self'), so another site cannot wrap it and steer clicks. A school that shows the app inside its
  own site names that site in GLASSBOX_FRAME_ANCESTORS (CSP source expressions, e.g.
  `'self' https://learn.example.org`); deploy/nginx.conf.template sends the same policy through the balancer.
- `X-Frame-Options`: the same rule for browsers older than frame-ancestors, where it can say it: SAMEORIGIN for
  'self' (the default), DENY for 'none'. It cannot name other sites, so with a school's list it is left out
  (browsers that know frame-ancestors ignore it anyway when both are sent).
The websocket's upgrade is not an HTTP answer of this kind and passes as it was.
"""

from __future__ import annotations

import logging
import os
import re
from typing import Any, Awaitable, Callable, Optional

# Standard logging and no Streamlit import: deploy/cluster.py reads the same setting for nginx (`frame_ancestors`).
log = logging.getLogger(__name__)

Message = dict[str, Any]
Send = Callable[[Message], Awaitable[None]]

FRAME_ANCESTORS_ENV = "GLASSBOX_FRAME_ANCESTORS"
DEFAULT_FRAME_ANCESTORS = "'self'"
# A list of CSP source expressions: keywords in quotes, schemes, hosts with optional port, path and wildcards.
# Nothing that could end the directive or the header (";", ",", a line break).
SOURCE = re.compile(r"^(?:'(?:self|none)'|[A-Za-z][A-Za-z0-9+.-]*:|(?:[A-Za-z][A-Za-z0-9+.-]*://)?"
                    r"(?:\*\.)?[A-Za-z0-9.-]+(?::(?:\d+|\*))?(?:/[A-Za-z0-9._~/%-]*)?|\*)$")


def frame_ancestors(value: Optional[str] = None) -> str:
    """The frame-ancestors sources: `value` (GLASSBOX_FRAME_ANCESTORS when not given) if it is a valid list of
    source expressions, else 'self' (a mistyped setting must not open the app to every site, nor break it)."""
    if value is None:
        value = os.environ.get(FRAME_ANCESTORS_ENV, "")
    sources = value.split()
    if not sources:
        return DEFAULT_FRAME_ANCESTORS
    if not all(SOURCE.match(source) for source in sources) or ("'none'" in sources and len(sources) > 1):
        log.warning("%s=%r is not a list of CSP sources; using %s", FRAME_ANCESTORS_ENV, value,
                    DEFAULT_FRAME_ANCESTORS)
        return DEFAULT_FRAME_ANCESTORS
    return " ".join(sources)


def frame_options(ancestors: str) -> Optional[str]:
    """The X-Frame-Options value saying the same as frame-ancestors `ancestors`, or None where it cannot."""
    return {"'self'": "SAMEORIGIN", "'none'": "DENY"}.get(ancestors)


def security_headers(ancestors: str) -> list[tuple[bytes, bytes]]:
    """The headers every answer carries, for a frame-ancestors policy of `ancestors`."""
    headers = [(b"x-content-type-options", b"nosniff"),
               (b"referrer-policy", b"same-origin"),
               (b"content-security-policy", b"frame-ancestors " + ancestors.encode("ascii"))]
    legacy = frame_options(ancestors)
    return headers + ([(b"x-frame-options", legacy.encode("ascii"))] if legacy else [])


class SecurityHeaders:
    """ASGI middleware: the headers of `security_headers` on every HTTP answer (module docstring); a header of
    the same name the app sent is replaced, not doubled."""

    def __init__(self, app, ancestors: Optional[str] = None) -> None:
        """`ancestors`: the frame-ancestors sources (GLASSBOX_FRAME_ANCESTORS, else 'self', when not given)."""
        self.app = app
        self.headers = security_headers(frame_ancestors(ancestors))
        self._names = {name for name, _ in self.headers}

    async def __call__(self, scope, receive, send: Send) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message.get("type") == "http.response.start":
                kept = [(k, v) for k, v in message.get("headers", []) if k.lower() not in self._names]
                message = {**message, "headers": kept + self.headers}
            await send(message)

        await self.app(scope, receive, with_headers)
