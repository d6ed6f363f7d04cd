"""The Lessons page's panels: the list of lessons, a teacher's own files, and classes.

A lesson's title, summary and sections are shown literally (an uploaded file's text is not Markdown); how to
write a lesson is the teacher's guide, docs/lessons.md, which this page only points to.

The lesson bar itself (ui.shell.lessons_bar) sits on whichever page a step opens; this page lists what
there is and starts it. `lesson`, `step` and `present` are read by every page (app.py's bar);
they are declared here too so that the URL fuzz test feeds them hostile values.

What a click reruns: the whole page, for every control (no `st.fragment` here). Start and Present
set the URL that app.py's lesson bar reads to switch pages, and an uploaded lesson joins the list
above it, so both need the whole page; the only control local to one panel, the level filter,
redraws text and buttons only, which a page rerun already does quickly.
"""

from __future__ import annotations

import csv
import io

import streamlit as st

from core import lessons as L
from ui.shell import classroom, lessons_bar, lessons_catalog
from ui.shell.page import try_this
from ui.shell.params import Choice, Flag, Int, Params, Text
from ui.shell.text import literal

ALL_LEVELS = "all levels"
URL = Params(
    "lessons",
    Choice("level", ALL_LEVELS, choices=(ALL_LEVELS, *L.LEVELS), omit_default=True),
    Text("lesson", "", written=False),  # read by the lesson bar on every page
    Int("step", 1, lo=1, hi=L.MAX_STEPS, written=False),
    Flag("present", False, written=False),
    Text("class", "", written=False),  # a student's class code (ui.shell.classroom)
    Text("teach", "", written=False),  # a teacher link's "<code>.<secret>" (read once, then removed from the URL)
)


def seed_url() -> None:
    """Read the page's own URL parameter before the title, so a problem with it shows under it."""
    URL.level.seed()


def start(lesson_id: str, present: bool) -> None:
    """Open step 1 of a lesson (the lesson bar then switches to the step's page)."""
    st.session_state.pop(lessons_bar.APPLIED_KEY, None)
    st.query_params.from_dict({"lesson": lesson_id, "step": "1", **({"present": "1"} if present else {})})


def lesson_rows(lessons: list[L.Lesson]) -> list[dict]:
    """One row per lesson for the table and its CSV."""
    return [{"lesson": l.title, "id": l.id, "level": l.level, "chapter": L.CHAPTERS[l.chapter],
             "steps": len(l.steps), "checks": l.n_checks, "covers": "; ".join(l.sections),
             "pages": ", ".join(p.removesuffix(".py") for p in l.pages)} for l in lessons]


def lesson_list() -> None:
    """Every lesson with its length and what it covers; Start and Present buttons."""
    lessons, problems = lessons_bar.known_lessons()
    with st.container(horizontal=True, vertical_alignment="bottom"):
        st.subheader("The lessons", width="content")
        level = URL.level.widget(st.segmented_control, "Level", required=True, label_visibility="collapsed")
    with st.expander("Lesson links and presenter mode"):
        st.markdown("One lesson per chapter of the reference texts, each a walk of 6 to 12 steps across the pages. "
                    "A lesson's link (`?lesson=<id>&step=<k>`) opens that step on any page; add `&present=1` for a "
                    "projector: no sidebar, large type, the step's notes in a panel beside the page, and the arrow "
                    "or page keys step through it.")
    shown = [l for l in lessons.values() if level == ALL_LEVELS or l.level == level]
    if not shown:
        st.info(f"No lesson at the level {level!r} yet.")
    for lesson in shown:
        with st.container(border=True):
            st.markdown(f"##### {literal(lesson.title)}")
            st.caption(f"{lesson.level} · follows *{L.CHAPTERS[lesson.chapter]}* · {len(lesson.steps)} steps, "
                       f"{lesson.n_checks} checks · pages: {', '.join(p.removesuffix('.py') for p in lesson.pages)}")
            st.markdown(literal(lesson.summary))
            st.markdown("Covers: " + " → ".join(literal(s) for s in lesson.sections))
            with st.container(horizontal=True):
                st.button("Start", icon=":material/play_arrow:", type="primary", key=f"start.{lesson.id}",
                          on_click=start, args=(lesson.id, False))
                st.button("Present", icon=":material/co_present:", key=f"present.{lesson.id}",
                          on_click=start, args=(lesson.id, True))
                st.markdown(f"`?lesson={lesson.id}&step=1`")
    rows = lesson_rows(shown)
    if rows:
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
        st.download_button("Download the list (CSV)", out.getvalue(), "lessons.csv", "text/csv",
                           icon=":material/download:")
    for problem in problems:
        st.error(literal(f"A lesson file in the teacher's folder was not loaded: {problem}"), icon=":material/error:")
    try_this("Start **Attention as retrieval** and answer its first question before you look at the page's numbers.",
             "Open any step, change the model in the sidebar, then press *reset this step*: the step's view comes back.")


def teacher_panel() -> None:
    """Upload a lesson file: checked line by line; a file with any problem is refused whole."""
    st.header("Your own lesson")
    st.caption(FORMAT_LINE)
    upload = st.file_uploader("Lesson file (.toml)", type=["toml"], key="lessons.upload",
                              max_upload_size=1)  # MB: the browser refuses more (a lesson is at most 200,000 bytes)
    if upload is None:
        return
    try:
        lesson = lessons_catalog.parse_upload(upload.getvalue(), upload.name)
    except ValueError as exc:
        st.error(literal(f"This lesson was not loaded: {exc}"), icon=":material/error:")
        return
    uploaded = st.session_state.setdefault(lessons_bar.UPLOADED_KEY, {})
    if uploaded.get(lesson.id) != lesson:  # new: run the page again, so that the list above shows it
        uploaded[lesson.id] = lesson
        st.rerun()
    st.success(f"Loaded **{literal(lesson.title)}**: {len(lesson.steps)} steps, {lesson.n_checks} checks. It is in "
               f"the list above for this session as `{lesson.id}`.", icon=":material/check_circle:")


# The authors' documentation (the file format, a complete example, every check kind) is the teacher's guide;
# a student's Lessons page only says where it is.
FORMAT_LINE = ("A lesson is a small TOML file (no code runs from it): its format, a complete example and the check "
               "kinds are in `docs/lessons.md` of the project.")


def join_screen() -> None:
    """While this session teaches a class: its join screen, first on the page (what the projector shows)."""
    classroom.join_screen()


def class_panel() -> None:
    """Open a class (teacher) or join one (student). A class follows only the lessons every session has
    (bundled and the teacher's folder); this session's uploads are named apart, since students lack them."""
    shared, _ = lessons_catalog.catalogue()
    uploaded = st.session_state.get(lessons_bar.UPLOADED_KEY, {})
    classroom.class_panel({l.id: l.title for l in shared.values() if l.id not in uploaded},
                          {l.id: l.title for l in uploaded.values()})
