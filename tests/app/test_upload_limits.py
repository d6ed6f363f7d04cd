"""What one session can make the server hold through uploads: Streamlit's own limit on a request equals the largest
file the app accepts (.streamlit/config.toml server.maxUploadSize), and a session keeps a bounded number of
uploaded models (ui/train/view.py MAX_SESSION_UPLOADS). The real server's refusal of an oversized upload is checked
in tests/e2e/test_hardening.py."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from core import checkpoints
from core.lessons import MAX_FILE_BYTES
from tests.app.conftest import assert_ok, page_at
from ui.train import view as train_view

ROOT = Path(__file__).resolve().parents[2]
PAGE = "pages/train.py"


def server_config() -> dict:
    return tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())["server"]


def test_the_server_takes_no_upload_larger_than_the_app_accepts():
    """Streamlit counts maxUploadSize in MiB (it multiplies by 1024 * 1024): the limit is the model limit exactly,
    not its 200 MB default; every file the app accepts (a model, a lesson) still fits."""
    limit = server_config()["maxUploadSize"] * 1024 * 1024
    assert limit == checkpoints.MAX_UPLOAD_BYTES
    assert MAX_FILE_BYTES < limit


def _checkpoint(title: str) -> bytes:
    """A small valid checkpoint (an untrained 1-layer model), a different file for each title."""
    from core.analysis.train import TrainSettings
    from core.tasks import get_task

    trainer = TrainSettings(task="reverse", arch="encoder", n_layers=1, d_model=16, n_heads=2, steps=10).trainer()
    meta = {"title": title, "task": "reverse", "vocab": list(get_task("reverse").vocab.tokens), "steps": 0, "seed": 0}
    return checkpoints.to_bytes(trainer.model, meta)


def session_models(at) -> list[str]:
    return [o for o in at.sidebar.selectbox(key="glassbox.model").options if "(this session)" in o]


def test_a_session_keeps_a_bounded_number_of_uploaded_models_and_says_so():
    if not checkpoints.read_manifest():
        pytest.skip("assets/models/manifest.json missing: run `python -m core.train --all` first")
    cap = train_view.MAX_SESSION_UPLOADS
    assert 1 <= cap <= 5  # each kept model stays in the server's memory for the whole session
    at = page_at(PAGE)
    for i in range(cap):
        at.file_uploader(key="train.upload").set_value((f"m{i}.safetensors", _checkpoint(f"m{i}"),
                                                        "application/octet-stream")).run()
        assert_ok(at)
        assert not at.error and len(session_models(at)) == i + 1
    at.file_uploader(key="train.upload").set_value(("one-more.safetensors", _checkpoint("one-more"),
                                                    "application/octet-stream")).run()
    assert_ok(at)
    refusals = [e.value for e in at.error]
    assert any(f"{cap} uploaded models" in e and "new tab" in e for e in refusals), refusals
    assert len(session_models(at)) == cap  # nothing more was built or kept
    at.run()  # a rerun with the last accepted file still in the widget is no new upload
    assert len(session_models(at)) == cap
