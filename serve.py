"""Start the Glassbox warm: `streamlit run serve.py` serves app.py and starts its warm-up with the server.

`streamlit run app.py` serves the same app, but Streamlit runs nothing of it until the first browser
connects, so that visitor waited for the torch import, the app's modules and the first model load, and
the warm-up (ui/server/warmup.py: the bundled models, every page's imports, the default measurements) began
only then. Here app.py is wrapped in Streamlit's ASGI app (`st.App`, which `streamlit run` finds in
this file), whose lifespan starts one thread as the server starts: the process settings app.py makes
(ui/server/process.py), then the warm-up. The server answers its health check at once; a visitor who arrives
while the thread is still working waits only for what is left. Every `streamlit run` option applies
as with app.py (`--server.port`, `--server.address`, .streamlit/config.toml).

It also sends Streamlit's frontend code gzip-compressed, each file compressed once per process
(ui/server/compressed_static.py): a first visit downloads about a third of the bytes. GLASSBOX_COMPRESS_STATIC=0
switches that off. And its page says where the server is (ui/server/page_address.py): Streamlit's frontend,
opened at a page's link, would first ask the page's address for the server's health (two 404s per page opened;
`streamlit run app.py` still makes them). Every answer says how browsers may use it: nosniff, a same-origin
referrer policy and frame-ancestors, GLASSBOX_FRAME_ANCESTORS or only the app's own pages (ui/server/security_headers.py).
And a session's uploads stay within 64 MiB in all, refused before their bytes are read (ui/server/upload_budget.py).
"""

from __future__ import annotations

import os
import threading
from contextlib import asynccontextmanager

import ui.server.blas  # noqa: F401  one BLAS thread per numpy call, set before numpy is first imported

import streamlit as st
from starlette.middleware import Middleware

from ui.server.compressed_static import CompressedStatic
from ui.server.page_address import ServerAddress
from ui.server.security_headers import SecurityHeaders
from ui.server.upload_budget import UploadBudget


def warm_up() -> None:
    """What app.py's first run would start: the process settings, then the warm-up thread."""
    from ui.server import process, warmup

    process.set_up()
    warmup.start()


@asynccontextmanager
async def lifespan(_app):
    """Start the warm-up beside the server (the import of torch alone takes about a second)."""
    threading.Thread(target=warm_up, name="glassbox-start", daemon=True).start()
    yield


os.environ["GLASSBOX_SERVED_BY"] = "serve.py"  # app.py's first run then knows these middlewares are in place
compress = os.environ.get("GLASSBOX_COMPRESS_STATIC", "1") != "0"
app = st.App("app.py", lifespan=lifespan,
             middleware=[Middleware(SecurityHeaders), Middleware(UploadBudget), Middleware(ServerAddress)]
             + ([Middleware(CompressedStatic)] if compress else []))
