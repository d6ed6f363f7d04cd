"""Pick where the model runs: CUDA when present, then Apple's MPS, else the CPU."""

from __future__ import annotations

import torch


def available_devices() -> list[str]:
    """The devices this machine offers, best first ("cpu" is always last)."""
    found = []
    if torch.cuda.is_available():
        found.append("cuda")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        found.append("mps")
    return found + ["cpu"]


def pick_device(prefer: str | None = None) -> torch.device:
    """The preferred device if it is available, else the best one there is."""
    devices = available_devices()
    if prefer is not None:
        if prefer not in ("cuda", "mps", "cpu"):
            raise ValueError(f"device must be 'cuda', 'mps' or 'cpu', got {prefer!r}")
        if prefer in devices:
            return torch.device(prefer)
    return torch.device(devices[0])
