"""tie_vk and hook_k_raw in the model, and the recall measurements: tied outputs stay in the key span,
the hijack hook leaves the shared model alone, and key clipping bounds every key under attack."""

from __future__ import annotations

import pytest
import torch

from core import checkpoints
from core.analysis import recall as AR
from core.config import TransformerConfig
from core.model import Transformer
from core.train import init_model

pytestmark = pytest.mark.usefixtures("one_thread")


def tiny(**overrides) -> Transformer:
    cfg = TransformerConfig(arch="decoder", vocab_size=AR.get_task("recall").vocab.__len__(), d_model=32,
                            n_heads=2, n_layers=2, max_len=16, **overrides)
    return init_model(cfg, seed=3).eval()


def test_tie_vk_is_validated():
    with pytest.raises(ValueError, match="tie_vk"):
        TransformerConfig(tie_vk="yes")
    assert TransformerConfig().tie_vk is False


def test_a_tied_model_has_no_value_projection_and_its_values_are_its_keys():
    model = tiny(tie_vk=True)
    assert not any("W_V" in name for name, _ in model.named_parameters())
    assert sum(p.numel() for p in model.parameters()) < sum(p.numel() for p in tiny().parameters())
    tokens = AR.recall_batch(4, seed=0, length=5).tokens
    _, cache = model.run_with_cache(tokens, names=["*hook_k_raw", "*hook_k", "*hook_v"])
    for layer in range(2):
        assert torch.equal(cache[f"blocks.{layer}.attn.hook_v"], cache[f"blocks.{layer}.attn.hook_k_raw"])
    w = model.head_weights(0)
    assert torch.equal(w["W_V"], w["W_K"])


def test_tie_vk_round_trips_through_a_checkpoint(tmp_path):
    model = tiny(tie_vk=True)
    path = tmp_path / "tied.safetensors"
    checkpoints.save(model, path, {"id": "tied", "task": "recall"})
    loaded, _ = checkpoints.load(path)
    assert loaded.cfg.tie_vk is True
    tokens = AR.recall_batch(3, seed=1, length=5).tokens
    assert torch.equal(loaded(tokens), model(tokens))


def test_hook_k_raw_comes_before_the_clip():
    model = tiny(key_norm_clip=0.01)
    names = model.hook_names()
    assert names.index("blocks.0.attn.hook_k_raw") == names.index("blocks.0.attn.hook_k") - 1
    _, cache = model.run_with_cache(AR.recall_batch(4, seed=0, length=5).tokens, names="*attn.hook_k*")
    assert cache["blocks.0.attn.hook_k_raw"].norm(dim=-1).max() > 0.01 * 1.5  # the raw keys exceed the clip
    assert cache["blocks.0.attn.hook_k"].norm(dim=-1).max() <= 0.01 * (1 + 1e-5)


@pytest.fixture(scope="module")
def bundled():
    return {mid: checkpoints.load_bundled(mid)[0] for mid in
            ("recall-decoder", "recall-tied", "recall-keyclip", "recall-cosine")}


def test_tied_head_outputs_lie_in_the_key_span_and_untied_do_not(bundled):
    tied = AR.key_span_residuals(bundled["recall-tied"], n=32)
    untied = AR.key_span_residuals(bundled["recall-decoder"], n=32)
    assert tied.worst().max() < 1e-5
    assert untied.worst().min() > 0.1  # every head of the untied model writes outside its keys' span


def test_span_residual_is_zero_inside_and_full_outside():
    basis = torch.eye(4)[:2].numpy()  # the first two axes
    inside, outside = AR.span_residual(torch.tensor([[3.0, 4.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0]]).numpy(), basis)
    assert inside.tolist() == pytest.approx([5.0, 0.0]) and outside.tolist() == pytest.approx([0.0, 1.0])


def test_the_hijack_leaves_the_shared_model_unchanged(bundled):
    model = bundled["recall-decoder"]
    before = {k: v.clone() for k, v in model.state_dict().items()}
    batch = AR.recall_batch(16, seed=2, length=5)
    clean = model(batch.tokens)
    AR.hijack_curve(model, 3, [1.0, 100.0], n=16)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert torch.equal(model(batch.tokens), clean)  # no hook left behind


def test_the_hijack_moves_attention_on_the_undefended_model_only(bundled):
    curves = {mid: AR.hijack_curve(bundled[mid], 3, [1.0, 1000.0], n=64)
              for mid in ("recall-decoder", "recall-cosine")}
    plain, cosine = curves["recall-decoder"], curves["recall-cosine"]
    assert plain[1].mass > plain[0].mass + 0.1 and plain[1].accuracy < plain[0].accuracy
    assert cosine[1].mass == pytest.approx(cosine[0].mass, abs=1e-4)  # cosine ignores a key's length


def test_key_clipping_bounds_every_key_under_attack(bundled):
    model = bundled["recall-keyclip"]
    norms = AR.key_norms_under_attack(model, 3, 1000.0)
    assert norms.max() <= model.cfg.key_norm_clip * (1 + 1e-5)
    unclipped = AR.key_norms_under_attack(bundled["recall-decoder"], 3, 1000.0)
    assert unclipped.max() > 100 * model.cfg.key_norm_clip  # the attack is real where nothing clips


def test_the_attack_position_is_checked(bundled):
    with pytest.raises(ValueError, match="position"):
        AR.hijack_curve(bundled["recall-decoder"], 11, [1.0], n=4)
