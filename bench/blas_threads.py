"""numpy's BLAS threads with several sessions at once: prints seconds for 1 and 4 threads each taking SVDs of
128 x 128 matrices, with OpenBLAS on its default thread count and on one thread (ui/server/blas.py), each in a
fresh process (the setting counts only before numpy is imported).

    python bench/blas_threads.py
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

CALLS = 300


def child(sessions: int) -> float:
    import numpy as np

    a = np.random.default_rng(0).standard_normal((128, 128))

    def work():
        for _ in range(CALLS):
            np.linalg.svd(a @ a.T)

    threads = [threading.Thread(target=work) for _ in range(sessions)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - t0


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        print(child(int(sys.argv[2])))
        return 0
    print("| BLAS threads | 1 session | 4 sessions at once |\n|---|---|---|")
    for setting in ("default", "1"):
        env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")}
        if setting == "1":
            env["OPENBLAS_NUM_THREADS"] = "1"
        times = [float(subprocess.run([sys.executable, __file__, "--child", str(n)], env=env, capture_output=True,
                                      text=True, check=True).stdout) for n in (1, 4)]
        print(f"| {setting} | {times[0]:.2f} s | {times[1]:.2f} s |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
