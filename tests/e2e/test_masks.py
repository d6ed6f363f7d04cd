"""Real browser: the Masks page loads, a preset picked in the select box changes the model's
pattern, a one-token input from a link draws the page, and screenshots of the whole page go to
test-artifacts/screenshots/."""

from __future__ import annotations

import re
from urllib.parse import quote

import numpy as np
import pytest

from tests.e2e.conftest import (assert_no_exception, chart_z, open_page, pick_option, runs_started, screenshot,
                                tall_screenshot, wait_for_charts, wait_for_run, wait_for_z_change)

pytestmark = pytest.mark.e2e
LAST = "text=Give the decoder the full mask"  # the last "try this" prompt on the page
INPUT = "<bos> 3 8 5 2 7 4 1 6 odd"
# The charts by their keys (st-key-<key>), not by their place: plots mount in no fixed order, even during a rerun.
MASK_CHART, YOURS_CHART = "masks-all-grid", "masks-pattern_yours"



def test_masks_page_preset_changes_the_pattern(server_url, page):
    # The entry point first: a fresh server that is first asked for /masks runs the file without
    # app.py's navigation and page config (narrow layout, file names in the menu).
    open_page(page, server_url, timeout=180_000)
    url = f"{server_url}/masks?model=future-legality-encoder&input={quote(INPUT)}"
    open_page(page, url, timeout=180_000, last=LAST)
    wait_for_charts(page, 3)
    assert_no_exception(page)
    mask0, pattern0 = chart_z(page, MASK_CHART), chart_z(page, YOURS_CHART)  # the drawn mask, the pattern with yours
    assert mask0.shape == (10, 10) and mask0.all()
    assert np.allclose(pattern0.sum(axis=1), 1, atol=1e-3)
    tall_screenshot(page, "masks")

    pick_option(page, page.locator("[data-testid='stSelectbox']").filter(has_text="Start from"),
                page.get_by_role("option", name="Causal: j ≤ i"))
    pattern1 = wait_for_z_change(page, pattern0, YOURS_CHART)
    wait_for_run(page, last=LAST)
    assert np.all(np.triu(pattern1, 1) == 0)
    np.testing.assert_array_equal(chart_z(page, MASK_CHART), np.tril(np.ones((10, 10))))
    assert "preset=causal" in page.url
    assert_no_exception(page)
    tall_screenshot(page, "masks_causal")


def test_masks_page_takes_a_one_token_input_from_a_link(server_url, page):
    # The classroom link that used to crash: every 0..n-1 control has one value for one token.
    open_page(page, f"{server_url}/masks?model=induction-rope&input={quote('<bos>')}", timeout=180_000, last=LAST)
    wait_for_charts(page, 3)
    assert_no_exception(page)
    assert chart_z(page, MASK_CHART).shape == (1, 1)
    assert page.get_by_text("receptive field of query token: 0 (the only value here)").count() == 1
    tall_screenshot(page, "masks_one_token")


def test_a_cell_ticked_off_in_the_editor_reaches_every_part_that_reads_the_mask(server_url, page):
    # A cell edit reruns by key only what reads the mask (the sections of ui.masks.view that read "mask"); a layer picked afterwards
    # reruns its own fragments, which must read the edited mask, not the one of the page's last full run.
    open_page(page, server_url, timeout=180_000)
    open_page(page, f"{server_url}/masks?model=future-legality-encoder&input={quote(INPUT)}", timeout=180_000,
              last=LAST)
    wait_for_charts(page, 3)
    wait_for_run(page, last=LAST)
    mask0 = chart_z(page, MASK_CHART)
    grid = page.locator("[data-testid='stDataFrame']").first  # the cell editor: the page's first table
    mask1 = mask0
    for _ in range(6):  # a click that lands while the page still moves under the pointer misses: click again
        grid.scroll_into_view_if_needed()
        page.wait_for_timeout(500)
        box = grid.bounding_box()
        before = runs_started(page)
        # Select the first row's cell in the first key column (query <bos> may read itself), then toggle it with the
        # space bar. The row labels take about 63 px and a key column at least 56 (more once the grid stretches to
        # the page): 72 px from the left edge is inside that column and clear of its checkbox (at 91 px or more),
        # which a click would toggle as well. The header row is 37 px tall and a row 35.
        page.mouse.click(box["x"] + 72, box["y"] + 37 + 17)
        page.keyboard.press("Space")
        # Press again only when this press started no run: pressing while a slow rerun (a loaded CI machine) is still
        # on its way ticks the cell back, and the mask never changes.
        for _ in range(40):  # up to 10 s for the run to start
            if runs_started(page) > before:
                break
            page.wait_for_timeout(250)
        else:
            continue
        for _ in range(360):
            wait_for_run(page, last=LAST)
            mask1 = chart_z(page, MASK_CHART)
            if not np.array_equal(mask1, mask0):
                break
            page.wait_for_timeout(250)
        break
    screenshot(page, "masks_cell_clicked")
    assert mask1[0, 0] == 0 and mask1.sum() == mask0.sum() - 1
    layer0 = chart_z(page, YOURS_CHART)
    assert layer0[0, 0] == 0, "the pattern with your mask did not follow the edited cell"
    pick_option(page, page.locator("[data-testid='stSelectbox']").filter(has_text=re.compile(r"^Layer")),
                page.get_by_role("option", name="1", exact=True))
    wait_for_z_change(page, layer0, YOURS_CHART)
    wait_for_run(page, last=LAST)
    pattern1 = chart_z(page, YOURS_CHART)  # the chart once the run is over (a busy browser may show a chart mid-update)
    assert pattern1[0, 0] == 0 and np.allclose(pattern1.sum(axis=1), 1, atol=1e-3)
    assert "layer=1" in page.url
    assert_no_exception(page)
    tall_screenshot(page, "masks_cell_edited")
