"""Issue 36: no client message may destroy shared state. A third connection sent Streamlit's protocol
message "clear cache" (a BackMsg with clear_cache=True over /_stcore/stream), which empties
st.cache_resource for the whole process, and the running class ended for its teacher and every student.

Three websocket connections speak the protocol as a browser does (websocket-client + the protobufs, as
bench/classroom.py does, without its gevent patching): a teacher opens a class on the Lessons page, a
stranger sends "clear cache", and a student then joins the class and follows it."""

from __future__ import annotations

import re
import time
import urllib.request

import pytest

websocket = pytest.importorskip("websocket", reason="websocket-client is in requirements-bench.txt")
from streamlit.proto.BackMsg_pb2 import BackMsg  # noqa: E402
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg  # noqa: E402
from streamlit.proto.WidgetStates_pb2 import WidgetState  # noqa: E402

from tests.e2e.conftest import streamlit_server  # noqa: E402

TEXT_ELEMENTS = ("markdown", "alert", "heading", "text", "exception")


class Tab:
    """One browser tab's websocket session: send rerun_script, read ForwardMsgs until the run finished."""

    def __init__(self, base_url: str, timeout: float = 180):
        self.base_url, self.timeout = base_url, timeout
        with urllib.request.urlopen(base_url + "/", timeout=timeout):
            pass  # a browser loads the page first
        self.ws = websocket.create_connection("ws" + base_url[len("http"):] + "/_stcore/stream",
                                              subprotocols=["streamlit"], origin=base_url, timeout=timeout)
        self.pages: dict[str, str] = {}  # url path -> page_script_hash
        self.texts: list[str] = []  # what the last run drew (markdown, alerts, headings, exceptions)
        self.exceptions: list[str] = []
        self.widgets: dict[str, str] = {}  # widget id -> element kind

    def send(self, msg: BackMsg) -> None:
        self.ws.send_binary(msg.SerializeToString())

    def run(self, query: str = "", page_hash: str = "", widgets: tuple[WidgetState, ...] = ()) -> "Tab":
        msg = BackMsg()
        msg.rerun_script.query_string = query
        msg.rerun_script.page_script_hash = page_hash
        msg.rerun_script.widget_states.widgets.extend(widgets)
        msg.rerun_script.context_info.timezone = "UTC"
        self.texts, self.exceptions, self.widgets = [], [], {}
        self.send(msg)
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            data = self.ws.recv()
            if not isinstance(data, bytes):
                continue
            fmsg = ForwardMsg()
            fmsg.ParseFromString(data)
            kind = fmsg.WhichOneof("type")
            if kind == "navigation":
                self.pages = {p.url_pathname: p.page_script_hash for p in fmsg.navigation.app_pages}
            elif kind == "new_session" and not fmsg.metadata.run.fragment_ids:
                self.texts, self.exceptions, self.widgets = [], [], {}  # a new whole-page run (after st.rerun)
            elif kind == "delta" and fmsg.delta.WhichOneof("type") == "new_element":
                el_kind = fmsg.delta.new_element.WhichOneof("type")
                el = getattr(fmsg.delta.new_element, el_kind)
                if el_kind in TEXT_ELEMENTS:
                    self.texts.append(getattr(el, "body", "") or getattr(el, "message", ""))
                if el_kind == "exception":
                    self.exceptions.append(f"{el.type}: {el.message}")
                if getattr(el, "id", ""):
                    self.widgets[el.id] = el_kind
            elif kind == "script_finished" and fmsg.script_finished == ForwardMsg.FINISHED_SUCCESSFULLY:
                return self
        raise AssertionError(f"no finished run within {self.timeout} s")

    def press(self, key: str) -> WidgetState:
        """A click on the button with this key (its widget id ends with '-<key>')."""
        wid = next(w for w, kind in self.widgets.items() if kind == "button" and w.endswith("-" + key))
        return WidgetState(id=wid, trigger_value=True)

    def close(self) -> None:
        self.ws.close()


def test_a_clear_cache_message_from_another_connection_ends_no_class(tmp_path):
    with streamlit_server(log_path=tmp_path / "streamlit.log") as url:
        tabs = []
        try:
            teacher = Tab(url)
            tabs.append(teacher)
            teacher.run()
            lessons = teacher.pages["lessons"]
            teacher.run(page_hash=lessons)
            teacher.run(page_hash=lessons, widgets=(teacher.press("class_open"),))
            assert not teacher.exceptions, teacher.exceptions
            found = re.search(r"Class code: `([A-Z2-9]{6})`", " ".join(teacher.texts))  # the class card
            assert found, teacher.texts
            code = found.group(1)

            stranger = Tab(url)
            tabs.append(stranger)
            clear = BackMsg()
            clear.clear_cache = True
            stranger.send(clear)
            stranger.run()  # handled in order: the cache was cleared before this run

            student = Tab(url)
            tabs.append(student)
            student.run(query=f"class={code}")
            shown = " ".join(student.texts)
            assert not student.exceptions, student.exceptions
            assert f"There is no class {code}" not in shown
            assert f"Class **{code}**: following the teacher." in shown
            assert re.search(r"step 1 of \d+", shown), shown
        finally:
            for tab in tabs:
                tab.close()
