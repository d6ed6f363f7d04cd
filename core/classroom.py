"""Classes: a teacher opens one, students join with its short code and follow the teacher's lesson step.

The class state is tiny (which lesson, which step, when it last moved) and lives in a store: in this
process by default, or in Redis when a URL is configured, so that several app servers behind a load
balancer share their classes. Only the holder of the teacher's token (kept in the teacher's own
session) can move a class; a store keeps only the token's SHA-256, never the token. A class nobody
moved for `ttl` seconds expires.

What a guesser or a careless visitor can do is bounded here, without Streamlit: `Throttle` counts
events (failed joins, opened classes) per session and per server in a sliding window; a MemoryStore
holds at most `max_classes`; a store that does not answer raises `StoreDown` (never a driver's own
exception), so the app can say so and go on.

Issue 40, what a teacher sees of the class: students report where they are (`heartbeat`, from their page's poll)
and their answers to a step's check (`answer`); the teacher reads the pace and the answers (`board`: one read),
reveals an answer (`reveal`) and downloads every first answer (`rows`). Counting is atomic in the store (a lock
here, one Lua script per call in Redis), so 30 answers in the same second lose none. Moving, closing, revealing
and reading rows take the teacher's token; a student's id is a random one per browser session.
"""

from __future__ import annotations

import collections
import csv
import hashlib
import io
import json
import math
import re
import secrets
import threading
import time
from dataclasses import asdict, dataclass
from typing import Callable, Optional, Protocol

CODE_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # no 0/O or 1/I: read aloud and typed by a class
CODE_LENGTH = 6  # 32**6 = 2**30 codes; why that is enough behind the join limits: docs/deployment.md
DEFAULT_TTL = 4 * 3600  # seconds a class lives after its last move
MIN_TTL, MAX_TTL = 60, 7 * 24 * 3600  # the bounds GLASSBOX_CLASS_TTL may take (1 minute .. 7 days)
MAX_CLASSES = 1000  # open classes one in-process store holds (a school's worth; each is a few hundred bytes)
REDIS_PREFIX = "glassbox:class:"
REDIS_TIMEOUT = 1.0  # seconds: a paused Redis costs one run at most this long before the app says so
REDIS_REST = 1.0  # seconds after a failure during which calls fail at once instead of waiting again


class StoreDown(RuntimeError):
    """The class store (Redis) did not answer: refused, timed out, or answered with an error."""


class ClassLimit(RuntimeError):
    """No more classes may be opened now (the store is full)."""


@dataclass(frozen=True)
class ClassState:
    """Where a class is: its code, the lesson and step the teacher shows, and when it last moved."""

    code: str
    lesson: str
    step: int
    moved_at: float  # time.time() of the last move (students compare it to notice a move)


def new_code() -> str:
    """A short random join code, e.g. 'K7PX2M'."""
    return "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LENGTH))


def normalise_code(text: str) -> Optional[str]:
    """A typed code made canonical ('k7px 2m' -> 'K7PX2M'), or None when it cannot be a code."""
    code = "".join(str(text).split()).upper()[:32]
    if len(code) != CODE_LENGTH or any(c not in CODE_ALPHABET for c in code):
        return None
    return code


def token_digest(token: str) -> str:
    """The SHA-256 of a teacher's token (hex): what a store keeps, so that reading the store gives no token."""
    return hashlib.sha256(str(token).encode("utf-8")).hexdigest()


def token_matches(digest: str, token: str) -> bool:
    """Whether `token` is the one whose digest a store kept, compared in constant time."""
    return secrets.compare_digest(str(digest), token_digest(token))


def parse_ttl(raw: Optional[str]) -> tuple[int, Optional[str]]:
    """GLASSBOX_CLASS_TTL read and bounded: (seconds, None) when it is fine or unset, else (the seconds
    used, a sentence saying what was wrong). A value out of bounds made every Redis class fail to open."""
    if raw is None or not str(raw).strip():
        return DEFAULT_TTL, None
    text = str(raw).strip()[:40]
    try:
        ttl = int(text)
    except ValueError:
        return DEFAULT_TTL, (f"GLASSBOX_CLASS_TTL={text!r} is not a whole number of seconds; classes live "
                             f"{DEFAULT_TTL} s (4 hours).")
    if not MIN_TTL <= ttl <= MAX_TTL:
        used = min(max(ttl, MIN_TTL), MAX_TTL)
        return used, (f"GLASSBOX_CLASS_TTL={text} is outside {MIN_TTL}..{MAX_TTL} seconds (1 minute to 7 days); "
                      f"classes live {used} s.")
    return ttl, None


class Throttle:
    """At most `per_key` events per key and `total` events in all, in any `window` seconds.

    Thread-safe (every session runs in its own thread). `wait(key)` says how long `key` must wait before
    its next event is allowed (0.0: now); `record(key)` counts one. Keys whose events all aged out are
    dropped, so a visitor who opens many sessions leaves no growing table behind."""

    def __init__(self, per_key: int, total: int, window: float, clock: Callable[[], float] = time.monotonic):
        self.per_key, self.total, self.window, self.clock = int(per_key), int(total), float(window), clock
        self._lock = threading.Lock()
        self._by_key: dict[str, collections.deque] = {}
        self._all: collections.deque = collections.deque()

    def _prune(self, now: float) -> None:
        while self._all and self._all[0] <= now - self.window:
            self._all.popleft()
        for key in [k for k, q in self._by_key.items() if not q or q[-1] <= now - self.window]:
            del self._by_key[key]

    def wait(self, key: str) -> float:
        """Seconds before `key` may act again (0.0 when it may now)."""
        with self._lock:
            now = self.clock()
            self._prune(now)
            mine = self._by_key.get(key, ())
            waits = [0.0]
            if len(mine) >= self.per_key:
                waits.append(mine[-self.per_key] + self.window - now)
            if len(self._all) >= self.total:
                waits.append(self._all[-self.total] + self.window - now)
            return max(waits)

    def record(self, key: str) -> int:
        """Count one event for `key`; returns how many the whole server had in the window, this one included."""
        with self._lock:
            now = self.clock()
            self._prune(now)
            self._by_key.setdefault(key, collections.deque()).append(now)
            self._all.append(now)
            return len(self._all)


# ---------------------------------------------------------------------------------------------
# What a class's students do: presence, answers to a step's check, and what the teacher revealed
# ---------------------------------------------------------------------------------------------
# Both stores keep them as four flat hashes per class, the layout Redis holds (field -> text), so that one set
# of readers below serves both: `seen` (student id -> "lesson|step|following|time"), `names` (student id ->
# nickname), `answers` ("lesson|step|sid" -> "right|first answer", "...|sid|tries" -> n, "...|sid|w|bin" -> 1)
# and `counts` ("lesson|step|answered", "|right", "|revealed", "lesson|step|wrong|bin" -> students). They end
# with the class: closed with it, and never set to outlive it.

PRESENT_SECONDS = 10.0  # a student whose page has not reported for this long has left (their poll runs every second)
MAX_STUDENTS = 500  # student ids one class records (a reload is a new id): a script cannot grow a class's hashes
MAX_NICKNAME = 20  # characters of an optional nickname
MAX_ANSWER_CHARS = 80  # characters of an answer kept (a pick's option or a number as typed)
MAX_WRONG_TRIES = 5  # wrong tries of one student on one step that count among the common wrong answers
TOP_WRONG = 3  # most common wrong answers shown to the teacher
STUDENT_ID = re.compile(r"^[0-9a-f]{8,32}$")
LESSON_ID = re.compile(r"^[a-z0-9][a-z0-9-]{0,63}$")  # core.lessons.ID_PATTERN
PARTS = ("seen", "names", "answers", "counts")


@dataclass(frozen=True)
class Pace:
    """Where a class's students are now: how many following the teacher on each (lesson, step), and how
    many exploring on their own. Students not heard from for PRESENT_SECONDS are not counted."""

    following: dict  # (lesson, step) -> students following the teacher who are there
    exploring: int

    @property
    def students(self) -> int:
        return sum(self.following.values()) + self.exploring

    def on(self, lesson: str, step: int) -> int:
        """Following students who are on this step."""
        return self.following.get((lesson, int(step)), 0)

    def behind(self, lesson: str, step: int) -> int:
        """Following students whose page still shows another step (they catch up within a second or two)."""
        return sum(self.following.values()) - self.on(lesson, step)


@dataclass(frozen=True)
class Answers:
    """A class's answers to one step's check: who answered, who was right on the first try, the most common
    wrong answers (text, or bin for numbers, with how many students gave it), the students present, and
    whether the teacher revealed the answer."""

    answered: int
    right_first: int
    wrong: tuple  # ((answer or bin, students), ...), most common first, at most TOP_WRONG
    students: int
    revealed: bool


def clean_nickname(text: object) -> str:
    """A nickname as a class keeps it: printable, blanks collapsed, at most MAX_NICKNAME characters ('' for none)."""
    cleaned = "".join(c if c.isprintable() else " " for c in str(text or "")[:200])
    return " ".join(cleaned.split())[:MAX_NICKNAME].strip()


def answer_bin(value: float, tolerance: float = 0.0) -> str:
    """The bin a typed number falls in, for counting common wrong answers: rounded to the check's tolerance
    (0.31 and 0.309 with tolerance 0.01 both read '0.31'), or to 2 significant digits when it has none."""
    value = float(value)
    if not math.isfinite(value):
        return "not a number"
    if tolerance > 0 and math.isfinite(tolerance):
        value = round(value / tolerance) * tolerance
    else:
        value = float(f"{value:.2g}")
    return f"{value + 0.0:.10g}"  # + 0.0: no "-0"


def _field(lesson: str, step: int) -> str:
    if not LESSON_ID.match(str(lesson)):
        raise ValueError(f"not a lesson id: {str(lesson)[:70]!r}")
    return f"{lesson}|{int(step)}"


def _student(student_id: str) -> str:
    if not STUDENT_ID.match(str(student_id)):
        raise ValueError("a student id is 8 to 32 hex digits")
    return str(student_id)


def _seen_value(lesson: str, step: int, following: bool, now: float) -> str:
    return f"{_field(lesson, step)}|{int(bool(following))}|{now:.3f}"


def _pace_from(seen: dict, now: float) -> Pace:
    """Pace from a class's `seen` hash (values 'lesson|step|following|time')."""
    following: dict = collections.Counter()
    exploring = 0
    for value in seen.values():
        try:
            lesson, step, follows, when = _text(value).split("|")
            if now - float(when) > PRESENT_SECONDS:
                continue
        except ValueError:
            continue
        if follows == "1":
            following[(lesson, int(step))] += 1
        else:
            exploring += 1
    return Pace(dict(following), exploring)


def _answers_from(counts: dict, lesson: str, step: int, students: int) -> Answers:
    """Answers to one step from a class's `counts` hash."""
    counts = {_text(k): _text(v) for k, v in counts.items()}
    prefix = _field(lesson, step)
    wrong = collections.Counter()
    for key, value in counts.items():
        if key.startswith(prefix + "|wrong|"):
            wrong[key[len(prefix) + 7:]] = int(value)
    top = tuple(sorted(wrong.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP_WRONG])
    return Answers(int(counts.get(prefix + "|answered", 0)), int(counts.get(prefix + "|right", 0)), top,
                   students, prefix + "|revealed" in counts)


def _rows_from(answers: dict, names: dict) -> list[dict]:
    """One row per student per step from a class's `answers` and `names` hashes: the first answer, whether
    it was right, and how many tries."""
    answers = {_text(k): _text(v) for k, v in answers.items()}
    names = {_text(k): _text(v) for k, v in names.items()}
    rows = []
    for key, value in answers.items():
        parts = key.split("|")
        if len(parts) != 3:
            continue  # a tries count or a wrong answer's mark
        lesson, step, sid = parts
        right, _, first = value.partition("|")
        rows.append({"lesson": lesson, "step": int(step), "student": names.get(sid) or f"anonymous {sid[:6]}",
                     "first answer": first, "right on first try": right == "1",
                     "tries": int(answers.get(key + "|tries", 1))})
    return sorted(rows, key=lambda r: (r["lesson"], r["step"], r["student"]))


def _text(value) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


CSV_FIELDS = ("lesson", "step", "student", "first answer", "right on first try", "tries")


def answers_csv(rows: list[dict]) -> str:
    """The class's answers as CSV text (rows from `rows()`). A cell that a spreadsheet would read as a formula
    (starting with = + - @, or a tab or carriage return) gets a leading quote: a nickname or an answer is typed
    by a student."""
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(CSV_FIELDS)
    for row in rows:
        writer.writerow([_cell(row.get(name, "")) for name in CSV_FIELDS])
    return out.getvalue()


def _cell(value) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    text = str(value)
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


class ClassStore(Protocol):
    """What the app needs from a store; MemoryStore and RedisStore pass the same tests. Every method may
    raise StoreDown (Redis not answering); `open` may raise ClassLimit."""

    def open(self, lesson: str, step: int) -> tuple[ClassState, str]:
        """A new class at this step, and the teacher's secret token."""

    def get(self, code: str) -> Optional[ClassState]:
        """The class with this code, or None when there is none (or it expired)."""

    def move(self, code: str, token: str, lesson: str, step: int) -> bool:
        """Move the class (teacher only: False for a wrong token or a class that is gone)."""

    def close(self, code: str, token: str) -> bool:
        """End the class (teacher only)."""

    def restore(self, state: ClassState, token: str) -> bool:
        """Put a class back under its own code and token, when that code is free (after the store lost its
        data, e.g. Redis restarted): False when the code is taken."""

    def claim(self, code: str, token: str) -> Optional[ClassState]:
        """The class, when `token` is its teacher's (a teacher link or cookie opened in another session)."""

    def join(self, code: str, student_id: str, nickname: str = "") -> bool:
        """Count a student in (with an optional nickname) at the class's step; False when there is no class."""

    def heartbeat(self, code: str, student_id: str, lesson: str, step: int,
                  following: bool) -> Optional[tuple[ClassState, bool]]:
        """A student's poll: where they are; returns the class and whether their step's answer is revealed."""

    def answer(self, code: str, student_id: str, lesson: str, step: int, answer_text: str, right: bool,
               group: str = "") -> bool:
        """Record one try at a step's check (`group`: its bin among wrong answers, default the text itself)."""

    def pace(self, code: str) -> Pace:
        """Where the students are now."""

    def answers(self, code: str, lesson: str, step: int) -> Answers:
        """The class's answers to one step's check."""

    def board(self, code: str, lesson: str, step: int) -> Optional[tuple[ClassState, Pace, Answers]]:
        """The teacher's view in one read: the class, its pace and the step's answers (None: no class)."""

    def reveal(self, code: str, token: str, lesson: str, step: int) -> bool:
        """Show a step's answer to every student (teacher only)."""

    def revealed(self, code: str, lesson: str, step: int) -> bool:
        """Whether the teacher revealed this step's answer."""

    def rows(self, code: str, token: str) -> Optional[list[dict]]:
        """Every student's first answer per step, right or not, and tries (teacher only: None otherwise)."""


class MemoryStore:
    """Classes held in this process (one server); thread-safe, since every session runs in its own thread."""

    def __init__(self, ttl: float = DEFAULT_TTL, clock: Callable[[], float] = time.time,
                 max_classes: int = MAX_CLASSES):
        self.ttl, self.clock, self.max_classes = ttl, clock, int(max_classes)
        self._lock = threading.Lock()
        self._classes: dict[str, tuple[ClassState, str, float]] = {}  # code -> (state, token digest, expires at)
        self._parts: dict[str, dict[str, dict[str, str]]] = {}  # code -> part (PARTS) -> field -> value

    def _live(self, code: str):
        entry = self._classes.get(code)
        if entry is not None and entry[2] <= self.clock():
            self._end(code)
            return None
        return entry

    def _end(self, code: str) -> None:
        self._classes.pop(code, None)
        self._parts.pop(code, None)

    def _drop_expired(self) -> None:
        for expired in [c for c, e in self._classes.items() if e[2] <= self.clock()]:
            self._end(expired)

    def _hashes(self, code: str) -> dict[str, dict[str, str]]:
        return self._parts.setdefault(code, {part: {} for part in PARTS})

    def _teacher(self, code: str, token: str):
        entry = self._live(code)
        return entry if entry is not None and token_matches(entry[1], token) else None

    def open(self, lesson: str, step: int) -> tuple[ClassState, str]:
        token = secrets.token_urlsafe(16)
        with self._lock:
            self._drop_expired()
            if len(self._classes) >= self.max_classes:
                raise ClassLimit(f"this server holds {self.max_classes} open classes, its most")
            code = new_code()
            while code in self._classes:
                code = new_code()
            state = ClassState(code, lesson, int(step), self.clock())
            self._classes[code] = (state, token_digest(token), self.clock() + self.ttl)
        return state, token

    def get(self, code: str) -> Optional[ClassState]:
        with self._lock:
            entry = self._live(code)
            return entry[0] if entry else None

    def move(self, code: str, token: str, lesson: str, step: int) -> bool:
        with self._lock:
            entry = self._live(code)
            if entry is None or not token_matches(entry[1], token):
                return False
            state = ClassState(code, lesson, int(step), self.clock())
            self._classes[code] = (state, entry[1], self.clock() + self.ttl)
            return True

    def close(self, code: str, token: str) -> bool:
        with self._lock:
            entry = self._live(code)
            if entry is None or not token_matches(entry[1], token):
                return False
            self._end(code)
            return True

    def restore(self, state: ClassState, token: str) -> bool:
        with self._lock:
            if self._live(state.code) is not None:
                return False
            self._classes[state.code] = (state, token_digest(token), self.clock() + self.ttl)
            return True

    def claim(self, code: str, token: str) -> Optional[ClassState]:
        with self._lock:
            entry = self._teacher(code, str(token))
            return entry[0] if entry else None

    def join(self, code: str, student_id: str, nickname: str = "") -> bool:
        with self._lock:
            entry = self._live(code)
            return entry is not None and self._seen(code, _student(student_id), entry[0].lesson, entry[0].step,
                                                    True, name=clean_nickname(nickname))

    def _seen(self, code: str, sid: str, lesson: str, step: int, following: bool, name: Optional[str] = None) -> bool:
        seen = self._hashes(code)["seen"]
        if sid not in seen and len(seen) >= MAX_STUDENTS:
            return False
        seen[sid] = _seen_value(lesson, step, following, self.clock())
        if name is not None:
            names = self._hashes(code)["names"]
            if name:
                names[sid] = name
            else:
                names.pop(sid, None)
        return True

    def heartbeat(self, code: str, student_id: str, lesson: str, step: int,
                  following: bool) -> Optional[tuple[ClassState, bool]]:
        with self._lock:
            entry = self._live(code)
            if entry is None:
                return None
            self._seen(code, _student(student_id), lesson, step, following)
            return entry[0], _field(lesson, step) + "|revealed" in self._hashes(code)["counts"]

    def answer(self, code: str, student_id: str, lesson: str, step: int, answer_text: str, right: bool,
               group: str = "") -> bool:
        sid, where = _student(student_id), _field(lesson, step)
        text = str(answer_text)[:MAX_ANSWER_CHARS]
        group = str(group or text)[:MAX_ANSWER_CHARS]
        with self._lock:  # the same steps as RedisStore's Lua script, under the lock
            if self._live(code) is None or sid not in self._hashes(code)["seen"]:
                return False
            answers, counts = self._hashes(code)["answers"], self._hashes(code)["counts"]
            me = f"{where}|{sid}"
            first = me not in answers
            if first:
                answers[me] = f"{int(bool(right))}|{text}"
                _incr(counts, where + "|answered")
                if right:
                    _incr(counts, where + "|right")
            tries = _incr(answers, me + "|tries")
            if not right and tries <= MAX_WRONG_TRIES and f"{me}|w|{group}" not in answers:
                answers[f"{me}|w|{group}"] = "1"
                _incr(counts, f"{where}|wrong|{group}")
            return True

    def pace(self, code: str) -> Pace:
        with self._lock:
            return _pace_from(dict(self._hashes(code)["seen"]) if self._live(code) else {}, self.clock())

    def answers(self, code: str, lesson: str, step: int) -> Answers:
        board = self.board(code, lesson, step)
        return board[2] if board else _answers_from({}, lesson, step, 0)

    def board(self, code: str, lesson: str, step: int) -> Optional[tuple[ClassState, Pace, Answers]]:
        with self._lock:
            entry = self._live(code)
            if entry is None:
                return None
            pace = _pace_from(self._hashes(code)["seen"], self.clock())
            return entry[0], pace, _answers_from(self._hashes(code)["counts"], lesson, step, pace.students)

    def reveal(self, code: str, token: str, lesson: str, step: int) -> bool:
        with self._lock:
            if self._teacher(code, str(token)) is None:
                return False
            self._hashes(code)["counts"][_field(lesson, step) + "|revealed"] = "1"
            return True

    def revealed(self, code: str, lesson: str, step: int) -> bool:
        with self._lock:
            return self._live(code) is not None and _field(lesson, step) + "|revealed" in self._hashes(code)["counts"]

    def rows(self, code: str, token: str) -> Optional[list[dict]]:
        with self._lock:
            if self._teacher(code, str(token)) is None:
                return None
            return _rows_from(self._hashes(code)["answers"], self._hashes(code)["names"])


def _incr(table: dict, key: str) -> int:
    table[key] = str(int(table.get(key, 0)) + 1)
    return int(table[key])


class RedisStore:
    """Classes in Redis, shared by every app server: one key per class, expiring `ttl` seconds after its
    last move. The entry holds the SHA-256 of the teacher's token, not the token. A move is a
    compare-and-set: WATCH the key, compare the digest in constant time here, then write in MULTI/EXEC,
    which Redis refuses if another server wrote the key meanwhile (then it is tried again).

    Redis not answering (down, refusing, paused) raises StoreDown after at most REDIS_TIMEOUT (no
    retries), and for REDIS_REST seconds after that every call fails at once: a class's students poll
    every second, and each would otherwise hold a thread for the whole time-out."""

    def __init__(self, url: str, ttl: int = DEFAULT_TTL, client=None, clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time):
        import redis  # only needed when a Redis URL is configured
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        self.ttl, self.clock, self.wall = int(ttl), clock, wall  # wall: the time students' presence is stamped with
        self._errors = (redis.RedisError, OSError)
        self._rest_until = 0.0
        self.client = client or redis.Redis.from_url(
            url, socket_timeout=REDIS_TIMEOUT, socket_connect_timeout=REDIS_TIMEOUT,
            retry=Retry(NoBackoff(), 0))  # redis-py 6 retries 3 times with back-off by default: 1-4 s a call
        self._presence = self.client.register_script(PRESENCE_LUA)
        self._answer = self.client.register_script(ANSWER_LUA)

    def _call(self, fn, *args, **kwargs):
        """Run one Redis call; its failure becomes StoreDown, and the next calls rest a moment."""
        if self.clock() < self._rest_until:
            raise StoreDown("the class store did not answer a moment ago")
        try:
            return fn(*args, **kwargs)
        except self._errors as exc:
            self._rest_until = self.clock() + REDIS_REST
            raise StoreDown(f"the class store did not answer ({type(exc).__name__})") from exc

    @staticmethod
    def _entry(state: ClassState, digest: str) -> str:
        return json.dumps({**asdict(state), "token_sha256": digest})

    @staticmethod
    def _digest_of(entry: dict) -> str:
        if "token_sha256" in entry:
            return str(entry["token_sha256"])
        return token_digest(entry.get("token", ""))  # a class opened before digests (gone within `ttl`)

    def open(self, lesson: str, step: int) -> tuple[ClassState, str]:
        token = secrets.token_urlsafe(16)
        while True:
            state = ClassState(new_code(), lesson, int(step), time.time())
            if self._call(self.client.set, REDIS_PREFIX + state.code, self._entry(state, token_digest(token)),
                          ex=self.ttl, nx=True):
                return state, token

    def get(self, code: str) -> Optional[ClassState]:
        raw = self._call(self.client.get, REDIS_PREFIX + code)
        return None if raw is None else self._state(raw)

    def _swap(self, code: str, token: str, new: Optional[ClassState]) -> bool:
        """Replace (or, with `new` None, delete) the class when `token` is its teacher's."""
        key = REDIS_PREFIX + code

        def txn(pipe) -> bool:
            raw = pipe.get(key)
            ok = raw is not None and token_matches(self._digest_of(json.loads(raw)), token)
            pipe.multi()
            if ok and new is None:
                pipe.delete(key, *self._parts(code))  # the students' presence and answers end with the class
            elif ok:
                pipe.set(key, self._entry(new, token_digest(token)), ex=self.ttl)
                for part in self._parts(code):
                    pipe.expire(part, self.ttl)
            return ok

        return bool(self._call(self.client.transaction, txn, key, value_from_callable=True))

    def move(self, code: str, token: str, lesson: str, step: int) -> bool:
        return self._swap(code, str(token), ClassState(code, lesson, int(step), time.time()))

    def close(self, code: str, token: str) -> bool:
        return self._swap(code, str(token), None)

    def restore(self, state: ClassState, token: str) -> bool:
        return bool(self._call(self.client.set, REDIS_PREFIX + state.code,
                               self._entry(state, token_digest(token)), ex=self.ttl, nx=True))

    @staticmethod
    def _parts(code: str) -> list[str]:
        """The keys of a class's presence, nicknames, answers and counts (PARTS)."""
        return [f"{REDIS_PREFIX}{code}:{part}" for part in PARTS]

    def _state(self, raw) -> ClassState:
        entry = json.loads(raw)
        return ClassState(entry["code"], entry["lesson"], int(entry["step"]), float(entry["moved_at"]))

    def claim(self, code: str, token: str) -> Optional[ClassState]:
        raw = self._call(self.client.get, REDIS_PREFIX + code)
        if raw is None or not token_matches(self._digest_of(json.loads(raw)), str(token)):
            return None
        return self._state(raw)

    def _report(self, code: str, sid: str, seen: str, reveal_field: str, name: Optional[str]):
        """Run PRESENCE_LUA: (class entry, revealed, recorded) or None when there is no class."""
        keys = [REDIS_PREFIX + code, *self._parts(code)]
        out = self._call(self._presence, keys=[keys[0], keys[1], keys[2], keys[4]],
                         args=[sid, seen, MAX_STUDENTS, reveal_field, int(name is not None), name or ""])
        return None if out is None else (out[0], bool(out[1]), bool(out[2]))

    def join(self, code: str, student_id: str, nickname: str = "") -> bool:
        state = self.get(code)
        if state is None:
            return False
        sid = _student(student_id)
        out = self._report(code, sid, _seen_value(state.lesson, state.step, True, self.wall()),
                           _field(state.lesson, state.step) + "|revealed", clean_nickname(nickname))
        return bool(out and out[2])

    def heartbeat(self, code: str, student_id: str, lesson: str, step: int,
                  following: bool) -> Optional[tuple[ClassState, bool]]:
        out = self._report(code, _student(student_id), _seen_value(lesson, step, following, self.wall()),
                           _field(lesson, step) + "|revealed", None)
        return None if out is None else (self._state(out[0]), out[1])

    def answer(self, code: str, student_id: str, lesson: str, step: int, answer_text: str, right: bool,
               group: str = "") -> bool:
        sid, where = _student(student_id), _field(lesson, step)
        text = str(answer_text)[:MAX_ANSWER_CHARS]
        keys = [REDIS_PREFIX + code, *self._parts(code)]
        return bool(self._call(self._answer, keys=[keys[0], keys[1], keys[3], keys[4]],
                               args=[where, sid, int(bool(right)), text, str(group or text)[:MAX_ANSWER_CHARS],
                                     MAX_WRONG_TRIES]))

    def _read(self, code: str, *parts: str) -> list:
        """The class entry and the named parts (HGETALL each), in one round trip."""
        pipe = self.client.pipeline(transaction=False)
        pipe.get(REDIS_PREFIX + code)
        for part in parts:
            pipe.hgetall(f"{REDIS_PREFIX}{code}:{part}")
        return self._call(pipe.execute)

    def pace(self, code: str) -> Pace:
        raw, seen = self._read(code, "seen")
        return _pace_from(seen if raw is not None else {}, self.wall())

    def answers(self, code: str, lesson: str, step: int) -> Answers:
        board = self.board(code, lesson, step)
        return board[2] if board else _answers_from({}, lesson, step, 0)

    def board(self, code: str, lesson: str, step: int) -> Optional[tuple[ClassState, Pace, Answers]]:
        raw, seen, counts = self._read(code, "seen", "counts")
        if raw is None:
            return None
        pace = _pace_from(seen, self.wall())
        return self._state(raw), pace, _answers_from(counts, lesson, step, pace.students)

    def reveal(self, code: str, token: str, lesson: str, step: int) -> bool:
        key, field = REDIS_PREFIX + code, _field(lesson, step) + "|revealed"
        counts = self._parts(code)[3]

        def txn(pipe) -> bool:
            raw, left = pipe.get(key), pipe.pttl(key)
            ok = raw is not None and left > 0 and token_matches(self._digest_of(json.loads(raw)), str(token))
            pipe.multi()
            if ok:
                pipe.hset(counts, field, 1)
                pipe.pexpire(counts, left)
            return ok

        return bool(self._call(self.client.transaction, txn, key, value_from_callable=True))

    def revealed(self, code: str, lesson: str, step: int) -> bool:
        return bool(self._call(self.client.hexists, self._parts(code)[3], _field(lesson, step) + "|revealed"))

    def rows(self, code: str, token: str) -> Optional[list[dict]]:
        raw, answers, names = self._read(code, "answers", "names")
        if raw is None or not token_matches(self._digest_of(json.loads(raw)), str(token)):
            return None
        return _rows_from(answers, names)

    def tally(self, name: str, window: float) -> int:
        """Count one `name` event in the current `window`-second bucket shared by every server; returns the
        bucket's count, this event included (INCR, then an expiry so a bucket never outlives two windows)."""
        key = self._bucket(name, window)
        pipe = self.client.pipeline()
        pipe.incr(key)
        pipe.expire(key, int(2 * window) + 1)
        return int(self._call(pipe.execute)[0])

    def recent(self, name: str, window: float) -> tuple[int, float]:
        """(Events of `name` in the current bucket, seconds until the next bucket starts), across every server."""
        raw = self._call(self.client.get, self._bucket(name, window))
        return int(raw or 0), window - time.time() % window

    @staticmethod
    def _bucket(name: str, window: float) -> str:
        return f"{REDIS_PREFIX}tally:{name}:{int(time.time() // window)}"


# A student's report, atomic in Redis: the class must exist; a new student is counted only while the class has
# room (MAX_STUDENTS); the presence (and nickname) keys never outlive the class key.
# KEYS: class, seen, names, counts. ARGV: student id, seen value, max students, revealed field, set name?, name.
# Returns nil (no class) or {class entry, revealed 0/1, recorded 0/1}.
PRESENCE_LUA = """
local raw = redis.call('GET', KEYS[1])
if not raw then return false end
local ttl = redis.call('PTTL', KEYS[1])
local recorded = 0
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1 or redis.call('HLEN', KEYS[2]) < tonumber(ARGV[3]) then
  redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
  if ARGV[5] == '1' then
    if ARGV[6] == '' then redis.call('HDEL', KEYS[3], ARGV[1]) else redis.call('HSET', KEYS[3], ARGV[1], ARGV[6]) end
  end
  if ttl > 0 then
    redis.call('PEXPIRE', KEYS[2], ttl)
    if redis.call('EXISTS', KEYS[3]) == 1 then redis.call('PEXPIRE', KEYS[3], ttl) end
  end
  recorded = 1
end
return {raw, redis.call('HEXISTS', KEYS[4], ARGV[4]), recorded}
"""

# One try at a step's check, atomic in Redis (no read-modify-write in Python): the first answer of a student on
# a step is kept (HSETNX) and decides "right on the first try"; every try is counted; a wrong answer counts once
# per student among the common wrong answers (up to MAX_WRONG_TRIES tries). Only a student the class has seen.
# KEYS: class, seen, answers, counts. ARGV: "lesson|step", student id, right 0/1, answer, its bin, max wrong tries.
ANSWER_LUA = """
local ttl = redis.call('PTTL', KEYS[1])
if ttl <= 0 or redis.call('HEXISTS', KEYS[2], ARGV[2]) == 0 then return 0 end
local me = ARGV[1] .. '|' .. ARGV[2]
if redis.call('HSETNX', KEYS[3], me, ARGV[3] .. '|' .. ARGV[4]) == 1 then
  redis.call('HINCRBY', KEYS[4], ARGV[1] .. '|answered', 1)
  if ARGV[3] == '1' then redis.call('HINCRBY', KEYS[4], ARGV[1] .. '|right', 1) end
end
local tries = redis.call('HINCRBY', KEYS[3], me .. '|tries', 1)
if ARGV[3] == '0' and tries <= tonumber(ARGV[6]) and redis.call('HSETNX', KEYS[3], me .. '|w|' .. ARGV[5], 1) == 1 then
  redis.call('HINCRBY', KEYS[4], ARGV[1] .. '|wrong|' .. ARGV[5], 1)
end
redis.call('PEXPIRE', KEYS[3], ttl)
redis.call('PEXPIRE', KEYS[4], ttl)
return 1
"""


def store_for(redis_url: str = "", ttl: int = DEFAULT_TTL) -> ClassStore:
    """The store the configuration asks for: Redis when a URL is given, else this process."""
    return RedisStore(redis_url, ttl) if redis_url.strip() else MemoryStore(ttl)
