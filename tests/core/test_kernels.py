"""core.kernels: chunked (online-softmax) attention equals explicit attention, forward and backward,
for random inputs and masks, several block sizes and both float widths; its memory grows linearly in
n while explicit attention's grows quadratically; and the recurrent baseline runs one step per position."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from core.analysis.cost import PeakLiveBytes, fit_loglog
from core.kernels import chunked_attention, explicit_attention, recurrent_weights, rnn_cell, rnn_layer

TOL = {torch.float32: 1e-5, torch.float64: 1e-10}
BLOCKS = (1, 3, 7, 16, 64, 100)  # 3, 7 and 100 do not divide the lengths below


def qkv(batch=2, heads=3, n_q=37, n_k=29, d=8, d_v=5, dtype=torch.float32, seed=0, requires_grad=False):
    g = torch.Generator().manual_seed(seed)
    make = lambda *shape: torch.randn(*shape, generator=g, dtype=dtype).requires_grad_(requires_grad)  # noqa: E731
    return make(batch, heads, n_q, d), make(batch, heads, n_k, d), make(batch, heads, n_k, d_v)


def random_mask(shape, density=0.4, seed=1, empty_rows=(0, 5)) -> torch.Tensor:
    """A random bool mask [.. q k] with some query rows that may attend to nothing."""
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(*shape, generator=g) < density
    for row in empty_rows:
        mask[..., row, :] = False
    return mask


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("block", BLOCKS)
def test_equals_explicit_attention_without_a_mask(dtype, block):
    q, k, v = qkv(dtype=dtype)
    got, want = chunked_attention(q, k, v, block_size=block), explicit_attention(q, k, v)
    assert got.shape == (2, 3, 37, 5) and got.dtype == dtype
    torch.testing.assert_close(got, want, atol=TOL[dtype], rtol=TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("block", BLOCKS)
@pytest.mark.parametrize("mask_shape", [(37, 29), (2, 1, 37, 29), (2, 3, 37, 29)])
def test_equals_explicit_attention_under_random_masks(dtype, block, mask_shape):
    q, k, v = qkv(dtype=dtype)
    mask = random_mask(mask_shape)
    got, want = chunked_attention(q, k, v, mask, block_size=block), explicit_attention(q, k, v, mask)
    torch.testing.assert_close(got, want, atol=TOL[dtype], rtol=TOL[dtype])


def test_a_row_with_no_allowed_key_gives_exact_zeros_and_finite_gradients():
    q, k, v = qkv(dtype=torch.float64, requires_grad=True)
    mask = random_mask((37, 29), empty_rows=(0, 5, 36))
    out = chunked_attention(q, k, v, mask, block_size=7)
    assert torch.all(out[:, :, [0, 5, 36]] == 0)
    assert torch.all(out[:, :, 1].abs().sum(-1) > 0)  # a row that may attend is not silenced
    grads = torch.autograd.grad(out.sum(), (q, k, v))
    assert all(torch.isfinite(g).all() for g in grads)
    assert torch.all(grads[0][:, :, [0, 5, 36]] == 0)  # an empty row's query has no effect


def test_a_fully_masked_input_gives_zeros():
    q, k, v = qkv()
    out = chunked_attention(q, k, v, torch.zeros(37, 29, dtype=torch.bool), block_size=4)
    assert torch.all(out == 0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("block", (1, 5, 16, 64))
def test_gradients_equal_explicit_attention(dtype, block):
    q, k, v = qkv(dtype=dtype, requires_grad=True)
    mask = random_mask((2, 1, 37, 29))
    upstream = torch.randn(2, 3, 37, 5, generator=torch.Generator().manual_seed(9), dtype=dtype)
    want = torch.autograd.grad(explicit_attention(q, k, v, mask), (q, k, v), upstream)
    got = torch.autograd.grad(chunked_attention(q, k, v, mask, block_size=block), (q, k, v), upstream)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, atol=10 * TOL[dtype], rtol=10 * TOL[dtype])


def test_gradcheck_in_float64():
    q, k, v = qkv(batch=1, heads=2, n_q=6, n_k=5, d=3, d_v=2, dtype=torch.float64, requires_grad=True)
    mask = random_mask((6, 5), density=0.6, empty_rows=(2,))
    assert torch.autograd.gradcheck(lambda a, b, c: chunked_attention(a, b, c, mask, block_size=2), (q, k, v))


@pytest.mark.parametrize("causal", [False, True])
def test_equals_torch_fused_attention(causal):
    q, k, v = qkv(n_q=50, n_k=50)
    mask = torch.ones(50, 50, dtype=torch.bool).tril() if causal else None
    want = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    torch.testing.assert_close(chunked_attention(q, k, v, mask, block_size=16), want, atol=1e-5, rtol=1e-5)


def test_scale_defaults_to_one_over_sqrt_d_head_and_can_be_given():
    q, k, v = qkv(dtype=torch.float64)
    default = chunked_attention(q, k, v, block_size=8)
    torch.testing.assert_close(default, chunked_attention(q, k, v, block_size=8, scale=1 / math.sqrt(8)))
    sharp = chunked_attention(q, k, v, block_size=8, scale=3.0)
    torch.testing.assert_close(sharp, explicit_attention(q, k, v, scale=3.0))
    assert not torch.allclose(sharp, default)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_stays_finite_and_exact_for_huge_scores(dtype):
    q, k, v = qkv(dtype=dtype)
    scale = 1e4  # scores of order 1e4: exp overflows without the running maximum
    out = chunked_attention(q, k, v, block_size=5, scale=scale)
    assert torch.isfinite(out).all()
    want = explicit_attention(q.double(), k.double(), v.double(), scale=scale).to(dtype)
    torch.testing.assert_close(out, want, atol=TOL[dtype] * 10, rtol=TOL[dtype] * 10)


@pytest.mark.parametrize("bad", [
    dict(mask=torch.ones(37, 29)),  # not bool
    dict(mask=torch.ones(36, 29, dtype=torch.bool)),  # wrong q
    dict(mask=torch.ones(1, 2, 3, 37, 29, dtype=torch.bool)),  # too many dims
    dict(block_size=0), dict(block_size=2.5), dict(block_size=True), dict(scale=float("nan")),
])
def test_bad_arguments_are_named(bad):
    q, k, v = qkv()
    with pytest.raises(ValueError):
        chunked_attention(q, k, v, **bad)


def test_bad_shapes_are_named():
    q, k, v = qkv()
    with pytest.raises(ValueError, match="4-d"):
        chunked_attention(q[0], k[0], v[0])
    with pytest.raises(ValueError, match="fit together"):
        chunked_attention(q, k[:, :, :, :4], v)


def training_peak(fn, n: int, block: int = 16) -> int:
    """Peak live tensor bytes of one forward + backward of `fn` at length n (4 heads of 16)."""
    q, k, v = qkv(batch=1, heads=4, n_q=n, n_k=n, d=16, d_v=16, requires_grad=True)
    with PeakLiveBytes() as tracker:
        out = fn(q, k, v) if fn is explicit_attention else fn(q, k, v, block_size=block)
        torch.autograd.grad(out.sum(), (q, k, v))
    return tracker.peak


def test_memory_grows_linearly_for_chunked_and_quadratically_for_explicit():
    ns = (64, 128, 256, 512)
    chunked = [training_peak(chunked_attention, n, block=32) for n in ns]
    explicit = [training_peak(explicit_attention, n) for n in ns]
    assert abs(fit_loglog(ns, chunked)[0] - 1.0) < 0.1
    assert fit_loglog(ns, explicit)[0] > 1.8
    assert explicit[-1] > 4 * chunked[-1]


def test_forward_memory_is_linear_for_chunked_and_quadratic_for_explicit():
    ns = (64, 128, 256, 512)

    def forward_peak(fn, n):
        q, k, v = qkv(batch=1, heads=2, n_q=n, n_k=n, d=8, d_v=8)
        with torch.no_grad(), PeakLiveBytes() as tracker:
            fn(q, k, v)
        return tracker.peak

    chunked = [forward_peak(lambda q, k, v: chunked_attention(q, k, v, block_size=16), n) for n in ns]
    explicit = [forward_peak(explicit_attention, n) for n in ns]
    assert abs(fit_loglog(ns, chunked)[0] - 1.0) < 0.1
    assert fit_loglog(ns, explicit)[0] > 1.8


def test_rnn_runs_one_sequential_step_per_position():
    weights = recurrent_weights(16, torch.Generator().manual_seed(0))
    x = torch.randn(2, 23, 16, generator=torch.Generator().manual_seed(1))  # [batch pos d_model]
    steps: list[int] = []
    out = rnn_layer(x, weights, on_step=steps.append)
    assert steps == list(range(23))
    assert out.shape == (2, 23, 16)
    torch.testing.assert_close(out[:, 0], rnn_cell(x[:, 0], torch.zeros(2, 16), weights))


def test_rnn_position_t_hears_only_the_past_and_the_first_token_reaches_the_last():
    weights = recurrent_weights(16, torch.Generator().manual_seed(0), dtype=torch.float64)
    x = torch.randn(1, 12, 16, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    changed = x.clone()
    changed[:, 6] += 1.0
    a, b = rnn_layer(x, weights), rnn_layer(changed, weights)
    assert torch.equal(a[:, :6], b[:, :6])  # the past does not hear the future
    assert not torch.allclose(a[:, 6:], b[:, 6:])
    first = x.clone()
    first[:, 0] += 1.0
    assert not torch.allclose(rnn_layer(first, weights)[:, -1], a[:, -1])  # 11 steps later, still there


def test_rnn_rejects_the_wrong_width():
    weights = recurrent_weights(8, torch.Generator().manual_seed(0))
    with pytest.raises(ValueError):
        rnn_layer(torch.zeros(1, 4, 9), weights)


cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here: the GPU path is not tested")


@cuda
def test_chunked_equals_explicit_on_the_gpu():
    q, k, v = (t.cuda() for t in qkv())
    mask = random_mask((37, 29)).cuda()
    torch.testing.assert_close(chunked_attention(q, k, v, mask, block_size=7), explicit_attention(q, k, v, mask),
                               atol=1e-4, rtol=1e-4)


@cuda
def test_chunked_training_step_uses_less_gpu_memory():
    from core.analysis.cost import Setting, memory_sweep
    sweep = memory_sweep(Setting(ns=(512, 1024, 2048), device="cuda"))
    assert np.all(np.asarray(sweep["bytes"]["chunked"]) < np.asarray(sweep["bytes"]["explicit"]))
