"""This project's own heuristics beyond DeepSeek's greedy, batched over layers in torch.

Registered solvers (see :mod:`.registered`): ``kk_swap`` (better packing for the greedy
counts), ``joint`` (counts chosen with the packing in the loop) and ``best`` (portfolio
within a time budget). All accept ``policy``, ``nodup`` and ``relax``. ``survivable``
(:mod:`.survivable`) plans for failure: every expert on two GPUs or nodes.
"""
from . import registered, survivable  # noqa: F401  (registers the solvers)
