"""Real browser: the Train page trains a small model live, to the end, and offers it for download.

The run is configured through the URL (as a teacher's link would), started with the Train
button, and followed through the self-rerunning fragment until the page shows the finished
panels. Screenshot: test-artifacts/screenshots/train.png (and train_scrubbed.png).
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from tests.app.conftest import decode_array
from tests.e2e.conftest import (assert_no_exception, drawn_heatmaps, fit_viewport_to_page, open_page, plotly_data,
                                screenshot, wait_for_charts, wait_for_run)

pytestmark = pytest.mark.e2e
STEPS = 300
QUERY = f"task=reverse&arch=encoder&pos=sinusoidal&norm=pre&layers=2&d_model=64&heads=4&steps={STEPS}&lr=0.003&seed=0"
TRAIN_TIMEOUT_MS = 300_000  # 300 steps take ~20 s on an idle 2-core machine; allow a busy one


def _loss_trace(page) -> dict:
    """The 'loss (each step)' trace of the training curves, read by the chart's key (the learning-rate
    schedule the settings draw is on the page too, and plots mount in no fixed order)."""
    data = plotly_data(page, "train-curves")
    assert data, "no training curves on the page"
    traces = {t.get("name"): t for t in data}
    assert "loss (each step)" in traces, list(traces)
    return traces["loss (each step)"]


def _whole_page(page) -> None:
    """Grow the viewport to the main column's height: Streamlit scrolls inside it, so a full-page
    screenshot would otherwise show only the first screen."""
    fit_viewport_to_page(page, cap=12000)
    page.wait_for_timeout(700)  # plotly charts resize to the new viewport


def test_train_a_small_model_in_the_browser(server_url, page):
    open_page(page, f"{server_url}/train?{QUERY}", last="[data-testid='stFileUploader']")
    assert_no_exception(page)
    page.get_by_role("button", name="Train", exact=True).click()

    # the live view: a progress bar and curves that grow while training runs
    page.get_by_text("Training: step").first.wait_for(timeout=120_000)
    wait_for_charts(page, 2, timeout=120_000)  # the learning-rate schedule, then the training curves

    # finished: the page reruns once and shows the 'keep' panel with the download
    page.get_by_text("4 · Keep your model").wait_for(timeout=TRAIN_TIMEOUT_MS)
    wait_for_run(page, last="[data-testid='stDownloadButton']")
    assert_no_exception(page)
    assert page.get_by_text(f"Finished: step {STEPS} of {STEPS}").count() == 1

    loss = decode_array(_loss_trace(page)["y"]).astype(float)  # a typed array, or still base64 in gd.data
    assert loss.size == STEPS
    assert loss[-20:].mean() < 0.5 * loss[:20].mean(), (loss[:20].mean(), loss[-20:].mean())
    assert page.get_by_role("button", name="Use this model on every page").is_enabled()
    assert page.locator("[data-testid='stDownloadButton']").count() == 1
    _whole_page(page)
    screenshot(page, "train")

    # scrub back to the first snapshot: the head heatmaps go back to step 0 and change
    def scrubbed_grid(step: int):
        """The heatmap grid of the snapshot section at `step`, if drawn now (its title, bold tags aside, ends
        with the step)."""
        return next((z for title, z in drawn_heatmaps(page) if re.sub("<[^>]*>", "", title).endswith(f"at step {step}")), None)

    before = scrubbed_grid(STEPS)
    assert before is not None, [title for title, _ in drawn_heatmaps(page)]
    slider = page.locator("[data-testid='stSlider'] input[type='range']").first
    slider.focus()
    slider.press("Home")
    after = None
    for _ in range(240):  # a section rerun on a busy machine: up to a minute
        wait_for_run(page)
        after = scrubbed_grid(0)
        if after is not None:
            break
        page.wait_for_timeout(250)
    assert after is not None, f"no heatmap at step 0 after scrubbing: {[t for t, _ in drawn_heatmaps(page)]}"
    assert after.shape == before.shape and not np.allclose(after, before), "step 0 shows the trained heads"
    assert_no_exception(page)
    screenshot(page, "train_scrubbed")


OPTIONS = "task=reverse&arch=encoder&layers=1&d_model=32&heads=4&steps=100&lr=0.003&seed=0" \
          "&warmup=0&score=cosine&clip=2&act=relu&head_mi=0.1"


def test_a_link_with_the_new_options_trains_and_shows_the_heads_shared_information(server_url, page):
    open_page(page, f"{server_url}/train?{OPTIONS}", last="[data-testid='stFileUploader']")
    assert_no_exception(page)
    assert page.get_by_text("warm-up 0 steps (chosen)").count() == 1
    settings = page.get_by_text("1 · Set up the run").locator("xpath=ancestor::div[@data-testid='stVerticalBlock'][1]")
    settings.screenshot(path=str(screenshot(page, "train_options").parent / "train_options.png"))
    page.get_by_role("button", name="Train", exact=True).click()
    page.get_by_text("4 · Keep your model").wait_for(timeout=TRAIN_TIMEOUT_MS)
    wait_for_run(page, last="[data-testid='stDownloadButton']")
    assert_no_exception(page)
    heading = page.get_by_text("Do the heads say the same thing?")
    assert heading.count() == 1
    charts = page.locator("[data-testid='stPlotlyChart']")
    index = next(i for i in range(charts.count())
                 if "nats" in (plotly_data(page, i)[0].get("hovertemplate") or ""))
    data = plotly_data(page, index)
    before, after = (decode_array(t["z"]).astype(float) for t in data)
    assert before.shape == (4, 4) and np.isfinite(before[~np.eye(4, dtype=bool)]).all()
    assert not np.allclose(before, after, equal_nan=True)
    heading.scroll_into_view_if_needed()
    _whole_page(page)
    charts.nth(index).screenshot(path=str(screenshot(page, "train_head_mi").parent / "train_head_mi_chart.png"))


def test_a_setting_redraws_the_summary_and_train_uses_it(server_url, page):
    # a setting reruns only the summary and the buttons (keyed fragments); Train then starts with the new value,
    # so the buttons do not say that the settings above differ from the run's; the buttons, drawn in a fragment,
    # rerun the whole page (the paused run's snapshot section appears)
    open_page(page, f"{server_url}/train?{QUERY.replace(f'steps={STEPS}', 'steps=3000')}",
              last="[data-testid='stFileUploader']")
    summary = page.get_by_text("Each head works in d_model")
    before = summary.text_content()
    layers = page.get_by_label("Layers", exact=True)
    layers.fill("3")
    layers.press("Enter")
    page.wait_for_function("(old) => { const el = [...document.querySelectorAll('[data-testid=\"stCaptionContainer\"]')]"
                           ".find(e => e.textContent.startsWith('Each head works')); return el && el.textContent !== old; }",
                           arg=before, timeout=60_000)
    wait_for_run(page)
    assert_no_exception(page)
    assert "layers=3" in page.url and layers.input_value() == "3"
    page.get_by_role("button", name="Train", exact=True).click()
    page.get_by_text("Training: step").first.wait_for(timeout=120_000)
    page.get_by_role("button", name="Pause").click()
    page.get_by_text("Paused: step").first.wait_for(timeout=60_000)
    page.get_by_text("3 · Watch the heads form").wait_for(timeout=60_000)  # Pause reran the whole page
    wait_for_run(page)
    assert_no_exception(page)
    assert page.get_by_text("The settings above changed").count() == 0  # the run has 3 layers, as the box says
    layers.fill("2")
    layers.press("Enter")
    page.get_by_text("The settings above changed").wait_for(timeout=60_000)
    assert_no_exception(page)
