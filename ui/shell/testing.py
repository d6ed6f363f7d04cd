"""Helpers for running the app under Streamlit's AppTest (the tests and ui.shell.precomputed).

Every new AppTest scans every installed package's metadata for Streamlit v2 component manifests
(streamlit.components.v2.manifest_scanner): about 0.3 s per AppTest on this stack, the larger part
of a page's run in a test, and the answer depends only on what is installed. `scan_components_once()`
makes the scan happen once per process; a real server scans once at start-up anyway.
"""

from __future__ import annotations

import functools

from streamlit.components.v2 import manifest_scanner

_original_scan = manifest_scanner.scan_component_manifests


@functools.lru_cache(maxsize=1)
def _scan_once() -> tuple:
    return tuple(_original_scan())


def _cached_scan(*args, **kwargs) -> list:
    if args or kwargs:  # a caller asking for something else gets the real scan
        return _original_scan(*args, **kwargs)
    return list(_scan_once())


def scan_components_once() -> None:
    """Make AppTest's component-manifest scan run once per process (idempotent)."""
    manifest_scanner.scan_component_manifests = _cached_scan
