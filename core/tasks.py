"""Toy tasks whose trained attention heads do something a student can name.

Every task is small on purpose: a vocabulary of a few dozen tokens and sequences of a few
dozen positions, so a 2-layer, d_model 64, 4-head Transformer learns it in a few thousand
steps and its attention patterns can be read by eye (copy: a diagonal; reverse: an
anti-diagonal; induction: "attend to the token after the earlier copy of me"; agreement:
"the verb slot looks at its subject, not at the nearer noun").

A task samples batches (deterministically from a seed, never from the global RNG) and,
independently, labels ANY input a student types by applying the task's rule, so a page can
score a model on a hand-made sentence. The sampler writes targets from what it generated;
`label` recomputes them by parsing the tokens. Tests check that both agree.

Conventions shared by all tasks:
- `IGNORE` marks positions that are not scored (the value `torch.nn.functional.cross_entropy`
  ignores by default).
- Decoder-only targets are already shifted: `targets[t]` is what the model should output at
  position t, i.e. the NEXT token after `tokens[t]`. The exceptions are `future-legality` and
  `peaks`, whose targets are per-position labels (the label of token t is predicted at position t);
  that is the point of those tasks (`tags` is encoder-only and labels every position too).
- Sequences of different lengths are right-padded with `<pad>` (targets `IGNORE` there), up to
  a batch width fixed by `length`, so `batch(1, ...)` and `batch(n, ...)` give the same first
  example for the same seed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
import torch

IGNORE = -100
ARCHS = ("encoder", "decoder", "encoder-decoder")
SPECIALS = ("<pad>", "<bos>", "<sep>", "<eos>")
DIGITS = tuple(str(d) for d in range(10))


class Vocab:
    """An ordered list of string tokens with the four shared specials first.

    Ids are list indices: `<pad>`=0, `<bos>`=1, `<sep>`=2, `<eos>`=3, then any task-specific
    specials (such as `<cls>`, `<mask>`), then the content tokens. Tokens contain no whitespace,
    so a typed string can be split on whitespace.
    """

    def __init__(self, content: Sequence[str], extra_specials: Sequence[str] = ()):
        tokens = [*SPECIALS, *extra_specials, *content]
        for tok in tokens:
            if not isinstance(tok, str) or not tok or tok.split() != [tok]:
                raise ValueError(f"vocab token {tok!r} must be a non-empty string without whitespace")
        if len(set(tokens)) != len(tokens):
            dupes = sorted({t for t in tokens if tokens.count(t) > 1})
            raise ValueError(f"vocab tokens must be unique; repeated: {dupes}")
        self.tokens: list[str] = tokens
        self._index = {tok: i for i, tok in enumerate(tokens)}
        self.pad_id, self.bos_id, self.sep_id, self.eos_id = range(len(SPECIALS))

    def __len__(self) -> int:
        return len(self.tokens)

    def __contains__(self, token: object) -> bool:
        return token in self._index

    def __repr__(self) -> str:
        return f"Vocab({len(self)} tokens: {' '.join(self.tokens)})"

    def _unknown_error(self, bad: Sequence[str]) -> ValueError:
        """A ValueError naming the unknown tokens and showing some allowed ones."""
        shown = self.tokens if len(self) <= 24 else [*self.tokens[:20], "..."]
        bad_list = ", ".join(repr(t) for t in dict.fromkeys(bad))
        return ValueError(f"unknown token(s) {bad_list}; allowed tokens: {' '.join(shown)}")

    def id(self, token: str) -> int:
        """The id of one token; ValueError if it is not in the vocabulary."""
        if token not in self._index:
            raise self._unknown_error([token])
        return self._index[token]

    def encode(self, text_or_tokens: str | Sequence[str]) -> list[int]:
        """Ids of a whitespace-separated string or a list of tokens.

        Raises ValueError listing every unknown token (so a student sees all typos at once).
        """
        tokens = text_or_tokens.split() if isinstance(text_or_tokens, str) else list(text_or_tokens)
        bad = [t for t in tokens if not isinstance(t, str) or t not in self._index]
        if bad:
            raise self._unknown_error([str(t) for t in bad])
        return [self._index[t] for t in tokens]

    def decode(self, ids: Sequence[int] | torch.Tensor | np.ndarray) -> list[str]:
        """Tokens of a 1-D sequence of ids (list, tensor or array)."""
        if isinstance(ids, (torch.Tensor, np.ndarray)):
            if ids.ndim != 1:
                raise ValueError(f"decode expects a 1-D sequence of ids, got shape {tuple(ids.shape)}")
            ids = ids.tolist()
        out = []
        for i in ids:
            if isinstance(i, bool) or not isinstance(i, (int, np.integer)) or not 0 <= i < len(self):
                raise ValueError(f"id {i!r} is not in 0..{len(self) - 1}")
            out.append(self.tokens[int(i)])
        return out


@dataclass
class Batch:
    """A batch of examples as id tensors, plus per-example ground truth for teaching.

    tokens:  [batch, pos] long. Encoder or decoder input; for encoder-decoder, the SOURCE.
    targets: [batch, pos_out] long, IGNORE where not scored. Decoder-only: already shifted
             (targets[t] is the token after tokens[t]); encoder: the label at each position;
             encoder-decoder: aligned to tgt (pos_out == tgt_pos).
    tgt:     [batch, tgt_pos] long decoder input for encoder-decoder (starts with <bos>), else None.
    meta:    one dict per example, e.g. agreement {"subject_pos", "attractor_pos", "verb_pos"}.
    """

    tokens: torch.Tensor
    targets: torch.Tensor
    tgt: torch.Tensor | None = None
    meta: list[dict] = field(default_factory=list)


# A formatted example: input tokens, targets written as tokens (None = not scored),
# decoder input for encoder-decoder (else None), and teaching metadata.
Formatted = tuple[list[str], list[str | None], list[str] | None, dict]


def _strip_pad(tokens: Sequence[str]) -> list[str]:
    """Drop trailing <pad> tokens; a <pad> anywhere else is a format error."""
    tokens = list(tokens)
    while tokens and tokens[-1] == "<pad>":
        tokens.pop()
    if "<pad>" in tokens:
        raise ValueError("<pad> may only appear at the end of the input")
    return tokens


class Task:
    """Base class: a sampler, a labelling rule and a scoring metric for one toy task.

    Subclasses set the class attributes and implement `_sample` (arch-independent content,
    drawn from a local numpy Generator), `_format` (content -> tokens/targets for one arch)
    and `label` (the task's rule applied to arbitrary typed tokens). Sampling content before
    formatting means the same seed gives the same content for every architecture.
    """

    name: str = ""
    title: str = ""
    description: str = ""  # one line a student understands
    vocab: Vocab
    archs: tuple[str, ...] = ()
    metric: str = "token"  # "token": share of scored positions right; "sequence": share of examples all right
    scored: str = ""  # one sentence: which positions are scored and how
    default_length: int = 8  # content length used in training
    min_length: int = 1  # shortest content length the sampler supports
    max_length: int = 32  # longest content length the sampler supports

    def __repr__(self) -> str:
        return f"<Task {self.name}: archs={self.archs}, vocab={len(self.vocab)}, metric={self.metric}>"

    # ---- validation -------------------------------------------------------------------
    def scored_for(self, arch: str) -> str:
        """Which positions are scored, said for one architecture (tasks whose rule differs per arch override)."""
        return getattr(self, "scored_by_arch", {}).get(arch, self.scored)

    def check_arch(self, arch: str) -> str:
        """Return arch if this task supports it, else raise a ValueError naming the options."""
        if arch not in self.archs:
            raise ValueError(f"task {self.name!r} supports arch in {self.archs}, got {arch!r}")
        return arch

    def check_length(self, length: int | None) -> int:
        """Resolve None to default_length and check min_length <= length <= max_length."""
        if length is None:
            return self.default_length
        if isinstance(length, bool) or not isinstance(length, (int, np.integer)):
            raise ValueError(f"length must be an int, got {length!r}")
        if not self.min_length <= length <= self.max_length:
            raise ValueError(
                f"task {self.name!r}: length must be in {self.min_length}..{self.max_length}, got {length}"
            )
        return int(length)

    # ---- sampling ---------------------------------------------------------------------
    def _sample(self, rng: np.random.Generator, length: int) -> dict:
        raise NotImplementedError

    def _format(self, sample: dict, arch: str, length: int) -> Formatted:
        raise NotImplementedError

    def batch(self, n: int, arch: str, seed: int, length: int | None = None) -> Batch:
        """n examples for `arch`, deterministic per (seed, length); example i does not depend on n."""
        self.check_arch(arch)
        length = self.check_length(length)
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise ValueError(f"n must be a positive int, got {n!r}")
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ValueError(f"seed must be a non-negative int, got {seed!r}")
        rng = np.random.default_rng(int(seed))
        rows = [self._format(self._sample(rng, length), arch, length) for _ in range(n)]
        ids = self.vocab.encode

        def target_ids(targets: list[str | None]) -> list[int]:
            return [IGNORE if t is None else self.vocab.id(t) for t in targets]

        tokens = torch.tensor([ids(r[0]) for r in rows], dtype=torch.long)  # [batch, pos]
        targets = torch.tensor([target_ids(r[1]) for r in rows], dtype=torch.long)  # [batch, pos_out]
        tgt = torch.tensor([ids(r[2]) for r in rows], dtype=torch.long) if arch == "encoder-decoder" else None
        return Batch(tokens=tokens, targets=targets, tgt=tgt, meta=[r[3] for r in rows])

    def example(self, arch: str, seed: int, length: int | None = None) -> list[str]:
        """One input as tokens (for encoder-decoder: the source), trailing <pad> removed.

        It is the first example of `batch(n, arch, seed, length)` for any n.
        """
        return _strip_pad(self.vocab.decode(self.batch(1, arch, seed, length).tokens[0]))

    # ---- labelling and scoring -----------------------------------------------------------
    def label(self, tokens: list[str], arch: str, tgt: list[str] | None = None) -> list[int]:
        """Targets (IGNORE where unscored) for an arbitrary valid input, by the task's rule."""
        raise NotImplementedError

    def _tokens(self, tokens: str | Sequence[str]) -> list[str]:
        """Typed input as a token list; unknown tokens raise ValueError (via Vocab.encode)."""
        tokens = tokens.split() if isinstance(tokens, str) else list(tokens)
        self.vocab.encode(tokens)
        return tokens

    def accuracy(self, logits: torch.Tensor, batch: Batch) -> float:
        """Accuracy per `self.metric` of argmax(logits) [batch, pos_out, vocab] against batch.targets.

        "token": correct scored positions / scored positions.
        "sequence": share of examples (with at least one scored position) whose scored
        positions are all correct. For decoders this is teacher-forced accuracy.
        """
        targets = batch.targets  # [batch, pos_out]
        if logits.ndim != 3 or tuple(logits.shape[:2]) != tuple(targets.shape):
            raise ValueError(
                f"logits must be [batch, pos_out, vocab] with [batch, pos_out] = {tuple(targets.shape)}, "
                f"got {tuple(logits.shape)}"
            )
        preds = logits.argmax(dim=-1).to(targets.device)  # [batch, pos_out]
        scored = targets != IGNORE  # [batch, pos_out]
        if not bool(scored.any()):
            raise ValueError("batch has no scored positions")
        right = (preds == targets) & scored  # [batch, pos_out]
        if self.metric == "token":
            return float(right.sum()) / float(scored.sum())
        has_scored = scored.any(dim=1)  # [batch]
        all_right = (right == scored).all(dim=1)  # [batch]
        return float(all_right[has_scored].float().mean())


# ---------------------------------------------------------------------------------------
# copy / reverse / sort
# ---------------------------------------------------------------------------------------
class TransformTask(Task):
    """Map a string of digits x1..xn to y1..yn = rule(x) (copy, reverse or sort).

    Formats (n = length, digits drawn uniformly with replacement, so sort sees duplicates):
    - decoder:          tokens `<bos> x1..xn <sep> y1..yn <eos>` (2n+3 positions); targets are
                        the next token at positions <sep>, y1..yn (i.e. y1..yn, <eos>), else IGNORE.
    - encoder:          tokens `x1..xn`; target at position i is y_i (sequence labelling).
    - encoder-decoder:  source `x1..xn`, tgt `<bos> y1..yn`, targets `y1..yn <eos>`.
    Metric "sequence": the answer is one object; a half-sorted list is not sorted.
    """

    archs = ("decoder", "encoder", "encoder-decoder")
    metric = "sequence"
    default_length = 8
    min_length = 1
    max_length = 32

    def __init__(self, name: str, title: str, description: str, rule: Callable[[list[str]], list[str]]):
        self.name, self.title, self.description = name, title, description
        self.rule = rule
        self.vocab = Vocab(DIGITS)
        self.scored_by_arch = {
            "decoder": "Every position from <sep> on predicts the next answer token, and finally <eos>.",
            "encoder": "Position i must output y_i, the answer's i-th token.",
            "encoder-decoder": "Every decoder position predicts the next answer token, then <eos>.",
        }
        whole = " An example counts as right only if all its scored positions are."
        self.scored_by_arch = {a: text + whole for a, text in self.scored_by_arch.items()}
        self.scored = " ".join(f"{a}: {t}" for a, t in self.scored_by_arch.items())

    def _sample(self, rng: np.random.Generator, length: int) -> dict:
        return {"x": [DIGITS[d] for d in rng.integers(0, 10, size=length)]}

    def _format(self, sample: dict, arch: str, length: int) -> Formatted:
        x = sample["x"]
        y = self.rule(x)
        meta = {"source": x, "answer": y}
        if arch == "decoder":
            tokens = ["<bos>", *x, "<sep>", *y, "<eos>"]
            targets = [None] * (length + 1) + [*y, "<eos>"] + [None]
            return tokens, targets, None, meta
        if arch == "encoder":
            return list(x), list(y), None, meta
        return list(x), [*y, "<eos>"], ["<bos>", *y], meta

    def _digits(self, x: list[str], where: str) -> list[str]:
        """Check that x is a non-empty digit string of allowed length."""
        if not x:
            raise ValueError(f"{where} is empty: type some digits, e.g. 3 1 4 1 5")
        bad = [t for t in x if t not in DIGITS]
        if bad:
            raise ValueError(f"{where} may only contain digits 0-9, found {' '.join(bad)}")
        if len(x) > self.max_length:
            raise ValueError(f"{where} has {len(x)} digits; at most {self.max_length}")
        return x

    def label(self, tokens: list[str], arch: str, tgt: list[str] | None = None) -> list[int]:
        """Targets by the rule. Decoder input may be a prompt `<bos> x.. <sep>` or longer:
        position <sep>+j is scored with answer token j (y1..yn then <eos>) whatever was typed
        after <sep> (teacher forcing); positions after <eos> are IGNORE.
        Encoder-decoder: tgt defaults to the correct `<bos> y1..yn`; labels align to tgt."""
        self.check_arch(arch)
        raw = self._tokens(tokens)
        tokens = _strip_pad(raw)
        out = [IGNORE] * len(raw)
        if arch == "decoder":
            if not tokens or tokens[0] != "<bos>":
                raise ValueError("decoder input must start with <bos>, e.g. <bos> 3 1 4 <sep>")
            if tokens.count("<sep>") != 1:
                raise ValueError("decoder input needs exactly one <sep> after the digits, e.g. <bos> 3 1 4 <sep>")
            sep = tokens.index("<sep>")
            x = self._digits(tokens[1:sep], "the part between <bos> and <sep>")
            after = tokens[sep + 1 :]
            if any(t not in DIGITS and t != "<eos>" for t in after):
                raise ValueError("after <sep> only digits and <eos> may follow")
            answer = [*self.rule(x), "<eos>"]
            for j in range(min(len(answer), len(tokens) - sep)):
                out[sep + j] = self.vocab.id(answer[j])
            return out
        x = self._digits(tokens, "the source" if arch == "encoder-decoder" else "the input")
        y = self.rule(x)
        if arch == "encoder":
            out[: len(y)] = [self.vocab.id(t) for t in y]
            return out
        tgt = ["<bos>", *y] if tgt is None else self._tokens(tgt)
        if not tgt or tgt[0] != "<bos>":
            raise ValueError("tgt (decoder input) must start with <bos>")
        answer = [*y, "<eos>"]
        return [self.vocab.id(answer[j]) if j < len(answer) else IGNORE for j in range(len(tgt))]


# ---------------------------------------------------------------------------------------
# induction
# ---------------------------------------------------------------------------------------
LETTERS = tuple("abcdefghijklmnopqrstuvwxyz") + tuple("ABCDEFGHIJKLMNOPQRSTUVWXYZ")


class InductionTask(Task):
    """A random sequence and its repeat: `<bos> r1..rk r1..rk`, decoder only.

    r1..rk are distinct letters (a-z, A-Z: 52 symbols), so within the repeat each token says
    exactly what comes next: "find my earlier copy, output the token after it". That is what an
    induction head does. The half length k varies per example, uniformly in
    [max(2, length // 2), length], so a fixed positional offset cannot solve it; rows are padded
    with <pad> to 1 + 2*length positions. meta: {"half": k, "second_start": k + 1}.
    """

    name = "induction"
    title = "Induction: continue a repeat"
    description = "A random string of letters is repeated; inside the repeat, predict the next letter from the first copy."
    archs = ("decoder",)
    metric = "token"
    scored = (
        "In the repeat, every position from the second r1 up to r(k-1) is scored on the next token "
        "(r2..rk); the first half, the last token and padding are not, since they are unpredictable."
    )
    default_length = 10
    min_length = 2
    max_length = len(LETTERS)  # 52 >= 4 * default_length: room to test extrapolation

    def __init__(self):
        self.vocab = Vocab(LETTERS)

    def _sample(self, rng: np.random.Generator, length: int) -> dict:
        k = int(rng.integers(max(2, length // 2), length + 1))
        return {"r": [LETTERS[i] for i in rng.permutation(len(LETTERS))[:k]]}

    def _format(self, sample: dict, arch: str, length: int) -> Formatted:
        r = sample["r"]
        k = len(r)
        tokens = ["<bos>", *r, *r] + ["<pad>"] * (2 * (length - k))
        targets: list[str | None] = [None] * len(tokens)
        for t in range(k + 1, 2 * k):  # second r1 .. second r(k-1)
            targets[t] = tokens[t + 1]
        return tokens, targets, None, {"half": k, "second_start": k + 1}

    def label(self, tokens: list[str], arch: str, tgt: list[str] | None = None) -> list[int]:
        """Accepts `<bos> r1..rk r1..rj` with 1 <= j <= k (a full or partial repeat) and distinct
        r's: the repeat starts at the second occurrence of r1. Each repeat position except a
        final rk is labelled with the next token of the copy (for a partial repeat, the last
        position is labelled with the not-yet-typed r(j+1))."""
        self.check_arch(arch)
        raw = self._tokens(tokens)
        tokens = _strip_pad(raw)
        fmt = "format: <bos> r1 .. rk r1 .. rj (distinct letters, then a repeat of them), e.g. <bos> a b c a b"
        if not tokens or tokens[0] != "<bos>":
            raise ValueError("input must start with <bos>; " + fmt)
        body = tokens[1:]
        if any(t not in LETTERS for t in body):
            raise ValueError("after <bos> only letters a-z, A-Z are allowed; " + fmt)
        if not body or body.count(body[0]) < 2:
            raise ValueError("no repeat found: type the first letter again to start the copy; " + fmt)
        k = body.index(body[0], 1)
        first, second = body[:k], body[k:]
        if len(set(first)) != k:
            raise ValueError("letters in the first half must be distinct, otherwise the copy is ambiguous; " + fmt)
        if len(second) > k or second != first[: len(second)]:
            raise ValueError("the part after the second r1 must repeat the first half; " + fmt)
        out = [IGNORE] * len(raw)
        for j in range(len(second)):  # second[j] sits at position 1 + k + j
            if j + 1 < k:
                out[1 + k + j] = self.vocab.id(first[j + 1])
        return out


# ---------------------------------------------------------------------------------------
# agreement
# ---------------------------------------------------------------------------------------
NOUNS = ("dog", "cat", "bird", "boy", "girl", "key", "car", "book")
PLURAL = {n: n + "s" for n in NOUNS}
SINGULAR = {p: n for n, p in PLURAL.items()}
PREPS = ("near", "behind", "with", "beside")
RC_VERBS = {"see": "sees", "like": "likes", "chase": "chases"}  # plural form -> singular form
ADJS = ("loud", "old", "red", "happy")


class AgreementTask(Task):
    """Subject-verb number agreement across distractors, encoder only.

    Grammar (positions from 0):  the N1 MOD* <mask> ADJ
      MOD = PREP the N       ("the dog near the cats <mask> loud")
          | that the N V     ("the dog that the cats chase <mask> loud"; V agrees with its own N)
    The target at <mask> is "is" if N1 is singular, "are" if plural; all else IGNORE. Every
    noun's number is drawn independently, so the noun nearest the verb (the attractor) has the
    opposite number half the time and carries no information: only the subject at position 1
    does. `length` is the padded row width (the longest sentence allowed): at 8 a sentence has
    0 or 1 modifier; longer widths allow stacked modifiers. meta: subject_pos (always 1),
    attractor_pos (last noun before <mask>, None without modifiers), verb_pos, numbers, template.
    """

    name = "agreement"
    title = "Agreement: find the subject"
    description = "Fill the <mask> with is/are so it agrees with the subject, not with the nearer noun in between."
    archs = ("encoder",)
    metric = "token"
    scored = "Only the <mask> (verb) position is scored: it must be 'is' for a singular subject, 'are' for a plural one."
    default_length = 8  # "the N that the N V <mask> ADJ"
    min_length = 8
    max_length = 20

    def __init__(self):
        content = ["the", "that", *NOUNS, *PLURAL.values(), *PREPS, *RC_VERBS, *RC_VERBS.values(), *ADJS, "is", "are"]
        self.vocab = Vocab(content, extra_specials=("<mask>",))

    @staticmethod
    def _noun(rng: np.random.Generator) -> tuple[str, bool]:
        """A random noun and whether it is plural."""
        noun, plural = NOUNS[int(rng.integers(len(NOUNS)))], bool(rng.integers(2))
        return (PLURAL[noun] if plural else noun), plural

    def _sample(self, rng: np.random.Generator, length: int) -> dict:
        budget = length - 4  # "the N1 <mask> ADJ" is 4 tokens; modifiers: PP 3, RC 4
        n_mods = 0 if rng.random() < 0.2 else int(rng.integers(1, budget // 3 + 1))
        words = ["the"]
        subject, subject_plural = self._noun(rng)
        words.append(subject)
        kinds, attractor_pos, attractor_plural = [], None, None
        for i in range(n_mods):
            room = budget - (len(words) - 2) - 3 * (n_mods - i - 1)  # keep 3 per later modifier
            kind = "rc" if room >= 4 and rng.random() < 0.5 else "pp"
            noun, plural = self._noun(rng)
            attractor_pos, attractor_plural = len(words) + 2, plural  # "PREP the N" / "that the N V"
            if kind == "pp":
                words += [PREPS[int(rng.integers(len(PREPS)))], "the", noun]
            else:
                plural_verb = list(RC_VERBS)[int(rng.integers(len(RC_VERBS)))]
                words += ["that", "the", noun, plural_verb if plural else RC_VERBS[plural_verb]]
            kinds.append(kind)
        verb_pos = len(words)
        words += ["<mask>", ADJS[int(rng.integers(len(ADJS)))]]
        return {
            "words": words,
            "meta": {
                "subject_pos": 1,
                "attractor_pos": attractor_pos,
                "verb_pos": verb_pos,
                "subject_plural": subject_plural,
                "attractor_plural": attractor_plural,
                "template": "+".join(kinds) or "simple",
            },
        }

    def _format(self, sample: dict, arch: str, length: int) -> Formatted:
        words, meta = sample["words"], sample["meta"]
        targets: list[str | None] = [None] * length
        targets[meta["verb_pos"]] = "are" if meta["subject_plural"] else "is"
        return words + ["<pad>"] * (length - len(words)), targets, None, dict(meta)

    @staticmethod
    def _is_plural(noun: str, pos: int) -> bool:
        """Number of a noun token; ValueError if the token is not a noun."""
        if noun in PLURAL:
            return False
        if noun in SINGULAR:
            return True
        raise ValueError(f"position {pos}: expected a noun ({' '.join(NOUNS)} or plurals), got {noun!r}")

    def label(self, tokens: list[str], arch: str, tgt: list[str] | None = None) -> list[int]:
        """Parse `the N1 MOD* <mask> ADJ` (MOD = PREP the N | that the N V) and label the
        <mask> with is/are by the number of N1. Raises ValueError naming the first misfit."""
        self.check_arch(arch)
        raw = self._tokens(tokens)
        w = _strip_pad(raw)
        fmt = "format: the NOUN [PREP the NOUN | that the NOUN VERB]... <mask> ADJ, e.g. the dog near the cats <mask> loud"

        def expect(i: int, allowed: Sequence[str], what: str) -> str:
            if i >= len(w) or w[i] not in allowed:
                got = repr(w[i]) if i < len(w) else "the end"
                raise ValueError(f"position {i}: expected {what}, got {got}; {fmt}")
            return w[i]

        nouns = [*NOUNS, *SINGULAR]
        expect(0, ["the"], "'the'")
        subject_plural = self._is_plural(expect(1, nouns, "the subject noun"), 1)
        i = 2
        while i < len(w) and w[i] != "<mask>":
            if w[i] in PREPS:
                expect(i + 1, ["the"], "'the'")
                expect(i + 2, nouns, "a noun")
                i += 3
            elif w[i] == "that":
                expect(i + 1, ["the"], "'the'")
                plural = self._is_plural(expect(i + 2, nouns, "a noun"), i + 2)
                verbs = list(RC_VERBS) if plural else list(RC_VERBS.values())
                expect(i + 3, verbs, f"a verb agreeing with {w[i + 2]!r} ({' / '.join(verbs)})")
                i += 4
            else:
                expect(i, [*PREPS, "that", "<mask>"], "a preposition, 'that' or <mask>")
        expect(i, ["<mask>"], "<mask>")
        expect(i + 1, ADJS, f"an adjective ({' '.join(ADJS)})")
        if len(w) != i + 2:
            raise ValueError(f"position {i + 2}: nothing may follow the adjective; {fmt}")
        out = [IGNORE] * len(raw)
        out[i] = self.vocab.id("are" if subject_plural else "is")
        return out


# ---------------------------------------------------------------------------------------
# brackets
# ---------------------------------------------------------------------------------------
OPEN_OF = {")": "(", "]": "["}


def _match_pairs(s: Sequence[str]) -> list[tuple[int, int]] | None:
    """Matching (open, close) index pairs if s is a balanced ( ) [ ] string, else None."""
    stack, pairs = [], []
    for i, c in enumerate(s):
        if c in ("(", "["):
            stack.append(i)
        elif not stack or s[stack[-1]] != OPEN_OF[c]:
            return None
        else:
            pairs.append((stack.pop(), i))
    return None if stack else sorted(pairs)


class BracketsTask(Task):
    """Is a string of ( ) [ ] balanced? Encoder classification.

    tokens `<cls> b1..bn` (n = length, even); the target at position 0 is "yes" or "no", all
    else IGNORE. Half the examples are balanced. Of the unbalanced ones 80% are hard
    negatives: a balanced string with two different brackets swapped, so every bracket count
    is still right and only the order is wrong (e.g. "( [ ) ]"); 20% are random strings.
    meta: {"balanced", "kind" ("balanced" | "swap" | "random"), "pairs" (matching token
    positions, balanced only), "max_depth"}.
    """

    name = "brackets"
    title = "Brackets: balanced or not"
    description = "Read a string of ( ) [ ] and answer yes if every bracket is closed by its partner in the right order."
    archs = ("encoder",)
    metric = "token"
    scored = "Only position 0 (<cls>) is scored: it must say yes for a balanced string, no otherwise."
    default_length = 8
    min_length = 2
    max_length = 32

    def __init__(self):
        self.vocab = Vocab(["(", ")", "[", "]", "yes", "no"], extra_specials=("<cls>",))

    def check_length(self, length: int | None) -> int:
        """As Task.check_length, and the length must be even (odd strings are never balanced)."""
        length = super().check_length(length)
        if length % 2:
            raise ValueError(f"task 'brackets': length must be even, got {length}")
        return length

    @staticmethod
    def _balanced(rng: np.random.Generator, n: int) -> list[str]:
        """A random balanced string of n brackets (random walk that always can close in time)."""
        out, stack = [], []
        for i in range(n):
            left = n - i
            if stack and (len(stack) == left or rng.random() < 0.5):
                out.append(")" if stack.pop() == "(" else "]")
            else:
                stack.append("([" [int(rng.integers(2))])
                out.append(stack[-1])
        return out

    def _sample(self, rng: np.random.Generator, length: int) -> dict:
        s = self._balanced(rng, length)
        kind = "balanced"
        if rng.random() < 0.5:
            if rng.random() < 0.8:
                kind = "swap"
                for _ in range(20):
                    i, j = (int(v) for v in rng.integers(length, size=2))
                    t = list(s)
                    t[i], t[j] = t[j], t[i]
                    if _match_pairs(t) is None:
                        break
                else:  # a string starting with its last (closing) bracket is never balanced
                    t = list(s)
                    t[0], t[-1] = t[-1], t[0]
                s = t
            else:
                kind = "random"
                while _match_pairs(s) is not None:
                    s = [")([]"[int(v)] for v in rng.integers(4, size=length)]
        pairs = _match_pairs(s)
        depth, max_depth = 0, 0
        for c in s:
            depth += 1 if c in "([" else -1
            max_depth = max(max_depth, depth)
        return {"s": s, "kind": kind, "pairs": pairs, "max_depth": max_depth}

    def _format(self, sample: dict, arch: str, length: int) -> Formatted:
        s, pairs = sample["s"], sample["pairs"]
        targets: list[str | None] = ["yes" if pairs is not None else "no"] + [None] * length
        meta = {
            "balanced": pairs is not None,
            "kind": sample["kind"],
            "pairs": None if pairs is None else [(a + 1, b + 1) for a, b in pairs],  # token positions
            "max_depth": sample["max_depth"],
        }
        return ["<cls>", *s], targets, None, meta

    def label(self, tokens: list[str], arch: str, tgt: list[str] | None = None) -> list[int]:
        """`<cls>` then brackets (any length, may be empty): position 0 gets yes/no."""
        self.check_arch(arch)
        raw = self._tokens(tokens)
        tokens = _strip_pad(raw)
        if not tokens or tokens[0] != "<cls>":
            raise ValueError("input must start with <cls>, e.g. <cls> ( [ ] )")
        bad = [t for t in tokens[1:] if t not in ("(", ")", "[", "]")]
        if bad:
            raise ValueError(f"after <cls> only ( ) [ ] are allowed, found {' '.join(bad)}")
        out = [IGNORE] * len(raw)
        out[0] = self.vocab.id("yes" if _match_pairs(tokens[1:]) is not None else "no")
        return out


# ---------------------------------------------------------------------------------------
# future-legality
# ---------------------------------------------------------------------------------------
RULES = {"even": 0, "odd": 1}


class FutureLegalityTask(Task):
    """Whether each digit is legal depends on a rule that comes AFTER it.

    tokens `<bos> d1..dn RULE` with digits uniform in 0-9 and RULE uniform in {even, odd}; the
    target at the position of d_i is "ok" if d_i has the rule's parity, else "bad"; <bos> and
    RULE are IGNORE. Encoder and decoder get the same tokens and the same (unshifted) targets:
    position i is asked about its own token. Since the rule is independent of the digits, any
    predictor that sees only d1..di (a causal decoder) is right exactly half the time in
    expectation; a bidirectional encoder can read the rule and reach 100%.
    meta: {"rule": "even" | "odd", "rule_pos": n + 1}.
    """

    name = "future-legality"
    title = "Future legality: the rule comes last"
    description = (
        "Mark each digit ok or bad by a rule (even/odd) given only at the END: an encoder can look ahead "
        "and learns it; a causal decoder cannot see the rule and stays at 50% chance. That is the lesson."
    )
    archs = ("encoder", "decoder")
    metric = "token"
    scored = "Every digit position is scored on its own label (ok/bad, not the next token); <bos> and the rule are not."
    default_length = 8
    min_length = 1
    max_length = 64

    def __init__(self):
        self.vocab = Vocab([*DIGITS, *RULES, "ok", "bad"])

    def _sample(self, rng: np.random.Generator, length: int) -> dict:
        digits = [DIGITS[d] for d in rng.integers(0, 10, size=length)]
        return {"digits": digits, "rule": list(RULES)[int(rng.integers(2))]}

    @staticmethod
    def _verdicts(digits: Sequence[str], rule: str) -> list[str]:
        """ok/bad for each digit under the rule."""
        return ["ok" if int(d) % 2 == RULES[rule] else "bad" for d in digits]

    def _format(self, sample: dict, arch: str, length: int) -> Formatted:
        digits, rule = sample["digits"], sample["rule"]
        tokens = ["<bos>", *digits, rule]
        targets = [None, *self._verdicts(digits, rule), None]
        return tokens, targets, None, {"rule": rule, "rule_pos": length + 1}

    def label(self, tokens: list[str], arch: str, tgt: list[str] | None = None) -> list[int]:
        """`<bos> d1..dn RULE` (n >= 1): each digit gets ok/bad by the final rule."""
        self.check_arch(arch)
        raw = self._tokens(tokens)
        tokens = _strip_pad(raw)
        fmt = "format: <bos> DIGITS... even|odd, e.g. <bos> 3 8 5 2 odd"
        if len(tokens) < 3 or tokens[0] != "<bos>":
            raise ValueError("input must be <bos>, at least one digit, then a rule; " + fmt)
        if tokens[-1] not in RULES:
            raise ValueError(f"the last token must be the rule (even or odd), got {tokens[-1]!r}; " + fmt)
        digits = tokens[1:-1]
        bad = [t for t in digits if t not in DIGITS]
        if bad:
            raise ValueError(f"between <bos> and the rule only digits are allowed, found {' '.join(bad)}; " + fmt)
        out = [IGNORE] * len(raw)
        out[1 : 1 + len(digits)] = [self.vocab.id(v) for v in self._verdicts(digits, tokens[-1])]
        return out


# ---------------------------------------------------------------------------------------
# two lookups (the Heads page's two-head toy; not in TASKS, see the class docstring)
# ---------------------------------------------------------------------------------------
class TwoLookupTask(Task):
    """Memory items are letter-digit pairs (a3 c1 d2); a query `b1?` asks two questions at once.

    Its answer is a pair too: the LETTER of the memory item that has the query's digit, and the
    DIGIT of the memory item that has the query's letter. With memory `a3 c1 d2` the query `a1?`
    answers `c3` (digit 1 belongs to c, letter a holds 3). The query's letter and digit always
    come from two different memory items, so the two lookups never land on the same item.
    Format (decoder): n memory items, then n queries; each query position is scored.

    It is deliberately left out of TASKS (the Train page offers every registered task): it exists
    for the two-head toy of the Heads page (core.analysis.heads.toy), which builds it directly.
    """

    name = "two-lookups"
    title = "Two lookups"
    description = "Answer with the letter of the item sharing my digit and the digit of the item sharing my letter."
    archs = ("decoder",)
    metric = "token"
    scored = "Every query position (a token ending in ?) is scored on its answer pair."
    default_length = 3
    min_length = 2
    max_length = 4
    letters = ("a", "b", "c", "d")
    digits = ("1", "2", "3", "4")

    def __init__(self):
        memory = [l + d for l in self.letters for d in self.digits]
        self.vocab = Vocab(memory + [m + "?" for m in memory])

    def _sample(self, rng: np.random.Generator, length: int) -> dict:
        """Memory: `length` pairs with distinct letters and digits; queries mix two different items."""
        letters = [int(x) for x in rng.permutation(len(self.letters))[:length]]
        digits = [int(x) for x in rng.permutation(len(self.digits))[:length]]
        queries = []
        for _ in range(length):
            i, j = (int(x) for x in rng.permutation(length)[:2])  # two different memory items
            queries.append((letters[i], digits[j]))
        return {"memory": list(zip(letters, digits)), "queries": queries}

    def _format(self, sample: dict, arch: str, length: int) -> Formatted:
        """Tokens `m1..mn q1?..qn?`; each query is scored on its answer pair."""
        memory, queries = sample["memory"], sample["queries"]
        digit_of = {l: d for l, d in memory}
        letter_of = {d: l for l, d in memory}
        tokens = [self.letters[l] + self.digits[d] for l, d in memory]
        tokens += [self.letters[l] + self.digits[d] + "?" for l, d in queries]
        targets: list = [None] * length
        targets += [self.letters[letter_of[d]] + self.digits[digit_of[l]] for l, d in queries]
        return tokens, targets, None, {"memory": memory, "queries": queries}

    def label(self, tokens: list[str], arch: str, tgt: list[str] | None = None) -> list[int]:
        """Targets for typed input: memory items first, then queries whose letter and digit occur in memory."""
        self.check_arch(arch)
        tokens = self._tokens(tokens)
        memory = [t for t in tokens if not t.endswith("?")]
        n = len(memory)
        if tokens[:n] != memory:
            raise ValueError("memory items (like a3) must all come before the queries (like b1?)")
        digit_of = {t[0]: t[1] for t in memory}
        letter_of = {t[1]: t[0] for t in memory}
        if len(digit_of) != n or len(letter_of) != n:
            raise ValueError("memory items must use each letter and each digit at most once")
        out = [IGNORE] * len(tokens)
        for p in range(n, len(tokens)):
            letter, digit = tokens[p][0], tokens[p][1]
            if letter not in digit_of or digit not in letter_of:
                raise ValueError(f"query {tokens[p]} asks about a letter or digit that is not in memory")
            out[p] = self.vocab.id(letter_of[digit] + digit_of[letter])
        return out


class PeekingTransformTask(TransformTask):
    """A transform task whose encoder also reads the answer: the leakage case study of the
    Generation page. The source is `x1..xn <sep> y1..yn`; the decoder input and targets are as in
    the plain task. A model trained on it can copy y from the bidirectional encoder instead of
    learning the rule, and fails once the answer is hidden (`hide_answer`).
    """

    archs = ("encoder-decoder",)

    def __init__(self, name: str, title: str, description: str, rule: Callable[[list[str]], list[str]]):
        super().__init__(name, title, description, rule)
        self.scored_by_arch = {"encoder-decoder": "Every decoder position predicts the next answer token, then "
                                                  "<eos>; the source carries the answer after <sep>. An example "
                                                  "counts as right only if all its scored positions are."}
        self.scored = self.scored_by_arch["encoder-decoder"]

    def _format(self, sample: dict, arch: str, length: int) -> Formatted:
        source, targets, tgt, meta = super()._format(sample, arch, length)
        return [*source, "<sep>", *meta["answer"]], targets, tgt, meta

    def label(self, tokens: list[str], arch: str, tgt: list[str] | None = None) -> list[int]:
        """Targets by the rule applied to the digits before <sep> (what follows <sep> is the peek)."""
        self.check_arch(arch)
        tokens = _strip_pad(self._tokens(tokens))
        if tokens.count("<sep>") != 1:
            raise ValueError("the source needs exactly one <sep> between the digits and the answer, e.g. 3 1 4 <sep> 4 1 3")
        x = tokens[: tokens.index("<sep>")]
        return super().label(x, arch, tgt)

    def hide_answer(self, source: torch.Tensor) -> torch.Tensor:
        """The source ids `[batch pos]` with every token after <sep> replaced by <pad> (the fix: the
        encoder no longer sees the answer)."""
        after = (source == self.vocab.sep_id).long().cumsum(dim=1) > 0  # [batch pos], <sep> and after
        after &= source != self.vocab.sep_id
        return source.masked_fill(after, self.vocab.pad_id)


# ---------------------------------------------------------------------------------------
# key-value recall (the Retrieval page's task)
# ---------------------------------------------------------------------------------------
RECALL_KEYS = tuple("abcdefgh")


class RecallTask(Task):
    """A small dictionary, then a question: `a 3 c 7 b 1 <sep> c 7`, decoder only.

    The memory is n letter-digit pairs with distinct letters (a-h; digits 0-9, repeats
    allowed); after `<sep>` comes one of the memory's letters, and the model must answer its
    digit. Only the query letter's position is scored (its next token is the answer). Solving it
    means addressing by the letter and copying the digit: keys address, values carry content.
    meta: {"pairs": [(letter, digit), ...], "query": letter, "slot": index of the queried pair}.
    """

    name = "recall"
    title = "Key-value recall"
    description = "Letter-digit pairs, then a letter: answer the digit that was stored with it."
    archs = ("decoder",)
    metric = "token"
    scored = "Only the query letter after <sep> is scored: its next token must be the digit stored with it."
    default_length = 5
    min_length = 1
    max_length = len(RECALL_KEYS)

    def __init__(self):
        self.vocab = Vocab([*RECALL_KEYS, *DIGITS])

    def _sample(self, rng: np.random.Generator, length: int) -> dict:
        letters = [RECALL_KEYS[int(i)] for i in rng.permutation(len(RECALL_KEYS))[:length]]
        digits = [DIGITS[int(d)] for d in rng.integers(0, 10, size=length)]
        slot = int(rng.integers(0, length))
        return {"pairs": list(zip(letters, digits)), "query": letters[slot], "slot": slot}

    def _format(self, sample: dict, arch: str, length: int) -> Formatted:
        """Tokens `l1 d1 .. ln dn <sep> q a` (2n+3 positions); the target at q is a."""
        pairs, query = sample["pairs"], sample["query"]
        answer = dict(pairs)[query]
        tokens = [tok for pair in pairs for tok in pair] + ["<sep>", query, answer]
        targets: list = [None] * (2 * length + 1) + [answer, None]
        return tokens, targets, None, dict(sample)

    def label(self, tokens: list[str], arch: str, tgt: list[str] | None = None) -> list[int]:
        """Targets for typed input `l1 d1 .. ln dn <sep> q [a]`: the query scores its letter's digit."""
        self.check_arch(arch)
        tokens = _strip_pad(self._tokens(tokens))
        if "<sep>" not in tokens:
            raise ValueError("recall input needs <sep> between the pairs and the query letter")
        sep = tokens.index("<sep>")
        memory, rest = tokens[:sep], tokens[sep + 1:]
        if not memory or len(memory) % 2:
            raise ValueError("before <sep> come letter-digit pairs, like a 3 c 7")
        letters, digits = memory[0::2], memory[1::2]
        if any(l not in RECALL_KEYS for l in letters) or any(d not in DIGITS for d in digits):
            raise ValueError("before <sep> come letter-digit pairs, like a 3 c 7 (letters a-h, digits 0-9)")
        if len(set(letters)) != len(letters):
            raise ValueError("each letter may be stored only once")
        if not 1 <= len(rest) <= 2 or rest[0] not in letters:
            raise ValueError("after <sep> comes one stored letter (and optionally its digit)")
        out = [IGNORE] * len(tokens)
        out[sep + 1] = self.vocab.id(dict(zip(letters, digits))[rest[0]])
        return out


# ---------------------------------------------------------------------------------------
# registry
# ---------------------------------------------------------------------------------------
# ---------------------------------------------------------------------------------------
# local peaks: a time series whose every reading is judged by its neighbours on both sides
# ---------------------------------------------------------------------------------------
class PeaksTask(Task):
    """Is each reading of a series a local peak? That depends on the NEXT reading, a later one.

    tokens `<bos> r1..rn` with readings uniform in 0-9; the target at r_i is "peak" when r_i is
    higher than each neighbour it has (r_{i-1} and r_{i+1}), else "not"; <bos> is IGNORE. Encoder and
    decoder get the same tokens and per-position targets, as in future-legality. A causal decoder at
    r_i has not seen r_{i+1}: its best is to guess from r_i alone (`causal_ceiling`); a bidirectional
    encoder reads both sides and can be right every time. The principles text's "a state that attends
    to its future", as a time series. meta: {"peaks": positions of the peaks in tokens}.
    """

    name = "peaks"
    title = "Local peaks: readings higher than both neighbours"
    description = (
        "Mark each reading of a series of digits peak or not: a peak is higher than the readings on both sides. "
        "An encoder sees the next reading; a causal decoder must guess it."
    )
    archs = ("encoder", "decoder")
    metric = "token"
    scored = "Every reading is scored on its own label (peak/not, not the next token); <bos> is not."
    default_length = 8
    min_length = 2
    max_length = 64
    LABELS = ("peak", "not")

    def __init__(self):
        self.vocab = Vocab([*DIGITS, *self.LABELS])

    def _sample(self, rng: np.random.Generator, length: int) -> dict:
        return {"readings": [DIGITS[d] for d in rng.integers(0, 10, size=length)]}

    @staticmethod
    def verdicts(readings: Sequence[str]) -> list[str]:
        """peak/not for each reading: higher than each neighbour it has."""
        r = [int(x) for x in readings]
        out = []
        for i, x in enumerate(r):
            left = i == 0 or x > r[i - 1]
            right = i == len(r) - 1 or x > r[i + 1]
            out.append("peak" if left and right else "not")
        return out

    def _format(self, sample: dict, arch: str, length: int) -> Formatted:
        readings = sample["readings"]
        labels = self.verdicts(readings)
        return (["<bos>", *readings], [None, *labels], None,
                {"peaks": [i + 1 for i, v in enumerate(labels) if v == "peak"]})

    def label(self, tokens: list[str], arch: str, tgt: list[str] | None = None) -> list[int]:
        """`<bos> r1..rn` (n >= 2): each reading gets peak/not by its neighbours."""
        self.check_arch(arch)
        raw = self._tokens(tokens)
        tokens = _strip_pad(raw)
        fmt = "format: <bos> then at least two readings (digits), e.g. <bos> 3 8 5 2 7"
        if len(tokens) < 3 or tokens[0] != "<bos>":
            raise ValueError("input must be <bos> then at least two readings; " + fmt)
        bad = [t for t in tokens[1:] if t not in DIGITS]
        if bad:
            raise ValueError(f"after <bos> only digits are allowed, found {' '.join(bad)}; " + fmt)
        out = [IGNORE] * len(raw)
        out[1:len(tokens)] = [self.vocab.id(v) for v in self.verdicts(tokens[1:])]
        return out

    @staticmethod
    def causal_ceiling(length: int) -> float:
        """The best expected accuracy of any predictor that sees r_1..r_i only, at this length (exact).

        At r_i (i < n) after r_{i-1}: if r_i is not above r_{i-1} it is surely "not"; otherwise it is a
        peak with probability r_i / 10 (the chance that the unseen r_{i+1} is lower), and the best guess
        is right with probability max(r_i / 10, 1 - r_i / 10). The last reading has no future: certain."""
        def best(x: int) -> float:
            return max(x / 10, 1 - x / 10)

        first = np.mean([best(x) for x in range(10)])  # no left neighbour
        inner = np.mean([best(x) if x > left else 1.0 for left in range(10) for x in range(10)])
        if length == 1:
            return 1.0
        return float((first + (length - 2) * inner + 1.0) / length)


# ---------------------------------------------------------------------------------------
# tags: sequence labelling, each word tagged noun / verb / other by a tiny grammar
# ---------------------------------------------------------------------------------------
TAG_WORDS = {
    "DET": ("the", "a"),
    "ADJ": ("big", "red", "old"),
    "NOUN": ("cat", "dog", "bird", "man"),
    "VERB": ("sees", "likes", "chases"),
    "BOTH": ("fish", "watch", "saw"),  # a noun after the/a/adjective, a verb after a noun phrase
    "AND": ("and",),
}
TAGS = ("NOUN", "VERB", "OTHER")


class TagsTask(Task):
    """Tag every word of a sentence NOUN, VERB or OTHER: sequence labelling, as in part-of-speech tagging.

    tokens `<bos> w1..wn`: clauses `the (big) cat sees a (red) dog` joined by `and`, cut to n words.
    Most words have one tag; `fish`, `watch` and `saw` are a noun after a determiner or adjective and a
    verb after a noun, so they can only be tagged from their context. The target at each word is its
    tag (a label per position, as in future-legality); <bos> is IGNORE. Encoder only: the task the
    source texts call "understanding" (named-entity recognition, tagging), beside the classifiers.
    meta: {"ambiguous": positions of fish/watch/saw in tokens}.
    """

    name = "tags"
    title = "Tags: noun, verb or other, word by word"
    description = (
        "Tag every word of a tiny-grammar sentence NOUN, VERB or OTHER. 'fish', 'watch' and 'saw' can be either: "
        "only their neighbours say which."
    )
    archs = ("encoder",)
    metric = "token"
    scored = "Every word is scored on its own tag (NOUN, VERB or OTHER); <bos> is not."
    default_length = 10
    min_length = 2
    max_length = 48

    def __init__(self):
        words = [w for group in TAG_WORDS.values() for w in group]
        self.vocab = Vocab([*words, *TAGS])

    def _noun_phrase(self, rng: np.random.Generator) -> list[str]:
        words = [str(rng.choice(TAG_WORDS["DET"]))]
        if rng.random() < 0.5:
            words.append(str(rng.choice(TAG_WORDS["ADJ"])))
        nouns = TAG_WORDS["NOUN"] + TAG_WORDS["BOTH"]
        return words + [str(rng.choice(nouns))]

    def _sample(self, rng: np.random.Generator, length: int) -> dict:
        words: list[str] = []
        while len(words) < length:
            if words:
                words.append("and")
            verb = str(rng.choice(TAG_WORDS["VERB"] + TAG_WORDS["BOTH"]))
            words += self._noun_phrase(rng) + [verb] + self._noun_phrase(rng)
        return {"words": words[:length]}

    @staticmethod
    def tags(words: Sequence[str]) -> list[str]:
        """Each word's tag by the grammar; ValueError where an ambiguous word has no context that decides it."""
        out: list[str] = []
        for i, w in enumerate(words):
            if w in TAG_WORDS["NOUN"]:
                out.append("NOUN")
            elif w in TAG_WORDS["VERB"]:
                out.append("VERB")
            elif w in TAG_WORDS["BOTH"]:
                before = words[i - 1] if i else None
                if before in TAG_WORDS["DET"] + TAG_WORDS["ADJ"]:
                    out.append("NOUN")
                elif i and out[-1] == "NOUN":
                    out.append("VERB")
                else:
                    raise ValueError(f"{w!r} at word {i + 1} is a noun after the/a or an adjective and a verb "
                                     "after a noun; here it follows neither")
            elif w in TAG_WORDS["DET"] + TAG_WORDS["ADJ"] + TAG_WORDS["AND"]:
                out.append("OTHER")
            else:
                raise ValueError(f"{w!r} is not a word of the grammar (a tag cannot be tagged)")
        return out

    def _format(self, sample: dict, arch: str, length: int) -> Formatted:
        words = sample["words"]
        return (["<bos>", *words], [None, *self.tags(words)], None,
                {"ambiguous": [i + 1 for i, w in enumerate(words) if w in TAG_WORDS["BOTH"]]})

    def label(self, tokens: list[str], arch: str, tgt: list[str] | None = None) -> list[int]:
        """`<bos> w1..wn`: each word gets its tag by the grammar."""
        self.check_arch(arch)
        raw = self._tokens(tokens)
        tokens = _strip_pad(raw)
        if len(tokens) < 2 or tokens[0] != "<bos>":
            raise ValueError("input must be <bos> then words, e.g. <bos> the big dog sees a fish")
        out = [IGNORE] * len(raw)
        out[1:len(tokens)] = [self.vocab.id(t) for t in self.tags(tokens[1:])]
        return out


def _reversed(x: list[str]) -> list[str]:
    """The reverse rule (a named function, so tasks hold no lambdas)."""
    return x[::-1]


def _build_tasks() -> dict[str, Task]:
    """One instance of every task, keyed by name (insertion order = menu order)."""
    tasks: list[Task] = [
        TransformTask("copy", "Copy", "Write the digits again, in the same order.", list),
        TransformTask("reverse", "Reverse", "Write the digits again, back to front.", _reversed),
        TransformTask("sort", "Sort", "Write the digits again, smallest first.", sorted),
        InductionTask(),
        AgreementTask(),
        BracketsTask(),
        FutureLegalityTask(),
        PeaksTask(),
        TagsTask(),
        RecallTask(),
        PeekingTransformTask("sort-peek", "Sort, answer visible to the encoder",
                             "Sort the digits; the encoder is also shown the answer (a leak).", sorted),
    ]
    return {t.name: t for t in tasks}


TASKS: dict[str, Task] = _build_tasks()


def get_task(name: str) -> Task:
    """The registered task called `name`; ValueError listing the valid names otherwise."""
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; valid tasks: {', '.join(TASKS)}")
    return TASKS[name]
