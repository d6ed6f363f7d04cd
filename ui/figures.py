"""Figures kept per distinct arguments and shipped ready-serialised, so a rerun with the same view is cheap.

`cached(builder)(*args)` calls a pure figure builder from core.figures through a process-wide memo
(ui.memo: numpy arguments are keyed by a digest of their bytes) and wraps the result in a
`ShippedFigure`. The wrapper is made once per process: wrapping inside a page script would redo
that work on every rerun.
"""

from __future__ import annotations

from typing import Callable

import plotly.graph_objects as go

from ui.memo import memo

MAX_FIGURES = 256  # per builder; a 128-token grid of 8 heads is well under a megabyte

_WRAPPED: dict[Callable, Callable] = {}


class ShippedFigure(go.Figure):
    """A finished figure that turns itself into plain data once, when it is built.

    st.plotly_chart calls `to_dict()` on every rerun; for a plotly Figure that deep-copies every
    trace and base64-encodes its arrays (about 2 ms for the grid of every head, most of the page's
    drawing time). This figure hands back the dict it made when it was wrapped. It is shared by
    every session, so it is never changed after wrapping: the plotly figure it came from is kept
    as `source` for reading, and this object itself holds no traces.
    """

    def __init__(self, source: go.Figure):
        super().__init__()
        self._source = source
        self._shipped = source.to_dict()

    @property
    def source(self) -> go.Figure:
        """The plotly figure the builder returned (read it, never change it)."""
        return self._source

    def to_dict(self) -> dict:
        return self._shipped

    def to_plotly_json(self) -> dict:
        return self._shipped


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
