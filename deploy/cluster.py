"""Several Glassbox servers behind nginx with sticky sessions, on one machine.

Starts K `streamlit run serve.py` processes (app.py, warming up from the start: serve.py) on free 127.0.0.1 ports, waits until each answers
/_stcore/health, writes deploy/nginx.conf.template filled in for them into a scratch folder and
runs nginx (Debian's `nginx` package; no root needed) in front of them. Ctrl-C or SIGTERM stops
everything by PID.

    apt-get install -y nginx
    python deploy/cluster.py --listen 0.0.0.0      # one server per core; students open http://HOST:8080
    python deploy/cluster.py --servers 3 --port 8080 --redis redis://db:6379/0

Why several processes: one Python process runs one student's script at a time per core at best
(the interpreter lock), so a bigger class needs more processes, each with its own copy of the
models (about 0.4 GB each at rest). See docs/classroom-benchmark.md for the figures.
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

MMAP_THRESHOLD = "1048576"  # ui.server.allocator.MMAP_THRESHOLD, from the first allocation (tests/app/test_allocator.py)

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = Path(__file__).resolve().parent / "nginx.conf.template"
ROUTE_COOKIE = "glassbox_route"
# Which server answered: the internal address nginx passed the request to (for tests and checks only: it tells
# anyone who asks how the servers are laid out, so it is sent only with --upstream-header / upstream_header=True).
UPSTREAM_HEADER = "X-Glassbox-Upstream"
UPSTREAM_LINE = f"            add_header {UPSTREAM_HEADER} $upstream_addr always;  # which server answered (checks only)"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def frame_ancestors() -> str:
    """The sites that may frame the app, as the app servers read them (GLASSBOX_FRAME_ANCESTORS, else 'self')."""
    if str(ROOT) not in sys.path:  # `python deploy/cluster.py` puts deploy/, not the project, on the path
        sys.path.insert(0, str(ROOT))
    from ui.server.security_headers import frame_ancestors as read

    return read()


def frame_options_line() -> str:
    """nginx's X-Frame-Options line for the app servers' policy ('self' or 'none'), else nothing (it cannot
    name other sites)."""
    from ui.server.security_headers import frame_options

    value = frame_options(frame_ancestors())
    return f'            add_header X-Frame-Options "{value}" always;' if value else ""


def nginx_config(prefix: Path, listen: str, upstream_ports: list[int], upstream_header: bool = False) -> str:
    """The template with its fields filled: scratch paths, the listen address, one server line per port, the
    frame-ancestors policy, and the header naming the server that answered only when `upstream_header`."""
    servers = "\n".join(f"        server 127.0.0.1:{p} max_fails=0;" for p in upstream_ports)
    text = TEMPLATE.read_text()
    fields = (("prefix", str(prefix)), ("listen", listen), ("servers", servers), ("frame_ancestors", frame_ancestors()),
              ("frame_options", frame_options_line()),
              ("upstream_header", UPSTREAM_LINE if upstream_header else ""))
    for name, value in fields:
        text = text.replace("{{" + name + "}}", value)
    if "{{" in text:
        raise ValueError("the nginx template has a field this script does not fill")
    return text


def healthy(url: str, timeout: float = 2.0) -> bool:
    """Whether a server answers ok on /_stcore/health."""
    try:
        with urllib.request.urlopen(url + "/_stcore/health", timeout=timeout) as r:
            return r.read().decode().strip() == "ok"
    except OSError:
        return False


def wait_healthy(url: str, proc: subprocess.Popen, timeout: float, log: Path) -> None:
    """Wait until `url` is healthy; raise with the end of its log if the process dies or time runs out."""
    deadline = time.monotonic() + timeout
    while not healthy(url):
        if proc.poll() is not None or time.monotonic() > deadline:
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise RuntimeError(f"{url} did not become healthy:\n{tail}")
        time.sleep(0.25)


@dataclass
class Cluster:
    """K app servers and one nginx; `start()` then `url`; `stop()` ends every process it started."""

    servers: int = 2
    port: int = 0  # 0: a free port
    listen_host: str = "127.0.0.1"
    streamlit_args: list[str] = field(default_factory=list)
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="glassbox-cluster-")))
    upstream_ports: list[int] = field(default_factory=list)
    procs: list[subprocess.Popen] = field(default_factory=list)
    nginx: Optional[subprocess.Popen] = None
    cookie_secret: str = field(default_factory=lambda: secrets.token_hex(32))
    env: dict[str, str] = field(default_factory=dict)  # extra environment for every app server
    local_redis: bool = False  # start a private redis-server for the classes (GLASSBOX_REDIS_URL)
    redis: Optional[subprocess.Popen] = None
    recycle_idle: bool = False  # a server idle with no tab connected is restarted afresh (ui/server/recycle.py)
    restarts: list[str] = field(default_factory=list)  # one line per server restarted, for the log and tests
    upstream_header: bool = False  # every answer names the server's internal address (UPSTREAM_HEADER): checks only

    @property
    def marker(self) -> Path:
        """The file a server takes before it stops to be recycled: one server restarts at a time."""
        return self.workdir / "recycling"

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.listen_host in ("0.0.0.0", "") else self.listen_host
        return f"http://{host}:{self.port}"

    @property
    def upstream_urls(self) -> list[str]:
        return [f"http://127.0.0.1:{p}" for p in self.upstream_ports]

    def start(self, timeout: float = 120.0) -> "Cluster":
        nginx = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)
        if nginx is None:
            raise RuntimeError("nginx is not installed (Debian: apt-get install -y nginx)")
        if self.servers < 1:
            raise ValueError("at least one server")
        self.port = self.port or free_port()
        try:
            if self.local_redis:
                self._start_redis(timeout)
            for i in range(self.servers):
                self._start_app(i)
            for i, (url, proc) in enumerate(zip(self.upstream_urls, self.procs)):
                wait_healthy(url, proc, timeout, self.workdir / f"app{i}.log")
            self._start_nginx(nginx, timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _start_app(self, i: int) -> None:
        port = free_port()
        self.upstream_ports.append(port)
        self.procs.append(self._launch(i, port))

    def _launch(self, i: int, port: int) -> subprocess.Popen:
        """Server i's process on `port` (its log appended to app<i>.log)."""
        log = (self.workdir / f"app{i}.log").open("ab")
        # One cookie secret for all servers (in the environment, not on the command line where `ps`
        # shows it): a browser moved to another server when its own one died keeps a valid XSRF cookie.
        env = dict(os.environ, **self.env, STREAMLIT_SERVER_COOKIE_SECRET=self.cookie_secret)
        # Two malloc arenas from the first allocation (ui/server/allocator.py can only cap them once app.py runs):
        # after a class leaves, the server's memory comes back near its baseline.
        env.setdefault("MALLOC_ARENA_MAX", "2")
        env.setdefault("MALLOC_MMAP_THRESHOLD_", MMAP_THRESHOLD)  # and 1 MiB+ blocks mapped apart, freed to the system
        if self.recycle_idle and self.servers > 1:  # with one server nobody would answer during its restart
            env["GLASSBOX_RECYCLE_MARKER"] = str(self.marker)
        with log:  # the child keeps its own copy: a restarted server must not leave a handle open here
            return subprocess.Popen(
                [sys.executable, "-m", "streamlit", "run", "serve.py", "--server.headless", "true",
                 "--server.address", "127.0.0.1", "--server.port", str(port),
                 "--server.fileWatcherType", "none", *self.streamlit_args],
                cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env,
            )

    def supervise(self, timeout: float = 120.0) -> None:
        """Start again, on its own port, every app server whose process has ended (recycled when idle, or
        crashed), one at a time, and wait until it answers; then free the recycling marker. Raises if a
        restarted server does not come up."""
        restarted = False
        for i, proc in enumerate(self.procs):
            if proc.poll() is None:
                continue
            restarted = True
            self.restarts.append(f"server {i} (port {self.upstream_ports[i]}, pid {proc.pid}) ended with code "
                                 f"{proc.returncode}: started again")
            print(self.restarts[-1], file=sys.stderr, flush=True)
            self.procs[i] = self._launch(i, self.upstream_ports[i])
            wait_healthy(self.upstream_urls[i], self.procs[i], timeout, self.workdir / f"app{i}.log")
        if restarted:  # only now: a server that took the marker and is still stopping keeps the others waiting
            self.marker.unlink(missing_ok=True)

    def _start_redis(self, timeout: float) -> None:
        """A private redis-server on a free 127.0.0.1 port, nothing written to disk, for the classes."""
        server = shutil.which("redis-server")
        if server is None:
            raise RuntimeError("redis-server is not installed (Debian: apt-get install -y redis-server)")
        port = free_port()
        self.redis = subprocess.Popen([server, "--bind", "127.0.0.1", "--port", str(port), "--save", "",
                                       "--appendonly", "no", "--dir", str(self.workdir)],
                                      stdout=(self.workdir / "redis.log").open("wb"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1) as conn:
                    conn.sendall(b"PING\r\n")
                    if conn.recv(16).startswith(b"+PONG"):
                        break
            except OSError:
                pass
            if self.redis.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server did not start; see {self.workdir / 'redis.log'}")
            time.sleep(0.1)
        self.env["GLASSBOX_REDIS_URL"] = f"redis://127.0.0.1:{port}/0"

    def _start_nginx(self, nginx: str, timeout: float) -> None:
        prefix = self.workdir / "nginx"
        prefix.mkdir(exist_ok=True)
        conf = prefix / "nginx.conf"
        conf.write_text(nginx_config(prefix, f"{self.listen_host}:{self.port}", self.upstream_ports,
                                     self.upstream_header))
        check = subprocess.run([nginx, "-t", "-q", "-p", str(prefix), "-c", str(conf)],
                               capture_output=True, text=True)
        if check.returncode != 0:
            raise RuntimeError(f"nginx rejected its configuration:\n{check.stderr}")
        self.nginx = subprocess.Popen([nginx, "-p", str(prefix), "-c", str(conf), "-g", "daemon off;"],
                                      stdout=subprocess.DEVNULL, stderr=(prefix / "stderr.log").open("wb"))
        wait_healthy(self.url, self.nginx, timeout, prefix / "error.log")

    def stop(self) -> None:
        """Stop nginx, then every app server, then Redis, by PID (terminate, then kill after 10 s)."""
        everything = ([self.nginx] if self.nginx else []) + self.procs + ([self.redis] if self.redis else [])
        for proc in everything:
            if proc.poll() is None:
                proc.terminate()
        for proc in everything:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def __enter__(self) -> "Cluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--servers", type=int, default=os.cpu_count() or 2,
                    help="app processes behind nginx (default: one per core, here %(default)s)")
    ap.add_argument("--port", type=int, default=8080, help="the port students open (default 8080)")
    ap.add_argument("--listen", default="127.0.0.1", help="address nginx listens on (0.0.0.0 for a classroom)")
    ap.add_argument("--server-arg", action="append", default=[], help="extra argument for each streamlit run")
    ap.add_argument("--recycle-idle", action="store_true",
                    help="restart a server afresh once it is idle with no tab connected (one at a time, the others "
                         "keep serving): its memory back to a fresh start after every class (ui/server/recycle.py)")
    ap.add_argument("--redis", default=os.environ.get("GLASSBOX_REDIS_URL", ""), metavar="URL",
                    help="keep classes in this Redis (redis://host:port/db), so a student on any server can join "
                         "a class a teacher opened on another (default: $GLASSBOX_REDIS_URL, else a private "
                         "redis-server started here when it is installed; 'none': each server keeps its own)")
    ap.add_argument("--upstream-header", action="store_true",
                    help=f"name the server that answered (its internal address) in {UPSTREAM_HEADER} on every "
                         "answer, to check stickiness from outside; never for a real class")
    args = ap.parse_args(argv)
    if not 1 <= args.servers <= 64:
        ap.error("--servers must be between 1 and 64")
    local = args.servers > 1 and not args.redis and shutil.which("redis-server") is not None
    if args.servers > 1 and not args.redis and not local or args.redis == "none":
        print("note: without Redis each server keeps its own classes; a student must land on the teacher's "
              "server to join (lessons and everything else work as usual)", file=sys.stderr)
    url = args.redis if args.redis not in ("", "none") else ""
    cluster = Cluster(servers=args.servers, port=args.port, listen_host=args.listen, streamlit_args=args.server_arg,
                      env={"GLASSBOX_REDIS_URL": url} if url else {}, local_redis=local, recycle_idle=args.recycle_idle,
                      upstream_header=args.upstream_header)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # turns SIGTERM into the finally below
    try:
        cluster.start()
        classes = "a private Redis" if local else (url or "each server's own memory")
        print(f"{args.servers} servers ({', '.join(cluster.upstream_urls)}) behind nginx at {cluster.url}; classes in "
              f"{classes}; logs in {cluster.workdir}. Ctrl-C stops all.", flush=True)
        while cluster.nginx.poll() is None and (cluster.redis is None or cluster.redis.poll() is None):
            cluster.supervise()  # a server that ended (recycled, or crashed) is started again on its port
            time.sleep(1)
        print("nginx or Redis exited; stopping the rest", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        cluster.stop()


if __name__ == "__main__":
    sys.exit(main())
