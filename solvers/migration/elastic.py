"""Elastic re-planning: GPUs failed under the plan in force; keep what survives.

Given the plan in force (made for ``previous_cluster``) and the cluster now (the same GPUs,
some failed or with other slot counts), find a plan with the fewest moves such that no
replica is left on a failed GPU, every expert keeps at least one live replica, and every
layer's max GPU *time* is within ``(1 + slack)`` x that of a fresh plan on the survivors
(by ``base``, default ``kk_swap``). Batched over layers. Four candidates per layer, all
starting from **keep** (every live GPU keeps the replicas it held, as many as its slots now
allow; the slots it gained are holes, filled first):

- **A1, A2: the move-minimal search** (:mod:`.elastic_moves`): orphans (experts left
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
layer keeps the candidate within target with the fewest moves. Layers no candidate brings within target take the fresh plan. Moves are counted as
the shared scorer counts them, each plan's slots mapped to GPUs by its own cluster: a
(GPU, expert) pair the plan in force did not have.

With ``polish_time > 0`` the chosen layouts then get the large-neighbourhood polish
(:mod:`.elastic_lns`: a few GPUs' slots at a time solved exactly by CP-SAT, the rest
fixed), the layers with the most moves above their orphans first, within that many seconds
in all; it takes a neighbourhood only when it saves a move.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..clock import clock
from ..cluster import Cluster
from ..errors import OptionError, PlanError
from .. import backends
from ..grading import graded_run
from ..heuristics.pipeline import layer_times
from ..heuristics.common import LiveGPUs
from ..options import Option, SolverOptions
from ..plan import Plan
from ..problem import Problem
from ..registry import SolverOutput, get_solver, register, run
from ..result import SolveResult
from ..scoring import gpu_presence, new_pairs
from .elastic_exact import layer_moves, live_view, placement
from .elastic_lns import polish_layer
from .exact import place
from .elastic_moves import Layout, match_orphans, place_orphans, reduce_excess, shed_moves, spread_penalty
from ..work import WorkModel

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
        raise OptionError("previous", f"is not a valid plan of previous_cluster: {exc}") from None
    return previous.to(problem.device), previous_cluster


def _slot_tensor(cluster: Cluster, device) -> torch.Tensor:
    return torch.tensor(cluster.slot_gpus(), dtype=torch.int64, device=device)


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


def _counts(e: torch.Tensor, num_experts: int) -> torch.Tensor:
    """[X, E] replicas per expert of a layout with holes (-1) e: [X, R]."""
    cnt = torch.zeros(e.shape[0], num_experts + 1, dtype=torch.int64, device=e.device)
    cnt.scatter_add_(1, e + 1, torch.ones_like(e))
    return cnt[:, 1:]


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
        cnt = _counts(e, E)
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
    return e


def repair_time(w: torch.Tensor, e: torch.Tensor, old_pres: torch.Tensor, target: torch.Tensor, gpus: LiveGPUs,
                num_gpus: int, slot_gpu: torch.Tensor, max_rounds: int = MAX_ROUNDS
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """Step 3: swaps and count changes until every layer's max time <= target.

    w: [X, E] float64; e: [X, R] complete layout; old_pres: [X, P, E] bool, the plan in
    force's (GPU, expert) pairs; target: [X]; slot_gpu: [R] the (cluster) GPU of every
    slot. Returns (e, met [X])."""
    X, R = e.shape
    E = w.shape[1]
    rows = torch.arange(X, device=e.device)
    inv = 1 / gpus.speed
    old_flat = old_pres.reshape(X, -1)                                               # [X, P*E]
    live_ids = torch.tensor(sorted(set(slot_gpu.tolist())), device=e.device)          # cluster id of live index
    for _ in range(max_rounds):
        cnt = _counts(e, E)
        per = w / cnt
        sw = per.gather(1, e)                                                         # [X, R]
        load = gpus.loads(sw)
        t = load * inv
        th, h = t.max(1)
        active = th > target * (1 + TARGET_RTOL)
        if not bool(active.any()):
            break
        # presence counts of the current plan, on cluster GPU ids
        pres = torch.zeros(X, num_gpus * E, dtype=torch.int64, device=e.device)
        pres.scatter_add_(1, slot_gpu * E + e, torch.ones_like(e))
        qh = gpus.grid[h]                                                             # [X, S]
        vh = gpus.valid[h]
        wa = sw.gather(1, qh).masked_fill(~vh, -float("inf"))                         # [X, S]
        ea = e.gather(1, qh)                                                          # [X, S]
        d = wa.unsqueeze(2) - sw.unsqueeze(1)                                         # [X, S, R]
        new_h = (th * gpus.speed[h]).view(X, 1, 1) - d
        new_h = new_h * inv[h].view(X, 1, 1)
        new_g = (load[:, gpus.gpu_of].unsqueeze(1) + d) * inv[gpus.gpu_of]
        cost = torch.maximum(new_h, new_g)                                            # [X, S, R]
        # moves added by swapping slot a (on h, expert ea) with slot b (on g, expert eb)
        hg = live_ids[h]                                                              # [X] cluster id
        gg = slot_gpu                                                                 # [R]
        eb = e                                                                        # [X, R]

        def gained(gpu, expert):      # the GPU gets the expert: a move unless it holds or held it
            idx = gpu * E + expert
            return ((pres.gather(1, idx.view(X, -1)).view_as(idx) == 0)
                    & ~old_flat.gather(1, idx.view(X, -1)).view_as(idx)).to(torch.int64)

        def lost(gpu, expert):        # the GPU's only copy leaves: a move undone if it was one
            idx = gpu * E + expert
            return ((pres.gather(1, idx.view(X, -1)).view_as(idx) == 1)
                    & ~old_flat.gather(1, idx.view(X, -1)).view_as(idx)).to(torch.int64)

        H = hg.view(X, 1, 1).expand(X, qh.shape[1], R)
        G = gg.view(1, 1, R).expand(X, qh.shape[1], R)
        A = ea.unsqueeze(2).expand(X, qh.shape[1], R)
        B = eb.unsqueeze(1).expand(X, qh.shape[1], R)
        same = A == B
        dm = gained(H, B) + gained(G, A) - lost(H, A) - lost(G, B)
        dm = torch.where(same, torch.zeros_like(dm), dm)
        bad = (d <= 0) | (G == H) | same
        cost = cost.masked_fill(bad, float("inf"))
        fits = cost <= target.view(X, 1, 1) * (1 + TARGET_RTOL)
        # within target: fewest added moves, then lowest cost; else lowest cost if it helps
        big = float(R + 1)
        key_fit = torch.where(fits, dm.to(w.dtype) * big * 4 + cost / th.view(X, 1, 1), torch.full_like(cost, float("inf")))
        kf, jf = key_fit.view(X, -1).min(1)
        kc, jc = cost.view(X, -1).min(1)
        use_fit = torch.isfinite(kf)
        j = torch.where(use_fit, jf, jc)
        ok = active & (use_fit | (kc < th * (1 - 1e-12)))
        a = qh.gather(1, (j // R).unsqueeze(1)).squeeze(1)
        b = j % R
        e2 = e.clone()
        e2[rows[ok], a[ok]] = e[rows[ok], b[ok]]
        e2[rows[ok], b[ok]] = e[rows[ok], a[ok]]
        # count change where no swap helps: a redundant replica elsewhere (its GPU finishing
        # first after the change) becomes another replica of h's heaviest expert
        stuck = active & ~ok
        if bool(stuck.any()):
            heavy = ea.gather(1, wa.argmax(1, keepdim=True)).squeeze(1)             # [X]
            c_heavy = cnt.gather(1, heavy.unsqueeze(1)).squeeze(1)
            item = w[rows, heavy] / (c_heavy + 1).to(w.dtype)
            donor_ok = (cnt.gather(1, e) >= 2) & (e != heavy.unsqueeze(1)) & (gpus.gpu_of.unsqueeze(0) != h.unsqueeze(1))
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
    cnt = _counts(e, E)
    final = gpus.times((w / cnt).gather(1, e)).max(1).values
    return e, final <= target * (1 + TARGET_RTOL)


def _search(w: torch.Tensor, filled: torch.Tensor, gpus: LiveGPUs, target: torch.Tensor, old_live: torch.Tensor,
            old_pres: torch.Tensor, num_gpus: int, new_gpu: torch.Tensor, penalty, place=place_orphans
            ) -> tuple[torch.Tensor, torch.Tensor]:
    """The move-minimal search from the kept layout (holes filled), its orphans placed by
    ``place``: (layout [L, R], met [L]); layers it leaves above target get the swap repair."""
    a = reduce_excess(w, place(w, filled, gpus, target, old_live, penalty), gpus, target, old_live)
    met = Layout(w, a, gpus).excess(target) <= 0
    rest = (~met).nonzero().squeeze(1)
    if rest.numel():
        a_rest, met_rest = repair_time(w[rest], a[rest], old_pres[rest], target[rest], gpus, num_gpus, new_gpu,
                                       max_rounds=MAX_ROUNDS // 4)
        a = a.clone()
        a[rest], met[rest] = a_rest, met_rest
    return a, met


def polish(problem: Problem, previous: Plan, old_cluster: Cluster, p2l: torch.Tensor, target: torch.Tensor,
           seconds: float, orphans: torch.Tensor) -> tuple[torch.Tensor, dict]:
    """The large-neighbourhood polish (:mod:`.elastic_lns`) of the chosen layouts p2l: [L, R]
    within ``seconds`` in all: the layers with the most moves above their orphans [L] first,
    each given an even share of the time left. Returns (p2l, report)."""
    E = problem.num_experts
    live, slots, speed, old_gpu, new_gpu = live_view(problem.cluster, old_cluster)
    w = problem.weights.detach().cpu().double().numpy()
    rows = p2l.cpu().numpy().copy()
    old_rows = previous.phy2log.cpu().numpy()
    start = clock()
    stop = start + seconds
    olds = [placement(old_rows[layer], old_gpu, live, E) > 0 for layer in range(rows.shape[0])]
    xgs = [placement(rows[layer], new_gpu, live, E) for layer in range(rows.shape[0])]
    extra = [layer_moves(xgs[layer], olds[layer]) - int(orphans[layer]) for layer in range(rows.shape[0])]
    order = [layer for layer in sorted(range(rows.shape[0]), key=lambda x: -extra[x]) if extra[layer] > 0]
    saved, tried = 0, 0
    for i, layer in enumerate(order):
        now = clock()
        if now >= stop:
            break
        tried += 1
        deadline = now + (stop - now) / (len(order) - i)
        new = polish_layer(w[layer], slots, speed, olds[layer], xgs[layer], float(target[layer]), deadline,
                           seed=layer)
        gain = layer_moves(xgs[layer], olds[layer]) - layer_moves(new, olds[layer])
        if gain > 0:
            rows[layer] = place(new, rows[layer], np.asarray(slots))   # the live GPUs' slots, in order
            saved += gain
    report = {"seconds": clock() - start, "layers": tried, "moves_saved": saved}
    return torch.as_tensor(rows, dtype=p2l.dtype, device=p2l.device), report


def elastic(problem: Problem, previous: Plan, previous_cluster: Cluster | None = None, *, base: str = "kk_swap",
            slack: float = 0.01, base_options: dict | None = None, polish_time: float = 0.0) -> SolverOutput:
    """The elastic re-plan and its report (see the module docstring)."""
    previous, old_cluster = check_elastic(problem, previous, previous_cluster)
    cluster = problem.cluster
    E, P = problem.num_experts, problem.num_gpus
    began = clock()
    fresh = run(problem, base, base_options)
    if fresh.plan is None:
        raise OptionError("base", f"{base!r} found no fresh plan ({fresh.termination}): {fresh.message}")
    fresh_seconds = clock() - began
    fresh_t = layer_times(problem, fresh.plan.phy2log)                              # [L]
    target = fresh_t * (1 + slack)
    t0 = clock()
    w = problem.weights.to(torch.float64)
    gpus = LiveGPUs.of(cluster, w.device)
    old_gpu = _slot_tensor(old_cluster, w.device)
    new_gpu = _slot_tensor(cluster, w.device)
    old_pres = gpu_presence(previous.phy2log, E, P, old_gpu)                         # [L, P, E]
    kept = keep_survivors(previous.phy2log, old_cluster, cluster)
    orphans = int((_counts(kept, E) == 0).sum())
    live = torch.tensor(cluster.live_gpus, dtype=torch.int64, device=w.device)
    old_live = old_pres[:, live, :].flatten(1)                                       # [L, Q*E]
    # candidates A1, A2: the move-minimal search (orphans where the excess grows least, A2
    # also preferring GPUs below the average; then the most excess removed per move)
    if bool((kept < 0).any()):
        filled = rescue(w, kept, gpus, torch.zeros_like(w, dtype=torch.int64))     # holes only
    else:
        filled = kept
    candidates = [_search(w, filled, gpus, target, old_live, old_pres, P, new_gpu, None)]
    # A2 only where A1 met the target (where it did not, A2 rarely does, at the same cost)
    ok = candidates[0][1].nonzero().squeeze(1)
    a2, met2 = filled.clone(), torch.zeros_like(candidates[0][1])
    if ok.numel():
        ideal = w[ok].sum(1) / gpus.speed.sum()                                      # average time
        a2[ok], met2[ok] = _search(w[ok], filled[ok], gpus, target[ok], old_live[ok], old_pres[ok], P, new_gpu,
                                   spread_penalty(ideal))
    candidates.append((a2, met2))
    # candidate A3: the orphans placed jointly (an assignment per layer), then the same
    # search; like A2 only where A1 met the target
    a3, met3 = filled.clone(), torch.zeros_like(candidates[0][1])
    if ok.numel():
        a3[ok], met3[ok] = _search(w[ok], filled[ok], gpus, target[ok], old_live[ok], old_pres[ok], P, new_gpu,
                                   spread_penalty(ideal), match_orphans)
    candidates.append((a3, met3))
    # candidate B: rescue every expert up to the replicas the fresh plan's heaviest replica
    # allows, then repair the slowest GPU by swaps
    fresh_cnt = fresh.plan.logcnt.to(torch.float64)
    cap = (w / fresh_cnt).max(1).values * (1 + slack)                                # [L]
    need = torch.ceil(w / cap.unsqueeze(1) * (1 - 1e-12)).clamp_min(1).to(torch.int64)
    candidates.append(repair_time(w, rescue(w, kept, gpus, need, target), old_pres, target, gpus, P, new_gpu))
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
    polished = None
    if polish_time > 0:
        if not backends.cpsat_available():
            raise OptionError("polish_time", "the polish needs CP-SAT (ortools), which is not installed: use 0")
        # the exact large-neighbourhood polish of the layers that used a candidate (a layer on
        # the fresh plan has no layout within target near the plan in force to polish)
        per_layer_orphans = (_counts(kept, E) == 0).sum(1)
        p2l_new, polished = polish(problem, previous, old_cluster, p2l, target, polish_time,
                                   torch.where(use, per_layer_orphans, torch.full_like(per_layer_orphans, 1 << 30)))
        moves = new_pairs(p2l_new, previous.phy2log, E, P, new_gpu, old_gpu)
        p2l = p2l_new
    info = {"base": base, "slack": slack, "failed": list(cluster.failed), "orphans": orphans,
            "fresh_max_time": fresh_t.tolist(), "target_max_time": target.tolist(),
            "fresh_moves": int(moves_fresh.sum()), "moves": int(moves.sum()),
            "moves_per_layer": moves.tolist(), "fallback_layers": (~use).nonzero().squeeze(1).tolist(),
            "search_layers": int((pick < 3).sum()), "matched_layers": int((pick == 2).sum()),
            "seconds": {"fresh": fresh_seconds, "repair": repair_seconds}}
    if polished is not None:
        info["polish"] = polished
        info["seconds"]["polish"] = polished["seconds"]
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
    Option("polish_time", float, 0.0, "seconds in all for the exact large-neighbourhood polish of the re-plan "
           "(CP-SAT on a few GPUs' slots at a time, per layer; 0: off)", minimum=0.0, advanced=True),
)


# Work model (solvers.work): seconds on 2 cores, coefficients measured by
# `python -m benchmarks.work_model --fit`.
ELASTIC_WORK = WorkModel.of({"1": 0, "R": 0, "L*R": 0, "L*E*R": 0})


@register("elastic", kind="heuristic", options=_SCHEMA, in_suites=False, heterogeneous=True, work=ELASTIC_WORK,
          description="after GPU failures: fewest moves from the placement in force, every expert alive, "
                      "each layer's max time within (1 + slack) x a fresh plan on the survivors")
def solve_elastic(problem: Problem, o: SolverOptions) -> SolverOutput:
    if o.base in ("elastic", "migration"):
        raise OptionError("base", f"must be a planning solver, got {o.base!r}")
    base_options = get_solver(o.base).parse(o.base_options)
    if o.current is None:
        fresh = run(problem, o.base, base_options)
        return SolverOutput(fresh.plan, fresh.policy, info={"base": o.base, "note": "no placement in force: "
                                                            "the fresh plan"})
    return elastic(problem, o.current, o.current_cluster, base=o.base, slack=o.slack, base_options=base_options,
                   polish_time=o.polish_time)


def replan_after_failure(problem: Problem, previous: Plan, previous_cluster: Cluster | None = None, *,
                         solver: str = "kk_swap", slack: float = 0.01, expert_bytes: int | None = None,
                         polish_time: float = 0.0, **solver_options: Any) -> SolveResult:
    """The elastic re-plan of ``previous`` (made for ``previous_cluster``) on ``problem``'s
    cluster (some GPUs failed), graded by the shared scorer: ``score.moves`` counts the
    replicas to load against the plan in force, ``info`` the fresh plan's moves and times."""
    options = dict(base=solver, current=previous, current_cluster=previous_cluster, slack=slack,
                   base_options=solver_options or None, polish_time=polish_time)
    if previous_cluster is None and isinstance(previous, Plan):
        previous_cluster = healthy_cluster(problem, previous)
    return graded_run(problem, "elastic", options, previous=previous, expert_bytes=expert_bytes,
                      previous_cluster=previous_cluster)
