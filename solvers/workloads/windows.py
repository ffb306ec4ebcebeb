"""Planning windows of a trace and the out-of-sample pairs the benchmark scores.

A planner sees the loads of one window (the sum of ``size`` consecutive steps); what a
user cares about is how that plan does on the *next* window (docs/problem.md, out of sample).
"""
from __future__ import annotations

import numbers

import torch

from ..errors import OptionError
from .trace import Trace


def _loads(trace: Trace | torch.Tensor) -> torch.Tensor:
    loads = trace.loads if isinstance(trace, Trace) else trace
    if not isinstance(loads, torch.Tensor) or loads.dim() != 3:
        raise OptionError("trace", "must be a Trace or a [steps, layers, experts] tensor")
    return loads


def windows(trace: Trace | torch.Tensor, size: int) -> torch.Tensor:
    """[W, layers, experts]: sums over consecutive blocks of ``size`` steps, W = steps // size.

    A trailing partial block is dropped (it would be a smaller, incomparable window).
    """
    loads = _loads(trace)
    if isinstance(size, bool) or not isinstance(size, numbers.Integral) or size < 1:
        raise OptionError("size", f"must be an integer >= 1, got {size!r}")
    T, L, E = loads.shape
    W = T // size
    if W == 0:
        raise OptionError("size", f"window of {size} steps is longer than the trace ({T} steps)")
    return loads[:W * size].reshape(W, size, L, E).sum(1)


def out_of_sample_pairs(trace: Trace | torch.Tensor, size: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """[(plan window i [layers, experts], evaluation window i+1 [layers, experts])], W - 1 pairs."""
    w = windows(trace, size)
    if w.shape[0] < 2:
        raise OptionError("size", f"need at least two windows of {size} steps, the trace has "
                          f"{_loads(trace).shape[0]} steps")
    return [(w[i], w[i + 1]) for i in range(w.shape[0] - 1)]
