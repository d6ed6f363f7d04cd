"""The Home page: the current model and the map of the pages.

`view.py` draws its panels; `runs.py` (where there is one) holds its cached work.
"""
