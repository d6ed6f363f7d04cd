"""Issue 38: Generation and Positions at 1,024 tokens (their bounds, said on the page, and their pooled figures),
and every other page opened at 1,024 tokens without an exception, on a GPT-2 with a context of 1,024 (tiny width).
The Masks, Depth and Heads bounds: tests/app/test_long_inputs.py.
"""

from __future__ import annotations


import numpy as np
import pytest

from tests.app.conftest import decode_array
from tests.app.long_model import (FIGURE_BYTES, N, assert_every_figure_light, at_page, figure, texts,  # noqa: F401
                                   LONG_MODEL as MODEL, long_model, long_models_dir, long_text)  # fixtures too


def test_generation_pools_the_tensor_and_bounds_the_stepper(long_model):
    at = at_page("generation", hook="blocks.0.attn.hook_pattern")
    words = texts(at)
    assert f"takes its prompt from the first 64 tokens of your {N:,}" in words
    assert f"This tensor is {N:,} × {2 * N:,} numbers" in words and "drawn in blocks of 4 × 8 cells" in words
    spec, size = figure(at, "generation.tensor")
    assert np.asarray(decode_array(spec["data"][0]["z"])).shape == (256, 256)
    assert size < 600_000
    assert_every_figure_light(at)


def test_positions_pool_the_swapped_patterns(long_model):
    at = at_page("positions")
    assert "each cell is the largest weight of a block of 4 × 4 tokens" in texts(at)
    for key in ("positions.fig_swap_0", "positions.fig_swap_1"):
        spec, _ = figure(at, key)
        assert np.asarray(decode_array(spec["data"][0]["z"])).shape == (256, 256)
    assert_every_figure_light(at)


@pytest.mark.parametrize("page,query", [("attention", {}), ("heads", {}), ("heads", {"view": "orthogonal"}),
                                        ("retrieval", {}), ("cost", {}), ("train", {}), ("lessons", {})])
def test_every_other_page_opens_at_1024_tokens(long_model, page, query):
    """No exception, every figure light, and the page read the whole input (the sidebar's note)."""
    at = at_page(page, **query)
    assert any(f"the pages show its first {N:,}" in i.value for i in at.info)
    if at.get("plotly_chart"):
        assert_every_figure_light(at)
