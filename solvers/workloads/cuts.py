"""Planning windows of a trace and the out-of-sample pairs the benchmark scores.

A planner sees the loads of one window (the sum of ``size`` consecutive steps); what a
user cares about is how that plan does on the *next* window (docs/problem.md, out of sample).
"""
from __future__ import annotations

import numbers

import torch

from ..errors import EPLBError, OptionError
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


def step_range(window: slice, total: int, param: str, spec: str = "",
               error: type[EPLBError] = OptionError) -> tuple[int, int]:
    """(start, stop) of a window of steps ``A:B`` of a trace of ``total`` steps: Python slice
    bounds (either may be omitted, a negative one counts from the end), but never clamped: an
    empty window or a bound outside ``[-total, total]`` is refused (``error(param)``), so
    ``@0:30`` on 24 steps fails as ``@5:5`` does instead of quietly meaning ``@0:24``."""
    if window.step not in (None, 1):
        raise error(param, "a window of steps must be contiguous")
    asked = f"{'' if window.start is None else window.start}:{'' if window.stop is None else window.stop}"
    where = f"{spec}: " if spec else ""
    steps = f"the trace has {total} steps (0..{total - 1})"
    start, stop, _ = window.indices(total)
    if start >= stop:
        raise error(param, f"{where}the window {asked} selects no step: {steps}")
    if any(v is not None and not -total <= v <= total for v in (window.start, window.stop)):
        raise error(param, f"{where}the window {asked} reaches past the trace: {steps}")
    return start, stop


def planning_window(total: int, window: tuple[int, int] | None,
                    holdout: tuple[int, int]) -> tuple[tuple[int, int], str]:
    """(planning window, note) for a held-out range ``holdout`` of a trace of ``total`` steps.

    window: the planning window the user gave (``--loads SPEC@A:B``) or None (the whole trace).
    A given window that shares a step with the held-out range is refused (the plan would be
    scored on steps it was made from); without one, the planning window is every step before
    the held-out range, and the note says so (empty when nothing was cut)."""
    a, b = holdout
    if window is not None:
        s, e = window
        if s < b and a < e:
            raise OptionError("holdout", f"the held-out steps {a}:{b} overlap the planning window {s}:{e}: a "
                              f"held-out step must not be planned on (hold out steps from {e} on, or plan on "
                              f"steps before {a})")
        return window, ""
    if a == 0:
        raise OptionError("holdout", f"the held-out steps {a}:{b} leave no step before them to plan on: give the "
                          f"planning window as --loads SPEC@{b}:{total} (steps after) or hold out later steps")
    return (0, a), f"planning on steps 0:{a} (the steps before the held-out {a}:{b}; give --loads SPEC@A:B to choose)"
