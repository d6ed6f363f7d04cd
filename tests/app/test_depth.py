"""AppTest for the Depth page: every panel draws, each widget changes its figure, the rho button
reads the plain stack's measured factor, the twins table, other architectures, URL clamping."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from core.analysis import training_claims as TC
from tests.app.conftest import TIMEOUT, assert_ok, decode_array, plotly_specs
from tests.app.fragments import click

PAGE = str(Path(__file__).resolve().parents[2] / "pages" / "depth.py")
PRE, POST, ENCDEC = "sort-decoder", "sort-decoder-postln", "reverse-encdec"


def open_depth(**query) -> AppTest:
    """The Depth page run alone, with URL parameters."""
    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT * 3)
    for k, v in query.items():
        at.query_params[k] = v
    return at.run()


def titles(at: AppTest) -> list[str]:
    return [(s["layout"].get("title") or {}).get("text") or "" for s in plotly_specs(at)]


def chart(at: AppTest, title: str) -> dict:
    """The plotly spec whose title starts with `title`."""
    for spec in plotly_specs(at):
        text = (spec["layout"].get("title") or {}).get("text") or ""
        if text.startswith(title):
            return spec
    raise AssertionError(f"no chart titled {title!r} among {titles(at)}")


def trace(at: AppTest, title: str, name: str) -> dict:
    for t in chart(at, title)["data"]:
        if (t.get("name") or "").startswith(name):
            return t
    raise AssertionError(f"no trace {name!r} in {title!r}")


def values(t: dict, axis: str = "y") -> np.ndarray:
    return np.asarray(decode_array(t[axis]), dtype=np.float64)


def z(at: AppTest, title: str) -> np.ndarray:
    return np.asarray(decode_array(chart(at, title)["data"][0]["z"]), dtype=np.float64)


DEPTH = "Gradient at each block's input"


@pytest.fixture(scope="module")
def pre_page() -> AppTest:
    at = open_depth(model=PRE)
    assert_ok(at)
    return at


def test_every_panel_draws(pre_page):
    at = pre_page
    got = titles(at)
    for expected in ("‖x‖ per residual state", "Pieces of the final state", "Logit lens", "Gradient norm per residual",
                     "Saliency of each input token", DEPTH, "Zoom: the stacks", "H_res of sublayer",
                     "Stream size along the depth", "Loss gradient along the stream",
                     "Layers needed"):
        assert any(t.startswith(expected) for t in got), expected
    # One row per residual state of the 2-layer model: embed, then +attn, +mlp twice.
    assert chart(at, "‖x‖ per residual state")["data"][0]["y"] == ["embed", "L0 +attn", "L0 +mlp", "L1 +attn", "L1 +mlp"]
    lens = z(at, "Logit lens")
    assert np.nanmin(lens) >= 0 and np.nanmax(lens) <= 1 and np.isnan(lens).any() and not np.isnan(lens).all()
    # The depth chart: every default stack at 49 points (layers 0..48), plus the two bounds.
    for name in ("pre-LN", "post-LN", "no norm", "no residual", "hyper (Sinkhorn)"):
        assert len(values(trace(at, DEPTH, name))) == 49
    assert len(values(trace(at, DEPTH, "(1 - ρ)"))) == 49
    twins = next(f.value for f in at.dataframe if "loss (trained)" in f.value.columns)
    assert list(twins["norm"]) == ["pre-LN", "post-LN"]
    assert twins["loss (trained)"].max() < twins["loss (untrained)"].min()  # training lowered both losses
    # After training the pre-LN stream grows along the depth, the post-LN one is renormalised.
    pre = values(trace(at, "Stream size along the depth", "pre-LN trained"))
    post = values(trace(at, "Stream size along the depth", "post-LN trained"))
    assert pre[-1] / pre[0] > 2 * post[-1] / post[0]


def test_the_warm_up_claim_is_a_measured_rate_over_seeds_and_depths(pre_page):
    """Issue 39: the page states how often post-LN learns without warm-up (5 seeds, 2 and 4 layers), from the
    stored table, instead of a rule drawn from one seed."""
    rates = next(f.value for f in pre_page.dataframe if "warm-up 0" in f.value.columns)
    assert {2, 4} <= set(rates["layers"]) and {"pre-LN", "post-LN"} == set(rates["LayerNorm"])
    assert all(cell.endswith("of 5") for cell in rates["warm-up 0"])
    text = " ".join(m.value for m in pre_page.markdown)
    table = TC.load_table()
    assert f"post-LN in {TC.rate(table, 'post', 2, 0)} at 2 layers and {TC.rate(table, 'post', 4, 0)} at 4" in text
    assert "a rate that worsens with depth, not a rule" in text


def test_layers_and_gain_sliders_rebuild_the_stacks():
    at = open_depth(model=PRE)
    plain_48 = values(trace(at, DEPTH, "no residual"))
    page = at._tree  # the experiment's controls rerun only the figures that read them (keyed fragments)
    click(at, "depth.layers", 12, page)
    assert_ok(at)
    plain_12 = values(trace(at, DEPTH, "no residual"))
    assert len(plain_12) == 13 and len(values(trace(at, DEPTH, "(1 - ρ)"))) == 13
    assert plain_12[0] > plain_48[0]  # fewer layers, less decay at the bottom
    click(at, "depth.gain", 0.5, page)
    assert_ok(at)
    assert values(trace(at, DEPTH, "no residual"))[0] < plain_12[0] * 1e-3  # a smaller gain kills it faster
    assert at.query_params["L"] == "12" and at.query_params["gain"] == "0.5"


def test_rho_moves_only_the_bounds_and_the_button_uses_the_measured_factor():
    at = open_depth(model=PRE)
    pre_before = values(trace(at, DEPTH, "pre-LN"))
    at.slider(key="depth.rho").set_value(0.2).run()
    lower = values(trace(at, DEPTH, "(1 - ρ)"))
    np.testing.assert_allclose(lower[0], 0.8 ** 48, rtol=1e-6)
    np.testing.assert_array_equal(values(trace(at, DEPTH, "pre-LN")), pre_before)
    at.button(key="depth.use_rho").click().run()
    assert_ok(at)
    rho = at.slider(key="depth.rho").value
    plain = values(trace(at, DEPTH, "no residual"))
    measured = np.exp(-np.polyfit(np.arange(1, 49), np.log(plain[1:]), 1)[0])
    assert rho == pytest.approx(round(measured, 2))


def test_the_default_rho_shows_the_floor_far_above_the_ceiling(pre_page):
    # At rho = 0.5 the two bounds coincide (0.5^k both); the default must show the identity path's point.
    floor = values(trace(pre_page, DEPTH, "(1 - ρ)"))
    ceiling = values(trace(pre_page, DEPTH, "ρ^(L-l)"))
    assert np.all(floor[:-1] > ceiling[:-1]) and floor[-1] == ceiling[-1] == 1.0
    assert floor[0] / ceiling[0] > 1e20  # 48 layers down: orders of magnitude apart, not a hair
    assert floor[0] < 0.01  # and the floor itself still decays exponentially
    np.testing.assert_allclose(np.log(floor[:-1]) / np.arange(48, 0, -1), np.log(floor[0]) / 48)  # geometric
    caption = " ".join(c.value for c in pre_page.caption)
    assert "What the dashed lines promise" in caption and "measured curves" in caption


def test_measure_switch_draws_weight_gradients():
    at = open_depth(model=PRE)
    at.radio(key="depth.measure").set_value("weights").run()
    assert_ok(at)
    spec = chart(at, "Gradient of each block's weights")
    assert all(len(values(t)) == 48 for t in spec["data"])  # one point per block, no bounds
    assert at.query_params["measure"] == "weights"


def test_objective_and_position_change_the_backward_figures():
    at = open_depth(model=PRE)
    loss_grads = z(at, "Gradient norm per residual")
    pos = at.selectbox(key="depth.pos").value
    waterfall = values(chart(at, "Pieces of the final state")["data"][0])
    page = at._tree  # the focus controls rerun only the figures that read them (keyed fragments)
    click(at, "depth.obj", "logit", page)
    assert_ok(at)
    logit_grads = z(at, "Gradient norm per residual")
    assert not np.allclose(np.nan_to_num(loss_grads), np.nan_to_num(logit_grads))
    click(at, "depth.pos", pos - 1, page)
    assert_ok(at)
    assert not np.allclose(values(chart(at, "Pieces of the final state")["data"][0]), waterfall)
    # Causal: the logit at the chosen position has no gradient from later tokens (blank = log of 0).
    assert np.isnan(z(at, "Gradient norm per residual")[:, pos:]).all()


def test_path_sliders_change_the_formula():
    at = open_depth(model=PRE)
    f4 = values(trace(at, "Layers needed", "hop model"))
    at.slider(key="depth.H").set_value(1).run()
    assert_ok(at)
    f1 = values(trace(at, "Layers needed", "hop model"))
    ns = values(trace(at, "Layers needed", "hop model"), "x")
    np.testing.assert_allclose(f1, np.log(ns) / np.log(2))
    assert np.all(f1 >= f4)
    at.select_slider(key="depth.n").set_value(1024).run()
    assert next(m.value for m in at.metric if m.label == "RNN") == "1023 steps"


def test_hyper_controls_change_the_mixing_and_stay_doubly_stochastic():
    at = open_depth(model=PRE)
    at.slider(key="depth.streams").set_value(6).run()
    assert_ok(at)
    h = z(at, "H_res of sublayer")
    assert h.shape == (6, 6)
    np.testing.assert_allclose(h.sum(0), 1, atol=1e-5)
    np.testing.assert_allclose(h.sum(1), 1, atol=1e-5)


def test_other_architectures_and_post_ln():
    at = open_depth(model=ENCDEC)
    assert_ok(at)
    assert "L0 +cross" in chart(at, "‖x‖ per residual state")["data"][0]["y"]
    at.radio(key="depth.stack").set_value("encoder").run()
    assert_ok(at)
    enc = chart(at, "‖x‖ per residual state")["data"][0]["y"]
    assert "L0 +cross" not in enc and at.query_params["stack"] == "encoder"
    grads = z(at, "Gradient norm per residual")
    assert np.isfinite(grads).all()  # the decoder's loss reaches every source token through cross-attention
    post = open_depth(model=POST)
    assert_ok(post)
    assert any("post-LN" in w.value for w in post.warning)
    # Post-LN states are renormalised (times LayerNorm's learned gain): near sqrt(d_model) = 8, not growing.
    norms = z(post, "‖x‖ per residual state")
    assert np.all((norms[1:] > 4) & (norms[1:] < 16))
    pre_norms = z(open_depth(model=PRE), "‖x‖ per residual state")
    assert pre_norms[-1].mean() / pre_norms[0].mean() > norms[-1].mean() / norms[0].mean()


def test_url_params_are_clamped_with_a_note():
    at = open_depth(model=PRE, L="999", gain="abc", rho="5", H="0", n="7", at="-3", show="bogus", obj="nope",
                    measure="x", iseed="1e9", tau="2")
    assert_ok(at)
    assert at.slider(key="depth.layers").value == 48
    assert at.slider(key="depth.rho").value == 0.99
    assert at.slider(key="depth.H").value == 1
    assert at.select_slider(key="depth.gain").value == 1.0
    assert at.select_slider(key="depth.n").value == 64
    assert at.selectbox(key="depth.pos").value == 0
    assert at.multiselect(key="depth.variants").value == ["pre-LN", "post-LN", "no norm", "no residual",
                                                           "hyper (Sinkhorn)"]
    notes = " ".join(w.value for w in at.warning)
    for param in ("L=999", "rho=5", "H=0", "gain=", "show="):
        assert param in notes, param


def test_the_url_names_and_formats_the_page_writes():
    at = open_depth(model=PRE)
    assert_ok(at)
    url = {k: v for k, v in dict(at.query_params).items() if k not in ("model", "input")}
    assert url == {"at": str(at.selectbox(key="depth.pos").value), "obj": "loss", "L": "48", "gain": "1.0",
                   "iseed": "0", "measure": "stream", "show": "pre-LN,post-LN,no norm,no residual,hyper (Sinkhorn)",
                   "streams": "4", "noise": "0.5", "rho": "0.1", "n": "64", "H": "4", "tau": "0.1"}
    at.slider(key="depth.rho").set_value(0.3).run()
    page = at._tree  # the stacks shown rerun only the figures that read them (keyed fragments)
    click(at, "depth.variants", ["no residual", "hyper (free mixing)"], page)
    assert_ok(at)
    assert at.query_params["rho"] == "0.3" and at.query_params["show"] == "no residual,hyper (free mixing)"
    click(at, "depth.variants", [], page)
    assert_ok(at)
    assert at.query_params["show"] == "" and any("at least one stack" in w.value for w in at.warning)


def test_a_shared_stack_list_keeps_known_stacks_and_notes_the_rest():
    at = open_depth(model=PRE, show="no residual, Pre-LN,bogus")
    assert_ok(at)
    assert at.multiselect(key="depth.variants").value == ["no residual", "pre-LN"]
    assert "bogus" in " ".join(w.value for w in at.warning)
    assert at.query_params["show"] == "no residual,pre-LN"
    assert [t["name"] for t in chart(at, DEPTH)["data"] if not t["name"].startswith(("(1", "ρ"))] == \
        ["no residual", "pre-LN"]


@pytest.mark.parametrize("query", [{"model": "induction-rope", "input": "<bos>"},
                                   {"model": "reverse-encdec", "input": "1"}])
def test_a_one_token_input_draws_every_panel(query):
    # /depth?model=induction-rope&input=<bos>: one token in (and, for the encoder-decoder, one source token).
    at = open_depth(**query, at="5")
    assert_ok(at)
    got = titles(at)
    for expected in ("‖x‖ per residual state", "Pieces of the final state", "Logit lens", "Gradient norm per residual",
                     "Saliency of each input token", DEPTH, "H_res of sublayer", "Stream size along the depth",
                     "Layers needed"):
        assert any(t.startswith(expected) for t in got), expected
    last = len(at.selectbox(key="depth.pos").options) - 1
    assert at.query_params["at"] == str(last) and "at=5" in " ".join(w.value for w in at.warning)
    assert any("after **0** stacked layer(s)" in m.value for m in at.markdown)  # the last token is the first
    if query["model"] == "induction-rope":  # <bos> alone scores nothing: only a logit has a gradient
        assert at.radio(key="depth.obj").options == ["one logit (the right answer at the chosen position)"]
        assert at.query_params["obj"] == "logit" and "stack" not in at.query_params
        assert z(at, "‖x‖ per residual state").shape[1] == 1
    else:
        at.radio(key="depth.stack").set_value("encoder").run()
        assert_ok(at)
        assert z(at, "‖x‖ per residual state").shape[1] == 1  # the one source token
        assert chart(at, "Pieces of the final state at position 0")


def test_the_twins_are_measured_once_and_shared_read_only(pre_page):
    from ui.depth import runs as R  # the memos of the process the page ran in

    twins = R.twin_ids()
    assert twins is not None and R.twins_data.has(*twins, "cpu")  # the page measured them already
    data = R.twins_data(*twins, "cpu")
    assert R.twins_data(*twins, "cpu") is data  # no copy per rerun, as st.cache_data made
    for label in ("pre-LN", "post-LN"):
        for when in ("trained", "untrained"):
            assert not data[label][when].resid_grad.flags.writeable
            assert not data[label][when].resid_norm.flags.writeable


LINKS = "Layers to reach all n"
URL_TAU = "depth.tau"


def test_tau_moves_the_count_between_dense_and_sharp_links():
    # The two path-length claims side by side: dense soft links (one layer) vs sharp heads (the logarithm).
    at = open_depth(model=PRE)  # n = 64, H = 4, tau = 0.1
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["dense soft"] == "1 layer" and metrics["sharp heads"] == "3 layers"
    assert metrics["links ≥ τ = 0.1"] == "2 layers"
    star = trace(at, LINKS, "your τ")
    assert values(star, "x")[0] == pytest.approx(0.1) and values(star)[0] == 2
    curve = trace(at, LINKS, "best layout")
    taus, layers = values(curve, "x"), values(curve)
    assert np.all(np.diff(layers) >= 0) and layers[0] == 1 and layers[-1] == 3  # 1 layer .. ceil(ln 64 / ln 5)
    at.select_slider(key=URL_TAU).set_value(0.9).run()
    assert_ok(at)
    assert values(trace(at, LINKS, "your τ"))[0] == 3  # sharp: the logarithm
    at.select_slider(key=URL_TAU).set_value(0.02).run()
    assert_ok(at)
    assert values(trace(at, LINKS, "your τ"))[0] == 1  # thin links count: one layer
    assert at.query_params["tau"] == "0.02"
    at.slider(key="depth.H").set_value(1).run()
    at.select_slider(key="depth.n").set_value(4096).run()
    assert_ok(at)
    assert values(trace(at, LINKS, "your τ"))[0] == 3  # ceil(ln 4096 / ln 51)
    assert values(trace(at, LINKS, "best layout"))[-1] == 12  # ceil(ln 4096 / ln 2)
    assert not np.array_equal(values(trace(at, LINKS, "best layout"), "x"), taus)  # the grid reaches below 1/n
