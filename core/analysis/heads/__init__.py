"""Heads: what the attention heads of a model do, one concept per module (import from them directly).

- subspaces   what each head can read (W_Q, W_K, W_V) or write (W_O): principal angles, cross-Gram
              norms, effective rank, the h_max = floor(d_model / d_v) budget (SubspaceReport)
- circuits    a head read through the token embeddings: QK and OV circuits; pca_2d of its queries and keys
- roles       previous-token, induction, subject and first-token-sink scores on a repeated-token probe
- redundancy  how alike two heads are: pattern similarity (1 - JS) and a Gaussian mutual-information estimate
- ablation    replace chosen heads' hook_z by zeros or their mean through run_with_hooks; rank every head
- orthogonal  the part of a query orthogonal to every key changes no score
- cost        what h heads cost against one wide head: parameters and FLOPs stay, pattern memory grows
- toy         the two-head toy: a tiny model whose two heads split core.tasks.TwoLookupTask between them

Which attention a function looks at is an `AttentionKind` (core.analysis.attention): its hook
prefix ("", "encoder.", "decoder.") and module ("attn" or "cross_attn").
"""
