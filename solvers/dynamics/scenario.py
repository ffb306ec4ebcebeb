"""The scenario objective of a window: the sum over its steps of each step's max GPU load.

A plan made on a window of steps ``history [W, L, E]`` is one placement for all of them;
each step waits for its busiest GPU. The *scenario objective* of a plan is, per layer,
``sum_t max_g load[t, g]`` (even split). Out-of-sample planners (``risk_aware``,
``robust_sum``) aim at it on the window; this module gives

- :func:`scenario_value`: the objective of a plan, ``[L]``;
- :func:`scenario_bound`: a lower bound ``[L]`` valid for **every** plan: each step's max is
  at least that step's best combinatorial bound (:func:`solvers.bounds.lower_bound`: the
  average ``W_t / P``, the hottest expert, the replication bound), summed over steps; on
  small instances also the shared-count bound (one count vector for every step, the
  minimum over all of them: :func:`shared_count_bound`), the larger of the two;
- ``scenario_cpsat``: the exact scenario model in CP-SAT for small instances (a count per
  expert chosen by binaries, replicas per (expert, GPU), one max per step), global policy.

On a real cluster (per-GPU speeds, uneven slot counts, failed GPUs) every figure is in
*time*: a GPU's load over its speed, failed GPUs holding nothing; the bounds divide by
the live GPUs' total speed and the hottest replica by the fastest speed, and the exact
model gives each live GPU its own slot count and speed (speeds as exact small ratios).
  Its optimum and CP-SAT's proven bound are on the scenario objective, so they are reported
  in ``info`` (``scenario_value``, ``scenario_bound``, ``scenario_optimal``), never as
  bounds of the problem's own objective (the max of the summed loads, which is smaller).
"""
from __future__ import annotations

import itertools
import math
from fractions import Fraction
from typing import Any

import numpy as np
import torch

from ..bounds import lower_bound
from ..cluster import Cluster
from ..clock import clock
from ..errors import OptionError
from .. import backends
from ..options import Option, SolverOptions, colocation_option, threads_option, time_limit_option
from ..plan import Plan
from ..problem import Problem
from ..registry import SolverOutput, register
from ..result import Termination
from ..scoring import step_gpu_times
from .robust import _HISTORY, check_history
from ..work import WorkModel


def tail_steps(num_steps: int, tail: float) -> int:
    """How many of the window's worst steps the ``tail`` share (0, 1] covers: ceil(tail x W), >= 1."""
    return max(1, min(num_steps, math.ceil(tail * num_steps - 1e-9)))


def scenario_value(hist: torch.Tensor, phy2log: torch.Tensor, num_gpus: int, tail: float = 1.0,
                   cluster: Cluster | None = None) -> torch.Tensor:
    """[L] float64: sum over steps of the max GPU load of ``phy2log [L, R]`` under ``hist [W, L, E]``;
    with ``tail`` < 1 only the :func:`tail_steps` largest per-step maxima are summed (the
    CVaR of the per-step max at level 1 - tail, times the steps it covers). With a
    ``cluster`` that is not homogeneous: the max GPU *time* (load over speed, slots summed
    per GPU by the cluster's uneven slot ranges)."""
    step_max = step_gpu_times(hist, phy2log, num_gpus, cluster).max(-1).values              # [W, L]
    return step_max.topk(tail_steps(hist.shape[0], tail), dim=0).values.sum(0)


def scenario_bound(problem: Problem, hist: torch.Tensor, tail: float = 1.0) -> torch.Tensor:
    """[L] float64 lower bound on :func:`scenario_value` for every plan of ``problem``'s cluster:
    the larger of the sum over steps of each step's best combinatorial bound (each >= W_t / P)
    and, where the count vectors are few enough to list, :func:`shared_count_bound`. With
    ``tail`` < 1 it bounds the tail objective of :func:`scenario_value` (a step's max is at
    least its bound, so the largest maxima sum to at least the largest bounds). On a real
    cluster both are bounds in time (:func:`scenario_value` with the cluster)."""
    W, L, E = hist.shape
    steps = Problem._trusted(hist.reshape(W * L, E), problem.cluster, problem.num_groups)  # steps x layers as rows
    per_step = lower_bound(steps).view(W, L).topk(tail_steps(W, tail), dim=0).values.sum(0)
    c = problem.cluster
    in_time = {} if c.homogeneous else {"total_speed": c.total_speed,
                                        "fastest": max(c.gpu_speed[g] for g in c.live_gpus)}
    shared = shared_count_bound(hist, problem.num_replicas, problem.num_gpus, tail, **in_time)
    return per_step if shared is None else torch.maximum(per_step, shared)


# shared_count_bound lists the count vectors only up to this many (tiny instances).
MAX_COUNT_VECTORS = 50_000
# ... and values them in chunks of at most this many (vector, step, layer, expert) cells.
_CHUNK_CELLS = 1 << 22


def count_vectors(num_experts: int, num_replicas: int) -> torch.Tensor | None:
    """[V, E] int64: every count vector (each >= 1, summing to R), or None when there are
    more than MAX_COUNT_VECTORS (stars and bars: C(R - 1, E - 1))."""
    E, R = num_experts, num_replicas
    if math.comb(R - 1, E - 1) > MAX_COUNT_VECTORS:
        return None
    combos = list(itertools.combinations(range(1, R), E - 1))
    # reshape with the count spelled out: one expert has one vector of no bars ([1, 0])
    bars = torch.tensor(combos, dtype=torch.int64).reshape(len(combos), E - 1)
    edges = torch.cat([torch.zeros(bars.shape[0], 1, dtype=torch.int64), bars,
                       torch.full((bars.shape[0], 1), R, dtype=torch.int64)], 1)
    return edges.diff(dim=1)


def shared_count_bound(hist: torch.Tensor, num_replicas: int, num_gpus: int,
                       tail: float = 1.0, total_speed: float | None = None,
                       fastest: float = 1.0) -> torch.Tensor | None:
    """[L] float64: min over the count vectors c of sum_t max(W_t / P, max_e w_te / c_e)
    (with ``tail`` < 1: of its :func:`tail_steps` largest terms).

    A plan has one count vector for all the window's steps, and in every step its busiest
    GPU carries at least the mean and at least one replica of each expert (w_te / c_e):
    so this bounds the scenario value of every plan, and sharing the counts across steps
    makes it tighter than the per-step bounds summed (each of which picks its own counts).
    Exact minimum over all count vectors when they are at most MAX_COUNT_VECTORS; None
    otherwise. In time (a real cluster): the busiest GPU's time is at least W_t over the
    live GPUs' ``total_speed`` (their times weighted by speed sum to W_t), and the GPU of a
    replica of e at least w_te / (c_e x ``fastest``) (no live GPU is faster)."""
    W, L, E = hist.shape
    c = count_vectors(E, num_replicas)
    if c is None:
        return None
    h = hist.to(torch.float64)
    avg = h.sum(2) / (num_gpus if total_speed is None else total_speed)          # [W, L]
    c = c.to(h.device, torch.float64)
    k = tail_steps(W, tail)
    best = torch.full((L,), math.inf, dtype=torch.float64, device=h.device)
    chunk = max(1, _CHUNK_CELLS // max(W * L * E, 1))
    for i in range(0, c.shape[0], chunk):
        cc = c[i:i + chunk]                                                       # [V, E]
        top = (h.unsqueeze(0) / cc.view(-1, 1, 1, E)).amax(-1) / fastest          # [V, W, L]
        steps = torch.maximum(top, avg.unsqueeze(0))                              # [V, W, L]
        best = torch.minimum(best, steps.topk(k, dim=1).values.sum(1).amin(0))
    return best


# At most this many integer variables per layer model (E x P x counts): tiny instances only.
MAX_MODEL_VARIABLES = 20000


def speed_ratios(cluster: Cluster) -> list[Fraction]:
    """Each live GPU's speed as an exact ratio of integers up to MAX_SPEED_DENOMINATOR (1.4 =
    7/5), so the model's times are exact integers; raises OptionError for a speed that is not one."""
    out = []
    for g in cluster.live_gpus:
        s = cluster.gpu_speed[g]
        f = Fraction(s).limit_denominator(MAX_SPEED_DENOMINATOR)
        if float(f) != s:
            raise OptionError("gpu_speed", f"the exact scenario model needs speeds that are ratios of integers "
                              f"up to {MAX_SPEED_DENOMINATOR} (e.g. 1.4 = 7/5); GPU {g} has speed {s!r}")
        out.append(f)
    return out


# Speeds are taken as exact ratios with at most this denominator (and numerator magnitude).
MAX_SPEED_DENOMINATOR = 1000
# The model's integer times stay below this (CP-SAT's coefficients are int64).
_MAX_UNITS = 1 << 60


def _layer_model(w: np.ndarray, slots: list[int], speeds: list[Fraction], nodup: bool, time_limit: float,
                 threads: int, tail_k: int) -> tuple[np.ndarray | None, float, float, bool]:
    """One layer: w [W, E] integer loads; slots, speeds [Q]: the live GPUs' slot counts and
    speeds (exact ratios; all 1 on a homogeneous cluster); tail_k: the worst steps summed
    (W: all of them). Returns (phy2log row [R] or None, scenario value, proven bound,
    optimal) in time (load units over speed)."""
    from ortools.sat.python import cp_model     # optional dependency (the "exact" extra)

    W, E = w.shape
    Q, R = len(slots), int(sum(slots))
    kmax = min(R - E + 1, Q if nodup else R)
    unit = math.lcm(*range(1, kmax + 1))         # w * unit / k is an integer for every count k
    # GPU g's time is its load x q_g / p_g (speed p_g / q_g): times M = lcm(p) it is the
    # integer load x (M / p_g) x q_g, so z below is the exact time in units of 1 / (unit x M)
    M = math.lcm(*(f.numerator for f in speeds))
    per_gpu = [(M // f.numerator) * f.denominator for f in speeds]       # [Q] time per load unit
    scale = unit * M
    top = int(w.sum(1).max()) * unit * max(per_gpu)
    if top * W >= _MAX_UNITS:
        raise OptionError("gpu_speed", "the exact scenario model's integer times overflow with these speeds "
                          "and loads (use speeds with smaller ratios, e.g. 1.5 = 3/2)")
    m = cp_model.CpModel()
    n = [[m.NewIntVar(0, 1 if nodup else slots[g], f"n{e}_{g}") for g in range(Q)] for e in range(E)]
    b = [[m.NewBoolVar(f"b{e}_{k}") for k in range(1, kmax + 1)] for e in range(E)]
    for e in range(E):
        m.AddExactlyOne(b[e])
        m.Add(sum(n[e]) == sum((k + 1) * b[e][k] for k in range(kmax)))
    for g in range(Q):
        m.Add(sum(n[e][g] for e in range(E)) == slots[g])
    y = [[[None] * kmax for _ in range(Q)] for _ in range(E)]   # y = n[e][g] if c_e = k + 1 else 0
    for e in range(E):
        for g in range(Q):
            for k in range(kmax):
                v = m.NewIntVar(0, 1 if nodup else slots[g], f"y{e}_{g}_{k}")
                m.Add(v == n[e][g]).OnlyEnforceIf(b[e][k])
                m.Add(v == 0).OnlyEnforceIf(b[e][k].Not())
                y[e][g][k] = v
    z = [m.NewIntVar(0, top, f"z{t}") for t in range(W)]
    for t in range(W):
        for g in range(Q):
            m.Add(z[t] >= sum(int(w[t, e]) * (unit // (k + 1)) * per_gpu[g] * y[e][g][k]
                              for e in range(E) for k in range(kmax) if w[t, e]))
    if tail_k >= W:
        m.Minimize(sum(z))
    else:
        # sum of the tail_k largest z_t = min over eta of tail_k * eta + sum_t max(0, z_t - eta)
        # (Rockafellar-Uryasev); z_t are integers, so an integer eta reaches it.
        eta = m.NewIntVar(0, top, "eta")
        u = [m.NewIntVar(0, top, f"u{t}") for t in range(W)]
        for t in range(W):
            m.Add(u[t] >= z[t] - eta)
        m.Minimize(tail_k * eta + sum(u))
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = time_limit
    solver.parameters.num_workers = threads
    status = solver.Solve(m)
    bound = solver.BestObjectiveBound() / scale
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None, math.inf, bound, False
    # live GPUs in order: slots are numbered GPU by GPU and a failed GPU holds none
    row = [e for g in range(Q) for e in range(E) for _ in range(solver.Value(n[e][g]))]
    return np.array(row, dtype=np.int64), solver.ObjectiveValue() / scale, bound, status == cp_model.OPTIMAL


# Work model (solvers.work): seconds on 2 cores, coefficients measured by
# `python -m benchmarks.work_model --fit`.
SCENARIO_WORK = WorkModel.of({"1": 0.01, "R": 2e-5, "L*R": 2e-8, "L*E*R": 1e-9, "L": 1e-3, "T*L*R": 1e-8}, time_limited=True)


@register("scenario_cpsat", kind="exact", in_suites=False, is_available=backends.cpsat_available, work=SCENARIO_WORK,
          heterogeneous=True,
          requires="pip install ortools",
          options=(_HISTORY, colocation_option("forbidden"), time_limit_option(10.0), threads_option(),
                   Option("tail", float, 1.0, "share of the window's steps, the worst ones, whose max GPU loads "
                          "are summed: 1 = every step (the scenario sum); less = CVaR of the per-step max at "
                          "level 1 - tail (the ceil(tail x steps) largest)", minimum=0.0, exclusive_minimum=True,
                          maximum=1.0)),
          description="exact scenario model (CP-SAT, small instances, global policy): minimise the sum over "
                      "the window's steps (or its worst share, CVaR) of each step's max GPU load (time: load "
                      "over speed, on real clusters)")
def solve_scenario_cpsat(problem: Problem, o: SolverOptions) -> SolverOutput:
    hist = check_history(problem, o.history)
    if not bool((hist == hist.round()).all()):
        raise OptionError("history", "the exact scenario model needs integer loads (token counts)")
    W, L, E = hist.shape
    c = problem.cluster
    R = problem.num_replicas
    slots = [c.gpu_slots[g] for g in c.live_gpus]                 # [Q] live GPUs only
    speeds = speed_ratios(c)
    Q = len(slots)
    nodup = o.colocation == "forbidden"
    if nodup and E < max(slots):
        raise OptionError("colocation", f"forbidden: a GPU has {max(slots)} slots but there are only {E} experts")
    if E * Q * min(R - E + 1, R) > MAX_MODEL_VARIABLES:
        raise OptionError("problem", f"the scenario model is for small instances: {E} experts x {Q} GPUs x "
                          f"counts exceeds {MAX_MODEL_VARIABLES} variables per layer")
    deadline = clock() + o.time_limit
    tail_k = tail_steps(W, o.tail)
    rows, values, bounds, optimal = [], [], [], []
    w = hist.cpu().numpy()
    for layer in range(L):
        # an equal share of the time left (the first layer took it all, leaving the next ones
        # nothing: a plan for none); a layer without a plan in its share ends the solve on the
        # time limit (no warm start to keep: the model has none)
        share = max(deadline - clock(), 1e-3) / (L - layer)
        row, value, bound, opt = _layer_model(w[:, layer], slots, speeds, nodup, share, o.threads, tail_k)
        if row is None:
            return SolverOutput(None, "global", Termination.TIME_LIMIT,
                                message=f"no scenario plan found for layer {layer} in its share of the time limit")
        rows.append(row)
        values.append(value)
        bounds.append(bound)
        optimal.append(opt)
    p2l = torch.as_tensor(np.stack(rows), device=problem.device)
    info: dict[str, Any] = {"scenario_value": values, "scenario_bound": bounds, "scenario_optimal": optimal,
                            "steps_in_window": W, "tail_steps": tail_k}
    return SolverOutput(Plan.from_phy2log(p2l, E), "global", info=info)
