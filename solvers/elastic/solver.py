"""Elastic re-planning: GPUs failed under the plan in force; keep what survives.

Given the plan in force (made for ``previous_cluster``) and the cluster now (the same GPUs,
some failed or with other slot counts), find a plan with the fewest moves such that no
replica is left on a failed GPU, every expert keeps at least one live replica, and every
layer's max GPU *time* is within ``(1 + slack)`` x that of a fresh plan on the survivors
(by ``base``, default ``kk_swap``). Batched over layers. Four candidates per layer, all
starting from **keep** (every live GPU keeps the replicas it held, as many as its slots now
allow; the slots it gained are holes, filled first):

- **A1, A2: the move-minimal search** (:mod:`.search`): orphans (experts left
  without a live replica) replace spare replicas where the excess time over the target
  grows least, then the steps removing the most excess per move added (replace one slot's
  expert: one move; swap two slots: up to two). A2 repeats it where A1 met the target, its
  orphans also preferring GPUs below the average time. Layers left above target get the
  swap repair below;
- **A3: the same search, orphans placed jointly** (``match_orphans``: a min-cost assignment
  of orphans to live GPUs per layer, then the search; like A2 where A1 met the target);
- **B: rescue and swap repair**: experts left without a live replica, and experts whose
  replicas became heavier than the fresh plan's heaviest, heaviest first, each take a hole
  or evict a spare replica, on the slot that adds least to its GPU's excess over the target
  (a GPU already over it is relieved when the spare outweighs the newcomer), then where the
  GPU finishes first; holes left get a replica of the expert with the highest load per
  replica; then, while a layer's slowest GPU is above target, its best 1-1 swap with any
  slot elsewhere: among the swaps that bring both GPUs within target the one adding the
  fewest moves, else the one that lowers the pair's max most; when no swap helps, a count
  change (a redundant replica elsewhere becomes another replica of the slowest GPU's
  heaviest expert).

Every candidate then sheds the moves it no longer needs (``shed_moves``: a moved slot
becomes an expert its GPU holds or held, or swaps, every GPU staying within target). Each
layer keeps the candidate within target with the fewest moves; layers no candidate brings
within target take the fresh plan. Moves are counted as
the shared scorer counts them, each plan's slots mapped to GPUs by its own cluster: a
(GPU, expert) pair the plan in force did not have.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from ..clock import clock
from ..cluster import Cluster
from ..errors import OptionError, PlanError, ProblemError
from ..grading import graded_run
from ..heuristics.pipeline import layer_times
from ..heuristics.common import LiveGPUs
from ..options import Option, SolverOptions
from ..plan import Plan
from ..problem import Problem
from ..registry import SolverOutput, get_solver, register, run
from ..result import SolveResult
from ..scoring import gpu_presence, new_pairs
from ..work import WorkModel
from .search import (Layout, counts, match_orphans, place_orphans, reduce_excess, shed_moves, spread_penalty,
                     swap_moves, swapped)

# A time within this relative margin of its target meets it.
TARGET_RTOL = 1e-12
# Repair rounds (one swap or count change per layer each) before a layer falls back.
MAX_ROUNDS = 400


def healthy_cluster(problem: Problem, previous: Plan) -> Cluster:
    """The cluster the plan in force was made for, when the caller does not say: the same
    GPUs and speeds, every GPU with the slot count the live ones share."""
    c = problem.cluster
    if previous.num_replicas == c.num_replicas:
        return c
    live = {c.gpu_slots[g] for g in c.live_gpus}
    if len(live) == 1 and previous.num_replicas == c.num_gpus * next(iter(live)):
        return Cluster(c.num_nodes, c.num_gpus, previous.num_replicas, gpu_speed=list(c.gpu_speed), network=c.network)
    raise OptionError("previous_cluster", f"the plan in force has {previous.num_replicas} slots, the cluster "
                      f"{c.num_replicas}: give the cluster it was made for (previous_cluster)")


def check_elastic(problem: Problem, previous: Any, previous_cluster: Any) -> tuple[Plan, Cluster]:
    """The plan in force and its cluster, validated (OptionError naming the parameter)."""
    if not isinstance(previous, Plan):
        raise OptionError("previous", f"must be a solvers.Plan (the placement in force), got "
                          f"{type(previous).__name__}")
    if previous_cluster is None:
        previous_cluster = healthy_cluster(problem, previous)
    elif not isinstance(previous_cluster, Cluster):
        raise OptionError("previous_cluster", f"must be a solvers.Cluster, got {type(previous_cluster).__name__}")
    if previous_cluster.num_gpus != problem.num_gpus:
        raise OptionError("previous_cluster", f"must have the problem's {problem.num_gpus} GPUs, got "
                          f"{previous_cluster.num_gpus}")
    try:
        previous.validate(problem.num_layers, problem.num_experts, previous_cluster.num_replicas,
                          previous_cluster.num_gpus if previous_cluster.uniform_slots else None)
    except PlanError as exc:
        raise OptionError("previous", f"is not a valid plan of the cluster it was made for: {exc}") from None
    return previous.to(problem.device), previous_cluster


def fresh_plan(problem: Problem, base: Any, base_options: Any) -> tuple[SolverOutput, float]:
    """The fresh plan by ``base`` with ``base_options`` (a dict, checked by its schema) and its
    seconds: the re-plans' balance target (OptionError naming ``base`` or ``base_options``)."""
    if base in ("elastic", "migration"):
        raise OptionError("base", f"must be a planning solver, got {base!r}")
    if base_options is not None and not isinstance(base_options, Mapping):
        raise OptionError("base_options", f"must be a dict of the base solver's options, got {base_options!r}")
    options = get_solver(base).parse(base_options)
    began = clock()
    try:
        fresh = run(problem, base, options)
    except ProblemError as exc:        # the base cannot plan this cluster (DeepSeek's greedy, uneven slots)
        raise OptionError("base", f"{base!r} cannot be the base on this cluster: {exc}") from None
    if fresh.plan is None:
        raise OptionError("base", f"{base!r} found no fresh plan ({fresh.termination}): {fresh.message}")
    return fresh, clock() - began


def keep_survivors(old: torch.Tensor, old_cluster: Cluster, cluster: Cluster) -> torch.Tensor:
    """[L, R] phy2log on ``cluster`` with each live GPU's old replicas kept (first ones when
    it has fewer slots now); -1 marks a hole. old: [L, R_old] on ``old_cluster``."""
    L = old.shape[0]
    src, dst = [], []
    old_starts, new_starts = old_cluster.slot_starts, cluster.slot_starts
    for g in cluster.live_gpus:
        keep = min(cluster.gpu_slots[g], old_cluster.gpu_slots[g])
        src.extend(range(old_starts[g], old_starts[g] + keep))
        dst.extend(range(new_starts[g], new_starts[g] + keep))
    out = torch.full((L, cluster.num_replicas), -1, dtype=torch.int64, device=old.device)
    if src:
        out[:, torch.tensor(dst, device=old.device)] = old[:, torch.tensor(src, device=old.device)]
    return out


def rescue(w: torch.Tensor, e: torch.Tensor, gpus: LiveGPUs, need: torch.Tensor,
           target: torch.Tensor | None = None) -> torch.Tensor:
    """Fill the holes (-1) of e: [X, R] and bring every expert up to ``need`` [X, E]
    replicas (>= 1: orphans first get one), heaviest replica first (step 2). A replica
    goes to a hole, else replaces a replica of an expert above its need (else of any with
    two or more), on the slot where the GPU finishes first, counting the growth of the
    evicted expert's other replicas; with ``target`` [X], first on the slot that adds least
    to its GPU's excess over the target. w: [X, E] float64 loads. Returns a complete layout."""
    X, R = e.shape
    E = w.shape[1]
    rows = torch.arange(X, device=e.device)
    inv = 1 / gpus.speed
    for _ in range(2 * R):
        cnt = counts(e, E)
        holes = e < 0
        short = cnt < need
        want = short.any(1)
        fill = holes.any(1) & ~want
        if not bool((want | fill).any()):
            break
        per = w / cnt.clamp_min(1)
        # the expert placed: the short one with the heaviest replicas (an orphan: its whole
        # load), else (holes left) the one with the highest load per replica
        heavy = torch.where(cnt == 0, w, per)
        who = torch.where(want, heavy.masked_fill(~short, -1.0).argmax(1), per.argmax(1))        # [X]
        c_who = cnt.gather(1, who.unsqueeze(1)).squeeze(1)
        item = w[rows, who] / (c_who + 1).to(w.dtype)                               # its replica's load
        ec = e.clamp_min(0)
        slot_w = torch.where(holes, torch.zeros_like(w[:, :1]).expand(X, R), per.gather(1, ec))
        load = gpus.loads(slot_w)                                                   # [X, Q]
        # a slot may take it when it is a hole, or holds a replica its expert can spare
        c_slot = cnt.gather(1, ec)
        spare = (c_slot > need.gather(1, ec)) & (c_slot >= 2) & ~holes
        anyspare = (c_slot >= 2) & ~holes & (ec != who.unsqueeze(1))
        spare = torch.where(spare.any(1, keepdim=True), spare, anyspare) & want.unsqueeze(1)
        free = holes | spare
        freed = torch.where(holes, torch.zeros_like(slot_w), slot_w)
        finish = (load[:, gpus.gpu_of] - freed + item.unsqueeze(1)) * inv[gpus.gpu_of]
        # evicting a replica of x makes x's other replicas heavier: the slowest GPU holding
        # x then finishes at most at (load_g + n_gx * growth_x) / s_g
        n = torch.zeros(X, gpus.Q * E, dtype=w.dtype, device=e.device)
        n.scatter_add_(1, gpus.gpu_of * E + ec, (~holes).to(w.dtype))
        n = n.view(X, gpus.Q, E)                                                    # [X, Q, E]
        growth = w / (cnt - 1).clamp_min(1) - per                                   # [X, E]
        after = ((load.unsqueeze(2) + n * growth.unsqueeze(1)) * inv.view(1, -1, 1)).masked_fill(n == 0, 0.0)
        others = after.max(1).values                                                # [X, E]
        key = torch.maximum(finish, torch.where(holes, torch.zeros_like(finish), others.gather(1, ec)))
        if target is not None:
            # with a target: first the change of the slot's GPU's excess over it (a GPU already
            # over target that swaps a heavier spare for the newcomer is relieved), then finish
            tgt = target.unsqueeze(1)
            now = (load * inv)[:, gpus.gpu_of]
            excess = (key - tgt).clamp_min(0) - (now - tgt).clamp_min(0)
            key = excess + key * 1e-6
        key = key.masked_fill(~free, float("inf"))
        slot = key.argmin(1)
        act = (want | fill) & torch.isfinite(key.min(1).values)
        if not bool(act.any()):
            break
        e = e.clone()
        e[rows[act], slot[act]] = who[act]
    if bool(need.any()) and bool((e < 0).any()):
        # more replicas needed than slots: the shortages kept taking slots and left holes (a
        # GPU that gained slots); fill them as the search's start does
        return rescue(w, e, gpus, torch.zeros_like(need))
    return e


def repair_time(w: torch.Tensor, e: torch.Tensor, old: torch.Tensor, target: torch.Tensor, gpus: LiveGPUs,
                max_rounds: int = MAX_ROUNDS) -> tuple[torch.Tensor, torch.Tensor]:
    """Step 3: swaps and count changes until every layer's max time <= target.

    w: [X, E] float64; e: [X, R] complete layout; old: [X, Q*E] bool, the plan in force's
    (live GPU, expert) pairs; target: [X]. Returns (e, met [X])."""
    X, R = e.shape
    E = w.shape[1]
    rows = torch.arange(X, device=e.device)
    inv = 1 / gpus.speed
    for _ in range(max_rounds):
        cnt = counts(e, E)
        per = w / cnt
        sw = per.gather(1, e)                                                         # [X, R]
        load = gpus.loads(sw)
        t = load * inv
        th, h = t.max(1)
        active = th > target * (1 + TARGET_RTOL)
        if not bool(active.any()):
            break
        # presence counts of the current plan on the live GPUs
        pres = torch.zeros(X, gpus.Q * E, dtype=torch.int64, device=e.device)
        pres.scatter_add_(1, gpus.gpu_of * E + e, torch.ones_like(e))
        qh = gpus.grid[h]                                                             # [X, S]
        vh = gpus.valid[h]
        wa = sw.gather(1, qh).masked_fill(~vh, -float("inf"))                         # [X, S]
        ea = e.gather(1, qh)                                                          # [X, S]
        d = wa.unsqueeze(2) - sw.unsqueeze(1)                                         # [X, S, R]
        new_h = (th * gpus.speed[h]).view(X, 1, 1) - d
        new_h = new_h * inv[h].view(X, 1, 1)
        new_g = (load[:, gpus.gpu_of].unsqueeze(1) + d) * inv[gpus.gpu_of]
        cost = torch.maximum(new_h, new_g)                                            # [X, S, R]
        # moves added by swapping slot a (on h) with slot b (cost is inf where they share a GPU
        # or an expert)
        dm = swap_moves(pres, e, gpus, old, qh)
        bad = (d <= 0) | (h.view(X, 1, 1) == gpus.gpu_of.view(1, 1, R)) | (ea.unsqueeze(2) == e.unsqueeze(1))
        cost = cost.masked_fill(bad, float("inf"))
        fits = cost <= target.view(X, 1, 1) * (1 + TARGET_RTOL)
        # within target: fewest added moves, then lowest cost; else lowest cost if it helps
        big = float(R + 1)
        key_fit = torch.where(fits, dm.to(w.dtype) * big * 4 + cost / th.view(X, 1, 1),
                              torch.full_like(cost, float("inf")))
        kf, jf = key_fit.view(X, -1).min(1)
        kc, jc = cost.view(X, -1).min(1)
        use_fit = torch.isfinite(kf)
        j = torch.where(use_fit, jf, jc)
        ok = active & (use_fit | (kc < th * (1 - 1e-12)))
        e2 = torch.where(ok.unsqueeze(1), swapped(e, qh.gather(1, (j // R).unsqueeze(1)).squeeze(1), j % R), e)
        # count change where no swap helps: a redundant replica elsewhere (its GPU finishing
        # first after the change) becomes another replica of h's heaviest expert
        stuck = active & ~ok
        if bool(stuck.any()):
            heavy = ea.gather(1, wa.argmax(1, keepdim=True)).squeeze(1)             # [X]
            c_heavy = cnt.gather(1, heavy.unsqueeze(1)).squeeze(1)
            item = w[rows, heavy] / (c_heavy + 1).to(w.dtype)
            donor_ok = ((cnt.gather(1, e) >= 2) & (e != heavy.unsqueeze(1))
                        & (gpus.gpu_of.unsqueeze(0) != h.unsqueeze(1)))
            finish = (load[:, gpus.gpu_of] - sw + item.unsqueeze(1)) * inv[gpus.gpu_of]
            key = finish.masked_fill(~donor_ok, float("inf"))
            kmin, slot = key.min(1)
            # it must lower h's time: h's replicas of heavy get lighter
            on_h = (ea == heavy.unsqueeze(1)).sum(1).to(w.dtype)
            new_th = (load[rows, h] - on_h * (w[rows, heavy] / c_heavy.to(w.dtype) - item)) * inv[h]
            do = stuck & torch.isfinite(kmin) & (torch.maximum(new_th, kmin) < th * (1 - 1e-12))
            e2[rows[do], slot[do]] = heavy[do]
            ok = ok | do
        if not bool(ok.any()):
            break
        e = e2
    cnt = counts(e, E)
    final = gpus.times((w / cnt).gather(1, e)).max(1).values
    return e, final <= target * (1 + TARGET_RTOL)


def _search(w: torch.Tensor, filled: torch.Tensor, gpus: LiveGPUs, target: torch.Tensor, old_live: torch.Tensor,
            penalty, place=place_orphans) -> tuple[torch.Tensor, torch.Tensor]:
    """The move-minimal search from the kept layout (holes filled), its orphans placed by
    ``place``: (layout [L, R], met [L]); layers it leaves above target get the swap repair."""
    a = reduce_excess(w, place(w, filled, gpus, target, old_live, penalty), gpus, target, old_live)
    met = Layout(w, a, gpus).excess(target) <= 0
    rest = (~met).nonzero().squeeze(1)
    if rest.numel():
        a_rest, met_rest = repair_time(w[rest], a[rest], old_live[rest], target[rest], gpus, MAX_ROUNDS // 4)
        a = a.clone()
        a[rest], met[rest] = a_rest, met_rest
    return a, met


def elastic(problem: Problem, previous: Plan, previous_cluster: Cluster | None = None, *, base: str = "kk_swap",
            slack: float = 0.01, base_options: dict | None = None,
            fresh: SolverOutput | None = None) -> SolverOutput:
    """The elastic re-plan and its report (see the module docstring). fresh: the fresh plan by
    ``base`` when the caller has it (re-plans at several slacks share one)."""
    previous, old_cluster = check_elastic(problem, previous, previous_cluster)
    cluster = problem.cluster
    E, P = problem.num_experts, problem.num_gpus
    fresh, fresh_seconds = (fresh, 0.0) if fresh is not None else fresh_plan(problem, base, base_options)
    fresh_t = layer_times(problem, fresh.plan.phy2log)                              # [L]
    target = fresh_t * (1 + slack)
    t0 = clock()
    w = problem.weights.to(torch.float64)
    gpus = LiveGPUs.of(cluster, w.device)
    old_gpu = torch.tensor(old_cluster.slot_gpus(), dtype=torch.int64, device=w.device)
    new_gpu = torch.tensor(cluster.slot_gpus(), dtype=torch.int64, device=w.device)
    live = torch.tensor(cluster.live_gpus, dtype=torch.int64, device=w.device)
    old_live = gpu_presence(previous.phy2log, E, P, old_gpu)[:, live, :].flatten(1)  # [L, Q*E]
    kept = keep_survivors(previous.phy2log, old_cluster, cluster)
    orphans = int((counts(kept, E) == 0).sum())
    # candidate A1: the move-minimal search (orphans where the excess grows least; then the
    # most excess removed per move), from the kept layout with its holes filled
    filled = rescue(w, kept, gpus, torch.zeros_like(w, dtype=torch.int64)) if bool((kept < 0).any()) else kept
    candidates = [_search(w, filled, gpus, target, old_live, None)]
    # A2 (orphans also preferring GPUs below the average time) and A3 (orphans placed jointly,
    # an assignment per layer), only where A1 met the target (elsewhere they rarely do, at
    # the same cost)
    ok = candidates[0][1].nonzero().squeeze(1)
    penalty = spread_penalty(w[ok].sum(1) / gpus.speed.sum()) if ok.numel() else None   # one for both
    for place in (place_orphans, match_orphans):
        a, met = filled.clone(), torch.zeros_like(candidates[0][1])
        if ok.numel():
            a[ok], met[ok] = _search(w[ok], filled[ok], gpus, target[ok], old_live[ok], penalty, place)
        candidates.append((a, met))
    # candidate B: rescue every expert up to the replicas the fresh plan's heaviest replica
    # allows, then repair the slowest GPU by swaps
    fresh_cnt = fresh.plan.logcnt.to(torch.float64)
    cap = (w / fresh_cnt).max(1).values * (1 + slack)                                # [L]
    need = torch.ceil(w / cap.unsqueeze(1) * (1 - 1e-12)).clamp_min(1).to(torch.int64)
    candidates.append(repair_time(w, rescue(w, kept, gpus, need, target), old_live, target, gpus))
    # every candidate then undoes the moves it no longer needs (within target, exact checks)
    candidates = [(shed_moves(w, a, gpus, target, old_live), m) for a, m in candidates]
    # per layer: the candidate within target with the fewest moves, else the fresh plan
    layouts = torch.stack([c[0] for c in candidates] + [fresh.plan.phy2log])          # [C+1, L, R]
    met = torch.stack([c[1] for c in candidates] + [torch.ones_like(candidates[0][1])])
    moves_all = torch.stack([new_pairs(x, previous.phy2log, E, P, new_gpu, old_gpu) for x in layouts])
    key = torch.where(met, moves_all, torch.full_like(moves_all, 1 << 40))
    pick = key.argmin(0)                                                              # [L], ties: first
    rows = torch.arange(pick.shape[0], device=w.device)
    p2l = layouts[pick, rows]
    moves = moves_all[pick, rows]
    moves_fresh = moves_all[-1]
    use = pick < len(candidates)
    repair_seconds = clock() - t0
    info = {"base": base, "slack": slack, "failed": list(cluster.failed), "orphans": orphans,
            "fresh_max_time": fresh_t.tolist(), "target_max_time": target.tolist(),
            "fresh_moves": int(moves_fresh.sum()), "moves": int(moves.sum()),
            "moves_per_layer": moves.tolist(), "fallback_layers": (~use).nonzero().squeeze(1).tolist(),
            "search_layers": int((pick < 3).sum()), "matched_layers": int((pick == 2).sum()),
            "seconds": {"fresh": fresh_seconds, "repair": repair_seconds}}
    return SolverOutput(Plan.from_phy2log(p2l, E), fresh.policy, info=info)


_SCHEMA = (
    Option("base", str, "kk_swap", "solver whose fresh plan on the survivors sets the time target"),
    Option("current", object, None, "the placement in force (a solvers.Plan; none: the fresh plan)", nullable=True),
    Option("current_cluster", object, None, "the cluster the placement in force was made for (a "
           "solvers.Cluster; none: the same GPUs, each with the live GPUs' slot count)", nullable=True,
           advanced=True),
    Option("slack", float, 0.01, "each layer's max GPU time may exceed the fresh plan's by this fraction",
           minimum=0.0, maximum=10.0),
    Option("base_options", object, None, "options of the base solver (a dict)", nullable=True, advanced=True),
)


# Work model (solvers.work): seconds on 2 cores, coefficients measured by
# `python -m benchmarks.work_model --fit`.
ELASTIC_WORK = WorkModel.of({"1": 0, "R": 0, "L*R": 0, "L*E*R": 0})


@register("elastic", kind="heuristic", options=_SCHEMA, in_suites=False, heterogeneous=True, work=ELASTIC_WORK,
          description="after GPU failures: fewest moves from the placement in force, every expert alive, "
                      "each layer's max time within (1 + slack) x a fresh plan on the survivors")
def solve_elastic(problem: Problem, o: SolverOptions) -> SolverOutput:
    if o.current is None:
        return no_plan_in_force(problem, o.base, o.base_options)
    return elastic(problem, o.current, o.current_cluster, base=o.base, slack=o.slack, base_options=o.base_options)


def no_plan_in_force(problem: Problem, base: str, base_options: Any) -> SolverOutput:
    """Without a placement in force (e.g. a benchmark sweep of every solver) nothing can be
    kept: the fresh plan of ``base``, as is."""
    fresh, _ = fresh_plan(problem, base, base_options)
    return SolverOutput(fresh.plan, fresh.policy, info={"base": base, "note": "no placement in force: the fresh plan"})


def replan_after_failure(problem: Problem, previous: Plan, previous_cluster: Cluster | None = None, *,
                         solver: str = "kk_swap", slack: float = 0.01, expert_bytes: int | None = None,
                         **solver_options: Any) -> SolveResult:
    """The elastic re-plan of ``previous`` (made for ``previous_cluster``) on ``problem``'s
    cluster (some GPUs failed), graded by the shared scorer: ``score.moves`` counts the
    replicas to load against the plan in force, ``info`` the fresh plan's moves and times."""
    options = dict(base=solver, current=previous, current_cluster=previous_cluster, slack=slack,
                   base_options=solver_options or None)
    if previous_cluster is None and isinstance(previous, Plan):
        previous_cluster = healthy_cluster(problem, previous)
    return graded_run(problem, "elastic", options, previous=previous, expert_bytes=expert_bytes,
                      previous_cluster=previous_cluster)
