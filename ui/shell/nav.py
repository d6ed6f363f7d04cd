"""The map of the app: every page with its section, icon, URL and a one-line promise.

app.py builds st.navigation from it and the home page draws its map from it, so the two never
disagree. Pictures for the map live in assets/images/<url_path>.png (made from the e2e screenshots).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import streamlit as st

from ui import under_apptest
from ui.shell.memo import memo

try:  # Streamlit internals: the flag behind its old "pages/ folder" mode (see ensure_app_navigation)
    from streamlit.runtime.pages_manager import PagesManager
except ImportError:  # pragma: no cover - a Streamlit without it has no such mode to escape
    PagesManager = None

ROOT = Path(__file__).resolve().parents[2]
IMAGES = ROOT / "assets" / "images"
# The browser tab's icon, served by the app itself: Streamlit fetches a ":material/...:" icon from Google's
# font host, the one request that left the machine (and failed in an offline classroom).
FAVICON = IMAGES / "favicon.png"


@dataclass(frozen=True)
class PageInfo:
    """One page of the app."""

    path: str  # file, relative to app.py
    title: str
    icon: str
    url_path: str  # "" for the home page
    section: str
    blurb: str  # one line for the home page's map

    @property
    def exists(self) -> bool:
        """Whether the page's file is there (app.py leaves missing pages out of the menu)."""
        return (ROOT / self.path).is_file()

    @property
    def image(self) -> Path:
        """The picture the home page shows for this page (may not exist yet)."""
        return IMAGES / f"{self.url_path or 'home'}.png"

    def picture(self) -> bytes | None:
        """The picture's bytes, read once per process; None when it has not been made yet."""
        return _read(str(self.image))


@memo(maxsize=64)
def _read(path: str) -> bytes | None:
    p = Path(path)
    return p.read_bytes() if p.is_file() else None


HOME = PageInfo("pages/home.py", "Home", ":material/home:", "", "Start",
                "What this app is and where to go.")
PAGES: list[PageInfo] = [
    HOME,
    PageInfo("pages/lessons.py", "Lessons", ":material/school:", "lessons", "Start",
             "Guided walks through the pages, one per chapter, with questions that check what you understood."),
    PageInfo("pages/attention.py", "Attention", ":material/grid_on:", "attention", "Look inside",
             "Every head of every layer, one head up close, and one query worked out number by number."),
    PageInfo("pages/positions.py", "Positions", ":material/linear_scale:", "positions", "Look inside",
             "How a Transformer knows word order: sinusoidal, learned and rotary (RoPE) positions."),
    PageInfo("pages/heads.py", "Heads", ":material/hub:", "heads", "Look inside",
             "Why several heads: each works in its own subspace, and you can switch heads off."),
    PageInfo("pages/masks.py", "Masks", ":material/visibility_off:", "masks", "Look inside",
             "Decide who may attend to whom, and read a mask as a graph."),
    PageInfo("pages/retrieval.py", "Retrieval", ":material/manage_search:", "retrieval", "Look inside",
             "Attention as a kernel smoother and a soft database, keys against values, and a hijacked key."),
    PageInfo("pages/depth.py", "Depth", ":material/layers:", "depth", "Look inside",
             "Stacking layers: residual paths, layer norm placement and how far information travels."),
    PageInfo("pages/cost.py", "Cost", ":material/speed:", "cost", "Look inside",
             "Attention against recurrence, timed on this machine, and attention without the n × n matrix."),
    PageInfo("pages/generation.py", "Generation", ":material/edit_note:", "generation", "Look inside",
             "The three families, cross-attention shapes, decoding with a KV cache, and how a model can cheat."),
    PageInfo("pages/train.py", "Train", ":material/model_training:", "train", "Build",
             "Train a small Transformer on a toy task and watch its attention form."),
]


def sections() -> dict[str, list[PageInfo]]:
    """Pages grouped by section, in menu order."""
    out: dict[str, list[PageInfo]] = {}
    for page in PAGES:
        out.setdefault(page.section, []).append(page)
    return out


def ensure_app_navigation() -> None:
    """Make sure this run went through app.py's st.navigation; if not, rerun so that it does.

    Streamlit decides once per server process, when the first browser session starts, whether
    the app uses the old "pages/ folder" mode: it does if a folder called pages/ sits beside
    app.py, until some run calls st.navigation. So if the very first visitor after a restart
    opens a deep link (a teacher's /attention?layer=1 link), Streamlit runs that page file
    alone: no sections, no wide layout, file names in the menu. Clearing the flag and
    rerunning sends the run through app.py, which keeps the URL and its query parameters.
    A real server arms the flag once per process, so this reruns at most once. AppTest re-arms
    it before every run, where rerunning would swallow the click being tested: skip it there
    (tests/e2e/test_deep_link.py covers the real server).
    """
    if PagesManager is not None and PagesManager.uses_pages_directory and not under_apptest():
        PagesManager.uses_pages_directory = False
        st.rerun()
