"""The two-head toy: a tiny model whose two heads split a two-lookup task between them.

The task (core.tasks.TwoLookupTask) asks each query two questions at once, one answered through
the letters and one through the digits of the memory items. The toy's embedding is fixed and
puts letters and digits in two orthogonal subspaces (dims 0-3 and 4-7), so after training one
head reads the letter subspace and the other the digit subspace, which `toy_report` measures
(where each head attends, and where its QK form W_Q W_K^T lives). Kept apart from the analyses
of trained models: it builds, seeds and trains its own model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import torch

from core.config import TransformerConfig
from core.device import one_thread
from core.model import Transformer
from core.tasks import TwoLookupTask, Vocab
from core.train import Trainer, init_model

TOY_D_MODEL = 16  # dims 0-3 letters, 4-7 digits, 8 "query", 9 "memory", 10-15 free for the model
TOY_D_HEAD = 4
TOY_FEATURES = ([f"letter {x}" for x in TwoLookupTask.letters] + [f"digit {x}" for x in TwoLookupTask.digits]
                + ["is query", "is memory"])
LETTER_DIMS, DIGIT_DIMS = slice(0, 4), slice(4, 8)
TOY_SEED = 0  # a seed whose two heads split the work cleanly in TOY_STEPS steps (others may share it)
TOY_STEPS = 600
TOY_LR = 3e-2
TOY_HEADS = (1, 2, 4)  # head counts the page offers, every one of width TOY_D_HEAD and trained the same way


def toy_embedding(vocab: Vocab) -> torch.Tensor:
    """The fixed token embedding `[vocab d_model]`: one-hot letter in dims 0-3, one-hot digit in 4-7, a role bit.

    Letters and digits live in two orthogonal subspaces by construction; specials are all zeros.
    """
    e = torch.zeros(len(vocab), TOY_D_MODEL)
    for i, tok in enumerate(vocab.tokens):
        if tok.startswith("<"):
            continue
        e[i, TwoLookupTask.letters.index(tok[0])] = 1.0
        e[i, 4 + TwoLookupTask.digits.index(tok[1])] = 1.0
        e[i, 8 if tok.endswith("?") else 9] = 1.0
    return e


def toy_config(task: TwoLookupTask, n_heads: int = 2) -> TransformerConfig:
    """One layer, `n_heads` heads of width 4 (two by default), no positions and no LayerNorm: nothing but
    the two lookups. Only the head count changes between the toys; everything else is the same recipe."""
    return TransformerConfig(arch="decoder", vocab_size=len(task.vocab), d_model=TOY_D_MODEL, n_heads=n_heads,
                             d_head=TOY_D_HEAD, n_layers=1, d_mlp=32, max_len=2 * task.max_length,
                             pos="none", norm="none")


def toy_model(task: TwoLookupTask, seed: int = 0, n_heads: int = 2) -> Transformer:
    """A fresh toy model whose weights depend only on `seed`; its embedding is fixed and frozen.

    core.train.init_model draws every weight from a local generator, never from torch's global
    RNG, which every thread of the server shares: sessions that build at the same time each get
    their seed's weights (the same ones the old global-seed build gave, so TOY_SEED keeps its meaning).
    """
    model = init_model(toy_config(task, n_heads), seed)
    with torch.no_grad():
        model.stack.W_E.weight.copy_(toy_embedding(task.vocab))
    model.stack.W_E.weight.requires_grad_(False)  # the inputs' subspaces stay put while the heads learn
    return model


def toy_trainer(seed: int = TOY_SEED, steps: int = TOY_STEPS, lr: float = TOY_LR, batch_size: int = 64,
                n_heads: int = 2):
    """A core.train.Trainer for the toy with `n_heads` heads (the page runs it in chunks to show progress).

    The recipe (steps, batches, learning rate, warm-up, seed) does not depend on the head count."""
    task = TwoLookupTask()
    return Trainer(toy_config(task, n_heads), task, steps=steps, batch_size=batch_size, lr=lr, seed=seed,
                   model=toy_model(task, seed, n_heads), warmup=20, log_every=25)


few_threads = one_thread  # the toy's 16-wide matrices run fastest on one thread (core.device.one_thread)


@dataclass
class ToyReport:
    """Where each toy head looks and which subspace its QK form lives in."""

    accuracy: float
    letter_attention: np.ndarray  # [head] mean weight from a query to the memory item sharing its letter
    digit_attention: np.ndarray  # [head] ... sharing its digit
    block_share: np.ndarray  # [head 3] share of ||W_Q W_K^T||^2 in letter x letter, digit x digit, the rest
    qk_forms: np.ndarray  # [head feature feature] W_Q W_K^T on the 10 input features
    example_tokens: list[str] = field(default_factory=list)
    example_pattern: Optional[np.ndarray] = None  # [head q k]

    @property
    def roles(self) -> list[str]:
        """'letters', 'digits' or 'mixed' per head: which lookup the head does.

        A head does a lookup when at least half its query attention lands on that item and the
        other item gets at most a quarter of what this one gets ((L - D) / (L + D) >= 0.6).
        """
        out = []
        for lt, dg in zip(self.letter_attention, self.digit_attention):
            spec = (lt - dg) / max(lt + dg, 1e-12)
            out.append("letters" if spec >= 0.6 and lt >= 0.5 else "digits" if spec <= -0.6 and dg >= 0.5 else "mixed")
        return out

    @property
    def separated(self) -> bool:
        """True when one head does the letter lookup and another the digit lookup (never with one head)."""
        return "letters" in self.roles and "digits" in self.roles


def toy_report(model: Transformer, n: int = 256, seed: int = 12345, example_seed: int = 7) -> ToyReport:
    """Measure the toy model on fresh examples: accuracy, match attention per head, QK block shares."""
    task = TwoLookupTask()
    batch = task.batch(n, "decoder", seed=seed)
    logits, cache = model.run_with_cache(batch.tokens, ["blocks.0.attn.hook_pattern"])
    pat = cache["blocks.0.attn.hook_pattern"].numpy()  # [batch head q k]
    n_mem = task.default_length
    letter, digit = np.zeros(pat.shape[1]), np.zeros(pat.shape[1])
    count = 0
    for b, meta in enumerate(batch.meta):
        mem_letters = [l for l, _ in meta["memory"]]
        mem_digits = [d for _, d in meta["memory"]]
        for j, (l, d) in enumerate(meta["queries"]):
            qpos = n_mem + j
            letter += pat[b, :, qpos, mem_letters.index(l)]
            digit += pat[b, :, qpos, mem_digits.index(d)]
            count += 1
    w = model.head_weights(0)
    feats = len(TOY_FEATURES)
    forms = np.stack([(w["W_Q"][h] @ w["W_K"][h].T)[:feats, :feats].double().numpy()
                      for h in range(model.cfg.n_heads)])  # [head feature feature]
    total = (forms ** 2).sum(axis=(1, 2))
    ll = (forms[:, LETTER_DIMS, LETTER_DIMS] ** 2).sum(axis=(1, 2))
    dd = (forms[:, DIGIT_DIMS, DIGIT_DIMS] ** 2).sum(axis=(1, 2))
    share = np.stack([ll, dd, total - ll - dd], axis=1) / np.maximum(total, 1e-30)[:, None]  # [head 3]
    example = task.batch(1, "decoder", seed=example_seed)
    _, ex_cache = model.run_with_cache(example.tokens, ["blocks.0.attn.hook_pattern"])
    return ToyReport(task.accuracy(logits, batch), letter / count, digit / count, share, forms,
                     task.vocab.decode(example.tokens[0]), ex_cache["blocks.0.attn.hook_pattern"][0].numpy())
