"""Tests for core/masks.py: presets, the safe formula parser, and the graph of a mask."""

import builtins
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from core import masks

# ---------------------------------------------------------------------------
# Presets
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 5, 16])
def test_full_and_causal_counts(n):
    assert masks.full(n).dtype == torch.bool
    assert masks.allowed_pairs(masks.full(n)) == n * n
    assert masks.allowed_pairs(masks.causal(n)) == n * (n + 1) // 2
    assert masks.density(masks.full(n)) == 1.0


def test_causal_cells():
    m = masks.causal(4)
    assert m[3, 0] and m[2, 2] and not m[0, 1] and not m[1, 3]


def test_sliding_window_is_symmetric_and_counts():
    n, w = 10, 2
    m = masks.sliding_window(n, w)
    assert torch.equal(m, m.T)
    assert m[5, 3] and m[5, 7] and not m[5, 2] and not m[5, 8]
    # 2w + 1 per row, minus the cells cut off at both edges: w(w + 1) in all.
    assert masks.allowed_pairs(m) == n * (2 * w + 1) - w * (w + 1)


def test_causal_sliding_window_is_the_intersection():
    m = masks.sliding_window(8, 2, causal=True)
    assert torch.equal(m, masks.sliding_window(8, 2) & masks.causal(8))
    assert m[5, 3] and not m[5, 6]


@pytest.mark.parametrize("n, b", [(8, 2), (12, 4), (9, 3), (5, 5)])
def test_block_diagonal_counts(n, b):
    m = masks.block_diagonal(n, b)
    assert masks.allowed_pairs(m) == n * b
    assert m[0, b - 1] and (b == n or not m[0, b])


def test_block_diagonal_short_last_block():
    m = masks.block_diagonal(5, 2)  # blocks {0,1} {2,3} {4}
    assert masks.allowed_pairs(m) == 4 + 4 + 1


def test_strided_cells():
    m = masks.strided(9, 3)
    assert all(m[i, i] for i in range(9))
    assert m[6, 0] and m[0, 6] and m[7, 1] and not m[6, 1]
    assert torch.equal(m, m.T)
    assert torch.equal(masks.strided(9, 3, causal=True), m & masks.causal(9))


def test_global_local_cells():
    n, g, w = 10, 2, 1
    m = masks.global_local(n, g, w)
    assert m[:g].all() and m[:, :g].all()
    assert m[5, 4] and m[5, 6] and not m[5, 8]
    local = masks.sliding_window(n, w)
    assert masks.allowed_pairs(m) == masks.allowed_pairs(local | masks.from_formula("i < 2 or j < 2", n))


def test_padding():
    m = masks.padding(6, 4)
    assert m[:, :4].all() and not m[:, 4:].any()
    assert m.any(dim=1).all()  # no fully masked row, padded queries included


def test_random_mask_is_seeded_and_has_diagonal():
    a = masks.random_mask(30, 0.3, seed=7)
    assert torch.equal(a, masks.random_mask(30, 0.3, seed=7))
    assert not torch.equal(a, masks.random_mask(30, 0.3, seed=8))
    assert torch.diagonal(a).all()
    assert 0.2 < masks.density(a) < 0.45
    assert masks.allowed_pairs(masks.random_mask(7, 0.0, seed=1)) == 7


def test_counts_beyond_n_are_clamped():
    assert torch.equal(masks.global_local(4, 9, 0), masks.full(4))
    assert torch.equal(masks.padding(4, 9), masks.full(4))


def test_random_mask_does_not_touch_the_global_rng():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    masks.random_mask(10, 0.5, seed=0)
    assert torch.equal(torch.rand(3), expected)


@pytest.mark.parametrize(
    "call",
    [
        lambda: masks.full(0),
        lambda: masks.full(4097),
        lambda: masks.full(2.5),
        lambda: masks.causal(True),
        lambda: masks.sliding_window(5, -1),
        lambda: masks.block_diagonal(5, 0),
        lambda: masks.strided(5, 0),
        lambda: masks.global_local(5, -1, 1),
        lambda: masks.padding(5, 0),
        lambda: masks.random_mask(5, 1.5, seed=0),
    ],
)
def test_preset_arguments_are_validated(call):
    with pytest.raises(ValueError):
        call()


@pytest.mark.parametrize(
    "bad",
    [
        torch.ones(3, 4, dtype=torch.bool),
        torch.ones(3, 3),
        torch.ones(2, 3, 3, dtype=torch.bool),
        np.ones((3, 3), dtype=bool),
    ],
)
def test_analysis_rejects_bad_masks(bad):
    for fn in (masks.adjacency, masks.algebraic_connectivity, masks.allowed_pairs, masks.density):
        with pytest.raises(ValueError):
            fn(bad)
    with pytest.raises(ValueError):
        masks.reachability(bad, 2)


# ---------------------------------------------------------------------------
# The graph of a mask: Laplacian and lambda_2
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("n", [2, 3, 7, 20])
def test_lambda2_of_complete_graph_is_n(n):
    assert masks.algebraic_connectivity(masks.full(n)) == pytest.approx(n)
    # The causal mask's undirected graph is complete too.
    assert masks.algebraic_connectivity(masks.causal(n)) == pytest.approx(n)


@pytest.mark.parametrize("n", [2, 5, 12, 40])
def test_lambda2_of_path_graph(n):
    path = masks.sliding_window(n, 1)
    assert masks.algebraic_connectivity(path) == pytest.approx(2 - 2 * math.cos(math.pi / n))


@pytest.mark.parametrize("n, b", [(8, 4), (9, 3), (10, 1), (7, 3)])
def test_lambda2_of_disconnected_blocks_is_zero(n, b):
    assert masks.algebraic_connectivity(masks.block_diagonal(n, b)) == pytest.approx(0.0, abs=1e-9)


def test_single_token_lambda2_is_zero():
    assert masks.algebraic_connectivity(masks.full(1)) == 0.0


def test_adjacency_is_undirected_without_self_loops():
    a = masks.adjacency(masks.causal(4))
    assert a.dtype == np.float64
    np.testing.assert_array_equal(a, np.ones((4, 4)) - np.eye(4))
    spectrum = masks.laplacian_spectrum(masks.full(4))
    np.testing.assert_allclose(spectrum, [0, 4, 4, 4], atol=1e-9)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 12), p=st.floats(0.0, 1.0), seed=st.integers(0, 10_000))
def test_laplacian_invariants_on_random_masks(n, p, seed):
    mask = masks.random_mask(n, p, seed)
    lap = masks.laplacian(mask)
    np.testing.assert_allclose(lap.sum(axis=1), 0.0, atol=1e-12)
    np.testing.assert_array_equal(lap, lap.T)
    spectrum = masks.laplacian_spectrum(mask)
    assert np.all(spectrum >= 0) and np.all(np.diff(spectrum) >= -1e-12)
    # lambda_2 > 0 exactly when every token can reach every other in the undirected graph.
    connected = n == 1 or masks.layers_to_reach_all(mask | mask.T) is not None
    assert (masks.algebraic_connectivity(mask) > 1e-9) == (connected and n > 1)


# ---------------------------------------------------------------------------
# Reachability through stacked layers
# ---------------------------------------------------------------------------


def test_causal_reach_after_one_layer_is_causal():
    for layers in (1, 3):
        assert torch.equal(masks.reachability(masks.causal(6), layers), masks.causal(6))


def test_zero_layers_is_identity():
    assert torch.equal(masks.reachability(masks.full(4), 0), torch.eye(4, dtype=torch.bool))


@pytest.mark.parametrize("n, w, layers", [(12, 1, 1), (12, 1, 3), (20, 2, 4), (9, 3, 5)])
def test_sliding_window_reach_grows_by_w_per_layer(n, w, layers):
    reach = masks.reachability(masks.sliding_window(n, w), layers)
    assert torch.equal(reach, masks.sliding_window(n, layers * w))


def test_sliding_window_layers_to_reach_all():
    assert masks.layers_to_reach_all(masks.sliding_window(20, 1)) == 19
    assert masks.layers_to_reach_all(masks.sliding_window(20, 3)) == 7  # ceil(19 / 3)
    assert masks.layers_to_reach_all(masks.sliding_window(20, 3), max_layers=6) is None
    assert masks.layers_to_reach_all(masks.full(5)) == 1
    assert masks.layers_to_reach_all(masks.full(1)) == 0


def test_causal_never_reaches_all():
    # The first token never sees the last one: the future stays hidden at any depth.
    assert masks.layers_to_reach_all(masks.causal(6)) is None


def test_block_diagonal_never_reaches_across_blocks():
    mask = masks.block_diagonal(12, 4)
    reach = masks.reachability(mask, 10)
    assert torch.equal(reach, mask)
    assert masks.layers_to_reach_all(mask) is None


def test_a_global_token_connects_everything_in_two_layers():
    mask = masks.global_local(16, 1, 0)
    assert not masks.reachability(mask, 1).all()
    assert masks.reachability(mask, 2).all()
    assert masks.layers_to_reach_all(mask) == 2


def test_per_layer_masks_compose_in_order():
    n = 6
    # Layer 1 lets token 0 read token 5; layer 2 lets token 3 read token 0. So 5 reaches 3.
    first = torch.eye(n, dtype=torch.bool)
    first[0, 5] = True
    second = torch.eye(n, dtype=torch.bool)
    second[3, 0] = True
    assert masks.reachability([first, second])[3, 5]
    assert not masks.reachability([second, first])[3, 5]  # the other order cannot
    with pytest.raises(ValueError):
        masks.reachability([first, second], layers=3)
    with pytest.raises(ValueError):
        masks.reachability([first, masks.full(5)])


def test_receptive_field_widens_layer_by_layer():
    fields = masks.receptive_field(masks.sliding_window(10, 1), token=5, layers=3)
    assert [int(f.sum()) for f in fields] == [3, 5, 7]
    assert fields[0].tolist() == [False] * 4 + [True] * 3 + [False] * 3
    listed = masks.receptive_field([masks.sliding_window(10, 1)] * 3, token=5)
    assert all(torch.equal(a, b) for a, b in zip(fields, listed))
    with pytest.raises(ValueError):
        masks.receptive_field(masks.full(4), token=4, layers=1)


# ---------------------------------------------------------------------------
# The formula parser
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 7, 16])
def test_formulas_match_presets(n):
    assert torch.equal(masks.from_formula("abs(i-j) <= 2", n), masks.sliding_window(n, 2))
    assert torch.equal(masks.from_formula("j <= i", n), masks.causal(n))
    assert torch.equal(masks.from_formula("i // 4 == j // 4", n), masks.block_diagonal(n, 4))
    assert torch.equal(masks.from_formula("(i - j) % 3 == 0", n), masks.strided(n, 3))
    assert torch.equal(masks.from_formula("i < 2 or j < 2 or abs(i - j) <= 1", n), masks.global_local(n, 2, 1))
    assert torch.equal(masks.from_formula("j < max(n - 1, 1)", n), masks.padding(n, max(n - 1, 1)))


def test_formula_features():
    n = 6
    i, j = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    cases = {
        "0 <= i - j < 3": (0 <= i - j) & (i - j < 3),
        "not j > i": ~(j > i),
        "min(i, j, 3) == max(1, -j + 2)": np.minimum(np.minimum(i, j), 3) == np.maximum(1, -j + 2),
        "(i < j) == (j < 2)": (i < j) == (j < 2),
        "i * 2 != j and n == 6": (i * 2 != j) & (n == 6),
        "1 < 2": np.ones((n, n), dtype=bool),
    }
    for text, expected in cases.items():
        result = masks.from_formula(text, n)
        assert result.dtype == torch.bool and result.shape == (n, n)
        np.testing.assert_array_equal(result.numpy(), expected, err_msg=text)


REJECTED = [
    "__import__('os').system('x')",
    "(1).__class__",
    "i.real > 0",
    "'a' < 'b'",
    "[x for x in ()]",
    "lambda: 1",
    "i ** 99999",
    "open('f')",
    "i // 0 == 1",
    "i % (j - j) == 0",
    "i + " * 50 + "1 < 2",  # 201 characters
    "(" * 30 + "i" + ")" * 30 + " < 1",  # deeply nested parens
    "-" * 30 + "i < 1",  # deeply nested operators
    "x < 1",
    "i - j",
    "1.5 < i",
    "i < 10000000",
    "(x := 1) < 2",
    "i[0] < 1",
    "abs(i, j) < 1",
    "min(i) < 1",
    "max(i, key=j) < 1",
    "True",
    "i < j < 'a'",
    "i / 2 < j",
    "i < j is True",
    "abs < 1",
    "not i",
    "(i < j) + 1 > 0",
    "i * 1000000 * 1000000 * 1000000 * 1000000 > 0",
    "globals()['x'] < 1",
    "",
    "i <",
    "i < 1\x00",
]


@pytest.mark.parametrize("text", REJECTED)
def test_formula_rejections(text):
    with pytest.raises(ValueError) as info:
        masks.from_formula(text, 5)
    assert len(str(info.value)) > 20  # a sentence, not a bare token


def test_the_length_limit_is_exactly_200():
    assert len("i + " * 50 + "1 < 2") == 205
    ok = "j <= i" + " " * 194
    assert len(ok) == 200
    assert torch.equal(masks.from_formula(ok, 4), masks.causal(4))
    with pytest.raises(ValueError, match="too long"):
        masks.from_formula(ok + " ", 4)


def test_error_messages_explain_what_is_allowed():
    with pytest.raises(ValueError, match="comparison"):
        masks.from_formula("i - j", 4)
    with pytest.raises(ValueError, match="abs"):
        masks.from_formula("open('f')", 4)
    with pytest.raises(ValueError, match="by zero"):
        masks.from_formula("i // 0 == 1", 4)
    grammar = masks.describe_formula_grammar()
    for word in ("i", "j", "abs", "min", "max", "//", "and", "not"):
        assert word in grammar


def test_formula_validates_n_and_type():
    for bad_n in (0, 4097, "5", 2.0):
        with pytest.raises(ValueError):
            masks.from_formula("j <= i", bad_n)
    with pytest.raises(ValueError):
        masks.from_formula(b"j <= i", 4)


def test_rejected_formulas_have_no_side_effects(tmp_path, monkeypatch):
    sentinel = tmp_path / "pwned"
    calls = []
    real_import, real_open = builtins.__import__, builtins.open

    def recording_import(name, *args, **kwargs):
        calls.append(("import", name))
        return real_import(name, *args, **kwargs)

    def recording_open(file, *args, **kwargs):
        calls.append(("open", str(file)))
        return real_open(file, *args, **kwargs)

    def forbidden(*args, **kwargs):
        raise AssertionError("the parser must not run Python code")

    monkeypatch.setattr(builtins, "__import__", recording_import)
    monkeypatch.setattr(builtins, "open", recording_open)
    monkeypatch.setattr(builtins, "exec", forbidden)
    monkeypatch.setattr(builtins, "eval", forbidden)
    attacks = [
        f"open({str(sentinel)!r}, 'w') < 1",
        f"__import__('os').system('touch {sentinel}') < 1",
        f"__import__('pathlib').Path({str(sentinel)!r}).touch() < 1",
        f"[open({str(sentinel)!r}, 'w') for k in (1,)] < 1",
    ]
    for text in attacks:
        assert len(text) <= 200
        with pytest.raises(ValueError):
            masks.from_formula(text, 3)
    # A valid formula works with exec/eval sabotaged: the interpreter never uses them.
    assert torch.equal(masks.from_formula("j <= i", 3), masks.causal(3))
    assert not sentinel.exists()
    assert not any(kind == "import" and name in ("os", "pathlib") for kind, name in calls)
    assert not any(kind == "open" for kind, _ in calls)


# Random formulas from the grammar, each paired with the numpy computation it should mean.
_ints = st.recursive(
    st.one_of(
        st.sampled_from([("i", lambda i, j, n: i), ("j", lambda i, j, n: j), ("n", lambda i, j, n: n)]),
        st.integers(0, 20).map(lambda v: (str(v), lambda i, j, n, v=v: v)),
    ),
    lambda inner: st.one_of(
        st.tuples(inner, st.sampled_from(["+", "-", "*"]), inner).map(
            lambda t: (
                f"({t[0][0]} {t[1]} {t[2][0]})",
                lambda i, j, n, a=t[0][1], op=t[1], b=t[2][1]: {
                    "+": np.add, "-": np.subtract, "*": np.multiply
                }[op](a(i, j, n), b(i, j, n)),
            )
        ),
        st.tuples(inner, st.sampled_from(["//", "%"]), st.integers(1, 7)).map(
            lambda t: (
                f"({t[0][0]} {t[1]} {t[2]})",
                lambda i, j, n, a=t[0][1], op=t[1], d=t[2]: (np.floor_divide if op == "//" else np.mod)(a(i, j, n), d),
            )
        ),
        inner.map(lambda a: (f"abs({a[0]})", lambda i, j, n, f=a[1]: np.abs(f(i, j, n)))),
        inner.map(lambda a: (f"-{a[0]}", lambda i, j, n, f=a[1]: -f(i, j, n))),
        st.tuples(st.sampled_from(["min", "max"]), inner, inner).map(
            lambda t: (
                f"{t[0]}({t[1][0]}, {t[2][0]})",
                lambda i, j, n, name=t[0], a=t[1][1], b=t[2][1]: (np.minimum if name == "min" else np.maximum)(
                    a(i, j, n), b(i, j, n)
                ),
            )
        ),
    ),
    max_leaves=4,
)

_COMPARE = {"<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal, "==": np.equal, "!=": np.not_equal}

_conditions = st.recursive(
    st.tuples(_ints, st.sampled_from(sorted(_COMPARE)), _ints).map(
        lambda t: (
            f"{t[0][0]} {t[1]} {t[2][0]}",
            lambda i, j, n, a=t[0][1], op=t[1], b=t[2][1]: _COMPARE[op](a(i, j, n), b(i, j, n)),
        )
    ),
    lambda inner: st.one_of(
        st.tuples(inner, st.sampled_from(["and", "or"]), inner).map(
            lambda t: (
                f"({t[0][0]}) {t[1]} ({t[2][0]})",
                lambda i, j, n, a=t[0][1], op=t[1], b=t[2][1]: (np.logical_and if op == "and" else np.logical_or)(
                    a(i, j, n), b(i, j, n)
                ),
            )
        ),
        inner.map(lambda c: (f"not ({c[0]})", lambda i, j, n, f=c[1]: np.logical_not(f(i, j, n)))),
    ),
    max_leaves=2,
)


@settings(max_examples=60, deadline=None)
@given(formula=_conditions, n=st.integers(1, 9))
def test_random_formulas_agree_with_numpy(formula, n):
    text, reference = formula
    i, j = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    expected = np.broadcast_to(reference(i, j, n), (n, n))
    try:
        result = masks.from_formula(text, n)
    except ValueError as err:
        # Only the size limits may refuse a formula built from the grammar.
        assert len(text) > 200 or "too" in str(err), (text, err)
        return
    np.testing.assert_array_equal(result.numpy(), expected, err_msg=text)
