"""The Cost page: time and memory against n, sequential steps, path lengths and the sizes of real models.

`view.py` draws its panels; `runs.py` (where there is one) holds its cached work.
"""
