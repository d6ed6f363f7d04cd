"""Every page at long inputs: server time of the first view and of a click, bytes sent, memory (issue 38).

For each page of the app and each input length (64, 256, 512 and 1,024 tokens by default), on a GPT-2-layout
decoder of d_model 128, 4 layers, 4 heads, a vocabulary of 4,096 and a context of 1,024, this opens the page as a
browser session does (AppTest through app.py, the model from a folder via GLASSBOX_MODELS_DIR) and prints:

- first view: seconds spent in the page script for the first view of that input (the server's warm state: the page
  was opened once before at a short input, so what does not depend on the input, such as the Cost page's sweeps
  or a model's role scores, is already computed, as a server has it precomputed or cached);
- click: seconds in the script for one click of a control that reads the input (named in the table), run as the
  browser runs it: its fragment when it sits in one (tests/app/fragments.py);
- sent: bytes of every element the first view sends (each element's protobuf, ByteSize(): a figure's JSON, a
  table's Arrow bytes, a text's characters);
- peak: the most memory the process held during the first view above what it held before (resident set, sampled
  every millisecond after the allocator handed freed memory back), and kept: what the page's memos hold after it
  (ui.shell.memo.held), both in MB.

The model: `--model PATH`, a checkpoint folder (the English decoder, assets/models/english/english-decoder, once it
is built), else a random GPT-2 of that shape built here with `transformers` (as tests/core/pretrained_models.py
does) in a temporary folder. Either is copied into a temporary models folder and opened as `folder:<name>`.

Run: python bench/long_inputs.py [--model PATH] [--lengths 64,256,512,1024] [--pages heads,masks]
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

ENGLISH_DECODER = ROOT / "assets" / "models" / "english" / "english-decoder"
SHAPE = dict(n_embd=128, n_layer=4, n_head=4, n_positions=1024, vocab_size=4096)
PAGES = ("home", "attention", "attention:grid", "heads", "heads:qk", "heads:ablation", "masks", "positions", "depth", "retrieval", "cost",
         "generation", "train", "lessons")  # page[:tab]: the Heads page's Q & K and Ablation tabs read the input
WARM_TOKENS = 16  # the short input each page is opened with first (the server's warm state)
TIMEOUT = 900


# ---------------------------------------------------------------------------------------------
# The model folder


def random_decoder(folder: Path) -> Path:
    """A random GPT-2 of SHAPE with a byte-level BPE tokenizer, saved by transformers into `folder`."""
    from tests.core.pretrained_models import save_hf, tiny_hf_model

    save_hf(tiny_hf_model("gpt2", **SHAPE), folder)
    return folder


def models_dir(model: Optional[Path], root: Path) -> tuple[Path, str]:
    """A models folder holding a copy of `model` (or a random decoder), and the model's id in the app."""
    name = "bench-decoder"
    target = root / name
    if model is not None:
        shutil.copytree(model, target)
    else:
        random_decoder(target)
    return root, f"folder:{name}"


# ---------------------------------------------------------------------------------------------
# Measuring one view


def resident() -> int:
    """This process's resident set in bytes."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class PeakMemory:
    """The most resident memory held while the block runs, above what was held when it began (after a garbage
    collection and glibc's malloc_trim, so memory freed earlier does not hide this view's growth)."""

    def __enter__(self):
        gc.collect()
        try:
            ctypes.CDLL("libc.so.6").malloc_trim(0)
        except OSError:  # not glibc: the baseline includes freed memory
            pass
        self.base = self.peak = resident()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()
        return self

    def _watch(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, resident())
            time.sleep(0.001)

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, resident())

    @property
    def extra(self) -> int:
        return self.peak - self.base


def sent_bytes(node) -> int:
    """Bytes of every element under `node` of AppTest's element tree (each element's protobuf)."""
    children = getattr(node, "children", None)
    if children:
        return sum(sent_bytes(child) for child in children.values())
    proto = getattr(node, "proto", None)
    return proto.ByteSize() if proto is not None and hasattr(proto, "ByteSize") else 0


def memo_bytes() -> int:
    """What every memo of the process keeps now (ui.shell.memo.held)."""
    from ui.shell.memo import held

    return sum(size for _, size in held().values())


# A control per page that reads the input (or the page's main figure), and the value a click sets: what a student
# clicks first. None: the page has no such control.
CLICKS: dict[str, Optional[tuple[str, Callable]]] = {
    "home": None,
    "attention": ("attention.head", lambda n: 1),
    "attention:grid": ("attention.temp", lambda n: 0.5),  # the same view; a temperature runs the model again
    "heads": ("heads.head", lambda n: 1),
    "heads:qk": ("heads.head", lambda n: 1),
    "heads:ablation": ("heads.ablate", lambda n: ["L0 H1"]),  # remove head 1 of layer 0 (as the option reads)
    "masks": ("masks.head", lambda n: 1),
    "positions": ("positions.head", lambda n: 1),
    "depth": ("depth.pos", lambda n: n // 2),
    "retrieval": ("retrieval.qx", lambda n: 0.5),
    "cost": ("cost.heads", lambda n: 2),
    "generation": ("generation.hook", lambda n: "blocks.1.hook_resid_post"),
    "train": ("train.n_heads", lambda n: 2),
    "lessons": None,
}


def text_of(task, n: int, cap: int = 1024) -> str:
    """A text of about n tokens for this model's tokenizer: the app's example sentences in an order of their own
    for each length (no two lengths share their first tokens: a page that reads only the first tokens would find
    the shorter input's results in its memos), repeated and cut at a word: at most n tokens, or at least n at the
    context `cap` (the sidebar keeps the first `cap`)."""
    import random

    from core.text_task import EXAMPLES

    sentences = list(EXAMPLES)
    random.Random(n).shuffle(sentences)
    words = " ".join(sentences * 200).split()

    def count(k: int) -> int:
        return len(task.vocab.encode(" ".join(words[:k])))

    lo, hi = 1, len(words)
    while lo < hi:  # the fewest words that make n tokens
        mid = (lo + hi) // 2
        if count(mid) >= n:
            hi = mid
        else:
            lo = mid + 1
    if n < cap and count(lo) > n and lo > 1:
        lo -= 1
    return " ".join(words[:lo])


def open_page(page: str, model_id: str, text: str):
    """An AppTest session on `page` ("heads:qk": that tab of the page) with `text` in the sidebar, not yet run."""
    from streamlit.testing.v1 import AppTest

    from ui.shell.sidebar_url import INPUT_KEY

    path, _, tab = page.partition(":")
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    at.query_params["model"] = model_id
    if tab:
        at.query_params["view"] = tab
    at.run()
    at.session_state[INPUT_KEY] = text
    return at.switch_page(f"pages/{path}.py")


def click_spec(page: str, n: int) -> Optional[tuple[str, object]]:
    """(the control's key, the value a click sets) of the page's click for an input of n tokens, or None."""
    spec = CLICKS.get(page)
    return None if spec is None else (spec[0], spec[1](n))


def warm_up(page: str, model_id: str, task) -> None:
    """Open the page at a short input and make its click once: what neither depends on the input (a sweep of the
    Cost page, a model's role scores) is then computed, as a server has it precomputed or cached."""
    from tests.app.fragments import click

    at = open_page(page, model_id, text_of(task, WARM_TOKENS))
    at.run()
    spec = click_spec(page, WARM_TOKENS)
    if spec is not None:
        try:
            click(at, *spec, page=at._tree)
        except LookupError:
            pass


def measure(page: str, model_id: str, task, n: int) -> dict:
    """One row of the table: the page's first view of an input of about n tokens, and one click."""
    from bench.page_speed import ScriptClock
    from tests.app.fragments import click
    from ui.shell.sidebar import max_tokens
    from ui.shell import models

    text = text_of(task, n)
    at = open_page(page, model_id, text)
    before = memo_bytes()
    with PeakMemory() as memory, ScriptClock() as clock:
        at.run()
    row = {"page": page, "tokens": min(len(task.vocab.encode(text)), max_tokens(models.get_model(model_id)[0])),
           "first": clock.total, "sent": sent_bytes(at._tree), "peak": memory.extra,
           "kept": memo_bytes() - before, "errors": [e.value for e in at.exception], "click": None, "control": "–"}
    spec = click_spec(page, row["tokens"])
    if spec is not None and not row["errors"]:
        key, value = spec
        try:
            with ScriptClock() as clicked:
                click(at, key, value, page=at._tree)
            row["click"], row["control"] = clicked.total, key
            row["errors"] += [e.value for e in at.exception]
        except LookupError:
            row["control"] = f"({key} not on the page)"
    return row


# ---------------------------------------------------------------------------------------------
# The table


def megabytes(n: float) -> str:
    return f"{n / 2 ** 20:.2f}"


def print_table(rows: list[dict], device: str, model: str) -> None:
    print(f"\nEvery page at long inputs ({model}; {device}). Times: seconds in the page script; sent: MB of the first "
          "view's elements; peak: MB above the process before the view; kept: MB its memos hold after it.\n")
    print("| page | tokens | first view (s) | click (s) | control clicked | sent (MB) | peak (MB) | kept (MB) |")
    print("|---|---:|---:|---:|---|---:|---:|---:|")
    for r in rows:
        click = "–" if r["click"] is None else f"{r['click']:.2f}"
        print(f"| {r['page']} | {r['tokens']:,} | {r['first']:.2f} | {click} | {r['control']} | {megabytes(r['sent'])} "
              f"| {megabytes(r['peak'])} | {megabytes(r['kept'])} |")
    failed = [r for r in rows if r["errors"]]
    for r in failed:
        print(f"\n{r['page']} at {r['tokens']} tokens raised: {r['errors'][0][:400]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", type=Path, default=ENGLISH_DECODER if (ENGLISH_DECODER / "config.json").is_file()
                        else None, help="a checkpoint folder (default: the English decoder if built, else random)")
    parser.add_argument("--lengths", default="64,256,512,1024")
    parser.add_argument("--pages", default=",".join(PAGES))
    args = parser.parse_args()
    lengths = [int(x) for x in args.lengths.split(",")]
    pages = [p for p in args.pages.split(",") if p]

    with tempfile.TemporaryDirectory(prefix="glassbox-long-") as tmp:
        root, model_id = models_dir(args.model, Path(tmp) / "models")
        os.environ["GLASSBOX_MODELS_DIR"] = str(root)
        os.environ["HF_HUB_CACHE"] = str(Path(tmp) / "empty-hf-cache")  # a developer's own cache stays out of it
        from bench.page_speed import compile_once_per_process, wait_by_join
        from tests.app.conftest import scan_components_once  # noqa: F401 (scans once, as the page tests do)
        from ui.server import process
        from ui.shell import models

        process.set_up()  # the settings every app process makes (one torch thread, ...)
        compile_once_per_process()
        wait_by_join()
        task = models.text_task(model_id)
        rows = []
        for page in pages:
            warm_up(page, model_id, task)  # the server's warm state: what does not depend on the input is computed
            for n in lengths:
                rows.append(measure(page, model_id, task, n))
                r = rows[-1]
                print(f"{page:10s} {r['tokens']:5d} tokens: first {r['first']:.2f} s, sent {megabytes(r['sent'])} MB, "
                      f"peak {megabytes(r['peak'])} MB" + (f"  ERROR {r['errors'][0][:120]}" if r["errors"] else ""),
                      file=sys.stderr, flush=True)
        import torch

        device = f"CPU, {os.cpu_count()} cores, torch {torch.__version__}, {torch.get_num_threads()} thread(s)"
        print_table(rows, device, f"{args.model.name if args.model else 'random GPT-2'}: d_model 128, 4 layers, "
                                  f"4 heads, context 1,024")


if __name__ == "__main__":
    main()
