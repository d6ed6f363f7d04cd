"""The bundled checkpoints: present, small, loadable, and as good as the manifest says."""

from __future__ import annotations

import math

import pytest
import torch

from core import checkpoints
from core.tasks import get_task
from core.train import BUNDLE, evaluate, format_width

REQUIRED = {
    "reverse-encdec", "induction-none", "induction-sinusoidal", "induction-learned", "induction-rope",
    "sort-decoder", "agreement-encoder", "future-legality-encoder", "future-legality-decoder",
    "brackets-encoder", "peaks-encoder", "peaks-decoder", "tags-encoder",
}
ENTRIES = checkpoints.read_manifest()
N_SAMPLES = 512


pytestmark = pytest.mark.usefixtures("one_thread")


def test_manifest_lists_every_required_model():
    ids = [e["id"] for e in ENTRIES]
    assert REQUIRED <= set(ids), f"missing {sorted(REQUIRED - set(ids))}"
    assert len(ids) == len(set(ids))
    assert set(ids) == {r.id for r in BUNDLE}  # the recipe table and the manifest agree


def test_a_norm_twin_pair_is_bundled():
    """The gradient page compares a pre-LN and a post-LN model that differ in nothing else."""
    by_id = {e["id"]: e for e in ENTRIES}
    pre, post = by_id["sort-decoder"], by_id["sort-decoder-postln"]
    assert (pre["norm"], post["norm"]) == ("pre", "post")
    _, meta_pre = checkpoints.load_bundled("sort-decoder")
    _, meta_post = checkpoints.load_bundled("sort-decoder-postln")
    cfg_pre, cfg_post = dict(meta_pre["config"]), dict(meta_post["config"])
    assert cfg_pre.pop("norm") == "pre" and cfg_post.pop("norm") == "post"
    assert cfg_pre == cfg_post and meta_pre["seed"] == meta_post["seed"] and meta_pre["steps"] == meta_post["steps"]


def tolerance(accuracy: float) -> float:
    """Two points, or 4 standard errors of a rate over N_SAMPLES examples where that is wider.

    The wider bound only matters near chance (future-legality-decoder): there each example is
    right or wrong as a whole (the unseen rule decides), so 512 examples give ~2.2 points of noise.
    """
    return max(0.02, 4 * math.sqrt(accuracy * (1 - accuracy) / N_SAMPLES))


@pytest.mark.parametrize("entry", ENTRIES, ids=[e["id"] for e in ENTRIES])
def test_bundled_model_reproduces_its_accuracy(entry):
    path = checkpoints.MODELS_DIR / entry["file"]
    assert path.is_file()
    assert path.stat().st_size < 1_000_000
    model, meta = checkpoints.load_bundled(entry["id"])
    assert meta["id"] == entry["id"] and meta["task"] == entry["task"]
    assert model.cfg.arch == entry["arch"] and model.cfg.pos == entry["pos"] and model.cfg.norm == entry["norm"]
    assert meta["vocab"] == get_task(entry["task"]).vocab.tokens
    fresh = evaluate(model, entry["task"], n_samples=N_SAMPLES, seed=meta["seed"] + 1000,
                     length=entry["train_length"])
    assert abs(fresh - entry["accuracy"]) <= tolerance(entry["accuracy"]), (fresh, entry["accuracy"])


@pytest.mark.parametrize("model_id", ["induction-sinusoidal", "induction-learned", "induction-rope"])
def test_induction_models_are_built_for_their_train_length(model_id):
    """max_len is what training needed; a learned table refuses longer inputs, the others extrapolate."""
    model, meta = checkpoints.load_bundled(model_id)
    need = format_width("induction", "decoder", meta["train_length"])
    assert model.cfg.max_len == need
    longer = torch.ones(1, need + 4, dtype=torch.long)
    if model.cfg.pos == "learned":
        with pytest.raises(ValueError, match="learned"):
            model(longer)
    else:
        assert model(longer).shape == (1, need + 4, model.cfg.vocab_size)
