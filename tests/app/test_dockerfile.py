"""The Dockerfile ships everything the app reads at run time, and agrees with requirements.txt.

Building the image needs a Docker daemon and network access for its base image; that is done by
deploy/docker_check.sh (README). These checks keep the file honest on every machine: a new
top-level folder the app imports, left out of the image, fails here rather than in a classroom.
"""

from __future__ import annotations

import ast
import fnmatch
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Tracked top-level entries that the running app never reads.
NOT_AT_RUN_TIME = {".ci", ".dockerignore", ".gitignore", "Dockerfile", "README.md", "bench", "deploy", "docs", "tests",
                   "pytest.ini", "requirements-bench.txt", "requirements-test.txt"}


def dockerfile_lines() -> list[str]:
    """The Dockerfile's instructions, continuation lines joined."""
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    return [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]


def copied_sources() -> set[str]:
    sources: set[str] = set()
    for line in dockerfile_lines():
        if line.startswith("COPY "):
            parts = [p for p in line.split()[1:] if not p.startswith("--")]
            sources.update(p.rstrip("/") for p in parts[:-1])
    return sources


def tracked_top_level() -> set[str]:
    names = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    return {name.split("/")[0] for name in names}


def test_every_entry_the_app_reads_is_copied_into_the_image():
    needed = tracked_top_level() - NOT_AT_RUN_TIME
    assert {"app.py", "serve.py", "core", "ui", "pages", "assets", ".streamlit"} <= needed  # the list above is not stale
    missing = needed - copied_sources()
    assert not missing, f"tracked at the top level, read at run time, not copied into the image: {sorted(missing)}"


def test_the_app_imports_no_top_level_package_left_out_of_the_image():
    """Every local package imported by the app's code is copied (deploy, bench and tests are not)."""
    copied = copied_sources()
    local = {p.name for p in ROOT.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    for path in [ROOT / "app.py", ROOT / "serve.py", *ROOT.glob("pages/*.py"), *ROOT.glob("ui/**/*.py"), *ROOT.glob("core/**/*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
            for name in names:
                top = name.split(".")[0]
                assert top not in local or top in copied, f"{path.relative_to(ROOT)} imports {top}, not in the image"


def test_dockerignore_keeps_what_the_image_copies():
    patterns = [line.strip().rstrip("/") for line in (ROOT / ".dockerignore").read_text().splitlines()
                if line.strip() and not line.startswith("#")]
    for source in copied_sources() - {"wheels*"}:
        hit = [p for p in patterns if fnmatch.fnmatch(source, p)]
        assert not hit, f".dockerignore {hit} drops {source}, which the Dockerfile copies"


def test_the_image_installs_the_pinned_torch_cpu_build():
    pin = re.search(r"^torch==(\S+)", (ROOT / "requirements.txt").read_text(), re.M).group(1)
    torch_arg = next(line for line in dockerfile_lines() if line.startswith("ARG TORCH_INSTALL="))
    assert f"torch=={pin}" in torch_arg and "/whl/cpu" in torch_arg, torch_arg
    assert any(line.startswith("RUN pip install ${TORCH_INSTALL}") for line in dockerfile_lines())


def test_command_health_check_and_port_agree():
    lines = dockerfile_lines()
    exposed = next(line.split()[1] for line in lines if line.startswith("EXPOSE "))
    health = next(line for line in lines if line.startswith("HEALTHCHECK "))
    command = next(line for line in lines if line.startswith("CMD "))
    assert f"127.0.0.1:{exposed}/_stcore/health" in health
    assert f"--server.port={exposed}" in command and "serve.py" in command  # the warm-up starts with the server
    assert any(line.startswith("USER ") and "root" not in line for line in lines), "the server must not run as root"
