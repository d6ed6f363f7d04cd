"""Positions, Depth, Retrieval and Cost with a real checkpoint opened from a folder (tiny random GPT-2, BERT and
Llama): every panel draws the real model's numbers with token labels, says why it cannot, or bounds its cost."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from core import checkpoints
from core.analysis import cost as C
from core.analysis import depth as D
from core.analysis import positions as P
from core.config import TransformerConfig
from core.families import SizePreset
from core.figures.heatmaps import unique_labels
from core.model import Transformer
from core.tasks import IGNORE
from tests.app.conftest import app_at, assert_ok, decode_array
from tests.app.folder_models import folder_models, models_dir  # noqa: F401
from ui.shell import models as M
from ui.shell import sidebar_url
from ui.shell.sidebar import _max_tokens
from tests.app.test_positions import chart  # the plotly spec of the chart created with a key

pytestmark = pytest.mark.skipif(not checkpoints.MANIFEST.is_file(),
                                reason="bundled models not built (python -m core.train --all)")


# ---------------------------------------------------------------------------------------------
# Helpers


def z(at, key: str, trace: int = 0) -> np.ndarray:
    return np.asarray(decode_array(chart(at, key)["data"][trace]["z"]), dtype=np.float64)


def metric(at, label_start: str) -> str:
    for m in at.metric:
        if m.label.startswith(label_start):
            return m.value
    raise AssertionError(f"no metric {label_start!r} among {[m.label for m in at.metric]}")


def texts(at, kind: str) -> list[str]:
    return [e.value for e in getattr(at, kind)]


def sidebar_ids(at, model_id: str) -> tuple[list[int], list[str]]:
    """(the sidebar's token ids, their labels) as the page read them: the text, tokenized and cut to the cap."""
    model, _ = M.get_model(model_id)
    vocab = M.text_task(model_id).vocab
    ids = vocab.encode(at.session_state[sidebar_url.INPUT_KEY])[:_max_tokens(model)]
    return ids, vocab.decode(ids)


# ---------------------------------------------------------------------------------------------
# Positions


def test_positions_learned_table_and_gram_of_gpt2_are_its_own(folder_models):
    at = app_at("pages/positions.py", {"model": folder_models["gpt2"]})
    assert_ok(at)
    model, _ = M.get_model(folder_models["gpt2"])
    table = model.stack.W_pos.weight.detach().double().numpy()  # [64 32]
    assert np.allclose(z(at, "positions.fig_learned"), table, atol=1e-6)
    assert any("position table of folder:tiny-gpt2" in c and "no row at all for position 64" in c
               for c in texts(at, "caption"))
    at.radio(key="positions.gram_of").set_value("learned").run()
    assert_ok(at)
    assert np.allclose(z(at, "positions.fig_gram"), table @ table.T, atol=1e-4)
    assert any("does not use RoPE" in i and "learned position table" in i for i in texts(at, "info"))


@pytest.fixture
def small_learned_bounds(monkeypatch):
    """The Positions page draws at most 16 positions and 8 dimensions of a learned table (results kept under
    other bounds are dropped before and after)."""
    from ui.positions import runs as R

    monkeypatch.setattr(R, "LEARNED_ROWS", 16)
    monkeypatch.setattr(R, "LEARNED_COLUMNS", 8)
    for kept in (R.learned_view, R.learned_gram):
        kept.clear()
    yield
    for kept in (R.learned_view, R.learned_gram):
        kept.clear()


def test_positions_learned_table_is_bounded_and_says_so(folder_models, small_learned_bounds):
    at = app_at("pages/positions.py", {"model": folder_models["bert"], "gram": "learned"})
    assert_ok(at)
    model, _ = M.get_model(folder_models["bert"])
    table = model.stack.W_pos.weight.detach().double().numpy()
    assert np.allclose(z(at, "positions.fig_learned"), table[:16, :8], atol=1e-6)
    assert z(at, "positions.fig_gram").shape == (16, 16)
    assert np.allclose(z(at, "positions.fig_gram"), table[:16] @ table[:16].T, atol=1e-4)  # every dimension
    assert any("Drawn: its first 16 positions and 8 dimensions of 64 x 32" in c for c in texts(at, "caption"))
    assert "first 16 of 64 positions" in " ".join(at.radio(key="positions.gram_of").options)


def test_positions_describes_llamas_own_rope_and_checks_it_on_the_text(folder_models):
    at = app_at("pages/positions.py", {"model": folder_models["llama"]})
    assert_ok(at)  # it crashed: the decay section asked for the toy task 'text'
    assert "RoPE in tiny-llama: its pairs, its base, its turned dimensions" in texts(at, "subheader")
    model, _ = M.get_model(folder_models["llama"])
    cfg = model.cfg
    assert cfg.rope_layout == "halves" and cfg.rope_dim == 8
    prose = " ".join(texts(at, "markdown"))
    assert "dimension **i with dimension i + 4**" in prose and "halves" in prose
    assert f"base b = **{cfg.rope_base:,g}**" in prose
    assert float(metric(at, "Its pairing (i, i + 4): error")) < 1e-5  # the description is the model's rotation
    assert float(metric(at, "The other pairing (2i, 2i + 1): error")) > 0.1
    before, after = (float(v) for v in metric(at, "q·k at (").split(" / "))
    assert before == pytest.approx(after, abs=1e-4)
    wl = chart(at, "positions.fig_model_rope")["data"][0]
    assert np.allclose(decode_array(wl["y"]), 2 * np.pi * cfg.rope_base ** (np.arange(0, 8, 2) / 8))
    assert decode_array(wl["customdata"]).tolist() == [[0, 4], [1, 5], [2, 6], [3, 7]]  # the hover names its pairs
    # the decay section reads this model's own queries and keys, on its example sentences
    assert any("the sidebar's model, folder:tiny-llama" in c and "example sentences" in c for c in texts(at, "caption"))
    names = [t["name"] for t in chart(at, "positions.fig_decay")["data"]]
    assert "folder:tiny-llama q, k (its d = 8)" in names


def test_model_qk_rows_pair_what_a_halves_model_turns_together(folder_models):
    """The decay curve's model rows, turned at a distance, give the model's own score |rot_q(m) . rot_k(n)|
    (GQA: query head 3 reads key head 1)."""
    model, _ = M.get_model(folder_models["llama"])
    cfg = model.cfg
    ids = torch.tensor([M.text_task(folder_models["llama"]).vocab.encode("the cat sat on the mat and slept")])
    heads = P.model_qk_rows(model, ids)
    assert len(heads) == cfg.n_layers * cfg.n_heads
    _, cache = model.run_with_cache(ids, ["blocks.1.attn.hook_rot_q", "blocks.1.attn.hook_rot_k"])
    rot_q, rot_k = cache["blocks.1.attn.hook_rot_q"][0].double(), cache["blocks.1.attn.hook_rot_k"][0].double()
    q_rows, k_rows = heads[cfg.n_heads + 3]  # layer 1, query head 3
    m, n = ids.shape[1] - 1, 2
    score = P.rope_abs_scores(q_rows[m][None], k_rows[n][None], [m - n], cfg.rope_base, cfg.rope_dim)[0, 0]
    assert score == pytest.approx(abs(float(rot_q[m, 3] @ rot_k[n, 3 // (cfg.n_heads // cfg.kv_heads)])), rel=1e-5)


def test_rope_check_and_rows_handle_partial_rotary():
    cfg = TransformerConfig(arch="decoder", vocab_size=12, d_model=32, n_heads=2, n_kv_heads=1, n_layers=1,
                            max_len=32, pos="rope", rope_layout="halves", rotary_dim=8, rope_base=500.0)
    torch.manual_seed(0)
    model = Transformer(cfg).eval()
    ids = torch.randint(0, 12, (1, 10))
    check = P.rope_check(model, ids, shift=7)
    assert check.rotary == 8 and check.error["halves"] < 1e-5 and check.error["pairs"] > 1e-2
    assert check.shift[0] == pytest.approx(check.shift[1], abs=1e-9)
    q_rows, k_rows = P.model_qk_rows(model, ids)[1]
    _, cache = model.run_with_cache(ids, ["blocks.0.attn.hook_rot_q", "blocks.0.attn.hook_rot_k"])
    m, n = 9, 3
    want = abs(float(cache["blocks.0.attn.hook_rot_q"][0, m, 1].double() @ cache["blocks.0.attn.hook_rot_k"][0, n, 0].double()))
    assert P.rope_abs_scores(q_rows[m][None], k_rows[n][None], [m - n], 500.0, 8)[0, 0] == pytest.approx(want, rel=1e-5)


@pytest.mark.parametrize("kind", ["gpt2", "bert", "llama"])
def test_positions_swap_runs_every_scheme_on_a_checkpoint(folder_models, kind):
    model_id = folder_models[kind]
    at = app_at("pages/positions.py", {"model": model_id})
    assert_ok(at)
    model, _ = M.get_model(model_id)
    task = M.text_task(model_id)
    options = P.swap_schemes(model.cfg.pos, model.cfg.d_head)
    assert at.selectbox(key="positions.swap").options == [P.SCHEME_TEXT[o] for o in options]
    assert ("learned" in options) == (kind != "llama")  # a table to swap back to only where there is one
    notes = " ".join(texts(at, "info"))
    if kind == "llama":
        assert "RoPE is defined at every position" in notes and "at most 64 tokens" in notes
    else:
        assert f"{model_id}'s learned table has 64 rows" in notes and "cannot read a longer text" in notes
    title = chart(at, "positions.fig_swap_acc")["layout"]["title"]["text"]
    assert title.startswith("Next-token accuracy on 16 example sentences" if kind != "bert"
                            else "Masked-word accuracy on 16 example sentences")
    assert not [w for w in texts(at, "warning") if "Could not score" in w]  # it was: unknown task 'text'
    ids, labels = sidebar_ids(at, model_id)
    for scheme in [o for o in options if o != model.cfg.pos]:
        at.selectbox(key="positions.swap").set_value(scheme).run()
        assert_ok(at)
        acc = chart(at, "positions.fig_swap_acc")["data"][0]
        assert list(acc["x"]) == [f"trained: {model.cfg.pos}", f"swapped: {scheme}"]
        assert decode_array(acc["y"])[1] == pytest.approx(P.scheme_accuracy(model, task, scheme, n_samples=16))
        swapped = chart(at, "positions.fig_swap_1")["data"][0]
        assert list(swapped["x"]) == unique_labels(labels)  # token labels, never ids
        _, cache = model.run_with_cache(torch.tensor([ids]), ["blocks.0.attn.hook_pattern"], pos=scheme)
        assert np.allclose(decode_array(swapped["z"]), cache["blocks.0.attn.hook_pattern"][0, 0].numpy(), atol=1e-5)
    at.slider(key="positions.layer").set_value(1).run()
    at.slider(key="positions.head").set_value(3).run()
    assert_ok(at)
    _, cache = model.run_with_cache(torch.tensor([ids]), ["blocks.1.attn.hook_pattern"])
    assert np.allclose(z(at, "positions.fig_swap_0"), cache["blocks.1.attn.hook_pattern"][0, 3].numpy(), atol=1e-5)
    if kind != "bert":  # a decoder is scored on its next tokens; BERT on nothing typed
        assert any(c.startswith("This input: ") and "next tokens right" in c for c in texts(at, "caption"))


def test_positions_other_panels_work_beside_a_checkpoint(folder_models):
    """The order pair and the extrapolation curves run bundled models (they need a toy task's rule) whatever
    the sidebar holds; the decay section falls back to induction-rope, and says why."""
    at = app_at("pages/positions.py", {"model": folder_models["bert"]})
    assert any("induction-rope" in c and "folder:tiny-bert" in c and "not RoPE" in c for c in texts(at, "caption"))
    at.radio(key="positions.order_scheme").set_value("own").run()
    at.radio(key="positions.order_b").set_value("shuffle").run()
    assert_ok(at)
    at.button(key="positions.ext_go").click().run()
    assert_ok(at)
    chart(at, "positions.fig_ext")
    at.select_slider(key="positions.decay_base").set_value(100).run()
    at.radio(key="positions.decay_d").set_value(64).run()
    assert_ok(at)


# ---------------------------------------------------------------------------------------------
# Depth


def lens(at) -> dict:
    for spec in (json.loads(el.proto.spec) for el in at.get("plotly_chart")):
        if ((spec["layout"].get("title") or {}).get("text") or "").startswith("Logit lens"):
            return spec["data"][0]
    raise AssertionError("no logit lens chart")


@pytest.mark.parametrize("kind", ["gpt2", "bert", "llama"])
def test_depth_logit_lens_reads_the_models_own_head(folder_models, kind, monkeypatch):
    """The lens's top row is the model's own prediction at every position (BERT: through its masked-LM head),
    written as token labels; GPT-2's colour is p(next token)."""
    from ui.depth import view as V

    monkeypatch.setattr(V, "LENS_SHOWN", 1024)  # every position in one lens (the page draws 16 at a time)
    model_id = folder_models[kind]
    at = app_at("pages/depth.py", {"model": model_id})
    assert_ok(at)
    model, _ = M.get_model(model_id)
    vocab = M.text_task(model_id).vocab
    ids, labels = sidebar_ids(at, model_id)
    with torch.no_grad():
        logits = model(torch.tensor([ids]))[0].double()  # [pos vocab]
    cell = lens(at)
    assert list(cell["x"]) == unique_labels(labels)
    assert list(cell["text"][-1]) == vocab.decode(logits.argmax(-1).tolist())  # the last state: the model's answer
    assert "likeliest" in cell["hovertemplate"] and len(cell["hovertext"][-1][0].split(" · ")) == 5
    colour = np.asarray(decode_array(cell["z"]), dtype=np.float64)
    probs = torch.softmax(logits, -1)
    if kind == "bert":
        assert np.allclose(colour[-1], probs.max(-1).values.numpy(), atol=1e-6)  # no right answer: p(top)
    else:
        nxt = torch.tensor(ids[1:])
        assert np.allclose(colour[-1, :-1], probs[torch.arange(len(ids) - 1), nxt].numpy(), atol=1e-6)
        assert np.isnan(colour[-1, -1])  # the last token has no next one
    prose = " ".join(texts(at, "markdown"))
    formula = " ".join(texts(at, "latex"))
    if kind == "bert":
        assert "masked-LM head" in prose and r"\mathrm{MLM}" in formula and "b_U" in formula
    if kind == "gpt2":
        assert "tied: the token embedding W_E itself" in prose and r"W_E^{\top}" in formula
    if kind == "llama":
        assert "final RMSNorm" in prose and r"\mathrm{RMSNorm}" in formula
        assert any("RMSNorm **pre**" in c for c in texts(at, "caption"))


def test_depth_logit_lens_is_a_window_when_the_vocabulary_is_big(folder_models, monkeypatch):
    """With a budget for 10 positions (GPT-2 small's real budget gives 32 of up to 128), the lens decodes the ten
    up to the chosen position, labels them with their true positions, says so, and follows the position."""
    from ui.depth import view as V

    model_id = folder_models["gpt2"]
    model, _ = M.get_model(model_id)
    per_position = 5 * model.cfg.vocab_size * model.cfg.d_model  # 5 states: embed and 2 layers x 2 sublayers
    monkeypatch.setattr(V, "LENS_BUDGET", 10 * per_position)
    at = app_at("pages/depth.py", {"model": model_id, "at": "20"})
    assert_ok(at)
    ids, labels = sidebar_ids(at, model_id)
    cell = lens(at)
    assert list(cell["x"]) == [f"{p}:{labels[p]}" for p in range(11, 21)]
    with torch.no_grad():
        logits = model(torch.tensor([ids]))[0]
    assert list(cell["text"][-1]) == M.text_task(model_id).vocab.decode(logits[11:21].argmax(-1).tolist())
    assert any(f"positions 11 to 20 of your {len(ids)}" in c and "320 tokens per position" in c
               for c in texts(at, "caption"))
    at.selectbox(key="depth.pos").set_value(3).run()
    assert_ok(at)
    assert list(lens(at)["x"]) == [f"{p}:{labels[p]}" for p in range(10)]  # the window follows the position


def test_lens_summary_equals_the_full_lens_and_keeps_no_vocabulary(folder_models):
    from ui.depth import runs as R

    model, _ = M.get_model(folder_models["bert"])
    ids = torch.tensor([M.text_task(folder_models["bert"]).vocab.encode("the cat sat on the mat")])
    stream = D.forward_stream(model, ids)
    targets = [IGNORE, 5, IGNORE, 7] + [IGNORE] * (ids.shape[1] - 4)
    full = D.lens_table(D.logit_lens(model, stream.resid), targets)
    summary = D.lens_summary(model, stream.resid, targets=targets)
    assert np.array_equal(summary.top, full.top)
    assert np.allclose(summary.p_top, full.p_top) and np.allclose(summary.p_right, full.p_right, equal_nan=True)
    with torch.no_grad():  # the lens of the last state is the model's own output, MLM head included
        assert np.allclose(D.logit_lens(model, stream.resid)[-1], torch.softmax(model(ids)[0].double(), -1).numpy())
    key = (folder_models["bert"], "cpu", tuple(ids[0].tolist()), None)
    table = R.lens_data(key, "", tuple(targets))
    vocab_size = model.cfg.vocab_size
    for array in (table.top, table.p_top, table.p_right, table.top_k, table.p_top_k):
        assert vocab_size not in array.shape  # never a vocabulary axis
    assert R.forward_data(key, "").logits is None


def test_depth_controls_with_a_checkpoint(folder_models):
    """Position, objective and the paths' threshold on GPT-2: the loss is the model's own next-token loss."""
    model_id = folder_models["gpt2"]
    at = app_at("pages/depth.py", {"model": model_id})
    assert_ok(at)
    model, _ = M.get_model(model_id)
    ids, labels = sidebar_ids(at, model_id)
    with torch.no_grad():
        loss = F.cross_entropy(model(torch.tensor([ids]))[0, :-1].double(), torch.tensor(ids[1:]))
    assert any(f"(value {float(loss):.3f})" in m for m in texts(at, "markdown"))
    position = at.selectbox(key="depth.pos")
    assert position.options[3] == f"3: {labels[3]}"
    position.set_value(3).run()
    at.run()  # the control reran only the sections that read it; the whole page again
    at.radio(key="depth.obj").set_value("logit").run()
    at.run()
    assert_ok(at)
    with torch.no_grad():
        logit = model(torch.tensor([ids]))[0, 3, ids[4]]
    assert any(f"(value {float(logit):.3f})" in m for m in texts(at, "markdown"))
    at.select_slider(key="depth.tau").set_value(0.5).run()
    assert_ok(at)
    assert any("With τ = 0.5" in m for m in texts(at, "markdown") + texts(at, "warning"))
    bert = app_at("pages/depth.py", {"model": folder_models["bert"]})
    assert_ok(bert)
    assert [o.split(" (")[0] for o in bert.radio(key="depth.obj").options] == ["one logit"]  # BERT: nothing scored
    assert any("post-LN" in w for w in texts(bert, "warning"))


def test_depth_says_rope_adds_no_position_piece(folder_models):
    at = app_at("pages/depth.py", {"model": folder_models["llama"]})
    assert_ok(at)
    assert any("'pos' piece is zero" in c and "RoPE" in c for c in texts(at, "caption"))


# ---------------------------------------------------------------------------------------------
# Retrieval and Cost


def test_retrieval_says_which_models_its_panels_run(folder_models):
    at = app_at("pages/retrieval.py", {"model": folder_models["llama"]})
    assert_ok(at)
    assert any("run the bundled recall models, not tiny-llama:" in i for i in texts(at, "info"))
    at.selectbox(key="retrieval.pos").set_value(4).run()
    assert_ok(at)
    toy = app_at("pages/retrieval.py", {"model": "recall-decoder"})
    assert not any("bundled recall models, not" in i for i in texts(toy, "info"))


def test_cost_counts_the_sidebars_checkpoint(folder_models):
    at = app_at("pages/cost.py", {"model": folder_models["llama"], "preset": "sidebar"})
    assert_ok(at)
    model, _ = M.get_model(folder_models["llama"])
    cfg = model.cfg
    assert metric(at, "d_model, heads, layers") == f"{cfg.d_model}, {cfg.n_heads}, {cfg.n_layers}"
    assert any("context is 64 tokens" in c and "one pattern per query head, 4 per layer" in c
               for c in texts(at, "caption"))
    own = SizePreset("x", "x", str(cfg.n_layers), cfg.d_model, cfg.n_heads, cfg.d_head, cfg.d_mlp)
    want = C.preset_rows(own, (8192,), 32)[0]["patterns kept, MiB (all maps)"] / 1024
    assert metric(at, "patterns at n = 8,192") == f"{want:,.1f} GiB"
    toy = app_at("pages/cost.py", {"model": "recall-decoder", "preset": "sidebar"})
    assert_ok(toy)
    assert metric(toy, "d_model, heads, layers") == "512, 8, 6 + 6"  # no checkpoint: the default size
