"""The Masks page's cached work: hooked runs under a mask, accuracies, influence, timings, and the
numbers its graph section draws. Kept in a module (not the page file) so each cache is made once per
process: a cache defined in a page script is rebuilt, and its function's source re-hashed, on every rerun.

The shared model is only ever called; masks and results are numpy arrays.
"""

from __future__ import annotations

import numpy as np
import streamlit as st
import torch

from core import masks as M
from core.analysis import masks as A
from core.analysis import tensor_from
from core.tasks import get_task
from core.train import evaluate
from ui import models
from ui.memo import freeze, memo

N_SAMPLES = 256  # task examples scored for each accuracy
ACC_SEED = 7
ENC_ID, DEC_ID = "future-legality-encoder", "future-legality-decoder"

def _names(model, prefix: str) -> list[str]:
    """The self-attention scores and pattern of every layer on the masked side."""
    return [f"{prefix}blocks.{i}.attn.{h}" for i in range(model.cfg.n_layers)
            for h in ("hook_attn_scores", "hook_pattern")]


def _tensors(cache_key: tuple, model):
    """The input ids (and decoder input) of a Selection's cache key as tensors on the model's device."""
    _, _, ids, tgt = cache_key
    ids_t = torch.tensor([ids], device=model.device)  # [1 pos]
    tgt_t = torch.tensor([tgt], device=model.device) if tgt is not None else None  # [1 tgt_pos]
    return ids_t, tgt_t


@memo(maxsize=64)
def masked_run(cache_key: tuple, masks: np.ndarray | None) -> dict[str, np.ndarray]:
    """Logits, scores and patterns [layer head q k] for the input, under ``masks`` (None = default)."""
    model, _ = models.get_model(cache_key[0], cache_key[1])
    ids, tgt = _tensors(cache_key, model)
    prefix = "decoder." if model.cfg.arch == "encoder-decoder" else ""
    arg = None if masks is None else A.mask_argument(masks)
    logits, cache = A.run_masked(model, ids, _names(model, prefix), arg, tgt)
    def per_layer(hook: str) -> np.ndarray:
        return np.stack([cache[f"{prefix}blocks.{i}.attn.{hook}"][0].float().cpu().numpy()
                         for i in range(model.cfg.n_layers)])  # [layer head q k]

    return freeze({"logits": logits.float().cpu().numpy(), "scores": per_layer("hook_attn_scores"),
                   "pattern": per_layer("hook_pattern")})


@st.cache_data(max_entries=64, show_spinner=False)
def masked_accuracy(model_id: str, device: str, masks: np.ndarray | None, length: int) -> float:
    """Task accuracy on N_SAMPLES fixed examples of ``length`` under ``masks`` (None = default)."""
    model, meta = models.get_model(model_id, device)
    arg = None if masks is None else A.mask_argument(masks)
    return A.masked_accuracy(model, meta["task"], arg, N_SAMPLES, ACC_SEED, length)


@memo(maxsize=64)
def influence(cache_key: tuple, masks: np.ndarray | None) -> np.ndarray:
    """Measured influence [q k] (gradient size) for the input under ``masks``."""
    model, _ = models.get_model(cache_key[0], cache_key[1])
    ids, tgt = _tensors(cache_key, model)
    return freeze(A.influence(model, ids, None if masks is None else A.mask_argument(masks), tgt))


@memo(maxsize=16)
def width_to_length(task_name: str, arch: str, width: int) -> int | None:
    """The task's content length whose examples are ``width`` positions wide (None if none)."""
    return A.length_for_width(get_task(task_name), arch, width)


@st.cache_data(max_entries=8, show_spinner="Timing dense and block-sparse attention on this machine ...")
def timing(b: int, run: int) -> list[dict]:
    """One timing run (``run`` only distinguishes a fresh measurement from the cached one)."""
    return A.time_attention(ns=(128, 256, 512, 1024, 2048), b=b, repeats=3, seed=run)


@st.cache_data(max_entries=8, show_spinner=False)
def legality_panel_data(device: str, length: int) -> dict:
    """Accuracies of the two future-legality models under both masks, and one worked example."""
    enc, _ = models.get_model(ENC_ID, device)
    dec, _ = models.get_model(DEC_ID, device)
    task = get_task("future-legality")
    width = length + 2
    full, causal = M.full(width), M.causal(width)
    out = {"acc": {}, "evaluate": {}}
    for name, model in (("encoder", enc), ("decoder", dec)):
        for mask_name, mask in (("full", full), ("causal", causal)):
            out["acc"][(name, mask_name)] = A.masked_accuracy(model, task, mask, N_SAMPLES, ACC_SEED, length)
        out["evaluate"][name] = evaluate(model, task, n_samples=512, length=length)
    batch = task.batch(1, "encoder", seed=3, length=length)
    ids = batch.tokens.to(enc.device)  # [1 pos]
    out["tokens"] = task.vocab.decode(batch.tokens[0])
    out["targets"] = batch.targets[0].tolist()
    for name, model in (("encoder", enc), ("decoder", dec)):
        with torch.no_grad():
            logits = model(ids)  # [1 pos vocab]
        out[f"{name}_pred"] = task.vocab.decode(logits[0].argmax(-1))
        out[f"{name}_rule"] = A.influence(model, ids)[:, -1]  # [q]: how much the rule moves each output
    return out




@memo(maxsize=64)
def graph_facts(stack: np.ndarray, layer: int, same_for_every_layer: bool) -> dict:
    """What section 4 draws for the masks ``stack`` [layer q k]: the chosen layer's Laplacian and
    spectrum, and how the share of reached pairs grows with depth (past the model's layers the last
    mask repeats)."""
    per = [tensor_from(m) for m in stack]
    t, n, layers = per[layer], stack.shape[-1], len(per)
    spectrum = M.laplacian_spectrum(t)
    full_at = M.layers_to_reach_all(t) if same_for_every_layer else None
    depth = max(layers, full_at if full_at is not None else min(n - 1, 8))
    stacked = per + [per[-1]] * (depth - layers)  # beyond the model's layers, the last mask repeats
    shares = [1.0 / n] + [float(M.reachability(stacked[:d]).float().mean()) for d in range(1, depth + 1)]
    if not same_for_every_layer:
        full_at = next((d for d, s in enumerate(shares) if s >= 1.0), None)
    return freeze({"laplacian": M.laplacian(t), "spectrum": spectrum, "lambda2": M.algebraic_connectivity(t),
                   "pieces": int((spectrum < 1e-9).sum()), "shares": shares, "full_at": full_at,
                   "reach": M.reachability(per).numpy(),  # [q k] through the model's own layers
                   "stacked": np.stack([m.numpy() for m in stacked])})  # [depth q k]


@memo(maxsize=128)
def receptive_fields(stacked: np.ndarray, token: int, max_rows: int) -> np.ndarray:
    """Keys that can reach ``token`` after 1, 2, ... layers of ``stacked`` [depth q k]: [layer k]."""
    per = [tensor_from(m) for m in stacked[:max_rows]]
    return freeze(torch.stack(M.receptive_field(per, token)).numpy())
