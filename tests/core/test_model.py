"""The model and its hook contract: shapes, invariants, per-call options, threads, gradients, caching."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import torch

from core import masks
from core.hooks import HookPoint
from core.model import Transformer, TransformerConfig

SNAPSHOTS = Path(__file__).parent / "snapshots"


def make(arch="decoder", pos="sinusoidal", seed=0, dtype=torch.float32, **kw) -> Transformer:
    torch.manual_seed(seed)
    cfg = TransformerConfig(arch=arch, pos=pos, vocab_size=kw.pop("vocab_size", 17), d_model=kw.pop("d_model", 32),
                            n_heads=kw.pop("n_heads", 4), n_layers=kw.pop("n_layers", 2), max_len=kw.pop("max_len", 24), **kw)
    model = Transformer(cfg).to(dtype).eval()
    # Larger weights than the training init so attention patterns are far from uniform.
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.mul_(15)
    return model


def tokens(batch=2, n=9, vocab=17, seed=1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (batch, n), generator=g)


def call(model, toks, **kw):
    if model.is_encoder_decoder:
        return model.run_with_cache(toks, tgt=toks[:, :6], **kw)
    return model.run_with_cache(toks, **kw)


# -- hook names ---------------------------------------------------------------------------------


@pytest.mark.parametrize("arch,pos,norm", [("decoder", "sinusoidal", "pre"), ("encoder", "learned", "pre"),
                                           ("encoder-decoder", "sinusoidal", "pre"), ("decoder", "rope", "pre"),
                                           ("encoder-decoder", "sinusoidal", "post")])
def test_hook_names_snapshot(arch, pos, norm):
    names = make(arch, pos, norm=norm).hook_names()
    snap = SNAPSHOTS / f"hook_names_{arch}_{pos}{'' if norm == 'pre' else '_' + norm}.txt"
    assert snap.read_text().split() == names
    assert len(set(names)) == len(names)


@pytest.mark.parametrize("norm", ["pre", "post", "none"])
@pytest.mark.parametrize("arch", ["decoder", "encoder", "encoder-decoder"])
@pytest.mark.parametrize("pos", ["sinusoidal", "rope"])
def test_hook_names_are_in_the_order_a_forward_calls_them(arch, norm, pos):
    model = make(arch, pos, norm=norm, n_layers=3)
    fired = []

    def record(tensor, hook):
        fired.append(hook.name)  # returns None: the tensor goes on unchanged

    x = tokens()
    kw = {"tgt": x[:, :6]} if arch == "encoder-decoder" else {}
    model.run_with_hooks(x, fwd=[("*", record)], **kw)  # every name touched, so the explicit path runs
    assert fired == model.hook_names()
    registered = {m.name for m in model.modules() if isinstance(m, HookPoint)}
    rope_only = {n for n in registered if n.endswith(("hook_rot_q", "hook_rot_k"))}
    assert set(fired) == (registered if pos == "rope" else registered - rope_only)
    if norm == "post":  # a post-LN sublayer normalises after its output, so the old module order was wrong
        first = "decoder.blocks.0." if arch == "encoder-decoder" else "blocks.0."
        assert fired.index(first + "hook_attn_out") < fired.index(first + "ln1.hook_normalized") \
            < fired.index(first + "hook_resid_mid")


def test_hook_names_follow_transformerlens_and_every_hook_fires():
    model = make("decoder", "rope")
    names = model.hook_names()
    for expected in ["hook_embed", "hook_pos_embed", "blocks.0.hook_resid_pre", "blocks.1.attn.hook_rot_k",
                     "blocks.0.attn.hook_attn_scores", "blocks.1.mlp.hook_post", "ln_final.hook_normalized",
                     "hook_logits"]:
        assert expected in names
    _, cache = model.run_with_cache(tokens())
    assert set(cache) == set(names)
    assert cache["blocks.0.attn.hook_q"].shape == (2, 9, 4, 8)  # [batch pos head d_head]
    assert cache["blocks.0.attn.hook_pattern"].shape == (2, 4, 9, 9)  # [batch head q k]
    assert cache["hook_logits"].shape == (2, 9, 17)


def test_encoder_decoder_names_are_prefixed_and_cross_attention_shapes():
    model = make("encoder-decoder")
    names = model.hook_names()
    assert "encoder.blocks.0.attn.hook_pattern" in names
    assert "decoder.blocks.1.cross_attn.hook_pattern" in names
    assert "decoder.blocks.0.hook_resid_mid_cross" in names
    assert not any(n.startswith("blocks.") for n in names)
    src = tokens(n=9)
    _, cache = model.run_with_cache(src, tgt=src[:, :5], names="*cross_attn.hook_pattern")
    assert cache["decoder.blocks.0.cross_attn.hook_pattern"].shape == (2, 4, 5, 9)  # [batch head tgt src]


def test_name_filters_glob_list_predicate_and_no_match():
    model = make()
    _, c1 = model.run_with_cache(tokens(), names="*hook_pattern")
    assert sorted(c1) == ["blocks.0.attn.hook_pattern", "blocks.1.attn.hook_pattern"]
    _, c2 = model.run_with_cache(tokens(), names=["hook_embed", "blocks.1.hook_resid_post"])
    assert sorted(c2) == ["blocks.1.hook_resid_post", "hook_embed"]
    _, c3 = model.run_with_cache(tokens(), names=lambda n: n.endswith("hook_z"))
    assert len(c3) == 2
    with pytest.raises(ValueError, match="no hook point matches"):
        model.run_with_cache(tokens(), names="blocks.*.attn.hook_nothing")
    with pytest.raises(ValueError):
        model.run_with_cache(tokens(), names=lambda n: False)


# -- attention invariants -----------------------------------------------------------------------


@pytest.mark.parametrize("arch", ["decoder", "encoder"])
def test_pattern_rows_sum_to_one_and_masked_entries_are_exactly_zero(arch):
    model = make(arch)
    mask = masks.sliding_window(9, 2)
    for m in (None, mask):
        _, cache = model.run_with_cache(tokens(), names="*hook_pattern", mask=m)
        for i in range(2):
            pattern = cache[f"blocks.{i}.attn.hook_pattern"]
            assert torch.allclose(pattern.sum(-1), torch.ones(2, 4, 9), atol=1e-5)
            applied = masks.causal(9) if (m is None and arch == "decoder") else (m if m is not None else masks.full(9))
            assert (pattern[..., ~applied] == 0).all()
            if m is not None or arch == "decoder":
                assert (~applied).any()


@pytest.mark.parametrize("pos", ["sinusoidal", "rope", "none"])
def test_pattern_recomputed_from_cached_q_k_equals_cached_pattern(pos):
    model = make("decoder", pos)
    _, cache = model.run_with_cache(tokens())
    q_name, k_name = ("hook_rot_q", "hook_rot_k") if pos == "rope" else ("hook_q", "hook_k")
    for i in range(2):
        q = cache[f"blocks.{i}.attn.{q_name}"].transpose(1, 2)  # [batch head pos d_head]
        k = cache[f"blocks.{i}.attn.{k_name}"].transpose(1, 2)
        scores = q @ k.transpose(-2, -1) / model.cfg.d_head ** 0.5
        assert torch.allclose(scores, cache[f"blocks.{i}.attn.hook_attn_scores"], atol=1e-4)
        pattern = torch.softmax(scores.masked_fill(~masks.causal(9), float("-inf")), dim=-1)
        assert torch.allclose(pattern, cache[f"blocks.{i}.attn.hook_pattern"], atol=1e-5)
        z = cache[f"blocks.{i}.attn.hook_pattern"] @ cache[f"blocks.{i}.attn.hook_v"].transpose(1, 2)
        assert torch.allclose(z.transpose(1, 2), cache[f"blocks.{i}.attn.hook_z"], atol=1e-4)


def test_fully_masked_query_row_gives_zeros_not_nan():
    model = make("encoder")
    mask = masks.full(9).clone()
    mask[3] = False
    logits, cache = model.run_with_cache(tokens(), mask=mask)
    assert torch.isfinite(logits).all()
    pattern = cache["blocks.0.attn.hook_pattern"]
    assert (pattern[:, :, 3] == 0).all() and torch.isfinite(pattern).all()
    plain = model(tokens(), mask=mask)  # the fused path must fall back, not return NaN
    assert torch.isfinite(plain).all() and torch.allclose(plain, logits, atol=1e-5)


def test_permutation_equivariance_of_an_encoder_without_positions():
    model = make("encoder", "none")
    x = tokens(batch=1, n=9)
    perm = torch.randperm(9, generator=torch.Generator().manual_seed(3))
    assert torch.allclose(model(x)[:, perm], model(x[:, perm]), atol=1e-5)
    with_pos = make("encoder", "sinusoidal")
    assert not torch.allclose(with_pos(x)[:, perm], with_pos(x[:, perm]), atol=1e-3)


@pytest.mark.parametrize("arch", ["decoder", "encoder", "encoder-decoder"])
def test_fast_path_equals_explicit_path(arch):
    model = make(arch)
    x = tokens()
    kw = {"tgt": x[:, :6]} if arch == "encoder-decoder" else {}
    fast = model(x, **kw)
    explicit = model(x, attn_impl="explicit", **kw)
    captured, _ = model.run_with_cache(x, names="*hook_pattern", **kw)
    assert torch.allclose(fast, explicit, atol=1e-5)
    assert torch.allclose(fast, captured, atol=1e-5)
    if arch != "encoder-decoder":
        m = masks.block_diagonal(9, 3)
        assert torch.allclose(model(x, mask=m), model(x, mask=m, attn_impl="explicit"), atol=1e-5)


def test_the_mask_goes_into_the_scores_only_where_no_one_holds_them():
    """The explicit path writes the mask into the scores in place when nothing keeps them past their hook (no
    intervention sees them; a cache copies them first): the pattern is the same either way, and scores a hook
    kept, a cache copied or a gradient run kept live stay unmasked (finite everywhere)."""
    from core.model import hidden_keys

    model = make("decoder")
    x = tokens()
    _, only_patterns = model.run_with_cache(x, names="*hook_pattern")  # the scores unseen: masked in place
    kept = []
    _, both = model.run_with_cache(x, names=["blocks.0.attn.hook_pattern", "blocks.1.attn.hook_pattern"],
                                   fwd=[("blocks.0.attn.hook_attn_scores", lambda t, hook: kept.append(t))])
    for i in range(2):
        name = f"blocks.{i}.attn.hook_pattern"
        torch.testing.assert_close(only_patterns[name], both[name], rtol=0, atol=0)
    assert len(kept) == 1 and torch.isfinite(kept[0]).all()  # the tensor the hook saw was never masked
    _, scores = model.run_with_cache(x, names="*hook_attn_scores")
    assert all(torch.isfinite(t).all() for t in scores.values())
    _, graded = model.run_with_cache(x, names="*hook_attn_scores", grad_of=lambda logits: logits[0, -1, 0])
    assert all(torch.isfinite(graded[f"blocks.{i}.attn.hook_attn_scores{end}"]).all() for i in range(2)
               for end in ("", "_grad"))
    causal = masks.causal(9).expand(2, 4, 9, 9)  # [batch head q k], stride 0 on batch and heads
    assert torch.equal(hidden_keys(causal), ~causal) and hidden_keys(causal).shape == (2, 4, 9, 9)
    custom = torch.rand(2, 4, 9, 9, generator=torch.Generator().manual_seed(0)) > 0.5  # a mask of its own per head
    assert torch.equal(hidden_keys(custom), ~custom)


# -- per-call options ---------------------------------------------------------------------------


def test_masks_are_per_call_and_per_layer_and_validated():
    model = make("decoder")
    x = tokens()
    default = model(x)
    full = model(x, mask=masks.full(9))
    assert not torch.allclose(default, full, atol=1e-4)
    assert torch.allclose(model(x), default)  # nothing stuck on the shared model
    per_layer = model(x, mask={1: masks.full(9)})
    assert not torch.allclose(per_layer, default, atol=1e-4) and not torch.allclose(per_layer, full, atol=1e-4)
    with pytest.raises(ValueError, match="shape"):
        model(x, mask=masks.full(8))
    with pytest.raises(ValueError, match="bool"):
        model(x, mask=torch.ones(9, 9))
    with pytest.raises(ValueError, match="layer"):
        model(x, mask={5: masks.full(9)})
    _, cache = model.run_with_cache(x, names="*hook_mask", mask={1: masks.full(9)})
    assert torch.equal(cache["blocks.0.attn.hook_mask"][0, 0], masks.causal(9))
    assert cache["blocks.1.attn.hook_mask"].all()


def test_positional_scheme_swapped_per_call_without_touching_the_model():
    model = make("decoder", "sinusoidal")
    x = tokens()
    base = model(x)
    none = model(x, pos="none")
    assert not torch.allclose(base, none, atol=1e-4)
    _, cache = model.run_with_cache(x, names="hook_pos_embed", pos="none")
    assert (cache["hook_pos_embed"] == 0).all()
    assert torch.allclose(model(x), base)
    assert "blocks.0.attn.hook_rot_q" in model.hook_names(pos="rope")
    model(x, pos="rope")
    with pytest.raises(ValueError, match="learned"):
        model(x, pos="learned")
    with pytest.raises(ValueError, match="pos must be one of"):
        model(x, pos="alibi")


def test_temperature_sharpens_or_flattens_attention():
    model = make("encoder")
    x = tokens()

    def entropy(t):
        _, c = model.run_with_cache(x, names="blocks.0.attn.hook_pattern", temperature=t)
        p = c["blocks.0.attn.hook_pattern"].clamp_min(1e-12)
        return float(-(p * p.log()).sum(-1).mean())

    assert entropy(0.25) < entropy(1.0) < entropy(4.0)
    with pytest.raises(ValueError, match="temperature"):
        model(x, temperature=0)


def test_sinusoidal_and_rope_extrapolate_learned_refuses():
    long = tokens(batch=1, n=40)  # max_len is 24
    assert make("decoder", "sinusoidal")(long).shape == (1, 40, 17)
    assert make("decoder", "rope")(long).shape == (1, 40, 17)
    with pytest.raises(ValueError, match="learned a position table for 24"):
        make("decoder", "learned")(long)


def test_bad_tokens_raise_clear_errors():
    model = make()
    with pytest.raises(ValueError, match="integer"):
        model(torch.zeros(1, 4))
    with pytest.raises(ValueError, match="outside"):
        model(torch.tensor([[0, 17]]))
    with pytest.raises(ValueError, match="outside"):
        model(torch.tensor([[-1, 2]]))
    with pytest.raises(ValueError, match="empty"):
        model(torch.zeros(1, 0, dtype=torch.long))
    with pytest.raises(ValueError, match=r"\[batch, pos\]"):
        model(torch.tensor([1, 2, 3]))
    with pytest.raises(ValueError, match="source and a target"):
        make("encoder-decoder")(tokens())


@pytest.mark.parametrize("kw,field", [
    ({"arch": "gpt"}, "arch"), ({"pos": "alibi"}, "pos"), ({"norm": "middle"}, "norm"),
    ({"d_model": 30, "n_heads": 4}, "d_model"), ({"n_layers": 0}, "n_layers"), ({"score": "l2"}, "score"),
    ({"key_norm_clip": -1.0}, "key_norm_clip"), ({"act": "tanh"}, "act"),
    ({"pos": "rope", "d_model": 12, "n_heads": 4}, "d_head"), ({"src_vocab_size": 5}, "src_vocab_size"),
])
def test_config_validation_names_the_field(kw, field):
    with pytest.raises(ValueError, match=field):
        TransformerConfig(**kw)


def test_explicit_d_head_and_config_round_trip():
    cfg = TransformerConfig(d_model=30, n_heads=4, d_head=6)
    assert Transformer(cfg)(tokens(vocab=17)).shape[-1] == cfg.vocab_size
    assert TransformerConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(ValueError, match="unknown config field"):
        TransformerConfig.from_dict({**cfg.to_dict(), "dropout": 0.1})


@pytest.mark.parametrize("norm,residual", [("pre", True), ("post", True), ("none", True), ("pre", False)])
def test_every_norm_and_residual_variant_runs_and_differs(norm, residual):
    model = make(norm=norm, residual=residual)
    out, cache = model.run_with_cache(tokens(), names="blocks.0.*")
    assert torch.isfinite(out).all()
    if norm == "post":
        assert torch.allclose(cache["blocks.0.ln1.hook_normalized"], cache["blocks.0.hook_resid_mid"])


def test_cosine_score_and_key_clip_bound_the_scores():
    model = make("encoder", score="cosine", cosine_scale=5.0)
    _, cache = model.run_with_cache(tokens(), names="*hook_attn_scores")
    assert cache["blocks.0.attn.hook_attn_scores"].abs().max() <= 5.0 + 1e-4
    clipped = make("encoder", key_norm_clip=0.5)
    _, cache = clipped.run_with_cache(tokens(), names="*hook_k")
    assert cache["blocks.0.attn.hook_k"].norm(dim=-1).max() <= 0.5 + 1e-5


# -- interventions, threads, failures ------------------------------------------------------------


def test_run_with_hooks_intervenes_only_for_that_call():
    model = make()
    x = tokens()
    base = model(x)

    def zero_head_0(z, hook):
        z = z.clone()
        z[:, :, 0] = 0  # [batch pos head d_head]
        return z

    ablated = model.run_with_hooks(x, fwd=[("blocks.*.attn.hook_z", zero_head_0)])
    assert not torch.allclose(ablated, base, atol=1e-4)
    assert torch.allclose(model(x), base)
    seen = []
    model.run_with_hooks(x, fwd=[("blocks.1.hook_resid_pre", lambda t, hook: seen.append(hook.name))])
    assert seen == ["blocks.1.hook_resid_pre"]
    with pytest.raises(ValueError, match="shape"):
        model.run_with_hooks(x, fwd=[("hook_embed", lambda t, hook: t[:, :1])])


def test_all_heads_zeroed_removes_the_attention_output():
    model = make()
    _, cache = model.run_with_cache(tokens(), names="blocks.0.hook_attn_out",
                                    fwd=[("blocks.0.attn.hook_z", lambda z, hook: torch.zeros_like(z))])
    assert (cache["blocks.0.hook_attn_out"] == 0).all()


def test_a_hook_that_raises_leaves_no_trace():
    model = make()
    x = tokens()
    base_logits, base_cache = model.run_with_cache(x, names="*hook_pattern")

    def boom(t, hook):
        raise RuntimeError("student bug")

    with pytest.raises(RuntimeError, match="student bug"):
        model.run_with_hooks(x, fwd=[("blocks.1.hook_resid_pre", boom)])
    from core.hooks import current_state
    assert current_state() is None
    logits, cache = model.run_with_cache(x, names="*hook_pattern")
    assert torch.equal(logits, base_logits)
    assert sorted(cache) == sorted(base_cache)


def test_two_threads_with_different_masks_get_their_own_answers():
    model = make("encoder")
    x = tokens()
    choices = {"window": masks.sliding_window(9, 1), "blocks": masks.block_diagonal(9, 3)}
    expected = {k: model.run_with_cache(x, names="*hook_pattern", mask=m) for k, m in choices.items()}
    errors, barrier = [], threading.Barrier(2)

    def worker(key):
        try:
            barrier.wait()
            for _ in range(30):
                logits, cache = model.run_with_cache(x, names="*hook_pattern", mask=choices[key])
                assert torch.equal(logits, expected[key][0])
                assert torch.equal(cache["blocks.1.attn.hook_pattern"], expected[key][1]["blocks.1.attn.hook_pattern"])
                assert sorted(cache) == ["blocks.0.attn.hook_pattern", "blocks.1.attn.hook_pattern"]
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in choices]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


# -- gradients ----------------------------------------------------------------------------------


def test_grad_of_matches_finite_differences_and_writes_no_param_grad():
    model = make("decoder", dtype=torch.float64)
    x = tokens(batch=1)
    target = (0, 5, 3)

    def scalar(logits):
        return logits[target]

    logits, cache = model.run_with_cache(x, names="*hook_resid_*", grad_of=scalar)
    assert all(p.grad is None for p in model.parameters())
    for name in ["blocks.0.hook_resid_pre", "blocks.1.hook_resid_mid"]:
        grad = cache[name + "_grad"]
        assert grad.shape == cache[name].shape
        g = torch.Generator().manual_seed(7)
        direction = torch.randn(cache[name].shape, generator=g, dtype=torch.float64)
        eps = 1e-6

        def bumped(sign):
            return model.run_with_hooks(x, fwd=[(name, lambda t, hook: t + sign * eps * direction)])[target]

        numeric = (bumped(1) - bumped(-1)) / (2 * eps)
        analytic = (grad * direction).sum()
        assert torch.allclose(analytic, numeric, rtol=1e-5, atol=1e-8), (name, analytic, numeric)
    # Positions after the chosen one cannot influence it in a causal model.
    assert (cache["blocks.0.hook_resid_pre_grad"][0, 6:] == 0).all()


def test_grad_of_must_return_a_scalar():
    with pytest.raises(ValueError, match="single-number"):
        make().run_with_cache(tokens(), names="hook_embed", grad_of=lambda logits: logits)


def test_grad_of_fixed_positional_table_is_available():
    _, cache = make("decoder", "sinusoidal").run_with_cache(
        tokens(), names=["hook_pos_embed", "hook_embed"], grad_of=lambda lg: lg[0, -1, 0])
    assert cache["hook_pos_embed_grad"].abs().sum() > 0


# -- generation ---------------------------------------------------------------------------------


@pytest.mark.parametrize("pos", ["sinusoidal", "rope", "learned", "none"])
def test_kv_cache_generation_equals_recompute(pos):
    model = make("decoder", pos, max_len=30)
    prefix = tokens(n=5)
    cached = model.generate(prefix, 12, use_cache=True)
    fresh = model.generate(prefix, 12, use_cache=False)
    assert cached.shape == (2, 17)
    assert torch.equal(cached, fresh)
    assert torch.equal(cached[:, :5], prefix)


def test_encoder_decoder_generation_with_cache_equals_recompute():
    model = make("encoder-decoder")
    src = tokens(n=8)
    start = torch.zeros(2, 1, dtype=torch.long)
    a = model.generate(src, 9, tgt_prefix=start, use_cache=True)
    b = model.generate(src, 9, tgt_prefix=start, use_cache=False)
    assert torch.equal(a, b)
    full = model(src, a[:, :-1])  # teacher-forced on its own output gives the same argmax
    assert torch.equal(full.argmax(-1), a[:, 1:])
    with pytest.raises(ValueError, match="tgt_prefix"):
        model.generate(src, 3)
    with pytest.raises(ValueError, match="cannot generate"):
        make("encoder").generate(src, 3)


def test_head_weights_reproduce_q():
    model = make()
    x = tokens()
    _, cache = model.run_with_cache(x, names=["blocks.0.ln1.hook_normalized", "blocks.0.attn.hook_q"])
    w = model.head_weights(0)
    q = torch.einsum("bpd,hde->bphe", cache["blocks.0.ln1.hook_normalized"], w["W_Q"])  # [batch pos head d_head]
    assert torch.allclose(q, cache["blocks.0.attn.hook_q"], atol=1e-4)
    assert w["W_O"].shape == (4, 8, 32)


@pytest.mark.parametrize("arch", ["encoder", "decoder"])
def test_an_intervention_on_hook_mask_is_applied(arch):
    model = make(arch)

    def hide_key_2_and_row_4(mask, hook):
        mask = mask.clone()
        mask[..., 2] = False  # nobody may look at key 2
        mask[..., 4, :] = False  # query 4 may look at nothing
        return mask

    _, cache = model.run_with_cache(tokens(), names="*hook_pattern",
                                    fwd=[("blocks.*.attn.hook_mask", hide_key_2_and_row_4)])
    pattern = cache["blocks.1.attn.hook_pattern"]
    assert (pattern[..., 2] == 0).all()
    assert (pattern[..., 4, :] == 0).all() and torch.isfinite(pattern).all()
    rows = pattern.sum(-1)[..., [0, 1, 2, 3, 5, 6, 7, 8]]  # every query but 4 still sees some key
    assert torch.allclose(rows, torch.ones_like(rows), atol=1e-5)


def test_encoder_decoder_masks_per_stack():
    model = make("encoder-decoder")
    src, tgt = tokens(n=9), tokens(n=5, seed=4)
    hide_first_source = torch.ones(5, 9, dtype=torch.bool)
    hide_first_source[:, 0] = False
    _, cache = model.run_with_cache(src, tgt=tgt, names="*attn.hook_pattern", cross_mask=hide_first_source,
                                    src_mask=masks.sliding_window(9, 1))
    assert (cache["decoder.blocks.0.cross_attn.hook_pattern"][..., 0] == 0).all()
    assert (cache["encoder.blocks.1.attn.hook_pattern"][..., ~masks.sliding_window(9, 1)] == 0).all()
    assert (cache["decoder.blocks.0.attn.hook_pattern"][..., ~masks.causal(5)] == 0).all()  # default causal
    with pytest.raises(ValueError, match="cross_mask"):
        model(src, tgt, cross_mask=torch.ones(5, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="src_mask, tgt_mask and cross_mask"):
        model(src, tgt, mask=masks.full(9))


@pytest.mark.parametrize("use_cache,expected_calls", [(True, 1), (False, 6)])
def test_cross_attention_keys_and_values_are_computed_once_with_the_cache(use_cache, expected_calls):
    model = make("encoder-decoder")  # a private model: counting hooks here touch no shared model
    calls = []
    handle = model.decoder.blocks[0].cross_attn.W_K.register_forward_hook(lambda m, i, o: calls.append(1))
    try:
        model.generate(tokens(n=8), 6, tgt_prefix=torch.zeros(2, 1, dtype=torch.long), use_cache=use_cache)
    finally:
        handle.remove()
    assert len(calls) == expected_calls


def test_stack_for_maps_hook_prefixes_to_stacks():
    encdec, dec = make("encoder-decoder"), make("decoder")
    assert encdec.stack_for("encoder.") is encdec.encoder and encdec.stack_for("decoder.") is encdec.decoder
    assert dec.stack_for("") is dec.stack
    with pytest.raises(ValueError, match="encoder."):
        encdec.stack_for("")
    with pytest.raises(ValueError, match="one stack"):
        dec.stack_for("decoder.")
