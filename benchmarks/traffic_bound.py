"""A certified lower bound on cross-node traffic for small instances (CP-SAT), so the
heuristic's traffic has a gap.

Per layer, the model is a relaxation of "every plan whose GPU imbalance is at most
``limit``", with the best dispatcher instead of the nearest-replica rule:

- ``m[e, n]`` replicas of expert e on node n (integers), ``sum_n m[e, n] = c_e >= 1``,
  ``sum_e m[e, n] = R / N``; ``x[e, n] = (m[e, n] >= 1)``;
- node loads under the even split, ``sum_e w_e m[e, n] / c_e <= limit * W / N`` (a GPU
  imbalance <= limit implies it), linearised exactly on integer loads: ``l[e, n] * c_e >=
  w_e m[e, n] - c_e + 1`` makes ``l[e, n] >= floor(w_e m[e, n] / c_e)``, and
  ``sum_e l[e, n] <= floor(limit * W / N)``;
- ``d[g, e, n]``: source GPU g sends expert e's tokens to remote node n, one choice per
  (g, e) for all its tokens, as the scorer's dispatcher (:mod:`solvers.traffic`) and a
  static per-rank dispatch map do: ``x[e, s_g] + sum_n d[g, e, n] >= 1``, ``d <= x[e, n]``;
- ``z[t, n]``: token t (from GPU g_t) reaches remote node n: ``z[t, n] >= d[g_t, e, n]``
  for every expert e of t;
- minimise ``sum z`` (token-node copies, what inter-node bytes count).

Every plan within the limit, dispatched by any rule fixed per (source GPU, expert) (the
nearest-replica rule is one), sends at least the optimum, so CP-SAT's proven objective
bound is a valid lower bound on the inter-node copies of the heuristic's plan (sources:
:meth:`RoutingTrace.source_gpus`). An earlier model let every token pick its own remote
replica (``per_token_dispatch=True`` keeps it: a weaker bound, valid for any dispatcher).
Only for small instances (tens of experts, hundreds of tokens).

On a real cluster (speeds, uneven slots, failed GPUs) ``limit`` is a *time* imbalance: every
GPU's load is at most ``limit x W / total speed x its speed``, so node n holds exactly its
slots (:class:`solvers.routing.nodes.Nodes`) and at most ``limit x W x speed_n / total
speed`` of load; tokens start on the live GPUs (:func:`solvers.traffic.source_gpus`).
"""
from __future__ import annotations

import math

import torch

from solvers.errors import OptionError
from solvers.problem import Problem
from solvers.traffic import source_gpus
from solvers.routing.nodes import Nodes
from solvers.routing.trace import RoutingTrace


def traffic_bound(problem: Problem, routing: RoutingTrace, limit: torch.Tensor | float, *,
                  time_limit: float = 30.0, workers: int = 2,
                  per_token_dispatch: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(bound [L] float64 remote token-node copies, optimal [L] bool) per layer.

    limit: the GPU imbalance the plans may reach (a float or [L]). Needs OR-Tools.
    """
    try:
        from ortools.sat.python import cp_model      # optional dependency (the "exact" extra)
    except ImportError as exc:
        raise OptionError("solver", "the traffic bound needs OR-Tools (pip install ortools)") from exc
    L, E = problem.num_layers, problem.num_experts
    N, P, R = problem.num_nodes, problem.num_gpus, problem.num_replicas
    if routing.num_layers != L or routing.num_experts != E:
        raise OptionError("routing", "the trace does not match the problem's layers and experts")
    w_all = problem.weights.to("cpu", torch.float64)
    if not bool((w_all == w_all.round()).all()):
        raise OptionError("weights", "the traffic bound needs integer loads (token counts)")
    lim = torch.as_tensor(limit, dtype=torch.float64).expand(L)
    src_gpu = source_gpus(routing, problem.cluster).tolist()
    src_node = [g // (P // N) for g in src_gpu]
    nodes = Nodes.of(problem.cluster)
    slots = nodes.slots.tolist()                                          # R / N each on identical GPUs
    share = nodes.share.tolist()                                          # 1.0 each on identical GPUs
    bounds = torch.zeros(L, dtype=torch.float64)
    optimal = torch.zeros(L, dtype=torch.bool)
    for layer in range(L):
        w = [int(v) for v in w_all[layer].tolist()]
        caps = [math.floor(float(lim[layer]) * sum(w) / N * share[n] + 1e-9) for n in range(N)]
        m = cp_model.CpModel()
        cnt = [[m.NewIntVar(0, slots[n], f"m{e}_{n}") for n in range(N)] for e in range(E)]
        x = [[m.NewBoolVar(f"x{e}_{n}") for n in range(N)] for e in range(E)]
        c = [m.NewIntVar(1, R - E + 1, f"c{e}") for e in range(E)]
        for e in range(E):
            m.Add(sum(cnt[e]) == c[e])
            for n in range(N):
                m.Add(cnt[e][n] >= 1).OnlyEnforceIf(x[e][n])
                m.Add(cnt[e][n] == 0).OnlyEnforceIf(x[e][n].Not())
        for n in range(N):
            m.Add(sum(cnt[e][n] for e in range(E)) == slots[n])
            loads = []
            for e in range(E):
                lo = m.NewIntVar(0, w[e], f"l{e}_{n}")
                prod = m.NewIntVar(0, w[e] * (R - E + 1), f"p{e}_{n}")
                m.AddMultiplicationEquality(prod, [lo, c[e]])
                m.Add(prod >= w[e] * cnt[e][n] - c[e] + 1)
                loads.append(lo)
            m.Add(sum(loads) <= caps[n])
        z, d = {}, {}
        ids = routing.topk_ids[layer].tolist()
        for t, experts in enumerate(ids):
            s = src_node[t]
            remote = [n for n in range(N) if n != s]
            for n in remote:
                z[t, n] = m.NewBoolVar(f"z{t}_{n}")
            for e in set(experts):
                key = (t if per_token_dispatch else src_gpu[t], e)
                if key not in d:                  # the remote node this source sends e's tokens to
                    d[key] = {n: m.NewBoolVar("") for n in remote}
                    for n in remote:
                        m.AddImplication(d[key][n], x[e][n])
                    m.AddBoolOr([x[e][s], *d[key].values()])
                for n in remote:
                    m.AddImplication(d[key][n], z[t, n])
        m.Minimize(sum(z.values()))
        solver = cp_model.CpSolver()
        solver.parameters.max_time_in_seconds = float(time_limit)
        solver.parameters.num_workers = int(workers)
        status = solver.Solve(m)
        if status == cp_model.INFEASIBLE:
            raise OptionError("limit", f"layer {layer}: no plan reaches imbalance {float(lim[layer]):.4g}")
        bounds[layer] = math.ceil(solver.BestObjectiveBound() - 1e-6)
        optimal[layer] = status == cp_model.OPTIMAL
    return bounds, optimal
