"""ui/server/security_headers.py: every HTTP answer says nosniff, a same-origin referrer policy and who may frame
the app; the websocket passes as it was. Driven as ASGI directly; the real server's answers are checked in
tests/e2e/test_hardening.py."""

from __future__ import annotations

import pytest

from tests.app.test_compressed_static import FakeStatic, fetch, request, run
from ui.server import security_headers as sh


def test_every_http_answer_carries_the_headers_and_the_body_is_untouched():
    inner = FakeStatic()
    status, headers, body, _ = fetch(sh.SecurityHeaders(inner), request("/attention"))
    assert status == 200 and body == inner.body
    assert headers["x-content-type-options"] == "nosniff"
    assert headers["referrer-policy"] == "same-origin"
    assert headers["content-security-policy"] == "frame-ancestors 'self'"
    assert headers["x-frame-options"] == "SAMEORIGIN"  # the same rule for browsers before frame-ancestors
    assert headers["etag"] == '"abc123"'  # the app's own headers are kept


def test_a_header_the_app_sent_is_replaced_not_doubled():
    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 404,
                    "headers": [(b"X-Content-Type-Options", b"nosniff"), (b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"no", "more_body": False})

    sent = []

    async def go():
        async def receive():
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message):
            sent.append(message)

        await sh.SecurityHeaders(app)(request("/x"), receive, send)

    run(go())
    names = [k.lower() for k, _ in sent[0]["headers"]]
    assert sent[0]["status"] == 404 and names.count(b"x-content-type-options") == 1


def test_the_websocket_passes_as_it_was():
    seen = []

    async def app(scope, receive, send):
        seen.append(scope["type"])
        await send({"type": "websocket.accept", "subprotocol": "streamlit"})

    sent = []

    async def go():
        async def receive():
            return {"type": "websocket.connect"}

        async def send(message):
            sent.append(message)

        await sh.SecurityHeaders(app)({"type": "websocket", "path": "/_stcore/stream", "headers": []}, receive, send)

    run(go())
    assert seen == ["websocket"] and sent == [{"type": "websocket.accept", "subprotocol": "streamlit"}]


def test_a_school_names_the_site_that_may_frame_the_app(monkeypatch):
    monkeypatch.setenv(sh.FRAME_ANCESTORS_ENV, "'self'  https://learn.example.org")
    _, headers, _, _ = fetch(sh.SecurityHeaders(FakeStatic()), request("/"))
    assert headers["content-security-policy"] == "frame-ancestors 'self' https://learn.example.org"
    assert "x-frame-options" not in headers  # it cannot name another site; frame-ancestors rules


@pytest.mark.parametrize("ancestors, legacy", [("'self'", "SAMEORIGIN"), ("'none'", "DENY"),
                                               ("'self' https://a.example", None), ("*", None)])
def test_x_frame_options_says_the_same_where_it_can(ancestors, legacy):
    assert sh.frame_options(ancestors) == legacy


@pytest.mark.parametrize("value, policy", [
    ("", "'self'"),
    ("'none'", "'none'"),
    ("https://*.school.example:8443/app/", "https://*.school.example:8443/app/"),
    ("https:", "https:"),
    ("*", "*"),
    # Not a list of sources: 'self', never a header that ends the policy or another header.
    ("'self'; script-src *", "'self'"),
    ("https://a.example, https://b.example", "'self'"),
    ("https://a.example\r\nSet-Cookie: x=1", "'self'"),
    ("'none' https://a.example", "'self'"),
    ("'unsafe-inline'", "'self'"),
])
def test_the_frame_ancestors_setting_is_read_as_csp_sources_or_not_at_all(value, policy):
    assert sh.frame_ancestors(value) == policy


def test_a_server_started_without_serve_py_says_in_its_log_what_it_lacks(monkeypatch, caplog):
    """`streamlit run app.py` serves the pages without serve.py's middlewares (these headers, the upload
    budget): its first run says so in the server's log, once; under serve.py nothing is said."""
    import logging
    import threading

    from ui.server import process

    caplog.set_level(logging.WARNING, logger="glassbox.server")
    monkeypatch.setattr(process, "_warned", threading.Event())
    monkeypatch.setenv(process.SERVED_ENV, "serve.py")
    process.set_up()
    assert not caplog.records
    monkeypatch.delenv(process.SERVED_ENV)
    process.set_up()
    process.set_up()
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and "streamlit run serve.py" in said[0] and "frame-ancestors" in said[0]
