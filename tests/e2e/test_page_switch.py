"""A page switch right after a section's control changed opens the new page (issue 36, found by the classroom
benchmark). The browser sends the control's last state along with the switch; the control's on_change ran
again and its rerun of the old page's sections answered the switch: the navigation kept naming the old page
(seeds 3 and 13 of bench/page_switch.py did so every time; seed 0 never did), and a real browser drew the new page under the
old page's address. bench/page_switch.py speaks the protocol as bench/classroom.py's students do."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.e2e.conftest import ROOT, streamlit_server

pytestmark = pytest.mark.e2e
pytest.importorskip("websocket", reason="websocket-client is in requirements-test.txt")


def test_a_page_switch_after_a_section_click_opens_the_new_page(tmp_path):
    with streamlit_server(log_path=tmp_path / "streamlit.log") as url:
        run = subprocess.run([sys.executable, "bench/page_switch.py", "--url", url, "--seeds", "3,13,0"],
                             cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr[-3000:]
    assert "3 tries, 0 page switches answered by the old page" in run.stdout
