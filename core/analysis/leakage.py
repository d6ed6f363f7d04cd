"""Two ways a sequence model can see the answer it is asked to predict, measured.

1. Through the encoder: an encoder-decoder whose bidirectional encoder also reads the target
   (the `sort-peek` task) can copy the answer through cross-attention. The gradient of the
   decoder's prediction at step t with respect to the embedding of a future target token y_k
   (k > t) shows the path: non-zero for that model, exactly zero for a properly built one.
2. Through the decoder's own mask: a tiny decoder trained with the full mask instead of the
   causal one reads the next token during training (its loss falls to about zero) and has
   nothing to read when it generates.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import torch
import torch.nn.functional as F

from core.config import TransformerConfig
from core.model import Transformer
from core.tasks import IGNORE, get_task
from core.train import derive_seed, init_model, lr_factor

LEAKY_TASK, PROPER_TASK = "sort-peek", "sort"


# ---------------------------------------------------------------------------------------------
# 1. Leakage through a bidirectional encoder
# ---------------------------------------------------------------------------------------------


def answer_positions(src: torch.Tensor, sep_id: int, n_answer: int) -> list[Optional[int]]:
    """Where y_1..y_n sit in a source `[1 pos]`: right after its <sep> (a leaky source), or nowhere
    (None each) when the source has no <sep>."""
    found = (src[0] == sep_id).nonzero()
    if len(found) == 0:
        return [None] * n_answer
    start = int(found[0]) + 1
    return [start + k if start + k < src.shape[1] else None for k in range(n_answer)]


def future_token_gradients(model: Transformer, src: torch.Tensor, tgt: torch.Tensor, sep_id: int) -> np.ndarray:
    """How strongly the decoder's prediction at step t depends on the target token y_k: `[t k]`.

    tgt is `<bos> y_1 .. y_n` `[1 n+1]`; row t is the prediction made at decoder position t (the
    logit of the token the model picks there: unlike its log-probability, it does not flatten out
    when the model is sure), column k - 1 is y_k. A cell is the norm of
    the gradient with respect to every embedding vector of y_k: its decoder input (position k) and,
    in a leaky source, its copy in the encoder's input. Explicit attention, so that masked weights
    are exactly zero and so are their gradients."""
    n_steps, n_answer = tgt.shape[1], tgt.shape[1] - 1
    in_source = answer_positions(src, sep_id, n_answer)
    out = np.zeros((n_steps, n_answer))
    for t in range(n_steps):
        def chosen_logit(logits: torch.Tensor, t: int = t) -> torch.Tensor:
            return logits[0, t].max()

        _, cache = model.run_with_cache(src, ["encoder.hook_embed", "decoder.hook_embed"], tgt=tgt,
                                        grad_of=chosen_logit, attn_impl="explicit")
        dec = cache["decoder.hook_embed_grad"][0]  # [tgt_pos d_model]
        enc = cache["encoder.hook_embed_grad"][0]  # [src_pos d_model]
        for k in range(1, n_answer + 1):
            squared = float((dec[k] ** 2).sum())
            if in_source[k - 1] is not None:
                squared += float((enc[in_source[k - 1]] ** 2).sum())
            out[t, k - 1] = squared ** 0.5
    return out


def future_mass(grads: np.ndarray) -> float:
    """The largest gradient above the diagonal of a `[t k]` map: cells with k > t (the future)."""
    t, k = np.indices(grads.shape)
    future = (k + 1) > t
    return float(grads[future].max()) if future.any() else 0.0


@torch.no_grad()
def hidden_answer_accuracy(leaky: Transformer, proper: Transformer, n_samples: int, seed: int,
                           length: Optional[int] = None) -> list[dict]:
    """Sequence accuracy (teacher-forced, as the bundle reports it) of the leaky model with the
    answer shown to its encoder and hidden from it, and of the properly built model, on the same
    digits (both tasks draw the same content from a seed)."""
    peek, plain = get_task(LEAKY_TASK), get_task(PROPER_TASK)
    seen = peek.batch(n_samples, "encoder-decoder", seed=seed, length=length)
    hidden = peek.hide_answer(seen.tokens)  # [batch pos]
    fair = plain.batch(n_samples, "encoder-decoder", seed=seed, length=length)
    return [
        {"model": "leaky (encoder reads the answer)", "answer in the source": "shown",
         "accuracy": peek.accuracy(leaky(seen.tokens, seen.tgt), seen)},
        {"model": "leaky (encoder reads the answer)", "answer in the source": "hidden (<pad>)",
         "accuracy": peek.accuracy(leaky(hidden, seen.tgt), seen)},
        {"model": "proper (encoder reads only the digits)", "answer in the source": "never there",
         "accuracy": plain.accuracy(proper(fair.tokens, fair.tgt), fair)},
    ]


# ---------------------------------------------------------------------------------------------
# 2. Why the decoder is masked: a tiny decoder trained with the full mask
# ---------------------------------------------------------------------------------------------

TINY_TASK = "copy"
TINY_LENGTH = 4
MASKS = ("causal", "full")


def tiny_config() -> TransformerConfig:
    """A decoder small enough to train in a few seconds on the copy task at length 4."""
    task = get_task(TINY_TASK)
    return TransformerConfig(arch="decoder", vocab_size=len(task.vocab), d_model=32, n_heads=2, n_layers=2,
                             d_mlp=64, max_len=2 * TINY_LENGTH + 3, pos="sinusoidal")


def mask_for(kind: str, n: int) -> Optional[torch.Tensor]:
    """The training mask: None (the model's own causal one) or all-True (every query sees every key)."""
    if kind not in MASKS:
        raise ValueError(f"mask must be one of {list(MASKS)}, got {kind!r}")
    return None if kind == "causal" else torch.ones(n, n, dtype=torch.bool)


def train_tiny_decoder(kind: str, seed: int, steps: int = 300, batch_size: int = 64,
                       lr: float = 1e-2) -> tuple[Transformer, np.ndarray]:
    """Train the tiny decoder under mask `kind` ("causal" or "full"); returns the model and the
    loss of every step `[step]`. Weights from a local generator (core.train.init_model) and
    batches from the task's own seeded sampler: the same seed gives the same model in any thread."""
    task = get_task(TINY_TASK)
    model = init_model(tiny_config(), seed, embed_std=1.0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.98), weight_decay=0.0)
    losses = []
    model.train()
    for step in range(steps):
        for group in optimizer.param_groups:
            group["lr"] = lr * lr_factor(step, steps, warmup=20)  # warm up, then a cosine decay
        batch = task.batch(batch_size, "decoder", seed=derive_seed(seed, 7, step), length=TINY_LENGTH)
        logits = model(batch.tokens, mask=mask_for(kind, batch.tokens.shape[1]))  # [batch pos vocab]
        loss = F.cross_entropy(logits.flatten(0, 1), batch.targets.flatten(), ignore_index=IGNORE)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model, np.array(losses)


@torch.no_grad()
def greedy_with_mask(model: Transformer, prompt: torch.Tensor, steps: int, kind: str) -> torch.Tensor:
    """Greedy decoding by recomputation under the mask the model was trained with: `[batch pos+steps]`.
    The last position sees every earlier one under either mask; what differs is what the model
    learned to look for."""
    out = prompt
    for _ in range(steps):
        logits = model(out, mask=mask_for(kind, out.shape[1]))  # [batch pos vocab]
        out = torch.cat([out, logits[:, -1].argmax(-1, keepdim=True)], dim=1)  # [batch pos+1]
    return out


@torch.no_grad()
def tiny_report(model: Transformer, kind: str, n_samples: int = 128, seed: int = 99) -> dict:
    """Teacher-forced sequence accuracy (what training sees) and greedy accuracy (what generation
    gets) on fresh examples, and one greedy example as tokens."""
    task = get_task(TINY_TASK)
    batch = task.batch(n_samples, "decoder", seed=seed, length=TINY_LENGTH)
    forced = task.accuracy(model(batch.tokens, mask=mask_for(kind, batch.tokens.shape[1])), batch)
    prompt_len = TINY_LENGTH + 2  # <bos> x1..xn <sep>
    generated = greedy_with_mask(model, batch.tokens[:, :prompt_len], TINY_LENGTH + 1, kind)  # [batch 2n+3]
    right = (generated[:, prompt_len:] == batch.tokens[:, prompt_len:]).all(dim=1)  # [batch]
    return {"teacher-forced accuracy": forced, "greedy accuracy": float(right.float().mean()),
            "example prompt": task.vocab.decode(batch.tokens[0, :prompt_len]),
            "example generated": task.vocab.decode(generated[0, prompt_len:]),
            "example right answer": task.vocab.decode(batch.tokens[0, prompt_len:])}
