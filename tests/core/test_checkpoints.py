"""Checkpoints: one safetensors file round-trips; pickles, truncation and mismatches are refused."""

from __future__ import annotations

import io
import json
import pickle

import pytest
import torch

from core import checkpoints
from core.model import Transformer, TransformerConfig


def small_model(**kw) -> Transformer:
    torch.manual_seed(0)
    return Transformer(TransformerConfig(vocab_size=11, d_model=16, n_heads=2, n_layers=1, max_len=8, **kw)).eval()


def test_round_trip_keeps_weights_config_and_meta(tmp_path):
    model = small_model(pos="learned", norm="post")
    path = tmp_path / "m.safetensors"
    checkpoints.save(model, path, {"task": "copy", "vocab": ["a", "b"], "accuracy": 0.99})
    loaded, meta = checkpoints.load(path)
    assert loaded.cfg == model.cfg
    assert meta["task"] == "copy" and meta["vocab"] == ["a", "b"] and meta["config"]["norm"] == "post"
    x = torch.tensor([[1, 2, 3]])
    assert torch.equal(loaded(x), model(x))
    assert path.read_bytes()[8:9] == b"{"  # a safetensors JSON header, not a pickle


class _Exploit:
    """Unpickling this would create a file: proof that nothing is executed if the file stays absent."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_loader_refuses_a_pickle_and_executes_nothing(tmp_path):
    marker = tmp_path / "pwned.txt"
    for data in (pickle.dumps(_Exploit(str(marker))), _torch_save_bytes(_Exploit(str(marker)))):
        with pytest.raises(ValueError, match="pickle|safetensors"):
            checkpoints.from_bytes(data)
        assert not marker.exists()


def _torch_save_bytes(obj) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def test_loader_refuses_truncated_and_garbage_files():
    data = checkpoints.to_bytes(small_model(), {"task": "copy"})
    for bad in (data[: len(data) // 2], data[:20], b"", b"hello" * 100):
        with pytest.raises(ValueError):
            checkpoints.from_bytes(bad)


def _rewrite_meta(data: bytes, edit) -> bytes:
    """Change the JSON metadata of a safetensors file while keeping its tensors."""
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + n])
    meta = json.loads(header["__metadata__"]["glassbox"])
    edit(meta)
    header["__metadata__"]["glassbox"] = json.dumps(meta)
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    return len(raw).to_bytes(8, "little") + raw + data[8 + n:]


def test_loader_refuses_a_config_that_does_not_match_the_tensors():
    data = checkpoints.to_bytes(small_model(), {"task": "copy"})
    wider = _rewrite_meta(data, lambda m: m["config"].update(d_model=32, d_mlp=None, d_head=None))
    with pytest.raises(ValueError, match="shape"):
        checkpoints.from_bytes(wider)
    deeper = _rewrite_meta(data, lambda m: m["config"].update(n_layers=2))
    with pytest.raises(ValueError, match="missing"):
        checkpoints.from_bytes(deeper)
    invalid = _rewrite_meta(data, lambda m: m["config"].update(arch="gpt"))
    with pytest.raises(ValueError, match="arch"):
        checkpoints.from_bytes(invalid)
    learned = checkpoints.to_bytes(small_model(pos="learned"), {})
    with pytest.raises(ValueError, match="unknown"):
        checkpoints.from_bytes(_rewrite_meta(learned, lambda m: m["config"].update(pos="sinusoidal")))


def test_loader_refuses_safetensors_without_glassbox_metadata():
    from safetensors.torch import save
    with pytest.raises(ValueError, match="Glassbox metadata"):
        checkpoints.from_bytes(save({"w": torch.zeros(2)}))


def test_a_header_length_starting_with_0x80_is_not_mistaken_for_a_pickle():
    """A safetensors file whose header is 128 + 256k bytes long starts with byte 0x80, like a pickle."""
    import json as _json
    import struct

    header = _json.dumps({"__metadata__": {"x": "y" * 200}}).encode()
    header += b" " * ((0x180 - len(header)) % 256)  # pad so the length's low byte is 0x80
    data = struct.pack("<Q", len(header)) + header
    assert data[:1] == b"\x80"
    with pytest.raises(ValueError) as err:
        from core.checkpoints import from_bytes
        from_bytes(data)
    assert "pickle" not in str(err.value)  # refused for what it lacks (metadata), not called a pickle



def test_a_forged_huge_config_is_refused_before_anything_is_allocated(monkeypatch):
    data = checkpoints.to_bytes(small_model(), {"task": "copy"})
    forged = _rewrite_meta(data, lambda m: m["config"].update(d_model=8192, n_heads=8, d_head=None, d_mlp=None,
                                                              vocab_size=200_000, max_len=65536))
    built_on = []
    real = checkpoints.Transformer

    def recording(cfg):
        built_on.append(torch.empty(0).device.type)  # the default device while the model is built
        return real(cfg)

    monkeypatch.setattr(checkpoints, "Transformer", recording)
    with pytest.raises(ValueError, match="outside what Glassbox opens"):
        checkpoints.from_bytes(forged)
    assert built_on == []  # refused on the declared sizes: not even the shape-checking skeleton is built
    # Within every bound, a config whose tensors do not match is still caught on the meta skeleton only.
    wider = _rewrite_meta(data, lambda m: m["config"].update(d_model=512, n_heads=8, d_head=None, d_mlp=None))
    with pytest.raises(ValueError, match="shape|missing|unknown"):
        checkpoints.from_bytes(wider)
    assert built_on == ["meta"]


def test_a_header_length_starting_with_byte_0x80_is_not_mistaken_for_a_pickle():
    data = checkpoints.to_bytes(small_model(), {"task": "copy"})
    n = int.from_bytes(data[:8], "little")
    target = 0x80 + 256 * ((n // 256) + 1)  # next length whose low byte is 0x80
    padded = _rewrite_meta(data, lambda m: m.update(pad="x"))
    while int.from_bytes(padded[:8], "little") != target:
        grow = target - int.from_bytes(padded[:8], "little")
        padded = _rewrite_meta(data, lambda m, g=grow: m.update(pad="x" * (len(m.get("pad", "")) + g)))
        data = padded
    assert padded[:1] == b"\x80"
    model, meta = checkpoints.from_bytes(padded)
    assert meta["task"] == "copy"


@pytest.mark.parametrize("edit, message", [
    ({"max_len": 10 ** 7}, "max_len"), ({"max_len": 10 ** 9}, "max_len"), ({"n_layers": 10 ** 5}, "n_layers"),
    ({"n_layers": 40_000, "d_model": 2, "n_heads": 1, "d_head": None, "d_mlp": None}, "n_layers"),
    ({"d_model": 10 ** 6, "d_head": None, "d_mlp": None}, "d_model"), ({"vocab_size": 10 ** 8}, "vocab_size"),
    ({"d_model": 1024, "n_heads": 64, "d_head": 1024, "n_layers": 24, "d_mlp": None}, "parameters"),
    ({"n_layers": "2"}, "whole number"), ({"d_model": 64.5}, "whole number"),
])
def test_hostile_declared_sizes_are_refused_before_any_model_is_built(monkeypatch, edit, message):
    data = checkpoints.to_bytes(small_model(), {"task": "copy"})
    built = []
    monkeypatch.setattr(checkpoints, "Transformer", lambda cfg: built.append(cfg))
    with pytest.raises(ValueError, match=message):
        checkpoints.from_bytes(_rewrite_meta(data, lambda m: m["config"].update(edit)))
    assert built == []


@pytest.mark.parametrize("edit, message", [
    ({"ln_eps": "x"}, "ln_eps"), ({"ln_eps": -1}, "ln_eps"), ({"ln_eps": float("nan")}, "ln_eps"),
    ({"rope_base": float("inf")}, "rope_base"), ({"rope_base": "abc"}, "rope_base"),
    ({"key_norm_clip": float("inf")}, "key_norm_clip"), ({"cosine_scale": "x"}, "cosine_scale"),
])
def test_malformed_config_values_get_a_message_naming_the_field(edit, message):
    data = checkpoints.to_bytes(small_model(), {"task": "copy"})
    with pytest.raises(ValueError, match=message):
        checkpoints.from_bytes(_rewrite_meta(data, lambda m: m["config"].update(edit)))


@pytest.mark.parametrize("edit, message", [
    ({"task": ["copy"]}, "task"), ({"task": {"a": 1}}, "task"), ({"vocab": 5}, "vocab"),
    ({"vocab": ["a", 3]}, "vocab"), ({"title": 7}, "title"),
])
def test_malformed_metadata_values_get_a_message_naming_the_field(edit, message):
    data = checkpoints.to_bytes(small_model(), {"task": "copy"})
    with pytest.raises(ValueError, match=message):
        checkpoints.from_bytes(_rewrite_meta(data, lambda m: m.update(edit)))


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_weights_are_refused(bad):
    model = small_model()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    name = next(iter(k for k in state if k.endswith("weight")))
    state[name].view(-1)[0] = bad
    from safetensors.torch import save as st_save
    data = st_save(state, metadata={checkpoints.META_KEY: json.dumps({"task": "copy", "config": model.cfg.to_dict()})})
    with pytest.raises(ValueError, match="NaN or infinite"):
        checkpoints.from_bytes(data)


def test_an_upload_keeps_its_claimed_accuracy_apart_and_a_bundled_model_is_trusted():
    data = checkpoints.to_bytes(small_model(), {"task": "copy", "accuracy": 1.0})
    _, meta = checkpoints.from_bytes(data)
    assert "accuracy" not in meta and meta["claimed_accuracy"] == 1.0  # never shown as if measured
    _, trusted = checkpoints.from_bytes(data, trusted=True)
    assert trusted["accuracy"] == 1.0
    assert "max_len" in checkpoints.describe_limits()
