"""Cached hooked runs: one forward per (model, input, options), shared by every widget on a page.

Results are read-only numpy arrays shared by every session (see ui.shell.memo); masks are passed as
numpy bool arrays.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import torch

from core.model import Transformer
from ui.shell import models
from ui.shell.memo import freeze, memo
from ui.shell.sidebar import Selection


def model_inputs(cache_key: tuple) -> tuple[Transformer, torch.Tensor, dict]:
    """A Selection.cache_key back to what a forward needs: (model, token ids [1 pos], tgt= kwargs).

    Cached work is keyed by the short, hashable cache key (not by tensors); this is the one way back."""
    model_id, device, ids, tgt = cache_key
    model, _ = models.get_model(model_id, device)
    tokens = torch.tensor([ids], device=model.device)  # [1 pos]
    kwargs = {"tgt": torch.tensor([tgt], device=model.device)} if tgt is not None else {}  # [1 tgt_pos]
    return model, tokens, kwargs


@memo(maxsize=128)
def _cached_run(key: tuple, names: tuple, pos: Optional[str], temperature: float,
                mask: Optional[np.ndarray], ablate: tuple, logits: bool = True) -> dict[str, np.ndarray]:
    model, tokens, kwargs = model_inputs(key)
    if mask is not None:
        kwargs["tgt_mask" if "tgt" in kwargs else "mask"] = torch.as_tensor(mask, device=model.device)
    fwd = [(f"{prefix}blocks.{layer}.attn.hook_z", _zero_head(head)) for prefix, layer, head in ablate]
    out_logits, cache = model.run_with_cache(tokens, list(names), pos=pos, temperature=temperature, fwd=fwd, **kwargs)
    out = {name: t.float().cpu().numpy() for name, t in cache.items()}
    if logits:  # [1 pos vocab]: 16 MB at 1,024 tokens of a 4,096-token vocabulary, so only when asked
        out["logits"] = out_logits.float().cpu().numpy()
    return freeze(out)


def _zero_head(head: int):
    def fn(z: torch.Tensor, hook) -> torch.Tensor:
        z = z.clone()
        z[:, :, head] = 0.0  # z: [batch pos head d_head]
        return z
    return fn


def run(sel: Selection, names: list[str] | str, *, pos: Optional[str] = None, temperature: float = 1.0,
        mask: Optional[np.ndarray] = None, ablate: tuple = (), logits: bool = True) -> dict[str, np.ndarray]:
    """Logits (unless `logits` is False) and the named activations (read-only numpy, batch axis kept) for the
    sidebar's input."""
    names = (names,) if isinstance(names, str) else tuple(names)
    return dict(_cached_run(sel.cache_key, names, pos, float(temperature), mask, tuple(ablate), logits))
