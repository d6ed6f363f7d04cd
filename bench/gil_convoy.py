"""How long small torch work takes while other threads run Python, at several switch intervals.

Torch releases the interpreter lock around every operation and must take it back afterwards; while
another thread runs Python, CPython makes it wait until that thread is asked to let go, after the
switch interval (5 ms by default). A Streamlit server runs every session's script in its own
thread, so a rerun's small torch calls (a hooked forward pass of a tiny model, a table computed
in torch) queue behind every other student's page drawing. This prints, for 1, 2 and 4 threads
spinning in pure Python beside one worker thread:

- the worker's time for three workloads: the Masks page's leak table (about 150 tiny torch calls),
  one hooked forward pass of a bundled model on 16 tokens (every hook captured), and 150 small
  numpy calls (which keep the lock: small arrays never release it);
- how much Python the spinning threads got done per second, relative to the 5 ms default.

Ratios against the 5 ms default measured in the same run; a script that prints a table, not a test.
Usage: python bench/gil_convoy.py [--repeats 9] [--intervals 5,1,0.5,0.2]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from core import checkpoints  # noqa: E402
from core.analysis import masks as A  # noqa: E402


def spin(stop: threading.Event, done: list[int]) -> None:
    """Pure Python until told to stop, counting the loops it finished."""
    while not stop.is_set():
        x = 0
        for i in range(1000):
            x += i * i
        done[0] += 1


def workloads():
    """name -> a callable doing one unit of the worker's job."""
    model, _ = checkpoints.load_bundled("induction-rope")
    model.eval()
    tokens = torch.arange(16).remainder(model.cfg.vocab_size).unsqueeze(0)  # [1 T]

    def hooked_forward():
        with torch.no_grad():
            model.run_with_cache(tokens)

    def small_numpy():
        a = np.zeros(8)
        for _ in range(150):
            a = np.exp(a - a.max())

    return {"leak table (torch, ~150 calls)": lambda: A.leak_table(30.0, 7, 1e-6),
            "hooked forward, 16 tokens": hooked_forward,
            "150 small numpy calls": small_numpy}


def measure(work, spinners: int, interval_s: float, repeats: int) -> tuple[float, float, float]:
    """(p50 s, p90 s, spinners' loops per second) for `work` run `repeats` times beside `spinners` threads."""
    sys.setswitchinterval(interval_s)
    stop, counters = threading.Event(), [[0] for _ in range(spinners)]
    threads = [threading.Thread(target=spin, args=(stop, c), daemon=True) for c in counters]
    for t in threads:
        t.start()
    time.sleep(0.05)
    times, start, loops0 = [], time.perf_counter(), sum(c[0] for c in counters)
    try:
        for _ in range(repeats):
            t0 = time.perf_counter()
            work()
            times.append(time.perf_counter() - t0)
            time.sleep(0.005)  # as a page does between two calls
        rate = (sum(c[0] for c in counters) - loops0) / (time.perf_counter() - start)
    finally:
        stop.set()
        for t in threads:
            t.join()
    times.sort()
    return statistics.median(times), times[min(len(times) - 1, int(0.9 * len(times)))], rate


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--intervals", default="5,1,0.5,0.2", help="switch intervals in ms; the first is the baseline")
    parser.add_argument("--spinners", default="1,2,4")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # as app.py
    intervals = [float(x) / 1000 for x in args.intervals.split(",")]
    original = sys.getswitchinterval()
    jobs = workloads()
    for work in jobs.values():
        work()  # first-call set-up out of the way
    alone = {name: statistics.median(measure(work, 0, original, args.repeats)[:1]) for name, work in jobs.items()}
    print(f"\nWorker time beside threads running Python (ms, p50 / p90 of {args.repeats}); 'spin' = the spinning "
          f"threads' Python per second relative to the first interval.\n")
    print(f"{'workload':32s} {'alone':>7s} {'spinners':>8s} " + " ".join(f"{'%g ms: p50 / p90' % (i * 1000):>22s}" for i in intervals)
          + " " + " ".join(f"{'spin %g' % (i * 1000):>9s}" for i in intervals[1:]))
    try:
        for name, work in jobs.items():
            for spinners in (int(s) for s in args.spinners.split(",")):
                cells, rates = [], []
                for interval in intervals:
                    p50, p90, rate = measure(work, spinners, interval, args.repeats)
                    cells.append(f"{p50 * 1000:9.1f} / {p90 * 1000:9.1f}")
                    rates.append(rate)
                print(f"{name:32s} {alone[name] * 1000:7.2f} {spinners:8d} " + " ".join(f"{c:>22s}" for c in cells)
                      + " " + " ".join(f"{r / rates[0]:9.2f}" for r in rates[1:]), flush=True)
    finally:
        sys.setswitchinterval(original)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
