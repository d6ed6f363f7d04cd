"""The lesson bar: while `?lesson=<id>&step=<k>` is in the URL, every page opens with the step's
narration, "step k of n", back and next, the step's check, and "reset this step".

The shared sidebar calls `show()` before it draws anything, so every page (including pages added
later) gets the bar at its top without an edit. Opening a step writes its view into the URL,
makes every control read the URL again (ui.shell.query.forget) and switches to the step's page; after
that the student may change anything, and "reset this step" opens the view again.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Optional

import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

from core import checks as C
from core import lessons as L
from core.classroom import answer_bin
from ui.shell import classroom, lessons_catalog, models, query, sidebar_url
from ui.shell.memo import memo
from ui.shell.nav import PAGES
from ui.shell.text import has_link, literal, narration

APPLIED_KEY = "glassbox.lesson.applied"  # (lesson id, step) whose view this session last opened
FEEDBACK_KEY = "glassbox.lesson.feedback"  # (lesson id, step) -> (right?, why, wrong tries so far)
UPLOADED_KEY = "glassbox.lesson.uploaded"  # lessons a teacher uploaded in this session, by id
SCROLLED_KEY = "glassbox.lesson.scrolled"  # the (lesson id, step) whose page was last scrolled to its top
# Our own constant script (no input in it): a new step starts at the top of the page, where its bar is.
TO_TOP = ("<script>/* step {step} */ const m = document.querySelector('[data-testid=\"stMain\"]');"
          " if (m) m.scrollTo(0, 0); window.scrollTo(0, 0);</script>")
# Presenter mode: no sidebar, large type, and the step's notes in a panel fixed at the right of the screen,
# so the page itself (its figure) starts at the top of the projector's first screen instead of below the notes.
# Presenter mode's version (the notes are a panel beside the page): scroll the page just far enough that its
# first figure shows whole on the projector's first screen, once the figure is drawn, and again while it takes its
# final size (a chart drawn short first grew past the screen's edge); for 15 s, or until the teacher scrolls.
# Our own constant script.
TO_FIGURE = ("<script>/* step {step} */ (() => {{ const m = document.querySelector('[data-testid=\"stMain\"]');"
             " if (!m) return; m.scrollTo(0, 0); let tries = 0, ours = 0;"
             " const look = () => {{ if (Math.abs(m.scrollTop - ours) > 1 || ++tries > 75) return;"
             " const c = m.querySelector('[data-testid=\"stPlotlyChart\"], [data-testid=\"stVegaLiteChart\"],"
             " [data-testid=\"stImage\"]'); const r = c && c.getBoundingClientRect();"
             " if (r && r.height >= 50) {{ const over = r.bottom - window.innerHeight + 16;"
             " if (over > 1 && r.top > 8) {{ m.scrollBy(0, Math.min(over, r.top - 8)); ours = m.scrollTop; }} }}"
             " setTimeout(look, 200); }};"
             " setTimeout(look, 300); }})();</script>")
PRESENT_CSS = """
<style>
[data-testid="stSidebar"], [data-testid="stSidebarCollapsedControl"], [data-testid="stHeader"],
[data-testid="stToolbar"], [data-testid="stDecoration"], [data-testid="stSidebarNav"] { display: none !important; }
html, body, [data-testid="stApp"] { font-size: 20px; }
.st-key-page_lead { display: none !important; }  /* the page's lead: the panel's narration takes its place */
[data-testid="stMainBlockContainer"] { padding: 1rem calc(33vw + 0.5rem) 1rem 1.5rem !important; max-width: 100%; }
/* a page without the panel (the Lessons page's join screen) uses the whole width */
[data-testid="stMainBlockContainer"]:not(:has(.st-key-lesson_bar)) { padding-right: 1.5rem !important; }
/* the block holding the panel is not contained (ui/shell/offscreen.py): a contained block would frame it */
[data-testid="stMainBlockContainer"] > [data-testid="stVerticalBlock"] > *:has(.st-key-lesson_bar) {
  content-visibility: visible !important; contain: none !important; }
[data-testid="stMarkdownContainer"] p, [data-testid="stMarkdownContainer"] li { font-size: 1rem; line-height: 1.4; }
h1 { font-size: 1.8rem !important; } h2, h3 { font-size: 1.4rem !important; }
.katex-display > .katex { font-size: 1em !important; }  /* KaTeX's 1.21em at the larger type overran the column */
.st-key-lesson_bar { position: fixed; top: 0.75rem; right: 0.75rem; bottom: 0.75rem; width: calc(33vw - 1.5rem);
  overflow-y: auto; z-index: 1000; background: var(--st-background-color, #ffffff); }
.st-key-lesson_bar [data-testid="stMarkdownContainer"] p, .st-key-lesson_bar [data-testid="stMarkdownContainer"] li {
  font-size: 1.05rem; line-height: 1.4; }
.st-key-lesson_bar h4 { font-size: 1.3rem !important; }
.st-key-lesson_pgup, .st-key-lesson_pgdn { display: none !important; }  /* keys only: a clicker's page up/down */
</style>
"""


def presenting() -> bool:
    """Whether the URL asks for presenter mode (`?present=1`)."""
    return st.query_params.get("present") == "1"


def known_lessons() -> tuple[dict[str, L.Lesson], list[str]]:
    """The bundled lessons, the teacher's folder, and this session's uploads (by id), and load problems."""
    lessons, problems = lessons_catalog.catalogue()
    lessons = {**lessons, **st.session_state.get(UPLOADED_KEY, {})}
    return lessons, problems


def current_page() -> str:
    """The file name (under pages/) of the page running now, e.g. "attention.py"."""
    ctx = get_script_run_ctx()
    info = ctx.pages_manager.get_pages().get(ctx.page_script_hash) if ctx is not None else None
    return Path(info["script_path"]).name if info and info.get("script_path") else "home.py"


def _widget_keys() -> list[str]:
    """Every widget key bound to a URL parameter, on every page and in the sidebar."""
    keys = [p.key for p in sidebar_url.URL] + [sidebar_url.TGT_MODE_KEY, sidebar_url.SEED_KEY]
    for p in PAGES:
        try:
            table = getattr(importlib.import_module(f"ui.{Path(p.path).stem}.view"), "URL", ())
        except ModuleNotFoundError:
            continue
        keys.extend(param.key for param in table)
    return keys


def step_query(lesson: L.Lesson, k: int, keep: dict) -> dict:
    """The whole URL of step k (1-based): the lesson's own parameters, then the step's view."""
    out = {name: value for name, value in keep.items() if name in lessons_catalog.LESSON_PARAMS}
    out.update(lesson=lesson.id, step=str(k))
    out.update(lesson.steps[k - 1].query)
    return out


def open_step(lesson: L.Lesson, k: int, current_page: str) -> None:
    """Put step k's view into the URL, make every control read it again, and go to its page."""
    new = step_query(lesson, k, dict(st.query_params))
    query.forget(_widget_keys())
    st.session_state[APPLIED_KEY] = (lesson.id, k)
    page = lesson.steps[k - 1].page
    if page != current_page:
        st.switch_page(f"pages/{page}", query_params=new)
    st.query_params.from_dict(new)


def _step_number(n: int) -> int:
    raw = st.query_params.get("step", "1")
    try:
        k = int(str(raw).strip())
    except ValueError:
        query.note(f"URL parameter step={str(raw)[:40]!r} is not a whole number; opening step 1.")
        return 1
    if not 1 <= k <= n:
        query.note(f"URL parameter step={k} is outside 1..{n}; opening step {min(max(k, 1), n)}.")
    return min(max(k, 1), n)


def show() -> Optional[tuple[L.Lesson, int]]:
    """Open and draw the lesson bar when the URL names a lesson; returns (lesson, step) or None."""
    if presenting():
        st.html(PRESENT_CSS)
    classroom.claim_teacher()  # a teacher link (`?teach=`) or, after a reload, the teacher cookie
    classroom.keep_cookie()
    joined = classroom.follow()  # a student following a class: the teacher's step goes into the URL first
    lesson_id = st.query_params.get("lesson")
    if lesson_id is None:
        st.session_state.pop(APPLIED_KEY, None)
        return None
    lessons, _ = known_lessons()
    lesson = lessons.get(str(lesson_id))
    if lesson is None:
        shown = ", ".join(sorted(lessons))
        st.warning(literal(f"There is no lesson called {str(lesson_id)[:60]!r}. Lessons: {shown}."),
                   icon=":material/school:")
        return None
    k = _step_number(len(lesson.steps))
    current = current_page()
    if st.session_state.get(APPLIED_KEY) != (lesson.id, k):
        open_step(lesson, k, current)
    draw(lesson, k, locked=bool(joined and joined[1]))
    classroom.teach(lesson.id, k)  # a teacher's step moves their class
    return lesson, k


# ---------------------------------------------------------------------------------------------
# Drawing the bar
# ---------------------------------------------------------------------------------------------


def _go(k: int) -> None:
    st.query_params["step"] = str(k)


def _reset() -> None:
    st.session_state.pop(APPLIED_KEY, None)


def _leave() -> None:
    for name in ("lesson", "step"):
        st.query_params.pop(name, None)


def draw(lesson: L.Lesson, k: int, locked: bool = False) -> None:
    """The bar: lesson, step k of n, narration, try this, the check, and the step buttons. Compact: the
    narration and the task sit side by side under one line of step title and buttons. In presenter mode the
    bar is a panel at the right of the screen (PRESENT_CSS) beside the page, whose figure shows at 1024x768.
    `locked`: a student following a class cannot step on their own (the teacher moves the class)."""
    step, n = lesson.steps[k - 1], len(lesson.steps)
    if st.session_state.get(SCROLLED_KEY) != (lesson.id, k):
        st.session_state[SCROLLED_KEY] = (lesson.id, k)
        script = TO_FIGURE if presenting() else TO_TOP
        st.html(script.format(step=f"{lesson.id} {k}"), unsafe_allow_javascript=True)
    with st.container(border=True, key="lesson_bar"):
        teaching = classroom.teaching()
        where = (f":material/school: **{literal(lesson.title)}** · {literal(step.section)} · step {k} of {n}"
                 + (f" · :material/groups: class **{teaching}**" if teaching else ""))
        if presenting():  # a narrow panel: one column, the buttons on top where the teacher's hand goes
            st.caption(where)
            st.progress(k / n)
            nav_buttons(lesson, k, n, locked)
            st.markdown(f"#### {literal(step.title)}")
            story_text(step.narration)
            task_text(lesson, k, step)
            classroom.class_board(lesson.id, k, step.check is not None)
            return
        with st.container(horizontal=True, vertical_alignment="center"):
            st.caption(where)
            nav_buttons(lesson, k, n, locked)
        st.progress(k / n)
        story, task = st.columns([3, 2])
        with story:
            st.markdown(f"#### {literal(step.title)}")
            story_text(step.narration)
        with task:
            task_text(lesson, k, step)
            classroom.class_board(lesson.id, k, step.check is not None)  # the teacher's view of the class


def task_text(lesson: L.Lesson, k: int, step: L.Step) -> None:
    """The step's 'try this' list and its check."""
    st.markdown("**Try this**\n\n" + "\n".join(f"- {literal(p)}" for p in step.try_this))
    if step.check is not None:
        check_panel(lesson, k, step.check)


def story_text(text: str) -> None:
    """A step's narration: Markdown and math as the lesson wrote it, but plain text when it holds a link or
    an image, which an uploaded lesson could point at another server (an image is fetched as it shows)."""
    st.markdown(narration(text))
    if has_link(text):
        st.caption("This narration has a link or an image, so it is shown as plain text: a lesson's text may "
                   "not send the browser to another server.")


def nav_buttons(lesson: L.Lesson, k: int, n: int, locked: bool = False) -> None:
    """Back, next, reset and leave; in presenter mode the arrow and page keys step too."""
    present = presenting()
    if locked:
        st.caption("Your teacher moves the class from step to step; *Explore on my own* above lets you step alone.")
    with st.container(horizontal=True, key="lesson_nav", width="content"):
        # With a keyboard shortcut Streamlit draws the key (an arrow) after the label: no arrow icon then.
        st.button("Back", icon=None if present else ":material/arrow_back:", disabled=k == 1 or locked, on_click=_go,
                  args=(k - 1,), key="lesson_back", shortcut="Left" if present else None)
        st.button("Next", icon=None if present else ":material/arrow_forward:", type="primary",
                  disabled=k == n or locked, on_click=_go, args=(k + 1,), key="lesson_next",
                  shortcut="Right" if present else None)
        st.button("Reset this step", icon=":material/restart_alt:", on_click=_reset, key="lesson_reset",
                  help="Open this step's view again (model, input and every control).")
        if present:  # page up / page down, as a presentation clicker sends them
            st.button("Page up", key="lesson_pgup", disabled=k == 1 or locked, on_click=_go, args=(k - 1,),
                      shortcut="PageUp", type="tertiary")
            st.button("Page down", key="lesson_pgdn", disabled=k == n or locked, on_click=_go, args=(k + 1,),
                      shortcut="PageDown", type="tertiary")
        elif not locked:
            st.button("Leave the lesson", icon=":material/close:", on_click=_leave, key="lesson_leave",
                      type="tertiary")
        if classroom.teaching() and st.button("Join screen", icon=":material/qr_code_2:", key="lesson_join_screen",
                                              help="The class's code, link and QR code, large, with the students "
                                                   "who joined; the class stays at this step."):
            classroom.open_join_screen()


@memo(maxsize=128)
def _solution(kind: str, args_json: str) -> C.Solution:
    """A pick or number check's answer, computed once per process (bundled models are shared)."""
    return C.solve(kind, json.loads(args_json), C.Context(load_model=models.get_model))


def solution(check: L.Check) -> C.Solution:
    return _solution(check.kind, json.dumps(dict(check.args), sort_keys=True))


def check_state() -> dict[str, str]:
    """What a state check reads: the URL's parameters through the reader every page and the sidebar use
    (ui.shell.query: one longer than MAX_PARAM_CHARS is read as absent, with the same note), never the raw URL;
    core.checks then keeps to the page's own bounds (the Masks page's 32 tokens, its knobs' ranges)."""
    return {name: value for name in st.query_params if (value := query.parse_text(name)) is not None}


def grade(check: L.Check, answer) -> C.Feedback:
    """The verdict on an answer (pick, number) or on what the student has set (the URL as the pages read it)."""
    if check.sort == C.STATE:
        return C.grade(check.kind, check.args, ctx=C.Context(load_model=models.get_model, state=check_state()))
    if answer is None:
        return C.Feedback(False, "Pick one of the options first." if check.sort == C.PICK else "Type a number first.")
    return C.grade(check.kind, check.args, answer, solution=solution(check))


def check_panel(lesson: L.Lesson, k: int, check: L.Check) -> None:
    """The question, the answer control, a Check button, and the feedback (with the hint after a miss)."""
    where = (lesson.id, k)
    st.markdown(f"**Check:** {literal(check.question)}")
    answer = None
    row = st.container(horizontal=True, vertical_alignment="bottom")  # the answer and its button on one line
    try:
        with row:
            if check.sort == C.PICK:
                answer = st.radio("Your answer", solution(check).options, index=None, horizontal=True,
                                  key=f"lesson_answer.{lesson.id}.{k}", label_visibility="collapsed",
                                  format_func=literal)
            elif check.sort == C.NUMBER:
                answer = st.number_input("Your answer", value=None, format="%.4f",
                                         key=f"lesson_answer.{lesson.id}.{k}", placeholder="type a number",
                                         label_visibility="collapsed", width=200)
    except ValueError as exc:
        st.error(literal(f"This check cannot run on this server: {exc}"))
        return
    label = "Check what I set" if check.sort == C.STATE else "Check"
    feedback = st.session_state.setdefault(FEEDBACK_KEY, {})
    with row:
        pressed = st.button(label, icon=":material/task_alt:", key=f"lesson_check.{lesson.id}.{k}")
    if pressed:
        try:
            verdict = grade(check, answer)
        except ValueError as exc:  # e.g. a teacher's check names a role or preset that does not exist
            st.error(literal(f"This check cannot run: {exc}"))
            return
        misses = feedback.get(where, (False, "", 0))[2] + (not verdict.ok)
        feedback[where] = (verdict.ok, verdict.why, misses)
        if check.sort == C.STATE or answer is not None:
            classroom.record_answer(lesson.id, k, *answer_for_class(check, answer, verdict.ok))
    if where in feedback:
        ok, why, misses = feedback[where]
        if ok:
            st.success(literal(f"Right. {why}"), icon=":material/check_circle:")
        else:
            st.error(literal(f"Not yet. {why}"), icon=":material/cancel:")
            if misses:
                st.info(literal(f"Hint: {check.hint}"), icon=":material/lightbulb:")
    if classroom.revealed_here(lesson.id, k):
        st.info(literal(f"Your teacher revealed the answer: {revealed_answer(check)}"), icon=":material/visibility:")


def answer_for_class(check: L.Check, answer, ok: bool) -> tuple[str, bool, str]:
    """(The answer as text, right?, its group among wrong answers) for the class's counts: a pick's option,
    a number binned by the check's tolerance, or for a state check the value of the parameter it reads."""
    if check.sort == C.PICK:
        return str(answer), ok, str(answer)
    if check.sort == C.NUMBER:
        value = float(answer) if answer is not None else float("nan")
        return f"{value:.6g}", ok, answer_bin(value, solution(check).tolerance)
    param = check.args.get("param")
    value = check_state().get(param, "(default)") if isinstance(param, str) else ("as asked" if ok else "not yet")
    text = f"{param} = {value}" if isinstance(param, str) else str(value)
    return text, ok, text


def revealed_answer(check: L.Check) -> str:
    """The right answer and why, as the teacher reveals it (a state check: what to set, its hint)."""
    if check.sort == C.STATE:
        return check.hint
    try:
        sol = solution(check)
    except ValueError:  # a check that cannot run on this server (said above it): its hint instead
        return check.hint
    if check.sort == C.PICK:
        return f"{' or '.join(str(r) for r in sol.right)}. {sol.why}"
    within = f" (within {sol.tolerance:g})" if sol.tolerance else ""
    return f"{sol.right:.4g}{within}. {sol.why}"
