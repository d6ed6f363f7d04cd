"""A hashable stand-in for a memo's arguments, by content: what ui.shell.memo keys on and the shipped
results (ui.shell.precomputed) are filed under."""

from __future__ import annotations

import hashlib
from typing import Any, Hashable

import numpy as np
import torch

_PLAIN = frozenset({str, int, float, bool, bytes, type(None)})


def fingerprint(value: Any) -> Hashable:
    """A hashable stand-in for an argument: numpy arrays by shape, dtype and a digest of their bytes."""
    if isinstance(value, torch.Tensor):
        return fingerprint(value.detach().cpu().numpy())  # by content, never by identity
    if isinstance(value, np.ndarray) and value.dtype == object:  # e.g. token labels: by their values
        return ("ndarray", value.shape, "object", fingerprint(value.ravel().tolist()))
    if isinstance(value, np.ndarray):
        data = memoryview(np.ascontiguousarray(value)).cast("B")  # the raw bytes, no copy when contiguous
        return ("ndarray", value.shape, value.dtype.str, hashlib.blake2b(data, digest_size=16).digest())
    if isinstance(value, (list, tuple)):
        if all(type(v) in _PLAIN for v in value):  # token ids, labels: the common case, kept as they are
            return (type(value).__name__, tuple(value))
        return (type(value).__name__, *map(fingerprint, value))
    if isinstance(value, dict):
        return ("dict", *((k, fingerprint(v)) for k, v in sorted(value.items())))
    hash(value)  # anything else must be hashable already (a TypeError here names the culprit)
    return value
