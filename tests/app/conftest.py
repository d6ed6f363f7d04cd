"""AppTest helpers: run app.py and switch to a page, or run a page file alone; read charts."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from ui.server import process
from ui.shell.testing import scan_components_once

scan_components_once()  # each AppTest would rescan every installed package for components (~0.3 s)
# The process settings every app process makes (ui/server/process.py: one torch thread, ...) from the first
# test on, as a server has them before its first page: a model's float results, and so the keys of the memos
# that take them as arguments, depend on torch's thread count. Without this, a page opened before any test
# ran app.py computed on two threads and missed the results shipped for a server (seen: Masks' compare_masking).
process.set_up()

TIMEOUT = 60
ROOT = Path(__file__).resolve().parents[2]  # AppTest resolves relative paths against the caller's folder


def app_at(page: str | None = None, query: dict | None = None) -> AppTest:
    """The app from its entry point, optionally switched to `page` (e.g. 'pages/attention.py')."""
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    if query:
        for k, v in query.items():
            at.query_params[k] = v
    at.run()
    if page:
        at.switch_page(page).run()
    return at


def page_at(page: str, query: dict | None = None) -> AppTest:
    """One page file run alone (no navigation)."""
    at = AppTest.from_file(str(ROOT / page), default_timeout=TIMEOUT)
    if query:
        for k, v in query.items():
            at.query_params[k] = v
    return at.run()


def plotly_specs(at: AppTest) -> list[dict]:
    return [json.loads(el.proto.spec) for el in at.get("plotly_chart")]


def decode_array(value):
    """Plotly 6+ ships numpy arrays as {'dtype', 'bdata', 'shape'}; lists pass through."""
    if isinstance(value, dict) and "bdata" in value:
        arr = np.frombuffer(base64.b64decode(value["bdata"]), dtype=np.dtype(value["dtype"]))
        shape = value.get("shape")
        if shape:
            arr = arr.reshape([int(s) for s in str(shape).split(",")] if isinstance(shape, str) else shape)
        return arr
    return np.asarray(value)


def assert_ok(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]


@pytest.fixture
def app():
    return app_at
