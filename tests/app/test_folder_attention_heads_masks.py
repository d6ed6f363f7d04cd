"""Attention, Heads and Masks with real checkpoints opened from a folder (a tiny random GPT-2, BERT and Llama with
grouped-query attention, tests/app/folder_models.py), and with a GPT-2-shaped one of 12 layers x 12 heads: every
view, tab and section works on the model's own numbers with token labels, asks for a bundled model where it needs a
toy task, or bounds what it computes and says so."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from core.analysis.attention import attention_kinds
from core.analysis.heads.circuits import qk_circuit
from core.figures.attention import GRID_CELLS
from core.figures.heatmaps import unique_labels
from core.tasks import IGNORE
from tests.app.conftest import app_at, assert_ok, decode_array
from tests.app.folder_models import folder_models, models_dir  # noqa: F401
from tests.core.pretrained_models import save_hf, tiny_hf_model
from ui.shell import models

ATTENTION, HEADS, MASKS = "pages/attention.py", "pages/heads.py", "pages/masks.py"
KINDS = ("gpt2", "bert", "llama")
TEXT = "The cat sat on the mat."
ATTENTION_VIEWS = ("grid", "head", "steps", "temp", "scale", "compare", "export")
HEADS_TABS = ("Subspaces", "Circuits", "Q & K", "Roles", "Ablation", "Toy", "Orthogonal")
PRESETS = ("full", "causal", "sliding", "block", "strided", "global", "padding", "random", "formula")


def no_error(at) -> None:
    assert_ok(at)
    assert not at.error, [e.value for e in at.error]


def chart(at, key: str) -> dict:
    """The plotly spec of the chart with widget key `key`."""
    for el in at.get("plotly_chart"):
        if el.proto.id and key in el.proto.id:
            return json.loads(el.proto.spec)
    raise AssertionError(f"no chart {key!r}")


def has_chart(at, key: str) -> bool:
    return any(el.proto.id and key in el.proto.id for el in at.get("plotly_chart"))


def texts(at) -> str:
    """Every Markdown, caption, info, warning and success text on the page, joined."""
    parts = [m.value for m in at.markdown] + [c.value for c in at.caption]
    parts += [e.value for kind in ("info", "warning", "success") for e in getattr(at, kind)]
    return "\n".join(str(p) for p in parts)


def loaded(model_id: str):
    """(model, text task) of a checkpoint the page has opened (the same shared objects the page used)."""
    model, _ = models.get_model(model_id)
    return model, models.text_task(model_id)


def ids_of(model_id: str, text: str = TEXT) -> list[int]:
    return loaded(model_id)[1].vocab.encode(text)


def open_view(page: str, model_id: str, view: str, **query) -> object:
    at = app_at(page, {"model": model_id, "input": TEXT, **query})
    key = {"pages/attention.py": "attention.view", "pages/heads.py": "heads.view"}[page]
    at.session_state[key] = view
    return at.run()


# ---------------------------------------------------------------------------------------------
# Attention


@pytest.mark.parametrize("kind", KINDS)
def test_every_attention_view_works_on_each_checkpoint(folder_models, kind):
    model_id = folder_models[kind]
    at = app_at(ATTENTION, {"model": model_id, "input": TEXT, "head": "3"})  # head 3: a shared key head in Llama
    no_error(at)
    labels = unique_labels(loaded(model_id)[1].vocab.decode(ids_of(model_id)))
    grid = chart(at, "attention.fig_grid")
    assert list(grid["data"][0]["y"]) == labels  # the model's own tokens label the every-head grid
    for view in ATTENTION_VIEWS:
        at.session_state["attention.view"] = view
        at.run()
        no_error(at)
        if view == "compare":
            at.radio(key="attention.cmp").set_value("inputs").run()
            no_error(at)
            box = at.text_input(key="attention.input2")
            assert "tokenizer" in box.help  # free text, not "tokens separated by spaces"
            assert has_chart(at, "attention.fig_cmp_b")


def test_step_by_step_on_a_grouped_query_head_matches_the_model(folder_models):
    """Llama's 4 query heads share 2 key/value heads: query head 3 reads key head 1. The arithmetic took key head 3
    and crashed; now it recomputes the model's own weights."""
    model_id = folder_models["llama"]
    at = open_view(ATTENTION, model_id, "steps", head="3", layer="1")
    no_error(at)
    assert any("match the model's own" in s.value for s in at.success)
    assert "Head 3 reads key/value head 1" in texts(at)
    model, _ = loaded(model_id)
    ids = torch.tensor([ids_of(model_id)])
    _, cache = model.run_with_cache(ids, ["blocks.1.attn.hook_pattern"])
    last = ids.shape[1] - 1
    bars = chart(at, "attention.fig_steps_bars")
    weights = decode_array(bars["data"][1]["y"])  # right: the weights after softmax
    assert list(bars["data"][1]["x"]) == unique_labels(loaded(model_id)[1].vocab.decode(ids_of(model_id)))
    np.testing.assert_allclose(weights, cache["blocks.1.attn.hook_pattern"][0, 3, last].numpy(), atol=1e-5)


def test_why_sqrt_dk_measures_a_grouped_query_model(folder_models):
    """The spread of raw q·k per head, with each query head scored against its own key head."""
    model_id = folder_models["llama"]
    at = open_view(ATTENTION, model_id, "scale")
    no_error(at)
    model, _ = loaded(model_id)
    ids = torch.tensor([ids_of(model_id)])
    _, cache = model.run_with_cache(ids, ["blocks.0.attn.hook_rot_q", "blocks.0.attn.hook_rot_k"])
    q = cache["blocks.0.attn.hook_rot_q"][0].double()  # [q head d_head]
    k = cache["blocks.0.attn.hook_rot_k"][0].double().repeat_interleave(2, dim=1)  # [k head d_head]
    dots = torch.einsum("qhd,khd->hqk", q, k)
    allowed = torch.tril(torch.ones(len(q), len(k), dtype=torch.bool))
    want = dots[:, allowed].std(dim=-1, correction=0).numpy()  # [head]
    spec = chart(at, "attention.fig_scale_model")
    np.testing.assert_allclose(decode_array(spec["data"][0]["y"]), want, rtol=1e-4)


def test_temperature_on_an_encoder_checkpoint_shows_its_guesses(folder_models):
    """BERT's text has no right answers; the temperature view shows its top guess at each position, at T = 1 and at
    the chosen T, instead of an empty 'no scored positions'."""
    model_id = folder_models["bert"]
    at = open_view(ATTENTION, model_id, "temp", temp="5")
    no_error(at)
    table = at.table[0].value
    assert "guess, T = 1" in table.columns and "guess, T = 5" in table.columns
    model, task = loaded(model_id)
    ids = ids_of(model_id)
    with torch.no_grad():
        top = model(torch.tensor([ids]))[0].argmax(-1).tolist()
    assert list(table["guess, T = 1"]) == task.vocab.decode(top)
    assert list(table.index) == [f"{p}: {t}" for p, t in enumerate(task.vocab.decode(ids))]
    assert any(m.label.startswith("guesses changed") for m in at.metric)


@pytest.fixture(scope="module")
def gpt2_12x12(tmp_path_factory) -> Path:
    """A GPT-2-shaped checkpoint with GPT-2 small's 12 layers x 12 heads (narrow: d_model 96) and a context of 256
    tokens (the sidebar's cap for it)."""
    root = tmp_path_factory.mktemp("models-12x12")
    save_hf(tiny_hf_model("gpt2", n_layer=12, n_head=12, n_embd=96, n_positions=256), root / "gpt2-12x12")
    return root


@pytest.fixture
def big(gpt2_12x12, tmp_path, monkeypatch) -> str:
    monkeypatch.setenv("GLASSBOX_MODELS_DIR", str(gpt2_12x12))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hf-cache"))
    return "folder:gpt2-12x12"


LONG_TEXT = " ".join(["The animal didn't cross the street because it was too tired."] * 6)  # 287 tokens here


def test_every_head_grid_stays_readable_at_12_by_12_heads(big):
    """144 heads of 256 tokens (the model's context; the text is cut to it): each column titled "H h" (a "head h"
    would overprint its neighbours at 29 px a head), rows 72 px tall rather than 190 (square-ish heads, not 2.5k px
    strips), 2% gaps between heads; every head pooled (the largest weight of each block, said on the colour bar) so
    that the grid ships at most GRID_CELLS cells, on axes counted in positions. 9.4 million cells drawn whole were
    13 MB."""
    at = app_at(ATTENTION, {"model": big, "input": LONG_TEXT})
    no_error(at)
    n = len(ids_of(big, LONG_TEXT)[:256])
    assert n == 256
    spec = chart(at, "attention.fig_grid")
    assert len(spec["data"]) == 144
    titles = [a["text"] for a in spec["layout"]["annotations"]]
    assert titles == [f"H{h}" for h in range(12)]
    lay = spec["layout"]
    plot = lay["height"] - lay["margin"]["t"] - lay["margin"]["b"]
    first = lay["yaxis"]["domain"]
    assert (first[1] - first[0]) * plot == pytest.approx(72, abs=0.5)
    assert lay["xaxis2"]["domain"][0] - lay["xaxis"]["domain"][1] == pytest.approx(0.02, abs=1e-6)
    cells = [decode_array(t["z"]).shape for t in spec["data"]]
    assert sum(q * k for q, k in cells) <= GRID_CELLS and cells[0][0] < n
    assert "largest weight" in lay["coloraxis"]["colorbar"]["title"]["text"]
    assert lay["xaxis"]["range"] == [-0.5, n - 0.5]  # positions, 0 .. 255
    at.session_state["attention.view"] = "export"
    at.run()
    no_error(at)
    labels = [b.proto.label for b in at.get("download_button")]
    assert "Download CSV (layer 0, head 0)" in labels  # 12 x 12 x 256 x 256 rows would be 9.4 million
    assert f"{144 * n * n:,} rows" in texts(at)
    at.session_state["attention.view"] = "scale"
    at.run()
    no_error(at)
    table = chart(at, "attention.fig_scale_model")["data"][0]
    assert table["type"] == "heatmap" and decode_array(table["z"]).shape == (12, 12)  # 144 bars were unreadable


# ---------------------------------------------------------------------------------------------
# Heads


@pytest.mark.parametrize("kind", KINDS)
def test_every_heads_tab_works_on_each_checkpoint(folder_models, kind):
    model_id = folder_models[kind]
    at = app_at(HEADS, {"model": model_id, "input": TEXT, "head": "3"})  # Llama: query head 3 reads key head 1
    no_error(at)
    for tab in HEADS_TABS:
        at.session_state["heads.view"] = tab
        at.run()
        no_error(at)
        if tab == "Q & K":
            spec = chart(at, "heads.fig_pca_pattern")
            assert list(spec["data"][0]["y"]) == unique_labels(loaded(model_id)[1].vocab.decode(ids_of(model_id)))


def test_circuits_read_the_texts_tokens_never_the_whole_vocabulary(folder_models):
    """GPT-2's QK and OV tables drew vocabulary x vocabulary (50,257 squared for the real one); now their rows and
    columns are the text's distinct tokens, the numbers those of the full table, and the singular values the whole
    table's (from its factors)."""
    model_id = folder_models["gpt2"]
    at = open_view(HEADS, model_id, "Circuits", layer="1", head="2")
    no_error(at)
    model, task = loaded(model_id)
    ids = list(dict.fromkeys(ids_of(model_id)))
    labels = task.vocab.decode(ids)
    qk = chart(at, "heads.fig_qk")["data"][0]
    assert list(qk["x"]) == labels and list(qk["y"]) == labels
    kind = attention_kinds("decoder")[0]
    whole = qk_circuit(model, kind, 1, 2, task.vocab.tokens, task.vocab.tokens)  # 320 x 320: small enough here
    np.testing.assert_allclose(decode_array(qk["z"]), whole.table[np.ix_(ids, ids)], rtol=1e-4, atol=1e-5)
    sv = decode_array(chart(at, "heads.fig_qk_sv")["data"][0]["y"])
    np.testing.assert_allclose(sv[:8], whole.singular_values[:8], rtol=1e-4)
    ov = chart(at, "heads.fig_ov")["data"][0]
    assert list(ov["y"]) == labels and list(ov["x"]) == labels
    assert any(m.label == "copying score" for m in at.metric)
    assert "vocabulary has 320 tokens" in texts(at)


def test_roles_find_previous_token_and_induction_heads_on_repeated_random_tokens(folder_models):
    """Induction as the literature measures it: random tokens from the model's vocabulary, repeated once; the score
    is the attention from each token of the second copy to the token after its earlier occurrence. The page's
    numbers equal that computation on the model, the tables are labelled by head, and the strongest heads are
    named."""
    from ui.heads import runs as R

    model_id = folder_models["llama"]
    at = open_view(HEADS, model_id, "Roles")
    no_error(at)
    model, task = loaded(model_id)
    tokens, _, _ = R.text_probe(model, task)
    special = set(task.vocab.tokenizer.special_ids.values())
    k = (tokens.shape[1] - 1) // 2
    assert k == min(R.TEXT_PROBE_TOKENS, (model.cfg.max_len - 1) // 2)
    for row in tokens.tolist():
        first, second = row[1:1 + k], row[1 + k:]
        assert first == second and len(set(first)) == k and not special & set(first)
    names = [f"blocks.{i}.attn.hook_pattern" for i in range(model.cfg.n_layers)]
    _, cache = model.run_with_cache(tokens, names)
    t = torch.arange(k + 1, 2 * k + 1)  # the second copy
    induction = np.stack([cache[n][:, :, t, t - k + 1].mean(dim=(0, 2)).numpy() for n in names])  # [layer head]
    prev = np.stack([cache[n][:, :, torch.arange(1, 2 * k + 1), torch.arange(0, 2 * k)].mean(dim=(0, 2)).numpy()
                     for n in names])
    spec = chart(at, "heads.fig_roles")
    titles = [a["text"] for a in spec["layout"]["annotations"]]
    assert [t.split("</b>")[0].removeprefix("<b>") for t in titles] == ["previous token", "induction",
                                                                       "first-token sink"]
    shown = {t.split("</b>")[0].removeprefix("<b>"): tr for t, tr in zip(titles, spec["data"])}
    np.testing.assert_allclose(decode_array(shown["induction"]["z"]), induction, atol=1e-5)
    np.testing.assert_allclose(decode_array(shown["previous token"]["z"]), prev, atol=1e-5)
    assert list(shown["induction"]["x"]) == ["H0", "H1", "H2", "H3"] and list(shown["induction"]["y"]) == ["L0", "L1"]
    layer, head = np.unravel_index(np.argmax(induction), induction.shape)
    assert f"induction heads: **L{layer} H{head}** {induction[layer, head]:.2f}" in texts(at)
    # the subject score needs the agreement task: one sentence and a button that opens the bundled model
    assert any("subject score needs a model trained on one of this app's toy tasks" in i.value for i in at.info)
    at.button(key="heads.roles_toy").click().run()
    assert_ok(at)
    assert at.session_state["glassbox.model"] == "agreement-encoder"


def test_ablation_scores_the_example_sentences(folder_models):
    """The ablation tab said 'unknown task text'; it now scores each next token of the page's example sentences,
    and its accuracy is the model's own on them."""
    from ui.heads import runs as R

    model_id = folder_models["gpt2"]
    at = open_view(HEADS, model_id, "Ablation")
    no_error(at)
    model, task = loaded(model_id)
    batch = task.batch(R.TEXT_ABLATION_EXAMPLES, "decoder", seed=R.ABLATION_SEED)
    with torch.no_grad():
        logits = model(batch.tokens)
    scored = batch.targets != IGNORE
    accuracy = float((logits.argmax(-1)[scored] == batch.targets[scored]).float().mean())
    metric = next(m for m in at.metric if m.label.startswith("accuracy"))
    assert metric.value == f"{accuracy:.1%}"
    assert "16 example sentences" in texts(at)
    at.multiselect(key="heads.ablate").set_value([("self", 1, 0)]).run()
    no_error(at)
    table = at.dataframe[0].value  # the sidebar text, scored positions, with token labels
    assert list(table["right answer"]) == task.vocab.decode(ids_of(model_id)[1:])
    assert len(at.dataframe[1].value) == 8  # every one of the 2 x 4 heads alone


def test_a_12_by_12_model_bounds_pairs_and_ranking_to_the_picked_layer(big):
    at = open_view(HEADS, big, "Roles", layer="5")
    no_error(at)
    roles = chart(at, "heads.fig_roles")
    assert all(decode_array(t["z"]).shape == (12, 12) for t in roles["data"])
    sim = chart(at, "heads.fig_sim")["data"][0]
    assert list(sim["x"]) == [f"L5 H{h}" for h in range(12)]  # 144 x 144 pairs would not be read
    assert "compare the 12 heads of layer 5" in texts(at)
    at.session_state["heads.view"] = "Ablation"
    at.run()
    no_error(at)
    ranked = at.dataframe[0].value
    assert sorted(ranked["head"]) == sorted(f"L5 H{h}" for h in range(12))
    assert "ranks the 12 heads of one layer at a time" in texts(at)


# ---------------------------------------------------------------------------------------------
# Masks


def test_a_text_as_long_as_the_context_is_drawn_whole(folder_models):
    """The tiny GPT-2 (a context of 64 tokens) splits two example sentences into more tokens than it reads: the
    sidebar keeps the first 64, which the editor draws whole (it draws up to 64; tests/app/test_long_inputs.py
    cuts a longer context's text), and each of their next tokens is scored."""
    model_id = folder_models["gpt2"]
    _, task = loaded(model_id)
    text = task.example_text(0) + " " + task.example_text(1)
    ids = task.vocab.encode(text)
    assert len(ids) > 65
    at = app_at(MASKS, {"model": model_id, "input": text})
    no_error(at)
    assert not any("draws every pair of tokens" in i.value for i in at.info)
    assert at.data_editor[0].value.shape == (64, 64)
    table = next(d.value for d in at.dataframe if "yours: predicts" in d.value.columns)
    assert list(table["right answer"]) == task.vocab.decode(ids[1:64])  # the text's next tokens, as labels


@pytest.mark.parametrize("kind", KINDS)
def test_masks_presets_formula_and_cells_on_each_checkpoint(folder_models, kind):
    model_id = folder_models[kind]
    at = app_at(MASKS, {"model": model_id, "input": TEXT})
    no_error(at)
    for preset in PRESETS:
        at.session_state["masks.all.preset"] = preset
        at.run()
        no_error(at)
    columns = at.data_editor[0].value.columns
    at.session_state["masks.all.cells"] = {"edited_rows": {3: {c: False for c in columns}}, "added_rows": [],
                                           "deleted_rows": []}
    at.run()
    no_error(at)
    assert any("no key at all" in w.value for w in at.warning)
    at.session_state["masks.scope"] = "layer"
    at.run()
    no_error(at)
    assert [m.label for m in at.metric][:2] == ["accuracy, own mask", "accuracy, your mask"]


def test_a_formula_changes_a_decoders_predictions_on_its_text(folder_models):
    model_id = folder_models["llama"]
    at = app_at(MASKS, {"model": model_id, "input": TEXT, "preset": "formula", "formula": "abs(i - j) <= 1"})
    no_error(at)
    model, task = loaded(model_id)
    ids = ids_of(model_id)
    n = len(ids)
    band = torch.tensor([[abs(i - j) <= 1 for j in range(n)] for i in range(n)])
    with torch.no_grad():
        probs = model(torch.tensor([ids]), mask=band)[0].softmax(-1)
    table = next(d.value for d in at.dataframe if "yours: predicts" in d.value.columns)
    assert list(table["right answer"]) == task.vocab.decode(ids[1:])
    assert list(table["yours: predicts"]) == task.vocab.decode(probs.argmax(-1)[:-1].tolist())
    np.testing.assert_allclose(table["yours: p(right)"], probs[torch.arange(n - 1), ids[1:]].numpy(),
                               rtol=1e-4)
    correct = (probs.argmax(-1)[:-1] == torch.tensor(ids[1:])).float().mean()
    assert next(m for m in at.metric if m.label == "accuracy, your mask").value == f"{float(correct):.1%}"


def test_an_encoder_fills_in_each_hidden_word_under_the_mask(folder_models):
    """BERT is scored on hidden words: each word of the text behind [MASK] in turn, with its own mask and yours."""
    model_id = folder_models["bert"]
    at = app_at(MASKS, {"model": model_id, "input": TEXT, "preset": "causal"})
    no_error(at)
    model, task = loaded(model_id)
    ids = ids_of(model_id)
    words = [p for p, i in enumerate(ids) if i not in set(task.vocab.tokenizer.special_ids.values())]
    table = next(d.value for d in at.dataframe if "yours: predicts" in d.value.columns)
    assert list(table["right answer"]) == task.vocab.decode([ids[p] for p in words])
    p = words[2]
    hidden = torch.tensor([ids])
    hidden[0, p] = task.vocab.mask_id
    causal = torch.tril(torch.ones(len(ids), len(ids), dtype=torch.bool))
    for column, mask in (("own: p(right)", None), ("yours: p(right)", causal)):
        with torch.no_grad():
            probs = model(hidden, **({} if mask is None else {"mask": mask}))[0, p].softmax(-1)
        assert table[column].iloc[2] == pytest.approx(float(probs[ids[p]]), rel=1e-4)
    assert any(m.label == "hidden words scored" and m.value == str(len(words)) for m in at.metric)


def test_a_large_model_measures_the_influence_when_asked(folder_models, monkeypatch):
    """The influence map runs n copies of the input with a gradient: for GPT-2 small about 6 s a mask. Above
    LARGE_MODEL_PARAMETERS it waits for a toggle (here every model counts as large)."""
    from ui.masks import view as MV

    monkeypatch.setattr(MV, "LARGE_MODEL_PARAMETERS", 0)
    at = app_at(MASKS, {"model": folder_models["gpt2"], "input": TEXT})
    no_error(at)
    assert not has_chart(at, "masks.influence")
    assert "so it runs when you ask for it" in texts(at)
    at.toggle(key=MV.INFLUENCE_KEY).set_value(True).run()
    no_error(at)
    assert has_chart(at, "masks.influence")


def test_a_large_encoder_fills_in_its_first_words_only(folder_models, monkeypatch):
    """Each hidden word is one more copy of the text to run on every new mask: a large encoder fills in the first
    FILL_IN_LARGE words, and the page says so."""
    from ui.masks import view as MV

    monkeypatch.setattr(MV, "LARGE_MODEL_PARAMETERS", 0)
    monkeypatch.setattr(MV, "FILL_IN_LARGE", 3)
    at = app_at(MASKS, {"model": folder_models["bert"], "input": TEXT})
    no_error(at)
    table = next(d.value for d in at.dataframe if "yours: predicts" in d.value.columns)
    assert list(table["right answer"]) == ["the", "cat", "sat"]
    assert "Each of the first 3 words of your text" in texts(at)


def test_a_large_model_removes_heads_one_by_one_when_asked(folder_models, monkeypatch):
    from ui.heads import runs as R

    monkeypatch.setattr(R, "RANK_ON_REQUEST_PARAMETERS", 0)
    at = open_view(HEADS, folder_models["gpt2"], "Ablation")
    no_error(at)
    assert not has_chart(at, "heads.fig_ablation") and any(m.label.startswith("accuracy") for m in at.metric)
    at.toggle(key="heads.rank_on").set_value(True).run()
    no_error(at)
    assert len(decode_array(chart(at, "heads.fig_ablation")["data"][0]["x"])) == 8
