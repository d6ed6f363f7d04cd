"""The Attention page at a GPT-2-layout checkpoint's full context of 1,024 tokens (a tiny random one: 2 layers x 4
heads, d_model 32): a 10,000-character paste is cut to the context with a note, never refused, and a link keeps
it; every view runs; the One head view shows a pooled overview and a window whose sliders change the token labels
it writes; every figure the browser gets stays under 1 MB."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import quote

import numpy as np
import pytest

from tests.app.conftest import app_at, assert_ok, decode_array
from tests.core.pretrained_models import save_hf, tiny_hf_model
from ui.shell import query
from ui.shell.sidebar_url import INPUT_KEY

PAGE = "pages/attention.py"
MODEL = "folder:gpt2-long"
N = 1024
PASTE = ("The animal didn't cross the street because it was too tired. We sat on the river bank; the money was in "
         "the bank. ") * 90  # 10,000 characters: about 7,700 tokens of the tiny tokenizer
MB = 1_000_000


@pytest.fixture(scope="module")
def long_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("models-long")
    save_hf(tiny_hf_model("gpt2", n_positions=N), root / "gpt2-long")  # n_embd 32, 2 layers, 4 heads
    return root


@pytest.fixture
def long_model(long_dir, tmp_path, monkeypatch) -> str:
    monkeypatch.setenv("GLASSBOX_MODELS_DIR", str(long_dir))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hf-cache"))
    return MODEL


def opened(view: str = "grid", **params) -> object:
    """The page opened by a link holding the long paste (cut to 1,024 tokens by the sidebar) and `params`."""
    at = app_at(PAGE, {"model": MODEL, "view": view, "input": PASTE[:10_000], **params})
    assert_ok(at)
    return at


def charts(at) -> dict[str, dict]:
    """Every plotly chart on the page by its key, as the spec the browser gets."""
    return {el.proto.id.split("attention.")[-1].split("-")[0]: json.loads(el.proto.spec)
            for el in at.get("plotly_chart") if el.proto.id}


def sizes(at) -> dict[str, int]:
    return {el.proto.id.split("attention.")[-1].split("-")[0]: len(el.proto.spec) for el in at.get("plotly_chart")}


def test_a_long_paste_is_cut_to_the_context_with_a_note_and_the_link_keeps_it(long_model):
    at = app_at(PAGE, {"model": MODEL})
    at.sidebar.text_area(key=INPUT_KEY).set_value(PASTE[:10_000]).run()
    assert_ok(at)
    notes = [i.value for i in at.sidebar.info]
    assert any("tokens long; the pages show its first 1,024" in n for n in notes), notes
    assert not at.sidebar.error  # cut, not refused
    link = at.query_params["input"]
    link = link[0] if isinstance(link, list) else link
    assert link == PASTE[:10_000]  # 10,000 characters fit a link (at most MAX_TEXT_PARAM_CHARS)
    again = app_at(PAGE, {"model": MODEL, "input": link})
    assert_ok(again)
    assert again.sidebar.text_area(key=INPUT_KEY).value == link and not again.warning


def test_a_link_carries_at_most_what_the_server_reads_back(long_model):
    """10,000 CJK characters are 90,000 bytes percent-encoded, past the 64 KiB the server reads of a request's
    header: the link keeps the start of the text, at most MAX_TEXT_PARAM_CHARS UTF-8 bytes, cut between characters."""
    text = "世界和平" * 2500
    at = app_at(PAGE, {"model": MODEL})
    at.sidebar.text_area(key=INPUT_KEY).set_value(text).run()
    assert_ok(at)
    link = at.query_params["input"]
    link = link[0] if isinstance(link, list) else link
    assert text.startswith(link) and len(link.encode()) <= query.MAX_TEXT_PARAM_CHARS
    assert len(quote(link)) <= 3 * query.MAX_TEXT_PARAM_CHARS < 64 * 1024
    assert any("first 1,024" in i.value for i in at.sidebar.info)


def test_the_grid_is_pooled_under_a_megabyte(long_model):
    at = opened()
    grid = charts(at)["fig_grid"]
    assert len(grid["data"]) == 2 * 4
    shape = decode_array(grid["data"][0]["z"]).shape
    assert shape[0] < N and shape == decode_array(grid["data"][-1]["z"]).shape  # pooled, every head alike
    assert grid["layout"]["xaxis"]["range"] == [-0.5, N - 0.5]
    assert max(sizes(at).values()) < MB


def window_labels(at) -> tuple[list[str], list[str]]:
    spec = charts(at)["fig_head"]["layout"]
    return spec["yaxis"]["tickvals"], spec["xaxis"]["tickvals"]


def test_the_window_moves_and_its_labels_follow(long_model):
    at = opened("head", query=str(N - 1))
    assert set(charts(at)) == {"fig_overview", "fig_head", "fig_lines", "fig_bars"}
    assert max(sizes(at).values()) < MB
    window = decode_array(charts(at)["fig_head"]["data"][0]["z"])
    assert window.shape == (32, 32) and window.dtype == np.float32  # full resolution, exact hover
    rows, cols = window_labels(at)
    assert rows[0].startswith(f"{N - 32}:") and cols[-1].startswith(f"{N - 1}:")  # the diagonal block
    assert len(rows) <= 64 and len(cols) <= 64
    at.slider(key="attention.wq").set_value(100).run()
    assert_ok(at)
    moved, same = window_labels(at)
    assert moved[0].startswith("100:") and moved != rows and same == cols
    box = charts(at)["fig_overview"]["layout"]["shapes"][0]
    assert (box["y0"], box["y1"]) == (99.5, 131.5)  # the overview outlines the window
    at.button_group(key="attention.win").set_value(64).run()
    assert_ok(at)
    rows64, _ = window_labels(at)
    assert decode_array(charts(at)["fig_head"]["data"][0]["z"]).shape == (64, 64)
    assert len(rows64) < 64  # thinned: 64 labels would not fit the window's height at 1024 x 768
    assert at.query_params["wq"] == "100" and at.query_params["win"] == "64"


def test_picking_a_query_outside_the_window_moves_the_window_to_it(long_model):
    at = opened("head", query=str(N - 1))
    at.selectbox(key="attention.query").set_value(200).run()
    assert_ok(at)
    q0 = at.slider(key="attention.wq").value
    assert q0 <= 200 < q0 + 32
    bars = charts(at)["fig_bars"]
    assert "query 200:" in bars["layout"]["title"]["text"] and bars["data"][0]["x"][-1].startswith("the other")


@pytest.mark.parametrize("view", ["steps", "temp", "compare", "export"])
def test_every_other_view_runs_at_1024_tokens_under_a_megabyte(long_model, view):
    at = opened(view)
    assert not at.error, [e.value for e in at.error]
    assert max(sizes(at).values(), default=0) < MB
    if view == "temp":
        (table,) = at.table
        assert len(table.value) == 64  # of 1,023 scored positions; the CSV has every one
    if view == "export":
        labels = [b.proto.label for b in at.get("download_button")]
        assert "Download CSV (layer 0, head 0, window)" in labels and "Download .npz" in labels


def test_a_summary_is_exact_when_short_and_light_when_long(long_model):
    """What the page keeps of a run: for a toy model's short input, every layer's pattern exactly as the model's
    own cache gives it (nothing pooled); at 1,024 tokens, the layers as float16, the overview pooled, and no cache
    of every hook (the summary holds about 2 bytes a cell of the kept layers, nothing per other hook)."""
    import torch

    from core.analysis import attention as A
    from core.analysis.attention import DECODER_SELF, pattern_names
    from ui.attention import runs as R
    from ui.shell import models
    from ui.shell.memo import nbytes

    model, _ = models.get_model("induction-sinusoidal")
    ids = tuple(range(3, 20))
    short = R._summary(("induction-sinusoidal", "cpu", ids, None), "self", 1.0, (0, 1), None)
    _, cache = model.run_with_cache(torch.tensor([ids]), pattern_names(DECODER_SELF, 2))
    exact = np.stack([cache[n][0].numpy() for n in pattern_names(DECODER_SELF, 2)])  # [layer head q k]
    assert short.block == (1, 1) and short.patterns.dtype == np.float32
    np.testing.assert_array_equal(short.overview, exact)
    np.testing.assert_array_equal(short.patterns, exact)
    np.testing.assert_allclose(short.entropy, A.row_entropy(exact), rtol=1e-5, atol=1e-6)  # [layer head q], bits
    model, _ = models.get_model(MODEL)
    long_ids = tuple(int(i) for i in torch.randint(0, 300, (N,), generator=torch.Generator().manual_seed(0)))
    keep = R.kept_layers(2, 4, N, N, 0)
    big = R._summary((MODEL, "cpu", long_ids, None), "self", 1.0, keep, None)
    assert keep == (0, 1) and big.patterns.dtype == np.float16 and big.overview.shape == (2, 4, 256, 256)
    assert nbytes(big) < 2 * 2 * 4 * N * N * 1.2  # the kept layers at 2 bytes a cell, and little else
    np.testing.assert_allclose(big.layer(1).sum(-1), 1.0, atol=5e-3)  # rows still add up to 1
    assert R.kept_layers(2, 4, N, N, 1, temperature=0.5) == (1,)  # a detour to another T keeps the open layer
