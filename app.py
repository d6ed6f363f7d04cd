"""Transformer Glassbox: the Streamlit entry point. Page config, navigation over pages/, the warm-up.

The page list lives in ui/shell/nav.py (the home page draws its map from the same list). A page whose
file is missing is left out of the menu instead of breaking every page; tests/app/test_shell.py
fails until every listed page exists.
"""

import os

import ui.server.blas  # noqa: F401  one BLAS thread per numpy call, set before numpy is first imported

import streamlit as st

from ui import under_apptest

from ui.shell import activity, lessons_bar, offscreen, preload

from ui.server import allocator, measure_process, process, recycle, warmup
from ui.shell.nav import FAVICON, sections

process.set_up()  # one torch thread, a short switch interval, malloc settings (ui/server/process.py)
if not under_apptest():
    # once per process: when idle, memory back to the system; when the class has left, what it computed too
    # (behind deploy/cluster.py --recycle-idle: the server asks the cluster for a fresh process instead, ui/server/recycle.py)
    allocator.start_trimmer(activity.last_run, before_trim=lambda: recycle.recycle_if_idle(activity.connected_sessions)
                            if recycle.enabled() else warmup.start_afresh(activity.connected_sessions))
warmup.start()  # once per process: models and default measurements, off the request path (ui/server/warmup.py)
activity.touch()  # this session is using the server (training shares it while others do: ui/train/runs.py)

st.set_page_config(page_title="Transformer Glassbox", page_icon=str(FAVICON), layout="wide",
                   initial_sidebar_state="collapsed" if lessons_bar.presenting() else "auto")  # ?present=1

PAGES = {
    section: [
        st.Page(p.path, title=p.title, icon=p.icon, default=True) if not p.url_path
        else st.Page(p.path, title=p.title, icon=p.icon, url_path=p.url_path)
        for p in pages if p.exists
    ]
    for section, pages in sections().items()
}

offscreen.skip_offscreen_blocks()  # long pages: the browser skips blocks out of sight (ui/shell/offscreen.py)
if os.environ.get("GLASSBOX_PRELOAD", "1") != "0":
    preload.preload_element_code()  # chart, table and control code fetched while a student reads (ui/shell/preload.py)
try:
    st.navigation({section: pages for section, pages in PAGES.items() if pages}).run()
except measure_process.Refused as exc:  # a measurement outside a section (those say it in place: ui/shell/sections.py)
    st.warning(str(exc), icon=":material/hourglass_empty:")
