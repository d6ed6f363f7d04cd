"""AppTest: the Masks page's section 7 (local peaks). The twins' accuracies side by side with the causal ceiling,
the figure of attention on later readings (the decoder's bars exactly 0), and the worked example."""

from __future__ import annotations

import numpy as np

from tests.app.conftest import assert_ok, decode_array, page_at, plotly_specs


def test_peaks_section():
    at = page_at("pages/masks.py", {"model": "peaks-encoder"})
    assert_ok(at)
    assert "7. A state that attends to its future: local peaks in a series" in [h.value for h in at.header]
    assert not any(m.label.startswith("best any causal") for m in at.metric)  # scored only when asked
    at.toggle(key="masks.future.show").set_value(True).run()
    assert_ok(at)
    metrics = {m.label: float(m.value.rstrip("%")) for m in at.metric
               if m.label.startswith(("peaks-", "best any causal"))}
    enc, dec = metrics["peaks-encoder (full mask)"], metrics["peaks-decoder (causal mask)"]
    ceiling = metrics["best any causal model can do"]
    assert ceiling == 87.5 and enc > ceiling >= dec - 1.0
    spec = next(s for s in plotly_specs(at)
                if ((s["layout"].get("title") or {}).get("text") or "").startswith("Where a reading looks"))
    bars = {t["name"]: np.asarray(decode_array(t["y"]), dtype=float) for t in spec["data"]}
    assert np.all(bars["decoder: all later readings"] == 0) and np.all(bars["decoder: the next reading"] == 0)
    assert np.all(bars["encoder: all later readings"] > 0)
    assert any(m.value.startswith("The decoder's weight on later readings is exactly 0") for m in at.markdown)
