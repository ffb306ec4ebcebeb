"""The registered exact solvers: "cpsat" (OR-Tools CP-SAT), "highs" and "cbc" (PuLP MILP).

All three take the same keyword-only options (one schema, :data:`EXACT_OPTIONS`) and
solve the same models:

policy: "auto" | "hierarchical" | "global", as for every solver (auto = hierarchical when
    G % N == 0). Hierarchical keeps whole groups on a node (groups to nodes, replicas
    inside their node, then GPUs).
model: "joint" (counts and placement together, even split; default), "packing" (fixed
    counts) or "replication" (counts only; its optimum bounds the max GPU load of every
    plan, whatever the policy).
replica_counts: [layers, experts] or [experts] counts for the packing model; default the
    warm start's counts, else the optimal replication counts.
colocation: "allowed" or "forbidden" (no two replicas of one expert on one GPU).
node_budget: hierarchical only: "fixed" (G/N groups per node, DeepSeek's rule) or "free"
    (any number of whole groups per node; each node still has its R/N physical slots).
time_limit: seconds for the whole solve, model building included: each layer's model is
    estimated before it is built (:mod:`.budget`) and built against one deadline; layers
    whose model does not fit keep their warm start with status "time_limit", and the
    message says "model not built in time: N of L layers built" (see driver.py).
threads, seed: backend workers and random seed. gap: relative gap at which to stop (0 =
    prove optimality).
warm_start: "auto" (DeepSeek's plan for the policy, used when it is feasible for the
    model; with free counts, per layer the better of it and kk_swap's plan when kk_swap's
    estimate fits a quarter of the time limit; with colocation="forbidden" the
    duplicate-free kk_swap plan instead, and for given replica_counts those counts packed
    by the heuristics), None, or a :class:`solvers.Plan` (must be feasible for the model
    and fit the problem's sizes). A layer whose warm start meets its bound is optimal
    without a model.

A bound proven for a restricted model (hierarchical, fixed counts, forbidden colocation)
is returned as a *model bound* with its scope; only a model of every plan (global, free
counts, duplicates allowed; or the replication model) gives a lower bound.

On a cluster with per-GPU speeds, uneven slot counts or failed GPUs, every backend solves
the same joint model in time over the live GPUs (global policy; duplicates allowed gives a
lower bound, colocation="forbidden" a model bound; warm start: kk_swap's plan).
"""
from __future__ import annotations

from ..options import (
    Option,
    SolverOptions,
    colocation_option,
    policy_option,
    seed_option,
    threads_option,
    time_limit_option,
)
from ..problem import Problem
from ..registry import SolverOutput, register
from .. import backends
from . import cpsat, milp
from .driver import run_exact
from ..work import WorkModel

EXACT_OPTIONS = (
    policy_option(),
    Option("model", str, "joint", "joint: counts and placement together; packing: fixed replica counts; "
           "replication: counts only (its optimum bounds every plan)", choices=("joint", "packing", "replication")),
    colocation_option(),
    Option("node_budget", str, "fixed", "hierarchical only: fixed = G/N groups per node (DeepSeek's rule), "
           "free = any number of whole groups per node", choices=("fixed", "free"), advanced=True),
    Option("replica_counts", object, None, "packing model: [layers, experts] or [experts] replica counts "
           "(default: the warm start's)", nullable=True, advanced=True),
    time_limit_option(10.0, "seconds for the whole solve (all layers, model building included)"),
    threads_option(2),
    seed_option(0),
    Option("gap", float, 0.0, "relative gap at which to stop (0 = prove optimality)", minimum=0.0, maximum=1.0,
           advanced=True),
    Option("warm_start", object, "auto", "'auto' (per layer the better of DeepSeek's and kk_swap's plans), None, "
           "or a solvers.Plan", nullable=True, advanced=True),
)


def _exact_solver(backend: str, probe):
    """The registered function of one backend: every backend takes the same options."""
    def solve_exact(problem: Problem, options: SolverOptions) -> SolverOutput:
        probe()             # import the backend (OR-Tools first, about 1 s) before the clock starts
        # the layer solver looked up at each call (tests replace cpsat.solve_layer)
        return run_exact(problem, backend, cpsat.solve_layer if backend == "cpsat" else milp.layer_solver(backend),
                         options)

    solve_exact.__name__ = f"solve_{backend}"
    return solve_exact


# Work model (solvers.work): seconds on 2 cores, coefficients measured by
# `python -m benchmarks.work_model --fit`.
EXACT_WORK = WorkModel.of({"1": 0, "S": 0, "R": 0.000125, "L*R": 0, "L*E*R": 4.37e-07, "L*S^2": 0, "L*R*S": 0, "L": 0}, time_limited=True)

_IN_TIME = "; the joint model in time on real clusters"
for _name, _probe, _requires, _what in (
        ("cpsat", backends.cpsat_available, "pip install ortools",
         "OR-Tools CP-SAT: joint/packing/replication models, global or hierarchical, proven bounds"),
        ("highs", backends.highs_available, "pip install pulp 'highspy==<the HiGHS version your ortools bundles, "
         "1.12.* for ortools 9.15>'", "PuLP MILP solved by HiGHS (highspy): same models, mip_dual_bound as bound"),
        ("cbc", backends.cbc_available, "pip install pulp",
         "PuLP MILP solved by CBC (bundled with PuLP): same models, bound read from CBC's log")):
    register(_name, kind="exact", options=EXACT_OPTIONS, work=EXACT_WORK, is_available=_probe, requires=_requires,
             heterogeneous=True, description=_what + _IN_TIME)(_exact_solver(_name, _probe))
