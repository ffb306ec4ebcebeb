"""One small registry of named solvers.

A solver is a function ``fn(problem, options) -> SolverOutput``; its options are declared
as a schema (:class:`solvers.options.Option`) at :func:`register`, which makes their typed
frozen dataclass (``spec.options_type``). Options are parsed once, at the edge
(``spec.parse``), and a solver trusts what it is given. It returns a plan and, if it
proves one, a lower bound; it never grades itself: :func:`solvers.solve` scores every plan
with the shared scorer and combines bounds. Solvers compose through :func:`run` (another
solver's plan, ungraded), never through ``solve``.
"""
from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch

from .cluster import MAX_REPLICAS
from .errors import OptionError, ProblemError
from .options import Option, SolverOptions, options_class
from .plan import Plan
from .problem import Problem
from .result import ModelScope, Termination


@dataclass
class SolverOutput:
    """What a solver hands back to :func:`solvers.solve`.

    plan: the plan found (None if none). termination: why it stopped, when the solver knows
    better than "ran to its end" (None: ``COMPLETED``): an exact solver that proved its
    model's optimum says ``OPTIMAL``; time limit, infeasible, error. What the plan is worth
    (the solution status) is graded by :func:`solvers.solve`, never said here. bound: [layers] a lower bound
    the solver proved that holds for *every* plan of the problem. model_bound: [layers] a
    bound proven only for the solver's restricted model, whose scope says which plans it
    covers; ``model_optimal``: [layers] bool, the solver proved its plan optimal in that
    model. policy: the policy that ran.
    """

    plan: Plan | None
    policy: str
    termination: Termination | None = None
    bound: torch.Tensor | None = None
    message: str = ""
    info: dict[str, Any] = field(default_factory=dict)
    model_bound: torch.Tensor | None = None
    model_scope: ModelScope | None = None
    model_optimal: torch.Tensor | None = None


@dataclass(frozen=True)
class SolverSpec:
    name: str
    fn: Callable[..., SolverOutput]
    kind: str                      # "heuristic" or "exact"
    description: str
    is_available: Callable[[], bool]
    requires: str                  # what to install when it is not available
    schema: tuple[Option, ...] = ()
    # Whether the benchmark suites run it on (loads, cluster) alone: False for solvers that
    # need more than that to mean anything (a placement in force, the window's steps).
    in_suites: bool = True
    options_type: type[SolverOptions] = SolverOptions
    # Whether it plans clusters with per-GPU speeds, uneven slot counts or failed GPUs
    # (``Cluster.homogeneous`` False); the others are refused there by check_cluster.
    heterogeneous: bool = False

    def check_cluster(self, problem: Problem) -> None:
        """Raise :class:`OptionError` if this solver cannot plan ``problem``'s cluster."""
        if not self.heterogeneous and not problem.cluster.homogeneous:
            able = ", ".join(n for n, s in sorted(_REGISTRY.items()) if s.heterogeneous)
            raise OptionError("solver", f"{self.name!r} plans identical GPUs only (speed 1, the same slot "
                              f"count each, none failed); this cluster is {problem.cluster.describe()}. "
                              f"Solvers for it: {able}")
    # Work cap: the most slots per GPU it plans (None: the Problem's own caps, the greedy's).
    max_slots_per_gpu: int | None = None

    def check_size(self, problem: Problem) -> None:
        """Refuse a problem beyond this solver's work cap, naming the cap (before it runs)."""
        cap = self.max_slots_per_gpu
        S = max(problem.cluster.gpu_slots)                  # the fullest GPU
        if cap is not None and S > cap:
            raise ProblemError("num_replicas", f"solver {self.name!r} plans at most {cap} slots per GPU (its work "
                               f"grows faster than the slots), got {S} ({problem.num_replicas} slots on "
                               f"{problem.num_gpus} GPUs); the greedy 'deepseek' serves up to {MAX_REPLICAS} slots")

    @property
    def options(self) -> tuple[str, ...]:
        return tuple(o.name for o in self.schema)

    def option(self, name: str) -> Option:
        for o in self.schema:
            if o.name == name:
                return o
        raise OptionError(name, f"is not an option of solver {self.name!r}")

    def defaults(self) -> dict[str, Any]:
        return {o.name: o.default for o in self.schema}

    def parse(self, options: Mapping[str, Any] | SolverOptions | None = None) -> SolverOptions:
        """The typed options: every option in effect (defaults included), checked against
        the schema once. Already-typed options of this solver pass through untouched."""
        if isinstance(options, self.options_type):
            return options
        return self.options_type.parse(options)


_REGISTRY: dict[str, SolverSpec] = {}


# Work cap of every solver but the greedy, in slots per GPU: the greedy (deepseek) is linear in
# the slots and serves the Problem's own caps; the others pack, swap or model each GPU's
# slots, and their work grows faster (2 layers x 32 experts on 2 GPUs, 2 cores at load 5:
# kk_swap 2.2 s at 256 slots per GPU, 3.1 s at 1024, 25.6 s at 4096, past 600 s at 32768;
# best with time_limit=1 12.2 s at 4096; layers multiply it). Real clusters hold 1-64
# experts per GPU. ``register(..., max_slots_per_gpu=None)`` lifts it for a solver as cheap
# as the greedy.
MAX_SLOTS_PER_GPU = 256

# solve()'s own parameters: a solver option of one of these names could never be passed
# (``solve(problem, name, previous=..., **options)``), so none may be declared; a front end
# refuses them in ``-O`` as unknown options of the chosen solver.
RESERVED_OPTION_NAMES = ("problem", "solver", "previous", "expert_bytes")


def register(name: str, *, kind: str, description: str, options: Sequence[Option] = (),
             is_available: Callable[[], bool] = lambda: True, requires: str = "", in_suites: bool = True,
             heterogeneous: bool = False, max_slots_per_gpu: int | None = MAX_SLOTS_PER_GPU):
    """Decorator adding ``fn(problem, options)`` to the registry under ``name``.

    ``options`` is the schema: one :class:`Option` per option; ``fn`` receives them as an
    instance of the schema's frozen dataclass. ``heterogeneous=True``: it plans clusters with
    per-GPU speeds, uneven slot counts or failed GPUs (others are refused there). ``in_suites=False`` keeps it out of the benchmark suites' solver sweeps (it needs inputs
    the suites do not give, e.g. a placement in force or the window's steps).
    """
    if kind not in ("heuristic", "exact"):
        raise ValueError(f"kind must be 'heuristic' or 'exact', got {kind!r}")
    schema = tuple(options)

    def deco(fn: Callable[..., SolverOutput]) -> Callable[..., SolverOutput]:
        if name in _REGISTRY:
            raise ValueError(f"solver {name!r} is registered twice")
        params = list(inspect.signature(fn).parameters.values())
        if len(params) != 2 or any(p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params):
            raise ValueError(f"solver {name!r}: must be a function of (problem, options)")
        declared = [o.name for o in schema]
        reserved = sorted(set(declared) & set(RESERVED_OPTION_NAMES))
        if reserved:
            raise ValueError(f"solver {name!r}: {reserved[0]!r} is a keyword of solve(), not an option name")
        if len(set(declared)) != len(declared):
            raise ValueError(f"solver {name!r}: an option is declared twice in {declared}")
        _REGISTRY[name] = SolverSpec(name, fn, kind, description, is_available, requires, schema, in_suites,
                                     options_class(name, schema), heterogeneous, max_slots_per_gpu)
        return fn

    return deco


def get_solver(name: str) -> SolverSpec:
    spec = _REGISTRY.get(name)
    if spec is None:
        raise OptionError("solver", f"unknown solver {name!r}; known: {', '.join(sorted(_REGISTRY))}")
    return spec


def run(problem: Problem, solver: str, options: Mapping[str, Any] | SolverOptions | None = None
        ) -> SolverOutput:
    """``solver``'s output on ``problem``, ungraded: how one solver uses another (a fresh
    plan, a warm start, a sub-problem). A mapping of options is parsed against the schema;
    typed options are trusted."""
    spec = get_solver(solver)
    if not spec.is_available():
        raise OptionError("solver", f"{solver!r} is not available here: {spec.requires}")
    spec.check_cluster(problem)
    spec.check_size(problem)
    return spec.fn(problem, spec.parse(options))


def solver_names(kind: str | None = None, available_only: bool = False) -> list[str]:
    return sorted(n for n, s in _REGISTRY.items()
                  if (kind is None or s.kind == kind) and (not available_only or s.is_available()))
