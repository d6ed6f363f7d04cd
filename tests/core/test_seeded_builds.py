"""Seeded builds depend on their seed only, whatever other threads do at the same time.

A Streamlit server runs every session in its own thread, and torch's global generator is one per
process: builds seeded through it (torch.manual_seed, fork_rng) take each other's draws when two
sessions build at once. These tests build from several threads at once and ask every build to
equal the one made alone with the same seed (init_model's fails on the fork_rng build: about 40 of
48 builds differed), and check that no build reads or moves the global generator.
"""

from __future__ import annotations

import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from core.analysis import depth as D
from core.config import TransformerConfig
from core.hyper import HyperConfig, HyperTransformer
from core.train import init_model

pytestmark = pytest.mark.usefixtures("one_thread")

THREADS = 4
BUILDS = 12  # per thread


def _weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _concurrent(build, jobs: list[list]) -> list[list[dict[str, torch.Tensor]]]:
    """Run `build(job)` for each thread's list of jobs, all threads released together.

    A short switch interval makes the threads take turns every few operations, as busy server
    threads do, instead of each finishing its builds inside one time slice.
    """
    barrier = threading.Barrier(len(jobs))

    def worker(mine: list) -> list[dict[str, torch.Tensor]]:
        barrier.wait()
        return [_weights(build(job)) for job in mine]

    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
            return list(pool.map(worker, jobs))
    finally:
        sys.setswitchinterval(before)


def _check(build, jobs: list[list]) -> None:
    alone = {job: _weights(build(job)) for mine in jobs for job in mine}
    results = _concurrent(build, jobs)
    wrong = [job for mine, got in zip(jobs, results) for job, w in zip(mine, got) if not _same(w, alone[job])]
    assert not wrong, f"{len(wrong)} of {sum(map(len, jobs))} concurrent builds differ from the single-threaded build"


def test_init_model_from_concurrent_threads_follows_its_seed():
    cfgs = [TransformerConfig(d_model=32, n_heads=2, n_layers=2),
            TransformerConfig(arch="encoder-decoder", d_model=32, n_heads=2, n_layers=1, pos="learned")]
    # thread t builds seeds t, t + THREADS, ... (each with both configs), so no two threads share a seed
    jobs = [[(c, s) for s in range(t, THREADS * BUILDS, THREADS) for c in range(len(cfgs))][:BUILDS]
            for t in range(THREADS)]
    _check(lambda job: init_model(cfgs[job[0]], job[1]), jobs)


def test_depth_random_stacks_from_concurrent_threads_follow_their_seed():
    variants = list(D.VARIANTS)  # the Transformer variants and both hyper-connected ones
    jobs = [[(variants[(t + i) % len(variants)], t * BUILDS + i) for i in range(BUILDS)] for t in range(THREADS)]
    _check(lambda job: D.random_stack(job[0], 3, gain=1.0, seed=job[1], n_streams=3), jobs)


def test_hyper_stacks_from_concurrent_threads_follow_their_seed():
    cfgs = [HyperConfig(n_streams=3, n_layers=2, d_model=16, n_heads=2),
            HyperConfig(n_streams=2, n_layers=3, d_model=16, n_heads=2, mixing="free", noise=0.3)]
    jobs = [[(i % 2, t * BUILDS + i) for i in range(BUILDS)] for t in range(THREADS)]
    _check(lambda job: HyperTransformer(cfgs[job[0]], seed=job[1]), jobs)


# The weights a seed gives are the ones it always gave (recorded from the torch.manual_seed build).


def test_init_model_keeps_the_weights_each_seed_always_gave():
    w = init_model(TransformerConfig(), 0).state_dict()
    expect = {
        "stack.W_E.weight": [-0.0023171226494014263, 0.018419647589325905, 0.024366023018956184],
        "stack.blocks.0.attn.W_Q.weight": [0.005483864340931177, 0.02166646346449852, 0.03154156729578972],
        "stack.blocks.1.mlp.W_out.weight": [0.029450945556163788, -0.041677046567201614, 0.006508685182780027],
        "unembed.weight": [0.005796209909021854, -0.034524813294410706, -0.006235577166080475],
    }
    for name, values in expect.items():
        torch.testing.assert_close(w[name].flatten()[:3], torch.tensor(values), rtol=1e-5, atol=0)
    assert torch.equal(w["stack.blocks.1.mlp.W_in.bias"], torch.zeros(256))
    assert torch.equal(w["stack.blocks.0.ln1.ln.weight"], torch.ones(64))
    embed = init_model(TransformerConfig(), 7, embed_std=1.0).state_dict()["stack.W_E.weight"]
    torch.testing.assert_close(embed.flatten()[:3], torch.tensor([0.513785183429718, 1.0311098098754883,
                                                                  0.2615082561969757]), rtol=1e-5, atol=0)


def test_init_model_takes_a_generator_in_place_of_the_seed():
    cfg = TransformerConfig(d_model=16, n_heads=2, n_layers=1)
    a = init_model(cfg, 5)
    b = init_model(cfg, 0, generator=torch.Generator().manual_seed(5))  # the generator replaces the seed
    assert _same(_weights(a), _weights(b))
    assert not _same(_weights(a), _weights(init_model(cfg, 6)))


def test_seeded_builds_neither_read_nor_move_the_global_generator():
    """Each build draws from its own generator only: the global one ends where it started, and
    whatever state it is in does not change the weights."""
    builds = [lambda: init_model(TransformerConfig(d_model=16, n_heads=2, n_layers=1), 3, embed_std=1.0),
              lambda: HyperTransformer(HyperConfig(n_streams=2, n_layers=2, d_model=16, n_heads=2), seed=3)]
    builds += [lambda v=v: D.random_stack(v, 2, gain=1.5, seed=3, n_streams=2) for v in D.VARIANTS]
    for build in builds:
        state = torch.random.get_rng_state()
        first = _weights(build())
        assert torch.equal(state, torch.random.get_rng_state())
        torch.rand(7)  # move the global generator on: the next build must not notice
        assert _same(first, _weights(build()))
