"""kk_swap, joint and best on real clusters (speeds, uneven slots, failed GPUs).

The homogeneous pipeline (:mod:`.pipeline`) packs R/P replicas on every GPU and balances
tokens; on any other cluster the same solvers run this one instead, which balances time
(:mod:`.speeds`). It plans globally (the hierarchical policy needs identical GPUs) and
keeps, per layer, the best in time of its plan and, where every GPU holds the same number
of slots, DeepSeek's token-balanced plan of the homogeneous view: never slower than the
greedy, as on homogeneous clusters.
"""
from __future__ import annotations

import torch

from ..clock import clock
from ..deepseek import deepseek_plan
from ..errors import OptionError
from ..plan import Plan
from ..problem import Problem
from ..registry import SolverOutput
from ..scoring import per_slot_loads, slots_to_gpus, uneven_slot_gpu
from .speeds import LiveGPUs, speed_plan
from .spread_time import cap_counts, improve_in_time, lay_out_duplicates, realisable_counts, repair_in_time

# Paired swap steps per unit of the solvers' ``steps`` option (kk_swap's default 8 gives
# 32: on the DeepSeek-V3 shape the worst layer is then within ~0.05 % of the bound).
STEPS_PER_UNIT = 4


def check_speed_options(problem: Problem, policy: str, nodup: bool, relax: int) -> str:
    """The policy that runs on a heterogeneous cluster (global), after the checks."""
    resolved = problem.resolve_policy(policy)      # hierarchical raises here
    if relax:
        raise OptionError("relax", "relaxed mode needs the hierarchical policy, which needs identical GPUs")
    if nodup:
        most = max(problem.cluster.gpu_slots)
        if most > problem.num_experts:
            raise OptionError("colocation", f"forbidden colocation needs at most {problem.num_experts} slots "
                              f"(the number of experts) on every GPU, one GPU has {most}")
    return resolved


def layer_times(problem: Problem, phy2log: torch.Tensor) -> torch.Tensor:
    """[L] float64 max GPU time of phy2log [L, R] under the shared scorer's arithmetic."""
    # the counts alone: no replica ranks (Plan.from_phy2log), about 1 ms less per call
    L, R = phy2log.shape
    cnt = torch.zeros(L, problem.num_experts, dtype=torch.int64, device=phy2log.device).scatter_add_(
        1, phy2log, torch.ones_like(phy2log))                                      # [L, E]
    per_slot = per_slot_loads(problem.weights, phy2log, cnt)                       # [L, R]
    gpu = slots_to_gpus(per_slot, uneven_slot_gpu(problem), problem.num_gpus)
    return (gpu / problem.gpu_speed()).max(1).values


def keep_best_time(problem: Problem, candidates: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Per layer the candidate phy2log [L, R] with the lowest max time (first on ties)."""
    objs = torch.stack([layer_times(problem, c) for c in candidates])            # [C, L]
    best = objs.argmin(0)
    stacked = torch.stack(candidates)
    idx = best.view(1, -1, 1).expand(1, *stacked.shape[1:])
    return stacked.gather(0, idx).squeeze(0), best


def token_greedy(problem: Problem) -> torch.Tensor | None:
    """DeepSeek's plan of the homogeneous view (tokens balanced, speeds ignored), or None
    when GPUs hold different slot counts (it has no such view)."""
    c = problem.cluster
    if not c.uniform_slots:
        return None
    view = Problem._trusted(problem.weights, c.homogeneous_view(), problem.num_groups)
    return deepseek_plan(problem.weights, c.num_replicas, problem.num_groups, c.num_nodes, c.num_gpus,
                         view.resolve_policy("auto")).phy2log


def run_speed_pipeline(problem: Problem, *, policy: str, nodup: bool, relax: int, steps: int,
                       joint: bool = False, rounds: int = 16, deadline: float | None = None) -> SolverOutput:
    """The plan of kk_swap / joint (``joint``: counts searched with the packing in the loop)."""
    resolved = check_speed_options(problem, policy, nodup, relax)
    start = clock()
    ours, _ = speed_plan(problem.weights, problem.cluster, steps=steps * STEPS_PER_UNIT, joint=joint,
                         rounds=rounds, deadline=deadline)
    cands = [ours]
    if nodup:                      # forbidden colocation: made duplicate-free (.spread_time)
        gpus = LiveGPUs.of(problem.cluster, ours.device)
        w = problem.weights.to(torch.float64)
        E = problem.num_experts
        counted = realisable_counts(w, cap_counts(w, ours, E, gpus.Q), E, gpus.caps)
        ours, _ = repair_in_time(w, counted, gpus, E)
        ours = lay_out_duplicates(w, ours, gpus, E)           # the layers the swaps could not clear
        ours = improve_in_time(w, ours, gpus, E, steps=steps * STEPS_PER_UNIT)
        cands = [ours]             # DeepSeek's token-balanced plan may hold duplicates: not a candidate
    greedy = None if nodup else token_greedy(problem)
    if greedy is not None:
        cands.append(greedy)
    p2l, chosen = keep_best_time(problem, cands)
    info = {"token_greedy_kept_layers": int((chosen == 1).sum()), "heuristic_seconds": clock() - start}
    return SolverOutput(Plan.from_phy2log(p2l, problem.num_experts), resolved, info=info)


# best: the swap search runs until it converges or the deadline, up to this many paired steps
PORTFOLIO_MAX_STEPS = 4096


def run_speed_portfolio(problem: Problem, *, policy: str, nodup: bool, relax: int, time_limit: float,
                        exact: str | None = None) -> SolverOutput:
    """``best`` on a heterogeneous cluster: the speed pipeline with the count search and a
    swap search that runs until it converges or 95 % of ``time_limit`` has passed."""
    if exact not in (None, "none"):
        raise OptionError("exact", "the exact rung of best plans identical GPUs only; use exact=none, or "
                          "run the exact solver itself on this cluster")
    deadline = clock() + 0.95 * time_limit
    return run_speed_pipeline(problem, policy=policy, nodup=nodup, relax=relax,
                              steps=PORTFOLIO_MAX_STEPS // STEPS_PER_UNIT, joint=True, rounds=64, deadline=deadline)
