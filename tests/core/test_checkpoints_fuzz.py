"""Uploaded model files, fuzzed: whatever the bytes, the loader answers with a ValueError (a message
the page shows) or a model within the declared bounds; it never raises anything else, never
unpickles, and never builds a model bigger than the bounds allow.
"""

from __future__ import annotations

import json
import pickle
from unittest import mock

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core import checkpoints
from core.model import Transformer, TransformerConfig
from tests.core.test_checkpoints import _rewrite_meta

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _checkpoint() -> bytes:
    """A small valid checkpoint, built with its own generator (no global random state)."""
    cfg = TransformerConfig(vocab_size=11, d_model=16, n_heads=2, n_layers=1, max_len=8)
    model = Transformer(cfg).eval()
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    return checkpoints.to_bytes(model, {"task": "copy", "vocab": [str(i) for i in range(11)]})


VALID = _checkpoint()


class _Built:
    """Counts what the loader asks torch to build, and refuses anything over the bounds."""

    def __init__(self):
        self.configs: list[TransformerConfig] = []

    def __call__(self, cfg: TransformerConfig) -> Transformer:
        self.configs.append(cfg)
        for name, limit in checkpoints.LIMITS.items():
            value = getattr(cfg, name, None)
            assert value is None or value <= limit, f"built a model with {name} = {value}"
        return Transformer(cfg)


def _load(data: bytes) -> None:
    """from_bytes must either succeed or say why in a ValueError."""
    try:
        with mock.patch.object(checkpoints, "Transformer", _Built()):
            model, meta = checkpoints.from_bytes(data, trusted=False)
    except ValueError as exc:
        assert str(exc).strip(), "an empty message"
        return
    assert isinstance(model, Transformer) and "accuracy" not in meta  # an upload's claim is never shown as measured


@FUZZ
@given(st.binary(max_size=4096))
def test_random_bytes_are_refused_with_a_message(data):
    _load(data)


@FUZZ
@given(st.integers(0, len(VALID) - 1))
def test_a_truncated_checkpoint_is_refused(cut):
    try:
        with mock.patch.object(checkpoints, "Transformer", _Built()):
            checkpoints.from_bytes(VALID[:cut], trusted=False)
    except ValueError:
        return
    raise AssertionError(f"a checkpoint cut at byte {cut} of {len(VALID)} was accepted")


HOSTILE = st.one_of(
    st.none(), st.booleans(), st.integers(-(10 ** 12), 10 ** 12), st.sampled_from([10 ** 6, 10 ** 8, 2 ** 31, -1, 0]),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=30),
    st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
)
CONFIG_FIELDS = sorted(TransformerConfig(vocab_size=11, d_model=16, n_heads=2, n_layers=1, max_len=8).to_dict())


@FUZZ
@given(st.dictionaries(st.sampled_from(CONFIG_FIELDS), HOSTILE, min_size=1, max_size=4))
def test_hostile_config_values_are_refused_or_stay_within_the_bounds(edit):
    _load(_rewrite_meta(VALID, lambda m: m["config"].update(edit)))


@FUZZ
@given(st.dictionaries(st.sampled_from(["task", "vocab", "title", "description", "accuracy", "config", "steps"]),
                       HOSTILE, min_size=1, max_size=3))
def test_hostile_metadata_values_are_refused_or_harmless(edit):
    _load(_rewrite_meta(VALID, lambda m: m.update(edit)))


@FUZZ
@given(st.text(max_size=200))
def test_metadata_that_is_not_json_is_refused(text):
    n = int.from_bytes(VALID[:8], "little")
    header = json.loads(VALID[8:8 + n])
    header["__metadata__"][checkpoints.META_KEY] = text
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    _load(len(raw).to_bytes(8, "little") + raw + VALID[8 + n:])


@FUZZ
@given(st.recursive(st.one_of(st.integers(), st.text(max_size=10), st.binary(max_size=10)),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
                    max_leaves=20),
       st.integers(0, pickle.HIGHEST_PROTOCOL))
def test_pickles_of_anything_are_refused_without_being_opened(obj, protocol):
    opened = []
    try:
        with mock.patch.object(pickle, "loads", lambda *a, **k: opened.append(a)), \
                mock.patch.object(torch, "load", lambda *a, **k: opened.append(a)):
            checkpoints.from_bytes(pickle.dumps(obj, protocol=protocol), trusted=False)
    except ValueError:
        pass
    else:
        raise AssertionError("a pickle was accepted as a checkpoint")
    assert opened == []


@FUZZ
@given(st.sampled_from(sorted(checkpoints.LIMITS)), st.data())
def test_any_size_over_its_bound_is_refused_before_anything_is_built(field, data):
    value = data.draw(st.integers(checkpoints.LIMITS[field] + 1, 10 ** 12))
    built = _Built()
    try:
        with mock.patch.object(checkpoints, "Transformer", built):
            checkpoints.from_bytes(_rewrite_meta(VALID, lambda m: m["config"].update({field: value})), trusted=False)
    except ValueError as exc:
        assert field in str(exc) or "parameters" in str(exc), str(exc)
    else:
        raise AssertionError(f"{field} = {value} was accepted")
    assert built.configs == []
