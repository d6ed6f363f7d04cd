"""Attention masks: presets, a safe formula language, and the graph a mask draws.

Every mask is a ``torch.bool`` tensor of shape ``[q, k]`` (square, ``n x n``):
``mask[i, j]`` is True when query ``i`` may attend to key ``j``.

Three parts, in reading order:

1. Presets (``full``, ``causal``, ``sliding_window``, ...) that build common masks.
2. ``from_formula``: a student types ``abs(i - j) <= 2`` and gets a mask. The text is
   parsed with :func:`ast.parse` and walked by a small whitelist interpreter over
   numpy grids; Python itself never runs the text.
3. Graph analysis: the undirected graph of a mask (its Laplacian and algebraic
   connectivity lambda_2) and the directed "who can influence whom after L layers".
"""

from __future__ import annotations

import ast
from collections.abc import Sequence

import numpy as np
import torch

MAX_N = 4096  # largest sequence length any function here builds or analyses

# ---------------------------------------------------------------------------
# Validation helpers
# ---------------------------------------------------------------------------


def _check_int(name: str, value: object, low: int, high: int | None = None) -> int:
    """Return ``value`` as an int if it is a whole number in ``[low, high]``; else a clear ValueError."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be a whole number, got {value!r}")
    value = int(value)
    if value < low or (high is not None and value > high):
        upper = "" if high is None else f" and at most {high}"
        raise ValueError(f"{name} must be at least {low}{upper}, got {value}")
    return value


def _check_n(n: object) -> int:
    """Validate a sequence length: a whole number from 1 to MAX_N."""
    return _check_int("n", n, 1, MAX_N)


def _check_mask(mask: object) -> int:
    """Check that ``mask`` is a square 2-D torch.bool tensor and return its size n."""
    if not isinstance(mask, torch.Tensor):
        raise ValueError(f"a mask must be a torch.Tensor, got {type(mask).__name__}")
    if mask.dtype != torch.bool:
        raise ValueError(f"a mask must have dtype torch.bool (True = may attend), got {mask.dtype}")
    if mask.dim() != 2:
        raise ValueError(f"a mask must be 2-D [q, k], got {mask.dim()} dimensions {tuple(mask.shape)}")
    if mask.shape[0] != mask.shape[1]:
        raise ValueError(f"a mask must be square [n, n], got shape {tuple(mask.shape)}")
    return _check_int("mask size", mask.shape[0], 1, MAX_N)


def _grid(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Query and key index grids ``i[q, k]`` and ``j[q, k]`` for an n x n mask."""
    idx = torch.arange(n)
    return idx[:, None].expand(n, n), idx[None, :].expand(n, n)  # [q, k] each


# ---------------------------------------------------------------------------
# Presets
# ---------------------------------------------------------------------------


def full(n: int) -> torch.Tensor:
    """Every query attends to every key: the bidirectional encoder mask."""
    n = _check_n(n)
    return torch.ones(n, n, dtype=torch.bool)


def causal(n: int) -> torch.Tensor:
    """Query i attends to keys j <= i: the decoder mask that hides the future."""
    n = _check_n(n)
    return torch.tril(torch.ones(n, n, dtype=torch.bool))


def sliding_window(n: int, w: int, causal: bool = False) -> torch.Tensor:
    """Local attention: query i attends to key j when |i - j| <= w.

    The window is symmetric (w keys on each side, 2w + 1 in all away from the edges).
    With ``causal=True`` it is also intersected with the causal mask, so only the w
    previous keys and the token itself remain.
    """
    n = _check_n(n)
    w = _check_int("w (window)", w, 0)
    i, j = _grid(n)
    mask = (i - j).abs() <= w
    return mask & (j <= i) if causal else mask


def block_diagonal(n: int, b: int) -> torch.Tensor:
    """Block-sparse attention: tokens are cut into consecutive blocks of size b and
    attend only inside their own block (the last block is shorter if b does not divide n)."""
    n = _check_n(n)
    b = _check_int("b (block size)", b, 1)
    i, j = _grid(n)
    return i // b == j // b


def strided(n: int, s: int, causal: bool = False) -> torch.Tensor:
    """Strided attention: query i attends to key j when (i - j) % s == 0.

    That includes the diagonal (i - i = 0) and is symmetric: every s-th token in
    both directions. With ``causal=True`` only the earlier ones (j <= i) remain.
    """
    n = _check_n(n)
    s = _check_int("s (stride)", s, 1)
    i, j = _grid(n)
    mask = (i - j) % s == 0
    return mask & (j <= i) if causal else mask


def global_local(n: int, g: int, w: int) -> torch.Tensor:
    """Longformer-style attention: the first g tokens are global (they attend to and
    are attended by everyone); all other pairs attend within a symmetric window |i - j| <= w.
    A g of n or more makes every token global."""
    n = _check_n(n)
    g = _check_int("g (global tokens)", g, 0)
    w = _check_int("w (window)", w, 0)
    i, j = _grid(n)
    return ((i - j).abs() <= w) | (i < g) | (j < g)


def padding(n: int, n_real: int) -> torch.Tensor:
    """Padding mask: keys at positions >= n_real are padding and hidden from every query.

    The padded queries attend only to the real keys too, so no row is fully masked.
    An n_real of n or more means no padding.
    """
    n = _check_n(n)
    n_real = _check_int("n_real (real tokens)", n_real, 1)
    _, j = _grid(n)
    return j < n_real


def random_mask(n: int, density: float, seed: int = 0) -> torch.Tensor:
    """Each cell is True with probability ``density`` (the diagonal always), drawn from a
    local generator seeded with ``seed`` so the same arguments give the same mask."""
    n = _check_n(n)
    if isinstance(density, bool) or not isinstance(density, (int, float, np.floating, np.integer)):
        raise ValueError(f"density must be a number from 0 to 1, got {density!r}")
    if not 0.0 <= float(density) <= 1.0:
        raise ValueError(f"density must be from 0 to 1, got {density}")
    seed = _check_int("seed", seed, 0)
    generator = torch.Generator().manual_seed(seed)
    mask = torch.rand(n, n, generator=generator) < float(density)
    return mask | torch.eye(n, dtype=torch.bool)


# ---------------------------------------------------------------------------
# The formula language
# ---------------------------------------------------------------------------

MAX_FORMULA_CHARS = 200
MAX_FORMULA_NODES = 100  # expression nodes (names, numbers, operations, calls)
MAX_FORMULA_DEPTH = 20  # nesting of operations and parentheses
MAX_LITERAL = 10**6
_MAX_MAGNITUDE = 2**62  # intermediate values stay well inside int64

_GRAMMAR = (
    "A mask formula is a condition on the query position i and the key position j "
    "(n is the sequence length); it is True where query i may attend to key j.\n"
    "Allowed:\n"
    "  - the names i, j, n and whole numbers from 0 to 1000000\n"
    "  - arithmetic: +  -  *  //  %  and a leading minus (-x)\n"
    "  - comparisons: <  <=  >  >=  ==  !=  (chains like 0 <= i - j < 3 are fine)\n"
    "  - logic: and  or  not, and parentheses\n"
    "  - functions: abs(x), min(x, y, ...), max(x, y, ...)\n"
    "The whole formula must be a condition, e.g. abs(i - j) <= 2, j <= i, i // 4 == j // 4.\n"
    f"At most {MAX_FORMULA_CHARS} characters and {MAX_FORMULA_DEPTH} levels of nesting."
)


def describe_formula_grammar() -> str:
    """A short human description of what a mask formula may contain (shown under errors)."""
    return _GRAMMAR


def _reject(reason: str) -> ValueError:
    """Build the ValueError for a formula problem: the reason, then a reminder of what is allowed."""
    return ValueError(
        f"{reason}. Allowed: i, j, n, whole numbers, + - * // %, comparisons "
        "(< <= > >= == !=), and/or/not, parentheses, abs(), min(), max(). "
        "Example: abs(i - j) <= 2"
    )


# Friendly names for the Python constructs a student is most likely to try.
_FORBIDDEN_NAMES = {
    ast.Attribute: "attribute access like x.y",
    ast.Subscript: "indexing like x[0]",
    ast.Lambda: "lambda",
    ast.NamedExpr: "the := operator",
    ast.ListComp: "comprehensions",
    ast.SetComp: "comprehensions",
    ast.DictComp: "comprehensions",
    ast.GeneratorExp: "comprehensions",
    ast.IfExp: "'x if c else y'",
    ast.List: "lists",
    ast.Tuple: "tuples",
    ast.Set: "sets",
    ast.Dict: "dicts",
    ast.JoinedStr: "f-strings",
    ast.Starred: "*arguments",
    ast.Await: "await",
    ast.Yield: "yield",
    ast.YieldFrom: "yield",
    ast.Slice: "slices",
}

_BINARY_OPS = {
    ast.Add: ("+", np.add),
    ast.Sub: ("-", np.subtract),
    ast.Mult: ("*", np.multiply),
    ast.FloorDiv: ("//", np.floor_divide),
    ast.Mod: ("%", np.mod),
}

_COMPARE_OPS = {
    ast.Lt: np.less,
    ast.LtE: np.less_equal,
    ast.Gt: np.greater,
    ast.GtE: np.greater_equal,
    ast.Eq: np.equal,
    ast.NotEq: np.not_equal,
}

_OPERATOR_SYMBOLS = {
    ast.Pow: "**", ast.Div: "/ (use // for whole-number division)", ast.MatMult: "@",
    ast.LShift: "<<", ast.RShift: ">>", ast.BitAnd: "&", ast.BitOr: "|", ast.BitXor: "^",
    ast.UAdd: "unary +", ast.Invert: "~", ast.Is: "is", ast.IsNot: "is not",
    ast.In: "in", ast.NotIn: "not in",
}


def _operator_name(op: ast.AST) -> str:
    """A readable symbol for a Python operator node, for error messages."""
    return _OPERATOR_SYMBOLS.get(type(op), type(op).__name__)


def _paren_depth(expr: str) -> int:
    """The deepest nesting of round brackets in the raw text (checked before parsing)."""
    depth = deepest = 0
    for char in expr:
        if char == "(":
            depth += 1
            deepest = max(deepest, depth)
        elif char == ")":
            depth -= 1
    return deepest


def _tree_depth(node: ast.AST, limit: int) -> int:
    """Nesting depth of expression nodes under ``node``; stops counting past ``limit``."""
    children = [c for c in ast.iter_child_nodes(node) if isinstance(c, ast.expr)]
    if not children or limit <= 0:
        return 1
    return 1 + max(_tree_depth(c, limit - 1) for c in children)


def _parse_formula(expr: object) -> ast.expr:
    """Check the size limits, parse the text and return the expression tree (no evaluation)."""
    if not isinstance(expr, str):
        raise ValueError(f"the formula must be text, got {type(expr).__name__}")
    if not expr.strip():
        raise _reject("the formula is empty")
    if len(expr) > MAX_FORMULA_CHARS:
        raise _reject(f"the formula is too long ({len(expr)} characters, at most {MAX_FORMULA_CHARS})")
    if _paren_depth(expr) > MAX_FORMULA_DEPTH:
        raise _reject(f"the parentheses are nested too deeply (at most {MAX_FORMULA_DEPTH} levels)")
    try:
        tree = ast.parse(expr.strip(), mode="eval")
    except (SyntaxError, ValueError) as err:
        detail = getattr(err, "msg", None) or str(err)
        raise _reject(f"the formula is not valid syntax ({detail})") from None
    nodes = sum(isinstance(node, ast.expr) for node in ast.walk(tree))
    if nodes > MAX_FORMULA_NODES:
        raise _reject(f"the formula is too big ({nodes} parts, at most {MAX_FORMULA_NODES})")
    if _tree_depth(tree.body, MAX_FORMULA_DEPTH + 1) > MAX_FORMULA_DEPTH:
        raise _reject(f"the formula is nested too deeply (at most {MAX_FORMULA_DEPTH} levels)")
    return tree.body


def _is_bool(value: np.ndarray) -> bool:
    """True when an interpreted value is a condition (bool) rather than a number."""
    return value.dtype == np.bool_


def _need_numbers(values: Sequence[np.ndarray], what: str) -> None:
    """Reject True/False values where arithmetic or ordering needs numbers."""
    if any(_is_bool(v) for v in values):
        raise _reject(f"{what} needs numbers, not the True/False result of a comparison")


def _need_conditions(values: Sequence[np.ndarray], what: str) -> None:
    """Reject numbers where logic needs True/False conditions."""
    if not all(_is_bool(v) for v in values):
        raise _reject(f"'{what}' works on conditions such as i < j, not on numbers")


def _magnitude(value: np.ndarray) -> int:
    """Largest absolute value in an integer array, as an exact Python int."""
    return int(np.abs(value).max())


def _check_range(result_bound: int) -> None:
    """Refuse arithmetic whose result could leave the safe integer range."""
    if result_bound >= _MAX_MAGNITUDE:
        raise _reject("the numbers in the formula grow too large")


def _arith(node: ast.BinOp, env: dict[str, np.ndarray]) -> np.ndarray:
    """Interpret ``a + b``, ``a - b``, ``a * b``, ``a // b`` or ``a % b`` over the grids."""
    if type(node.op) not in _BINARY_OPS:
        raise _reject(f"the operator {_operator_name(node.op)} is not allowed")
    symbol, func = _BINARY_OPS[type(node.op)]
    left, right = _interpret(node.left, env), _interpret(node.right, env)
    _need_numbers([left, right], f"'{symbol}'")
    a, b = _magnitude(left), _magnitude(right)
    if symbol in ("//", "%"):
        if np.any(right == 0):
            raise _reject(f"'{symbol}' by zero: the right-hand side is 0 for some i, j")
    elif symbol == "*":
        _check_range(a * b)
    else:
        _check_range(a + b)
    return func(left, right)


def _unary(node: ast.UnaryOp, env: dict[str, np.ndarray]) -> np.ndarray:
    """Interpret ``-x`` (a number) or ``not c`` (a condition)."""
    operand = _interpret(node.operand, env)
    if isinstance(node.op, ast.USub):
        _need_numbers([operand], "a leading minus")
        return np.negative(operand)
    if isinstance(node.op, ast.Not):
        _need_conditions([operand], "not")
        return np.logical_not(operand)
    raise _reject(f"the operator {_operator_name(node.op)} is not allowed")


def _logic(node: ast.BoolOp, env: dict[str, np.ndarray]) -> np.ndarray:
    """Interpret ``a and b and ...`` / ``a or b or ...`` cell by cell."""
    word = "and" if isinstance(node.op, ast.And) else "or"
    values = [_interpret(v, env) for v in node.values]
    _need_conditions(values, word)
    combine = np.logical_and if word == "and" else np.logical_or
    return combine.reduce(np.broadcast_arrays(*values))


def _compare(node: ast.Compare, env: dict[str, np.ndarray]) -> np.ndarray:
    """Interpret a comparison; a chain ``a < b <= c`` means ``a < b and b <= c``."""
    operands = [_interpret(node.left, env)] + [_interpret(c, env) for c in node.comparators]
    result = np.asarray(True)
    for op, left, right in zip(node.ops, operands, operands[1:]):
        if type(op) not in _COMPARE_OPS:
            raise _reject(f"the comparison '{_operator_name(op)}' is not allowed")
        both_conditions = _is_bool(left) and _is_bool(right)
        if not (both_conditions and isinstance(op, (ast.Eq, ast.NotEq))):
            _need_numbers([left, right], "a comparison")
        result = np.logical_and(result, _COMPARE_OPS[type(op)](left, right))
    return result


def _call(node: ast.Call, env: dict[str, np.ndarray]) -> np.ndarray:
    """Interpret ``abs(x)``, ``min(x, y, ...)`` or ``max(x, y, ...)``; nothing else can be called."""
    if not isinstance(node.func, ast.Name) or node.func.id not in ("abs", "min", "max"):
        shown = f"{node.func.id}(...)" if isinstance(node.func, ast.Name) else "this kind of call"
        raise _reject(f"calling {shown} is not allowed; only abs, min and max can be called")
    name = node.func.id
    if node.keywords:
        raise _reject(f"{name}() takes no keyword arguments")
    if any(isinstance(a, ast.Starred) for a in node.args):
        raise _reject(f"{name}() takes no *arguments")
    if name == "abs" and len(node.args) != 1:
        raise _reject(f"abs() takes exactly one argument, got {len(node.args)}")
    if name in ("min", "max") and len(node.args) < 2:
        raise _reject(f"{name}() needs at least two arguments, e.g. {name}(i, j)")
    args = [_interpret(a, env) for a in node.args]
    _need_numbers(args, f"{name}()")
    if name == "abs":
        return np.abs(args[0])
    reduce = np.minimum.reduce if name == "min" else np.maximum.reduce
    return reduce(np.broadcast_arrays(*args))


def _leaf(node: ast.AST, env: dict[str, np.ndarray]) -> np.ndarray:
    """Interpret a name (i, j, n) or a whole-number literal."""
    if isinstance(node, ast.Name):
        if node.id in env:
            return env[node.id]
        if node.id in ("abs", "min", "max"):
            raise _reject(f"{node.id} must be called, like {node.id}(...)")
        raise _reject(f"unknown name '{node.id}'; the only names are i, j and n")
    value = node.value  # an ast.Constant
    if isinstance(value, bool) or not isinstance(value, int):
        kind = {str: "text (strings)", float: "decimal numbers", bytes: "bytes"}.get(type(value), repr(value))
        shown = "True/False" if isinstance(value, bool) else kind
        raise _reject(f"{shown} cannot be used; only whole numbers")
    if value > MAX_LITERAL:
        raise _reject(f"the number {value} is too large (at most {MAX_LITERAL})")
    return np.asarray(value, dtype=np.int64)


_HANDLERS = {
    ast.BinOp: _arith,
    ast.UnaryOp: _unary,
    ast.BoolOp: _logic,
    ast.Compare: _compare,
    ast.Call: _call,
    ast.Name: _leaf,
    ast.Constant: _leaf,
}


def _interpret(node: ast.AST, env: dict[str, np.ndarray]) -> np.ndarray:
    """Walk one whitelisted node and return its value (an int64 or bool numpy array)."""
    handler = _HANDLERS.get(type(node))
    if handler is None:
        what = _FORBIDDEN_NAMES.get(type(node), f"'{type(node).__name__}'")
        raise _reject(f"{what} is not allowed in a mask formula")
    return handler(node, env)


def from_formula(expr: str, n: int) -> torch.Tensor:
    """Build an [n, n] mask from a condition on i (query) and j (key), e.g. ``abs(i - j) <= 2``.

    The text is parsed into a tree and interpreted by the whitelist above, vectorised over
    numpy grids; anything outside the grammar raises ValueError saying what is allowed.
    """
    n = _check_n(n)
    tree = _parse_formula(expr)
    idx = np.arange(n, dtype=np.int64)
    env = {"i": idx[:, None], "j": idx[None, :], "n": np.asarray(n, dtype=np.int64)}  # [q, 1], [1, k]
    result = _interpret(tree, env)
    if not _is_bool(result):
        raise ValueError(
            "the formula must be a comparison, e.g. abs(i - j) <= 2 or j <= i; "
            "a number alone does not say which keys a query may attend to"
        )
    return torch.from_numpy(np.broadcast_to(result, (n, n)).copy())  # [q, k]


# ---------------------------------------------------------------------------
# Counting
# ---------------------------------------------------------------------------


def allowed_pairs(mask: torch.Tensor) -> int:
    """How many (query, key) pairs may attend: the work a sparse kernel actually does."""
    _check_mask(mask)
    return int(mask.sum())


def density(mask: torch.Tensor) -> float:
    """Fraction of the n*n pairs that are allowed (1.0 for full attention)."""
    n = _check_mask(mask)
    return allowed_pairs(mask) / (n * n)


# ---------------------------------------------------------------------------
# The undirected graph of a mask
# ---------------------------------------------------------------------------


def adjacency(mask: torch.Tensor) -> np.ndarray:
    """Adjacency matrix of the undirected graph: i and j are linked if either may attend
    to the other; self-loops are dropped (they do not move information between tokens)."""
    n = _check_mask(mask)
    linked = (mask | mask.T) & ~torch.eye(n, dtype=torch.bool)
    return linked.numpy().astype(np.float64)


def laplacian(mask: torch.Tensor) -> np.ndarray:
    """Graph Laplacian L = D - A of the mask's undirected graph (rows sum to zero)."""
    a = adjacency(mask)
    return np.diag(a.sum(axis=1)) - a


def laplacian_spectrum(mask: torch.Tensor) -> np.ndarray:
    """Eigenvalues of the Laplacian in ascending order; rounding noise below zero is clipped
    to 0, since a Laplacian has no negative eigenvalues."""
    eigenvalues = np.sort(np.linalg.eigvalsh(laplacian(mask)))
    return np.where(np.abs(eigenvalues) < 1e-9, 0.0, eigenvalues)


def algebraic_connectivity(mask: torch.Tensor) -> float:
    """lambda_2, the second-smallest Laplacian eigenvalue: 0 exactly when the graph falls
    apart into pieces that never exchange information, and n for the complete graph."""
    if _check_mask(mask) == 1:
        return 0.0
    return max(float(laplacian_spectrum(mask)[1]), 0.0)


# ---------------------------------------------------------------------------
# Directed reach through stacked layers
# ---------------------------------------------------------------------------


def _bool_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Boolean matrix product: out[q, k] is True if some m has a[q, m] and b[m, k]."""
    return (a.to(torch.float32) @ b.to(torch.float32)) > 0  # [q, k]; counts <= n stay exact


def _one_layer(mask: torch.Tensor) -> torch.Tensor:
    """Reach through one layer: attention along the mask, plus the residual path (identity)."""
    return mask | torch.eye(mask.shape[0], dtype=torch.bool)


def _check_layer_list(masks: object) -> int:
    """Validate a non-empty list of same-size masks (one per layer) and return n."""
    if not isinstance(masks, Sequence) or len(masks) == 0:
        raise ValueError("mask must be a mask tensor or a non-empty list of per-layer masks")
    sizes = {_check_mask(m) for m in masks}
    if len(sizes) != 1:
        raise ValueError(f"all per-layer masks must have the same size, got sizes {sorted(sizes)}")
    return sizes.pop()


def _check_layers(mask: object, layers: object) -> int:
    """Resolve the number of layers: required for one mask, defaults to the list length."""
    if isinstance(mask, torch.Tensor):
        if layers is None:
            raise ValueError("layers is required when a single mask is given")
        return _check_int("layers", layers, 0, MAX_N)
    if layers is not None and _check_int("layers", layers, 0) != len(mask):
        raise ValueError(f"layers={layers} but {len(mask)} per-layer masks were given")
    return len(mask)


def _power(step: torch.Tensor, layers: int) -> torch.Tensor:
    """step^layers as a boolean matrix power, by repeated squaring (about log2(layers) products)."""
    result = torch.eye(step.shape[0], dtype=torch.bool)
    while layers > 0:
        if layers % 2 == 1:
            result = _bool_matmul(step, result)
        step = _bool_matmul(step, step)
        layers //= 2
    return result


def reachability(mask: torch.Tensor | Sequence[torch.Tensor], layers: int | None = None) -> torch.Tensor:
    """Which keys can influence which queries after stacking ``layers`` attention layers.

    Directed: ``reach[q, k]`` is True if information can flow from position k to position q,
    counting the residual path, so reach = (M_L | I) o ... o (M_1 | I) and zero layers gives I.
    ``mask`` is one mask used by every layer, or a list with one mask per layer (first layer
    first; then ``layers`` defaults to its length).
    """
    if isinstance(mask, torch.Tensor):
        _check_mask(mask)
        return _power(_one_layer(mask), _check_layers(mask, layers))
    n = _check_layer_list(mask)
    _check_layers(mask, layers)
    reach = torch.eye(n, dtype=torch.bool)
    for layer_mask in mask:
        reach = _bool_matmul(_one_layer(layer_mask), reach)  # [q, k]
    return reach


def layers_to_reach_all(mask: torch.Tensor, max_layers: int | None = None) -> int | None:
    """Smallest number of layers after which every query is reached by every key, or None.

    Reach only grows and stops growing within n - 1 layers, so with the default
    ``max_layers`` (n) None means "never" (e.g. blocks that never talk to each other).
    Found by doubling the layer count, then binary search, so long windows stay cheap.
    """
    n = _check_mask(mask)
    max_layers = n if max_layers is None else _check_int("max_layers", max_layers, 0, MAX_N)
    if n == 1:
        return 0
    powers = [_one_layer(mask)]  # powers[p] = reach after 2**p layers
    while not bool(powers[-1].all()):
        squared = _bool_matmul(powers[-1], powers[-1])
        if torch.equal(squared, powers[-1]):
            return None  # a fixed point short of everything: more layers add nothing
        powers.append(squared)
    # Binary search: the largest layer count that does NOT yet reach everything, plus one.
    reach, not_yet = torch.eye(n, dtype=torch.bool), 0
    for p in reversed(range(len(powers))):
        candidate = _bool_matmul(powers[p], reach)
        if not bool(candidate.all()):
            reach, not_yet = candidate, not_yet + 2**p
    needed = not_yet + 1
    return needed if needed <= max_layers else None


def receptive_field(
    mask: torch.Tensor | Sequence[torch.Tensor], token: int, layers: int | None = None
) -> list[torch.Tensor]:
    """For each layer 1..layers, the bool vector [k] of keys that can influence ``token``:
    how a token's field of view widens as layers stack (same conventions as reachability)."""
    if isinstance(mask, torch.Tensor):
        n = _check_mask(mask)
        layers = _check_layers(mask, layers)
        token = _check_int("token", token, 0, n - 1)
        # One mask: powers of a matrix commute, so row `token` of S^l is (row of S^(l-1)) @ S.
        step = _one_layer(mask).to(torch.float32)  # [q, k]
        field, fields = torch.eye(n, dtype=torch.bool)[token], []
        for _ in range(layers):
            field = (field.to(torch.float32) @ step) > 0  # [k]
            fields.append(field)
        return fields
    n = _check_layer_list(mask)
    _check_layers(mask, layers)
    token = _check_int("token", token, 0, n - 1)
    reach, fields = torch.eye(n, dtype=torch.bool), []
    for layer_mask in mask:
        reach = _bool_matmul(_one_layer(layer_mask), reach)  # [q, k]
        fields.append(reach[token].clone())  # [k]
    return fields
