"""How parameters, FLOPs and training memory grow with depth and width (issue 39): MEASURED on small models built
here with core.model in GPT-2's layout, COUNTED from formulas at the sizes of GPT-2 small, medium and large and
BERT-base. The same parameter and FLOP formulas are checked against the small models' measurements, so the
counts at large sizes rest on a formula that has been seen to hold.

Formulas (d = d_model, L = layers, n = tokens, V = vocabulary, h = heads, d_ff = 4d):
- parameters: 12 L d^2 + 13 L d + V d + n_ctx d + 2 d (GPT-2: tied unembedding, learned positions, biases);
- forward FLOPs: 24 L n d^2 (projections and MLP) + 4 L n^2 d (scores and weighted sum) + 2 n d V (unembedding);
- training activations: L n d (34 + 5 h n / d) bytes (Korthikanti et al. 2022, "Reducing Activation
  Recomputation in Large Transformer Models", eq. 1: 16-bit activations, batch 1).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.utils.flop_counter import FlopCounterMode

from core.analysis.cost import peak_bytes
from core.config import TransformerConfig
from core.device import one_thread
from core.model import Transformer

SMALL_VOCAB, SMALL_N, SMALL_HEADS = 64, 128, 4  # the small models: 64 tokens, inputs of 128, 4 heads
SMALL_DEPTHS, SMALL_DEPTH_WIDTH = (1, 2, 4, 8), 64  # depth varied at width 64 ...
SMALL_WIDTHS, SMALL_WIDTH_DEPTH = (32, 64, 128, 256), 2  # ... width varied at 2 layers


@dataclass(frozen=True)
class Size:
    """A model's sizes, enough to count its parameters, FLOPs and activations."""

    name: str
    n_layers: int
    d_model: int
    n_heads: int
    vocab: int
    n_ctx: int  # the longest input (the learned position table's length)
    extra_params: int = 0  # what GPT-2's layout leaves out (BERT: token types, embedding norm, pooler)


LARGE = (  # counted, never built: configs as published (GPT-2: Radford et al. 2019; BERT: Devlin et al. 2019)
    Size("GPT-2 small", 12, 768, 12, 50257, 1024),
    Size("GPT-2 medium", 24, 1024, 16, 50257, 1024),
    Size("GPT-2 large", 36, 1280, 20, 50257, 1024),
    Size("BERT-base", 12, 768, 12, 30522, 512, extra_params=2 * 768 + 2 * 768 + 768 * 768 + 768),
)


def counted_params(s: Size) -> int:
    """Parameters by the GPT-2 formula (plus `extra_params`)."""
    d, L = s.d_model, s.n_layers
    return 12 * L * d * d + 13 * L * d + s.vocab * d + s.n_ctx * d + 2 * d + s.extra_params


def counted_flops(s: Size, n: int) -> float:
    """Forward FLOPs (2 per multiply-add) of the matrix products at n tokens, batch 1."""
    d, L = s.d_model, s.n_layers
    return 24.0 * L * n * d * d + 4.0 * L * n * n * d + 2.0 * n * d * s.vocab


def counted_activation_bytes(s: Size, n: int) -> float:
    """Activations kept for the backward pass at n tokens (Korthikanti et al. 2022, 16-bit, batch 1)."""
    return float(s.n_layers) * n * s.d_model * (34.0 + 5.0 * s.n_heads * n / s.d_model)


def small_config(n_layers: int, d_model: int) -> TransformerConfig:
    """A small decoder in GPT-2's layout (learned positions, biases on every projection, tied unembedding)."""
    return TransformerConfig(arch="decoder", vocab_size=SMALL_VOCAB, d_model=d_model, n_heads=SMALL_HEADS,
                             n_layers=n_layers, max_len=SMALL_N, pos="learned", qkv_bias=True, attn_out_bias=True,
                             tie_embeddings=True)


def small_size(n_layers: int, d_model: int) -> Size:
    """The Size of a small model, to count it with the same formulas."""
    return Size(f"{n_layers} layers × {d_model}", n_layers, d_model, SMALL_HEADS, SMALL_VOCAB, SMALL_N)


def measure_small(n_layers: int, d_model: int, seed: int = 0) -> dict:
    """Build the small model and measure: parameters (its tensors' sizes), forward FLOPs (torch's FLOP counter
    on one input of SMALL_N tokens, through the explicit attention path, whose score products it sees) and the
    peak extra memory of a training step as core.train runs it (forward + backward, float32,
    core.analysis.cost.peak_bytes). The weights come from a local generator."""
    generator = torch.Generator().manual_seed(seed)
    with torch.device("meta"):
        skeleton = Transformer(small_config(n_layers, d_model))
    model = skeleton.to_empty(device="cpu")
    model.tie_weights()  # to_empty gave the unembedding a Parameter of its own
    model.init_tables()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=generator) * 0.02)
    tokens = torch.randint(0, SMALL_VOCAB, (1, SMALL_N), generator=generator)  # [batch pos]
    params = [p for p in model.parameters()]
    with one_thread(), FlopCounterMode(display=False) as counter, torch.no_grad():
        model.run_with_cache(tokens, names="*hook_pattern")  # the explicit path: its score products are counted

    def step() -> None:
        torch.autograd.grad(model(tokens).float().logsumexp(-1).mean(), params)

    with one_thread():
        train_bytes = float(peak_bytes(step))
    return {"params": sum(p.numel() for p in params), "flops": float(counter.get_total_flops()),
            "train_bytes": train_bytes}


def small_rows(vary: str, measured: dict) -> list[dict]:
    """Rows for the small models varied along `vary` ("depth" or "width"): measured beside counted.
    `measured`: (n_layers, d_model) -> measure_small's dict."""
    shapes = ([(L, SMALL_DEPTH_WIDTH) for L in SMALL_DEPTHS] if vary == "depth"
              else [(SMALL_WIDTH_DEPTH, d) for d in SMALL_WIDTHS])
    rows = []
    for L, d in shapes:
        m, s = measured[(L, d)], small_size(L, d)
        rows.append({"layers": L, "d_model": d, "parameters (measured)": m["params"],
                     "parameters (counted)": counted_params(s), "forward MFLOP (measured)": m["flops"] / 1e6,
                     "forward MFLOP (counted)": counted_flops(s, SMALL_N) / 1e6,
                     "training peak MiB (measured, float32)": m["train_bytes"] / 2 ** 20})
    return rows


def large_rows() -> list[dict]:
    """The published models' sizes, counted at their full context."""
    return [{"model": s.name, "layers": s.n_layers, "d_model": s.d_model, "heads": s.n_heads, "context": s.n_ctx,
             "parameters (counted)": counted_params(s),
             "forward GFLOP at context (counted)": counted_flops(s, s.n_ctx) / 1e9,
             "activations MiB at context (counted, 16-bit)": counted_activation_bytes(s, s.n_ctx) / 2 ** 20}
            for s in LARGE]


def small_shapes() -> list[tuple[int, int]]:
    """Every (layers, width) of the small models, depth's and width's together."""
    return sorted({(L, SMALL_DEPTH_WIDTH) for L in SMALL_DEPTHS} | {(SMALL_WIDTH_DEPTH, d) for d in SMALL_WIDTHS})
