"""How much do the Glassbox hooks cost in training? core.train next to a bare PyTorch loop.

Both train the default task (induction, decoder, 2 layers, d_model 64, 4 heads, sinusoidal,
pre-LN) from the SAME initial weights (copied into the bare model) on the SAME batches with the
same AdamW, schedule and clipping, so they follow the same trajectory and only speed differs.
They run interleaved in chunks, so a change in load on a shared machine hits both alike.

    python bench/train_speed.py [--steps 800] [--chunk 50] [--target 0.9] [--threads 1]

Prints steps/s, time to the target training accuracy (mean of the last 20 steps) and the ratio.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from core import positional  # noqa: E402
from core.tasks import IGNORE, get_task  # noqa: E402
from core.train import Trainer, default_config, lr_factor  # noqa: E402


class BareBlock(nn.Module):
    """Pre-LN block: x + attn(LN(x)), then x + mlp(LN(x)); fused QKV, SDPA with is_causal."""

    def __init__(self, d: int, h: int, d_mlp: int):
        super().__init__()
        self.h = h
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.out = nn.Linear(d, d, bias=False)
        self.fc1, self.fc2 = nn.Linear(d, d_mlp), nn.Linear(d_mlp, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, p, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, p, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4)  # [b h p dh] each
        z = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # [b h p dh]
        x = x + self.out(z.transpose(1, 2).reshape(b, p, d))  # [b p d]
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class BareDecoder(nn.Module):
    """Token embedding + sinusoidal table, pre-LN blocks, final LN, unembedding. No hooks."""

    def __init__(self, vocab: int, d: int, h: int, d_mlp: int, n_layers: int, max_len: int):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.register_buffer("pos", positional.sinusoidal(max_len, d), persistent=False)
        self.blocks = nn.ModuleList([BareBlock(d, h, d_mlp) for _ in range(n_layers)])
        self.ln_final = nn.LayerNorm(d)
        self.unembed = nn.Linear(d, vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) + self.pos[: tokens.shape[1]]  # [b p d]
        for block in self.blocks:
            x = block(x)
        return self.unembed(self.ln_final(x))  # [b p vocab]


@torch.no_grad()
def copy_weights(glass: nn.Module, bare: BareDecoder) -> None:
    """Give the bare model exactly the Glassbox model's weights (so both start from one point)."""
    stack = glass.stack
    bare.embed.weight.copy_(stack.W_E.weight)
    for gb, bb in zip(stack.blocks, bare.blocks):
        bb.ln1.load_state_dict(gb.ln1.ln.state_dict())
        bb.ln2.load_state_dict(gb.ln2.ln.state_dict())
        bb.qkv.weight.copy_(torch.cat([gb.attn.W_Q.weight, gb.attn.W_K.weight, gb.attn.W_V.weight]))
        bb.out.weight.copy_(gb.attn.W_O.weight)
        bb.fc1.load_state_dict(gb.mlp.W_in.state_dict())
        bb.fc2.load_state_dict(gb.mlp.W_out.state_dict())
    bare.ln_final.load_state_dict(stack.ln_final.ln.state_dict())
    bare.unembed.weight.copy_(glass.unembed.weight)


class BareLoop:
    """The same training recipe as core.train.Trainer, written out by hand around BareDecoder."""

    def __init__(self, trainer: Trainer):
        cfg = trainer.config
        self.trainer = trainer  # only for its batches (a pure function of seed and step) and settings
        self.model = BareDecoder(cfg.vocab_size, cfg.d_model, cfg.n_heads, cfg.d_mlp, cfg.n_layers, cfg.max_len)
        copy_weights(trainer.model, self.model)
        decay = [p for p in self.model.parameters() if p.dim() >= 2]
        rest = [p for p in self.model.parameters() if p.dim() < 2]
        wd = trainer.optimizer.param_groups[0]["weight_decay"]
        self.optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": wd},
                                            {"params": rest, "weight_decay": 0.0}], lr=trainer.lr, betas=(0.9, 0.98))
        self.step, self.accuracy = 0, []

    def run(self, n: int) -> None:
        t, task = self.trainer, self.trainer.task
        for _ in range(n):
            lr = t.lr * lr_factor(self.step, t.total, t.warmup, t.schedule)
            for group in self.optimizer.param_groups:
                group["lr"] = lr
            batch = t.batch_for(self.step)
            logits = self.model(batch.tokens)
            loss = F.cross_entropy(logits.flatten(0, 1), batch.targets.flatten(), ignore_index=IGNORE)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(self.model.parameters(), t.grad_clip)
            self.optimizer.step()
            self.step += 1
            with torch.no_grad():
                self.accuracy.append(task.accuracy(logits.detach(), batch))


def time_to_target(accuracy: list[float], seconds: list[float], target: float, window: int = 20):
    """(step, seconds) when the mean training accuracy of the last `window` steps first reaches target."""
    for i in range(window, len(accuracy) + 1):
        if sum(accuracy[i - window:i]) / window >= target:
            return i, seconds[i - 1]
    return None, math.nan


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=800)
    p.add_argument("--chunk", type=int, default=50)
    p.add_argument("--target", type=float, default=0.9)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    torch.set_num_threads(args.threads)

    task = get_task("induction")
    length = (4, task.default_length)  # the bundle's curriculum: repeats of 2..10 letters
    config = default_config(task, "decoder", pos="sinusoidal", norm="pre", length=length)
    trainer = Trainer(config, task, steps=args.steps, batch_size=args.batch_size, lr=3e-3, seed=args.seed,
                      warmup=100, embed_std=1.0, length=length)
    bare = BareLoop(trainer)

    glass_t, bare_t = [], []  # cumulative seconds after each step
    glass_total = bare_total = 0.0
    while trainer.step < args.steps:
        n = min(args.chunk, args.steps - trainer.step)
        start = time.perf_counter()
        trainer.run(n)
        glass_total += time.perf_counter() - start
        glass_t += [glass_total] * n  # chunk resolution is enough for a time-to-target
        start = time.perf_counter()
        bare.run(n)
        bare_total += time.perf_counter() - start
        bare_t += [bare_total] * n
        print(f"\rstep {trainer.step}/{args.steps}", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)

    glass_acc = [r["accuracy"] for r in trainer.history]
    g_step, g_sec = time_to_target(glass_acc, glass_t, args.target)
    b_step, b_sec = time_to_target(bare.accuracy, bare_t, args.target)
    rows = [("core.train (hooks)", args.steps / glass_total, g_step, g_sec, glass_acc[-1]),
            ("bare PyTorch loop", args.steps / bare_total, b_step, b_sec, bare.accuracy[-1])]
    print(f"induction decoder (lengths 4..10), 2 layers, d_model 64, 4 heads, batch {args.batch_size}, "
          f"{args.steps} steps, torch threads {args.threads}, target acc {args.target}")
    print(f"{'loop':<22}{'steps/s':>9}{'target step':>13}{'target s':>10}{'final acc':>11}")
    for name, sps, step, sec, acc in rows:
        print(f"{name:<22}{sps:>9.1f}{str(step):>13}{sec:>10.1f}{acc:>11.3f}")
    print(f"ratio core/bare: {glass_total / bare_total:.3f}x time per step"
          + ("" if math.isnan(g_sec) or math.isnan(b_sec) else f", {g_sec / b_sec:.3f}x time to target"))


if __name__ == "__main__":
    main()
