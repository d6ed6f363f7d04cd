"""Lesson files: every bundled lesson loads and keeps the rules; malformed files are refused with
a message naming the line; every check's right answer passes and a wrong one fails."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from core import checks as C
from core import lessons as L

VIEWS = {"attention.py": {"model", "input", "layer", "head", "view"}, "masks.py": {"model", "preset", "b"},
         "home.py": {"model", "input"}}
GOOD = '''title = "A small lesson"
level = "first steps"
chapter = "mechanics"
summary = "One step."

[[steps]]
title = "Weights"
narration = "The softmax of the scores."
page = "attention.py"
try = ["Move the query."]
[steps.view]
model = "induction-rope"
layer = 1
[steps.check]
kind = "scalar_weight"
question = "Weight on key 3?"
hint = "Softmax."
args = { key = 3 }
'''


def parse(text: str, views=VIEWS) -> L.Lesson:
    return L.parse_lesson(text, "small", "small.toml", views)


def test_a_good_file_loads_with_its_view_as_url_text():
    lesson = parse(GOOD)
    assert (lesson.id, lesson.title, len(lesson.steps)) == ("small", "A small lesson", 1)
    step = lesson.steps[0]
    assert step.page == "attention.py" and step.query == {"model": "induction-rope", "layer": "1"}
    assert step.check.kind == "scalar_weight" and step.check.args == {"key": 3}


@pytest.mark.parametrize("old, new, line, words", [
    ('page = "attention.py"', 'page = "nowhere.py"', 9, "unknown page 'nowhere.py'"),
    ('layer = 1', 'colour = 1', 13, "has no parameter 'colour'"),
    ('model = "induction-rope"', 'model = "gpt-5"', 12, "unknown model 'gpt-5'"),
    ('kind = "scalar_weight"', 'kind = "run_this_code"', 15, "unknown check kind 'run_this_code'"),
    ('args = { key = 3 }', 'args = { key = "three" }', 18, "must be int"),
    ('args = { key = 3 }', 'args = { key = 3, shell = "rm" }', 18, "no argument 'shell'"),
    ('level = "first steps"', 'level = "expert"', 2, "level must be one of"),
    ('chapter = "mechanics"', 'chapter = "poetry"', 3, "chapter must be one of"),
    ('try = ["Move the query."]', 'try = ["a", "b", "c"]', 10, "one or two"),
    ('narration = "The softmax of the scores."', 'narration = ""', 8, "non-empty text"),
    ('title = "Weights"', 'title = "Weights"\nscript = "x"', 8, "a step has no field 'script'"),
])
def test_a_malformed_file_names_the_problem_and_its_line(old, new, line, words):
    with pytest.raises(ValueError) as err:
        parse(GOOD.replace(old, new, 1))
    assert f"small.toml, line {line}:" in str(err.value) and words in str(err.value), str(err.value)


def test_toml_syntax_errors_carry_tomllibs_line():
    with pytest.raises(ValueError, match=r"not valid TOML.*line 9"):
        parse(GOOD.replace('page = "attention.py"', 'page = attention.py'))


def test_a_missing_field_and_no_steps_are_refused():
    with pytest.raises(ValueError, match="line 1: the top of the file needs `summary"):
        parse(GOOD.replace('summary = "One step."\n', ""))
    with pytest.raises(ValueError, match="needs steps"):
        parse(GOOD.split("[[steps]]")[0])


def test_without_a_view_table_pages_are_checked_against_the_pages_folder():
    assert parse(GOOD, views=None).steps[0].page == "attention.py"
    with pytest.raises(ValueError, match="unknown page"):
        parse(GOOD.replace('"attention.py"', '"app.py"'), views=None)


def test_files_that_are_not_text_or_too_big_are_refused(tmp_path: Path):
    binary = tmp_path / "bin.toml"
    binary.write_bytes(b"\xff\xfe\x00title")
    with pytest.raises(ValueError, match="not UTF-8"):
        L.load_lesson(binary)
    big = tmp_path / "big.toml"
    big.write_text("#" * (L.MAX_FILE_BYTES + 1))
    with pytest.raises(ValueError, match="too large"):
        L.load_lesson(big)
    badly_named = tmp_path / "Bad Name.toml"
    badly_named.write_text(GOOD)
    with pytest.raises(ValueError, match="file name"):
        L.load_lesson(badly_named)


# --- the bundled lessons -----------------------------------------------------------------------

def app_views():
    from ui.shell.lessons_catalog import views
    return views()


@pytest.fixture(scope="module")
def lessons():
    return L.bundled(app_views())


def test_every_seed_chapter_has_a_bundled_lesson_of_6_to_12_steps(lessons):
    """One walk per chapter of the source texts, and the English models' lesson beside the architecture one."""
    assert sorted(set(l.chapter for l in lessons)) == sorted(L.CHAPTERS)
    assert "heads-on-real-sentences" in [l.id for l in lessons]
    for lesson in lessons:
        assert 6 <= len(lesson.steps) <= 12, lesson.id


def test_every_section_of_a_bundled_lesson_has_a_check(lessons):
    for lesson in lessons:
        for section in lesson.sections:
            assert any(s.check for s in lesson.steps if s.section == section), (lesson.id, section)


def test_every_bundled_step_opens_a_live_page_with_known_parameters(lessons):
    views = app_views()
    for lesson in lessons:
        for step in lesson.steps:
            assert step.page in views and set(step.query) <= views[step.page], (lesson.id, step.title)
            assert 1 <= len(step.try_this) <= 2


def all_checks():
    return [(l.id, k, s.check) for l in L.bundled(app_views()) for k, s in enumerate(l.steps) if s.check]


@pytest.mark.parametrize("lesson_id, k, check", all_checks(), ids=lambda v: str(v)[:40] if isinstance(v, str) else None)
def test_every_bundled_check_passes_its_right_answer_and_fails_a_wrong_one(lesson_id, k, check):
    kind = C.kind(check.kind)
    if kind.sort == C.STATE:
        right, wrong = kind.examples(kind.arguments(check.args))
        assert C.grade(check.kind, check.args, ctx=C.Context(state=right)).ok
        verdict = C.grade(check.kind, check.args, ctx=C.Context(state=wrong))
        assert not verdict.ok and verdict.why
        return
    solution = C.solve(check.kind, check.args)
    assert solution.why
    if kind.sort == C.PICK:
        assert set(solution.right) <= set(solution.options) and len(solution.right) < len(solution.options)
        assert C.grade(check.kind, check.args, solution.right[0]).ok
        wrong = next(o for o in solution.options if o not in solution.right)
        assert not C.grade(check.kind, check.args, wrong).ok
    else:
        assert C.grade(check.kind, check.args, solution.right).ok
        assert not C.grade(check.kind, check.args, solution.right + 10 * solution.tolerance + 1).ok
        assert not C.grade(check.kind, check.args, "not a number").ok

