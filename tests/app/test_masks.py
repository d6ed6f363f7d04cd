"""AppTest for the Masks page: every editor path (preset, formula, bad formula, cell edit, per
layer), that an edited mask changes the pattern AND the prediction, a fully masked row, URL
clamping, the length cap, a one-token input, and the encoder-vs-decoder comparison."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from streamlit.testing.v1 import AppTest

from core import masks as M
from core.figures import masks as F
from tests.app.conftest import TIMEOUT, assert_ok, decode_array, plotly_specs
from tests.app.fragments import click
from ui.shell.text import is_literal, plain

PAGE = str(Path(__file__).resolve().parents[2] / "pages" / "masks.py")
ENCODER = "future-legality-encoder"
INPUT = "<bos> 3 8 5 2 7 4 1 6 odd"  # 8 digits as in training; the rule comes last
N = 10


def open_masks(**query) -> AppTest:
    """The Masks page run alone, with URL parameters."""
    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT)
    for k, v in query.items():
        at.query_params[k] = v
    return at.run()


def chart(at: AppTest, title: str) -> dict:
    """The plotly spec whose title starts with `title`."""
    for spec in plotly_specs(at):
        text = (spec["layout"].get("title") or {}).get("text") or ""
        if text.startswith(title):
            return spec
    raise AssertionError(f"no chart titled {title!r}")


def z(at: AppTest, title: str) -> np.ndarray:
    return np.asarray(decode_array(chart(at, title)["data"][0]["z"]), dtype=np.float64)


def predictions(at: AppTest):
    """The prediction table (the dataframe with both masks' columns)."""
    for frame in at.dataframe:
        value = frame.value
        if "yours: predicts" in value.columns:
            return value
    raise AssertionError("no prediction table")


def metric(at: AppTest, label: str) -> str:
    return next(m.value for m in at.metric if m.label == label)


def set_cells(at: AppTest, edits: dict[int, dict[str, bool]], key: str = "masks.all.cells") -> AppTest:
    """Edit cells the way st.data_editor reports them (row position -> {column: value})."""
    at.session_state[key] = {"edited_rows": edits, "added_rows": [], "deleted_rows": []}
    return at.run()


@pytest.fixture
def encoder_page() -> AppTest:
    at = open_masks(model=ENCODER, input=INPUT)
    assert_ok(at)
    return at


def test_page_shows_every_panel(encoder_page):
    at = encoder_page
    titles = [(s["layout"].get("title") or {}).get("text") or "" for s in plotly_specs(at)]
    for expected in ("your mask (every layer)", "own mask · layer 0 head 0", "your mask · layer 0 head 0",
                     "right: mask before softmax", "wrong: zero after softmax", "L = D − A", "spectrum of L",
                     "what can reach", "|∂ output q", "allowed pairs", "measured when the app was built",
                     "encoder: its own full mask", "decoder: its own causal mask"):
        assert any(t.startswith(expected) for t in titles), expected
    assert at.data_editor[0].value.shape == (N, N)
    # The untouched editor holds the encoder's own full mask, so both runs agree.
    np.testing.assert_allclose(z(at, "own mask"), z(at, "your mask ·"), atol=1e-6)
    assert metric(at, "accuracy, own mask") == metric(at, "accuracy, your mask")
    # lambda_2 of the complete graph is n.
    assert metric(at, "λ2 (algebraic connectivity)") == f"{N:.3f}"


def test_preset_changes_the_pattern_and_the_prediction(encoder_page):
    at = encoder_page
    own_p = predictions(at)["yours: p(right)"].to_numpy()
    at.selectbox(key="masks.all.preset").set_value("causal").run()
    assert_ok(at)
    np.testing.assert_array_equal(z(at, "your mask (every layer)"), M.causal(N).numpy())
    yours, own = z(at, "your mask ·"), z(at, "own mask")
    assert np.all(np.triu(yours, 1) == 0) and np.triu(own, 1).sum() > 0.5
    frame = predictions(at)
    assert not np.allclose(frame["yours: p(right)"].to_numpy(), own_p, atol=1e-4)
    np.testing.assert_allclose(frame["own: p(right)"].to_numpy(), own_p, atol=1e-6)
    # A causal encoder cannot see the rule: its batch accuracy drops.
    own_acc = float(metric(at, "accuracy, own mask").rstrip("%"))
    your_acc = float(metric(at, "accuracy, your mask").rstrip("%"))
    assert your_acc < own_acc - 10
    assert at.query_params["preset"] == "causal"


def test_formula_builds_the_mask(encoder_page):
    at = encoder_page
    at.selectbox(key="masks.all.preset").set_value("formula").run()
    at.text_input(key="masks.all.formula").set_value("abs(i - j) <= 1").run()
    assert_ok(at)
    assert not at.error
    np.testing.assert_array_equal(z(at, "your mask (every layer)"), M.sliding_window(N, 1).numpy())
    assert metric(at, "λ2 (algebraic connectivity)") == f"{2 - 2 * np.cos(np.pi / N):.3f}"
    assert at.query_params["formula"] == "abs(i - j) <= 1"


def test_bad_formula_shows_the_grammar_and_keeps_the_page(encoder_page):
    at = encoder_page
    at.selectbox(key="masks.all.preset").set_value("formula").run()
    at.text_input(key="masks.all.formula").set_value("__import__('os') or i ** 2 < j").run()
    assert_ok(at)
    assert any("cannot be used" in e.value and "Allowed" in e.value for e in at.error)
    assert any(M.describe_formula_grammar() in c.value for c in at.code)
    assert any("own **full** mask" in w.value for w in at.warning)
    np.testing.assert_array_equal(z(at, "your mask (every layer)"), M.full(N).numpy())
    # The editor reran every part that reads the mask (by key): each is drawn, with the model's own mask
    assert len(plotly_specs(at)) == 14 and not at.title
    np.testing.assert_allclose(z(at, "own mask"), z(at, "your mask ·"), atol=1e-6)
    assert len(plotly_specs(at.run())) >= 15 and not at.exception  # and the whole page still draws


@pytest.mark.parametrize("formula", ['__import__("os")', "i < __x__ or i ** 2 < j"])
def test_a_formula_error_shows_the_formula_as_typed(formula):
    """Issue 35, defect 6: a formula error showed `__import__` as a bold "import". The error is Markdown
    that shows core's message, and the student's formula in it, exactly."""
    with pytest.raises(ValueError) as exc:
        M.from_formula(formula, N)
    at = open_masks(model=ENCODER, input=INPUT, preset="formula", formula=formula)
    assert_ok(at)
    error = next(e.value for e in at.error if "cannot be used" in e.value)
    assert is_literal(error), error
    assert plain(error) == f"This formula cannot be used: {exc.value}"


def test_a_formula_in_a_chart_title_is_not_read_as_html():
    """`0<i>j` is a valid formula (0 < i and i > j); Plotly would have drawn its `<i>` as italics."""
    at = open_masks(model=ENCODER, input=INPUT, preset="formula", formula="0<i>j")
    assert_ok(at)
    title = chart(at, "your mask (every layer)")["layout"]["title"]["text"]
    assert "<i>" not in title and "0&lt;i&gt;j" in title


def test_a_formula_error_title_is_wrapped_to_fit_the_grid():
    """The title of the grid that stands in for a broken formula is long; in one line it ran past the chart's
    right edge, cut, even at 1440 px. Wrapped, every line fits the grid beside the sidebar at 1024 px, the
    figure's top margin grows by the extra lines, and nothing of the text is lost."""
    at = open_masks(model=ENCODER, input=INPUT, preset="formula", formula="__import__('os')")
    assert_ok(at)
    assert any("This formula cannot be used" in str(e.value) for e in at.error)
    spec = chart(at, "your mask (every layer)")
    lines = spec["layout"]["title"]["text"].split("<br>")
    assert len(lines) > 1 and all(len(line) <= 38 for line in lines)
    assert " ".join(lines) == "your mask (every layer): the formula has an error, so the model's own full mask is used"
    tokens = INPUT.split()
    one_line = F.mask_grid(np.ones((N, N), dtype=bool), tokens, tokens, title="one line").layout.margin.t
    assert spec["layout"]["margin"]["t"] >= one_line + 18 * (len(lines) - 1)  # room for each extra title line


def test_cell_edit_changes_the_pattern_and_the_prediction():
    # Without the rule a digit's output cannot depend on it, and the model is right under both rules
    # with its own mask: so hiding the rule must change a prediction for at least one of the two.
    changed = []
    for rule in ("even", "odd"):
        at = open_masks(model=ENCODER, input=INPUT.replace("odd", rule))
        before = predictions(at)
        assert (before["own: predicts"] == before["right answer"]).all()
        rule_column = at.data_editor[0].value.columns[-1]
        set_cells(at, {row: {rule_column: False} for row in range(N - 1)})  # no digit may read the rule
        assert_ok(at)
        mask = z(at, "your mask (every layer)")
        assert mask[:-1, -1].sum() == 0 and mask[-1, -1] == 1 and mask[:, :-1].all()
        title = chart(at, "your mask (every layer)")["layout"]["title"]["text"].replace("<br>", " ")  # wrapped
        assert f"{N - 1} cell(s) edited by hand" in title
        yours = z(at, "your mask ·")
        assert np.all(yours[:-1, -1] == 0) and np.allclose(yours.sum(-1), 1, atol=1e-5)
        after = predictions(at)
        assert np.abs(after["yours: p(right)"] - before["yours: p(right)"]).max() > 0
        changed.append(bool((after["yours: predicts"] != before["yours: predicts"]).any()))
        assert (after["changed"] == "CHANGED").any() == changed[-1]
    assert any(changed)


def test_a_fully_masked_row_gives_zeros_not_nan(encoder_page):
    at = encoder_page
    columns = at.data_editor[0].value.columns
    set_cells(at, {3: {c: False for c in columns}})
    assert_ok(at)
    assert any("no key at all" in w.value for w in at.warning)
    yours = z(at, "your mask ·")
    assert not np.isnan(yours).any()
    assert np.all(yours[3] == 0) and np.allclose(np.delete(yours, 3, 0).sum(-1), 1, atol=1e-5)
    assert "no keys" in chart(at, "your mask (every layer)")["data"][0]["y"][3]
    assert not np.isnan(z(at, "right: mask before softmax")).any()


def test_a_different_mask_per_layer(encoder_page):
    at = encoder_page
    page = at._tree  # the editor's controls and the layer picker rerun only what reads them (keyed fragments)
    click(at, "masks.scope", "layer", page)  # shown as "A different mask per layer"
    assert [d.key for d in at.data_editor] == ["masks.layer0.cells", "masks.layer1.cells"]
    click(at, "masks.layer1.preset", "causal", page)
    assert_ok(at)
    click(at, "masks.layer", 1, page)
    assert np.all(np.triu(z(at, "your mask · layer 1"), 1) == 0)
    click(at, "masks.layer", 0, page)
    # Layer 0 keeps the full mask, and layer 0 comes first, so its pattern is untouched.
    np.testing.assert_allclose(z(at, "your mask · layer 0"), z(at, "own mask · layer 0"), atol=1e-6)
    assert at.query_params["scope"] == "layer"


def test_url_params_are_validated_and_clamped():
    at = open_masks(model=ENCODER, input=INPUT, preset="sliding", w="999", layer="9", head="-1", token="x",
                    scope="bogus")
    assert_ok(at)
    notes = " ".join(w.value for w in at.warning)
    for fragment in ("w=999", "layer=9", "head=-1", "token=", "scope="):
        assert fragment in notes, fragment
    assert at.query_params["w"] == str(N - 1) and at.query_params["layer"] == "1"
    assert at.query_params["head"] == "0" and at.query_params["scope"] == "all"
    np.testing.assert_array_equal(z(at, "your mask (every layer)"), M.sliding_window(N, N - 1).numpy())
    bad = open_masks(model=ENCODER, input=INPUT, preset="nope", density="abc")
    assert_ok(bad)
    assert any("preset=" in w.value for w in bad.warning)
    np.testing.assert_array_equal(z(bad, "your mask (every layer)"), M.full(N).numpy())


def test_long_inputs_are_cut_to_the_editor_and_said_so():
    """An input longer than the editor draws (64 tokens) is no longer refused: the page reads its first 64 tokens,
    says why, and every panel runs on those."""
    long_input = "<bos> " + " ".join(["3"] * 76) + " odd"
    at = open_masks(model=ENCODER, input=long_input)
    assert_ok(at)
    assert any("draws every pair of tokens" in i.value and "first 64 tokens of your 78" in i.value for i in at.info)
    assert at.data_editor[0].value.shape == (64, 64)
    chart(at, "measured ")  # the cost panel still runs


def test_a_one_token_input_from_a_link_draws_every_panel():
    # /masks?model=induction-rope&input=<bos>: every 0..n-1 control has a single value.
    at = open_masks(model="induction-rope", input="<bos>", preset="sliding", w="5", token="3")
    assert_ok(at)
    assert at.data_editor[0].value.shape == (1, 1)
    notes = " ".join(w.value for w in at.warning)
    assert "w=5" in notes and "token=3" in notes
    assert at.query_params["w"] == "0" and at.query_params["token"] == "0"
    captions = " ".join(c.value for c in at.caption)
    assert "window w: 0 (the only value here)" in captions
    assert "receptive field of query token: 0 (the only value here)" in captions
    np.testing.assert_array_equal(z(at, "your mask (every layer)"), [[1]])
    assert np.allclose(z(at, "your mask ·"), 1)  # one key: all of the weight
    assert metric(at, "λ2 (algebraic connectivity)") == "0.000"
    chart(at, "what can reach")
    chart(at, "measured ")


def test_every_control_survives_a_one_token_input():
    at = open_masks(model="induction-rope", input="<bos>")
    assert_ok(at)
    for preset in ("full", "causal", "sliding", "block", "strided", "global", "padding", "random", "formula"):
        at.selectbox(key="masks.all.preset").set_value(preset).run()
        assert_ok(at)
        assert at.query_params["preset"] == preset
        chart(at, "what can reach")  # the page ran to the end
    at.selectbox(key="masks.all.preset").set_value("block").run()
    at.radio(key="masks.scope").set_value("layer").run()
    assert_ok(at)
    for i in range(len(at.tabs)):
        at.selectbox(key=f"masks.layer{i}.preset").set_value("padding").run()
        assert_ok(at)
    chart(at, "what can reach")


def test_encoder_solves_future_legality_and_the_decoder_cannot(encoder_page):
    at = encoder_page
    encoder = float(metric(at, "own mask: full").rstrip("%"))
    decoder = float(metric(at, "own mask: causal").rstrip("%"))
    assert encoder > 90 and decoder < 75
    table = next(f.value for f in at.dataframe if "decoder: pull of the rule" in f.value.columns)
    assert (table["decoder: pull of the rule"] == 0).all() and (table["encoder: pull of the rule"] > 0).all()


def test_encoder_decoder_masks_the_decoder_side():
    at = open_masks(model="reverse-encdec")
    assert_ok(at)
    n = len(at.data_editor[0].value)
    at.selectbox(key="masks.all.preset").set_value("full").run()
    assert_ok(at)
    yours = z(at, "your mask ·")
    assert yours.shape == (n, n) and np.triu(yours, 1).sum() > 0.5  # the decoder now sees its future
    assert np.all(np.triu(z(at, "own mask"), 1) == 0)


def test_graph_facts_match_the_mask_library():
    from ui.masks.runs import graph_facts, receptive_fields

    n = 6
    stack = np.stack([M.sliding_window(n, 1).numpy(), M.block_diagonal(n, 3).numpy()])  # [layer q k]
    facts = graph_facts(stack, 1, False)
    block = M.block_diagonal(n, 3)
    np.testing.assert_allclose(facts["spectrum"], M.laplacian_spectrum(block))
    assert facts["lambda2"] == pytest.approx(0.0, abs=1e-9) and facts["pieces"] == 2
    np.testing.assert_array_equal(facts["reach"], M.reachability([M.sliding_window(n, 1), block]).numpy())
    assert facts["shares"][0] == pytest.approx(1 / n) and facts["full_at"] is None  # the blocks never meet
    fields = receptive_fields(facts["stacked"], 0, 3)
    expected = torch.stack(M.receptive_field([torch.tensor(m) for m in facts["stacked"][:3]], 0)).numpy()
    np.testing.assert_array_equal(fields, expected)
    assert fields.shape == (3, n) and fields[0].tolist() == [True, True, False, False, False, False]
    same = graph_facts(np.stack([M.sliding_window(n, 1).numpy()] * 2), 0, True)
    assert same["full_at"] == M.layers_to_reach_all(M.sliding_window(n, 1)) == n - 1


def test_leak_curves_are_kept_read_only_for_every_session():
    from core.analysis import masks as A
    from ui.masks.runs import leak_curves

    curves = leak_curves(7)
    assert leak_curves(7) is curves  # kept
    np.testing.assert_array_equal(curves["float32 -1e4"], A.leak_curves(7)["float32 -1e4"])
    with pytest.raises(ValueError):
        curves["float32 -1e4"][0] = 0.0  # shared by every session: read-only


def test_a_new_mask_reruns_what_reads_it_and_later_clicks_read_the_new_mask(encoder_page):
    # The editor reruns by key only the parts that read the mask; those and the fragments that other controls
    # rerun afterwards must read the mask drawn now, not the one of the page's last full run (their arguments).
    at = encoder_page
    page = at._tree
    click(at, "masks.all.preset", "sliding", page)  # window w = 2
    assert_ok(at)
    assert not at.title and not at.sidebar.children, "a new mask does not redraw the title or the sidebar"
    drawn = {element.proto.id.rsplit("-", 1)[-1] for element in at.get("plotly_chart")}
    assert {"masks.all.grid", "masks.pattern_yours", "masks.influence", "masks.pairs"} <= drawn
    assert not drawn & {"masks.leak", "masks.legality_encoder"}, "parts that do not read the mask"
    window = M.sliding_window(N, 2).numpy()
    assert metric(at, "pairs allowed (layer 0)") == f"{int(window.sum())}"
    click(at, "masks.token", 2, page)  # the receptive field's own fragment
    np.testing.assert_array_equal(z(at, "what can reach")[0], window[2])
    click(at, "masks.layer", 1, page)  # a fragment the layer reruns by key
    assert np.all(z(at, "your mask · layer 1")[window == 0] == 0)
    click(at, "masks.cost_b", 16, page)  # the cost section's block size: its two charts, not the mask's share
    spec = chart(at, "allowed pairs")
    assert not at.metric and int(window.sum()) in [y for trace in spec["data"] for y in np.ravel(trace["y"])]
    assert at.query_params["preset"] == "sliding" and at.query_params["layer"] == "1"
