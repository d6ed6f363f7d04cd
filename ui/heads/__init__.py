"""The Heads page: head subspaces, circuits, queries and keys, roles and ablations.

`view.py` draws its panels; `runs.py` (where there is one) holds its cached work.
"""
