"""This project's own heuristics beyond DeepSeek's greedy, batched over layers in torch.

Registered solvers (see :mod:`.registered`): ``kk_swap`` (better packing for the greedy
counts), ``joint`` (counts chosen with the packing in the loop) and ``best`` (portfolio
within a time budget). All accept ``policy``, ``nodup`` and ``relax``.
"""
from . import registered  # noqa: F401  (registers the solvers)
