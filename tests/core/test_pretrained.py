"""core/pretrained.py refuses what it cannot open, before allocating, with a message a student can act on.

Each test breaks one thing in a tiny GPT-2 (or Llama / BERT) folder saved by transformers and checks the
PretrainedError names it: missing files, unknown architectures, shapes, hostile sizes, NaN weights,
truncated files, pickles, tokenizers, links out of the model roots, and random junk in config.json
(never a traceback, never a stall). find_models lists good and broken folders of a models directory
and of a Hugging Face cache without reading outside them.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

import core.pretrained as pretrained
from core.pretrained import (ModelFolder, PretrainedError, describe, find_models, load_pretrained, max_model_bytes,
                             padding_mask, sliding_window_mask, sliding_window_masks)
from tests.core.pretrained_models import save_hf, tiny_hf_model


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """Tiny saved checkpoints, built once: {name: folder}."""
    root = tmp_path_factory.mktemp("saved")
    return {
        "gpt2": save_hf(tiny_hf_model("gpt2"), root / "gpt2"),
        "gpt2-sharded": save_hf(tiny_hf_model("gpt2"), root / "gpt2-sharded", sharded=True),
        "llama": save_hf(tiny_hf_model("llama"), root / "llama"),
        "mistral": save_hf(tiny_hf_model("mistral", sliding_window=8), root / "mistral"),
        "bert": save_hf(tiny_hf_model("bert"), root / "bert"),
        "bert-base": save_hf(tiny_hf_model("bert-base"), root / "bert-base"),
        "roformer": save_hf(tiny_hf_model("roformer"), root / "roformer"),
        "roformer-base": save_hf(tiny_hf_model("roformer-base"), root / "roformer-base"),
    }


@pytest.fixture
def copy(saved, tmp_path):
    """copy(name) -> a fresh copy of a saved folder that a test may break."""
    def make(name: str) -> Path:
        return Path(shutil.copytree(saved[name], tmp_path / name))
    return make


@pytest.fixture(autouse=True)
def memory_limit(monkeypatch):
    """A fixed limit, so no test depends on this machine's memory."""
    monkeypatch.setenv("GLASSBOX_MAX_MODEL_GB", "4")


def refusal(folder, *parts: str) -> str:
    """load_pretrained's message for a folder it must refuse; every part must appear in it."""
    with pytest.raises(PretrainedError) as info:
        load_pretrained(folder)
    message = str(info.value)
    for part in parts:
        assert part in message, f"{part!r} not in {message!r}"
    return message


def edit_config(folder: Path, **changes) -> None:
    path = folder / "config.json"
    config = json.loads(path.read_text())
    config.update(changes)
    path.write_text(json.dumps(config))


def edit_tensors(folder: Path, change) -> None:
    """Rewrite model.safetensors with change(tensors) applied."""
    path = folder / "model.safetensors"
    tensors = load_file(path)
    change(tensors)
    save_file(tensors, path, metadata={"format": "pt"})


def forbid_reading_weights(monkeypatch) -> None:
    """Make any safetensors access fail the test: a refusal must come from config.json alone."""
    def fail(*args, **kwargs):
        raise AssertionError("safetensors was opened; the refusal should come from config.json alone")
    monkeypatch.setattr(pretrained, "safe_open", fail)


# -- what a good folder gives ------------------------------------------------------------------


def test_describe_agrees_with_the_loaded_model(saved):
    info = describe(saved["gpt2"])
    assert info.problem is None
    assert (info.family, info.architecture, info.context, info.dtype) == ("gpt2", "GPT2LMHeadModel", 64, "float32")
    model, _ = load_pretrained(saved["gpt2"])
    unique = {id(p): p.numel() for p in model.parameters()}  # the tied matrix once
    assert info.parameters == sum(unique.values())


def test_load_accepts_a_model_folder_and_a_dtype(saved):
    info = describe(saved["gpt2"])
    model32, tok = load_pretrained(info)
    model16, _ = load_pretrained(saved["gpt2"], dtype=torch.bfloat16)
    assert {p.dtype for p in model16.parameters()} == {torch.bfloat16}
    tokens = torch.tensor([tok.encode("the cat sat")])
    assert torch.allclose(model16(tokens).float(), model32(tokens), atol=0.1)
    with pytest.raises(PretrainedError, match="dtype"):
        load_pretrained(saved["gpt2"], dtype=torch.int8)


def test_sliding_window_is_noted_and_given_as_masks(saved):
    info = describe(saved["mistral"])
    assert info.sliding_window == 8 and info.sliding_layers == (0, 1)
    assert any("sliding window of 8" in note for note in info.notes)
    assert sliding_window_masks(info, 8) is None  # fits the window: the causal mask is exact
    masks = sliding_window_masks(info, 12)
    assert set(masks) == {0, 1} and masks[0].shape == (12, 12)
    assert describe(saved["llama"]).sliding_window is None


def test_sliding_window_mask_is_a_causal_band():
    mask = sliding_window_mask(6, 3)
    for q in range(6):
        assert mask[q].nonzero().flatten().tolist() == list(range(max(0, q - 2), q + 1))


def test_padding_mask_hides_padded_keys_only():
    attention = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])
    mask = padding_mask(attention)
    assert mask.shape == (2, 1, 4, 4) and mask.dtype == torch.bool
    assert mask[0].all() and mask[1, 0, :, :2].all() and not mask[1, 0, :, 2:].any()
    causal = padding_mask(attention, causal=True)
    assert torch.equal(causal[0, 0], torch.ones(4, 4, dtype=torch.bool).tril())


# -- refusals, each before any weight is allocated ----------------------------------------------


def test_missing_config_json(copy):
    folder = copy("gpt2")
    (folder / "config.json").unlink()
    refusal(folder, "no config.json")
    refusal(folder / "nowhere", "not a folder")


def test_unknown_architecture_lists_the_supported_ones(copy):
    folder = copy("gpt2")
    edit_config(folder, architectures=["T5ForConditionalGeneration"], model_type="t5")
    message = refusal(folder, "T5ForConditionalGeneration")
    assert all(arch in message for arch in pretrained.SUPPORTED)


def test_config_that_is_not_a_json_object(copy):
    folder = copy("gpt2")
    (folder / "config.json").write_text("{ not json")
    refusal(folder, "config.json", "not valid JSON")
    (folder / "config.json").write_text("[1, 2]")
    refusal(folder, "JSON object")


def test_missing_shard_named_by_the_index(copy):
    folder = copy("gpt2-sharded")
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    shard = sorted(set(index["weight_map"].values()))[1]
    (folder / shard).unlink()
    refusal(folder, shard, "missing")


def test_index_naming_a_file_outside_the_folder(copy):
    folder = copy("gpt2-sharded")
    path = folder / "model.safetensors.index.json"
    index = json.loads(path.read_text())
    key = next(iter(index["weight_map"]))
    index["weight_map"][key] = "../elsewhere.safetensors"
    path.write_text(json.dumps(index))
    refusal(folder, "inside the model folder")


def test_tensor_with_the_wrong_shape(copy):
    folder = copy("gpt2")
    edit_tensors(folder, lambda t: t.update({"transformer.wpe.weight": t["transformer.wpe.weight"][:-1]}))
    refusal(folder, "transformer.wpe.weight", "shape [63, 32]", "[64, 32]")


@pytest.mark.parametrize("change", [{"n_layer": 10 ** 9}, {"n_embd": 2 ** 40, "n_head": 1}, {"vocab_size": 2 ** 40},
                                    {"n_positions": 10 ** 12}, {"n_inner": 10 ** 15}],
                         ids=["layers", "width", "vocab", "positions", "mlp"])
def test_hostile_sizes_are_refused_from_config_json_alone(copy, monkeypatch, change):
    folder = copy("gpt2")
    edit_config(folder, **change)
    forbid_reading_weights(monkeypatch)
    refusal(folder, "parameters", "GLASSBOX_MAX_MODEL_GB", "4.0 GB")
    assert "GLASSBOX_MAX_MODEL_GB" in describe(folder).problem


def test_hostile_sizes_are_refused_for_every_family(copy, monkeypatch):
    forbid_reading_weights(monkeypatch)
    for name in ("llama", "mistral"):  # Mistral lists its sliding-window layers: not a billion of them
        folder = copy(name)
        edit_config(folder, num_hidden_layers=10 ** 9)
        refusal(folder, "GLASSBOX_MAX_MODEL_GB")
    bert = copy("bert-base")
    edit_config(bert, hidden_size=2 ** 40, num_attention_heads=1)
    refusal(bert, "GLASSBOX_MAX_MODEL_GB")


def test_too_many_layers_even_when_they_would_fit(copy, monkeypatch):
    """A million one-wide layers fit a generous memory limit; the loop over them must still not start."""
    monkeypatch.setenv("GLASSBOX_MAX_MODEL_GB", "1000000")
    forbid_reading_weights(monkeypatch)
    folder = copy("gpt2")
    edit_config(folder, n_layer=10 ** 6, n_embd=4, n_head=1)
    refusal(folder, "1,000,000 layers")


def test_memory_limit_defaults_to_half_the_machine(monkeypatch):
    monkeypatch.delenv("GLASSBOX_MAX_MODEL_GB")
    assert max_model_bytes() == os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2
    monkeypatch.setenv("GLASSBOX_MAX_MODEL_GB", "0.5")
    assert max_model_bytes() == 500_000_000
    for bad in ("lots", "-1", "nan", "inf"):
        monkeypatch.setenv("GLASSBOX_MAX_MODEL_GB", bad)
        with pytest.raises(PretrainedError, match="GLASSBOX_MAX_MODEL_GB"):
            max_model_bytes()


def test_a_model_over_a_small_limit(saved, monkeypatch):
    monkeypatch.setenv("GLASSBOX_MAX_MODEL_GB", "0.00001")  # 10 KB: the tiny GPT-2 needs ~150 KB
    refusal(saved["gpt2"], "GLASSBOX_MAX_MODEL_GB")


def test_nan_weights(copy):
    folder = copy("gpt2")
    def poison(tensors):
        tensors["transformer.h.1.mlp.c_fc.weight"][3, 5] = float("nan")
    edit_tensors(folder, poison)
    refusal(folder, "transformer.h.1.mlp.c_fc.weight", "NaN")


def test_big_matrices_read_in_blocks_give_the_same_model_and_still_catch_nan(saved, copy, monkeypatch):
    """Matrices over CHUNK_BYTES are read a block of rows at a time (GPT-2's Conv1D ones transposed on the way):
    the same weights as a whole read, and a NaN in a late block is still refused."""
    whole, _ = load_pretrained(saved["gpt2"])
    monkeypatch.setattr(pretrained, "CHUNK_BYTES", 256)  # every matrix of the tiny model now goes in blocks
    blocks, _ = load_pretrained(saved["gpt2"])
    for (name, a), (_, b) in zip(whole.state_dict().items(), blocks.state_dict().items()):
        assert torch.equal(a, b), name
    folder = copy("gpt2")

    def poison(tensors):
        tensors["transformer.h.1.mlp.c_fc.weight"][-1, -1] = float("nan")  # the last row: the last block

    edit_tensors(folder, poison)
    refusal(folder, "transformer.h.1.mlp.c_fc.weight", "NaN")


def test_truncated_safetensors(copy):
    folder = copy("gpt2")
    path = folder / "model.safetensors"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    refusal(folder, "model.safetensors", "truncated")
    path.write_bytes(b"\x10")
    refusal(folder, "model.safetensors", "not a readable .safetensors")


def test_pickle_only_folder(copy):
    folder = copy("gpt2")
    (folder / "model.safetensors").unlink()
    (folder / "pytorch_model.bin").write_bytes(b"\x80\x02}q\x00.")  # never unpickled: refused by its name
    refusal(folder, "pytorch_model.bin", "pickle", ".safetensors", "save_pretrained")
    (folder / "pytorch_model.bin").unlink()
    refusal(folder, "no weights", "model.safetensors")


def test_no_tokenizer_files(copy):
    folder = copy("gpt2")
    (folder / "tokenizer.json").unlink()
    refusal(folder, "no tokenizer files", "tokenizer.json", "vocab.json + merges.txt", "vocab.txt")
    info = describe(folder)
    assert "no tokenizer files" in info.problem and info.parameters > 0  # the weights were fine
    (folder / "tokenizer.model").write_bytes(b"sentencepiece")
    refusal(folder, "tokenizer.model", "AutoTokenizer")


def test_bert_model_without_the_masked_lm_head(saved):
    refusal(saved["bert-base"], "no masked-LM head", "BertForMaskedLM")
    refusal(saved["roformer-base"], "no masked-LM head", "RoFormerForMaskedLM")


def test_roformer_opens_as_an_encoder_with_rope_on_pairs(saved):
    info = describe(saved["roformer"])
    assert (info.family, info.architecture, info.problem) == ("roformer", "RoFormerForMaskedLM", None)
    model, tokenizer = load_pretrained(saved["roformer"])
    cfg = model.cfg
    assert (cfg.arch, cfg.pos, cfg.rope_layout, cfg.rope_base, cfg.norm) == ("encoder", "rope", "pairs", 10000.0, "post")
    assert not hasattr(model.stack, "W_pos")  # no position table: RoFormer's sin/cos buffer is not read
    assert tokenizer.encode("the cat")[0] == tokenizer.cls_id and tokenizer.mask_id is not None


@pytest.mark.parametrize("change, named", [({"rotary_value": True}, "rotary_value"),
                                           ({"embedding_size": 16}, "embeddings_project")])
def test_roformer_variants_glassbox_does_not_implement_are_named(copy, change, named):
    folder = copy("roformer")
    edit_config(folder, **change)
    refusal(folder, named)


def test_unknown_tensor(copy):
    folder = copy("gpt2")
    edit_tensors(folder, lambda t: t.update({"transformer.h.0.attn.extra.weight": torch.zeros(2)}))
    refusal(folder, "does not know", "transformer.h.0.attn.extra.weight")


def test_known_spare_tensors_are_skipped(copy):
    """Old GPT-2 files keep the causal mask as h.{i}.attn.bias, and may store a copy of the tied lm_head."""
    folder = copy("gpt2")
    def add(tensors):
        tensors["transformer.h.0.attn.bias"] = torch.ones(1, 1, 64, 64).tril()
        tensors["lm_head.weight"] = tensors["transformer.wte.weight"].clone()
    edit_tensors(folder, add)
    load_pretrained(folder)


def test_bert_pretraining_extras_are_skipped(copy):
    """bert-base-uncased as published also holds the pooler, the next-sentence head and position ids."""
    folder = copy("bert")
    def add(tensors):
        tensors["bert.pooler.dense.weight"] = torch.zeros(32, 32)
        tensors["bert.pooler.dense.bias"] = torch.zeros(32)
        tensors["cls.seq_relationship.weight"] = torch.zeros(2, 32)
        tensors["cls.seq_relationship.bias"] = torch.zeros(2)
        tensors["bert.embeddings.position_ids"] = torch.arange(64)[None]
    edit_tensors(folder, add)
    edit_config(folder, architectures=["BertForPreTraining"])
    assert describe(folder).problem is None
    load_pretrained(folder)


def test_index_that_disagrees_with_its_shards(copy):
    folder = copy("gpt2-sharded")
    path = folder / "model.safetensors.index.json"
    index = json.loads(path.read_text())
    first, second = sorted(set(index["weight_map"].values()))[:2]
    key = next(k for k, shard in index["weight_map"].items() if shard == first)
    index["weight_map"][key] = second
    path.write_text(json.dumps(index))
    refusal(folder, key, second, "do not belong together")


def test_missing_tensor(copy):
    folder = copy("gpt2")
    edit_tensors(folder, lambda t: t.pop("transformer.h.1.ln_2.bias"))
    refusal(folder, "transformer.h.1.ln_2.bias", "incomplete")


def test_unsupported_stored_dtype(copy):
    folder = copy("gpt2")
    edit_tensors(folder, lambda t: t.update({"transformer.ln_f.bias": torch.zeros(32, dtype=torch.int8)}))
    refusal(folder, "transformer.ln_f.bias", "I8")


@pytest.mark.parametrize("rope, named", [({"rope_type": "llama3", "factor": 8.0, "rope_theta": 5e5}, "llama3"),
                                         ({"type": "linear", "factor": 2.0}, "linear")])
def test_rope_scaling_is_refused_by_name(copy, rope, named):
    folder = copy("llama")
    edit_config(folder, rope_parameters=None, rope_scaling=rope)
    refusal(folder, f"RoPE scaling {named!r}")


def test_unsupported_variants_are_named(copy):
    folder = copy("gpt2")
    edit_config(folder, scale_attn_by_inverse_layer_idx=True)
    refusal(folder, "scale_attn_by_inverse_layer_idx")
    folder = copy("llama")
    edit_config(folder, hidden_act="gelu_pytorch_tanh_quick")
    refusal(folder, "hidden_act", "silu")


def test_fifo_config_does_not_stall(copy):
    """Reading a pipe blocks until someone writes; a config.json that is one is refused without reading."""
    folder = copy("gpt2")
    (folder / "config.json").unlink()
    os.mkfifo(folder / "config.json")
    refusal(folder, "config.json")
    assert describe(folder).problem


JUNK = ["text", -3, 0, 2.5, None, [], {}, True, 10 ** 30, 10 ** 400, float("nan"), float("inf")]


@pytest.mark.parametrize("name", ["gpt2", "bert", "roformer", "mistral"])
def test_junk_in_any_config_field_is_a_message_not_a_traceback(saved, tmp_path, name):
    config = json.loads((saved[name] / "config.json").read_text())
    folder = Path(shutil.copytree(saved[name], tmp_path / name))
    for key in config:
        for junk in JUNK:
            (folder / "config.json").write_text(json.dumps({**config, key: junk}))
            try:
                load_pretrained(folder)
                loaded = True
            except PretrainedError as exc:
                assert str(exc) and "Traceback" not in str(exc)
                loaded = False
            info = describe(folder)
            assert isinstance(info, ModelFolder)
            assert (info.problem is None) == loaded, (key, junk, info.problem)  # the listing tells the truth


# -- find_models ------------------------------------------------------------------------------


def test_find_models_in_a_models_directory(saved, tmp_path, monkeypatch):
    models = tmp_path / "models"
    shutil.copytree(saved["gpt2"], models / "good")
    broken = Path(shutil.copytree(saved["gpt2"], models / "broken"))
    (broken / "model.safetensors").unlink()
    (models / "not-a-model").mkdir()
    (models / "stray.txt").write_text("hello")
    monkeypatch.setenv("GLASSBOX_MODELS_DIR", str(models))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "no-cache"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    found = {m.name: m for m in find_models()}
    assert set(found) == {"good", "broken"}
    assert found["good"].problem is None and found["good"].parameters > 0 and found["good"].family == "gpt2"
    assert "no weights" in found["broken"].problem and found["broken"].architecture == "GPT2LMHeadModel"


def hf_cache(tmp_path: Path, source: Path) -> Path:
    """A Hugging Face cache holding `source` as models--tiny-org--tiny-gpt2, files linked to blobs."""
    hub = tmp_path / "hf" / "hub"
    repo = hub / "models--tiny-org--tiny-gpt2"
    snapshot = repo / "snapshots" / "0123456789abcdef"
    (repo / "blobs").mkdir(parents=True)
    snapshot.mkdir(parents=True)
    for i, file in enumerate(sorted(source.iterdir())):
        blob = repo / "blobs" / f"blob{i}"
        shutil.copy(file, blob)
        (snapshot / file.name).symlink_to(Path("../../blobs") / blob.name)
    return hub


def test_find_models_in_the_hugging_face_cache(saved, tmp_path, monkeypatch):
    hub = hf_cache(tmp_path, saved["gpt2"])
    monkeypatch.delenv("GLASSBOX_MODELS_DIR", raising=False)
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(hub.parent))
    [info] = find_models()
    assert info.name == "tiny-org/tiny-gpt2" and info.problem is None and info.family == "gpt2"
    model, tokenizer = load_pretrained(info)
    assert model(torch.tensor([tokenizer.encode("hello")])).shape[-1] == 320


def test_find_models_never_opens_files_outside_its_roots(saved, tmp_path, monkeypatch):
    outside = Path(shutil.copytree(saved["gpt2"], tmp_path / "outside"))
    models = tmp_path / "models"
    leaky = models / "leaky"
    leaky.mkdir(parents=True)
    for file in outside.iterdir():  # every file a link out of the root
        (leaky / file.name).symlink_to(file)
    (models / "linked-folder").symlink_to(outside, target_is_directory=True)
    shutil.copytree(saved["gpt2"], models / "good")
    hub = hf_cache(tmp_path, saved["gpt2"])
    opened = []
    real_read_text, real_safe_open = Path.read_text, pretrained.safe_open
    def read_text(self, *args, **kwargs):
        opened.append(self.resolve())
        return real_read_text(self, *args, **kwargs)
    def safe_open(path, *args, **kwargs):
        opened.append(Path(path).resolve())
        return real_safe_open(path, *args, **kwargs)
    monkeypatch.setattr(Path, "read_text", read_text)
    monkeypatch.setattr(pretrained, "safe_open", safe_open)
    found = {m.name: m for m in find_models([models, hub])}
    roots = (models.resolve(), hub.resolve())
    assert opened and all(any(path.is_relative_to(root) for root in roots) for path in opened)
    assert found["good"].problem is None and found["tiny-org/tiny-gpt2"].problem is None
    assert "outside" in found["leaky"].problem and "outside" in found["linked-folder"].problem


def test_find_models_with_nothing_there(tmp_path):
    assert find_models([tmp_path / "missing", tmp_path]) == []
