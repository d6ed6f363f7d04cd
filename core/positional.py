"""Positional encodings: none, sinusoidal, learned and rotary (RoPE), plus analysis helpers.

Self-attention alone treats its input as a set. These functions give it a sense of order, and
the helpers below compute the quantities the Positions page draws (wavelengths, the Gram
matrix, the linear shift map M_k, and RoPE's relative-position property).

RoPE comes in two layouts that rotate the same angles on different pairs of dimensions: "pairs"
rotates (x[2i], x[2i+1]) (the paper's picture, and this project's models), "halves" rotates
(x[i], x[i + r/2]) (Hugging Face's Llama family, GPT-NeoX). A converted checkpoint keeps its own
layout, since its W_Q and W_K were trained for it. Either may rotate only the first r dimensions of
a head (partial rotary); the rest pass through unchanged.
"""

from __future__ import annotations

import math

import torch

SCHEMES = ("none", "sinusoidal", "learned", "rope")
ROPE_LAYOUTS = ("pairs", "halves")


def sinusoidal(n: int, d: int, base: float = 10000.0, offset: int = 0,
               dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The table of the original paper: PE[p, 2i] = sin(p / base^(2i/d)), PE[p, 2i+1] = cos(...).

    Returns `[n, d]` (float32 unless `dtype` says otherwise; float64 for exact identity checks)
    for positions offset..offset+n-1. Works for any n (extrapolates).
    """
    if n < 0 or d < 1:
        raise ValueError(f"sinusoidal needs n >= 0 and d >= 1, got n={n}, d={d}")
    positions = torch.arange(offset, offset + n, dtype=torch.float64)[:, None]  # [n, 1]
    pair = torch.arange(0, d, 2, dtype=torch.float64)  # [ceil(d/2)]: the 2i of each pair
    angles = positions / base ** (pair / d)  # [n, ceil(d/2)]
    table = torch.zeros(n, d, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angles)
    table[:, 1::2] = torch.cos(angles[:, : d // 2])
    return table.to(dtype)


def wavelengths(d: int, base: float = 10000.0) -> torch.Tensor:
    """The wavelength 2*pi*base^(2i/d) of each sin/cos pair i: from 2*pi up to about 2*pi*base."""
    pair = torch.arange(0, d, 2, dtype=torch.float64)
    return 2 * math.pi * base ** (pair / d)


def shift_matrix(k: int, d: int, base: float = 10000.0) -> torch.Tensor:
    """The linear map M_k with PE[p + k] = M_k @ PE[p] for every p: one 2x2 rotation per pair.

    This is why a fixed offset is easy for attention to learn with sinusoidal positions.
    Returns float64 `[d, d]` (d even).
    """
    if d % 2:
        raise ValueError(f"shift_matrix needs an even d, got {d}")
    pair = torch.arange(0, d, 2, dtype=torch.float64)
    omega = 1.0 / base ** (pair / d)  # [d/2]
    m = torch.zeros(d, d, dtype=torch.float64)
    c, s = torch.cos(k * omega), torch.sin(k * omega)
    idx = torch.arange(0, d, 2)
    # (sin, cos) of (a + b) from (sin a, cos a): [sin'; cos'] = [[cos b, sin b], [-sin b, cos b]] [sin; cos]
    m[idx, idx], m[idx, idx + 1] = c, s
    m[idx + 1, idx], m[idx + 1, idx + 1] = -s, c
    return m


def rope_frequencies(d_head: int, base: float = 10000.0) -> torch.Tensor:
    """theta_i = base^(-2i/d_head) for each rotated pair i. float64 `[d_head/2]`."""
    if d_head % 2:
        raise ValueError(f"RoPE needs an even d_head, got {d_head}")
    pair = torch.arange(0, d_head, 2, dtype=torch.float64)
    return base ** (-pair / d_head)


def rope_cos_sin(n: int, d_head: int, base: float = 10000.0, offset: int = 0,
                 dtype: torch.dtype = torch.float32, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of the rotation angle m * theta_i for positions offset..offset+n-1. `[n, d_head/2]` each."""
    positions = torch.arange(offset, offset + n, dtype=torch.float64)[:, None]  # [n, 1]
    angles = positions * rope_frequencies(d_head, base)[None, :]  # [n, d_head/2]
    return angles.cos().to(dtype=dtype, device=device), angles.sin().to(dtype=dtype, device=device)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate each pair (x[2i], x[2i+1]) of `x` `[batch pos head d_head]` by the angle at its position.

    cos and sin are `[pos, d_head/2]`. Rotation keeps norms, and q_m . k_n then depends on m - n only.
    """
    even, odd = x[..., 0::2], x[..., 1::2]  # [batch pos head d_head/2] each
    c = cos[None, :, None, :]  # [1 pos 1 d_head/2]
    s = sin[None, :, None, :]
    rotated_even = even * c - odd * s
    rotated_odd = even * s + odd * c
    return torch.stack((rotated_even, rotated_odd), dim=-1).flatten(-2)  # [batch pos head d_head]


def apply_rope_halves(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate each pair (x[i], x[i + d/2]) of `x` `[batch pos head d]` by the angle at its position.

    Hugging Face's Llama layout: x * cos + rotate_half(x) * sin, with cos and sin `[pos, d/2]`
    (pair i turns by the same angle m * theta_i as in `apply_rope`, only the pairing differs).
    """
    half = x.shape[-1] // 2
    first, second = x[..., :half], x[..., half:]  # [batch pos head d/2] each
    c = cos[None, :, None, :]  # [1 pos 1 d/2]
    s = sin[None, :, None, :]
    return torch.cat((first * c - second * s, second * c + first * s), dim=-1)  # [batch pos head d]


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """(x1, x2) -> (-x2, x1) on the two halves of the last axis: the "halves" layout's 90-degree turn."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str = "pairs") -> torch.Tensor:
    """RoPE on `x` `[batch pos head d_head]` in either layout, rotating the first r = 2 * cos.shape[-1]
    dimensions of each head and passing the others through (partial rotary when r < d_head)."""
    if layout not in ROPE_LAYOUTS:
        raise ValueError(f"rope layout must be one of {list(ROPE_LAYOUTS)}, got {layout!r}")
    rotate = apply_rope if layout == "pairs" else apply_rope_halves
    r = 2 * cos.shape[-1]
    if r == x.shape[-1]:
        return rotate(x, cos, sin)
    return torch.cat((rotate(x[..., :r], cos, sin), x[..., r:]), dim=-1)  # [batch pos head d_head]


def rope_rotate_pair(vec2: torch.Tensor, position: int, theta: float) -> torch.Tensor:
    """Rotate one 2-D vector by position * theta: the picture RoPE draws for one dimension pair."""
    angle = position * theta
    c, s = math.cos(angle), math.sin(angle)
    x, y = float(vec2[0]), float(vec2[1])
    return torch.tensor([x * c - y * s, x * s + y * c])
