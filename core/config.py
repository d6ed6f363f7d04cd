"""TransformerConfig: every size and choice of the model, validated with messages a student can act on.

Most fields are the choices the teaching pages vary. The later ones (biases, tied embeddings, gated
MLP, RMSNorm, token types, grouped keys and values, the RoPE layout) let a real checkpoint (GPT-2,
BERT, Llama, Mistral, Qwen2) be converted into the same model; every one of them defaults to the
model this project trains itself, so old checkpoints load unchanged.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Literal, Optional, get_args

Arch = Literal["encoder", "decoder", "encoder-decoder"]
PosScheme = Literal["none", "sinusoidal", "learned", "rope"]
NormPlacement = Literal["pre", "post", "none"]
ScoreFn = Literal["scaled_dot", "dot", "cosine"]
Activation = Literal["relu", "gelu", "gelu_tanh", "silu"]  # gelu: erf (BERT); gelu_tanh: GPT-2's; silu: Llama's
NormType = Literal["layernorm", "rmsnorm"]
RopeLayout = Literal["pairs", "halves"]


@dataclass
class TransformerConfig:
    """The model's shape and design choices. Field names are a public contract (checkpoints store them)."""

    arch: Arch = "decoder"  # encoder (bidirectional), decoder (causal), or encoder-decoder
    vocab_size: int = 32  # target / single-stack vocabulary size
    d_model: int = 64  # width of the residual stream
    n_heads: int = 4  # attention heads per layer
    d_head: Optional[int] = None  # width of each head; None means d_model // n_heads
    n_layers: int = 2  # blocks per stack (encoder-decoder: per stack, both stacks alike)
    d_mlp: Optional[int] = None  # hidden width of the MLP; None means 4 * d_model
    max_len: int = 64  # longest sequence the model was built for (the learned table's length)
    pos: PosScheme = "sinusoidal"  # how positions enter: added table, learned table, rotation, or not at all
    rope_base: float = 10000.0  # the base of RoPE's (and the sinusoidal table's) frequencies
    norm: NormPlacement = "pre"  # LayerNorm before each sublayer (pre), after the residual add (post), or none
    residual: bool = True  # keep the identity path around each sublayer
    score: ScoreFn = "scaled_dot"  # q.k / sqrt(d_head), plain q.k, or cosine(q, k) * cosine_scale
    key_norm_clip: Optional[float] = None  # clip every key's norm to this value (a defence against huge keys)
    cosine_scale: float = 8.0  # the inverse temperature used with score="cosine"
    tie_vk: bool = False  # no separate W_V: values are the keys' projection W_K (V = K, before clipping and RoPE)
    act: Activation = "gelu"  # the MLP's non-linearity
    src_vocab_size: Optional[int] = None  # encoder-decoder only: source vocabulary; None means vocab_size
    ln_eps: float = 1e-5  # the norm's epsilon (LayerNorm's or RMSNorm's)
    # -- what real checkpoints need (each default is the model above) -------------------------
    qkv_bias: bool = False  # biases on W_Q, W_K, W_V (GPT-2, BERT, Qwen2)
    attn_out_bias: bool = False  # a bias on W_O (GPT-2, BERT)
    mlp_bias: bool = True  # biases on the MLP's linear maps (Llama has none)
    unembed_bias: bool = False  # a bias on the unembedding (BERT's decoder bias)
    tie_embeddings: bool = False  # the unembedding IS the token embedding W_E (one shared weight)
    gated_mlp: bool = False  # SwiGLU-style MLP: W_out(act(W_gate x) * W_in x)
    norm_type: NormType = "layernorm"  # LayerNorm (mean and variance, weight and bias) or RMSNorm (weight only)
    embed_norm: bool = False  # a norm right after embeddings + positions (BERT)
    n_token_types: int = 0  # > 0: a token-type (segment) table added to the embeddings (BERT: 2)
    n_kv_heads: Optional[int] = None  # key/value heads (grouped-query attention); None means n_heads
    rope_layout: RopeLayout = "pairs"  # RoPE rotates (x[2i], x[2i+1]) (pairs) or (x[i], x[i + r/2]) (halves, HF Llama)
    rotary_dim: Optional[int] = None  # how many leading dims of each head RoPE rotates; None means d_head
    mlm_head: bool = False  # BERT's masked-LM head before the unembedding: dense + act + norm

    def __post_init__(self) -> None:
        _check_choice("arch", self.arch, Arch)
        _check_choice("pos", self.pos, PosScheme)
        _check_choice("norm", self.norm, NormPlacement)
        _check_choice("score", self.score, ScoreFn)
        _check_choice("act", self.act, Activation)
        _check_choice("norm_type", self.norm_type, NormType)
        _check_choice("rope_layout", self.rope_layout, RopeLayout)
        for name in ("vocab_size", "d_model", "n_heads", "n_layers", "max_len"):
            _check_positive_int(name, getattr(self, name))
        if self.d_head is None:
            if self.d_model % self.n_heads:
                raise ValueError(
                    f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads}) "
                    f"unless d_head is given explicitly"
                )
            self.d_head = self.d_model // self.n_heads
        _check_positive_int("d_head", self.d_head)
        if self.d_mlp is None:
            self.d_mlp = 4 * self.d_model
        _check_positive_int("d_mlp", self.d_mlp)
        self._check_heads()
        _check_number("rope_base", self.rope_base, above=1.0)
        if self.key_norm_clip is not None:
            _check_number("key_norm_clip", self.key_norm_clip, above=0.0)
        _check_number("cosine_scale", self.cosine_scale, above=0.0)
        _check_number("ln_eps", self.ln_eps, above=0.0, at_most=1.0)
        for name in ("residual", "tie_vk", *BOOL_FIELDS):
            _check_bool(name, getattr(self, name))
        if self.src_vocab_size is not None:
            if self.arch != "encoder-decoder":
                raise ValueError("src_vocab_size is only used by arch='encoder-decoder'; leave it None")
            _check_positive_int("src_vocab_size", self.src_vocab_size)
        self._check_token_types()

    def _check_heads(self) -> None:
        """Grouped keys and values, and the dimensions RoPE rotates."""
        if self.n_kv_heads is not None:
            _check_positive_int("n_kv_heads", self.n_kv_heads)
            if self.n_heads % self.n_kv_heads:
                raise ValueError(
                    f"n_kv_heads ({self.n_kv_heads}) must divide n_heads ({self.n_heads}): each key/value "
                    f"head serves n_heads / n_kv_heads query heads; leave it None for one per query head"
                )
        if self.rotary_dim is not None:
            _check_positive_int("rotary_dim", self.rotary_dim)
            if self.rotary_dim % 2 or self.rotary_dim > self.d_head:
                raise ValueError(
                    f"rotary_dim ({self.rotary_dim}) must be even and at most d_head ({self.d_head}): RoPE "
                    f"rotates pairs of a head's leading dimensions; leave it None to rotate all of them"
                )
        if self.pos == "rope" and self.rope_dim % 2:
            raise ValueError(f"pos='rope' rotates pairs of dimensions, so d_head must be even, got {self.d_head} "
                             f"(or set an even rotary_dim)")

    def _check_token_types(self) -> None:
        """A token-type table needs a whole, non-negative size and a single stack to live in."""
        value = self.n_token_types
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"n_token_types must be a whole number >= 0 (0 = no token-type table, BERT "
                             f"uses 2), got {value!r}")
        if value and self.arch == "encoder-decoder":
            raise ValueError("n_token_types is for single-stack models (BERT's sentence A / B); an "
                             "encoder-decoder takes no token types, so leave it 0")

    @property
    def kv_heads(self) -> int:
        """How many key/value heads each attention layer has: n_kv_heads, or n_heads when None."""
        return self.n_kv_heads or self.n_heads

    @property
    def rope_dim(self) -> int:
        """How many leading dimensions of each head RoPE rotates: rotary_dim, or d_head when None."""
        return self.rotary_dim or self.d_head

    @property
    def source_vocab_size(self) -> int:
        """The encoder's vocabulary size (encoder-decoder), else the single vocabulary's."""
        return self.src_vocab_size or self.vocab_size

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "TransformerConfig":
        """Build a config from stored JSON; unknown fields are an error, not silently dropped."""
        if not isinstance(data, dict):
            raise ValueError(f"a config must be a JSON object, got {type(data).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown config field(s) {unknown}; known fields are {sorted(known)}")
        return cls(**data)


BOOL_FIELDS = ("qkv_bias", "attn_out_bias", "mlp_bias", "unembed_bias", "tie_embeddings", "gated_mlp",
               "embed_norm", "mlm_head")


def _check_bool(field: str, value) -> None:
    if not isinstance(value, bool):
        raise ValueError(f"{field} must be True or False, got {value!r}")


def _check_choice(field: str, value, literal) -> None:
    allowed = get_args(literal)
    if value not in allowed:
        raise ValueError(f"{field} must be one of {list(allowed)}, got {value!r}")


def _check_number(field: str, value, above: float, at_most: float = math.inf) -> None:
    """A finite real number in (above, at_most]; text, NaN and infinities are refused by name."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{field} must be a finite number, got {value!r}")
    if not above < value <= at_most:
        limit = f"greater than {above:g}" + (f" and at most {at_most:g}" if math.isfinite(at_most) else "")
        raise ValueError(f"{field} must be {limit}, got {value!r}")


def _check_positive_int(field: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{field} must be a positive integer, got {value!r}")
