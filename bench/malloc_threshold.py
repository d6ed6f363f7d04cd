"""What a fixed mmap threshold costs in speed: the same work in fresh processes, with glibc's default
(a threshold that rises with the blocks a program frees) and with ui.server.allocator's fixed one.

A fixed threshold gives every block of 128 KiB or more its own mapping, returned to the system the
moment it is freed: that keeps the heap from filling with the freed buffers of a class (docs/classroom-benchmark.md,
"Memory"), but each such block costs a fresh mapping and its page faults. Three workloads, timed in
child processes that alternate between the two settings so a change in the machine's load touches
both alike:

- train: 150 steps of core.train.Trainer at the teaching size (the Train page's work)
- forward: 200 hooked forward passes (64 tokens, or the model's longest) caching every hook (a first visit's run)
- page: 12 reruns of the Masks page under AppTest (figures serialised, tables, the page's Python)

    python bench/malloc_threshold.py [--rounds 4]

    python bench/malloc_threshold.py --thresholds 128,1024,4096

Prints medians per workload, and each fixed threshold's ratio to the default.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def child() -> None:
    """Run the three workloads in this process (with or without the fixed threshold) and print seconds."""
    import torch

    torch.set_num_threads(1)
    from ui.server import allocator

    allocator.cap_arenas()
    threshold = int(os.environ.get("GLASSBOX_BENCH_THRESHOLD", "0"))
    if threshold:
        allocator.fix_mmap_threshold(threshold)
    from core.train import Trainer, default_config

    timings = {}
    trainer = Trainer(default_config("induction", "decoder"), "induction", steps=150, seed=0)
    t = time.perf_counter()
    trainer.run(150)
    timings["train"] = time.perf_counter() - t

    model = trainer.model.eval()
    cfg = trainer.config
    tokens = torch.randint(0, cfg.vocab_size, (1, min(64, cfg.max_len)), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        model.run_with_cache(tokens)
        t = time.perf_counter()
        for _ in range(200):
            model.run_with_cache(tokens)
        timings["forward"] = time.perf_counter() - t

    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "pages" / "masks.py"), default_timeout=120)
    at.run()
    at.run()
    t = time.perf_counter()
    for _ in range(12):
        at.run()
    timings["page"] = time.perf_counter() - t
    print(json.dumps(timings))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--thresholds", default="",
                        help="fixed thresholds to compare, in KiB, comma-separated (default: ui.server.allocator's)")
    args = parser.parse_args()
    from_ui = __import__("ui.server.allocator", fromlist=["MMAP_THRESHOLD"]).MMAP_THRESHOLD // 1024
    fixed = [int(k) for k in args.thresholds.split(",") if k.strip()] or [from_ui]
    settings = {"default": 0, **{f"fixed {k} KiB": k * 1024 for k in fixed}}
    results: dict[str, dict[str, list[float]]] = {name: {} for name in settings}
    for _ in range(args.rounds):
        for setting, threshold in settings.items():
            env = dict(os.environ, GLASSBOX_BENCH_THRESHOLD=str(threshold), GLASSBOX_WARMUP="0")
            env.pop("MALLOC_MMAP_THRESHOLD_", None)
            out = subprocess.run([sys.executable, __file__, "--child"], cwd=ROOT, env=env, capture_output=True,
                                 text=True, check=True).stdout.strip().splitlines()[-1]
            for name, seconds in json.loads(out).items():
                results[setting].setdefault(name, []).append(seconds)
    print(f"\nmedians of {args.rounds} fresh processes each, alternating (seconds)\n")
    print(f"{'workload':10s} " + " ".join(f"{name:>15s} {'ratio':>6s}" for name in settings))
    for work in results["default"]:
        base = statistics.median(results["default"][work])
        cells = [(statistics.median(results[name][work]), statistics.median(results[name][work]) / base)
                 for name in settings]
        print(f"{work:10s} " + " ".join(f"{m:15.3f} {r:6.2f}" for m, r in cells))
    return 0


if __name__ == "__main__":
    if "--child" in sys.argv:
        child()
    else:
        sys.exit(main())
