"""The recipe: the two models' layouts and sizes, and how long each trains.

The decoder has Qwen2's layout (the Llama family's: RoPE on halves, pre-RMSNorm, a SwiGLU MLP, no biases
but on q, k and v, the unembedding tied to the token embedding); `decoder_layout="gpt2"` gives GPT-2's
(learned positions, pre-LN, GELU in its tanh form, biases), which on this budget learned no previous-token
head (assets/models/english/README.md). The encoder has RoFormer's layout: BERT's (two token types, a norm
on the embeddings, post-LN, the masked-LM head, tied unembedding with its own bias) with RoPE on pairs in
place of the learned position table; `encoder_layout="bert"` gives BERT's own, which on this budget stayed
at the unigram's guesses (the README's history). Both are TransformerConfigs, so they train as Glassbox
models and export to the Hugging Face layouts.

FULL is sized for the 60-minute budget on 2 CPU cores (about 20-25 minutes of training per model);
QUICK runs the whole pipeline in seconds, for tests.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from core.config import TransformerConfig


@dataclass(frozen=True)
class Recipe:
    """Sizes and schedule of both models."""

    vocab_size: int = 4096
    d_model: int = 128
    n_layers: int = 4
    n_heads: int = 4
    decoder_context: int = 1024
    encoder_context: int = 512
    # -- the decoder's training
    decoder_steps: int = 3200
    decoder_batch: int = 4  # windows of decoder_context tokens per step (more, shorter ones while decoder_window rules)
    decoder_window: int = 256  # > 0: train on windows of this many tokens (as many tokens a step) before the long phase
    long_share: float = 0.25  # with decoder_window: the last share of the steps reads whole decoder_context windows
    decoder_lr: float = 3e-3
    decoder_layout: str = "qwen2"  # "qwen2" (RoPE: relative positions from the first step) or "gpt2" (learned table)
    repeat_share: float = 0.25  # windows carrying a repeated passage (induction heads; see core.english.data)
    repeat_span: tuple[int, int] = (16, 128)  # tokens in that passage
    # windows carrying random tokens said over and over (see core.english.data): only an earlier copy predicts them.
    # In the GPT-2 layout (learned positions) a 1,300-step build found no head with or without them; in this RoPE
    # layout a quarter to a half of them, with a rate of 3e-3, gave a previous-token head within 300 steps
    random_share: float = 0.3
    random_span: tuple[int, int] = (8, 64)  # random tokens in one saying
    # -- the encoder's training
    encoder_steps: int = 2800
    encoder_batch: int = 8  # windows of encoder_context tokens per step (more, shorter ones while encoder_window rules)
    encoder_window: int = 128  # > 0: train on windows of this many tokens (as many tokens a step) before the long phase
    encoder_lr: float = 3e-3
    encoder_layout: str = "roformer"  # "roformer" (RoPE on pairs) or "bert" (learned table)
    short_share: float = 0.2  # batches of short windows ([CLS] a few words [SEP])
    short_range: tuple[int, int] = (8, 128)
    # share of the ordinary tokens chosen for masking in training (evaluation masks 15%, as BERT did). 400-step runs
    # of this layout: at 15% on 512-token windows they filled 0.04-0.07 of the held-out slots (the unigram's
    # guesses); at 40% on 128-token windows, 0.19 (BERT's layout, the same way: 0.04)
    mask_share: float = 0.4
    # -- both
    position_init_std: float = 0.02  # the learned position table starts as the sinusoidal table at this std (0: random)
    warmup: int = 100
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    seed: int = 0
    max_eval_tokens: int = 200_000  # held-out tokens each evaluation reads at most
    corpus_documents: int = 0  # 0: every document; n: the first n (quick runs)

    def to_dict(self) -> dict:
        return asdict(self)


FULL = Recipe()
QUICK = Recipe(vocab_size=320, d_model=32, n_layers=2, n_heads=4, decoder_context=64, encoder_context=32,
               decoder_steps=12, decoder_batch=2, encoder_steps=12, encoder_batch=4, warmup=3, repeat_span=(4, 12), random_span=(4, 12),
               short_range=(6, 16), encoder_window=16, max_eval_tokens=2_000, corpus_documents=60)


def with_steps(recipe: Recipe, decoder_steps: int | None, encoder_steps: int | None) -> Recipe:
    """The recipe with other step counts (a preliminary or timing run)."""
    return replace(recipe, decoder_steps=decoder_steps or recipe.decoder_steps,
                   encoder_steps=encoder_steps or recipe.encoder_steps)


DECODER_LAYOUTS = ("qwen2", "gpt2")
ENCODER_LAYOUTS = ("roformer", "bert")


def decoder_config(r: Recipe, vocab_size: int) -> TransformerConfig:
    """The decoder's layout at the recipe's size: Qwen2ForCausalLM's or GPT2LMHeadModel's."""
    if r.decoder_layout not in DECODER_LAYOUTS:
        raise ValueError(f"decoder_layout must be one of {', '.join(DECODER_LAYOUTS)}, got {r.decoder_layout!r}")
    if r.decoder_layout == "gpt2":
        return TransformerConfig(arch="decoder", vocab_size=vocab_size, d_model=r.d_model, n_heads=r.n_heads,
                                 n_layers=r.n_layers, d_mlp=4 * r.d_model, max_len=r.decoder_context, pos="learned",
                                 norm="pre", act="gelu_tanh", ln_eps=1e-5, qkv_bias=True, attn_out_bias=True,
                                 mlp_bias=True, tie_embeddings=True)
    # a gated MLP of about 2/3 * 4 * d_model, rounded up to a multiple of 8, keeps GPT-2's MLP parameter count
    d_mlp = -(-(8 * r.d_model // 3) // 8) * 8
    return TransformerConfig(arch="decoder", vocab_size=vocab_size, d_model=r.d_model, n_heads=r.n_heads,
                             n_kv_heads=r.n_heads, n_layers=r.n_layers, d_mlp=d_mlp, max_len=r.decoder_context, pos="rope",
                             rope_base=10000.0, rope_layout="halves", norm="pre", norm_type="rmsnorm",
                             act="silu", gated_mlp=True, ln_eps=1e-5, qkv_bias=True, attn_out_bias=False,
                             mlp_bias=False, tie_embeddings=True)


def encoder_config(r: Recipe, vocab_size: int) -> TransformerConfig:
    """The encoder's layout at the recipe's size: RoFormerForMaskedLM's or BertForMaskedLM's."""
    if r.encoder_layout not in ENCODER_LAYOUTS:
        raise ValueError(f"encoder_layout must be one of {', '.join(ENCODER_LAYOUTS)}, got {r.encoder_layout!r}")
    positions = dict(pos="learned") if r.encoder_layout == "bert" else \
        dict(pos="rope", rope_base=10000.0, rope_layout="pairs")
    return TransformerConfig(arch="encoder", vocab_size=vocab_size, d_model=r.d_model, n_heads=r.n_heads,
                             n_layers=r.n_layers, d_mlp=4 * r.d_model, max_len=r.encoder_context, **positions,
                             norm="post", act="gelu", ln_eps=1e-12, qkv_bias=True, attn_out_bias=True,
                             mlp_bias=True, unembed_bias=True, tie_embeddings=True, embed_norm=True,
                             n_token_types=2, mlm_head=True)
