"""The hook-overhead benchmark's old entry point; the measurement lives in core/bench.py.

    python bench/hook_overhead.py [--quick] [--batch 1,8]   # the same as: python -m core.bench
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from core.bench import main  # noqa: E402

if __name__ == "__main__":
    main()
