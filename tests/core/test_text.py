"""ui.shell.text: computed and echoed text shown literally in Streamlit's Markdown, and a lesson's narration
kept as Markdown only while it holds no link or image. Pure Python (no Streamlit), so it is tested here;
tests/e2e/test_literal_text.py shows the same strings in chromium."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core import lessons as L
from ui.shell.text import JOINER, has_link, is_literal, literal, narration, plain, plotly_literal

# What the issue saw eaten, and what a student, a URL or a file can type.
SEEN = [
    "The output is the weighted sum of the values: 0.225*1 + 0.275*-1 + 0.500*3 = 0.9000.",
    "calling __import__(...) is not allowed; only abs, min and max can be called.",
    ":material/home: :smile: :red[red] :streamlit: $x$ and $$y$$ cost $5",
    "[a link](http://example.com) ![an image](http://example.com/x.png) <http://example.com> www.example.org",
    "a@example.com ~~gone~~ a | b &amp; <b>bold</b> `code` back\\slash \\*",
    "- a list\n1. numbered\n    four spaces\n# heading\n> quote\ntext\n===",
    "Example: abs(i - j) <= 2, i >= j, x ~= y, a -> b <- c <-> d -- e",  # Streamlit draws ≤ ≥ ≈ → ← ↔ —
]
# Blanks (spaces, tabs, non-breaking spaces) at the start of a line read back as spaces (what a reader sees),
# everything else exactly; only a joiner or a carriage return in the text itself is left out.
MARKDOWN = list(" \t\u00a0\n-+=#1.)*_`[]<>|~$&\\:@w/!()")  # drawn often: what Markdown and Streamlit read
ROUND_TRIP = st.text(st.one_of(st.sampled_from(MARKDOWN),
                               st.characters(blacklist_categories=("Cs",), blacklist_characters="\r" + JOINER)),
                     max_size=80)


@pytest.mark.parametrize("text", SEEN)
def test_what_the_issue_saw_is_escaped_and_reads_back(text):
    md = literal(text)
    assert is_literal(md) and plain(md) == text
    assert not is_literal(text)  # each of them would have been read as Markdown


@given(ROUND_TRIP)
def test_any_text_becomes_literal_markdown_that_reads_back(text):
    md = literal(text)
    assert is_literal(md)
    expected = "\n".join(re.sub(r"^[ \t\u00a0]+", lambda m: " " * len(m.group()), line) for line in text.split("\n"))
    assert plain(md) == expected


def test_the_patterns_streamlit_reads_in_plain_text_are_broken():
    md = literal(":material/home: :smile: http://h.example www.h.example a@h.example i <= j -> k 12:30")
    for whole in (":material", ":smile", "http://", "www.", "@h", "<=", "->"):
        assert whole not in md
    assert "12:30" not in md and plain(md).endswith("12:30")  # a joiner, invisible


def test_an_underscore_inside_a_word_stays_as_written_and_one_at_its_edge_is_escaped():
    """CommonMark: `_` between two letters or digits cannot open or close emphasis, so `lambda_2`, `dk_keys`
    and `pe_n` stay as typed (pages' notes name URL parameters so); `_x_` and `__import__` would not."""
    assert literal("lambda_2 = 0 at dk_keys") == "lambda_2 = 0 at dk_keys"
    assert literal("_x_ and __import__") == "\\_x\\_ and \\_\\_import\\_\\_"
    assert plain(literal("__import__")) == "__import__" and is_literal(literal("_x_"))


def test_line_start_markers_are_escaped_only_where_they_count():
    assert literal("- x") == "\\- x" and literal("x - y") == "x - y"
    assert literal("3. x") == "3\\. x" and literal("pi is 3.14") == "pi is 3.14"
    assert literal("a\nb") == "a  \nb"  # a line break stays one
    assert literal("    code") == "\u00a0" * 4 + "code"  # not a code block
    assert literal("\u00a0 \t- x") == "\u00a0" * 3 + "\\- x" and is_literal(literal("\u00a0 \t- x"))


@pytest.mark.parametrize("markdown", [
    "see [the paper](https://example.com/p.pdf)",
    "![a picture](http://example.com/x.png)",
    "![a picture](/app/static/x.png)",
    "a [reference][r] link\n\n[r]: http://example.com",
    "a [shortcut] link\n\n[shortcut]:\n  http://example.com",
    "an autolink <https://example.com> or <mailto:a@example.com>",
    "bare https://example.com, www.example.com and a@example.com",
])
def test_a_narration_with_a_link_or_image_is_shown_as_plain_text(markdown):
    assert has_link(markdown)
    assert narration(markdown) == literal(markdown) and is_literal(narration(markdown))


def test_every_bundled_narration_stays_markdown():
    narrations = [step.narration for lesson in L.bundled() for step in lesson.steps]
    assert narrations and not any(has_link(n) for n in narrations)
    assert narration(narrations[0]) == narrations[0]


def test_plotly_titles_show_tags_as_typed():
    assert plotly_literal("0<i>j & i<=2") == "0&lt;i&gt;j &amp; i&lt;=2"
