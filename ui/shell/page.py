"""The shape every page shares: a title, a short lead (the idea and its equation one click away), and 'try this'."""

from __future__ import annotations

from functools import partial

import pandas as pd
import pyarrow as pa
import streamlit as st

from ui.shell import export, query, sidebar_url
from ui.shell.params import Int


# Page-wide layout: less empty band above the title (the 3.75rem header stays clear), and a title that leaves room for the Copy link button
# beside it on a 1024-wide screen (where the sidebar takes 300 px), so the figure starts on the first screen.
PAGE_CSS = (
    "<style>[data-testid='stMainBlockContainer'] { padding-top: 4.5rem; }"
    " @media (max-width: 1200px) { [data-testid='stMainBlockContainer'] h1 { font-size: 2.1rem; } }"
    "</style>"
)


def header(title: str, idea: str, equation: str | None = None, *, lead: str) -> None:
    """Title (with "Copy link to this view" beside it), a one- or two-sentence `lead`, and the idea in
    full with its equation one click away: the page's first figure follows on the first screen."""
    st.html(PAGE_CSS)
    with st.container(horizontal=True, vertical_alignment="center", gap="small"):
        st.title(title, width="content")
        export.page_tools()
    query.show_notes()
    with st.container(key="page_lead"):  # presenter mode hides it: the lesson panel says what to look at
        _section_lead(lead, "Read more: the idea in full" + (" and its equation" if equation else ""), idea,
                     *([equation] if equation else []))


def lead(short: str, label: str, full: str, *equations: str) -> None:
    """A section's one- or two-sentence lead, then its full explanation and its equations (one st.latex each,
    narrow enough for the column beside the sidebar at 1024 px) in a closed expander: the figures come up
    sooner, and nothing of the text is lost."""
    st.markdown(short)
    with st.expander(label):
        st.markdown(full)
        for equation in equations:
            st.latex(equation)


_section_lead = lead  # for `header`, whose parameter `lead` hides the function's name


def csv_bytes(rows) -> bytes:
    """A table (a DataFrame, a list of dicts, or a function that builds one of them) as CSV."""
    if callable(rows):
        rows = rows()
    frame = rows if isinstance(rows, pd.DataFrame) else pd.DataFrame(list(rows))
    return frame.to_csv(index=False).encode()


def csv_download(rows, file_name: str, key: str, label: str = "Download CSV") -> None:
    """A CSV export of one table, written when the button is pressed rather than on every rerun (a
    callable as the button's data: Streamlit defers it), so a click elsewhere in the section stays cheap.
    `rows` may itself be a function that builds the table: then even building it waits for the press."""
    st.download_button(label, partial(csv_bytes, rows), file_name=file_name, mime="text/csv",
                       icon=":material/table:", key=key, on_click="ignore")


def computed(text: str, memo_, *args, **kwargs):
    """memo_(*args, **kwargs), under st.spinner(text) only while the result is not at hand yet (ui.shell.memo's
    `has`). Streamlit's spinner starts a timer thread every time it is entered: on a memo hit that was
    about a tenth of a click in Generation's decoding panel, for a spinner nobody sees."""
    if memo_.has(*args, **kwargs):
        return memo_(*args, **kwargs)
    with st.spinner(text):
        return memo_(*args, **kwargs)


def lazy_expander(label: str, key: str):
    """A closed expander whose content is built only while it is open (Streamlit's state-tracking
    expander: opening it reruns the page or fragment, and `.open` says whether it is open), so a
    closed one costs nothing on every other click. Returns the container, or None while closed."""
    box = st.expander(label, expanded=False, key=key, on_change="rerun")
    return box if box.open else None


def rows_table(rows) -> pa.Table | pd.DataFrame:
    """A list of dicts as an Arrow table, which st.dataframe sends as it is: through pandas the same
    table costs about 1 ms more on every rerun (the frame, then its conversion to Arrow). Rows whose
    keys differ, or a column Arrow cannot type (text mixed with numbers), stay a DataFrame, which
    shows them as before. A DataFrame is returned unchanged."""
    if isinstance(rows, pd.DataFrame):
        return rows
    rows = list(rows)
    if not rows or any(row.keys() != rows[0].keys() for row in rows):
        return pd.DataFrame(rows)
    try:
        return pa.Table.from_pylist(rows)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        return pd.DataFrame(rows)


def number_table(frame, formats: dict[str, str | tuple[str, float]], **kwargs) -> None:
    """st.dataframe with each listed column shown in a printf format (e.g. "%.3f"), or in one of
    Streamlit's named formats with a step that sets its decimals (("percent", 0.001) shows 0.1234 as
    12.3%, ("localized", 1) shows 4096 as 4,096), applied by the browser: a Styler would format every
    cell on the server on every rerun (4-7 ms a table). `frame` is a DataFrame or a list of dicts
    (`rows_table`)."""
    def column(name: str, fmt: str | tuple[str, float]):
        if isinstance(fmt, tuple):
            return st.column_config.NumberColumn(name, format=fmt[0], step=fmt[1])
        return st.column_config.NumberColumn(name, format=fmt)
    config = {name: column(name, fmt) for name, fmt in formats.items()}
    st.dataframe(rows_table(frame), hide_index=True, column_config=config, **kwargs)


def try_this(*prompts: str) -> None:
    """A short list of experiments for a student to run on the figure above."""
    with st.container(border=True):
        st.markdown("**Try this**\n\n" + "\n".join(f"- {p}" for p in prompts))


def pick_index(param: Int, label: str, n: int, default: int = 0, fmt=str, help: str | None = None,
               buttons: int = 8, width: int | str = "stretch") -> int:
    """A choice of 0..n-1 bound to URL parameter `param` (clamped): buttons when there are at most
    `buttons` choices, otherwise a select box of the given width. A change reruns the sections that read
    it (`Param.widget`)."""
    if n <= buttons:
        return param.widget(st.segmented_control, label, hi=n - 1, default=min(default, n - 1), required=True,
                            format_func=fmt, help=help)
    return param.widget(st.selectbox, label, hi=n - 1, default=min(default, n - 1), format_func=fmt, help=help,
                        width=width)


def needs_toy_task(what: str, model_id: str, key: str, why: str = "") -> None:
    """One sentence where a panel needs a toy task (a trained rule, a task's accuracy) and the model is a checkpoint
    from a folder, and a button that opens the bundled model `model_id`, which has one, on this page."""
    st.info(f"{what} needs a model trained on one of this app's toy tasks{': ' + why if why else ''}. "
            "This one is a checkpoint opened from a folder, which reads free text.", icon=":material/school:")
    st.button(f"Open {model_id} here", key=key, on_click=switch_model, args=(model_id,),
              icon=":material/swap_horiz:")


def switch_model(model_id: str) -> None:
    """Select another model in the shared sidebar, from its example input (a button callback: it runs before the
    sidebar draws)."""
    st.session_state[sidebar_url.MODEL_KEY] = model_id
    for key in (sidebar_url.INPUT_KEY, sidebar_url.TGT_KEY):
        st.session_state.pop(key, None)  # the new model may not read the old input
    st.session_state[sidebar_url.SEED_KEY] = 0


def display_name(model_id: str) -> str:
    """How a page names a model in its text: the id; a checkpoint's folder name, without the `folder:` prefix."""
    return str(model_id).removeprefix("folder:")  # ui.shell.models.FOLDER_PREFIX
