"""Per-panel bounds on the tokens a panel reads, each with the reason the page shows (issue 38).

Every page accepts inputs up to the model's context. A panel whose cost grows faster than n^2, or whose drawing
cannot stay readable at a thousand tokens, reads only the first `limit` tokens, and says so on the page in one
sentence (`Bound.note`): what it costs or draws, and how much of the input it reads. Never a silent cut.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

PANEL_BYTES = 64 << 20  # what one panel's computation may hold at once beyond the model (a view: 100 MB in all)
ROUND_TO = 64  # a memory bound is rounded down to a multiple of this many tokens: positions a reader can count on


@dataclass(frozen=True)
class Bound:
    """A panel's cap on the tokens it reads (`limit`), and why, as the start of a sentence: "The editor draws
    every pair"."""

    limit: int
    why: str

    def cut(self, n: int) -> int:
        """How many of n tokens the panel reads."""
        return min(int(n), int(self.limit))

    def applies(self, n: int) -> bool:
        """Whether an input of n tokens is longer than the panel reads."""
        return int(n) > int(self.limit)

    def note(self, n: int, verb: str = "reads") -> Optional[str]:
        """The sentence the page shows under the panel when it applies ("The editor draws every pair: it shows the
        first 64 tokens of your 1,024."); None for an input it reads whole."""
        if not self.applies(n):
            return None
        return f"{self.why}: it {verb} the first {self.limit:,} tokens of your {int(n):,}."


def attention_bytes(n_layers: int, n_heads: int, n: int, copies: float = 1.0) -> int:
    """Bytes of every layer's attention weights (float32) for one input of n tokens, `copies` times over (a
    backward pass keeps each pattern and makes its gradient: about two)."""
    return int(n_layers * n_heads * n * n * 4 * copies)


def tokens_within(n: int, n_layers: int, n_heads: int, copies: float = 2.0, budget: int = PANEL_BYTES) -> int:
    """The most tokens (at most n; a multiple of ROUND_TO unless it is n itself) whose attention weights, `copies`
    times over in every layer, fit in `budget` bytes. At least ROUND_TO (a panel always reads something)."""
    if attention_bytes(n_layers, n_heads, n, copies) <= budget:
        return int(n)
    per_token_sq = max(1, attention_bytes(n_layers, n_heads, 1, copies))
    fits = int((budget / per_token_sq) ** 0.5)
    return max(ROUND_TO, fits // ROUND_TO * ROUND_TO)


def memory_bound(n: int, n_layers: int, n_heads: int, what: str, copies: float = 2.0,
                 budget: int = PANEL_BYTES) -> Bound:
    """A Bound from memory: `what` keeps every layer's attention weights (`copies` times), so it reads as many
    tokens as fit in `budget`. The reason names the size a whole input would take."""
    limit = tokens_within(n, n_layers, n_heads, copies, budget)
    need = attention_bytes(n_layers, n_heads, n, copies)
    return Bound(limit, f"{what} keeps every layer's attention weights ({n_layers} layers × {n_heads} heads × n²: "
                        f"{need / 2 ** 20:,.0f} MB for your input, more than the {budget / 2 ** 20:,.0f} MB a panel "
                        f"may hold)")
