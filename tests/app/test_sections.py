"""A click inside a section reruns only that section (an st.fragment), redraws its figure, and
leaves the URL right: the new value is in the URL, and opening that URL shows the same figure.
Controls whose effect reaches later sections stay outside every fragment (a full rerun)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest

from core import checkpoints
from tests.app.conftest import assert_ok, page_at
from tests.app.fragments import click_in_fragment, fragment_id
from tests.app.test_train_page import configure, run_of, train_to_end


@pytest.fixture(autouse=True)
def _bundled_models():
    if not checkpoints.read_manifest():
        pytest.skip("assets/models/manifest.json missing: run `python -m core.train --all` first")


@dataclass(frozen=True)
class Section:
    """A control inside a fragment, a new value for it, how the URL writes that value, and the
    figure of its section."""

    page: str
    widget: str  # session key
    value: object
    url: tuple[str, str]  # (parameter, text)
    chart: str  # the plotly chart's key
    query: dict = field(default_factory=dict)


SECTIONS = [
    Section("pages/attention.py", "attention.query", 0, ("query", "0"), "attention.fig_bars", {"view": "head"}),
    Section("pages/positions.py", "positions.k", 7, ("k", "7"), "positions.fig_mk"),
    Section("pages/heads.py", "heads.which", "W_Q", ("matrix", "W_Q"), "heads.fig_angles"),
    Section("pages/masks.py", "masks.token", 2, ("token", "2"), "masks.field"),
    Section("pages/depth.py", "depth.rho", 0.3, ("rho", "0.3"), "depth.chart"),
    Section("pages/cost.py", "cost.preset", "bert-base", ("preset", "bert-base"), "cost.chart.preset"),
]

# Controls that change what later sections draw: they must rerun the whole page.
WHOLE_PAGE = [
    ("pages/attention.py", "attention.layer", {}),
    ("pages/positions.py", "positions.n", {}),
    ("pages/masks.py", "masks.layer", {}),
    ("pages/masks.py", "masks.all.preset", {}),
    ("pages/depth.py", "depth.layers", {}),
    ("pages/cost.py", "cost.d", {}),
]


def chart(at, key: str) -> dict:
    """The plotly spec drawn with `key`."""
    for element in at.get("plotly_chart"):
        if element.proto.id.endswith(f"-{key}"):
            return json.loads(element.proto.spec)
    raise AssertionError(f"no chart {key!r} in this run")


@pytest.mark.parametrize("s", SECTIONS, ids=lambda s: s.page.split("/")[1][:-3])
def test_a_click_in_a_section_reruns_only_it_and_keeps_the_url_right(s: Section):
    at = page_at(s.page, s.query)
    assert_ok(at)
    before = chart(at, s.chart)
    assert at.title, "the full run draws the page title"
    click_in_fragment(at, s.widget, s.value)
    assert_ok(at)
    after = chart(at, s.chart)
    assert after != before, "the section's figure did not change"
    assert not at.title, "the title is outside the section: a fragment rerun must not redraw it"
    name, text = s.url
    assert at.query_params[name] == text  # the URL holds the new value
    linked = page_at(s.page, dict(at.query_params))  # open that URL in a new session
    assert_ok(linked)
    assert chart(linked, s.chart) == after


@pytest.mark.parametrize("page,key,query", WHOLE_PAGE, ids=lambda v: v if isinstance(v, str) else "")
def test_controls_that_feed_later_sections_rerun_the_whole_page(page, key, query):
    at = page_at(page, query)
    assert_ok(at)
    assert fragment_id(at, key) is None


def test_a_button_in_a_section_that_opens_another_view_reruns_the_whole_page():
    at = page_at("pages/attention.py", {"view": "steps", "steps": "toy"})
    assert_ok(at)
    click_in_fragment(at, "attention.to_scale")
    assert_ok(at)
    assert at.title, "st.rerun(scope='app') draws the whole page again"
    assert at.query_params["view"] == "scale"
    assert chart(at, "attention.fig_scale_hist")


def test_scrubbing_the_snapshots_reruns_only_that_section():
    at = page_at("pages/train.py")
    configure(at, steps=40)
    at.button(key="train.go").click().run()
    train_to_end(at)
    assert run_of(at).status == "done"

    def heads(at) -> list:
        return [spec["data"] for spec in (json.loads(e.proto.spec) for e in at.get("plotly_chart"))
                if "at step" in str(spec["layout"].get("title"))]

    assert fragment_id(at, "train.task") is None  # settings feed the Train button: whole page
    last = heads(at)
    url = dict(at.query_params)
    click_in_fragment(at, "train.scrub", 0)
    assert_ok(at)
    assert heads(at) and heads(at) != last
    assert not at.title
    assert dict(at.query_params) == url  # the settings in the URL are untouched
