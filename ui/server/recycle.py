"""Recycling an idle server behind the balancer: after a class, a fresh process instead of a used one.

After a class leaves, one server process keeps 69-89 MB above its level after the warm-up: pages of
its heaps that a few long-lived blocks hold among freed ones (docs/classroom-benchmark.md, "Memory"), which no allocator
hands back. Only a new process is back exactly at the start. With `deploy/cluster.py --recycle-idle`
each server gets GLASSBOX_RECYCLE_MARKER, the path of a marker file shared by the cluster. When the
idle trimmer (ui.server.allocator) finds the server quiet with no tab connected (on checks NO_TAB_GRACE seconds
apart, so that a student's page load, which reconnects, does not count), the server takes the marker
(created exclusively, so only one server of the cluster restarts at a time and the others keep
serving) and stops itself with SIGTERM, Streamlit's own clean shutdown; the supervisor starts a new
process on the same port and removes the marker once it answers its health check. nginx sends the
connections that arrive meanwhile to the other servers. A single server (`streamlit run serve.py`) never
recycles: nobody would be listening while it restarts.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Callable, Optional

from streamlit.logger import get_logger

log = get_logger(__name__)

MARKER_ENV = "GLASSBOX_RECYCLE_MARKER"
# Seconds with no tab connected, seen on two checks at least this far apart, before a server stops: a student's
# full page load closes the old tab's connection a moment before the new one opens, and a server that stopped in
# that moment (seen in CI, where a page run took longer than the test's 8 s quiet spell) lost the student.
NO_TAB_GRACE = 5.0


class NoTabClock:
    """When this server was first seen with no tab connected, in the current stretch without one (None while a
    tab is connected). Only the idle trimmer's thread asks, but a lock keeps it safe from any other caller."""

    def __init__(self, now: Callable[[], float] = time.monotonic):
        self.now, self._since, self._lock = now, None, threading.Lock()

    def without_tab_for(self, connected: Optional[int]) -> float:
        """Seconds this stretch has had no tab connected (0.0 when one is connected, or on its first check)."""
        with self._lock:
            if connected != 0:
                self._since = None
                return 0.0
            if self._since is None:
                self._since = self.now()
            return self.now() - self._since


NO_TAB = NoTabClock()


def enabled() -> bool:
    """Whether this server runs behind deploy/cluster.py with --recycle-idle."""
    return bool(os.environ.get(MARKER_ENV))


def recycle_if_idle(connected: Callable[[], Optional[int]], stop: Optional[Callable[[], None]] = None,
                    grace: float = NO_TAB_GRACE, clock: NoTabClock = NO_TAB) -> bool:
    """Stop this server so that the cluster restarts it, if no tab has been connected for `grace` seconds
    (`connected()` is 0 on checks that far apart; None, cannot tell, counts as connected) and no other server of
    the cluster is being restarted now. True if it is stopping; False means: ask again at the next idle check."""
    marker = os.environ.get(MARKER_ENV)
    if not marker:
        return False
    tabs = connected()
    if clock.without_tab_for(tabs) < grace or tabs != 0:
        return False
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False  # another server is restarting: this one waits for the next check
    except OSError as exc:
        log.warning("cannot take the recycling marker %s: %s", marker, exc)
        return False
    with os.fdopen(fd, "w") as out:
        out.write(f"{os.getpid()}\n")
    log.info("idle with no tab connected: stopping, so that the cluster starts this server afresh")
    (stop or (lambda: os.kill(os.getpid(), signal.SIGTERM)))()
    return True
