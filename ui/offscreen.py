"""Let the browser skip the parts of a long page that are out of sight (CSS `content-visibility: auto`).

Chromium draws a page's Plotly charts one after another once their elements arrive, and each chart
asks for the page's layout while it draws (text sizes, automatic margins). On the long pages (10-17
charts among 30-50 blocks of text, formulas, tables and controls) every one of those requests laid
out and styled the whole page again. With `content-visibility: auto` on each top-level block of the
page, a block out of sight keeps its place but is neither styled, laid out nor painted until it
comes near the screen, so each request stays cheap; what a student sees is drawn exactly as before
(README, "First visits": measured in chromium, the charts' sizes unchanged).

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
CSS = (
    "<style>body:not([style*='overflow: hidden']) " + TOP_LEVEL_BLOCKS
    + " { content-visibility: auto; contain-intrinsic-size: auto " + ESTIMATED_HEIGHT
    + "; overflow-clip-margin: 3rem; }</style>"
)


def skip_offscreen_blocks() -> None:
    """Send the style rule above with this run (app.py calls it before every page)."""
    st.html(CSS)
