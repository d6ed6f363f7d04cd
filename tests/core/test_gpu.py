"""The model on a CUDA GPU does what it does on the CPU: same logits (to float tolerance), same hooks.

These need CUDA and are skipped, with the reason, on machines without it (the CI machines have none).
"""

from __future__ import annotations

import pytest
import torch

from core import checkpoints
from core.model import TransformerConfig
from core.train import init_model

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="no CUDA device here: the GPU path of the model is not tested")


def small(arch: str = "decoder", pos: str = "sinusoidal"):
    cfg = TransformerConfig(arch=arch, vocab_size=17, max_len=32, pos=pos, n_layers=2, d_model=32, n_heads=4)
    return init_model(cfg, seed=0).eval()


@pytest.mark.parametrize("arch,pos", [("decoder", "sinusoidal"), ("encoder", "learned"), ("decoder", "rope")])
def test_the_gpu_forward_matches_the_cpu(arch, pos):
    model = small(arch, pos)
    tokens = torch.randint(0, 17, (2, 9), generator=torch.Generator().manual_seed(1))  # [batch pos]
    with torch.no_grad():
        want = model(tokens)
        got = model.to("cuda")(tokens.cuda())
    assert got.device.type == "cuda"
    torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-4)


def test_hooks_capture_and_intervene_on_the_gpu():
    model = small()
    tokens = torch.randint(0, 17, (1, 9), generator=torch.Generator().manual_seed(2))  # [batch pos]
    _, cpu_cache = model.run_with_cache(tokens, "*hook_pattern")
    gpu = model.to("cuda")
    _, cache = gpu.run_with_cache(tokens.cuda(), "*hook_pattern")
    assert set(cache) == set(cpu_cache)
    for name, pattern in cache.items():
        assert pattern.device.type == "cuda"
        torch.testing.assert_close(pattern.cpu(), cpu_cache[name], rtol=1e-4, atol=1e-4)
    zeroed = gpu.run_with_hooks(tokens.cuda(), [("blocks.*.attn.hook_z", lambda z, hook: torch.zeros_like(z))])
    plain = gpu(tokens.cuda())
    assert not torch.allclose(zeroed, plain)  # the intervention reached the GPU run


@pytest.mark.skipif(not checkpoints.MANIFEST.is_file(), reason="the bundled models are not built")
def test_a_bundled_model_loads_onto_the_gpu():
    first = checkpoints.read_manifest()[0]["id"]
    model, _ = checkpoints.load_bundled(first, device="cuda")
    assert all(p.device.type == "cuda" for p in model.parameters())
