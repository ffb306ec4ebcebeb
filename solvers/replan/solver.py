"""Re-planning near a plan in force: the fewest moves within ``(1 + slack)`` of a fresh plan's balance.

:func:`plan_with_migration` is the library entry; the registered solver ``migration`` does
the work, so the plan is graded (max loads, moves, bytes) by the shared scorer through
:func:`solvers.solve` like any other plan. One path over the cluster, per layer, with
``T = (1 + slack) x`` the max GPU time of a fresh plan by ``base`` (on a homogeneous
cluster, speed 1 and R/P slots everywhere, the max load):

1. candidates near the plan in force. Homogeneous cluster: the fresh plan relabelled to keep
   the most replicas in place (:mod:`.relabel`; it always meets T and is the fallback), and the
   placement in force repaired until it meets T (:mod:`.repair`; under the hierarchical policy,
   layers whose nodes drifted apart first move the fewest whole groups, :func:`.repair.regroup`), kept
   where it moves fewer replicas. Speeds, uneven slots or failed GPUs: the elastic re-plan in
   time (:mod:`solvers.elastic`), the plan in force being made for this cluster or, after GPUs
   failed, for the same GPUs before (every GPU with the live GPUs' slot count);
2. ``budget``: when the plan moves more than ``budget`` x the fresh plan's moves, the layers
   saving the most moves are re-planned at the wider slacks of ``BUDGET_SLACKS``, level by
   level, until it fits;
3. ``method="exact"``: a CP-SAT model per layer over the cluster (:mod:`solvers.replan.exact`),
   warm-started from the best of the above, within what is left of ``time_limit``; proven
   optimum or gap per layer.

``history`` (the window's steps [W, L, E], with the base planner's ``halflife`` if it has one):
the slack is judged on the forecast the base planner trusts instead, the per-step imbalance
over those steps, not the max load of their sum (a plan balanced on the sum can leave every
step waiting for one GPU); the candidates are the relabelled fresh plan and risk-aware sticky
plans (:func:`solvers.dynamics.risk_migration.keep_in_place`), the fewest moves whose forecast,
averaged over layers, is within ``slack`` of the fresh plan's (move objective, heuristic
method, no budget; ``eplb simulate`` passes it for every planner).

``objective="makespan"`` plans for transfer time instead of the move count (same slack and
targets: only which plan within them is chosen changes), timed under ``transfer_model``
(:func:`solvers.transfers.schedule_transfers`). Homogeneous: every new (GPU, expert) pair
weighs what its copy takes over the cluster's network (:func:`.relabel.copy_costs`: an
inter-node copy costs ``intra_node_bw / inter_node_bw`` intra-node ones), in the relabelling,
the repair's swaps and the choice between them; since the makespan is set by the busiest GPU,
the copies onto the GPUs that receive most are made dearer and the plan is made again
(``MAKESPAN_PASSES`` times), and the best is also tried with the GPUs of each node renamed per
layer to spread the receivers (:func:`.relabel.spread_receivers`). Elsewhere the elastic
re-plan is also made at the tighter slacks ``slack x IN_TIME_SHARES`` (each within the slack
too). The plan with the shortest schedule wins (fewest moves on ties), so it is never longer
than the move-count plan's.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import torch

from ..clock import clock
from ..cluster import Cluster
from ..dynamics.risk import DEFAULT_COUNT_RISK, DEFAULT_RISK
from ..dynamics import risk_migration     # the module (it imports .relabel, so this package: a cycle)
from ..dynamics.robust import check_history
from ..elastic.solver import check_elastic, elastic, fresh_plan, healthy_cluster, no_plan_in_force
from ..errors import OptionError
from ..grading import graded_run
from ..heuristics.pipeline import layer_times
from .exact import LayerShares, count_window, solve_layer
from ..options import Option, SolverOptions, seed_option, threads_option, time_limit_option
from ..plan import Plan
from ..problem import Problem
from ..registry import SolverOutput, get_solver, register
from ..result import SolveResult
from ..threads import one_intra_op_thread
from ..scoring import gpu_loads, gpu_presence, new_pairs, uneven_slot_gpu
from ..transfers import TRANSFER_MODELS, TransferSchedule, schedule_transfers
from ..work import WorkModel
from .relabel import copy_costs, relabel, spread_receivers
from .repair import TARGET_RTOL, recount, regroup, repair

METHODS = ("heuristic", "exact")
OBJECTIVES = ("moves", "makespan")
# Passes of the makespan objective: each makes the copies onto the GPUs that receive most
# dearer (by their share of the busiest GPU's receive time) and plans again.
MAKESPAN_PASSES = 3
# How much dearer a pass makes the copies onto the busiest receiver (others in proportion):
# measured on DeepSeek-V3 drifting re-plans, 0.25 and 1 differ by a few percent either way.
RECEIVER_WEIGHT = 0.25
# An expert gets another replica when its replicas are this much heavier than the fresh
# plan's heaviest (times 1 + slack): stale counts on hot experts cost balance on the next
# steps' loads, while chasing every count change costs moves for little (measured on the
# drifting traces: 0.03 keeps both within a few tenths of a percent of their best).
ITEM_MARGIN = 0.03
# With a move budget, layers are repaired again at these wider slacks (smallest first) until
# the plan fits it.
BUDGET_SLACKS = (0.02, 0.03, 0.05, 0.08, 0.13, 0.2)
# Makespan objective on a real cluster: the elastic re-plan is also made at these shares of the
# slack (tighter targets keep fewer replicas in place, so they move others, on other GPUs).
IN_TIME_SHARES = (0.5, 0.0)
# Schedules are timed with experts of this many bytes and reported per byte (copy times scale
# with the size; one-byte experts gave the shared model's source LP makespans under its tolerance).
TIMING_BYTES = 2**30


def widen_to_budget(p2l: torch.Tensor, moves: torch.Tensor, allowed: int, slack: float,
                    at: Callable[[float], tuple[torch.Tensor, torch.Tensor]],
                    ) -> tuple[torch.Tensor, torch.Tensor, dict[int, float]]:
    """The move budget, level by level: while the plan ``p2l`` [L, R] moves more than
    ``allowed`` in all (``moves`` [L] per layer), take from the plan at the next wider slack of
    BUDGET_SLACKS (``at(wider)``: its phy2log [L, R] and moves [L]) the fewest layers, largest
    savings first, that remove the excess. Returns the plan, its moves [L] and {layer: slack
    used}."""
    out, moves = p2l.clone(), moves.clone()
    relaxed: dict[int, float] = {}
    for wider in BUDGET_SLACKS:
        excess = int(moves.sum()) - allowed
        if excess <= 0:
            break
        if wider <= slack:
            continue
        alt, cand = at(wider)
        saving = (moves - cand).clamp_min(0)                                          # [L]
        order = torch.argsort(saving, descending=True, stable=True)
        need = int((torch.cumsum(saving[order], 0) < excess).sum()) + 1
        take = order[:need][saving[order[:need]] > 0]
        out[take.to(out.device)] = alt[take.to(alt.device)].to(out.device)
        moves[take] = cand[take]
        relaxed.update({int(layer): wider for layer in take.tolist()})
    return out, moves, relaxed


def _zones(policy: str, problem: Problem) -> int:
    """Node zones replicas must stay in: the nodes under a strict hierarchical plan, else 1."""
    return problem.num_nodes if policy == "hierarchical" else 1


def _group_nodes(previous: np.ndarray, hint: np.ndarray, E: int, G: int, P: int, N: int) -> np.ndarray:
    """[G, N] bool: the nodes each group had in the old plan or the warm start (hierarchical)."""
    S, Q = len(previous) // P, P // N
    out = np.zeros((G, N), dtype=bool)
    for p2l in (previous, hint):
        out[p2l // (E // G), np.arange(len(p2l)) // S // Q] = True
    return out


def _in_time(problem: Problem, previous: Plan, old_cluster: Cluster, fresh: SolverOutput, base: str, slack: float,
             budget: float | None, objective: str, transfer_model: str) -> tuple[torch.Tensor, dict[str, Any]]:
    """Step 1 (and 2) on a cluster with speeds, uneven slots or failed GPUs: the elastic re-plan
    of ``previous`` (made for ``old_cluster``) at ``slack``; for the makespan objective also at
    ``slack x IN_TIME_SHARES``, the shortest schedule kept. Returns phy2log [L, R] and the report."""
    def at(s: float) -> SolverOutput:
        return elastic(problem, previous, old_cluster, base=base, slack=s, fresh=fresh)

    out, info = at(slack), {}
    if objective == "makespan":
        outs = [out] + [at(slack * share) for share in IN_TIME_SHARES]
        passes = [_timed(problem, previous, old_cluster, x.plan.phy2log, transfer_model, slack=slack * share)[1]
                  for x, share in zip(outs, (1.0,) + IN_TIME_SHARES)]
        k = min(range(len(outs)), key=lambda i: (passes[i]["makespan_per_byte"], passes[i]["moves"]))
        out, info = outs[k], {"makespan_passes": passes, "makespan_pass_used": k}
    p2l = out.plan.phy2log
    moves = torch.tensor(out.info["moves_per_layer"], dtype=torch.int64)                # [L]
    relaxed: dict[int, float] = {}
    if budget is not None:
        def wider(s: float) -> tuple[torch.Tensor, torch.Tensor]:
            alt = at(s)
            return alt.plan.phy2log, torch.tensor(alt.info["moves_per_layer"], dtype=torch.int64)

        p2l, moves, relaxed = widen_to_budget(p2l, moves, int(out.info["fresh_moves"] * budget), slack, wider)
    return p2l, {"in_time": True, **out.info, "budget": budget, "relaxed_layers": relaxed,
                 "heuristic_moves": int(moves.sum()), **info}


def _timed(problem: Problem, previous: Plan, old_cluster: Cluster, p2l: torch.Tensor, transfer_model: str,
           **label: Any) -> tuple[TransferSchedule, dict[str, Any]]:
    """The transfer schedule from ``previous`` (made for ``old_cluster``) to ``p2l`` [L, R] on
    ``problem``'s cluster, timed with ``TIMING_BYTES`` experts (every copy time scales with the
    expert size), and its record for ``info["makespan_passes"]`` (``label`` first)."""
    c = problem.cluster
    # after GPUs failed, without host memory the experts only they held have no source in the
    # network: every plan re-creates them from outside it, so the network's part is timed
    sched = schedule_transfers(previous, p2l, c.num_gpus, c.num_gpus // c.num_nodes, TIMING_BYTES, c.network,
                               num_experts=problem.num_experts, model=transfer_model, slot_gpu=c.slot_gpus(),
                               previous_slot_gpu=old_cluster.slot_gpus(), skip_unsourced=True)
    moves = sched.moves + sched.info.get("copies_unsourced", 0)
    return sched, {**label, "makespan_per_byte": sched.makespan / TIMING_BYTES, "moves": moves}


def _exact_pass(problem: Problem, old: torch.Tensor, start: torch.Tensor, target: torch.Tensor,
                fresh_cnt: np.ndarray | None, zones: int, time_limit: float, threads: int,
                seed: int) -> tuple[torch.Tensor, list[dict]]:
    """Step 3: each layer's CP-SAT model over the cluster (its per-GPU slots and speeds), the
    plan in force ``old`` [L, R] on this cluster, warm-started from ``start`` [L, R]; a layer
    takes the model's plan when it moves fewer replicas and meets ``target`` [L] (max time) in
    float64. fresh_cnt: [L, E] the fresh plan's counts, widening the count window (homogeneous
    only); zones: nodes whole groups stay in (hierarchical). Returns phy2log and per-layer reports."""
    c = problem.cluster
    w = problem.weights.to(torch.float64).cpu().numpy()
    old_np, hints = old.cpu().numpy(), start.cpu().numpy()
    L, E = w.shape
    P = problem.num_gpus
    real = {} if c.homogeneous else {"slots": np.asarray(c.gpu_slots, dtype=np.int64),
                                      "speed": np.asarray(c.gpu_speed, dtype=np.float64)}
    cand, found = start.clone().cpu(), torch.zeros(L, dtype=torch.bool)
    reports = []
    shares = LayerShares(L, time_limit)
    for layer in range(L):
        per_layer = shares.share(layer)
        if per_layer is None:
            reports.append(LayerShares.not_run(layer))
            continue
        counts = [np.bincount(old_np[layer], minlength=E), np.bincount(hints[layer], minlength=E)]
        counts += [] if fresh_cnt is None else [fresh_cnt[layer]]
        lo, hi, full = count_window(problem.num_replicas, E, *counts)
        groups = _group_nodes(old_np[layer], hints[layer], E, problem.num_groups, P, zones) if zones > 1 else None
        began = clock()
        res = solve_layer(w[layer], old_np[layer], float(target[layer]), P, group_nodes=groups, lo=lo, hi=hi,
                          full_window=full, hint=hints[layer], time_limit=per_layer, threads=threads, seed=seed,
                          **real)
        shares.ran(began, per_layer)
        reports.append({"layer": layer, "status": res.status, "moves": res.moves, "bound": res.bound,
                        "proven": res.proven, "full_window": full})
        if res.phy2log is not None:
            cand[layer], found[layer] = torch.from_numpy(res.phy2log), True
    cand = cand.to(start.device)
    sg = uneven_slot_gpu(problem)
    better = (found.to(start.device) & (layer_times(problem, cand) <= target.to(start.device) * (1 + TARGET_RTOL))
              & (new_pairs(cand, old, E, P, sg, sg) < new_pairs(start, old, E, P, sg, sg)))
    return torch.where(better.unsqueeze(1), cand, start), reports


def _heuristic(problem: Problem, previous: Plan, fresh: SolverOutput, slack: float, budget: float | None,
               copy_cost: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, Any]]:
    """Steps (1) and (2) of the module docstring (and the budget): phy2log [L, R] and the report.
    copy_cost: [L, P, E] what each new (GPU, expert) pair costs (None: every move 1)."""
    policy = fresh.policy
    zones = _zones(policy, problem)
    E, P = problem.num_experts, problem.num_gpus
    fresh_max = gpu_loads(problem.weights, fresh.plan, P).max(1).values                # [L] float64
    target = fresh_max * (1 + slack)                                                   # [L]
    old = previous.phy2log
    t0 = clock()
    relabelled = relabel(fresh.plan, previous, P, problem.num_nodes if zones > 1 else 1, copy_cost).phy2log
    relabel_seconds = clock() - t0
    fresh_moves = new_pairs(fresh.plan.phy2log, old, E, P)
    relabel_moves = new_pairs(relabelled, old, E, P)
    t0 = clock()
    fresh_cnt = fresh.plan.logcnt.to(torch.float64)
    item_cap = (problem.weights.to(torch.float64) / fresh_cnt).max(1).values * (1 + slack) * (1 + ITEM_MARGIN)
    fixed = repair(problem.weights, old, target, P, zones, item_cap=item_cap, copy_cost=copy_cost)
    repaired = fixed.phy2log.clone()
    met = fixed.met.clone()
    regrouped: list[int] = []
    if zones > 1 and not bool(met.all()):     # nodes drifted apart: move whole groups
        for layer, row in regroup(problem.weights, old, target, (~met).nonzero().squeeze(1).tolist(),
                                  problem.num_groups, problem.num_nodes, P, item_cap=item_cap,
                                  copy_cost=copy_cost).items():
            repaired[layer], met[layer] = row, True
            regrouped.append(layer)
    recounted: list[int] = []
    if zones == 1 and not bool(met.all()):    # counts drifted: start again with the fresh counts
        rows = (~met).nonzero().squeeze(1)
        again = repair(problem.weights[rows], recount(problem.weights[rows], old[rows], fresh.plan.logcnt[rows], P),
                       target[rows], P, zones, copy_cost=None if copy_cost is None else copy_cost[rows])
        ok = rows[again.met]
        repaired[ok] = again.phy2log[again.met]
        met[ok] = True
        recounted = ok.tolist()
    repair_seconds = clock() - t0
    if copy_cost is None:
        use = met & (new_pairs(repaired, old, E, P) <= relabel_moves)           # [L]
    else:
        cost = [(gpu_presence(x, E, P).to(copy_cost.dtype) * copy_cost).flatten(1).sum(1)
                for x in (repaired, relabelled)]
        use = met & (cost[0] <= cost[1])                 # [L] the copies' cost (units of an intra copy)
    p2l = torch.where(use.unsqueeze(1), repaired, relabelled)
    relaxed: dict[int, float] = {}
    if budget is not None:
        # the layers saving the most moves are repaired at wider slacks until the plan fits
        def at(wider: float) -> tuple[torch.Tensor, torch.Tensor]:
            fixed = repair(problem.weights, old, fresh_max * (1 + wider), P, zones, item_cap=item_cap)
            cand = new_pairs(fixed.phy2log, old, E, P)
            return fixed.phy2log, torch.where(fixed.met, cand, new_pairs(p2l, old, E, P))   # unmet: no saving

        p2l, _, relaxed = widen_to_budget(p2l, new_pairs(p2l, old, E, P), int(float(fresh_moves.sum()) * budget),
                                          slack, at)
    info: dict[str, Any] = {
        "slack": slack, "policy": policy,
        "fresh_max_load": fresh_max.tolist(), "target_max_load": target.tolist(),
        "fresh_moves": int(fresh_moves.sum()), "relabelled_moves": int(relabel_moves.sum()),
        "heuristic_moves": int(new_pairs(p2l, old, E, P).sum()),
        "repair_rounds": fixed.rounds, "repair_swaps": int(fixed.swaps.sum()),
        "repair_count_changes": int(fixed.count_changes.sum()),
        "budget": budget, "relaxed_layers": relaxed,
        "regrouped_layers": regrouped, "recounted_layers": recounted,
        "fallback_layers": (~use).nonzero().squeeze(1).tolist(),
        "seconds": {"relabel": relabel_seconds, "heuristic": repair_seconds},
    }
    return p2l, info


def _for_makespan(problem: Problem, previous: Plan, fresh: SolverOutput, slack: float, budget: float | None,
                  transfer_model: str) -> tuple[torch.Tensor, dict[str, Any]]:
    """The plan within ``slack`` whose transfer schedule is shortest (module docstring): the
    move-count plan, then ``MAKESPAN_PASSES`` plans with copies weighed by their time, each
    pass making the copies onto the busiest receivers dearer; the shortest schedule wins
    (so never longer than the move-count plan's). Schedules are timed with ``TIMING_BYTES``
    experts: every copy time scales with the expert size. Returns phy2log [L, R] and the report."""
    E, P, N = problem.num_experts, problem.num_gpus, problem.num_nodes
    old = previous.phy2log
    base_cost = copy_costs(old, E, P, N, problem.cluster.network)                       # [L, P, E]
    cost: torch.Tensor | None = None
    best = None
    passes = []
    for k in range(MAKESPAN_PASSES + 1):
        p2l, info = _heuristic(problem, previous, fresh, slack, budget, cost)
        sched, record = _timed(problem, previous, problem.cluster, p2l, transfer_model,
                               copy_cost="moves" if cost is None else "time")
        passes.append(record)
        if best is None or sched.makespan < best[2].makespan:
            best = (p2l, info, sched, k)
        recv = np.bincount(sched.copies.dst, weights=sched.copy_seconds, minlength=P)       # [P] seconds
        weight = np.ones(P) + (RECEIVER_WEIGHT * recv / recv.max() if cost is not None and recv.max() > 0 else 0.0)
        cost = base_cost * torch.as_tensor(weight, dtype=base_cost.dtype, device=base_cost.device).view(-1, P, 1)
    # the best plan with the GPUs of each node renamed per layer to spread the receivers
    spread = spread_receivers(best[0], old, base_cost, E, P, N)
    sched, record = _timed(problem, previous, problem.cluster, spread, transfer_model, copy_cost="spread")
    passes.append(record)
    if sched.makespan < best[2].makespan:
        best = (spread, best[1], sched, len(passes) - 1)
    p2l, info, sched, k = best
    return p2l, {**info, "makespan_passes": passes, "makespan_pass_used": k}


def _on_forecast(problem: Problem, previous: Plan, old_cluster: Cluster, fresh: SolverOutput,
                 o: SolverOptions) -> tuple[torch.Tensor, dict[str, Any]]:
    """The re-plan judged on the base planner's forecast (option ``history``): per layer the
    relabelled fresh plan or a sticky plan (:func:`solvers.dynamics.risk_migration.keep_in_place`:
    risk-aware placements with a bonus for replicas that stay), the fewest moves such that the
    per-step imbalance over the window's steps (weighted by ``halflife``), averaged over layers,
    is within ``slack`` of the fresh plan's. Returns phy2log [L, R] and the report."""
    if o.objective != "moves" or o.method != "heuristic" or o.budget is not None:
        raise OptionError("history", "judges the slack on a forecast for the move objective with the heuristic "
                          "method and no budget")
    if old_cluster is not problem.cluster:
        raise OptionError("history", "needs a plan in force made for this cluster (GPUs failed since: re-plan "
                          "without history)")
    hist = check_history(problem, o.history)
    old = previous.phy2log.to(problem.device)
    t0 = clock()
    with one_intra_op_thread():     # hundreds of small kernels: an OpenMP team only waits on a busy machine
        p2l, kept = risk_migration.keep_in_place(
            problem, hist, fresh.policy, fresh.plan.phy2log.to(problem.device), old, slack=o.slack,
            count_risk=DEFAULT_COUNT_RISK, risk=DEFAULT_RISK, halflife=o.halflife, noise=1.0, steps=64)
    sg = uneven_slot_gpu(problem)
    return p2l, {"slack": o.slack, "policy": fresh.policy, "forecast_steps": hist.shape[0], "halflife": o.halflife,
                 "fresh_moves": int(new_pairs(fresh.plan.phy2log.to(old.device), old, problem.num_experts,
                                              problem.num_gpus, sg, sg).sum()),
                 "heuristic_moves": int(new_pairs(p2l, old, problem.num_experts, problem.num_gpus, sg, sg).sum()),
                 "budget": None, "relaxed_layers": {}, **kept, "seconds": {"heuristic": clock() - t0}}


_SCHEMA = (
    Option("base", str, "deepseek", "solver whose fresh plan sets the balance target"),
    Option("current", object, None, "the placement in force (a solvers.Plan; none: the fresh plan)",
           nullable=True),
    Option("slack", float, 0.01, "each layer's max GPU load may exceed the fresh plan's by this fraction",
           minimum=0.0, maximum=10.0),
    Option("method", str, "heuristic", "heuristic (batched repair) or exact (CP-SAT per layer)",
           choices=METHODS),
    Option("budget", float, None, "at most this fraction of a fresh plan's moves (all layers): the layers "
           "saving the most moves take wider slacks until the plan fits (none: the slack is a hard limit)",
           nullable=True, minimum=0.0, exclusive_minimum=True, maximum=1.0),
    Option("objective", str, "moves", "what the plan within the slack minimises: moves (the copies) or "
           "makespan (the transfer schedule's seconds over the cluster's network; heuristic method only)",
           choices=OBJECTIVES),
    Option("transfer_model", str, "rounds", "makespan objective: how the schedule is timed: rounds (one peer "
           "per GPU and direction at a time, vLLM's rule) or shared (concurrent copies share each GPU's "
           "bandwidth)", choices=TRANSFER_MODELS),
    time_limit_option(10.0, "seconds for the whole re-plan: the exact models (all layers) get what the "
                            "heuristic leaves"),
    threads_option(), seed_option(),
    Option("base_options", object, None, "options of the base solver (a dict)", nullable=True,
           advanced=True),
    Option("history", object, None, "the window's steps [W, layers, experts]: the slack is judged on the "
           "forecast the base planner trusts, the per-step imbalance over these steps (weighted by "
           "halflife), not on the max load of their sum (move objective, heuristic method, no budget)",
           nullable=True, advanced=True),
    Option("halflife", float, None, "with history: steps after which a step's weight in the forecast halves "
           "(the base planner's own; none: every step weighs the same)", minimum=0.0, exclusive_minimum=True,
           maximum=1e6, nullable=True, advanced=True),
)


# Work model (solvers.work): seconds on 2 cores, coefficients measured by
# `python -m benchmarks.work_model --fit`.
MIGRATION_WORK = WorkModel.of({"1": 0, "R": 7.76e-05, "L*R": 0, "L*E*R": 1.65e-09, "L": 0}, time_limited=True)


@register("migration", kind="heuristic", options=_SCHEMA, in_suites=False, heterogeneous=True, work=MIGRATION_WORK,
          description="fewest moves from the placement in force within (1 + slack) x a fresh plan's max load "
                      "(max time on real clusters)")
def solve_migration(problem: Problem, o: SolverOptions) -> SolverOutput:
    """The migration-aware plan and its report (module docstring); ``current`` is checked
    against the problem here, the other options by the schema."""
    started = clock()              # the time limit is the whole call's: the exact pass gets what is left
    if o.current is None:
        return no_plan_in_force(problem, o.base, o.base_options)
    if o.objective == "makespan" and o.method == "exact":
        raise OptionError("objective", "the exact method minimises moves; plan for makespan with "
                          "method='heuristic'")
    homogeneous = problem.cluster.homogeneous
    if not homogeneous and o.objective == "makespan" and o.budget is not None:
        raise OptionError("budget", "on a cluster with speeds, uneven slots or failed GPUs the makespan "
                          "objective takes no move budget (give one or the other)")
    # the plan in force is of this cluster or, after GPUs failed, of the same GPUs before
    previous, old_cluster = check_elastic(problem, o.current, None if problem.cluster.failed else problem.cluster)
    if o.method == "exact" and old_cluster is not problem.cluster:
        raise OptionError("method", "the exact model keeps replicas in the slots of the plan in force, made "
                          "here for other slots (before GPUs failed): use method='heuristic' (the elastic "
                          "re-plan)")
    fresh, fresh_seconds = fresh_plan(problem, o.base, o.base_options)
    if o.history is not None:
        p2l, info = _on_forecast(problem, previous, old_cluster, fresh, o)
    elif not homogeneous:
        p2l, info = _in_time(problem, previous, old_cluster, fresh, o.base, o.slack, o.budget, o.objective,
                             o.transfer_model)
    elif o.objective == "makespan":
        p2l, info = _for_makespan(problem, previous, fresh, o.slack, o.budget, o.transfer_model)
    else:
        p2l, info = _heuristic(problem, previous, fresh, o.slack, o.budget)
    info = {"base": o.base, "method": o.method, "objective": o.objective, **info}
    info["seconds"]["fresh"] = fresh_seconds
    old = previous.phy2log.to(p2l.device)
    if o.method == "exact":
        fresh_max = info["fresh_max_load" if homogeneous else "fresh_max_time"]
        target = torch.tensor(info["target_max_load" if homogeneous else "target_max_time"], dtype=torch.float64)
        for layer, wider in info["relaxed_layers"].items():    # the budget widened these layers' slack
            target[int(layer)] = fresh_max[int(layer)] * (1 + wider)
        t0 = clock()
        p2l, reports = _exact_pass(problem, old, p2l, target,
                                   fresh.plan.logcnt.cpu().numpy() if homogeneous else None,
                                   _zones(fresh.policy, problem) if homogeneous else 1,
                                   max(0.0, o.time_limit - (t0 - started)), o.threads, o.seed)
        info["seconds"]["exact"] = clock() - t0
        info["exact_layers"] = reports
        info["exact_proven_layers"] = sum(1 for r in reports if r.get("proven"))
    new_gpu, old_gpu = problem.slot_gpu(), torch.tensor(old_cluster.slot_gpus(), device=problem.device)
    info["moves_per_layer"] = new_pairs(p2l, old, problem.num_experts, problem.num_gpus, new_gpu, old_gpu).tolist()
    return SolverOutput(Plan.from_phy2log(p2l, problem.num_experts), fresh.policy, info=info)


def plan_with_migration(problem: Problem, solver: str, previous: Plan, *, slack: float = 0.01,
                        method: str = "heuristic", time_limit: float = 10.0, budget: float | None = None,
                        expert_bytes: int | None = None, objective: str = "moves", transfer_model: str = "rounds",
                        history: Any = None, halflife: float | None = None, **solver_options: Any) -> SolveResult:
    """A plan of ``problem`` with the fewest moves from ``previous`` such that every layer's
    max GPU load is at most ``(1 + slack)`` x that of a fresh plan by ``solver``.

    Returns the :class:`solvers.SolveResult` of the shared scorer (``score.moves`` and, with
    ``expert_bytes``, ``score.moves_bytes`` against ``previous``); ``info`` holds the fresh
    plan's max loads, the targets, the moves of the fresh and relabelled plans, the layers
    that fell back to the relabelled plan and, for ``method="exact"``, each layer's CP-SAT
    status, moves and proven bound. ``solver_options`` go to ``solver``.

    budget: a move budget, as a fraction of the fresh plan's moves (all layers together).
    When the plan within ``slack`` moves more, the layers that save the most moves are
    repaired at wider slacks (``BUDGET_SLACKS``, level by level) until it fits
    (``info["relaxed_layers"]``: layer -> slack used); their max load may then exceed
    ``(1 + slack)`` x the fresh plan's. None: the slack is a hard limit.

    objective: ``moves`` (default) or ``makespan``: within the same slack, the plan whose
    weight-transfer schedule over ``problem.cluster.network`` is shortest (module docstring;
    ``info["makespan_passes"]``), timed under ``transfer_model`` (``rounds`` or ``shared``).

    history: the window's steps [W, L, E] (``halflife``: the planner's step weights): the slack
    is judged on the per-step imbalance over them, the forecast ``solver`` trusts, averaged
    over layers (module docstring; moves objective, heuristic method, no budget).
    """
    if not isinstance(previous, Plan):     # required here (solve's previous is optional)
        raise OptionError("previous", f"must be a solvers.Plan (the placement in force), got "
                          f"{type(previous).__name__}")
    if not isinstance(solver, str) or solver == "migration":
        raise OptionError("solver", f"must name a registered solver other than 'migration', got {solver!r}")
    get_solver(solver)
    options = dict(base=solver, current=previous, slack=slack, method=method, time_limit=time_limit, budget=budget,
                   base_options=solver_options or None, objective=objective, transfer_model=transfer_model,
                   history=history, halflife=halflife)
    # after GPUs failed the plan in force is graded on the cluster it was made for
    previous_cluster = healthy_cluster(problem, previous) if problem.cluster.failed else None
    return graded_run(problem, "migration", options, previous=previous, expert_bytes=expert_bytes,
                      previous_cluster=previous_cluster)
