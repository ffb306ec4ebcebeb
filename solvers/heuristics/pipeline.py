"""The one pipeline every heuristic of this package runs, batched over layers, on any cluster.

The rows of a layer are packed onto a :class:`~.common.LiveGPUs` view: the cluster's live
GPUs (speeds, slot counts) under the global policy, the identical GPUs of one node under
the hierarchical one (which needs identical GPUs). Every step minimises time, load / speed:
on a homogeneous cluster that is the load, in exactly its arithmetic.

1. policy: global = one row per layer; hierarchical = the ``top`` best group-to-node
   partitions (exact when enumerable), one row per (layer, candidate, node);
2. replica counts per row: DeepSeek's greedy replication, at two slots per identical GPU
   improved with the pairing that is optimal for them (:mod:`.pairing`), optionally
   improved jointly with the packing (:mod:`.joint`), capped at the GPUs of the row under
   ``nodup`` (and made realisable without duplicates on uneven slot counts);
3. packing per row (:mod:`.packing`): several starts, swap local search, best kept;
4. per layer the best partition candidate, then *keep-best* against the greedy the
   heuristic starts from (DeepSeek's plan, of the homogeneous view on a cluster of speeds;
   none on uneven slot counts), scored in float64 by the shared scorer's arithmetic, layers
   with duplicates not eligible under ``nodup``: never worse than the greedy;
5. optional relaxed hierarchical mode (:mod:`.relaxed`).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..clock import clock
from ..deepseek import deepseek_plan
from ..errors import OptionError
from ..plan import Plan
from ..problem import Problem
from ..registry import SolverOutput
from ..scoring import duplicates_per_row, per_slot_loads, slots_to_gpus, uneven_slot_gpu
from . import relaxed
from .common import LiveGPUs, pick_best, replicate_counts
from .hierarchical import group_node_candidates, node_experts
from .joint import joint_counts
from .packing import pack_counts, realisable_counts
from .pairing import pair_counts

# Up to this many slots per GPU the joint search packs every candidate (the packing then
# decides); above it a fixed-count lower bound steers the counts (much cheaper).
PACK_LOOP_MAX_SLOTS = 4

# Paired swap steps per unit of ``steps`` on a real cluster (speeds, uneven slots, failed
# GPUs), whose starts leave more to the search (kk_swap's default 8 gives 32: on the
# DeepSeek-V3 shape the worst layer is then within ~0.05 % of the bound).
STEPS_PER_UNIT = 4


@dataclass(frozen=True)
class Effort:
    """How hard the pipeline works (the portfolio raises these)."""

    steps: int = 8                  # local-search steps per packing
    starts: tuple[str, ...] = ("kk",)
    joint: bool = False             # counts with the packing in the loop
    joint_rounds: int = 32
    joint_width: int = 4            # donors = receivers per round
    joint_steps: int = 4            # swap steps inside each candidate's quick packing
    joint_beam: int = 4
    joint_pack: bool = False        # packing-in-the-loop search even when GPUs hold many slots
    partitions: int = 4             # group-to-node candidates (hierarchical)
    two_swaps: bool = True
    pair_rounds: int = 64           # two slots per GPU: count moves valued by the optimal pairing


def check_common(problem: Problem, policy: str, nodup: bool, relax: int) -> str:
    """The policy that runs, after the checks across options and the problem (the schema
    has checked each option alone; the hierarchical policy refuses real clusters): relax
    needs the hierarchical policy, and forbidden colocation needs as many experts per node
    as slots on any GPU."""
    resolved = problem.resolve_policy(policy)
    if relax and resolved != "hierarchical":
        raise OptionError("relax", "relaxed mode needs the hierarchical policy, which needs identical GPUs "
                          f"(resolved policy is {resolved!r})")
    if nodup:
        N = problem.num_nodes if resolved == "hierarchical" else 1
        most = max(problem.cluster.gpu_slots)
        if problem.num_experts // N < most:
            raise OptionError("colocation", f"forbidden: a GPU has {most} slots but only "
                              f"{problem.num_experts // N} experts can go there: duplicates are unavoidable")
    return resolved


def layer_times(problem: Problem, phy2log: torch.Tensor) -> torch.Tensor:
    """[L] float64 max GPU time (the load on identical GPUs) of a phy2log [L, R] under the
    shared scorer's arithmetic (:func:`solvers.scoring.per_slot_loads`; no log2phy is
    built: keep-best is on the portfolio's clock)."""
    L, R = phy2log.shape
    cnt = torch.zeros(L, problem.num_experts, dtype=torch.int64, device=phy2log.device).scatter_add_(
        1, phy2log, torch.ones_like(phy2log))                                      # [L, E]
    per_slot = per_slot_loads(problem.weights.to(torch.float64), phy2log, cnt)   # [L, R]
    gpu = slots_to_gpus(per_slot, uneven_slot_gpu(problem), problem.num_gpus)     # [L, P]
    return (gpu if problem.cluster.uniform_speed else gpu / problem.gpu_speed()).max(1).values


def greedy_phy2log(problem: Problem, resolved: str, deadline: float | None = None) -> torch.Tensor | None:
    """DeepSeek's plan (of the homogeneous view, speeds ignored, on a cluster of speeds;
    None on uneven slot counts, where it has none); deadline: raise
    :class:`solvers.clock.TimeUp` once past it."""
    c = problem.cluster
    if not c.uniform_slots:
        return None
    view = problem if c.homogeneous else Problem._trusted(problem.weights, c.homogeneous_view(), problem.num_groups)
    return deepseek_plan(problem.weights, c.num_replicas, problem.num_groups, c.num_nodes, c.num_gpus,
                         resolved if c.homogeneous else view.resolve_policy("auto"), deadline).phy2log


# Under a deadline, a packing-evaluated joint phase starts only with at least this many
# packings' worth of time left: its rounds stop at the deadline (chunked evaluation), but
# packing the current counts once, which it starts with, cannot be cut.
PACK_PHASE_MIN_PACKINGS = 1


def heuristic_phy2log(problem: Problem, resolved: str, nodup: bool, effort: Effort,
                      deadline: float | None = None) -> tuple[torch.Tensor, dict]:
    """Steps 1-4 without keep-best: phy2log [L, R] and info."""
    w = problem.weights.to(torch.float64)
    L, E = w.shape
    R, G = problem.num_replicas, problem.num_groups
    dev = w.device
    if resolved == "hierarchical":
        N = problem.num_nodes
        nog = group_node_candidates(w.view(L, G, E // G).sum(-1), N, top=effort.partitions)
        nexp = node_experts(nog, E, N)                                           # [L, K, N, E/N]
        gpus = LiveGPUs.identical(problem.num_gpus // N, R // N, dev)
    else:
        N = 1
        nexp = torch.arange(E, device=dev).view(1, 1, 1, E).expand(L, 1, 1, E)
        gpus = LiveGPUs.of(problem.cluster, dev)
    K = nexp.shape[1]
    En, Rn, Pn = E // N, R // N, gpus.Q
    real = not problem.cluster.homogeneous
    steps = effort.steps * (STEPS_PER_UNIT if real else 1)
    rows = nexp.reshape(L * K * N, En)                                            # global id per local expert
    wr = w.gather(1, nexp.reshape(L, -1)).view(-1, En)                            # [X, En]
    cap = Pn if nodup else None
    starts = tuple(effort.starts) + (("lpt", "rr") if nodup else ())
    starts = tuple(dict.fromkeys(starts))
    cnt = replicate_counts(wr, Rn, cap)
    if nodup and not gpus.uniform:       # uneven slot counts: not every capped vector has a layout
        cnt = realisable_counts(wr, cnt, gpus.caps)
    info: dict = {"partition_candidates": K}
    if not real and Rn == 2 * Pn and effort.pair_rounds:
        # Two slots per GPU: the greedy counts only minimise the largest replica; these minimise
        # the largest pair of the largest-with-smallest pairing that the packing then builds.
        cnt, info["pair_rounds"] = pair_counts(wr, cnt, cap=cap, rounds=effort.pair_rounds, deadline=deadline)
    if K > 1:
        # Rank the partition candidates by a cheap packing (construction only), then
        # search only the best one per layer: N rows per layer instead of K * N.
        _, quick = pack_counts(wr, cnt, gpus, nodup=nodup, starts=starts, max_steps=0, deadline=deadline)
        best_k = quick.view(L, K, N).max(-1).values.argmin(1)                     # [L]
        sel = ((torch.arange(L, device=dev) * K + best_k).unsqueeze(1) * N
               + torch.arange(N, device=dev)).flatten()                           # [L*N] row ids
        rows, wr, cnt = rows[sel], wr[sel], cnt[sel]
    began = clock()
    e_loc, obj = pack_counts(wr, cnt, gpus, nodup=nodup, starts=starts, max_steps=steps,
                             two_swaps=effort.two_swaps, timed=real, deadline=deadline)
    pack_seconds = clock() - began   # every joint phase ends with such a packing
    if effort.joint:
        # the bound is one of load on all of a homogeneous cluster's GPUs: a real cluster's
        # counts are searched with the packing, narrowly when GPUs hold many slots (every
        # candidate then packs many replicas)
        phases = [] if real else [("bound", 2, 8)]
        if gpus.S <= PACK_LOOP_MAX_SLOTS:      # the packing decides: search it first (deadline)
            phases.insert(0, ("pack", effort.joint_beam, effort.joint_width))
        elif real or effort.joint_pack:
            phases.append(("pack", effort.joint_beam, effort.joint_width) if effort.joint_pack else ("pack", 1, 3))
        changed = 0
        # the search stops early enough to leave time for the phase's final packing
        search_deadline = None if deadline is None else deadline - pack_seconds
        for evaluate, beam, width in phases:
            left = None if search_deadline is None else search_deadline - clock()
            if left is not None and (left <= 0 or (evaluate == "pack" and left < PACK_PHASE_MIN_PACKINGS
                                                   * pack_seconds)):
                break   # no time for a search that begins with one uncut packing

            cnt2, rounds = joint_counts(wr, cnt, gpus, cap=cap, rounds=effort.joint_rounds, donors=width,
                                        receivers=width, beam=beam, steps=effort.joint_steps,
                                        deadline=search_deadline, evaluate=evaluate)
            info[f"joint_{evaluate}_rounds"] = rounds
            if nodup and not gpus.uniform:
                cnt2 = realisable_counts(wr, cnt2, gpus.caps)
            # only rows whose counts changed are packed again (the same counts pack the same way)
            moved = (cnt2 != cnt).any(1).nonzero().squeeze(1)                      # [Y] row ids
            if moved.numel() == 0:
                continue
            e2, obj2 = pack_counts(wr[moved], cnt2[moved], gpus, nodup=nodup, starts=starts,
                                   max_steps=steps, two_swaps=effort.two_swaps, timed=real, deadline=deadline)
            better = obj2 < obj[moved]
            keep = moved[better]
            e_loc[keep], obj[keep], cnt[keep] = e2[better], obj2[better], cnt2[keep]
            changed += int(better.sum())
        info["joint_rows_changed"] = changed
    return rows.gather(1, e_loc).view(L, R), info


def candidate_objective(problem: Problem, phy2log: torch.Tensor, nodup: bool) -> torch.Tensor:
    """[L] what keep-best compares: the max GPU time per layer, +inf on layers with
    duplicates under ``nodup`` (not eligible)."""
    o = layer_times(problem, phy2log)
    if nodup:
        o = o.masked_fill(duplicates_per_row(phy2log, problem.num_gpus, uneven_slot_gpu(problem)) > 0, float("inf"))
    return o


def keep_best(problem: Problem, candidates: list[torch.Tensor], nodup: bool,
              objectives: list[torch.Tensor] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Per layer the candidate phy2log [L, R] with the lowest max GPU time (first on ties);
    under ``nodup`` layers with duplicates are not eligible. objectives: the candidates'
    :func:`candidate_objective` when the caller has them. Returns (phy2log, index [L])."""
    objs = objectives if objectives is not None else [candidate_objective(problem, p, nodup) for p in candidates]
    p2l, best = pick_best(torch.stack(objs), torch.stack(candidates))            # [C, L], [C, L, R]
    return p2l, best


def run_pipeline(problem: Problem, *, policy: str, nodup: bool, relax: int, effort: Effort,
                 deadline: float | None = None, extra: list[torch.Tensor] | None = None) -> SolverOutput:
    """Steps 1-5 and keep-best; ``extra`` adds candidate phy2log tensors (the portfolio)."""
    resolved = check_common(problem, policy, nodup, relax)
    start = clock()
    ours, info = heuristic_phy2log(problem, resolved, nodup, effort, deadline)
    greedy = greedy_phy2log(problem, resolved)
    cands = ([] if greedy is None else [greedy]) + [ours] + list(extra or [])
    p2l, chosen = keep_best(problem, cands, nodup)
    info["greedy_kept_layers"] = 0 if greedy is None else int((chosen == 0).sum())
    if relax:
        p2l, rinfo = relaxed.relax_plan(problem, p2l, relax, nodup=nodup, steps=max(effort.steps, 64))
        info.update(rinfo)
    info["heuristic_seconds"] = clock() - start
    plan = Plan.from_phy2log(p2l, problem.num_experts)
    policy_name = resolved + ("+relaxed" if relax else "")
    return SolverOutput(plan, policy_name, info=info)
