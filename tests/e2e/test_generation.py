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
        " const trace = g.data.map(t => !!t.text).lastIndexOf(true);"  # the last column (the colour key follows it)
        " const i = Array.from(g.data[trace].text).indexOf('cross_attn.hook_k');"
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


def _downloads(page) -> dict[str, list[str]]:
    """Press every CSV button on the page; each file's lines by its name."""
    files = {}
    buttons = page.locator("[data-testid='stDownloadButton'] button")
    for i in range(buttons.count()):
        buttons.nth(i).scroll_into_view_if_needed()
        with page.expect_download(timeout=60_000) as info:
            buttons.nth(i).click()
        download = info.value
        files[download.suggested_filename] = open(download.path(), encoding="utf-8").read().splitlines()
    return files


def test_every_csv_button_writes_its_table_when_pressed(server_url, page):
    """The tables behind the CSV buttons are built only when a button is pressed (ui.shell.page.csv_download
    with a function): each one still holds its panel's table."""
    open_page(page, f"{server_url}/generation?model=reverse-encdec", timeout=240_000)
    wait_for_run(page, timeout=240_000, last="text=Train both decoders")
    wait_for_charts(page, 9, timeout=240_000)
    files = _downloads(page)
    assert {"head-contributions.csv", "attention-shapes.csv", "decoding-counters.csv", "time-per-token.csv",
            "leakage-gradients.csv", "leakage-accuracy.csv"} <= set(files), list(files)
    headers = {name: lines[0] for name, lines in files.items()}
    assert headers["head-contributions.csv"].startswith("token,head 0,head 1")
    assert headers["attention-shapes.csv"] == "attention,tensor,axes,sizes,numbers"
    assert headers["decoding-counters.csv"].endswith(",max |logit difference|")
    assert headers["time-per-token.csv"] == "step,ms with cache,ms without cache"
    assert headers["leakage-gradients.csv"] == "model,t,k,grad norm"
    assert headers["leakage-accuracy.csv"].startswith("model") or "accuracy" in headers["leakage-accuracy.csv"]
    assert all(len(lines) > 2 for lines in files.values()), {n: len(lines) for n, lines in files.items()}
    counters = files["decoding-counters.csv"]
    assert sum(",with," in line for line in counters) == sum(",without," in line for line in counters) > 0
    assert_no_exception(page)
    open_page(page, f"{server_url}/retrieval", timeout=180_000, last="text=Shrink B below 1")
    wait_for_charts(page, 9)
    files = _downloads(page)
    assert {"retrieval_beta_sweep.csv", "retrieval_equivalence.csv", "retrieval_estimates.csv"} <= set(files), list(files)
    assert files["retrieval_beta_sweep.csv"][0] == "beta,output,best_weight,entropy_nats"
    assert len(files["retrieval_beta_sweep.csv"]) == 242  # the header and the 241 values of beta
    assert files["retrieval_equivalence.csv"][0] == "key,norm,attention,gaussian_kernel"
    assert files["retrieval_estimates.csv"][0] == "x,attention,nadaraya_watson_key_space,nadaraya_watson_x"
    assert_no_exception(page)
