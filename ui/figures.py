"""Figures kept per distinct arguments, so a rerun with the same view does not rebuild them.

`cached(builder)(*args)` calls a pure figure builder from core.figures through st.cache_resource
(numpy arguments are hashed; the same figure object is handed back and st.plotly_chart copies it,
so it must never be changed after building). The wrapper is made once per process: wrapping a
function with st.cache_* inside a page script would redo that work (reading the function's source)
on every rerun.
"""

from __future__ import annotations

from typing import Callable

import streamlit as st

MAX_FIGURES = 256  # per builder; a 128-token grid of 8 heads is well under a megabyte

_WRAPPED: dict[Callable, Callable] = {}


def cached(builder: Callable) -> Callable:
    """The builder, memoised on its arguments for every session of this process."""
    wrapped = _WRAPPED.get(builder)
    if wrapped is None:
        wrapped = st.cache_resource(max_entries=MAX_FIGURES, show_spinner=False)(builder)
        _WRAPPED[builder] = wrapped
    return wrapped
