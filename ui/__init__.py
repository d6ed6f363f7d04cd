"""The Streamlit side of the Glassbox; core/ never imports it.

    shell/      what every page shares: sidebar, page list, URL state, keyed sections, page shape, memos
    server/     the server process's machinery: warm-up, compressed static files, measurement worker, memory
    <page>/     one package per page: view.py (its panels) and runs.py (its cached work)

Arrows point down: app.py and serve.py -> pages/ -> ui/<page>/ -> ui/shell/ -> core/; ui/server/ is used by
app.py and serve.py (and its measurement worker by the pages' runs). `under_apptest` lives here because both
the shell and the server ask it.
"""

from unittest.mock import NonCallableMock

try:  # Streamlit internals: the runtime that AppTest replaces with a mock
    from streamlit.runtime import Runtime
except ImportError:  # pragma: no cover
    Runtime = None


def under_apptest() -> bool:
    """AppTest runs scripts on a mock Runtime (and re-arms Streamlit's pages/ flag before EVERY run)."""
    return isinstance(getattr(Runtime, "_instance", None), NonCallableMock)
