"""Every third-party package the code imports is pinned in a requirements file.

A package that only arrives as another package's dependency can change or vanish with that package's next
release, and a machine that happens to have it installed hides the gap (orjson once did: plotly used it when
present, a fresh install ran every chart through the slow path and failed a test). The app's own code
(app.py, serve.py, pages/, ui/, core/) is checked against requirements.txt; tests/ and deploy/ against
requirements-test.txt, which includes it; bench/ against requirements-bench.txt, which includes both (the
benchmarks' comparison libraries, such as TransformerLens, are not installed to run the tests). Imports are
read from the source (ast), so an import inside a function counts too.
"""

from __future__ import annotations

import ast
import re
import sys
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = ("app.py", "serve.py", "pages", "ui", "core")
TOOLS = ("tests", "deploy")
BENCH = ("bench",)
LOCAL = {"core", "ui", "pages", "tests", "bench", "deploy", "app", "serve"}


def normalised(name: str) -> str:
    """A distribution's name as pip compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirements(path: Path) -> dict[str, str]:
    """name -> version specifier of every requirement in `path` and the files it includes (-r)."""
    found: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("-r "):
            found.update(requirements(path.parent / line[3:].strip()))
            continue
        match = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)\s*(.*)$", line)
        assert match, f"{path.name}: cannot read the line {line!r}"
        found[normalised(match.group(1))] = match.group(2).strip()
    return found


def python_files(*places: str) -> list[Path]:
    files = []
    for place in places:
        path = ROOT / place
        files += [path] if path.is_file() else sorted(path.rglob("*.py"))
    return files


def imported_top_levels(path: Path) -> set[str]:
    """The top-level names `path` imports (absolute imports only), less the standard library and the project's
    own packages and the scripts beside it (bench/ scripts import each other by file name)."""
    siblings = {p.stem for p in path.parent.glob("*.py")}
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return {n for n in names if n not in sys.stdlib_module_names and n not in LOCAL and n not in siblings
            and n != "__future__"}


def undeclared(places: tuple[str, ...], declared: dict[str, str]) -> list[str]:
    """'module (distribution) in file' for each import whose distribution `declared` lacks."""
    owners = packages_distributions()
    missing = []
    for path in python_files(*places):
        for name in sorted(imported_top_levels(path)):
            dists = owners.get(name)
            if not dists and normalised(name) in declared:
                continue  # declared under its own name, not installed here (a benchmark's comparison library)
            if not dists:
                missing.append(f"{name} (not installed) in {path.relative_to(ROOT)}")
            elif not any(normalised(d) in declared for d in dists):
                missing.append(f"{name} ({', '.join(dists)}) in {path.relative_to(ROOT)}")
    return missing


def test_the_app_imports_only_what_requirements_txt_pins():
    assert not undeclared(RUNTIME, requirements(ROOT / "requirements.txt"))


def test_tests_and_deploy_import_only_what_requirements_test_txt_pins():
    assert not undeclared(TOOLS, requirements(ROOT / "requirements-test.txt"))


def test_benches_import_only_what_requirements_bench_txt_pins():
    assert not undeclared(BENCH, requirements(ROOT / "requirements-bench.txt"))


@pytest.mark.parametrize("name", ["requirements.txt", "requirements-test.txt", "requirements-bench.txt"])
def test_every_requirement_is_pinned_to_one_version(name):
    loose = {dist: spec for dist, spec in requirements(ROOT / name).items() if not re.fullmatch(r"==[\w.+!-]+", spec)}
    assert not loose, f"{name}: pin these with ==: {loose}"


def test_torch_is_the_cpu_builds_version():
    """An unpinned or other torch pulls a CUDA build of several GB (docs/gpu.md)."""
    assert requirements(ROOT / "requirements.txt")["torch"] == "==2.13.0"


def test_the_check_sees_an_undeclared_import(tmp_path, monkeypatch):
    """The check itself: a file that imports a package missing from the requirements is reported."""
    (tmp_path / "ui").mkdir()
    (tmp_path / "ui" / "x.py").write_text("import numpy\nimport json\nfrom ui import y\n\ndef f():\n    import plotly.io\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert undeclared(("ui",), {"numpy": "==1"}) == ["plotly (plotly) in ui/x.py"]
