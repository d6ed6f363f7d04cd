"""The Generation page's figure builders: pure functions of arrays and lists, checked without a browser."""

from __future__ import annotations

import numpy as np
import pytest

from core.config import TransformerConfig
from core.analysis import generation as G
from core.figures import generation as F

CFG = TransformerConfig(arch="encoder-decoder", vocab_size=14, d_model=64, n_heads=4, n_layers=2, max_len=9)


def test_the_diagram_draws_one_dot_per_hook_and_marks_the_picked_one():
    hooks = G.family_hooks(CFG, "decoder")
    column = tuple((h.name, h.sublayer, " × ".join(h.axes)) for h in hooks if h.layer in (None, 0))
    fig = F.family_diagram((("Encoder-only", column, False), ("Decoder-only", column, True)), CFG.n_layers,
                           picked="blocks.0.attn.hook_q")
    other, dots, *key = fig.data  # the two columns, then the colour key of the sublayers
    assert len(dots.y) == len(column)
    sizes = dict(zip([c[0] for c in column], dots.marker.size))
    assert sizes["blocks.0.attn.hook_q"] > sizes["blocks.0.attn.hook_k"]
    assert len(set(other.marker.size)) == 1  # the same name in another family's column is not marked
    boxes = [trace.name for trace in key]
    assert {"self-attention", "MLP", "embedding"} <= set(boxes) and "cross-attention" not in boxes
    assert not {"self-attention", "MLP", "embedding"} & {a.text for a in fig.layout.annotations}  # no name in a box


def test_shape_blocks_scale_with_the_input_length():
    def widest_key_block(len_enc):
        rows = [("cross-attention", tuple((b.label, b.axes, b.sizes)
                                          for b in G.attention_shapes(CFG, "cross-attention", 1, 3, len_enc)))]
        rects = F.shape_blocks(rows).layout.shapes
        scores = rects[3]  # Q, K, V, scores, output: the scores are L_d x L_e
        return scores.x1 - scores.x0, scores.y1 - scores.y0

    w4, h4 = widest_key_block(4)
    w8, h8 = widest_key_block(8)
    assert h4 == pytest.approx(h8) and w8 > w4  # L_e widens the scores, L_d (the height) stays


def test_gradient_maps_share_one_colour_scale_and_draw_the_staircase():
    a, b = np.random.default_rng(0).random((4, 3)), np.zeros((4, 3))
    fig = F.gradient_maps((("leaky", a), ("proper", b)), ["1", "2", "3"], ["<bos>", "1", "2", "3"])
    heatmaps = [t for t in fig.data if t.type == "heatmap"]
    assert len(heatmaps) == 2 and {h.zmax for h in heatmaps} == {float(a.max())}
    stairs = [t for t in fig.data if t.type == "scatter"]
    assert len(stairs) == 2 and list(stairs[0].x[:2]) == [0.5, 0.5]


def test_the_time_chart_keeps_a_stray_spike_off_the_scale():
    flat = np.full(20, 1.0)
    spiky = np.linspace(1.0, 2.0, 20)
    spiky[10] = 50.0
    fig = F.time_chart(flat, spiky)
    assert fig.layout.yaxis.range[1] < 50.0 and fig.layout.yaxis.range[1] > 2.0
    assert max(fig.data[1].y) == 50.0  # still in the data, for hover


def test_attention_weights_use_the_fixed_scale():
    fig = F.tensor_heatmap(np.array([[0.2, 0.8]]), ["a"], "k", "q", weights=True)
    assert (fig.data[0].zmin, fig.data[0].zmax) == (0.0, 1.0)
    fig = F.tensor_heatmap(np.array([[-3.0, 1.0]]), ["a"], "d", "pos")
    assert (fig.data[0].zmin, fig.data[0].zmax) == (-3.0, 3.0)
