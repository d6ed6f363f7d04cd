"""Real browser: the Generation page draws every panel for the encoder-decoder, a click on a hook's
dot shows that hook's tensor, the step button
moves the stepper (one more key in the newest token's attention row), the tiny decoders train on
their button, and screenshots of the whole page go to test-artifacts/screenshots/."""

from __future__ import annotations

import time

import pytest

from tests.e2e.conftest import assert_no_exception, open_page, tall_screenshot, wait_for_charts, wait_for_run

pytestmark = pytest.mark.e2e
LAST = "text=Try another seed: the pattern holds."  # the last "try this" prompt, once panel 5 trained


def _charts(page) -> list[dict]:
    """Every plotly chart's title and the shape of its first trace's z, in page order."""
    return page.evaluate(
        "() => Array.from(document.querySelectorAll(\"[data-testid='stPlotlyChart'] .js-plotly-plot\"))"
        ".map(g => ({title: ((g.layout.title && g.layout.title.text) || '').replace(/<[^>]+>/g, ''),"
        " x: (g.data[0] && g.data[0].x) ? Array.from(g.data[0].x._inputArray || g.data[0].x) : []}))")


def _chart(page, title: str, timeout_s: float = 60.0) -> dict:
    """The chart titled `title`, waiting up to `timeout_s` for it to be drawn (plotly draws a page's
    charts in no fixed order)."""
    deadline = time.monotonic() + timeout_s
    while True:
        for c in _charts(page):
            if c["title"].startswith(title):
                return c
        if time.monotonic() > deadline:
            raise AssertionError(f"no chart titled {title!r} among {[c['title'] for c in _charts(page)]}")
        page.wait_for_timeout(250)


def test_generation_page_steps_trains_and_draws(server_url, page):
    open_page(page, f"{server_url}/generation?model=reverse-encdec&tseed=3", timeout=240_000)
    wait_for_run(page, timeout=240_000, last="text=Train both decoders")
    wait_for_charts(page, 9, timeout=240_000)
    assert_no_exception(page)
    # Clicking a dot of the decoder's column picks that hook: the tensor chart follows.
    box = page.evaluate(
        "() => { const g = Array.from(document.querySelectorAll(\"[data-testid='stPlotlyChart'] .js-plotly-plot\"))"
        ".find(p => (p.layout.title && p.layout.title.text || '').includes('Sublayers (boxes)'));"
        " const trace = g.data.length - 1; const i = Array.from(g.data[trace].text).indexOf('cross_attn.hook_k');"
        " const dot = g.querySelectorAll('.scatterlayer .trace')[trace].querySelectorAll('.point')[i];"
        " dot.scrollIntoView({block: 'center'}); const r = dot.getBoundingClientRect();"
        " return {x: r.x + r.width / 2, y: r.y + r.height / 2}; }")
    page.mouse.click(box["x"], box["y"])
    page.wait_for_selector("text=decoder.blocks.0.cross_attn.hook_k for your input", timeout=120_000)
    wait_for_run(page, timeout=120_000)
    assert "hook=decoder.blocks.0.cross_attn.hook_k" in page.url
    step0 = _chart(page, "Step 0")
    page.get_by_role("button", name="step ▶").click()
    page.wait_for_selector("text=Step 1: where the newest token looks", timeout=120_000)
    wait_for_run(page, timeout=120_000)
    step1 = _chart(page, "Step 1")
    assert len(step1["x"]) == len(step0["x"]) + 1  # one more key in the self-attention row
    assert "t=1" in page.url
    page.get_by_role("button", name="Train both decoders").click()
    wait_for_run(page, timeout=240_000, last=LAST)
    wait_for_charts(page, 10, timeout=120_000)
    _chart(page, "Training loss, seed 3")
    assert_no_exception(page)
    tall_screenshot(page, "generation", LAST)
