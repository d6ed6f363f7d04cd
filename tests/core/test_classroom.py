"""Class stores: the in-process one and Redis (a real redis-server started here on 127.0.0.1) pass the
same tests: codes join, only the teacher's token moves a class, idle classes expire. Issue 36: the store
keeps the token's digest only; Redis stopped, paused or restarted is StoreDown, never a driver's exception;
the limits count per key and in all; GLASSBOX_CLASS_TTL is bounded."""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import socket
import subprocess
import time

import pytest

from core import classroom as K


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _redis_server_binary():
    found = shutil.which("redis-server")
    if found is None:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run(["apt-get", "install", "-y", "-qq", "redis-server"], check=True, timeout=300,
                           capture_output=True)
        found = shutil.which("redis-server")
    return found


class RedisServer:
    """A real redis-server on 127.0.0.1 that a test may stop, pause (SIGSTOP), resume and start again on
    the same port. Stopped by PID."""

    def __init__(self, binary: str):
        self.binary, self.port, self.proc = binary, _free_port(), None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> "RedisServer":
        import redis
        self.proc = subprocess.Popen([self.binary, "--bind", "127.0.0.1", "--port", str(self.port), "--save", "",
                                      "--appendonly", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = redis.Redis(host="127.0.0.1", port=self.port)
        for _ in range(200):
            with contextlib.suppress(redis.ConnectionError):
                if client.ping():
                    break
            time.sleep(0.05)
        client.close()
        return self

    def pause(self) -> None:
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.proc.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGCONT)
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None


def redis_or_skip() -> RedisServer:
    """A RedisServer (not started), or skip when redis-server or the client is missing."""
    binary = _redis_server_binary()
    if binary is None:
        pytest.skip("redis-server is not installed and `apt-get install -y redis-server` did not work here")
    pytest.importorskip("redis", reason="the redis client is in requirements.txt")
    return RedisServer(binary)


@pytest.fixture(scope="module")
def redis_url():
    server = redis_or_skip().start()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture
def redis_server():
    """A Redis of this test's own, which it may stop, pause and restart."""
    server = redis_or_skip().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(params=["memory", "redis"])
def store(request):
    if request.param == "memory":
        return K.MemoryStore(ttl=60)
    return K.RedisStore(request.getfixturevalue("redis_url"), ttl=60)


def test_a_class_opens_with_a_short_code_and_can_be_joined(store):
    state, token = store.open("compact-primer", 1)
    assert K.normalise_code(state.code.lower()) == state.code and len(token) >= 16
    assert store.get(state.code) == state
    assert store.get(K.new_code()) is None or store.get(K.new_code()).code != state.code


def test_only_the_teachers_token_moves_the_class(store):
    state, token = store.open("compact-primer", 1)
    assert not store.move(state.code, "a student's guess", "compact-primer", 5)
    assert store.get(state.code).step == 1
    assert store.move(state.code, token, "compact-primer", 3)
    moved = store.get(state.code)
    assert (moved.lesson, moved.step) == ("compact-primer", 3) and moved.moved_at >= state.moved_at
    assert not store.close(state.code, "nope") and store.get(state.code) is not None
    assert store.close(state.code, token) and store.get(state.code) is None


def test_two_classes_are_independent(store):
    a, ta = store.open("compact-primer", 1)
    b, tb = store.open("why-transformers", 2)
    assert a.code != b.code
    assert not store.move(b.code, ta, "why-transformers", 7)  # one teacher's token does not move another class
    assert store.move(a.code, ta, "compact-primer", 4)
    assert store.get(b.code).step == 2


def test_an_idle_class_expires_in_memory():
    clock = Clock()
    store = K.MemoryStore(ttl=3600, clock=clock)
    state, token = store.open("compact-primer", 1)
    clock.now += 3000
    assert store.move(state.code, token, "compact-primer", 2)  # a move keeps it alive
    clock.now += 3000
    assert store.get(state.code) is not None
    clock.now += 700
    assert store.get(state.code) is None and not store.move(state.code, token, "compact-primer", 3)


def test_an_idle_class_expires_in_redis(redis_url):
    store = K.RedisStore(redis_url, ttl=1)
    state, token = store.open("compact-primer", 1)
    assert store.get(state.code) is not None
    deadline = time.monotonic() + 10
    while store.get(state.code) is not None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert store.get(state.code) is None


def test_codes_typed_by_students_are_normalised_or_refused():
    assert K.normalise_code(" k7px 2m ") == "K7PX2M"
    for bad in ("", "K7PX2", "K7PX2MM", "K0PX2M", "<script>", "x" * 5000):
        assert K.normalise_code(bad) is None


# --- issue 36: hardening --------------------------------------------------------------------------------


def test_redis_keeps_only_the_digest_of_the_teachers_token(redis_url):
    """Reading Redis gives no token: the entry holds its SHA-256, and moving still needs the token itself."""
    import redis
    store = K.RedisStore(redis_url, ttl=60)
    state, token = store.open("compact-primer", 1)
    raw = redis.Redis.from_url(redis_url).get(K.REDIS_PREFIX + state.code).decode()
    assert token not in raw
    entry = json.loads(raw)
    assert entry["token_sha256"] == K.token_digest(token) and "token" not in entry
    assert not store.move(state.code, entry["token_sha256"], "compact-primer", 2)  # the digest is no token
    assert store.move(state.code, token, "compact-primer", 2) and store.get(state.code).step == 2
    assert token not in redis.Redis.from_url(redis_url).get(K.REDIS_PREFIX + state.code).decode()


def test_memory_keeps_only_the_digest_too():
    store = K.MemoryStore(ttl=60)
    state, token = store.open("compact-primer", 1)
    assert token not in repr(store._classes) and K.token_digest(token) in repr(store._classes)


def test_a_redis_that_stops_pauses_or_restarts_is_store_down_and_then_answers_again(redis_server):
    """Redis stopped, paused (SIGSTOP) and started again: every call raises StoreDown (never a redis
    exception) within about the time-out, the calls right after a failure fail at once, and the store
    answers again when Redis does; a teacher's class lost by the restart can be put back."""
    clock = Clock()
    store = K.RedisStore(redis_server.url, ttl=60, clock=clock)
    state, token = store.open("compact-primer", 1)

    redis_server.pause()
    started = time.monotonic()
    with pytest.raises(K.StoreDown):
        store.get(state.code)
    paused_for = time.monotonic() - started
    assert paused_for < K.REDIS_TIMEOUT + 1.5, paused_for  # no retries with back-off (redis-py 6: 3 of them)
    started = time.monotonic()
    with pytest.raises(K.StoreDown):
        store.move(state.code, token, "compact-primer", 2)  # resting: fails without waiting again
    assert time.monotonic() - started < 0.2
    redis_server.resume()
    clock.now += K.REDIS_REST + 0.1
    assert store.get(state.code) == state  # Redis answers again: the class is where it was

    redis_server.stop()
    clock.now += K.REDIS_REST + 0.1
    for call in (lambda: store.get(state.code), lambda: store.open("compact-primer", 1),
                 lambda: store.move(state.code, token, "compact-primer", 2), lambda: store.close(state.code, token)):
        with pytest.raises(K.StoreDown):
            call()
        clock.now += K.REDIS_REST + 0.1

    redis_server.start()  # the same port, empty: the class is gone until its teacher puts it back
    assert store.get(state.code) is None and not store.move(state.code, token, "compact-primer", 2)
    assert store.restore(K.ClassState(state.code, "compact-primer", 2, time.time()), token)
    assert store.get(state.code).step == 2 and store.move(state.code, token, "compact-primer", 3)
    assert not store.restore(state, "another teacher")  # a code in use is not taken over


def test_restore_puts_a_class_back_only_where_its_code_is_free():
    store = K.MemoryStore(ttl=60)
    state, token = store.open("compact-primer", 1)
    assert not store.restore(state, "x")
    assert store.close(state.code, token) and store.restore(state, token)
    assert store.move(state.code, token, "compact-primer", 4)


def test_an_in_process_store_holds_a_bounded_number_of_classes():
    clock = Clock()
    store = K.MemoryStore(ttl=60, clock=clock, max_classes=3)
    for _ in range(3):
        store.open("compact-primer", 1)
    with pytest.raises(K.ClassLimit):
        store.open("compact-primer", 1)
    clock.now += 61  # expired classes make room
    assert store.open("compact-primer", 1)[0].code


def test_a_throttle_limits_each_key_and_the_total_in_its_window():
    clock = Clock()
    limit = K.Throttle(per_key=2, total=3, window=60, clock=clock)
    assert limit.wait("a") == 0
    limit.record("a")
    clock.now += 10
    limit.record("a")
    assert limit.wait("a") == pytest.approx(50) and limit.wait("b") == 0  # a waits until its first ages out
    limit.record("b")
    assert limit.wait("c") == pytest.approx(50)  # three in all: everyone waits
    clock.now += 50
    assert limit.wait("a") == 0 and limit.wait("c") == 0
    clock.now += 61
    assert limit.wait("a") == 0 and not limit._by_key  # aged-out keys leave nothing behind


def test_the_class_lifetime_setting_is_bounded_with_a_message():
    assert K.parse_ttl(None) == (K.DEFAULT_TTL, None) and K.parse_ttl("3600") == (3600, None)
    ttl, problem = K.parse_ttl("99999999999999999999")
    assert ttl == K.MAX_TTL and "outside 60..604800" in problem
    ttl, problem = K.parse_ttl("5")
    assert ttl == K.MIN_TTL and problem
    ttl, problem = K.parse_ttl("four hours")
    assert ttl == K.DEFAULT_TTL and "not a whole number" in problem


def test_the_longest_lifetime_opens_a_class_in_redis(redis_url):
    """GLASSBOX_CLASS_TTL=99999999999999999999 made every Redis class fail to open ("invalid expire time");
    the bounded value opens one."""
    store = K.RedisStore(redis_url, ttl=K.parse_ttl("99999999999999999999")[0])
    state, token = store.open("compact-primer", 1)
    assert store.get(state.code) == state and store.close(state.code, token)
