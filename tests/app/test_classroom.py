"""Issue 36, classes: what a third connection, a guesser, a careless setting or a Redis outage can do to a
class, driven through the app (AppTest) as a teacher and students would meet it. The protocol's own
"clear cache" message over a real websocket is tests/e2e/test_classroom_protocol.py."""

from __future__ import annotations

import itertools
import logging
import time

import pytest
import streamlit as st

from core import classroom as K
from core import lessons as L
from tests.app.conftest import app_at, assert_ok
from tests.core.test_classroom import redis_or_skip
from ui.shell import classroom, lessons_bar, lessons_catalog
from ui.shell.text import plain

TEACHER = "glassbox.class.teacher"
# The limits (read this way so that, on code from before them, the tests fail on what the app does)
PER_SESSION = getattr(classroom, "JOIN_FAILS_PER_SESSION", 5)
PER_SERVER = getattr(classroom, "JOIN_FAILS_PER_SERVER", 60)
OPENS_PER_SESSION = getattr(classroom, "OPENS_PER_SESSION", 3)


@pytest.fixture(autouse=True)
def fresh_limits(monkeypatch):
    """Each test starts with the limits at zero (they are per process, like a server's)."""
    if not hasattr(classroom, "JOINS"):
        return  # code from before the limits: the tests below fail on what the app does, not here
    monkeypatch.setattr(classroom, "JOINS", K.Throttle(classroom.JOIN_FAILS_PER_SESSION,
                                                       classroom.JOIN_FAILS_PER_SERVER, classroom.JOIN_WINDOW))
    monkeypatch.setattr(classroom, "REFUSALS_LOGGED", K.Throttle(1, 10, 60.0))
    monkeypatch.setattr(classroom, "OPENS", K.Throttle(classroom.OPENS_PER_SESSION, classroom.OPENS_PER_SERVER,
                                                       classroom.OPEN_WINDOW))


@pytest.fixture
def redis_server(monkeypatch):
    """A real redis-server of this test's own (stop, pause, restart), configured for the app."""
    server = redis_or_skip().start()
    monkeypatch.setenv(classroom.REDIS_URL_ENV, server.url)
    try:
        yield server
    finally:
        server.stop()


def bar_caption(at) -> str:
    return next(c.value for c in at.caption if "step " in c.value and " of " in c.value)


def open_class(lesson: str = "compact-primer", start: bool = True):
    """A teacher's session with a class open on `lesson` (and, with `start`, its lesson started from the join
    screen); returns (AppTest, code)."""
    teacher = app_at("pages/lessons.py")
    teacher.selectbox(key="lessons.class_lesson").set_value(lesson).run()
    teacher.button(key="class_open").click().run()
    assert_ok(teacher)
    if start and TEACHER in teacher.session_state and teacher.session_state[TEACHER]:
        teacher.button(key="class_start").click().run()
        assert_ok(teacher)
    return teacher, teacher.session_state[TEACHER][0]


def join(at, typed: str):
    """Type a code into the Lessons page's join form and press Join."""
    at.text_input(key="lessons.join_code").input(typed)
    next(b for b in at.button if b.label == "Join").click().run()
    assert_ok(at)
    return at


def store_down_warnings(at) -> list[str]:
    return [w.value for w in at.warning if "class store is not answering" in w.value]


def test_a_class_survives_the_caches_being_cleared():
    """Any connection may send the protocol's "clear cache", which empties st.cache_resource for the whole
    process: it ended a running class for the teacher and every student. The store no longer lives there."""
    teacher, code = open_class()
    st.cache_resource.clear()
    st.cache_data.clear()
    student = app_at(None, {"class": code})
    assert_ok(student)
    assert not [w for w in student.warning if "no class" in w.value]
    assert "step 1 of 9" in bar_caption(student)
    teacher.button(key="lesson_next").click().run()
    assert "step 2 of 9" in bar_caption(teacher)
    student.run()
    assert "step 2 of 9" in bar_caption(student)  # the teacher still moves the same class


def test_failed_joins_are_limited_per_session_logged_and_refused_without_a_lookup(monkeypatch, caplog):
    caplog.set_level(logging.WARNING, logger="glassbox.classroom")
    at = app_at("pages/lessons.py")
    codes = (f"ZZZZZ{c}" for c in "ABCDEFGHJK")
    for _ in range(PER_SESSION):
        join(at, next(codes))
        assert any("is not the code of an open class" in e.value for e in at.error)
    assert sum("failed class join" in r.getMessage() for r in caplog.records) == PER_SESSION

    looked_up = []
    real = classroom.store

    def counting_store():
        s = real()
        looked_up.append(1)
        return s

    monkeypatch.setattr(classroom, "store", counting_store)
    _, code = open_class()  # a real class: even its code is refused now, with no lookup
    looked_up.clear()
    join(at, code)
    assert any("Too many wrong class codes" in e.value for e in at.error) and not looked_up
    assert any("class join refused" in r.getMessage() for r in caplog.records)
    student = app_at(None, {"class": "ZZZZZM"})  # the link way in counts against the same session
    assert any("Too many wrong class codes" in e.value for e in student.error)
    assert "class_strip" not in str(student._tree)


def test_failed_joins_are_limited_for_the_whole_server(monkeypatch):
    """A guesser who opens a new connection per guess meets the server-wide limit."""
    sessions = itertools.count()
    monkeypatch.setattr(classroom, "session_key", lambda: f"guesser-{next(sessions)}", raising=False)
    at = app_at("pages/lessons.py")
    for i in range(PER_SERVER):
        join(at, f"ZZZZ{K.CODE_ALPHABET[i // 32]}{K.CODE_ALPHABET[i % 32]}")
    join(at, "ZZZZZZ")
    assert any("Too many wrong class codes" in e.value for e in at.error)


def test_one_session_opens_a_few_classes_at_most(caplog):
    """Opening a class closes the one the session held; after OPENS_PER_SESSION opens in the window, no more."""
    teacher, first = open_class()
    teacher.switch_page("pages/lessons.py").run()
    opened = [first]
    for _ in range(OPENS_PER_SESSION - 1):
        teacher.button(key="class_close").click().run()
        teacher.button(key="class_open").click().run()
        assert_ok(teacher)
        opened.append(teacher.session_state[TEACHER][0])
        teacher.switch_page("pages/lessons.py").run()
    assert len(set(opened)) == OPENS_PER_SESSION
    assert all(classroom.store().get(c) is None for c in opened[:-1])  # closed, not left open
    teacher.button(key="class_close").click().run()
    teacher.button(key="class_open").click().run()
    assert_ok(teacher)
    assert any("Too many classes were opened here" in e.value for e in teacher.error)
    assert TEACHER not in teacher.session_state


def test_an_uploaded_lesson_is_not_offered_to_a_class_and_the_page_says_why():
    """A class on an uploaded lesson left its students on "There is no lesson called 'upload-...'": the
    panel offers the server's lessons only, says so before opening, and a teacher who walks an uploaded
    lesson does not move the class to it."""
    lesson = lessons_catalog.parse_upload((L.LESSONS_DIR / "compact-primer.toml").read_bytes()
                                          .replace(b'title = "The compact primer"', b'title = "My walk"', 1),
                                          "mine.toml")
    teacher = app_at("pages/lessons.py")
    teacher.session_state[lessons_bar.UPLOADED_KEY] = {lesson.id: lesson}
    teacher.run()
    assert lesson.id not in teacher.selectbox(key="lessons.class_lesson").options
    assert any("uploaded lesson" in i.value and "My walk" in i.value for i in teacher.info)
    teacher.button(key="class_open").click().run()
    code = teacher.session_state[TEACHER][0]
    teacher.query_params.update({"lesson": lesson.id, "step": "2"})
    teacher.run()
    assert_ok(teacher)
    assert any("cannot follow an uploaded lesson" in c.value for c in teacher.caption)
    assert classroom.store().get(code).lesson != lesson.id


def test_a_bad_class_lifetime_is_bounded_and_said(redis_server, monkeypatch):
    """GLASSBOX_CLASS_TTL=99999999999999999999 made every Redis class fail to open."""
    monkeypatch.setenv(classroom.TTL_ENV, "99999999999999999999")
    teacher, code = open_class()
    teacher.switch_page("pages/lessons.py").run()
    assert_ok(teacher)
    assert any("GLASSBOX" in w.value and "604800" in w.value for w in teacher.warning)
    assert f"Class code: `{code}`" in " ".join(m.value for m in teacher.markdown)


def test_redis_paused_stopped_and_restarted_shows_a_message_and_the_class_resumes(redis_server):
    """Teacher and student in a class saw redis tracebacks while Redis was paused or down; now one sentence,
    the page works, and the class resumes where it is when Redis answers (a restarted, empty Redis gets the
    teacher's class back at the teacher's next step)."""
    teacher, code = open_class()
    student = app_at(None, {"class": code})
    assert "step 1 of 9" in bar_caption(student)

    redis_server.pause()
    teacher.button(key="lesson_next").click().run()
    assert_ok(teacher)
    assert store_down_warnings(teacher) and "step 2 of 9" in bar_caption(teacher)
    time.sleep(K.REDIS_REST)
    student.run()
    assert_ok(student)
    assert store_down_warnings(student)

    redis_server.resume()
    time.sleep(K.REDIS_REST + 0.2)
    teacher.run()  # what its store poll does in a browser once Redis answers
    assert_ok(teacher)
    assert not store_down_warnings(teacher)
    student.run()
    assert_ok(student)
    assert not store_down_warnings(student) and "step 2 of 9" in bar_caption(student)

    redis_server.stop()
    teacher.button(key="lesson_next").click().run()
    assert_ok(teacher)
    assert store_down_warnings(teacher)
    redis_server.start()  # empty: the class is gone until its teacher's next run puts it back
    time.sleep(K.REDIS_REST + 0.2)
    student.run()
    assert_ok(student)
    assert any("not there just now" in w.value for w in student.warning)
    teacher.run()
    assert_ok(teacher)
    assert not store_down_warnings(teacher) and classroom.store().get(code).step == 3
    student.run()
    assert_ok(student)
    assert "step 3 of 9" in bar_caption(student)

    redis_server.stop()  # a restart the teacher did not see: the class comes back at the teacher's next step
    redis_server.start()
    time.sleep(K.REDIS_REST + 0.2)
    teacher.button(key="lesson_next").click().run()
    assert_ok(teacher)
    assert classroom.store().get(code).step == 4 and not teacher.warning
    student.run()
    assert_ok(student)
    assert "step 4 of 9" in bar_caption(student)


def test_with_redis_the_server_wide_limits_hold_for_the_whole_cluster(redis_server):
    """Each server of a cluster counted failed joins and opened classes on its own, so a guesser spreading
    guesses over K servers had K times the limit. With the classes in Redis the totals are shared: failures
    counted by other servers (here a second store on the same Redis, as another server would) refuse this one."""
    other_server = K.RedisStore(redis_server.url, ttl=60)
    _clear_of_a_window_edge(classroom.JOIN_WINDOW, classroom.OPEN_WINDOW)
    for _ in range(PER_SERVER):
        other_server.tally("failed-join", classroom.JOIN_WINDOW)
    at = join(app_at("pages/lessons.py"), "ZZZZZA")  # this process has seen no failure at all
    assert any("Too many wrong class codes" in e.value for e in at.error)

    for _ in range(classroom.OPENS_PER_SERVER):
        other_server.tally("open", classroom.OPEN_WINDOW)
    teacher = app_at("pages/lessons.py")
    teacher.selectbox(key="lessons.class_lesson").set_value("compact-primer").run()
    teacher.button(key="class_open").click().run()
    assert_ok(teacher)
    assert any("Too many classes were opened" in e.value for e in teacher.error)
    assert TEACHER not in teacher.session_state or not teacher.session_state[TEACHER]


def _clear_of_a_window_edge(*windows: float, margin: float = 20.0) -> None:
    """Wait, if need be, until no counter window ends within `margin` s (the counts start afresh there)."""
    while any(w - time.time() % w < margin for w in windows):
        time.sleep(1.0)


def test_the_shared_counter_counts_across_servers_and_forgets_after_its_window(redis_server):
    one, two = K.RedisStore(redis_server.url, ttl=60), K.RedisStore(redis_server.url, ttl=60)
    _clear_of_a_window_edge(60)
    assert [one.tally("x", 60), two.tally("x", 60), one.tally("x", 60)] == [1, 2, 3]
    count, left = two.recent("x", 60)
    assert count == 3 and 0 < left <= 60
    assert one.client.ttl(one._bucket("x", 60)) <= 121  # the bucket expires: nothing grows in Redis


# --- issue 40: the teacher sees the class -------------------------------------------------------------------

LESSON = "attention-as-retrieval"  # step 2: a number check on the one-number example (right: 0.5005, tolerance 0.01)


def board_text(at) -> str:
    """The teacher's class board on the lesson bar, as the page shows it (escapes read)."""
    return " ".join(plain(m.value) for m in at.markdown if "Answered" in m.value or "Common wrong" in m.value
                    or "on this step" in m.value)


def answer_number(student, value: float, step: int = 2) -> None:
    student.number_input(key=f"lesson_answer.{LESSON}.{step}").set_value(value)
    student.button(key=f"lesson_check.{LESSON}.{step}").click().run()
    assert_ok(student)


def test_thirty_students_answer_and_the_teachers_counts_are_exact():
    """Three students answer on their own pages (one right, two wrong) while 27 more answer at once through the
    store as their sessions would (12 right, 15 wrong over three values); the teacher's bar shows the exact
    counts and the common wrong answers, reveals the answer, and a student's page then shows it."""
    import threading

    teacher, code = open_class(LESSON)
    assert "step 1 of" in bar_caption(teacher)
    teacher.button(key="lesson_next").click().run()
    students = [app_at(None, {"class": code}) for _ in range(3)]
    students[1].text_input(key="class_nickname").input("=Ada <b>").run()  # optional, in the class strip
    for student, value in zip(students, (0.5005, 0.3, 0.2)):
        assert "step 2 of" in bar_caption(student)
        answer_number(student, value)
    store, ids = classroom.store(), [f"{i:016x}" for i in range(100, 127)]
    for sid in ids:
        assert store.join(code, sid)
    values = [0.5] * 12 + [0.3] * 8 + [0.2] * 4 + [7.0] * 3
    barrier = threading.Barrier(len(ids))

    def answer(sid: str, value: float) -> None:
        barrier.wait()
        store.answer(code, sid, LESSON, 2, f"{value:g}", abs(value - 0.5005) <= 0.01, K.answer_bin(value, 0.01))

    threads = [threading.Thread(target=answer, args=pair) for pair in zip(ids, values)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    teacher.run()
    assert_ok(teacher)
    shown = board_text(teacher)
    assert "Answered **30 / 30**" in shown and "right first try **13**" in shown, shown
    assert "0.3: 9 students" in shown and "0.2: 5 students" in shown and "7: 3 students" in shown, shown
    assert "30 students · on this step 30 · behind 0" in shown  # the 27 joined at the class's step too
    rows = classroom.store().rows(code, teacher.session_state[TEACHER][1])
    assert [r["first answer"] for r in rows if r["student"] == "=Ada <b>"] == ["0.3"]
    assert "'=Ada <b>" in K.answers_csv(rows)  # no formula in a spreadsheet

    assert not any("revealed the answer" in i.value for i in students[1].info)
    teacher.button(key="class_reveal").click().run()
    assert_ok(teacher)
    students[1].run()
    assert_ok(students[1])
    assert any("Your teacher revealed the answer: 0.5005" in i.value for i in students[1].info)
    assert "class_reveal" not in str(students[1]._tree)  # students have no teacher controls


def cookie_scripts(at) -> list[str]:
    return [h.proto.body for h in at.get("html") if "teacher cookie" in h.proto.body]


@pytest.mark.parametrize("where", ["memory", "redis"])
def test_a_dropped_teacher_session_is_taken_over_with_the_teacher_link(where, request):
    """The teacher's browser drops its session mid-lesson; the private link from the class card, opened in a new
    session, takes the class over at its step (and `teach` leaves the URL at once); a student follows it on. With
    Redis the new session reads the class through another store, as a second server of a cluster would. The
    browser is told to keep the teacher cookie (a reload's way back) and to forget it when the class closes."""
    if where == "redis":
        request.getfixturevalue("redis_server")
    teacher, code = open_class(LESSON)
    token = teacher.session_state[TEACHER][1]
    assert any(f"glassbox_teacher={code}.{token};" in c and "SameSite=Strict" in c for c in cookie_scripts(teacher))
    teacher.button(key="lesson_next").click().run()
    teacher.button(key="lesson_next").click().run()
    teacher.button(key="lesson_join_screen").click().run()  # the lesson bar's Join screen: the Lessons page
    assert_ok(teacher)
    link = next(c.value for c in teacher.code if "?teach=" in c.value)
    assert teacher.button(key="class_start").label == "Back to step 3"
    assert classroom.store().get(code).step == 3  # the class stays where it is
    student = app_at(None, {"class": code})
    assert "step 3 of" in bar_caption(student) and link.split("=", 1)[1] not in str(student._tree)
    del teacher  # the session is gone
    if where == "redis":
        classroom._stores.clear()  # another server: its own connection to the same Redis

    again = app_at(None, {"teach": link.split("?teach=", 1)[1]})
    assert_ok(again)
    assert "teach" not in again.query_params
    assert again.session_state[TEACHER][0] == code and "step 3 of" in bar_caption(again)
    again.button(key="lesson_next").click().run()
    assert_ok(again)
    assert classroom.store().get(code).step == 4
    student.run()
    assert "step 4 of" in bar_caption(student)
    again.switch_page("pages/lessons.py").run()
    again.button(key="class_close").click().run()
    assert_ok(again)
    assert classroom.store().get(code) is None
    assert any("glassbox_teacher=;" in c and "Max-Age=0" in c for c in cookie_scripts(again))


def test_a_forged_teacher_link_cannot_move_reveal_or_close(caplog):
    """A student who forges `teach=<code>.<anything>` gets a message, no control, and a failed-join count."""
    caplog.set_level(logging.WARNING, logger="glassbox.classroom")
    teacher, code = open_class(LESSON)
    forger = app_at(None, {"class": code, "teach": f"{code}.{'A' * 22}"})
    assert_ok(forger)
    assert "teach" not in forger.query_params and TEACHER not in forger.session_state
    assert any("does not control a class" in e.value for e in forger.error)
    assert any("wrong teacher token" in r.getMessage() for r in caplog.records)
    tree = str(forger._tree)
    assert "class_reveal" not in tree and "class_close" not in tree and "lesson_join_screen" not in tree
    assert forger.button(key="lesson_next").disabled  # a following student cannot step the class
    assert classroom.store().get(code).step == 1
    for _ in range(PER_SESSION - 1):  # AppTest sessions share one session id: the per-session limit
        app_at(None, {"teach": f"{code}.{'B' * 22}"})
    refused = app_at(None, {"teach": f"{code}.{'C' * 22}"})
    assert any("Too many wrong class codes or teacher links" in e.value for e in refused.error)
    assert TEACHER not in refused.session_state
