"""The shape every page shares: a title, the idea in a paragraph, the equation, and 'try this'."""

from __future__ import annotations

from functools import partial

import pandas as pd
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


def csv_bytes(rows) -> bytes:
    """A table (a DataFrame, or a list of dicts) as CSV."""
    frame = rows if isinstance(rows, pd.DataFrame) else pd.DataFrame(list(rows))
    return frame.to_csv(index=False).encode()


def csv_download(rows, file_name: str, key: str, label: str = "Download CSV") -> None:
    """A CSV export of one table, written when the button is pressed rather than on every rerun (a
    callable as the button's data: Streamlit defers it), so a click elsewhere in the section stays cheap."""
    st.download_button(label, partial(csv_bytes, rows), file_name=file_name, mime="text/csv",
                       icon=":material/table:", key=key, on_click="ignore")


def number_table(frame: pd.DataFrame, formats: dict[str, str], **kwargs) -> None:
    """st.dataframe with each listed column shown in a printf format (e.g. "%.3f"), applied by the
    browser: a Styler would format every cell on the server on every rerun (about 4 ms a table)."""
    config = {name: st.column_config.NumberColumn(name, format=fmt) for name, fmt in formats.items()}
    st.dataframe(frame, hide_index=True, column_config=config, **kwargs)


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
