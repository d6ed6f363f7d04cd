"""AppTest: the Attention page's English panel. On an English model it draws the three figures and says what
they show (the chosen head in the title is the argmax of its own grid); on a toy model it offers to switch, and
the button opens the English decoder with the panel drawn."""

from __future__ import annotations

import numpy as np

from tests.app.conftest import assert_ok, decode_array, page_at, plotly_specs

PAGE = "pages/attention.py"
HEADING = "Context on real sentences: 'river bank', 'money bank', and 'it' → 'animal'"


def senses_specs(at) -> dict:
    out = {}
    for spec in plotly_specs(at):
        title = (spec["layout"].get("title") or {}).get("text") or ""
        for start in ("How far apart two uses", "Where 'bank' looks", "'it' → 'animal'"):
            if title.startswith(start):
                out[start] = spec
    return out


def test_panel_on_the_english_decoder():
    at = page_at(PAGE, {"model": "english-decoder"})
    assert_ok(at)
    assert HEADING in [s.value for s in at.subheader]
    specs = senses_specs(at)
    assert len(specs) == 3, list(specs)
    coref = specs["'it' → 'animal'"]
    grid = np.asarray(decode_array(coref["data"][0]["z"]), dtype=float)
    assert grid.shape == (4, 4) and np.all(np.isfinite(grid)) and np.all((grid >= 0) & (grid <= 1))
    layer, head = np.unravel_index(int(np.argmax(grid)), grid.shape)
    assert coref["layout"]["title"]["text"].startswith(f"'it' → 'animal': L{layer}H{head} gives {grid.max():.2f}")
    distances = specs["How far apart two uses"]["data"]
    assert [t["name"] for t in distances] == ["same sense (control)", "different senses"]
    texts = [m.value for m in at.markdown]
    assert any(t.startswith(("The senses separate", "The effect is weak", "No separation")) for t in texts)
    assert any(t.startswith(("A coreference head", "No coreference head")) for t in texts)


def test_toy_model_offers_the_english_decoder():
    at = page_at(PAGE, {"model": "induction-rope"})
    assert_ok(at)
    assert HEADING in [s.value for s in at.subheader]
    assert not senses_specs(at)
    button = next(b for b in at.button if b.key == "attention.senses.open")
    button.click().run()
    assert_ok(at)
    assert len(senses_specs(at)) == 3
