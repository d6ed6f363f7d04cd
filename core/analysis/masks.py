"""What a mask does to a real computation: the right and wrong way to apply it, how much
probability leaks through a finite mask constant, what sparsity buys in measured time, and
how a model's predictions and accuracy change under a mask a student drew.

In reading order:

1. Right vs wrong masking (add a large negative constant before softmax, or zero after it).
2. Leak: the probability mass a finite constant lets through, in float32 and float16.
3. Cost: dense vs block-sparse attention, timed on this machine.
4. A model under a mask: masked runs, task accuracy, and measured influence (gradients).
5. The mask as a graph: Laplacian, spectrum and reach by depth, receptive fields.
6. The tables the Masks page shows: predictions under two masks, empty rows, leaks on real scores,
   and the encoder-vs-decoder comparison on the future-legality task.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from typing import Optional, Union

import numpy as np
import torch

from core import masks as M
from core.analysis import tensor_from
from core.device import one_thread
from core.tasks import IGNORE, Task, get_task
from core.train import evaluate

MASK_CONSTANTS: dict[str, float] = {"-1e4": -1e4, "-1e9": -1e9, "-inf": float("-inf")}
DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "float16": torch.float16}



def _whole(name: str, value: object, low: int, high: int) -> int:
    """``value`` as an int in [low, high], else a ValueError naming the argument."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not low <= value <= high:
        raise ValueError(f"{name} must be a whole number from {low} to {high}, got {value!r}")
    return int(value)


# ---------------------------------------------------------------------------------------------
# 1. Right vs wrong masking
# ---------------------------------------------------------------------------------------------


def constant_in_dtype(constant: float, dtype: torch.dtype) -> float:
    """The value a mask constant actually becomes when stored in ``dtype`` (-1e9 is -inf in float16)."""
    return float(torch.tensor(float(constant), dtype=torch.float64).to(dtype))


def softmax_add_constant(scores: torch.Tensor, mask: torch.Tensor, constant: float = float("-inf"),
                         dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The right way: add ``constant`` to every forbidden logit, THEN softmax, all in ``dtype``.

    No clean-up afterwards, so what a finite constant lets through (and the NaN of a row
    whose every key is -inf) stays visible. ``scores`` and ``mask`` share the shape ``[.., q, k]``.
    """
    s = scores.to(dtype)
    c = torch.tensor(float(constant), dtype=torch.float64).to(dtype)  # overflow to -inf, as hardware does
    bias = torch.where(mask.to(s.device), torch.zeros((), dtype=dtype), c)  # [.. q k]
    return torch.softmax(s + bias, dim=-1)


def softmax_zero_after(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The wrong way: softmax over ALL keys, then zero the forbidden weights.

    The forbidden keys still took their share of the normaliser, so the rows no longer sum to 1.
    """
    return torch.softmax(scores.float(), dim=-1) * mask.to(scores.device)  # [.. q k]


def compare_masking(scores: np.ndarray, mask: np.ndarray, constant: float = float("-inf")) -> dict[str, np.ndarray]:
    """Both ways on one head's scores ``[q, k]``: the patterns and their row sums.

    The right pattern here follows the model's convention for a fully masked row (zeros,
    never NaN), so the sums are 1 for every row that may attend to something and 0 otherwise.
    """
    s, m = tensor_from(scores, dtype=torch.float32), tensor_from(mask, dtype=torch.bool)
    right = torch.nan_to_num(softmax_add_constant(s, m, constant), nan=0.0).masked_fill(~m, 0.0)  # [q k]
    wrong = softmax_zero_after(s, m)  # [q k]
    return {"right": right.numpy(), "wrong": wrong.numpy(),
            "right_sums": right.sum(-1).numpy(), "wrong_sums": wrong.sum(-1).numpy()}


# ---------------------------------------------------------------------------------------------
# 2. Leak through a finite constant
# ---------------------------------------------------------------------------------------------


def leak_mass(scores: torch.Tensor, mask: torch.Tensor, constant: float,
              dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Per query row, the probability that lands on forbidden keys when masking with ``constant``
    in ``dtype`` (computed in that dtype, returned as float64; NaN where the softmax gave NaN)."""
    p = softmax_add_constant(scores, mask, constant, dtype).to(torch.float64)  # [.. q k]
    return (p * (~mask.to(p.device)).to(torch.float64)).sum(-1)  # [.. q]


def gap_row(gap: float, n_forbidden: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A worst-case row: one allowed key with logit 0 and ``n_forbidden`` forbidden keys whose
    logits sit ``gap`` ABOVE it (the forbidden keys are the ones the query likes best)."""
    n_forbidden = _whole("n_forbidden", n_forbidden, 1, M.MAX_N)
    scores = torch.tensor([0.0] + [float(gap)] * n_forbidden, dtype=torch.float64)  # [k]
    mask = torch.zeros(n_forbidden + 1, dtype=torch.bool)
    mask[0] = True
    return scores, mask


def min_constant(gap: float, n_forbidden: int, eps: float) -> float:
    """The smallest |C| that keeps the worst-case leak at most ``eps`` (exact arithmetic):
    leak = k e^(g+C) / (1 + k e^(g+C)) <= eps  <=>  |C| >= g + ln(k (1 - eps) / eps)."""
    if not 0.0 < eps < 1.0:
        raise ValueError(f"eps must be between 0 and 1 (exclusive), got {eps}")
    return float(gap) + math.log(n_forbidden * (1.0 - eps) / eps)


def leak_table(gap: float, n_forbidden: int, eps: float,
               constants: Mapping[str, float] = MASK_CONSTANTS,
               dtypes: Mapping[str, torch.dtype] = DTYPES) -> list[dict]:
    """One row per (dtype, constant): what the constant is stored as, the leaked mass on the
    worst-case row, whether it stays within ``eps``, and what a row with EVERY key masked gives."""
    scores, mask = gap_row(gap, n_forbidden)
    rows = []
    for dname, dtype in dtypes.items():
        overflow = abs(float(gap)) > torch.finfo(dtype).max
        for cname, constant in constants.items():
            leak = float(leak_mass(scores, mask, constant, dtype))
            everything = softmax_add_constant(scores, torch.zeros_like(mask), constant, dtype).to(torch.float64)
            if bool(torch.isnan(everything).any()):
                all_masked = "NaN (0/0)"
            else:
                all_masked = f"weights sum to {float(everything.sum()):.3g}: all of it leaks"
            if math.isnan(leak):
                verdict = "NaN" + (" (the logit itself overflows)" if overflow else "")
            else:
                verdict = "yes" if leak <= eps else "no: leaks"
            rows.append({"dtype": dname, "constant": cname, "stored as": constant_in_dtype(constant, dtype),
                         "leaked mass": leak, f"within eps = {eps:g}?": verdict,
                         "row with every key masked": all_masked})
    return rows


def leak_curve(gaps: Sequence[float], n_forbidden: int, constant: float, dtype: torch.dtype) -> np.ndarray:
    """Leaked mass on the worst-case row for each gap (NaN where the dtype overflows)."""
    return np.array([float(leak_mass(*gap_row(g, n_forbidden), constant, dtype)) for g in gaps])


LEAK_GAPS = np.logspace(0, 10, 121)  # the gaps the leak chart is drawn over, 1 to 1e10
LEAK_GAPS.flags.writeable = False


def leak_curves(n_forbidden: int) -> dict[str, np.ndarray]:
    """The leak curve over LEAK_GAPS of every number format and mask constant, named "<format> <constant>".

    A pure function of the number of blocked keys (726 softmaxes a call): worth keeping, which the
    caller does (the Masks page through ui.masks.runs).
    """
    return {f"{d} {c}": leak_curve(LEAK_GAPS, n_forbidden, value, dtype)
            for d, dtype in DTYPES.items() for c, value in MASK_CONSTANTS.items()}


# ---------------------------------------------------------------------------------------------
# 3. Cost: dense vs block-sparse attention, measured
# ---------------------------------------------------------------------------------------------


def dense_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """softmax(q k^T / sqrt(d)) v over every pair: n^2 scores per head. q, k, v: [head n d]."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # [head n n]
    return torch.softmax(scores, dim=-1) @ v  # [head n d]


def block_sparse_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, b: int) -> torch.Tensor:
    """The same attention restricted to blocks of ``b`` consecutive tokens, computed as n/b small
    b x b problems (n*b scores per head), never building the n x n matrix. Needs b to divide n."""
    h, n, d = q.shape
    if n % b:
        raise ValueError(f"block size b={b} must divide n={n}")
    qb, kb, vb = (t.reshape(h, n // b, b, d) for t in (q, k, v))  # [head block b d]
    scores = qb @ kb.transpose(-2, -1) / math.sqrt(d)  # [head block b b]
    out = torch.softmax(scores, dim=-1) @ vb  # [head block b d]
    return out.reshape(h, n, d)  # [head n d]


def _best_ms(fn, repeats: int) -> float:
    """Fastest of ``repeats`` timed calls after one warm-up, in milliseconds (the least disturbed)."""
    fn()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best * 1000.0


def time_attention(ns: Sequence[int] = (128, 256, 512, 1024, 2048), b: int = 32, n_heads: int = 4,
                   d_head: int = 16, repeats: int = 3, seed: int = 0) -> list[dict]:
    """Time dense and block-sparse attention for each n on this machine, in one run.

    One row per n: both times (best of ``repeats``), the measured ratio sparse/dense, the
    predicted ratio b/n, and the number of scored pairs of each. Sizes are those of the
    teaching model (4 heads of 16); n must be a multiple of b. Runs on one CPU thread.
    """
    b = _whole("b (block size)", b, 1, M.MAX_N)
    generator = torch.Generator().manual_seed(seed)
    with one_thread():  # one thread: a busy shared machine disturbs the timing far less
        return _time_rows(ns, b, n_heads, d_head, repeats, generator)


def _time_rows(ns, b, n_heads, d_head, repeats, generator) -> list[dict]:
    """The timing loop of :func:`time_attention` (one row per n)."""
    rows = []
    with torch.no_grad():
        for n in ns:
            n = _whole("n", n, b, M.MAX_N)
            q, k, v = (torch.randn(n_heads, n, d_head, generator=generator) for _ in range(3))  # [head n d]
            dense_ms = _best_ms(lambda: dense_attention(q, k, v), repeats)
            sparse_ms = _best_ms(lambda: block_sparse_attention(q, k, v, b), repeats)
            rows.append({"n": n, "b": b, "dense ms": dense_ms, "block-sparse ms": sparse_ms,
                         "measured ratio": sparse_ms / dense_ms, "predicted ratio b/n": b / n,
                         "dense pairs": n * n, "block-sparse pairs": n * b})
    return rows


# ---------------------------------------------------------------------------------------------
# 4. A model under a mask
# ---------------------------------------------------------------------------------------------

MaskArray = Union[np.ndarray, torch.Tensor]


def mask_argument(masks: MaskArray | Sequence[MaskArray]) -> Union[torch.Tensor, dict[int, torch.Tensor]]:
    """A model's mask argument from one ``[q, k]`` mask (every layer) or a per-layer stack
    ``[layer, q, k]`` / list (one per layer, first layer first)."""
    if isinstance(masks, (np.ndarray, torch.Tensor)) and np.ndim(masks) == 2:
        return torch.tensor(np.array(masks, dtype=bool))  # a copy: cached arrays are read-only
    return {i: torch.tensor(np.array(m, dtype=bool)) for i, m in enumerate(masks)}


def mask_kwargs(model, mask_arg) -> dict:
    """Where the mask goes in a call: ``mask=`` for one stack, ``tgt_mask=`` (the decoder's own
    self-attention) for an encoder-decoder."""
    if mask_arg is None:
        return {}
    return {"tgt_mask" if model.cfg.arch == "encoder-decoder" else "mask": mask_arg}


def run_masked(model, ids: torch.Tensor, names, mask_arg=None, tgt: Optional[torch.Tensor] = None):
    """(logits, cache) of one call with the mask (None = the model's own default mask)."""
    extra = {"tgt": tgt} if tgt is not None else {}
    return model.run_with_cache(ids, names, **extra, **mask_kwargs(model, mask_arg))


def masked_patterns(model, ids: torch.Tensor, mask_arg=None,
                    tgt: Optional[torch.Tensor] = None) -> dict[str, np.ndarray]:
    """Logits, and the self-attention scores and patterns ``[layer head q k]`` of every layer on the
    masked side (the decoder of an encoder-decoder), of one call under the mask (None = default)."""
    prefix = "decoder." if model.cfg.arch == "encoder-decoder" else ""
    layers = range(model.cfg.n_layers)
    names = [f"{prefix}blocks.{i}.attn.{h}" for i in layers for h in ("hook_attn_scores", "hook_pattern")]
    logits, cache = run_masked(model, ids, names, mask_arg, tgt)

    def per_layer(hook: str) -> np.ndarray:
        return np.stack([cache[f"{prefix}blocks.{i}.attn.{hook}"][0].float().cpu().numpy()
                         for i in layers])  # [layer head q k]

    return {"logits": logits.float().cpu().numpy(), "scores": per_layer("hook_attn_scores"),
            "pattern": per_layer("hook_pattern")}


def fill_in(model, ids: torch.Tensor, mask_id: int, positions: Sequence[int], mask_arg=None,
            chunk: int = 8) -> dict[str, np.ndarray]:
    """An encoder's guesses for the words of a text, each hidden in turn: copy p of ``ids`` ``[1 pos]`` has
    position p replaced by ``mask_id`` and is read at p, under the mask (None = default). Returns, per position
    of ``positions``, the top guess ``top``, its probability ``p_top`` and the probability of the hidden token
    ``p_right``. Copies run ``chunk`` at a time (a [copies pos vocab] logits tensor is the large part)."""
    positions = [int(p) for p in positions]
    row = ids[0]
    top, p_top, p_right = [], [], []
    with torch.no_grad():
        for start in range(0, len(positions), chunk):
            at = torch.tensor(positions[start:start + chunk], device=ids.device)  # [copies]
            copies = row.repeat(len(at), 1)  # [copies pos]
            copies[torch.arange(len(at)), at] = mask_id
            logits = model(copies, **mask_kwargs(model, mask_arg))  # [copies pos vocab]
            probs = logits[torch.arange(len(at)), at].float().softmax(-1)  # [copies vocab]
            best = probs.max(-1)
            top.append(best.indices.cpu())
            p_top.append(best.values.cpu())
            p_right.append(probs.gather(1, row[at][:, None]).squeeze(1).cpu())
    cat = (lambda xs: torch.cat(xs).numpy()) if positions else (lambda xs: np.zeros(0))
    return {"top": cat(top).astype(np.int64), "p_top": cat(p_top), "p_right": cat(p_right)}


def length_for_width(task: Task, arch: str, width: int) -> Optional[int]:
    """The content length whose examples are exactly ``width`` positions wide on the masked side
    (the decoder input for encoder-decoder), or None if the task never makes that width."""
    for length in range(task.min_length, task.max_length + 1):
        try:
            batch = task.batch(1, arch, seed=0, length=length)
        except ValueError:
            continue  # e.g. odd lengths for brackets
        side = batch.tgt if batch.tgt is not None else batch.tokens
        if side.shape[1] == width:
            return length
    return None


def masked_accuracy(model, task: Union[str, Task], mask_arg=None, n_samples: int = 256, seed: int = 7,
                    length: Optional[int] = None) -> float:
    """The task's metric on ``n_samples`` examples of ``length`` with the given mask (None = default).

    The examples are fixed by ``seed``, so two calls with different masks score the same inputs.
    """
    task = get_task(task) if isinstance(task, str) else task
    arch = model.cfg.arch
    batch = task.batch(n_samples, arch, seed=seed, length=length)
    device = model.device
    tgt = batch.tgt.to(device) if batch.tgt is not None else None
    model.eval()
    with torch.no_grad():
        logits = model(batch.tokens.to(device), tgt, **mask_kwargs(model, mask_arg))  # [batch pos vocab]
    return task.accuracy(logits, batch)


INFLUENCE_BYTES = 32 << 20  # what one batch of copies may hold for its backward pass (logits and attention)


def influence(model, ids: torch.Tensor, mask_arg=None, tgt: Optional[torch.Tensor] = None,
              seed: int = 0, budget: int = INFLUENCE_BYTES) -> np.ndarray:
    """Measured flow of information: entry [q, k] is the size of the gradient of the output at
    position q with respect to the token embedding at position k.

    The input is repeated once per query position (examples in a batch never mix), and copy q
    is asked only about its own output q, so one backward pass gives every row. The output is
    read through a fixed random direction, so a zero means "no path", not a coincidence.
    Attention is the only place positions mix, so this is zero wherever the stacked masks
    (plus the residual path) give no route from k to q.

    The copies run in batches that fit `budget` bytes: n copies of n tokens hold n² logits over the vocabulary
    and n³ attention weights per head and layer (64 tokens of a 4,096-token vocabulary: 300 MB at once), so the
    rows are measured a batch of copies at a time, each with its own backward pass (the same numbers).
    """
    prefix = "decoder." if model.cfg.arch == "encoder-decoder" else ""
    n_q = (tgt if tgt is not None else ids).shape[1]
    n_k = ids.shape[1]
    direction = torch.randn(model.cfg.vocab_size, generator=torch.Generator().manual_seed(seed))  # [vocab]
    direction = direction.to(model.device)
    attentions = sum(name.endswith("hook_pattern") for name in model.hook_names())
    per_copy = 4 * 3 * (n_q * model.cfg.vocab_size + attentions * model.cfg.n_heads * n_q * max(n_q, n_k))
    batch = int(max(1, min(n_q, budget // max(1, per_copy))))
    out = []
    for start in range(0, n_q, batch):
        rows = torch.arange(start, min(n_q, start + batch), device=model.device)  # the copies' own positions
        copies = torch.arange(len(rows), device=model.device)

        def read(logits: torch.Tensor) -> torch.Tensor:
            return (logits[copies, rows].float() * direction).sum()  # copy i, output start + i

        extra = {"tgt": tgt.expand(len(rows), -1)} if tgt is not None else {}  # [copy pos]
        _, cache = model.run_with_cache(ids.expand(len(rows), -1), [prefix + "hook_embed"], grad_of=read, **extra,
                                        **mask_kwargs(model, mask_arg))
        grad = cache[prefix + "hook_embed_grad"]  # [copy k d_model]: copy i's gradient at position k
        out.append(grad.float().norm(dim=-1).cpu())  # [copy k]
    return torch.cat(out).numpy()  # [q k]


def scored_positions(targets: Optional[Sequence[int]]) -> list[int]:
    """Positions a task scores (not IGNORE)."""
    return [] if targets is None else [p for p, t in enumerate(targets) if t != IGNORE]


# ---------------------------------------------------------------------------------------------
# 5. The mask as a graph
# ---------------------------------------------------------------------------------------------


def graph_facts(stack: np.ndarray, layer: int, same_for_every_layer: bool) -> dict:
    """The graph of the masks ``stack`` [layer q k]: the chosen layer's Laplacian, spectrum, lambda_2
    and number of separate pieces, and how the share of reached pairs grows with depth (past the
    model's layers the last mask repeats). ``reach`` is [q k] through the model's own layers,
    ``stacked`` the masks [depth q k] the depth curve used."""
    per = [tensor_from(m) for m in stack]
    t, n, layers = per[layer], stack.shape[-1], len(per)
    spectrum = M.laplacian_spectrum(t)
    full_at = M.layers_to_reach_all(t) if same_for_every_layer else None
    depth = max(layers, full_at if full_at is not None else min(n - 1, 8))
    stacked = per + [per[-1]] * (depth - layers)  # beyond the model's layers, the last mask repeats
    shares = [1.0 / n] + [float(M.reachability(stacked[:d]).float().mean()) for d in range(1, depth + 1)]
    if not same_for_every_layer:
        full_at = next((d for d, s in enumerate(shares) if s >= 1.0), None)
    return {"laplacian": M.laplacian(t), "spectrum": spectrum, "lambda2": M.algebraic_connectivity(t),
            "pieces": int((spectrum < 1e-9).sum()), "shares": shares, "full_at": full_at,
            "reach": M.reachability(per).numpy(),  # [q k] through the model's own layers
            "stacked": np.stack([m.numpy() for m in stacked])}  # [depth q k]


def receptive_fields(stacked: np.ndarray, token: int, max_rows: int) -> np.ndarray:
    """Keys that can reach ``token`` after 1, 2, ... layers of ``stacked`` [depth q k], for at most
    ``max_rows`` layers: [layer k]."""
    per = [tensor_from(m) for m in stacked[:max_rows]]
    return torch.stack(M.receptive_field(per, token)).numpy()


def edge_counts(mask: np.ndarray) -> dict[str, int]:
    """Edges of one mask [q k]: how many look back (key before query), ahead, and tokens that may
    attend to themselves."""
    return {"back": int(np.tril(mask, -1).sum()), "ahead": int(np.triu(mask, 1).sum()),
            "self": int(np.trace(mask))}


def influence_check(measured: np.ndarray, reach: np.ndarray) -> dict[str, int]:
    """Does the measured influence [q k] obey the graph's reach [q k]? Pairs without a route, those of
    them with a nonzero gradient (leaks, must be 0), pairs with a route, and those with a zero gradient."""
    return {"no_route": int((~reach).sum()), "leaks": int(((measured > 0) & ~reach).sum()),
            "route": int(reach.sum()), "silent": int(((measured == 0) & reach).sum())}


# ---------------------------------------------------------------------------------------------
# 6. The tables of the Masks page
# ---------------------------------------------------------------------------------------------


def empty_rows(stack: np.ndarray) -> list[tuple[int, int]]:
    """(layer, query) of every query row of the masks ``stack`` [layer q k] that may read no key."""
    return [(layer, int(q)) for layer in range(stack.shape[0]) for q in np.nonzero(~stack[layer].any(axis=1))[0]]


def prediction_changes(own: Sequence[Mapping], yours: Sequence[Mapping]) -> list[dict]:
    """Per scored position (rows of ui.shell.sidebar.prediction_table under the model's own mask and under
    yours): the right answer, both predictions with p(right), and whether the prediction changed."""
    return [{"position": f"{a['position']}:{a['token']}", "right answer": a["right answer"],
             "own: predicts": a["predicted"], "own: p(right)": a["p(right)"],
             "yours: predicts": b["predicted"], "yours: p(right)": b["p(right)"],
             "changed": "CHANGED" if a["predicted"] != b["predicted"] else ""} for a, b in zip(own, yours)]


def top_prediction_changes(labels: Sequence[str], vocab, own_logits: np.ndarray,
                           your_logits: np.ndarray) -> list[dict]:
    """Per position (for inputs with no right answers): the top token under the model's own mask and
    under yours [1 pos vocab], and whether it changed."""
    top_a, top_b = own_logits[0].argmax(-1), your_logits[0].argmax(-1)  # [pos]
    return [{"position": label, "own: predicts": vocab.decode([int(a)])[0],
             "yours: predicts": vocab.decode([int(b)])[0], "changed": "CHANGED" if a != b else ""}
            for label, a, b in zip(labels, top_a, top_b)]


def real_score_leaks(scores: np.ndarray, mask: np.ndarray) -> Optional[tuple[float, dict[str, float]]]:
    """One head's real scores [q k] under ``mask`` [q k]: the largest gap (best blocked minus best
    allowed score) over rows that have both kinds of key, and the worst float16 leak of each mask
    constant; None when no row has both."""
    real = tensor_from(scores, dtype=torch.float32)
    m = torch.as_tensor(np.asarray(mask, dtype=bool))
    partial = m.any(-1) & ~m.all(-1)  # rows with both allowed and blocked keys
    if not bool(partial.any()):
        return None
    blocked_max = real.masked_fill(m, float("-inf")).max(-1).values  # [q]
    allowed_max = real.masked_fill(~m, float("-inf")).max(-1).values  # [q]
    gap = float((blocked_max - allowed_max)[partial].max())
    leaks = {c: float(leak_mass(real[partial], m[partial], v, torch.float16).max()) for c, v in MASK_CONSTANTS.items()}
    return gap, leaks


def legality_comparison(encoder, decoder, task: Task, length: int, n_samples: int = 256, seed: int = 7) -> dict:
    """The future-legality task with the rule written last: both models' accuracy under the full and
    the causal mask (``acc[(model, mask)]``), core.train.evaluate's accuracy of each, and one worked
    example: its tokens, targets, each model's predictions and the pull of the rule (the size of the
    gradient of each output with respect to the last token)."""
    width = length + 2
    full, causal = M.full(width), M.causal(width)
    out = {"acc": {}, "evaluate": {}}
    for name, model in (("encoder", encoder), ("decoder", decoder)):
        for mask_name, mask in (("full", full), ("causal", causal)):
            out["acc"][(name, mask_name)] = masked_accuracy(model, task, mask, n_samples, seed, length)
        out["evaluate"][name] = evaluate(model, task, n_samples=512, length=length)
    batch = task.batch(1, "encoder", seed=3, length=length)
    ids = batch.tokens.to(encoder.device)  # [1 pos]
    out["tokens"] = task.vocab.decode(batch.tokens[0])
    out["targets"] = batch.targets[0].tolist()
    for name, model in (("encoder", encoder), ("decoder", decoder)):
        with torch.no_grad():
            logits = model(ids)  # [1 pos vocab]
        out[f"{name}_pred"] = task.vocab.decode(logits[0].argmax(-1))
        out[f"{name}_rule"] = influence(model, ids)[:, -1]  # [q]: how much the rule moves each output
    return out


def legality_rows(data: Mapping, vocab) -> list[dict]:
    """The worked example of :func:`legality_comparison` as table rows, one per scored position."""
    tokens = data["tokens"]
    return [{"position": f"{p}:{tokens[p]}", "right answer": vocab.decode([target])[0],
             "encoder says": data["encoder_pred"][p], "decoder says": data["decoder_pred"][p],
             "encoder: pull of the rule": float(data["encoder_rule"][p]),
             "decoder: pull of the rule": float(data["decoder_rule"][p])}
            for p, target in enumerate(data["targets"]) if target >= 0]
