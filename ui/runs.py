"""Cached hooked runs: one forward per (model, input, options), shared by every widget on a page.

Results are read-only numpy arrays shared by every session (see ui.memo); masks are passed as
numpy bool arrays.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import torch

from ui import models
from ui.memo import freeze, memo
from ui.sidebar import Selection


@memo(maxsize=128)
def _cached_run(key: tuple, names: tuple, pos: Optional[str], temperature: float,
                mask: Optional[np.ndarray], ablate: tuple) -> dict[str, np.ndarray]:
    model_id, device, ids, tgt = key
    model, _ = models.get_model(model_id, device)
    tokens = torch.tensor([ids], device=model.device)
    kwargs = {"tgt": torch.tensor([tgt], device=model.device)} if tgt is not None else {}
    if mask is not None:
        kwargs["tgt_mask" if tgt is not None else "mask"] = torch.as_tensor(mask, device=model.device)
    fwd = [(f"{prefix}blocks.{layer}.attn.hook_z", _zero_head(head)) for prefix, layer, head in ablate]
    logits, cache = model.run_with_cache(tokens, list(names), pos=pos, temperature=temperature, fwd=fwd, **kwargs)
    out = {name: t.float().cpu().numpy() for name, t in cache.items()}
    out["logits"] = logits.float().cpu().numpy()
    return freeze(out)


def _zero_head(head: int):
    def fn(z: torch.Tensor, hook) -> torch.Tensor:
        z = z.clone()
        z[:, :, head] = 0.0  # z: [batch pos head d_head]
        return z
    return fn


def run(sel: Selection, names: list[str] | str, *, pos: Optional[str] = None, temperature: float = 1.0,
        mask: Optional[np.ndarray] = None, ablate: tuple = ()) -> dict[str, np.ndarray]:
    """Logits and the named activations (read-only numpy, batch axis kept) for the sidebar's input."""
    names = (names,) if isinstance(names, str) else tuple(names)
    return dict(_cached_run(sel.cache_key, names, pos, float(temperature), mask, tuple(ablate)))
