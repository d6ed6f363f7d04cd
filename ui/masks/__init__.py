"""The Masks page: the mask editor, what the model does with it, masks read as graphs, and their cost.

`view.py` draws its panels; `runs.py` (where there is one) holds its cached work.
"""
