"""Scale-out: two app servers behind nginx with sticky sessions (deploy/cluster.py), tried by real
browsers and by the classroom harness. Needs Debian's nginx (apt-get install -y nginx), as CI has.

What must hold: the balancer spreads new browsers over the servers; a browser's cookie pins every
later request, the websocket included, to one server; a malformed cookie is not trusted; pages
render through the proxy (websocket upgrade, static files); and simulated students clicking
through every page see no errors and no other student's input.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from collections import Counter

import pytest

from deploy.cluster import ROOT, ROUTE_COOKIE, UPSTREAM_HEADER, Cluster
from tests.e2e.conftest import assert_no_exception, open_page, screenshot

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def cluster():
    with Cluster(servers=2) as c:
        yield c


def fetch(url: str, cookie: str | None = None) -> tuple[str, str]:
    """(the server that answered, the route cookie the balancer set) for one GET."""
    request = urllib.request.Request(url, headers={"Cookie": cookie} if cookie else {})
    with urllib.request.urlopen(request, timeout=30) as r:
        routes = [c.split(";", 1)[0] for c in r.headers.get_all("Set-Cookie") or [] if c.startswith(ROUTE_COOKIE + "=")]
        assert len(routes) == 1, r.headers.get_all("Set-Cookie")
        return r.headers[UPSTREAM_HEADER], routes[0]


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


def test_pages_render_through_the_balancer_for_students_on_either_server(cluster, browser):
    routes: dict[str, str] = {}
    while len(routes) < 2:  # one route cookie per server
        upstream, route = fetch(cluster.url + "/")
        routes.setdefault(upstream, route)
    for i, (upstream, route) in enumerate(sorted(routes.items())):
        context = browser.new_context(viewport={"width": 1400, "height": 1000})
        name, value = route.split("=", 1)
        context.add_cookies([{"name": name, "value": value, "url": cluster.url}])
        page = context.new_page()
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
    for student, upstreams in result["upstreams"].items():
        assert upstreams and all(upstreams), (student, upstreams)  # every request went through nginx
        assert len(set(upstreams)) == 1, (student, upstreams)  # HTML load and websocket on one server
