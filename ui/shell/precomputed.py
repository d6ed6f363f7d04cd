"""Results no student's input changes, computed once when the app is built and shipped as a small asset.

A page's first visit used to compute, on the request path, work that is the same for every student
with a given model at the page's default settings: timing sweeps, random stacks, head rankings,
accuracies, parameter counts. With thirty students opening the app at once those computations
queued behind each other on two cores. `python -m ui.shell.precompute --write` opens every page with
every bundled model (AppTest, default settings) and every step of every bundled lesson, records
which process-wide memos (ui.shell.memo) each visit asks for, and writes their results to assets/precomputed/results.json.gz. A memo miss looks
here before computing (ui.shell.memo.Memo), so a new server answers those visits at once.

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
import threading
from pathlib import Path
from typing import Any, Optional

import numpy as np

from ui.shell.fingerprint import fingerprint

ROOT = Path(__file__).resolve().parents[2]
ASSET = ROOT / "assets" / "precomputed" / "results.json.gz"
FORMAT = 1
log = logging.getLogger(__name__)

# What every result depends on: the core code, the memo and model plumbing, and the bundled weights.
# Each result also depends on its own memo's module (ui/<page>/runs.py), digested apart, so a change to
# one page's runs only retires that page's results. The views are not included: they only choose the
# arguments, and a view that asks for other arguments simply misses the asset.
COMMON_GLOBS = ("core/**/*.py", "ui/shell/runs.py", "ui/shell/models.py", "ui/shell/memo.py", "ui/shell/fingerprint.py",
               "ui/shell/precomputed.py", "assets/models/*")
TRAINING_ONLY = ("core/english/",)  # code that builds models offline (python -m core.train --english): no page runs it
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
    """A digest of every file the results of memos in `module` (e.g. 'ui.cost.runs') depend on."""
    own = root / (module.replace(".", "/") + ".py")
    files = [p for pattern in COMMON_GLOBS for p in root.glob(pattern)
             if not p.relative_to(root).as_posix().startswith(TRAINING_ONLY)]
    return _digest(files + [own], root)


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
    if not enabled() or not ASSET.exists():
        return _EMPTY
    try:
        header, raw = read(ASSET)
        stale = stale_modules(header)
        current = set(header.get("code_digests") or {}) - set(stale)
        if stale:
            log.warning("%s: results of %s were made by other code (run `python -m ui.shell.precompute --write`); "
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
    s = shelf()
    if (memo_.name, fingerprint(args), fingerprint(kwargs)) not in s.served:
        return None
    h = s.header
    return (f"measured when this copy of the app was built ({h.get('made', '?')}, on {h.get('machine', '?')}), "
            "not on this server")


def stale_modules(header: dict) -> list[str]:
    """The memo modules whose shipped results were made by other code than this (['*'] if it says none)."""
    digests = header.get("code_digests")
    if not isinstance(digests, dict) or not digests:
        return ["*"]
    return sorted(m for m, d in digests.items() if d != code_digest(m))

