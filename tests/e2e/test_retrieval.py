"""Real browser: the Retrieval page draws all nine charts, a key press on the query-position slider
moves the kernel and the URL, and screenshots of the whole page go to test-artifacts/screenshots/."""

from __future__ import annotations

from urllib.parse import parse_qs, urlparse

import numpy as np
import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from tests.e2e.conftest import (assert_no_exception, open_page, plotly_data, screenshot, tall_screenshot,
                                wait_for_charts, wait_for_run)

pytestmark = pytest.mark.e2e
LAST = "text=Shrink B below 1"  # the last "try this" prompt on the page



def kernel_curve(page) -> np.ndarray:
    from tests.app.conftest import decode_array

    return np.asarray(decode_array(plotly_data(page, "retrieval-kernel")[0]["y"]), dtype=float)


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


def estimate_points(page) -> list:
    """The y of the estimate chart's first trace (the points of the table) as the browser holds it, read by the
    chart's key: plots mount in no fixed order, and CI once read another chart here as this one."""
    from tests.app.conftest import decode_array

    return [float(v) for v in decode_array(plotly_data(page, "retrieval-estimate")[0]["y"])]


def test_editing_the_points_table_inside_its_panel_redraws_the_estimate(server_url, page):
    """The table sits in panel 1's fragment: an edit reruns that panel, and its figure follows it."""
    open_page(page, server_url, timeout=180_000)
    open_page(page, f"{server_url}/retrieval", timeout=180_000, last=LAST)
    wait_for_charts(page, 9)
    before = estimate_points(page)
    page.get_by_text("Edit the points (x in [0, 1])").click()
    grid = page.locator("[data-testid='stDataFrame']").first
    grid.wait_for(state="visible", timeout=30_000)
    page.wait_for_timeout(1000)  # let the expander finish opening before reading where the grid is
    after = before
    for _ in range(3):  # a double click can land before the grid is ready for it: try again
        grid.scroll_into_view_if_needed()
        box = grid.bounding_box()
        page.mouse.dblclick(box["x"] + box["width"] * 0.75, box["y"] + 35 + 17)  # open row 0 of column y
        editor = page.locator(".gdg-input")  # the cell's editor, in the page's overlay portal
        try:
            editor.wait_for(state="visible", timeout=10_000)
        except PlaywrightTimeout:
            continue
        editor.fill("9")
        editor.press("Enter")
        for _ in range(40):
            wait_for_run(page, last=LAST)
            after = estimate_points(page)
            if after != before:
                break
            page.wait_for_timeout(250)
        if after != before:
            break
    page.locator(".st-key-retrieval-estimate").scroll_into_view_if_needed()
    page.wait_for_timeout(500)
    screenshot(page, "retrieval-points-edited")
    assert after != before, "the estimate did not follow the edited table"
    assert 9.0 in after
    assert_no_exception(page)


def test_a_csv_download_is_written_when_pressed(server_url, page):
    """The CSV buttons hand Streamlit a callable (ui.shell.page.csv_download): the file is made on the click,
    and it holds the panel's table for the settings on screen."""
    open_page(page, server_url, timeout=180_000)
    open_page(page, f"{server_url}/retrieval?qnorm=300", timeout=180_000, last=LAST)
    wait_for_charts(page, 9)
    button = page.locator("[data-testid='stDownloadButton']").first
    button.scroll_into_view_if_needed()
    with page.expect_download(timeout=60_000) as info:
        button.locator("button").click()
    download = info.value
    assert download.suggested_filename == "retrieval_estimates.csv"
    lines = open(download.path(), encoding="utf-8").read().splitlines()
    assert lines[0] == "x,attention,nadaraya_watson_key_space,nadaraya_watson_x"
    rows = np.array([[float(v) for v in line.split(",")] for line in lines[1:]])
    assert len(rows) > 10 and np.all(np.isfinite(rows))
    # |q| = 300 and equal key norms: attention and the key-space estimate agree to rounding error
    assert np.max(np.abs(rows[:, 1] - rows[:, 2])) < 1e-9
    assert_no_exception(page)
