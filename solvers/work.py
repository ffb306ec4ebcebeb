"""The work model: how many seconds a solver needs on a problem, estimated before it runs.

Every registered solver declares a :class:`WorkModel` (``register(..., work=...)``): a sum of
*terms*, each a documented function of the problem's shape (:class:`Shape`: layers L,
experts E, slots R, GPUs P, nodes N, slots of the fullest GPU S, the window's steps T) and
the solver's options (``steps``, ``rounds``, ...), times a coefficient in seconds measured
on the reference machine (2 cores) by ``python -m benchmarks.work_model`` (predicted against
measured seconds over a grid of shapes per solver; ``--fit`` prints the coefficients
pasted here). The terms name where the time goes, e.g. ``L*S^2``: the balanced-differencing
packing runs S-1 merge steps, each a reduction over L*S partial sums.

A solver with a time limit (an option of role ``"time_limit"``) stops its long loops at that
deadline; its terms then count only the work *no deadline interrupts* (the warm start, the
model's construction, the grading), and the time limit itself is the user's choice.

:func:`check_work` refuses a problem whose estimate exceeds :data:`WORK_CAP_SECONDS` (one
minute on 2 cores), naming the cap and the estimate, before any work: no accepted input
runs past a minute without a time limit the user set. The estimate is a model, not a
promise: ``benchmarks/work_model.py`` reports how far it is from measured times.

This module imports nothing from the project but its errors (the registry uses it).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .errors import ProblemError

# The most seconds of uninterruptible work a solver may be asked for (2 cores). A module
# global read at every check: tests lower it instead of building huge problems.
WORK_CAP_SECONDS = 60.0

# Swap moves look at no more than this many slots of a pack (heuristics.packing.SWAP_SLOTS):
# the local search's cost grows with min(S, this), not S.
SWAP_SLOTS = 48


@dataclass(frozen=True)
class Shape:
    """What the work of a solve depends on: the problem's sizes and the window's steps."""

    layers: int          # L
    experts: int         # E
    slots: int           # R (live slots in all)
    gpus: int            # P
    nodes: int           # N
    slots_per_gpu: int   # S, of the fullest GPU
    steps: int = 1       # T: the window's steps (a history option), 1 without one


def _opt(options: Any, name: str, default: float) -> float:
    """An option's value (typed options or a mapping), ``default`` where the solver has none."""
    if isinstance(options, Mapping):
        v = options.get(name, default)
    else:
        v = getattr(options, name, default)
    return default if v is None else float(v)


def _c(s: Shape) -> int:
    return min(s.slots_per_gpu, SWAP_SLOTS)


# Each term: (shape, options) -> units. The names are what the docs and messages print.
TERMS: dict[str, Callable[[Shape, Any], float]] = {
    # a fixed cost: imports warmed, grading, building the result
    "1": lambda s, o: 1.0,
    # Python loops over the slots (greedy replication, the replication bound), kernels of any size
    "R": lambda s, o: float(s.slots),
    # one pass over every slot of every layer (scoring, validating, gathers)
    "L*R": lambda s, o: float(s.layers * s.slots),
    # greedy replication: R - E steps, each an argmax over the L x E loads per replica
    "L*E*R": lambda s, o: float(s.layers * s.experts * s.slots),
    # a loop of S steps whatever the layers (balanced differencing's merges): kernel launches
    "S": lambda s, o: float(s.slots_per_gpu),
    # balanced differencing: S - 1 merge steps, each a reduction over L x S partial sums ...
    "L*S^2": lambda s, o: float(s.layers * s.slots_per_gpu ** 2),
    # ... touching every one of the L x R items
    "L*R*S": lambda s, o: float(s.layers * s.slots * s.slots_per_gpu),
    # swap local search: `steps` moves, each min(S, 48) candidates against all R slots per layer
    "L*R*C*steps": lambda s, o: float(s.layers * s.slots * _c(s) * _opt(o, "steps", 8)),
    # count search with the packing in the loop: `rounds` rounds of `width` donors x receivers
    "L*R*C*rounds*width": lambda s, o: float(s.layers * s.slots * _c(s) * _opt(o, "rounds", 32)
                                             * _opt(o, "width", 4)),
    # a largest-first pass: R items, each placed by a scan over the P GPUs of every layer
    "L*R*P": lambda s, o: float(s.layers * s.slots * s.gpus),
    # per-layer Python work (exact models, certificates): L layers, each with its kernels
    "L": lambda s, o: float(s.layers),
    # per-layer models whose size is the placement variables E x P
    "L*E*P": lambda s, o: float(s.layers * s.experts * s.gpus),
    # the window: every step scored against every slot
    "T*L*R": lambda s, o: float(s.steps * s.layers * s.slots),
    # a local search over the window: `steps` moves, each scored on every step
    "T*L*R*steps": lambda s, o: float(s.steps * s.layers * s.slots * _opt(o, "steps", 64)),
    # time-robust swaps: `steps` rounds, each every one of S slots of the worst GPU against all
    # R slots on each of B = min(T, buckets) blocks of steps
    "B*L*R*S*steps": lambda s, o: float(min(s.steps, _opt(o, "buckets", s.steps)) * s.layers * s.slots
                                        * s.slots_per_gpu * _opt(o, "steps", 64)),
    # a local search of a fixed number of moves (`steps`) over the slots
    "L*R*steps": lambda s, o: float(s.layers * s.slots * _opt(o, "steps", 8)),
    # traffic-aware swaps: iterations x max_swaps moves over the sampled tokens
    "L*tokens*iterations": lambda s, o: float(s.layers * _opt(o, "max_tokens", 1024) * _opt(o, "iterations", 12)
                                              * _opt(o, "max_swaps", 60)),
}


@dataclass(frozen=True)
class WorkModel:
    """Estimated seconds = sum(coefficient x term(shape, options)) over ``terms``.

    terms: names of :data:`TERMS`. coefficients: seconds per unit of each term on the
    reference machine (2 cores), measured (``python -m benchmarks.work_model --fit``).
    ``time_limited``: the solver's long loops stop at its time limit option; the terms
    count only the work no deadline interrupts. ``includes``: registered solvers whose
    work it does too, at their default options (joint, the portfolio and the time-robust
    planners run kk_swap's packing first): their estimates are added, and the terms count
    only the rest (the registry adds them: this module knows no solver).
    """

    terms: tuple[str, ...]
    coefficients: tuple[float, ...]
    time_limited: bool = False
    includes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        unknown = [t for t in self.terms if t not in TERMS]
        if unknown:
            raise ValueError(f"unknown work terms {unknown}; known: {', '.join(TERMS)}")
        if len(self.terms) != len(self.coefficients):
            raise ValueError(f"{len(self.terms)} terms but {len(self.coefficients)} coefficients")
        if any(not (c >= 0 and math.isfinite(c)) for c in self.coefficients):
            raise ValueError(f"coefficients must be finite and >= 0, got {self.coefficients}")

    @classmethod
    def of(cls, coefficients: Mapping[str, float], time_limited: bool = False,
           includes: tuple[str, ...] = ()) -> WorkModel:
        """``WorkModel.of({"1": 0.01, "L*R": 2e-8}, ...)``: terms and coefficients in one mapping."""
        return cls(tuple(coefficients), tuple(float(c) for c in coefficients.values()), time_limited,
                   tuple(includes))

    def units(self, shape: Shape, options: Any = None) -> list[float]:
        return [TERMS[t](shape, options) for t in self.terms]

    def seconds(self, shape: Shape, options: Any = None) -> float:
        """The estimated seconds of uninterruptible work on the reference machine."""
        return math.fsum(c * u for c, u in zip(self.coefficients, self.units(shape, options)))

    def largest_term(self, shape: Shape, options: Any = None) -> str:
        """The term that contributes most to the estimate (what a refusal names)."""
        parts = [c * u for c, u in zip(self.coefficients, self.units(shape, options))]
        return self.terms[max(range(len(parts)), key=parts.__getitem__)] if parts else "1"

    @property
    def formula(self) -> str:
        """E.g. ``0.05 + 1e-06*L*S^2 + 4e-08*L*R*S + kk_swap's estimate`` (seconds)."""
        parts = [f"{c:.3g}" if t == "1" else f"{c:.3g}*{t}" for t, c in zip(self.terms, self.coefficients) if c > 0]
        return " + ".join(parts + [f"{n}'s estimate" for n in self.includes]) or "0"


# The greedy's terms, which every solver also pays (its grading runs the replication bound
# and scores the plan): a solver registered without a work model is assumed to cost this
# (a test checks that every registered solver declares its own).
GREEDY_WORK = WorkModel.of({"1": 0.01, "R": 2e-5, "L*R": 2e-8, "L*E*R": 1e-9})


def refuse_over_cap(solver: str, seconds: float, shape: Shape, term: str, time_limited: bool = False,
                    cap: float | None = None) -> float:
    """``seconds`` (an estimate); raises :class:`ProblemError` naming the cap, the estimate and
    its largest term when it exceeds ``cap`` (default :data:`WORK_CAP_SECONDS`, read now)."""
    cap = WORK_CAP_SECONDS if cap is None else cap
    if seconds > cap:
        s = shape
        extra = " (its time limit bounds only the rest)" if time_limited else ""
        raise ProblemError("problem", f"solver {solver!r} needs about {_human(seconds)} of work here "
                           f"({s.layers} layers x {s.experts} experts, {s.slots} slots on {s.gpus} GPUs, "
                           f"{s.slots_per_gpu} on the fullest; most of it {term}), over the work cap of "
                           f"{_human(cap)} on 2 cores{extra}; plan fewer layers or slots per GPU, or use "
                           f"a cheaper solver ('deepseek' is the greedy)")
    return seconds


def _human(seconds: float) -> str:
    if seconds >= 3600 * 24:
        return f"{seconds / 86400:.3g} days"
    if seconds >= 3600:
        return f"{seconds / 3600:.3g} h"
    return f"{seconds:.3g} s"
