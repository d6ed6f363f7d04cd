"""The Lessons page: the list of lessons, a teacher's own files and classes.

`view.py` draws its panels; `runs.py` (where there is one) holds its cached work.
"""
