"""Recycling an idle server behind the balancer: after a class, a fresh process instead of a used one.

After a class leaves, one server process keeps 69-89 MB above its level after the warm-up: pages of
its heaps that a few long-lived blocks hold among freed ones (docs/classroom-benchmark.md, "Memory"), which no allocator
hands back. Only a new process is back exactly at the start. With `deploy/cluster.py --recycle-idle`
each server gets GLASSBOX_RECYCLE_MARKER, the path of a marker file shared by the cluster. When the
idle trimmer (ui.server.allocator) finds the server quiet with no tab connected, the server takes the marker
(created exclusively, so only one server of the cluster restarts at a time and the others keep
serving) and stops itself with SIGTERM, Streamlit's own clean shutdown; the supervisor starts a new
process on the same port and removes the marker once it answers its health check. nginx sends the
connections that arrive meanwhile to the other servers. A single server (`streamlit run serve.py`) never
recycles: nobody would be listening while it restarts.
"""

from __future__ import annotations

import os
import signal
from typing import Callable, Optional

from streamlit.logger import get_logger

log = get_logger(__name__)

MARKER_ENV = "GLASSBOX_RECYCLE_MARKER"


def enabled() -> bool:
    """Whether this server runs behind deploy/cluster.py with --recycle-idle."""
    return bool(os.environ.get(MARKER_ENV))


def recycle_if_idle(connected: Callable[[], Optional[int]], stop: Optional[Callable[[], None]] = None) -> bool:
    """Stop this server so that the cluster restarts it, if no tab is connected (`connected()` is 0; None,
    cannot tell, counts as connected) and no other server of the cluster is being restarted now. True
    if it is stopping; False means: ask again at the next idle check."""
    marker = os.environ.get(MARKER_ENV)
    if not marker or connected() != 0:
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
