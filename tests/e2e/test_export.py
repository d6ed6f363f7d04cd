"""Real browser: charts save for slides and papers, and a page's link copies.

On three pages the first chart's toolbar saves a PNG (the camera) and an SVG (the button beside it, added by
ui/shell/export.py's page script); the files are opened: the PNG decodes at twice the chart's size, the SVG
parses as XML with an <svg> root, and both are named after the page, the model and the view. "Copy link to
this view" puts the address with the view's settings on the clipboard. Screenshots: export_<page>
(test-artifacts/screenshots/, the chart's toolbar shown).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest
from PIL import Image

from tests.e2e.conftest import assert_no_exception, open_page, screenshot, wait_for_charts_to_settle

pytestmark = pytest.mark.e2e
CHART = "[data-testid='stPlotlyChart']"
SVG_NS = "{http://www.w3.org/2000/svg}"
# page, query, the model its first chart shows (None: the first chart is not of the sidebar's model)
PAGES = [
    ("attention", "model=induction-rope&head=2", "induction-rope"),
    ("heads", "model=reverse-encdec", "reverse-encdec"),
    ("positions", "model=reverse-encdec", None),  # the toy default: the English decoder (learned table) would add a panel first
]


@pytest.fixture
def export_page(browser, server_url):
    """A 1440 x 900 tab that keeps downloads and may read the clipboard (for the copied link)."""
    context = browser.new_context(viewport={"width": 1440, "height": 900}, accept_downloads=True)
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=server_url)
    tab = context.new_page()
    yield tab
    context.close()


def first_chart_size_and_name(page) -> tuple[int, int, str]:
    """The first chart's drawn width and height (CSS pixels) and the file name its config gives."""
    return tuple(page.evaluate(
        "() => { const g = document.querySelector(\"[data-testid='stPlotlyChart'] .js-plotly-plot\");"
        " return [g._fullLayout.width, g._fullLayout.height, g._context.toImageButtonOptions.filename]; }"))


def download(page, chart, button: str):
    """Hover the chart (its toolbar shows on hover), press `button` in it and wait for the file."""
    chart.hover()
    with page.expect_download(timeout=60_000) as info:
        chart.locator(button).click()
    return info.value


@pytest.mark.parametrize("name,query,model", PAGES, ids=[p[0] for p in PAGES])
def test_first_chart_saves_as_png_and_svg(export_page, server_url, tmp_path, name, query, model):
    page = export_page
    open_page(page, server_url, timeout=180_000)  # the entry point first (navigation and page config)
    open_page(page, f"{server_url}/{name}?{query}", timeout=180_000, last=f"{CHART} .modebar .glassbox-svg")
    assert_no_exception(page)
    wait_for_charts_to_settle(page)  # plots mount in no fixed order: CI once read the second chart as the first
    chart = page.locator(CHART).first
    width, height, stem = first_chart_size_and_name(page)
    assert stem.startswith(f"glassbox-{name}-" + (f"{model}-" if model else "")), stem

    png = download(page, chart, ".modebar-btn[data-title='Download plot as a PNG']")
    assert png.suggested_filename == f"{stem}.png"
    png.save_as(tmp_path / png.suggested_filename)
    with Image.open(tmp_path / png.suggested_filename) as image:
        image.load()  # decodes every pixel, not only the header
        assert image.format == "PNG"
        assert image.size == (2 * width, 2 * height), (image.size, width, height)

    chart.hover()
    screenshot(page, f"export_{name}")  # the toolbar with its camera and SVG buttons
    svg = download(page, chart, ".modebar-btn.glassbox-svg")
    assert svg.suggested_filename == f"{stem}.svg"
    svg.save_as(tmp_path / svg.suggested_filename)
    root = ET.parse(tmp_path / svg.suggested_filename).getroot()
    assert root.tag == f"{SVG_NS}svg"
    assert float(root.get("width")) == width and float(root.get("height")) == height
    assert any(True for _ in root.iter(f"{SVG_NS}text")), "the chart's text is text (vector), not a picture"


@pytest.mark.parametrize("secure", [True, False], ids=["secure-context", "plain-http"])
def test_copy_link_to_this_view_copies_the_address_with_its_settings(export_page, server_url, secure):
    """127.0.0.1 is a secure context, where the Clipboard API works; a classroom server reached by plain http
    on the network is not, and the page copies through a selected text area instead (forced here)."""
    page = export_page
    if not secure:
        page.add_init_script("Object.defineProperty(window, 'isSecureContext', {get: () => false})")
    open_page(page, server_url, timeout=180_000)
    open_page(page, f"{server_url}/attention?model=induction-rope&head=3", timeout=180_000, last=CHART)
    page.get_by_role("button", name="Copy link to this view").click()
    page.wait_for_function("() => document.querySelector('.glassbox-copy-status').textContent !== ''")
    assert page.locator(".glassbox-copy-status").text_content() == "Link copied."
    copied = page.evaluate("() => navigator.clipboard.readText()")
    assert copied == page.url
    assert copied.startswith(f"{server_url}/attention?") and "model=induction-rope" in copied and "head=3" in copied
