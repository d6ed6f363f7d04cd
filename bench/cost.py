"""Benchmark: the Cost page's measurements as tables, from the command line.

    python bench/cost.py                       # d = 64, n = 32 .. 1,024, on the best device
    python bench/cost.py --d 256 --nmax 2048   # a wider layer, longer inputs
    python bench/cost.py --device cpu --quick  # n up to 256, 3 repeats
    python bench/cost.py --device cuda --nmax 16384  # on a GPU: past the launch-bound sizes (or to memory)

Prints median times of explicit, fused (SDPA), block-sparse and chunked attention and of a tanh RNN
of the same width, their fitted log-log slopes against the predicted ones, the attention-vs-RNN
crossover against n = d, and the peak memory of a training step of explicit vs chunked attention and the RNN.
Slopes are fitted over the largest three n whose time has started to grow (launch-bound points, where
fixed per-call overhead hides the power law, are counted and left out); a GPU run warms up first.
It asserts nothing (these machines are shared); the numbers are the same the page shows.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from core.analysis import cost as A  # noqa: E402
from core.device import pick_device  # noqa: E402


def table(rows: list[dict]) -> str:
    """Rows of one table as aligned text."""
    columns = list(rows[0])
    cell = lambda v: f"{v:,}" if isinstance(v, int) else (f"{v:.3g}" if isinstance(v, float) else str(v))  # noqa: E731
    width = {c: max(len(c), *(len(cell(r[c])) for r in rows)) for c in columns}
    lines = [" | ".join(c.rjust(width[c]) for c in columns), "-+-".join("-" * width[c] for c in columns)]
    lines += [" | ".join(cell(r[c]).rjust(width[c]) for c in columns) for r in rows]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--d", type=int, default=64, help="width d_model (default 64)")
    parser.add_argument("--heads", type=int, default=4, help="heads h (default 4)")
    parser.add_argument("--block", type=int, default=32, help="block size b (default 32)")
    parser.add_argument("--nmax", type=int, default=1024, help="longest n, a power of two (default 1024)")
    parser.add_argument("--repeats", type=int, default=5, help="timed calls per point; the median is kept")
    parser.add_argument("--device", choices=("cuda", "mps", "cpu"), default=None, help="default: the best there is")
    parser.add_argument("--quick", action="store_true", help="n up to 256 and 3 repeats")
    args = parser.parse_args()
    nmax, repeats = (min(args.nmax, 256), 3) if args.quick else (args.nmax, args.repeats)
    ns, n = [], 32
    while n <= nmax:
        ns.append(n)
        n *= 2
    device = pick_device(args.device).type
    setting = A.Setting(ns=tuple(ns), d_model=args.d, n_heads=args.heads, block=args.block, repeats=repeats,
                        device=device).check()

    print(f"torch {torch.__version__} on {device}; d = {args.d}, {args.heads} heads, b = {args.block}, "
          f"median of {repeats}\n")
    sweep = A.time_sweep(setting)
    print("Time per call (ms):")
    print(table(A.time_table(sweep)))
    print("\nSlopes over the largest three n past the launch-bound points (none: launch-bound throughout):")
    print(table([{**row, "fitted slope": "none" if row["fitted slope"] is None else row["fitted slope"]}
                 for row in A.slope_table(sweep)]))
    if sweep.get("out_of_memory_at"):
        print(f"Stopped: n = {sweep['out_of_memory_at']:,} did not fit in memory.")
    found = A.crossover(sweep["ns"], sweep["ms"][A.EXPLICIT], sweep["ms"][A.RNN])
    print(f"\nExplicit attention vs RNN crossover: predicted n = d = {args.d}, measured "
          + ("none in range" if found is None else f"n = {found:,.0f}"))
    memory = A.memory_sweep(setting)
    print("\nPeak memory of one training step (forward + backward), MiB:")
    print(table(A.memory_table(memory)))
    slopes = {m: A.fit_loglog(memory["ns"], memory["bytes"][m])[0] for m in A.MEMORY_METHODS}
    print("\nMemory slopes: " + ", ".join(f"{m} {s:.2f} (predicted {A.PREDICTED_MEMORY_SLOPE[m]:g})"
                                          for m, s in slopes.items()))
    print(f"Measured {sweep['measured_at']}.")


if __name__ == "__main__":
    main()
