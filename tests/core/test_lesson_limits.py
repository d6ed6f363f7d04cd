"""Issue 36: what a lesson file or a check's arguments can make the server do. A file whose shape would make
tomllib slow (a deep dotted key) or deep (nested arrays) is refused before tomllib reads it, every failure is a
ValueError naming the file (and the line), and every argument of every check kind has a stated limit."""

from __future__ import annotations

import math
import time

import pytest

from core import checks as C
from core import lessons as L
from core import masks as M

MASK_TOKENS = 64  # the Masks page draws the mask of an input's first 64 tokens; so the check reads no more
GUARD_S = 0.5  # a generous bound only as a guard: the property is "refused before tomllib runs"


def no_tomllib(monkeypatch) -> None:
    """Make tomllib.loads fail the test if anything calls it."""
    def refuse(*_args, **_kwargs):
        raise AssertionError("tomllib.loads was called on a file that should have been refused before it")
    monkeypatch.setattr(L.tomllib, "loads", refuse)


# --- the file's shape, judged on its raw text -------------------------------------------------

def dotted_key_file(size: int) -> str:
    """A file of about `size` bytes: one dotted key a.a.a....a = 1 after a valid top (so line 3)."""
    top = 'title = "x"\nlevel = "first steps"\n'
    return top + "a" + ".a" * ((size - len(top)) // 2) + " = 1\n"


def test_a_deep_dotted_key_is_refused_before_tomllib_runs(monkeypatch):
    """120 KB of a.a.a... took tomllib 152 s and 14 GB: refused on the raw text, tomllib never called."""
    no_tomllib(monkeypatch)
    text = dotted_key_file(120_000)
    assert 119_000 < len(text.encode()) <= L.MAX_FILE_BYTES
    start = time.perf_counter()
    with pytest.raises(ValueError) as err:
        L.parse_lesson(text, "deep", "deep.toml")
    assert time.perf_counter() - start < GUARD_S
    assert str(err.value).startswith("deep.toml, line 3:") and f"more than {L.MAX_KEY_PARTS} parts" in str(err.value)


@pytest.mark.parametrize("text, words", [
    ('[a.b.c.d.e.f.g.h.i]\nx = 1\n', "dotted key"),  # a table header counts too
    ('"a"."b"."c"."d"."e"."f"."g"."h"."i" = 1\n', "dotted key"),  # quoted parts
    ('a . b . c . d . e . f . g . h . i = 1\n', "dotted key"),  # spaces around the dots
    ("x = " + "[" * 3000 + "]" * 3000 + "\n", "nested more than"),
    ("x = " + "{a = " * 3000 + "1" + "}" * 3000 + "\n", "nested more than"),
    ("x = " + "1" * 5000 + "\n", "without quotes is longer"),  # past Python's 4,300-digit int limit
    ("k" * 150_000 + " = 1\n", "without quotes is longer"),
])
def test_other_shapes_beyond_a_lessons_needs_are_refused_before_tomllib(monkeypatch, text, words):
    no_tomllib(monkeypatch)
    with pytest.raises(ValueError, match=rf"^odd.toml, line 1: .*{words}"):
        L.parse_lesson(text, "odd", "odd.toml")


def test_a_3000_deep_array_is_a_message_naming_the_file_not_a_recursion_error(tmp_path):
    """It raised RecursionError, which escaped the uploader and the folder loader (a traceback with paths)."""
    text = 'title = "x"\n' + "x = " + "[" * 3000 + "]" * 3000 + "\n"
    with pytest.raises(ValueError, match=r"^deep.toml, line 2: arrays and tables are nested more than"):
        L.parse_lesson(text, "deep", "deep.toml")
    (tmp_path / "deep.toml").write_text(text)
    with pytest.raises(ValueError, match=r"^deep.toml, line 2:"):
        L.load_lesson(tmp_path / "deep.toml")


def test_the_uploader_and_the_folder_loader_report_a_deep_file_by_name(tmp_path, monkeypatch):
    from ui.shell import lessons_catalog
    text = "x = " + "[" * 3000 + "]" * 3000 + "\n"
    with pytest.raises(ValueError, match=r"^mine.toml, line 1:"):
        lessons_catalog.parse_upload(text.encode(), "mine.toml")
    (tmp_path / "deep.toml").write_text(text)
    (tmp_path / "dotted.toml").write_text(dotted_key_file(120_000))
    monkeypatch.setenv(lessons_catalog.LESSON_DIR_ENV, str(tmp_path))
    lessons, problems = lessons_catalog.catalogue()
    assert "deep" not in lessons and "dotted" not in lessons
    assert any(p.startswith("deep.toml, line 1:") for p in problems), problems
    assert any(p.startswith("dotted.toml, line 3:") for p in problems), problems


def test_what_tomllib_itself_raises_is_a_message_naming_the_file(monkeypatch):
    """Were the shape check ever to let a file through, tomllib's RecursionError or ValueError (a number past
    Python's digit limit) still becomes a message naming the file."""
    monkeypatch.setattr(L, "shape_problem", lambda text, name: None)
    with pytest.raises(ValueError, match=r"^deep.toml: nested too deeply"):
        L.parse_lesson("x = " + "[" * 3000 + "]" * 3000 + "\n", "deep", "deep.toml")
    with pytest.raises(ValueError, match=r"^big.toml: cannot be read"):
        L.parse_lesson("x = " + "1" * 5000 + "\n", "big", "big.toml")


def test_anything_unexpected_while_checking_a_file_names_the_file(monkeypatch):
    def broken(*_args, **_kwargs):
        raise TypeError("something nobody foresaw")
    monkeypatch.setattr(L, "_step", broken)
    with pytest.raises(ValueError, match=r"^odd.toml: cannot be read as a lesson \(TypeError"):
        L.parse_lesson((L.LESSONS_DIR / "compact-primer.toml").read_text(), "odd", "odd.toml")


def test_strings_and_comments_are_not_mistaken_for_keys_or_nesting():
    """Dots, brackets and quotes inside strings and comments do not count; lines after a multi-line string are
    still numbered right."""
    text = '\n'.join([
        'title = "a.b.c.d.e.f.g.h.i.j [[[[[[[[[[ {{{{{{{{{{"',
        "summary = 'single quotes: a.b.c.d.e.f.g.h.i \\ stays'",
        '# a comment: a.b.c.d.e.f.g.h.i.j [[[[[[[[[[',
        'x = """',
        'an escaped \\""" does not end it; a.b.c.d.e.f.g.h.i.j [[[[[[[[[[',
        '"""',
        "y = '''a.b.c.d.e.f.g.h.i.j'''",
        'z = [1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5, 8.5, 9.5, 10.5]',
        'a.b.c.d.e.f.g.h.i = 1',
    ])
    problem = L.shape_problem(text, "f.toml")
    assert problem is not None and str(problem).startswith("f.toml, line 9: a dotted key"), problem
    assert L.shape_problem(text.rsplit("\n", 1)[0], "f.toml") is None
    for path in sorted(L.LESSONS_DIR.glob("*.toml")):  # every bundled lesson is well inside the limits
        assert L.shape_problem(path.read_text(), path.name) is None, path.name


def test_a_200kb_file_of_the_worst_allowed_shape_is_judged_quickly():
    text = "x = [" + "1," * 99_000 + "]\n"
    assert len(text.encode()) <= L.MAX_FILE_BYTES
    start = time.perf_counter()
    assert L.shape_problem(text, "f.toml") is None
    assert time.perf_counter() - start < 2.0  # linear: ~0.1 s here on a busy machine


# --- every argument of every check kind is bounded ----------------------------------------------

BASE = {  # arguments that work, per kind: each out-of-range value below replaces one of them
    "head_with_role": {"model": "induction-rope", "role": "induction"},
    "most_attended_key": {"model": "sort-decoder", "input": "<bos> 8 6 5 2 3 0 0 0 <sep> 0 0 0 2", "layer": 1,
                          "head": 0, "query": 13},
    "scalar_weight": {"key": 3},
    "scalar_output": {},
    "mask_measure": {"preset": "sliding", "n": 16, "measure": "density"},
    "max_heads": {"d_model": 512, "d_v": 64},
    "attention_vs_rnn_cost": {"n": 100, "d": 512},
    "lookup_beta": {"table": "spread"},
    "kernel_width": {"qnorm": 30.0},
    "attention_numbers": {"model": "reverse-encdec", "attention": "cross", "tensor": "scores", "len_dec": 4,
                          "len_enc": 6},
    "cost_count": {"measure": "flop_ratio"},
    "mask_lambda2": {"target": 0.0},
    "param_in_range": {"param": "t", "lo": 0.0, "hi": 1.0},
    "param_is": {"param": "x", "values": ["a"]},
}


def argument_type(kind: C.Kind, name: str) -> type:
    return kind.required.get(name) or type(kind.optional[name])


def test_every_number_and_list_argument_of_every_kind_has_a_stated_limit():
    assert set(BASE) == set(C.KINDS), "a new check kind needs a row in BASE (and limits)"
    for kind in C.KINDS.values():
        for name in [*kind.required, *kind.optional]:
            if argument_type(kind, name) in (int, float, list):
                limit = getattr(kind, "limits", {}).get(name)
                assert limit is not None and limit.why, (kind.name, name)
                assert limit.lo <= limit.hi and (argument_type(kind, name) is not list or limit.items >= 1)


TOL = "between 0 and 1,000,000"
OUT_OF_RANGE = [  # (kind, argument, value, the limit its message must state): every number and list argument
    ("head_with_role", "probes", 1_000_000_000, "between 1 and 128"),
    ("head_with_role", "margin", 2.0, "between 0 and 1"),
    ("most_attended_key", "layer", 64, "between 0 and 63"),
    ("most_attended_key", "head", -1, "between 0 and 63"),
    ("most_attended_key", "query", 1024, "between 0 and 1,023"),
    ("most_attended_key", "margin", -0.5, "between 0 and 1"),
    ("scalar_weight", "key", 13, "between 1 and 12"),
    ("scalar_weight", "q", 1e9, "between -100 and 100"),
    ("scalar_weight", "keys", [0.1] * 13, "1 to 12 items"),
    ("scalar_weight", "values", [1e9, 1.0, 1.0], "between -100 and 100"),
    ("scalar_weight", "d_k", 10**12, "between 1 and 65,536"),
    ("scalar_weight", "temperature", 1e-9, "between 0.01 and 100"),
    ("scalar_weight", "tolerance", -1.0, TOL),
    ("scalar_output", "q", -1e9, "between -100 and 100"),
    ("scalar_output", "keys", ["a", "b", "c"], "numbers only"),
    ("scalar_output", "values", [float("nan")] * 3, "between -100 and 100"),
    ("scalar_output", "d_k", 0, "between 1 and 65,536"),
    ("scalar_output", "temperature", 1e9, "between 0.01 and 100"),
    ("scalar_output", "tolerance", 1e12, TOL),
    ("mask_measure", "n", 4096, "between 1 and 256"),
    ("mask_measure", "w", 10**6, "between -1 and 256"),
    ("mask_measure", "b", 257, "between -1 and 256"),
    ("mask_measure", "s", -2, "between -1 and 256"),
    ("mask_measure", "g", 10**9, "between -1 and 256"),
    ("mask_measure", "tolerance", -0.1, TOL),
    ("max_heads", "d_model", 10**18, "between 1 and 65,536"),
    ("max_heads", "d_v", 0, "between 1 and 65,536"),
    ("attention_vs_rnn_cost", "n", 10**12, "between 1 and 1,048,576"),
    ("attention_vs_rnn_cost", "d", 0, "between 1 and 65,536"),
    ("attention_vs_rnn_cost", "tolerance", 1e7, TOL),
    ("lookup_beta", "angle", 1e6, "between -360 and 360"),
    ("lookup_beta", "weight", 1.5, "between 0 and 1"),
    ("lookup_beta", "tolerance", -1.0, TOL),
    ("kernel_width", "qnorm", 1e9, "between 1 and 1,000"),
    ("kernel_width", "tolerance", -1.0, TOL),
    ("attention_numbers", "len_dec", 2**63 - 1, "between 1 and 65,536"),
    ("attention_numbers", "len_enc", 0, "between 1 and 65,536"),
    ("cost_count", "n", 2**40, "between 1 and 1,048,576"),
    ("cost_count", "block", 10**9, "between 1 and 65,536"),
    ("cost_count", "tolerance", 1e300, TOL),
    ("mask_lambda2", "target", 1e9, "between 0 and 256"),
    ("mask_lambda2", "tolerance", -1.0, TOL),
    ("param_in_range", "lo", -1e300, "between -1,000,000,000 and 1,000,000,000"),
    ("param_in_range", "hi", 1e300, "between -1,000,000,000 and 1,000,000,000"),
    ("param_is", "values", ["a"] * 21, "1 to 20 items"),
]


def test_the_table_covers_every_number_and_list_argument():
    numeric = {(k.name, n) for k in C.KINDS.values() for n in [*k.required, *k.optional]
               if argument_type(k, n) in (int, float, list)}
    assert numeric == {(kind, name) for kind, name, _, _ in OUT_OF_RANGE}


def too_long_rows():
    """(kind, argument, value, words) for every text argument: one character over its limit."""
    return [(kind.name, name, "x" * (limit + 1), f"at most {limit} characters")
            for kind in C.KINDS.values() for name in [*kind.required, *kind.optional]
            if argument_type(kind, name) is str
            for limit in [16000 if name == "input" else 200]]  # the stated limits (docs/lessons.md)


@pytest.mark.parametrize("kind_name, name, value, words", OUT_OF_RANGE + too_long_rows(),
                         ids=lambda v: v if isinstance(v, str) and len(v) < 30 else None)
def test_an_out_of_range_argument_is_refused_naming_it_and_its_limit(kind_name, name, value, words):
    kind = C.kind(kind_name)
    with pytest.raises(ValueError) as err:
        kind.arguments({**BASE[kind_name], name: value})
    message = str(err.value)
    assert f"argument {name!r} of check kind {kind_name!r}" in message and words in message, message


@pytest.mark.parametrize("kind_name", sorted(C.KINDS))
def test_values_at_the_limits_are_accepted_and_the_base_arguments_still_work(kind_name):
    kind = C.kind(kind_name)
    for name, limit in kind.limits.items():
        want = argument_type(kind, name)
        for edge in (limit.lo, limit.hi):
            value = [edge] * limit.items if want is list else (int(edge) if want is int else float(edge))
            kind.arguments({**BASE[kind_name], name: value})  # no ValueError
    if kind.sort == C.STATE:
        right, wrong = kind.examples(kind.arguments(BASE[kind_name]))
        assert C.grade(kind_name, BASE[kind_name], ctx=C.Context(state=right)).ok
    else:
        solution = C.solve(kind_name, BASE[kind_name])
        assert C.grade(kind_name, BASE[kind_name], solution.right[0] if kind.sort == C.PICK else solution.right).ok


def test_the_issues_expensive_or_overflowing_arguments_are_refused_before_any_work():
    def no_model(_model_id):
        raise AssertionError("a model was loaded for arguments that should have been refused")
    ctx = C.Context(load_model=no_model)
    with pytest.raises(ValueError, match=r"'probes' .* between 1 and 128"):
        C.solve("head_with_role", {"model": "induction-rope", "role": "induction", "probes": 1_000_000_000}, ctx)
    with pytest.raises(ValueError, match=r"'len_dec' .* between 1 and 65,536"):
        C.solve("attention_numbers", {**BASE["attention_numbers"], "len_dec": 2**63 - 1}, ctx)
    start = time.perf_counter()
    with pytest.raises(ValueError, match=r"'n' .* between 1 and 256"):
        C.solve("mask_measure", {"preset": "random", "n": 4096, "measure": "lambda_2"})
    assert time.perf_counter() - start < GUARD_S


def test_in_range_values_near_the_limits_still_compute_the_right_thing():
    from core.checkpoints import load_bundled
    cfg = load_bundled("reverse-encdec")[0].cfg
    big = C.solve("attention_numbers", {**BASE["attention_numbers"], "len_dec": 65_536, "len_enc": 65_536}).right
    assert big == cfg.n_heads * 65_536 * 65_536  # exact, no overflow
    assert C.solve("mask_measure", {"preset": "full", "n": 256, "measure": "density"}).right == 1.0
    assert math.isclose(C.solve("mask_measure", {"preset": "full", "n": 256, "measure": "lambda_2"}).right, 256)


# --- the state check reads a bounded input ----------------------------------------------------------

def count_mask_sizes(monkeypatch) -> list[int]:
    """Record the size of every mask whose lambda_2 is computed; fail at once on one the page never draws."""
    sizes, real = [], M.algebraic_connectivity

    def counted(mask):
        sizes.append(int(mask.shape[-1]))
        assert mask.shape[-1] <= MASK_TOKENS, f"lambda_2 of a {mask.shape[-1]}-token mask was computed"
        return real(mask)
    monkeypatch.setattr(M, "algebraic_connectivity", counted)
    return sizes


@pytest.mark.parametrize("words", [4096, 100])
def test_a_long_input_in_the_state_is_cut_to_what_the_page_draws(monkeypatch, words):
    """4,096 words in the URL once cost one click 64 s and 270 MB: the check reads the first 64 tokens, as the
    Masks page draws them, and never a larger mask."""
    sizes = count_mask_sizes(monkeypatch)
    state = {"input": " ".join(["a"] * words), "preset": "full"}
    start = time.perf_counter()
    ok = C.grade("mask_lambda2", {"target": 0.0, "compare": "at_least"}, ctx=C.Context(state=state))
    assert time.perf_counter() - start < GUARD_S
    assert ok.ok and sizes == [MASK_TOKENS], (ok.why, sizes)


def test_an_input_longer_than_the_sidebar_reads_is_refused_not_computed(monkeypatch):
    sizes = count_mask_sizes(monkeypatch)
    state = {"input": " ".join(["a"] * 10_000), "preset": "full"}
    verdict = C.grade("mask_lambda2", {"target": 0.0}, ctx=C.Context(state=state))
    assert not verdict.ok and "characters long" in verdict.why and not sizes, verdict.why
    ok = C.grade("mask_lambda2", {"target": 0.0, "compare": "at_least"},
                 ctx=C.Context(state={**state, "input": " ".join(["a"] * MASK_TOKENS)}))
    assert ok.ok and sizes == [MASK_TOKENS]  # at the limit it still works


@pytest.mark.parametrize("knobs, words", [
    ({"preset": "random", "density": "nan"}, "density must be a number between 0 and 1"),
    ({"preset": "random", "density": "1e999"}, "density must be a number between 0 and 1"),
    ({"preset": "block", "b": "9" * 5000}, "b is more than 200 characters"),
    ({"preset": "formula", "formula": "i" + " + i" * 2000}, "formula is more than 200 characters"),
    ({"preset": "p" * 5000}, "preset is more than 200 characters"),
])
def test_junk_knobs_in_the_state_are_refused_with_what_is_wrong(knobs, words):
    """The knobs are read within the Masks page's own bounds (at most 200 characters, density 0..1), and what
    is wrong is said, not computed around."""
    verdict = C.grade("mask_lambda2", {"target": 0.0}, ctx=C.Context(state={"input": "a b c d", **knobs}))
    assert not verdict.ok and words in verdict.why, verdict.why


def test_a_huge_seed_is_clamped_like_the_pages_and_still_judged():
    state = {"input": "a b c d", "preset": "random", "density": "1"}
    huge = C.grade("mask_lambda2", {"target": 4.0}, ctx=C.Context(state={**state, "rseed": "9" * 30}))
    assert huge.ok and "lambda_2 = 4" in huge.why  # density 1: the full mask on 4 tokens, whatever the seed


def test_a_try_this_prompt_is_bounded_like_every_other_text():
    text = (L.LESSONS_DIR / "compact-primer.toml").read_text()
    start = text.index("try = [")
    line = text.count("\n", 0, start) + 1
    long = text[:start] + 'try = ["' + "x" * 601 + '"]' + text[text.index("\n", start):]
    with pytest.raises(ValueError, match=rf"^long.toml, line {line}: a \"try this\" prompt is at most 600"):
        L.parse_lesson(long, "long", "long.toml")


def test_naming_a_line_is_a_lookup_not_a_pass_over_the_file():
    """A step of 180,000 blank lines whose view sets 24 parameters took 5 s to check: each parameter's line was
    looked for line by line. The lines are indexed once (guarded generously by time: ~0.3 s here)."""
    from ui.shell.lessons_catalog import views
    app_views = views()
    params = sorted(app_views["positions.py"] - {"model", "input", "tgt", "device"})
    text = ('title = "t"\nlevel = "first steps"\nchapter = "primer"\nsummary = "s"\n[[steps]]\ntitle = "x"\n'
            'narration = "n"\npage = "positions.py"\ntry = ["a"]\n' + "\n" * 180_000 + "[steps.view]\n"
            + "".join(f"{p} = 1\n" for p in params))
    assert len(text.encode()) <= L.MAX_FILE_BYTES and len(params) >= 20
    start = time.perf_counter()
    lesson = L.parse_lesson(text, "long", "long.toml", app_views)
    assert time.perf_counter() - start < 2.5
    assert set(lesson.steps[0].query) == set(params)


def test_the_line_index_finds_the_lines_a_line_by_line_search_finds():
    import re
    for path in sorted(L.LESSONS_DIR.glob("*.toml")):
        src = L._Source(path.read_text(), path.name)
        keys = {m.group(1) for line in src.lines for m in [re.match(r"^\s*\[?\s*(?:steps\.)?([A-Za-z0-9_-]+)", line)]
                if m}
        for key in keys:
            pattern = re.compile(rf"^\s*(\[\s*steps\.)?[\"']?{re.escape(key)}[\"']?\s*(=|\]|\.)")
            for step in [None, *range(len(src.step_starts))]:
                lo, hi = src._region(step, 0)
                expected = next((n for n in range(lo, hi) if pattern.match(src.lines[n - 1])), None)
                assert src.find(key, step) == expected, (path.name, key, step)
