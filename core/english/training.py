"""Training and held-out evaluation of the two English models.

One loop serves both: AdamW (decay on matrices only), linear warm-up then cosine decay to a tenth of the
peak rate (core.train.lr_factor), gradient clipping. The weights start from a local torch.Generator
(core.train.init_model, via `draws_from`); batches come from another (core.english.data), both seeded
from the recipe's seed, so a run is a function of its seed and never touches the global RNG.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

import torch
import torch.nn.functional as F
from torch import nn

from core import positional
from core.english import data, tokenizer
from core.english.recipe import Recipe
from core.model import Transformer
from core.train import derive_seed, init_model, lr_factor
from core.config import TransformerConfig

INIT_STREAM, DATA_STREAM, EVAL_STREAM = 0, 1, 2  # seeds derived from (seed, stream, model)
DECODER, ENCODER = 0, 1


def generator(seed: int, stream: int, which: int) -> torch.Generator:
    """A CPU generator of its own for one use (init, data, evaluation) of one model."""
    return torch.Generator().manual_seed(derive_seed(seed, stream, which))


@dataclass
class Progress:
    """What the progress callback sees."""

    model: str  # "decoder" or "encoder"
    step: int
    total: int
    loss: float
    seconds: float


@dataclass
class Run:
    """A finished training run."""

    model: Transformer  # eval mode, on the device it trained on
    steps: int
    tokens: int  # tokens read (inputs of every window)
    seconds: float  # wall time of the training loop
    cpu_seconds: float = 0.0  # this process's CPU time in the loop (all threads)
    losses: list[float] = field(default_factory=list)  # every step's loss
    repeated_windows: int = 0  # decoder windows that carried a repeated passage
    random_windows: int = 0  # decoder windows that carried a repeated stretch of random tokens


def fresh_model(config: TransformerConfig, r: Recipe, which: int) -> Transformer:
    """A model drawn from its own generator; its learned position table then starts as the sinusoidal table
    (scaled to r.position_init_std), so t and t - 1 are related by a fixed rotation from the first step and a
    previous-token head can form early, instead of 1,024 random rows each learning where it is (a RoPE model has no
    table: its positions are relative from the first step)."""
    model = init_model(config, generator=generator(r.seed, INIT_STREAM, which))
    if r.position_init_std > 0 and config.pos == "learned":
        table = positional.sinusoidal(config.max_len, config.d_model)  # [pos d_model], entries of std 1/sqrt(2)
        with torch.no_grad():
            model.stack.W_pos.weight.copy_(table * (r.position_init_std * math.sqrt(2)))
    return model


def _optimizer(model: nn.Module, lr: float, weight_decay: float) -> torch.optim.AdamW:
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                              {"params": rest, "weight_decay": 0.0}], lr=lr, betas=(0.9, 0.95),
                             fused=True)  # one kernel for all parameters: the unfused step cost 0.05-1 s on CPU


def _train(model: Transformer, next_batch: Callable[[int], tuple[torch.Tensor, torch.Tensor, tuple[int, int]]],
           steps: int,
           lr: float, r: Recipe, device: torch.device, name: str,
           callback: Optional[Callable[[Progress], None]]) -> Run:
    """The shared loop: next_batch(step) -> (tokens, targets, (windows with a repeated passage, windows with
    repeated random tokens)), cross-entropy over scored targets."""
    model.to(device).train()
    optimizer = _optimizer(model, lr, r.weight_decay)
    run = Run(model, 0, 0, 0.0)
    start, cpu_start = time.perf_counter(), time.process_time()
    for step in range(steps):
        tokens, targets, extra = next_batch(step)
        for group in optimizer.param_groups:
            group["lr"] = lr * lr_factor(step, steps, min(r.warmup, max(1, steps // 10)))
        logits = model(tokens.to(device))  # [batch pos vocab]
        loss = F.cross_entropy(logits.flatten(0, 1), targets.to(device).flatten(), ignore_index=data.IGNORE)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), r.grad_clip)
        optimizer.step()
        run.steps, run.tokens = step + 1, run.tokens + tokens.numel()
        run.repeated_windows += extra[0]
        run.random_windows += extra[1]
        run.losses.append(float(loss.detach()))
        if callback is not None and ((step + 1) % 25 == 0 or step + 1 == steps):
            callback(Progress(name, step + 1, steps, run.losses[-1], time.perf_counter() - start))
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    run.seconds = time.perf_counter() - start
    run.cpu_seconds = time.process_time() - cpu_start
    model.eval()
    return run


def phase_windows(batch: int, context: int, window: int, long_share: float, step: int, steps: int) -> tuple[int, int]:
    """(windows, tokens in each) of a batch at `step` of `steps`: with a window (> 0), short windows first (more
    of them, the same tokens a step: a short window's gradient reaches each relative offset more often) and
    whole `context` windows for the last `long_share` of the steps (a RoPE model reads no further than it was
    trained to, so the context it is sold with is trained too)."""
    if not window or window >= context or step >= steps * (1 - long_share):
        return batch, context
    return batch * context // window, window


def decoder_windows(r: Recipe, step: int, steps: int) -> tuple[int, int]:
    """The decoder's (windows, tokens in each) at `step` of `steps` (phase_windows with r.decoder_window)."""
    return phase_windows(r.decoder_batch, r.decoder_context, r.decoder_window, r.long_share, step, steps)


def encoder_windows(r: Recipe, step: int, steps: int) -> tuple[int, int]:
    """The encoder's (windows, tokens in each) at `step` of `steps` (phase_windows with r.encoder_window)."""
    return phase_windows(r.encoder_batch, r.encoder_context, r.encoder_window, r.long_share, step, steps)


def train_decoder(config: TransformerConfig, text: torch.Tensor, r: Recipe, device: torch.device,
                  callback: Optional[Callable[[Progress], None]] = None) -> Run:
    """The causal LM on packed windows of the training stream (some with a repeated passage, some with
    repeated random tokens drawn from the ordinary, non-special ids); short windows first (decoder_windows)."""
    model = fresh_model(config, r, DECODER)
    draws = generator(r.seed, DATA_STREAM, DECODER)
    random_ids = (len(tokenizer.SPECIALS), config.vocab_size)

    def next_batch(step: int):
        windows, length = decoder_windows(r, step, r.decoder_steps)
        b = data.decoder_batch(text, windows, length, draws, r.repeat_share, r.repeat_span,
                               r.random_share, r.random_span, random_ids)
        return b.tokens, b.targets, (b.repeated, b.random_repeats)

    return _train(model, next_batch, r.decoder_steps, r.decoder_lr, r, device, "decoder", callback)


def train_encoder(config: TransformerConfig, text: torch.Tensor, ids: data.MaskIds, r: Recipe,
                  device: torch.device, callback: Optional[Callable[[Progress], None]] = None) -> Run:
    """The masked LM on [CLS] text [SEP] windows of the training stream, r.mask_share of the ordinary tokens
    chosen; short windows first (encoder_windows)."""
    model = fresh_model(config, r, ENCODER)
    draws = generator(r.seed, DATA_STREAM, ENCODER)

    def next_batch(step: int):
        windows, length = encoder_windows(r, step, r.encoder_steps)
        b = data.encoder_batch(text, windows, length, draws, ids, r.short_share, r.short_range, r.mask_share)
        return b.tokens, b.targets, (0, 0)

    return _train(model, next_batch, r.encoder_steps, r.encoder_lr, r, device, "encoder", callback)


# ---------------------------------------------------------------------------------------------
# Held-out evaluation


@torch.no_grad()
def decoder_perplexity(model: Transformer, text: torch.Tensor, context: int) -> dict:
    """exp(mean next-token loss) over every target of the held-out stream `[n]`, windows of `context`."""
    model.eval()
    device = model.device
    total, count = 0.0, 0
    for tokens, targets in data.eval_windows(text, context):
        logits = model(tokens.to(device))  # [1 pos vocab]
        total += float(F.cross_entropy(logits[0].float(), targets[0].to(device), reduction="sum"))
        count += targets.numel()
    return {"perplexity": math.exp(total / count), "targets": count}


@torch.no_grad()
def encoder_fill(model: Transformer, batches: list[data.EncoderBatch]) -> tuple[dict, torch.Tensor]:
    """Masked-token accuracy and perplexity over the held-out batches; also the predictions' log-probs
    are not kept (only the answers, `[m]`, for the baseline to be scored on the same slots)."""
    model.eval()
    device = model.device
    right, nll, count = 0, 0.0, 0
    answers = []
    for b in batches:
        logits = model(b.tokens.to(device)).float()  # [batch pos vocab]
        scored = b.targets != data.IGNORE  # [batch pos]
        picked = logits[scored.to(device)]  # [m vocab]
        truth = b.targets[scored].to(device)  # [m]
        right += int((picked.argmax(dim=1) == truth).sum())
        nll += float(F.cross_entropy(picked, truth, reduction="sum"))
        count += truth.numel()
        answers.append(truth.cpu())
    if count == 0:
        return {"accuracy": math.nan, "perplexity": math.nan, "slots": 0}, torch.empty(0, dtype=torch.long)
    return {"accuracy": right / count, "perplexity": math.exp(nll / count), "slots": count}, torch.cat(answers)
