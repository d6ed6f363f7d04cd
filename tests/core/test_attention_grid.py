"""The Attention page's every-head grid as data: token labels only outside the grid (query labels on the first
column, key labels under the bottom row), so none is drawn over a neighbouring heatmap; each row titled in its own
row and each column above the first row; neighbours apart; every label at 8 tokens and a readable subset at 128.

Pixel facts used below: a row is `cell_px` tall (190 by default); at 1024 x 768, the narrowest window the page
promises, the four heads of a layer share about 352 px, 88 px each, and a 10 px label needs 11 px of room."""

from __future__ import annotations

import json
import math

import numpy as np
import plotly.io as pio
import pytest

from core.figures import attention as F

ROW_PX = 190  # overview_grid's default cell_px: the height of one layer's row
HEAD_PX = 88  # one head's width at 1024 x 768 (four heads)
LABEL_PX = 11  # the room one 10 px token label needs along its axis


def grid(n: int, layers: int = 2, heads: int = 4, tokens: list[str] | None = None, selected=(0, 0)) -> dict:
    """The grid's plotly spec for random patterns of n tokens (`layers` x `heads` heads)."""
    pats = np.random.default_rng(n).dirichlet(np.ones(n), size=(layers, heads, n)).astype(np.float32)
    tokens = tokens or [f"t{i}" for i in range(n)]
    return json.loads(pio.to_json(F.overview_grid(pats, tokens, tokens, selected=selected), validate=False))


def axes(spec: dict, letter: str) -> list[dict]:
    """The x or y axes of the grid in trace order: layer 0 head 0, layer 0 head 1, ..."""
    return [spec["layout"][f"{letter}axis{t[letter + 'axis'][1:]}"] for t in spec["data"]]


def cell(index: int, heads: int) -> tuple[int, int]:
    """(layer, head) of the index-th heatmap (row-major, as overview_grid draws them)."""
    return divmod(index, heads)


def shown(axis: dict) -> bool:
    return axis.get("showticklabels", True) is not False


def plot_px(spec: dict) -> float:
    """The height of the plotting area (the figure less its top and bottom margins)."""
    lay = spec["layout"]
    return lay["height"] - lay["margin"]["t"] - lay["margin"]["b"]


@pytest.mark.parametrize("n", [8, 128])
def test_labels_sit_only_outside_the_grid(n):
    """Query labels on the first column only, key labels under the bottom row only: a head's labels never land
    on the heatmap beside or below it, however narrow the window. Shown labels may push the margins (automargin),
    so they are never cut either."""
    spec, layers, heads = grid(n), 2, 4
    for i, (x, y) in enumerate(zip(axes(spec, "x"), axes(spec, "y"))):
        layer, head = cell(i, heads)
        assert shown(y) == (head == 0), f"layer {layer} head {head}: query labels"
        assert shown(x) == (layer == layers - 1), f"layer {layer} head {head}: key labels"
        for axis in (x, y):
            if shown(axis):
                assert axis["automargin"] is True
            else:
                assert axis.get("ticks", "") == ""  # no stray tick marks inside the grid either


def test_rows_and_columns_are_titled_in_their_own_row():
    """Each row's title ("layer l") is its first head's y-axis title, which plotly centres on that row; the
    column titles ("head h") sit above the first row, centred on their column. Nothing is written in the gaps
    between rows, where a title would read as the row above's."""
    spec, heads = grid(8, layers=3, heads=4), 4
    ys, xs = axes(spec, "y"), axes(spec, "x")
    for i, y in enumerate(ys):
        layer, head = cell(i, heads)
        title = (y.get("title") or {}).get("text")
        assert title == (f"layer {layer}" if head == 0 else None)
    notes = spec["layout"]["annotations"]
    assert [a["text"] for a in notes] == [f"head {h}" for h in range(heads)]
    for h, note in enumerate(notes):
        lo, hi = xs[h]["domain"]
        assert note["x"] == pytest.approx((lo + hi) / 2)
        assert (note["yref"], note["y"], note["yanchor"]) == ("paper", 1, "bottom")  # above the first row


def test_neighbours_are_apart_and_the_frame_stays_in_its_gap():
    """Heatmaps never touch: columns and rows have a gap, and the selected head's orange frame (drawn a little
    outside its heatmap) ends before the neighbour below begins."""
    spec, heads = grid(8, layers=3, heads=4, selected=(1, 2)), 4
    xs, ys = axes(spec, "x"), axes(spec, "y")
    for h in range(heads - 1):
        assert xs[h + 1]["domain"][0] - xs[h]["domain"][1] > 0.02  # at least ~9 px of a 450 px grid
    px = plot_px(spec)
    gaps = [(ys[(layer - 1) * heads]["domain"][0] - ys[layer * heads]["domain"][1]) * px for layer in (1, 2)]
    assert min(gaps) >= 10
    for y in ys:  # each row is as tall as asked
        assert (y["domain"][1] - y["domain"][0]) * px == pytest.approx(ROW_PX, abs=0.5)
    frame = spec["layout"]["shapes"][0]
    overhang = -frame["y0"] * ROW_PX + frame["line"]["width"] / 2  # px below the framed heatmap
    assert overhang < min(gaps)


def test_every_label_at_8_tokens():
    spec = grid(8)
    labels = [f"{i}:t{i}" for i in range(8)]
    first_column, bottom_row = axes(spec, "y")[0], axes(spec, "x")[-1]
    for axis in (first_column, bottom_row):
        assert list(axis.get("tickvals", labels)) == labels


def ticks(axis: dict, labels: list[str]) -> list[int]:
    """The positions of the labels an axis writes."""
    return [labels.index(v) for v in axis["tickvals"]]


def test_a_readable_subset_at_128_tokens():
    """128 tokens: not none (as before) and not all (they would overprint): every step-th label, from the
    first token, evenly spaced and at least a label's room apart, on both axes."""
    n = 128
    spec = grid(n)
    labels = [f"{i}:t{i}" for i in range(n)]
    for axis, room in ((axes(spec, "y")[0], ROW_PX), (axes(spec, "x")[-1], HEAD_PX)):
        at = ticks(axis, labels)
        step = at[1] - at[0]
        assert at[0] == 0 and np.all(np.diff(at) == step)
        assert 5 <= len(at) < n
        assert room / n * step >= LABEL_PX  # px between two labels
        assert axis["ticktext"] == axis["tickvals"]  # the label is the token, with its position


@pytest.mark.parametrize("heads", [1, 2, 4, 8])
def test_key_labels_never_need_more_room_than_a_head_has(heads):
    """However many heads share the width, and for every length up to 128, the key labels fit one head's
    width at 1024 x 768; short inputs keep every label while they fit."""
    room = 4 * HEAD_PX / heads
    for n in range(1, 129):
        step = F.grid_tick_step(n, room)
        assert math.ceil(n / step) * LABEL_PX <= max(room, LABEL_PX)
        if n * LABEL_PX <= room:
            assert step == 1


def test_every_grid_size_a_student_can_train_builds():
    """Train allows other layer and head counts than the bundled 2 x 4: 3 or 5 layers used to end their last row
    a rounding error below 0, which plotly refuses (the page's grid raised). Every domain lies in [0, 1]."""
    for layers in range(1, 9):
        for heads in range(1, 9):
            pats = np.full((layers, heads, 3, 3), 1 / 3, dtype=np.float32)
            spec = json.loads(pio.to_json(F.overview_grid(pats, list("abc"), list("abc")), validate=False))
            for letter in "xy":
                for axis in axes(spec, letter):
                    lo, hi = axis["domain"]
                    assert 0 <= lo < hi <= 1


def test_the_bottom_margin_holds_the_longest_key_label():
    """Long tokens ("<bos>", "<pad>") written at -60° need more room under the grid than digits do."""
    short, long_ = grid(8, tokens=list("01234567")), grid(8, tokens=["<bos>"] + ["<pad>"] * 7)
    assert long_["layout"]["margin"]["b"] > short["layout"]["margin"]["b"]
    assert long_["layout"]["margin"]["b"] >= 0.87 * 6 * len("7:<pad>")  # ~6 px a character, sin 60°
