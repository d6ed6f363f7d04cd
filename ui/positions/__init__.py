"""The Positions page: the encodings, relative position, RoPE, and swapping a model's scheme.

`view.py` draws its panels; `runs.py` (where there is one) holds its cached work.
"""
