"""One BLAS thread per numpy call in the app's processes, as torch has one (ui/server/process.py).

numpy's OpenBLAS starts a pool of threads of its own and, by default, runs each matrix call on every core.
A server runs many sessions' scripts at once, in threads of its own; their numpy calls then fight for the
same cores, and OpenBLAS's threads wait for each other by spinning: four sessions each taking SVDs of
128 x 128 matrices took 18 s together instead of about 1.5 s (`python bench/blas_threads.py`). The setting
only counts before numpy is first imported, so serve.py and app.py import this module first of all; an
operator's own OPENBLAS_NUM_THREADS is kept. (OMP_NUM_THREADS is left alone: torch reads it, and torch's threads
are set where they are needed, in ui/server/process.py and in the measurement worker.)
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
