"""The Train page in AppTest: a short training run to the end, uploads, clamped settings, the server cap,
the settings in the URL, a one-token input, no global seeding, and what a setting or a button reruns."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch
from streamlit.runtime.media_file_manager import MediaFileManager

from core import checkpoints
from core.tasks import get_task
from core.analysis import train as A
from tests.app.conftest import app_at, assert_ok, decode_array, page_at, plotly_specs
from tests.app.fragments import click, fragment_id
from ui.train import runs as train_runs

PAGE = "pages/train.py"
TINY = {"task": "copy", "arch": "decoder", "n_layers": 1, "d_model": 32, "n_heads": 2, "steps": 60}
MAX_RUNS = 200  # reruns allowed to finish 60 steps (each trains for at most CHUNK_SECONDS)


@pytest.fixture(autouse=True)
def _bundled_models():
    """The shared sidebar lists the bundled models; without them no page can run."""
    if not checkpoints.read_manifest():
        pytest.skip("assets/models/manifest.json missing: run `python -m core.train --all` first")


@pytest.fixture
def downloads(monkeypatch):
    """Every file handed to a download button in this test: [(file_name, bytes)]."""
    seen = []
    original = MediaFileManager.add

    def add(self, data, mimetype, coordinates, file_name=None, is_for_static_download=False):
        seen.append((file_name, bytes(data)))
        return original(self, data, mimetype, coordinates, file_name=file_name,
                        is_for_static_download=is_for_static_download)

    monkeypatch.setattr(MediaFileManager, "add", add)
    return seen


def configure(at, **values):
    """Set the page's setting widgets (task first: it decides which architectures are offered)."""
    values = {**TINY, **values}
    at.selectbox(key="train.task").set_value(values.pop("task")).run()
    at.selectbox(key="train.arch").set_value(values.pop("arch"))
    for name, value in values.items():
        at.number_input(key=f"train.{name}").set_value(value)
    at.run()
    return at if at.title else at.run()  # they may rerun only the summary and the buttons: draw the whole page


def run_of(at) -> train_runs.TrainingRun:
    return at.session_state[train_runs.RUN_KEY]


def in_sidebar(at, run) -> bool:
    """Whether the run's model is one of the shared sidebar's choices (options are shown as labels)."""
    label = f"{train_runs.run_meta(run)['title']} (this session)"
    return label in at.sidebar.selectbox(key="glassbox.model").options


def train_to_end(at) -> int:
    """Rerun the app (each rerun trains one chunk) until the run is done; returns how many reruns it took."""
    for i in range(MAX_RUNS):
        if run_of(at).status == "done":
            return i
        before = run_of(at).step
        at.run()
        assert_ok(at)
        assert run_of(at).step > before  # every rerun trains (nobody else holds the slots here)
    pytest.fail(f"training did not finish in {MAX_RUNS} reruns (step {run_of(at).step})")


def curves(at) -> dict:
    """name -> (x, y) of the loss/accuracy chart's traces."""
    for spec in plotly_specs(at):
        names = [t.get("name") for t in spec["data"]]
        if "loss (each step)" in names:
            return {t["name"]: (decode_array(t["x"]), decode_array(t["y"])) for t in spec["data"]}
    raise AssertionError("no loss chart on the page")


@pytest.fixture
def short_chunks(monkeypatch):
    """Chunks of ~20 ms, so a 60-step run needs several reruns, as it would with a real model."""
    monkeypatch.setattr(train_runs, "CHUNK_SECONDS", 0.02)


def test_short_training_runs_to_completion(downloads, short_chunks):
    at = page_at(PAGE)
    assert_ok(at)
    configure(at)
    assert not at.button(key="train.go").disabled
    at.button(key="train.go").click().run()
    assert_ok(at)
    run = run_of(at)
    assert run.status == "running" and 0 < run.step < 60  # the first chunk trained already
    assert train_to_end(at) >= 2  # trained in several chunks, one per rerun
    assert run_of(at) is run
    assert run.step == 60 and run.trainer.model.cfg.d_model == 32

    # the loss chart holds every step, and the loss went down
    steps, loss = curves(at)["loss (each step)"]
    assert list(steps) == list(range(1, 61))
    assert loss[-10:].mean() < loss[:10].mean() - 0.2, (loss[:10].mean(), loss[-10:].mean())

    # the final accuracy on fresh samples is shown, and matches core.train.evaluate's number
    labels = [m.label for m in at.metric]
    assert "Accuracy on fresh examples" in labels
    assert f"{run.final_accuracy:.1%}" in [m.value for m in at.metric]
    assert 0.0 <= run.final_accuracy <= 1.0

    # the model is in the shared sidebar's choices; one click selects it for every page
    assert in_sidebar(at, run)
    assert at.sidebar.selectbox(key="glassbox.model").value != run.model_id
    at.button(key="train.use").click().run()
    assert_ok(at)
    assert at.sidebar.selectbox(key="glassbox.model").value == run.model_id
    assert "copy" in " ".join(c.value for c in at.sidebar.caption).lower()

    # the download button holds a checkpoint that core.checkpoints loads and that computes the same logits
    files = [data for name, data in downloads if name and name.endswith(".safetensors")]
    assert files, "no .safetensors download on the page"
    model, meta = checkpoints.from_bytes(files[-1], trusted=True)  # our own file: keep its measured accuracy
    assert meta["task"] == "copy" and meta["steps"] == 60 and meta["config"]["d_model"] == 32
    assert abs(meta["accuracy"] - run.final_accuracy) < 1e-9
    ids = torch.tensor([run.example.ids[0].tolist()])
    with torch.no_grad():
        assert torch.allclose(model(ids), run.trainer.model(ids), atol=1e-5)


def test_scrubbing_snapshots_changes_the_heatmaps():
    at = page_at(PAGE)
    configure(at, steps=40)
    at.button(key="train.go").click().run()
    train_to_end(at)
    run = run_of(at)
    assert len(run.snapshots) >= 10 and run.snapshots[0].step == 0 and run.snapshots[-1].step == 40

    def head0(at):
        for spec in plotly_specs(at):
            trace = spec["data"][0]
            if trace.get("type") == "heatmap" and "at step" in str(spec["layout"].get("title")):
                assert len(spec["data"]) == 2  # one panel per head
                return decode_array(trace["z"]).astype(float)
        raise AssertionError("no head heatmaps")

    slider = at.select_slider(key="train.scrub")
    assert slider.value == 40
    last = head0(at)
    slider.set_value(0).run()
    assert_ok(at)
    first = head0(at)
    assert first.shape == last.shape
    assert np.abs(first - last).max() > 1e-3  # training moved the pattern
    np.testing.assert_allclose(first, run.snapshots[0].patterns["self"][0, 0].astype(float), atol=1e-3)


def test_a_rerun_mid_training_loses_nothing_and_pause_holds(short_chunks):
    at = page_at(PAGE)
    configure(at, steps=3000)
    at.button(key="train.go").click().run()
    run = run_of(at)
    before = run.step
    assert before > 0
    # a full rerun caused by another widget (the sidebar's example button) keeps the run and its history
    at.sidebar.button[0].click().run()
    assert_ok(at)
    assert run_of(at) is run and run.step >= before and len(run.trainer.history) == run.step
    at.button(key="train.pause").click().run()
    paused_at = run.step
    at.run()
    at.run()
    assert run.status == "paused" and run.step == paused_at
    at.button(key="train.resume").click().run()
    assert run.status == "running" and run.step > paused_at
    # pause again and keep the model as it is: it is evaluated and offered like a finished one
    at.button(key="train.pause").click().run()
    at.button(key="train.stop").click().run()
    assert_ok(at)
    assert run.status == "done" and 0 < run.step < 3000 and run.total == run.step
    assert in_sidebar(at, run)
    assert at.get("download_button")
    at.button(key="train.reset").click().run()
    assert train_runs.RUN_KEY not in at.session_state
    assert not at.get("download_button")


def test_the_server_cap_makes_a_run_wait_with_a_message():
    at = page_at(PAGE)
    configure(at)
    held = [train_runs._SLOTS.acquire(timeout=5) for _ in range(train_runs.MAX_CONCURRENT)]
    try:
        assert all(held)
        at.button(key="train.go").click().run()
        assert_ok(at)
        assert run_of(at).step == 0
        assert any("waits its turn" in w.value for w in at.warning)
    finally:
        for ok in held:
            if ok:
                train_runs._SLOTS.release()
    at.run()
    assert run_of(at).step > 0
    assert not any("waits its turn" in w.value for w in at.warning)


def test_the_share_clock_gives_training_at_most_its_share_of_the_time():
    """Two sessions ask for chunks as fast as they can for a second; the chunks they are granted add
    up to at most the share of the wall clock (plus the one chunk in flight). A busier machine only
    grants fewer."""
    import threading
    import time

    clock, chunk, granted = train_runs.ShareClock(0.3), 0.05, []
    t0 = time.monotonic()

    def session():
        while time.monotonic() - t0 < 1.0:
            if clock.start(wait=0.5):
                began = time.monotonic()
                time.sleep(chunk)  # "training"
                granted.append(time.monotonic() - began)
                clock.done(granted[-1])

    threads = [threading.Thread(target=session) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - t0
    assert granted, "no chunk was ever granted"
    assert sum(granted) <= 0.3 * wall + max(granted)


def test_the_share_clock_says_no_after_its_wait():
    clock = train_runs.ShareClock(0.1)
    assert clock.start(wait=0.1)
    clock.done(1.0)  # the next chunk may start in 9 s
    assert not clock.start(wait=0.05)


def test_training_is_shared_only_while_other_students_use_the_server(monkeypatch):
    from ui.shell import activity

    monkeypatch.setattr(activity, "_LAST_RUN", {})
    assert not activity.others_active("me", now=100.0)  # alone
    activity.touch("me", now=100.0)
    assert not activity.others_active("me", now=100.0)  # my own runs do not count
    activity.touch("classmate", now=95.0)
    assert activity.others_active("me", now=100.0)
    assert not activity.others_active("me", now=95.0 + activity.ACTIVE_SECONDS + 1)  # an idle open tab stops counting
    activity.touch("me", now=2000.0)
    assert "classmate" not in activity._LAST_RUN  # forgotten after a while


def _valid_checkpoint() -> bytes:
    from core.analysis.train import TrainSettings

    settings = TrainSettings(task="reverse", arch="encoder", n_layers=1, d_model=16, n_heads=2, steps=10)
    trainer = settings.trainer()
    from core.tasks import get_task

    meta = {"title": "classmate", "task": "reverse", "vocab": list(get_task("reverse").vocab.tokens),
            "steps": 0, "seed": 0, "accuracy": 0.99}  # an untrained model that claims 99%
    return checkpoints.to_bytes(trainer.model, meta)


def _forged(**config) -> bytes:
    from tests.core.test_checkpoints import _rewrite_meta
    return _rewrite_meta(_valid_checkpoint(), lambda m: m["config"].update(config))


class _Boom:
    """Unpickling this would run code; the page must refuse the file before that."""

    def __reduce__(self):
        return (exec, ("import pathlib; pathlib.Path('/tmp/glassbox-pwned').write_text('x')",))


@pytest.mark.parametrize("name, data, words", [
    ("model.safetensors", pickle.dumps({"weights": _Boom()}), "pickle"),
    ("model.pt", pickle.dumps([1, 2, 3]), "pickle"),
    ("model.safetensors", b"this is not a checkpoint at all" * 10, "not a readable"),
    ("model.safetensors", _valid_checkpoint()[:300], "not a readable"),
    ("empty.safetensors", b"", "empty"),
    ("deep.safetensors", _forged(n_layers=40_000, d_model=2, n_heads=1, d_head=None, d_mlp=None),
     "outside what glassbox opens"),
    ("long.safetensors", _forged(max_len=10 ** 9), "outside what glassbox opens"),
    ("eps.safetensors", _forged(ln_eps="x"), "ln_eps"),
], ids=["pickle-exploit", "pt-file", "garbage", "truncated", "empty", "40k-layers", "max-len-1e9", "bad-ln-eps"])
def test_a_bad_upload_gets_a_clear_error(name, data, words, tmp_path):
    at = page_at(PAGE)
    at.file_uploader(key="train.upload").set_value((name, data, "application/octet-stream")).run()
    assert_ok(at)
    errors = [e.value for e in at.error]
    assert any(name in e and words in e.lower() for e in errors), errors
    assert not any("(this session)" in o for o in at.sidebar.selectbox(key="glassbox.model").options)
    import pathlib
    assert not pathlib.Path("/tmp/glassbox-pwned").exists()


def test_a_valid_upload_joins_the_sidebar():
    at = page_at(PAGE)
    at.file_uploader(key="train.upload").set_value(("classmate.safetensors", _valid_checkpoint(),
                                                    "application/octet-stream")).run()
    assert_ok(at)
    assert not at.error
    message = next(s.value for s in at.success if "classmate.safetensors" in s.value)
    assert "measured here" in message and "99.0%" not in message  # the file's own claim is never shown
    options = at.sidebar.selectbox(key="glassbox.model").options
    assert sum("(this session)" in o for o in options) == 1
    at.run()  # a rerun must not add the same upload twice
    assert sum("(this session)" in o for o in at.sidebar.selectbox(key="glassbox.model").options) == 1
    at.button(key="train.use_upload").click().run()
    assert_ok(at)
    assert at.sidebar.selectbox(key="glassbox.model").value.startswith("session:")


def test_out_of_range_settings_are_clamped_with_a_message():
    at = page_at(PAGE, query={"steps": "99999", "d_model": "abc", "lr": "5", "task": "nope"})
    assert_ok(at)
    warnings = " ".join(w.value for w in at.warning)
    assert "steps=99999" in warnings and "3000" in warnings
    assert "d_model" in warnings and "lr=5" in warnings and "nope" in warnings
    assert at.number_input(key="train.steps").value == 3000
    assert at.number_input(key="train.lr").value == pytest.approx(0.01)
    at.number_input(key="train.steps").set_value(5000).run()
    assert at.number_input(key="train.steps").value == 3000
    assert any("5000" in w.value and "3000" in w.value for w in at.warning)
    at.number_input(key="train.n_layers").set_value(0).run()
    assert at.number_input(key="train.n_layers").value == 1
    # d_model must split into the heads: a clear error, and no Train button to press
    at.number_input(key="train.steps").set_value(100)
    at.number_input(key="train.n_heads").set_value(8)
    at.number_input(key="train.d_model").set_value(60).run()
    assert_ok(at)
    assert any("60" in e.value and "8 heads" in e.value for e in at.error)
    assert at.button(key="train.go").disabled
    # only the architectures the chosen task supports are offered
    at.selectbox(key="train.task").set_value("induction").run()
    assert at.selectbox(key="train.arch").options == ["decoder"]


def test_a_one_token_input_from_a_link_renders():
    # /train?model=induction-rope&input=<bos>: the shortest input the sidebar accepts
    at = app_at(PAGE, query={"model": "induction-rope", "input": "<bos>"})
    assert_ok(at)
    assert at.sidebar.text_area(key="glassbox.input").value == "<bos>"
    assert at.selectbox(key="train.task").value == "reverse" and not at.button(key="train.go").disabled
    at.number_input(key="train.n_layers").set_value(3).run()
    assert_ok(at)


def test_the_settings_live_in_the_url_under_their_short_names():
    at = page_at(PAGE, query={"task": "sort", "layers": "3", "heads": "2", "lr": "0.005"})
    assert_ok(at)
    assert at.number_input(key="train.n_layers").value == 3 and at.number_input(key="train.n_heads").value == 2
    assert at.selectbox(key="train.arch").options == list(get_task("sort").archs)
    page = at._tree  # these two rerun only the summary and the buttons: change them on the page the browser shows
    click(at, "train.n_heads", 8, page)
    click(at, "train.pos", "rope", page)
    assert_ok(at)
    url = dict(at.query_params)
    assert (url["task"], url["layers"], url["heads"], url["pos"], url["lr"]) == ("sort", "3", "8", "rope", "0.005")
    assert url["steps"] == "300" and url["seed"] == "0"  # every setting is written, defaults too


def test_the_page_never_seeds_torchs_global_rng(monkeypatch):
    # torch's global RNG is shared by every session's thread: seeding it would race between students
    def refuse(*args, **kwargs):
        raise AssertionError("the global torch RNG was seeded")

    monkeypatch.setattr(torch, "manual_seed", refuse)
    monkeypatch.setattr(torch.random, "manual_seed", refuse)
    monkeypatch.setattr(torch.random, "fork_rng", refuse)
    at = page_at(PAGE)
    configure(at, d_model=48, steps=20)  # a config whose parameter count is not memoised yet
    assert_ok(at)
    assert any("parameters" in c.value for c in at.caption)
    at.button(key="train.go").click().run()
    assert_ok(at)
    assert run_of(at).step > 0


VARIANTS = {"warmup": "0", "score": "cosine", "clip": "2.5", "act": "relu", "head_mi": "0.1"}


def test_the_new_options_live_in_the_url():
    at = page_at(PAGE, query=VARIANTS)
    assert_ok(at)
    assert not at.warning
    assert at.number_input(key="train.warmup").value == 0
    assert at.selectbox(key="train.score").value == "cosine" and at.selectbox(key="train.act").value == "relu"
    assert at.number_input(key="train.key_norm_clip").value == 2.5
    assert at.number_input(key="train.head_mi").value == pytest.approx(0.1)
    url = dict(at.query_params)
    assert {k: url[k] for k in VARIANTS} == VARIANTS
    assert any("warm-up **0** steps (chosen)" in c.value for c in at.caption)
    at.number_input(key="train.warmup").set_value(12).run()
    assert dict(at.query_params)["warmup"] == "12"


def test_the_old_defaults_hold_without_the_new_parameters():
    at = page_at(PAGE, query={"steps": "2000"})
    assert_ok(at)
    assert at.number_input(key="train.warmup").value is None
    assert any("warm-up **100** steps" in c.value for c in at.caption)  # a tenth, at most 100, as before
    url = dict(at.query_params)
    assert "warmup" not in url and (url["score"], url["clip"], url["act"], url["head_mi"]) == (
        "scaled_dot", "0", "gelu", "0")


def test_bad_new_options_are_clamped_with_a_note():
    at = page_at(PAGE, query={"warmup": "-7", "score": "euclid", "clip": "nan", "act": "tanh", "head_mi": "1e9"})
    assert_ok(at)
    warnings = " ".join(w.value for w in at.warning)
    for word in ("warmup=-7", "euclid", "clip", "tanh", "head_mi=1e+09"):
        assert word in warnings, (word, warnings)
    assert at.number_input(key="train.warmup").value == 0
    assert at.selectbox(key="train.score").value == "scaled_dot" and at.selectbox(key="train.act").value == "gelu"
    assert at.number_input(key="train.key_norm_clip").value == 0.0
    assert at.number_input(key="train.head_mi").value == 5.0
    # typed values are clamped too, with a note
    at.number_input(key="train.key_norm_clip").set_value(-1.0).run()
    assert at.number_input(key="train.key_norm_clip").value == 0.0
    at.number_input(key="train.warmup").set_value(5000).run()
    assert at.number_input(key="train.warmup").value == 1000
    assert any("5000" in w.value and "1000" in w.value for w in at.warning)


def test_the_warmup_preset_sets_up_pre_vs_post_ln_without_warmup():
    from ui.train.view import PRESET_LR

    at = page_at(PAGE)
    at.button(key="train.preset_post").click().run()
    assert_ok(at)
    url = dict(at.query_params)
    assert (url["norm"], url["warmup"], float(url["lr"])) == ("post", "0", PRESET_LR)
    at.button(key="train.preset_pre").click().run()
    url = dict(at.query_params)
    assert (url["norm"], url["warmup"], float(url["lr"])) == ("pre", "0", PRESET_LR)
    assert url["task"] == "reverse" and url["steps"] == "300"  # the rest is left alone


def mi_figure(at):
    for spec in plotly_specs(at):
        if "between heads" in str(spec["layout"].get("title")):
            return [decode_array(t["z"]).astype(float) for t in spec["data"]]
    return None


def test_a_run_with_every_new_option_trains_and_shows_the_heads_shared_information():
    at = page_at(PAGE)
    configure(at, steps=30, n_heads=4)
    at.selectbox(key="train.score").set_value("cosine")
    at.selectbox(key="train.act").set_value("relu")
    at.number_input(key="train.key_norm_clip").set_value(2.0)
    at.number_input(key="train.warmup").set_value(0)
    at.number_input(key="train.head_mi").set_value(0.0).run()
    at.button(key="train.go").click().run()
    train_to_end(at)
    assert_ok(at)
    free = run_of(at)
    cfg = free.trainer.model.cfg
    assert (cfg.score, cfg.key_norm_clip, cfg.act, free.trainer.warmup) == ("cosine", 2.0, "relu", 0)
    assert free.trainer.history[0]["lr"] == pytest.approx(free.settings.lr)  # no warm-up: full rate at once
    before, after = mi_figure(at)
    assert before.shape == (4, 4) and np.isnan(np.diag(before)).all()
    assert np.nanmax(np.abs(before - after)) > 1e-3  # training changed what the heads share
    free_mean = np.nanmean(after)

    # the same run with the penalty: the shared information after training is lower, and the loss includes it
    at.button(key="train.reset").click().run()
    at.number_input(key="train.head_mi").set_value(1.0).run()
    at.button(key="train.go").click().run()
    train_to_end(at)
    assert_ok(at)
    pushed = run_of(at)
    record = pushed.trainer.history[-1]
    assert record["loss"] == pytest.approx(record["ce"] + 1.0 * record["head_mi"], rel=1e-5)
    before2, after2 = mi_figure(at)
    np.testing.assert_allclose(before2, before)  # same seed, same random start
    assert np.nanmean(after2) < free_mean
    assert any("head diversity λ = 1" in c.value for c in at.caption)


def test_the_settings_say_what_the_design_would_cost_at_the_original_sizes():
    at = page_at(PAGE, query={"task": "reverse", "arch": "encoder-decoder"})
    assert_ok(at)
    line = next(c.value for c in at.caption if "original Transformer" in c.value)
    assert "6 + 6 layers, d_model 512, 8 heads of 64, d_ff 2048" in line and "BERT-base" in line
    at.number_input(key="train.d_model").set_value(32).run()
    assert next(c.value for c in at.caption if "original Transformer" in c.value) != line  # the ratio follows


# ---------------------------------------------------------------------------------------------
# What a change reruns: a setting, the two keyed fragments that read it; a button, the page
# ---------------------------------------------------------------------------------------------

SUMMARY = ("Each head works", "The same design", "The warm-up (")  # the captions of what the settings add up to


def summary(at) -> list[str]:
    """The captions that say what the settings add up to, as the last run drew them."""
    return [c.value for c in at.caption if c.value.startswith(SUMMARY)]


def only_the_keyed_fragments(at) -> bool:
    """Whether the last run drew the summary (or what is wrong with the settings) and the buttons, and nothing
    else of the page: no title, header, sidebar, settings control or section below."""
    return (not at.title and not at.subheader and not at.sidebar.children and not at.number_input
            and not at.selectbox and bool(summary(at) or at.error) and "train.reset" in widget_keys(at)
            and widget_keys(at) <= {"train.go", "train.pause", "train.resume", "train.stop", "train.reset"})


def widget_keys(at) -> set[str]:
    return {b.key for b in at.button}


@pytest.mark.parametrize("key,value,name,text", [
    ("train.n_layers", 3, "layers", "3"),
    ("train.n_heads", 8, "heads", "8"),
    ("train.lr", 0.005, "lr", "0.005"),
    ("train.warmup", 12, "warmup", "12"),
    ("train.pos", "rope", "pos", "rope"),
    ("train.norm", "post", "norm", "post"),
    ("train.act", "relu", "act", "relu"),
], ids=lambda v: v if isinstance(v, str) and v.startswith("train.") else "")
def test_a_setting_reruns_only_the_summary_and_the_buttons_and_keeps_the_url_right(key, value, name, text):
    at = page_at(PAGE)
    assert_ok(at)
    page = at._tree
    assert fragment_id(at, key) is None and fragment_id(at, "train.go") is not None
    click(at, key, value, page)
    assert_ok(at)
    assert only_the_keyed_fragments(at), "a setting reran more than the summary and the buttons"
    assert "train.go" in widget_keys(at) and not at.button(key="train.go").disabled
    assert at.query_params[name] == text  # written by the callback: the control was not drawn again
    linked = page_at(PAGE, dict(at.query_params))  # the same settings from the URL, on a full run
    assert_ok(linked)
    assert summary(at) == summary(linked)


def test_settings_changed_in_a_row_are_all_read_from_the_session():
    at = page_at(PAGE)
    page = at._tree
    before = summary(at)
    click(at, "train.n_layers", 3, page)
    layers = summary(at)
    assert layers != before and only_the_keyed_fragments(at)  # the parameter count follows
    click(at, "train.n_heads", 8, page)  # a second control of the page as the browser shows it
    click(at, "train.d_model", 60, page)  # 60 does not split into 8 heads
    assert_ok(at)
    assert only_the_keyed_fragments(at)
    assert any("60" in e.value and "8 heads" in e.value for e in at.error)
    assert at.button(key="train.go").disabled  # the buttons read the settings now, not the last full run's
    click(at, "train.d_model", 64, page)
    assert not at.error and not at.button(key="train.go").disabled
    assert any("64 / 8 = **8**" in line for line in summary(at))
    url = dict(at.query_params)
    assert (url["layers"], url["heads"], url["d_model"]) == ("3", "8", "64")


def test_a_typed_value_that_is_clamped_reruns_the_page_so_the_box_shows_it():
    at = page_at(PAGE)
    page = at._tree
    top = A.LIMITS["n_layers"][1]
    click(at, "train.n_layers", 99, page)
    assert_ok(at)
    assert at.title, "a clamped value must be shown by its box: the whole page reruns"
    assert at.number_input(key="train.n_layers").value == top
    notes = [w.value for w in at.warning if "99" in w.value]
    assert len(notes) == 1 and str(top) in notes[0]
    assert at.query_params["layers"] == str(top)
    assert any(f"{top}" in line for line in summary(at))
    page = at._tree
    click(at, "train.n_layers", 2, page)  # in range again: the summary and the buttons alone, the note gone
    assert only_the_keyed_fragments(at) and not at.warning
    assert at.query_params["layers"] == "2"


def test_steps_rerun_the_page_when_they_move_the_automatic_warmup_in_its_box():
    at = page_at(PAGE)
    page = at._tree
    assert at.number_input(key="train.warmup").proto.placeholder == "auto (30)"
    click(at, "train.steps", 350, page)  # the empty warm-up box's placeholder must say 35 now
    assert_ok(at)
    assert at.title and at.number_input(key="train.warmup").proto.placeholder == "auto (35)"
    page = at._tree
    click(at, "train.steps", 2000, page)
    assert at.title and at.number_input(key="train.warmup").proto.placeholder == "auto (100)"
    page = at._tree
    click(at, "train.steps", 2500, page)  # still 100: nothing in the boxes changes
    assert only_the_keyed_fragments(at)
    assert any("warm-up **100** steps" in line for line in summary(at))
    assert at.query_params["steps"] == "2500"


def test_the_task_reruns_the_page_for_the_architectures_it_offers():
    at = page_at(PAGE)
    page = at._tree
    click(at, "train.task", "induction", page)
    assert_ok(at)
    assert at.title
    assert at.selectbox(key="train.arch").options == ["decoder"]
    assert at.query_params["task"] == "induction"


def test_train_after_a_keyed_change_uses_the_new_settings_and_every_button_reruns_the_page(short_chunks):
    at = page_at(PAGE)
    configure(at, steps=3000)
    page = at._tree
    click(at, "train.n_layers", 2, page)
    click(at, "train.d_model", 48, page)
    assert only_the_keyed_fragments(at)
    click(at, "train.go", None, page)  # inside the buttons' fragment, as the browser sends it
    assert_ok(at)
    run = run_of(at)
    assert (run.settings.n_layers, run.settings.d_model) == (2, 48)  # not the settings of the last full run
    assert run.trainer.model.cfg.n_layers == 2 and run.status == "running" and run.step > 0
    assert at.title, "Train reruns the whole page"
    assert any(p.proto.text.startswith("Training: step") for p in at.get("progress"))  # the live view trains
    assert "train.curves" in {c.proto.id.rsplit("-", 1)[-1] for c in at.get("plotly_chart")}

    click(at, "train.pause", None, at._tree)
    assert_ok(at)
    assert at.title and run.status == "paused" and {"train.resume", "train.stop"} <= widget_keys(at)
    assert at.subheader and any(h.value.startswith("3 · Watch") for h in at.subheader)  # the paused run's section

    page = at._tree
    click(at, "train.n_heads", 4, page)  # the settings now differ from the run's: the buttons say so
    assert only_the_keyed_fragments(at)
    assert any("settings above changed" in i.value for i in at.info)
    click(at, "train.n_heads", 2, page)
    assert not any("settings above changed" in i.value for i in at.info)

    click(at, "train.resume", None, page)
    assert at.title and run.status == "running"
    click(at, "train.pause", None, at._tree)
    click(at, "train.reset", None, at._tree)
    assert_ok(at)
    assert at.title and train_runs.RUN_KEY not in at.session_state
    assert any("Press **Train** to start" in i.value for i in at.info)  # the live view, drawn by the full run


# ---------------------------------------------------------------------------------------------
# The first figure: the learning-rate schedule the settings describe, redrawn with them
# ---------------------------------------------------------------------------------------------


def schedule_curve(at) -> tuple[np.ndarray, np.ndarray]:
    """(steps, η_t) of the learning-rate chart as the last run drew it."""
    for spec in plotly_specs(at):
        if "Learning rate over the run" in str(spec["layout"].get("title")):
            trace = spec["data"][0]
            return np.asarray(decode_array(trace["x"]), float), np.asarray(decode_array(trace["y"]), float)
    raise AssertionError("no learning-rate chart on the page")


def test_the_first_chart_is_the_learning_rate_schedule_of_the_settings():
    at = page_at(PAGE, {"steps": "200", "warmup": "40", "lr": "0.004"})
    assert_ok(at)
    first = plotly_specs(at)[0]
    assert "Learning rate over the run" in str(first["layout"].get("title"))  # drawn before any training
    x, y = schedule_curve(at)
    assert x.size == 200 and y.max() == pytest.approx(0.004)
    assert int(np.argmax(y)) == 39  # the warm-up's last step reaches the peak
    assert np.all(np.diff(y[:40]) > 0) and np.all(np.diff(y[40:]) <= 1e-12)  # climbs, then only eases down
    assert 0.1 * 0.004 <= y[-1] < 0.2 * 0.004  # the cosine ends near a tenth of the peak, never below


def test_a_setting_redraws_the_learning_rate_chart_with_the_summary():
    at = page_at(PAGE, {"steps": "200", "warmup": "40", "lr": "0.004"})
    page = at._tree
    click(at, "train.lr", 0.002, page)
    assert_ok(at)
    assert only_the_keyed_fragments(at)  # the chart reran with the summary and the buttons, not the page
    _, y = schedule_curve(at)
    assert y.max() == pytest.approx(0.002)
    click(at, "train.warmup", 0, page)  # a second control of the page as the browser shows it: no warm-up
    assert_ok(at)
    _, y = schedule_curve(at)
    assert y[0] == pytest.approx(0.002) and int(np.argmax(y)) == 0
