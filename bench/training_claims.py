"""Benchmark: two training claims measured over seeds (core.analysis.training_claims), printed as tables.

    python -m bench.training_claims                 # print the stored table
    python -m bench.training_claims --write         # run the missing cells, store them as they finish
    python -m bench.training_claims --write --workers 2 --depths 2 4

The plain-dot hint (d_model 128, 2 heads): the step at which the loss first falls under 1 and the final
accuracy, scaled dot against plain dot. The warm-up comparison (learning rate 0.007): how many seeds of
pre-LN and post-LN stacks of 2, 4 and 6 layers reach 99% accuracy with no warm-up, 30 and 100 warm-up steps.
Each run takes 20-40 s on two CPU cores; --write skips cells already stored, so it can be resumed.
"""

from __future__ import annotations

import argparse
import json
import sys
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from core.analysis import training_claims as C  # noqa: E402


def _one(job: tuple) -> tuple:
    """A worker's run: one thread per worker, so two workers share two cores without fighting."""
    import torch

    torch.set_num_threads(1)  # a bench process of its own: not library code
    kind, key, settings = job
    return kind, key, C.run_cell(settings)


def print_tables(table: dict) -> None:
    """The score table and the warm-up table as text."""
    print("Plain dot vs scaled dot (reverse, encoder, d_model 128, 2 heads, 300 steps): step loss < 1, accuracy")
    for score in C.SCORES:
        runs = C.outcomes(table, "score", score=score)
        steps = ", ".join(str(o.steps_to_target) for o in runs)
        accs = ", ".join(f"{o.accuracy:.3f}" for o in runs)
        print(f"  {score:>10}: steps [{steps}]  accuracy [{accs}]  initial score spread (seed 0) "
              f"{table.get('initial_score_std', {}).get(score, float('nan')):.3f}")
    print(f"Reached {C.LEARNED:.0%} accuracy (reverse, encoder, lr {C.NORM_LR}, 300 steps), seeds learned / run")
    for depth in C.DEPTHS:
        cells = []
        for norm in C.NORMS:
            for warmup in C.WARMUPS:
                learned, n = C.learned_count(C.outcomes(table, "norm", norm=norm, layers=depth, warmup=warmup))
                cells.append(f"{norm}-LN wu{warmup}: {learned}/{n}")
        print(f"  {depth} layers: " + " | ".join(cells))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true", help="run the missing cells and store them")
    parser.add_argument("--workers", type=int, default=1, help="processes, one thread each (default 1)")
    parser.add_argument("--depths", type=int, nargs="*", default=list(C.DEPTHS), help="depths to run")
    args = parser.parse_args()
    table = C.load_table()
    if args.write:
        table["settings"] = C.settings_record()
        table["initial_score_std"] = {score: C.initial_score_spread(C.score_settings(score, 0)) for score in C.SCORES}
        done = {(kind, key, row["seed"]) for kind in ("score", "norm") for key, rows in table.get(kind, {}).items()
                for row in rows}
        jobs = [(kind, key, s) for kind, key, s in C.all_cells()
                if (kind, key, s.seed) not in done and (kind == "score" or s.n_layers in args.depths)]
        print(f"{len(jobs)} runs to do", flush=True)
        with ProcessPoolExecutor(max_workers=args.workers) as pool:
            for future in as_completed([pool.submit(_one, job) for job in jobs]):
                kind, key, outcome = future.result()
                C.add_outcome(table, kind, key, outcome)
                C.TABLE_PATH.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
                print(kind, key, outcome, flush=True)
        C.TABLE_PATH.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")  # the settings and spreads too
    print_tables(table)


if __name__ == "__main__":
    main()
