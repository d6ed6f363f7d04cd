"""Write the shipped results (ui.shell.precomputed's asset): `python -m ui.shell.precompute --write`.

Opens every page with every bundled model (AppTest, default settings), each explored choice and every step of
every bundled lesson, records which process-wide memos (ui.shell.memo) each visit asks for, and writes their
results with the digests of the code that made them. `--check` says whether the asset matches this code.
Build-time only: the app itself reads the asset through ui.shell.precomputed and never imports this module.
"""

from __future__ import annotations

import gzip
import importlib
import json
import os
import platform
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional

from ui.shell.precomputed import (ASSET, FORMAT, ROOT, NotStorable, code_digest, encode, read,
                                  stale_modules)


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
    ("pages/attention.py", "ui.attention.view", "view", {}),
    ("pages/heads.py", "ui.heads.view", "view", {}),
    ("pages/heads.py", "ui.heads.view", "mode", {"view": "ablation"}),
    ("pages/masks.py", "ui.masks.view", "preset", {}),
    ("pages/positions.py", "ui.positions.view", "swap", {}),
    ("pages/depth.py", "ui.depth.view", "stack", {}),
    ("pages/generation.py", "ui.generation.view", "attn", {}),
)
# Choices whose work does not depend on the model, visited with the default model: the Cost page's
# sweeps (seventeen settings, about 90 s of one core here: the defaults that show the crossover, d = 128,
# 8 heads and n up to 2,048, take all but five to n = 2,048) and the Depth page's random stacks at every layer
# count, init gain, seed, stream count and noise (about 40 s). A class's slowest clicks were these,
# each student's first change measuring or building its own. A whole-number parameter is visited at
# every value from its lowest to its highest.
EXPLORED_ANY_MODEL = (
    ("pages/cost.py", "ui.cost.view", "d", {}),
    ("pages/cost.py", "ui.cost.view", "heads", {}),
    ("pages/cost.py", "ui.cost.view", "b", {}),
    ("pages/cost.py", "ui.cost.view", "nmax", {}),
    ("pages/cost.py", "ui.cost.view", "gn", {}),  # the gradient's path at every length (a second or two each)
    ("pages/cost.py", "ui.cost.view", "vary", {}),  # the small models varied in width (four builds)
    ("pages/depth.py", "ui.depth.view", "L", {}),
    ("pages/depth.py", "ui.depth.view", "gain", {}),
    ("pages/depth.py", "ui.depth.view", "iseed", {}),
    ("pages/depth.py", "ui.depth.view", "streams", {}),
    ("pages/depth.py", "ui.depth.view", "noise", {}),
)
# Work behind a button that needs nothing but the bundled models: one visit asks for it.
ON_REQUEST = (("pages/positions.py", {"model": "induction-rope", "ext": "20"}),)


def values_of(param) -> tuple:
    """Every value a URL parameter can take: a Choice's choices, an Int's whole range."""
    from ui.shell.params import Int

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
    from ui.shell import models
    from ui.shell.nav import PAGES

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

    from ui.shell import memo as M
    from ui.shell.testing import scan_components_once

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


# The memos whose results the asset may hold: the pages' computations (ui/*/runs.py) and the sidebar's
# examples. Not the models, the manifest or the device list (they describe this server, not the code),
# not the lessons folder (a teacher edits it), not figures (not plain data).
SHIPPED_MODULES = re.compile(r"^ui\.(\w+\.runs|shell\.sidebar)$")


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
    import torch

    # As a server computes (ui/server/process.py sets one torch thread in every app process): a model's float
    # results depend on the thread count, and some memos take them as arguments, so results recorded on the
    # default threads were filed under keys a server never asks for (Masks' compare_masking, computed live).
    torch.set_num_threads(1)
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
          + (f"made by OTHER code for {', '.join(stale)}: run `python -m ui.shell.precompute --write`" if stale
             else "matches this code"))
    return 1 if stale else 0


if __name__ == "__main__":
    raise SystemExit(main())
