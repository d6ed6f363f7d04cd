"""Does a flood of measurements hold up a student who measures once? (issue 36, "The shared measurement worker")

Three visitors cycle uncached Depth settings (a random stack, built in the measurement worker) back to back,
each in a session (thread) of its own; a fourth student asks for one uncached stack. Printed, in one run:
- alone: that student's stack with nobody else measuring (the median of --repeats);
- flooded: the same size of stack while the three flood, as the worker now takes turns (ui.server.measure_process:
  the waiting session whose last turn began longest ago goes next);
- first come: the same, with the turns switched to plain arrival order (what one lock gave, at best), as
  the baseline measured in the same run.
The goal is flooded <= 2x alone.

Run: python bench/measure_fairness.py [--repeats 5] [--layers 24]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from core.analysis import depth as D
from ui.server import measure_process as MP


def stack(seed: int, layers: int) -> float:
    """Seconds for one uncached random stack (the seed makes it new), measured through the worker."""
    start = time.perf_counter()
    MP.measure(D.depth_profile, "pre-LN", layers, 1.0, seed, 4, 0.5)
    return time.perf_counter() - start


def flooded(repeats: int, layers: int, seeds) -> list[float]:
    """The fourth student's times while three sessions measure back to back."""
    stop = threading.Event()

    def flood():
        while not stop.is_set():
            stack(next(seeds), layers)
    flooders = [threading.Thread(target=flood, daemon=True) for _ in range(3)]
    for thread in flooders:
        thread.start()
    time.sleep(3.0)  # the flood is under way, and every flooder has used the worker
    times = []
    for _ in range(repeats):
        times.append(stack(next(seeds), layers))
        time.sleep(0.5)
    stop.set()
    for thread in flooders:
        thread.join()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--layers", type=int, default=24)
    args = parser.parse_args()
    seeds = iter(range(10_000, 10**9))
    MP.measure(D.depth_profile, "pre-LN", 2, 1.0, 0, 4, 0.5)  # the worker started and torch imported

    alone = [stack(next(seeds), args.layers) for _ in range(args.repeats)]
    turns = flooded(args.repeats, args.layers, seeds)
    fair_next = MP._Turns._next
    MP._Turns._next = lambda self, now: min(self._waiting, key=lambda t: (self._waiting[t][1], t)) if self._waiting else None
    try:
        arrival = flooded(args.repeats, args.layers, seeds)
    finally:
        MP._Turns._next = fair_next
    MP.stop()

    base = statistics.median(alone)
    print(f"one uncached {args.layers}-layer stack, {args.repeats} times each, three sessions flooding")
    print(f"{'':22} {'median s':>9} {'max s':>7} {'x alone':>8}")
    for name, times in [("alone", alone), ("flooded, turns", turns), ("flooded, first come", arrival)]:
        print(f"{name:22} {statistics.median(times):9.2f} {max(times):7.2f} {statistics.median(times) / base:8.2f}")


if __name__ == "__main__":
    main()
