"""Real browser: the Heads page loads, its tabs open and draw, a head button changes a circuit, and
the ablation tab reports an accuracy. Screenshots: heads_subspaces, heads_circuits, heads_ablation,
heads_toy (test-artifacts/screenshots/)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.app.conftest import decode_array
from tests.e2e.conftest import assert_no_exception, fit_viewport_to_page, open_page, plotly_data, screenshot, wait_for_run

pytestmark = pytest.mark.e2e
CHART = "[data-testid='stPlotlyChart'] .js-plotly-plot"


def _z(page, index: int) -> np.ndarray:
    data = plotly_data(page, index)
    assert data, f"no plotly chart number {index}"
    z = data[0]["z"]
    return decode_array(z).astype(float) if isinstance(z, dict) else np.asarray(z, dtype=float)


def _open_tab(page, label: str) -> None:
    page.get_by_role("tab", name=label).click()
    page.wait_for_timeout(300)
    wait_for_run(page, last=CHART)


def _shot(page, name: str) -> None:
    """A screenshot tall enough to hold the open tab (Streamlit scrolls inside its own container)."""
    fit_viewport_to_page(page, cap=6000)
    screenshot(page, name)
    page.set_viewport_size({"width": 1400, "height": 1000})


def test_heads_page_in_a_browser(server_url, page):
    # Open the app's entry first: on a fresh server, a deep link as the very first request is served from
    # the pages/ folder without app.py (no wide layout, file names as the menu).
    open_page(page, server_url, timeout=180_000)
    open_page(page, f"{server_url}/heads?model=induction-sinusoidal&layer=1", timeout=180_000, last=CHART)
    assert_no_exception(page)
    page.wait_for_selector("text=h_max", timeout=60_000)
    _shot(page, "heads_subspaces")

    _open_tab(page, "Circuits")
    assert_no_exception(page)
    before = _z(page, 0)
    page.get_by_role("radiogroup", name="Head", exact=True).get_by_role("radio", name="2", exact=True).click()
    for _ in range(200):
        page.wait_for_timeout(250)
        wait_for_run(page, last=CHART)
        after = _z(page, 0)
        if after.shape != before.shape or not np.allclose(after, before):
            break
    else:
        raise AssertionError("choosing head 2 did not change the QK table")
    assert "head=2" in page.url
    _shot(page, "heads_circuits")

    _open_tab(page, "Ablation")
    assert_no_exception(page)
    page.wait_for_selector("text=Every head alone", timeout=120_000)
    assert page.locator("[data-testid='stMetric']").count() >= 3
    _shot(page, "heads_ablation")

    _open_tab(page, "Toy")
    page.get_by_role("button", name="Train the two-head toy").click()
    page.wait_for_selector("text=each head took one subspace", timeout=180_000)
    wait_for_run(page, last=CHART)
    assert_no_exception(page)
    _shot(page, "heads_toy")
