"""The Depth page: the residual stream forward, the logit lens, gradients backward, norms and long paths.

`view.py` draws its panels; `runs.py` (where there is one) holds its cached work.
"""
