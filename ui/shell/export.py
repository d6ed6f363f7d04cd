"""Charts and links for slides and papers: every chart downloads as PNG and SVG, every page copies its link.

Plotly's toolbar has one download button (the camera), and its config says in which one format it saves
(`toImageButtonOptions.format`): Plotly.js names no second, SVG button, and a button of our own needs a
click function, which a config sent from Python as JSON cannot carry. So the camera is configured here
(`chart_config`: PNG at twice the chart's size, a file name that says page, model and view) and the page
script that `page_tools` sends once per page adds an SVG button beside it on every chart: it calls
`Plotly.downloadImage` (Plotly's own export, in the browser: nothing to install, nothing rendered on the
server) with the same file name. Left out: an SVG made on the server (plotly.io.to_image needs kaleido and a
browser beside the server; neither is installed, and it would cost server time per click) and a PNG/SVG switch
for the camera (two clicks and a setting to find, where two buttons on the chart take one). The same script
copies the page's address for "Copy link to this view":
the address the browser shows, which the page's controls keep up to date (a click inside a section reruns
only that section, so a link drawn by the server on the last full run could be stale).
"""

from __future__ import annotations

import re

import streamlit as st

from ui.shell.sidebar_url import MODEL_KEY

SCALE = 2  # PNG pixels per chart pixel: sharp on a projector and in print
PREFIX = "glassbox"
_PART = 40  # characters kept of each part of a file name
COPY_LABEL = "Copy link to this view"
SVG_TITLE = "Download plot as an SVG"
# Toolbar buttons that repeat others (box zoom and "reset axes" do their work): the toolbar sits over the top
# right of a chart, often on its title, and the SVG button makes it one wider.
REMOVED_BUTTONS = ("zoomIn2d", "zoomOut2d", "autoScale2d")


def slug(text: object) -> str:
    """`text` as a safe piece of a file name: lower-case letters, digits and single dashes, at most _PART
    characters. Model ids and views may hold anything (an uploaded model's name), so nothing else is kept."""
    return re.sub(r"[^a-z0-9]+", "-", str(text).lower()).strip("-")[:_PART].strip("-")


def file_stem(page: str, model_id: str | None, view: str) -> str:
    """The download's name without its extension: glassbox-<page>-<model>-<view>. A chart that does not
    show the sidebar's model (a toy example, a measurement of its own) passes model_id=None."""
    parts = [PREFIX, slug(page), slug(model_id) if model_id else "", slug(view)]
    return "-".join(part for part in parts if part)


def chart_config(page: str, model_id: str | None, view: str) -> dict:
    """Plotly's config for one chart (st.plotly_chart's `config`): the toolbar's camera saves a PNG at
    SCALE times the chart's size under `file_stem(page, model_id, view)`; the SVG button beside it (added
    by `page_tools`'s script) saves under the same name."""
    return {"toImageButtonOptions": {"format": "png", "scale": SCALE,
                                     "filename": file_stem(page, model_id, view)},
            "displaylogo": False, "modeBarButtonsToRemove": list(REMOVED_BUTTONS)}


def sidebar_model() -> str | None:
    """The sidebar's model id in this session, for a panel drawn by a helper that is not handed the
    selection (it is the model the helper's figure shows)."""
    model_id = st.session_state.get(MODEL_KEY)
    return str(model_id) if model_id else None


# The page script. Installed once per browser tab (the tab keeps its document across pages and reruns):
# - "Copy link to this view": one listener for every such button, copies window.location.href (through
#   the Clipboard API where the page is a secure context, e.g. 127.0.0.1 or https; otherwise through a
#   hidden text area, as on a classroom server reached by plain http) and says whether it worked.
# - SVG: whenever the page changes, every chart whose toolbar lacks it gets an SVG button after the
#   camera, drawn and coloured as Plotly draws its own (Plotly's disk icon; its toolbar colours, brighter
#   under the pointer). Plotly rebuilds a toolbar when its buttons change, so the check runs again then.
SCRIPT = """<script>(() => {
  if (window.__glassboxExport) return;
  window.__glassboxExport = true;
  const say = (status, text) => {
    if (!status) return;
    status.textContent = text;
    clearTimeout(status.glassboxTimer);
    status.glassboxTimer = setTimeout(() => { status.textContent = ''; }, 5000);
  };
  const copyText = async (text) => {
    if (navigator.clipboard && window.isSecureContext) { await navigator.clipboard.writeText(text); return; }
    const area = document.createElement('textarea');
    area.value = text; area.setAttribute('readonly', ''); area.style.position = 'fixed'; area.style.opacity = '0';
    document.body.appendChild(area); area.select();
    const ok = document.execCommand('copy'); area.remove();
    if (!ok) throw new Error('copy refused');
  };
  document.addEventListener('click', (ev) => {
    const button = ev.target.closest && ev.target.closest('.glassbox-copy-link');
    if (!button) return;
    const status = button.parentElement.querySelector('.glassbox-copy-status');
    copyText(window.location.href).then(() => say(status, 'Link copied.'),
      () => say(status, 'Could not copy: copy the address bar instead.'));
  });
  const NS = 'http://www.w3.org/2000/svg';
  const icon = (spec) => {
    const height = spec.height || (spec.ascent - spec.descent);
    const svg = document.createElementNS(NS, 'svg');
    svg.setAttribute('viewBox', '0 0 ' + spec.width + ' ' + height); svg.setAttribute('class', 'icon');
    svg.setAttribute('height', '1em'); svg.setAttribute('width', '1em');
    const path = document.createElementNS(NS, 'path');
    path.setAttribute('d', spec.path);
    path.setAttribute('transform', spec.transform || 'matrix(1 0 0 -1 0 ' + spec.ascent + ')');
    svg.appendChild(path);
    return svg;
  };
  const addSvgButton = (gd) => {
    const Plotly = window.Plotly;
    const bar = gd.querySelector('.modebar');
    if (!Plotly || !bar || bar.querySelector('.glassbox-svg')) return;
    const camera = bar.querySelector('.modebar-btn[data-title^="Download plot"]');
    if (!camera) return;
    const button = document.createElement('button');
    button.type = 'button'; button.className = 'modebar-btn glassbox-svg';
    button.setAttribute('rel', 'tooltip'); button.setAttribute('data-gravity', 'n');
    button.setAttribute('data-title', '""" + SVG_TITLE + """');
    button.setAttribute('aria-label', '""" + SVG_TITLE + """');
    button.appendChild(icon(Plotly.Icons.disk));
    const colours = (gd._fullLayout && gd._fullLayout.modebar) || {};
    const paint = (on) => { const p = button.querySelector('path'); if (p) p.style.fill = on ? colours.activecolor : colours.color; };
    paint(false);
    button.addEventListener('mouseenter', () => paint(true));
    button.addEventListener('mouseleave', () => paint(false));
    button.addEventListener('click', () => {
      const options = (gd._context && gd._context.toImageButtonOptions) || {};
      Plotly.downloadImage(gd, {format: 'svg', filename: options.filename || 'glassbox-chart'});
    });
    camera.after(button);
  };
  let queued = false;
  const scan = () => { queued = false; document.querySelectorAll('.js-plotly-plot').forEach(addSvgButton); };
  new MutationObserver(() => { if (!queued) { queued = true; requestAnimationFrame(scan); } })
    .observe(document.body, {childList: true, subtree: true});
  scan();
})();</script>"""

# The button in plain HTML, styled like Streamlit's secondary buttons (st.html keeps no inline <svg>, and an emoji
# needs a font a classroom machine may lack: the label says it in words).
BUTTON = (
    "<style>.glassbox-copy-link { font: inherit; font-size: 0.875rem; padding: 0.25rem 0.75rem;"
    " border-radius: 0.5rem; border: 1px solid rgba(128, 128, 128, 0.45); background: transparent;"
    " color: inherit; cursor: pointer; white-space: nowrap; }"
    " .glassbox-copy-link:hover { border-color: currentColor; }"
    " .glassbox-copy-status { font-size: 0.8rem; opacity: 0.75; margin-left: 0.5rem; }</style>"
    "<div class='glassbox-tools'><button type='button' class='glassbox-copy-link'"
    " title='Copies the address of this page with its settings, to paste into slides or a message'>"
    f"{COPY_LABEL}</button><span class='glassbox-copy-status' role='status'></span></div>"
)


def page_tools() -> None:
    """The "Copy link to this view" button, and the page script behind it and behind every chart's SVG
    button (see SCRIPT). Drawn by the page header, so every page has both."""
    st.html(BUTTON + SCRIPT, width="content", unsafe_allow_javascript=True)
