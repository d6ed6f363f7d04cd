"""Analyses that know models (but not figures): what the pages compute before they draw."""

from __future__ import annotations

import numpy as np
import torch


def tensor_from(x, dtype: torch.dtype | None = None, device=None) -> torch.Tensor:
    """`torch.as_tensor`, except that a read-only numpy array is copied first.

    The app hands out its cached runs as read-only arrays (ui.shell.memo); torch cannot share memory
    with those (it warns), and nothing here needs to: a copy is cheap at these sizes.
    """
    if isinstance(x, np.ndarray) and not x.flags.writeable:
        x = x.copy()
    return torch.as_tensor(x, dtype=dtype, device=device)
