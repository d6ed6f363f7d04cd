"""Benchmark: hyper-connections trained (core.analysis.hyper_trained), a pair with and without, printed as a table.

    python -m bench.hyper_trained            # print the stored table
    python -m bench.hyper_trained --write    # train every seed of both variants and store the table

Both variants: HyperTransformer, 6 layers, d_model 32, 4 heads, sort (decoder, 8 digits), 600 AdamW steps, seeds
0-2; 4 Sinkhorn-mixed streams against one stream. The hyper variant takes about 3 minutes a seed on one core here
(Sinkhorn's iterations are differentiated), the single stream about 1. Writes
assets/precomputed/hyper_trained.json, which the Depth page reads.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from core.analysis import hyper_trained as H  # noqa: E402


def print_table(table: dict) -> None:
    print(f"{'variant':<30}{'seed':>5}{'accuracy':>10}{'final loss':>12}{'grad embed/top init':>21}"
          f"{'trained':>9}")
    for variant in H.VARIANTS:
        for r in H.runs_of(table, variant):
            print(f"{variant:<30}{r.seed:>5}{r.accuracy:>10.3f}{r.losses[-1]:>12.4f}"
                  f"{r.grad_init[0] / r.grad_init[-1]:>21.2f}{r.grad_trained[0] / r.grad_trained[-1]:>9.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true", help="train every seed of both variants and store the table")
    args = parser.parse_args()
    if args.write:
        import torch

        torch.set_num_threads(1)  # a bench process of its own: not library code
        runs = []
        for variant in H.VARIANTS:
            for seed in H.SEEDS:
                runs.append(H.run_cell(variant, seed))
                print(f"done: {variant}, seed {seed}: accuracy {runs[-1].accuracy:.3f}", flush=True)
        H.save_table(runs)
    table = H.load_table()
    if table is None:
        print("no stored table for these settings: run with --write")
        return
    print_table(table)


if __name__ == "__main__":
    main()
