"""The lesson bar on the pages: every bundled step opens its page with its view and no exception;
back, next and reset work; checks give feedback with a hint after a wrong try; bad links are reported."""

from __future__ import annotations

import pytest

from core import lessons as L
from tests.app.conftest import app_at, assert_ok
from tests.app.fragments import click
from ui.shell import lessons_catalog
from ui.shell.nav import PAGES
from ui.shell.text import is_literal, plain

TITLES = {p.path.split("/")[-1]: p.title for p in PAGES}
LESSONS = {l.id: l for l in L.bundled(lessons_catalog.views())}


def bar_caption(at) -> str:
    return next(c.value for c in at.caption if "step " in c.value and " of " in c.value)


def page_title(at) -> str:
    return at.title[0].value if at.title else ""


@pytest.mark.parametrize("lesson_id", sorted(LESSONS))
def test_every_step_opens_its_page_with_its_view(lesson_id):
    """One session walks the lesson by its links: one run per step."""
    lesson = LESSONS[lesson_id]
    at = None
    for k, step in enumerate(lesson.steps, start=1):
        if at is None:
            at = app_at(None, {"lesson": lesson_id, "step": str(k)})
        else:
            at.query_params["step"] = str(k)
            at.run()
        assert_ok(at)
        assert f"step {k} of {len(lesson.steps)}" in bar_caption(at)
        expected = "Transformer Glassbox" if step.page == "home.py" else TITLES[step.page]
        assert page_title(at).startswith(expected), (k, step.title)
        if "model" in step.query:  # the sidebar writes it back (page controls may be left out at defaults)
            assert at.query_params.get("model") == step.query["model"], k


def test_next_back_and_reset():
    at = app_at(None, {"lesson": "mechanics-of-attention", "step": "2"})
    assert page_title(at) == "Attention" and at.query_params["model"] == "induction-rope"
    at.selectbox(key="glassbox.model").set_value("sort-decoder").run()
    assert at.query_params["model"] == "sort-decoder"  # the student may change anything
    at.button(key="lesson_reset").click().run()
    assert_ok(at)
    assert at.query_params["model"] == "induction-rope"  # ... and reset brings the step's view back
    at.button(key="lesson_next").click().run()
    assert_ok(at)
    assert "step 3 of" in bar_caption(at) and page_title(at) == "Retrieval" and at.query_params["points"] == "sine"
    at.button(key="lesson_back").click().run()
    assert "step 2 of" in bar_caption(at) and at.query_params["dk"] == "256"


def test_a_number_check_says_wrong_with_a_hint_then_right():
    at = app_at(None, {"lesson": "attention-as-retrieval", "step": "2"})
    at.number_input(key="lesson_answer.attention-as-retrieval.2").set_value(0.2).run()
    at.button(key="lesson_check.attention-as-retrieval.2").click().run()
    assert at.error and "Not yet" in at.error[0].value
    assert any("Hint:" in i.value for i in at.info)
    at.number_input(key="lesson_answer.attention-as-retrieval.2").set_value(0.5005).run()
    at.button(key="lesson_check.attention-as-retrieval.2").click().run()
    assert at.success and "Right" in at.success[0].value and "0.5005" in at.success[0].value


def test_a_state_check_reads_the_students_own_mask():
    at = app_at(None, {"lesson": "encoder-decoder-stacks", "step": "6"})
    key = "lesson_check.encoder-decoder-stacks.6"
    at.button(key=key).click().run()
    assert at.error and "connected" in at.error[0].value  # the step opens with a full mask
    page = at._tree  # the preset reruns only what reads the mask (keyed fragments), not the lesson bar
    click(at, "masks.all.preset", "block", page)
    click(at, key, None, page)
    assert_ok(at)
    assert at.success and "lambda_2 = 0" in plain(at.success[0].value)


def test_feedback_is_shown_as_computed():
    """Issue 35, defect 6: the one-number example's feedback "0.225*1 + 0.275*-1 + 0.500*3" lost its stars
    to italics. The feedback is Markdown that shows the computed text exactly."""
    at = app_at(None, {"lesson": "mechanics-of-attention", "step": "1"})
    at.number_input(key="lesson_answer.mechanics-of-attention.1").set_value(1.4516).run()
    at.button(key="lesson_check.mechanics-of-attention.1").click().run()
    assert_ok(at)
    shown = at.success[0].value
    assert is_literal(shown), shown
    assert plain(shown) == ("Right. The output is the weighted sum of the values: 0.225*1 + 0.275*-1 + 0.500*3 "
                            "= 1.4516.")


def test_an_unknown_lesson_in_the_link_is_echoed_literally():
    at = app_at(None, {"lesson": "**x** [a](http://example.com)", "step": "1"})
    assert_ok(at)
    warning = next(w.value for w in at.warning if "no lesson called" in w.value)
    assert is_literal(warning) and "'**x** [a](http://example.com)'" in plain(warning)


TEACHERS_TEXT = {  # what a lesson file may hold that Markdown would read: each shown as typed
    "title": "Weights *and* values: 0.2*1 + 0.3*-1",
    "summary": "Uses __import__ and :material/home: and $x$, <b>not bold</b>.",
    "section": "Part_1_of_2 ~~x~~",
    "try": "Set `d_k` to 4 * 2 and [look](http://example.com).",
    "question": "Is 2*3*4 = 24? :smile:",
    "hint": "# not a heading",
}


IMAGE_NARRATION = "Look: ![a beacon](http://example.com/pixel.png) and **this** part."
MARKDOWN_NARRATION = "A *previous-token* head, $\\lambda_2$ and **bold**: Markdown as the author wrote it."


def teachers_lesson() -> str:
    """A two-step lesson file whose every text field holds Markdown characters (TEACHERS_TEXT), with a
    narration that shows an image from another server (step 1) and one that is plain Markdown (step 2)."""
    import json

    t = {name: json.dumps(value) for name, value in TEACHERS_TEXT.items()}  # a JSON string is a TOML string
    step = """
[[steps]]
section = {section}
title = {title}
narration = {narration}
page = "attention.py"
try = [{try_}]
[steps.check]
kind = "scalar_output"
question = {question}
hint = {hint}
"""
    steps = "".join(step.format(section=t["section"], title=t["title"], narration=json.dumps(n), try_=t["try"],
                                question=t["question"], hint=t["hint"])
                    for n in (IMAGE_NARRATION, MARKDOWN_NARRATION))
    return (f'title = {t["title"]}\nlevel = "first steps"\nchapter = "mechanics"\nsummary = {t["summary"]}\n'
            + steps)


def test_a_teachers_lesson_text_is_shown_as_typed(tmp_path, monkeypatch):
    """Issue 35, defect 6: titles, summary, sections, prompts, questions and hints of a lesson file are
    shown literally; its narration stays Markdown unless it holds a link or an image (fetched from another
    server as it shows), and then it is plain text with a line that says why."""
    (tmp_path / "marked-up.toml").write_text(teachers_lesson())
    monkeypatch.setenv(lessons_catalog.LESSON_DIR_ENV, str(tmp_path))

    at = app_at("pages/lessons.py")
    assert_ok(at)
    assert not at.error  # the file loaded
    heading = next(m.value for m in at.markdown if m.value.startswith("##### ") and "Weights" in m.value)
    assert is_literal(heading[6:]) and plain(heading[6:]) == TEACHERS_TEXT["title"]
    summary = next(m.value for m in at.markdown if "import" in m.value)
    assert is_literal(summary) and plain(summary) == TEACHERS_TEXT["summary"]

    at = app_at(None, {"lesson": "marked-up", "step": "1"})
    assert_ok(at)
    texts = [m.value for m in at.markdown]
    title = next(v[5:] for v in texts if v.startswith("#### "))
    assert is_literal(title) and plain(title) == TEACHERS_TEXT["title"]
    story = next(v for v in texts if "beacon" in v)
    assert is_literal(story) and plain(story) == IMAGE_NARRATION  # no image, no link: shown as typed
    assert any("shown as plain text" in c.value for c in at.caption)
    prompt = next(v for v in texts if v.startswith("**Try this**"))
    assert is_literal(prompt.split("\n- ", 1)[1]) and plain(prompt.split("\n- ", 1)[1]) == TEACHERS_TEXT["try"]
    question = next(v for v in texts if v.startswith("**Check:** "))
    assert is_literal(question[11:]) and plain(question[11:]) == TEACHERS_TEXT["question"]
    caption = bar_caption(at)
    assert plain(caption.split("**")[1]) == TEACHERS_TEXT["title"] and is_literal(caption.split("**")[1])
    assert TEACHERS_TEXT["section"] in plain(caption.split(" · ")[1]) and is_literal(caption.split(" · ")[1])

    at.number_input(key="lesson_answer.marked-up.1").set_value(0.0).run()
    at.button(key="lesson_check.marked-up.1").click().run()
    hint = next(i.value for i in at.info if "Hint" in i.value)
    assert is_literal(hint) and plain(hint) == "Hint: " + TEACHERS_TEXT["hint"]

    at.query_params["step"] = "2"
    at.run()
    assert_ok(at)
    assert MARKDOWN_NARRATION in [m.value for m in at.markdown]  # Markdown and math as written
    assert not any("shown as plain text" in c.value for c in at.caption)


def test_a_pick_check_offers_the_models_heads():
    at = app_at(None, {"lesson": "attention-as-retrieval", "step": "5"})
    radio = at.radio(key="lesson_answer.attention-as-retrieval.5")
    assert "L1H2" in radio.options and "L0H0" in radio.options
    radio.set_value("L0H0").run()
    at.button(key="lesson_check.attention-as-retrieval.5").click().run()
    assert at.error and "Not yet" in at.error[0].value


def test_bad_lesson_links_are_reported_not_crashed():
    at = app_at(None, {"lesson": "no-such-lesson", "step": "1"})
    assert_ok(at)
    assert any("no lesson called" in w.value for w in at.warning)
    at = app_at(None, {"lesson": "compact-primer", "step": "99"})
    assert_ok(at)
    assert any("outside 1..9" in w.value for w in at.warning) and "step 9 of 9" in bar_caption(at)


def test_presenter_mode_hides_the_chrome_and_binds_the_keys():
    at = app_at(None, {"lesson": "compact-primer", "step": "2", "present": "1"})
    assert_ok(at)
    assert any("stSidebar" in h.proto.body for h in at.get("html"))
    keys = {b.key for b in at.button}
    assert {"lesson_back", "lesson_next", "lesson_pgup", "lesson_pgdn"} <= keys


def test_the_lessons_page_lists_every_lesson_with_its_length():
    at = app_at("pages/lessons.py")
    assert_ok(at)
    text = " ".join(c.value for c in at.caption)
    for lesson in LESSONS.values():
        assert f"{len(lesson.steps)} steps" in text
    at.segmented_control(key="lessons.level").set_value("advanced").run()
    assert_ok(at)
    assert [m.value for m in at.markdown if m.value.startswith("#####")] == ["##### The architecture, and why it replaced RNNs"]


def test_the_lessons_page_leaves_the_authors_documentation_to_the_teachers_guide():
    """Issue 35, defect 8: no TOML format, example or check-kinds table on a student's Lessons page; where a
    teacher uploads a file, one line says the format is in docs/lessons.md."""
    at = app_at("pages/lessons.py")
    assert_ok(at)
    assert "Check kinds" not in [h.value for h in at.header]
    assert not at.table and not [c for c in at.code if "[[steps]]" in c.value]
    assert not [e for e in at.expander if "example" in e.label.lower()]
    assert not any("[[steps]]" in m.value or "`[steps.view]`" in m.value for m in at.markdown)
    line = [c.value for c in at.caption if "docs/lessons.md" in c.value]
    assert len(line) == 1 and at.get("file_uploader")


def test_an_uploaded_file_with_a_problem_is_refused_with_its_line():
    good = (L.LESSONS_DIR / "compact-primer.toml").read_bytes()
    assert lessons_catalog.parse_upload(good, "mine.toml").id == "upload-mine"
    bad = good.replace(b'page = "positions.py"', b'page = "secret.py"', 1)
    with pytest.raises(ValueError, match=r"mine.toml, line \d+: unknown page 'secret.py'"):
        lessons_catalog.parse_upload(bad, "mine.toml")
    with pytest.raises(ValueError, match="has no parameter 'rm'"):
        lessons_catalog.parse_upload(good.replace(b"pe_n = 64", b"rm = 64", 1), "mine.toml")


# --- a class that follows the teacher ----------------------------------------------------------

def test_three_students_follow_the_teacher_and_cannot_move_the_class():
    teacher = app_at("pages/lessons.py")
    teacher.selectbox(key="lessons.class_lesson").set_value("compact-primer").run()
    teacher.button(key="class_open").click().run()
    assert_ok(teacher)
    code = teacher.session_state["glassbox.class.teacher"][0]
    # The teacher stays on the Lessons page: the join screen (code, link, QR code) and the class panel
    assert any(f"Class code: `{code}`" in m.value for m in teacher.markdown) and teacher.get("image")
    teacher.button(key="class_start").click().run()  # Start the lesson
    assert "step 1 of 9" in bar_caption(teacher) and f"class **{code}**" in bar_caption(teacher)

    students = [app_at(None, {"class": code}) for _ in range(3)]
    for s in students:
        assert_ok(s)
        assert "step 1 of 9" in bar_caption(s) and s.button(key="lesson_next").disabled  # locked while following

    teacher.button(key="lesson_next").click().run()
    teacher.button(key="lesson_next").click().run()
    assert "step 3 of 9" in bar_caption(teacher)
    for s in students:
        s.run()  # what the one-second poll does in a browser
        assert_ok(s)
        assert "step 3 of 9" in bar_caption(s) and page_title(s) == "Generation"

    # A student detaches and explores: the class does not move, the others stay with the teacher.
    loner = students[0]
    loner.button(key="class_detach").click().run()
    loner.button(key="lesson_next").click().run()
    assert "step 4 of 9" in bar_caption(loner)
    for s in students[1:]:
        s.run()
        assert "step 3 of 9" in bar_caption(s)
    teacher.run()
    assert "step 3 of 9" in bar_caption(teacher)

    # Re-joining brings the student back to the teacher's step.
    loner.button(key="class_rejoin").click().run()
    assert_ok(loner)
    assert "step 3 of 9" in bar_caption(loner)


def test_a_teachers_folder_is_listed_and_its_broken_files_named(tmp_path, monkeypatch):
    good = (L.LESSONS_DIR / "compact-primer.toml").read_text()
    (tmp_path / "my-walk.toml").write_text(good.replace('title = "The compact primer"', 'title = "My own walk"', 1))
    (tmp_path / "broken.toml").write_text(good.replace('kind = "max_heads"', 'kind = "os.system"', 1))
    monkeypatch.setenv(lessons_catalog.LESSON_DIR_ENV, str(tmp_path))
    at = app_at("pages/lessons.py")
    assert_ok(at)
    assert any(m.value == "##### My own walk" for m in at.markdown)
    assert any("broken.toml, line" in e.value and "unknown check kind 'os.system'" in e.value for e in at.error)


def test_a_lesson_file_that_vanishes_while_the_folder_is_read_is_named_not_crashed(tmp_path, monkeypatch):
    """A file removed between the folder's listing and its stat (here a link to nothing) raised
    FileNotFoundError out of the page; now the file is named and the other lessons are listed."""
    good = (L.LESSONS_DIR / "compact-primer.toml").read_text()
    (tmp_path / "my-walk.toml").write_text(good.replace('title = "The compact primer"', 'title = "My own walk"', 1))
    (tmp_path / "gone.toml").symlink_to(tmp_path / "nowhere.toml")
    monkeypatch.setenv(lessons_catalog.LESSON_DIR_ENV, str(tmp_path))
    at = app_at("pages/lessons.py")
    assert_ok(at)
    assert any(m.value == "##### My own walk" for m in at.markdown)
    assert any("gone.toml" in e.value and "read" in e.value for e in at.error)


def test_a_wrong_class_code_is_reported():
    at = app_at(None, {"class": "ZZZZZZ"})
    assert_ok(at)
    assert any("no class ZZZZZZ" in w.value for w in at.warning)
    at = app_at(None, {"class": "<b>1</b>"})
    assert_ok(at)
    assert any("not a class code" in w.value for w in at.warning)


def test_a_check_that_cannot_run_says_so_on_the_page(tmp_path, monkeypatch):
    text = (L.LESSONS_DIR / "attention-as-retrieval.toml").read_text()
    (tmp_path / "odd-roles.toml").write_text(text.replace('role = "induction"', 'role = "wizard"', 1))
    monkeypatch.setenv(lessons_catalog.LESSON_DIR_ENV, str(tmp_path))
    at = app_at(None, {"lesson": "odd-roles", "step": "5"})
    assert_ok(at)
    assert any("This check cannot run" in e.value and "wizard" in e.value for e in at.error)


def test_the_teachers_guide_example_loads_against_every_pages_parameters():
    """docs/lessons.md promises that its complete example loads as it is: parse it with the views the app
    offers (every page's URL table), as an uploaded file would be."""
    import re
    from pathlib import Path

    from core import lessons as L
    from ui.shell import lessons_catalog

    guide = (Path(__file__).resolve().parents[2] / "docs" / "lessons.md").read_text()
    example = guide.split("## A complete example", 1)[1]
    toml = re.search(r"```toml\n(.*?)```", example, re.S).group(1)
    lesson = L.parse_lesson(toml, "attention-in-four-steps", "attention-in-four-steps.toml", lessons_catalog.views())
    assert len(lesson.steps) == 4 and all(step.page in lessons_catalog.views() for step in lesson.steps)
    assert [step.check.kind for step in lesson.steps if step.check] == [
        "scalar_weight", "head_with_role", "mask_lambda2", "attention_vs_rnn_cost"]
