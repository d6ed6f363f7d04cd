"""A teacher's link must open the exact view even as the very first request to a fresh server.

Streamlit's old "pages/ folder" mode would run the page file alone (no sections, no wide
layout, file names in the menu); ui.shell.nav.ensure_app_navigation reroutes that run through app.py.
"""

from __future__ import annotations

import pytest

from tests.e2e.conftest import assert_no_exception, open_page, screenshot, streamlit_server

pytestmark = pytest.mark.e2e


def test_first_request_deep_link_goes_through_the_app_navigation(page):
    with streamlit_server() as url:  # a fresh process: this is its first session
        open_page(page, f"{url}/attention?model=induction-rope&layer=1&head=2",
                  last="[data-testid='stPlotlyChart']")
        assert_no_exception(page)
        nav = page.locator("[data-testid='stSidebarNav']").inner_text()
        assert "Look inside" in nav and "Attention" in nav  # app.py's sections, not file names
        assert "app" not in nav.split()  # the v1 menu lists the entry script as "app"
        assert page.get_by_text("Page not found").count() == 0
        assert "model=induction-rope" in page.url and "layer=1" in page.url and "head=2" in page.url
        main = page.locator("[data-testid='stMainBlockContainer']").bounding_box()
        assert main["width"] > 900  # the wide layout set by app.py
        screenshot(page, "deep_link_first_request")
