"""A class that follows the teacher: the teacher opens a class (a short code, a link and a QR code drawn
here, with no network), students join with `?class=<code>` and see the teacher's lesson step within
about a second; they can detach to explore and re-join. Only the teacher's session holds the token
that moves the class. The store is core.classroom's: in this process, or Redis when
GLASSBOX_REDIS_URL is set (several app servers then share their classes).
"""

from __future__ import annotations

import io
import os
from typing import Optional
from urllib.parse import urlsplit

import segno
import streamlit as st

from core import classroom as K
from ui.shell import query
from ui.shell.text import literal

REDIS_URL_ENV, TTL_ENV = "GLASSBOX_REDIS_URL", "GLASSBOX_CLASS_TTL"
TEACHER_KEY = "glassbox.class.teacher"  # (code, token, last (lesson, step) pushed) of the class this session teaches
FOLLOW_KEY = "glassbox.class.follow"  # code -> whether this student follows the teacher now
POLL_SECONDS = 1.0  # students see a move within this plus one rerun


@st.cache_resource(show_spinner=False)
def _store(redis_url: str, ttl: int) -> K.ClassStore:
    return K.store_for(redis_url, ttl)


def store() -> K.ClassStore:
    """The process's class store (one per configuration)."""
    try:
        ttl = int(os.environ.get(TTL_ENV, K.DEFAULT_TTL))
    except ValueError:
        ttl = K.DEFAULT_TTL
    return _store(os.environ.get(REDIS_URL_ENV, ""), max(ttl, 60))


def teaching() -> Optional[str]:
    """The code of the class this session teaches, if any."""
    held = st.session_state.get(TEACHER_KEY)
    return held[0] if held else None


def open_class(lesson_id: str) -> K.ClassState:
    """Open a class at step 1 of a lesson; this session becomes its teacher."""
    state, token = store().open(lesson_id, 1)
    st.session_state[TEACHER_KEY] = (state.code, token, (lesson_id, 1))
    return state


def close_class() -> None:
    held = st.session_state.pop(TEACHER_KEY, None)
    if held:
        store().close(held[0], held[1])


def teach(lesson_id: str, step: int) -> None:
    """Move the class this session teaches to the step it shows now (nothing for anyone else)."""
    held = st.session_state.get(TEACHER_KEY)
    if not held or held[2] == (lesson_id, step):
        return
    if store().move(held[0], held[1], lesson_id, step):
        st.session_state[TEACHER_KEY] = (held[0], held[1], (lesson_id, step))
    else:
        st.session_state.pop(TEACHER_KEY, None)
        st.warning(f"Class {held[0]} has ended or expired; open a new one on the Lessons page.")


def join_link(code: str) -> str:
    """The link students open: this server's address with `?class=<code>`."""
    try:
        parts = urlsplit(st.context.url or "")
        base = f"{parts.scheme}://{parts.netloc}" if parts.scheme and parts.netloc else ""
    except (AttributeError, RuntimeError):
        base = ""
    return f"{base}/?class={code}"


def qr_png(text: str) -> bytes:
    """A QR code of `text` as PNG bytes, drawn here (segno is pure Python; nothing leaves the server)."""
    out = io.BytesIO()
    segno.make(text, error="m").save(out, kind="png", scale=8, border=2)
    return out.getvalue()


# ---------------------------------------------------------------------------------------------
# The student's side, run by the lesson bar before it reads the lesson and step
# ---------------------------------------------------------------------------------------------


def _set_following(code: str, on: bool) -> None:
    st.session_state.setdefault(FOLLOW_KEY, {})[code] = on


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
    state = store().get(code)
    if state is None:
        st.warning(f"There is no class {code} now: it may have ended or expired. Ask your teacher for the code.",
                   icon=":material/groups:")
        return None
    following = st.session_state.get(FOLLOW_KEY, {}).get(code, True)
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
    if following:
        _poll(code, state.moved_at)
    return code, following


@st.fragment(run_every=POLL_SECONDS)
def _poll(code: str, seen: float) -> None:
    """Every second: when the teacher moved since this page was drawn, rerun the page to follow."""
    state = store().get(code)
    if state is None or state.moved_at != seen:
        st.rerun()


# ---------------------------------------------------------------------------------------------
# The Lessons page's panel
# ---------------------------------------------------------------------------------------------


def class_panel(lesson_titles: dict[str, str]) -> None:
    """Open (teacher) or join (student) a class."""
    st.header("Teach a class")
    st.markdown("Open a class and give your students its code, link or QR code: their screens follow the lesson "
                "step you show, within about a second, on their own laptops. They can detach to explore and "
                "re-join; only your browser session can move the class. A class ends when you close it or "
                f"after {store_ttl_hours():g} hours without a move.")
    code = teaching()
    if code is None:
        if not lesson_titles:
            st.info("There is no lesson to teach yet.")
            return
        with st.container(horizontal=True, vertical_alignment="bottom"):
            lesson_id = st.selectbox("Lesson", list(lesson_titles), format_func=lesson_titles.get,
                                     key="lessons.class_lesson")
            if st.button("Open a class", icon=":material/groups:", key="class_open"):
                open_class(lesson_id)
                st.query_params.from_dict({"lesson": lesson_id, "step": "1"})
                st.rerun()
    else:
        state = store().get(code)
        if state is None:
            st.session_state.pop(TEACHER_KEY, None)
            st.warning(f"Class {code} has expired.")
            return
        link = join_link(code)
        left, right = st.columns([2, 1])
        with left:
            st.markdown(f"### Class code: `{code}`")
            st.markdown(f"Students open **{link}** (or type the code below). The class is at step {state.step} "
                        f"of *{lesson_titles.get(state.lesson, state.lesson)}*.")
            st.button("Close the class", icon=":material/close:", key="class_close", on_click=close_class)
        with right:
            st.image(qr_png(link), caption="Scan to join", width=220)
    st.markdown("**Joining a class?** Type the code your teacher shows.")
    with st.form("class_join", border=False):
        typed = st.text_input("Class code", max_chars=12, key="lessons.join_code", placeholder="e.g. K7PX2M")
        if st.form_submit_button("Join", icon=":material/group_add:"):
            joined = K.normalise_code(typed)
            if joined is None or store().get(joined) is None:
                st.error(f"{literal(repr(typed[:20]))} is not the code of an open class. Check it with your teacher.")
            else:
                _set_following(joined, True)
                st.query_params["class"] = joined
                st.rerun()


def store_ttl_hours() -> float:
    return getattr(store(), "ttl", K.DEFAULT_TTL) / 3600
