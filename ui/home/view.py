"""The Home page's panels: the map of the pages, a card each with its picture, promise and link."""

from __future__ import annotations

import pandas as pd
import streamlit as st
from streamlit.errors import StreamlitAPIException

from core.analysis import attention as A
from core.families import FAMILIES
from core.pretrained import is_encoder_family
from core.figures.long_patterns import pattern_figure, pooled_note
from ui.shell import models, runs
from ui.shell.export import chart_config
from ui.shell.figures import cached
from ui.shell.nav import PAGES, PageInfo
from ui.shell.page import pick_index
from ui.shell.params import Int, Params
from ui.shell.sidebar import Selection
from ui.shell.text import literal

CARDS_PER_ROW = 3
HOME_MODEL = "english-decoder"  # a newcomer's first page reads their own sentence with a model of English
URL = Params("home", Int("layer", 0, lo=0, hi=0), Int("head", 0, lo=0, hi=0))
sentence_figure = cached(pattern_figure)


def your_sentence(sel: Selection) -> None:
    """One head's attention on the sidebar's text, with its layer and head in the URL, and the way on to the
    Attention page: what a newcomer came for, one click from the first screen."""
    st.subheader("Attention on your own words")
    cfg = sel.model.cfg
    kind = A.attention_kinds(sel.arch)[0]
    q_tokens, k_tokens = A.axis_tokens(kind, sel.tokens, sel.tgt_tokens)
    reads = ("type any sentence, or paste a page, into *Your text* in the sidebar"
             if models.is_text_model(sel.meta) else "change the tokens in the sidebar")
    st.markdown(f"Each row is one token of your input, and the colours along it say how much that token reads "
                f"every token before it in one **head** of the current model ({cfg.n_layers} layers × "
                f"{cfg.n_heads} heads): {reads}, and pick another layer or head.")
    with st.container(horizontal=True, vertical_alignment="bottom", gap="medium"):
        layer = pick_index(URL.layer, "Layer", cfg.n_layers, width=120)
        head = pick_index(URL.head, "Head", cfg.n_heads, width=120)
    name = kind.hook(layer, "hook_pattern")
    pattern = runs.run(sel, [name], logits=False)[name][0, head]  # [q k]
    st.plotly_chart(sentence_figure(pattern, tuple(q_tokens), tuple(k_tokens),
                                    title=f"{kind.label}: layer {layer}, head {head}"), width="stretch",
                    config=chart_config("home", sel.model_id, f"layer {layer} head {head}"))
    note = pooled_note(len(q_tokens), len(k_tokens))
    if note:
        st.caption(note)
    attention = next((p for p in PAGES if p.url_path == "attention"), None)
    if attention is not None and attention.exists:
        page_link(attention)


def current_model(sel: Selection) -> None:
    """One line naming the sidebar's model, so a student knows what every page will show (a checkpoint from a
    folder: its family, size and context too)."""
    cfg = sel.model.cfg
    title = literal(sel.meta.get("title", sel.model_id))  # a folder's name comes from the server's disk
    if models.is_text_model(sel.meta):
        english = sel.model_id in models.english_models()
        about = checkpoint_text(sel.meta["family"], sel.meta["parameters"], sel.meta["context"], layout=english)
        where = ("one of this project's English models, trained on the prose of the Python documentation"
                 if english else "a checkpoint from a folder")
        st.caption(f"Current model: **{title}**, {where}: {about} ({sel.arch}, {cfg.n_layers} "
                   f"layers × {cfg.n_heads} heads, d_model = {cfg.d_model}); it reads {sel.task.title.lower()}.")
        return
    st.caption(f"Current model: **{title}** ({sel.arch}, {cfg.n_layers} "
               f"layers × {cfg.n_heads} heads, d_model = {cfg.d_model}), task: {sel.task.title}.")


def checkpoint_text(family: str, parameters: int, context: int, layout: bool = False) -> str:
    """`GPT-2, 124M parameters, context 1,024 tokens` (`GPT-2 layout, ...` for a model that only shares the layout)."""
    count = models.parameter_count(parameters)
    name = models.FAMILY_NAMES.get(family, family) + (" layout" if layout else "")
    return f"{name}, {count} parameters, context {context:,} tokens"


def folder_arch(family: str) -> str:
    """The family of Transformer a checkpoint's family belongs to: BERT and RoFormer read with an encoder, the
    rest write."""
    return "encoder" if is_encoder_family(family) else "decoder"


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


def page_map() -> None:
    """Every page of the menu as a card, a few to a row; a listed page whose file is missing is named."""
    st.subheader("Map of the pages")
    pages = [p for p in PAGES if p.url_path and p.exists]
    missing = [p.title for p in PAGES if p.url_path and not p.exists]
    for start in range(0, len(pages), CARDS_PER_ROW):
        for col, page in zip(st.columns(CARDS_PER_ROW), pages[start:start + CARDS_PER_ROW]):
            with col:
                card(page)
    if missing:
        st.warning("These pages are listed in the menu plan but their files are missing: " + ", ".join(missing))


def families_table() -> None:
    """The three families of Transformer, what each suits, and which bundled models belong to it."""
    st.subheader("Three families, all in this app")
    st.markdown("The original Transformer had an encoder and a decoder; later models kept one stack or both. Every "
                "model in the sidebar belongs to one of the three families:")
    with st.expander("Read more: what the encoder and the decoder do"):
        st.markdown("The original Transformer had two stacks: an **encoder** that reads the input with attention in "
                    "both directions, and a **decoder** that writes the output one token at a time, looking only at "
                    "what it has written so far and, through cross-attention, at the encoder. Later models kept one "
                    "stack or both. Every model in the sidebar belongs to one of the three families below.")
    by_arch: dict[str, list[str]] = {arch: [] for arch in FAMILIES}
    for entry in models.manifest():
        by_arch.setdefault(entry.get("arch", ""), []).append(entry.get("title", entry["id"]))
    english = models.english_models()
    for model_id, found in english.items():
        by_arch[folder_arch(found.family)].append(f"{model_id} (English)")
    folders: dict[str, list[str]] = {arch: [] for arch in FAMILIES}
    for model_id, found in models.folder_models().items():
        if model_id in english:
            continue
        folders[folder_arch(found.family)].append(
            f"{literal(found.name)} ({checkpoint_text(found.family, found.parameters, found.context)})")
    rows = [{"family": f"{f.name} ({f.like}-like)", "attention": f.attention, "suits": f.suits, "bundled models here": ", ".join(by_arch[arch]) or "none"}
            for arch, f in FAMILIES.items()]
    if any(folders.values()):  # checkpoints found in this server's model folders (st.table reads Markdown: names literal)
        for row, arch in zip(rows, FAMILIES):
            row["checkpoints from folders"] = ", ".join(folders[arch]) or "none"
    st.table(pd.DataFrame(rows).set_index("family"))  # a plain table: long cells wrap, readable on a projector
