"""The Train page: settings, training live, the snapshot and what the run learned.

`view.py` draws its panels; `runs.py` (where there is one) holds its cached work.
"""
