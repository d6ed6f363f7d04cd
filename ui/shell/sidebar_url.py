"""The sidebar's session keys and URL parameters (`model`, `input`, `tgt`, `device`).

Apart from ui.shell.sidebar so that the lesson bar, which the sidebar draws, and the lesson catalogue can name
them without importing the sidebar back.
"""

from __future__ import annotations

from ui.shell.params import Choice, Params, Text

MODEL_KEY = "glassbox.model"
INPUT_KEY = "glassbox.input"
TGT_MODE_KEY = "glassbox.tgt_mode"
TGT_KEY = "glassbox.tgt"
DEVICE_KEY = "glassbox.device"
SEED_KEY = "glassbox.example_seed"
INPUT_MODEL_KEY = "glassbox.input_model"  # the model the input (and decoder input) in the sidebar were made for
MAX_INPUT_TOKENS = 128  # pages draw every attention pattern; longer inputs would flood the browser
GREEDY, TYPED = "The model's own output (greedy)", "Type it"

# The sidebar's URL parameters; the choices (models, devices) and defaults (the task's example) are
# known when it is drawn. `input` and `tgt` are written back as the tokens actually used.
URL = Params(
    "glassbox",
    Choice("model", "", key=MODEL_KEY),
    Choice("device", "cpu", key=DEVICE_KEY, written=False),
    Text("input", "", key=INPUT_KEY, written=False),
    Text("tgt", "", key=TGT_KEY, written=False),
)
