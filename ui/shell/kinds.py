"""The attention kind picker's short labels, shared by the Attention and Heads pages."""

from __future__ import annotations

# The kind picker is a small select box in the controls' row: its labels drop core's parenthesis ("Cross-attention
# (decoder to encoder)" -> "Cross-attention") so the box, the layer and the head fit one row beside the sidebar on a
# 1024-wide screen without cutting a label; the help says each kind in full.
KIND_HELP = ("Encoder self-attention: the source reads itself. Decoder masked self-attention: the target reads "
             "itself, each token only its past. Cross-attention (decoder to encoder): queries come from the target, "
             "keys and values from the source.")


def short_kind(kind) -> str:
    """An attention kind's label without its parenthesis, for the narrow select box."""
    return kind.label.split(" (")[0]
