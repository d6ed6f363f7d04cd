"""Classes: a teacher opens one, students join with its short code and follow the teacher's lesson step.

The class state is tiny (which lesson, which step, when it last moved) and lives in a store: in this
process by default, or in Redis when a URL is configured, so that several app servers behind a load
balancer share their classes. Only the holder of the teacher's token (kept in the teacher's own
session) can move a class; a class nobody moved for `ttl` seconds expires.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from dataclasses import asdict, dataclass
from typing import Callable, Optional, Protocol

CODE_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # no 0/O or 1/I: read aloud and typed by a class
CODE_LENGTH = 6
DEFAULT_TTL = 4 * 3600  # seconds a class lives after its last move
REDIS_PREFIX = "glassbox:class:"


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


class ClassStore(Protocol):
    """What the app needs from a store; MemoryStore and RedisStore pass the same tests."""

    def open(self, lesson: str, step: int) -> tuple[ClassState, str]:
        """A new class at this step, and the teacher's secret token."""

    def get(self, code: str) -> Optional[ClassState]:
        """The class with this code, or None when there is none (or it expired)."""

    def move(self, code: str, token: str, lesson: str, step: int) -> bool:
        """Move the class (teacher only: False for a wrong token or a class that is gone)."""

    def close(self, code: str, token: str) -> bool:
        """End the class (teacher only)."""


class MemoryStore:
    """Classes held in this process (one server); thread-safe, since every session runs in its own thread."""

    def __init__(self, ttl: float = DEFAULT_TTL, clock: Callable[[], float] = time.time):
        self.ttl, self.clock = ttl, clock
        self._lock = threading.Lock()
        self._classes: dict[str, tuple[ClassState, str, float]] = {}  # code -> (state, token, expires at)

    def _live(self, code: str):
        entry = self._classes.get(code)
        if entry is not None and entry[2] <= self.clock():
            del self._classes[code]
            return None
        return entry

    def open(self, lesson: str, step: int) -> tuple[ClassState, str]:
        token = secrets.token_urlsafe(16)
        with self._lock:
            for expired in [c for c, e in self._classes.items() if e[2] <= self.clock()]:
                del self._classes[expired]
            code = new_code()
            while code in self._classes:
                code = new_code()
            state = ClassState(code, lesson, int(step), self.clock())
            self._classes[code] = (state, token, self.clock() + self.ttl)
        return state, token

    def get(self, code: str) -> Optional[ClassState]:
        with self._lock:
            entry = self._live(code)
            return entry[0] if entry else None

    def move(self, code: str, token: str, lesson: str, step: int) -> bool:
        with self._lock:
            entry = self._live(code)
            if entry is None or not secrets.compare_digest(entry[1], str(token)):
                return False
            state = ClassState(code, lesson, int(step), self.clock())
            self._classes[code] = (state, entry[1], self.clock() + self.ttl)
            return True

    def close(self, code: str, token: str) -> bool:
        with self._lock:
            entry = self._live(code)
            if entry is None or not secrets.compare_digest(entry[1], str(token)):
                return False
            del self._classes[code]
            return True


class RedisStore:
    """Classes in Redis, shared by every app server: one key per class, expiring `ttl` seconds after
    its last move. The move is a compare-and-set on the teacher's token (a small Lua script, run by
    Redis itself), so two servers never interleave a check and a write."""

    _MOVE = """
local raw = redis.call('GET', KEYS[1])
if not raw then return 0 end
local entry = cjson.decode(raw)
if entry['token'] ~= ARGV[1] then return 0 end
if ARGV[2] == '' then redis.call('DEL', KEYS[1]) return 1 end
redis.call('SET', KEYS[1], ARGV[2], 'EX', ARGV[3])
return 1
"""

    def __init__(self, url: str, ttl: int = DEFAULT_TTL, client=None):
        import redis  # only needed when a Redis URL is configured

        self.ttl = int(ttl)
        self.client = client or redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
        self._move = self.client.register_script(self._MOVE)

    def _entry(self, state: ClassState, token: str) -> str:
        return json.dumps({**asdict(state), "token": token})

    def open(self, lesson: str, step: int) -> tuple[ClassState, str]:
        token = secrets.token_urlsafe(16)
        while True:
            state = ClassState(new_code(), lesson, int(step), time.time())
            if self.client.set(REDIS_PREFIX + state.code, self._entry(state, token), ex=self.ttl, nx=True):
                return state, token

    def get(self, code: str) -> Optional[ClassState]:
        raw = self.client.get(REDIS_PREFIX + code)
        if raw is None:
            return None
        entry = json.loads(raw)
        return ClassState(entry["code"], entry["lesson"], int(entry["step"]), float(entry["moved_at"]))

    def move(self, code: str, token: str, lesson: str, step: int) -> bool:
        state = ClassState(code, lesson, int(step), time.time())
        return bool(self._move(keys=[REDIS_PREFIX + code], args=[str(token), self._entry(state, str(token)), self.ttl]))

    def close(self, code: str, token: str) -> bool:
        return bool(self._move(keys=[REDIS_PREFIX + code], args=[str(token), "", self.ttl]))


def store_for(redis_url: str = "", ttl: int = DEFAULT_TTL) -> ClassStore:
    """The store the configuration asks for: Redis when a URL is given, else this process."""
    return RedisStore(redis_url, ttl) if redis_url.strip() else MemoryStore(ttl)
