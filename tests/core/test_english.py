"""The English models' pipeline (core/english): corpus reader, tokenizer, baselines, export, and a quick build.

The quick build runs the whole pipeline (tokenizer, both models, export, evaluation) at tiny scale on a
corpus this file writes; its folders must load in Glassbox and in transformers with the same logits, and
two builds with one seed must write the same bytes. CI has no python3-doc: the HTML reader is checked on a
page written here.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from core.english import baselines, corpus, data, export, pipeline, recipe, tokenizer, training
from core.pretrained import load_pretrained, load_tokenizer, padding_mask

WORDS = ("the a model reads every token and attention heads look back at earlier words while the encoder fills "
         "masked slots from both sides of each sentence python function returns value list string").split()


def write_corpus(path: Path, documents: int = 24, seed: int = 0) -> Path:
    """Documents of made-up sentences, separated by blank lines, one paragraph a line."""
    rng = random.Random(seed)
    docs = []
    for _ in range(documents):
        paragraphs = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 30))).capitalize() + "."
                      for _ in range(rng.randint(3, 8))]
        docs.append("\n".join(paragraphs))
    path.write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    source = {"name": "made-up test sentences", "licence": "CC0-1.0"}
    path.with_suffix(".json").write_text(json.dumps({"source": source, "documents": [f"d{i}" for i in range(documents)]}))
    return path


@pytest.fixture(scope="module")
def built(tmp_path_factory, one_thread):
    """One quick build through the command line, one through `build` (same seed), both on the same corpus."""
    root = tmp_path_factory.mktemp("english")
    text = write_corpus(root / "corpus.txt")
    from core.train import main

    assert main(["--english", "--quick", "--device", "cpu", "--corpus", str(text), "--out", str(root / "cli")]) == 0
    result = pipeline.build(recipe.QUICK, text, root / "api", torch.device("cpu"))
    return root, result


def folders(root: Path, name: str) -> tuple[Path, Path]:
    return root / name / pipeline.DECODER_NAME, root / name / pipeline.ENCODER_NAME


def test_quick_build_writes_both_folders_in_float16(built):
    root, _ = built
    for folder in folders(root, "cli"):
        names = {p.name for p in folder.iterdir()}
        assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "glassbox.json"} <= names
        with safe_open(str(folder / "model.safetensors"), "pt") as f:
            dtypes = {k: f.get_slice(k).get_dtype() for k in f.keys()}
        table = "roformer.encoder.embed_positions.weight"  # RoFormer's sin/cos formula, kept exact
        assert {d for k, d in dtypes.items() if k != table} == {"F16"} and dtypes.get(table, "F32") == "F32"
    text = (root / "cli" / "README.md").read_text(encoding="utf-8")
    assert "## Numbers" in text and "## What they show, and what they do not" in text and "## How the recipe was found" in text


def test_same_seed_same_bytes_other_seed_other_weights(built, tmp_path):
    root, _ = built
    for a, b in zip(folders(root, "cli"), folders(root, "api")):
        for name in ("model.safetensors", "tokenizer.json", "config.json"):
            assert (a / name).read_bytes() == (b / name).read_bytes(), f"{a.name}/{name} differs between runs"
    prepared = pipeline.prepare(recipe.QUICK, root / "corpus.txt", lambda s: None)
    config = recipe.decoder_config(recipe.QUICK, prepared.tok.get_vocab_size())
    runs = [training.train_decoder(config, prepared.decoder_train, replace(recipe.QUICK, seed=seed, decoder_steps=3),
                                   torch.device("cpu")) for seed in (0, 0, 1)]
    weights = [r.model.state_dict()["stack.W_E.weight"] for r in runs]
    assert torch.equal(weights[0], weights[1])
    assert not torch.equal(weights[0], weights[2])


def test_glassbox_loads_the_trained_models(built):
    """load_pretrained gives the trained model's logits: exactly those of its float16-rounded weights."""
    root, result = built
    for folder, key in zip(folders(root, "api"), ("decoder", "encoder")):
        trained = result["models"][key]
        ours, _ = load_pretrained(folder)
        rounded = type(trained)(trained.cfg)
        rounded.load_state_dict({k: v.half().float() for k, v in trained.state_dict().items()})
        tokens = torch.randint(5, trained.cfg.vocab_size, (2, 20), generator=torch.Generator().manual_seed(1))
        with torch.no_grad():
            loaded, exact, full = ours(tokens), rounded.eval()(tokens), trained(tokens)
        torch.testing.assert_close(loaded, exact, atol=1e-5, rtol=0)
        assert (loaded - full).abs().max() < 0.05  # float16 rounding moves logits a little, no more
        assert ours.cfg == trained.cfg


def test_transformers_reads_the_folders_with_the_same_logits(built):
    transformers = pytest.importorskip("transformers")
    root, _ = built
    decoder, encoder = folders(root, "api")
    vocab = json.loads((decoder / "config.json").read_text())["vocab_size"]
    tokens = torch.randint(0, vocab, (2, 24), generator=torch.Generator().manual_seed(0))
    assert json.loads((decoder / "config.json").read_text())["architectures"] == ["Qwen2ForCausalLM"]
    assert json.loads((encoder / "config.json").read_text())["architectures"] == ["RoFormerForMaskedLM"]
    for folder, cls in ((decoder, transformers.Qwen2ForCausalLM), (encoder, transformers.RoFormerForMaskedLM)):
        theirs, info = cls.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager",
                                           output_loading_info=True)
        assert not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys"))
        ours, _ = load_pretrained(folder)
        with torch.no_grad():
            if cls is transformers.RoFormerForMaskedLM:
                attention = torch.ones_like(tokens)
                attention[1, 15:] = 0  # the second row is 15 tokens and 9 of padding
                types = torch.zeros_like(tokens)
                types[:, 10:] = 1
                mine = ours(tokens, mask=padding_mask(attention), token_type_ids=types)
                hf = theirs.eval()(tokens, attention_mask=attention, token_type_ids=types).logits
            else:
                mine, hf = ours(tokens), theirs.eval()(tokens).logits
        torch.testing.assert_close(mine, hf, atol=1e-4, rtol=0)


# (model, earlier layout, the HF class it exports to, the default layout's positions, its config and export functions)
EARLIER_LAYOUTS = [("decoder", "gpt2", "GPT2LMHeadModel", ("rope", "halves"), recipe.decoder_config, export.decoder_config),
                   ("encoder", "bert", "BertForMaskedLM", ("rope", "pairs"), recipe.encoder_config, export.encoder_config)]


@pytest.mark.parametrize("model_name, layout, hf_class, default_positions, make_config, make_hf_config", EARLIER_LAYOUTS,
                         ids=["gpt2", "bert"])
def test_the_earlier_layouts_still_export_to_what_transformers_reads(model_name, layout, hf_class, default_positions,
                                                                     make_config, make_hf_config, tmp_path):
    """decoder_layout="gpt2" and encoder_layout="bert" (the layouts of the earlier English models, a learned position
    table each) write folders with the same logits in transformers and in Glassbox; the defaults use RoPE."""
    transformers = pytest.importorskip("transformers")
    r = replace(recipe.QUICK, **{f"{model_name}_layout": layout})
    config = make_config(r, 320)
    default = make_config(recipe.QUICK, 320)
    assert config.pos == "learned" and (default.pos, default.rope_layout) == default_positions
    model = training.fresh_model(config, r, training.DECODER if model_name == "decoder" else training.ENCODER).eval()
    folder = tmp_path / layout
    export.save_folder(model, folder, make_hf_config(model, 1), {})
    tokenizer.save(tokenizer.train_tokenizer([" ".join(WORDS)] * 4, 320), folder, layout, config.max_len)
    assert json.loads((folder / "config.json").read_text())["architectures"] == [hf_class]
    tokens = torch.randint(0, 320, (2, 24), generator=torch.Generator().manual_seed(0))
    theirs = getattr(transformers, hf_class).from_pretrained(folder, dtype=torch.float32, attn_implementation="eager")
    ours, _ = load_pretrained(folder)
    with torch.no_grad():
        torch.testing.assert_close(ours(tokens), theirs.eval()(tokens).logits, atol=1e-4, rtol=0)
    with pytest.raises(ValueError, match=f"{model_name}_layout"):
        make_config(replace(recipe.QUICK, **{f"{model_name}_layout": "gpt3"}), 320)


def test_roformer_positions_are_transformers_own_table():
    transformers = pytest.importorskip("transformers")
    from transformers.models.roformer.modeling_roformer import RoFormerSinusoidalPositionalEmbedding

    theirs = RoFormerSinusoidalPositionalEmbedding(40, 32).create_weight()
    torch.testing.assert_close(export.roformer_positions(40, 32), theirs, atol=1e-6, rtol=0)


ODD_TEXTS = ["", "Café crème, naïve façade, São Paulo", "世界 こんにちは 안녕하세요", "emoji 🙂👍🏽 and 🇫🇷",
             "control \x00\x01\x07\x1b[0m tab\tnew\nline\r\n", "combining e\u0301 and RTL שלום", "\ufeffBOM",
             "x" * 500]


def test_tokenizers_accept_any_text_and_round_trip(built):
    root, _ = built
    decoder, encoder = folders(root, "api")
    dec, enc = load_tokenizer(decoder, "llama"), load_tokenizer(encoder, "bert")
    rng = random.Random(0)
    noise = "".join(chr(rng.choice([rng.randrange(32, 0xD7FF), rng.randrange(0xE000, 0x10FFFF)])) for _ in range(300))
    for text in ODD_TEXTS + [noise]:
        ids = dec.encode(text)
        assert all(0 <= i < dec.vocab_size for i in ids)
        assert dec.decode(ids) == text
        assert len(dec.labels(ids)) == len(ids)
        wrapped = enc.encode(text)
        assert wrapped[0] == enc.cls_id and wrapped[-1] == enc.sep_id and wrapped[1:-1] == ids
        assert enc.decode(wrapped) == text
    assert dec.encode("") == [] and enc.encode("") == [enc.cls_id, enc.sep_id]
    assert "".join(dec.labels(dec.encode("every token reads"))) == "every␣token␣reads"
    eot = dec.encode(tokenizer.EOT)
    assert eot == [dec.bos_id] and dec.bos_id == dec.eos_id
    # a typed [MASK] is the mask token, and takes the space before it (as a masked "␣word" did in training)
    assert enc.encode("the [MASK] reads")[1:-1] == [*dec.encode("the"), enc.mask_id, *dec.encode(" reads")]
    assert enc.labels([enc.mask_id]) == ["[MASK]"]
    assert {enc.cls_id, enc.sep_id, enc.mask_id, enc.pad_id} == {2, 3, 4, 0}


def test_manifests_record_sources_licences_and_scores(built):
    root, _ = built
    decoder, encoder = folders(root, "api")
    dec = json.loads((decoder / "glassbox.json").read_text())
    enc = json.loads((encoder / "glassbox.json").read_text())
    for m in (dec, enc):
        assert m["corpus"]["licence"] == "CC0-1.0" and m["corpus"]["name"] == "made-up test sentences"
        assert len(m["corpus"]["sha256"]) == 64 and m["corpus"]["heldout_names"] == ["d12"]
        assert m["training"]["seed"] == 0 and m["training"]["steps"] == recipe.QUICK.decoder_steps
        assert m["training"]["tokens_seen"] > 0 and m["training"]["device"] == "cpu"
        assert m["preliminary"] is False
    e = dec["evaluation"]
    assert 1 < e["heldout_perplexity"] < 320 and abs(e["float16_change"]) < 0.05 * e["heldout_perplexity"]
    assert 1 < e["baselines"]["bigram_perplexity"] < e["baselines"]["unigram_perplexity"] < 320
    assert {"previous token", "induction"} <= set(dec["heads"])
    f = enc["evaluation"]
    assert 0 <= f["masked_accuracy"] <= 1 and 0 <= f["baselines"]["bigram_fill_accuracy"] <= 1
    assert f["masked_slots"] > 0 and math.isfinite(f["masked_perplexity"])


# ---------------------------------------------------------------------------------------------
# Baselines, by hand


def test_bigram_of_an_alternating_sequence():
    """0 1 0 1 ...: the bigram is nearly certain of each next token, the unigram is a coin (plus smoothing)."""
    train = torch.tensor([0, 1] * 50)  # 100 tokens over a vocabulary of 3
    model = baselines.fit(train, vocab_size=3)
    torch.testing.assert_close(model.unigram.double(), torch.tensor([51, 51, 1], dtype=torch.float64) / 103)
    # Witten-Bell after 0: c(0) = 50 pairs, all "0 1", T(0) = 1: P(1 | 0) = (50 + P(1)) / 51
    assert model.bigram[0, 1].item() == pytest.approx((50 + 51 / 103) / 51)
    assert model.bigram[2].tolist() == pytest.approx(model.unigram.tolist())  # 2 never seen: the unigram
    torch.testing.assert_close(model.bigram.sum(dim=1), torch.ones(3))
    scores = baselines.perplexities(model, torch.tensor([0, 1, 0, 1, 0]))
    assert scores["targets"] == 4
    # held-out targets: 1 after 0 twice, 0 after 1 twice; c(1) = 49 pairs "1 0", T(1) = 1
    p10, p01 = (50 + 51 / 103) / 51, (49 + 51 / 103) / 50
    assert scores["bigram"] == pytest.approx((p10 * p01) ** -0.5, rel=1e-5)
    assert scores["unigram"] == pytest.approx(103 / 51)


def test_bigram_fill_picks_the_word_between_its_neighbours():
    model = baselines.fit(torch.tensor([5, 6, 7] * 30), vocab_size=8)
    ids = data.MaskIds(cls=2, sep=3, mask=4, n_special=5, vocab_size=8)
    tokens = torch.tensor([[2, 5, 4, 7, 4, 3]])  # [CLS] 5 [MASK] 7 [MASK] [SEP]
    log_q = baselines.fill_scores(model, tokens, torch.tensor([[0, 2], [0, 4]]), ids.mask, ids.n_special)
    assert log_q.shape == (2, 8) and torch.isinf(log_q[:, :5]).all()
    assert log_q[0].argmax().item() == 6  # 5 _ 7: only 6 follows 5 and precedes 7
    assert log_q[1].argmax().item() == 5  # 7 _ [SEP]: 5 follows 7
    metrics = baselines.fill_metrics(log_q, torch.tensor([6, 5]))
    assert metrics["accuracy"] == 1.0 and 1 <= metrics["perplexity"] < 1.2


# ---------------------------------------------------------------------------------------------
# The corpus reader, on a page written here

PAGE = """<html><head><title>t</title><script>var x = "<p>no</p>";</script></head><body>
<div class="related" role="navigation"><ul><li>navigation link</li></ul></div>
<div class="document"><div class="body" role="main">
<section><h1>Built-in Functions<a class="headerlink" href="#x">¶</a></h1>
<p>The   interpreter has <code class="docutils literal"><span class="pre">len()</span></code> and
it’s “quoted”.</p>
<div class="highlight-python3 notranslate"><div class="highlight"><pre>print("code")</pre></div></div>
<table><tr><td><p>cell</p></td></tr></table>
<div class="toctree-wrapper"><ul><li>contents entry</li></ul></div>
<dl class="py function"><dt class="sig">abs(x)</dt><dd><p>Return the absolute value.</p></dd></dl>
<div class="admonition note"><p class="admonition-title">Note</p><p>Be careful.</p></div>
<ul><li>first item</li><li><p>second item</p></li></ul>
</section></div></div>
<div class="sphinxsidebar"><p>sidebar text</p></div><div class="footer">© footer</div></body></html>"""


def test_html_reader_keeps_prose_only():
    assert corpus.html_paragraphs(PAGE) == [
        "Built-in Functions", "The interpreter has len() and it's \"quoted\".", "Return the absolute value.",
        "Be careful.", "first item", "second item"]


def test_docs_tree_split_and_cache(tmp_path):
    html = tmp_path / "html"
    for name in ("library/b.html", "library/a.html", "genindex-A.html", "index.html", "tutorial/c.html",
                 "empty.html", "_static/x.html"):
        (html / name).parent.mkdir(parents=True, exist_ok=True)
        body = "" if name == "empty.html" else f"<p>Text of {name}.</p>"
        (html / name).write_text(f'<div class="body">{body}</div>', encoding="utf-8")
    docs = corpus.read_html_docs(html)
    assert [d.name for d in docs] == ["library/a.html", "library/b.html", "tutorial/c.html"]
    cache = tmp_path / "build" / "corpus.txt"
    c = corpus.load_corpus(cache, html_root=html)
    assert cache.exists() and json.loads(cache.with_suffix(".json").read_text())["source"]["licence"]
    assert [d.name for d in c.heldout] == ["library/b.html"] and len(c.train) == 2
    assert corpus.read_cache(cache)[0] == docs
    assert corpus.heldout_indices(482) == sorted(set(corpus.heldout_indices(482))) and \
        len(corpus.heldout_indices(482)) == 24 and corpus.heldout_indices(1) == []


def test_repeated_passages_and_masking(one_thread):
    text = torch.arange(5, 5 + 400)  # every token distinct: a repeat is the only way a token recurs
    g = torch.Generator().manual_seed(0)
    b = data.decoder_batch(text, 6, 64, g, repeat_share=1.0, repeat_span=(8, 16))
    assert torch.equal(b.tokens[:, 1:], b.targets[:, :-1]) and b.repeated == 6
    for row in torch.cat([b.tokens, b.targets[:, -1:]], dim=1):
        assert len(set(row.tolist())) <= 65 - 8  # at least 8 tokens occur twice
    ids = data.MaskIds(cls=2, sep=3, mask=4, n_special=5, vocab_size=405)
    e = data.encoder_batch(text, 64, 32, g, ids)
    chosen = e.targets != data.IGNORE
    assert (e.tokens[:, 0] == 2).all() and (e.tokens[:, -1] == 3).all() and not chosen[:, [0, -1]].any()
    assert 0.1 < chosen.float().mean() < 0.2
    assert 0.7 < (e.tokens[chosen] == 4).float().mean() < 0.9


def test_random_stretches_are_said_at_least_twice_from_ordinary_ids(one_thread):
    text = torch.arange(5, 5 + 400)  # every token distinct: a repeat is the only way a token recurs
    g = torch.Generator().manual_seed(1)
    b = data.decoder_batch(text, 32, 64, g, random_share=1.0, random_span=(4, 8), random_ids=(1000, 1100))
    assert b.random_repeats == 32 and b.repeated == 0
    for row in torch.cat([b.tokens, b.targets[:, -1:]], dim=1).tolist():
        drawn = [i for i, t in enumerate(row) if t >= 1000]
        assert all(1000 <= row[i] < 1100 for i in drawn) and min(row) >= 5
        first, last = drawn[0], drawn[-1] + 1
        stretch = row[first:last]  # one run of random tokens, contiguous
        assert drawn == list(range(first, last))
        period = next(p for p in range(4, 9) if stretch[p:] == stretch[:-p])  # it repeats with its period
        assert 2 * period <= len(stretch) <= 65
    none = data.decoder_batch(text, 32, 64, torch.Generator().manual_seed(1), random_share=0.0,
                              random_ids=(1000, 1100))
    assert none.random_repeats == 0 and int(none.tokens.max()) < 405
    with pytest.raises(ValueError, match="at least 2 token ids"):
        data.decoder_batch(text, 2, 64, g, random_share=0.5, random_ids=(7, 8))


def test_a_decoder_only_build_keeps_the_encoder_and_refuses_another_tokenizer(built, tmp_path):
    root, _ = built
    text = root / "corpus.txt"
    out = tmp_path / "out"
    pipeline.build(replace(recipe.QUICK, random_share=0.0), text, out, torch.device("cpu"))
    encoder = out / pipeline.ENCODER_NAME
    first = json.loads((out / pipeline.DECODER_NAME / "glassbox.json").read_text())
    assert "random_windows" not in first["training"]  # a recipe without random windows says nothing of them
    before = {f.name: f.read_bytes() for f in encoder.iterdir()}
    other = replace(recipe.QUICK, seed=5, random_share=0.5)
    result = pipeline.build(other, text, out, torch.device("cpu"), decoder_only=True)
    assert result["models"]["encoder"] is None
    assert {f.name: f.read_bytes() for f in encoder.iterdir()} == before  # the encoder untouched
    manifest = json.loads((out / pipeline.DECODER_NAME / "glassbox.json").read_text())
    assert manifest["recipe"]["seed"] == 5 and manifest["training"]["random_windows"] > 0
    assert "said" in (out / "README.md").read_text()
    with pytest.raises(ValueError, match="differs"):  # another vocabulary size: another tokenizer
        pipeline.build(replace(recipe.QUICK, vocab_size=300), text, out, torch.device("cpu"), decoder_only=True)
    with pytest.raises(ValueError, match="cannot be read"):
        pipeline.build(recipe.QUICK, text, tmp_path / "empty", torch.device("cpu"), decoder_only=True)


def test_an_encoder_only_build_keeps_the_decoder(built, tmp_path):
    root, _ = built
    text = root / "corpus.txt"
    out = tmp_path / "out"
    pipeline.build(recipe.QUICK, text, out, torch.device("cpu"))
    decoder = out / pipeline.DECODER_NAME
    before = {f.name: f.read_bytes() for f in decoder.iterdir()}
    encoder_before = (out / pipeline.ENCODER_NAME / "model.safetensors").read_bytes()
    result = pipeline.build(replace(recipe.QUICK, seed=5), text, out, torch.device("cpu"), encoder_only=True)
    assert result["models"]["decoder"] is None and result["models"]["encoder"] is not None
    assert {f.name: f.read_bytes() for f in decoder.iterdir()} == before  # the decoder untouched
    assert (out / pipeline.ENCODER_NAME / "model.safetensors").read_bytes() != encoder_before
    assert json.loads((out / pipeline.ENCODER_NAME / "glassbox.json").read_text())["recipe"]["seed"] == 5
    assert "built apart" in (out / "README.md").read_text()
    with pytest.raises(ValueError, match="train nothing"):
        pipeline.build(recipe.QUICK, text, out, torch.device("cpu"), encoder_only=True, decoder_only=True)
    with pytest.raises(ValueError, match="--encoder-only keeps the decoder"):
        pipeline.build(recipe.QUICK, text, tmp_path / "empty", torch.device("cpu"), encoder_only=True)


def test_encoder_windows_and_masking_follow_the_recipe(one_thread):
    r = replace(recipe.FULL, encoder_batch=8, encoder_context=512, encoder_window=128, long_share=0.25)
    phases = [training.encoder_windows(r, step, 100) for step in range(100)]
    assert phases[:75] == [(32, 128)] * 75 and phases[75:] == [(8, 512)] * 25
    assert training.encoder_windows(replace(r, encoder_window=0), 0, 100) == (8, 512)
    text = torch.arange(5, 5 + 4000)
    ids = data.MaskIds(cls=2, sep=3, mask=4, n_special=5, vocab_size=4005)
    for share in (0.15, 0.4):
        b = data.encoder_batch(text, 64, 128, torch.Generator().manual_seed(0), ids, mask_share=share)
        chosen = float((b.targets != data.IGNORE).float().mean()) * 128 / 126  # [CLS] and [SEP] are never chosen
        assert abs(chosen - share) < 0.02


def test_decoder_windows_are_short_first_then_whole_with_the_same_tokens_a_step():
    r = replace(recipe.FULL, decoder_batch=4, decoder_context=1024, decoder_window=256, long_share=0.25)
    phases = [training.decoder_windows(r, step, 100) for step in range(100)]
    assert phases[:75] == [(16, 256)] * 75 and phases[75:] == [(4, 1024)] * 25
    assert {b * n for b, n in phases} == {4096}
    assert training.decoder_windows(replace(r, decoder_window=0), 0, 100) == (4, 1024)
    assert training.decoder_windows(replace(r, decoder_window=2048), 0, 100) == (4, 1024)


def test_the_shipped_decoder_has_the_heads_its_manifest_claims(one_thread):
    """Recomputed on the folder as shipped (not read back from it): a previous-token head on both probes and an
    induction head on repeated random tokens, each far above its chance level, and the manifest's numbers."""
    from core.checkpoints import ENGLISH_DIR
    from core.english import heads

    folder = ENGLISH_DIR / pipeline.DECODER_NAME
    model, tok = load_pretrained(folder)
    roles = heads.decoder_roles(model, tok)
    manifest = json.loads((folder / "glassbox.json").read_text())["heads"]
    previous, induction = roles["previous token"], roles["induction"]
    assert previous["found"] and previous["random_tokens"]["score"] >= 3 * previous["random_tokens_chance"]
    assert induction["random_tokens"]["score"] >= max(heads.FOUND, 4 * induction["random_tokens_chance"])
    for role in ("previous token", "induction"):
        for probe in ("random_tokens", "repeated_sentence"):
            assert manifest[role][probe]["layer"] == roles[role][probe]["layer"]
            assert manifest[role][probe]["head"] == roles[role][probe]["head"]
            assert abs(manifest[role][probe]["score"] - roles[role][probe]["score"]) < 1e-3


def test_the_lesson_on_real_sentences_asks_about_the_heads_the_decoder_has():
    """The lesson names its heads by hand; they must be the shipped decoder's found heads, so a rebuild that moves
    them fails here instead of asking students about heads that no longer play those roles."""
    from core.checkpoints import ENGLISH_DIR
    from core.lessons import LESSONS_DIR, load_lesson

    manifest = json.loads((ENGLISH_DIR / pipeline.DECODER_NAME / "glassbox.json").read_text())["heads"]
    lesson = load_lesson(LESSONS_DIR / "heads-on-real-sentences.toml")
    asked = {(c.args["layer"], c.args["head"]) for c in (s.check for s in lesson.steps)
             if c.kind == "most_attended_key" and c.args.get("model") == pipeline.DECODER_NAME}
    found = {role: (manifest[role]["repeated_sentence"]["layer"], manifest[role]["repeated_sentence"]["head"])
             for role in ("previous token", "induction")}
    assert asked == set(found.values()), f"the lesson asks about {sorted(asked)}, the decoder's heads are {found}"
