"""Real server and browser: once the server is quiet, it trims its memory; it forgets what a class
computed only when no tab is connected any more (ui.server.allocator.IdleTrimmer, ui.server.warmup.start_afresh,
ui.shell.activity.connected_sessions, which asks Streamlit's session manager: this test is what notices if a
Streamlit upgrade changes that), and then ends the measurement worker a Cost page started
(ui.server.measure_process)."""

from __future__ import annotations

import time

import pytest

from tests.e2e.conftest import assert_no_exception, open_page, streamlit_server

pytestmark = pytest.mark.e2e
QUICK = {"GLASSBOX_TRIM_IDLE": "2", "GLASSBOX_TRIM_CHECK": "1"}  # quiet for 2 s, looked at every second


def _wait_for_line(log, text: str, after: int = 0, timeout_s: float = 60.0) -> str:
    """The first line of the server log past character `after` that contains `text`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for line in log.read_text(errors="replace")[after:].splitlines():
            if text in line:
                return line
        time.sleep(0.5)
    raise AssertionError(f"no {text!r} in the server log within {timeout_s:.0f} s:\n{log.read_text()[-3000:]}")


def test_memory_is_trimmed_while_a_tab_is_open_and_the_class_forgotten_once_it_closes(browser, tmp_path):
    log = tmp_path / "server.log"
    with streamlit_server(QUICK, log) as url:
        context = browser.new_context(viewport={"width": 1400, "height": 1000})
        page = context.new_page()
        open_page(page, f"{url}/attention", timeout=240_000)
        assert_no_exception(page)
        # Cost in a second tab: going to it in the same tab left the server a moment with no tab at all
        # (the old page's session gone, the new one not yet there), and after 2 s of quiet it forgot then.
        cost = context.new_page()
        open_page(cost, f"{url}/cost?nmax=64&b=16", timeout=240_000)  # not shipped: measured in the worker
        cost.get_by_text("Measured on this machine").first.wait_for(timeout=120_000)
        assert_no_exception(cost)
        trimmed = _wait_for_line(log, "memory trimmed")
        assert "RSS" in trimmed and "memos keep" in trimmed
        time.sleep(3)  # several more checks with the tab still open
        assert "nobody connected" not in log.read_text(), "forgot the class while a tab was open"
        seen = len(log.read_text(errors="replace"))

        context.close()  # the last tabs go: no page runs after them
        forgot = _wait_for_line(log, "nobody connected: forgot", after=seen)
        assert int(forgot.split("forgot ")[1].split()[0]) > 0  # the Attention page's results were let go
        assert "ended the measurement worker" in forgot  # its own process, started by the Cost page
        _wait_for_line(log, "memory trimmed", after=seen)  # and trimmed again
