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
"""

from __future__ import annotations

import collections
import hashlib
import json
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


class MemoryStore:
    """Classes held in this process (one server); thread-safe, since every session runs in its own thread."""

    def __init__(self, ttl: float = DEFAULT_TTL, clock: Callable[[], float] = time.time,
                 max_classes: int = MAX_CLASSES):
        self.ttl, self.clock, self.max_classes = ttl, clock, int(max_classes)
        self._lock = threading.Lock()
        self._classes: dict[str, tuple[ClassState, str, float]] = {}  # code -> (state, token digest, expires at)

    def _live(self, code: str):
        entry = self._classes.get(code)
        if entry is not None and entry[2] <= self.clock():
            del self._classes[code]
            return None
        return entry

    def _drop_expired(self) -> None:
        for expired in [c for c, e in self._classes.items() if e[2] <= self.clock()]:
            del self._classes[expired]

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
            del self._classes[code]
            return True

    def restore(self, state: ClassState, token: str) -> bool:
        with self._lock:
            if self._live(state.code) is not None:
                return False
            self._classes[state.code] = (state, token_digest(token), self.clock() + self.ttl)
            return True


class RedisStore:
    """Classes in Redis, shared by every app server: one key per class, expiring `ttl` seconds after its
    last move. The entry holds the SHA-256 of the teacher's token, not the token. A move is a
    compare-and-set: WATCH the key, compare the digest in constant time here, then write in MULTI/EXEC,
    which Redis refuses if another server wrote the key meanwhile (then it is tried again).

    Redis not answering (down, refusing, paused) raises StoreDown after at most REDIS_TIMEOUT (no
    retries), and for REDIS_REST seconds after that every call fails at once: a class's students poll
    every second, and each would otherwise hold a thread for the whole time-out."""

    def __init__(self, url: str, ttl: int = DEFAULT_TTL, client=None, clock: Callable[[], float] = time.monotonic):
        import redis  # only needed when a Redis URL is configured
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        self.ttl, self.clock = int(ttl), clock
        self._errors = (redis.RedisError, OSError)
        self._rest_until = 0.0
        self.client = client or redis.Redis.from_url(
            url, socket_timeout=REDIS_TIMEOUT, socket_connect_timeout=REDIS_TIMEOUT,
            retry=Retry(NoBackoff(), 0))  # redis-py 6 retries 3 times with back-off by default: 1-4 s a call

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
        if raw is None:
            return None
        entry = json.loads(raw)
        return ClassState(entry["code"], entry["lesson"], int(entry["step"]), float(entry["moved_at"]))

    def _swap(self, code: str, token: str, new: Optional[ClassState]) -> bool:
        """Replace (or, with `new` None, delete) the class when `token` is its teacher's."""
        key = REDIS_PREFIX + code

        def txn(pipe) -> bool:
            raw = pipe.get(key)
            ok = raw is not None and token_matches(self._digest_of(json.loads(raw)), token)
            pipe.multi()
            if ok and new is None:
                pipe.delete(key)
            elif ok:
                pipe.set(key, self._entry(new, token_digest(token)), ex=self.ttl)
            return ok

        return bool(self._call(self.client.transaction, txn, key, value_from_callable=True))

    def move(self, code: str, token: str, lesson: str, step: int) -> bool:
        return self._swap(code, str(token), ClassState(code, lesson, int(step), time.time()))

    def close(self, code: str, token: str) -> bool:
        return self._swap(code, str(token), None)

    def restore(self, state: ClassState, token: str) -> bool:
        return bool(self._call(self.client.set, REDIS_PREFIX + state.code,
                               self._entry(state, token_digest(token)), ex=self.ttl, nx=True))


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


def store_for(redis_url: str = "", ttl: int = DEFAULT_TTL) -> ClassStore:
    """The store the configuration asks for: Redis when a URL is given, else this process."""
    return RedisStore(redis_url, ttl) if redis_url.strip() else MemoryStore(ttl)
