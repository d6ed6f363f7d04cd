"""The one shared sidebar: which model, which input, which device. Every page calls `shared_sidebar()`.

The choices survive page switches (their own session_state keys) and live in the URL
(`model`, `input`, `tgt`), so a pasted link reopens the same view.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import streamlit as st
import torch

from core.model import Transformer
from core.tasks import IGNORE, Task, get_task
from core.text_task import TextTask
from ui.shell import lessons_bar, models, query
from ui.shell.nav import ensure_app_navigation
from ui.shell.memo import memo
from ui.shell.sidebar_url import (DEVICE_KEY, FREE_POSITION_TOKENS, GREEDY, INPUT_KEY, INPUT_MODEL_KEY,  # noqa: F401
                                  MAX_INPUT_TOKENS, MODEL_KEY, SEED_KEY, TGT_KEY, TGT_MODE_KEY, TYPED,
                                  URL)  # (re-exported: the pages name them from here)

@dataclass
class Selection:
    """What the sidebar chose for this run: the model, its task and the tokenised input."""

    model_id: str
    model: Transformer
    meta: dict
    task: Task | TextTask  # a toy task, or a checkpoint's text (its tokenizer as a vocabulary)
    device: str
    tokens: list[str]  # the input (encoder-decoder: the source)
    ids: torch.Tensor  # [1, pos]
    tgt_tokens: Optional[list[str]] = None  # encoder-decoder: the decoder's input
    tgt_ids: Optional[torch.Tensor] = None  # [1, tgt_pos]
    targets: Optional[list[int]] = None  # right answer per output position (IGNORE where unscored)
    notes: list[str] = field(default_factory=list)

    @property
    def arch(self) -> str:
        return self.model.cfg.arch

    @property
    def query_tokens(self) -> list[str]:
        """Labels of the output positions (the decoder side for encoder-decoder)."""
        return self.tgt_tokens if self.tgt_tokens is not None else self.tokens

    @functools.cached_property
    def cache_key(self) -> tuple:
        """A hashable identity of (model, device, input) for the ui.shell.memo caches (computed once per Selection);
        ui.shell.runs.model_inputs turns it back into tensors."""
        tgt = tuple(self.tgt_ids[0].tolist()) if self.tgt_ids is not None else None
        return (self.model_id, self.device, tuple(self.ids[0].tolist()), tgt)

    def kwargs(self) -> dict:
        """Keyword arguments that complete a model call for this input (tgt= for encoder-decoder)."""
        return {"tgt": self.tgt_ids} if self.tgt_ids is not None else {}


def max_tokens(model: Transformer) -> int:
    """The most tokens an input of this model may have: its context (a learned position table's length, a
    checkpoint's `max_len`), at least FREE_POSITION_TOKENS where positions extend to any length (the toy models),
    never more than MAX_INPUT_TOKENS (a config may declare anything)."""
    context = model.cfg.max_len
    if model.cfg.pos != "learned":
        context = max(context, FREE_POSITION_TOKENS)
    return min(context, MAX_INPUT_TOKENS)


_max_tokens = max_tokens  # the name tests and pages used before it was public


def _example(task: Task, arch: str, seed: int) -> str:
    return _example_text(task.name, arch, seed)


def example_text(task: Task | TextTask, arch: str, seed: int) -> str:
    """The task's example number `seed` for this architecture, as space-separated tokens (cached); a
    checkpoint's example sentence."""
    if isinstance(task, TextTask):
        return task.example_text(seed)
    return _example_text(task.name, arch, seed)


@memo(maxsize=1024)
def _example_text(task_name: str, arch: str, seed: int) -> str:
    """The task's example for a seed as text (deterministic, so kept: the sidebar asks on every rerun)."""
    return " ".join(t for t in get_task(task_name).example(arch, seed=seed) if t != "<pad>")


def _pick_model(default_model: Optional[str] = None) -> str:
    choices = models.model_choices()
    if choices:
        default = default_model if default_model in choices else None  # None: the first choice
        picked = URL.model.widget(st.selectbox, "Model", default=default, choices=tuple(choices), format_func=choices.get,
                                  help="Models this project trained on toy tasks, checkpoints found in this server's "
                                       "model folders (GPT-2, BERT, RoFormer, Llama family: see the README), and any you train "
                                       "or upload.")
    else:
        st.error("No models found in assets/models. Run `python -m core.train --all` to build them.")
    # Folders in GLASSBOX_MODELS_DIR or the Hugging Face cache that cannot be opened, each with its problem as
    # core.pretrained words it, under the picker where a teacher looks for a missing model (names and problems
    # come from files on the server: shown literally).
    broken = [found for found in models.found_folders() if found.problem is not None]
    if broken:
        n = len(broken)
        with st.expander(f"{n} model folder{'s' if n > 1 else ''} could not be opened", icon=":material/folder_off:"):
            for found in broken:
                st.markdown(f"**{query.literal(found.name)}**: {query.literal(found.problem)}")
    if not choices:
        st.stop()
    return picked


def _pick_device(description: str) -> str:
    """The device select when there is a GPU; otherwise a note under the model's description."""
    options = tuple(models.devices())
    if len(options) == 1:
        URL.device.seed(choices=options)
        st.caption(f"{description}\n\nRunning on **{options[0].upper()}** (no GPU found).")
        return options[0]
    st.caption(description)
    return URL.device.widget(st.selectbox, "Device", choices=options)


def _on_model_change() -> None:
    """A new model may not understand the old input: start from its task's first example, and let an
    encoder-decoder write its own decoder input. The values kept for a page switch go too (ui.shell.query.drop),
    or they would come back on this very run; the URL gets the new example when the sidebar writes it."""
    for key in (INPUT_KEY, TGT_KEY, TGT_MODE_KEY):
        query.drop(key)
    st.session_state[SEED_KEY] = 0


def _follow_model(model_id: str) -> None:
    """Start from the new model's example when the model changed since the input was made: by the select box,
    whose new value is already in the session when the page runs, or by another page's button (Generation,
    Train). A session's first run keeps the link's input (no model before it), and so does a lesson step,
    which makes the sidebar read the URL again (ui.shell.query.forget): `drop` leaves it to the URL."""
    before = st.session_state.get(INPUT_MODEL_KEY)
    if before is not None and before != model_id:
        _on_model_change()
    st.session_state[INPUT_MODEL_KEY] = model_id


def _refuse(problem: str, instead: str, what: str) -> None:
    """Say in the sidebar, under the box, that typed tokens cannot be used and what is shown instead, and have the
    page say it under its title too (ui.shell.query.refused), where the student is looking. The problem echoes the
    typed tokens, so it is shown literally."""
    st.error(query.literal(problem))
    st.caption(f"Showing {what} instead: {query.code(instead)}")
    query.refused(problem, instead, what)


def _tokenise(task: Task, text: str, what: str, cap: int) -> tuple[Optional[list[str]], Optional[str]]:
    tokens = text.split()
    if not tokens:
        return None, f"The {what} is empty: type some tokens separated by spaces."
    if len(tokens) > cap:
        return None, f"The {what} has {len(tokens)} tokens; this page allows at most {cap}."
    try:
        task.vocab.encode(tokens)
    except ValueError as exc:
        return None, f"The {what} has a token this model does not know. {exc}"
    return tokens, None


def shared_sidebar(default_model: Optional[str] = None) -> Selection:
    """Draw the shared sidebar and return the current Selection (stops the page on a fatal error).

    default_model: the model a session starts on when this is its first page and the URL names none (the Home
    page opens on the English decoder); otherwise the first bundled model. A model already picked stays.
    """
    ensure_app_navigation()
    lessons_bar.show()  # a lesson step opens its view here, before any control reads the URL
    with st.sidebar:
        st.markdown("### Model and input")
        model_id = _pick_model(default_model)
        _follow_model(model_id)
        device = _pick_device(models.describe(model_id))
        try:
            model, meta = models.get_model(model_id, device)
            text_model = models.is_text_model(meta)
            task = models.text_task(model_id, device) if text_model else get_task(meta["task"])
        except (ValueError, KeyError) as exc:
            st.error(query.literal(f"Could not load this model: {exc}"))
            st.stop()
        arch = model.cfg.arch
        cap = max_tokens(model)
        if text_model:
            sel = _text_input(model_id, model, meta, task, device, cap)
            URL.input.write(st.session_state[INPUT_KEY])
            URL.tgt.clear()
            return sel
        seed = st.session_state.setdefault(SEED_KEY, 0)
        default_text = _example(task, arch, seed)
        URL.input.seed(default=default_text)
        label = "Source tokens" if arch == "encoder-decoder" else "Input tokens"
        if st.button("Random example", icon=":material/casino:", width="stretch"):
            st.session_state[SEED_KEY] = seed + 1
            st.session_state[INPUT_KEY] = _example(task, arch, seed + 1)
            st.session_state.pop(TGT_KEY, None)
        text = st.text_area(label, key=INPUT_KEY, height=90,
                            help=f"Tokens separated by spaces, at most {cap:,} (this model's context). "
                                 f"Known tokens: {query.literal(' '.join(task.vocab.tokens[:40]))}")
        tokens, problem = _tokenise(task, text, "input", cap)
        notes = []
        if problem:
            _refuse(problem, default_text, "the task's example")
            notes.append(problem)
            tokens = default_text.split()
        ids = torch.tensor([task.vocab.encode(tokens)], device=model.device)  # [1, pos]
        tgt_tokens = tgt_ids = None
        if arch == "encoder-decoder":
            tgt_tokens, tgt_ids = _target_side(model_id, device, task, ids, cap)
        try:
            targets = task.label(tokens, arch, tgt=tgt_tokens)
        except ValueError as exc:
            targets = None
            st.info(query.literal(f"No right answer to check: {exc}"))  # it may echo the typed tokens
        st.caption(f"Task: **{task.title}**. {task.scored_for(arch)}")
    URL.input.write(" ".join(tokens))
    if tgt_tokens and st.session_state.get(TGT_MODE_KEY) == TYPED:
        URL.tgt.write(" ".join(tgt_tokens))
    else:
        URL.tgt.clear()
    return Selection(model_id, model, meta, task, device, tokens, ids, tgt_tokens, tgt_ids, targets, notes)


def _text_input(model_id: str, model: Transformer, meta: dict, task: TextTask, device: str, cap: int) -> Selection:
    """A checkpoint from a folder reads any text: its tokenizer splits it, the labels show each piece, and a
    decoder's right answer at each position is the next token of the text. A text longer than the page can
    draw is cut to its first `cap` tokens, with a note (nothing is refused as an unknown token)."""
    seed = st.session_state.setdefault(SEED_KEY, 0)
    URL.input.seed(default=task.example_text(seed))
    if st.button("Another example", icon=":material/casino:", width="stretch"):
        st.session_state[SEED_KEY] = seed + 1
        st.session_state[INPUT_KEY] = task.example_text(seed + 1)
    text = st.text_area("Your text", key=INPUT_KEY, height=110,
                        help=f"Any text. The model's own tokenizer splits it into tokens; the pages read the first "
                             f"{cap:,} of them (this model's context).")
    ids = task.vocab.encode(text) if text.strip() else []
    notes = []
    if not ids:
        problem = "The text is empty: type a sentence."
        _refuse(problem, task.example_text(seed), "an example sentence")
        notes.append(problem)
        ids = task.vocab.encode(task.example_text(seed))
    if len(ids) > cap:
        note = f"Your text is {len(ids):,} tokens long; the pages show its first {cap:,}."
        st.info(note)
        notes.append(note)
        ids = ids[:cap]
    tokens = task.vocab.labels(ids)
    st.caption(f"{len(ids)} tokens: " + query.literal(" · ".join(tokens[:40])) + (" …" if len(tokens) > 40 else ""))
    st.caption(f"**{task.title}.** {task.scored_for(model.cfg.arch)}")
    tensor = torch.tensor([ids], device=model.device)  # [1, pos]
    return Selection(model_id, model, meta, task, device, tokens, tensor, None, None,
                     task.targets(ids, model.cfg.arch), notes)


def _target_side(model_id: str, device: str, task: Task, src_ids: torch.Tensor, cap: int):
    """The decoder's input for an encoder-decoder model: its own greedy output, or typed."""
    vocab = task.vocab
    # The mode is not a parameter of its own: a link that carries tgt= opens with the typed decoder input.
    query.seed(TGT_MODE_KEY, "tgt", lambda p: TYPED if query.parse_text(p) else None, GREEDY)
    greedy_tokens, greedy_ids = greedy_target(model_id, device, task, src_ids, cap)
    mode = st.radio("Decoder input", [GREEDY, TYPED], key=TGT_MODE_KEY,
                    captions=["`" + " ".join(greedy_tokens) + "`", "Edit the decoder's tokens below."],
                    help="Cross-attention needs a target side: let the model write it, or type one.")
    if mode == GREEDY:
        return greedy_tokens, greedy_ids
    URL.tgt.seed(default=" ".join(greedy_tokens))
    text = st.text_input("Decoder input tokens", key=TGT_KEY, help="Start with <bos>.")
    tokens, problem = _tokenise(task, text, "decoder input", cap)
    if problem:
        _refuse(problem, " ".join(greedy_tokens), "the model's own decoder input")
        tokens = greedy_tokens
    return tokens, torch.tensor([vocab.encode(tokens)], device=src_ids.device)


@memo(maxsize=256)
def _greedy_ids(model_id: str, device: str, src: tuple, steps: int, bos_id: int) -> tuple:
    """Greedy decoder output for one source (cached: every rerun of every page needs it)."""
    model, _ = models.get_model(model_id, device)
    src_ids = torch.tensor([src], device=model.device)  # [1 pos]
    generated = model.generate(src_ids, steps, tgt_prefix=torch.tensor([[bos_id]], device=model.device))
    return tuple(generated[0, :-1].tolist())  # <bos> y1 .. : what the decoder read


def greedy_target(model_id: str, device: str, task: Task, src_ids: torch.Tensor,
                  cap: int = MAX_INPUT_TOKENS) -> tuple[list[str], torch.Tensor]:
    """The decoder input an encoder-decoder model writes for itself: (tokens, ids [1, tgt_pos]), cached."""
    steps = min(src_ids.shape[1] + 1, cap - 1)
    ids = list(_greedy_ids(model_id, device, tuple(src_ids[0].tolist()), steps, task.vocab.bos_id))
    return task.vocab.decode(ids), torch.tensor([ids], device=src_ids.device)  # [1 tgt_pos]


def selection_for(sel: Selection, text: str, what: str = "second input") -> tuple[Optional[Selection], Optional[str]]:
    """The same model on another typed input (e.g. to compare two inputs): (Selection, None) or (None, problem).

    Encoder-decoder models get their own greedy decoder input for the new source.
    """
    cap = max_tokens(sel.model)
    if isinstance(sel.task, TextTask):
        ids = sel.task.vocab.encode(text)[:cap] if text.strip() else []
        if not ids:
            return None, f"The {what} is empty: type a sentence."
        return Selection(sel.model_id, sel.model, sel.meta, sel.task, sel.device, sel.task.vocab.labels(ids),
                         torch.tensor([ids], device=sel.model.device), None, None,  # [1 pos]
                         sel.task.targets(ids, sel.arch)), None
    tokens, problem = _tokenise(sel.task, text, what, cap)
    if problem:
        return None, problem
    ids = torch.tensor([sel.task.vocab.encode(tokens)], device=sel.model.device)  # [1 pos]
    tgt_tokens = tgt_ids = None
    if sel.arch == "encoder-decoder":
        tgt_tokens, tgt_ids = greedy_target(sel.model_id, sel.device, sel.task, ids, cap)
    try:
        targets = sel.task.label(tokens, sel.arch, tgt=tgt_tokens)
    except ValueError:
        targets = None
    return Selection(sel.model_id, sel.model, sel.meta, sel.task, sel.device, tokens, ids, tgt_tokens, tgt_ids,
                     targets), None


def prediction_table(sel: Selection, logits) -> list[dict]:
    """One row per scored output position: the model's top token, the right one, and whether they agree.

    `logits` `[1 pos vocab]` may be a torch tensor or a numpy array (as `ui.shell.runs.run` returns). The
    softmax is numpy's: it runs on every rerun, and small numpy calls keep the interpreter lock where
    each torch call would hand it over and wait to get it back (ui/server/interpreter.py).
    """
    if sel.targets is None:
        return []
    if isinstance(logits, torch.Tensor):
        logits = logits.detach().cpu().numpy()
    scores = np.asarray(logits, dtype=np.float64)[0]  # [pos vocab]
    scores = scores - scores.max(axis=-1, keepdims=True)  # the largest logit of each row becomes 0: no overflow
    probs = np.exp(scores)
    probs /= probs.sum(axis=-1, keepdims=True)  # [pos vocab]
    rows = []
    for p, target in enumerate(sel.targets):
        if target == IGNORE or p >= probs.shape[0]:
            continue
        top = int(probs[p].argmax())
        rows.append({"position": p, "token": sel.query_tokens[p],
                     "predicted": sel.task.vocab.decode([top])[0], "p(predicted)": float(probs[p, top]),
                     "right answer": sel.task.vocab.decode([target])[0], "p(right)": float(probs[p, target]),
                     "correct": top == target})
    return rows
