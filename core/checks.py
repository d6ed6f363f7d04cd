"""The checks a lesson can ask: a registry of named kinds, each a plain function of its arguments.

A lesson file names a kind and gives its arguments; it never holds code. There are three sorts:
- "pick": choose the right item (a head, a key) from options; the right one is computed from a
  real model when the check runs (e.g. the head with the highest induction score);
- "number": type a number; core computes the right value and the tolerance decides;
- "state": the student sets something on the page (a mask, a temperature) and the check reads
  what they set (the page's URL parameters), e.g. "make a mask whose graph has lambda_2 = 0".
Every answer gets feedback that says right or wrong and why.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional

import numpy as np
import torch

from core import masks as M
from core.analysis import attention as A
from core.analysis import cost as COST
from core.analysis import generation as GEN
from core.analysis import retrieval as RET
from core.analysis.heads.roles import ROLES, random_text_probe, repeated_text_probe, role_scores
from core.checkpoints import load_bundled
from core.families import SIZE_PRESETS
from core.tasks import get_task
from core.text_task import TEXT_TASK

PICK, NUMBER, STATE = "pick", "number", "state"
ModelLoader = Callable[[str], tuple]  # model id -> (Transformer, meta)


@dataclass(frozen=True)
class Context:
    """What a check may look at: a way to load models (the app passes its cached loader) and the
    state the student has set (the page's URL parameters, as text)."""

    load_model: ModelLoader = load_bundled
    state: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Solution:
    """The right answer of a pick or number check, the options offered (pick), and why it is right."""

    right: Any  # a number, or for a pick the tuple of accepted options (near-ties all count)
    why: str
    options: tuple = ()
    tolerance: float = 0.0


@dataclass(frozen=True)
class Feedback:
    """The verdict on one try: right or wrong, and a sentence saying why."""

    ok: bool
    why: str


@dataclass(frozen=True)
class Limit:
    """The range an argument of a check may take, and why. A lesson file is untrusted (a teacher's upload),
    and its arguments decide how much work a check does when a student presses Check: every number is
    bounded (a number between lo and hi; a list: at most `items` numbers, each between lo and hi)."""

    lo: float
    hi: float
    why: str
    items: int = 0  # a list argument: its largest length
    texts: bool = False  # a list argument may hold text items too (the choices of param_is)

    def refuse(self, kind: str, name: str, value: Any) -> Optional[str]:
        """Why `value` is out of range (a message naming the argument and its limit), or None when it fits."""
        where = f"argument {name!r} of check kind {kind!r}"
        if isinstance(value, list):
            if not 1 <= len(value) <= self.items:
                return f"{where} must list 1 to {self.items} items ({self.why}), got {len(value)}"
            if not self.texts and any(isinstance(v, str) for v in value):
                return f"{where} must hold numbers only ({self.why})"
            numbers = [v for v in value if not isinstance(v, str)]
            bad = next((v for v in numbers if not (self.lo <= v <= self.hi)), None)  # NaN is out of range too
            if bad is not None:
                return (f"{where} must hold numbers between {_num(self.lo)} and {_num(self.hi)} ({self.why}), "
                        f"got {bad!r}")
            return None
        if not self.lo <= value <= self.hi:
            shown = repr(value) if len(repr(value)) <= 40 else f"{repr(value)[:40]}..."
            return f"{where} must be between {_num(self.lo)} and {_num(self.hi)} ({self.why}), got {shown}"
        return None


def _num(x: float) -> str:
    """A limit as a lesson author reads it: 1,048,576 and 0.01, never 1.04858e+06."""
    return f"{int(x):,}" if float(x).is_integer() else f"{x:g}"


MAX_TEXT_CHARS = 200  # every text argument (and text item of a list): names, presets, a page parameter's value
MAX_INPUT_CHARS = 16_000  # most_attended_key's input, like the sidebar's in a link (ui.shell.query.MAX_TEXT_PARAM_CHARS)
MAX_INPUT_TOKENS = 1024  # most_attended_key's input: as many tokens as the sidebar accepts for a bundled (toy) model
MAX_MASK_TOKENS = 64  # mask_lambda2: the Masks page draws the mask of an input's first 64 tokens (ui.masks.view.MAX_EDIT_N)
MAX_SEED = 10_000  # mask_lambda2: the Masks page's random-mask seed, 0..10,000


@dataclass(frozen=True)
class Kind:
    """One kind of check: what it asks for, its arguments (name -> type, and defaults), and its function.

    A pick or number kind's `solve(ctx, args)` returns the Solution; a state kind's
    `judge(ctx, args)` reads `ctx.state` and returns Feedback, and `examples(args)` gives one
    state that passes and one that fails (used by tests and by the lessons page's preview).
    """

    name: str
    sort: str  # PICK, NUMBER or STATE
    summary: str
    required: Mapping[str, type]
    optional: Mapping[str, Any] = field(default_factory=dict)
    solve: Optional[Callable[[Context, dict], Solution]] = None
    judge: Optional[Callable[[Context, dict], Feedback]] = None
    examples: Optional[Callable[[dict], tuple[dict, dict]]] = None
    limits: Mapping[str, Limit] = field(default_factory=dict)  # every number and list argument's range

    def arguments(self, given: Mapping[str, Any]) -> dict:
        """The arguments with defaults filled in; ValueError naming an unknown, missing, mistyped or out-of-range
        one (with its limit: a number's range, a list's length, a text's characters)."""
        unknown = sorted(set(given) - set(self.required) - set(self.optional))
        if unknown:
            allowed = ", ".join(sorted([*self.required, *self.optional]))
            raise ValueError(f"check kind {self.name!r} has no argument {unknown[0]!r} (it takes: {allowed})")
        missing = [name for name in self.required if name not in given]
        if missing:
            raise ValueError(f"check kind {self.name!r} needs the argument {missing[0]!r}")
        out = {**self.optional, **given}
        for name, value in given.items():
            want = self.required.get(name) or type(self.optional[name])
            if not _is(value, want):
                shown = repr(value) if len(repr(value)) <= 60 else f"{repr(value)[:60]}..."
                raise ValueError(f"argument {name!r} of check kind {self.name!r} must be {want.__name__}, "
                                 f"got {shown}")
            problem = self._out_of_range(name, value)
            if problem:
                raise ValueError(problem)
        return out

    def _out_of_range(self, name: str, value: Any) -> Optional[str]:
        """Why a well-typed argument is out of its limits, or None: numbers and lists by `limits`, text (and the
        text items of a list) by its length."""
        texts = [value] if isinstance(value, str) else []
        if isinstance(value, list):
            texts = [v for v in value if isinstance(v, str)]
        chars = MAX_INPUT_CHARS if name == "input" else MAX_TEXT_CHARS
        long = next((t for t in texts if len(t) > chars), None)
        if long is not None:
            return (f"argument {name!r} of check kind {self.name!r} must be at most {chars} characters long "
                    f"(a lesson's text argument names a thing or holds a short input), got {len(long)}")
        limit = self.limits.get(name)
        return limit.refuse(self.name, name, value) if limit is not None else None


def _is(value: Any, want: type) -> bool:
    if want is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if want is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if want is list:
        return isinstance(value, list) and all(isinstance(v, (int, float, str)) for v in value)
    return isinstance(value, want)


# ---------------------------------------------------------------------------------------------
# Pick the right item, computed from a model
# ---------------------------------------------------------------------------------------------


def head_label(layer: int, head: int) -> str:
    """How a head is named in options and answers: L1H0 is head 0 of layer 1."""
    return f"L{layer}H{head}"


def _self_attention_kind(arch: str, side: str) -> A.AttentionKind:
    kinds = [k for k in A.attention_kinds(arch) if k.module != "cross_attn"]
    chosen = [k for k in kinds if side in ("", k.key)]
    if not chosen:
        raise ValueError(f"a {arch} model has no self-attention called {side!r} "
                         f"(it has: {', '.join(k.key for k in kinds)})")
    return chosen[0]


def _task_of(model, meta: Mapping) -> Any:
    """What a model reads: its toy task, or for a model that reads text (an English model, a checkpoint) its
    tokenizer seen as a TextTask."""
    if meta.get("task") != TEXT_TASK:
        return get_task(meta["task"])
    from core.pretrained import load_tokenizer
    from core.text_task import TextTask

    tokenizer = load_tokenizer(meta["folder"], meta["family"])
    return TextTask(tokenizer, model.cfg.vocab_size, model.cfg.arch, model.cfg.max_len)


def _text_probe(model, task, args: dict) -> tuple:
    """The probe a text model's role scores read: a typed sentence read twice (`sentence`), else repeated random
    tokens as the literature draws them; as core.analysis.heads.roles.probe_inputs returns it."""
    if args.get("sentence"):
        tokens = repeated_text_probe(task.vocab, model.cfg.arch, model.cfg.max_len, args["sentence"])  # [1 pos]
    else:
        tokens = random_text_probe(task.vocab, model.cfg.arch, model.cfg.max_len, n=min(args["probes"], 8))  # [n pos]
    return tokens, None, tokens.numpy()


def _head_with_role(ctx: Context, args: dict) -> Solution:
    if args["role"] not in ROLES:
        raise ValueError(f"role must be one of {', '.join(ROLES)}, got {args['role']!r}")
    model, meta = ctx.load_model(args["model"])
    task = _task_of(model, meta)
    kind = _self_attention_kind(model.cfg.arch, args["attention"])
    if meta.get("task") == TEXT_TASK:
        roles = role_scores(model, kind, task.vocab, None, probe=_text_probe(model, task, args))
    else:
        roles = role_scores(model, kind, task.vocab, task, n=args["probes"])
    scores = roles.scores[args["role"]]  # [layer head]
    if np.isnan(scores).all():
        raise ValueError(f"the {args['role']} score cannot be measured on {args['model']}: {roles.notes[args['role']]}")
    best = float(np.nanmax(scores))
    accepted = tuple(head_label(l, h) for l in range(scores.shape[0]) for h in range(scores.shape[1])
                     if scores[l, h] >= best - args["margin"])
    options = tuple(head_label(l, h) for l in range(scores.shape[0]) for h in range(scores.shape[1]))
    ranked = sorted(((float(scores[l, h]), head_label(l, h)) for l in range(scores.shape[0])
                     for h in range(scores.shape[1])), reverse=True)
    top = ", ".join(f"{label} {score:.2f}" for score, label in ranked[:3])
    tied = f" ({' and '.join(accepted)} are within {args['margin']:g} of each other: each counts)" \
        if len(accepted) > 1 else ""
    why = (f"The {args['role']} scores, highest first: {top}; an evenly spread head would get "
           f"{roles.chance[args['role']]:.2f}{tied}. Measured: {roles.notes[args['role']]}.")
    return Solution(accepted, why, options)


def _most_attended_key(ctx: Context, args: dict) -> Solution:
    model, meta = ctx.load_model(args["model"])
    task = _task_of(model, meta)
    if meta.get("task") == TEXT_TASK:  # any text, split by the model's tokenizer as the sidebar splits it
        ids_list = task.vocab.encode(args["input"])
        tokens = task.vocab.decode(ids_list)
    else:
        tokens = args["input"].split()
    if len(tokens) > MAX_INPUT_TOKENS:
        raise ValueError(f"argument 'input' of check kind 'most_attended_key' has {len(tokens)} tokens; "
                         f"at most {MAX_INPUT_TOKENS:,}, as many as the sidebar accepts")
    ids = torch.tensor([task.vocab.encode(tokens) if meta.get("task") != TEXT_TASK else ids_list],
                       device=model.device)  # [1 pos]
    if model.cfg.arch == "encoder-decoder":
        raise ValueError("most_attended_key reads self-attention of an encoder or decoder model")
    kind = _self_attention_kind(model.cfg.arch, "")
    layer, head, query = args["layer"], args["head"], args["query"]
    if not (0 <= layer < model.cfg.n_layers and 0 <= head < model.cfg.n_heads and 0 <= query < len(tokens)):
        raise ValueError(f"layer {layer}, head {head} or query {query} is outside this model and input")
    name = kind.hook(layer, "hook_pattern")
    _, cache = model.run_with_cache(ids, [name])
    row = cache[name][0, head, query].float().cpu().numpy()  # [k]
    options = tuple(f"{k}: {t}" for k, t in enumerate(tokens))
    best = int(np.argmax(row))
    accepted = tuple(options[k] for k in range(len(row)) if row[k] >= row[best] - args["margin"])
    why = (f"Query {query} ({tokens[query]!r}) in {head_label(layer, head)} puts {row[best]:.2f} of its weight "
           f"on key {best} ({tokens[best]!r}), more than on any other key.")
    return Solution(accepted, why, options)


# ---------------------------------------------------------------------------------------------
# A number within a tolerance, computed by core
# ---------------------------------------------------------------------------------------------


def _scalar_steps(args: dict) -> A.AttentionSteps:
    return A.scalar_example(float(args["q"]), [float(k) for k in args["keys"]], [float(v) for v in args["values"]],
                            d_k=args["d_k"], temperature=float(args["temperature"]))


def _scalar_weight(ctx: Context, args: dict) -> Solution:
    steps = _scalar_steps(args)
    i = args["key"] - 1
    if not 0 <= i < len(steps.weights):
        raise ValueError(f"key must be between 1 and {len(steps.weights)}, got {args['key']}")
    scores = ", ".join(f"{s:.3g}" for s in steps.scores)
    why = (f"The scores are {scores}; the softmax gives key {args['key']} the weight "
           f"exp({steps.scores[i]:.3g}) / sum exp = {steps.weights[i]:.4f}.")
    return Solution(float(steps.weights[i]), why, tolerance=float(args["tolerance"]))


def _scalar_output(ctx: Context, args: dict) -> Solution:
    steps = _scalar_steps(args)
    values = np.ravel(steps.values)  # [keys] (one number per value)
    terms = " + ".join(f"{w:.3f}*{v:g}" for w, v in zip(steps.weights, values))
    why = f"The output is the weighted sum of the values: {terms} = {float(steps.output[0]):.4f}."
    return Solution(float(steps.output[0]), why, tolerance=float(args["tolerance"]))


def mask_of(preset: str, n: int, knobs: Mapping[str, Any]) -> torch.Tensor:
    """The [q k] bool mask a Masks-page preset describes, with its knobs (w, b, s, g, real, density,
    rseed, formula); the formula is parsed by core.masks, never evaluated."""
    def knob(name: str, default: int) -> int:
        return min(max(int(knobs.get(name, default)), 0), n)

    def density() -> float:  # clamped to 0..1 like the page's slider; NaN or inf cannot be used
        value = float(knobs.get("density", 0.3))
        if not math.isfinite(value):
            raise ValueError(f"density must be a number between 0 and 1, got {value!r}")
        return min(max(value, 0.0), 1.0)
    if preset == "full":
        return M.full(n)
    if preset == "causal":
        return M.causal(n)
    if preset == "sliding":
        return M.sliding_window(n, knob("w", 2))
    if preset == "block":
        return M.block_diagonal(n, max(knob("b", 4), 1))
    if preset == "strided":
        return M.strided(n, max(knob("s", 3), 1))
    if preset == "global":
        return M.global_local(n, knob("g", 1), knob("w", 2))
    if preset == "padding":
        return M.padding(n, max(knob("real", n), 1))
    if preset == "random":
        return M.random_mask(n, density(), min(max(int(knobs.get("rseed", 0)), 0), MAX_SEED))
    if preset == "formula":
        return M.from_formula(str(knobs.get("formula", "")), n)
    raise ValueError(f"unknown mask preset {preset!r}")


MASK_MEASURES = {
    "lambda_2": (M.algebraic_connectivity, "the algebraic connectivity lambda_2"),
    "density": (M.density, "the fraction of allowed query-key pairs"),
    "layers_to_reach_all": (lambda m: M.layers_to_reach_all(m, max_layers=64) or math.inf,
                            "the number of layers until every token can reach every other"),
}


def _mask_measure(ctx: Context, args: dict) -> Solution:
    if args["measure"] not in MASK_MEASURES:
        raise ValueError(f"measure must be one of {', '.join(MASK_MEASURES)}, got {args['measure']!r}")
    measure, words = MASK_MEASURES[args["measure"]]
    knobs = {k: args[k] for k in ("w", "b", "s", "g") if args[k] >= 0}
    mask = mask_of(args["preset"], args["n"], knobs)
    value = float(measure(mask))
    why = f"For the {args['preset']} mask on {args['n']} tokens, {words} is {value:.4g}."
    return Solution(value, why, tolerance=float(args["tolerance"]))


def _max_heads(ctx: Context, args: dict) -> Solution:
    if args["d_v"] < 1 or args["d_model"] < 1:
        raise ValueError("d_model and d_v must be positive")
    h = args["d_model"] // args["d_v"]
    why = (f"Heads with mutually orthogonal value subspaces of size {args['d_v']} fit at most "
           f"floor({args['d_model']} / {args['d_v']}) = {h} times into {args['d_model']} dimensions.")
    return Solution(float(h), why, tolerance=0.0)


def _attention_vs_rnn_cost(ctx: Context, args: dict) -> Solution:
    n, d = args["n"], args["d"]
    if n < 1 or d < 1:
        raise ValueError("n and d must be positive")
    ratio = (n * n * d) / (n * d * d)
    why = (f"Self-attention costs about n^2 d = {n * n * d:,} operations per layer, a recurrent layer "
           f"n d^2 = {n * d * d:,}: the ratio is n / d = {ratio:.4g}.")
    return Solution(ratio, why, tolerance=float(args["tolerance"]))


def _one_of(name: str, value: str, allowed) -> None:
    """ValueError naming the allowed values when `value` is not one of them."""
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")


def _lookup_beta(ctx: Context, args: dict) -> Solution:
    table, angle, weight = args["table"], float(args["angle"]), float(args["weight"])
    _one_of("table", table, RET.PRESET_TABLES)
    if not 0.0 < weight < 1.0:
        raise ValueError(f"weight must lie strictly between 0 and 1, got {weight:g}")
    keys, values = RET.preset_table(table)
    scores = keys @ RET.unit(angle)  # [keys]
    beta = RET.beta_for_weight(scores, weight)
    best = RET.top_keys(scores)
    if not math.isfinite(beta):
        raise ValueError(f"in the {table!r} database {len(best)} keys tie for the best score at {angle:g} degrees, "
                         f"so no single key ever holds {weight:g} of the weight")
    shown = ", ".join(f"{s:.3f}" for s in scores)
    why = (f"The query at {angle:g} degrees scores the keys {shown}. The best key (value {values[best[0]]:g}) holds "
           f"{weight:g} of the weight from beta* = {beta:.4g} on: below it the answer is still a blend of values, "
           f"above it very nearly a single lookup.")
    return Solution(beta, why, tolerance=float(args["tolerance"]))


def _kernel_width(ctx: Context, args: dict) -> Solution:
    qnorm, which = float(args["qnorm"]), args["which"]
    if qnorm <= 0:
        raise ValueError(f"qnorm must be positive, got {qnorm:g}")
    _one_of("which", which, ("measured", "predicted"))
    measured, predicted = RET.measured_bandwidth(qnorm), RET.predicted_bandwidth(qnorm)
    value = measured if which == "measured" else predicted
    why = (f"With |q| = {qnorm:g} the kernel exp(|q| cos(pi (x - x0))) has width {measured:.4f}, read off its curve "
           f"(half width at half height over sqrt(2 ln 2)); the small-angle prediction 1 / (pi sqrt|q|) is "
           f"{predicted:.4f}. The longer the query, the narrower the kernel.")
    return Solution(value, why, tolerance=float(args["tolerance"]))


COST_MEASURES = {  # measure -> (column of core.analysis.cost.preset_rows or None, words)
    "attention_gflop": ("attention GFLOP (one layer)", "one self-attention core costs 4 n^2 d FLOPs, in GFLOP"),
    "rnn_gflop": ("RNN GFLOP (one layer)", "one recurrent layer of the same width costs 4 n d^2 FLOPs, in GFLOP"),
    "flop_ratio": ("attention ÷ RNN", "attention's FLOPs over the recurrent layer's are n / d"),
    "pattern_mib": ("patterns kept, MiB (all maps)", "training keeps h n^2 float32 numbers per attention map, in MiB over all maps"),
    "chunked_mib": ("chunked keeps, MiB (all maps)", "chunked attention keeps h n (d_head + 1) numbers per map, "
                    "plus one block of scores in flight, in MiB over all maps"),
    "memory_ratio": (None, "the patterns explicit attention keeps, over what chunked attention keeps"),
    "crossover_n": (None, "attention's 4 n^2 d FLOPs meet the recurrent layer's 4 n d^2"),
    "rnn_steps": (None, "a recurrent layer runs its n positions one after another; attention needs 1 step"),
    "rnn_path": (None, "a signal from the first to the last position passes n - 1 recurrent steps; "
                 "one attention hop"),
}


def _cost_count(ctx: Context, args: dict) -> Solution:
    measure, name, n, block = args["measure"], args["preset"], args["n"], args["block"]
    _one_of("measure", measure, COST_MEASURES)
    _one_of("preset", name, SIZE_PRESETS)
    if n < 1 or block < 1:
        raise ValueError("n and block must be positive")
    preset = SIZE_PRESETS[name]
    column, words = COST_MEASURES[measure]
    row = COST.preset_rows(name, [n], block)[0]
    if column is not None:
        value = float(row[column])
    elif measure == "memory_ratio":
        value = row["patterns kept, MiB (all maps)"] / row["chunked keeps, MiB (all maps)"]
    elif measure == "crossover_n":
        ns = [2 ** k for k in range(1, 21)]
        value = COST.crossover(ns, [COST.attention_flops(m, preset.d_model) for m in ns],
                               [COST.recurrent_flops(m, preset.d_model) for m in ns])
        if value is None:
            raise ValueError("the two FLOP curves do not cross between n = 2 and n = 2^20")
    elif measure == "rnn_steps":
        value = float(COST.sequential_steps(COST.RNN, n))
    else:  # rnn_path
        value = float(COST.path_length(COST.RNN, n - 1))
    at = "" if measure in ("crossover_n",) else f" at n = {n:,}"
    size = f"{preset.name} (d_model {preset.d_model}, {preset.n_heads} heads, {preset.n_layers} layers)"
    why = f"For {size}{at}: {words}, which gives {value:,.6g}."
    if measure in ("rnn_steps", "rnn_path"):
        why = f"At n = {n:,}: {words}, so the answer is {value:,.0f}."
    return Solution(value, why, tolerance=float(args["tolerance"]))


ATTENTIONS = {"encoder": "encoder self-attention", "decoder": "decoder masked self-attention",
              "cross": "cross-attention"}
ATTENTION_TENSORS = ("q", "k", "v", "scores", "output")  # in the order core.analysis.generation lists them


def _attention_numbers(ctx: Context, args: dict) -> Solution:
    which, tensor, len_dec, len_enc = args["attention"], args["tensor"], args["len_dec"], args["len_enc"]
    _one_of("attention", which, ATTENTIONS)
    _one_of("tensor", tensor, ATTENTION_TENSORS)
    if len_dec < 1 or len_enc < 1:
        raise ValueError("len_dec and len_enc must be positive")
    model, _ = ctx.load_model(args["model"])
    block = GEN.attention_shapes(model.cfg, ATTENTIONS[which], 1, len_dec, len_enc)[ATTENTION_TENSORS.index(tensor)]
    why = (f"In {args['model']}'s {ATTENTIONS[which]} (L_d = {len_dec}, L_e = {len_enc}, one example), "
           f"{block.label} has axes {' x '.join(block.axes)} = {' x '.join(map(str, block.sizes))}: "
           f"{block.numel:,} numbers.")
    return Solution(float(block.numel), why, tolerance=0.0)


# ---------------------------------------------------------------------------------------------
# State checks: what the student has set on the page
# ---------------------------------------------------------------------------------------------


def _compare(value: float, target: float, tol: float, how: str) -> bool:
    if how == "at_least":
        return value >= target - tol
    if how == "at_most":
        return value <= target + tol
    return abs(value - target) <= tol


def _student_mask(state: Mapping[str, str]) -> tuple[torch.Tensor, str]:
    """The mask the student set on the Masks page, from what the page reads (input, preset and knobs), within
    the page's own bounds: an input's first MAX_MASK_TOKENS tokens (all the page draws of a longer one),
    knobs of at most MAX_TEXT_CHARS characters, clamped as the page clamps them. ValueError says what is off."""
    text = str(state.get("input") or "")
    if len(text) > MAX_INPUT_CHARS:
        raise ValueError(f"your input is {len(text):,} characters long; the sidebar reads at most {MAX_INPUT_CHARS:,}")
    tokens = text.split()
    if not tokens:
        raise ValueError("there is no input the page can use yet: open the Masks page of this step first")
    tokens = tokens[:MAX_MASK_TOKENS]  # what the page draws of a longer input, and so what the student set
    preset = str(state.get("preset") or "causal")
    knobs = {k: state[k] for k in ("w", "b", "s", "g", "real", "density", "rseed", "formula") if k in state}
    long = next((k for k, v in {"preset": preset, **knobs}.items() if len(str(v)) > MAX_TEXT_CHARS), None)
    if long is not None:
        raise ValueError(f"the Masks page's {long} is more than {MAX_TEXT_CHARS} characters long")
    return mask_of(preset, len(tokens), knobs), preset


def _mask_lambda2_state(ctx: Context, args: dict) -> Feedback:
    how = args["compare"]
    if how not in ("equal", "at_least", "at_most"):
        raise ValueError(f"compare must be equal, at_least or at_most, got {how!r}")
    try:
        mask, preset = _student_mask(ctx.state)
    except (ValueError, TypeError) as exc:
        return Feedback(False, f"Your mask could not be read: {exc}.")
    value = M.algebraic_connectivity(mask)
    ok = _compare(value, float(args["target"]), float(args["tolerance"]), how)
    words = {"equal": "equal to", "at_least": "at least", "at_most": "at most"}[how]
    parts = "it falls apart into pieces that never exchange information" if value < 1e-9 else "it is connected"
    return Feedback(ok, f"Your {preset} mask's graph has lambda_2 = {value:.3g} ({parts}); the goal was "
                        f"{words} {float(args['target']):g}.")


def _mask_lambda2_examples(args: dict) -> tuple[dict, dict]:
    connected = {"input": "a b c d e f", "preset": "full"}
    broken = {"input": "a b c d e f", "preset": "block", "b": "2"}
    target_zero = args["compare"] == "at_most" or (args["compare"] == "equal" and float(args["target"]) == 0)
    return (broken, connected) if target_zero else (connected, broken)


def _param_in_range(ctx: Context, args: dict) -> Feedback:
    name, lo, hi = args["param"], float(args["lo"]), float(args["hi"])
    raw = ctx.state.get(name, args["default"])
    try:
        value = float(raw)
    except (TypeError, ValueError):
        return Feedback(False, f"{name} is {raw!r} now, not a number.")
    ok = lo <= value <= hi
    return Feedback(ok, f"{name} is {value:g}; the goal was between {lo:g} and {hi:g}.")


def _param_in_range_examples(args: dict) -> tuple[dict, dict]:
    lo, hi = float(args["lo"]), float(args["hi"])
    outside = hi + abs(hi - lo) + 1
    return {args["param"]: f"{(lo + hi) / 2:g}"}, {args["param"]: f"{outside:g}"}


def _param_is(ctx: Context, args: dict) -> Feedback:
    name, wanted = args["param"], [str(v) for v in args["values"]]
    value = str(ctx.state.get(name, args["default"]))
    ok = value in wanted
    return Feedback(ok, f"{name} is {value!r} now; the goal was {' or '.join(repr(w) for w in wanted)}.")


def _param_is_examples(args: dict) -> tuple[dict, dict]:
    return {args["param"]: str(args["values"][0])}, {args["param"]: "\u2205 none of these"}


# ---------------------------------------------------------------------------------------------
# The registry
# ---------------------------------------------------------------------------------------------

# The limits, with why each is what it is (docs/lessons.md lists them for lesson authors).
TOLERANCE = Limit(0, 1e6, "not negative; a larger one would accept any answer")
MARGIN = Limit(0, 1, "scores and weights lie between 0 and 1")
PROBES = Limit(1, 128, "each probe is one more model run; 128 take about a second, 20,000 took 24 s")
LAYER_HEAD = Limit(0, 63, "no bundled model has more layers or heads; the model's own size is checked when it runs")
QUERY = Limit(0, MAX_INPUT_TOKENS - 1, f"the input holds at most {MAX_INPUT_TOKENS:,} tokens, as in the sidebar")
TOY_NUMBER = Limit(-100, 100, "the one-number example's scores stay readable and exp() stays finite")
TOY_LIST = Limit(-100, 100, f"the one-number example shows at most {A.TOY_MAX_ITEMS} keys", items=A.TOY_MAX_ITEMS)
TOY_KEY = Limit(1, A.TOY_MAX_ITEMS, f"the one-number example has at most {A.TOY_MAX_ITEMS} keys")
D_K = Limit(1, 65_536, "a key width; sqrt(d_k) only scales the scores")
TEMPERATURE = Limit(0.01, 100, "positive; below 0.01 the softmax is a hard max, above 100 uniform")
MASK_N = Limit(1, 256, "a mask of n tokens is an n x n graph; lambda_2 at 256 takes about a second, 4,096 took 101 s")
MASK_KNOB = Limit(-1, 256, "-1 keeps the preset's default; a window, block, stride or global count up to n")
WIDTH = Limit(1, 65_536, "a model width (d_model, d_v, d); the largest famous models stay below it")
SEQ = Limit(1, 1_048_576, "a sequence length up to 2^20, the longest the Cost page plots")
BLOCK = Limit(1, 65_536, "a chunked attention's block of keys")
LENGTH = Limit(1, 65_536, "a decoder or encoder length; a count near 2^63 overflows into a wrong answer")
ANGLE = Limit(-360, 360, "an angle in degrees, once around either way")
WEIGHT = Limit(0, 1, "a softmax weight lies between 0 and 1")
QNORM = Limit(1, 1000, "the Retrieval page's query norms run from 1 to 1000")
LAMBDA2 = Limit(0, 256, f"the lambda_2 of a mask on at most {MAX_MASK_TOKENS} tokens is at most {MAX_MASK_TOKENS}")
PARAM_NUMBER = Limit(-1e9, 1e9, "a page control's value; no control reaches a billion")
PARAM_VALUES = Limit(-1e9, 1e9, "the accepted choices of one control", items=20, texts=True)

KINDS: dict[str, Kind] = {k.name: k for k in (
    Kind("head_with_role", PICK, "Pick the head that plays a role (induction, previous token, ...), measured "
         "on the model's role scores (a model that reads text: on repeated random tokens, or on `sentence` read "
         "twice).", {"model": str, "role": str}, {"attention": "", "probes": 32, "margin": 0.05, "sentence": ""},
         solve=_head_with_role, limits={"probes": PROBES, "margin": MARGIN}),
    Kind("most_attended_key", PICK, "Pick the key one query of one head attends to most, on a given input.",
         {"model": str, "input": str, "layer": int, "head": int, "query": int}, {"margin": 0.02},
         solve=_most_attended_key,
         limits={"layer": LAYER_HEAD, "head": LAYER_HEAD, "query": QUERY, "margin": MARGIN}),
    Kind("scalar_weight", NUMBER, "The softmax weight on one key of the one-number attention example.",
         {"key": int}, {"q": A.TOY_QUERY, "keys": list(A.TOY_KEYS), "values": list(A.TOY_VALUES), "d_k": 1,
                        "temperature": 1.0, "tolerance": 0.01}, solve=_scalar_weight,
         limits={"key": TOY_KEY, "q": TOY_NUMBER, "keys": TOY_LIST, "values": TOY_LIST, "d_k": D_K,
                 "temperature": TEMPERATURE, "tolerance": TOLERANCE}),
    Kind("scalar_output", NUMBER, "The output (weighted sum of values) of the one-number attention example.",
         {}, {"q": A.TOY_QUERY, "keys": list(A.TOY_KEYS), "values": list(A.TOY_VALUES), "d_k": 1,
              "temperature": 1.0, "tolerance": 0.01}, solve=_scalar_output,
         limits={"q": TOY_NUMBER, "keys": TOY_LIST, "values": TOY_LIST, "d_k": D_K, "temperature": TEMPERATURE,
                 "tolerance": TOLERANCE}),
    Kind("mask_measure", NUMBER, "A number about a mask's graph: lambda_2, density or layers to reach all.",
         {"preset": str, "n": int, "measure": str}, {"w": -1, "b": -1, "s": -1, "g": -1, "tolerance": 0.01},
         solve=_mask_measure, limits={"n": MASK_N, "w": MASK_KNOB, "b": MASK_KNOB, "s": MASK_KNOB, "g": MASK_KNOB,
                                      "tolerance": TOLERANCE}),
    Kind("max_heads", NUMBER, "How many heads with orthogonal value subspaces fit: floor(d_model / d_v).",
         {"d_model": int, "d_v": int}, solve=_max_heads, limits={"d_model": WIDTH, "d_v": WIDTH}),
    Kind("attention_vs_rnn_cost", NUMBER, "Cost of self-attention over a recurrent layer: n^2 d / (n d^2).",
         {"n": int, "d": int}, {"tolerance": 0.01}, solve=_attention_vs_rnn_cost,
         limits={"n": SEQ, "d": WIDTH, "tolerance": TOLERANCE}),
    Kind("lookup_beta", NUMBER, "The beta at which the best key of a preset soft database (Retrieval page) "
         "holds a given weight (0.99: a hard lookup).", {"table": str},
         {"angle": 0.0, "weight": RET.ONE_HOT, "tolerance": 0.1}, solve=_lookup_beta,
         limits={"angle": ANGLE, "weight": WEIGHT, "tolerance": TOLERANCE}),
    Kind("kernel_width", NUMBER, "The width (in x) of the kernel a query of norm |q| applies (Retrieval page), "
         "measured off its curve or predicted as 1 / (pi sqrt|q|).", {"qnorm": float},
         {"which": "measured", "tolerance": 0.002}, solve=_kernel_width,
         limits={"qnorm": QNORM, "tolerance": TOLERANCE}),
    Kind("attention_numbers", NUMBER, "How many numbers one tensor (q, k, v, scores, output) of an attention "
         "layer of a bundled model holds for given decoder and encoder lengths (Generation page, shapes).",
         {"model": str, "attention": str, "tensor": str, "len_dec": int, "len_enc": int},
         solve=_attention_numbers, limits={"len_dec": LENGTH, "len_enc": LENGTH}),
    Kind("cost_count", NUMBER, "A count from the Cost page at a famous model's size: FLOPs and their ratio, "
         "memory kept for training (explicit, chunked), the attention-RNN crossover, RNN steps and path.",
         {"measure": str}, {"preset": "original", "n": 1024, "block": 32, "tolerance": 0.01}, solve=_cost_count,
         limits={"n": SEQ, "block": BLOCK, "tolerance": TOLERANCE}),
    Kind("mask_lambda2", STATE, "The student's own mask on the Masks page has a given lambda_2.",
         {"target": float}, {"compare": "equal", "tolerance": 1e-6},
         judge=_mask_lambda2_state, examples=_mask_lambda2_examples,
         limits={"target": LAMBDA2, "tolerance": TOLERANCE}),
    Kind("param_in_range", STATE, "A number the student set on the page lies in a range.",
         {"param": str, "lo": float, "hi": float}, {"default": ""},
         judge=_param_in_range, examples=_param_in_range_examples, limits={"lo": PARAM_NUMBER, "hi": PARAM_NUMBER}),
    Kind("param_is", STATE, "A choice the student made on the page is one of the given values.",
         {"param": str, "values": list}, {"default": ""}, judge=_param_is, examples=_param_is_examples,
         limits={"values": PARAM_VALUES}),
)}


def kind(name: str) -> Kind:
    """The check kind of this name; ValueError listing the known kinds otherwise."""
    if name not in KINDS:
        raise ValueError(f"unknown check kind {name!r} (known: {', '.join(KINDS)})")
    return KINDS[name]


def solve(name: str, args: Mapping[str, Any], ctx: Context = Context()) -> Solution:
    """The right answer of a pick or number check."""
    k = kind(name)
    if k.solve is None:
        raise ValueError(f"check kind {name!r} reads what the student set; it has no answer to type")
    return k.solve(ctx, k.arguments(args))


def grade(name: str, args: Mapping[str, Any], answer: Any = None, ctx: Context = Context(),
          solution: Optional[Solution] = None) -> Feedback:
    """Right or wrong, and why: a pick or number answer against the computed one (or the `solution`
    already computed for these arguments), or the state in `ctx`."""
    k = kind(name)
    full = k.arguments(args)
    if k.sort == STATE:
        return k.judge(ctx, full)
    solution = solution or k.solve(ctx, full)
    if k.sort == PICK:
        ok = str(answer) in solution.right
        return Feedback(ok, solution.why if ok else f"{answer} is not the one: the measurement says otherwise.")
    try:
        value = float(answer)
    except (TypeError, ValueError):
        return Feedback(False, f"{answer!r} is not a number.")
    ok = math.isfinite(value) and abs(value - solution.right) <= solution.tolerance + 1e-12
    return Feedback(ok, solution.why if ok else f"{value:g} is not within {solution.tolerance:g} of the right value.")
