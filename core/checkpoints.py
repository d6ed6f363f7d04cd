"""Save and load models as ONE .safetensors file, config and metadata inside; the bundled manifest.

safetensors holds raw tensors and a JSON header, nothing executable, so a checkpoint a student
uploads can be opened safely. A pickle (`.pt`), a truncated file, wrong shapes, unknown keys or a
config that does not validate are each refused with a ValueError that says what is wrong.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Union

import torch
from safetensors import SafetensorError
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from core.config import TransformerConfig
from core.model import Transformer

MODELS_DIR = Path(__file__).resolve().parent.parent / "assets" / "models"
MANIFEST = MODELS_DIR / "manifest.json"
MAX_UPLOAD_BYTES = 20 * 1024 * 1024  # a teaching model is a few hundred KB; refuse anything huge
META_KEY = "glassbox"  # the safetensors metadata entry that holds our JSON

PathLike = Union[str, Path]


def to_bytes(model: Transformer, meta: dict) -> bytes:
    """The checkpoint as bytes: the model's tensors plus {"config": ..., **meta} as JSON metadata."""
    record = dict(meta)
    record["config"] = model.cfg.to_dict()
    tensors = {name: t.detach().cpu().contiguous() for name, t in model.state_dict().items()}
    return st_save(tensors, metadata={META_KEY: json.dumps(record)})


def save(model: Transformer, path: PathLike, meta: dict) -> None:
    """Write the checkpoint to `path` (one .safetensors file)."""
    Path(path).write_bytes(to_bytes(model, meta))


def from_bytes(data: bytes, device: Union[str, torch.device] = "cpu") -> tuple[Transformer, dict]:
    """Rebuild (model in eval mode, meta) from checkpoint bytes, checking everything on the way."""
    if not isinstance(data, (bytes, bytearray)):
        raise ValueError("a checkpoint must be bytes")
    if len(data) > MAX_UPLOAD_BYTES:
        raise ValueError(f"this file is {len(data) / 1e6:.1f} MB; Glassbox checkpoints are far smaller "
                         f"(limit {MAX_UPLOAD_BYTES // 1_000_000} MB)")
    if not _has_safetensors_header(data) and (data[:1] == b"\x80" or data[:2] == b"PK"):
        raise ValueError("this looks like a PyTorch pickle (.pt/.pth), which can run code when opened. "
                         "Glassbox only opens .safetensors files: save with core.checkpoints.save.")
    try:
        tensors = st_load(bytes(data))
        header_meta = _read_metadata(data)
    except (SafetensorError, ValueError, json.JSONDecodeError, OverflowError) as exc:
        raise ValueError(f"not a readable .safetensors file (truncated or corrupted?): {exc}") from exc
    if META_KEY not in header_meta:
        raise ValueError("this .safetensors file has no Glassbox metadata (config, vocabulary); "
                         "it was not saved by core.checkpoints.save")
    try:
        meta = json.loads(header_meta[META_KEY])
    except json.JSONDecodeError as exc:
        raise ValueError(f"the checkpoint's metadata is not valid JSON: {exc}") from exc
    if not isinstance(meta, dict) or not isinstance(meta.get("config"), dict):
        raise ValueError("the checkpoint's metadata has no 'config' object")
    cfg = TransformerConfig.from_dict(meta["config"])
    # Check shapes on the meta device first: a forged file with a tiny payload and a huge config
    # must not make us allocate the huge model.
    with torch.device("meta"):
        skeleton = Transformer(cfg)
    _check_state(skeleton, tensors)
    model = Transformer(cfg)
    model.load_state_dict(tensors, strict=True)
    return model.to(device).eval(), meta


def load(path: PathLike, device: Union[str, torch.device] = "cpu") -> tuple[Transformer, dict]:
    """Load a checkpoint file written by `save`."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"no checkpoint at {path}")
    if path.stat().st_size > MAX_UPLOAD_BYTES:
        raise ValueError(f"{path.name} is too large to be a Glassbox checkpoint")
    return from_bytes(path.read_bytes(), device)


def _has_safetensors_header(data: bytes) -> bool:
    """True when the 8-byte length prefix points at a JSON header, as safetensors files start.

    The prefix is a little-endian length: a header of 128 + 256k bytes starts with 0x80, the same
    byte a pickle starts with, so the pickle sniff must not look at such a file.
    """
    if len(data) < 9:
        return False
    n = int.from_bytes(data[:8], "little")
    return 0 < n <= len(data) - 8 and data[8:9] == b"{"


def _read_metadata(data: bytes) -> dict:
    """The free-form metadata of a safetensors header (the library's loader drops it)."""
    if len(data) < 8:
        raise ValueError("file too short to be safetensors")
    n = int.from_bytes(data[:8], "little")
    if n <= 0 or 8 + n > len(data):
        raise ValueError("header length does not fit the file")
    header = json.loads(data[8:8 + n].decode("utf-8"))
    meta = header.get("__metadata__", {})
    return meta if isinstance(meta, dict) else {}


def _check_state(model: Transformer, tensors: dict[str, torch.Tensor]) -> None:
    expected = model.state_dict()
    missing = sorted(set(expected) - set(tensors))
    unknown = sorted(set(tensors) - set(expected))
    if missing or unknown:
        parts = []
        if missing:
            parts.append(f"missing {missing[:5]}{' ...' if len(missing) > 5 else ''}")
        if unknown:
            parts.append(f"unknown {unknown[:5]}{' ...' if len(unknown) > 5 else ''}")
        raise ValueError("the checkpoint's tensors do not match its config: " + "; ".join(parts))
    for name, want in expected.items():
        got = tensors[name]
        if tuple(got.shape) != tuple(want.shape):
            raise ValueError(f"tensor {name} has shape {tuple(got.shape)}, but the config needs "
                             f"{tuple(want.shape)}")
        if not got.is_floating_point():
            raise ValueError(f"tensor {name} has dtype {got.dtype}; expected floating point weights")


# -- the bundled models -------------------------------------------------------------------------


def read_manifest() -> list[dict]:
    """The entries of assets/models/manifest.json (id, file, title, description, task, arch, pos, ...)."""
    if not MANIFEST.is_file():
        return []
    entries = json.loads(MANIFEST.read_text())
    return entries if isinstance(entries, list) else []


def write_manifest(entries: list[dict]) -> None:
    MODELS_DIR.mkdir(parents=True, exist_ok=True)
    MANIFEST.write_text(json.dumps(entries, indent=2) + "\n")


def manifest_entry(model_id: str) -> dict:
    for entry in read_manifest():
        if entry.get("id") == model_id:
            return entry
    known = [e.get("id") for e in read_manifest()]
    raise ValueError(f"no bundled model {model_id!r}; bundled models are {known}")


def load_bundled(model_id: str, device: Union[str, torch.device] = "cpu") -> tuple[Transformer, dict]:
    """Load one bundled model by its manifest id."""
    entry = manifest_entry(model_id)
    return load(MODELS_DIR / entry["file"], device)
