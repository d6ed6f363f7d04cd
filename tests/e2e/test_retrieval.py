"""Real browser: the Retrieval page draws all nine charts, a key press on the query-position slider
moves the kernel and the URL, and screenshots of the whole page go to test-artifacts/screenshots/."""

from __future__ import annotations

from urllib.parse import parse_qs, urlparse

import numpy as np
import pytest

from tests.e2e.conftest import (assert_no_exception, open_page, plotly_data, tall_screenshot,
                                wait_for_charts, wait_for_run)

pytestmark = pytest.mark.e2e
LAST = "text=Shrink B below 1"  # the last "try this" prompt on the page



def kernel_curve(page) -> np.ndarray:
    from tests.app.conftest import decode_array

    return np.asarray(decode_array(plotly_data(page, 0)[0]["y"]), dtype=float)


def test_retrieval_page_draws_and_the_query_slider_moves_the_kernel(server_url, page):
    open_page(page, server_url, timeout=180_000)  # the entry point first (navigation and page config)
    open_page(page, f"{server_url}/retrieval", timeout=180_000, last=LAST)
    wait_for_charts(page, 9)
    assert_no_exception(page)
    before = kernel_curve(page)
    tall_screenshot(page, "retrieval")

    slider = page.locator("[data-testid='stSlider']").filter(has_text="Query position").locator("input[type='range']")
    slider.focus()
    for _ in range(10):
        slider.press("ArrowRight")
    for _ in range(120):
        wait_for_run(page, last=LAST)
        after = kernel_curve(page)
        if after.shape != before.shape or not np.allclose(after, before):
            break
        page.wait_for_timeout(250)
    assert not np.allclose(after, before), "the kernel did not move with the query"
    assert int(np.argmax(after)) > int(np.argmax(before))  # moved to the right
    assert float(parse_qs(urlparse(page.url).query)["qx"][0]) > 0.3
    assert_no_exception(page)
