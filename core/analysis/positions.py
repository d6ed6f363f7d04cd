"""What the Positions page computes: the sinusoidal table's algebra, RoPE's relative property,
order blindness without positions, and how each scheme copes with longer inputs.

Read in page order: encodings, relative position (Gram matrix, shift map M_k, RoPE), translation
invariance, permutation equivariance / invariance, live scheme swap, extrapolation. Everything
returns numpy arrays or plain numbers so figures and Streamlit caches can take them directly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np
import torch

from core import positional
from core.model import Transformer
from core.tasks import IGNORE, Task
from core.train import evaluate

# ---------------------------------------------------------------------------------------------
# The sinusoidal table and its relative-position algebra


def sinusoidal_table(n: int, d: int, base: float = 10000.0) -> np.ndarray:
    """PE `[n d]` in float64, so identities below hold to ~1e-15 instead of float32's ~1e-7."""
    return positional.sinusoidal(n, d, base, dtype=torch.float64).numpy()


def gram_matrix(table: np.ndarray) -> np.ndarray:
    """G[t, u] = PE_t . PE_u `[n n]`: for sinusoids it is sum_i cos(w_i (t - u)), a function of t - u."""
    table = np.asarray(table, dtype=np.float64)
    return table @ table.T


def diagonal_profile(gram: np.ndarray) -> dict[str, np.ndarray | float]:
    """Walk every diagonal t - u = delta of G: its mean, smallest and largest entry.

    A Gram matrix that depends only on t - u has lo == hi on every diagonal; `spread` is the
    largest hi - lo over all diagonals (about 1e-13 for sinusoids, large for a learned table).
    """
    gram = np.asarray(gram, dtype=np.float64)
    n = gram.shape[0]
    offsets = np.arange(-(n - 1), n)  # delta = t - u
    mean, lo, hi = (np.empty(len(offsets)) for _ in range(3))
    for j, delta in enumerate(offsets):
        diag = np.diagonal(gram, offset=-int(delta))  # entries with t - u = delta
        mean[j], lo[j], hi[j] = diag.mean(), diag.min(), diag.max()
    return {"offsets": offsets, "mean": mean, "lo": lo, "hi": hi, "spread": float((hi - lo).max())}


def closed_form_gram(offsets: np.ndarray, d: int, base: float = 10000.0) -> np.ndarray:
    """sum_i cos(w_i * delta) for each delta: what every diagonal of G should equal (d even)."""
    if d % 2:
        raise ValueError(f"the closed form needs an even d (whole sin/cos pairs), got {d}")
    omega = 1.0 / base ** (np.arange(0, d, 2) / d)  # [d/2]
    angles = np.asarray(offsets, dtype=np.float64)[:, None] * omega[None, :]  # [offsets d/2]
    return np.cos(angles).sum(axis=1)


def _shift_error(table: np.ndarray, m: np.ndarray, k: int, n: int) -> float:
    """max |PE_{p+k} - M_k PE_p| over n positions p, read from a table long enough for p and p + k."""
    start = max(0, -k)  # for negative k, start late enough that p + k >= 0
    source = table[start:start + n]  # PE_p as rows [n d]
    target = table[start + k:start + k + n]  # PE_{p+k} as rows [n d]
    return float(np.abs(target - source @ m.T).max())


def shift_map(k: int, n: int, d: int, base: float = 10000.0) -> tuple[np.ndarray, float]:
    """M_k `[d d]` with PE_{p+k} = M_k PE_p, and the largest error of that identity over p = 0..n-1.

    One 2x2 rotation by k * w_i per (sin, cos) pair: the same matrix for every p, which is why a
    fixed offset ("three tokens back") is one linear map for attention to learn.
    """
    m = positional.shift_matrix(k, d, base).numpy()  # [d d]
    return m, _shift_error(sinusoidal_table(n + abs(k), d, base), m, k, n)


def shift_errors(ks: Sequence[int], n: int, d: int, base: float = 10000.0) -> list[dict]:
    """One row per offset k: the max |PE_{p+k} - M_k PE_p| over n positions (one shared table)."""
    table = sinusoidal_table(n + max(abs(int(k)) for k in ks), d, base)  # [n+max|k| d]
    return [{"k": int(k), "max error": _shift_error(table, positional.shift_matrix(int(k), d, base).numpy(), int(k), n)}
            for k in ks]


# ---------------------------------------------------------------------------------------------
# RoPE: rotations per dimension pair, and scores that depend on m - n only


def rope_angles(d_head: int, base: float = 10000.0) -> np.ndarray:
    """theta_i = base^(-2i/d_head), the turn per position of pair i (radians)."""
    return positional.rope_frequencies(d_head, base).numpy()


def rope_trajectory(vec2: Sequence[float], positions: Sequence[int], theta: float) -> np.ndarray:
    """Where one 2-D pair of a query lands at each position: `[len(positions) 2]`."""
    v = torch.tensor([float(vec2[0]), float(vec2[1])], dtype=torch.float64)
    return np.stack([positional.rope_rotate_pair(v, int(p), theta).numpy() for p in positions])


def _rotate(vec: np.ndarray, positions: np.ndarray, base: float) -> np.ndarray:
    """The same vector `[d_head]` rotated by RoPE at each position: `[len(positions) d_head]`."""
    d = vec.shape[-1]
    x = torch.as_tensor(vec, dtype=torch.float64).expand(len(positions), d)[None, :, None, :]  # [1 pos 1 d_head]
    lo = int(positions.min())
    cos, sin = positional.rope_cos_sin(int(positions.max()) - lo + 1, d, base, offset=lo, dtype=torch.float64)
    idx = torch.as_tensor(positions - lo)
    return positional.apply_rope(x, cos[idx], sin[idx])[0, :, 0].numpy()  # [pos d_head]


def rope_scores(q: np.ndarray, k: np.ndarray, q_positions: Sequence[int], k_positions: Sequence[int],
                base: float = 10000.0) -> np.ndarray:
    """S[a, b] = R(m_a) q . R(n_b) k for one fixed q and k placed at every pair of positions `[m n]`."""
    rq = _rotate(np.asarray(q, dtype=np.float64), np.asarray(q_positions), base)  # [m d_head]
    rk = _rotate(np.asarray(k, dtype=np.float64), np.asarray(k_positions), base)  # [n d_head]
    return rq @ rk.T


def rope_shift_check(q: np.ndarray, k: np.ndarray, m: int, n: int, s: int,
                     base: float = 10000.0) -> tuple[float, float]:
    """(q.k with q at m and k at n, the same with both moved by s): equal, since only m - n counts."""
    before = rope_scores(q, k, [m], [n], base)[0, 0]
    after = rope_scores(q, k, [m + s], [n + s], base)[0, 0]
    return float(before), float(after)


def unit_pair_vectors(d: int, seed: int = 0, count: int = 2) -> list[np.ndarray]:
    """`count` vectors of length d whose every (2i, 2i+1) pair is a unit arrow at a random angle.

    RoPE only turns pairs, so this is a query or key with nothing but direction per pair:
    easy to draw, and every pair counts equally in q.k.
    """
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        angles = rng.uniform(0, 2 * np.pi, d // 2)  # [d/2]
        out.append(np.stack([np.cos(angles), np.sin(angles)], axis=1).reshape(-1))  # [d]
    return out


def random_vectors(d: int, seed: int = 0, count: int = 2) -> list[np.ndarray]:
    """`count` reproducible standard-normal vectors of length d (a stand-in query and key)."""
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(d) for _ in range(count)]


# ---------------------------------------------------------------------------------------------
# Translation invariance: attention over a window of neighbours, from two far-apart positions

NEIGHBOUR_SCHEMES = ("sinusoidal", "sinusoidal + projections", "rope")
PROJECTION_GAIN = 2.0  # random W_Q, W_K entries ~ N(0, (gain / sqrt(d))^2): sharp enough to see the pattern


def neighbour_attention(scheme: str, centre: int, window: int, d: int = 64, base: float = 10000.0,
                        seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Softmax weights of the query at `centre` over keys centre-window..centre+window, positions only.

    "sinusoidal": q = PE_t, k = PE_u, so the score is G[t, u] / sqrt(d), a function of t - u.
    "sinusoidal + projections": q = W_Q PE_t, k = W_K PE_u with random W (as a trained layer has):
    the score PE_t^T W_Q^T W_K PE_u is no longer a function of t - u alone.
    "rope": one random q and k (the same token everywhere), rotated by position: m - n only.
    Returns (offsets u - t `[2w+1]`, weights `[2w+1]`).
    """
    if scheme not in NEIGHBOUR_SCHEMES:
        raise ValueError(f"scheme must be one of {list(NEIGHBOUR_SCHEMES)}, got {scheme!r}")
    if window < 1 or centre < window:
        raise ValueError(f"need window >= 1 and centre >= window (no positions before 0); "
                         f"got centre={centre}, window={window}")
    offsets = np.arange(-window, window + 1)
    keys = centre + offsets
    if scheme == "rope":
        q, k = random_vectors(d, seed)
        scores = rope_scores(q, k, [centre], keys, base)[0]
    else:
        table = positional.sinusoidal(1, d, base, offset=centre, dtype=torch.float64).numpy()[0]  # [d]
        neighbours = positional.sinusoidal(len(keys), d, base, offset=int(keys[0]), dtype=torch.float64).numpy()
        if scheme == "sinusoidal":
            scores = neighbours @ table
        else:
            w_q, w_k = (m * PROJECTION_GAIN / math.sqrt(d) for m in random_vectors(d * d, seed + 1))
            scores = (neighbours @ w_k.reshape(d, d).T) @ (w_q.reshape(d, d) @ table)
    scores = scores / math.sqrt(d)
    weights = np.exp(scores - scores.max())
    return offsets, weights / weights.sum()


# ---------------------------------------------------------------------------------------------
# Order blindness: pos="none" makes self-attention permutation equivariant


def matching_permutation(a: Sequence[str], b: Sequence[str]) -> list[int]:
    """perm with b[i] == a[perm[i]] for every i; ValueError unless b reorders exactly a's tokens."""
    if sorted(a) != sorted(b):
        raise ValueError("the second input must use exactly the same tokens as the first, in another order")
    unused: dict[str, list[int]] = {}
    for j, tok in enumerate(a):
        unused.setdefault(tok, []).append(j)
    return [unused[tok].pop(0) for tok in b]


def shuffled(tokens: Sequence[str], seed: int, keep_first: bool = True) -> list[str]:
    """A seeded reordering of tokens (the first kept in place when asked, e.g. <cls> or <bos>)."""
    rng = np.random.default_rng(seed)
    head = list(tokens[:1]) if keep_first else []
    rest = list(tokens[1:]) if keep_first else list(tokens)
    return head + [rest[i] for i in rng.permutation(len(rest))]


def output_rows(model: Transformer, ids: torch.Tensor, pos: str, bos_id: int = 1) -> np.ndarray:
    """The final (normalised) residual rows `[pos d_model]` of an encoder, or of an encoder-decoder's encoder."""
    if model.is_encoder_decoder:
        tgt = torch.full((ids.shape[0], 1), bos_id, dtype=torch.long)  # the decoder only needs a start
        _, cache = model.run_with_cache(ids, ["encoder.ln_final.hook_normalized"], tgt=tgt, pos=pos)
        return cache["encoder.ln_final.hook_normalized"][0].double().cpu().numpy()
    _, cache = model.run_with_cache(ids, ["ln_final.hook_normalized"], pos=pos)
    return cache["ln_final.hook_normalized"][0].double().cpu().numpy()


@dataclass
class OrderCheck:
    """Outputs for an input A and a reordering B of it, compared row by row and after mean pooling."""

    rows_a: np.ndarray  # [n d_model]
    rows_b: np.ndarray  # [n d_model]
    perm: list[int]  # B's token i is A's token perm[i]
    distances: np.ndarray  # [n n]: ||rows_b[i] - rows_a[j]||
    row_error: float  # max |rows_b - rows_a[perm]|: 0 means "the same rows, shuffled"
    pooled_a: np.ndarray  # [d_model], the mean over positions
    pooled_b: np.ndarray  # [d_model]
    pooled_error: float  # max |pooled_a - pooled_b|: 0 means "the two orders look identical"


def order_check(model: Transformer, ids_a: torch.Tensor, ids_b: torch.Tensor, perm: Sequence[int],
                pos: str, bos_id: int = 1) -> OrderCheck:
    """Run A and its reordering B with one positional scheme and measure equivariance and invariance.

    A bidirectional encoder with pos="none" gives row_error ~ 1e-7 (float32) and pooled_error ~ 1e-7;
    any positional scheme makes both large. (A causal decoder is NOT equivariant even without
    positions: its mask already tells early tokens from late ones.)
    """
    if model.cfg.arch == "decoder":
        raise ValueError("permutation equivariance needs a bidirectional encoder; a causal decoder's "
                         "mask already depends on position")
    rows_a = output_rows(model, ids_a, pos, bos_id)
    rows_b = output_rows(model, ids_b, pos, bos_id)
    perm = list(perm)
    distances = np.linalg.norm(rows_b[:, None, :] - rows_a[None, :, :], axis=-1)  # [n n]
    pooled_a, pooled_b = rows_a.mean(axis=0), rows_b.mean(axis=0)
    return OrderCheck(rows_a, rows_b, perm, distances, float(np.abs(rows_b - rows_a[perm]).max()),
                      pooled_a, pooled_b, float(np.abs(pooled_a - pooled_b).max()))


def answers(model: Transformer, task: Task, tokens: Sequence[str], pos: str,
            focus: Optional[Sequence[int]] = None) -> list[dict]:
    """What the model says for one input under a scheme, next to the task's right answer.

    Encoder: the top token at the scored positions (or at `focus`, for an input the task cannot
    label, e.g. a random shuffle). Encoder-decoder: its greedy output, written from <bos>.
    """
    vocab, arch = task.vocab, model.cfg.arch
    ids = torch.tensor([vocab.encode(list(tokens))], device=model.device)  # [1 pos]
    try:
        targets = task.label(list(tokens), arch)
    except ValueError:
        targets = None
    if arch == "encoder-decoder":
        out = model.generate(ids, ids.shape[1] + 1, tgt_prefix=torch.tensor([[vocab.bos_id]], device=model.device),
                             pos=pos)
        written = vocab.decode(out[0, 1:].tolist())
        if "<eos>" in written:
            written = written[: written.index("<eos>")]
        expected = None
        if targets is not None:
            expected = [t for t in vocab.decode([i for i in targets if i != IGNORE]) if t != "<eos>"]
        return [{"position": "output", "token": " ".join(tokens), "predicted": " ".join(written),
                 "right answer": None if expected is None else " ".join(expected),
                 "correct": None if expected is None else written == expected}]
    with torch.no_grad():
        logits = model(ids, pos=pos)[0]  # [pos vocab]
    if focus is None:
        focus = [p for p, t in enumerate(targets or []) if t != IGNORE]
    rows = []
    for p in focus:
        top = int(logits[p].argmax())
        right = None if targets is None or targets[p] == IGNORE else vocab.tokens[targets[p]]
        rows.append({"position": int(p), "token": tokens[p], "predicted": vocab.tokens[top],
                     "right answer": right, "correct": None if right is None else vocab.tokens[top] == right})
    return rows


# ---------------------------------------------------------------------------------------------
# Live swap and extrapolation: accuracy on fresh task samples


def swap_schemes(native: str, d_head: int) -> list[str]:
    """The schemes a model trained with `native` can be run with: a learned table only if it has its
    own, RoPE only with an even head width (it turns pairs of dimensions)."""
    return [s for s in positional.SCHEMES
            if (s != "learned" or native == "learned") and (s != "rope" or d_head % 2 == 0)]


SCHEME_TEXT = {"none": "none (no positions)", "sinusoidal": "sinusoidal (added table)",
               "learned": "learned (its own table)", "rope": "RoPE (rotated q and k)"}  # how tables name a scheme


def answer_rows(runs: Sequence[tuple[str, list[dict], list[dict]]]) -> list[dict]:
    """The order panel's table: one row per answer of input A, then B, for each (scheme, answers of A,
    answers of B) in `runs` (answers as `answers` returns them)."""
    rows = []
    for scheme, rows_a, rows_b in runs:
        for label, answered in (("A", rows_a), ("B", rows_b)):
            for r in answered:
                rows.append({"run with": SCHEME_TEXT[scheme], "input": label, "position": r["position"],
                             "token": r["token"], "model says": r["predicted"],
                             "right answer": r["right answer"] or "(no rule for this order)",
                             "correct": {True: "yes", False: "NO", None: "-"}[r["correct"]]})
    return rows


def scored_positions(targets: Optional[Sequence[int]], logits: np.ndarray) -> tuple[int, int]:
    """(right, scored): how many of an input's scored positions the model's top token gets right.

    `targets` holds one id per position (IGNORE where nothing is scored), `logits` is `[1 pos vocab]`."""
    if targets is None:
        return 0, 0
    top = np.asarray(logits)[0].argmax(-1)  # [pos]
    scored = [p for p, t in enumerate(targets) if t != IGNORE and p < top.shape[0]]
    return sum(int(top[p]) == targets[p] for p in scored), len(scored)


@torch.no_grad()
def scheme_accuracy(model: Transformer, task: Task, pos: str, n_samples: int = 128, seed: int = 4321,
                    length: Optional[int] = None) -> float:
    """The task metric on fresh samples with the model run under positional scheme `pos`.

    (core.train.evaluate runs a model as built; this is the same score with a per-call scheme.)
    """
    arch = model.cfg.arch
    batch = task.batch(n_samples, arch, seed=seed, length=length)
    tokens = batch.tokens.to(model.device)
    if arch == "encoder-decoder":
        logits = model(tokens, batch.tgt.to(model.device), pos=pos)
    else:
        logits = model(tokens, pos=pos)
    return task.accuracy(logits, batch)


@dataclass
class CurvePoint:
    """One model at one length: its accuracy, or why it could not run."""

    length: int  # content length handed to the task
    positions: int  # tokens in a row at that length
    accuracy: Optional[float]  # None when the model refused the input
    error: Optional[str] = None  # the model's own message when it refused


def extrapolation_curve(model: Transformer, task: Task, lengths: Sequence[int], n_samples: int = 128,
                        seed: int = 1234) -> list[CurvePoint]:
    """Accuracy at each content length via core.train.evaluate; a refusal (a learned table too
    short) becomes a point with accuracy None and the ValueError's message, never an exception."""
    points = []
    for length in lengths:
        width = task.batch(1, model.cfg.arch, seed=0, length=int(length)).tokens.shape[1]
        try:
            acc = evaluate(model, task, n_samples=n_samples, seed=seed, length=int(length))
            points.append(CurvePoint(int(length), int(width), acc))
        except ValueError as exc:
            points.append(CurvePoint(int(length), int(width), None, str(exc)))
    return points


def curve_series(curves: dict[str, list[dict]]) -> dict[str, tuple[list[int], list[Optional[float]]]]:
    """{scheme: ([positions], [accuracy or None])}: curves of CurvePoint fields (as dicts) as a chart takes them."""
    return {s: ([p["positions"] for p in pts], [p["accuracy"] for p in pts]) for s, pts in curves.items()}


def length_rows(curves: dict[str, list[dict]], model_ids: dict[str, str], length: int) -> tuple[list[dict], list]:
    """At one content length: (one row per scheme with its accuracy as text, or 'refused'; [(model id,
    positions, error)] for each model that refused). `curves` holds CurvePoint fields as dicts."""
    rows, refusals = [], []
    for scheme, pts in curves.items():
        point = next(p for p in pts if p["length"] == length)
        rows.append({"scheme": SCHEME_TEXT[scheme],
                     "accuracy": "refused" if point["accuracy"] is None else f"{point['accuracy']:.1%}"})
        if point["error"]:
            refusals.append((model_ids[scheme], point["positions"], point["error"]))
    return rows, refusals


# ---------------------------------------------------------------------------------------------
# RoPE's distance decay: the RoFormer upper bound, and what q.k actually does


def _pairs_complex(x: np.ndarray) -> np.ndarray:
    """Vectors `[... d]` as d/2 complex numbers `[... d/2]`: pair i is x[2i] + i x[2i+1] (RoPE turns each)."""
    x = np.asarray(x, dtype=np.float64)
    if x.shape[-1] % 2:
        raise ValueError(f"RoPE needs an even width, got {x.shape[-1]}")
    return x[..., 0::2] + 1j * x[..., 1::2]


def rope_partial_sums(distances: Sequence[int], d_head: int, base: float = 10000.0) -> np.ndarray:
    """S_j(delta) = sum_{i<j} e^{i delta theta_i} for j = 1..d/2 at each distance: complex `[distance d/2]`."""
    theta = rope_angles(d_head, base)  # [d/2]
    phases = np.exp(1j * np.asarray(distances, dtype=np.float64)[:, None] * theta[None, :])  # [distance d/2]
    return np.cumsum(phases, axis=1)


def rope_decay_bound(distances: Sequence[int], d_head: int, base: float = 10000.0) -> np.ndarray:
    """RoFormer's relative upper bound on |q.k| at each distance delta = m - n, scaled to 1 at delta = 0.

    With h_i = q~_i conj(k~_i) (pair i as a complex number) the score is Re sum_i h_i e^{i delta theta_i}.
    Abel summation with S_0 = 0 and h_{d/2} = 0 turns it into -sum_j S_j (h_j - h_{j-1}), so
    |score| <= max_j |h_j - h_{j-1}| * sum_{j=1}^{d/2} |S_j(delta)|. The paper draws (1/(d/2)) sum_j |S_j|;
    at delta = 0 every S_j = j, so that is (d/2 + 1)/2, and dividing by it gives 1 there. Only this
    factor depends on the distance; the vectors enter through max_j |h_j - h_{j-1}| alone.
    """
    sums = np.abs(rope_partial_sums(distances, d_head, base)).sum(axis=1)  # [distance]
    half = d_head // 2
    return sums / (half * (half + 1) / 2)


def rope_abs_scores(q: np.ndarray, k: np.ndarray, distances: Sequence[int], base: float = 10000.0,
                    rotary: Optional[int] = None) -> np.ndarray:
    """|(R_m q_a) . (R_n k_a)| for each pair a of rows of q and k `[pairs d]` at each delta = m - n: `[pairs distance]`.

    Pair i of the score is Re(q~_i conj(k~_i) e^{i delta theta_i}) (the rotation R_{m-n} between them), so
    all distances come from one complex matrix product. The rows are in the "pairs" layout (see
    `rope_pairs_order`). `rotary`: how many leading dimensions RoPE turns (None: all of them, theta_i =
    base^(-2i/d)); the others pass through unturned and add the same q.k at every distance.
    """
    q, k = np.asarray(q, dtype=np.float64), np.asarray(k, dtype=np.float64)
    r = q.shape[-1] if rotary is None else int(rotary)
    h = _pairs_complex(q[..., :r]) * np.conj(_pairs_complex(k[..., :r]))  # [pairs r/2]
    theta = rope_angles(r, base)
    phases = np.exp(1j * np.asarray(distances, dtype=np.float64)[None, :] * theta[:, None])  # [r/2 distance]
    passed = (q[..., r:] * k[..., r:]).sum(-1, keepdims=True)  # [pairs 1]: the unturned dimensions
    return np.abs((h @ phases).real + passed)


def random_qk_pairs(d_head: int, count: int = 4096, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """`count` independent standard-normal queries and keys `[count d_head]` each (a seeded local generator)."""
    rng = np.random.default_rng(seed)
    return rng.standard_normal((count, d_head)), rng.standard_normal((count, d_head))


def paired_rows(q: np.ndarray, k: np.ndarray, count: int = 4096, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """`count` (query, key) pairs drawn with replacement from the rows of q `[a d]` and k `[b d]`."""
    rng = np.random.default_rng(seed)
    return q[rng.integers(0, len(q), count)], k[rng.integers(0, len(k), count)]


@dataclass
class DecayCurves:
    """RoPE's distance decay: the bound, and the mean |q.k| of random and of a model's vectors, against m - n."""

    distances: np.ndarray  # [distance]: 0, 1, ... (m - n)
    bound: np.ndarray  # [distance]: the relative upper bound, 1 at distance 0
    random_mean: np.ndarray  # [distance]: mean |q.k| of random Gaussian q, k
    model_mean: Optional[np.ndarray] = None  # [distance]: mean |q.k| of the model's own q, k (None: none given)

    def relative(self, curve: np.ndarray) -> np.ndarray:
        """A curve divided by its value at distance 0 (all three then start at 1, like the bound)."""
        return np.asarray(curve) / curve[0]


def heads_mean_abs_score(heads: Sequence[tuple[np.ndarray, np.ndarray]], distances: Sequence[int],
                         base: float = 10000.0, count: int = 4096, seed: int = 0,
                         rotary: Optional[int] = None) -> np.ndarray:
    """Mean |q.k| at each distance over pairs of one head's query and key (rows of its (queries `[rows d]`,
    keys `[rows d]`), before RoPE, in the "pairs" layout), averaged over the heads: `[distance]`. `rotary`:
    the leading dimensions RoPE turns (None: all)."""
    per_head = max(256, count // len(heads))
    return np.mean([rope_abs_scores(*paired_rows(hq, hk, per_head, seed + i), distances, base, rotary).mean(axis=0)
                    for i, (hq, hk) in enumerate(heads)], axis=0)


def decay_curves(distances: Sequence[int], d_head: int, base: float = 10000.0,
                 model_heads: Optional[Sequence[tuple[np.ndarray, np.ndarray]]] = None, count: int = 4096,
                 seed: int = 0, model_rotary: Optional[int] = None) -> DecayCurves:
    """The bound and the mean |q.k| over `count` random (q, k) pairs of width d_head at each distance; with
    `model_heads` (one (queries, keys) per head, at the model's own width, as `model_qk_rows` gives them),
    also heads_mean_abs_score, turning the model's leading `model_rotary` dimensions (None: all)."""
    distances = np.asarray(distances)
    q, k = random_qk_pairs(d_head, count, seed)
    model_mean = (heads_mean_abs_score(model_heads, distances, base, count, seed + 1, model_rotary)
                  if model_heads else None)
    return DecayCurves(distances, rope_decay_bound(distances, d_head, base),
                       rope_abs_scores(q, k, distances, base).mean(axis=0), model_mean)


def rope_pairs_order(x: np.ndarray, layout: str, rotary: Optional[int] = None) -> np.ndarray:
    """Vectors `[... d]` of a model whose RoPE uses `layout`, reordered so that its rotated pairs sit side by
    side as in the "pairs" layout: x[2i], x[2i+1] of the result are the dimensions the model turns together
    (for "halves", x[i] and x[i + r/2]). The first `rotary` dimensions are turned (None: all of them); the
    rest stay where they are. "pairs" returns x unchanged."""
    x = np.asarray(x)
    if layout == "pairs":
        return x
    if layout != "halves":
        raise ValueError(f"layout must be 'pairs' or 'halves', got {layout!r}")
    r = x.shape[-1] if rotary is None else int(rotary)
    half = r // 2
    order = np.stack([np.arange(half), np.arange(half) + half], axis=-1).reshape(-1)  # 0, r/2, 1, r/2+1, ...
    return np.concatenate([x[..., order], x[..., r:]], axis=-1)


def model_qk_rows(model: Transformer, tokens: torch.Tensor, tgt: Optional[torch.Tensor] = None,
                  keep: Optional[np.ndarray] = None) -> list[tuple[np.ndarray, np.ndarray]]:
    """Every self-attention head's queries and keys before RoPE turns them: one (q `[rows d_head]`,
    k `[rows d_head]`) per (layer, query head), rows running over the batch and the positions (only where
    `keep` `[batch pos]` is True, e.g. not on padding). With grouped keys (n_kv_heads < n_heads) a query
    head is paired with the key head it reads. Each row is put in the "pairs" layout (`rope_pairs_order`),
    so pair i of the result is a pair the model's RoPE turns together."""
    names = [n for n in model.hook_names() if n.endswith(("attn.hook_q", "attn.hook_k")) and "cross_attn" not in n]
    _, cache = model.run_with_cache(tokens, names, **({"tgt": tgt} if tgt is not None else {}))
    cfg = model.cfg
    rotary = cfg.rope_dim if cfg.rope_dim % 2 == 0 else None
    heads = []
    for name in names:
        if name.endswith("hook_q"):
            q = cache[name].double().cpu().numpy()  # [batch pos head d_head]
            k = cache[name[:-1] + "k"].double().cpu().numpy()  # [batch pos kv_head d_head]
            if keep is not None:
                rows = np.asarray(keep, dtype=bool)[: q.shape[0], : q.shape[1]]
                q, k = q[rows], k[rows]  # [rows head d_head]
            else:
                q, k = q.reshape(-1, *q.shape[2:]), k.reshape(-1, *k.shape[2:])  # [rows head d_head]
            group = q.shape[1] // k.shape[1]  # query heads per key head
            q = rope_pairs_order(q, cfg.rope_layout, rotary)
            k = rope_pairs_order(k, cfg.rope_layout, rotary)
            heads += [(q[:, h], k[:, h // group]) for h in range(q.shape[1])]
    return heads


# ---------------------------------------------------------------------------------------------
# A model's own RoPE: which dimensions it turns together, checked against its hooks


def rope_pair_dims(layout: str, rotary: int) -> tuple[np.ndarray, np.ndarray]:
    """(a, b): the dimensions RoPE turns together as pair i = (a[i], b[i]), i = 0 .. r/2 - 1, for r = `rotary`
    turned dimensions: "pairs" turns (2i, 2i + 1), "halves" (Hugging Face's Llama) turns (i, i + r/2)."""
    if rotary < 2 or rotary % 2:
        raise ValueError(f"RoPE turns an even number of dimensions, got {rotary}")
    half = np.arange(rotary // 2)
    if layout == "pairs":
        return 2 * half, 2 * half + 1
    if layout == "halves":
        return half, half + rotary // 2
    raise ValueError(f"layout must be 'pairs' or 'halves', got {layout!r}")


def rope_by_pairs(x: np.ndarray, base: float, layout: str, rotary: int) -> np.ndarray:
    """RoPE written out pair by pair from its description, in float64: `x` `[pos ... d_head]` at positions
    0, 1, ..., pair i = (a[i], b[i]) of `rope_pair_dims` turned by the angle m * theta_i, theta_i =
    base^(-2i/rotary); dimensions from `rotary` on pass through."""
    x = np.asarray(x, dtype=np.float64)
    a, b = rope_pair_dims(layout, rotary)
    theta = base ** (-2.0 * np.arange(rotary // 2) / rotary)  # [r/2]
    angle = np.arange(x.shape[0], dtype=np.float64)[:, None] * theta[None, :]  # [pos r/2]
    angle = angle.reshape(angle.shape[:1] + (1,) * (x.ndim - 2) + angle.shape[1:])  # [pos 1.. r/2]
    out = x.copy()
    out[..., a] = x[..., a] * np.cos(angle) - x[..., b] * np.sin(angle)
    out[..., b] = x[..., a] * np.sin(angle) + x[..., b] * np.cos(angle)
    return out


@dataclass
class RopeCheck:
    """How well RoPE written out pair by pair reproduces a model's own rotated queries and keys."""

    layout: str  # the model's layout
    rotary: int  # dimensions of each head it turns
    base: float
    error: dict[str, float]  # layout -> largest |written out - the model's hook_rot_q / hook_rot_k|, relative
    shift: tuple[float, float]  # (q.k with q at m and k at n, the same vectors at m + s and n + s)
    shift_at: tuple[int, int, int]  # (m, n, s)


@torch.no_grad()
def rope_check(model: Transformer, tokens: torch.Tensor, shift: int = 100) -> RopeCheck:
    """Rotate the model's unturned queries and keys (`hook_q`, `hook_k`, every layer) with both pairings and
    compare with what the model turned (`hook_rot_q`, `hook_rot_k`); the model's own pairing should agree to
    rounding and the other should not. Then turn layer 0 head 0's query at the last position m and key at
    position n = 0 by RoPE at (m, n) and at (m + shift, n + shift): the two dot products are equal.
    tokens `[1 pos]`."""
    cfg = model.cfg
    names = [f"blocks.{i}.attn.{h}" for i in range(cfg.n_layers)
             for h in ("hook_q", "hook_k", "hook_rot_q", "hook_rot_k")]
    _, cache = model.run_with_cache(tokens, names, pos="rope")
    r = cfg.rope_dim
    error = {}
    for layout in ("pairs", "halves"):
        worst, scale = 0.0, 0.0
        for i in range(cfg.n_layers):
            for raw in ("q", "k"):
                x = cache[f"blocks.{i}.attn.hook_{raw}"][0].double().cpu().numpy()  # [pos head d_head]
                turned = cache[f"blocks.{i}.attn.hook_rot_{raw}"][0].double().cpu().numpy()
                worst = max(worst, float(np.abs(rope_by_pairs(x, cfg.rope_base, layout, r) - turned).max()))
                scale = max(scale, float(np.abs(turned).max()))
        error[layout] = worst / max(scale, 1e-30)
    q = cache["blocks.0.attn.hook_q"][0, :, 0].double().cpu().numpy()  # [pos d_head]
    k = cache["blocks.0.attn.hook_k"][0, :, 0].double().cpu().numpy()
    m, n = q.shape[0] - 1, 0
    scores = []
    for s in (0, int(shift)):
        positions = max(m, n) + s + 1
        q_at = rope_by_pairs(np.broadcast_to(q[m], (positions, q.shape[-1])), cfg.rope_base, cfg.rope_layout, r)
        k_at = rope_by_pairs(np.broadcast_to(k[n], (positions, k.shape[-1])), cfg.rope_base, cfg.rope_layout, r)
        scores.append(float(q_at[m + s] @ k_at[n + s]))
    return RopeCheck(cfg.rope_layout, r, float(cfg.rope_base), error, (scores[0], scores[1]), (m, n, int(shift)))
