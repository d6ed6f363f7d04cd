"""Which views a lesson step may open, and the lessons the app knows (bundled plus a teacher's folder).

core.lessons checks a lesson file against a table of pages and their URL parameters; that table is
built here from ui.shell.nav's PAGES and each page's `ui.<name>.view.URL` table (plus the sidebar's), so a
page added later (Retrieval, Generation, Cost) can be used by a lesson as soon as it is in ui.shell.nav.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Optional

from core import lessons as L
from ui.shell import sidebar_url
from ui.shell.memo import memo
from ui.shell.nav import PAGES

LESSON_DIR_ENV = "GLASSBOX_LESSONS_DIR"  # a teacher's folder of extra lesson files (config)
LESSON_PARAMS = ("lesson", "step", "present", "class")  # every page reads these; a step may not set them


@memo(maxsize=4)
def _views(page_files: tuple[str, ...]) -> dict[str, frozenset[str]]:
    shared = {p.name for p in sidebar_url.URL}
    table = {}
    for path in page_files:
        name = Path(path).stem
        try:
            module = importlib.import_module(f"ui.{name}.view")
            own = {p.name for p in getattr(module, "URL", ())}
        except ModuleNotFoundError:
            own = set()
        table[Path(path).name] = frozenset(shared | own)
    return table


def views() -> dict[str, frozenset[str]]:
    """Page file name (e.g. "attention.py") -> the URL parameters a step may set on it."""
    return _views(tuple(p.path for p in PAGES if p.exists))


def teacher_folder() -> Optional[Path]:
    """The folder of extra lesson files named in the config (environment), if it exists."""
    folder = os.environ.get(LESSON_DIR_ENV, "").strip()
    return Path(folder) if folder and Path(folder).is_dir() else None


def _stamp(folder: Path) -> tuple:
    """Each lesson file's name, time and size: a new stamp when a teacher edits the folder. A file that goes
    away (or cannot be read) while the folder is looked at gets no time, and the loader then says so."""
    stamp = []
    for path in sorted(folder.glob("*.toml")):
        try:
            info = path.stat()
            stamp.append((path.name, info.st_mtime_ns, info.st_size))
        except OSError:
            stamp.append((path.name, None, None))
    return tuple(stamp)


@memo(maxsize=8)
def _load_folder(folder: str, stamp: tuple) -> tuple[tuple[L.Lesson, ...], tuple[str, ...]]:
    good, problems = [], []
    for path in sorted(Path(folder).glob("*.toml")):
        try:
            good.append(L.load_lesson(path, views()))
        except ValueError as exc:
            problems.append(str(exc))
        except OSError as exc:  # removed, or unreadable, while the folder was read
            problems.append(f"{path.name}: could not be read ({exc.strerror or type(exc).__name__})")
    return tuple(good), tuple(problems)


def catalogue() -> tuple[dict[str, L.Lesson], list[str]]:
    """Every lesson by id (bundled first, then the teacher's folder), and the problems of files that
    did not load (each names its file and line; nothing from such a file is used)."""
    lessons, problems = {}, []
    for folder in (L.LESSONS_DIR, teacher_folder()):
        if folder is None or not folder.is_dir():
            continue
        good, bad = _load_folder(str(folder), _stamp(folder))
        problems.extend(bad)
        for lesson in good:
            lessons.setdefault(lesson.id, lesson)
    return lessons, problems


def load(path: Path) -> L.Lesson:
    """One lesson file checked against the app's pages and parameters."""
    return L.load_lesson(path, views())


def parse_upload(data: bytes, file_name: str) -> L.Lesson:
    """A teacher's uploaded file: checked like any other; ValueError naming the problem and its line."""
    if len(data) > L.MAX_FILE_BYTES:
        raise ValueError(f"{file_name}: {len(data)} bytes is too large for a lesson (at most {L.MAX_FILE_BYTES})")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{file_name}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    stem = Path(file_name).stem.lower()
    stem = "".join(c if c.isalnum() or c == "-" else "-" for c in stem).strip("-") or "uploaded"
    return L.parse_lesson(text, f"upload-{stem}"[:64], file_name, views())
