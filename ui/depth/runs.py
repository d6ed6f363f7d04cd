"""The Depth page's cached work: residual streams, the logit lens, gradients, the random-stack
experiment, the trained twins, the path curves, and the page's figures. Kept in a module (not the
page file) so each cache is made once per process: a cache defined in a page script would be
rebuilt on every rerun.

Every cache is a process-wide ui.shell.memo memo. Plain values in; results are shared by every session,
so they are frozen read-only. The shared model is only ever called. The slow ones (the random
stacks, the twins) are shown with a spinner by ui.depth.view when `memo.has(...)` says they are new.
"""

from __future__ import annotations

import numpy as np
import torch

from core.analysis import depth as A
from core.analysis import depth_tables as T
from core.figures import depth as F
from core.hyper import HyperConfig, HyperTransformer
from core.tasks import get_task
from ui.server import measure_process
from ui.shell import models
from ui.shell.figures import cached
from ui.shell.memo import freeze, memo
from ui.shell.runs import model_inputs

PATH_NS = sorted({2 ** k for k in range(1, 13)} | {3 * 2 ** k for k in range(0, 11)})  # 2 .. 4096
TWIN_SAMPLES = 64


@memo(maxsize=64)
def forward_data(cache_key: tuple, prefix: str) -> A.ForwardStream:
    """The residual stream of one stack for the sidebar's input (no logits: nothing here reads them, and a real
    vocabulary's are the biggest part)."""
    model, ids, kwargs = model_inputs(cache_key)
    # kept in float32: the page draws norms and one position's projections, and a 1,024-token stream of a d_model
    # 128 model is 10 MB so (20 MB in float64, which every session's memo entry would hold)
    return freeze(A.forward_stream(model, ids, prefix, keep_logits=False, dtype=torch.float32, **kwargs))


LENS_TOP = 5  # predictions per cell the logit lens keeps (for the hover): never a whole vocabulary


@memo(maxsize=64)
def lens_data(cache_key: tuple, prefix: str, targets: tuple | None = None, start: int = 0,
              stop: int | None = None) -> A.LensTable:
    """The logit lens of the output stack at positions start..stop-1, summarised state by state
    (A.lens_summary): each cell's LENS_TOP likeliest tokens and their probabilities, and p(right answer) where
    `targets` has one. Nothing vocabulary-sized is kept (GPT-2's 50,257 logits per cell would be 1.3 GB for 128
    tokens and 25 states)."""
    model, _, _ = model_inputs(cache_key)
    resid = forward_data(cache_key, prefix).resid[:, start:stop]  # [stage pos d_model]
    window = targets[start:stop] if targets is not None else None
    return freeze(A.lens_summary(model, resid, prefix, window, top_k=LENS_TOP))


@memo(maxsize=64)
def lens_labels(cache_key: tuple, prefix: str, targets: tuple | None = None, start: int = 0,
                stop: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(each cell's top prediction as a token label `[stage pos]`, its LENS_TOP likeliest tokens with their
    probabilities as one hover line `[stage pos]`), from lens_data (object arrays of strings)."""
    table = lens_data(cache_key, prefix, targets, start, stop)
    vocab = models.task_of(cache_key[0], cache_key[1]).vocab
    top = np.array(vocab.decode(table.top.ravel().tolist()), dtype=object).reshape(table.top.shape)
    labels = np.array(vocab.decode(table.top_k.ravel().tolist()), dtype=object).reshape(table.top_k.shape)
    hover = np.empty(table.top.shape, dtype=object)
    for s, p in np.ndindex(*hover.shape):
        hover[s, p] = " · ".join(f"{labels[s, p, i]} {table.p_top_k[s, p, i]:.2f}" for i in range(labels.shape[2]))
    return freeze((top, hover))


@memo(maxsize=64)
def backward_data(cache_key: tuple, prefix: str, kind: str, position: int, targets: tuple | None) -> A.BackwardStream:
    """Gradients of the chosen scalar at every residual state of one stack."""
    model, ids, kwargs = model_inputs(cache_key)
    return freeze(A.backward_stream(model, ids, A.objective(kind, targets, position), prefix, **kwargs))


@memo(maxsize=256)
def experiment(variant: str, n_layers: int, gain: float, seed: int, streams: int, noise: float) -> A.DepthProfile:
    """One random stack's gradient profile (each variant cached on its own). Slow on a miss: the view
    shows a spinner then. Built in the worker process (ui.server.measure_process), away from the other
    students' page runs (those one change from the default ship with the app, ui.shell.precomputed)."""
    return freeze(measure_process.measure(A.depth_profile, variant, n_layers, gain, seed, streams, noise))


# What the experiment's table, summary and ρ default read from the stacks: kept per setting, since ρ and the
# Sinkhorn sublayer redraw them on every click. `runs` is one `experiment` argument tuple per stack, in order.


@memo(maxsize=64)
def stack_table(runs: tuple[tuple, ...]) -> list[dict]:
    """The table of the random stacks `runs` (ui.depth.view's experiment), one row per stack."""
    return T.stack_rows({args[0]: experiment(*args) for args in runs})


@memo(maxsize=256)
def stack_summary(runs: tuple[tuple, ...], rho: float) -> T.StackSummary:
    """The numbers the text under the table quotes, against the lower bound for `rho`."""
    profiles = {args[0]: experiment(*args) for args in runs}
    return T.stack_summary(profiles, A.bounds(rho, runs[0][1])[0])


@memo(maxsize=64)
def per_layer_factor(args: tuple) -> float | None:
    """The fitted per-layer gradient factor of one stack (the plain stack's is ρ's default)."""
    return A.per_layer_factor(experiment(*args).resid_grad)


@memo(maxsize=32)
def mixing_example(n_layers: int, gain: float, seed: int, streams: int, noise: float) -> np.ndarray:
    """The Sinkhorn stack's mixing matrices `[2L n n]` (the same stack the chart measured)."""
    cfg = HyperConfig(n_streams=streams, mixing="sinkhorn", noise=noise, n_layers=n_layers, gain=gain,
                      d_model=A.EXPERIMENT_D_MODEL, n_heads=A.EXPERIMENT_HEADS,
                      vocab_size=A.EXPERIMENT_VOCAB, max_len=A.EXPERIMENT_TOKENS)
    with A.one_thread():  # the build draws from its own seeded generator, not torch's global one
        return freeze(HyperTransformer(cfg, seed=seed).double().mixing_matrices().numpy())


@memo(maxsize=256)
def mixing_checks(n_layers: int, gain: float, seed: int, streams: int, noise: float, sublayer: int) -> dict:
    """The doubly-stochastic checks of one sublayer's mixing matrix (and of their product)."""
    return freeze(T.mixing_checks(mixing_example(n_layers, gain, seed, streams, noise), sublayer))


def twin_ids() -> tuple[str, str] | None:
    """A bundled pre-LN / post-LN pair: same task and architecture, norm 'pre' and 'post'."""
    rows = models.manifest()
    for pre in rows:
        if pre.get("norm") != "pre":
            continue
        for post in rows:
            if (post.get("norm") == "post" and post.get("task") == pre.get("task")
                    and post.get("arch") == pre.get("arch")):
                return pre["id"], post["id"]
    return None


@memo(maxsize=4)
def twins_data(pre_id: str, post_id: str, device: str) -> dict:
    """Loss gradients at every residual state of both twins, trained and freshly initialised. Slow on a
    miss (a few seconds): the view shows a spinner then."""
    out = {}
    for label, model_id in (("pre-LN", pre_id), ("post-LN", post_id)):
        model, meta = models.get_model(model_id, device)
        task = get_task(meta["task"])
        length = meta.get("train_length")
        with A.one_thread():
            trained = A.task_gradients(model, task, TWIN_SAMPLES, seed=5, length=length)
            fresh = A.task_gradients(A.fresh_twin(model, seed=0), task, TWIN_SAMPLES, seed=5, length=length)
        out[label] = {"trained": trained, "untrained": fresh, "accuracy": meta.get("accuracy"),
                      "id": model_id}
    return freeze(out)


@memo(maxsize=32)
def path_curves(heads: int) -> dict[str, np.ndarray]:
    """Every curve of the paths chart over PATH_NS for H heads."""
    ns = np.array(PATH_NS)
    return freeze({
        "ns": ns,
        "formula": np.array([A.hop_formula(int(n), heads) for n in ns]),
        "ideal": np.array([A.strided_head_layers(int(n), heads) for n in ns]),
        "random": np.array([A.random_head_mean(int(n), heads) for n in ns]),
        "rnn": np.array([A.rnn_path(int(n)) for n in ns]),
    })


@memo(maxsize=64)
def linked_curve(n: int, heads: int) -> dict[str, np.ndarray]:
    """Layers to reach all n positions when only weights >= tau count, over a log grid of tau (down past 1/n)."""
    taus = np.geomspace(min(0.5 / n, 1e-2), 1.0, 241)
    keys, layers = A.linked_layers_curve(n, heads, taus)
    return freeze({"taus": taus, "keys": keys, "layers": layers})


@memo(maxsize=64)
def model_paths(cache_key: tuple, prefix: str, threshold: float) -> tuple[int | None, np.ndarray, int]:
    """Layers needed on the sidebar model's thresholded attention graphs (its layers repeated)."""
    model, ids, kwargs = model_inputs(cache_key)
    graphs = A.attention_graphs(model, ids, threshold, prefix, **kwargs)  # [layer q k]
    needed, fields = A.layers_to_connect([torch.as_tensor(g) for g in graphs])
    return freeze((needed, fields, graphs.shape[0]))


# Figures, built once per distinct input for every session (see ui.shell.figures.cached).
stage_figure = cached(F.stage_heatmap)
contribution_figure = cached(F.contribution_figure)
lens_figure = cached(F.logit_lens_figure)
saliency_figure = cached(F.saliency_figure)
depth_figure = cached(F.depth_chart)
mixing_figure = cached(F.mixing_figure)
twins_figure = cached(F.twins_chart)
paths_figure = cached(F.paths_chart)
field_figure = cached(F.receptive_field_figure)
linked_figure = cached(F.linked_layers_chart)
