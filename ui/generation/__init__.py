"""The Generation page: the three families' anatomy, attention shapes, decoding and the leak.

`view.py` draws its panels; `runs.py` (where there is one) holds its cached work.
"""
