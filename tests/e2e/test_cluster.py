"""Scale-out: two app servers behind nginx with sticky sessions (deploy/cluster.py), tried by real
browsers and by the classroom harness. Needs Debian's nginx (apt-get install -y nginx), as CI has.

What must hold: the balancer spreads new browsers over the servers; a browser's cookie pins every
later request, the websocket included, to one server; a malformed cookie is not trusted; pages
render through the proxy (websocket upgrade, static files); and simulated students clicking
through every page see no errors and no other student's input.
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from pathlib import Path

import pytest

from deploy.cluster import ROOT, ROUTE_COOKIE, UPSTREAM_HEADER, Cluster
from tests.e2e.conftest import assert_no_exception, open_page, screenshot, wait_for_run

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def cluster():
    """Two servers behind nginx; their classes in a private Redis the cluster starts itself (as
    `python deploy/cluster.py` does) where redis-server is installed, as CI has it. Every answer names the server
    that answered (UPSTREAM_HEADER, for checks only: a real cluster does not send it)."""
    with Cluster(servers=2, local_redis=shutil.which("redis-server") is not None, upstream_header=True) as c:
        yield c


def redis_ping(url: str) -> bytes:
    host, port = re.match(r"redis://([^:/]+):(\d+)", url).groups()
    with socket.create_connection((host, int(port)), timeout=5) as conn:
        conn.sendall(b"PING\r\n")
        return conn.recv(16)


def test_the_cluster_starts_its_own_redis_for_the_classes_and_stops_it():
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed here (CI installs it)")
    with Cluster(servers=1, local_redis=True) as c:
        url = c.env["GLASSBOX_REDIS_URL"]
        assert redis_ping(url).startswith(b"+PONG")
        assert (c.workdir / "redis.log").exists() and not list(c.workdir.glob("*.rdb"))
        server = c.redis
    assert server.poll() is not None  # stopped with the cluster
    with pytest.raises(OSError):
        redis_ping(url)


def fetch(url: str, cookie: str | None = None) -> tuple[str, str]:
    """(the server that answered, the route cookie the balancer set) for one GET."""
    request = urllib.request.Request(url, headers={"Cookie": cookie} if cookie else {})
    with urllib.request.urlopen(request, timeout=30) as r:
        routes = [c.split(";", 1)[0] for c in r.headers.get_all("Set-Cookie") or [] if c.startswith(ROUTE_COOKIE + "=")]
        assert len(routes) == 1, r.headers.get_all("Set-Cookie")
        return r.headers[UPSTREAM_HEADER], routes[0]


def test_every_app_server_runs_with_two_malloc_arenas(cluster):
    """From its first allocation (ui/server/allocator.py can only cap them once app.py runs): after a class leaves,
    a server's memory comes back near its baseline."""
    for proc in cluster.procs:
        environ = Path(f"/proc/{proc.pid}/environ").read_bytes().split(b"\0")
        assert b"MALLOC_ARENA_MAX=2" in environ, proc.args


def test_new_browsers_spread_and_each_stays_on_its_server(cluster):
    servers = {u.removeprefix("http://") for u in cluster.upstream_urls}
    first = [fetch(cluster.url + "/") for _ in range(40)]  # 40 new browsers
    seen = Counter(upstream for upstream, _ in first)
    assert set(seen) == servers, seen  # both servers get students (all 40 on one: about 1e-12)
    for upstream, route in first[:8]:
        for path in ("/", "/_stcore/health", "/attention"):
            assert fetch(cluster.url + path, route) == (upstream, route)  # pinned, and the cookie kept


def test_a_malformed_route_cookie_is_replaced_not_trusted(cluster):
    for bad in ("glassbox_route=../../etc", "glassbox_route=" + "f" * 31, "glassbox_route=" + "A" * 32):
        _, route = fetch(cluster.url + "/", bad)
        assert route != bad and len(route.split("=", 1)[1]) == 32


def routes_to_each_server(cluster) -> dict[str, str]:
    """One route cookie per server: {server: 'glassbox_route=...'}."""
    routes: dict[str, str] = {}
    while len(routes) < cluster.servers:
        upstream, route = fetch(cluster.url + "/")
        routes.setdefault(upstream, route)
    return routes


def pinned_page(browser, cluster, route: str, width: int = 1400, height: int = 1000):
    """A new browser context holding `route`, so all its requests go to that route's server."""
    context = browser.new_context(viewport={"width": width, "height": height})
    name, value = route.split("=", 1)
    context.add_cookies([{"name": name, "value": value, "url": cluster.url}])
    return context, context.new_page()


def test_pages_render_through_the_balancer_for_students_on_either_server(cluster, browser):
    for i, (upstream, route) in enumerate(sorted(routes_to_each_server(cluster).items())):
        context, page = pinned_page(browser, cluster, route)
        answered: list[str] = []
        page.on("response", lambda r: answered.append(r.headers.get(UPSTREAM_HEADER.lower(), "")))
        try:
            open_page(page, f"{cluster.url}/attention?model=sort-decoder&input=3+1+2", timeout=180_000)
            assert_no_exception(page)
            assert page.locator("h1").first.inner_text().strip().startswith("Attention")
            page.wait_for_selector("[data-testid='stPlotlyChart'] .js-plotly-plot", timeout=60_000)  # a heatmap drawn
            screenshot(page, f"cluster_server{i}")
        finally:
            context.close()
        assert answered and set(answered) == {upstream}  # the HTML, scripts and styles: all from one server


def test_the_classroom_harness_through_the_balancer(cluster, tmp_path):
    out = tmp_path / "classroom.json"
    run = subprocess.run(
        [sys.executable, "bench/classroom.py", "--url", cluster.url, "--students", "4", "--trainers", "1",
         "--seconds", "20", "--think", "3", "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=400,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    result = json.loads(out.read_text())
    assert (result["exceptions"], result["failures"], result["foreign"]) == (0, 0, 0), run.stdout[-3000:]
    assert all(t is not None for t in result["first_page"].values()), run.stdout[-3000:]
    # Clicks in a page's sections went out as fragment reruns, as the browser sends them (a section
    # click answered by a whole-page run counts as a failure above).
    assert result["latency"]["section"]["n"] > 0 and result["latency"]["click"]["n"] > 0, run.stdout[-3000:]
    for student, upstreams in result["upstreams"].items():
        assert upstreams and all(upstreams), (student, upstreams)  # every request went through nginx
        assert len(set(upstreams)) == 1, (student, upstreams)  # HTML load and websocket on one server


def test_a_student_on_another_server_follows_the_teachers_class(cluster, browser):
    """With Redis configured, a class a teacher opens on one server is followed from the other."""
    if "GLASSBOX_REDIS_URL" not in cluster.env:
        pytest.skip("redis-server is not installed here: classes stay in each server's memory")
    (teacher_server, teacher_route), (student_server, student_route) = sorted(routes_to_each_server(cluster).items())
    assert teacher_server != student_server
    t_context, teacher = pinned_page(browser, cluster, teacher_route, 1024, 768)
    s_context, student = pinned_page(browser, cluster, student_route, 1024, 768)
    try:
        open_page(teacher, f"{cluster.url}/lessons", timeout=180_000, last="text=Joining a class?")
        teacher.get_by_role("button", name="Open a class").click()
        teacher.get_by_role("button", name="Start the lesson").click()  # from the join screen
        bar = "(t) => { const b = document.querySelector('.st-key-lesson_bar'); return b && b.innerText.includes(t); }"
        teacher.wait_for_function(bar, arg="step 1 of", timeout=120_000)
        code = re.search(r"class ([A-Z0-9]{6})", teacher.locator(".st-key-lesson_bar").first.inner_text()).group(1)

        open_page(student, f"{cluster.url}/?class={code}", timeout=180_000)
        student.wait_for_function(bar, arg="step 1 of", timeout=120_000)
        teacher.locator(".st-key-lesson_next button").click()
        teacher.wait_for_function(bar, arg="step 2 of", timeout=120_000)
        student.wait_for_function(bar, arg="step 2 of", timeout=60_000)  # followed across servers
        wait_for_run(student)
        assert_no_exception(student)
        assert f"class={code}" in student.url and "step=2" in student.url
        screenshot(student, "cluster_class_student")
    finally:
        t_context.close()
        s_context.close()


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for {pid}")


def wait_warm(log: Path, count: int = 1, timeout: float = 120) -> None:
    """Wait until the server writing `log` has finished its warm-up `count` times (once per process)."""
    deadline = time.monotonic() + timeout
    while log.read_text(errors="replace").count("warm-up done") < count:
        assert time.monotonic() < deadline, f"no warm-up line in {log}:\n{log.read_text(errors='replace')[-2000:]}"
        time.sleep(0.2)


def test_an_idle_server_with_no_tab_is_started_afresh_while_the_balancer_keeps_serving(browser):
    """deploy/cluster.py --recycle-idle (ui/server/recycle.py): once the server a student used is idle with no tab
    connected, it stops and the cluster starts a fresh process on its port; the server nobody used is left
    alone; the balancer serves pages throughout, and the fresh process, warmed up with no visit, holds less memory
    than the used one did after the same warm-up and a student's four pages."""
    env = {"GLASSBOX_TRIM_IDLE": "8", "GLASSBOX_TRIM_CHECK": "0.5"}  # quiet for 8 s instead of 130 s
    with Cluster(servers=2, recycle_idle=True, env=env, upstream_header=True) as c:
        pids = [p.pid for p in c.procs]
        route = routes_to_each_server(c)
        upstream, cookie = sorted(route.items())[0]
        used = [u.removeprefix("http://") for u in c.upstream_urls].index(upstream)
        context, page = pinned_page(browser, c, cookie)
        try:
            open_page(page, f"{c.url}/attention?model=sort-decoder&input=3+1+2", timeout=180_000)
            assert_no_exception(page)
            for visit in ("masks?model=sort-decoder", "positions?model=reverse-encdec", "generation"):
                open_page(page, f"{c.url}/{visit}", timeout=180_000)  # what a student computes: a class's leftovers
                assert_no_exception(page)
            wait_warm(c.workdir / f"app{used}.log")  # serve.py warms up from the start: compare warm with warm
            used_rss = rss_mb(pids[used])
        finally:
            context.close()  # the student leaves: no tab connected
        for _ in range(240):  # the trimmer looks every 0.5 s once the server has been quiet for 8 s
            c.supervise()
            if c.restarts:
                break
            time.sleep(0.5)
        assert len(c.restarts) == 1, c.restarts
        assert c.procs[used].pid != pids[used] and c.procs[1 - used].pid == pids[1 - used]
        assert not c.marker.exists()  # freed for the next server once this one answered again
        log = (c.workdir / f"app{used}.log").read_text(errors="replace")
        # The fresh process warms up before any student lands on it (serve.py); it appends to the same log.
        wait_warm(c.workdir / f"app{used}.log", count=2)
        assert rss_mb(c.procs[used].pid) < used_rss  # a fresh process, not the used one's memory
        assert "stopping, so that the cluster starts this server afresh" in log
        # A new student through the balancer, on the restarted server: the page renders.
        context, page = pinned_page(browser, c, cookie)
        try:
            open_page(page, f"{c.url}/attention?model=sort-decoder&input=3+1+2", timeout=180_000)
            assert_no_exception(page)
            page.wait_for_selector("[data-testid='stPlotlyChart'] .js-plotly-plot", timeout=60_000)
        finally:
            context.close()
        # While a server is down (stopped, or crashed), its students' requests go to the other one, and the
        # supervisor starts it again.
        c.procs[used].terminate()
        c.procs[used].wait(timeout=30)
        answered, _ = fetch(c.url + "/", cookie)  # nginx lists every server it tried: its own, then the other
        assert answered.split(", ") == [upstream, c.upstream_urls[1 - used].removeprefix("http://")]
        c.supervise()
        assert len(c.restarts) == 2 and c.procs[used].poll() is None
        assert fetch(c.url + "/", cookie)[0] == upstream  # back on its own server
