"""The shape every page shares: a title, the idea in a paragraph, the equation, and 'try this'."""

from __future__ import annotations

import streamlit as st

from ui import query
from ui.params import Int


def header(title: str, idea: str, equation: str | None = None) -> None:
    """Title, a one-paragraph idea in our own words, and the equation it is about."""
    st.title(title)
    query.show_notes()
    st.markdown(idea)
    if equation:
        st.latex(equation)


def try_this(*prompts: str) -> None:
    """A short list of experiments for a student to run on the figure above."""
    with st.container(border=True):
        st.markdown("**Try this**\n\n" + "\n".join(f"- {p}" for p in prompts))


def pick_index(param: Int, label: str, n: int, default: int = 0, fmt=str, help: str | None = None,
               buttons: int = 8, width: int | str = "stretch") -> int:
    """A choice of 0..n-1 bound to URL parameter `param` (clamped): buttons when there are at most
    `buttons` choices, otherwise a select box of the given width."""
    if n <= buttons:
        return param.widget(st.segmented_control, label, hi=n - 1, default=min(default, n - 1), required=True,
                            format_func=fmt, help=help)
    return param.widget(st.selectbox, label, hi=n - 1, default=min(default, n - 1), format_func=fmt, help=help,
                        width=width)
