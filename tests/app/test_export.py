"""Export for slides and papers: every chart's toolbar saves a PNG at twice its size under a name that says
page, model and view (the SVG button beside it, added in the browser, uses the same name: tests/e2e/test_export.py),
and every page offers "Copy link to this view"."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from tests.app.conftest import app_at, assert_ok
from ui.shell import export
from ui.shell.nav import PAGES

ROOT = Path(__file__).resolve().parents[2]
SAFE_NAME = re.compile(r"glassbox(-[a-z0-9]+)+")  # what a file name may be: no dots, slashes, spaces or quotes
MODEL_PAGES = ("attention", "positions", "heads", "masks", "depth", "generation")  # their default views draw the model


def image_options(at) -> list[dict]:
    """The toolbar's image options (Plotly's config) of every plotly chart the run drew, in page order."""
    return [json.loads(chart.proto.config or "{}").get("toImageButtonOptions", {}) for chart in at.get("plotly_chart")]


@pytest.mark.parametrize("page", [p for p in PAGES if p.url_path], ids=lambda p: p.url_path)
def test_every_chart_saves_a_png_at_twice_its_size_named_for_page_model_and_view(page):
    at = app_at(page.path)
    assert_ok(at)
    model = at.session_state["glassbox.model"]
    options = image_options(at)
    for opts in options:
        assert opts.get("format") == "png" and opts.get("scale") == 2, opts
        assert SAFE_NAME.fullmatch(opts.get("filename", "")), opts
        assert opts["filename"].startswith(f"glassbox-{page.url_path}-"), opts
    names = [opts["filename"] for opts in options]
    assert len(set(names)) == len(names), f"two charts of {page.url_path} would save over each other: {names}"
    if page.url_path in MODEL_PAGES:
        assert any(f"-{model}-" in name for name in names), (model, names)


def test_a_chart_name_follows_the_model_and_the_view():
    at = app_at("pages/attention.py", {"model": "induction-rope", "layer": "1", "head": "2"})
    assert_ok(at)
    grid = image_options(at)[0]["filename"]
    assert grid.startswith("glassbox-attention-induction-rope-every-head"), grid
    at = app_at("pages/attention.py", {"model": "induction-rope", "view": "head", "layer": "1", "head": "2"})
    assert_ok(at)
    assert any("-l1h2-" in opts["filename"] for opts in image_options(at)), image_options(at)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.url_path or "home")
def test_every_page_has_copy_link_to_this_view(page):
    at = app_at(page.path)
    assert_ok(at)
    tools = [h.proto.body for h in at.get("html") if "glassbox-copy-link" in h.proto.body]
    assert len(tools) == 1, f"{page.url_path or 'home'}: {len(tools)} copy-link buttons"
    assert export.COPY_LABEL in tools[0] and "window.location.href" in tools[0]  # the browser's own address


def test_the_temperature_predictions_table_downloads_as_csv():
    """The one table of numbers drawn as a plain st.table (which has no toolbar, so no CSV of its own)."""
    at = app_at("pages/attention.py", {"view": "temp", "temp": "2"})
    assert_ok(at)
    assert at.get("table"), "the Temperature view draws its predictions table"
    labels = [b.proto.label for b in at.get("download_button")]
    assert "Download CSV" in labels, labels


def test_every_plotly_chart_in_the_code_is_configured_for_export():
    """Views that no default run opens (a lesson step, a tab, a finished training run) are checked in the code:
    every st.plotly_chart call under ui/ passes config=chart_config(...) (or Train's run_chart, which calls it)."""
    missing = []
    for path in sorted((ROOT / "ui").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "plotly_chart":
                config = next((k.value for k in node.keywords if k.arg == "config"), None)
                name = getattr(getattr(config, "func", None), "id", None)
                if name not in ("chart_config", "run_chart"):
                    missing.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not missing, f"st.plotly_chart without config=chart_config(...): {missing}"


@pytest.mark.parametrize("model_id", ["reverse-encdec", "upload:../../etc/passwd", "my model (v2).safetensors",
                                      "<img src=x onerror=alert(1)>", "Ünïcode ∂ α", "", "x" * 500])
def test_a_file_name_is_safe_whatever_the_model_is_called(model_id):
    name = export.file_stem("attention", model_id, "every head · layer 0")
    assert SAFE_NAME.fullmatch(name), name
    assert len(name) <= len("glassbox") + 3 * (export._PART + 1)


def test_a_chart_of_no_model_leaves_the_model_out():
    assert export.file_stem("cost", None, "time d64") == "glassbox-cost-time-d64"
    assert export.file_stem("attention", "reverse-encdec", "compare-a") == "glassbox-attention-reverse-encdec-compare-a"
    config = export.chart_config("heads", "sort-decoder", "qk")
    assert config["toImageButtonOptions"] == {"format": "png", "scale": 2, "filename": "glassbox-heads-sort-decoder-qk"}
