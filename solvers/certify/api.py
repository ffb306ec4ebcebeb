"""The registered solver ``certify``: a plan and a certified bound per layer, as close
together as the time limit allows.

1. The heuristic portfolio (``best``) gives a plan per layer (a share of the time).
2. Two slots per GPU, global policy: a local search over replica counts, every count
   vector scored by its optimal pairing; the LP relaxation of the exact count-choice
   model (:mod:`.small_slots`), bisected between the combinatorial bound and the plan,
   raises the bound; CP-SAT then looks for better plans of the exact model among counts
   near the plan's (a window around every count, then neighbourhoods of a few experts);
   then CP-SAT bisects on the max load with the exact model: "yes" gives better
   plans, "no" raises the bound, and "no" just below the plan's value proves it optimal.
3. Any other S: exact two-GPU re-splits of the busiest GPU, then exact three-GPU
   re-splits (:mod:`.resplit`; up to S = 5), then count moves (one
   replica from a donor to an expert of the busiest GPU, repaired by the re-splits), all
   within the busiest GPU's node under the hierarchical policy so the plan keeps its
   structure. With integer loads (token counts) the busiest node (global policy: all
   GPUs, where the design model is small enough) is then re-balanced by residue design
   (:mod:`.residues`: which experts to split and where, so that the GPUs' fractional
   parts fit, then the whole experts packed around them); under the hierarchical policy
   CP-SAT's packing model (solvers.exact) then repacks that node for the plan's counts,
   warm-started from it, in the time left.
4. Hierarchical policy: the plan on the group-to-node assignment of the bound
   (:mod:`.hierarchical`) replaces the portfolio's where it is better (before step 3).

The bound of step 2 holds for every plan (global, free counts, duplicates allowed) and
goes to ``SolverOutput.bound``. Under the hierarchical policy, the bound for plans with
G/N whole groups per node (node bounds, and the best group-to-node assignment of
:mod:`.hierarchical`) goes to ``model_bound`` with its scope.
``benchmarks/certify_targets.py`` (``gap_closure``) says per layer how much of the
portfolio's gap the plan and the bound each closed.
"""
from __future__ import annotations

import numpy as np
import torch

from ..bounds import lower_bound
from ..clock import clock
from .. import backends
from ..heuristics.portfolio import run_portfolio
from ..options import Option, SolverOptions, policy_option, seed_option, threads_option, time_limit_option
from ..plan import Plan, replica_ranks
from ..problem import Problem
from ..registry import SolverOutput, get_solver, register, run
from ..scoring import gpu_loads, score
from ..result import ModelScope
from . import residues, shares
from .hierarchical import best_assignment, hierarchical_bound, plan_on_assignment
from .resplit import count_moves, polish
from .small_slots import (exact_search, iterated_count_search, lns_counts, lp_bound, pair_phy2log, pair_values,
                          window_search)
from ..work import WorkModel

CERTIFY_OPTIONS = (
    policy_option(),
    time_limit_option(60.0),
    threads_option(1),
    seed_option(0),
    Option("heuristic_share", float, 0.2, "share of the time limit given to the heuristic portfolio",
           minimum=0.0, maximum=1.0, exclusive_minimum=True, advanced=True),
)


def _available() -> bool:
    return backends.highs_available()


# Work model (solvers.work): seconds on 2 cores, coefficients measured by
# `python -m benchmarks.work_model --fit`.
CERTIFY_WORK = WorkModel.of({"1": 0, "S": 0.000295, "R": 0, "L*R": 0, "L*E*R": 4.52e-07, "L*S^2": 0, "L*R*S": 0, "L": 0}, time_limited=True, includes=("kk_swap",))


@register("certify", kind="exact", options=CERTIFY_OPTIONS, is_available=_available, work=CERTIFY_WORK,
          heterogeneous=True,
          requires="pip install pulp 'highspy==<the HiGHS version your ortools bundles>'",
          description="portfolio plan polished by exact two- and three-GPU re-splits and, with token-count loads, "
                      "a residue design that balances GPUs to a fraction of a token; at two slots per GPU a count "
                      "search with optimal pairing, a count-choice LP bound and a CP-SAT bisection on the "
                      "exact count-choice model that proves optima; on real clusters best in time, then the exact "
                      "joint model in time warm-started from it")
def solve_certify(problem: Problem, o: SolverOptions) -> SolverOutput:
    policy, time_limit, threads, seed, heuristic_share = o.policy, o.time_limit, o.threads, o.seed, o.heuristic_share
    start = clock()
    deadline = start + time_limit
    resolved = problem.resolve_policy(policy)
    if not problem.cluster.homogeneous:
        return _certify_in_time(problem, o, start)
    base = run_portfolio(problem, policy=resolved, nodup=False, relax=0, time_limit=time_limit * heuristic_share)
    L, E, R, P = problem.num_layers, problem.num_experts, problem.num_replicas, problem.num_gpus
    S = R // P
    w = problem.weights.to(torch.float64).cpu()                                   # [L, E]
    p2l = base.plan.phy2log.cpu().clone()                                         # [L, R]
    counts = base.plan.logcnt.cpu()                                               # [L, E]
    universal = lower_bound(problem).cpu()                                        # [L]
    bound = universal.clone()
    baseline = _max_load(w, p2l, counts, P)                                       # [L]
    node = None
    if resolved == "hierarchical":
        node = torch.arange(P) // (P // problem.num_nodes)
        p2l = _best_assignment_plan(problem, p2l, time_limit * heuristic_share)
    for layer in range(L):
        now = clock()
        layer_end = now + (deadline - now) / (L - layer)
        # On one node the hierarchical policy constrains nothing: its plans are the global ones.
        if (resolved == "global" or problem.num_nodes == 1) and S == 2:
            span = layer_end - now
            # Plans: count search, then neighbourhoods of the exact model (CP-SAT); bounds: the LP;
            # then CP-SAT bisects with the exact model from the best plan (proofs, better plans).
            # Phase ends: the table of solvers.certify.shares (why: docs/certify.md).
            ends = shares.two_slot_phases(E)
            c = iterated_count_search(w[layer], counts[layer], deadline=now + ends.count_search * span,
                                      seed=seed + layer)
            value = float(pair_values(w[layer], c[None])[0, 0])
            lp = lp_bound(w[layer].numpy(), R, float(bound[layer]), value,
                          deadline=now + ends.lp_bound * span, threads=threads)
            if ends.window_search is not None:
                c = window_search(w[layer], c, deadline=now + ends.window_search * span, window=3,
                                  call_limit=max(shares.WINDOW_CALL_MIN_S, shares.WINDOW_CALL_SHARE * span),
                                  threads=threads)
            c = lns_counts(w[layer], c, deadline=now + ends.neighbourhoods * span, seed=seed + layer,
                           threads=threads)
            c, proven_bound, proven = exact_search(w[layer], c, max(lp, float(bound[layer])),
                                                   deadline=now + ends.exact_bisection * span, threads=threads)
            bound[layer] = max(float(bound[layer]), proven_bound)
            if not proven:           # CP-SAT undecided (64+ experts): back to the neighbourhoods
                c = lns_counts(w[layer], c, deadline=layer_end, seed=seed + layer + 1, threads=threads)
            row = pair_phy2log(w[layer], c)
            if _max_load(w[layer:layer + 1], row[None], c[None], P)[0] < _max_load(
                    w[layer:layer + 1], p2l[layer:layer + 1], counts[layer:layer + 1], P)[0]:
                p2l[layer] = row

        else:
            cnt = replica_ranks(p2l[layer:layer + 1], E)[1][0]
            experts = p2l[layer].view(P, S)
            loads = (w[layer] / cnt)[experts]                                      # [P, S]
            if node is None:                 # global: the re-splits get all the time
                loads, experts = polish(loads, experts, deadline=layer_end)
                _, experts = polish(loads, experts, deadline=layer_end, ways=3)
                experts = count_moves(w[layer], experts, deadline=layer_end)
                p2l[layer] = experts.reshape(-1)
                # all GPUs as one set (residues.balance_gpus leaves sets too large for a design alone)
                p2l[layer] = _balance_busiest_node(p2l[layer], w[layer], torch.zeros(P, dtype=torch.long),
                                                   layer_end, threads, seed + layer)
            else:
                ends = shares.NODE_PHASES
                loads, experts = polish(loads, experts, deadline=now + (layer_end - now) * ends.polish, group=node)
                _, experts = polish(loads, experts, deadline=now + (layer_end - now) * ends.polish_three, ways=3,
                                    group=node)
                experts = count_moves(w[layer], experts, deadline=now + (layer_end - now) * ends.count_moves,
                                      group=node)
                p2l[layer] = experts.reshape(-1)
                p2l[layer] = _balance_busiest_node(p2l[layer], w[layer], node,
                                                   now + (layer_end - now) * ends.residues, threads, seed + layer)
                p2l[layer] = _exact_busiest_node(problem, p2l[layer], w[layer], node, layer_end, threads)
    plan = Plan.from_phy2log(p2l.to(problem.device), E)
    info = dict(base.info)
    info.update(baseline_objective=baseline.tolist(), baseline_bound=universal.tolist(),
                certify_seconds=clock() - start)
    model_bound = model_scope = None
    if resolved == "hierarchical":
        model_bound = lower_bound(problem, policy="hierarchical")
        info["baseline_model_bound"] = model_bound.cpu().tolist()
        enumerated = hierarchical_bound(problem)
        if enumerated is not None:
            model_bound = torch.maximum(model_bound, enumerated * (1 - 1e-12))
        model_scope = ModelScope(policy="hierarchical", counts="free", colocation="allowed", node_budget="fixed")
    return SolverOutput(plan, resolved, bound=bound.to(problem.device), info=info,
                        model_bound=model_bound, model_scope=model_scope)


def _certify_in_time(problem: Problem, o: SolverOptions, start: float) -> SolverOutput:
    """certify on a real cluster (speeds, uneven slots, failed GPUs): ``best`` in time for
    the heuristic share, then the exact joint model in time (:mod:`solvers.exact.timed`,
    CP-SAT when installed, else HiGHS) warm-started from it for the rest; the bound is the
    model's proven one (never below the combinatorial bound in time). The homogeneous
    steps (two-slot pairing and count-choice LP, two- and three-GPU re-splits, residue
    designs, hierarchical assignments) assume R/P identical slots per GPU and do not run."""
    base = run(problem, "best", {"policy": o.policy, "time_limit": o.time_limit * o.heuristic_share})
    backend = "cpsat" if backends.cpsat_available() else "highs"
    left = max(0.1, o.time_limit - (clock() - start))
    exact = run(problem, backend, {"time_limit": left, "threads": o.threads, "seed": o.seed,
                                   "warm_start": base.plan})
    plan = exact.plan if exact.plan is not None else base.plan       # the model keeps the warm start at worst
    bound = lower_bound(problem)
    if exact.bound is not None:
        bound = torch.maximum(bound, exact.bound.to(bound.device, torch.float64))
    info = {"heuristic": base.info, "exact_backend": backend, "exact_message": exact.message,
            "certify_seconds": clock() - start, "steps": "best (time) + joint model in time"}
    return SolverOutput(plan, "global", exact.termination, bound=bound.to(problem.device), info=info,
                        message=exact.message)


def _closed_busiest(row: torch.Tensor, weights: torch.Tensor, node: torch.Tensor, S: int):
    """(slots [n*S], ids [I], local [n, S], gpu [P]) of the busiest node of one layer's
    phy2log ``row`` [R]: its slot indices, the experts it holds, each slot's index into
    ``ids`` and every GPU's load; None when one of those experts also lives on another
    node (not a closed sub-problem)."""
    E = weights.shape[0]
    counts = replica_ranks(row[None], E)[1][0]
    P = node.shape[0]
    gpu = ((weights / counts)[row]).view(P, S).sum(1)                                # [P]
    gpus = torch.nonzero(node == node[int(gpu.argmax())]).flatten()
    slots = (gpus[:, None] * S + torch.arange(S)).reshape(-1)                         # [n*S]
    ids = row[slots].unique()
    if bool((counts[ids] != torch.bincount(row[slots], minlength=E)[ids]).any()):
        return None
    return slots, ids, torch.searchsorted(ids, row[slots]).view(len(gpus), S), gpu


def _balance_busiest_node(row: torch.Tensor, weights: torch.Tensor, node: torch.Tensor, deadline: float,
                          threads: int, seed: int) -> torch.Tensor:
    """phy2log [R] of one layer with its busiest node (``node``: [P] node of each GPU)
    re-balanced by residue design (:mod:`.residues`, integer loads only), again for
    whichever node is then the busiest, until one does not improve."""
    S = row.shape[0] // node.shape[0]
    if not residues.integral(weights.numpy()):
        return row
    for _ in range(int(node.max()) + 1):
        found = _closed_busiest(row, weights, node, S)
        if found is None or clock() >= deadline:
            break
        slots, ids, local, _ = found
        rows = residues.balance_gpus(weights[ids].numpy(), local.numpy(), deadline=deadline, threads=threads,
                                     seed=seed)
        if np.array_equal(rows, local.numpy()):
            break
        out = row.clone()
        out[slots] = ids[torch.as_tensor(rows).reshape(-1)]
        row = out
    return row


def _exact_busiest_node(problem: Problem, row: torch.Tensor, weights: torch.Tensor,
                        node: torch.Tensor | None, deadline: float, threads: int) -> torch.Tensor:
    """phy2log [R] of one layer with the GPUs of the busiest node (all GPUs when ``node``
    is None) repacked by CP-SAT's packing model for the plan's counts, warm-started from
    the plan; kept only where it lowers that node's max load."""
    left = deadline - clock()
    spec = get_solver("cpsat")
    if left < 1.0 or not spec.is_available():
        return row
    E, P = problem.num_experts, problem.num_gpus
    S = problem.num_replicas // P
    counts = replica_ranks(row[None], E)[1][0]
    found = _closed_busiest(row, weights, torch.zeros(P, dtype=torch.long) if node is None else node, S)
    if found is None:
        return row                                  # an expert also lives elsewhere: not a closed sub-problem
    slots, ids, local, gpu = found
    gpus = slots.view(-1, S)[:, 0] // S
    local = local.reshape(-1)
    sub = Problem(weights[ids][None], len(slots), 1, 1, len(gpus))
    warm = Plan.from_phy2log(local[None], len(ids))
    res = run(sub, "cpsat", {"policy": "global", "model": "packing", "replica_counts": counts[ids][None],
                             "warm_start": warm, "time_limit": left, "threads": threads})
    if res.plan is None or float(gpu_loads(sub.weights, res.plan, sub.num_gpus).max()) >= \
            float(gpu[gpus].max()) * (1 - 1e-12):
        return row
    out = row.clone()
    out[slots] = ids[res.plan.phy2log[0].cpu()]
    return out


def _best_assignment_plan(problem: Problem, p2l: torch.Tensor, seconds: float) -> torch.Tensor:
    """Per layer, the better of ``p2l`` [L, R] and a plan on the group-to-node assignment
    of the hierarchical bound (each node planned by the portfolio as a global problem)."""
    found = best_assignment(problem)
    if found is None:
        return p2l

    def solve_nodes(sub: Problem) -> torch.Tensor:
        return run_portfolio(sub, policy="global", nodup=False, relax=0, time_limit=seconds).plan.phy2log

    other = plan_on_assignment(problem, found[1], solve_nodes).cpu()
    E = problem.num_experts
    old = score(problem, Plan.from_phy2log(p2l.to(problem.device), E)).max_load.cpu()
    new = score(problem, Plan.from_phy2log(other.to(problem.device), E)).max_load.cpu()
    return torch.where((new < old)[:, None], other, p2l)


def _max_load(w: torch.Tensor, p2l: torch.Tensor, counts: torch.Tensor, num_gpus: int) -> torch.Tensor:
    """[L] max GPU load of phy2log [L, R] with counts [L, E], loads w [L, E]."""
    per = (w / counts).gather(1, p2l)                                              # [L, R]
    return per.view(p2l.shape[0], num_gpus, -1).sum(-1).max(1).values
