"""Attention as retrieval, in numbers: a kernel smoother, a soft database, and where the two agree.

Pure numpy (float64), no models: the Retrieval page's first, second and last panels. Scores are
turned into weights by a softmax taken in log space (the largest score is subtracted first), so
a query norm of thousands never overflows.

The one identity behind the page: for any query q and key k,

    exp(q.k) = exp(-|q - k|^2 / 2) * exp(|q|^2 / 2) * exp(|k|^2 / 2).

Over the keys of one query the middle factor is a constant, so when every key has the same norm
the last factor is a constant too and softmax(q.k) is exactly a normalised Gaussian kernel in
|q - k|. Writing q = |q| u with u a unit vector gives the same statement with the kernel centred at
u and variance 1 / |q| (times the score scale): the query's norm sets the bandwidth.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

MAX_POINTS = 64  # the regression toy's table
MAX_KEYS = 16  # the soft database's table
ONE_HOT = 0.99  # "hard lookup": the best key holds this much weight


# ---------------------------------------------------------------------------------------------
# Softmax and the Gaussian kernel


def softmax(scores: np.ndarray) -> np.ndarray:
    """Softmax over the last axis, computed after subtracting each row's maximum (never overflows)."""
    scores = np.asarray(scores, dtype=np.float64)
    shifted = scores - scores.max(axis=-1, keepdims=True)
    weights = np.exp(shifted)
    return weights / weights.sum(axis=-1, keepdims=True)


def attention_weights(query: np.ndarray, keys: np.ndarray, scale: float = 1.0) -> np.ndarray:
    """softmax_j(scale * q.k_j): query `[d]` or `[n_q d]`, keys `[n_k d]` -> `[n_k]` or `[n_q n_k]`."""
    return softmax(scale * (np.asarray(query, dtype=np.float64) @ np.asarray(keys, dtype=np.float64).T))


def gaussian_kernel_weights(centre: np.ndarray, keys: np.ndarray, variance: float) -> np.ndarray:
    """Nadaraya-Watson weights exp(-|c - k_j|^2 / (2 variance)), normalised; centre `[d]` or `[n_q d]`."""
    centre = np.asarray(centre, dtype=np.float64)
    keys = np.asarray(keys, dtype=np.float64)
    sq = ((centre[..., None, :] - keys) ** 2).sum(axis=-1)  # [n_q n_k] or [n_k]
    return softmax(-sq / (2.0 * variance))


def kernel_variance(query_norm: float, scale: float = 1.0) -> float:
    """The variance of the Gaussian that softmax(scale * q.k) equals for equal-norm keys: 1 / (scale |q|)."""
    return 1.0 / (scale * query_norm)


def entropy(weights: np.ndarray) -> np.ndarray:
    """Shannon entropy in nats over the last axis (0 log 0 = 0)."""
    w = np.asarray(weights, dtype=np.float64)
    logs = np.log(np.where(w > 0, w, 1.0))
    return -(w * logs).sum(axis=-1)


# ---------------------------------------------------------------------------------------------
# Panel 1: a 1-D regression toy read as attention


PRESET_POINTS = ("sine", "step", "noisy line")


def preset_points(name: str, n: int = 24, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """x in [0, 1] and y for a preset curve: a sine, a step, or a noisy line (seeded, local RNG)."""
    if name not in PRESET_POINTS:
        raise ValueError(f"preset must be one of {list(PRESET_POINTS)}, got {name!r}")
    rng = np.random.default_rng(seed)
    x = np.sort(rng.uniform(0.0, 1.0, size=n))
    if name == "sine":
        y = np.sin(2 * math.pi * x) + 0.1 * rng.standard_normal(n)
    elif name == "step":
        y = np.where(x < 0.5, -1.0, 1.0) + 0.05 * rng.standard_normal(n)
    else:
        y = 2.0 * x - 1.0 + 0.3 * rng.standard_normal(n)
    return x, y


def check_points(x, y) -> tuple[np.ndarray, np.ndarray]:
    """The toy's points as float arrays, or a ValueError saying what is wrong in words a student can act on."""
    try:
        x = np.asarray(x, dtype=np.float64).reshape(-1)
        y = np.asarray(y, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        raise ValueError("every x and y must be a number") from None
    if x.shape != y.shape:
        raise ValueError("every point needs both an x and a y")
    if not 1 <= x.size <= MAX_POINTS:
        raise ValueError(f"give between 1 and {MAX_POINTS} points, got {x.size}")
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise ValueError("every x and y must be a finite number (no blanks, no inf)")
    if x.min() < 0.0 or x.max() > 1.0:
        raise ValueError("every x must lie between 0 and 1 (the keys map [0, 1] onto half a circle)")
    if np.abs(y).max() > 1e6:
        raise ValueError("keep every y between -1e6 and 1e6")
    return x, y


def circle_features(x: np.ndarray) -> np.ndarray:
    """The fixed feature map of the toy: x in [0, 1] -> (cos(pi x), sin(pi x)), unit vectors `[n 2]`.

    Nearby x give nearby unit vectors: the chord |phi(a) - phi(b)| = 2 sin(pi |a - b| / 2) is
    close to pi |a - b| for near points.
    """
    angle = math.pi * np.asarray(x, dtype=np.float64)
    return np.stack([np.cos(angle), np.sin(angle)], axis=-1)  # [n 2]


def toy_keys(x: np.ndarray, norm_tilt: float = 0.0) -> np.ndarray:
    """Keys of the toy `[n 2]`: circle features, each stretched by exp(tilt * (x - 1/2)).

    tilt 0 gives keys of equal norm (the identity holds exactly); a positive tilt lengthens the
    keys on the right, a negative one those on the left.
    """
    return circle_features(x) * np.exp(norm_tilt * (np.asarray(x, dtype=np.float64) - 0.5))[:, None]


@dataclass(frozen=True)
class SmoothingResult:
    """The toy's curves over a grid of query positions, and the kernel at the chosen query."""

    grid: np.ndarray  # [n_grid] query positions in [0, 1]
    attention: np.ndarray  # [n_grid] sum_j softmax(q.k_j) y_j
    nadaraya_watson: np.ndarray  # [n_grid] Gaussian-kernel estimate in key space, variance 1 / |q|
    nw_in_x: np.ndarray  # [n_grid] Gaussian-kernel estimate in x itself, bandwidth 1 / (pi sqrt|q|)
    weights: np.ndarray  # [n_points] attention weights of the chosen query
    kernel_x: np.ndarray  # [n_fine] a fine grid of key positions
    kernel_curve: np.ndarray  # [n_fine] exp(q.k(x)) normalised to peak 1, the kernel the query applies
    max_difference: float  # max over the grid of |attention - nadaraya_watson|
    worst_x: float  # the query position where that largest difference is
    equal_norms: bool


def smooth(x, y, query_x: float, query_norm: float, norm_tilt: float = 0.0, n_grid: int = 201) -> SmoothingResult:
    """Attention and Nadaraya-Watson estimates across [0, 1] for a query norm, and one query's kernel.

    The query at position x0 is q = |q| phi(x0); keys are toy_keys(x, tilt), values are y.
    """
    x, y = check_points(x, y)
    keys = toy_keys(x, norm_tilt)  # [n 2]
    grid = np.linspace(0.0, 1.0, n_grid)
    directions = circle_features(grid)  # [n_grid 2]
    att_w = attention_weights(query_norm * directions, keys)  # [n_grid n]
    nw_w = gaussian_kernel_weights(directions, keys, kernel_variance(query_norm))  # [n_grid n]
    h_x = predicted_bandwidth(query_norm)
    nw_x_w = softmax(-((grid[:, None] - x[None, :]) ** 2) / (2 * h_x**2))  # [n_grid n]
    attention, nw = att_w @ y, nw_w @ y
    u = circle_features(np.array([query_x]))[0]  # [2]
    fine = np.linspace(0.0, 1.0, 801)
    curve = np.exp(query_norm * (toy_keys(fine, norm_tilt) @ u - np.max(toy_keys(fine, norm_tilt) @ u)))
    return SmoothingResult(
        grid=grid, attention=attention, nadaraya_watson=nw, nw_in_x=nw_x_w @ y,
        weights=attention_weights(query_norm * u, keys), kernel_x=fine, kernel_curve=curve,
        max_difference=float(np.max(np.abs(attention - nw))), worst_x=float(grid[np.argmax(np.abs(attention - nw))]),
        equal_norms=norm_tilt == 0.0,
    )


def predicted_bandwidth(query_norm: float) -> float:
    """The kernel's standard deviation in x predicted by the small-angle picture: 1 / (pi sqrt|q|)."""
    return 1.0 / (math.pi * math.sqrt(query_norm))


def measured_bandwidth(query_norm: float, query_x: float = 0.5) -> float:
    """The kernel's width read off its curve: half its width at half height, divided by sqrt(2 ln 2).

    For a Gaussian this is its standard deviation; the curve is exp(|q| cos(pi (x - x0))) on a fine
    grid of x around x0 (unbounded x, so the edges of [0, 1] do not cut it), so the answer differs
    from the prediction only where the small-angle picture fails (a wide kernel).
    """
    dx = np.linspace(-1.0, 1.0, 40_001)  # offsets x - x0, half a turn either way
    curve = np.exp(query_norm * (np.cos(math.pi * dx) - 1.0))  # peak 1 at dx = 0
    above = dx[curve >= 0.5]
    if above.size == dx.size:  # never falls to half height within half a turn: no finite width
        return math.inf
    half_width = (above.max() - above.min()) / 2.0
    return float(half_width / math.sqrt(2.0 * math.log(2.0)))


def bandwidth_table(query_norms) -> list[dict]:
    """Predicted and measured kernel widths (in x) for several query norms: one row each."""
    rows = []
    for norm in query_norms:
        predicted, measured = predicted_bandwidth(norm), measured_bandwidth(norm)
        rows.append({"query norm |q|": float(norm), "predicted width": predicted, "measured width": measured,
                     "measured / predicted": measured / predicted})
    return rows


# ---------------------------------------------------------------------------------------------
# Panel 2: a soft database that hardens into a lookup


PRESET_TABLES = {
    "spread": "Five keys around the circle",
    "tie": "Two keys equally near the query",
    "long key": "A long key far from the query",
}


def preset_table(name: str) -> tuple[np.ndarray, np.ndarray]:
    """Keys `[n 2]` and values `[n]` of a preset database (the query points along +x, angle 0)."""
    if name == "spread":
        angles = np.radians([20.0, 75.0, 140.0, 215.0, 300.0])
        return np.stack([np.cos(angles), np.sin(angles)], axis=-1), np.array([1.0, 4.0, 2.0, 5.0, 3.0])
    if name == "tie":
        angles = np.radians([30.0, -30.0, 120.0, 220.0])
        return np.stack([np.cos(angles), np.sin(angles)], axis=-1), np.array([2.0, 6.0, 0.0, 9.0])
    if name == "long key":
        keys = np.array([[0.95, 0.31], [2.2, 2.6], [-0.8, 0.6], [-0.3, -0.95]])
        return keys, np.array([1.0, 8.0, 3.0, 5.0])
    raise ValueError(f"preset must be one of {list(PRESET_TABLES)}, got {name!r}")


def check_table(keys, values) -> tuple[np.ndarray, np.ndarray]:
    """A database as float arrays `[n 2]`, `[n]`, or a ValueError a student can act on."""
    try:
        keys = np.asarray(keys, dtype=np.float64)
        values = np.asarray(values, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        raise ValueError("every key coordinate and value must be a number") from None
    if keys.ndim != 2 or keys.shape[1] != 2 or keys.shape[0] != values.size:
        raise ValueError("every row needs a key (two coordinates) and a value")
    if not 1 <= values.size <= MAX_KEYS:
        raise ValueError(f"give between 1 and {MAX_KEYS} keys, got {values.size}")
    if not (np.isfinite(keys).all() and np.isfinite(values).all()):
        raise ValueError("every key coordinate and value must be a finite number (no blanks, no inf)")
    if np.abs(keys).max() > 100 or np.abs(values).max() > 1e6:
        raise ValueError("keep key coordinates within ±100 and values within ±1e6")
    return keys, values


def unit(angle_degrees: float) -> np.ndarray:
    """The unit vector at an angle (degrees from +x, anticlockwise) `[2]`."""
    a = math.radians(angle_degrees)
    return np.array([math.cos(a), math.sin(a)])


@dataclass(frozen=True)
class LookupSweep:
    """The database read at every beta of a log grid."""

    betas: np.ndarray  # [n_beta]
    output: np.ndarray  # [n_beta] sum_j w_j v_j
    best_weight: np.ndarray  # [n_beta] the weight of the key with the largest score
    entropy: np.ndarray  # [n_beta] nats
    best: np.ndarray  # indices of the keys sharing the largest score (more than one: a tie)
    beta_one_hot: float  # the beta where the best key's weight reaches ONE_HOT (inf for a tie)
    mean_value: float  # the output at beta = 0
    limit_value: float  # the output as beta -> infinity: the mean value of the best keys


def top_keys(scores: np.ndarray, rtol: float = 1e-9) -> np.ndarray:
    """Indices of the keys whose score equals the largest (within a relative tolerance): one, or a tie."""
    top = scores.max()
    return np.flatnonzero(scores >= top - rtol * max(1.0, abs(top)))


def beta_for_weight(scores: np.ndarray, target: float = ONE_HOT) -> float:
    """The smallest beta at which the top key's softmax(beta * s) weight reaches `target` (bisection).

    That weight rises monotonically with beta, from 1/n at beta 0 to 1 (one best key) or to
    1/(number tied) when keys tie, in which case a target above that is never reached: inf.
    """
    best = top_keys(scores)
    if target * len(best) >= 1.0 - 1e-12 and len(best) > 1:
        return math.inf
    if len(scores) == 1:
        return 0.0

    def weight(beta: float) -> float:
        return float(softmax(beta * scores)[best].max())

    lo, hi = 0.0, 1.0
    while weight(hi) < target:
        hi *= 2.0
        if hi > 1e12:
            return math.inf
    for _ in range(200):
        mid = (lo + hi) / 2.0
        lo, hi = (mid, hi) if weight(mid) < target else (lo, mid)
    return hi


def lookup_sweep(keys, values, query: np.ndarray, betas: np.ndarray) -> LookupSweep:
    """Output, best key's weight and entropy of softmax(beta q.k) over the keys, for every beta."""
    keys, values = check_table(keys, values)
    scores = keys @ np.asarray(query, dtype=np.float64)  # [n]
    weights = softmax(np.asarray(betas, dtype=np.float64)[:, None] * scores[None, :])  # [n_beta n]
    best = top_keys(scores)
    return LookupSweep(
        betas=np.asarray(betas, dtype=np.float64), output=weights @ values, best_weight=weights[:, best[0]],
        entropy=entropy(weights), best=best, beta_one_hot=beta_for_weight(scores),
        mean_value=float(values.mean()), limit_value=float(values[best].mean()),
    )


# ---------------------------------------------------------------------------------------------
# Panel 5: where the equivalences hold


@dataclass(frozen=True)
class Equivalence:
    """Attention against Nadaraya-Watson, and the largest dot product against the nearest key."""

    attention: np.ndarray  # [n] softmax(|q| u.k_j)
    kernel: np.ndarray  # [n] normalised exp(-|u - k_j|^2 / (2 / |q|))
    max_difference: float
    norms: np.ndarray  # [n] |k_j|
    argmax_dot: int  # the key a hard (one-hot) attention picks
    nearest: int  # the key nearest the query's direction u
    variance: float  # 1 / |q|


def equivalence(keys, query_angle: float, query_norm: float) -> Equivalence:
    """Compare softmax(q.k) with the Gaussian kernel around u = q / |q|, and argmax q.k with the nearest key."""
    keys = np.asarray(keys, dtype=np.float64)
    u = unit(query_angle)
    attention = attention_weights(query_norm * u, keys)
    kernel = gaussian_kernel_weights(u, keys, kernel_variance(query_norm))
    return Equivalence(
        attention=attention, kernel=kernel, max_difference=float(np.max(np.abs(attention - kernel))),
        norms=np.linalg.norm(keys, axis=-1), argmax_dot=int(np.argmax(keys @ u)),
        nearest=int(np.argmin(np.linalg.norm(keys - u, axis=-1))), variance=kernel_variance(query_norm),
    )


def stretched_keys(stretch: float) -> np.ndarray:
    """Panel 5's three keys `[3 2]`: one near the query direction (+x), two further round, the last
    of them stretched by `stretch` (1 = all keys of equal norm)."""
    angles = np.radians([15.0, 60.0, -100.0])
    keys = np.stack([np.cos(angles), np.sin(angles)], axis=-1)
    keys[1] *= stretch
    return keys
