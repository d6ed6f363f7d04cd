"""Home: what the Glassbox is, in a few lines, and a map of the pages with a picture each."""

from __future__ import annotations

import streamlit as st
from streamlit.errors import StreamlitAPIException

from ui.nav import PAGES, PageInfo
from ui.page import header, try_this
from ui.sidebar import shared_sidebar

CARDS_PER_ROW = 3


def page_link(page: PageInfo) -> None:
    """A link into the page; when this file runs without the app's navigation, a plain URL link."""
    try:
        st.page_link(page.path, label=f"Open {page.title}", icon=page.icon)
    except StreamlitAPIException:  # st.page_link needs st.navigation's pages; run alone, use the URL
        st.markdown(f"[Open {page.title}](/{page.url_path})")


def card(page: PageInfo) -> None:
    """One page on the map: its picture, its promise, and a link."""
    with st.container(border=True):
        st.markdown(f"#### {page.title}")
        picture = page.picture()
        if picture:
            st.image(picture, width="stretch", output_format="PNG")  # as stored: no re-encoding per rerun
        st.markdown(page.blurb)
        page_link(page)


sel = shared_sidebar()
header(
    "Transformer Glassbox",
    "A small Transformer you can open up and poke. The models here were trained by this project on toy tasks "
    "(reverse or sort a list of digits, continue a repeated pattern, check subject-verb agreement, match "
    "brackets), small enough that their attention can be read by eye. Every page takes one idea from the "
    "Transformer and lets you see it and change it on a real model.\n\n"
    "**How to use it.** Pick a model and an input in the sidebar: every page uses them. Each page opens with "
    "the idea and its equation, then live figures, then *try this* suggestions. Everything you set is kept "
    "in the address bar, so copying the URL shares exactly the view you are looking at.",
    r"\mathrm{Attention}(Q,K,V)=\operatorname{softmax}\!\left(\frac{QK^{\top}}{\sqrt{d_k}}\right)V",
)
st.caption(f"Current model: **{sel.meta.get('title', sel.model_id)}** ({sel.arch}, {sel.model.cfg.n_layers} "
           f"layers × {sel.model.cfg.n_heads} heads, d_model = {sel.model.cfg.d_model}), task: {sel.task.title}.")

st.subheader("Map of the pages")
pages = [p for p in PAGES if p.url_path and p.exists]
missing = [p.title for p in PAGES if p.url_path and not p.exists]
for start in range(0, len(pages), CARDS_PER_ROW):
    for col, page in zip(st.columns(CARDS_PER_ROW), pages[start:start + CARDS_PER_ROW]):
        with col:
            card(page)
if missing:
    st.warning("These pages are listed in the menu plan but their files are missing: " + ", ".join(missing))

try_this("Start with **Attention**: pick the *reverse-encdec* model and look at cross-attention, where each "
         "output digit looks back at the input digit it copies.",
         "Change the input in the sidebar, then switch pages: the model and input come with you.",
         "Copy the address bar into a new tab: the same view opens, down to the layer, head and query token.")
