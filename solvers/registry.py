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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from .errors import OptionError
from .options import Option, SolverOptions, options_class
from .plan import Plan
from .problem import Problem
from .result import ModelScope, Termination
from .work import GREEDY_WORK, Shape, WorkModel, refuse_over_cap


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
    # Work model (solvers.work): the estimated seconds of uninterruptible work on a problem,
    # refused above the work cap before the solver runs. None: not declared (the greedy's terms).
    work: WorkModel | None = None

    def estimate(self, problem: Problem, options: SolverOptions | Mapping[str, Any] | None = None) -> float:
        """Estimated seconds of work no deadline interrupts, on the reference machine (2 cores):
        its own work model, plus the estimates of the solvers it includes and of its ``base``
        solver where it runs one."""
        model = self.work or GREEDY_WORK
        seconds = model.seconds(work_shape(problem, options), options)
        for name in model.includes:                     # work it does too (kk_swap's packing)
            if name != self.name and name in _REGISTRY:
                seconds += _REGISTRY[name].estimate(problem, _REGISTRY[name].parse({}))
        base = _option(options, "base")
        if isinstance(base, str) and base != self.name and base in _REGISTRY:
            spec = _REGISTRY[base]
            seconds += spec.estimate(problem, spec.parse(_option(options, "base_options") or {}))
        return seconds

    def expected_seconds(self, problem: Problem, options: SolverOptions | Mapping[str, Any] | None = None) -> float:
        """What a progress bar waits for: :meth:`estimate` plus the time limit, if it has one."""
        opts = self.parse(options)
        limit = sum(float(getattr(opts, o.name) or 0.0) for o in self.schema if o.role == "time_limit")
        return self.estimate(problem, opts) + limit

    def check_work(self, problem: Problem, options: SolverOptions | Mapping[str, Any] | None = None) -> float:
        """Refuse ``problem`` when this solver's work estimate exceeds the work cap
        (:data:`solvers.work.WORK_CAP_SECONDS`), naming both, before it runs; returns the estimate."""
        shape = work_shape(problem, options)
        model = self.work or GREEDY_WORK
        return refuse_over_cap(self.name, self.estimate(problem, options), shape,
                               model.largest_term(shape, options), model.time_limited)

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

# Who registers names the registry does not hold yet: ``resolve(name)`` registers ``name`` if it
# can, ``resolve(None)`` whatever it lists (solvers.plugins adds one: installed planners of the
# ``eplb.solvers`` entry points, and the files a user named).
_RESOLVERS: list[Callable[[str | None], None]] = []


def add_resolver(resolve: Callable[[str | None], None]) -> None:
    """Add ``resolve`` to what :func:`get_solver` and :func:`solver_names` consult."""
    if resolve not in _RESOLVERS:
        _RESOLVERS.append(resolve)


def _option(options: SolverOptions | Mapping[str, Any] | None, name: str) -> Any:
    return options.get(name) if isinstance(options, Mapping) else getattr(options, name, None)


def work_shape(problem: Problem, options: SolverOptions | Mapping[str, Any] | None = None) -> Shape:
    """The sizes a solver's work model reads: the problem's, and the window's steps T (the
    ``history`` option's first dimension, 1 without one)."""
    shape = getattr(_option(options, "history"), "shape", None)
    steps = int(shape[0]) if shape is not None and len(shape) == 3 else 1
    return Shape(problem.num_layers, problem.num_experts, problem.num_replicas, problem.num_gpus,
                 problem.num_nodes, max(problem.cluster.gpu_slots), steps)


# solve()'s own parameters: a solver option of one of these names could never be passed
# (``solve(problem, name, previous=..., **options)``), so none may be declared; a front end
# refuses them in ``-O`` as unknown options of the chosen solver.
RESERVED_OPTION_NAMES = ("problem", "solver", "previous", "expert_bytes")


def register(name: str, *, kind: str, description: str, options: Sequence[Option] = (),
             is_available: Callable[[], bool] = lambda: True, requires: str = "", in_suites: bool = True,
             heterogeneous: bool = False, work: WorkModel | None = None):
    """Decorator adding ``fn(problem, options)`` to the registry under ``name``.

    ``options`` is the schema: one :class:`Option` per option; ``fn`` receives them as an
    instance of the schema's frozen dataclass. ``heterogeneous=True``: it plans clusters with
    per-GPU speeds, uneven slot counts or failed GPUs (others are refused there). ``work``: its
    :class:`~solvers.work.WorkModel` (None: the greedy's). ``in_suites=False`` keeps it out of the benchmark suites' solver sweeps (it needs inputs
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
                                     options_class(name, schema), heterogeneous, work)
        return fn

    return deco


def get_solver(name: str) -> SolverSpec:
    spec = _REGISTRY.get(name)
    if spec is None and isinstance(name, str):      # an installed or user-named planner (solvers.plugins)
        for resolve in _RESOLVERS:
            resolve(name)
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
    options = spec.parse(options)
    spec.check_work(problem, options)
    return spec.fn(problem, options)


def solver_names(kind: str | None = None, available_only: bool = False) -> list[str]:
    for resolve in _RESOLVERS:                      # installed planners (entry points) join the list
        resolve(None)
    return sorted(n for n, s in _REGISTRY.items()
                  if (kind is None or s.kind == kind) and (not available_only or s.is_available()))
