"""Let the browser skip the parts of a long page that are out of sight (CSS `content-visibility: auto`).

Chromium draws a page's Plotly charts one after another once their elements arrive, and each chart
asks for the page's layout while it draws (text sizes, automatic margins). On the long pages (10-17
charts among 30-50 blocks of text, formulas, tables and controls) every one of those requests laid
out and styled the whole page again. With `content-visibility: auto` on each top-level block of the
page, a block out of sight keeps its place but is neither styled, laid out nor painted until it
comes near the screen, so each request stays cheap; what a student sees is drawn exactly as before
(docs/first-visits.md: measured in chromium, the charts' sizes unchanged).

A group of sections that one fragment redraws (`section_group`: the controls at its top feed every
section in it, and nothing outside it) is one top-level block; its own blocks get the same rule, so a
long group is skipped piece by piece as the page is.

Three details keep it invisible:
- A block not yet drawn counts as `ESTIMATED_HEIGHT` tall (the mean of all pages' top-level blocks)
  until drawn once, then as its real height (`auto`): only the scroll bar's length moves.
- A contained block clips what is drawn past its edges (a focus ring, a toolbar or tooltip drawn at
  a block's border): `overflow-clip-margin` leaves them room.
- A contained block is the frame of anything `position: fixed` inside it, which would shrink a chart's
  or table's full-screen view to its block. Streamlit hides the page's scroll bar (an inline
  `overflow: hidden` on body) while something is full screen or a dialog is open: then nothing is
  contained.
"""

from __future__ import annotations

import streamlit as st

ESTIMATED_HEIGHT = "260px"  # mean height of a page's top-level blocks over all eleven pages (1400x1000 window)
TOP_LEVEL_BLOCKS = "[data-testid='stMainBlockContainer'] > [data-testid='stVerticalBlock'] > *"
GROUP_KEY = "glassbox-sections"  # st.container keys of section groups start with it (class st-key-<key>)
GROUP_BLOCKS = f"[class*='st-key-{GROUP_KEY}-'] > *"
CSS = (
    "<style>body:not([style*='overflow: hidden']) " + TOP_LEVEL_BLOCKS
    + ", body:not([style*='overflow: hidden']) " + GROUP_BLOCKS
    + " { content-visibility: auto; contain-intrinsic-size: auto " + ESTIMATED_HEIGHT
    + "; overflow-clip-margin: 3rem; }</style>"
)
# The same blocks drawn as if the rule were absent: what benches and tests compare the page against.
RULE_OFF = (TOP_LEVEL_BLOCKS + ", " + GROUP_BLOCKS
            + " { content-visibility: visible !important; contain: none !important; }")


def skip_offscreen_blocks() -> None:
    """Send the style rule above with this run (app.py calls it before every page)."""
    st.html(CSS)


def section_group(name: str):
    """The container a fragment that redraws several sections draws them in (`with section_group(...)`):
    its blocks are skipped out of sight one by one, as top-level blocks are."""
    return st.container(key=f"{GROUP_KEY}-{name}")
