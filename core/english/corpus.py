"""The English corpus: the prose of the Python documentation, read from Debian's python3.11-doc HTML.

Only paragraph text is kept (`<p>`, headings, list items inside the page body); code blocks, tables,
signatures, tables of contents and navigation are dropped. Documents are read in sorted path order,
each paragraph's whitespace collapsed to single spaces and Sphinx's typographic quotes turned back into
the typed ones (' and "), so the same package always gives the same text.
About 5% of the documents, evenly spread over that order, are held out for evaluation.

The corpus is written once to a cache file (default build/english/corpus.txt): documents separated by a
blank line, one paragraph per line. Any text file in that layout can stand in for it (`--corpus`), so a
machine without the package (a GPU box) can be handed the text. The text itself is not shipped.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
import unicodedata
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Iterable, Optional, Sequence

DOCS_HTML = Path("/usr/share/doc/python3.11/html")  # Debian's python3.11-doc
DOCS_CHANGELOG = Path("/usr/share/doc/python3.11-doc/changelog.Debian.gz")
DOCS_COPYRIGHT = "/usr/share/doc/python3.11-doc/copyright"
HELDOUT_SHARE = 0.05
# Pages that are lists of links or of names, not prose.
SKIPPED_PAGES = re.compile(r"(^|/)(genindex.*|py-modindex|search|contents|index|download)\.html$")

SOURCE = {
    "name": "Python 3.11 documentation (prose only), Debian package python3.11-doc",
    "path": str(DOCS_HTML),
    "licence": "PSF License Version 2 (the Python documentation's licence; code examples, which are dropped "
               "here, are also under the Zero-Clause BSD licence)",
    "copyright": "Copyright (c) 2001-2023 Python Software Foundation; see " + DOCS_COPYRIGHT +
                 " and license.html in the documentation.",
    "shipped": False,
}


@dataclass(frozen=True)
class Document:
    """One page of the documentation (or one blank-line-separated block of a cache file)."""

    name: str  # its path in the documentation ("library/functions.html"), or "doc-<i>" from a cache file
    paragraphs: tuple[str, ...]  # whitespace-normalised, never empty

    @property
    def text(self) -> str:
        """The document as the models read it: one paragraph per line."""
        return "\n".join(self.paragraphs)


@dataclass(frozen=True)
class Corpus:
    """The documents, split by document into training and held-out text."""

    train: tuple[Document, ...]
    heldout: tuple[Document, ...]
    source: dict  # where the text comes from, and its licence

    def stats(self) -> dict:
        """Sizes in characters and documents (tokens are counted once a tokenizer exists)."""
        return {"documents": len(self.train) + len(self.heldout), "train_documents": len(self.train),
                "heldout_documents": len(self.heldout),
                "train_characters": sum(len(d.text) for d in self.train),
                "heldout_characters": sum(len(d.text) for d in self.heldout)}


# ---------------------------------------------------------------------------------------------
# Paragraphs out of one Sphinx page

BLOCKS = {"p", "h1", "h2", "h3", "h4", "h5", "h6", "li"}  # elements whose text is one paragraph
SKIPPED_TAGS = {"pre", "table", "script", "style", "dt", "nav", "math", "svg", "button", "form", "select"}
SKIPPED_CLASSES = {"highlight", "toctree-wrapper", "headerlink", "linenos", "admonition-title", "sphinxsidebar",
                   "related", "footer", "doctest"}
VOID_TAGS = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


class ProseParser(HTMLParser):
    """Collects the paragraphs of a Sphinx page's body (`<div class="body">`), skipping code and tables."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack: list[tuple[str, bool, bool, bool]] = []  # (tag, opens the body, starts a skipped subtree, a paragraph)
        self.in_body = 0  # how many open elements are the body (0 or 1)
        self.skipping = 0  # how many open elements start a skipped subtree
        self.blocks = 0  # how many open paragraph elements
        self.current: list[str] = []
        self.paragraphs: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag in VOID_TAGS:
            if tag == "br":
                self.current.append(" ")
            return
        attrs = dict(attrs)
        classes = set((attrs.get("class") or "").split())
        body = tag == "div" and ("body" in classes or attrs.get("role") == "main") and not self.in_body
        skip = tag in SKIPPED_TAGS or bool(classes & SKIPPED_CLASSES) or \
            any(c.startswith("highlight-") for c in classes)
        block = tag in BLOCKS and not self.skipping and not skip
        if block:
            self.flush()  # a paragraph inside a list item ends the item's own text so far
        self.stack.append((tag, body, skip, block))
        self.in_body += body
        self.skipping += skip
        self.blocks += block

    def handle_endtag(self, tag):
        if tag in VOID_TAGS or not any(entry[0] == tag for entry in self.stack):
            return  # a stray end tag: ignore it rather than unwind the stack
        while self.stack:
            open_tag, body, skip, block = self.stack.pop()
            if block:
                self.flush()
            self.in_body -= body
            self.skipping -= skip
            self.blocks -= block
            if open_tag == tag:
                break

    def handle_data(self, data):
        if self.in_body and not self.skipping and self.blocks:
            self.current.append(data)

    def flush(self) -> None:
        text = normalise("".join(self.current))
        self.current = []
        if text:
            self.paragraphs.append(text)


# Sphinx turns typed quotes into typographic ones; students type the plain ones, so the models read those.
PLAIN_QUOTES = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"'})


def normalise(text: str) -> str:
    """NFC, typographic quotes as typed ones, every run of whitespace (newlines included) as one space,
    other control characters dropped."""
    text = unicodedata.normalize("NFC", text).translate(PLAIN_QUOTES)
    text = "".join(c for c in text if c.isprintable() or c.isspace())
    return " ".join(text.split())


def html_paragraphs(html: str) -> list[str]:
    """The prose paragraphs of one Sphinx HTML page, in reading order."""
    parser = ProseParser()
    parser.feed(html)
    parser.close()
    parser.flush()
    return parser.paragraphs


# ---------------------------------------------------------------------------------------------
# The whole documentation, the split, and the cache file


def read_html_docs(root: Path = DOCS_HTML) -> list[Document]:
    """Every prose page under root, in sorted path order; pages with no prose are left out."""
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"{root} is not there: install Debian's python3.11-doc (apt-get install "
                                f"python3.11-doc), or pass --corpus with a text file built elsewhere")
    docs = []
    for path in sorted(root.rglob("*.html"), key=lambda p: p.relative_to(root).as_posix()):
        name = path.relative_to(root).as_posix()
        if name.startswith("_") or SKIPPED_PAGES.search(name):
            continue
        paragraphs = html_paragraphs(path.read_text(encoding="utf-8", errors="replace"))
        if paragraphs:
            docs.append(Document(name, tuple(paragraphs)))
    return docs


def heldout_indices(n: int, share: float = HELDOUT_SHARE) -> list[int]:
    """Which of n documents are held out: round(share * n) of them (at least 1 when n >= 2), evenly spread."""
    if n < 2:
        return []
    k = min(n - 1, max(1, round(share * n)))
    return sorted({int((j + 0.5) * n / k) for j in range(k)})


def split(docs: Sequence[Document], source: dict, share: float = HELDOUT_SHARE) -> Corpus:
    """Training and held-out documents (the held-out ones evenly spread over the sorted order)."""
    held = set(heldout_indices(len(docs), share))
    train = tuple(d for i, d in enumerate(docs) if i not in held)
    heldout = tuple(d for i, d in enumerate(docs) if i in held)
    return Corpus(train, heldout, source)


def write_cache(docs: Sequence[Document], path: Path, source: dict) -> None:
    """corpus.txt (documents separated by a blank line, one paragraph a line) and corpus.json beside it
    (the documents' names and the source)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "\n\n".join(d.text for d in docs) + "\n"
    path.write_text(text, encoding="utf-8")
    meta = {"source": source, "documents": [d.name for d in docs],
            "sha256": hashlib.sha256(text.encode("utf-8")).hexdigest()}
    path.with_suffix(".json").write_text(json.dumps(meta, indent=1), encoding="utf-8")


def read_cache(path: Path) -> tuple[list[Document], dict]:
    """The documents of a cache file (names from corpus.json when it matches), and the recorded source."""
    text = path.read_text(encoding="utf-8")
    blocks = [b for b in re.split(r"\n\s*\n", text) if b.strip()]
    docs = [tuple(normalise(line) for line in b.split("\n") if normalise(line)) for b in blocks]
    meta_path = path.with_suffix(".json")
    meta = json.loads(meta_path.read_text(encoding="utf-8")) if meta_path.exists() else {}
    names = meta.get("documents") if isinstance(meta.get("documents"), list) else None
    if names is None or len(names) != len(docs):
        names = [f"doc-{i}" for i in range(len(docs))]
    source = meta.get("source") or {"name": f"text file {path.name}", "licence": "unknown (not recorded)"}
    return [Document(n, p) for n, p in zip(names, docs) if p], source


def docs_version() -> Optional[str]:
    """The Debian version of python3.11-doc (from its changelog), or None when it is not installed."""
    try:
        with gzip.open(DOCS_CHANGELOG, "rt", encoding="utf-8") as f:
            first = f.readline()
    except OSError:
        return None
    found = re.search(r"\(([^)]+)\)", first)
    return found.group(1) if found else None


def load_corpus(cache: Path, html_root: Path = DOCS_HTML, share: float = HELDOUT_SHARE, limit: int = 0) -> Corpus:
    """The corpus from its cache file, which is written first from the documentation when missing
    (limit > 0: only its first `limit` documents, for quick runs)."""
    cache = Path(cache)
    if not cache.exists():
        source = dict(SOURCE, path=str(html_root), version=docs_version())
        write_cache(read_html_docs(html_root), cache, source)
    docs, source = read_cache(cache)
    if limit > 0:
        docs = docs[:limit]
    if len(docs) < 2:
        raise ValueError(f"{cache} holds {len(docs)} document(s); the held-out split needs at least 2 "
                         f"(documents are separated by a blank line)")
    return split(docs, source, share)


def corpus_digest(cache: Path) -> str:
    """sha256 of the cache file's bytes (recorded in each model's glassbox.json)."""
    return hashlib.sha256(Path(cache).read_bytes()).hexdigest()


def texts(docs: Iterable[Document]) -> list[str]:
    return [d.text for d in docs]
