"""What every page renders, as data: a before/after check for restructurings that must change nothing.

`python bench/page_snapshot.py --out before.json` runs every page of the app through AppTest at its
default view and at two other URL states each, and records every element it draws (its type and its
protobuf content: texts, widget labels and values, figure data, table bytes), with ids removed.
`--compare before.json` does the same and lists each element that differs. Numbers that are
measured (timings) differ between runs: run the snapshot twice before a change to see them.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from google.protobuf.json_format import MessageToDict
from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# page -> three URL states: the default and two others that open other views and values.
STATES: dict[str, list[dict[str, str]]] = {
    "pages/home.py": [{}, {"model": "sort-decoder"}, {"model": "reverse-encdec", "input": "1 2 3"}],
    "pages/attention.py": [{}, {"model": "induction-rope", "view": "head", "layer": "1", "head": "2", "query": "3"},
                           {"view": "steps", "temp": "0.5", "toy_q": "-2"}],
    "pages/positions.py": [{}, {"model": "induction-rope", "pe_n": "32", "pe_d": "16", "k": "3", "layer": "1"},
                           {"model": "induction-learned", "swap": "sinusoidal", "order": "brackets", "order_pos": "sinusoidal", "ext": "40"}],
    "pages/heads.py": [{}, {"model": "induction-rope", "view": "roles", "layer": "1", "head": "1"},
                       {"model": "sort-decoder", "view": "ablation", "ablate": "L0H1,L1H0", "mode": "mean"}],
    "pages/masks.py": [{}, {"model": "future-legality-encoder", "preset": "causal", "layer": "1", "head": "1"},
                       {"model": "induction-rope", "preset": "sliding", "w": "2", "token": "3", "scope": "layer"}],
    "pages/depth.py": [{}, {"model": "sort-decoder-postln", "at": "3", "L": "24", "rho": "0.3"},
                       {"model": "reverse-encdec", "stack": "encoder", "n": "256", "H": "2", "tau": "0.5"}],
    "pages/train.py": [{}, {"task": "sort", "arch": "decoder", "pos": "rope", "norm": "post"},
                       {"task": "brackets", "arch": "encoder", "layers": "1", "lr": "0.01"}],
}
DROP = {"id", "formId", "widgetId", "fragmentId"}  # identifiers, not content


def _clean(value):
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items() if k not in DROP}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def _elements(node, path="") -> list[tuple[str, dict]]:
    out = []
    children = getattr(node, "children", None)
    if children is not None:
        for i, child in children.items():
            out.extend(_elements(child, f"{path}/{i}"))
        return out
    proto = getattr(node, "proto", None)
    content = _clean(MessageToDict(proto)) if proto is not None and hasattr(proto, "DESCRIPTOR") else {}
    if getattr(node, "type", "") == "plotly_chart" and "spec" in content:
        content["spec"] = json.loads(content["spec"])
    out.append((f"{path}:{node.type}", content))
    return out


def snapshot(pages: list[str] | None = None) -> dict:
    shots = {}
    for page, states in STATES.items():
        if pages and page not in pages:
            continue
        for i, query in enumerate(states):
            at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
            for k, v in query.items():
                at.query_params[k] = v
            at.run()
            at.switch_page(page).run()
            name = f"{page}#{i}"
            shots[name] = {
                "exception": [e.value for e in at.exception],
                "url": {k: str(v) for k, v in dict(at.query_params).items()},
                "main": _elements(at.main), "sidebar": _elements(at.sidebar),
            }
            print(f"{name}: {len(shots[name]['main'])} main elements, {len(shots[name]['exception'])} exceptions",
                  flush=True)
    return shots


def compare(before: dict, after: dict) -> int:
    """Print every element that differs; returns the count."""
    diffs = 0
    for name in sorted(set(before) | set(after)):
        b, a = before.get(name), after.get(name)
        if b is None or a is None:
            print(f"{name}: only in {'after' if b is None else 'before'}")
            diffs += 1
            continue
        for part in ("exception", "url"):
            if b.get(part) != a.get(part):
                print(f"{name} {part}: {b.get(part)} -> {a.get(part)}")
                diffs += 1
        for part in ("main", "sidebar"):
            eb, ea = b[part], a[part]
            if len(eb) != len(ea):
                print(f"{name} {part}: {len(eb)} elements -> {len(ea)}")
                diffs += 1
            for (pb, cb), (pa, ca) in zip(eb, ea):
                if pb.split(":")[1] != pa.split(":")[1] or cb != ca:
                    print(f"{name} {part} {pb} vs {pa}: {json.dumps(cb)[:300]} -> {json.dumps(ca)[:300]}")
                    diffs += 1
    return diffs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="write the snapshot here (JSON)")
    parser.add_argument("--compare", help="compare with this earlier snapshot")
    parser.add_argument("--pages", nargs="*", help="only these pages (e.g. pages/heads.py)")
    args = parser.parse_args()
    shots = json.loads(json.dumps(snapshot(args.pages), default=str))
    if args.out:
        Path(args.out).write_text(json.dumps(shots))
    if args.compare:
        before = json.loads(Path(args.compare).read_text())
        diffs = compare({k: v for k, v in before.items() if k in shots}, shots)
        print(f"{diffs} differences")


if __name__ == "__main__":
    main()
