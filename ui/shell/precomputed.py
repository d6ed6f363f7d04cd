"""Results no student's input changes, computed once when the app is built and shipped as a small asset.

A page's first visit used to compute, on the request path, work that is the same for every student
with a given model at the page's default settings: timing sweeps, random stacks, head rankings,
accuracies, parameter counts. With thirty students opening the app at once those computations
queued behind each other on two cores. `python -m ui.precomputed --write` opens every page with
every bundled model (AppTest, default settings) and every step of every bundled lesson, records
which process-wide memos (ui.memo) each visit asks for, and writes their results to assets/precomputed/results.json.gz. A memo miss looks
here before computing (ui.memo.Memo), so a new server answers those visits at once.

The asset carries digests of the code that made it (core/, the memo and model plumbing, the bundled
weights, and each page's runs module apart). A server ignores the results whose code differs and
computes those live, so a stale value is never shown; tests/app/test_precomputed.py fails until
the asset is written again.
Timings in it were measured on the build machine: `note()` says so, and the pages show it.

The format is JSON with tagged arrays, tuples and dataclasses; a dataclass is rebuilt only if its
class lives in this project's core or ui packages. Nothing in the file is executed.
"""

from __future__ import annotations

import base64
import dataclasses
import gzip
import hashlib
import importlib
import json
import logging
import os
import platform
import re
import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Optional

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
ASSET = ROOT / "assets" / "precomputed" / "results.json.gz"
FORMAT = 1
log = logging.getLogger(__name__)

# What every result depends on: the core code, the memo and model plumbing, and the bundled weights.
# Each result also depends on its own memo's module (ui/<page>_runs.py), digested apart, so a change to
# one page's runs only retires that page's results. The views are not included: they only choose the
# arguments, and a view that asks for other arguments simply misses the asset.
COMMON_GLOBS = ("core/**/*.py", "ui/runs.py", "ui/models.py", "ui/memo.py", "ui/precomputed.py", "assets/models/*")
ALLOWED_PACKAGES = ("core.", "ui.")


# ---------------------------------------------------------------------------------------------
# The code digest
# ---------------------------------------------------------------------------------------------


def _digest(files: list[Path], root: Path) -> str:
    h = hashlib.blake2b(digest_size=16)
    for path in sorted(set(files)):
        if "__pycache__" in path.parts or not path.is_file():
            continue
        h.update(path.relative_to(root).as_posix().encode() + b"\0")
        h.update(hashlib.blake2b(path.read_bytes(), digest_size=16).digest())
    return h.hexdigest()


def code_digest(module: str, root: Path = ROOT) -> str:
    """A digest of every file the results of memos in `module` (e.g. 'ui.cost_runs') depend on."""
    own = root / (module.replace(".", "/") + ".py")
    return _digest([p for pattern in COMMON_GLOBS for p in root.glob(pattern)] + [own], root)


# ---------------------------------------------------------------------------------------------
# The codec: plain JSON with tags for what JSON lacks
# ---------------------------------------------------------------------------------------------


class NotStorable(TypeError):
    """A value the codec does not store (a model, a figure, a table): that result stays live."""


def encode(value: Any) -> Any:
    """A JSON-ready form of a result or an argument: arrays, tuples and dataclasses are tagged."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        value = float(value)
        return value if np.isfinite(value) else {"__float__": repr(value)}  # nan, inf, -inf
    if isinstance(value, np.ndarray):
        if value.dtype == object:
            return {"__objarray__": encode(value.tolist()), "shape": list(value.shape)}
        data = np.ascontiguousarray(value)
        return {"__ndarray__": base64.b64encode(data.tobytes()).decode(), "dtype": data.dtype.str,
                "shape": list(data.shape)}
    if isinstance(value, tuple):
        return {"__tuple__": [encode(v) for v in value]}
    if isinstance(value, list):
        return [encode(v) for v in value]
    if isinstance(value, dict):
        if all(isinstance(k, str) for k in value):
            return {"__dict__": {k: encode(v) for k, v in value.items()}}
        return {"__items__": [[encode(k), encode(v)] for k, v in value.items()]}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        cls = type(value)
        if not cls.__module__.startswith(ALLOWED_PACKAGES):
            raise NotStorable(f"dataclass {cls.__module__}.{cls.__qualname__} is not this project's")
        return {"__dataclass__": f"{cls.__module__}:{cls.__qualname__}",
                "fields": {f.name: encode(getattr(value, f.name)) for f in dataclasses.fields(value)}}
    raise NotStorable(f"{type(value).__module__}.{type(value).__qualname__} is not stored")


def _dataclass(path: str) -> type:
    """The project's dataclass named `module:qualname`; anything else is refused."""
    module_name, _, qualname = path.partition(":")
    if not module_name.startswith(ALLOWED_PACKAGES) or not qualname:
        raise ValueError(f"refused class {path!r}: only this project's dataclasses are rebuilt")
    obj: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    if not (isinstance(obj, type) and dataclasses.is_dataclass(obj)):
        raise ValueError(f"refused {path!r}: not a dataclass")
    return obj


def decode(obj: Any) -> Any:
    """The inverse of `encode`."""
    if isinstance(obj, list):
        return [decode(v) for v in obj]
    if not isinstance(obj, dict):
        return obj
    if "__ndarray__" in obj:
        raw = base64.b64decode(obj["__ndarray__"])
        return np.frombuffer(raw, dtype=np.dtype(obj["dtype"])).reshape(obj["shape"]).copy()
    if "__objarray__" in obj:
        flat = np.empty(int(np.prod(obj["shape"])), dtype=object)
        flat[:] = list(np.array(decode(obj["__objarray__"]), dtype=object).ravel())
        return flat.reshape(obj["shape"])
    if "__float__" in obj:
        return float(obj["__float__"])
    if "__tuple__" in obj:
        return tuple(decode(v) for v in obj["__tuple__"])
    if "__dict__" in obj:
        return {k: decode(v) for k, v in obj["__dict__"].items()}
    if "__items__" in obj:
        return {_hashable(decode(k)): decode(v) for k, v in obj["__items__"]}
    if "__dataclass__" in obj:
        cls = _dataclass(obj["__dataclass__"])
        fields = {k: decode(v) for k, v in obj["fields"].items()}
        init = {f.name for f in dataclasses.fields(cls) if f.init}
        made = cls(**{k: v for k, v in fields.items() if k in init})
        for k, v in fields.items():  # fields computed after __init__ are restored as stored
            if k not in init:
                object.__setattr__(made, k, v)
        return made
    raise ValueError(f"unknown tagged value with keys {sorted(obj)[:5]}")


def _hashable(value: Any) -> Any:
    return tuple(_hashable(v) for v in value) if isinstance(value, list) else value


# ---------------------------------------------------------------------------------------------
# The asset, loaded once per process on the first memo miss
# ---------------------------------------------------------------------------------------------


class Shelf:
    """The asset's results by (memo name, argument fingerprint), decoded on first use."""

    def __init__(self, header: dict, entries: dict):
        self.header, self._entries = header, entries  # key -> encoded value
        self._decoded: dict = {}
        self.served: set = set()  # keys handed to a memo (their results came from the build)
        self._lock = threading.Lock()

    def get(self, key: tuple) -> tuple[bool, Any]:
        """(True, value) if the asset holds this result, else (False, None)."""
        with self._lock:
            if key in self._decoded:
                return True, self._decoded[key]
            raw = self._entries.get(key)
        if raw is None:
            return False, None
        value = decode(raw)
        with self._lock:
            self._decoded.setdefault(key, value)
            self.served.add(key)
            return True, self._decoded[key]

    def __contains__(self, key: tuple) -> bool:
        return key in self._entries or key in self._decoded

    def forget_decoded(self) -> None:
        """Drop the decoded results (the encoded ones stay): a class that has left decoded what it
        visited, up to every result in the file, and the memos that held them let go too."""
        with self._lock:
            self._decoded.clear()


_EMPTY = Shelf({}, {})
_STATE: dict = {"shelf": None}
_LOAD_LOCK = threading.Lock()


def enabled() -> bool:
    """On unless GLASSBOX_PRECOMPUTED=0 (the build itself and tests of live computation switch it off)."""
    return os.environ.get("GLASSBOX_PRECOMPUTED", "1") != "0"


def read(path: Path = ASSET) -> tuple[dict, list]:
    """The asset's header and raw entries."""
    with gzip.open(path, "rt", encoding="utf-8") as f:
        data = json.load(f)
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"{path} is not a precomputed-results file of format {FORMAT}")
    return data["header"], data["entries"]


def _load() -> Shelf:
    """Read the asset if it is present and made by this code; else an empty shelf (everything live)."""
    from ui.memo import fingerprint

    if not enabled() or not ASSET.exists():
        return _EMPTY
    try:
        header, raw = read(ASSET)
        stale = stale_modules(header)
        current = set(header.get("code_digests") or {}) - set(stale)
        if stale:
            log.warning("%s: results of %s were made by other code (run `python -m ui.precomputed --write`); "
                        "those are computed live", ASSET.relative_to(ROOT), ", ".join(stale))
        entries = {}
        for e in raw:
            if e["memo"].partition(":")[0] not in current:
                continue
            args, kwargs = decode(e["args"]), decode(e["kwargs"])
            entries[(e["memo"], fingerprint(args), fingerprint(kwargs))] = e["value"]
        return Shelf(header, entries)
    except Exception:  # noqa: BLE001 - a broken asset only costs speed
        log.exception("could not read %s; computing live", ASSET)
        return _EMPTY


def shelf() -> Shelf:
    """The process's shelf, read on first use."""
    if _STATE["shelf"] is None:
        with _LOAD_LOCK:
            if _STATE["shelf"] is None:
                _STATE["shelf"] = _load()
    return _STATE["shelf"]


def forget_decoded() -> None:
    """Shelf.forget_decoded on this process's shelf, if it was read."""
    if _STATE["shelf"] is not None:
        _STATE["shelf"].forget_decoded()


def lookup(memo_name: str, key: tuple) -> tuple[bool, Any]:
    """(True, value) if the asset holds `memo_name`'s result for the fingerprinted arguments `key`."""
    return shelf().get((memo_name, *key))


def holds(memo_name: str, key: tuple) -> bool:
    return (memo_name, *key) in shelf()


def note(memo_, *args, **kwargs) -> Optional[str]:
    """A sentence saying that this memo's result for these arguments is the build's measurement, or None
    when it was computed by this server."""
    from ui.memo import fingerprint

    s = shelf()
    if (memo_.name, fingerprint(args), fingerprint(kwargs)) not in s.served:
        return None
    h = s.header
    return (f"measured when this copy of the app was built ({h.get('made', '?')}, on {h.get('machine', '?')}), "
            "not on this server")


# ---------------------------------------------------------------------------------------------
# Writing the asset: open every page with every bundled model and keep what the memos computed
# ---------------------------------------------------------------------------------------------


def machine() -> str:
    """A short description of this CPU for the asset's header."""
    name = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{name}, {os.cpu_count()} cores"


# The choices a student explores from a page's default view, each visited with every bundled model:
# (page file, view module, URL parameter, other parameters of that visit). Their model-only results
# (a head ranking, the scores under each positional scheme, each stack's profile ...) are then shipped
# too, so switching a view is as quick as opening the page. Sliders are not walked: too many values.
EXPLORED = (
    ("pages/attention.py", "ui.attention_view", "view", {}),
    ("pages/heads.py", "ui.heads_view", "view", {}),
    ("pages/heads.py", "ui.heads_view", "mode", {"view": "ablation"}),
    ("pages/masks.py", "ui.masks_view", "preset", {}),
    ("pages/positions.py", "ui.positions_view", "swap", {}),
    ("pages/depth.py", "ui.depth_view", "stack", {}),
    ("pages/generation.py", "ui.generation_view", "attn", {}),
)
# Choices whose work does not depend on the model, visited with the default model: the Cost page's
# sweeps (about 13 s to measure all sixteen here) and the Depth page's random stacks at every layer
# count, init gain, seed, stream count and noise (about 40 s). A class's slowest clicks were these,
# each student's first change measuring or building its own. A whole-number parameter is visited at
# every value from its lowest to its highest.
EXPLORED_ANY_MODEL = (
    ("pages/cost.py", "ui.cost_view", "d", {}),
    ("pages/cost.py", "ui.cost_view", "heads", {}),
    ("pages/cost.py", "ui.cost_view", "b", {}),
    ("pages/cost.py", "ui.cost_view", "nmax", {}),
    ("pages/depth.py", "ui.depth_view", "L", {}),
    ("pages/depth.py", "ui.depth_view", "gain", {}),
    ("pages/depth.py", "ui.depth_view", "iseed", {}),
    ("pages/depth.py", "ui.depth_view", "streams", {}),
    ("pages/depth.py", "ui.depth_view", "noise", {}),
)
# Work behind a button that needs nothing but the bundled models: one visit asks for it.
ON_REQUEST = (("pages/positions.py", {"model": "induction-rope", "ext": "20"}),)


def values_of(param) -> tuple:
    """Every value a URL parameter can take: a Choice's choices, an Int's whole range."""
    from ui.params import Int

    if isinstance(param, Int):
        return tuple(range(param.lo, param.hi + 1, param.step))
    return tuple(param.choices)


def explored(ids: list[str]) -> list[tuple[str, dict]]:
    """(page file, query) for every choice in EXPLORED, with every model in `ids`, and every choice in
    EXPLORED_ANY_MODEL with the default model."""
    wanted = []
    for entries, models_ in ((EXPLORED, ids), (EXPLORED_ANY_MODEL, [None])):
        for path, module, name, extra in entries:
            param = getattr(importlib.import_module(module).URL, name)
            for choice in values_of(param):
                for model_id in models_:
                    model = {} if model_id is None else {"model": model_id}
                    wanted.append((path, {**model, **extra, name: param.text(choice)}))
    return wanted


def visits() -> list[tuple[str, dict]]:
    """(page file, query) of every visit the asset covers: each page with each bundled model at its
    default settings, each explored choice (EXPLORED, ON_REQUEST), then every step of every bundled
    lesson (a class following its teacher opens exactly those views, all at once)."""
    from core import lessons
    from ui import models
    from ui.nav import PAGES

    ids = [e["id"] for e in models.manifest()]
    wanted = [(page.path, {"model": model_id}) for page in PAGES if page.exists for model_id in ids]
    wanted += explored(ids) + [(path, dict(query)) for path, query in ON_REQUEST]
    for lesson in lessons.bundled():
        for step in lesson.steps:
            wanted.append((f"pages/{step.page}", dict(step.query)))
    unique = {(path, tuple(sorted(query.items()))): (path, query) for path, query in wanted}
    return list(unique.values())


def record(timeout: float = 600) -> tuple[list, list[str]]:
    """Run every default visit under AppTest, recording memo calls; returns ((memo, args, kwargs) in
    first-call order, problems)."""
    from streamlit.testing.v1 import AppTest

    from ui import memo as M
    from ui.testing import scan_components_once

    scan_components_once()

    calls: list = []
    seen: set = set()
    problems: list[str] = []

    def recorder(memo_, args, kwargs, key):
        if (memo_.name, key) not in seen:
            seen.add((memo_.name, key))
            calls.append((memo_, args, kwargs))

    M.RECORDERS.append(recorder)
    try:
        for path, query in visits():
            at = AppTest.from_file(str(ROOT / path), default_timeout=timeout)
            for k, v in query.items():
                at.query_params[k] = v
            at.run()
            if at.exception:
                problems.append(f"{path} {query}: {at.exception[0].value[:200]}")
    finally:
        M.RECORDERS.remove(recorder)
    return calls, problems


# The memos whose results the asset may hold: the pages' computations (ui/*_runs.py) and the sidebar's
# examples. Not the models, the manifest or the device list (they describe this server, not the code),
# not the lessons folder (a teacher edits it), not figures (not plain data).
SHIPPED_MODULES = re.compile(r"^ui\.(\w+_runs|sidebar)$")


def shippable(memo_) -> bool:
    """Whether the asset may hold this memo's results: one of SHIPPED_MODULES, not keyed by a student's
    input (a Selection.cache_key as its first argument)."""
    import inspect

    if not SHIPPED_MODULES.match(memo_.func.__module__):
        return False
    params = list(inspect.signature(memo_.func).parameters)
    return not (params and params[0] in ("cache_key", "key"))


def write(path: Path = ASSET) -> dict:
    """Record, then write every storable result of an input-independent memo; returns a summary."""
    os.environ["GLASSBOX_PRECOMPUTED"] = "0"  # measure live, never copy an older asset
    calls, problems = record()
    entries, skipped = [], {}
    for memo_, args, kwargs in calls:
        if not shippable(memo_):
            continue
        found, value = memo_.peek(*args, **kwargs)
        if not found:  # pushed out of its bounded memo by later visits: compute it again, store nothing
            try:
                value = memo_.func(*args, **kwargs)
            except Exception as e:  # noqa: BLE001 - a visit that failed is reported, not shipped
                skipped[memo_.name] = f"recomputing it failed: {e!r}"[:200]
                continue
        try:
            entries.append({"memo": memo_.name, "args": encode(args), "kwargs": encode(kwargs),
                            "value": encode(value)})
        except NotStorable as e:
            skipped[memo_.name] = str(e)
    modules = sorted({e["memo"].partition(":")[0] for e in entries})
    header = {"code_digests": {m: code_digest(m) for m in modules},
              "made": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "machine": machine()}
    import torch

    header["torch"] = torch.__version__
    path.parent.mkdir(parents=True, exist_ok=True)
    blob = json.dumps({"format": FORMAT, "header": header, "entries": entries}, separators=(",", ":"))
    with gzip.open(path, "wt", encoding="utf-8", compresslevel=9) as f:
        f.write(blob)
    return {"entries": len(entries), "skipped": skipped, "problems": problems, "bytes": path.stat().st_size}


def main(argv: Optional[list[str]] = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help=f"record and write {ASSET.relative_to(ROOT)}")
    parser.add_argument("--check", action="store_true", help="say whether the asset matches this code")
    args = parser.parse_args(argv)
    if args.write:
        summary = write()
        print(f"wrote {summary['entries']} results, {summary['bytes'] / 1024:.0f} KiB, to {ASSET.relative_to(ROOT)}")
        for name, why in sorted(summary["skipped"].items()):
            print(f"  not stored: {name}: {why}")
        for p in summary["problems"]:
            print(f"  PROBLEM: {p}")
        return 1 if summary["problems"] else 0
    header, entries = read(ASSET)
    stale = stale_modules(header)
    print(f"{ASSET.relative_to(ROOT)}: {len(entries)} results, made {header.get('made')} on {header.get('machine')}; "
          + (f"made by OTHER code for {', '.join(stale)}: run `python -m ui.precomputed --write`" if stale
             else "matches this code"))
    return 1 if stale else 0


def stale_modules(header: dict) -> list[str]:
    """The memo modules whose shipped results were made by other code than this (['*'] if it says none)."""
    digests = header.get("code_digests")
    if not isinstance(digests, dict) or not digests:
        return ["*"]
    return sorted(m for m, d in digests.items() if d != code_digest(m))


if __name__ == "__main__":
    raise SystemExit(main())
