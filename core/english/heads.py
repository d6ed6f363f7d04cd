"""Which decoder heads act as previous-token and induction heads, measured as the app measures them.

Two probes, both scored by core.analysis.heads.roles: the Heads page's own (random tokens repeated,
`role_scores` on the model's text vocabulary) and English sentences repeated once after
<|endoftext|>, where an induction head at the second copy looks at the token after the first copy of
the current one. A role counts as found when some head puts at least FOUND of its attention there.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from core.analysis.attention import DECODER_SELF, ENCODER_SELF
from core.analysis.heads.roles import induction_score, previous_token_score, role_scores
from core.model import Transformer
from core.pretrained import Tokenizer
from core.text_task import EXAMPLES, TextVocab

FOUND = 0.4  # share of a head's attention on the role's position that counts as "this head does it"
SENTENCES = EXAMPLES[:8]


def _best(table: np.ndarray) -> dict:
    """The strongest head of a [layer head] table: {"layer", "head", "score"}."""
    layer, head = np.unravel_index(int(np.nanargmax(table)), table.shape)
    return {"layer": int(layer), "head": int(head), "score": round(float(table[layer, head]), 4)}


def repeated_sentence_scores(model: Transformer, tokenizer: Tokenizer, sentences: Sequence[str] = SENTENCES,
                             start_id: int | None = None) -> dict[str, np.ndarray]:
    """Previous-token and induction scores `[layer head]`, averaged over sentences each repeated once."""
    names = [f"blocks.{i}.attn.hook_pattern" for i in range(model.cfg.n_layers)]
    prev, ind = [], []
    for sentence in sentences:
        ids = tokenizer.encode(sentence)  # the decoder's tokenizer adds nothing around the text
        ids = ids[:(model.cfg.max_len - 1) // 2]  # both copies fit the learned position table
        tokens = ([start_id] if start_id is not None else []) + ids + ids
        _, cache = model.run_with_cache(torch.tensor([tokens], device=model.device), names)
        pats = [cache[n].float().cpu().numpy() for n in names]  # [batch head q k] each
        side = np.array([tokens])
        prev.append([previous_token_score(p) for p in pats])
        ind.append([induction_score(p, side) for p in pats])
    return {"previous token": np.mean(prev, axis=0), "induction": np.mean(ind, axis=0)}  # [layer head]


def decoder_roles(model: Transformer, tokenizer: Tokenizer) -> dict:
    """The best previous-token and induction heads on both probes, with chance levels, and whether found."""
    probe = role_scores(model, DECODER_SELF, TextVocab(tokenizer, model.cfg.vocab_size), n=32, seed=0)
    sentence = repeated_sentence_scores(model, tokenizer, start_id=tokenizer.eos_id)
    out = {"found_at": FOUND}
    for role in ("previous token", "induction"):
        best_probe, best_sentence = _best(probe.scores[role]), _best(sentence[role])
        out[role] = {"random_tokens": best_probe, "random_tokens_chance": round(probe.chance[role], 4),
                     "repeated_sentence": best_sentence,
                     "found": bool(best_probe["score"] >= FOUND and best_sentence["score"] >= FOUND),
                     "table_random_tokens": np.round(probe.scores[role], 4).tolist(),
                     "table_repeated_sentence": np.round(sentence[role], 4).tolist()}
    return out


def encoder_roles(model: Transformer, tokenizer: Tokenizer) -> dict:
    """The encoder's strongest previous-token head on the app's probe (no induction claim: it sees both ways)."""
    probe = role_scores(model, ENCODER_SELF, TextVocab(tokenizer, model.cfg.vocab_size), n=32, seed=0)
    return {"previous token": {"random_tokens": _best(probe.scores["previous token"]),
                               "random_tokens_chance": round(probe.chance["previous token"], 4)}}
