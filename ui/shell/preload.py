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

Two more first-time costs are paid here too: the KaTeX fonts (the browser fetches each face when a
formula first uses it and lays the page out again when it arrives; loading all 20 faces, 256 kB, took
Positions' first visit from the sidebar from 1.99 to 1.65 s) and the table grid's style sheet
(Streamlit links it with the first table, and a new style sheet restyles the whole page). Drawing a
figure with Plotly off screen to warm its code was tried and left out: it made the next page's first
chart slower (Attention 0.6 -> 1.4 s).
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import streamlit as st

STATIC = Path(st.__file__).parent / "static" / "static"  # Streamlit's frontend: js/ and css/
# Streamlit's lazy chunks (names carry a hash) of the element kinds the pages use: the controls first
# (small), then st.dataframe / st.data_editor and st.plotly_chart. Lessons' code blocks (st.code, a
# 1.5 MB highlighter used on that page only) are left to load when needed.
CHUNK_GLOBS = ("Slider.*.js", "Metric.*.js", "NumberInput.*.js", "Checkbox.*.js", "Multiselect.*.js",
               "Radio.*.js", "Selectbox.*.js", "ButtonGroup.*.js", "DownloadButton.*.js", "TextInput.*.js",
               "TextArea.*.js", "FileUploader.*.js", "DataFrame.*.js", "PlotlyChart.*.js")
# Style sheets Streamlit adds with those chunks (beside the bundle's folder, in ../css).
STYLE_GLOBS = ("DataFrame.*.css",)
# A block that holds nothing but a script is empty, yet the page's spacing would still give it a gap
# (16 px above the title): leave such blocks out of the layout. The script has run by then.
HIDE_SCRIPT_BLOCKS = ("<style>[data-testid='stElementContainer']:has(> [data-testid='stHtml'] > script:only-child)"
                      " { display: none; }</style>")


def _unique(folder: Path, globs: tuple[str, ...]) -> list[str]:
    """The file name matching each of `globs` in `folder`, where exactly one does."""
    found = [sorted(folder.glob(pattern)) for pattern in globs]
    return [names[0].name for names in found if len(names) == 1]


@lru_cache(maxsize=1)
def chunks() -> tuple[str, ...]:
    """File names of the installed Streamlit's chunks for CHUNK_GLOBS (each kept when exactly one matches)."""
    return tuple(_unique(STATIC / "js", CHUNK_GLOBS))


@lru_cache(maxsize=1)
def stylesheets() -> tuple[str, ...]:
    """Addresses, relative to Streamlit's bundle, of the style sheets for STYLE_GLOBS."""
    return tuple(f"../css/{name}" for name in _unique(STATIC / "css", STYLE_GLOBS))


def script(names: tuple[str, ...], styles: tuple[str, ...] = ()) -> str:
    """The page-side script: once this page's run has ended and the browser is idle, import `names` and
    link `styles` (both found beside Streamlit's own bundle, where its own lazy loader looks: it then adds
    neither again), and load every KaTeX face. Waiting for the run keeps it off a first visit's own work."""
    return (
        "<script>(() => { const main = document.querySelector('script[src*=\"static/js/index.\"]');"
        f" if (!main) return; const names = {json.dumps(list(names))}; const styles = {json.dumps(list(styles))};"
        " const idle = window.requestIdleCallback || ((f) => setTimeout(f, 200));"
        " const link = (n) => { const href = new URL(n, main.src).href;"
        " if (Array.from(document.querySelectorAll('link[rel=\"stylesheet\"]')).some((l) => l.href === href)) return;"
        " const l = document.createElement('link'); l.rel = 'stylesheet'; l.href = href; document.head.appendChild(l); };"
        " const fonts = () => document.fonts.forEach((f) => { if (f.status === 'unloaded'"
        " && f.family.replace(/[\"']/g, '').startsWith('KaTeX_')) f.load().catch(() => {}); });"
        " const go = () => { styles.forEach(link); fonts();"
        " names.forEach((n) => import(new URL(n, main.src).href).catch(() => {})); };"
        " const app = () => document.querySelector('[data-testid=\"stApp\"]');"
        " const when = () => (app() && app().getAttribute('data-test-script-state') === 'notRunning')"
        " ? idle(go) : setTimeout(when, 250); when(); })();</script>"
    )


def preload_element_code() -> None:
    """Send the script with this run (app.py calls it before every page); nothing when no chunk is known."""
    names = chunks()
    if names:
        st.html(HIDE_SCRIPT_BLOCKS)  # style only: Streamlit keeps it out of the page's blocks
        st.html(script(names, stylesheets()), unsafe_allow_javascript=True)
