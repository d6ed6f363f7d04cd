"""Cached work for the Positions page: every table, check and score it shows, once per distinct view.

Every widget change reruns the whole page, so anything the page computes is looked up here through
process-wide memos (ui.shell.memo: shared by every session, numpy results frozen read-only). Arguments
are plain numbers and strings; model-dependent results are keyed by model id and device, and the
model is re-got inside (as ui.shell.runs does), never passed in. The slow ones (`swap_accuracy`, `curves`)
show no spinner here: the view shows one around the call when `.has(...)` says the work is not stored
yet. The tables' rows come from core.analysis.positions; they are handed to
st.dataframe as pyarrow tables made once with pa.Table.from_pandas, which is what st.dataframe
would otherwise do to the same pandas frame on every rerun (same bytes sent; tables are immutable).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import torch

from core import positional
from core.analysis import positions as P
from core.figures import positions as F
from core.figures.long_patterns import pattern_figure, reduce_patterns
from core.text_task import TextTask
from ui.shell import models, runs
from ui.shell.figures import cached
from ui.shell.memo import freeze, memo

ROPE_D_HEAD = 16  # the bundled models' head width: 8 rotated pairs
ROPE_VECTOR_SEED = 7  # the page's one random query and key


# ---------------------------------------------------------------------------------------------
# 1-2. The sinusoidal table, its Gram matrix and the shift map M_k (pure, keyed by numbers)


@memo(maxsize=32)
def sinusoidal_table(n: int, d: int, base: float) -> np.ndarray:
    """P.sinusoidal_table, read-only."""
    return freeze(P.sinusoidal_table(n, d, base))


@memo(maxsize=32)
def wavelengths(d: int, base: float) -> np.ndarray:
    """positional.wavelengths as a read-only numpy array."""
    return freeze(positional.wavelengths(d, base).numpy())


LEARNED_ROWS = 256  # positions of a learned table drawn and put in its Gram matrix (GPT-2 small has 1,024)
LEARNED_COLUMNS = 256  # dimensions of a learned table drawn (GPT-2 small has 768): 65,536 cells at most


@memo(maxsize=16)
def learned_table(model_id: str, device: str) -> np.ndarray:
    """The learned position table W_pos `[max_len d_model]` of a model built with pos='learned'."""
    model, _ = models.get_model(model_id, device)
    return freeze(model.stack.W_pos.weight.detach().float().cpu().numpy())


@memo(maxsize=16)
def learned_view(model_id: str, device: str) -> np.ndarray:
    """What the page draws of a learned table: its first LEARNED_ROWS positions and LEARNED_COLUMNS
    dimensions (all of a bundled model's), `[rows columns]`."""
    return freeze(np.ascontiguousarray(learned_table(model_id, device)[:LEARNED_ROWS, :LEARNED_COLUMNS]))


def _gram_panel(table: np.ndarray, closed_form: tuple | None) -> tuple[np.ndarray, dict, np.ndarray | None]:
    gram = P.gram_matrix(table)
    profile = P.diagonal_profile(gram)
    closed = P.closed_form_gram(profile["offsets"], *closed_form) if closed_form else None
    return freeze((gram, profile, closed))


@memo(maxsize=32)
def sinusoidal_gram(n: int, d: int, base: float) -> tuple[np.ndarray, dict, np.ndarray]:
    """(Gram matrix `[n n]`, its diagonal profile, the closed form of every diagonal) of the sinusoidal table."""
    return _gram_panel(sinusoidal_table(n, d, base), (d, base))


@memo(maxsize=16)
def learned_gram(model_id: str, device: str) -> tuple[np.ndarray, dict, None]:
    """(Gram matrix, its diagonal profile, None: no closed form) of a model's learned position table: its first
    LEARNED_ROWS positions, every dimension."""
    return _gram_panel(learned_table(model_id, device)[:LEARNED_ROWS].astype(np.float64), None)


@memo(maxsize=64)
def shift_map(k: int, n: int, d: int, base: float) -> tuple[np.ndarray, float]:
    """P.shift_map, read-only."""
    return freeze(P.shift_map(k, n, d, base))


@memo(maxsize=64)
def shift_table(ks: tuple, n: int, d: int, base: float) -> pa.Table:
    """P.shift_errors as the page's table, errors written as text."""
    frame = pd.DataFrame(P.shift_errors(ks, n, d, base))
    return pa.Table.from_pandas(frame.assign(**{"max error": lambda f: f["max error"].map("{:.1e}".format)}))


# ---------------------------------------------------------------------------------------------
# 3. RoPE: one random query and key, turned pair by pair


def _rope_vectors() -> list[np.ndarray]:
    """The page's query and key `[ROPE_D_HEAD]`: a unit arrow at a random angle in every pair.

    Made afresh for each (memoised) computation that needs them: torch refuses read-only arrays.
    """
    return P.unit_pair_vectors(ROPE_D_HEAD, seed=ROPE_VECTOR_SEED)


@memo(maxsize=64)
def rope_pair(base: float, pair: int, length: int) -> tuple[float, np.ndarray, np.ndarray]:
    """(theta of `pair`, where q's pair lands at each position 0..length-1 `[pos 2]`, the same for k)."""
    q_vec, k_vec = _rope_vectors()
    positions = range(length)
    theta = float(P.rope_angles(ROPE_D_HEAD, base)[pair])
    trail_q = P.rope_trajectory(q_vec[2 * pair:2 * pair + 2], positions, theta)  # [pos 2]
    trail_k = P.rope_trajectory(k_vec[2 * pair:2 * pair + 2], positions, theta)
    return freeze((theta, trail_q, trail_k))


@memo(maxsize=256)
def rope_shift_check(m: int, n: int, s: int, base: float) -> tuple[float, float]:
    """P.rope_shift_check for the page's query and key."""
    q_vec, k_vec = _rope_vectors()
    return P.rope_shift_check(q_vec, k_vec, m, n, s, base)


@memo(maxsize=32)
def rope_grid(size: int, base: float) -> np.ndarray:
    """q.k for the page's query and key at every (m, n) in 0..size-1: `[m n]`."""
    q_vec, k_vec = _rope_vectors()
    grid = np.arange(0, size)
    return freeze(P.rope_scores(q_vec, k_vec, grid, grid, base))


DECAY_DISTANCES = 256  # m - n = 0..255
DECAY_PAIRS = 4096  # (q, k) pairs averaged at each distance
DECAY_SAMPLES = 16  # task examples whose queries and keys stand for the model's
DECAY_HEADS = 64  # self-attention heads kept for the model's curve (a Llama 1B has 512; a bundled model 4)


@memo(maxsize=8)
def model_qk(model_id: str, device: str) -> list:
    """One (queries, keys) `[rows d_head]` pair per self-attention head of a model, before RoPE, in the "pairs"
    layout (P.model_qk_rows), from DECAY_SAMPLES fresh examples of its task (a checkpoint's: its example
    sentences, padding left out)."""
    model, _ = models.get_model(model_id, device)
    task = models.task_of(model_id, device)
    batch = task.batch(DECAY_SAMPLES, model.cfg.arch, seed=2024)
    keep = None
    if isinstance(task, TextTask):
        lengths = np.array([m["length"] for m in batch.meta])
        keep = np.arange(batch.tokens.shape[1])[None, :] < lengths[:, None]  # [batch pos]: not the padding
    tgt = batch.tgt.to(model.device) if model.is_encoder_decoder else None
    heads = P.model_qk_rows(model, batch.tokens.to(model.device), tgt, keep=keep)
    if len(heads) > DECAY_HEADS:  # a real model: DECAY_HEADS of them, spread evenly over its layers
        heads = [heads[i] for i in np.linspace(0, len(heads) - 1, DECAY_HEADS).round().astype(int)]
    return freeze(heads)


@memo(maxsize=64)
def decay(d_head: int, base: float, model_id: str | None, device: str) -> P.DecayCurves:
    """P.decay_curves over m - n = 0..DECAY_DISTANCES-1: the bound and random pairs at width d_head, and
    (with a model id) the mean |q.k| of that model's own heads at their own width, turning the dimensions its
    RoPE turns."""
    heads = model_qk(model_id, device) if model_id is not None else None
    rotary = models.get_model(model_id, device)[0].cfg.rope_dim if model_id is not None else None
    return freeze(P.decay_curves(np.arange(DECAY_DISTANCES), d_head, base, heads, count=DECAY_PAIRS,
                                 model_rotary=rotary))


@memo(maxsize=16)
def rope_check(cache_key: tuple, shift: int) -> P.RopeCheck:
    """P.rope_check on the sidebar's input (a RoPE model): its own pairing against the other one."""
    model, ids, _ = runs.model_inputs(cache_key)
    return freeze(P.rope_check(model, ids, shift))


@memo(maxsize=16)
def model_wavelengths(model_id: str, device: str) -> np.ndarray:
    """The wavelength 2 pi / theta_i of each pair a RoPE model turns (its own base and turned width)."""
    cfg = models.get_model(model_id, device)[0].cfg
    return freeze(positional.wavelengths(cfg.rope_dim, cfg.rope_base).numpy())


# ---------------------------------------------------------------------------------------------
# 4. Translation invariance


@memo(maxsize=128)
def neighbour_attention(scheme: str, centre: int, window: int, d: int, base: float) -> tuple[np.ndarray, np.ndarray]:
    """P.neighbour_attention, read-only."""
    return freeze(P.neighbour_attention(scheme, centre, window, d, base))


# ---------------------------------------------------------------------------------------------
# 5-7. Runs of bundled models (keyed by model id and device; the model is re-got inside)


@memo(maxsize=64)
def order(model_id: str, device: str, a: tuple, b: tuple, scheme: str) -> tuple:
    """Equivariance check and answers for the pair (a, b) under one scheme (shared: never change them)."""
    model, _ = models.get_model(model_id, device)
    task = models.task_of(model_id, device)
    vocab = task.vocab
    perm = P.matching_permutation(a, b)
    ids_a = torch.tensor([vocab.encode(list(a))], device=model.device)  # [1 pos]
    ids_b = torch.tensor([vocab.encode(list(b))], device=model.device)
    check = P.order_check(model, ids_a, ids_b, perm, scheme, bos_id=vocab.bos_id)
    freeze(check)  # a dataclass of arrays: every one read-only
    rows_a = P.answers(model, task, a, scheme)
    focus_b = [perm.index(r["position"]) for r in rows_a] if model.cfg.arch == "encoder" else None
    rows_b = P.answers(model, task, b, scheme, focus=focus_b)
    return check, rows_a, rows_b


@memo(maxsize=64)
def order_answers(model_id: str, device: str, a: tuple, b: tuple, schemes: tuple) -> pa.Table:
    """What the model answers for A and B under each scheme, next to the right answers (P.answer_rows)."""
    rows = P.answer_rows([(scheme, *order(model_id, device, a, b, scheme)[1:]) for scheme in schemes])
    return pa.Table.from_pandas(pd.DataFrame(rows))


@memo(maxsize=64)
def swap_view(cache_key: tuple, name: str, scheme: str) -> tuple[np.ndarray, np.ndarray]:
    """(every head's pattern `[head q k]` at hook `name`, pooled past DRAWN_EXACT tokens (core.figures.long_patterns),
    the top token at each output position `[pos]`) of the sidebar's input with the model run under `scheme`: only what the swap panel draws, never the logits over a
    whole vocabulary (a ValueError when the model cannot run with the scheme)."""
    model, ids, kwargs = runs.model_inputs(cache_key)
    with torch.no_grad():
        logits, cache = model.run_with_cache(ids, [name], pos=scheme, **kwargs)
    shown = reduce_patterns(cache[name][0].float().cpu().numpy())  # [head q k], pooled for a long input
    return freeze((shown, logits[0].argmax(-1).cpu().numpy()))


TEXT_SAMPLES = 16  # a checkpoint's swap is scored on this many example sentences (core.text_task.EXAMPLES)


@memo(maxsize=64)
def swap_accuracy(model_id: str, device: str, scheme: str, n: int) -> float:
    """The model's accuracy on n fresh samples of its task under a positional scheme (a checkpoint: its next-token
    accuracy on n example sentences, or an encoder's on the words hidden behind [MASK])."""
    model, _ = models.get_model(model_id, device)
    return P.scheme_accuracy(model, models.task_of(model_id, device), scheme, n_samples=n)


@memo(maxsize=8)
def curves(model_ids: tuple, device: str, lengths: tuple, n: int) -> dict:
    """{scheme: [{length, positions, accuracy, error}]} via core.train.evaluate, n samples a point."""
    out = {}
    for scheme, model_id in model_ids:
        model, _ = models.get_model(model_id, device)
        points = P.extrapolation_curve(model, models.task_of(model_id, device), lengths, n_samples=n)
        out[scheme] = [vars(p) for p in points]
    return out


@memo(maxsize=8)
def curve_points(model_ids: tuple, device: str, lengths: tuple, n: int) -> dict:
    """{scheme: ([positions], [accuracy or None])}: the curves as the extrapolation chart takes them."""
    return P.curve_series(curves(model_ids, device, lengths, n))


@memo(maxsize=64)
def length_view(model_ids: tuple, device: str, lengths: tuple, n: int, length: int) -> tuple[pa.Table, list]:
    """At one content length: (a table of each scheme's accuracy, or 'refused'; [(model id, positions,
    error)] for each model that refused). Shared: never change the list."""
    rows, refusals = P.length_rows(curves(model_ids, device, lengths, n), dict(model_ids), length)
    return pa.Table.from_pandas(pd.DataFrame(rows)), refusals


# ---------------------------------------------------------------------------------------------
# Figures: built once per distinct data and shipped ready-serialised (see ui.shell.figures.cached)

encoding_figure = cached(F.encoding_heatmap)
wavelength_figure = cached(F.wavelength_chart)
gram_figure = cached(F.gram_heatmap)
profile_figure = cached(F.profile_chart)
shift_matrix_figure = cached(F.shift_matrix_heatmap)
rope_plane_figure = cached(F.rope_plane)
rope_score_figure = cached(F.rope_score_heatmap)
neighbour_figure = cached(F.neighbour_bars)
row_distance_figure = cached(F.row_distance_heatmap)
pooled_figure = cached(F.pooled_chart)
attention_figure = cached(pattern_figure)
accuracy_figure = cached(F.accuracy_bars)
extrapolation_figure = cached(F.extrapolation_chart)
decay_figure = cached(F.rope_decay_chart)
