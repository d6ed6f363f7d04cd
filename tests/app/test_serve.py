"""serve.py's lifespan starts, beside the server, the process settings and then the warm-up (in a fresh
interpreter: constructing st.App pins process-wide Streamlit config that the other tests must not see).
The browser-level check, that the warm-up really finishes before any visit, is tests/e2e/test_serve.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

LIFESPAN = """
import asyncio, json, threading
import serve
from ui.server import process, warmup

calls = []
process.set_up = lambda: calls.append(("set_up", threading.current_thread().name))
warmup.start = lambda: calls.append(("start", threading.current_thread().name)) or True

async def main():
    async with serve.lifespan(serve.app):
        pass

asyncio.run(main())
for thread in threading.enumerate():
    if thread.name == "glassbox-start":
        thread.join(30)
print(json.dumps({"calls": calls, "app": type(serve.app).__name__, "script": str(serve.app._script_path)}))
"""


def test_the_lifespan_starts_the_settings_then_the_warm_up_in_a_thread_of_its_own():
    run = subprocess.run([sys.executable, "-c", LIFESPAN], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    seen = json.loads(run.stdout.strip().splitlines()[-1])
    assert seen["calls"] == [["set_up", "glassbox-start"], ["start", "glassbox-start"]]  # not the event loop's
    assert seen["app"] == "App" and seen["script"] == "app.py"  # the app it serves is app.py, as `streamlit run`
