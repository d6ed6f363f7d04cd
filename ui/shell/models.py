"""Model loading for the pages: bundled models once per process, session models per session.

The shared model object is never mutated: every per-session choice (mask, positions,
temperature, ablations) is an argument of a call on it.
"""

from __future__ import annotations

import os
import time
import uuid

import streamlit as st
import torch
from streamlit.runtime.scriptrunner import get_script_run_ctx

from core import checkpoints, pretrained
from core.device import available_devices
from core.families import FAMILIES, family_label
from core.model import Transformer
from core.text_task import TEXT_TASK, TextTask
from ui.shell.memo import memo

MANIFEST_TTL_S = 10  # a model added to assets/models shows up within this many seconds

USER_MODELS_KEY = "glassbox.user_models"  # {id: (model, meta)} trained or uploaded in this session
USER_PREFIX = "session:"
FOLDER_PREFIX = "folder:"  # checkpoints found in GLASSBOX_MODELS_DIR or the Hugging Face cache (core.pretrained)
MAX_LOADED_FOLDERS = 2  # real checkpoints kept in memory per process: a GPT-2 small is 0.5 GB in float32
ENGLISH_DIR = checkpoints.ENGLISH_DIR  # the English models this project trains (python -m core.train --english)
MAX_LOADED_ENGLISH = 4  # they are small (a few MB each): kept like the bundled toy models


MAX_LOADED_MODELS = 24  # bundled models kept in memory per process (11 ship; a GPU doubles the keys)


@memo(maxsize=MAX_LOADED_MODELS, keep_when_idle=True)  # loading all 11 again would only cost time
def _load_bundled(model_id: str, device: str) -> tuple[Transformer, dict]:
    """Load a bundled model once per process (every session shares it; it is never mutated)."""
    model, meta = checkpoints.load_bundled(model_id, device=device)
    for p in model.parameters():
        p.requires_grad_(True)  # gradients are taken with autograd.grad, never written to .grad
    return model, meta


def _bundled(model_id: str, device: str) -> tuple[Transformer, dict]:
    """The shared bundled model, from the same process-wide memo style as every cached result; the first
    load of a model shows a spinner (later lookups are a dictionary lookup)."""
    if _load_bundled.has(model_id, device):
        return _load_bundled(model_id, device)
    with st.spinner("Loading model ..."):
        return _load_bundled(model_id, device)


@memo(maxsize=1)
def _manifest(period: int) -> tuple[dict, ...]:
    return tuple(checkpoints.read_manifest())


def manifest() -> list[dict]:
    """The bundled models' manifest (re-read at most every 10 s, not on every rerun of every page)."""
    return list(_manifest(int(time.monotonic() // MANIFEST_TTL_S)))


def user_models() -> dict:
    """This session's trained and uploaded models; none outside a session (the warm-up thread)."""
    if get_script_run_ctx(suppress_warning=True) is None:
        return {}
    return st.session_state.setdefault(USER_MODELS_KEY, {})


def add_user_model(model: Transformer, meta: dict) -> str:
    """Make a model trained or uploaded in this session available on every page; returns its id."""
    model_id = USER_PREFIX + uuid.uuid4().hex[:10]
    meta = dict(meta, id=model_id)
    user_models()[model_id] = (model.eval(), meta)
    return model_id


def model_choices() -> dict[str, str]:
    """id -> label for the picker: bundled models first (the toy tasks', then the English ones), then the
    checkpoints found in folders, then this session's."""
    choices = {e["id"]: e.get("title", e["id"]) for e in manifest()}
    for model_id, found in english_models().items():
        choices[model_id] = f"{found.name} (English, {FAMILY_NAMES.get(found.family, found.family)} layout, {parameter_count(found.parameters)})"
    for model_id, found in folder_models().items():
        if model_id not in choices:
            choices[model_id] = f"{found.name} ({FAMILY_NAMES.get(found.family, found.family)}, {parameter_count(found.parameters)})"
    for model_id, (_, meta) in user_models().items():
        choices[model_id] = f"{meta.get('title', 'Your model')} (this session)"
    return choices


# ---------------------------------------------------------------------------------------------
# Checkpoints from folders (never a path typed in the browser: only what the server's folders hold)

FAMILY_NAMES = {"gpt2": "GPT-2", "bert": "BERT", "roformer": "RoFormer", "llama": "Llama family"}


FOLDER_SETTINGS = ("GLASSBOX_MODELS_DIR", "HF_HUB_CACHE", "HF_HOME")  # where core.pretrained looks


@memo(maxsize=1)
def _folders(period: int, settings: tuple) -> tuple[pretrained.ModelFolder, ...]:
    return tuple(pretrained.find_models())


def found_folders() -> list[pretrained.ModelFolder]:
    """Every model folder in GLASSBOX_MODELS_DIR and the Hugging Face cache, broken ones included (looked at
    again at most every 10 s, or at once when those settings change: reading them means only config.json
    and the weights' headers)."""
    settings = tuple(os.environ.get(name, "") for name in FOLDER_SETTINGS)
    return list(_folders(int(time.monotonic() // MANIFEST_TTL_S), settings))


@memo(maxsize=1)
def _english(period: int) -> tuple[pretrained.ModelFolder, ...]:
    return tuple(pretrained.find_models([ENGLISH_DIR]))


def english_models() -> dict[str, pretrained.ModelFolder]:
    """id -> folder of the bundled English models (assets/models/english/<id>/, Hugging Face layout, read by
    core.pretrained like any checkpoint): their ids carry no prefix, as the toy models' do."""
    return {found.name: found for found in _english(int(time.monotonic() // MANIFEST_TTL_S)) if found.problem is None}


def folder_models() -> dict[str, pretrained.ModelFolder]:
    """id -> folder, for the folders that can be opened: the bundled English models, then those found in
    GLASSBOX_MODELS_DIR and the Hugging Face cache."""
    found_here = {FOLDER_PREFIX + found.name: found for found in found_folders() if found.problem is None}
    return {**english_models(), **found_here}


def is_folder_model(model_id: str) -> bool:
    """Whether a model is read from a Hugging Face-format folder (a checkpoint, or a bundled English model)."""
    return str(model_id).startswith(FOLDER_PREFIX) or str(model_id) in english_models()


def is_text_model(meta: dict) -> bool:
    """Whether a model reads free text (a checkpoint from a folder) rather than a toy task's tokens."""
    return meta.get("task") == TEXT_TASK


@memo(maxsize=MAX_LOADED_FOLDERS, max_bytes=1 << 62)
def _load_folder(model_id: str, device: str) -> tuple[Transformer, dict, TextTask]:
    """A checkpoint from its folder, once per process (shared, never mutated), with its text task."""
    return _read_folder(model_id, device)


@memo(maxsize=MAX_LOADED_ENGLISH, keep_when_idle=True)
def _load_english(model_id: str, device: str) -> tuple[Transformer, dict, TextTask]:
    """A bundled English model, once per process; kept like the toy models (it is small)."""
    return _read_folder(model_id, device)


def _read_folder(model_id: str, device: str) -> tuple[Transformer, dict, TextTask]:
    found = folder_models().get(model_id)
    if found is None:
        raise ValueError(f"there is no model folder called {model_id.removeprefix(FOLDER_PREFIX)!r} (any more)")
    model, tokenizer = pretrained.load_pretrained(found, device=torch_device(device))
    for p in model.parameters():
        p.requires_grad_(True)  # gradients are taken with autograd.grad, never written to .grad
    meta = {"id": model_id, "task": TEXT_TASK, "title": found.name, "family": found.family,
            "architecture": found.architecture, "parameters": found.parameters, "context": found.context,
            "dtype": found.dtype, "folder": str(found.path), "config": model.cfg.to_dict(), "notes": list(found.notes),
            "description": folder_description(found)}
    return model, meta, TextTask(tokenizer, model.cfg.vocab_size, model.cfg.arch, model.cfg.max_len)


def folder_description(found: pretrained.ModelFolder) -> str:
    """One line for the sidebar: family, size, context and how the weights are stored."""
    if found.path.parent == ENGLISH_DIR:
        kind = "a masked-word encoder" if pretrained.is_encoder_family(found.family) else "a next-word decoder"
        return (f"English, {kind} trained by this project on the prose of the Python documentation "
                f"({FAMILY_NAMES.get(found.family, found.family)} layout): {parameter_count(found.parameters)} parameters, "
                f"context {found.context:,} tokens, stored as {found.dtype}, computed in float32. Any text is "
                f"accepted: its tokenizer splits words it has not seen into pieces.")
    return (f"{FAMILY_NAMES.get(found.family, found.family)} checkpoint ({found.architecture}) from a folder on "
            f"this server: {parameter_count(found.parameters)} parameters, context {found.context:,} tokens, stored as "
            f"{found.dtype}, computed in float32.")


def text_task(model_id: str, device: str = "cpu") -> TextTask:
    """The text task (tokenizer as a vocabulary) of a checkpoint from a folder."""
    return _folder(model_id, device)[2]


def task_of(model_id: str, device: str = "cpu"):
    """The task a model reads: its toy task (core.tasks), or a checkpoint's text (core.text_task.TextTask)."""
    _, meta = get_model(model_id, device)
    if is_text_model(meta):
        return text_task(model_id, device)
    from core.tasks import get_task

    return get_task(meta["task"])


def _folder(model_id: str, device: str) -> tuple[Transformer, dict, TextTask]:
    load = _load_english if model_id in english_models() else _load_folder
    if load.has(model_id, device):
        return load(model_id, device)
    with st.spinner(f"Loading {model_id.removeprefix(FOLDER_PREFIX)} from its folder ..."):
        return load(model_id, device)


def parameter_count(n: int) -> str:
    """A parameter count as people say it: 124M, 1.1B, 1.3M (one decimal below ten million), 230K."""
    if n >= 1e9:
        return f"{n / 1e9:.1f}B"
    if n >= 1e6:
        return f"{n / 1e6:.1f}M" if round(n / 1e6, 1) < 10 else f"{n / 1e6:.0f}M"
    return f"{n / 1e3:.0f}K"



def describe(model_id: str) -> str:
    """The model's one-line description, led by its family (e.g. 'Decoder-only, GPT-like.')."""
    arch, text = "", ""
    for e in manifest():
        if e["id"] == model_id:
            arch, text = e.get("arch", ""), e.get("description", "")
    if model_id in user_models():
        meta = user_models()[model_id][1]
        arch, text = meta.get("config", {}).get("arch", ""), meta.get("description", "")
    found = folder_models().get(model_id)
    if found is not None:
        arch = "encoder" if pretrained.is_encoder_family(found.family) else "decoder"
        text = folder_description(found)
    if arch in FAMILIES:
        label = family_label(arch)
        text = f"**{label[0].upper()}{label[1:]}.** {text}"
    return text


def get_model(model_id: str, device: str = "cpu") -> tuple[Transformer, dict]:
    """The model and its metadata: bundled (cached for everyone) or from this session."""
    if model_id in user_models():
        model, meta = user_models()[model_id]
        if model.device != torch_device(device):
            model = model.to(device)
        return model, meta
    if is_folder_model(model_id):
        return _folder(model_id, device)[:2]
    return _bundled(model_id, device)


@memo(maxsize=1)
def _devices() -> tuple[str, ...]:
    return tuple(available_devices())


def devices() -> list[str]:
    """The devices this machine offers, best first (asked once per process: hardware does not change)."""
    return list(_devices())


def torch_device(name: str) -> torch.device:
    return torch.device(name if name in _devices() else "cpu")
