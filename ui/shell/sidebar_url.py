"""The sidebar's session keys and URL parameters (`model`, `input`, `tgt`, `device`).

Apart from ui.shell.sidebar so that the lesson bar, which the sidebar draws, and the lesson catalogue can name
them without importing the sidebar back.
"""

from __future__ import annotations

from ui.shell.params import Choice, Params, Text
from ui.shell.query import MAX_TEXT_PARAM_CHARS

MODEL_KEY = "glassbox.model"
INPUT_KEY = "glassbox.input"
TGT_MODE_KEY = "glassbox.tgt_mode"
TGT_KEY = "glassbox.tgt"
DEVICE_KEY = "glassbox.device"
SEED_KEY = "glassbox.example_seed"
INPUT_MODEL_KEY = "glassbox.input_model"  # the model the input (and decoder input) in the sidebar were made for
# How many tokens an input may have: the model's own context (a checkpoint's `max_len`; ui.shell.sidebar._max_tokens).
# Positions that extend to any length (sinusoidal, RoPE, none) have no context of their own: such a model (the toy
# models declare the 8-21 tokens they were trained on) reads up to FREE_POSITION_TOKENS, the length every page is
# built to stay readable and light at. MAX_INPUT_TOKENS bounds every model, whatever its config declares (a Llama
# folder says 131,072).
FREE_POSITION_TOKENS = 1024
MAX_INPUT_TOKENS = 4096
GREEDY, TYPED = "The model's own output (greedy)", "Type it"

# The sidebar's URL parameters; the choices (models, devices) and defaults (the task's example) are
# known when it is drawn. `input` and `tgt` are written back as the tokens actually used.
URL = Params(
    "glassbox",
    Choice("model", "", key=MODEL_KEY),
    Choice("device", "cpu", key=DEVICE_KEY, written=False),
    Text("input", "", key=INPUT_KEY, written=False, max_chars=MAX_TEXT_PARAM_CHARS),
    Text("tgt", "", key=TGT_KEY, written=False, max_chars=MAX_TEXT_PARAM_CHARS),
)
