"""ui.shell.precomputed: the results shipped with the app are made by this code, cover what a default visit
asks for, round-trip exactly, and never rebuild anything but this project's dataclasses."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from core.analysis import cost as A
from tests.app.conftest import assert_ok, page_at
from ui.shell import memo as M
from ui.shell import precompute as B
from ui.shell import precomputed as P

# Memos whose shipped results are deterministic: recomputing them here must give the same values.
DETERMINISTIC = ("ui.depth.runs:experiment", "ui.heads.runs:subspaces", "ui.positions.runs:swap_accuracy",
                 "ui.retrieval.runs:clean_accuracy", "ui.train.runs:param_count", "ui.masks.runs:masked_accuracy")


def same(a, b, path="value"):
    """Equal up to float rounding on another CPU (relative 1e-4), recursively; raises naming the first difference.
    The absolute floor is 1e-5: a principal angle of 0 comes out of arccos of a cosine rounded near 1, which
    another CPU's kernels leave at 0 or at a few 1e-6 degrees (seen: 2.6e-6 on a fresh install)."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a, b = np.asarray(a), np.asarray(b)
        assert a.shape == b.shape and a.dtype == b.dtype, f"{path}: {a.shape} {a.dtype} vs {b.shape} {b.dtype}"
        if a.dtype.kind in "fc":
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5, equal_nan=True, err_msg=path)
        else:
            assert np.array_equal(a, b), path
    elif dataclasses.is_dataclass(a):
        assert type(a) is type(b), path
        for f in dataclasses.fields(a):
            same(getattr(a, f.name), getattr(b, f.name), f"{path}.{f.name}")
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for k in a:
            same(a[k], b[k], f"{path}[{k!r}]")
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{path}[{i}]")
    elif isinstance(a, float):
        assert (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-4, abs_tol=1e-6), f"{path}: {a} vs {b}"
    else:
        assert a == b, f"{path}: {a!r} vs {b!r}"


@dataclasses.dataclass
class Foreign:  # a dataclass outside core/ and ui/: never stored, never rebuilt
    x: int = 1


def test_the_codec_round_trips_every_shape_of_result():
    value = {
        "arrays": (np.arange(6, dtype=np.float32).reshape(2, 3), np.array([True, False]), np.arange(3, dtype=np.int64)),
        "labels": np.array(["a", "<bos>"], dtype=object),
        "floats": [0.5, float("nan"), float("inf"), -float("inf"), np.float64(2.5)],
        "by number": {3: "three", (1, 2): [1, 2]},
        "setting": A.Setting(ns=(32, 64), d_model=64, n_heads=4, block=32, device="cpu"),
        "nothing": None,
    }
    back = P.decode(P.encode(value))
    assert isinstance(back["arrays"], tuple) and back["arrays"][0].dtype == np.float32
    assert back["labels"].tolist() == ["a", "<bos>"]
    assert math.isnan(back["floats"][1]) and back["floats"][2] == float("inf") and back["floats"][3] == -float("inf")
    assert back["by number"] == {3: "three", (1, 2): [1, 2]}
    assert back["setting"] == value["setting"] and hash(back["setting"]) == hash(value["setting"])
    same(np.asarray(value["arrays"][0]), back["arrays"][0])
    # The memo key of decoded arguments is the key of the originals (that is how the asset is found).
    args = (value["setting"], 0)
    assert M.fingerprint(P.decode(P.encode(args))) == M.fingerprint(args)


@pytest.mark.parametrize("tagged", [
    {"__dataclass__": "os:system", "fields": {}},
    {"__dataclass__": "subprocess:Popen", "fields": {"args": "true"}},
    {"__dataclass__": "core.model:Transformer", "fields": {}},  # this project's, but not a dataclass
    {"__dataclass__": "core.", "fields": {}},
])
def test_decode_rebuilds_nothing_but_this_projects_dataclasses(tagged):
    with pytest.raises((ValueError, AttributeError, ModuleNotFoundError)):
        P.decode(tagged)


@pytest.mark.parametrize("value", [torch.zeros(2), torch.nn.Linear(2, 2), Foreign(), object()])
def test_encode_refuses_what_it_does_not_store(value):
    with pytest.raises(P.NotStorable):
        P.encode(value)


def test_the_shipped_asset_was_made_by_this_code():
    header, entries = P.read(P.ASSET)
    assert not P.stale_modules(header), (
        "assets/precomputed/results.json.gz was made by other code: run `python -m ui.shell.precompute --write`")
    assert len(entries) >= 100 and header["machine"] and header["made"]
    assert {"ui.cost.runs", "ui.depth.runs", "ui.generation.runs", "ui.masks.runs"} <= set(header["code_digests"])


def test_the_digest_follows_the_code(tmp_path):
    (tmp_path / "core").mkdir()
    for page in ("cost", "depth"):
        (tmp_path / "ui" / page).mkdir(parents=True)
    (tmp_path / "core" / "a.py").write_text("x = 1\n")
    (tmp_path / "ui" / "cost" / "runs.py").write_text("y = 1\n")
    (tmp_path / "ui" / "depth" / "runs.py").write_text("z = 1\n")
    cost, depth = P.code_digest("ui.cost.runs", tmp_path), P.code_digest("ui.depth.runs", tmp_path)
    (tmp_path / "ui" / "cost" / "runs.py").write_text("y = 2\n")  # one page's runs: only its results retire
    assert P.code_digest("ui.cost.runs", tmp_path) != cost and P.code_digest("ui.depth.runs", tmp_path) == depth
    (tmp_path / "core" / "a.py").write_text("x = 2\n")  # the core: every result retires
    assert P.code_digest("ui.depth.runs", tmp_path) != depth


def entries_of(names):
    _, entries = P.read(P.ASSET)
    return [e for e in entries if e["memo"] in names]


@pytest.mark.parametrize("name", DETERMINISTIC)
def test_shipped_deterministic_results_equal_what_the_code_computes_now(name):
    chosen = entries_of({name})
    assert chosen, f"the asset holds no result of {name}"
    module, _, qualname = name.partition(":")
    memo_ = getattr(__import__(module, fromlist=[qualname]), qualname)
    for e in chosen[:2]:
        args, kwargs = P.decode(e["args"]), P.decode(e["kwargs"])
        same(P.decode(e["value"]), memo_.func(*args, **kwargs), f"{name}{args}")


def computed_live(page: str, query, monkeypatch) -> list[str]:
    """Open the page; the shippable memos (input-independent, storable) it had to compute live."""
    live = []
    real = P.lookup

    def watching(memo_name, key):
        found, value = real(memo_name, key)
        if not found:
            live.append(memo_name)
        return found, value

    monkeypatch.setattr(P, "lookup", watching)
    at = page_at(page, query)
    assert_ok(at)
    names = dict(registered())
    return sorted({n for n in live if n in names and B.shippable(names[n]) and n not in NOT_STORED})


@pytest.mark.parametrize("page, model", [("pages/cost.py", None), ("pages/depth.py", None),
                                         ("pages/heads.py", "induction-rope"), ("pages/generation.py", "reverse-encdec"),
                                         ("pages/positions.py", "recall-decoder"), ("pages/train.py", None)])
def test_a_default_visit_computes_nothing_input_independent_live(page, model, monkeypatch):
    missed = computed_live(page, {"model": model} if model else None, monkeypatch)
    assert not missed, f"{page} computed these live although they do not depend on the input: {missed}"


def lesson_steps(pages: set[str]) -> list[tuple[str, str, int]]:
    from core import lessons

    return [(f"pages/{s.page}", lesson.id, k) for lesson in lessons.bundled()
            for k, s in enumerate(lesson.steps) if s.page in pages][:6]


@pytest.mark.parametrize("page, lesson, k", lesson_steps({"cost.py", "depth.py", "generation.py", "masks.py"}))
def test_a_lesson_step_computes_nothing_input_independent_live(page, lesson, k, monkeypatch):
    """A class following its teacher opens each step's view all at once: the asset covers them."""
    from core import lessons

    step = next(x for x in lessons.bundled() if x.id == lesson).steps[k]
    missed = computed_live(page, dict(step.query), monkeypatch)
    assert not missed, f"step {k + 1} of {lesson} ({page} {dict(step.query)}) computed these live: {missed}"


# Shippable memos whose results the codec does not store (Arrow tables): computed live, and cheap.
NOT_STORED = {"ui.positions.runs:order_answers", "ui.positions.runs:shift_table", "ui.positions.runs:length_view"}


def explored_samples() -> list[tuple[str, dict]]:
    """A few explored choices (ui.shell.precompute.EXPLORED, EXPLORED_ANY_MODEL, ON_REQUEST): a view switch, the
    ablation mode, a positional scheme, a stack, the Cost page's longest n, d = 16 and a block of 16, the
    Depth page's random stacks at 12 layers, seed 12, gain 0.25 and noise 0.25, and the extrapolation run
    behind its button."""
    wanted = {("pages/heads.py", "roles"), ("pages/heads.py", "mean"), ("pages/positions.py", "sinusoidal"),
              ("pages/depth.py", "encoder"), ("pages/masks.py", "sliding"), ("pages/cost.py", "2048"),
              ("pages/cost.py", "16"), ("pages/depth.py", "12"), ("pages/depth.py", "0.25")}
    picked = [(path, q) for path, q in B.explored(["sort-encdec"]) if (path, list(q.values())[-1]) in wanted]
    return picked + [(path, dict(q)) for path, q in B.ON_REQUEST]


@pytest.mark.parametrize("page, query", explored_samples(), ids=lambda x: str(x))
def test_an_explored_choice_computes_nothing_input_independent_live(page, query, monkeypatch):
    """Switching a page's view, scheme, stack or preset, or asking for the extrapolation run, finds its
    model-only results shipped."""
    missed = computed_live(page, query, monkeypatch)
    assert not missed, f"{page} {query} computed these live: {missed}"


def registered():
    """(name, memo) of every memo in the ui runs modules, the models and the sidebar."""
    import importlib

    from ui.shell.nav import PAGES

    found = {}
    for mod in ["ui.shell.models", "ui.shell.sidebar", "ui.shell.runs"] + [f"ui.{p.path.split('/')[-1][:-3]}.runs" for p in PAGES]:
        try:
            module = importlib.import_module(mod)
        except ModuleNotFoundError:
            continue
        for value in vars(module).values():
            if isinstance(value, M.Memo):
                found[value.name] = value
    return list(found.items())


def test_a_shipped_result_is_served_and_said_to_come_from_the_build(monkeypatch):
    calls = []

    @M.memo(maxsize=4)
    def doubled(x: int) -> dict:
        calls.append(x)
        return {"y": np.array([2 * x])}

    key = (M.fingerprint((3,)), M.fingerprint({}))
    shelf = P.Shelf({"made": "2026-01-01 00:00 UTC", "machine": "a test CPU"},
                    {(doubled.name, *key): P.encode({"y": np.array([6])})})
    monkeypatch.setitem(P._STATE, "shelf", shelf)
    assert doubled.has(3) and not doubled.has(4)
    assert doubled(3)["y"].tolist() == [6] and calls == []  # from the shelf, not computed
    assert not doubled(3)["y"].flags.writeable  # shared, so frozen like a computed result
    assert "built" in P.note(doubled, 3) and "a test CPU" in P.note(doubled, 3)
    assert doubled(4)["y"].tolist() == [8] and calls == [4]
    assert P.note(doubled, 4) is None


def test_results_made_by_other_code_are_ignored(monkeypatch):
    real = P.code_digest
    monkeypatch.setattr(P, "code_digest", lambda module, root=P.ROOT: "edited" if module == "ui.cost.runs"
                        else real(module, root))
    monkeypatch.setitem(P._STATE, "shelf", None)
    modules = {name.partition(":")[0] for name, *_ in P.shelf()._entries}
    assert "ui.cost.runs" not in modules and "ui.depth.runs" in modules
    monkeypatch.setitem(P._STATE, "shelf", None)  # the next test reads the real asset again
