"""The one shared scorer: every plan from every solver is graded here (docs/problem.md).

Loads are split evenly over an expert's replicas (each replica of e carries
``w_e / c_e``); all arithmetic is float64 so that scores of different solvers compare
exactly, whatever precision a solver used internally.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .errors import PlanError
from .plan import Plan
from .problem import Problem


def _ratio(num: torch.Tensor, den: torch.Tensor) -> torch.Tensor:
    """num / den with 0 / 0 = 1 (an all-zero layer is perfectly balanced)."""
    return torch.where(den > 0, num / den.clamp_min(torch.finfo(den.dtype).tiny), torch.ones_like(num))


@dataclass(frozen=True)
class Score:
    """Per-GPU loads and the metrics of docs/problem.md for one plan.

    gpu_load:  [layers, gpus]  tokens each GPU serves (even split)
    node_load: [layers, nodes]
    max_load:  [layers]        the objective, max over GPUs
    mean_load: [layers]
    imbalance: [layers]        max_load / mean_load (>= 1)
    node_imbalance: [layers]   the same over nodes
    duplicates: (layer, GPU, expert) triples with two or more replicas on one GPU
    moves: (layer, GPU, expert) replicas to load because the previous plan's GPU did not
        hold that expert (None without a previous plan); moves_bytes with an expert size
    off_node_share: [layers] inter-node traffic proxy: the share of tokens served by a
        replica outside its group's home node (the node serving most of that group's
        tokens); 0 for a strict hierarchical plan. None without groups (G = 1) or when
        experts do not split into groups. It stands in for the "distinct remote nodes
        per token", which needs top-k routing statistics that load dumps do not carry.
    """

    gpu_load: torch.Tensor
    node_load: torch.Tensor
    max_load: torch.Tensor
    mean_load: torch.Tensor
    imbalance: torch.Tensor
    node_imbalance: torch.Tensor
    duplicates: int
    moves: int | None = None
    moves_bytes: int | None = None
    off_node_share: torch.Tensor | None = None
    summary: dict = field(default_factory=dict)

    @property
    def imbalance_mean(self) -> float:
        return self.summary["imbalance_mean"]

    @property
    def imbalance_worst(self) -> float:
        return self.summary["imbalance_worst"]

    def metrics(self) -> dict:
        """Plain-number metrics (for tables, JSON and benchmark rows)."""
        return dict(self.summary)


def gpu_loads(weights: torch.Tensor, plan: Plan, num_gpus: int) -> torch.Tensor:
    """gpu_load: [L, P] float64 under the even split. weights: [L, E], plan on any device."""
    w = weights.to(torch.float64)
    p2l = plan.phy2log.to(w.device)
    cnt = plan.logcnt.to(w.device)
    L, R = p2l.shape
    per_slot = w.gather(1, p2l) / cnt.gather(1, p2l).to(torch.float64)      # [L, R]
    return per_slot.view(L, num_gpus, R // num_gpus).sum(-1)


def duplicates_per_row(phy2log: torch.Tensor, num_gpus: int) -> torch.Tensor:
    """[L] int64: (GPU, expert) pairs with >= 2 replicas on that GPU, per row of phy2log [L, R]."""
    L, R = phy2log.shape
    s = phy2log.view(L, num_gpus, R // num_gpus).sort(-1).values
    same = s[..., 1:] == s[..., :-1]                                      # [L, P, S-1]
    run_start = same & ~torch.nn.functional.pad(same, (1, 0))[..., :-1]
    return run_start.flatten(1).sum(1)


def count_duplicates(phy2log: torch.Tensor, num_gpus: int) -> int:
    """Number of (layer, GPU, expert) with >= 2 replicas on that GPU."""
    return int(duplicates_per_row(phy2log, num_gpus).sum())


def gpu_presence(phy2log: torch.Tensor, num_experts: int, num_gpus: int) -> torch.Tensor:
    """[L, P, E] bool: GPU g holds at least one replica of expert e."""
    L, R = phy2log.shape
    pres = torch.zeros(L, num_gpus, num_experts, dtype=torch.bool, device=phy2log.device)
    pres.scatter_(2, phy2log.view(L, num_gpus, R // num_gpus), True)
    return pres


def off_node_share(weights: torch.Tensor, plan: Plan, num_groups: int, num_gpus: int,
                   num_nodes: int) -> torch.Tensor:
    """[L] share of tokens served outside their group's home node (no routing statistics
    needed: with group-limited routing a token stays on few nodes exactly when its groups'
    replicas stay home). weights: [L, E]."""
    w = weights.to(torch.float64)
    p2l, cnt = plan.phy2log.to(w.device), plan.logcnt.to(w.device)
    L, R = p2l.shape
    E = w.shape[1]
    per_slot = w.gather(1, p2l) / cnt.gather(1, p2l).to(torch.float64)      # [L, R]
    node = torch.arange(R, device=w.device) // (R // num_nodes)
    cell = (p2l // (E // num_groups)) * num_nodes + node                    # (group, node) of each slot
    group_node = torch.zeros(L, num_groups * num_nodes, dtype=torch.float64, device=w.device)
    group_node.scatter_add_(1, cell, per_slot)
    home = group_node.view(L, num_groups, num_nodes).max(-1).values.sum(-1)
    total = w.sum(1)
    return torch.where(total > 0, 1 - home / total.clamp_min(1e-300), torch.zeros_like(total)).clamp_min(0)


def score(problem: Problem, plan: Plan, previous: Plan | None = None,
          expert_bytes: int | None = None) -> Score:
    """Score ``plan`` on ``problem``; ``previous`` adds migration moves (same layers and GPUs).
    Raises :class:`PlanError` unless ``plan`` is a valid plan of ``problem``."""
    plan = plan.to(problem.device)
    plan.validate(problem.num_layers, problem.num_experts, problem.num_replicas, problem.num_gpus)
    return score_validated(problem, plan, previous, expert_bytes)


def score_validated(problem: Problem, plan: Plan, previous: Plan | None = None,
                    expert_bytes: int | None = None) -> Score:
    """:func:`score` for a plan already validated against ``problem`` (``solve`` checks a
    solver's plan itself, to tell a solver bug from bad user input)."""
    P, N = problem.num_gpus, problem.num_nodes
    plan = plan.to(problem.device)
    gpu = gpu_loads(problem.weights, plan, P)
    node = gpu.view(problem.num_layers, N, P // N).sum(-1)
    max_load, mean_load = gpu.max(1).values, gpu.mean(1)
    imb = _ratio(max_load, mean_load)
    node_imb = _ratio(node.max(1).values, node.mean(1))
    dups = count_duplicates(plan.phy2log, P)
    moves = moves_bytes = None
    if previous is not None:
        previous = previous.to(problem.device)
        previous.validate(problem.num_layers, problem.num_experts, None, P)
        new = gpu_presence(plan.phy2log, problem.num_experts, P)
        old = gpu_presence(previous.phy2log, problem.num_experts, P)
        moves = int((new & ~old).sum())
        if expert_bytes is not None:
            if expert_bytes < 0:
                raise PlanError("expert_bytes", f"must be >= 0, got {expert_bytes}")
            moves_bytes = moves * int(expert_bytes)
    off = None
    if problem.num_groups > 1 and problem.num_experts % problem.num_groups == 0:
        off = off_node_share(problem.weights, plan, problem.num_groups, P, N)
    total_max = float(max_load.sum())
    summary = {
        "max_load_sum": total_max,
        "max_load_worst": float(max_load.max()),
        "imbalance_mean": float(imb.mean()),
        "imbalance_worst": float(imb.max()),
        "balancedness": float(_ratio(mean_load, max_load).mean()),
        "balancedness_sum": float(mean_load.sum() / total_max) if total_max > 0 else 1.0,
        "node_imbalance_mean": float(node_imb.mean()),
        "node_imbalance_worst": float(node_imb.max()),
        "duplicates": dups,
    }
    if off is not None:
        summary["off_node_share_mean"] = float(off.mean())
        summary["off_node_share_worst"] = float(off.max())
    if moves is not None:
        summary["moves"] = moves
    if moves_bytes is not None:
        summary["moves_bytes"] = moves_bytes
    return Score(gpu, node, max_load, mean_load, imb, node_imb, dups, moves, moves_bytes, off, summary)
