"""Loading a checkpoint holds the model once: peak memory rises by about its float32 size, not twice that.

A ~20 MB Llama-shaped checkpoint is loaded in a fresh Python process that first loads a tiny one (so
imports and first-call costs are paid), resets its peak-RSS counter (Linux: /proc/self/clear_refs), and
reads the peak before and after. The rise must stay under 1.3x the float32 weights plus a fixed
allowance, and must be at least half the weights (so the measurement did see the load). Keeping
one memory mapping open per shard, or building the model before assigning the weights, would double it.

The peak is VmHWM from /proc/self/status, the process's own high-water mark. resource.getrusage's
ru_maxrss is the larger of that and a peak the kernel carries across fork + exec: a child of pytest
starts with pytest's whole resident size as its "peak", and a 20 MB load never shows in it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.core.pretrained_models import save_hf, tiny_hf_model

ROOT = Path(__file__).resolve().parents[2]
ALLOWANCE = 10 * 2 ** 20  # bytes: Python objects, the allocator's slack, one tensor in flight

MEASURE = """
import json, sys
from pathlib import Path
import torch
torch.set_num_threads(1)
from core.pretrained import load_pretrained

def peak() -> int:
    line = next(l for l in open("/proc/self/status") if l.startswith("VmHWM:"))
    return int(line.split()[1]) * 1024

load_pretrained(sys.argv[1])  # pay for imports and the first skeleton before measuring
Path("/proc/self/clear_refs").write_text("5")  # the peak restarts from the current size
before = peak()
model, _ = load_pretrained(sys.argv[2])
after = peak()
weights = sum(p.numel() * p.element_size() for p in {id(p): p for p in model.parameters()}.values())
print(json.dumps({"rise": after - before, "weights": weights}))
"""

BIG = dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
           intermediate_size=768, vocab_size=4096, max_position_embeddings=128)


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux's peak-RSS reset")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
def test_peak_memory_while_loading(dtype, tmp_path):
    tiny = save_hf(tiny_hf_model("llama"), tmp_path / "tiny")
    big = save_hf(tiny_hf_model("llama", **BIG), tmp_path / "big", dtype=dtype)
    done = subprocess.run([sys.executable, "-c", MEASURE, str(tiny), str(big)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    weights, rise = result["weights"], result["rise"]
    assert 18e6 < weights < 25e6  # the checkpoint is the ~20 MB the test means
    assert rise >= 0.5 * weights, result  # the measurement saw the model arrive (freed heap may absorb some)
    assert rise <= 1.3 * weights + ALLOWANCE, result
