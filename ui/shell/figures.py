"""Figures kept per distinct arguments and shipped ready-serialised, so a rerun with the same view is cheap.

`cached(builder)(*args)` calls a pure figure builder from core.figures through a process-wide memo
(ui.shell.memo: numpy arguments are keyed by a digest of their bytes) and wraps the result in a
`ShippedFigure`. The wrapper is made once per process: wrapping inside a page script would redo
that work on every rerun.
"""

from __future__ import annotations

import json
import threading
from typing import Callable

import numpy as np
import plotly.graph_objects as go

from ui.shell.memo import memo

MAX_FIGURES = 256  # per builder; a 128-token grid of 8 heads is well under a megabyte

_WRAPPED: dict[Callable, Callable] = {}


class ShippedFigure(go.Figure):
    """A finished figure that turns itself into plain data once, when it is built.

    st.plotly_chart calls `to_dict()` on every rerun; for a plotly Figure that deep-copies every
    trace and base64-encodes its arrays (about 2 ms for the grid of every head, most of the page's
    drawing time). This figure hands back the dict it made when it was wrapped, and keeps nothing
    else: no traces, not the figure it came from. It is shared by every session, so that dict is
    never changed after wrapping.

    The plotly template (Streamlit's theme: about 330 small lists and dicts, nine tenths of a small
    figure) is the same in nearly every figure; the dicts share one copy of it, so the figures a
    classroom leaves in the memos do not each keep their own.

    Its arrays are ones orjson writes as they are (`plain_arrays`): plotly's serialiser tries orjson on
    the dict first and, when one value is not such (an array of labels), walks the whole figure and its
    template in Python instead, on every rerun.
    """

    def __init__(self, source: go.Figure):
        super().__init__()
        self._shipped = share_template(plain_arrays(source.to_dict()))

    def to_dict(self) -> dict:
        return self._shipped

    def to_plotly_json(self) -> dict:
        return self._shipped


def plain_arrays(value):
    """`value` (a figure's dict) with every numpy array orjson cannot write directly (text, object or
    strided arrays) replaced by what plotly's own cleaning would give: a list, or a contiguous copy. The
    JSON is the same; only the Python walk at every rerun goes."""
    if isinstance(value, dict):
        return {key: plain_arrays(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain_arrays(item) for item in value] if any(
            isinstance(item, (dict, list, tuple, np.ndarray)) for item in value) else value
    if isinstance(value, np.ndarray):
        if value.dtype.kind in "biuf":
            return np.ascontiguousarray(value)
        return plain_arrays(value.tolist())
    return value


_TEMPLATES: dict[str, dict] = {}  # one shared copy of each distinct layout.template, by its JSON
_MAX_TEMPLATES = 16  # a builder making its own template each time is left alone beyond this
_TEMPLATES_LOCK = threading.Lock()


def share_template(figure: dict) -> dict:
    """Point `figure`'s layout.template at the one shared copy of an equal template (in place); returns it.

    The shared copy is read by every figure that points at it, so nothing may change it (nothing here does:
    st.plotly_chart only serialises the dict)."""
    layout = figure.get("layout")
    template = layout.get("template") if isinstance(layout, dict) else None
    if not isinstance(template, dict):
        return figure
    key = json.dumps(template, sort_keys=True, default=str)
    with _TEMPLATES_LOCK:
        shared = _TEMPLATES.get(key)
        if shared is None and len(_TEMPLATES) < _MAX_TEMPLATES:
            shared = _TEMPLATES[key] = template
    if shared is not None:
        layout["template"] = shared
    return figure


def cached(builder: Callable[..., go.Figure]) -> Callable[..., ShippedFigure]:
    """The builder, memoised on its arguments for every session of this process, returning shipped figures."""
    wrapped = _WRAPPED.get(builder)
    if wrapped is None:
        if "<" in builder.__qualname__ or builder.__module__ == "__main__":
            # A lambda, a nested function or one defined in a page script is a new object on every
            # rerun: it would never hit and would pile up here. Pass a module-level builder.
            raise ValueError(f"cached() needs a module-level figure builder, got {builder.__module__}."
                             f"{builder.__qualname__}")
        wrapped = memo(MAX_FIGURES)(lambda *args, **kwargs: ShippedFigure(builder(*args, **kwargs)))
        _WRAPPED[builder] = wrapped
    return wrapped
