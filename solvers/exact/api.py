"""The registered exact solvers: "cpsat" (OR-Tools CP-SAT), "highs" and "cbc" (PuLP MILP).

All three take the same keyword-only options and solve the same models:

model: "joint" (counts and placement together, even split; default), "packing" (fixed
    counts), "replication" (counts only; its optimum bounds the max GPU load) or
    "hierarchical" (groups to nodes, replicas inside their node, then GPUs).
counts: "free" or "fixed" for the hierarchical model (the others fix it by definition).
replica_counts: [layers, experts] or [experts] counts for fixed-count models; default the
    warm start's counts, else the optimal replication counts.
colocation: "allowed" or "forbidden" (no two replicas of one expert on one GPU).
node_budget: hierarchical only: "fixed" (G/N groups per node, DeepSeek's rule) or "free"
    (any number of whole groups per node; each node still has its R/N physical slots).
time_limit: seconds for the whole solve, shared over layers; layers left when it is spent
    keep their warm start with status "time_limit" (see driver.py).
threads, seed: backend workers and random seed. gap: relative gap at which to stop (0 =
    prove optimality).
warm_start: "auto" (DeepSeek's plan for the model's policy, used when it is feasible for
    the model; with colocation="forbidden" the duplicate-free kk_swap plan instead, and for
    given replica_counts those counts packed by the heuristics), None, or a
    :class:`solvers.Plan` (must be feasible for the model and fit the problem's sizes).
"""
from __future__ import annotations

from typing import Any

from ..problem import Problem
from ..registry import SolverOutput, register
from . import backends
from .driver import run_exact

_DEFAULTS = dict(model="joint", counts=None, replica_counts=None, colocation="allowed",
                 node_budget="fixed", time_limit=10.0, threads=2, seed=0, gap=0.0, warm_start="auto")


@register("cpsat", kind="exact", is_available=backends.cpsat_available, requires="pip install ortools",
          description="OR-Tools CP-SAT: joint/packing/replication/hierarchical models, proven bounds")
def solve_cpsat(problem: Problem, *, model: str = "joint", counts: str | None = None,
                replica_counts: Any = None, colocation: str = "allowed", node_budget: str = "fixed",
                time_limit: float = 10.0, threads: int = 2, seed: int = 0, gap: float = 0.0,
                warm_start: Any = "auto") -> SolverOutput:
    from . import cpsat
    backends.cpsat_available()        # import OR-Tools (about 1 s) before the clock starts
    return run_exact(problem, "cpsat", cpsat.solve_layer, **_collect(locals()))


@register("highs", kind="exact", is_available=backends.highs_available,
          requires="pip install pulp 'highspy==<the HiGHS version your ortools bundles, 1.12.* for ortools 9.15>'",
          description="PuLP MILP solved by HiGHS (highspy): same models, mip_dual_bound as bound")
def solve_highs(problem: Problem, *, model: str = "joint", counts: str | None = None,
                replica_counts: Any = None, colocation: str = "allowed", node_budget: str = "fixed",
                time_limit: float = 10.0, threads: int = 2, seed: int = 0, gap: float = 0.0,
                warm_start: Any = "auto") -> SolverOutput:
    from . import milp
    backends.highs_available()        # import OR-Tools and highspy before the clock starts
    return run_exact(problem, "highs", milp.layer_solver("highs"), **_collect(locals()))


@register("cbc", kind="exact", is_available=backends.cbc_available, requires="pip install pulp",
          description="PuLP MILP solved by CBC (bundled with PuLP): same models, bound read from CBC's log")
def solve_cbc(problem: Problem, *, model: str = "joint", counts: str | None = None,
              replica_counts: Any = None, colocation: str = "allowed", node_budget: str = "fixed",
              time_limit: float = 10.0, threads: int = 2, seed: int = 0, gap: float = 0.0,
              warm_start: Any = "auto") -> SolverOutput:
    from . import milp
    backends.cbc_available()
    return run_exact(problem, "cbc", milp.layer_solver("cbc"), **_collect(locals()))


def _collect(local: dict) -> dict:
    return {k: local[k] for k in _DEFAULTS}
