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


# --- issue 40: what the teacher sees of the class ---------------------------------------------------------------

LESSON = "compact-primer"


def _students(n: int) -> list[str]:
    return [f"{i:016x}" for i in range(1, n + 1)]


def _twin(store):
    """A second server on the same store: another RedisStore on the same Redis (a memory store is one server)."""
    if isinstance(store, K.RedisStore):
        return K.RedisStore(f"redis://127.0.0.1:{store.client.connection_pool.connection_kwargs['port']}/0", ttl=60)
    return store


def test_thirty_students_answering_in_the_same_second_are_counted_exactly(store):
    """30 threads (half of them through a second server) answer a number check at once: 12 right, 18 wrong in
    four bins (0.31 and 0.309 share the bin of tolerance 0.01), and 6 of the wrong ones try again and get it
    right. Every count is exact: no answer lost, "right on the first try" decided by the first answer only."""
    import threading

    state, token = store.open(LESSON, 2)
    other = _twin(store)
    ids = _students(30)
    for sid in ids:
        assert store.join(state.code, sid)
    wrong = ["0.31", "0.309", "0.2", "0.2", "0.2", "7", "0.2", "0.31", "0.2", "7", "0.309", "0.2", "-3", "0.2",
             "0.31", "7", "0.2", "0.31"]  # bins: 0.2 x8, 0.31 x6, 7 x3, -3 x1
    barrier = threading.Barrier(30)
    failures = []

    def student(i: int) -> None:
        try:
            here = store if i % 2 else other
            barrier.wait()
            if i < 12:
                assert here.answer(state.code, ids[i], LESSON, 2, "0.5005", True)
            else:
                text = wrong[i - 12]
                assert here.answer(state.code, ids[i], LESSON, 2, text, False, K.answer_bin(float(text), 0.01))
                if i < 18:
                    assert here.answer(state.code, ids[i], LESSON, 2, "0.5", True)
        except Exception as exc:  # noqa: BLE001 - reported below
            failures.append(exc)

    threads = [threading.Thread(target=student, args=(i,)) for i in range(30)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not failures
    for reader in (store, other):
        seen = reader.answers(state.code, LESSON, 2)
        assert (seen.answered, seen.right_first, seen.students) == (30, 12, 30)
        assert seen.wrong == (("0.2", 8), ("0.31", 6), ("7", 3))
        assert not seen.revealed
    rows = store.rows(state.code, token)
    assert len(rows) == 30 and sum(r["right on first try"] for r in rows) == 12
    assert sorted(r["tries"] for r in rows) == [1] * 24 + [2] * 6
    assert store.answers(state.code, LESSON, 3).answered == 0  # another step has its own counts


def test_a_students_repeated_wrong_answer_counts_once_and_only_joined_students_count(store):
    state, _ = store.open(LESSON, 1)
    sid, stranger = _students(2)
    assert store.join(state.code, sid)
    for _ in range(4):
        store.answer(state.code, sid, LESSON, 1, "L0H1", False)
    store.answer(state.code, sid, LESSON, 1, "L1H0", False)
    assert not store.answer(state.code, stranger, LESSON, 1, "L0H1", False)  # never joined: not counted
    assert not store.answer("ZZZZZZ", sid, LESSON, 1, "L0H1", False)
    seen = store.answers(state.code, LESSON, 1)
    assert (seen.answered, seen.right_first) == (1, 0)
    assert seen.wrong == (("L0H1", 1), ("L1H0", 1))
    with pytest.raises(ValueError):
        store.answer(state.code, "not|an|id", LESSON, 1, "x", False)
    with pytest.raises(ValueError):
        store.answer(state.code, sid, "bad|lesson", 1, "x", False)


def test_a_student_cannot_move_reveal_close_or_read_the_answers(store):
    """Everything a student's session holds (the code, its own id) is not the token: each teacher call refuses."""
    state, token = store.open(LESSON, 1)
    sid = _students(1)[0]
    store.join(state.code, sid)
    for guess in ("", sid, state.code, K.token_digest(token)):
        assert not store.move(state.code, guess, LESSON, 5)
        assert not store.reveal(state.code, guess, LESSON, 1)
        assert store.rows(state.code, guess) is None
        assert store.claim(state.code, guess) is None
        assert not store.close(state.code, guess)
    assert store.get(state.code).step == 1 and not store.revealed(state.code, LESSON, 1)
    assert store.claim(state.code, token) == store.get(state.code)  # the teacher link's token claims it
    assert _twin(store).reveal(state.code, token, LESSON, 1)  # from any server
    assert store.revealed(state.code, LESSON, 1) and not store.revealed(state.code, LESSON, 2)
    assert store.heartbeat(state.code, sid, LESSON, 1, True)[1] is True  # the student's poll learns it


def test_pace_counts_students_per_step_and_forgets_those_gone():
    clock = Clock()
    store = K.MemoryStore(ttl=600, clock=clock)
    _pace_test(store, clock)


def test_pace_in_redis_is_the_same(redis_url):
    clock = Clock()
    clock.now = time.time()
    _pace_test(K.RedisStore(redis_url, ttl=600, wall=clock), clock)


def _pace_test(store, clock: Clock) -> None:
    state, token = store.open(LESSON, 3)
    ids = _students(6)
    for sid in ids:
        assert store.join(state.code, sid)
    pace = store.pace(state.code)
    assert (pace.students, pace.on(LESSON, 3), pace.behind(LESSON, 3), pace.exploring) == (6, 6, 0, 0)
    store.heartbeat(state.code, ids[0], LESSON, 2, True)  # not yet moved on
    store.heartbeat(state.code, ids[1], LESSON, 7, False)  # exploring on their own
    store.heartbeat(state.code, ids[2], "why-transformers", 1, False)
    pace = store.pace(state.code)
    assert (pace.students, pace.on(LESSON, 3), pace.behind(LESSON, 3), pace.exploring) == (6, 3, 1, 2)
    clock.now += K.PRESENT_SECONDS - 1
    for sid in ids[:4]:
        store.heartbeat(state.code, sid, LESSON, 3, True)
    clock.now += 2  # the two who stopped reporting have left
    pace = store.pace(state.code)
    assert (pace.students, pace.on(LESSON, 3)) == (4, 4)
    assert store.board(state.code, LESSON, 3)[1] == pace
    assert store.pace("ZZZZZZ").students == 0 and store.heartbeat("ZZZZZZ", ids[0], LESSON, 3, True) is None


def test_a_class_records_a_bounded_number_of_students(store, monkeypatch):
    monkeypatch.setattr(K, "MAX_STUDENTS", 3)
    state, _ = store.open(LESSON, 1)
    ids = _students(4)
    assert [store.join(state.code, sid) for sid in ids] == [True, True, True, False]
    assert not store.answer(state.code, ids[3], LESSON, 1, "x", True)
    assert store.heartbeat(state.code, ids[3], LESSON, 1, True)[0].code == state.code  # still follows the class
    assert store.pace(state.code).students == 3


def test_nicknames_are_bounded_and_shown_in_the_rows(store):
    state, token = store.open(LESSON, 1)
    a, b = _students(2)
    store.join(state.code, a, "  Ada\u0000 <b>Lovelace</b> of the long name ")
    store.join(state.code, b)
    store.answer(state.code, a, LESSON, 1, "=HYPERLINK(1)", False)
    store.answer(state.code, b, LESSON, 1, "L0H1", True)
    rows = store.rows(state.code, token)
    names = sorted(r["student"] for r in rows)
    assert names == ["Ada <b>Lovelace</b>", f"anonymous {b[:6]}"]
    assert len(K.clean_nickname("x" * 50)) == K.MAX_NICKNAME
    text = K.answers_csv(rows)
    assert "'=HYPERLINK(1)" in text and "\n=HYPERLINK" not in text and ",=HYPERLINK" not in text


def test_the_students_data_ends_with_the_class(redis_url):
    """Closing ends presence, nicknames and answers; in Redis no part outlives the class key, and a move keeps
    them alive as long as the class."""
    import redis

    store = K.RedisStore(redis_url, ttl=60)
    state, token = store.open(LESSON, 1)
    sid = _students(1)[0]
    store.join(state.code, sid, "Ada")
    store.answer(state.code, sid, LESSON, 1, "x", False)
    store.reveal(state.code, token, LESSON, 1)
    raw = redis.Redis.from_url(redis_url)
    parts = store._parts(state.code)
    assert all(0 < raw.pttl(p) <= raw.pttl(K.REDIS_PREFIX + state.code) + 5 for p in parts)
    assert store.move(state.code, token, LESSON, 2)
    assert all(raw.pttl(p) > 59_000 for p in parts)
    assert store.close(state.code, token)
    assert not any(raw.exists(p) for p in parts)
    assert store.rows(state.code, token) is None and store.board(state.code, LESSON, 1) is None


def test_in_memory_the_students_data_expires_with_the_class():
    clock = Clock()
    store = K.MemoryStore(ttl=60, clock=clock)
    state, token = store.open(LESSON, 1)
    sid = _students(1)[0]
    store.join(state.code, sid, "Ada")
    store.answer(state.code, sid, LESSON, 1, "x", True)
    clock.now += 61
    assert store.get(state.code) is None and not store._parts and store.rows(state.code, token) is None


def test_numbers_are_binned_by_the_checks_tolerance_or_two_digits():
    assert K.answer_bin(0.309, 0.01) == K.answer_bin(0.31, 0.01) == "0.31"
    assert K.answer_bin(0.2, 0.01) == "0.2" and K.answer_bin(-0.001, 0.01) == "0"
    assert K.answer_bin(1234.5) == "1200" and K.answer_bin(0.0456) == "0.046"
    assert K.answer_bin(12, 5) == "10" and K.answer_bin(float("nan")) == "not a number"
