"""Issue 38: the pages other than Attention at 1,024 tokens, on a GPT-2 with a context of 1,024 (tiny width, so
each page is quick). Every panel whose cost grows faster than n² or whose drawing cannot stay readable says what
it reads and why (core.analysis.bounds); no figure sends more than about a megabyte; no page raises.

Generation, Positions and every other page: tests/app/test_long_inputs_pages.py (two files: each well under 20 s).
"""

from __future__ import annotations


import numpy as np

from core.analysis import bounds as B
from tests.app.conftest import decode_array
from tests.app.long_model import (FIGURE_BYTES, N, assert_every_figure_light, at_page, figure, texts,  # noqa: F401
                                   LONG_MODEL as MODEL, long_model, long_models_dir, long_text)  # fixtures too


def test_the_sidebar_reads_the_whole_context(long_model):
    at = at_page("home")
    assert any(f"the pages show its first {N:,}" in i.value for i in at.info)


def test_masks_draw_the_first_64_tokens_and_say_why(long_model):
    at = at_page("masks")
    note = next(i.value for i in at.info if "draws every pair of tokens" in i.value)
    assert f"it reads the first 64 tokens of your {N:,}" in note
    assert at.data_editor[0].value.shape == (64, 64)
    spec, _ = figure(at, "masks.influence")
    assert np.asarray(decode_array(spec["data"][0]["z"])).shape == (64, 64)
    assert_every_figure_light(at)


def test_depth_bounds_its_lens_and_gradient_and_says_why(long_model, monkeypatch):
    from ui.depth import view

    monkeypatch.setattr(view, "GRADIENT_BYTES", 4 << 20)  # this tiny model's gradient run fits the real budget whole
    limit = B.tokens_within(N, 2, 2, view.GRADIENT_COPIES, 4 << 20)
    assert 64 <= limit < N
    at = at_page("depth")
    words = texts(at)
    assert "The lens writes its top prediction in every cell" in words and f"of your {N:,}" in words
    assert "The gradient run keeps every layer's attention weights" in words
    assert f"it reads the first {limit} tokens of your {N:,}" in words
    spec, _ = figure(at, "depth.saliency")
    assert len(decode_array(spec["data"][0]["y"])) == limit
    lens, _ = figure(at, "depth.lens")
    assert len(lens["data"][0]["x"]) == view.LENS_SHOWN
    spec, _ = figure(at, "depth.norms")  # the stream's size reads every token
    assert np.asarray(decode_array(spec["data"][0]["z"])).shape[1] == N
    figure(at, "depth.field")  # the long-range paths follow the model's graph over all 1,024 tokens
    assert_every_figure_light(at)


def test_heads_q_and_k_pool_the_pattern_and_thin_the_plane(long_model):
    at = at_page("heads", view="qk")
    words = texts(at)
    assert "each cell is the largest weight of a block of 4 × 4 tokens" in words
    assert "past 64 tokens the plane names each point in its hover only" in words
    spec, _ = figure(at, "heads.fig_pca_pattern")
    assert np.asarray(decode_array(spec["data"][0]["z"])).shape == (256, 256)
    plane, _ = figure(at, "heads.fig_pca")
    assert len(plane["data"]) == 3  # one trace of lines, the keys, the queries: not a trace per line
    assert_every_figure_light(at)
