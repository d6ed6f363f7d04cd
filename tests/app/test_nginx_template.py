"""deploy/nginx.conf.template as deploy/cluster.py fills it: the balancer sends the security headers on every answer
(its own 502 included, none doubled) and names the server that answered only when a check asks for it. Run against a
real nginx (Debian's package, as CI has) in front of a small stand-in server; the whole cluster is in
tests/e2e/test_cluster.py."""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from deploy.cluster import UPSTREAM_HEADER, free_port, nginx_config

NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)
SECURITY = {"X-Content-Type-Options": "nosniff", "Referrer-Policy": "same-origin"}


def test_the_upstream_address_is_named_only_when_asked_for(tmp_path):
    plain = nginx_config(tmp_path, "127.0.0.1:8080", [40001, 40002])
    assert UPSTREAM_HEADER not in plain and "$upstream_addr" not in plain and "{{" not in plain
    checked = nginx_config(tmp_path, "127.0.0.1:8080", [40001, 40002], upstream_header=True)
    assert f"add_header {UPSTREAM_HEADER} $upstream_addr always;" in checked


class Upstream(BaseHTTPRequestHandler):
    """An app server's stand-in: its own (different) frame policy, which the balancer must not pass on doubled."""

    def do_GET(self):  # noqa: N802 - http.server's name
        body = b"ok"
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Content-Security-Policy", "frame-ancestors https://elsewhere.example")
        self.send_header("X-Frame-Options", "SAMEORIGIN")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def answer(url: str):
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.headers
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers


def balancer(tmp_path: Path, ports: list[int], upstream_header: bool = False):
    """Start nginx with the filled template in front of `ports`; returns (its URL, its process)."""
    if NGINX is None:
        pytest.skip("nginx is not installed here (Debian: apt-get install -y nginx; CI installs it)")
    port = free_port()
    conf = tmp_path / "nginx.conf"
    conf.write_text(nginx_config(tmp_path, f"127.0.0.1:{port}", ports, upstream_header))
    check = subprocess.run([NGINX, "-t", "-q", "-p", str(tmp_path), "-c", str(conf)], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    proc = subprocess.Popen([NGINX, "-p", str(tmp_path), "-c", str(conf), "-g", "daemon off;"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2).close()
            break
        except urllib.error.HTTPError:
            break  # nginx answers (a 502 with no server is an answer)
        except OSError:
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "error.log").read_text()
            time.sleep(0.1)
    return f"http://127.0.0.1:{port}", proc


@pytest.fixture
def upstream():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    proc.wait(timeout=10)


@pytest.mark.parametrize("ancestors, policy, legacy", [(None, "frame-ancestors 'self'", ["SAMEORIGIN"]),
                                                        ("'self' https://learn.example.org",
                                                         "frame-ancestors 'self' https://learn.example.org", None)])
def test_every_answer_through_the_balancer_has_the_headers_once_and_no_internal_address(
        tmp_path, upstream, monkeypatch, ancestors, policy, legacy):
    if ancestors is not None:
        monkeypatch.setenv("GLASSBOX_FRAME_ANCESTORS", ancestors)
    down = free_port()  # nobody listens there: nginx answers 502 itself
    for ports, status in (([upstream], 200), ([down], 502)):
        url, proc = balancer(tmp_path, ports)
        try:
            got, headers = answer(url + "/attention")
        finally:
            stop(proc)
        assert got == status
        for name, value in {**SECURITY, "Content-Security-Policy": policy}.items():
            assert headers.get_all(name) == [value], (status, name, headers.items())
        assert headers.get_all("X-Frame-Options") == legacy, (status, headers.items())
        assert headers.get(UPSTREAM_HEADER) is None
        assert not any("127.0.0.1" in value for _, value in headers.items()), headers.items()


def test_a_check_can_still_ask_which_server_answered(tmp_path, upstream):
    url, proc = balancer(tmp_path, [upstream], upstream_header=True)
    try:
        _, headers = answer(url + "/")
    finally:
        stop(proc)
    assert headers.get(UPSTREAM_HEADER) == f"127.0.0.1:{upstream}"
