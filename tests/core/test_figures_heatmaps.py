"""Heatmaps and the Attention page's figures: fixed 0..1 scale, labels on both axes, exact or
quantised values, small payloads, a diverging scale centred at 0 for differences."""

from __future__ import annotations

import base64
import json

import numpy as np
import plotly.io as pio
import pytest

from core.figures import attention as F
from core.figures.heatmaps import ATTENTION_SCALE, EXACT_CELLS, attention_heatmap, unique_labels


def _rows(n_q: int, n_k: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).dirichlet(np.ones(n_k), size=n_q).astype(np.float32)  # [q k]


def _decode(value) -> np.ndarray:
    """Plotly 6+ sends numpy arrays as {'dtype', 'bdata', 'shape'}."""
    if isinstance(value, dict) and "bdata" in value:
        arr = np.frombuffer(base64.b64decode(value["bdata"]), dtype=np.dtype(value["dtype"]))
        shape = value.get("shape")
        if shape:
            arr = arr.reshape([int(s) for s in str(shape).split(",")])
        return arr
    return np.asarray(value)


def _spec(fig) -> dict:
    return json.loads(pio.to_json(fig, validate=False))


def _payload_bytes_per_cell(n: int) -> float:
    """What st.plotly_chart ships for an n-token head (it calls plotly.io.to_json), per cell."""
    tokens = [f"t{i}" for i in range(n)]
    return len(pio.to_json(attention_heatmap(_rows(n, n), tokens, tokens), validate=False)) / (n * n)


# -- the shared attention heatmap -----------------------------------------------------------------

def test_small_heatmap_is_exact_on_a_fixed_scale_with_labels():
    pat = _rows(5, 7)
    spec = _spec(attention_heatmap(pat, list("abcde"), list("ABCDEFG")))
    trace = spec["data"][0]
    np.testing.assert_allclose(_decode(trace["z"]), pat, rtol=1e-6)
    assert (trace["zmin"], trace["zmax"]) == (0.0, 1.0)
    assert trace["y"] == unique_labels("abcde") and trace["x"] == unique_labels("ABCDEFG")
    assert "%{z:.3f}" in trace["hovertemplate"]
    assert spec["layout"]["yaxis"]["autorange"] == "reversed"  # first query at the top


def test_repeated_tokens_keep_their_own_rows():
    labels = unique_labels(["a", "a", "b"])
    assert len(set(labels)) == 3


def test_large_heatmap_is_quantised_to_uint8_percent():
    n = 200
    assert n * n > EXACT_CELLS
    pat = _rows(n, n)
    trace = _spec(attention_heatmap(pat, [str(i) for i in range(n)], [str(i) for i in range(n)]))["data"][0]
    z = _decode(trace["z"])
    assert trace["z"]["dtype"] == "u1" and z.shape == (n, n)
    np.testing.assert_allclose(z / 100, pat, atol=0.0051)  # within half a percent
    assert (trace["zmin"], trace["zmax"]) == (0, 100)
    assert "about" in trace["hovertemplate"]


def test_a_512_token_head_ships_at_most_4_bytes_per_cell():
    per_cell = _payload_bytes_per_cell(512)
    assert per_cell <= 4.0, per_cell
    # The exact float32 encoding would not fit the budget: the quantisation is what keeps it small.
    exact = len(pio.to_json(attention_heatmap(_rows(128, 128), [str(i) for i in range(128)],
                                              [str(i) for i in range(128)]), validate=False)) / 128 ** 2
    assert exact > 4.0


def test_heatmap_rejects_wrong_shapes():
    with pytest.raises(ValueError, match="2-D"):
        attention_heatmap(np.zeros((2, 2, 2)), ["a", "b"], ["a", "b"])
    with pytest.raises(ValueError, match="labels"):
        attention_heatmap(np.zeros((2, 3)), ["a", "b"], ["a", "b"])


# -- the Attention page's figures -----------------------------------------------------------------

def test_head_heatmap_names_axes_and_outlines_the_query():
    spec = _spec(F.head_heatmap(_rows(4, 6), list("abcd"), list("uvwxyz"), "query (target token)",
                                "key (source token)", query=2))
    assert spec["layout"]["xaxis"]["title"]["text"] == "key (source token)"
    assert spec["layout"]["yaxis"]["title"]["text"] == "query (target token)"
    shape = spec["layout"]["shapes"][0]
    assert (shape["y0"], shape["y1"]) == (1.5, 2.5)


def test_overview_grid_has_one_heatmap_per_head_on_one_scale():
    pats = np.random.default_rng(1).dirichlet(np.ones(5), size=(2, 3, 5)).astype(np.float32)  # [layer head q k]
    spec = _spec(F.overview_grid(pats, list("abcde"), list("abcde"), selected=(1, 2)))
    heat = [t for t in spec["data"] if t["type"] == "heatmap"]
    assert len(heat) == 6
    np.testing.assert_allclose(_decode(heat[4]["z"]), pats[1, 1], rtol=1e-6)  # row-major: layer 1, head 1
    assert all(t["coloraxis"] == "coloraxis" for t in heat)
    ca = spec["layout"]["coloraxis"]
    assert (ca["cmin"], ca["cmax"]) == (0, 1.0) and ca["colorscale"][0][1] == _spec(
        attention_heatmap(pats[0, 0], list("abcde"), list("abcde")))["data"][0]["colorscale"][0][1]
    titles = [a["text"] for a in spec["layout"]["annotations"]]
    assert titles == ["head 0", "head 1", "head 2"]  # the columns; the rows are titled "layer l" (test_attention_grid)
    frame = spec["layout"]["shapes"][0]
    assert frame["xref"] == "x6 domain"  # layer 1, head 2 is the sixth subplot


def test_overview_grid_quantises_large_inputs():
    pats = np.random.default_rng(2).dirichlet(np.ones(64), size=(2, 4, 64)).astype(np.float32)
    spec = _spec(F.overview_grid(pats, [str(i) for i in range(64)], [str(i) for i in range(64)]))
    heat = [t for t in spec["data"] if t["type"] == "heatmap"]
    assert heat[0]["z"]["dtype"] == "u1" and spec["layout"]["coloraxis"]["cmax"] == 100
    assert len(pio.to_json(F.overview_grid(pats, [str(i) for i in range(64)], [str(i) for i in range(64)]),
                           validate=False)) / pats.size < 3


def test_lines_view_draws_strong_lines_and_highlights_the_query():
    pat = np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [0.01, 0.09, 0.9]])
    spec = _spec(F.lines_view(pat, ["a", "b", "c"], ["x", "y", "z"], query=2))
    lines = [t for t in spec["data"] if t["mode"] == "lines"]
    segments = sum(len(_decode(t["x"])) // 3 for t in lines)
    assert segments == 5  # 0.01 is under the 2% threshold and the zeros are left out
    orange = [t for t in lines if t["line"]["color"] == F.QUERY_COLOUR]
    assert sum(len(_decode(t["x"])) // 3 for t in orange) == 2  # query 2 -> y (0.09) and z (0.9)
    widths = sorted(t["line"]["width"] for t in orange)
    assert widths[0] < widths[1]  # the 0.9 line is thicker than the 0.09 line
    labels = [t for t in spec["data"] if t["mode"] == "markers+text"]
    assert labels[0]["text"] == unique_labels("abc") and labels[1]["text"] == unique_labels("xyz")
    n = F.MAX_LINE_LABELS + 1
    big = _spec(F.lines_view(_rows(n, n), [str(i) for i in range(n)], [str(i) for i in range(n)]))
    assert not [t for t in big["data"] if t["mode"] == "markers+text"]  # too many to write: hover only


def test_query_bars_grey_out_masked_keys():
    spec = _spec(F.query_bars(np.array([0.7, 0.3, 0.0]), ["a", "b", "c"], np.array([True, True, False])))
    bar = spec["data"][0]
    assert bar["text"] == ["0.70", "0.30", "masked"]
    assert bar["marker"]["color"][2] == F.MASKED_COLOUR
    assert spec["layout"]["yaxis"]["range"][0] == 0


def test_steps_bars_show_scores_and_weights():
    spec = _spec(F.steps_bars(np.array([0.2, 0.4, 1.0]), np.array([0.2249, 0.2747, 0.5005]), ["k1", "k2", "k3"]))
    scores, weights = spec["data"]
    np.testing.assert_allclose(_decode(scores["y"]), [0.2, 0.4, 1.0])
    assert weights["text"] == ["0.2249", "0.2747", "0.5005"]


def test_entropy_bars_has_before_after_and_the_uniform_limit():
    spec = _spec(F.entropy_bars(np.array([0.5, 1.0]), np.array([0.1, 0.2]), np.array([1.0, 1.58]), ["a", "b"], 0.5))
    assert [t["name"] for t in spec["data"]] == ["T = 1 (as trained)", "T = 0.5", "uniform (largest possible)"]


def test_difference_heatmap_is_diverging_and_centred_at_zero():
    diff = np.array([[0.3, -0.1], [0.0, -0.3]])
    trace = _spec(F.difference_heatmap(diff, ["a", "b"], ["x", "y"]))["data"][0]
    assert trace["zmid"] == 0 and trace["zmin"] == -trace["zmax"] == pytest.approx(-0.3)
    assert trace["colorscale"] != _spec(attention_heatmap(np.eye(2), ["a", "b"], ["x", "y"]))["data"][0]["colorscale"]
    small = _spec(F.difference_heatmap(np.full((2, 2), 0.001), ["a", "b"], ["x", "y"]))["data"][0]
    assert small["zmax"] == pytest.approx(0.05)  # a floor keeps noise from looking dramatic
    big = np.random.default_rng(3).uniform(-1, 1, (200, 200))
    trace = _spec(F.difference_heatmap(big, [str(i) for i in range(200)], [str(i) for i in range(200)]))["data"][0]
    assert trace["z"]["dtype"] == "i1" and trace["zmid"] == 0


def test_attention_scale_is_colour_blind_safe():
    assert ATTENTION_SCALE in ("Cividis", "Viridis")
