"""Generation, Train, Home and Lessons with a real checkpoint opened from a folder (tiny random GPT-2, BERT and
Llama with grouped keys and values, tests/app/folder_models.py): the hook explorer lists the real model's hooks
with their real shapes, a decoder steps with and without its key-value cache (the two agree, token labels, the
cache's real size), an encoder says why it cannot write and fills in [MASK] instead; Train trains a toy task
whatever the sidebar holds; Home names the checkpoints and the folders that could not be opened; a lesson step
that opens a bundled model works after a folder model was selected."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch
from streamlit.testing.v1 import AppTest

from core import pretrained
from core.analysis import generation as G
from core.text_task import TextTask
from tests.app.conftest import ROOT, TIMEOUT, app_at, assert_ok, decode_array, plotly_specs
from tests.app.folder_models import folder_models, models_dir  # noqa: F401
from tests.app.test_generation import chart
from tests.app.test_generation import widget as labelled
from ui.shell import models
from ui.shell.text import code, literal

GENERATION = str(ROOT / "pages" / "generation.py")


def open_generation(model_id: str, **query) -> AppTest:
    at = AppTest.from_file(GENERATION, default_timeout=TIMEOUT * 3)
    at.query_params["model"] = model_id
    for k, v in query.items():
        at.query_params[k] = v
    at.run()
    assert_ok(at)
    return at




def metric(at: AppTest, label: str) -> str:
    return labelled(at, "metric", label).value


def loaded(models_dir, kind: str):
    """(model, text task) of one tiny checkpoint, loaded as the app loads it."""
    model, tokenizer = pretrained.load_pretrained(pretrained.describe(models_dir / f"tiny-{kind}"))
    return model, TextTask(tokenizer, model.cfg.vocab_size, model.cfg.arch, model.cfg.max_len)


def sidebar_ids(at: AppTest, model_id: str) -> torch.Tensor:
    """The sidebar's input as the model reads it `[1 pos]` (the text through the checkpoint's tokenizer)."""
    task = models.text_task(model_id)
    text = at.session_state["glassbox.input"]
    return torch.tensor([task.vocab.encode(text)[:64]])  # the tiny models' context: 64


# ---------------------------------------------------------------------------------------------
# core.analysis.generation with the real families (shared code: the fixes it needed)


@pytest.mark.parametrize("kind", ["gpt2", "bert", "llama"])
def test_every_family_diagram_builds_from_a_checkpoints_config(models_dir, kind):
    """BERT's token types have no place in an encoder-decoder: building its diagram raised before."""
    model, _ = loaded(models_dir, kind)
    for arch in G.FAMILIES:
        hooks = G.family_hooks(model.cfg, arch)
        assert hooks and all(h.layer is None or h.layer < model.cfg.n_layers for h in hooks)
    both = G.family_config(model.cfg, "encoder-decoder")
    assert both.n_token_types == 0 and both.d_model == model.cfg.d_model and both.kv_heads == model.cfg.kv_heads
    assert G.family_config(model.cfg, model.cfg.arch).n_token_types == model.cfg.n_token_types


def test_grouped_keys_and_values_have_their_own_head_axis(models_dir):
    """Llama's 2 key/value heads serve 4 query heads: hook_k and hook_v are [B L h_kv d_h], and the Shapes panel's
    K and V blocks are as large as the real tensors."""
    model, task = loaded(models_dir, "llama")
    ids = torch.tensor([task.vocab.encode("the quick brown fox")])
    n = ids.shape[1]
    sizes = {"B": 1, "L": n, "h": 4, "h_kv": 2, "d_h": 8, "d_model": 32, "d_mlp": model.cfg.d_mlp,
             "V": model.cfg.vocab_size, "1": 1}
    hooks = {h.name: h for h in G.anatomy(model, ids)}
    for h in hooks.values():
        assert tuple(sizes[a] for a in h.axes) == h.shape, (h.name, h.axes, h.shape)
    assert hooks["blocks.0.attn.hook_k"].axes == ("B", "L", "h_kv", "d_h")
    assert hooks["blocks.0.attn.hook_q"].axes == ("B", "L", "h", "d_h")
    q, k, v, scores, _ = G.attention_shapes(model.cfg, "decoder masked self-attention", 1, n, n)
    assert q.sizes == (1, 4, n, 8) and k.sizes == v.sizes == (1, 2, n, 8) and scores.sizes == (1, 4, n, n)
    assert k.axes == ("B", "h_kv", "L_d", "d_h")
    _, cache = model.run_with_cache(ids, ["blocks.0.attn.hook_k"])
    assert tuple(cache["blocks.0.attn.hook_k"].shape) == (1, n, 2, 8)


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_the_stepper_agrees_with_and_without_the_cache_on_a_checkpoint(models_dir, kind):
    model, task = loaded(models_dir, kind)
    prompt = torch.tensor([task.vocab.encode("The cat sat on")])
    cached = G.decode_trace(model, prompt, 6, True)
    full = G.decode_trace(model, prompt, 6, False)
    lean = G.decode_trace(model, prompt, 6, False, keep_keys=False)
    greedy = model.generate(prompt, 6, use_cache=False)[0].numpy()
    assert (cached.tokens == greedy).all() and (full.tokens == greedy).all() and (lean.tokens == greedy).all()
    assert G.max_logit_difference(cached, full).max() < 1e-4
    width = model.cfg.kv_heads * model.cfg.d_head  # 16 for Llama (2 key/value heads), 32 for GPT-2
    for a, b, c in zip(cached.steps, full.steps, lean.steps):
        assert a.keys.shape == b.keys.shape == (2, a.keys_stored, width)
        assert abs(a.keys - b.keys).max() < 1e-4
        assert c.keys.shape == (2, 0, width) and c.keys_stored == b.keys_stored and c.fed == b.fed
        assert np.array_equal(c.logits, b.logits) and c.projections == b.projections
    # with the cache, a step's keys are the first rows of the last step's: one array, not a copy per step
    assert all(np.shares_memory(s.keys, cached.steps[-1].keys) for s in cached.steps)


# ---------------------------------------------------------------------------------------------
# Generation


def test_bert_opens_the_anatomy_with_its_real_hooks(folder_models):
    """The hook explorer crashed for BERT (the encoder-decoder column of the diagram); now it lists BERT's own
    hooks, token types and the embedding norm included, and every hook's real shape."""
    model_id = folder_models["bert"]
    at = open_generation(model_id)
    chart(at, "Sublayers (boxes)")
    model, _ = models.get_model(model_id)
    picker = labelled(at, "selectbox", "Hook point of this model")
    assert list(picker.options) == model.hook_names()
    assert "hook_token_type_embed" in picker.options and "ln_embed.hook_normalized" in picker.options
    picker.set_value("hook_token_type_embed").run()
    assert_ok(at)
    ids = sidebar_ids(at, model_id)
    z = decode_array(chart(at, "hook_token_type_embed for your input")["data"][0]["z"])
    _, cache = model.run_with_cache(ids, ["hook_token_type_embed"])
    assert np.allclose(z, cache["hook_token_type_embed"][0].numpy(), atol=1e-5)


def test_the_hook_table_gives_llamas_grouped_keys_their_real_shape(folder_models):
    at = open_generation(folder_models["llama"])
    at.session_state["generation.hooks_open"] = True
    at.run()
    assert_ok(at)
    (table,) = [d.value for d in at.dataframe if "sublayer" in d.value.columns]
    rows = {r["hook"]: r for r in table.to_dict("records")}
    n = sidebar_ids(at, folder_models["llama"]).shape[1]
    assert rows["blocks.1.attn.hook_k"]["axes"] == "B × L × h_kv × d_h"
    assert rows["blocks.1.attn.hook_v"]["shape"] == f"1×{n}×2×8"
    assert rows["blocks.1.attn.hook_pattern"]["shape"] == f"1×4×{n}×{n}"
    assert rows["blocks.0.mlp.hook_pre_linear"]["axes"] == "B × L × d_mlp"  # SwiGLU's second branch


def test_the_logits_are_drawn_for_the_inputs_own_tokens_not_the_whole_vocabulary(folder_models):
    model_id = folder_models["gpt2"]
    at = open_generation(model_id)
    labelled(at, "selectbox", "Hook point of this model").set_value("hook_logits").run()
    assert_ok(at)
    spec = chart(at, "hook_logits for your input")
    z = decode_array(spec["data"][0]["z"])
    model, _ = models.get_model(model_id)
    task = models.text_task(model_id)
    ids = sidebar_ids(at, model_id)
    distinct = list(dict.fromkeys(ids[0].tolist()))
    assert z.shape == (ids.shape[1], len(distinct)) and len(distinct) < model.cfg.vocab_size  # not 320 columns
    assert spec["data"][0]["x"][:2] == [f"{task.vocab.decode([i])[0]} (id {i})" for i in distinct[:2]]
    with torch.no_grad():
        logits = model(ids)[0]  # [pos vocab]
    assert np.allclose(z, logits[:, distinct].numpy(), atol=1e-4)
    assert any(f"has {model.cfg.vocab_size:,} tokens" in c.value for c in at.caption)


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_a_decoder_steps_with_and_without_its_cache_in_token_labels(folder_models, kind):
    model_id = folder_models[kind]
    at = open_generation(model_id)
    model, _ = models.get_model(model_id)
    vocab = models.text_task(model_id).vocab
    prompt = labelled(at, "slider", "prompt tokens").value
    steps = labelled(at, "slider", "tokens to generate").value
    assert labelled(at, "slider", "tokens to generate").max <= 16  # the bounds said on the page
    assert labelled(at, "slider", "prompt tokens").max <= 64
    assert any("A checkpoint from a folder writes at most 16 tokens here" in c.value for c in at.caption)
    ids = sidebar_ids(at, model_id)
    greedy = model.generate(ids[:, :prompt], steps, use_cache=False)[0].tolist()
    for t in (0, 1, steps - 1):
        labelled(at, "slider", "step t").set_value(t).run()
        assert_ok(at)
        shown = next(m.value for m in at.markdown if m.value.startswith("Decoder input so far"))
        written = vocab.decode(greedy[:prompt + t])
        assert shown.startswith("Decoder input so far: " + " ".join(code(tok) for tok in written))
        assert shown.endswith(f"step {t} writes **{code(vocab.decode([greedy[prompt + t]])[0])}**")
        assert float(metric(at, "max |Δ logits|")) < 1e-4  # with and without the cache agree
        assert int(metric(at, "K, V rows stored per layer")) == prompt + t
        assert int(metric(at, "positions fed")) == (prompt if t == 0 else 1)
        keys = decode_array(chart(at, "Layer 0's key cache")["data"][0]["z"])
        assert keys.shape == (prompt + t, model.cfg.kv_heads * model.cfg.d_head)


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_a_checkpoint_is_timed_only_when_asked(folder_models, kind):
    at = open_generation(folder_models[kind], tlen="12")
    assert labelled(at, "slider", "tokens to generate for timing").max <= 16
    assert not [s for s in plotly_specs(at) if ((s["layout"].get("title") or {}).get("text") or "").startswith("Measured")]
    assert any(c.value.startswith("Press **Measure** to time 12 tokens") for c in at.caption)
    labelled(at, "button", "Measure").click().run()
    assert_ok(at)
    spec = chart(at, "Measured on this server, fastest of 2 runs, 12 tokens")
    assert len(decode_array(spec["data"][0]["y"])) == 12
    at.run()  # measured once, it stays, for everyone with this model and these lengths
    assert chart(at, "Measured on this server, fastest of 2 runs, 12 tokens") and labelled(at, "button", "Measure again")


def test_llamas_cache_says_its_real_size_with_two_key_value_heads(folder_models):
    at = open_generation(folder_models["llama"])
    prompt = labelled(at, "slider", "prompt tokens").value
    spec = chart(at, "Layer 0's key cache after step 0")
    assert decode_array(spec["data"][0]["z"]).shape == (prompt, 2 * 8)  # 2 key/value heads × d_h 8, not 4 × 8
    assert spec["layout"]["xaxis"]["title"]["text"] == "key dimension (key/value head × d_h)"
    size = next(c.value for c in at.caption if c.value.startswith("The cache holds"))
    numbers = 2 * 2 * prompt * 2 * 8  # K and V × layers × positions × key/value heads × d_h
    assert f"2 × 2 × {prompt} × 2 × 8 = {numbers:,} numbers" in size
    assert "the 4 query heads share 2 key/value heads" in size and "2× smaller" in size


def test_bert_says_why_it_cannot_write_and_fills_in_a_mask_instead(folder_models):
    model_id = folder_models["bert"]
    at = open_generation(model_id)
    assert any("is an encoder" in i.value and "fill in blanks" in i.value for i in at.info)
    assert not [b for b in at.button if b.label == "step ▶"]  # no stepper: it cannot generate
    model, _ = models.get_model(model_id)
    vocab = models.text_task(model_id).vocab
    ids = sidebar_ids(at, model_id)
    pick = labelled(at, "selectbox", "Token to hide behind [MASK]")
    first = int(pick.options[0].split(":")[0])  # options read "position: token"
    for p in (pick.value, first):
        if p != pick.value:
            pick.set_value(p).run()
            assert_ok(at)
            pick = labelled(at, "selectbox", "Token to hide behind [MASK]")
        masked = ids.clone()
        masked[0, p] = vocab.mask_id
        with torch.no_grad():
            probs = torch.softmax(model(masked)[0, p], dim=-1)
        top = probs.topk(5)
        (table,) = [d.value for d in at.dataframe if "guess" in d.value.columns]
        assert list(table["guess"]) == vocab.decode(top.indices.tolist())
        assert np.allclose(table["probability"], top.values.numpy(), atol=1e-5)
        hidden = vocab.decode([int(ids[0, p])])[0]
        assert any(f"The token that was there, {code(hidden)}" in c.value for c in at.caption)
        reads = next(m.value for m in at.markdown if m.value.startswith("Reads: "))
        assert reads.split(" ")[1:][p] == code("[MASK]")


def test_bert_guesses_every_mask_typed_in_the_text(folder_models):
    model_id = folder_models["bert"]
    at = app_at("pages/generation.py", {"model": model_id})
    pick = labelled(at, "selectbox", "Token to hide behind [MASK]")
    pick.set_value(int(pick.options[-1].split(":")[0])).run()  # the last token of the long example
    assert_ok(at)
    at.sidebar.text_area(key="glassbox.input").set_value("the cat sat .").run()  # shorter: that position is gone
    assert_ok(at)
    assert labelled(at, "selectbox", "Token to hide behind [MASK]").value < 6
    at.sidebar.text_area(key="glassbox.input").set_value("the cat [MASK] on the [MASK] .").run()
    assert_ok(at)
    assert any("2 " in c.value and "token(s)" in c.value for c in at.caption)
    (table,) = [d.value for d in at.dataframe if "guess" in d.value.columns]
    assert len(table) == 2 * 5 and len(set(table["position"])) == 2


# ---------------------------------------------------------------------------------------------
# Train


def test_train_trains_a_toy_task_whatever_checkpoint_the_sidebar_holds(folder_models, monkeypatch):
    from tests.app.test_train_page import configure, run_of, train_to_end
    from ui.train import runs as train_runs

    monkeypatch.setattr(train_runs, "CHUNK_SECONDS", 0.05)
    at = app_at("pages/train.py", {"model": folder_models["llama"]})
    assert_ok(at)
    configure(at, steps=20)
    at.button(key="train.go").click().run()
    assert_ok(at)
    train_to_end(at)
    run = run_of(at)
    assert run.settings.task == "copy" and run.trainer.model.cfg.d_model == 32 and run.step == 20
    at.button(key="train.use").click().run()  # from the checkpoint to the model just trained: its own example
    assert_ok(at)
    assert at.sidebar.selectbox(key="glassbox.model").value == run.model_id
    assert not at.sidebar.error and not at.error
    assert set(at.session_state["glassbox.input"].split()) <= set(run.task.vocab.tokens)


# ---------------------------------------------------------------------------------------------
# Home and the model picker


def test_home_names_the_checkpoints_family_size_and_context(folder_models):
    at = app_at(None, {"model": folder_models["gpt2"]})
    assert_ok(at)
    found = models.folder_models()
    gpt2, bert, llama = (found[folder_models[k]] for k in ("gpt2", "bert", "llama"))
    line = next(c.value for c in at.caption if c.value.startswith("Current model"))
    assert f"a checkpoint from a folder: GPT-2, {gpt2.parameters / 1e3:.0f}K parameters, context 64 tokens" in line
    table = at.table[0].value
    column = dict(zip(table.index, table["checkpoints from folders"]))
    assert column["encoder-only (BERT-like)"] == f"tiny-bert (BERT, {bert.parameters / 1e3:.0f}K parameters, context 64 tokens)"
    assert "tiny-gpt2 (GPT-2" in column["decoder-only (GPT-like)"]
    assert f"tiny-llama (Llama family, {llama.parameters / 1e3:.0f}K parameters" in column["decoder-only (GPT-like)"]
    assert column["encoder-decoder (T5-like)"] == "none"
    labels = at.sidebar.selectbox(key="glassbox.model").options
    assert f"tiny-gpt2 (GPT-2, {gpt2.parameters / 1e3:.0f}K)" in labels


def test_folders_that_cannot_be_opened_are_listed_under_the_picker_with_their_problems(models_dir, tmp_path,
                                                                                      monkeypatch):
    root = tmp_path / "models"
    shutil.copytree(models_dir / "tiny-gpt2", root / "tiny-gpt2")
    (root / "no-weights").mkdir()
    shutil.copy(models_dir / "tiny-gpt2" / "config.json", root / "no-weights" / "config.json")
    (root / "*odd* model").mkdir()
    (root / "*odd* model" / "config.json").write_text(json.dumps({"architectures": ["T5ForConditionalGeneration"]}))
    monkeypatch.setenv("GLASSBOX_MODELS_DIR", str(root))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hf-cache"))
    broken = {f.name: f.problem for f in models.found_folders() if f.problem}
    assert set(broken) == {"no-weights", "*odd* model"}
    at = app_at(None, {"model": "folder:tiny-gpt2"})
    assert_ok(at)
    (box,) = [e for e in at.sidebar.expander if e.label == "2 model folders could not be opened"]
    lines = [m.value for m in box.markdown]
    for name, problem in broken.items():
        assert f"**{literal(name)}**: {literal(problem)}" in lines
    picker = at.sidebar.selectbox(key="glassbox.model")
    assert picker.value == "folder:tiny-gpt2"  # the folder that opens is picked as before
    assert not [label for label in picker.options if "no-weights" in label or "odd" in label]


def test_no_broken_folder_no_expander(folder_models):
    at = app_at(None, {"model": folder_models["bert"]})
    assert_ok(at)
    assert not [e for e in at.sidebar.expander if "could not be opened" in e.label]


# ---------------------------------------------------------------------------------------------
# Lessons


def test_a_lesson_started_with_a_checkpoint_selected_opens_its_bundled_models(folder_models):
    at = app_at("pages/lessons.py", {"model": folder_models["gpt2"]})
    assert_ok(at)
    at.button(key="start.encoder-decoder-stacks").click().run()
    assert_ok(at)
    assert at.query_params["model"] == "reverse-encdec" and at.title[0].value == "Attention"
    assert not at.sidebar.error  # the checkpoint's free text was not handed to the toy model
    at.button(key="lesson_next").click().run()  # Generation with the bundled encoder-decoder
    assert_ok(at)
    assert at.title[0].value == "Generation" and at.query_params["model"] == "reverse-encdec"
    at.sidebar.selectbox(key="glassbox.model").set_value(folder_models["llama"]).run()  # the student wanders off
    assert_ok(at)
    assert at.query_params["model"] == folder_models["llama"] and not at.error
    at.button(key="lesson_reset").click().run()  # ... and the step's view comes back
    assert_ok(at)
    assert at.query_params["model"] == "reverse-encdec" and not at.sidebar.error


@pytest.mark.parametrize("kind", ["gpt2", "bert", "llama"])
def test_every_hook_and_every_control_of_the_page_draws_with_a_checkpoint(folder_models, kind):
    """Each of the model's hooks in the explorer (its tensor for the sidebar's text, rows labelled with its tokens),
    then the other controls: the identities' layer and seed, the shapes' length, the cache's layer, ◀ / ▶."""
    model_id = folder_models[kind]
    at = open_generation(model_id)
    model, _ = models.get_model(model_id)
    tokens = models.text_task(model_id).vocab.decode(sidebar_ids(at, model_id)[0].tolist())
    for name in model.hook_names():
        labelled(at, "selectbox", "Hook point of this model").set_value(name).run()
        assert_ok(at)
        spec = chart(at, f"{name} for your input")
        z = decode_array(spec["data"][0]["z"])
        assert z.shape[0] == len(tokens) and z.shape[1] <= 4 * 64 * 4, (name, z.shape)  # never a whole vocabulary
        assert list(spec["data"][0]["y"])[:3] == [f"{i}:{t}" for i, t in enumerate(tokens[:3])], name
    at.run()
    labelled(at, "selectbox", "Layer").set_value(1).run()
    labelled(at, "number_input", "Permutation seed").set_value(7).run()
    assert_ok(at)
    assert float(metric(at, "max |MLP(Px) − P·MLP(x)|")) < 1e-4 and float(metric(at, "max |concat·W_O − Σ heads|")) < 1e-4
    labelled(at, "slider", "input tokens used (L)").set_value(5).run()
    assert_ok(at)
    assert chart(at, "L_e = 5, L_d = 5")
    if kind != "bert":
        at.run()
        labelled(at, "selectbox", "layer of the cache").set_value(1).run()
        assert_ok(at)
        assert chart(at, "Layer 1's key cache")
        at.run()
        labelled(at, "button", "step ▶").click().run()
        labelled(at, "button", "step ▶").click().run()
        labelled(at, "button", "◀ step").click().run()
        assert_ok(at)
        assert at.session_state["generation.t"] == 1
