"""Named hook points and the per-call run state behind them.

Every interesting activation in the model passes through a `HookPoint`: an identity module
with a permanent name. What a call wants to see or change (which activations to cache, which
interventions to apply, whether to keep live tensors for gradients) lives in a `RunState`
held by a `contextvars.ContextVar`, set for one call and reset in a `finally`. The model itself
never changes, so one cached model can serve many Streamlit sessions in parallel threads.
"""

from __future__ import annotations

import contextlib
import contextvars
import fnmatch
import functools
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, Union

import torch
from torch import nn

# What a caller may pass to choose hook names: one name or glob, a list of them, or a predicate.
NameFilter = Union[str, Iterable[str], Callable[[str], bool], None]
# An intervention: fn(tensor, hook) -> replacement tensor, or None to keep the tensor as it is.
HookFn = Callable[[torch.Tensor, "HookPoint"], Union[torch.Tensor, None]]

_RUN_STATE: contextvars.ContextVar["RunState | None"] = contextvars.ContextVar(
    "glassbox_run_state", default=None
)


class HookPoint(nn.Module):
    """An identity module with a name; it shows its tensor to the current call's RunState."""

    def __init__(self, name: str = ""):
        super().__init__()
        self.name = name

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        state = _RUN_STATE.get()
        if state is None or self.name not in state.touched:
            return x
        return state.visit(self, x)

    # A hook point is called dozens of times per forward and nearly always hands its tensor straight
    # back: skip nn.Module's call machinery (hook dictionaries, tracing checks), which cost more than
    # the rest of a small model's forward. Module hooks registered on a HookPoint are therefore not
    # run; the RunState is how a call looks at or changes an activation.
    __call__ = forward

    def extra_repr(self) -> str:
        return repr(self.name)


def resolve_names(names: NameFilter, available: list[str]) -> list[str]:
    """Turn a name, glob, list or predicate into the matching hook names, in model order.

    Matching nothing is an error: a typo should not silently return an empty cache.
    """
    if names is None:
        return list(available)
    if callable(names):
        chosen = [n for n in available if names(n)]
        if not chosen:
            raise ValueError("no hook point matches the predicate; see model.hook_names().")
        return chosen
    patterns = (names,) if isinstance(names, str) else tuple(names)
    for p in patterns:
        if not isinstance(p, str):
            raise ValueError(f"hook names must be strings, got {type(p).__name__}")
    return list(_match_patterns(patterns, tuple(available)))


@functools.lru_cache(maxsize=256)
def _match_patterns(patterns: tuple[str, ...], available: tuple[str, ...]) -> tuple[str, ...]:
    """The names matching any of the globs, in model order (remembered: pages ask the same few on
    every rerun, and matching every glob against every name costs a tenth of a small forward)."""
    for p in patterns:
        if not any(fnmatch.fnmatchcase(n, p) for n in available):
            raise ValueError(
                f"no hook point matches {p!r}. Hook names look like "
                f"{list(available[:3]) + ['...']}; see model.hook_names()."
            )
    chosen = tuple(n for n in available if any(fnmatch.fnmatchcase(n, p) for p in patterns))
    if not chosen:
        raise ValueError(f"no hook point matches {list(patterns)!r}; see model.hook_names().")
    return chosen


@dataclass
class RunState:
    """What one call captures and changes. Lives only for the duration of that call."""

    capture: frozenset[str] = frozenset()  # names whose tensors go into the cache
    fwd: dict[str, list[HookFn]] = field(default_factory=dict)  # name -> interventions, in order
    keep_live: bool = False  # keep the live (graph-attached) tensors for autograd.grad
    cache: dict[str, torch.Tensor] = field(default_factory=dict)  # name -> detached copy
    live: dict[str, torch.Tensor] = field(default_factory=dict)  # name -> live tensor
    buffers: dict[tuple, torch.Tensor] = field(default_factory=dict, repr=False)  # scratch(): (shape, dtype, device)

    def __post_init__(self) -> None:
        # Every name this call captures or changes: one set lookup lets the other hooks pass at once.
        self.touched = self.capture | frozenset(self.fwd)

    def touches(self, name: str) -> bool:
        """True when this call captures or changes the named activation."""
        return name in self.touched

    def lets_go(self, name: str) -> bool:
        """True when nothing keeps the named tensor past its hook point: no intervention of this call sees it, and a
        capture copies it (the call keeps no live tensor for gradients). The model may then reuse its memory."""
        return name not in self.fwd and not (self.keep_live and name in self.capture)

    def scratch(self, shape: torch.Size, like: torch.Tensor) -> torch.Tensor:
        """A tensor of `shape` (dtype and device of `like`) that this call reuses for temporaries nothing keeps past
        their hook (see lets_go), such as each layer's scores: reused, its pages are touched once per call, where a
        fresh tensor of a 1,024-token layer's scores faults in 16 MB or more each time (large blocks are mapped
        anew)."""
        key = (tuple(shape), like.dtype, like.device)
        if key not in self.buffers:
            self.buffers[key] = torch.empty(shape, dtype=like.dtype, device=like.device)
        return self.buffers[key]

    def visit(self, hook: HookPoint, x: torch.Tensor) -> torch.Tensor:
        """Apply the interventions registered for this hook, then capture the result."""
        name = hook.name
        for fn in self.fwd.get(name, ()):
            out = fn(x, hook)
            if out is not None:
                if not isinstance(out, torch.Tensor) or out.shape != x.shape:
                    got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
                    raise ValueError(
                        f"hook function on {name!r} must return None or a tensor of shape "
                        f"{tuple(x.shape)}, got {got}"
                    )
                x = out
        if name in self.capture:
            if self.keep_live and x.is_floating_point():
                if not x.requires_grad:
                    # A tensor outside the graph (e.g. a fixed positional table): make it a leaf
                    # so the gradient with respect to it can still be asked for.
                    x = x.detach().requires_grad_(True)
                self.live[name] = x
            self.cache[name] = x.detach().clone()
        return x


@contextlib.contextmanager
def running(state: RunState) -> Iterator[RunState]:
    """Install `state` for the calls made inside the block, and always remove it afterwards."""
    token = _RUN_STATE.set(state)
    try:
        yield state
    finally:
        _RUN_STATE.reset(token)


def current_state() -> RunState | None:
    """The RunState of the call in progress on this thread, if any."""
    return _RUN_STATE.get()


class Cache(dict):
    """The activations of one call: hook name -> detached tensor (and `<name>_grad` entries).

    A plain dict with a few conveniences for pages: `cache.layer(i, 'attn.hook_pattern')`.
    """

    def layer(self, i: int, suffix: str, prefix: str = "") -> torch.Tensor:
        """The activation `{prefix}blocks.{i}.{suffix}`."""
        return self[f"{prefix}blocks.{i}.{suffix}"]

    def names(self) -> list[str]:
        """The cached names, without gradients."""
        return [k for k in self if not k.endswith("_grad")]
