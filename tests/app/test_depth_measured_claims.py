"""AppTest: the Depth page's two issue-39 panels in one page run. Cross-attention as a gradient path: the figure
(one line per bundled encoder-decoder model), the table and one verdict per model. Hyper-connections trained:
the stored pair's figure (both variants' loss curves), its table and the sentence that names the better one."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from core.analysis import hyper_trained as H
from tests.app.conftest import TIMEOUT, assert_ok, decode_array, plotly_specs
from ui.depth import cross_path as C

PAGE = str(Path(__file__).resolve().parents[2] / "pages" / "depth.py")


@pytest.fixture(scope="module")
def depth_page() -> AppTest:
    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT * 3).run()
    assert_ok(at)
    return at


def by_subtitle(at: AppTest, text: str) -> dict:
    specs = [s for s in plotly_specs(at)
             if any(text in (a.get("text") or "") for a in s["layout"].get("annotations", []))]
    assert len(specs) == 1, text
    return specs[0]


def test_cross_path_panel(depth_page):
    at = depth_page
    assert "Cross-attention: a short gradient path to the source?" in [s.value for s in at.subheader]
    ids = C.encdec_ids()
    assert set(ids) >= {"reverse-encdec", "sort-encdec"}
    lines = [t for t in by_subtitle(at, "Along the encoder")["data"] if t["type"] == "scatter"]
    assert sorted(t["name"] for t in lines) == sorted(ids)
    for t in lines:  # each line is divided by the top of its stream: 1 at the second-to-last state
        assert np.asarray(decode_array(t["y"]), dtype=float)[-2] == pytest.approx(1.0)
    verdicts = [m.value for m in at.markdown if m.value.startswith("The claim ")]
    assert len(verdicts) == len(ids)
    for model_id, text in zip(ids, verdicts):
        assert model_id in text and "×" in text


def test_hyper_trained_panel(depth_page):
    at = depth_page
    assert "Hyper-connections after training" in [s.value for s in at.subheader]
    table = H.load_table()
    assert table is not None
    spec = by_subtitle(at, "Training loss")
    means = [t["name"] for t in spec["data"] if t.get("showlegend") is not False and t.get("name")]
    assert means == list(H.VARIANTS)
    sentence = next(m.value for m in at.markdown if m.value.startswith(f"After {H.STEPS} steps"))
    accuracy = {v: np.mean([r.accuracy for r in H.runs_of(table, v)]) for v in H.VARIANTS}
    assert f"**{max(accuracy, key=accuracy.get)}**" in sentence
