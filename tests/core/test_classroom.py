"""Class stores: the in-process one and Redis (a real redis-server started here on 127.0.0.1) pass the
same tests: codes join, only the teacher's token moves a class, idle classes expire."""

from __future__ import annotations

import contextlib
import shutil
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


@pytest.fixture(scope="module")
def redis_url():
    binary = _redis_server_binary()
    if binary is None:
        pytest.skip("redis-server is not installed and `apt-get install -y redis-server` did not work here")
    pytest.importorskip("redis", reason="the redis client is in requirements.txt")
    port = _free_port()
    proc = subprocess.Popen([binary, "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        import redis
        client = redis.Redis(host="127.0.0.1", port=port)
        for _ in range(100):
            with contextlib.suppress(redis.ConnectionError):
                if client.ping():
                    break
            time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


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
