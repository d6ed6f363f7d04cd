"""The Train page's core: clamped settings, attention snapshots, head spread, upload checks, figures."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest
from safetensors.torch import save as st_save

from core import checkpoints
from core.analysis import train as A
from core.figures import train as F
from core.tasks import get_task


def test_clamp_settings_brings_everything_into_range_and_says_so():
    s, notes = A.clamp_settings({"task": "reverse", "arch": "encoder", "steps": 99999, "n_layers": -3,
                                 "d_model": "wide", "lr": float("nan"), "pos": "alibi", "seed": 12.6})
    assert s.steps == A.MAX_STEPS and s.n_layers == 1 and s.d_model == 64 and s.lr == A.TrainSettings().lr
    assert s.pos == "sinusoidal" and s.seed == 13
    text = " ".join(notes)
    for word in ("99999", "layers", "wide", "alibi", "learning rate"):
        assert word in text
    s, notes = A.clamp_settings({"task": "induction", "arch": "encoder"})
    assert s.arch == "decoder" and "induction" in notes[0]
    assert A.clamp_settings(A.TrainSettings(task="copy", arch="decoder").to_dict()) == (
        A.TrainSettings(task="copy", arch="decoder"), [])


def test_problems_name_the_fix():
    assert A.TrainSettings(task="reverse", arch="encoder").problems() == []
    (msg,) = A.TrainSettings(task="reverse", arch="encoder", d_model=60, n_heads=8).problems()
    assert "60" in msg and "8" in msg and "56 or 64" in msg
    (msg,) = A.TrainSettings(task="reverse", arch="encoder", d_model=24, n_heads=8, pos="rope").problems()
    assert "even" in msg and "3" in msg
    (msg,) = A.TrainSettings(task="agreement", arch="decoder").problems()
    assert "encoder" in msg


def test_param_count_counts_every_weight_of_the_model():
    settings = A.TrainSettings(task="reverse", arch="encoder", n_layers=1, d_model=16, n_heads=2)
    n = A.param_count(settings.config())
    assert n == sum(p.numel() for p in settings.trainer().model.parameters())
    wider = A.param_count(A.TrainSettings(task="reverse", arch="encoder", n_layers=1, d_model=32, n_heads=2).config())
    deeper = A.param_count(A.TrainSettings(task="reverse", arch="encoder", n_layers=2, d_model=16, n_heads=2).config())
    assert wider > n and n < deeper < 2 * n  # a second block adds its weights, not the embeddings again


def test_snapshots_cover_every_attention_kind_and_stay_few():
    s = A.TrainSettings(task="reverse", arch="encoder-decoder", n_layers=2, d_model=16, n_heads=2, steps=10)
    trainer = s.trainer()
    ex = A.fixed_example(s.task, s.arch)
    assert ex.tgt_tokens[0] == "<bos>" and ex.tgt_tokens[1:] == ex.tokens[::-1]
    trainer.model.train()
    snap = A.attention_snapshot(trainer.model, ex)
    assert trainer.model.training  # the snapshot puts back the mode it found
    n, m = len(ex.tokens), len(ex.tgt_tokens)
    assert snap["enc"].shape == (2, 2, n, n) and snap["dec"].shape == (2, 2, m, m)
    assert snap["cross"].shape == (2, 2, m, n)
    np.testing.assert_allclose(snap["cross"].astype(np.float32).sum(-1), 1.0, atol=1e-2)
    for total in (10, 39, 40, 1000, 3000):
        every = A.snapshot_every(total)
        assert len(range(0, total + 1, every)) + 1 <= A.MAX_SNAPSHOTS + 1


def test_spread_is_one_for_uniform_and_zero_for_one_key():
    n = 6
    uniform_causal = np.tril(np.ones((n, n))) / np.arange(1, n + 1)[:, None]  # [q k]
    one_key = np.eye(n)
    pats = np.stack([uniform_causal, one_key])[None]  # [layer=1 head=2 q k]
    spread = A.normalised_entropy(pats, causal=True)
    np.testing.assert_allclose(spread, [[1.0, 0.0]], atol=1e-9)
    full = np.full((1, 1, n, n), 1 / n)
    np.testing.assert_allclose(A.normalised_entropy(full, causal=False), [[1.0]])


def _checkpoint(meta_overrides=None, config_overrides=None) -> bytes:
    s = A.TrainSettings(task="copy", arch="decoder", n_layers=1, d_model=16, n_heads=2, steps=10)
    model = s.trainer().model
    meta = {"task": "copy", "vocab": list(get_task("copy").vocab.tokens), **(meta_overrides or {})}
    data = checkpoints.to_bytes(model, meta)
    if config_overrides is None:
        return data
    cfg = dict(model.cfg.to_dict(), **config_overrides)
    tensors = {k: v.contiguous() for k, v in model.state_dict().items()}
    return st_save(tensors, metadata={checkpoints.META_KEY: json.dumps({**meta, "config": cfg})})


def test_read_checkpoint_accepts_ours_and_refuses_the_rest():
    model, meta = A.read_checkpoint("mine.safetensors", _checkpoint())
    assert meta["title"].startswith("Uploaded") and model.cfg.d_model == 16
    bad = [
        ("x.pt", b"anything", "pickle"),
        ("x.safetensors", pickle.dumps({"a": 1}), "pickle"),
        ("x.safetensors", b"", "empty"),
        ("x.safetensors", b"\x00" * 40, "readable"),
        ("x.safetensors", _checkpoint({"task": "chess"}), "chess"),
        ("x.safetensors", _checkpoint({"vocab": ["a", "b"]}), "vocabulary"),
        ("x.safetensors", _checkpoint(config_overrides={"d_model": 200_000, "n_heads": 1}), "outside what Glassbox opens"),
        ("x.safetensors", b"\x00" * (checkpoints.MAX_UPLOAD_BYTES + 1), "limit"),
    ]
    for name, data, words in bad:
        with pytest.raises(ValueError, match=words):
            A.read_checkpoint(name, data)


def test_figures():
    steps = np.arange(1, 101)
    loss = np.linspace(3, 0.1, 100)
    fig = F.training_curves(steps, loss, np.linspace(0, 1, 100), total=300, final_accuracy=0.9)
    names = [t.name for t in fig.data]
    assert names[0] == "loss (each step)" and any("90.0%" in n for n in names)
    assert list(fig.layout.xaxis.range) == [0, 300] and fig.layout.yaxis.type == "log"
    np.testing.assert_allclose(F.moving_average([1, 2, 3, 4], 2), [1, 1.5, 2.5, 3.5])
    spread = F.entropy_curves([0, 10, 20], np.array([[1.0, 0.9], [0.5, 0.8], [0.1, 0.7]]), current=10)
    assert len(spread.data) == 2
    with pytest.raises(ValueError):
        F.entropy_curves([0, 10], np.zeros((3, 2)))
    pats = np.random.default_rng(0).random((3, 4, 5))
    heads = F.heads_figure(pats, list("abcd"), list("vwxyz"), "step 7", per_row=2)
    assert len(heads.data) == 3 and [a.text for a in heads.layout.annotations] == ["head 0", "head 1", "head 2"]
    assert heads.layout.coloraxis.cmin == 0 and heads.layout.coloraxis.cmax == 1
    np.testing.assert_allclose(np.asarray(heads.data[2].z), pats[2], atol=1e-6)
    assert list(heads.data[0].y) == ["0:a", "1:b", "2:c", "3:d"] and list(heads.data[0].x)[-1] == "4:z"


def test_head_mi_figure_puts_before_and_after_side_by_side_on_one_colour_range():
    before = np.array([[[0, 2.0], [2.0, 0]], [[0, 0.5], [0.5, 0]]])
    after = np.array([[[0, 0.25], [0.25, 0]], [[0, 3.0], [3.0, 0]]])
    fig = F.head_mi_figure(before, after, (0, 300))
    assert len(fig.data) == 4  # 2 layers x (before, after)
    z = [np.asarray(t.z, dtype=float) for t in fig.data]
    assert np.isnan(np.diagonal(z[0])).all() and z[0][0, 1] == 2.0 and z[1][0, 1] == 0.25 and z[3][1, 0] == 3.0
    assert fig.layout.coloraxis.cmin == 0 and fig.layout.coloraxis.cmax == 3.0
    assert "before (step 0)" in fig.layout.annotations[0].text and "after (step 300)" in fig.layout.annotations[1].text
    assert "nats" in fig.data[0].hovertemplate and fig.layout.xaxis.title.text == "head"
    with pytest.raises(ValueError, match="layer head head"):
        F.head_mi_figure(before, after[:1], (0, 1))


def test_parameter_counts_at_the_original_sizes_come_from_a_skeleton_without_memory():
    from core.analysis.train import at_original_size, param_count
    from core.config import TransformerConfig
    from core.train import init_model

    small = TransformerConfig(arch="encoder-decoder", vocab_size=14, d_model=16, n_heads=2, n_layers=1, max_len=16)
    assert param_count(small) == sum(p.numel() for p in init_model(small, seed=0).parameters())
    big = at_original_size(small)
    assert (big.n_layers, big.d_model, big.n_heads, big.d_head, big.d_mlp) == (6, 512, 8, 64, 2048)
    assert (big.arch, big.pos, big.norm) == (small.arch, small.pos, small.norm)  # the same design
    per_encoder_layer = 4 * 512 * 512 + 2 * 512 * 2048  # W_Q, W_K, W_V, W_O and the MLP's two matrices
    assert param_count(big) > 6 * per_encoder_layer + 6 * (per_encoder_layer + 4 * 512 * 512)
    assert at_original_size(small, "bert-base").d_model == 768
