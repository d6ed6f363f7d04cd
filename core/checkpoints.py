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
ENGLISH_DIR = MODELS_DIR / "english"  # the English models: Hugging Face-format folders (python -m core.train --english)
MAX_UPLOAD_BYTES = 20 * 1024 * 1024  # a teaching model is a few hundred KB; refuse anything huge
META_KEY = "glassbox"  # the safetensors metadata entry that holds our JSON
# The largest size a checkpoint may declare, checked on the raw JSON before anything is built: the
# bundled models use a small fraction of each, and a forged header must not make the server build a
# huge skeleton or table (a 40,000-layer or max_len 10^9 config would take minutes and gigabytes).
LIMITS = {"d_model": 1024, "n_heads": 64, "d_head": 1024, "n_layers": 24, "d_mlp": 8192,
          "max_len": 8192, "vocab_size": 65536, "src_vocab_size": 65536}
MAX_PARAMETERS = 20_000_000  # weights a declared config may need (the file limit holds about 5M float32)
META_TEXT_FIELDS = ("task", "title", "description", "id")

PathLike = Union[str, Path]


def to_bytes(model: Transformer, meta: dict) -> bytes:
    """The checkpoint as bytes: the model's tensors plus {"config": ..., **meta} as JSON metadata.

    A tied model's shared weight is stored once (safetensors refuses two names for one tensor):
    `unembed.weight` is left out, and loading re-ties it to W_E."""
    record = dict(meta)
    record["config"] = model.cfg.to_dict()
    shared = model.shared_keys()
    tensors = {name: t.detach().cpu().contiguous() for name, t in model.state_dict().items() if name not in shared}
    return st_save(tensors, metadata={META_KEY: json.dumps(record)})


def save(model: Transformer, path: PathLike, meta: dict) -> None:
    """Write the checkpoint to `path` (one .safetensors file)."""
    Path(path).write_bytes(to_bytes(model, meta))


def describe_limits() -> str:
    """The bounds an uploaded checkpoint must respect, in one sentence for the page."""
    sizes = ", ".join(f"{name} ≤ {value:,}" for name, value in LIMITS.items())
    return (f"Uploads are .safetensors files of at most {MAX_UPLOAD_BYTES // 2 ** 20} MB declaring {sizes} and at "
            f"most {MAX_PARAMETERS:,} parameters, with finite weights.")


def check_declared_sizes(config: dict) -> None:
    """Refuse a stored config whose sizes exceed LIMITS, before any model or table is built.

    Works on the raw JSON: every size must be a whole number within its bound, and the weights the
    config implies (an upper estimate) must fit MAX_PARAMETERS."""
    for name, limit in LIMITS.items():
        value = config.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"config field {name} must be a whole number, got {str(value)[:40]!r}")
        if not 1 <= value <= limit:
            raise ValueError(f"config field {name} = {value:,} is outside what Glassbox opens (1 to {limit:,})")
    d_model, n_heads = config.get("d_model") or 64, config.get("n_heads") or 4
    d_head = config.get("d_head") or max(1, d_model // n_heads)
    d_mlp = config.get("d_mlp") or 4 * d_model
    stacks = 2 if config.get("arch") == "encoder-decoder" else 1
    per_layer = 3 * 4 * d_model * n_heads * d_head + 2 * d_model * d_mlp + 8 * d_model  # self + cross attn, MLP
    rows = (config.get("vocab_size") or 32) + (config.get("src_vocab_size") or 0) + 2 * (config.get("max_len") or 64)
    total = stacks * (config.get("n_layers") or 2) * per_layer + 2 * rows * d_model
    if total > MAX_PARAMETERS:
        raise ValueError(f"this config would need about {total:,} parameters; Glassbox opens at most "
                         f"{MAX_PARAMETERS:,}")


def check_meta(meta: dict) -> None:
    """The metadata's own fields have the types the pages read: text, and a list of token strings."""
    for name in META_TEXT_FIELDS:
        if name in meta and not isinstance(meta[name], str):
            raise ValueError(f"metadata field {name!r} must be text, got {type(meta[name]).__name__}")
    vocab = meta.get("vocab")
    if vocab is not None and not (isinstance(vocab, list) and all(isinstance(t, str) for t in vocab)):
        raise ValueError("metadata field 'vocab' must be a list of token strings")


def check_finite(tensors: dict[str, torch.Tensor]) -> None:
    """Every weight is a finite number (a NaN or infinity would break every page that uses the model)."""
    for name, tensor in tensors.items():
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise ValueError(f"tensor {name} holds NaN or infinite values")


def from_bytes(data: bytes, device: Union[str, torch.device] = "cpu",
               trusted: bool = False) -> tuple[Transformer, dict]:
    """Rebuild (model in eval mode, meta) from checkpoint bytes, checking everything on the way.

    Untrusted files (uploads) keep the accuracy they claim only as `claimed_accuracy`: a page shows
    an accuracy it measured, or none. The bundled models are `trusted` (their accuracy is re-measured
    by tests/core/test_bundled.py)."""
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
    check_meta(meta)
    check_declared_sizes(meta["config"])
    try:
        cfg = TransformerConfig.from_dict(meta["config"])
    except TypeError as exc:  # a field of the wrong type that the dataclass itself trips on
        raise ValueError(f"the checkpoint's config is malformed: {exc}") from exc
    if not trusted and "accuracy" in meta:
        meta["claimed_accuracy"] = meta.pop("accuracy")
    # An upload's shapes are checked on the meta device first: a forged file with a tiny payload and
    # a huge config must not make us allocate the huge model. A bundled (trusted) file is checked on
    # the model itself: building on the meta device imports torch._dynamo (nn.Embedding initialises
    # through torch._refs there), several seconds that the first visitor of a server would wait.
    if not trusted:
        with torch.device("meta"):
            skeleton = Transformer(cfg)
        _check_state(skeleton, tensors)
    check_finite(tensors)
    model = Transformer(cfg)
    if trusted:
        _check_state(model, tensors)
    model.load_state_dict(tensors, strict=True)
    return model.to(device).eval(), meta


def load(path: PathLike, device: Union[str, torch.device] = "cpu", trusted: bool = False) -> tuple[Transformer, dict]:
    """Load a checkpoint file written by `save` (`trusted`: see from_bytes)."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"no checkpoint at {path}")
    if path.stat().st_size > MAX_UPLOAD_BYTES:
        raise ValueError(f"{path.name} is too large to be a Glassbox checkpoint")
    return from_bytes(path.read_bytes(), device, trusted=trusted)


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
    """The file holds exactly the tensors the config needs (a tied weight once), in their shapes."""
    shared = model.shared_keys()
    expected = {name: t for name, t in model.state_dict().items() if name not in shared}
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
    """Load one bundled model by its id: a toy model from the manifest, or one of the English models."""
    if model_id in english_ids():
        return load_english(model_id, device)
    entry = manifest_entry(model_id)
    return load(MODELS_DIR / entry["file"], device, trusted=True)


def english_ids() -> list[str]:
    """The bundled English models' ids: the subfolders of assets/models/english that hold a config.json."""
    if not ENGLISH_DIR.is_dir():
        return []
    return sorted(p.name for p in ENGLISH_DIR.iterdir() if (p / "config.json").is_file())


def load_english(model_id: str, device: Union[str, torch.device] = "cpu") -> tuple[Transformer, dict]:
    """One English model, read from its folder by core.pretrained like any checkpoint: (model, meta), the meta
    naming its folder and family so that its tokenizer can be read back (core.pretrained.load_tokenizer)."""
    from core import pretrained  # Hugging Face-format folders and tokenizers: only these models need it
    from core.text_task import TEXT_TASK

    found = pretrained.describe(ENGLISH_DIR / model_id, root=ENGLISH_DIR)
    if found.problem is not None:
        raise ValueError(f"the English model {model_id!r} cannot be opened: {found.problem}")
    model, _ = pretrained.load_pretrained(found, device=device)
    meta = {"id": model_id, "task": TEXT_TASK, "title": model_id, "family": found.family,
            "architecture": found.architecture, "parameters": found.parameters, "context": found.context,
            "dtype": found.dtype, "folder": str(found.path), "config": model.cfg.to_dict()}
    return model, meta
