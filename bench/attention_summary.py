"""The parts of a temperature change at 1,024 tokens, each against the way it was done before, in one run.

A temperature change on the Attention page runs the model again with every layer's pattern hooked, and from each
pattern takes the row entropies and a max-pooled overview, then the top predictions from the logits
(ui/attention/runs.py `_summary`). On one layer of 4 heads x 1,024 x 1,024 (a d_model-128 decoder's) and the
logits of 1,024 positions over 4,096 tokens, this times, interleaved, medians of --repeats:

- scores: q.k into a fresh tensor, against the call's reused scratch tensor (RunState.scratch);
- mask: masked_fill into a new tensor with the mask inverted at every head, against masked_fill_ into the scores
  with the mask inverted once (core.model.masked_softmax, hidden_keys);
- entropy: torch.special.entr summed in float64, against A.entropy_bits' log2 into a reused temporary;
- pooling: torch's max_pool2d, against heatmaps.pool's one axis at a time over strided views;
- predictions: a float64 softmax of 128 positions at a time, against top_predictions.

Each pair is checked to give the same numbers first. The process takes the server's settings (ui.server.process:
one torch thread, glibc's mmap threshold at 1 MB, under which a fresh tensor of a megabyte or more faults in its
pages each time).

Run: python bench/attention_summary.py [--repeats 15]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

N, HEADS, D_HEAD, VOCAB = 1024, 4, 32, 4096


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()

    from ui.server import process

    process.set_up()  # the server's settings: one torch thread, the malloc thresholds
    import numpy as np
    import torch

    from core import masks
    from core.analysis import attention as A
    from core.figures.heatmaps import pool
    from core.hooks import RunState
    from core.model import hidden_keys

    gen = torch.Generator().manual_seed(0)
    q = torch.randn(1, HEADS, N, D_HEAD, generator=gen)  # [batch head q d_head]
    k = torch.randn(1, HEADS, N, D_HEAD, generator=gen)
    mask = masks.causal(N).expand(1, HEADS, N, N)  # [batch head q k], stride 0 on batch and heads
    scores = q @ k.transpose(-2, -1)  # [batch head q k]
    pattern = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)[0]  # [head q k]
    logits = torch.randn(1, N, VOCAB, generator=gen) * 3  # [1 pos vocab]
    state = RunState()
    scratch = torch.empty(N, N)

    def scores_fresh():
        return q @ k.transpose(-2, -1)

    def scores_reused():
        return torch.matmul(q, k.transpose(-2, -1), out=state.scratch((1, HEADS, N, N), q))

    def mask_before():
        return scores_reused().masked_fill(~mask, float("-inf"))

    def mask_now():
        return scores_reused().masked_fill_(hidden_keys(mask), float("-inf"))

    def entropy_before():
        return np.stack([(torch.special.entr(h).sum(-1, dtype=torch.float64) / np.log(2)).numpy() for h in pattern])

    def entropy_now():
        return np.stack([A.entropy_bits(h, scratch).numpy() for h in pattern])

    def pool_before():
        return torch.nn.functional.max_pool2d(pattern, (4, 4), ceil_mode=True).numpy()

    def pool_now():
        return pool(pattern.numpy(), (4, 4))

    def predictions_before():
        best, top = [], []
        for start in range(0, N, A.PREDICTION_ROWS):
            probs = torch.softmax(logits[0, start:start + A.PREDICTION_ROWS].double(), dim=-1)  # [rows vocab]
            values, ids = probs.max(dim=-1)
            best.append(ids.numpy())
            top.append(values.numpy())
        return np.concatenate(best), np.concatenate(top)

    def predictions_now():
        ids, top, _ = A.top_predictions(logits, None)
        return ids, top

    pairs = [("scores q.k", scores_fresh, scores_reused), ("scores, then the mask", mask_before, mask_now),
             ("row entropies", entropy_before, entropy_now), ("max pooling", pool_before, pool_now),
             ("top predictions", predictions_before, predictions_now)]
    torch.testing.assert_close(scores_fresh(), scores_reused().clone())
    torch.testing.assert_close(mask_before(), mask_now().clone())
    np.testing.assert_allclose(entropy_before(), entropy_now(), atol=1e-5)
    np.testing.assert_array_equal(pool_before(), pool_now())
    (ids0, top0), (ids1, top1) = predictions_before(), predictions_now()
    np.testing.assert_array_equal(ids0, ids1)
    np.testing.assert_allclose(top0, top1, rtol=1e-6)

    times = {name: ([], []) for name, _, _ in pairs}
    for _ in range(args.repeats):
        for name, before, now in pairs:
            times[name][0].append(timed(before))
            times[name][1].append(timed(now))

    print(f"\nOne layer of {HEADS} heads x {N:,} x {N:,} and the logits of {N:,} positions x {VOCAB:,}; medians of "
          f"{args.repeats}, interleaved; torch {torch.__version__}, {torch.get_num_threads()} thread(s)\n")
    print("| part | before (ms) | now (ms) | now / before |")
    print("|---|---:|---:|---:|")
    for name, _, _ in pairs:
        before, now = (statistics.median(t) * 1e3 for t in times[name])
        print(f"| {name} | {before:.2f} | {now:.2f} | {now / before:.2f}x |")


if __name__ == "__main__":
    main()
