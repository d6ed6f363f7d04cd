"""The Generation page's cached work: the anatomy run, the decoding traces and timings, the leakage
gradients and accuracies, and the tiny decoders trained on the page. Every cache is a process-wide
ui.shell.memo memo keyed by plain values, so a second student with the same view gets it at once; the
computing is core.analysis.generation's and core.analysis.leakage's.
"""

from __future__ import annotations

import numpy as np
import streamlit as st
import torch

from core.analysis import generation as G
from core.analysis import leakage as L
from core.device import one_thread
from core.figures import generation as F
from core.tasks import get_task
from ui.server import measure_process
from ui.shell import models, sidebar
from ui.shell.figures import cached
from ui.shell.memo import freeze, memo
from ui.shell.runs import model_inputs

ENCDEC_ID = "reverse-encdec"  # the encoder-decoder the page offers when the current model has no encoder
LEAKY_ID, PROPER_ID = "sort-peek-encdec", "sort-encdec"
ACC_SAMPLES, ACC_SEED = 256, 11


def switch_model(model_id: str) -> None:
    """Select a bundled model in the shared sidebar (a button callback, so it runs before the sidebar)."""
    st.session_state[sidebar.MODEL_KEY] = model_id
    st.session_state.pop(sidebar.INPUT_KEY, None)  # the new model may not read the old input
    st.session_state.pop(sidebar.TGT_KEY, None)
    st.session_state[sidebar.SEED_KEY] = 0


# ---------------------------------------------------------------------------------------------
# 1-2. Anatomy and shapes


@memo(maxsize=64)
def anatomy(cache_key: tuple) -> tuple:
    """Every hook point of the sidebar's model with its real shape for the sidebar's input."""
    model, ids, kwargs = model_inputs(cache_key)
    with one_thread():
        return tuple(G.anatomy(model, ids, kwargs.get("tgt")))


@memo(maxsize=64)
def family_hooks(model_id: str, device: str, arch: str) -> tuple:
    """The hook points a model of family `arch` with the current model's sizes would have."""
    model, _ = models.get_model(model_id, device)
    return tuple(G.family_hooks(model.cfg, arch))


@memo(maxsize=64)
def hook_tensor(cache_key: tuple, name: str) -> np.ndarray:
    """The tensor at one hook for the sidebar's input, as float numpy (batch axis kept)."""
    model, ids, kwargs = model_inputs(cache_key)
    with one_thread():
        _, cache = model.run_with_cache(ids, [name], **kwargs)
    return freeze(cache[name].float().cpu().numpy())


@memo(maxsize=64)
def hook_columns(cache_key: tuple, name: str, columns: tuple[int, ...]) -> np.ndarray:
    """Some columns of the last axis of one hook's tensor `[batch .. len(columns)]`: the logits of a few tokens,
    where drawing (and keeping) a real vocabulary's 50,257 columns would be of no use."""
    model, ids, kwargs = model_inputs(cache_key)
    with one_thread():
        _, cache = model.run_with_cache(ids, [name], **kwargs)
    return freeze(cache[name][..., list(columns)].float().cpu().numpy())


@memo(maxsize=64)
def fill_mask(cache_key: tuple, positions: tuple[int, ...], mask_id: int, k: int) -> dict:
    """An encoder's guesses for the tokens at `positions` hidden behind [MASK]: the `k` likeliest ids at each
    and their probabilities `[position k]`, and the probability of the token that was there."""
    model, ids, kwargs = model_inputs(cache_key)
    masked = ids.clone()
    masked[0, list(positions)] = mask_id  # [1 pos]
    with one_thread(), torch.no_grad():
        logits = model(masked, **kwargs)[0, list(positions)]  # [position vocab]
    probs = torch.softmax(logits.float(), dim=-1)  # [position vocab]
    top = probs.topk(min(k, probs.shape[-1]), dim=-1)
    hidden = ids[0, list(positions)]  # [position]
    return freeze({"ids": top.indices.cpu().numpy(), "probs": top.values.cpu().numpy(),
                   "hidden": hidden.cpu().numpy(), "p_hidden": probs.gather(1, hidden[:, None])[:, 0].cpu().numpy(),
                   "rank_hidden": (probs > probs.gather(1, hidden[:, None])).sum(-1).cpu().numpy() + 1})


@memo(maxsize=64)
def identities(cache_key: tuple, prefix: str, layer: int, which: str, perm_seed: int) -> dict:
    """The concat-vs-sum identity for one attention and the MLP permutation check of one block."""
    model, ids, kwargs = model_inputs(cache_key)
    block = f"{prefix}blocks.{layer}."
    z_name, x_name = f"{block}{which}.hook_z", f"{block}ln2.hook_normalized"
    with one_thread(), torch.no_grad():
        _, cache = model.run_with_cache(ids, [z_name, x_name], **kwargs)
        heads = G.heads_concat_vs_sum(model, cache[z_name], prefix, layer, which)
        perm = G.seeded_permutation(cache[x_name].shape[1], perm_seed)
        mlp = G.mlp_permutation_check(model, cache[x_name], prefix, layer, perm)
    norms = heads["per_head"][:, 0].norm(dim=-1).cpu().numpy()  # [head pos]
    return freeze({"heads_diff": heads["max_diff"], "norms": norms, "mlp_diff": mlp["max_diff"],
                   "perm": perm.numpy()})


@memo(maxsize=64)
def shape_rows(model_id: str, device: str, src_len: int, tgt_len: int) -> tuple:
    """The three attention types' tensors, as (kind, ((label, axes, sizes), ...)), for a run of
    `src_len` source and `tgt_len` decoder tokens (tests/core/test_generation.py checks them against
    the hooks of a real run)."""
    cfg = models.get_model(model_id, device)[0].cfg
    return tuple((kind, tuple((b.label, b.axes, b.sizes) for b in G.attention_shapes(cfg, kind, 1, tgt_len, src_len)))
                 for kind in G.ATTENTION_KINDS)


# ---------------------------------------------------------------------------------------------
# 3. The stepper


def stepper_inputs(cache_key: tuple, prompt_len: int, bos_id: int):
    """(model, tokens, tgt_prefix) for `generate`: a decoder's prompt is the first `prompt_len`
    input tokens; an encoder-decoder reads the whole source and starts from <bos>."""
    model, ids, kwargs = model_inputs(cache_key)
    if model.is_encoder_decoder:
        return model, ids, torch.tensor([[bos_id]], device=model.device)  # [1 1]
    return model, ids[:, :prompt_len], None


@memo(maxsize=32)
def traces(cache_key: tuple, prompt_len: int, steps: int, bos_id: int) -> tuple:
    """The decoding run observed with and without the cache, and the largest logit difference per step."""
    model, tokens, tgt_prefix = stepper_inputs(cache_key, prompt_len, bos_id)
    with one_thread():
        with_cache = G.decode_trace(model, tokens, steps, True, tgt_prefix)
        without = G.decode_trace(model, tokens, steps, False, tgt_prefix, keep_keys=False)  # its keys are not drawn
    return freeze((with_cache, without, G.max_logit_difference(with_cache, without)))


@memo(maxsize=16)
def timings(model_id: str, device: str, source_len: int, prompt_len: int, steps: int, bos_id: int, run: int) -> dict:
    """Milliseconds per token with and without the cache (fastest of `timing_repeats` runs; `run` asks for a fresh
    measurement).

    Timed on a stand-in input of the student's lengths: the work does not depend on which tokens are read,
    so every student with this model and these lengths shares one measurement (and the app ships the
    default one, ui.shell.precomputed). A decoder's source is its prompt (`source_len` == `prompt_len`). A
    bundled model is timed in the worker process (ui.server.measure_process: each decoding step is many tiny
    torch calls, which in the server would wait for other students' page runs); an uploaded one, which
    only this server holds, here."""
    args = (model_id, device, source_len, prompt_len, steps, bos_id)
    if model_id in {row["id"] for row in models.manifest()}:
        return freeze(measure_process.measure(measure_timings, *args))
    return freeze(measure_timings(*args))


def measure_timings(model_id: str, device: str, source_len: int, prompt_len: int, steps: int, bos_id: int) -> dict:
    """The body of `timings`, importable by the worker process."""
    model = models.get_model(model_id, device)[0]
    repeats = timing_repeats(model_id)
    ids = (torch.arange(source_len, device=model.device) % model.cfg.vocab_size).unsqueeze(0)  # [1 pos]
    if model.is_encoder_decoder:
        tokens, tgt_prefix = ids, torch.tensor([[bos_id]], device=model.device)  # [1 1]
    else:
        tokens, tgt_prefix = ids[:, :prompt_len], None
    with one_thread():
        G.time_per_token(model, tokens, 2, True, tgt_prefix, repeats=1)  # warm up
        cached_ms = 1e3 * G.time_per_token(model, tokens, steps, True, tgt_prefix, repeats=repeats)
        full_ms = 1e3 * G.time_per_token(model, tokens, steps, False, tgt_prefix, repeats=repeats)
    return {"with cache": cached_ms, "without cache": full_ms}


def timing_repeats(model_id: str) -> int:
    """Runs timed each way, the fastest kept: 5 for the bundled models; 2 for a checkpoint from a folder, whose
    every step without the cache is a forward pass of a real model, timed in the server process itself."""
    return 2 if models.is_folder_model(model_id) else 5


# ---------------------------------------------------------------------------------------------
# 4-5. Leakage


def leakage_models(device: str):
    """The leaky and the proper bundled encoder-decoders (shared; never changed)."""
    return models.get_model(LEAKY_ID, device)[0], models.get_model(PROPER_ID, device)[0]


@memo(maxsize=32)
def leakage_example(device: str, seed: int) -> dict:
    """One example's gradient maps `[t k]` for both models, and its tokens."""
    leaky, proper = leakage_models(device)
    peek, plain = get_task(L.LEAKY_TASK), get_task(L.PROPER_TASK)
    seen = peek.batch(1, "encoder-decoder", seed=seed)
    fair = plain.batch(1, "encoder-decoder", seed=seed)
    with one_thread():
        g_leaky = L.future_token_gradients(leaky, seen.tokens, seen.tgt, peek.vocab.sep_id)
        g_proper = L.future_token_gradients(proper, fair.tokens, fair.tgt, peek.vocab.sep_id)
    return freeze({"leaky": g_leaky, "proper": g_proper,
                   "leaky source": peek.vocab.decode(seen.tokens[0]), "proper source": plain.vocab.decode(fair.tokens[0]),
                   "tgt": plain.vocab.decode(fair.tgt[0]), "answer": seen.meta[0]["answer"]})


@memo(maxsize=4)
def leakage_accuracy(device: str) -> tuple:
    """Accuracy of both models with the answer shown to and hidden from the leaky encoder."""
    leaky, proper = leakage_models(device)
    with one_thread():
        return tuple(L.hidden_answer_accuracy(leaky, proper, ACC_SAMPLES, ACC_SEED))


@memo(maxsize=16)
def tiny_decoders(seed: int, steps: int) -> dict:
    """The causal and the full-mask tiny decoders trained with `seed` (a few seconds; kept for everyone),
    trained in the worker process (ui.server.measure_process): thousands of small torch calls that would
    otherwise wait for, and hold up, the other students' page runs."""
    return freeze(measure_process.measure(train_tiny_decoders, seed, steps))


def train_tiny_decoders(seed: int, steps: int) -> dict:
    """The body of `tiny_decoders`, importable by the worker process."""
    out = {}
    with one_thread():
        for kind in L.MASKS:
            model, losses = L.train_tiny_decoder(kind, seed, steps)
            out[kind] = {"losses": losses, **L.tiny_report(model, kind)}
    return out


def tiny_decoders_ready(seed: int, steps: int) -> bool:
    """Whether the pair for this seed was trained already (by anyone)."""
    return tiny_decoders.has(seed, steps)


# Figures, built once per distinct input for every session (see ui.shell.figures.cached).
diagram_figure = cached(F.family_diagram)
tensor_figure = cached(F.tensor_heatmap)
heads_figure = cached(F.head_contributions)
shapes_figure = cached(F.shape_blocks)
rows_figure = cached(F.step_rows)
cache_figure = cached(F.kv_cache)
counters_figure = cached(F.counters_chart)
time_figure = cached(F.time_chart)
gradients_figure = cached(F.gradient_maps)
loss_figure = cached(F.loss_curves)
