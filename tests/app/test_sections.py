"""A click inside a section reruns only that section (an st.fragment), redraws its figure, and
leaves the URL right: the new value is in the URL, and opening that URL shows the same figure.
Controls that feed a run of sections and nothing else redraw that group of sections (one fragment
around them) and leave the rest of the page as it was. Controls whose effect reaches the rest of the
page stay outside every fragment (a full rerun)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest

from core import checkpoints
from tests.app.conftest import app_at, assert_ok, page_at
from tests.app.fragments import click, click_in_fragment, fragment_id
from tests.app.test_train_page import configure, run_of, train_to_end


@pytest.fixture(autouse=True)
def _bundled_models():
    if not checkpoints.read_manifest():
        pytest.skip("assets/models/manifest.json missing: run `python -m core.train --all` first")


@dataclass(frozen=True)
class Section:
    """A control inside a fragment, a new value for it, how the URL writes that value, and the
    figure of its section; optionally the start of the section's heading and charts of the section that
    do not read the control (both drawn by a full run, and not again by a click: the click reruns only
    what it changes)."""

    page: str
    widget: str  # session key
    value: object
    url: tuple[str, str] | None  # (parameter, text); None: the control is not in the URL
    chart: str  # the plotly chart's key
    query: dict = field(default_factory=dict)
    heading: str = ""  # the section's header or subheader starts with this
    kept: tuple[str, ...] = ()  # chart keys


ENCDEC = {"model": "reverse-encdec"}  # every Generation panel draws for an encoder-decoder

SECTIONS = [
    Section("pages/attention.py", "attention.query", 0, ("query", "0"), "attention.fig_bars", {"view": "head"},
            "Layer "),
    Section("pages/attention.py", "attention.dk", 16, ("dk", "16"), "attention.fig_scale_hist", {"view": "scale"},
            "Why divide by", ("attention.fig_scale_model",)),
    Section("pages/positions.py", "positions.k", 7, ("k", "7"), "positions.fig_mk"),
    Section("pages/positions.py", "positions.decay_base", 1000, ("decay_base", "1000"), "positions.fig_decay",
            heading="Does RoPE make far-apart tokens"),
    Section("pages/heads.py", "heads.which", "W_Q", ("matrix", "W_Q"), "heads.fig_angles",
            heading="Which directions each head uses", kept=("heads.fig_budget",)),
    Section("pages/masks.py", "masks.token", 2, ("token", "2"), "masks.field",
            heading="How many layers until", kept=("masks.reach",)),
    Section("pages/masks.py", "masks.legality_len", 6, None, "masks.legality_encoder", heading="6. Encoder vs"),
    Section("pages/depth.py", "depth.rho", 0.3, ("rho", "0.3"), "depth.chart"),
    Section("pages/depth.py", "depth.H", 2, ("H", "2"), "depth.paths", heading="4. Long-range paths"),
    Section("pages/cost.py", "cost.preset", "bert-base", ("preset", "bert-base"), "cost.chart.preset",
            heading="4. At the size"),
    Section("pages/retrieval.py", "retrieval.qnorm", 100.0, ("qnorm", "100"), "retrieval.kernel",
            heading="1. Attention is a kernel"),
    Section("pages/retrieval.py", "retrieval.beta", 10.0, ("beta", "10"), "retrieval.arrows", heading="2. A soft"),
    Section("pages/retrieval.py", "retrieval.head", 1, ("head", "1"), "retrieval.span", heading="3. Keys address"),
    Section("pages/retrieval.py", "retrieval.alpha", 10.0, ("alpha", "10"), "retrieval.pattern",
            heading="4. Hijacking"),
    Section("pages/retrieval.py", "retrieval.stretch", 2.5, ("stretch", "2.5"), "retrieval.eq_weights",
            heading="5. Where the equivalences"),
    Section("pages/retrieval.py", "retrieval.c", 10.0, ("c", "10"), "retrieval.scale", heading="6. Scale the"),
    Section("pages/cost.py", "cost.gn", 32, ("gn", "32"), "cost.chart.gradient", {"nmax": "128"},
            kept=("cost.chart.time", "cost.chart.traffic")),
    Section("pages/cost.py", "cost.vary", "width", ("vary", "width"), "cost.chart.scaling", {"nmax": "128"},
            heading="5. Scaling", kept=("cost.chart.gradient",)),
    Section("pages/heads.py", "heads.cost_n", 256, None, "heads.fig_cost", kept=("heads.fig_budget",)),
    Section("pages/generation.py", "generation.hook", "encoder.blocks.1.attn.hook_k",
            ("hook", "encoder.blocks.1.attn.hook_k"), "generation.tensor", ENCDEC, "1 · Anatomy",
            ("generation.heads",)),
    Section("pages/generation.py", "generation.attn", "enc", ("attn", "enc"), "generation.heads", ENCDEC,
            "1 · Anatomy", ("generation.diagram", "generation.tensor")),
    Section("pages/generation.py", "generation.le", 3, ("le", "3"), "generation.shapes", ENCDEC, "2 · Shapes"),
    Section("pages/generation.py", "generation.t", 2, ("t", "2"), "generation.rows", ENCDEC, "3 · Decoding"),
    Section("pages/generation.py", "generation.kvlayer", 1, ("kvlayer", "1"), "generation.cache", ENCDEC,
            "3 · Decoding"),
    Section("pages/generation.py", "generation.ex", 3, ("ex", "3"), "generation.gradients", ENCDEC, "4 · A leak"),
]

# Controls that change what later sections draw: they must rerun the whole page.
WHOLE_PAGE = [
    ("pages/train.py", "train.task", {}),  # the task changes the architectures offered (other settings: by key)
    ("pages/attention.py", "glassbox.model", {}),
    ("pages/retrieval.py", "glassbox.model", {}),  # the sidebar: the device of panels 3 and 4
    ("pages/generation.py", "glassbox.model", ENCDEC),  # the sidebar's model and input feed every panel
]


@dataclass(frozen=True)
class Group:
    """A control that feeds a run of sections and nothing else: a new value for it, how the URL writes it,
    charts of the group it must change, the group's last chart (the whole group redrawn) and charts
    outside the group (left as they were: not in the rerun)."""

    page: str
    widget: str
    value: object
    url: tuple[str, str]
    changed: tuple[str, ...]
    last: str
    outside: tuple[str, ...]


GROUPS = [
    # the mask editor reruns by key every part that reads the mask (the sections of ui.masks.view that read "mask"), the editor first:
    # not the worst-case leak or section 6, which do not read it
    Group("pages/masks.py", "masks.all.preset", "sliding", ("preset", "sliding"),
          ("masks.all.grid", "masks.pattern_yours", "masks.right", "masks.arcs", "masks.reach", "masks.influence"),
          "masks.timing", ("masks.leak", "masks.legality_encoder", "masks.legality_decoder")),
    # the layer reruns by key only what reads it (ui.shell.sections.rerun_readers): not the reach, the receptive field,
    # the measured influence or the leak curves of sections 3-4, which are the same for every layer
    Group("pages/masks.py", "masks.layer", 1, ("layer", "1"), ("masks.pattern_own", "masks.right", "masks.row_sums"),
          "masks.spectrum", ("masks.all.grid", "masks.pairs", "masks.legality_encoder", "masks.reach", "masks.field",
                             "masks.influence", "masks.leak")),
    # n reruns by key only what reads it: not the learned table, the RoPE figures or the neighbours
    Group("pages/positions.py", "positions.n", 32, ("pe_n", "32"), ("positions.fig_table", "positions.fig_gram"),
          "positions.fig_mk", ("positions.fig_rows", "positions.fig_swap_acc", "positions.fig_learned",
                               "positions.fig_rope_plane", "positions.fig_rope_grid", "positions.fig_decay",
                               "positions.fig_neigh")),
    # the position reruns by key only the figures that read it (ui.shell.sections.rerun_readers), not the stream's
    # size between them (the logit lens reads it too: on a checkpoint too big to decode whole, its window ends there)
    Group("pages/depth.py", "depth.pos", 1, ("at", "1"), ("depth.contrib",), "depth.saliency",
          ("depth.norms", "depth.chart", "depth.twins", "depth.paths")),
    Group("pages/depth.py", "depth.layers", 24, ("L", "24"), ("depth.chart", "depth.zoom"), "depth.mixing",
          ("depth.norms", "depth.twins", "depth.paths")),
    # Cost's setting feeds every section, but only their measured parts: d reruns those by key
    Group("pages/cost.py", "cost.d", 256, ("d", "256"), ("cost.chart.time", "cost.chart.memory"), "cost.chart.memory",
          ("cost.chart.preset",)),
    # Attention's bar reruns by key only the parts of the shown view that read it (the grid: its one chart)
    Group("pages/attention.py", "attention.layer", 1, ("layer", "1"), ("attention.fig_grid",), "attention.fig_grid", ()),
    # Heads' pickers rerun by key only the parts of the open tab that read them: not the budget calculator
    Group("pages/heads.py", "heads.layer", 1, ("layer", "1"), ("heads.fig_angles", "heads.fig_gram", "heads.fig_erank"),
          "heads.fig_erank", ("heads.fig_budget",)),
]


def headings(at) -> list[str]:
    """The texts of the headers and subheaders the run drew, and of the bold run-in headings that open a
    paragraph ("**Which directions each head uses (layer 0).** Each head ...": a section whose figure must start
    on the first screen puts its heading there)."""
    bold = [str(m.value)[2:] for m in at.markdown if str(m.value).startswith("**")]
    return [h.value for h in (*at.header, *at.subheader)] + bold


def charts_drawn(at) -> set[str]:
    """The keys of the plotly charts the run drew."""
    return {element.proto.id.rsplit("-", 1)[-1] for element in at.get("plotly_chart")}


def chart(at, key: str) -> dict:
    """The plotly spec drawn with `key`."""
    for element in at.get("plotly_chart"):
        if element.proto.id.endswith(f"-{key}"):
            return json.loads(element.proto.spec)
    raise AssertionError(f"no chart {key!r} in this run")


@pytest.mark.parametrize("s", SECTIONS, ids=lambda s: f"{s.page.split('/')[1][:-3]}-{s.widget.split('.')[-1]}")
def test_a_click_in_a_section_reruns_only_it_and_keeps_the_url_right(s: Section):
    at = page_at(s.page, s.query)
    assert_ok(at)
    before = chart(at, s.chart)
    assert at.title, "the full run draws the page title"
    if s.heading:
        assert any(h.startswith(s.heading) for h in headings(at)), "the full run draws the section's heading"
    assert set(s.kept) <= charts_drawn(at)
    click_in_fragment(at, s.widget, s.value)
    assert_ok(at)
    after = chart(at, s.chart)
    assert after != before, "the section's figure did not change"
    assert not at.title, "the title is outside the section: a fragment rerun must not redraw it"
    if s.heading:
        assert not [h for h in headings(at) if h.startswith(s.heading)], "the click redrew the section's heading"
    assert not set(s.kept) & charts_drawn(at), "the click redrew charts that do not read its control"
    if s.url is None:
        return
    name, text = s.url
    assert at.query_params[name] == text  # the URL holds the new value
    linked = page_at(s.page, dict(at.query_params))  # open that URL in a new session
    assert_ok(linked)
    assert chart(linked, s.chart) == after


@pytest.mark.parametrize("g", GROUPS, ids=lambda g: g.widget)
def test_a_control_that_feeds_a_group_of_sections_redraws_that_group_only(g: Group):
    at = page_at(g.page)
    assert_ok(at)
    before = {key: chart(at, key) for key in g.changed}
    start, page = at.session_state[g.widget], at._tree
    click(at, g.widget, g.value, page)
    assert_ok(at)
    drawn = charts_drawn(at)
    assert g.last in drawn, "the whole group is drawn again"
    for key in g.changed:
        assert chart(at, key) != before[key], f"{key} did not follow {g.widget}"
    assert not drawn & set(g.outside), "charts outside the group were drawn again"
    assert not at.title and not at.sidebar.children, "the title and the sidebar are outside every group"
    name, text = g.url
    assert at.query_params[name] == text
    linked = page_at(g.page, dict(at.query_params))
    assert_ok(linked)
    for key in g.changed:
        assert chart(linked, key) == chart(at, key)
    after = {key: chart(at, key) for key in g.changed}
    click(at, g.widget, start, page)  # and back: the control may not have been drawn again by the rerun
    assert_ok(at)
    assert not at.title
    for key in g.changed:
        assert chart(at, key) == before[key], f"{key} did not follow {g.widget} back"
        assert after[key] != before[key]


def test_a_control_that_reruns_only_fragments_keeps_its_value_across_a_page_switch():
    # it is not drawn again by its rerun, so nothing else would remember its value for the page's next opening
    at = app_at("pages/depth.py")
    assert_ok(at)
    assert at.selectbox(key="depth.pos").value != 1
    click(at, "depth.pos", 1, at._tree)
    at.switch_page("pages/home.py").run()
    at.switch_page("pages/depth.py").run()
    assert_ok(at)
    assert at.selectbox(key="depth.pos").value == 1 and at.query_params["at"] == "1"


@pytest.mark.parametrize("page,key,query", WHOLE_PAGE, ids=lambda v: v if isinstance(v, str) else "")
def test_controls_that_feed_later_sections_rerun_the_whole_page(page, key, query):
    at = page_at(page, query)
    assert_ok(at)
    assert fragment_id(at, key) is None


# Buttons inside a section that change something outside it (the view picker, the sidebar's model):
# (page, URL, button, the URL parameter and value it leads to, a chart of the page it leads to).
APP_BUTTONS = [
    ("pages/attention.py", {"view": "steps", "steps": "toy"}, "attention.to_scale", ("view", "scale"),
     "attention.fig_scale_hist"),
    ("pages/generation.py", {"model": "sort-decoder"}, "generation.switch_shapes", ("model", "reverse-encdec"),
     "generation.shapes"),
]


@pytest.mark.parametrize("page,query,button,url,shown", APP_BUTTONS, ids=lambda v: v if isinstance(v, str) else "")
def test_a_button_in_a_section_that_changes_what_is_outside_it_reruns_the_whole_page(page, query, button, url, shown):
    at = page_at(page, query)
    assert_ok(at)
    click_in_fragment(at, button)
    assert_ok(at)
    assert at.title, "st.rerun(scope='app') draws the whole page again"
    name, text = url
    assert at.query_params[name] == text
    assert chart(at, shown)


def test_scrubbing_the_snapshots_reruns_only_that_section():
    at = page_at("pages/train.py")
    configure(at, steps=40)
    at.button(key="train.go").click().run()
    train_to_end(at)
    assert run_of(at).status == "done"

    def heads(at) -> list:
        return [spec["data"] for spec in (json.loads(e.proto.spec) for e in at.get("plotly_chart"))
                if "at step" in str(spec["layout"].get("title"))]

    assert fragment_id(at, "train.task") is None  # the task changes the architectures offered: whole page
    last = heads(at)
    url = dict(at.query_params)
    click_in_fragment(at, "train.scrub", 0)
    assert_ok(at)
    assert heads(at) and heads(at) != last
    assert not at.title
    assert dict(at.query_params) == url  # the settings in the URL are untouched


def test_the_step_buttons_rerun_only_the_stepper_and_move_the_step_in_the_url():
    at = page_at("pages/generation.py", ENCDEC)
    assert_ok(at)
    before = chart(at, "generation.rows")
    click_in_fragment(at, "generation.next")
    assert_ok(at)
    assert not at.title
    assert at.query_params["t"] == "1"
    after = chart(at, "generation.rows")
    assert after != before
    click_in_fragment(at, "generation.prev")
    assert at.query_params["t"] == "0"
    assert chart(at, "generation.rows") == before


def test_the_training_button_reruns_only_its_panel_and_draws_the_losses():
    at = page_at("pages/generation.py", {**ENCDEC, "tseed": "11"})  # a seed no other test trains
    assert_ok(at)
    assert fragment_id(at, "generation.tseed") == fragment_id(at, "generation.train") is not None
    click_in_fragment(at, "generation.train")
    assert_ok(at)
    assert not at.title
    assert chart(at, "generation.loss")["data"]
    assert at.query_params["tseed"] == "11"

