"""The Attention page: every head, one head, the arithmetic, temperature, why sqrt(d_k), compare, export.

`view.py` draws its panels; `runs.py` (where there is one) holds its cached work.
"""
