"""The English models this project trains: a decoder in Qwen2's layout (Llama family, RoPE) and a BERT-layout encoder.

Read in this order: corpus (the Python documentation's prose, split by document, cached as text),
tokenizer (one byte-level BPE for both), data (packed and masked windows), baselines (unigram, bigram
and the bigram fill-in), recipe (sizes and schedules), training (the loop and held-out scores), export
(Glassbox model -> Hugging Face folder), heads (previous-token and induction heads as the app measures
them), pipeline (the one command: `python -m core.train --english`).
"""
