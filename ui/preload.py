"""Fetch the chart and table code while a student reads, not when the first chart arrives.

Streamlit's frontend loads the code of an element kind only when a page first shows one: Plotly (its
PlotlyChart chunk, about 4.7 MB of JavaScript) with the first chart, the table grid (DataFrame, about
0.5 MB and its parts) with the first table, each kind of control with the first of its kind (a few kB
each). Downloading, compiling and starting Plotly took about a second of the first chart page a
student opened in a tab after Home or Lessons (which draw none). Every page therefore asks the
browser, once the page's run has ended and the browser is idle, to import those chunks from the
addresses Streamlit itself would use: the browser keeps one copy of a module per address, so
Streamlit's own import later finds them ready. Nothing is shown; a page that draws them anyway loses
nothing (the imports are the ones it would make).
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import streamlit as st

# Streamlit's lazy chunks (names carry a hash) of the element kinds the pages use: the controls first
# (small), then st.dataframe / st.data_editor and st.plotly_chart. Lessons' code blocks (st.code, a
# 1.5 MB highlighter used on that page only) are left to load when needed.
CHUNK_GLOBS = ("Slider.*.js", "Metric.*.js", "NumberInput.*.js", "Checkbox.*.js", "Multiselect.*.js",
               "Radio.*.js", "Selectbox.*.js", "ButtonGroup.*.js", "DownloadButton.*.js", "TextInput.*.js",
               "TextArea.*.js", "FileUploader.*.js", "DataFrame.*.js", "PlotlyChart.*.js")
# A block that holds nothing but a script is empty, yet the page's spacing would still give it a gap
# (16 px above the title): leave such blocks out of the layout. The script has run by then.
HIDE_SCRIPT_BLOCKS = ("<style>[data-testid='stElementContainer']:has(> [data-testid='stHtml'] > script:only-child)"
                      " { display: none; }</style>")


@lru_cache(maxsize=1)
def chunks() -> tuple[str, ...]:
    """File names of the installed Streamlit's chunks for CHUNK_GLOBS (each kept when exactly one matches)."""
    folder = Path(st.__file__).parent / "static" / "static" / "js"
    found = [sorted(folder.glob(pattern)) for pattern in CHUNK_GLOBS]
    return tuple(names[0].name for names in found if len(names) == 1)


def script(names: tuple[str, ...]) -> str:
    """The page-side script: once this page's run has ended and the browser is idle, import `names`,
    found next to Streamlit's own bundle (waiting for the run keeps it off a first visit's own work)."""
    return (
        "<script>(() => { const main = document.querySelector('script[src*=\"static/js/index.\"]');"
        f" if (!main) return; const names = {json.dumps(list(names))};"
        " const go = () => names.forEach((n) => import(new URL(n, main.src).href).catch(() => {}));"
        " const idle = window.requestIdleCallback || ((f) => setTimeout(f, 200));"
        " const app = () => document.querySelector('[data-testid=\"stApp\"]');"
        " const when = () => (app() && app().getAttribute('data-test-script-state') === 'notRunning')"
        " ? idle(go) : setTimeout(when, 250); when(); })();</script>"
    )


def preload_element_code() -> None:
    """Send the script with this run (app.py calls it before every page); nothing when no chunk is known."""
    names = chunks()
    if names:
        st.html(HIDE_SCRIPT_BLOCKS)  # style only: Streamlit keeps it out of the page's blocks
        st.html(script(names), unsafe_allow_javascript=True)
