"""Lessons: a walk through the pages in a chapter's order, read from TOML data files (never code).

A lesson file (assets/lessons/<id>.toml) holds a title, a level, the seed chapter it follows, a
one-line summary and its steps. Each step has a title, a short narration (markdown, math
allowed), the view it opens (a page under pages/ plus the URL parameters it sets; a `model` must
be a bundled one, so every student has it), one or two "try this" prompts and optionally a check
(a kind from core.checks and its arguments).
Anything malformed is a ValueError that names the problem and its line in the file, so a
teacher's own file either loads whole or not at all. Before tomllib reads a file, a linear scan of its
text refuses what would make tomllib slow or deep (`shape_problem`): tomllib is quadratic in a dotted
key's depth (120 KB of `a.a.a...` took 152 s and 14 GB) and recursive in nesting (3,000 `[` overflow
the stack).
"""

from __future__ import annotations

import bisect
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Collection, Mapping, Optional

from core import checks
from core.checkpoints import english_ids, read_manifest

ROOT = Path(__file__).resolve().parent.parent
LESSONS_DIR = ROOT / "assets" / "lessons"
PAGES_DIR = ROOT / "pages"
LEVELS = ("first steps", "intermediate", "advanced")
CHAPTERS = {  # the seed texts (/work/shared/seeds) each lesson follows
    "retrieval": "Attention as retrieval",
    "primer": "The compact primer",
    "mechanics": "The mechanics of attention",
    "stacks": "Encoder and decoder stacks",
    "architecture": "The architecture, and why it replaced RNNs",
}
MIN_STEPS, MAX_STEPS = 1, 30  # bundled lessons keep to 6-12 (a test says so); a teacher's may be shorter
MAX_FILE_BYTES = 200_000
MAX_KEY_PARTS = 8  # a dotted key's parts (a.b.c is 3); a lesson's deepest is steps.check.args.<name>, 4
MAX_NESTING = 8  # arrays and tables open at once ([[steps]] is 2; args = { values = ["a"] } is 2, on one line)
MAX_BARE_CHARS = 100  # a bare key or value (a name, a number, a date) without quotes
MAX_TRY = 2
MAX_TRY_CHARS = 600  # a "try this" prompt: a sentence or two in the lesson bar
ID_PATTERN = re.compile(r"^[a-z0-9][a-z0-9-]{0,63}$")
Views = Mapping[str, Collection[str]]  # page file name -> the URL parameters it reads


@dataclass(frozen=True)
class Check:
    """A question at the end of a step: a kind from core.checks, its arguments, and a hint for a wrong try."""

    kind: str
    question: str
    args: Mapping[str, Any]
    hint: str
    line: int  # where it starts in the file

    @property
    def sort(self) -> str:
        return checks.kind(self.kind).sort


@dataclass(frozen=True)
class Step:
    """One step: the view it opens (`page` under pages/ and `query`, the URL parameters it sets)."""

    title: str
    narration: str
    page: str
    query: Mapping[str, str]
    try_this: tuple[str, ...]
    check: Optional[Check]
    section: str  # the part of the chapter this step belongs to
    line: int


@dataclass(frozen=True)
class Lesson:
    """A loaded lesson: its id (the file's name), title, level, chapter and steps."""

    id: str
    title: str
    level: str
    chapter: str
    summary: str
    steps: tuple[Step, ...]

    @property
    def sections(self) -> list[str]:
        """The chapter's sections this lesson covers, in order."""
        return list(dict.fromkeys(s.section for s in self.steps))

    @property
    def pages(self) -> list[str]:
        """The pages it visits, in order of first visit."""
        return list(dict.fromkeys(s.page for s in self.steps))

    @property
    def n_checks(self) -> int:
        return sum(s.check is not None for s in self.steps)


_STEP_HEADER = re.compile(r"^\s*\[\[\s*steps\s*\]\]")
_KEY_AT_START = re.compile(r"""^\s*(?:\[\s*steps\.)?["']?([A-Za-z0-9_-]+)["']?\s*[=\].]""")  # a line's key


class _Source:
    """The file's text, to name the line where a key sits (tomllib reports lines only for syntax).

    The lines each bare key starts are indexed once, so naming a line costs a lookup, not a pass over the file:
    a file of 180,000 blank lines in one step, whose 24 view parameters were each looked for line by line,
    took 5 s to check."""

    def __init__(self, text: str, name: str):
        self.lines = text.splitlines()
        self.name = name
        self.step_starts: list[int] = []  # the lines (1-based) of each [[steps]]
        self.starts: dict[str, list[int]] = {}  # bare key -> the lines (1-based, ascending) that set it
        for number, line in enumerate(self.lines, start=1):
            if _STEP_HEADER.match(line):
                self.step_starts.append(number)
            found = _KEY_AT_START.match(line)
            if found:
                self.starts.setdefault(found.group(1), []).append(number)

    def line_of(self, key: str, step: Optional[int] = None, after: int = 0) -> int:
        """The first line (1-based) at or after `after` inside step `step` (or the top) that sets `key`;
        the start of that region when no line does."""
        found = self.find(key, step, after)
        return found if found is not None else self._region(step, after)[0]

    def _region(self, step: Optional[int], after: int) -> tuple[int, int]:
        if step is None:
            lo, hi = 1, (self.step_starts[0] if self.step_starts else len(self.lines) + 1)
        else:
            lo = self.step_starts[step] if step < len(self.step_starts) else 1
            hi = self.step_starts[step + 1] if step + 1 < len(self.step_starts) else len(self.lines) + 1
        return max(lo, after), hi

    def find(self, key: str, step: Optional[int] = None, after: int = 0) -> Optional[int]:
        """Like line_of, but None when no line sets `key` (it may sit inside an inline table)."""
        lo, hi = self._region(step, after)
        if re.fullmatch(r"[A-Za-z0-9_-]+", key):  # every key a lesson uses: look it up
            numbers = self.starts.get(key, [])
            k = bisect.bisect_left(numbers, lo)
            return numbers[k] if k < len(numbers) and numbers[k] < hi else None
        # A quoted key of other characters is only ever looked for once, to name the line of an error.
        pattern = re.compile(rf"^\s*(\[\s*steps\.)?[\"']?{re.escape(key)}[\"']?\s*(=|\]|\.)")
        for number in range(lo, hi):
            if pattern.match(self.lines[number - 1]):
                return number
        return None

    def error(self, line: int, message: str) -> ValueError:
        return ValueError(f"{self.name}, line {line}: {message}")


def _text(src: _Source, table: Mapping, key: str, step: Optional[int], required: bool = True, limit: int = 4000) -> str:
    if key not in table:
        if required:
            where = f"step {step + 1}" if step is not None else "the top of the file"
            line = src.step_starts[step] if step is not None and step < len(src.step_starts) else 1
            raise src.error(line, f"{where} needs `{key} = \"...\"`")
        return ""
    value = table[key]
    if not isinstance(value, str) or not value.strip():
        raise src.error(src.line_of(key, step), f"`{key}` must be non-empty text, got {value!r}"[:300])
    if len(value) > limit:
        raise src.error(src.line_of(key, step), f"`{key}` is {len(value)} characters long; keep it under {limit}")
    return value.strip()


def _query_value(src: _Source, step: int, name: str, value: Any) -> str:
    line = src.line_of(name, step, after=src.line_of("view", step))
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, (int, float, str)):
        text = str(value)
    elif isinstance(value, list) and all(isinstance(v, (int, float, str)) and not isinstance(v, bool) for v in value):
        text = ",".join(str(v) for v in value)
    else:
        raise src.error(line, f"view parameter `{name}` must be text, a number, true/false or a list of those")
    if len(text) > 2000:
        raise src.error(line, f"view parameter `{name}` is too long ({len(text)} characters)")
    return text


def _view(src: _Source, raw: Mapping, step: int, views: Optional[Views]) -> tuple[str, dict]:
    page = _text(src, raw, "page", step)
    page_line = src.line_of("page", step)
    known_pages = sorted(views) if views is not None else sorted(p.name for p in PAGES_DIR.glob("*.py"))
    if page not in known_pages:
        raise src.error(page_line, f"unknown page {page!r} (pages: {', '.join(known_pages)})")
    view = raw.get("view", {})
    if not isinstance(view, dict):
        raise src.error(src.line_of("view", step), "`view` must be a table of URL parameters")
    query = {}
    for name, value in view.items():
        if views is not None and name not in views[page]:
            raise src.error(src.line_of(name, step, after=src.line_of("view", step)),
                            f"page {page!r} has no parameter {name!r} "
                            f"(it has: {', '.join(sorted(views[page]))})")
        query[name] = _query_value(src, step, name, value)
    if "model" in query:
        models = sorted([entry["id"] for entry in read_manifest()] + english_ids())
        if query["model"] not in models:
            raise src.error(src.line_of("model", step, after=src.line_of("view", step)),
                            f"unknown model {query['model']!r} (bundled models: {', '.join(models)})")
    return page, query


def _check(src: _Source, raw: Any, step: int) -> Check:
    line = src.line_of("check", step)
    if not isinstance(raw, dict):
        raise src.error(line, "`check` must be a table with kind, question, hint and args")
    unknown = sorted(set(raw) - {"kind", "question", "hint", "args"})
    if unknown:
        raise src.error(src.line_of(unknown[0], step, after=line), f"a check has no field {unknown[0]!r}")
    kind = _text(src, raw, "kind", step)
    question = _text(src, raw, "question", step, limit=600)
    hint = _text(src, raw, "hint", step, limit=600)
    args = raw.get("args", {})
    if not isinstance(args, dict):
        raise src.error(src.line_of("args", step, after=line), "`args` of a check must be a table")
    try:
        checks.kind(kind).arguments(args)
    except ValueError as exc:
        at = src.line_of("kind", step, after=line)
        for name in args:
            if repr(name) in str(exc):
                at = src.find(name, step, after=line) or src.line_of("args", step, after=line)
                break
        raise src.error(at, str(exc)) from None
    return Check(kind, question, dict(args), hint, line)


def _step(src: _Source, raw: Any, k: int, views: Optional[Views], section: str) -> Step:
    line = src.step_starts[k] if k < len(src.step_starts) else 1
    if not isinstance(raw, dict):
        raise src.error(line, f"step {k + 1} must be a table ([[steps]])")
    allowed = {"title", "narration", "page", "view", "try", "check", "section"}
    unknown = sorted(set(raw) - allowed)
    if unknown:
        raise src.error(src.line_of(unknown[0], k), f"a step has no field {unknown[0]!r} "
                                                    f"(fields: {', '.join(sorted(allowed))})")
    title = _text(src, raw, "title", k, limit=120)
    narration = _text(src, raw, "narration", k)
    page, query = _view(src, raw, k, views)
    prompts = raw.get("try", [])
    if isinstance(prompts, str):
        prompts = [prompts]
    if not (isinstance(prompts, list) and 1 <= len(prompts) <= MAX_TRY and all(isinstance(p, str) and p.strip()
                                                                                for p in prompts)):
        raise src.error(src.line_of("try", k) if "try" in raw else line,
                        f"step {k + 1} needs one or two \"try this\" prompts: `try = [\"...\"]`")
    if any(len(p) > MAX_TRY_CHARS for p in prompts):
        raise src.error(src.line_of("try", k), f"a \"try this\" prompt is at most {MAX_TRY_CHARS} characters long")
    check = _check(src, raw["check"], k) if "check" in raw else None
    section = _text(src, raw, "section", k, required=False, limit=120) or section
    return Step(title, narration, page, query, tuple(p.strip() for p in prompts), check, section, line)


_STRING_STOPS = {'"': re.compile(r'["\\\n]'), "'": re.compile(r"['\n]")}  # where a string may end or escape
_BARE_RUN = re.compile(r"[A-Za-z0-9_+-]+")
_BLANKS = re.compile(r"[ \t\r]+")


def _skip_string(text: str, i: int) -> tuple[int, int]:
    """Where the TOML string starting at text[i] ends (the index after it), and how many newlines it spans.
    Basic strings (in double quotes, single or tripled) honour backslash escapes; literal ones (single quotes) do
    not. An unterminated string runs to the end of its line (single-line) or of the text; tomllib reports it."""
    quote = text[i]
    closing = quote * 3 if text.startswith(quote * 3, i) else quote
    stops, j, n = _STRING_STOPS[quote], i + len(closing), len(text)
    while True:
        found = stops.search(text, j)
        if found is None:
            j = n
            break
        j = found.start()
        c = text[j]
        if c == "\\":
            j += 2
        elif c == "\n":
            if len(closing) == 1:
                break
            j += 1
        elif text.startswith(closing, j):
            j += len(closing)
            for _ in range(2 if len(closing) == 3 else 0):  # a tripled string may end in one or two more quotes
                if j < n and text[j] == quote:
                    j += 1
            break
        else:
            j += 1
    return j, text.count("\n", i, j)


def shape_problem(text: str, name: str) -> Optional[ValueError]:
    """A ValueError naming the line of the first place where the file's shape is beyond a lesson's needs, or None.

    One pass over the raw text, outside strings and comments, before tomllib reads it: a dotted key of more
    than MAX_KEY_PARTS parts, more than MAX_NESTING arrays and tables open at once, a bare key or value of more
    than MAX_BARE_CHARS characters. Linear in the text, so a 200 KB file is judged in well under a second.
    """
    line, depth, parts = 1, 0, 1
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "\n":
            line, parts, i = line + 1, 1, i + 1
        elif c == "#":
            end = text.find("\n", i)
            i = n if end < 0 else end
        elif c in "\"'":
            i, lines = _skip_string(text, i)
            line += lines
        elif c in " \t\r":
            i = _BLANKS.match(text, i).end()  # spaces may sit around the dots of a key: a.b = a . b
        elif c == ".":
            parts, i = parts + 1, i + 1
            if parts > MAX_KEY_PARTS:
                return ValueError(f"{name}, line {line}: a dotted key has more than {MAX_KEY_PARTS} parts; "
                                  f"a lesson's deepest key, steps.check.args.<name>, has 4")
        elif c in "[{":
            depth, parts, i = depth + 1, 1, i + 1
            if depth > MAX_NESTING:
                return ValueError(f"{name}, line {line}: arrays and tables are nested more than {MAX_NESTING} deep; "
                                  f"[[steps]] and args = {{ values = ['a'] }} need 2")
        elif c in "]}":
            depth, parts, i = max(depth - 1, 0), 1, i + 1
        else:
            run = _BARE_RUN.match(text, i)
            if run is None:  # = , and anything else end a key
                parts, i = 1, i + 1
            elif run.end() - i > MAX_BARE_CHARS:
                return ValueError(f"{name}, line {line}: a key or value without quotes is longer than "
                                  f"{MAX_BARE_CHARS} characters; a lesson needs no such thing")
            else:
                i = run.end()
    return None


def _read_toml(text: str, name: str) -> dict:
    """The parsed file; ValueError naming the file (and the line, where known) for anything tomllib cannot read.
    The shape is judged first (shape_problem), so tomllib never meets a file that would make it slow or deep;
    RecursionError and the rest are still caught, so no lesson file can put a traceback on the page."""
    problem = shape_problem(text, name)
    if problem is not None:
        raise problem
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{name}: not valid TOML: {exc}") from None  # tomllib's message names line and column
    except RecursionError:
        raise ValueError(f"{name}: nested too deeply to read (at most {MAX_NESTING} levels)") from None
    except (ValueError, OverflowError, MemoryError) as exc:  # e.g. a number beyond Python's digit limit
        raise ValueError(f"{name}: cannot be read: {type(exc).__name__}: {str(exc)[:200]}") from None


def parse_lesson(text: str, lesson_id: str, name: str = "lesson", views: Optional[Views] = None) -> Lesson:
    """A lesson from the text of a TOML file; ValueError naming the file, and the line of anything malformed.

    `views` maps each page file name to its URL parameters (the app passes its pages' tables);
    without it, pages are checked against the files under pages/ and parameters are not checked.
    Nothing else escapes: an unexpected failure is a ValueError naming the file too.
    """
    try:
        return _parse(text, lesson_id, name, views)
    except ValueError:
        raise
    except (TypeError, KeyError, IndexError, AttributeError, OverflowError, RecursionError, MemoryError) as exc:
        raise ValueError(f"{name}: cannot be read as a lesson ({type(exc).__name__}: {str(exc)[:200]})") from None


def _parse(text: str, lesson_id: str, name: str, views: Optional[Views]) -> Lesson:
    """parse_lesson's work: read the TOML, then check every field and step."""
    src = _Source(text, name)
    if not ID_PATTERN.match(lesson_id):
        raise src.error(1, f"a lesson's file name must be lower-case letters, digits and '-', got {lesson_id!r}")
    data = _read_toml(text, name)
    allowed = {"title", "level", "chapter", "summary", "steps"}
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise src.error(src.line_of(unknown[0]), f"a lesson has no field {unknown[0]!r} "
                                                 f"(fields: {', '.join(sorted(allowed))})")
    title = _text(src, data, "title", None, limit=120)
    summary = _text(src, data, "summary", None, limit=600)
    level = _text(src, data, "level", None)
    if level not in LEVELS:
        raise src.error(src.line_of("level"), f"level must be one of {', '.join(LEVELS)}, got {level!r}")
    chapter = _text(src, data, "chapter", None)
    if chapter not in CHAPTERS:
        raise src.error(src.line_of("chapter"), f"chapter must be one of {', '.join(CHAPTERS)}, got {chapter!r}")
    raw_steps = data.get("steps")
    if not isinstance(raw_steps, list) or not raw_steps:
        raise src.error(src.line_of("steps"), "a lesson needs steps: one `[[steps]]` table per step")
    if not MIN_STEPS <= len(raw_steps) <= MAX_STEPS:
        raise src.error(src.step_starts[-1] if src.step_starts else 1,
                        f"a lesson has {MIN_STEPS} to {MAX_STEPS} steps, this one {len(raw_steps)}")
    steps, section = [], title
    for k, raw in enumerate(raw_steps):
        step = _step(src, raw, k, views, section)
        section = step.section
        steps.append(step)
    return Lesson(lesson_id, title, level, chapter, summary, tuple(steps))


def load_lesson(path: str | Path, views: Optional[Views] = None) -> Lesson:
    """Read and check one lesson file (its id is the file's name without .toml)."""
    path = Path(path)
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise ValueError(f"{path.name}: cannot be read: {exc.strerror}") from None
    if size > MAX_FILE_BYTES:
        raise ValueError(f"{path.name}: {size} bytes is too large for a lesson (at most {MAX_FILE_BYTES})")
    try:
        with path.open("rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)  # the file may have grown since stat
        if len(data) > MAX_FILE_BYTES:
            raise ValueError(f"{path.name}: too large for a lesson (at most {MAX_FILE_BYTES} bytes)")
        text = data.decode("utf-8")
    except OSError as exc:  # e.g. removed or made unreadable between stat and read
        raise ValueError(f"{path.name}: cannot be read: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path.name}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    return parse_lesson(text, path.stem, path.name, views)


def bundled(views: Optional[Views] = None, folder: Path = LESSONS_DIR) -> list[Lesson]:
    """Every lesson shipped in assets/lessons, in file-name order."""
    return [load_lesson(p, views) for p in sorted(folder.glob("*.toml"))]
