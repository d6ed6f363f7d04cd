"""Benchmark: what the hooks cost, against a bare-torch forward of the same weights (the floor).

    python -m core.bench                 # both configs, 16/64/128/512 tokens, batch 1 and 8
    python -m core.bench --quick         # small config only, fewer repeats
    python -m core.bench --batch 1       # one batch size (the app's case: one student, one input)

The floor is written here without hooks, run on the SAME weights (checked equal to our logits),
and measured in the same run, interleaved with ours, so the ratios survive a noisy machine.
Prints a table of the fastest call of each (ms) and ratios; it asserts nothing (these machines are shared).
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F

from core.model import Transformer, TransformerConfig
from core.train import init_model

CONFIGS = {
    "small": dict(n_layers=2, d_model=64, n_heads=4),
    "large": dict(n_layers=6, d_model=256, n_heads=8),
}
TARGETS = {"forward": 1.2, "cache all": 1.5, "patterns": 1.25, "fwd+bwd": 1.5}


def floor_forward(model: Transformer, tokens: torch.Tensor, sdpa: bool = False,
                  keep: list | None = None) -> torch.Tensor:
    """The same pre-LN decoder, written plainly: no hooks, no options, no validation."""
    s, cfg = model.stack, model.cfg
    b, n = tokens.shape
    h, dh = cfg.n_heads, cfg.d_head
    x = s.W_E(tokens) + s.sin_table[:n]
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    for blk in s.blocks:
        if keep is not None:
            keep.append(x)
        a = blk.attn
        y = blk.ln1.ln(x)
        q = a.W_Q(y).view(b, n, h, dh).transpose(1, 2)  # [batch head pos d_head]
        k = a.W_K(y).view(b, n, h, dh).transpose(1, 2)
        v = a.W_V(y).view(b, n, h, dh).transpose(1, 2)
        if sdpa:
            z = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            scores = (q @ k.transpose(-2, -1)) / dh ** 0.5
            z = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1) @ v
        x = x + a.W_O(z.transpose(1, 2).reshape(b, n, h * dh))  # [batch pos d_model]
        if keep is not None:
            keep.append(x)
        x = x + blk.mlp.W_out(blk.mlp.act(blk.mlp.W_in(blk.ln2.ln(x))))
    if keep is not None:
        keep.append(x)
    return model.unembed(s.ln_final.ln(x))


def _loss(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits[:, :-1].flatten(0, 1), tokens[:, 1:].flatten())


def cases(model: Transformer, tokens: torch.Tensor) -> dict:
    """name -> zero-argument callable. Pairs (ours, floor) are timed interleaved."""

    def floor_fwd():
        with torch.no_grad():
            floor_forward(model, tokens)

    def floor_fwd_sdpa():
        with torch.no_grad():
            floor_forward(model, tokens, sdpa=True)

    def floor_fwd_bwd():
        keep = []
        logits = floor_forward(model, tokens, keep=keep)
        torch.autograd.grad(_loss(logits, tokens), keep)

    def ours_fwd():
        with torch.no_grad():
            model(tokens)

    def ours_explicit():
        with torch.no_grad():
            model(tokens, attn_impl="explicit")

    return {
        "floor": floor_fwd,
        "floor sdpa": floor_fwd_sdpa,
        "floor fwd+bwd": floor_fwd_bwd,
        "forward": ours_fwd,
        "forward explicit": ours_explicit,
        "cache all": lambda: model.run_with_cache(tokens),
        "patterns": lambda: model.run_with_cache(tokens, names="*hook_pattern"),
        "fwd+bwd": lambda: model.run_with_cache(tokens, names="*hook_resid_*",
                                                grad_of=lambda lg: _loss(lg, tokens)),
    }


def measure(fns: dict, repeats: int, budget_s: float) -> dict[str, float]:
    """The fastest seconds per call of each fn, interleaving the fns round-robin.

    The best of many interleaved calls, as timeit recommends: on a shared machine the other
    processes only ever add time, so the minimum is the figure that compares between runs."""
    for fn in fns.values():
        fn()  # warm-up
    times = {k: [] for k in fns}
    start = time.perf_counter()
    for r in range(repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
        if r >= 4 and time.perf_counter() - start > budget_s:
            break
    return {k: min(v) for k, v in times.items()}


def check_floor_matches(model: Transformer, tokens: torch.Tensor) -> float:
    with torch.no_grad():
        return float((floor_forward(model, tokens) - model(tokens)).abs().max())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small config, fewer repeats")
    parser.add_argument("--batch", default="1,8", help="comma-separated batch sizes (default 1,8)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads, 1 as app.py runs (0: leave torch's default)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    configs = {"small": CONFIGS["small"]} if args.quick else CONFIGS
    lengths = (16, 64) if args.quick else (16, 64, 128, 512)
    batches = [int(b) for b in args.batch.split(",")]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; "
          f"best of interleaved calls, in ms; ratio = ours / floor (fwd+bwd: / floor fwd+bwd)")
    header = (f"{'config':6} {'batch':>5} {'n':>4} | {'floor':>8} {'sdpa':>8} | {'forward':>13} {'explicit':>13} "
              f"{'cache all':>13} {'patterns':>13} {'fwd+bwd':>13}")
    print(header)
    print("-" * len(header))
    for cname, sizes in configs.items():
        for batch, n in ((b, n) for b in batches for n in lengths):
            cfg = TransformerConfig(arch="decoder", vocab_size=64, max_len=max(lengths), pos="sinusoidal", **sizes)
            model = init_model(cfg, seed=0).eval()
            tokens = torch.randint(0, 64, (batch, n), generator=torch.Generator().manual_seed(0))
            err = check_floor_matches(model, tokens)
            assert err < 1e-4, f"the floor is not the same function (max diff {err})"
            t = measure(cases(model, tokens), repeats=200 if n <= 64 else 30,
                        budget_s=3 if n <= 128 else 12)
            fl, fb = t["floor"], t["floor fwd+bwd"]

            def cell(name, base):
                return f"{t[name] * 1e3:7.2f} {t[name] / base:4.2f}x"

            print(f"{cname:6} {batch:>5} {n:>4} | {fl * 1e3:8.2f} {t['floor sdpa'] * 1e3:8.2f} | {cell('forward', fl)} "
                  f"{cell('forward explicit', fl)} {cell('cache all', fl)} {cell('patterns', fl)} "
                  f"{cell('fwd+bwd', fb)}")
    print("\nTargets on small, batch 1, 64 tokens: " + ", ".join(f"{k} <= {v}x" for k, v in TARGETS.items()))
    print("'forward' takes the fused SDPA path when nothing is captured; 'explicit' forces the hooked math path.")


if __name__ == "__main__":
    main()
