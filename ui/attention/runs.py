"""The Attention page's cached work: one run per (input, kind, temperature) reduced while the model runs to what the
views draw (core.analysis.attention.PatternSummary), one layer's arithmetic, and the figures, built once per
distinct input (see ui.shell.figures.cached).

Nothing here keeps a cache of every hook: at 1,024 tokens the patterns and scores of a GPT-2-sized model are a
gigabyte. Each layer's pattern is pooled into the overview and its rows' entropy taken as the model computes it,
then let go; only the layers a click may open next are kept, and those as float16 past EXACT_CELLS cells a head.
"""

from __future__ import annotations

import numpy as np
import torch

from core.analysis import attention as A
from core.figures import attention as F
from core.hooks import current_state
from core.figures.heatmaps import EXACT_CELLS, OVERVIEW_CELLS, overview_heatmap, pool, pool_block
from ui.shell import runs
from ui.shell.figures import cached
from ui.shell.memo import freeze, memo
from ui.shell.sidebar import Selection

grid_figure = cached(F.overview_grid)
pooled_grid_figure = cached(F.pooled_grid)
head_figure = cached(F.head_heatmap)
overview_figure = cached(overview_heatmap)
window_figure = cached(F.window_heatmap)
lines_figure = cached(F.lines_view)
top_lines_figure = cached(F.top_lines_view)
bars_figure = cached(F.query_bars)
top_bars_figure = cached(F.top_query_bars)
steps_figure = cached(F.steps_bars)
entropy_figure = cached(F.entropy_bars)
entropy_lines_figure = cached(F.entropy_lines)
diff_figure = cached(F.difference_heatmap)
pooled_diff_figure = cached(F.pooled_difference_heatmap)
dots_figure = cached(F.dot_histogram)
curve_figure = cached(F.scale_curve)
spread_figure = cached(F.head_spread_bars)
spread_table_figure = cached(F.head_spread_table)
DOT_PAIRS = 4000  # random pairs in the q.k histogram: its measured spread is within about 1% of the truth
# Full-resolution patterns a summary keeps: every layer while they fit (a click on a layer or head then runs
# nothing: 4 layers x 4 heads at 1,024 tokens in float16 are 32 MB), else the open layer alone.
KEEP_BYTES = 64 * 2 ** 20
SUMMARY_BYTES = 160 * 2 ** 20  # the summaries memo: about three long inputs' at once, whatever the class size


def kind_of(arch: str, key: str) -> A.AttentionKind:
    """The kind of attention of this architecture named `key` (the memo keys carry the key, not the object)."""
    return next(k for k in A.attention_kinds(arch) if k.key == key)


def kept_layers(n_layers: int, n_heads: int, n_q: int, n_k: int, layer: int, temperature: float = 1.0) -> tuple[int, ...]:
    """The layers a summary keeps at full resolution: all when they fit KEEP_BYTES, else `layer` alone; at a
    temperature other than 1 (a detour: the Temperature view needs no layer whole) a long input's `layer` alone."""
    itemsize = 4 if n_q * n_k <= EXACT_CELLS else 2
    every = n_layers * n_heads * n_q * n_k * itemsize
    if every <= KEEP_BYTES and (temperature == 1 or n_q * n_k <= EXACT_CELLS):
        return tuple(range(n_layers))
    return (layer,)


def summary(sel: Selection, kind: A.AttentionKind, temperature: float, layer: int) -> A.PatternSummary:
    """The PatternSummary of one kind at a temperature on the sidebar's input, with `layer` among the kept ones."""
    cfg = sel.model.cfg
    q_tokens, k_tokens = A.axis_tokens(kind, sel.tokens, sel.tgt_tokens)
    keep = kept_layers(cfg.n_layers, cfg.n_heads, len(q_tokens), len(k_tokens), layer, temperature)
    targets = None if sel.targets is None else tuple(int(t) for t in sel.targets)
    return _summary(sel.cache_key, kind.key, float(temperature), keep, targets)


@memo(maxsize=16, max_bytes=SUMMARY_BYTES)
def _summary(key: tuple, kind_key: str, temperature: float, keep: tuple, targets) -> A.PatternSummary:
    """One forward pass whose pattern hooks pool each layer (the largest weight of each block, heatmaps.pool),
    take each row's entropy and keep the `keep` layers, returning nothing to the model (it runs unchanged)."""
    model, tokens, kwargs = runs.model_inputs(key)
    cfg = model.cfg
    kind = kind_of(cfg.arch, kind_key)
    overview, entropy, kept = {}, {}, {}
    shape: dict[str, tuple[int, int]] = {}  # the pattern's (queries, keys) and the overview's block

    def reducer(layer: int):
        def reduce(pattern: torch.Tensor, hook) -> None:
            p = pattern[0].detach().float().cpu()  # [head q k]
            n_q, n_k = p.shape[-2:]
            shape["dims"] = (n_q, n_k)
            block = shape.setdefault("block", (pool_block(n_q, OVERVIEW_CELLS), pool_block(n_k, OVERVIEW_CELLS)))
            pooled = pool(p.numpy(), block)  # [head q/bq k/bk]; a copy either way (p is the model's live tensor)
            overview[layer] = np.array(pooled, dtype=np.float32 if block == (1, 1) else np.float16)
            terms = current_state().scratch((n_q, n_k), p)  # [q k]: the run's own, reused head after head
            entropy[layer] = np.stack([A.entropy_bits(h, terms).numpy() for h in p])  # [head q]
            if layer in keep:
                dtype = torch.float32 if n_q * n_k <= EXACT_CELLS else torch.float16
                kept[layer] = p.to(dtype, copy=True).numpy()  # [head q k]
        return reduce

    names = A.pattern_names(kind, cfg.n_layers)
    logits = model.run_with_hooks(tokens, fwd=[(name, reducer(i)) for i, name in enumerate(names)],
                                  temperature=temperature, **kwargs)
    (n_q, n_k), block = shape["dims"], shape["block"]
    top_ids, top_probs, right = A.top_predictions(logits.float().cpu(), targets)
    result = A.PatternSummary(
        n_q=n_q, n_k=n_k, block=block,
        overview=np.stack([overview[i] for i in range(cfg.n_layers)]),  # [layer head q/bq k/bk]
        entropy=np.stack([entropy[i] for i in range(cfg.n_layers)]),  # [layer head q]
        layers=tuple(keep), patterns=np.stack([kept[i] for i in keep]),  # [kept head q k]
        top_ids=top_ids, top_probs=top_probs, target_probs=right)
    return freeze(result)


def per_query_head(out: dict, n_heads: int) -> dict:
    """A run's keys and values as one per query head: grouped-query attention (Llama-family, `n_kv_heads` <
    `n_heads`) hooks them per key/value head, `[batch pos kv_head d_head]`, and query head h reads key/value head
    h // (n_heads / n_kv_heads). Other arrays, and every array of a model without grouping, pass unchanged."""
    kv_hooks = ("hook_k", "hook_v", "hook_rot_k", "hook_k_raw")
    return {name: np.repeat(value, n_heads // value.shape[2], axis=2)  # [batch pos head d_head]
            if name.endswith(kv_hooks) and np.ndim(value) == 4 and 0 < value.shape[2] < n_heads else value
            for name, value in out.items()}


def run_steps(sel: Selection, kind: A.AttentionKind, layer: int, head: int, temperature: float) -> dict:
    """q, k, v and z of one layer, and one head's mask, scores and pattern `[1 1 q k]` (what the arithmetic panel
    recomputes and checks; A.head_steps reads a one-head array as that head's); keys and values one per query head
    (per_query_head). A query click reuses it; the other heads' q x k arrays are never kept."""
    out = _steps(sel.cache_key, kind.key, layer, head, float(temperature))
    return per_query_head(out, sel.model.cfg.n_heads)


@memo(maxsize=32)
def _steps(key: tuple, kind_key: str, layer: int, head: int, temperature: float) -> dict:
    model, tokens, kwargs = runs.model_inputs(key)
    kind = kind_of(model.cfg.arch, kind_key)
    names = A.step_names(kind, layer, model.cfg.pos)
    per_head = {kind.hook(layer, n) for n in ("hook_mask", "hook_attn_scores", "hook_pattern")}
    out: dict[str, np.ndarray] = {}

    def keeper(name: str):
        def keep(x: torch.Tensor, hook) -> None:
            x = x.detach()
            if name in per_head:
                x = x[:, head:head + 1] if x.shape[1] > 1 else x[:, :1]  # [1 1 q k]
            out[name] = (x.float() if x.is_floating_point() else x).cpu().numpy().copy()
        return keep

    model.run_with_hooks(tokens, fwd=[(n, keeper(n)) for n in names], temperature=temperature, **kwargs)
    return freeze(out)


def full_patterns(sel: Selection, kind: A.AttentionKind, temperature: float, layers: tuple[int, ...]) -> np.ndarray:
    """`[layer head q k]` float32 of the given layers, computed afresh and kept nowhere (an export's download)."""
    model, tokens, kwargs = runs.model_inputs(sel.cache_key)
    kept: dict[int, np.ndarray] = {}

    def keeper(layer: int):
        def keep(pattern: torch.Tensor, hook) -> None:
            kept[layer] = pattern[0].detach().float().cpu().numpy().copy()  # [head q k]
        return keep

    names = A.pattern_names(kind, model.cfg.n_layers)
    model.run_with_hooks(tokens, fwd=[(names[i], keeper(i)) for i in layers], temperature=temperature, **kwargs)
    return np.stack([kept[i] for i in layers])  # [layer head q k]


@memo(maxsize=64)
def dot_samples(d_k: int, seed: int) -> np.ndarray:
    """q.k of DOT_PAIRS random unit-variance pairs of width d_k (the histogram of the 'Why √d_k' view)."""
    return A.random_dot_products(d_k, DOT_PAIRS, seed)


@memo(maxsize=32)
def sweep(n_keys: int, seed: int) -> A.ScaleSweep:
    """Softmax of random scores against every d_k, scaled and not (the curves of the 'Why √d_k' view)."""
    return A.scale_sweep(n_keys, seed)


def run_spread(sel: Selection, kind: A.AttentionKind) -> A.HeadSpread:
    """The spread of the model's own raw q.k per layer and head on the sidebar's input."""
    return _spread(sel.cache_key, kind.key)


@memo(maxsize=32)
def _spread(key: tuple, kind_key: str) -> A.HeadSpread:
    """head_dot_spread from a run that keeps every layer's queries and keys alone (no logits: GPT-2's are 200 MB
    at 1,024 tokens)."""
    model, tokens, kwargs = runs.model_inputs(key)
    cfg = model.cfg
    kind = kind_of(cfg.arch, kind_key)
    out: dict[str, np.ndarray] = {}

    def keeper(name: str):
        def keep(x: torch.Tensor, hook) -> None:
            out[name] = x.detach().float().cpu().numpy().copy()  # [batch pos head d_head]
        return keep

    names = A.spread_names(kind, cfg.n_layers, cfg.pos)
    model.run_with_hooks(tokens, fwd=[(n, keeper(n)) for n in names], **kwargs)
    return freeze(A.head_dot_spread(per_query_head(out, cfg.n_heads), kind, cfg.n_layers, cfg.pos))
