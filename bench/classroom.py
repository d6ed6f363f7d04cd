"""A classroom on one server: N simulated students click through the app at once; prints a table.

Built on Locust: each student is a Locust `User` that speaks Streamlit's own websocket protocol
(ws://HOST/_stcore/stream, `BackMsg` protobufs up, `ForwardMsg` protobufs down), the way the
browser does it:

- open a page: connect, send `rerun_script` with the page's url path and query string (its own
  model, input and page settings), read ForwardMsgs until `script_finished`;
- click: the same with a changed `WidgetStates` (a new layer, head, view, slider step ... picked
  from the widgets the last run drew; widget ids come from the deltas), about every --think seconds;
- switch page: `rerun_script` with the target's `page_script_hash` (from the `navigation` message);
- train (two students): press the Train page's Train button (a `trigger_value`), then follow the
  `auto_rerun` messages like the browser: rerun the training fragment every interval until done;
- the browser's message cache: large elements are sent once, later by `ref_hash`, for the hashes
  the client lists in `cached_message_hashes` (expired after two runs, as in the frontend).

A rerun's latency is send -> `script_finished`. Errors are exception elements in the deltas
(plus time-outs, lost connections and compile errors). Cross-talk: every student has its own
input; each session's figures and text must show its own input and never another student's.

The harness starts `streamlit run serve.py` itself on 127.0.0.1 with a free port (stopped by PID at
the end) and samples the server's CPU and RSS from /proc every second, or attaches to --url.
--class-lesson L seats the students in a class instead (issue 40): the harness opens a class on lesson L as a
teacher would (the Lessons page's Open button, through the protocol), every student joins with `?class=<code>`
and follows step 1 (its page and its check), keeps the class's 1-second poll going (the fragment's auto-rerun,
as the browser does) and clicks that page's widgets; with --answers every other action is an answer to the
step's check (a number and the Check button), which the class store counts. Compare click p95 with and
without --answers.
--real-browsers K opens K real Chromium pages (Debian chromium via Playwright, in a subprocess:
bench/classroom_browsers.py) beside the simulated students and reports their time to the page's
finished state. Every wait has a time-out and the whole run is bounded by --seconds.

    pip install -r requirements-bench.txt
    python bench/classroom.py --students 10 --seconds 60
    python bench/classroom.py --students 30 --seconds 90 --post-script-gc off --real-browsers 2
    python bench/classroom.py --url http://127.0.0.1:8501 --server-pid 1234 --students 5
    python bench/classroom.py --students 30 --seconds 60 --trainers 0 --class-lesson mechanics-of-attention --answers
"""

from __future__ import annotations

# Locust runs every user in a gevent greenlet and patches the standard library for it; do it
# first, before anything imports socket or threading.
from gevent import monkey

monkey.patch_all()

import argparse  # noqa: E402
import itertools  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import re  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import urllib.parse  # noqa: E402
import urllib.request  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Optional  # noqa: E402

import gevent  # noqa: E402
import gevent.event  # noqa: E402
import websocket  # noqa: E402  (websocket-client: blocking sockets, cooperative under gevent)
from locust import User, events, task  # noqa: E402
from locust.env import Environment  # noqa: E402
from streamlit.proto.BackMsg_pb2 import BackMsg  # noqa: E402
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg  # noqa: E402
from streamlit.proto.Slider_pb2 import Slider  # noqa: E402
from streamlit.proto.WidgetStates_pb2 import WidgetState  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the project root, for deploy/
from core import lessons as L  # noqa: E402
from core.tasks import get_task  # noqa: E402
from deploy.cluster import Cluster, free_port  # noqa: E402
from deploy.cluster import healthy as health  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
MANIFEST = ROOT / "assets" / "models" / "manifest.json"

FINISHED = ForwardMsg.FINISHED_SUCCESSFULLY
FINISHED_FRAGMENT = ForwardMsg.FINISHED_FRAGMENT_RUN_SUCCESSFULLY
FINISHED_EARLY = ForwardMsg.FINISHED_EARLY_FOR_RERUN  # st.rerun(): the next run follows on its own
COMPILE_ERROR = ForwardMsg.FINISHED_WITH_COMPILE_ERROR
MAIN, SIDEBAR = 0, 1  # RootContainer: the first index of a delta_path
MAX_CACHED_MESSAGE_AGE = 2  # the frontend's default (global.maxCachedMessageAge)
UPSTREAM_HEADER = "X-Glassbox-Upstream"  # which server answered, behind deploy/cluster.py's nginx
TRAIN_BUTTON = "train.go"  # the key of the Train page's Train button (ui/train/view.py)
TRAIN_STEPS = "100"  # trainers' URL setting: a short run

# Pages in the order a student meets them (url paths; "" is Home), and per page the URL states a
# student opens it with (besides its own model and input), taken from bench/page_snapshot.py.
PAGES = ["attention", "heads", "masks", "retrieval", "positions", "depth", "cost", "generation", "lessons", "train", ""]
PAGE_STATES: dict[str, list[dict[str, str]]] = {
    "attention": [{}, {"view": "head", "layer": "1", "head": "2", "query": "3"}, {"view": "steps", "temp": "0.5"}],
    "heads": [{}, {"view": "roles", "layer": "1", "head": "1"}, {"view": "ablation", "ablate": "L0H1,L1H0", "mode": "mean"}],
    "masks": [{}, {"preset": "causal", "layer": "1", "head": "1"}, {"preset": "sliding", "w": "2", "token": "3", "scope": "layer"}],
    "positions": [{}, {"pe_n": "32", "pe_d": "16", "k": "3", "layer": "1"}, {"swap": "sinusoidal", "order": "brackets", "ext": "40"}],
    "depth": [{}, {"at": "3", "L": "24", "rho": "0.3"}, {"stack": "encoder", "n": "256", "H": "2", "tau": "0.5"}],
    "retrieval": [{}, {"points": "step", "qnorm": "300", "beta": "10", "alpha": "1000"},
                  {"table": "tie", "angle": "20", "layer": "0", "head": "1", "seen": "recall-cosine", "stretch": "2.5"}],
    "cost": [{}, {"d": "128", "heads": "8", "nmax": "512"}, {"preset": "bert-base", "b": "16", "nmax": "256"}],
    "generation": [{}, {"attn": "cross", "t": "3", "steps": "6"}, {"le": "12", "ld": "5", "t": "1", "tlen": "32"}],
    "lessons": [{}, {"level": "intermediate"}],
    "train": [{}, {"task": "sort", "arch": "decoder", "pos": "rope", "norm": "post"}, {"task": "brackets", "arch": "encoder", "layers": "1"}],
    "": [{}],
}
# Pages that draw the sidebar's input in their figures for every bundled model (the own-input check).
INPUT_PAGES = {"attention", "positions", "depth"}
CLICKABLE = {"selectbox", "radio", "button_group", "slider", "checkbox", "number_input", "multiselect"}
WIDGETS = CLICKABLE | {"button", "text_area", "text_input", "download_button", "file_uploader"}

LETTERS = [chr(c) for c in range(ord("a"), ord("z") + 1)] + [chr(c) for c in range(ord("A"), ord("Z") + 1)]
NOUNS = ["dog", "cat", "bird", "boy", "girl", "key", "car", "book"]
ADJECTIVES = ["loud", "old", "red", "happy"]
PREPOSITIONS = ["near", "behind", "with", "beside"]
VERBS = ["see", "like", "chase"]

log = logging.getLogger("classroom")


# ---------------------------------------------------------------------------------------------
# Who the students are
# ---------------------------------------------------------------------------------------------


def _digits(rng: random.Random, n: int = 8) -> list[str]:
    return [str(rng.randrange(10)) for _ in range(n)]


def make_input(task: str, arch: str, rng: random.Random) -> list[str]:
    """A valid input for a bundled model's task, in the form of the task's own examples (varied by hand
    for the older tasks, which gives more distinct inputs; the task's own generator for the rest)."""
    if task not in ("induction", "agreement", "brackets", "future-legality", "sort", "reverse", "copy"):
        return get_task(task).example(arch, seed=rng.randrange(10 ** 9))
    if task == "induction":
        k = rng.randrange(6, 10)
        seq = [rng.choice(LETTERS) for _ in range(k)]
        return ["<bos>", *seq, *seq]
    if task == "agreement":
        n1, n2 = rng.choice(NOUNS), rng.choice(NOUNS)
        n1 = n1 + "s" if rng.random() < 0.5 else n1
        verb = rng.choice(VERBS)
        verb = verb + ("es" if verb.endswith("ch") else "s") if rng.random() < 0.5 else verb
        return ["the", n1, "that", "the", n2, verb, "<mask>", rng.choice(ADJECTIVES),
                rng.choice(PREPOSITIONS), "the", rng.choice(NOUNS)]
    if task == "brackets":
        return ["<cls>", *(rng.choice("()[]") for _ in range(10))]
    if task == "future-legality":
        return ["<bos>", *_digits(rng), rng.choice(["even", "odd"])]
    digits = _digits(rng)
    if arch == "encoder-decoder":
        return digits
    if task == "sort":
        return ["<bos>", *digits, "<sep>", *sorted(digits), "<eos>"]
    if task == "reverse":
        return ["<bos>", *digits, "<sep>", *digits[::-1], "<eos>"]
    return ["<bos>", *digits, "<sep>", *digits, "<eos>"]


@dataclass
class Profile:
    """One student: its model, input, start page and its URL state on every page."""

    index: int
    model: str
    tokens: list[str]
    start_page: str
    trainer: bool
    itinerary: list[str] = field(default_factory=list)
    states: dict[str, dict[str, str]] = field(default_factory=dict)

    @property
    def text(self) -> str:
        return " ".join(self.tokens)

    def query(self, page: str) -> str:
        params = {"model": self.model, "input": self.text, **self.states.get(page, {})}
        return urllib.parse.urlencode(params, quote_via=urllib.parse.quote_plus)


def make_profiles(n: int, trainers: int, seed: int) -> list[Profile]:
    """N students, each with its own model (round robin over the bundled ones) and a distinct input:
    no student's input is a run of another's tokens, so finding one in a page is a real finding."""
    models = json.loads(MANIFEST.read_text())
    stride = next(k for k in (5, 7, 11, 13, 1) if math.gcd(k, len(models)) == 1)  # visits every model
    rng = random.Random(seed)
    profiles: list[Profile] = []
    texts: list[str] = []
    for i in range(n):
        m = models[(i * stride) % len(models)]  # a stride, so neighbours get different tasks
        for _ in range(1000):
            tokens = make_input(m["task"], m["arch"], rng)
            text = " " + " ".join(tokens) + " "
            if all(text not in t and t not in text for t in texts):
                break
        texts.append(text)
        trainer = 0 < i <= trainers if n > trainers else i < trainers
        start = "train" if trainer else PAGES[i % (len(PAGES) - 2)]  # token pages first; Home last
        at = PAGES.index(start)
        itinerary = PAGES[at:] + PAGES[:at]
        states = {p: dict(PAGE_STATES[p][(i + k) % len(PAGE_STATES[p])]) for k, p in enumerate(PAGES)}
        if trainer:
            states["train"] = {"steps": TRAIN_STEPS}
        profiles.append(Profile(i, m["id"], tokens, start, trainer, itinerary, states))
    return profiles


# ---------------------------------------------------------------------------------------------
# The protocol client
# ---------------------------------------------------------------------------------------------


class ProtocolError(Exception):
    """A rerun that did not finish: time-out, lost connection or a compile error."""


@dataclass
class Run:
    """What one rerun brought back."""

    kind: str
    page: str
    status: int = -1
    reran: bool = False  # the script called st.rerun() (e.g. a section widget that changes the whole page)
    seconds: float = 0.0
    bytes: int = 0
    messages: int = 0
    exceptions: list[str] = field(default_factory=list)
    error_alerts: list[str] = field(default_factory=list)
    main_text: list[str] = field(default_factory=list)  # token sequences and texts in the main area
    side_text: list[str] = field(default_factory=list)  # the sidebar's
    auto_rerun: Optional[tuple[str, float]] = None


_LABEL_PREFIX = re.compile(r"^\d+\s*[:·]\s*")


def _labels(values) -> Optional[str]:
    """A plotly axis's category labels ('3:tok' -> 'tok') as one space-separated token string."""
    if not isinstance(values, list) or not values or not all(isinstance(v, str) for v in values):
        return None
    return " ".join(_LABEL_PREFIX.sub("", v) for v in values)


def element_texts(kind: str, el) -> list[str]:
    """Texts a student could read in an element: bodies, values, figure axis labels."""
    if kind in ("markdown", "heading", "alert", "text", "code", "caption"):
        return [getattr(el, "body", "") or getattr(el, "code_text", "")]
    if kind in ("text_area", "text_input"):
        return [el.value if el.HasField("value") else el.default]
    if kind == "plotly_chart":
        try:
            spec = json.loads(el.spec)
        except ValueError:
            return []
        out = []
        for trace in spec.get("data", []):
            for axis in ("x", "y", "labels", "text"):
                s = _labels(trace.get(axis))
                if s:
                    out.append(s)
        for value in spec.get("layout", {}).values():
            if isinstance(value, dict):
                s = _labels(value.get("ticktext"))
                if s:
                    out.append(s)
        return out
    return []


class Session:
    """One browser tab's worth of Streamlit protocol: a websocket session, its widgets, its cache."""

    def __init__(self, base_url: str, timeout: float, cookies: Optional[dict[str, str]] = None,
                 upstreams: Optional[list[str]] = None):
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.ws: Optional[websocket.WebSocket] = None
        self.pages: dict[str, str] = {}  # url path -> page_script_hash (from `navigation`)
        self.page_hash = ""
        self.query = ""  # the URL's query string, as the app last wrote it (page_info_changed)
        self.widgets: dict[str, tuple[str, object, int]] = {}  # id -> (kind, proto, root container)
        # id -> the fragment (st.fragment section) that drew the widget, "" for the page's own: the browser
        # reruns only that fragment when the widget changes, and so does a simulated click.
        self.widget_fragment: dict[str, str] = {}
        self.values: dict[str, WidgetState] = {}  # widget id -> the state this client set
        self.cache: dict[str, list] = {}  # message hash -> [serialised ForwardMsg, age]
        self.auto: Optional[tuple[str, float]] = None  # (fragment_id, interval) of a self-rerunning fragment
        # The browser's cookies, kept across reloaded tabs (the caller passes the same dict), and the
        # balancer's X-Glassbox-Upstream of every request ("" without a balancer).
        self.cookies: dict[str, str] = {} if cookies is None else cookies
        self.upstreams: list[str] = [] if upstreams is None else upstreams

    # -- connection ------------------------------------------------------------------------
    def connect(self) -> None:
        """Load the page's HTML first, as a browser does, keep the cookies it sets (behind the scale-out
        balancer, the route cookie pins this tab to one server), then open the websocket with them."""
        if not self.cookies:
            with urllib.request.urlopen(self.base_url + "/", timeout=self.timeout) as r:
                for header in r.headers.get_all("Set-Cookie") or []:
                    name, _, value = header.split(";", 1)[0].partition("=")
                    self.cookies[name.strip()] = value.strip()
                self.upstreams.append(r.headers.get(UPSTREAM_HEADER, ""))
        ws_url = "ws" + self.base_url[len("http"):] + "/_stcore/stream"
        cookie = "; ".join(f"{k}={v}" for k, v in self.cookies.items()) or None
        self.ws = websocket.create_connection(ws_url, subprotocols=["streamlit"], origin=self.base_url,
                                              timeout=self.timeout, enable_multithread=False, cookie=cookie)
        headers = {k.lower(): v for k, v in (self.ws.getheaders() or {}).items()}
        self.upstreams.append(headers.get(UPSTREAM_HEADER.lower(), ""))

    def close(self) -> None:
        if self.ws is not None:
            try:
                self.ws.close(timeout=1)
            except Exception:  # noqa: BLE001 - closing a broken socket
                pass
            self.ws = None

    # -- one rerun -------------------------------------------------------------------------
    def rerun(self, kind: str, page: str, *, query: Optional[str] = None, page_hash: Optional[str] = None,
              page_name: str = "", widgets: tuple[WidgetState, ...] = (), fragment_id: str = "",
              auto: bool = False, timeout: Optional[float] = None) -> Run:
        """Send one rerun_script and read ForwardMsgs until its script_finished. With `fragment_id`, only
        that fragment reruns: a widget in it changed (`auto` False) or its run_every timer fired (True)."""
        if self.ws is None:
            self.connect()
        msg = BackMsg()
        cs = msg.rerun_script
        cs.query_string = self.query if query is None else query
        cs.page_script_hash = self.page_hash if page_hash is None else page_hash
        cs.page_name = page_name
        if fragment_id:
            cs.fragment_id = fragment_id
            cs.is_auto_rerun = auto
        states = {w.id: w for w in self.values.values() if w.id in self.widgets}
        states.update({w.id: w for w in widgets})
        cs.widget_states.widgets.extend(states.values())
        cs.cached_message_hashes.extend(self.cache)
        ci = cs.context_info
        ci.timezone, ci.timezone_offset, ci.locale = "UTC", 0, "en-US"
        ci.url = f"{self.base_url}/{page}" + (f"?{cs.query_string}" if cs.query_string else "")
        full = not fragment_id
        if full:
            self.auto = None  # the frontend drops a fragment's auto-rerun when the whole page reruns
        run = Run(kind, page)
        new_widgets: dict[str, tuple[str, object, int]] = {}
        used: set[str] = set()
        t0 = time.perf_counter()
        deadline = t0 + (timeout or self.timeout)
        self.ws.send_binary(msg.SerializeToString())
        while True:
            left = deadline - time.perf_counter()
            if left <= 0:
                raise ProtocolError(f"time-out: no script_finished within {timeout or self.timeout:.0f} s")
            self.ws.settimeout(left)
            try:
                data = self.ws.recv()
            except websocket.WebSocketTimeoutException as exc:
                raise ProtocolError(f"time-out: no script_finished within {timeout or self.timeout:.0f} s") from exc
            except (websocket.WebSocketException, OSError) as exc:
                raise ProtocolError(f"connection lost: {exc!r}"[:200]) from exc
            if not isinstance(data, bytes):
                continue
            run.bytes += len(data)
            run.messages += 1
            fmsg = ForwardMsg()
            fmsg.ParseFromString(data)
            kind_ = fmsg.WhichOneof("type")
            if kind_ == "ref_hash":
                cached = self.cache.get(fmsg.ref_hash)
                if cached is None:
                    raise ProtocolError(f"the server referred to message {fmsg.ref_hash}, which is not cached")
                cached[1] = 0
                used.add(fmsg.ref_hash)
                meta = fmsg.metadata
                fmsg = ForwardMsg()
                fmsg.ParseFromString(cached[0])
                fmsg.metadata.CopyFrom(meta)
                kind_ = fmsg.WhichOneof("type")
            elif fmsg.metadata.cacheable and fmsg.hash:
                self.cache[fmsg.hash] = [data, 0]
                used.add(fmsg.hash)
            if kind_ == "delta":
                self._delta(fmsg, run, new_widgets)
            elif kind_ == "navigation":
                self.pages = {p.url_pathname: p.page_script_hash for p in fmsg.navigation.app_pages}
                if fmsg.navigation.page_script_hash:
                    self.page_hash = fmsg.navigation.page_script_hash
            elif kind_ == "new_session":
                if not fmsg.metadata.run.fragment_ids:  # a whole-page run starts (also after st.rerun())
                    new_widgets.clear()
                    self.auto = None  # the browser drops fragment auto-reruns the new run does not renew
            elif kind_ == "page_info_changed":
                self.query = fmsg.page_info_changed.query_string
            elif kind_ == "auto_rerun":
                run.auto_rerun = (fmsg.auto_rerun.fragment_id, fmsg.auto_rerun.interval)
                self.auto = run.auto_rerun
            elif kind_ == "stop_auto_rerun":
                if self.auto and self.auto[0] in fmsg.stop_auto_rerun.fragment_ids:
                    self.auto = None
            elif kind_ == "script_finished":
                status = fmsg.script_finished
                if status == FINISHED_EARLY:  # the script called st.rerun(); its next run follows
                    run.reran = True
                    continue
                run.seconds = time.perf_counter() - t0
                run.status = status
                if status == COMPILE_ERROR:
                    raise ProtocolError("the script did not compile")
                if status == FINISHED:
                    self.widgets = new_widgets
                    self._age_cache(used)
                else:  # a fragment run: its widgets join the page's
                    self.widgets.update(new_widgets)
                return run

    def _delta(self, fmsg: ForwardMsg, run: Run, new_widgets: dict) -> None:
        delta = fmsg.delta
        if delta.WhichOneof("type") != "new_element":
            return
        el_kind = delta.new_element.WhichOneof("type")
        el = getattr(delta.new_element, el_kind)
        root = fmsg.metadata.delta_path[0] if fmsg.metadata.delta_path else MAIN
        if el_kind == "exception":
            run.exceptions.append(f"{el.type}: {el.message}"[:300])
            return
        if el_kind == "alert" and el.format == 1:  # Alert.ERROR: a message the app shows, not a crash
            run.error_alerts.append(el.body[:200])
        if el_kind in WIDGETS and getattr(el, "id", ""):
            new_widgets[el.id] = (el_kind, el, root)
            self.widget_fragment[el.id] = delta.fragment_id
        texts = element_texts(el_kind, el)
        if texts:
            (run.main_text if root == MAIN else run.side_text).extend(texts)

    def _age_cache(self, used: set[str]) -> None:
        """Like the frontend: a cached message unused for more than two finished runs is dropped."""
        for h in list(self.cache):
            if h in used:
                continue
            self.cache[h][1] += 1
            if self.cache[h][1] > MAX_CACHED_MESSAGE_AGE:
                del self.cache[h]

    # -- clicks ----------------------------------------------------------------------------
    def click(self, rng: random.Random, skip: tuple[str, ...] = ()) -> Optional[tuple[str, WidgetState]]:
        """A new value for one of the main area's widgets: (label, WidgetState), or None if none fits. Widgets
        whose key starts with one of `skip` are left alone."""
        ids = sorted(i for i, (kind, el, root) in self.widgets.items()
                     if kind in CLICKABLE and root == MAIN and not getattr(el, "disabled", False)
                     and not any(f"-{prefix}" in i for prefix in skip))
        rng.shuffle(ids)
        for wid in ids:
            kind, el, _ = self.widgets[wid]
            state = self._new_value(kind, el, rng)
            if state is not None:
                self.values[wid] = state
                return f"{kind} '{el.label[:40]}'", state
        return None

    def fragment_of(self, state: WidgetState) -> str:
        """The fragment a widget belongs to ("" for the page): the browser sends its change as a rerun
        of that fragment alone (Delta.fragment_id of the element that drew it)."""
        return self.widget_fragment.get(state.id, "")

    def button(self, key_suffix: str) -> Optional[WidgetState]:
        """A press of the button whose id ends with `-key_suffix` (a trigger: sent once, not kept)."""
        for wid, (kind, el, _) in self.widgets.items():
            if kind == "button" and wid.endswith("-" + key_suffix) and not el.disabled:
                return WidgetState(id=wid, trigger_value=True)
        return None

    def answer(self, lesson: str, step: int, value: float) -> Optional[tuple[WidgetState, ...]]:
        """A student's answer to a number check: the value typed and the Check button pressed, in one rerun."""
        box = next((wid for wid, (kind, _, _) in self.widgets.items()
                    if kind == "number_input" and wid.endswith(f"-lesson_answer.{lesson}.{step}")), None)
        press = self.button(f"lesson_check.{lesson}.{step}")
        if box is None or press is None:
            return None
        typed = WidgetState(id=box, double_value=float(value))
        self.values[box] = typed
        return typed, press

    def _current(self, wid: str):
        state = self.values.get(wid)
        if state is None:
            return None
        field_name = state.WhichOneof("value")
        value = getattr(state, field_name)
        return list(value.data) if hasattr(value, "data") else value

    def _new_value(self, kind: str, el, rng: random.Random) -> Optional[WidgetState]:
        cur = self._current(el.id)
        if kind in ("selectbox", "radio"):
            options = list(el.options)
            if cur is None:
                cur = el.raw_value if el.HasField("raw_value") else (
                    options[el.default] if el.HasField("default") and el.default < len(options) else None)
            choices = [o for o in options if o != cur]
            return WidgetState(id=el.id, string_value=rng.choice(choices)) if choices else None
        if kind == "button_group":
            options = [o.content for o in el.options]
            if cur is None:
                cur = list(el.raw_values) or [options[i] for i in el.default if i < len(options)]
            choices = [o for o in options if [o] != cur]
            if not choices:
                return None
            state = WidgetState(id=el.id)
            state.string_array_value.data.append(rng.choice(choices))
            return state
        if kind == "multiselect":
            options = list(el.options)
            if not options:
                return None
            cur = list(cur if cur is not None else el.raw_values)
            pick = rng.choice(options)
            new = [o for o in cur if o != pick] if pick in cur else cur + [pick]
            if el.max_selections and len(new) > el.max_selections:
                return None
            state = WidgetState(id=el.id)
            state.string_array_value.data.extend(new)
            return state
        if kind == "checkbox":
            cur = (el.value if el.set_value else el.default) if cur is None else cur
            return WidgetState(id=el.id, bool_value=not cur)
        if kind == "number_input":
            if cur is None:
                cur = el.value if el.HasField("value") else (el.default if el.HasField("default") else None)
            if cur is None:
                return None
            step = el.step or 1
            new = cur + rng.choice([-1, 1]) * step
            if (el.has_min and new < el.min) or (el.has_max and new > el.max):
                new = cur - (new - cur)
            if el.data_type == 0:  # INT
                return WidgetState(id=el.id, int_value=int(round(new)))
            return WidgetState(id=el.id, double_value=float(new))
        if kind == "slider":
            if el.type == Slider.SELECT_SLIDER or el.options:
                options = list(el.options)
                idx = [int(v) for v in (el.value if el.set_value else el.default)]
                if cur is not None:
                    idx = [options.index(v) for v in cur if v in options] or idx
                if not options or not idx:
                    return None
                j = rng.randrange(len(idx))
                idx[j] = min(max(idx[j] + rng.choice([-2, -1, 1, 2]), 0), len(options) - 1)
                state = WidgetState(id=el.id)
                state.string_array_value.data.extend(options[i] for i in sorted(idx))
                return state
            if el.data_type not in (Slider.INT, Slider.FLOAT):
                return None
            values = list(cur if cur is not None else (el.value if el.set_value else el.default))
            if not values or el.max <= el.min:
                return None
            step = el.step or 1
            j = rng.randrange(len(values))
            values[j] = min(max(values[j] + rng.choice([-2, -1, 1, 2]) * step, el.min), el.max)
            state = WidgetState(id=el.id)
            state.double_array_value.data.extend(sorted(values))
            return state
        return None


# ---------------------------------------------------------------------------------------------
# The Locust user: one student
# ---------------------------------------------------------------------------------------------


@dataclass
class Record:
    """What one student did and saw."""

    profile: Profile
    first_page: Optional[float] = None
    first_page_error: str = ""
    # (kind, page, seconds, bytes, time.perf_counter() when it was sent)
    runs: list[tuple[str, str, float, int, float]] = field(default_factory=list)
    exceptions: list[str] = field(default_factory=list)
    error_alerts: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)  # time-outs, lost connections
    reconnects: int = 0
    pages: list[str] = field(default_factory=list)
    own_main: int = 0  # reruns of INPUT_PAGES whose main area showed this student's own input
    input_runs: int = 0  # reruns of INPUT_PAGES
    own_url: bool = False  # the app wrote this student's input into its URL
    foreign: list[str] = field(default_factory=list)  # other students' inputs seen here
    train_started: Optional[float] = None
    train_seconds: Optional[float] = None
    train_ticks: int = 0
    cookies: dict[str, str] = field(default_factory=dict)  # this browser's cookies (the balancer's route)
    upstreams: list[str] = field(default_factory=list)  # which server answered each HTML load and websocket
    unfinished: Optional[tuple[str, str, float]] = None  # (kind, page, seconds waited) when the run ended


class Classroom:
    """Shared state of one run: the profiles, every student's record, and the start signal."""

    profiles: list[Profile] = []
    records: dict[int, Record] = {}
    base_url = ""
    think = 5.0
    clicks_per_page = 3
    rerun_timeout = 60.0
    first_timeout = 120.0
    start_gate: Optional[gevent.event.Event] = None
    counter = itertools.count()
    seed = 0
    students: list = []
    class_code = ""  # --class-lesson: the class every student joins
    class_lesson = ""
    answers = False  # --answers: every other action answers the step's check


class Student(User):
    """One student in a browser tab: opens its page, then clicks about every `think` seconds."""

    def __init__(self, environment):
        super().__init__(environment)
        self.index = next(Classroom.counter)
        self.profile = Classroom.profiles[self.index % len(Classroom.profiles)]
        self.record = Classroom.records.setdefault(self.index, Record(self.profile))
        self.rng = random.Random(Classroom.seed * 1000 + self.index)
        self.session: Optional[Session] = None
        self.page_at = 0  # index in the itinerary
        self.clicks_here = 0
        self.trained = False
        self.page_ok = False
        self.last_tick = 0.0
        self.inflight: Optional[tuple[str, str, float]] = None  # (kind, page, sent at) of a rerun under way
        self.next_action = 0.0  # in a class: when the next click or answer is due (polls fill the time between)
        self.actions = 0
        Classroom.students.append(self)

    @property
    def page(self) -> str:
        return self.profile.itinerary[self.page_at % len(self.profile.itinerary)]

    def wait_time(self) -> float:
        if Classroom.class_code and self.session is not None and self.session.auto is not None:
            poll_due = self.session.auto[1] - (time.perf_counter() - self.last_tick)
            return max(0.05, min(poll_due, self.next_action - time.perf_counter()))
        if self.session is not None and self.session.auto is not None:
            return max(0.05, self.session.auto[1] - (time.perf_counter() - self.last_tick))
        return self.rng.uniform(0.6, 1.4) * Classroom.think

    def on_start(self) -> None:
        if Classroom.start_gate is not None:
            Classroom.start_gate.wait(timeout=30)  # everybody opens the app at the same moment
        self.open_page(first=True)

    def on_stop(self) -> None:
        if self.session is not None:
            self.session.close()

    # -- the script --------------------------------------------------------------------------
    @task
    def step(self) -> None:
        if self.session is None or self.session.ws is None:
            self.record.reconnects += 1
            self.open_page(first=False)
            return
        if Classroom.class_code:
            self.class_step()
            return
        if self.session.auto is not None:
            self.tick()
            return
        if self.profile.trainer and not self.trained and self.page == "train":
            press = self.session.button(TRAIN_BUTTON)
            if press is not None:
                self.trained = True
                self.record.train_started = time.perf_counter()
                self.do("train", lambda s: s.rerun("train", self.page, widgets=(press,),
                                                   fragment_id=s.fragment_of(press),
                                                   timeout=Classroom.rerun_timeout))
                return
        if self.clicks_here < Classroom.clicks_per_page and self.page_ok:
            picked = self.session.click(self.rng)
            self.clicks_here += 1
            if picked is not None:
                fragment = self.session.fragment_of(picked[1])
                kind = "section" if fragment else "click"
                self.do(kind, lambda s: s.rerun(kind, self.page, widgets=(picked[1],), fragment_id=fragment,
                                                timeout=Classroom.rerun_timeout))
                return
        self.page_at += 1
        self.clicks_here = 0
        target = self.page
        page_hash = self.session.pages.get(target)
        if page_hash is None:
            self.record.failures.append(f"no page_script_hash for page '{target}' in the navigation message")
            return
        run = self.do("page", lambda s: s.rerun("page", target, query=self.profile.query(target),
                                                page_hash=page_hash, timeout=Classroom.rerun_timeout))
        self.check_page(run, target)

    def class_step(self) -> None:
        """In a class: the poll when it is due, else a click on the step's page or (with --answers, every other
        action) an answer to the step's check."""
        now = time.perf_counter()
        if now < self.next_action:
            if self.session.auto is not None:
                fragment_id = self.session.auto[0]
                self.last_tick = now
                self.do("poll", lambda s: s.rerun("poll", self.page, fragment_id=fragment_id, auto=True,
                                                  timeout=Classroom.rerun_timeout))
            return
        self.next_action = now + self.rng.uniform(0.6, 1.4) * Classroom.think
        self.actions += 1
        if Classroom.answers and self.actions % 2 == 0:
            answer = self.session.answer(Classroom.class_lesson, 1, self.rng.choice([0.1, 0.2, 0.5, 0.62]))
            if answer is not None:
                self.do("answer", lambda s: s.rerun("answer", self.page, widgets=answer,
                                                    timeout=Classroom.rerun_timeout))
                return
            self.record.failures.append(f"no check to answer on /{self.page}")
        picked = self.session.click(self.rng, skip=("lesson_answer.",))
        if picked is not None:
            fragment = self.session.fragment_of(picked[1])
            kind = "section" if fragment else "click"
            self.do(kind, lambda s: s.rerun(kind, self.page, widgets=(picked[1],), fragment_id=fragment,
                                            timeout=Classroom.rerun_timeout))

    def check_page(self, run: Optional[Run], target: str) -> None:
        """After opening or switching: did the app show the page asked for (the navigation says which)?"""
        self.page_ok = run is not None and self.session is not None and \
            self.session.pages.get(target) == self.session.page_hash
        if run is not None and not self.page_ok:
            self.record.failures.append(f"asked for /{target}, the navigation shows another page")

    def tick(self) -> None:
        """The browser's auto-rerun of a self-rerunning fragment (the live training view)."""
        fragment_id = self.session.auto[0]
        self.last_tick = time.perf_counter()
        self.record.train_ticks += 1
        self.do("tick", lambda s: s.rerun("tick", self.page, fragment_id=fragment_id, auto=True,
                                          timeout=Classroom.rerun_timeout))
        if self.session is not None and self.session.auto is None and self.record.train_started is not None \
                and self.record.train_seconds is None:
            self.record.train_seconds = time.perf_counter() - self.record.train_started

    def open_page(self, first: bool) -> None:
        """Connect a new session and open the current page with this student's URL (a new tab)."""
        self.session = Session(Classroom.base_url, Classroom.rerun_timeout, self.record.cookies, self.record.upstreams)
        page = self.page
        t0 = time.perf_counter()
        try:
            self.session.connect()
        except Exception as exc:  # noqa: BLE001 - any failure to connect is a finding
            self.fail("connect", page, t0, exc)
            return
        timeout = Classroom.first_timeout if first else Classroom.rerun_timeout
        query = f"class={Classroom.class_code}" if Classroom.class_code else self.profile.query(page)
        run = self.do("open", lambda s: s.rerun("open", page, query=query, page_name=page,
                                                page_hash="", timeout=timeout))
        self.check_page(run, page)
        if first:
            if run is not None:
                self.record.first_page = time.perf_counter() - t0
            elif not self.record.first_page_error:
                self.record.first_page_error = (self.record.failures or ["failed"])[-1]

    # -- bookkeeping ---------------------------------------------------------------------------
    def do(self, kind: str, call) -> Optional[Run]:
        t0 = time.perf_counter()
        page = self.page
        self.inflight = (kind, page, t0)
        try:
            run = call(self.session)
        except (ProtocolError, websocket.WebSocketException, OSError) as exc:
            self.fail(kind, page, t0, exc)
            return None
        finally:
            self.inflight = None
        self.note(run)
        events.request.fire(request_type=kind, name=f"/{page}", response_time=run.seconds * 1000,
                            response_length=run.bytes, exception=None, context={"student": self.index})
        return run

    def fail(self, kind: str, page: str, t0: float, exc: BaseException) -> None:
        self.record.failures.append(f"{kind} /{page}: {exc}"[:300])
        events.request.fire(request_type=kind, name=f"/{page}", response_time=(time.perf_counter() - t0) * 1000,
                            response_length=0, exception=exc, context={"student": self.index})
        if self.session is not None:
            self.session.close()  # a fresh session (a reloaded tab) next time
            self.session = None

    def note(self, run: Run) -> None:
        rec = self.record
        rec.runs.append((run.kind, run.page, run.seconds, run.bytes, time.perf_counter() - run.seconds))
        if run.kind == "section" and run.status != FINISHED_FRAGMENT and not run.reran:
            rec.failures.append(f"a click in a section of /{run.page} did not finish as a fragment run "
                                f"(script_finished {run.status})")
        rec.exceptions.extend(run.exceptions)
        rec.error_alerts.extend(run.error_alerts)
        if not rec.pages or rec.pages[-1] != run.page:
            rec.pages.append(run.page)
        own = f" {self.profile.text} "
        main = " | ".join(f" {t} " for t in run.main_text)
        side = " | ".join(f" {t} " for t in run.side_text)
        if run.page in INPUT_PAGES:
            rec.input_runs += 1
            rec.own_main += own in main
        params = urllib.parse.parse_qs(self.session.query if self.session else "")
        if params.get("input", [""])[0] == self.profile.text:
            rec.own_url = True
        haystack = main + side + " | " + " ".join(params.get("input", [])) + " "
        for other in Classroom.profiles:
            if other.index != self.profile.index and f" {other.text} " in haystack:
                rec.foreign.append(f"student {other.index}'s input on /{run.page} ({run.kind})")


# ---------------------------------------------------------------------------------------------
# The server, and what it costs
# ---------------------------------------------------------------------------------------------


# --gc-stats: `streamlit run` started through this bootstrap, which times every full (generation 2)
# garbage collection in the server with gc.callbacks and writes the totals to a file each second.
# The app is untouched; only the process that runs it counts its collections.
GC_BOOTSTRAP = """
import gc, json, sys, threading, time
out, stats, t = sys.argv.pop(1), [], {}
def timer(phase, info):
    if info["generation"] == 2:
        if phase == "start":
            t["s"] = time.perf_counter()
        elif "s" in t:
            stats.append(time.perf_counter() - t.pop("s"))
gc.callbacks.append(timer)
def dump():
    while True:
        time.sleep(1.0)
        with open(out, "w") as f:
            json.dump(list(stats), f)
threading.Thread(target=dump, daemon=True).start()
from streamlit.web.cli import main
sys.argv[0] = "streamlit"
sys.exit(main())
"""


class Server:
    """`streamlit run serve.py` on 127.0.0.1 at a free port; stopped by PID."""

    def __init__(self, extra: list[str], log_path: Path, gc_stats: Optional[Path] = None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        launcher = [sys.executable, "-c", GC_BOOTSTRAP, str(gc_stats)] if gc_stats else \
            [sys.executable, "-m", "streamlit"]
        self.cmd = [*launcher, "run", "serve.py", "--server.headless", "true",
                    "--server.address", "127.0.0.1", "--server.port", str(self.port),
                    "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none", *extra]
        self.proc: Optional[subprocess.Popen] = None

    def start(self, timeout: float) -> float:
        t0 = time.perf_counter()
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(self.cmd, cwd=ROOT, stdout=self._log, stderr=subprocess.STDOUT)
        while time.perf_counter() - t0 < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"streamlit exited with {self.proc.returncode}:\n{self.log_tail()}")
            if health(self.url):
                return time.perf_counter() - t0
            gevent.sleep(0.25)
        raise RuntimeError(f"streamlit was not healthy within {timeout:.0f} s:\n{self.log_tail()}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        if getattr(self, "_log", None):
            self._log.close()

    def log_tail(self, n: int = 3000) -> str:
        try:
            return self.log_path.read_bytes()[-n:].decode(errors="replace")
        except OSError:
            return ""




CLK_TCK = os.sysconf("SC_CLK_TCK")


def proc_sample(pid: int) -> Optional[tuple[float, float, int]]:
    """(CPU seconds so far, RSS in MB, threads) of a process, from /proc."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    cpu = (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime + stime
    threads = int(fields[17])
    rss = next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), 0) / 1024
    return cpu, rss, threads


def load_average() -> tuple[float, float, float]:
    a, b, c = Path("/proc/loadavg").read_text().split()[:3]
    return float(a), float(b), float(c)


def procs_sample(pids: list[int]) -> Optional[tuple[float, float, int]]:
    """proc_sample summed over several processes (the servers behind a balancer); None if one is gone."""
    parts = [proc_sample(pid) for pid in pids]
    if not parts or any(part is None for part in parts):
        return None
    return sum(x[0] for x in parts), sum(x[1] for x in parts), sum(x[2] for x in parts)


class Sampler:
    """Every second: the servers' CPU % (100 = one core busy), RSS and threads (summed), and the load average."""

    def __init__(self, pids: list[int]):
        self.pids = pids
        self.samples: list[tuple[float, Optional[float], Optional[float], Optional[int], float]] = []
        self.greenlet = None
        self.t0 = time.perf_counter()

    def start(self) -> None:
        self.greenlet = gevent.spawn(self._loop)

    def stop(self) -> None:
        if self.greenlet is not None:
            self.greenlet.kill(block=True, timeout=2)

    def _loop(self) -> None:
        last = procs_sample(self.pids)
        last_t = time.perf_counter()
        while True:
            gevent.sleep(1.0)
            now = time.perf_counter()
            cur = procs_sample(self.pids)
            cpu = rss = threads = None
            if cur is not None and last is not None:
                cpu = 100 * (cur[0] - last[0]) / (now - last_t)
                rss, threads = cur[1], cur[2]
            self.samples.append((now - self.t0, cpu, rss, threads, load_average()[0]))
            last, last_t = cur, now


# ---------------------------------------------------------------------------------------------
# Real browsers (a subprocess: Playwright does not mix with gevent's patched standard library)
# ---------------------------------------------------------------------------------------------


def browser_jobs(k: int, profiles: list[Profile], base_url: str) -> list[dict]:
    pages = ["attention", "heads", "masks", "positions", "depth"]
    models = json.loads(MANIFEST.read_text())
    rng = random.Random(4242)
    jobs = []
    for i in range(k):
        m = models[(i * 3 + 4) % len(models)]
        tokens = make_input(m["task"], m["arch"], rng)
        query = urllib.parse.urlencode({"model": m["id"], "input": " ".join(tokens)}, quote_via=urllib.parse.quote_plus)
        jobs.append({"page": pages[i % len(pages)], "model": m["id"], "url": f"{base_url}/{pages[i % len(pages)]}?{query}"})
    return jobs


def start_browsers(jobs: list[dict], timeout: float, hold: float, out_path: Path) -> subprocess.Popen:
    cmd = [sys.executable, str(Path(__file__).with_name("classroom_browsers.py")), "--jobs", json.dumps(jobs),
           "--timeout", str(timeout), "--hold", str(hold), "--out", str(out_path)]
    return subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


# ---------------------------------------------------------------------------------------------
# The table
# ---------------------------------------------------------------------------------------------


def pct(values: list[float], q: float) -> float:
    """Nearest-rank percentile."""
    s = sorted(values)
    return s[max(0, math.ceil(q * len(s)) - 1)]


def ms(x: Optional[float]) -> str:
    return "-" if x is None else (f"{x * 1000:.0f} ms" if x < 10 else f"{x:.1f} s")


def latency_row(name: str, values: list[float]) -> str:
    if not values:
        return f"| {name} | 0 | - | - | - |"
    return f"| {name} | {len(values)} | {ms(pct(values, 0.5))} | {ms(pct(values, 0.95))} | {ms(max(values))} |"


def report(args, records: list[Record], sampler: Sampler, meta: dict, browsers: list[dict]) -> dict:
    lines = []
    p = lines.append
    p(f"\n## Classroom: {meta['students']} students for {meta['seconds']:.0f} s on {meta['url']}")
    p(f"think {args.think:g} s, {args.clicks_per_page} clicks per page, {meta['trainers']} trainers, "
      f"runner.postScriptGC {meta['gc']}, server start {ms(meta.get('server_start'))}, "
      f"warm-up page {ms(meta.get('warmup'))}, server quiet {ms(meta['settled']) + ' later' if meta.get('settled') else 'not awaited'}, {os.cpu_count()} cores, "
      f"load average {meta['load_before'][0]:.2f} before / {meta['load_after'][0]:.2f} after "
      f"(1-min; other work on the machine counts in it)")
    if meta.get("balancer"):
        p(meta["balancer"])
    if meta.get("class"):
        p(meta["class"])
    all_runs = [r for rec in records for r in rec.runs]
    by_kind = {k: [r[2] for r in all_runs if r[0] == k]
               for k in ("open", "click", "section", "page", "train", "tick", "answer", "poll")}
    reruns = [r[2] for r in all_runs if r[0] not in ("tick", "poll")]
    exceptions = [e for rec in records for e in rec.exceptions]
    failures = [f for rec in records for f in rec.failures]
    alerts = [a for rec in records for a in rec.error_alerts]
    opened = sum(1 for rec in records if rec.first_page is not None)
    waiting = [rec.unfinished for rec in records if rec.unfinished is not None]
    p("")
    p(f"sessions {len(records)} (first page reached by {opened}), reruns {len(reruns)} "
      f"(+ {len(by_kind['tick'])} training ticks), errors: {len(exceptions)} exception elements, "
      f"{len(failures)} time-outs / lost connections, {sum(rec.reconnects for rec in records)} reconnects; "
      f"{len(alerts)} st.error messages shown by the app; Locust counted {meta['locust'][0]} requests, "
      f"{meta['locust'][1]} failed")
    if waiting:
        p(f"still waiting for script_finished when the run ended: {len(waiting)} reruns ("
          + ", ".join(f"{k} /{pg} for {ms(w)}" for k, pg, w in sorted(waiting, key=lambda x: -x[2])[:6])
          + "); they are not in the latencies below, which are therefore optimistic")
    p("")
    p("| rerun (send -> script_finished) | count | p50 | p95 | max |")
    p("|---|---|---|---|---|")
    p(latency_row("every rerun (not ticks)", reruns))
    p(latency_row("first page (all at once)", by_kind["open"]))
    p(latency_row("click (any widget change)", by_kind["click"] + by_kind["section"]))
    p(latency_row("  in a section (its fragment reruns)", by_kind["section"]))
    p(latency_row("  page-wide (the whole page reruns)", by_kind["click"]))
    # Clicks sent while some student's first page was still on its way, and those sent after every first page
    # arrived: does the opening burst make the slow clicks?
    opened_by = max((r[4] + r[2] for r in all_runs if r[0] == "open"), default=None)
    if opened_by is not None:
        clicks = [r for r in all_runs if r[0] in ("click", "section")]
        p(latency_row(f"  sent before every first page arrived ({opened_by - sampler.t0:.0f} s)",
                      [r[2] for r in clicks if r[4] < opened_by]))
        p(latency_row("  sent after", [r[2] for r in clicks if r[4] >= opened_by]))
    p(latency_row("page switch", by_kind["page"]))
    p(latency_row("Train button", by_kind["train"]))
    p(latency_row("training tick (fragment)", by_kind["tick"]))
    p(latency_row("answer (a number and Check)", by_kind["answer"]))
    p(latency_row("class poll (fragment, every 1 s)", by_kind["poll"]))
    p("")
    p("| page (opens, clicks, switches to it) | count | p50 | p95 | max |")
    p("|---|---|---|---|---|")
    for page in PAGES:
        p(latency_row(f"/{page}", [r[2] for r in all_runs if r[1] == page and r[0] != "tick"]))
    p("")
    slowest = sorted((r for r in all_runs if r[0] in ("click", "section", "page")), key=lambda r: -r[2])[:8]
    if slowest:
        p("slowest clicks and page switches (kind, page, sent at, took): "
          + "; ".join(f"{r[0]} /{r[1]} at {r[4] - sampler.t0:.0f} s, {r[2]:.1f} s" for r in slowest))
        p("")
    p("| student | model | start page | first page | reruns | p50 | max | errors | own input in figures | own in URL | foreign | pages |")
    p("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for rec in records:
        runs = [r[2] for r in rec.runs if r[0] != "tick"]
        if rec.first_page is not None:
            first = ms(rec.first_page)
        elif rec.unfinished is not None and rec.unfinished[0] == "open":
            first = f"> {ms(rec.unfinished[2])} (unfinished)"
        else:
            first = f"FAILED ({rec.first_page_error[:40]})"
        own = f"{rec.own_main}/{rec.input_runs}" if rec.input_runs else "n/a"
        extra = ""
        if rec.profile.trainer:
            extra = f" (trained: {ms(rec.train_seconds) if rec.train_seconds else 'unfinished'}, {rec.train_ticks} ticks)"
        p(f"| {rec.profile.index}{' T' if rec.profile.trainer else ''} | {rec.profile.model} | /{rec.profile.start_page} "
          f"| {first} | {len(runs)} | {ms(pct(runs, 0.5)) if runs else '-'} | {ms(max(runs)) if runs else '-'} "
          f"| {len(rec.exceptions) + len(rec.failures)} | {own} | {'yes' if rec.own_url else 'no'} "
          f"| {len(rec.foreign)} | {len(rec.pages)}{extra} |")
    firsts = [rec.first_page for rec in records if rec.first_page is not None]
    if firsts:
        p(f"\ntime to first page, all {len(records)} opening at once: p50 {ms(pct(firsts, 0.5))}, "
          f"max {ms(max(firsts))}")
    foreign = [f for rec in records for f in rec.foreign]
    drew = [rec for rec in records if rec.input_runs]
    p(f"cross-talk: {'NONE' if not foreign else f'{len(foreign)} FOREIGN INPUTS SEEN'} (another student's "
      f"input in a session's figures, texts or URL); own input: drawn in the figures of "
      f"{sum(rec.own_main for rec in records)} of {sum(rec.input_runs for rec in records)} reruns of the "
      f"{', '.join(sorted(INPUT_PAGES))} pages ({sum(1 for rec in drew if rec.own_main)} of {len(drew)} sessions "
      f"that visited them; views such as Export or the decoder side draw other tokens), and in "
      f"{sum(1 for rec in records if rec.own_url)} of {len(records)} sessions' URLs")
    routed = [rec for rec in records if any(rec.upstreams)]
    if routed:
        servers = sorted({u for rec in routed for u in rec.upstreams if u})
        moved = [rec for rec in routed if len(set(rec.upstreams)) > 1]
        p(f"balancer: {len(servers)} servers answered ("
          + ", ".join(f"{u}: {sum(1 for rec in routed if rec.upstreams[-1] == u)} students" for u in servers)
          + f"); sticky: {len(routed) - len(moved)} of {len(routed)} students had every HTML load and websocket "
          f"answered by one server" + (f", {len(moved)} MOVED" if moved else ""))
    for f in foreign[:5]:
        p(f"  foreign: {f}")
    for e in sorted(set(exceptions))[:5]:
        p(f"  exception: {e}")
    for f in failures[:5]:
        p(f"  failure: {f}")
    for a in sorted(set(alerts))[:3]:
        p(f"  st.error: {a}")

    samples = [s for s in sampler.samples if s[1] is not None]
    if samples:
        p("")
        p("| t | server CPU (100% = one core) | RSS | threads | load 1-min |")
        p("|---|---|---|---|---|")
        bucket = max(1, math.ceil(len(samples) / 12))
        for i in range(0, len(samples), bucket):
            chunk = samples[i:i + bucket]
            p(f"| {chunk[0][0]:.0f}-{chunk[-1][0]:.0f} s | {sum(c[1] for c in chunk) / len(chunk):.0f}% "
              f"| {max(c[2] for c in chunk):.0f} MB | {max(c[3] for c in chunk)} "
              f"| {sum(c[4] for c in chunk) / len(chunk):.2f} |")
        if meta.get("rss_left_at") is not None:
            during = [x[2] for x in samples if x[0] <= meta["rss_left_at"]]
            p(f"memory: {meta['rss_baseline'] or 0:.0f} MB before the class (after the warm-up), peak "
              f"{max(during or [0]):.0f} MB while it ran, {samples[-1][2]:.0f} MB {args.after:.0f} s after every "
              f"tab closed")
        cpus = [s[1] for s in samples]
        p(f"server CPU mean {sum(cpus) / len(cpus):.0f}%, peak {max(cpus):.0f}%; RSS {samples[0][2]:.0f} -> "
          f"{samples[-1][2]:.0f} MB (peak {max(s[2] for s in samples):.0f} MB); harness CPU "
          f"{meta['harness_cpu']:.1f} s over the run")
    elif not meta.get("server_pids"):
        p("\n(server CPU / RSS not sampled: attached with --url and no --server-pid)")
    gcs = meta.get("gc_full")
    if gcs:
        p(f"full (generation 2) garbage collections in the server, whole life: {len(gcs)}, median "
          f"{ms(pct(gcs, 0.5))}, p95 {ms(pct(gcs, 0.95))}, max {ms(max(gcs))}, total {sum(gcs):.1f} s "
          f"(each holds the GIL: no other session runs meanwhile)")
    elif args.gc_stats:
        p("(no garbage-collection timings came back from the server)")
    if args.real_browsers:
        p("")
        p("| real browser | page | model | time to finished page | exceptions on page | error |")
        p("|---|---|---|---|---|---|")
        for b in browsers:
            p(f"| {b.get('i')} | /{b.get('page')} | {b.get('model')} | {ms(b.get('seconds'))} "
              f"| {b.get('exceptions', '-')} | {b.get('error') or ''} |")
        if not browsers:
            p("| - | - | - | - | - | no result from the browser subprocess |")
    print("\n".join(lines), flush=True)
    return {
        "meta": meta,
        "pages": {page: sorted(r[2] for r in all_runs if r[1] == page and r[0] != "tick") for page in PAGES},
        "latency": {k: {"n": len(v), "p50": pct(v, 0.5) if v else None, "p95": pct(v, 0.95) if v else None,
                        "max": max(v) if v else None} for k, v in {"all": reruns, "clicks": by_kind["click"] + by_kind["section"],
                                                       **by_kind}.items()},
        "first_page": {rec.profile.index: rec.first_page for rec in records},
        "exceptions": len(exceptions), "failures": len(failures), "foreign": len(foreign), "unfinished": waiting,
        "upstreams": {rec.profile.index: rec.upstreams for rec in records},
        "samples": sampler.samples, "browsers": browsers,
    }


# ---------------------------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------------------------


def open_class(url: str, lesson: str, timeout: float) -> tuple["Session", str]:
    """Open a class on `lesson` as a teacher does (the Lessons page, the lesson chosen, Open a class), through
    the protocol; returns the teacher's session (kept open: it holds the class) and the class's code."""
    teacher = Session(url, timeout)
    teacher.connect()
    teacher.rerun("open", "lessons", query="", page_name="lessons", page_hash="", timeout=timeout)
    box = next((wid for wid, (kind, _, _) in teacher.widgets.items()
                if kind == "selectbox" and wid.endswith("-lessons.class_lesson")), None)
    press = teacher.button("class_open")
    if box is None or press is None:
        raise SystemExit("the Lessons page shows no class form (lesson list or Open button missing)")
    run = teacher.rerun("click", "lessons", widgets=(WidgetState(id=box, string_value=lesson), press), timeout=timeout)
    found = next((m.group(1) for t in run.main_text if (m := re.search(r"Class code: `([A-Z2-9]{6})`", t))), None)
    if found is None:
        raise SystemExit(f"no class was opened on {lesson!r}: {run.error_alerts or run.exceptions}")
    return teacher, found


def answered_rows(teacher: "Session") -> str:
    """How many rows the teacher's CSV of answers has now (the class card's download button says it)."""
    try:
        teacher.rerun("click", "lessons", timeout=60)
    except ProtocolError as exc:
        return f"? ({exc})"
    for wid, (kind, el, _) in teacher.widgets.items():
        found = re.search(r"\((\d+) rows\)", getattr(el, "help", "")) if kind == "download_button" else None
        if found and wid.endswith("-class_csv"):
            return found.group(1)
    return "? (no CSV button on the class card)"


def warm_up(url: str, timeout: float) -> float:
    """One visitor opens Home first (the teacher): pays the torch import and the first model load."""
    s = Session(url, timeout)
    t0 = time.perf_counter()
    try:
        s.connect()
        run = s.rerun("open", "", query="", page_name="", timeout=timeout)
        if run.exceptions:
            log.warning("warm-up page raised: %s", run.exceptions[0])
    finally:
        s.close()
    return time.perf_counter() - t0


def settle(pids: list[int], limit: float, idle_share: float = 0.1, quiet_for: float = 2.0) -> Optional[float]:
    """Wait until the servers have finished their start-up warm-up (ui.server.warmup): their CPU stays under
    `idle_share` of a core for `quiet_for` seconds. Returns the seconds waited, or None after `limit`."""
    t0 = time.perf_counter()
    last, quiet_since = procs_sample(pids), time.perf_counter()
    while time.perf_counter() - t0 < limit:
        time.sleep(0.5)
        now = procs_sample(pids)
        if now is None or last is None:
            return None
        if (now[0] - last[0]) / 0.5 > idle_share * len(pids):
            quiet_since = time.perf_counter()
        elif time.perf_counter() - quiet_since >= quiet_for:
            return time.perf_counter() - t0
        last = now
    return None


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--students", type=int, default=10, help="simulated students (default 10)")
    ap.add_argument("--seconds", type=float, default=60, help="how long they click, after all opened at once (default 60)")
    ap.add_argument("--think", type=float, default=5.0, help="seconds between a student's clicks (x0.6-1.4; default 5)")
    ap.add_argument("--clicks-per-page", type=int, default=3, help="clicks before a student moves to the next page")
    ap.add_argument("--trainers", type=int, default=2, help="students who press Train on the Train page (default 2)")
    ap.add_argument("--real-browsers", type=int, default=0, help="real Chromium pages opened beside them (default 0)")
    ap.add_argument("--url", help="attach to a running server instead of starting one")
    ap.add_argument("--server-pid", type=int, help="with --url: the server's PID, to sample its CPU and RSS")
    ap.add_argument("--cluster", type=int, default=0, metavar="K",
                    help="start K servers behind nginx with sticky sessions (deploy/cluster.py) instead of one")
    ap.add_argument("--post-script-gc", choices=["config", "on", "off"], default="config",
                    help="pass --runner.postScriptGC true/false to streamlit run (default: .streamlit/config.toml)")
    ap.add_argument("--server-arg", action="append", default=[],
                    help="extra argument for streamlit run, e.g. --server-arg=--runner.fastReruns=false")
    ap.add_argument("--gc-stats", action="store_true",
                    help="time the server's full garbage collections (gc.callbacks in a bootstrap; app untouched)")
    ap.add_argument("--cold", action="store_true", help="no warm-up visit: the students pay the torch import")
    ap.add_argument("--settle", type=float, default=90, metavar="S",
                    help="after the warm-up visit, wait up to S s for the servers' start-up warm-up to finish "
                         "(their CPU quiet), as a teacher starts the server before the class (0: do not wait)")
    ap.add_argument("--rerun-timeout", type=float, default=60, help="seconds a rerun may take before it counts as failed")
    ap.add_argument("--first-timeout", type=float, default=120, help="seconds the first page may take")
    ap.add_argument("--seed", type=int, default=0, help="seed of the students' inputs and clicks")
    ap.add_argument("--after", type=float, default=0, metavar="S",
                    help="keep sampling the server S seconds after the students left (memory back to baseline? "
                         "Streamlit drops a closed tab's session after server.disconnectedSessionTTL, 120 s)")
    ap.add_argument("--class-lesson", default="", metavar="ID",
                    help="seat every student in a class on this lesson (its step 1), opened by the harness")
    ap.add_argument("--answers", action="store_true",
                    help="with --class-lesson: every other action answers the step's check (a number check)")
    ap.add_argument("--json", type=Path, help="also write the numbers here")
    args = ap.parse_args(argv)
    if args.answers and not args.class_lesson:
        ap.error("--answers needs --class-lesson")
    if args.students < 1 or args.seconds <= 0:
        ap.error("--students must be at least 1 and --seconds positive")
    if args.cluster and args.url:
        ap.error("--cluster starts its own servers: leave out --url")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    workdir = Path(tempfile.mkdtemp(prefix="classroom-"))
    server = None
    cluster = None
    browsers_proc = None
    meta: dict = {"students": args.students, "seconds": args.seconds, "trainers": min(args.trainers, args.students),
                  "gc": {"on": "on (true)", "off": "off (false)", "config": "as in .streamlit/config.toml"}[args.post_script_gc],
                  "load_before": load_average()}
    try:
        if args.url:
            url, pids = args.url.rstrip("/"), [args.server_pid] if args.server_pid else []
            if not health(url):
                print(f"{url}/_stcore/health does not answer ok", file=sys.stderr)
                return 2
        elif args.cluster:
            extra = list(args.server_arg)
            if args.post_script_gc != "config":
                extra += ["--runner.postScriptGC", "true" if args.post_script_gc == "on" else "false"]
            cluster = Cluster(servers=args.cluster, streamlit_args=extra, workdir=workdir)
            t0 = time.perf_counter()
            cluster.start(timeout=120)
            meta["server_start"] = time.perf_counter() - t0
            url, pids = cluster.url, [p.pid for p in cluster.procs]
            meta["balancer"] = f"nginx in front of {args.cluster} servers ({', '.join(cluster.upstream_urls)})"
        else:
            extra = list(args.server_arg)
            if args.post_script_gc != "config":
                extra += ["--runner.postScriptGC", "true" if args.post_script_gc == "on" else "false"]
            gc_path = workdir / "gc.json" if args.gc_stats else None
            server = Server(extra, workdir / "streamlit.log", gc_path)
            meta["server_start"] = server.start(timeout=60)
            url, pids = server.url, [server.proc.pid]
        meta["url"], meta["server_pids"] = url, pids
        if not args.cold:  # the teacher's visit; behind the balancer, one to each server directly
            targets = cluster.upstream_urls if cluster is not None else [url]
            meta["warmup"] = max(warm_up(target, args.first_timeout) for target in targets)
            if args.settle > 0 and pids:
                meta["settled"] = settle(pids, args.settle)

        Classroom.class_code, Classroom.class_lesson, Classroom.answers = "", args.class_lesson, args.answers
        teacher = None
        if args.class_lesson:
            teacher, Classroom.class_code = open_class(url, args.class_lesson, args.first_timeout)
            meta["trainers"] = 0
            meta["class"] = (f"a class on {args.class_lesson} (code {Classroom.class_code}), every student following "
                             f"step 1 with its 1 s poll; {'every other action answers the check' if args.answers else 'no answers'}")
        Classroom.profiles = make_profiles(args.students, meta["trainers"], args.seed)
        if args.class_lesson:
            step_page = L.load_lesson(L.LESSONS_DIR / f"{args.class_lesson}.toml").steps[0].page.removesuffix(".py")
            for prof in Classroom.profiles:
                prof.start_page, prof.itinerary = step_page, [step_page]
        Classroom.records = {}
        Classroom.base_url = url
        Classroom.think = args.think
        Classroom.clicks_per_page = args.clicks_per_page
        Classroom.rerun_timeout = args.rerun_timeout
        Classroom.first_timeout = args.first_timeout
        Classroom.seed = args.seed
        Classroom.counter = itertools.count()
        Classroom.students = []
        Classroom.start_gate = gevent.event.Event()

        sampler = Sampler(pids)
        meta["rss_baseline"] = (procs_sample(pids) or (0, None, 0))[1]  # after the warm-up, before the class
        sampler.start()
        harness_cpu0 = sum(os.times()[:2])
        env = Environment(user_classes=[Student], events=events, host=url)
        runner = env.create_local_runner()
        runner.start(args.students, spawn_rate=max(args.students, 1))
        deadline = time.perf_counter() + 30
        while len(Classroom.records) < args.students and time.perf_counter() < deadline:
            gevent.sleep(0.05)
        t_start = time.perf_counter()
        Classroom.start_gate.set()  # every student opens the app now
        browser_out = workdir / "browsers.json"
        if args.real_browsers:
            jobs = browser_jobs(args.real_browsers, Classroom.profiles, url)
            browsers_proc = start_browsers(jobs, timeout=args.first_timeout, hold=args.seconds, out_path=browser_out)
        gevent.sleep(args.seconds)
        t_end = time.perf_counter()
        for student in Classroom.students:  # reruns still waiting for their script_finished
            if student.inflight is not None:
                kind, page, sent = student.inflight
                student.record.unfinished = (kind, page, t_end - sent)
        runner.quit()
        for student in Classroom.students:
            student.on_stop()  # close every websocket (a closed tab)
        if teacher is not None:
            meta["class"] += f"; the class store counted {answered_rows(teacher)} first answers (students x steps)"
            teacher.close()
        meta["locust"] = (env.stats.total.num_requests, env.stats.total.num_failures)
        meta["elapsed"] = time.perf_counter() - t_start
        if args.after > 0:  # the tabs are closed: does the server give the memory back?
            meta["rss_left_at"] = time.perf_counter() - sampler.t0
            gevent.sleep(args.after)
        sampler.stop()
        meta["harness_cpu"] = sum(os.times()[:2]) - harness_cpu0
        browsers: list[dict] = []
        if browsers_proc is not None:
            try:
                browsers_proc.wait(timeout=max(10.0, args.first_timeout - args.seconds + 20))
            except subprocess.TimeoutExpired:
                browsers_proc.kill()
                browsers_proc.wait(timeout=10)
            if browser_out.exists():
                browsers = json.loads(browser_out.read_text())
            elif browsers_proc.stderr is not None:
                err = browsers_proc.stderr.read().decode(errors="replace")[-800:]
                browsers = [{"i": "-", "error": err.strip().replace("\n", " ")[:200]}]
        meta["load_after"] = load_average()
        if args.gc_stats and not args.url:
            gc_path = workdir / "gc.json"
            gevent.sleep(1.2)  # one more dump
            try:
                meta["gc_full"] = json.loads(gc_path.read_text())
            except (OSError, ValueError):
                meta["gc_full"] = None
        records = [Classroom.records[i] for i in sorted(Classroom.records)]
        for rec in records:
            if rec.first_page is None and not rec.first_page_error:
                rec.first_page_error = "not finished when the run ended"
        result = report(args, records, sampler, meta, browsers)
        if args.json:
            args.json.write_text(json.dumps(result, indent=1, default=str))
        if server is not None and server.proc.poll() is not None:
            print(f"\nthe server exited during the run:\n{server.log_tail()}")
            return 1
        return 0
    finally:
        if browsers_proc is not None and browsers_proc.poll() is None:
            browsers_proc.kill()
        if server is not None:
            server.stop()
        if cluster is not None:
            cluster.stop()


if __name__ == "__main__":
    sys.exit(main())
