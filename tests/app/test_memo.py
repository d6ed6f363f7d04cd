"""The process-wide memos behind cached runs and figures (ui.shell.memo, ui.shell.figures.ShippedFigure)."""

from __future__ import annotations

import threading

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio
import pytest
import torch
from streamlit.testing.v1 import AppTest

from core.figures.attention import overview_grid
from ui.shell.figures import ShippedFigure, cached
from ui.shell.memo import Memo, fingerprint, freeze, memo


def test_fingerprint_is_by_content_shape_and_dtype():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert fingerprint(a) == fingerprint(a.copy())
    assert fingerprint(a) != fingerprint(a.reshape(3, 2))  # same bytes, other shape
    assert fingerprint(a) != fingerprint(a.astype(np.float64))
    b = a.copy()
    b[1, 2] += 1e-6
    assert fingerprint(a) != fingerprint(b)
    assert fingerprint(a.T) == fingerprint(np.ascontiguousarray(a.T))  # a strided view hashes its values
    assert fingerprint(torch.ones(3)) == fingerprint(torch.ones(3))  # tensors by content, not identity
    assert fingerprint(["x", a]) == fingerprint(["x", a.copy()])
    assert fingerprint(["x"]) != fingerprint(("x",))
    labels = np.array([["a", "b"], ["c", "d"]], dtype=object)
    assert fingerprint(labels) == fingerprint(labels.copy()) != fingerprint(labels.T)
    assert fingerprint({"b": 1, "a": a}) == fingerprint({"a": a.copy(), "b": 1})
    with pytest.raises(TypeError):
        fingerprint({1, 2})  # not hashable: refused with the type's name, not keyed by accident
    with pytest.raises(TypeError):
        fingerprint([bytearray(b"x")])


def test_memo_computes_once_per_distinct_argument_and_forgets_the_oldest():
    calls = []

    @memo(maxsize=2)
    def square(x, scale=1):
        calls.append(x)
        return np.asarray(x) ** 2 * scale

    first = square(np.array([1, 2]))
    assert square(np.array([1, 2])) is first  # same content: the stored object itself
    assert len(calls) == 1
    square(np.array([3]))
    square(np.array([1, 2]), scale=2)  # kwargs are part of the key
    assert len(calls) == 3 and len(square) == 2
    square(np.array([1, 2]))  # evicted (least recently used), so computed again
    assert len(calls) == 4
    square.clear()
    assert len(square) == 0


def test_memo_serves_many_threads_at_once():
    slow = Memo(lambda x: (threading.Event().wait(0.01), x * 2)[1], maxsize=8)
    results = []

    def worker(i):
        results.append(slow(i % 4))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == sorted((i % 4) * 2 for i in range(32))
    assert len(slow) == 4


def test_a_result_being_computed_is_waited_for_not_computed_again():
    started, release, calls = threading.Event(), threading.Event(), []

    def slow(x):
        calls.append(x)
        started.set()
        release.wait(5)
        return x * 2

    memo_ = Memo(slow, maxsize=8)
    results = []
    first = threading.Thread(target=lambda: results.append(memo_(3)))
    first.start()
    assert started.wait(5)
    others = [threading.Thread(target=lambda: results.append(memo_(3))) for _ in range(4)]
    for t in others:
        t.start()
    release.set()
    for t in [first, *others]:
        t.join(5)
    assert results == [6] * 5
    assert calls == [3]  # the four late callers waited for the first computation


def test_a_failed_computation_lets_the_next_caller_try_again():
    attempts = []

    def flaky(x):
        attempts.append(x)
        if len(attempts) == 1:
            raise RuntimeError("first try fails")
        return x

    memo_ = Memo(flaky, maxsize=4)
    with pytest.raises(RuntimeError):
        memo_(1)
    assert memo_(1) == 1 and len(attempts) == 2


def test_freeze_makes_shared_results_read_only():
    out = freeze({"a": np.zeros(3), "b": [np.ones(2)]})
    with pytest.raises(ValueError):
        out["a"][0] = 1.0
    with pytest.raises(ValueError):
        out["b"][0] += 1.0


def _grid_args():
    patterns = np.random.default_rng(0).dirichlet(np.ones(5), size=(2, 3, 5)).astype(np.float32)  # [l h q k]
    tokens = ["<bos>", "a", "b", "a", "b"]
    return patterns, tokens


def test_shipped_figure_serialises_exactly_like_its_source():
    patterns, tokens = _grid_args()
    source = overview_grid(patterns, tokens, tokens, selected=(1, 2))
    shipped = ShippedFigure(source)
    assert isinstance(shipped, go.Figure) and not shipped.data  # it keeps the dict, not the traces
    assert shipped.to_dict() == source.to_dict()
    assert pio.to_json(shipped, validate=False) == pio.to_json(source, validate=False)


def test_shipped_figure_arrays_are_ones_orjson_writes_directly_and_the_json_is_unchanged():
    # Label arrays made plotly's serialiser fall back to walking the whole figure in Python on every rerun
    import orjson

    labels = np.array([["may attend", "blocked"], ["blocked", "may attend"]])  # [q k] text, dtype <U
    colours = np.array(["#222222", "#0072B2"], dtype=object)
    strided = np.arange(12, dtype=np.float64).reshape(3, 4)[:, ::2]  # not contiguous
    source = go.Figure([go.Heatmap(z=[[1, 0], [0, 1]], text=labels, texttemplate="%{text}"),
                        go.Bar(x=["a", "b"], y=[1, 2], marker={"color": colours}),
                        go.Scatter(x=[0, 1, 2], y=[0, 1, 2], customdata=strided)])
    options = orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY
    with pytest.raises(TypeError):
        orjson.dumps(source.to_dict(), option=options)  # what plotly tries first, and falls back from
    shipped = ShippedFigure(source)
    orjson.dumps(shipped.to_dict(), option=options)
    assert pio.to_json(shipped, validate=False) == pio.to_json(source, validate=False)


def test_shipped_figures_share_one_copy_of_an_equal_template():
    patterns, tokens = _grid_args()
    first = ShippedFigure(overview_grid(patterns, tokens, tokens, selected=(1, 2)))
    second = ShippedFigure(overview_grid(patterns[::-1].copy(), tokens, tokens, selected=(0, 1)))
    assert first.to_dict()["layout"]["template"] is second.to_dict()["layout"]["template"]
    other = go.Figure(layout={"template": {"layout": {"font": {"size": 31}}}})
    assert ShippedFigure(other).to_dict()["layout"]["template"] == {"layout": {"font": {"size": 31}}}
    assert ShippedFigure(other).to_dict()["layout"]["template"] is not first.to_dict()["layout"]["template"]


def test_cached_builder_hands_back_one_shipped_figure_per_distinct_input():
    patterns, tokens = _grid_args()
    grid = cached(overview_grid)
    assert grid is cached(overview_grid)  # wrapped once per process
    a = grid(patterns, tokens, tokens, selected=(0, 0))
    assert isinstance(a, ShippedFigure)
    assert grid(patterns.copy(), list(tokens), tokens, selected=(0, 0)) is a
    assert grid(patterns, tokens, tokens, selected=(0, 1)) is not a
    other = patterns.copy()
    other[0, 0, 0] = other[0, 0, 0][::-1]
    assert grid(other, tokens, tokens, selected=(0, 0)) is not a


def test_cached_refuses_builders_that_are_new_on_every_rerun():
    with pytest.raises(ValueError, match="module-level"):
        cached(lambda z: go.Figure(go.Heatmap(z=z)))

    def local_builder(z):
        return go.Figure(go.Heatmap(z=z))

    with pytest.raises(ValueError, match="module-level"):
        cached(local_builder)


def _chart_page():
    import numpy as np
    import plotly.graph_objects as go
    import streamlit as st

    from ui.shell.figures import ShippedFigure

    fig = go.Figure(go.Heatmap(z=np.eye(3, dtype=np.float32), zmin=0, zmax=1), layout=dict(height=321))
    st.plotly_chart(fig, key="plain")
    st.plotly_chart(ShippedFigure(fig), key="shipped")


def test_streamlit_ships_the_same_chart_either_way():
    at = AppTest.from_function(_chart_page).run()
    assert not at.exception
    plain, shipped = at.get("plotly_chart")
    assert shipped.proto.spec == plain.proto.spec  # what the browser receives is identical
    assert '"height":321' in shipped.proto.spec.replace(" ", "")


def test_memo_is_bounded_in_bytes_and_keeps_the_newest():
    from ui.shell.memo import Memo
    store = Memo(lambda i: np.zeros(1000, dtype=np.uint8) + i, maxsize=100, max_bytes=3500)
    for i in range(10):
        store(i)
    assert len(store) == 3 and store.bytes == 3000  # the three newest fit under 3,500 bytes
    assert store.has(9) and store.has(7) and not store.has(6)
    store.clear()
    assert store.bytes == 0 and len(store) == 0


def test_a_result_larger_than_the_bound_is_still_returned_and_kept_alone():
    from ui.shell.memo import Memo
    store = Memo(lambda i: np.zeros(5000, dtype=np.uint8), maxsize=10, max_bytes=1000)
    assert store(1).size == 5000 and store(2).size == 5000
    assert len(store) == 1 and store.has(2)


def test_memos_made_in_many_threads_while_another_lists_them():
    from ui.shell import memo as memo_module

    made, errors, stop = [], [], threading.Event()

    def make():
        for i in range(300):
            m = memo(maxsize=2)(lambda x: x)
            m(i)
            made.append(m)  # kept alive: every one stays in the registry

    def read():
        while not stop.is_set():
            try:
                memo_module.held()
            except RuntimeError as exc:  # "Set changed size during iteration"
                errors.append(exc)

    reader = threading.Thread(target=read)
    reader.start()
    makers = [threading.Thread(target=make) for _ in range(4)]
    for t in makers:
        t.start()
    for t in makers:
        t.join(30)
    stop.set()
    reader.join(30)
    assert not errors and len(made) == 1200
    assert memo_module.held()[made[0].name][0] >= 1200  # all of one name add up
