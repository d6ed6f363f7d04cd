"""Text the app computes or echoes, made safe for Streamlit's Markdown.

`st.markdown`, `st.caption`, `st.error`, `st.warning`, `st.info`, `st.success` and widget labels all render
Markdown, with Streamlit's own additions: `$...$` math, `:material/icon:` and `:emoji:` short codes,
`:red[...]` colours, bare web addresses as links, and "<=" or "->" drawn as "≤" or "→". A check's feedback
"0.225*1 + 0.275*-1" lost its stars to italics, and a formula error showed `__import__` as a bold "import".
What the app computes, and anything a student, a URL or a file typed, goes through `literal()` first, so it
shows exactly as written (checked in chromium by tests/e2e/test_literal_text.py).

A lesson's narration is Markdown on purpose (docs/lessons.md); `narration()` keeps it so, unless it holds a
link or an image: an uploaded lesson must not make the browser fetch from, or send a student to, another
server. Such a narration is shown as plain text, and `has_link()` says why.

Pure Python (no Streamlit import), so tests/core checks it without a page.
"""

from __future__ import annotations

import re

# Word joiner: an invisible character that breaks a pattern Streamlit would otherwise read in plain text.
JOINER = "\u2060"
# Markdown characters that mean something wherever they stand: emphasis, code, links, images, HTML,
# autolinks, tables, strikethrough, math, entities, and the backslash itself. An underscore between two letters
# or digits cannot open or close emphasis (CommonMark), so `dk_keys` and `pe_n` stay as they are written.
_ANYWHERE = re.compile(r"[\\`*\[\]<>|~$&]|(?<![^\W_])_|_(?![^\W_])")
# Characters that mean something only at the start of a line: a heading, a list, a setext underline.
_LINE_START = re.compile(r"^([#+\-=])|^(\d{1,9})([.)])")
# Patterns Streamlit and its Markdown plugins find in plain text even after its escapes are read:
# ":smile:", ":material/x:" and ":red[...]" short codes, "http://" and "www." links, e-mail addresses,
# and the arrows and signs it draws for "->", "<-", "<->", "--", "<=", ">=" and "~=" ("abs(i - j) <= 2"
# showed as "≤"). A joiner goes right after the colon, the "www", the "@", or the sign's first character
# (the second may be escaped: "-\>").
_BREAK = re.compile(r"(?<=:)(?=[\w+\-/])|(?i:(?<=www)(?=\.))|(?<=@)(?=[\w\-])|(?<=[<>~])(?=[-=])|(?<=-)(?=-|\\?>)")


def _line(text: str) -> str:
    """One line made literal: escapes, then the start of the line, then leading blanks kept as blanks."""
    stripped = text.lstrip(" \t\u00a0")
    indent = "\u00a0" * (len(text) - len(stripped))  # 4 leading spaces would start a code block
    body = _ANYWHERE.sub(r"\\\g<0>", stripped)
    body = _LINE_START.sub(lambda m: "\\" + m.group(1) if m.group(1) else m.group(2) + "\\" + m.group(3), body)
    return indent + _BREAK.sub(JOINER, body)


def literal(text: object) -> str:
    """Markdown that Streamlit shows as exactly `text`: every character that Markdown or Streamlit would
    read as formatting is escaped or broken by an invisible joiner, and line breaks stay line breaks."""
    lines = str(text).replace("\r\n", "\n").replace("\r", "\n").split("\n")
    return "  \n".join(_line(line) for line in lines)


_ESCAPE = re.compile(r"\\([!-/:-@\[-`{-~])")  # a backslash before ASCII punctuation: Markdown's escape


def plain(markdown: str) -> str:
    """What a reader sees for Markdown that `literal()` made: the escapes read, the joiners gone, the
    leading blanks back to spaces. (For tests and logs: it does not render any other Markdown.)"""
    lines = markdown.split("  \n")
    out = []
    for line in lines:
        body = line.lstrip("\u00a0")
        out.append(" " * (len(line) - len(body)) + _ESCAPE.sub(r"\1", body.replace(JOINER, "")))
    return "\n".join(out)


def is_literal(markdown: str) -> bool:
    """Whether Streamlit shows `markdown` as plain text: no formatting character is left unescaped and no
    short code, link or line-start marker is left whole. True for whatever `literal()` returns."""
    for line in markdown.split("  \n"):
        body = line.lstrip("\u00a0")
        if "\n" in body or body[:1] in (" ", "\t") or _LINE_START.match(body):
            return False
        if _ANYWHERE.search(_ESCAPE.sub("", body)) or _BREAK.search(body):
            return False
    return True


# A link or image that could leave the server: inline `[t](url)` and `![a](url)`, reference links
# `[t][r]` with their `[r]: url` definitions, autolinks `<scheme:...>` and `<a@b>`, and the bare web and
# e-mail addresses GitHub-flavoured Markdown turns into links.
_LINK = re.compile(
    r"\]\s*\(|\]\s*\[|\]\s*:|<[A-Za-z][A-Za-z0-9+.\-]{1,31}:|<[^<>\s]+@|"
    r"(?i:https?:/|www\.|ftp:/|mailto:|xmpp:)|[\w.+\-]@[\w\-]+\.",
)


def has_link(markdown: str) -> bool:
    """Whether Markdown text holds anything that could become a link or an image (on the safe side: a
    false alarm only costs the text its formatting)."""
    return bool(_LINK.search(markdown))


def narration(markdown: str) -> str:
    """A lesson's narration as Markdown when it holds no link or image, else as literal text."""
    return literal(markdown) if has_link(markdown) else markdown


def code(text: object) -> str:
    """`text` as one Markdown code span (shown as typed, in monospace), fenced with more backticks than it
    holds in a row; a line break shows as a space."""
    text = " ".join(str(text).splitlines())
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def plotly_literal(text: object) -> str:
    """Text for a Plotly title or label, shown as written: Plotly reads a few HTML tags (`<b>`, `<i>`,
    `<a href>`, `<br>`) and entities there, so `<`, `>` and `&` become entities."""
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
