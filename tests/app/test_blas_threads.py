"""numpy's BLAS runs one thread per call in the app's processes (ui/server/blas.py): with its default, four
sessions' SVDs at once took 18 s instead of 1.5 s on 2 cores (bench/blas_threads.py). The setting counts only
before numpy is first imported, so it is checked in fresh processes, reading OpenBLAS's own thread count."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.app.conftest import ROOT

READ_THREADS = (
    "import ctypes, numpy\n"
    "path = next(l.split()[-1] for l in open('/proc/self/maps') if 'openblas' in l.lower() and '.so' in l)\n"
    "lib = ctypes.CDLL(path)\n"
    "get = next(getattr(lib, n) for n in ('scipy_openblas_get_num_threads64_', 'openblas_get_num_threads64_',"
    " 'openblas_get_num_threads') if hasattr(lib, n))\n"
    "print(get())\n"
)


def blas_threads(prelude: str, env: dict) -> int:
    run = subprocess.run([sys.executable, "-c", prelude + READ_THREADS], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=120)
    if run.returncode != 0 and "StopIteration" in run.stderr:
        pytest.skip("this numpy is not built on OpenBLAS")
    assert run.returncode == 0, run.stderr[-2000:]
    return int(run.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/maps")
def test_the_servers_entry_points_give_numpy_one_blas_thread():
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
                                                              "MKL_NUM_THREADS")}
    if (os.cpu_count() or 1) > 1:
        assert blas_threads("", env) > 1  # numpy's default: every core (what the app must not keep)
    assert blas_threads("import serve\n", env) == 1
    assert blas_threads("import ui.server.blas\n", env) == 1
    assert blas_threads("import ui.server.blas\n", dict(env, OPENBLAS_NUM_THREADS="2")) == 2  # an operator's own
