"""What one idle tab costs the server: open more and more sessions that each draw one page and then sit
still, and read the server's memory at each level; prints a table.

A class leaves tabs open (a projector, students who stepped away): each is a Streamlit session holding its
widgets' state, its page's last messages and its share of the app's per-session keys. This starts
`streamlit run serve.py` on 127.0.0.1 (bench/classroom.py's Server, stopped by PID), warms it up as a teacher
would, then for each level opens sessions up to that count on one page (every session the same link, so
the process-wide memos are computed once and what grows is the sessions themselves), waits for the server
to be quiet, and samples its RSS. The cost of one idle session is the slope between levels.

    python bench/idle_sessions.py                          # Home and Attention, 0 / 25 / 50 / 100 sessions
    python bench/idle_sessions.py --levels 0,50 --pages attention
    GLASSBOX_MODELS_DIR=models python bench/idle_sessions.py --model folder:gpt2 --own-text --levels 0,5,10

With --model, every session opens that model; with --own-text each types its own sentence, so what grows is
what one student's text makes the page compute (its runs, kept by the memos) on top of the session itself.
"""

from __future__ import annotations

import classroom as room  # noqa: I001 - bench/classroom.py (this script's folder); it patches the standard library for gevent first

import argparse  # noqa: E402
import gc  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import urllib.parse  # noqa: E402
from pathlib import Path  # noqa: E402


def rss_when_quiet(pid: int, limit: float = 60.0) -> float:
    """The server's RSS in MB once its CPU has been quiet for 2 s (or after `limit` s)."""
    room.settle([pid], limit)
    sample = room.proc_sample(pid)
    return sample[1] if sample else float("nan")


def session_query(model: str, own_text: bool, i: int) -> str:
    """The link session i opens: the default, or a model, with a sentence of its own."""
    parts = {"model": model} if model else {}
    if own_text:
        parts["input"] = f"Student number {i} typed this sentence about attention heads and their patterns."
    return urllib.parse.urlencode(parts)


def open_sessions(url: str, page: str, count: int, timeout: float, model: str = "", own_text: bool = False,
                  start: int = 0) -> list[room.Session]:
    """`count` sessions, each opening `page` (its url path, "" for Home) and keeping its websocket open."""
    sessions = []
    for i in range(start, start + count):
        s = room.Session(url, timeout)
        s.connect()
        run = s.rerun("open", page, query=session_query(model, own_text, i), page_name=page, timeout=timeout)
        if run.exceptions:
            raise RuntimeError(f"/{page} raised: {run.exceptions[0]}")
        sessions.append(s)
    return sessions


def measure(page: str, levels: list[int], timeout: float, model: str = "", own_text: bool = False
            ) -> list[tuple[int, float]]:
    """[(sessions open, server RSS MB)] for one page, on a fresh server."""
    workdir = Path(tempfile.mkdtemp(prefix="idle-sessions-"))
    server = room.Server([], workdir / "streamlit.log")
    server.start(timeout=60)
    held: list[room.Session] = []
    try:
        room.warm_up(server.url, timeout)
        room.settle([server.proc.pid], 90)
        open_sessions(server.url, page, 1, timeout, model, own_text, start=10_000)[0].close()  # model and page warm
        rows = []
        for level in levels:
            held += open_sessions(server.url, page, level - len(held), timeout, model, own_text, start=len(held))
            gc.collect()
            rows.append((len(held), rss_when_quiet(server.proc.pid)))
        return rows
    finally:
        for s in held:
            s.close()
        server.stop()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--levels", default="0,25,50,100", help="session counts to sample at (default 0,25,50,100)")
    ap.add_argument("--pages", default="home,attention", help="pages the sessions open (default home,attention)")
    ap.add_argument("--timeout", type=float, default=120, help="seconds one page may take")
    ap.add_argument("--model", default="", help="the model every session opens (default: the sidebar's default)")
    ap.add_argument("--own-text", action="store_true", help="each session types its own sentence (free-text models)")
    args = ap.parse_args(argv)
    levels = sorted({int(x) for x in args.levels.split(",")})
    if levels[0] < 0:
        ap.error("--levels must be counts of sessions, 0 or more")
    what = f"model {args.model}" if args.model else "the default model"
    print(f"\n## Idle sessions: server RSS as tabs that drew one page stay open ({what}"
          f"{', each with its own text' if args.own_text else ''}; {time.strftime('%Y-%m-%d %H:%M')}, "
          f"load average {room.load_average()[0]:.2f})\n")
    print("| page | " + " | ".join(f"{n} open" for n in levels) + " | per idle session |")
    print("|---|" + "---|" * (len(levels) + 1))
    for name in args.pages.split(","):
        page = "" if name.strip() in ("", "home") else name.strip()
        rows = measure(page, levels, args.timeout, args.model, args.own_text)
        (n0, r0), (n1, r1) = rows[0], rows[-1]
        slope = (r1 - r0) / (n1 - n0) if n1 > n0 else float("nan")
        cells = " | ".join(f"{rss:.0f} MB" for _, rss in rows)
        print(f"| /{page} | {cells} | {slope * 1024:.0f} KB |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
