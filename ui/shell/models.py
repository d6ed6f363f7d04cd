"""Model loading for the pages: bundled models once per process, session models per session.

The shared model object is never mutated: every per-session choice (mask, positions,
temperature, ablations) is an argument of a call on it.
"""

from __future__ import annotations

import time
import uuid

import streamlit as st
import torch
from streamlit.runtime.scriptrunner import get_script_run_ctx

from core import checkpoints
from core.device import available_devices
from core.families import FAMILIES, family_label
from core.model import Transformer
from ui.shell.memo import memo

MANIFEST_TTL_S = 10  # a model added to assets/models shows up within this many seconds

USER_MODELS_KEY = "glassbox.user_models"  # {id: (model, meta)} trained or uploaded in this session
USER_PREFIX = "session:"


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
    """id -> label for the picker: bundled models first, then this session's."""
    choices = {e["id"]: e.get("title", e["id"]) for e in manifest()}
    for model_id, (_, meta) in user_models().items():
        choices[model_id] = f"{meta.get('title', 'Your model')} (this session)"
    return choices


def describe(model_id: str) -> str:
    """The model's one-line description, led by its family (e.g. 'Decoder-only, GPT-like.')."""
    arch, text = "", ""
    for e in manifest():
        if e["id"] == model_id:
            arch, text = e.get("arch", ""), e.get("description", "")
    if model_id in user_models():
        meta = user_models()[model_id][1]
        arch, text = meta.get("config", {}).get("arch", ""), meta.get("description", "")
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
    return _bundled(model_id, device)


@memo(maxsize=1)
def _devices() -> tuple[str, ...]:
    return tuple(available_devices())


def devices() -> list[str]:
    """The devices this machine offers, best first (asked once per process: hardware does not change)."""
    return list(_devices())


def torch_device(name: str) -> torch.device:
    return torch.device(name if name in _devices() else "cpu")
