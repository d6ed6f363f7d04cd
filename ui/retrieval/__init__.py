"""The Retrieval page: attention as kernel smoothing, a soft database, keys that address, hijacking.

`view.py` draws its panels; `runs.py` (where there is one) holds its cached work.
"""
