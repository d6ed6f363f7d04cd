"""Real browser: the Cost page measures and draws all four panels, the width slider moves the predicted
crossover in the time chart and in the URL, and a screenshot of the whole page goes to
test-artifacts/screenshots/cost.png."""

from __future__ import annotations

import numpy as np
import pytest

from tests.app.conftest import decode_array
from tests.e2e.conftest import (assert_no_exception, open_page, plotly_data, tall_screenshot,
                                wait_for_charts, wait_for_run)

pytestmark = pytest.mark.e2e
LAST = "text=this is why long-context models use chunked"  # the last "try this" prompt on the page
TIME_CHART = "cost-chart-time"  # by its key (st-key-<key>): plots mount in no fixed order


def crossover_x(page) -> float:
    """The x of the predicted-crossover line in the time chart."""
    for t in plotly_data(page, TIME_CHART):
        if str(t.get("name", "")).startswith("predicted crossover"):
            return float(np.asarray(decode_array(t["x"]), dtype=float)[0])
    raise AssertionError("no predicted crossover line")



def test_cost_page_measures_and_the_width_moves_the_crossover(server_url, page):
    open_page(page, server_url, timeout=180_000)  # the entry point first (navigation and page config)
    open_page(page, f"{server_url}/cost?nmax=512", timeout=180_000, last=LAST)
    wait_for_charts(page, 4)
    assert_no_exception(page)
    assert crossover_x(page) == 128  # the default width
    names = [t["name"] for t in plotly_data(page, TIME_CHART)]
    assert any(n.startswith("chunked: slope") for n in names)
    tall_screenshot(page, "cost")

    slider = page.get_by_role("slider", name="width d").first
    slider.focus()
    slider.press("ArrowRight")  # d: 128 -> 256
    for _ in range(240):
        wait_for_run(page)
        if crossover_x(page) != 128:
            break
        page.wait_for_timeout(250)
    assert crossover_x(page) == 256
    wait_for_run(page, last=LAST)
    assert "d=256" in page.url
    assert_no_exception(page)
