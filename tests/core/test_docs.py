"""The README and docs/ point at things that exist: every relative link (and its heading anchor), and every
path of this project's code that they name. Files move (ui/ did, into one package per page); a guide that
sends a newcomer to a file that is gone is worse than no guide."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
CODE_PATH = re.compile(r"(?<![\w/.-])((?:app|serve)\.py|(?:core|ui|pages|tests|bench|deploy|assets)/[\w./-]*\w)")


def anchors(markdown: str) -> set[str]:
    """GitHub's anchors of a file's headings: lower case, punctuation dropped, spaces to hyphens."""
    found = set()
    for line in markdown.splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            found.add(re.sub(r"\s", "-", re.sub(r"[^\w\s-]", "", title)))
    return found


def links(path: Path) -> list[str]:
    return [target for target in LINK.findall(path.read_text()) if not re.match(r"^[a-z]+:", target)]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_reaches_a_file_and_heading(doc):
    broken = []
    for target in links(doc):
        file, _, anchor = target.partition("#")
        path = (doc.parent / file).resolve() if file else doc
        if not path.exists():
            broken.append(target)
        elif anchor and path.suffix == ".md" and anchor not in anchors(path.read_text()):
            broken.append(target)
    assert not broken, f"{doc.name}: links to nothing: {broken}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_code_path_named_exists(doc):
    """`ui/shell/sections.py`, `tests/app/test_sections.py`, ...: templates (`ui/<page>/view.py`) and globs are
    not paths, and an example's files (docs/adding-a-page.md builds a page) are listed apart."""
    examples = {"pages/scores.py", "ui/scores/__init__.py", "ui/scores/view.py", "ui/scores/runs.py",
                "tests/app/test_scores.py", "assets/images/scores.png", "ui/scores/", "ui/scores"}
    missing = []
    for name in CODE_PATH.findall(doc.read_text()):
        name = name.rstrip(".")
        if any(c in name for c in "<*{") or name in examples or name.startswith("ui/scores"):
            continue
        if not (ROOT / name).exists():
            missing.append(name)
    assert not missing, f"{doc.name} names paths that do not exist: {sorted(set(missing))}"


def test_the_readme_stays_short():
    """A newcomer reads it in five minutes; measurements and guides live in docs/."""
    assert len((ROOT / "README.md").read_text().splitlines()) <= 300


def test_the_link_check_sees_a_broken_link(tmp_path):
    (tmp_path / "a.md").write_text("# Title\n\n[ok](#title) [gone](b.md) [bad anchor](a.md#nope)\n")
    doc = tmp_path / "a.md"
    targets = links(doc)
    assert targets == ["#title", "b.md", "a.md#nope"]
    assert "title" in anchors(doc.read_text()) and "nope" not in anchors(doc.read_text())
