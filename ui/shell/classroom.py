"""A class that follows the teacher: the teacher opens a class (a short code, a link and a QR code drawn
here, with no network), students join with `?class=<code>` and see the teacher's lesson step within
about a second; they can detach to explore and re-join. Only the teacher's session holds the token
that moves the class. The store is core.classroom's: in this process, or Redis when
GLASSBOX_REDIS_URL is set (several app servers then share their classes).

What no visitor can do (issue 36):
- end every class: the store is a module-level object, not an `st.cache_resource`, which any
  connection's protocol "clear cache" message empties for the whole process;
- guess codes quickly: failed joins are limited per session and per server (JOINS) and logged, and a
  session opens a few classes at most (OPENS; opening one closes the one it held);
- see a driver's traceback: Redis down, refusing or paused shows one sentence, and the class picks up
  where it was when Redis answers again (a teacher's class is put back if Redis lost it).

What the teacher sees (issue 40):
- a private teacher link `?teach=<code>.<token>` (on the class card only, never in a student's URL): opened in
  any tab, browser or server it claims the class, and `teach` leaves the address bar at once; a cookie
  (SameSite=Strict, the class's lifetime) restores the class after a reload of the same browser;
- a join screen for the projector (code, link and QR code large, students joined, live) on the Lessons page;
- on the lesson bar, for the step's check: answered, right on the first try, the common wrong answers, the
  pace, and "Reveal the answer", which students then see under the check; a CSV of the answers.
Students stay anonymous (a random id per browser session, an optional nickname); their answers live in the
class store and end with the class.
"""

from __future__ import annotations

import html
import io
import logging
import os
import re
import secrets
import threading
import time
from typing import Optional
from urllib.parse import urlsplit

import segno
import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

from core import classroom as K
from ui.shell import query
from ui.shell.text import literal

REDIS_URL_ENV, TTL_ENV = "GLASSBOX_REDIS_URL", "GLASSBOX_CLASS_TTL"
TEACHER_KEY = "glassbox.class.teacher"  # (code, token, last (lesson, step) pushed) of the class this session teaches
FOLLOW_KEY = "glassbox.class.follow"  # code -> whether this student follows the teacher now
MISSING_KEY = "glassbox.class.missing"  # codes this session looked up and found no class for (not looked up again)
GONE_KEY = "glassbox.class.gone"  # code -> when a class this student had joined was first found missing
PUSHED_KEY = "glassbox.class.pushed"  # time.time() when the class this session teaches was last opened or moved
STUDENT_KEY = "glassbox.class.student"  # this session's random student id (anonymous: no name, no account)
NICKNAME_KEY = "glassbox.class.nickname"  # the optional nickname this student gave
REVEALED_KEY = "glassbox.class.revealed"  # (lesson, step) the teacher revealed, as this student's last report said
COOKIE_WANT_KEY = "glassbox.class.cookie"  # the teacher cookie this session wants in its browser ("" : none)
COOKIE_WROTE_KEY = "glassbox.class.cookie_wrote"  # set once this session has written the teacher cookie
COOKIE_READ_KEY = "glassbox.class.cookie_read"  # set once this session has looked at the browser's teacher cookie
TEACH_PARAM, COOKIE = "teach", "glassbox_teacher"
TEACHER_SECRET = re.compile(r"^([A-Z2-9]{6})\.([A-Za-z0-9_-]{16,64})$")  # "<code>.<token>"
JOIN_SHOWN_KEY = "glassbox.class.join_shown"  # the class whose join screen this session has scrolled to
# Our own constant script (the code is from CODE_ALPHABET): the page starts at its top, where the join screen is.
TO_TOP = ("<script>/* join {code} */ const m = document.querySelector('[data-testid=\"stMain\"]');"
          " if (m) m.scrollTo(0, 0); window.scrollTo(0, 0);</script>")
STARTED_KEY = "glassbox.class.started"  # the code of the class whose lesson this teacher started
BOARD_SECONDS = 2.0  # the teacher's counts and pace refresh this often (one store read)
POLL_SECONDS = 1.0  # students see a move within this plus one rerun
STORE_RETRY_SECONDS = 2.0  # while the store is down, a class's pages look again this often
GONE_GRACE_SECONDS = 120.0  # a joined class that vanished (Redis restarted) is looked for this long

# The limits. Per session always; the "per server" totals hold for the whole cluster when the classes are in
# Redis (a counter there, shared by every server), else for this process (the arithmetic: docs/deployment.md).
JOIN_FAILS_PER_SESSION, JOIN_FAILS_PER_SERVER, JOIN_WINDOW = 5, 60, 60.0
OPENS_PER_SESSION, OPENS_PER_SERVER, OPEN_WINDOW = 3, 30, 600.0
JOINS = K.Throttle(JOIN_FAILS_PER_SESSION, JOIN_FAILS_PER_SERVER, JOIN_WINDOW)
OPENS = K.Throttle(OPENS_PER_SESSION, OPENS_PER_SERVER, OPEN_WINDOW)
REFUSALS_LOGGED = K.Throttle(1, 10, 60.0)  # a refused guesser writes a log line a minute at most, a server ten

log = logging.getLogger("glassbox.classroom")
_stores: dict[tuple[str, int], K.ClassStore] = {}  # one per configuration, for the process's life
_stores_lock = threading.Lock()
_told: set[str] = set()  # settings problems already written to the log


# ---------------------------------------------------------------------------------------------
# The store and its settings
# ---------------------------------------------------------------------------------------------


def settings() -> tuple[str, int, Optional[str]]:
    """(Redis URL, class lifetime in seconds, a sentence on a bad GLASSBOX_CLASS_TTL or None). A bad value is
    written to the log once and shown in the class panel; the lifetime used is the default or the nearest bound."""
    ttl, problem = K.parse_ttl(os.environ.get(TTL_ENV))
    if problem and problem not in _told:
        _told.add(problem)
        log.warning("%s", problem)
    return os.environ.get(REDIS_URL_ENV, ""), ttl, problem


def store() -> K.ClassStore:
    """The process's class store (one per configuration). Held in this module, so that no client message
    (the protocol's "clear cache" empties st.cache_resource for every session) can end the classes."""
    url, ttl, _ = settings()
    key = (url.strip(), ttl)
    with _stores_lock:
        if key not in _stores:
            _stores[key] = K.store_for(url, ttl)
        return _stores[key]


def session_key() -> str:
    """This browser session's id for the limits: the server's own id of the connection, which the
    session cannot change or clear (its st.session_state it can: "clear cache" empties it)."""
    ctx = get_script_run_ctx()
    return ctx.session_id if ctx is not None else "no-session"


def store_down(exc: Exception, who: str) -> None:
    """Say, in one sentence, that the store is not answering; the page goes on, and looks again soon."""
    st.warning(f"The class store is not answering just now, so {who}. Everything else on this page works; the "
               "class picks up where it is as soon as the store answers again.", icon=":material/cloud_off:")
    log.warning("class store not answering: %s", exc)
    _await_store()


@st.fragment(run_every=STORE_RETRY_SECONDS)
def _await_store() -> None:
    """While the store is down: look again every few seconds, and rerun the page once it answers."""
    try:
        store().get("")
    except K.StoreDown:
        return
    st.rerun()


def teaching() -> Optional[str]:
    """The code of the class this session teaches, if any."""
    held = st.session_state.get(TEACHER_KEY)
    return held[0] if held else None


def can_teach(lesson_id: str) -> bool:
    """Whether students can follow this lesson: one from this server's folders, not one uploaded into this
    session (the students' sessions do not have it)."""
    from ui.shell.lessons_bar import UPLOADED_KEY  # that module imports this one

    return str(lesson_id) not in st.session_state.get(UPLOADED_KEY, {})


def open_class(lesson_id: str) -> Optional[K.ClassState]:
    """Open a class at step 1 of a lesson; this session becomes its teacher (a class it held is closed
    first: one class per session). None, with a message, when the limits or the store refuse."""
    if not can_teach(lesson_id):
        st.error("A class can follow only a lesson from this server's list, not an uploaded one.")
        return None
    who = session_key()
    try:
        wait = OPENS.wait(who) or _cluster_wait("open", OPENS_PER_SERVER, OPEN_WINDOW)
    except K.StoreDown as exc:
        store_down(exc, "no class can be opened")
        return None
    if wait > 0:
        _log_refusal(who, "class open refused: session %s over the limit (wait %.0f s)", who[:8], wait)
        st.error(f"Too many classes were opened here lately; try again in {wait:.0f} s.")
        return None
    close_class()
    try:
        state, token = store().open(lesson_id, 1)
    except K.ClassLimit as exc:
        st.error(f"No class can be opened now: {exc}.")
        return None
    except K.StoreDown as exc:
        store_down(exc, "no class can be opened")
        return None
    OPENS.record(who)
    _cluster_tally("open", OPEN_WINDOW)
    _hold(state, token)
    return state


def _hold(state: K.ClassState, token: str) -> None:
    """This session teaches the class now; the browser is asked to keep the teacher cookie (keep_cookie)."""
    st.session_state[TEACHER_KEY] = (state.code, token, (state.lesson, state.step))
    st.session_state[PUSHED_KEY] = time.time()
    st.session_state[COOKIE_WANT_KEY] = f"{state.code}.{token}"


def _put_back(code: str, token: str, lesson_id: str, step: int) -> bool:
    """Put this teacher's class back when the store lost it before it could expire (Redis restarted empty):
    only within the class's lifetime since its last move, and only where its code is still free."""
    if time.time() - st.session_state.get(PUSHED_KEY, 0.0) >= settings()[1]:
        return False
    if not store().restore(K.ClassState(code, lesson_id, int(step), time.time()), token):
        return False
    log.warning("class %s put back by its teacher after the store lost it", code)
    return True


def close_class() -> None:
    """End the class this session teaches (if the store is down, it expires on its own)."""
    held = st.session_state.pop(TEACHER_KEY, None)
    if held:
        st.session_state[COOKIE_WANT_KEY] = ""  # the browser forgets the teacher cookie
        try:
            store().close(held[0], held[1])
        except K.StoreDown as exc:
            log.warning("class %s not closed, the store did not answer (it expires on its own): %s", held[0], exc)


def teach(lesson_id: str, step: int) -> None:
    """Move the class this session teaches to the step it shows now (nothing for anyone else)."""
    held = st.session_state.get(TEACHER_KEY)
    if not held or held[2] == (lesson_id, step):
        return
    if not can_teach(lesson_id):
        st.caption(f":material/groups: Your class {held[0]} stays at step {held[2][1]} of its lesson: students "
                   "cannot follow an uploaded lesson.")
        return
    code, token = held[0], held[1]
    try:
        moved = store().move(code, token, lesson_id, step) or _put_back(code, token, lesson_id, step)
    except K.StoreDown as exc:
        store_down(exc, f"your class {code} stays at step {held[2][1]} on your students' screens")
        return
    if moved:
        st.session_state[TEACHER_KEY] = (code, token, (lesson_id, step))
        st.session_state[PUSHED_KEY] = time.time()
    else:
        st.session_state.pop(TEACHER_KEY, None)
        st.warning(f"Class {code} has ended or expired; open a new one on the Lessons page.")


def _base_url() -> str:
    try:
        parts = urlsplit(st.context.url or "")
        return f"{parts.scheme}://{parts.netloc}" if parts.scheme and parts.netloc else ""
    except (AttributeError, RuntimeError):
        return ""


def join_link(code: str) -> str:
    """The link students open: this server's address with `?class=<code>` (never the teacher's token)."""
    return f"{_base_url()}/?class={code}"


def teacher_link(code: str, token: str) -> str:
    """The teacher's private link: opened anywhere, it gives that session control of the class."""
    return f"{_base_url()}/?{TEACH_PARAM}={code}.{token}"


# ---------------------------------------------------------------------------------------------
# The teacher's identity beyond one session: the teacher link and the teacher cookie
# ---------------------------------------------------------------------------------------------


def claim_teacher() -> None:
    """Called first on every page: a `?teach=<code>.<token>` in the URL claims the class (and leaves the address
    bar at once, so the secret never stays on a projected screen); on a session's first run without one, the
    browser's teacher cookie does the same, so a reload (F5) keeps control. A wrong token counts against the
    failed-join limits, like a wrong code."""
    raw = st.query_params.get(TEACH_PARAM)
    if raw is not None:
        del st.query_params[TEACH_PARAM]
        st.session_state[COOKIE_READ_KEY] = True
        if not _claim(str(raw), quiet=False):
            return
        if st.query_params.get("lesson") is None:  # carry on where the class is
            state = store_state()
            if state is not None:
                st.query_params["lesson"], st.query_params["step"] = state.lesson, str(state.step)
        return
    if COOKIE_READ_KEY in st.session_state:
        return
    st.session_state[COOKIE_READ_KEY] = True
    cookie = _browser_cookie()
    if cookie and teaching() is None:
        _claim(cookie, quiet=True)


def _browser_cookie() -> str:
    try:
        return str(st.context.cookies.get(COOKIE) or "")
    except (AttributeError, RuntimeError):
        return ""


def _claim(secret: str, quiet: bool) -> bool:
    """Take control of the class whose teacher secret this is. `quiet` (a cookie): a class that ended just
    makes the browser forget the cookie. Messages for a link that does not work."""
    match = TEACHER_SECRET.match(secret.strip()[:100])
    if match is None:
        if quiet:
            st.session_state[COOKIE_WANT_KEY] = ""
        else:
            query.note("URL parameter teach=... is not a teacher link (a class code, a dot and its secret).")
        return False
    code, token = match.groups()
    who = session_key()
    try:
        wait = JOINS.wait(who) or _cluster_wait("failed-join", JOIN_FAILS_PER_SERVER, JOIN_WINDOW)
        if wait > 0:
            _log_refusal(who, "teacher link refused: session %s over the failed-join limit (wait %.0f s)",
                         who[:8], wait)
            st.error(f"Too many wrong class codes or teacher links were tried here lately; try again in "
                     f"{wait:.0f} s.", icon=":material/block:")
            return False
        state = store().claim(code, token)
        exists = state is not None or store().get(code) is not None
        if state is None:  # a guess (of the token, or of a code: both count, so neither probes for free)
            count = max(JOINS.record(who), _cluster_tally("failed-join", JOIN_WINDOW))
            log.warning("wrong teacher token for %s class %s from session %s (%d failed in %.0f s)",
                        "the" if exists else "no", code, who[:8], count, JOIN_WINDOW)
    except K.StoreDown as exc:
        store_down(exc, "the teacher link cannot be checked now")
        return False
    if state is None:
        if quiet:
            st.session_state[COOKIE_WANT_KEY] = ""
        elif exists:
            st.error("This teacher link does not control a class.", icon=":material/block:")
        else:
            st.warning(f"Class {code} has ended or expired; open a new one on the Lessons page.",
                       icon=":material/groups:")
        return False
    _hold(state, token)
    log.info("class %s claimed by session %s with its teacher %s", code, who[:8], "cookie" if quiet else "link")
    return True


def store_state() -> Optional[K.ClassState]:
    """The class this session teaches, as the store has it (None: none, or the store is down)."""
    code = teaching()
    try:
        return store().get(code) if code else None
    except K.StoreDown:
        return None


COOKIE_SCRIPT = ("<script>/* teacher cookie */ document.cookie = '{name}={value}; Max-Age={age}; Path=/; "
                 "SameSite=Strict' + (location.protocol === 'https:' ? '; Secure' : '');</script>")


def keep_cookie() -> None:
    """Make the browser hold the teacher cookie this session wants (or forget it), when what it sent at the
    session's start differs or this session wrote it since (a session that opened and then closed a class must
    clear what it wrote). Our own script; the value is checked against TEACHER_SECRET first."""
    want = st.session_state.get(COOKIE_WANT_KEY)
    if want is None or (want and not TEACHER_SECRET.match(want)):
        return
    if want == _browser_cookie() and not st.session_state.get(COOKIE_WROTE_KEY):
        return  # the browser already holds it
    st.session_state[COOKIE_WROTE_KEY] = True  # from now on this session states the cookie on each run (idempotent)
    st.html(COOKIE_SCRIPT.format(name=COOKIE, value=want, age=settings()[1] if want else 0),
            unsafe_allow_javascript=True)


def qr_png(text: str) -> bytes:
    """A QR code of `text` as PNG bytes, drawn here (segno is pure Python; nothing leaves the server)."""
    out = io.BytesIO()
    segno.make(text, error="m").save(out, kind="png", scale=8, border=2)
    return out.getvalue()


# ---------------------------------------------------------------------------------------------
# Joining: a code this session has not joined before is a guess until the store knows it
# ---------------------------------------------------------------------------------------------


def _cluster_wait(event: str, limit: int, window: float) -> float:
    """With the classes in Redis, seconds before `event` may happen again anywhere in the cluster (0.0: now),
    from a counter every server shares (fixed windows: at most twice `limit` across a window's edge).
    Without Redis the process's own Throttle is the server-wide limit. Raises K.StoreDown."""
    shared = store()
    if not isinstance(shared, K.RedisStore):
        return 0.0
    count, left = shared.recent(event, window)
    return left if count >= limit else 0.0


def _cluster_tally(event: str, window: float) -> int:
    """Count one `event` in the cluster's shared counter (Redis only; 0 without it). Raises K.StoreDown."""
    shared = store()
    return shared.tally(event, window) if isinstance(shared, K.RedisStore) else 0


def _log_refusal(who: str, message: str, *args) -> None:
    """Log a refusal, at most once a minute per session and ten a minute per server: a refused guesser
    may go on sending, and must not fill the log."""
    if REFUSALS_LOGGED.wait(who) == 0:
        REFUSALS_LOGGED.record(who)
        log.warning(message, *args)


def find_class(code: str) -> tuple[Optional[K.ClassState], Optional[str]]:
    """The class with this code, for a session that has not joined it: (state, None), or (None, why not).
    A failed lookup counts against this session and the server (JOINS) and is logged; over the limit, no
    lookup is made at all, so a guesser learns nothing more. Raises K.StoreDown."""
    who = session_key()
    wait = JOINS.wait(who) or _cluster_wait("failed-join", JOIN_FAILS_PER_SERVER, JOIN_WINDOW)
    if wait > 0:
        _log_refusal(who, "class join refused: session %s over the failed-join limit (wait %.0f s)", who[:8], wait)
        return None, (f"Too many wrong class codes were tried here lately; try again in {wait:.0f} s, "
                      "and check the code with your teacher.")
    state = store().get(code)
    if state is None:
        count = max(JOINS.record(who), _cluster_tally("failed-join", JOIN_WINDOW))
        log.warning("failed class join: code %s from session %s (%d failed on this server or cluster in %.0f s)",
                    code, who[:8], count, JOIN_WINDOW)
        return None, None
    return state, None


def _set_following(code: str, on: bool) -> None:
    st.session_state.setdefault(FOLLOW_KEY, {})[code] = on


def _lookup(code: str) -> tuple[Optional[K.ClassState], bool]:
    """(The class, or None; whether the page should keep looking for it). A code this session joined is
    read as it is; any other goes through find_class's limits. Draws the messages for a class not found."""
    joined = code in st.session_state.get(FOLLOW_KEY, {})
    if not joined and code in st.session_state.get(MISSING_KEY, set()):
        state, refusal = None, None  # looked up and missing already: not another guess
    elif joined:
        state, refusal = store().get(code), None
    else:
        state, refusal = find_class(code)
    if state is not None:
        st.session_state.get(GONE_KEY, {}).pop(code, None)
        return state, False
    if refusal:
        st.error(refusal, icon=":material/block:")
        return None, False
    if joined:  # a class this student was in: ended, expired, or lost by a restarted store (the teacher puts it back)
        gone = st.session_state.setdefault(GONE_KEY, {}).setdefault(code, time.monotonic())
        if time.monotonic() - gone < GONE_GRACE_SECONDS:
            st.warning(f"Class {code} is not there just now: it ended, or the class store restarted. This page "
                       "looks for it again for two minutes.", icon=":material/groups:")
            return None, True
    else:
        st.session_state.setdefault(MISSING_KEY, set()).add(code)
    st.warning(f"There is no class {code} now: it may have ended or expired. Ask your teacher for the code.",
               icon=":material/groups:")
    return None, False


def follow() -> Optional[tuple[str, bool]]:
    """For a student with `?class=<code>`: put the teacher's step into the URL while following, draw the
    class strip and the poll. Returns (code, following), or None when this session is not a student."""
    raw = st.query_params.get("class")
    if raw is None:
        return None
    code = K.normalise_code(str(raw))
    if code is None:
        query.note(f"URL parameter class={str(raw)[:40]!r} is not a class code (six letters and digits).")
        return None
    if teaching() == code:
        return None  # the teacher's own link: the teacher moves the class, never follows it
    try:
        state, keep_looking = _lookup(code)
    except K.StoreDown as exc:
        store_down(exc, f"this page cannot follow class {code} for now")
        return None
    if state is None:
        if keep_looking:
            _poll(code, None)
        return None
    joined = code in st.session_state.get(FOLLOW_KEY, {})
    following = st.session_state.get(FOLLOW_KEY, {}).get(code, True)
    _set_following(code, following)  # joined: later lookups of this code are not guesses
    if not joined:
        _join(code)
    if following and (st.query_params.get("lesson"), st.query_params.get("step")) != (state.lesson, str(state.step)):
        st.query_params["lesson"], st.query_params["step"] = state.lesson, str(state.step)
    with st.container(horizontal=True, key="class_strip", vertical_alignment="center"):
        if following:
            st.markdown(f":material/groups: Class **{code}**: following the teacher.")
            st.button("Explore on my own", key="class_detach", on_click=_set_following, args=(code, False),
                      icon=":material/explore:", help="Stop following; your view stays yours until you re-join.")
        else:
            st.markdown(f":material/groups: Class **{code}**: exploring on your own (the teacher is at step "
                        f"{state.step}).")
            st.button("Re-join the class", key="class_rejoin", on_click=_set_following, args=(code, True),
                      icon=":material/group_add:", type="primary")
        with st.popover("Nickname", icon=":material/badge:", type="tertiary"):
            st.text_input("Your nickname (optional)", max_chars=K.MAX_NICKNAME, key="class_nickname",
                          placeholder=st.session_state.get(NICKNAME_KEY) or "anonymous", on_change=_rename, args=(code,),
                          help="Shown to your teacher with your answers, and kept only while the class lasts. "
                               "Without one you are anonymous.")
    _poll(code, state.moved_at, following)
    return code, following


def student_id() -> str:
    """This browser session's random id in a class: no name, no account, new in every session."""
    return st.session_state.setdefault(STUDENT_KEY, secrets.token_hex(8))


def _join(code: str) -> None:
    """Count this student in the class (with their nickname, if they gave one)."""
    try:
        store().join(code, student_id(), st.session_state.get(NICKNAME_KEY, ""))
    except K.StoreDown as exc:
        log.warning("class %s: a student's join was not counted, the store did not answer: %s", code, exc)


def _rename(code: str) -> None:
    st.session_state[NICKNAME_KEY] = K.clean_nickname(st.session_state.get("class_nickname", ""))
    _join(code)


def _where() -> tuple[str, int]:
    """The lesson and step this student's page shows (from its URL), for the pace."""
    lesson = str(st.query_params.get("lesson", ""))
    try:
        step = min(max(int(str(st.query_params.get("step", "0"))[:6]), 0), 999)
    except ValueError:
        step = 0
    return (lesson, step) if K.LESSON_ID.match(lesson) else ("none", 0)


@st.fragment(run_every=POLL_SECONDS)
def _poll(code: str, seen: Optional[float], following: bool = True) -> None:
    """Every second: say where this student is (the teacher's pace), and rerun the page when the teacher moved
    since it was drawn (while following), when the class came back (`seen` None) or ended, or when the
    teacher revealed the answer of this step. A store that does not answer is simply asked again next time."""
    lesson, step = _where()
    try:
        out = store().heartbeat(code, student_id(), lesson, step, following)
    except K.StoreDown:
        return
    state, revealed = out if out is not None else (None, False)
    shown = (lesson, step) if revealed else None
    if shown != st.session_state.get(REVEALED_KEY):
        st.session_state[REVEALED_KEY] = shown
        st.rerun()
    if (state is None and seen is not None) or (state is not None and seen is None) or (
            state is not None and following and state.moved_at != seen):
        st.rerun()


def in_class() -> Optional[str]:
    """The code of the class this session is a student of (joined through `?class=`), or None."""
    code = K.normalise_code(str(st.query_params.get("class", "")))
    if code is None or code not in st.session_state.get(FOLLOW_KEY, {}) or teaching() == code:
        return None
    return code


def record_answer(lesson_id: str, step: int, answer_text: str, right: bool, group: str = "") -> None:
    """A student's try at a step's check goes to the class's counts (nothing for anyone not in a class)."""
    code = in_class()
    if code is None:
        return
    try:
        store().answer(code, student_id(), lesson_id, step, answer_text, right, group)
    except K.StoreDown as exc:
        st.caption("Your answer could not reach your teacher just now (the class store is not answering).")
        log.warning("class %s: an answer was not counted, the store did not answer: %s", code, exc)
    except ValueError:
        pass  # a lesson id no class can hold (an uploaded lesson's) is not counted


def revealed_here(lesson_id: str, step: int) -> bool:
    """Whether this student's teacher revealed the answer of this step (as the last poll said)."""
    return in_class() is not None and st.session_state.get(REVEALED_KEY) == (lesson_id, int(step))


# ---------------------------------------------------------------------------------------------
# What the teacher sees: the class board on the lesson bar, and the join screen
# ---------------------------------------------------------------------------------------------


def class_board(lesson_id: str, step: int, has_check: bool) -> None:
    """For the teacher, on the lesson bar: the pace, and the answers to this step's check (live)."""
    code = teaching()
    if code is not None:
        _board(code, lesson_id, step, has_check)


@st.fragment(run_every=BOARD_SECONDS)
def _board(code: str, lesson_id: str, step: int, has_check: bool) -> None:
    """Every 2 s, from one store read: where the students are, who answered, who was right on the first try,
    the common wrong answers, and the Reveal button."""
    try:
        board = store().board(code, lesson_id, step)
    except K.StoreDown:
        st.caption(f":material/cloud_off: Class {code}: the class store is not answering; the counts come back "
                   "when it does.")
        return
    if board is None:
        return
    _, pace, answers = board
    with st.container(border=True, key="class_board"):
        st.markdown(f":material/groups: **Class {code}**: {_students(pace.students)} · on this step "
                    f"{pace.on(lesson_id, step)} · behind {pace.behind(lesson_id, step)} · exploring {pace.exploring}")
        if not has_check:
            return
        present = max(answers.students, answers.answered)
        st.markdown(f"Answered **{answers.answered} / {present}** · right first try **{answers.right_first}**")
        if answers.wrong:
            st.markdown("Common wrong answers:\n" + "\n".join(
                f"- {literal(text)}: {_students(n)}" for text, n in answers.wrong))
        if answers.revealed:
            st.caption(":material/visibility: The answer is shown to the students.")
        else:
            st.button("Reveal the answer", icon=":material/visibility:", key="class_reveal", on_click=_reveal,
                      args=(code, lesson_id, step), help="Every student then sees the right answer under the check.")


def _reveal(code: str, lesson_id: str, step: int) -> None:
    held = st.session_state.get(TEACHER_KEY)
    if not held or held[0] != code:
        return
    try:
        store().reveal(code, held[1], lesson_id, step)
    except K.StoreDown as exc:
        log.warning("class %s: the answer was not revealed, the store did not answer: %s", code, exc)


def join_screen() -> None:
    """At the top of the Lessons page while this session teaches: the code, link and QR code large for the
    projector, how many students joined (live), and Start the lesson (or Back to step k)."""
    code = teaching()
    if code is None:
        return
    state = _live_class(code)
    if state is None:
        return
    link = join_link(code)
    if st.session_state.get(JOIN_SHOWN_KEY) != code:  # just opened, from the bottom of the page: to the top
        st.session_state[JOIN_SHOWN_KEY] = code
        st.html(TO_TOP.format(code=code), unsafe_allow_javascript=True)
    with st.container(border=True, key="join_screen"):
        left, right = st.columns([3, 2], vertical_alignment="center")
        with left:
            st.html(f'<div style="font-size:1.3rem">Join the class: open</div>'
                    f'<div style="font-size:1.6rem;font-weight:600;word-break:break-all">{html.escape(link)}</div>'
                    f'<div style="font-size:1.3rem;margin-top:0.8rem">or type the code</div>'
                    f'<div style="font-size:5rem;font-weight:700;letter-spacing:0.12em;font-family:monospace;'
                    f'line-height:1.1">{html.escape(code)}</div>')
            _joined(code)
            started = state.step > 1 or st.session_state.get(STARTED_KEY) == code
            st.button("Start the lesson" if not started else f"Back to step {state.step}", type="primary",
                      icon=":material/play_arrow:", key="class_start", on_click=_start, args=(state,))
        with right:
            st.image(qr_png(link), caption="Scan to join", width=340)


@st.fragment(run_every=BOARD_SECONDS)
def _joined(code: str) -> None:
    try:
        n = store().pace(code).students
    except K.StoreDown:
        return
    st.markdown(f"### :material/groups: {_students(n)} joined")


def _students(n: int) -> str:
    return f"{n} student" if n == 1 else f"{n} students"


def _start(state: K.ClassState) -> None:
    """Go to the class's step (step 1 at the start), keeping presenter mode."""
    st.session_state[STARTED_KEY] = state.code
    present = {"present": "1"} if st.query_params.get("present") == "1" else {}
    st.query_params.from_dict({"lesson": state.lesson, "step": str(state.step), **present})


def open_join_screen() -> None:
    """From the lesson bar: the Lessons page with the join screen (the class stays at its step)."""
    present = {"present": "1"} if st.query_params.get("present") == "1" else {}
    st.switch_page("pages/lessons.py", query_params=present)


def _live_class(code: str) -> Optional[K.ClassState]:
    """The class this session teaches, put back if the store lost it; None (with a message) when it is gone."""
    held = st.session_state[TEACHER_KEY]
    try:
        state = store().get(code)
        if state is None and _put_back(code, held[1], *held[2]):
            state = store().get(code)
    except K.StoreDown as exc:
        store_down(exc, f"class {code} cannot be shown now")
        return None
    if state is None:
        st.session_state.pop(TEACHER_KEY, None)
        st.session_state[COOKIE_WANT_KEY] = ""
        st.warning(f"Class {code} has expired.")
    return state


# ---------------------------------------------------------------------------------------------
# The Lessons page's panel
# ---------------------------------------------------------------------------------------------


def class_panel(lesson_titles: dict[str, str], uploaded: Optional[dict[str, str]] = None) -> None:
    """Open (teacher) or join (student) a class. `lesson_titles`: the lessons every server has (bundled and
    the teacher's folder); `uploaded`: this session's own uploads, which a class cannot follow (said here,
    before a class is opened)."""
    st.header("Teach a class")
    _, ttl, problem = settings()
    st.markdown("Open a class and give your students its code, link or QR code (the join screen): their screens "
                "follow the lesson step you show, within about a second, on their own laptops. They can detach to "
                "explore and re-join; only you (your private teacher link) can move the class. On each step you see "
                "how many answered its check, how many were right on the first try and the common wrong answers, "
                "and you can reveal the answer. A class ends when you close it or "
                f"after {ttl / 3600:g} hours without a move.")
    if problem:
        st.warning(literal(problem), icon=":material/settings:")
    code = teaching()
    if code is None:
        _open_form(lesson_titles, uploaded or {})
    else:
        _class_card(code, lesson_titles)
    _join_form()


def _open_form(lesson_titles: dict[str, str], uploaded: dict[str, str]) -> None:
    """The lesson to teach and the Open button; a line on uploaded lessons, which students would not have."""
    if uploaded:
        names = ", ".join(repr(t) for t in uploaded.values())
        st.info(literal(f"A class can follow only the lessons listed here, which every student's browser has. Your "
                        f"uploaded lesson ({names}) is in your session only: put its file in the server's lesson "
                        "folder (GLASSBOX_LESSONS_DIR) to teach it to a class."), icon=":material/info:")
    if not lesson_titles:
        st.info("There is no lesson to teach yet.")
        return
    with st.container(horizontal=True, vertical_alignment="bottom"):
        lesson_id = st.selectbox("Lesson", list(lesson_titles), format_func=lesson_titles.get,
                                 key="lessons.class_lesson")
        if st.button("Open a class", icon=":material/groups:", key="class_open"):
            if open_class(lesson_id) is not None:
                st.rerun()  # the join screen at the top of this page: the teacher starts the lesson from there


def _class_card(code: str, lesson_titles: dict[str, str]) -> None:
    """The open class: its code, where it is, the teacher's private link, the answers as CSV, and Close. (The
    join screen at the top of the page shows the link and QR code large.)"""
    state = _live_class(code)
    if state is None:
        return
    held = st.session_state[TEACHER_KEY]
    st.markdown(f"### Class code: `{code}`")
    st.markdown(f"Students open **{join_link(code)}** (or type the code below). The class is at step {state.step} "
                f"of *{literal(lesson_titles.get(state.lesson, state.lesson))}*.")
    with st.expander("Your private teacher link", icon=":material/key:"):
        st.warning("Do not project or share this link: whoever opens it controls the class (moves it, reveals "
                   "answers, closes it). Open it on another device or browser to teach from there; this browser "
                   "keeps control after a reload without it.", icon=":material/visibility_off:")
        st.code(teacher_link(code, held[1]), language=None, wrap_lines=True)
    with st.container(horizontal=True):
        try:
            rows = store().rows(code, held[1]) or []
        except K.StoreDown:
            rows = None
        if rows is not None:
            st.download_button("Download answers (CSV)", K.answers_csv(rows), f"class-{code}-answers.csv", "text/csv",
                               icon=":material/download:", key="class_csv", on_click="ignore",
                               help=f"Every student's first answer per step, right or not, and tries ({len(rows)} "
                                    "rows). Students are anonymous unless they gave a nickname.")
        st.button("Close the class", icon=":material/close:", key="class_close", on_click=close_class)


def _join_form() -> None:
    """A student types the code; a wrong one counts against the limits (find_class)."""
    st.markdown("**Joining a class?** Type the code your teacher shows.")
    with st.form("class_join", border=False):
        with st.container(horizontal=True):
            typed = st.text_input("Class code", max_chars=12, key="lessons.join_code", placeholder="e.g. K7PX2M")
            nick = st.text_input("Nickname (optional)", max_chars=K.MAX_NICKNAME, key="lessons.join_nickname",
                                 placeholder="anonymous", help="Shown to your teacher with your answers while the "
                                 "class lasts; without one you are anonymous.")
        if st.form_submit_button("Join", icon=":material/group_add:"):
            st.session_state[NICKNAME_KEY] = K.clean_nickname(nick)
            joined = K.normalise_code(typed)
            try:
                state, refusal = find_class(joined) if joined else (None, None)
            except K.StoreDown as exc:
                store_down(exc, "no class can be joined now")
                return
            if refusal:
                st.error(refusal, icon=":material/block:")
            elif state is None:
                st.error(f"{literal(repr(typed[:20]))} is not the code of an open class. Check it with your teacher.")
            else:
                _set_following(joined, True)
                st.query_params["class"] = joined
                st.rerun()


def store_ttl_hours() -> float:
    """How long an idle class lives, in hours (for text that states it)."""
    return settings()[1] / 3600
