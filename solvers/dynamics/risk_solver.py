"""The registered solver ``risk_aware`` (:mod:`.risk`; migration-aware with ``current``, :mod:`.risk_migration`)."""
from __future__ import annotations

from typing import Any

import torch

from ..threads import one_intra_op_thread
from ..errors import OptionError, PlanError
from ..options import Option, SolverOptions, policy_option
from ..plan import Plan
from ..problem import Problem
from ..registry import SolverOutput, register
from .risk import (DEFAULT_COUNT_RISK, DEFAULT_HALFLIFE, DEFAULT_RISK, plan_risk_aware, step_weights,
                   window_objective)
from .risk_migration import keep_in_place
from .robust import _HISTORY, buckets_of, check_history
from .scenario import scenario_bound, scenario_value
from ..work import WorkModel

_BUCKETS = Option("buckets", int, 128, "the window's steps are summed into at most this many consecutive "
                  "blocks (bounds time and memory)", minimum=1, maximum=4096, advanced=True)


def check_current(problem: Problem, current: Any) -> torch.Tensor | None:
    """The placement in force as phy2log [L, R] on the problem's device (None: none)."""
    if current is None:
        return None
    if not isinstance(current, Plan):
        raise OptionError("current", f"must be a solvers.Plan (the placement in force), got {type(current).__name__}")
    try:
        current.to(problem.device).validate(problem.num_layers, problem.num_experts, problem.num_replicas,
                                            problem.num_gpus if problem.cluster.uniform_slots else None)
    except PlanError as exc:
        raise OptionError("current", f"is not a valid plan of this problem: {exc}") from None
    return current.phy2log.to(problem.device)


# Work model (solvers.work): seconds on 2 cores, coefficients measured by
# `python -m benchmarks.work_model --fit`.
RISK_AWARE_WORK = WorkModel.of({"1": 0, "S": 0, "R": 0.0039, "L*R": 0, "L*E*R": 1.51e-07, "L*S^2": 0, "L*R*S": 2.84e-06, "T*L*R": 1.19e-06, "T*L*R*steps": 0, "B*L*R*S*steps": 0})


@register("risk_aware", kind="heuristic", in_suites=False, heterogeneous=True, work=RISK_AWARE_WORK,
          options=(policy_option(), _HISTORY,
                   Option("risk", float, DEFAULT_RISK, "z of the GPU risk mean + z x std of its per-step load "
                          "(placement and swaps)", minimum=0.0, maximum=100.0),
                   Option("count_risk", float, DEFAULT_COUNT_RISK, "z of the expert load mean + z x std that "
                          "sets the replica counts", minimum=0.0, maximum=100.0),
                   Option("halflife", float, DEFAULT_HALFLIFE, "steps after which a step's weight halves (none: every "
                          "step of the window weighs the same)", minimum=0.0, exclusive_minimum=True,
                          maximum=1e6, nullable=True),
                   Option("noise", float, 1.0, "share of a step's Poisson variance (the mean, for token "
                          "counts) taken as sampling noise and left out of the risk (0: none)", minimum=0.0,
                          maximum=1e6, advanced=True),
                   Option("steps", int, 64, "rounds of the risk swap search", minimum=0, maximum=100_000,
                          advanced=True),
                   _BUCKETS,
                   Option("current", object, None, "the placement in force (a solvers.Plan): re-plan with few "
                          "moves within slack of the fresh plan's per-step imbalance on the window",
                          nullable=True, advanced=True),
                   Option("slack", float, 0.01, "with current: how much worse than the fresh plan's per-step "
                          "imbalance on the window a plan with fewer moves may be", minimum=0.0, maximum=10.0,
                          advanced=True)),
          description="out of sample: risk-aware counts and placement from the window's steps "
                      "(means and covariances), then swaps that lower the riskiest GPU")
def solve_risk_aware(problem: Problem, o: SolverOptions) -> SolverOutput:
    hist = buckets_of(check_history(problem, o.history), o.buckets)
    current = check_current(problem, o.current)
    resolved = problem.resolve_policy(o.policy)
    with one_intra_op_thread():     # hundreds of small kernels: an OpenMP team only waits on a busy machine
        p2l, info = plan_risk_aware(problem, hist, resolved, count_risk=o.count_risk, risk=o.risk,
                                    halflife=o.halflife, steps=o.steps, noise=o.noise)
        if current is not None:
            p2l, kinfo = keep_in_place(problem, hist, resolved, p2l, current, slack=o.slack,
                                       count_risk=o.count_risk, risk=o.risk, halflife=o.halflife, noise=o.noise,
                                       steps=o.steps)
            info.update(kinfo)
        k = step_weights(hist.shape[0], o.halflife, hist.device)
        # In-window gap: the plan's sum over steps of the per-step max (max time on a real
        # cluster) against the scenario bound, valid for every plan of the cluster.
        gap = scenario_value(hist, p2l, problem.num_gpus, cluster=problem.cluster) / scenario_bound(problem, hist) - 1
        info.update(window_gap_mean=float(gap.mean()))
        window = window_objective(hist, k, p2l, problem.num_gpus, problem.cluster)
    info.update(steps_in_window=hist.shape[0], window_imbalance=float(window.mean()))
    return SolverOutput(Plan.from_phy2log(p2l, problem.num_experts), resolved, info=info)
