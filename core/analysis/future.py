"""A state that attends to its future: the local-peaks twins, bidirectional encoder against causal decoder.

The principles text's time-series example: a reading's meaning can depend on LATER readings. On the
`peaks` task (is each reading higher than both neighbours?) the label of reading i depends on reading
i + 1. Both bundled twins are scored on the same fresh series, drawn here from a local torch.Generator,
beside the best any causal predictor can do (`PeaksTask.causal_ceiling`), and the encoder's attention is
measured where it looks: the weight each reading puts on keys after itself (k > q), per layer.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from core.model import Transformer
from core.tasks import IGNORE, PeaksTask

FUTURE_SEED = 2024  # fresh series: a seed no training batch used (training draws its own derived seeds)


def fresh_series(task: PeaksTask, n: int, length: int, seed: int = FUTURE_SEED) -> tuple[torch.Tensor, torch.Tensor]:
    """(tokens [n 1+length], targets [n 1+length]): n random series of `length` readings from a local
    torch.Generator, labelled by the task's rule (IGNORE at <bos>)."""
    task.check_length(length)
    g = torch.Generator().manual_seed(int(seed))
    readings = torch.randint(0, 10, (n, length), generator=g)  # [n length]
    rows = [["<bos>", *(str(int(d)) for d in row)] for row in readings]
    tokens = torch.tensor([task.vocab.encode(r) for r in rows], dtype=torch.long)  # [n 1+length]
    targets = torch.tensor([task.label(r, "encoder") for r in rows], dtype=torch.long)  # [n 1+length]
    return tokens, targets


def accuracy(model: Transformer, tokens: torch.Tensor, targets: torch.Tensor) -> float:
    """The share of scored positions whose argmax is the right label."""
    with torch.no_grad():
        preds = model(tokens.to(model.device)).argmax(-1).cpu()  # [n pos]
    scored = targets != IGNORE
    return float((preds == targets)[scored].float().mean())


def future_mass(model: Transformer, tokens: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """([layer] weight a reading puts on keys after itself (k > q), [layer] weight on the next reading alone
    (k = q + 1)), each the mean over heads, readings (queries 1..n, not <bos>) and examples. A causal model's
    are 0 by construction."""
    _, cache = model.run_with_cache(tokens.to(model.device), names="*attn.hook_pattern")
    n = tokens.shape[1]
    after = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)  # [q k]: k > q
    ahead, nxt = [], []
    for i in range(model.cfg.n_layers):
        pattern = cache[f"blocks.{i}.attn.hook_pattern"].double().cpu()  # [batch head q k]
        ahead.append(float((pattern * after).sum(-1)[:, :, 1:].mean()))  # readings only
        nxt.append(float(torch.diagonal(pattern, offset=1, dim1=-2, dim2=-1)[:, :, 1:].mean()))  # [batch head q-1]
    return np.array(ahead), np.array(nxt)


def uniform_mass(length: int) -> tuple[float, float]:
    """What a row spread evenly over all 1 + length keys would give: (weight on later keys, on the next one),
    averaged over the readings as `future_mass` averages them (the last reading has no next one)."""
    n = length + 1
    later = np.mean([(n - 1 - q) / n for q in range(1, n)])
    nxt = np.mean([1 / n if q < n - 1 else 0.0 for q in range(1, n)])
    return float(later), float(nxt)


@dataclass
class FutureComparison:
    """The twins on the same fresh series: accuracy, the causal ceiling, attention to the future, one example."""

    n_examples: int
    length: int
    accuracy: dict[str, float]  # "encoder", "decoder"
    ceiling: float  # the best expected accuracy of any causal predictor at this length
    future: dict[str, np.ndarray]  # [layer] weight on keys after the query
    next_one: dict[str, np.ndarray]  # [layer] weight on the next reading
    uniform: tuple[float, float]  # an even spread's weight on later keys and on the next one
    tokens: list[str]  # one example
    targets: list[int]
    predictions: dict[str, list[str]]
    pattern: np.ndarray  # [layer q k] the encoder's attention on the example, mean over heads


def compare(encoder: Transformer, decoder: Transformer, task: PeaksTask, n: int = 512, length: int = 8,
            seed: int = FUTURE_SEED) -> FutureComparison:
    """Score both twins on the same n fresh series and measure their attention to the future (see the module doc)."""
    tokens, targets = fresh_series(task, n, length, seed)
    models = {"encoder": encoder, "decoder": decoder}
    acc = {name: accuracy(m, tokens, targets) for name, m in models.items()}
    masses = {name: future_mass(m, tokens) for name, m in models.items()}
    one = tokens[:1]
    preds = {}
    for name, m in models.items():
        with torch.no_grad():
            preds[name] = task.vocab.decode(m(one.to(m.device))[0].argmax(-1).cpu())
    _, cache = encoder.run_with_cache(one.to(encoder.device), names="*attn.hook_pattern")
    pattern = np.stack([cache[f"blocks.{i}.attn.hook_pattern"][0].double().mean(0).cpu().numpy()
                        for i in range(encoder.cfg.n_layers)])  # [layer q k]
    return FutureComparison(n, length, acc, task.causal_ceiling(length),
                            {name: m[0] for name, m in masses.items()}, {name: m[1] for name, m in masses.items()},
                            uniform_mass(length), task.vocab.decode(one[0]), targets[0].tolist(), preds, pattern)
