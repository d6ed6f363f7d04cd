"""Pick where the model runs: CUDA when present, then Apple's MPS, else the CPU."""

from __future__ import annotations

import contextlib

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


@contextlib.contextmanager
def one_thread():
    """Run tiny tensor work on one CPU thread, then restore this thread's previous count.

    Small models do thousands of tiny ops; waking a thread pool for each made them 10-40x slower
    on a busy 2-core machine. Under OpenMP the count behaves per calling thread (a count set and
    restored in another thread does not reliably reach this one), so the set and the restore both
    happen here, in the caller's thread, with no state shared between sessions.
    """
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)
