"""The Generation page's analysis: hook anatomy, the two layer identities, attention shapes, and the
decoding stepper (KV cache == recomputation at every step, cross-attention K and V computed once)."""

from __future__ import annotations

import pytest
import torch

from core import checkpoints
from core.analysis import generation as G
from core.tasks import get_task

pytestmark = pytest.mark.usefixtures("one_thread")

DECODERS = [e["id"] for e in checkpoints.read_manifest() if e["arch"] == "decoder"]
ENCDEC = "reverse-encdec"


def load(model_id):
    model, meta = checkpoints.load_bundled(model_id)
    return model, get_task(meta["task"])


def prompt_for(model_id):
    """A decoder prompt of the model's own task: its example up to and including <sep>, else the first half."""
    model, task = load(model_id)
    tokens = task.example("decoder", seed=2)
    cut = tokens.index("<sep>") + 1 if "<sep>" in tokens else max(1, len(tokens) // 2)
    return model, torch.tensor([task.vocab.encode(tokens[:cut])]), len(tokens) - cut


@pytest.mark.parametrize("model_id", DECODERS)
def test_cached_stepping_equals_recomputation_for_every_bundled_decoder(model_id):
    model, prompt, steps = prompt_for(model_id)
    cached = G.decode_trace(model, prompt, steps, use_cache=True)
    full = G.decode_trace(model, prompt, steps, use_cache=False)
    assert len(cached.steps) == len(full.steps) == steps
    assert (cached.tokens == full.tokens).all()
    for a, b in zip(cached.steps, full.steps):
        assert a.token == b.token
        assert abs(a.logits - b.logits).max() < 1e-4
        assert a.keys.shape == b.keys.shape and abs(a.keys - b.keys).max() < 1e-4  # the cache holds what recomputing gives
        assert abs(a.self_row - b.self_row).max() < 1e-5
    assert (G.max_logit_difference(cached, full) < 1e-4).all()
    # with the cache, each step after the prompt feeds one token and stores one more key per layer
    assert cached.steps[0].fed == prompt.shape[1]
    assert [s.fed for s in cached.steps[1:]] == [1] * (steps - 1)
    assert [s.keys_stored for s in cached.steps] == [prompt.shape[1] + t for t in range(steps)]
    assert [s.fed for s in full.steps] == [prompt.shape[1] + t for t in range(steps)]


def test_cached_stepping_equals_recomputation_for_the_encoder_decoder_and_cross_kv_is_computed_once():
    model, task = load(ENCDEC)
    src = torch.tensor([task.vocab.encode("3 1 4 1 5 9 2 6".split())])  # [1 8], the trained length
    bos = torch.tensor([[task.vocab.bos_id]])
    steps, n_layers = 9, model.cfg.n_layers
    cached = G.decode_trace(model, src, steps, use_cache=True, tgt_prefix=bos)
    full = G.decode_trace(model, src, steps, use_cache=False, tgt_prefix=bos)
    assert (cached.tokens == full.tokens).all()
    assert task.vocab.decode(cached.tokens[1:].tolist()) == "6 2 9 5 1 4 1 3 <eos>".split()
    for a, b in zip(cached.steps, full.steps):
        assert abs(a.logits - b.logits).max() < 1e-4
        assert abs(a.cross_row - b.cross_row).max() < 1e-5
    # counted through the hooks: with the cache, every layer's cross K and V rows once, before step 0
    assert cached.setup_projections["cross k"] == cached.setup_projections["cross v"] == n_layers * src.shape[1]
    assert all(s.projections["cross k"] == s.projections["cross v"] == 0 for s in cached.steps)
    # without it, again at every step
    assert all(s.projections["cross k"] == n_layers * src.shape[1] for s in full.steps)
    assert cached.encoder_runs == full.encoder_runs == 1
    # the cached run projects one query, key and value row per layer per step; recomputation t + 1
    assert all(s.projections["self k"] == n_layers for s in cached.steps)
    assert [s.projections["self k"] for s in full.steps] == [n_layers * (t + 1) for t in range(steps)]
    # attention work per step: linear in t with the cache, quadratic without
    macs_cached = [s.attention_macs for s in cached.steps]
    macs_full = [s.attention_macs for s in full.steps]
    assert macs_cached[0] == macs_full[0] and all(c < f for c, f in zip(macs_cached[1:], macs_full[1:]))
    assert macs_cached == [n_layers * (G.attention_macs(model.cfg, 1, 1, t + 1)
                                       + G.attention_macs(model.cfg, 1, 1, src.shape[1])) for t in range(steps)]


def test_time_per_token_gives_one_positive_time_per_step():
    model, prompt, steps = prompt_for("sort-decoder")
    for use_cache in (True, False):
        times = G.time_per_token(model, prompt, steps, use_cache, repeats=1)
        assert times.shape == (steps,) and (times > 0).all()


def test_an_encoder_cannot_be_stepped():
    model, task = load("agreement-encoder")
    with pytest.raises(ValueError, match="cannot generate"):
        G.decode_trace(model, torch.tensor([[4, 5]]), 2, use_cache=True)


# ---------------------------------------------------------------------------------------------
# Anatomy and identities


def test_families_have_their_own_hooks_and_axis_names():
    model, _ = load(ENCDEC)
    enc = G.family_hooks(model.cfg, "encoder")
    dec = G.family_hooks(model.cfg, "decoder")
    both = G.family_hooks(model.cfg, "encoder-decoder")
    assert not any(h.sublayer == "cross-attention" for h in enc + dec)
    assert {h.stack for h in enc} == {""}
    assert [h.name for h in both if h.stack not in ("encoder", "decoder")] == ["hook_logits"]
    cross = {h.name: h.axes for h in both if h.sublayer == "cross-attention"}
    assert cross["decoder.blocks.0.cross_attn.hook_q"] == ("B", "L_d", "h", "d_h")
    assert cross["decoder.blocks.0.cross_attn.hook_k"] == ("B", "L_e", "h", "d_h")
    assert cross["decoder.blocks.0.cross_attn.hook_pattern"] == ("B", "h", "L_d", "L_e")
    assert [h.name for h in both] == model.hook_names()


def test_anatomy_shapes_match_axis_names():
    model, task = load(ENCDEC)
    src = torch.tensor([task.vocab.encode("3 1 4 1 5".split())])  # L_e = 5
    tgt = torch.tensor([task.vocab.encode("<bos> 5 1".split())])  # L_d = 3
    sizes = {"B": 1, "L_e": 5, "L_d": 3, "h": model.cfg.n_heads, "d_h": model.cfg.d_head,
             "d_model": model.cfg.d_model, "d_mlp": model.cfg.d_mlp, "V": model.cfg.vocab_size, "1": 1}
    hooks = G.anatomy(model, src, tgt)
    assert len(hooks) == len(model.hook_names())
    for h in hooks:
        assert h.shape == tuple(sizes[a] for a in h.axes), h.name


def test_attention_shapes_are_the_real_ones():
    model, task = load(ENCDEC)
    src = torch.tensor([task.vocab.encode("3 1 4 1 5 9 2".split())])
    tgt = torch.tensor([task.vocab.encode("<bos> 2 9".split())])
    real = {h.name: h.shape for h in G.anatomy(model, src, tgt)}
    for kind, block in (("encoder self-attention", "encoder.blocks.0.attn"),
                        ("decoder masked self-attention", "decoder.blocks.0.attn"),
                        ("cross-attention", "decoder.blocks.0.cross_attn")):
        q, k, v, scores, out = G.attention_shapes(model.cfg, kind, 1, 3, 7)
        for blk, hook in ((q, "hook_q"), (k, "hook_k"), (v, "hook_v")):
            b, pos, h, dh = real[f"{block}.{hook}"]
            assert blk.sizes == (b, h, pos, dh)  # the matmuls see heads first
        assert scores.sizes == real[f"{block}.hook_pattern"]


def test_concatenated_heads_through_w_o_equal_the_sum_of_each_head_through_its_slice():
    model, task = load(ENCDEC)
    src = torch.tensor([task.vocab.encode("3 1 4 1 5".split())])
    tgt = torch.tensor([task.vocab.encode("<bos> 5 1 4".split())])
    _, cache = model.run_with_cache(src, ["decoder.blocks.1.cross_attn.hook_z", "decoder.blocks.1.hook_cross_attn_out"],
                                    tgt=tgt)
    z = cache["decoder.blocks.1.cross_attn.hook_z"]
    out = G.heads_concat_vs_sum(model, z, "decoder.", 1, "cross_attn")
    assert out["max_diff"] < 1e-5
    assert torch.allclose(out["concat"], cache["decoder.blocks.1.hook_cross_attn_out"], atol=1e-5)
    assert out["per_head"].shape == (model.cfg.n_heads, *out["concat"].shape)
    # the identity needs each head's own slice: swapping two heads' outputs breaks it
    swapped = z[:, :, [1, 0, *range(2, model.cfg.n_heads)]]
    assert (G.heads_concat_vs_sum(model, swapped, "decoder.", 1, "cross_attn")["concat"] - out["concat"]).abs().max() > 1e-3


def test_the_mlp_acts_on_each_position_alone():
    model, prompt, _ = prompt_for("sort-decoder")
    _, cache = model.run_with_cache(prompt, "blocks.0.ln2.hook_normalized")
    x = cache["blocks.0.ln2.hook_normalized"]
    perm = G.seeded_permutation(x.shape[1], 3)
    assert sorted(perm.tolist()) == list(range(x.shape[1])) and perm.tolist() != list(range(x.shape[1]))
    with torch.no_grad():
        check = G.mlp_permutation_check(model, x, "", 0, perm)
        assert check["max_diff"] < 1e-5
        # the check can fail: an operation that mixes positions (a running sum) is not equivariant
        mixed = torch.cumsum(x, dim=1)
        assert (torch.cumsum(x[:, perm], dim=1) - mixed[:, perm]).abs().max() > 1e-3


def test_seeded_permutation_leaves_the_global_generator_alone():
    torch.manual_seed(0)
    expected = torch.rand(2)
    torch.manual_seed(0)
    assert torch.equal(G.seeded_permutation(9, 1), G.seeded_permutation(9, 1))
    assert torch.equal(torch.rand(2), expected)
