"""Positional encodings: the sinusoidal table, its relative-position property, and RoPE's."""

from __future__ import annotations

import math

import pytest
import torch

from core import positional


def test_sinusoidal_matches_the_paper_formula():
    table = positional.sinusoidal(50, 16)
    p, i = 7, 3
    assert table[p, 2 * i] == pytest.approx(math.sin(p / 10000 ** (2 * i / 16)), abs=1e-6)
    assert table[p, 2 * i + 1] == pytest.approx(math.cos(p / 10000 ** (2 * i / 16)), abs=1e-6)
    assert torch.allclose(positional.sinusoidal(5, 16, offset=45), table[45:50])


def test_sinusoidal_dot_products_depend_only_on_the_offset():
    table = positional.sinusoidal(120, 32).double()
    gram = table @ table.T  # [pos pos]
    for k in (0, 1, 5, 30):
        diagonal = torch.diagonal(gram, offset=k)
        assert torch.allclose(diagonal, diagonal[0].expand_as(diagonal), atol=1e-5)
    assert not torch.allclose(gram[0, 1], gram[0, 30])


@pytest.mark.parametrize("k", [1, 3, 17])
def test_shift_matrix_maps_pe_p_to_pe_p_plus_k(k):
    table = positional.sinusoidal(100, 16).double()
    m = positional.shift_matrix(k, 16)
    err = (table[:-k] @ m.T - table[k:]).abs().max()
    assert err < 1e-5


def test_rope_scores_depend_only_on_relative_position():
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(1, 1, 1, 8, generator=g), torch.randn(1, 1, 1, 8, generator=g)

    def score(m, n):
        cos, sin = positional.rope_cos_sin(max(m, n) + 1, 8)
        qm = positional.apply_rope(q.expand(1, max(m, n) + 1, 1, 8), cos, sin)[0, m, 0]
        kn = positional.apply_rope(k.expand(1, max(m, n) + 1, 1, 8), cos, sin)[0, n, 0]
        return float(qm @ kn)

    assert score(5, 2) == pytest.approx(score(105, 102), abs=1e-4)
    assert score(9, 9) == pytest.approx(score(40, 40), abs=1e-4)
    assert score(5, 2) != pytest.approx(score(5, 3), abs=1e-3)


def test_rope_keeps_norms_and_wavelengths_grow():
    x = torch.randn(2, 6, 3, 8)
    cos, sin = positional.rope_cos_sin(6, 8)
    assert torch.allclose(positional.apply_rope(x, cos, sin).norm(dim=-1), x.norm(dim=-1), atol=1e-5)
    w = positional.wavelengths(16)
    assert w[0] == pytest.approx(2 * math.pi) and (w[1:] > w[:-1]).all()
