"""The one shared scorer: every plan from every solver is graded here (docs/problem.md).

Two dispatch models (docs/dispatch.md): the **even split** (each replica of e carries
``w_e / c_e``, what vLLM, SGLang and TensorRT-LLM do; the default) and the **scheduled
split** (per micro-batch, each expert's tokens divided over its replicas to minimise the
max GPU load, as MicroMoE and LPLB do; :func:`solvers.dispatch.schedule_tokens`). All arithmetic is float64 so that scores of different solvers compare
exactly, whatever precision a solver used internally.
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass, field
from typing import Any

import torch

from .errors import OptionError, PlanError
from .plan import Plan
from .problem import Problem


def _ratio(num: torch.Tensor, den: torch.Tensor) -> torch.Tensor:
    """num / den with 0 / 0 = 1 (an all-zero layer is perfectly balanced). A positive denominator
    is used as it is, subnormal included (clamping it to the smallest normal made the imbalance
    of denormal loads 1e-13)."""
    return torch.where(den > 0, num / torch.where(den > 0, den, torch.ones_like(den)), torch.ones_like(num))


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
    split: the dispatch model, "even" or "scheduled".
    microbatch_imbalance: [micro-batches, layers] max / mean GPU load of every micro-batch
        when the plan was scored on ``tokens`` (None otherwise). Then gpu_load sums the
        micro-batches and max_load / mean_load sum each micro-batch's max / mean (the time
        a layer takes is the sum of its micro-batches' slowest GPUs).
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
    split: str = "even"
    microbatch_imbalance: torch.Tensor | None = None

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


def off_node_share(weights: torch.Tensor, plan: Plan, num_groups: int, num_nodes: int) -> torch.Tensor:
    """[L] share of tokens served outside their group's home node (no routing statistics
    needed: with group-limited routing a token stays on few nodes exactly when its groups'
    replicas stay home). weights: [L, E]."""
    w = weights.to(torch.float64)
    p2l, cnt = plan.phy2log.to(w.device), plan.logcnt.to(w.device)
    per_slot = w.gather(1, p2l) / cnt.gather(1, p2l).to(torch.float64)      # [L, R]
    return off_node_share_of_slots(per_slot, p2l, w.shape[1], num_groups, num_nodes)


def off_node_share_of_slots(per_slot: torch.Tensor, phy2log: torch.Tensor, num_experts: int,
                            num_groups: int, num_nodes: int) -> torch.Tensor:
    """:func:`off_node_share` from the tokens each slot serves, per_slot: [L, R] float64
    (any dispatch model)."""
    L, R = phy2log.shape
    E = num_experts
    node = torch.arange(R, device=per_slot.device) // (R // num_nodes)
    cell = (phy2log // (E // num_groups)) * num_nodes + node                # (group, node) of each slot
    group_node = torch.zeros(L, num_groups * num_nodes, dtype=torch.float64, device=per_slot.device)
    group_node.scatter_add_(1, cell, per_slot)
    home = group_node.view(L, num_groups, num_nodes).max(-1).values.sum(-1)
    total = per_slot.sum(1)
    return torch.where(total > 0, 1 - home / total.clamp_min(1e-300), torch.zeros_like(total)).clamp_min(0)


SPLITS = ("even", "scheduled")
# Micro-batch token counts and the scheduled split live in :mod:`solvers.dispatch`, a feature
# the core scorer does not import: importing it (every front end does, through
# solvers.builtin) sets this hook, fn(problem, plan, split, tokens) -> [B, L, R] float64.
MICROBATCH_SLOT_LOADS: dict[str, Any] = {}


def slot_loads(problem: Problem, plan: Plan, split: str, tokens) -> torch.Tensor:
    """[B, L, R] float64 tokens each slot serves in each micro-batch under ``split``.

    tokens: [B, L, E] token counts per micro-batch (or [L, E]); None grades the problem's
    weights as one micro-batch (the even split is computed here, the rest by the hook).
    """
    if split != "even" or tokens is not None:
        if "fn" not in MICROBATCH_SLOT_LOADS:
            raise OptionError("split", "micro-batch tokens and the scheduled split need solvers.dispatch "
                              "(import solvers.dispatch)")
        return MICROBATCH_SLOT_LOADS["fn"](problem, plan, split, tokens)
    return even_slot_loads(problem.weights.unsqueeze(0), plan)


def even_slot_loads(t: torch.Tensor, plan: Plan) -> torch.Tensor:
    """[B, L, R] float64: each replica of e serves t_e / c_e. t: [B, L, E] on the plan's device."""
    t = t.to(torch.float64)
    p2l = plan.phy2log.unsqueeze(0).expand(t.shape[0], -1, -1)
    return t.gather(2, p2l) / plan.logcnt.to(torch.float64).unsqueeze(0).expand(t.shape[0], -1, -1).gather(2, p2l)


def score(problem: Problem, plan: Plan, previous: Plan | None = None,
          expert_bytes: int | None = None, *, split: str = "even", tokens=None) -> Score:
    """Score ``plan`` on ``problem``; ``previous`` adds migration moves (same layers and GPUs).

    split: the dispatch model, "even" (default) or "scheduled" (the optimal split of every
    micro-batch, :func:`solvers.dispatch.schedule_tokens`). tokens: [B, L, E] token counts
    of B micro-batches to grade on instead of the problem's weights (the loads the plan was
    made for); without it the weights are one micro-batch. Raises :class:`PlanError` unless
    ``plan`` is a valid plan of ``problem``."""
    if not isinstance(problem, Problem):
        raise PlanError("problem", f"must be a solvers.Problem, got {type(problem).__name__}")
    for name, value in (("plan", plan), ("previous", previous)):
        if not isinstance(value, Plan) and not (name == "previous" and value is None):
            raise PlanError(name, f"must be a solvers.Plan, got {type(value).__name__}")
    plan = plan.to(problem.device)
    plan.validate(problem.num_layers, problem.num_experts, problem.num_replicas, problem.num_gpus)
    return score_validated(problem, plan, previous, check_expert_bytes(expert_bytes), split=split, tokens=tokens)


def check_expert_bytes(value) -> int | None:
    """Bytes per expert: None or a non-negative integer (a bool or 1.5 is a mistake)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise PlanError("expert_bytes", f"must be a whole number of bytes, got {value!r}")
    if value < 0:
        raise PlanError("expert_bytes", f"must be >= 0, got {value}")
    return int(value)


def score_validated(problem: Problem, plan: Plan, previous: Plan | None = None,
                    expert_bytes: int | None = None, *, split: str = "even", tokens=None) -> Score:
    """:func:`score` for a plan already validated against ``problem`` (``solve`` checks a
    solver's plan itself, to tell a solver bug from bad user input)."""
    if split not in SPLITS:
        raise OptionError("split", f"must be one of {', '.join(SPLITS)}, got {split!r}")
    P, N = problem.num_gpus, problem.num_nodes
    plan = plan.to(problem.device)
    per_slot = None
    mb_imb = None
    if split == "even" and tokens is None:
        gpu = gpu_loads(problem.weights, plan, P)
        node = gpu.view(problem.num_layers, N, P // N).sum(-1)
        max_load, mean_load = gpu.max(1).values, gpu.mean(1)
        node_max, node_mean = node.max(1).values, node.mean(1)
    else:
        per_slot = slot_loads(problem, plan, split, tokens)                     # [B, L, R]
        B = per_slot.shape[0]
        gpu_mb = per_slot.view(B, problem.num_layers, P, -1).sum(-1)            # [B, L, P]
        node_mb = gpu_mb.view(B, problem.num_layers, N, P // N).sum(-1)
        mb_imb = _ratio(gpu_mb.max(-1).values, gpu_mb.mean(-1))               # [B, L]
        gpu, node = gpu_mb.sum(0), node_mb.sum(0)
        max_load, mean_load = gpu_mb.max(-1).values.sum(0), gpu_mb.mean(-1).sum(0)
        node_max, node_mean = node_mb.max(-1).values.sum(0), node_mb.mean(-1).sum(0)
        per_slot = per_slot.sum(0)
    # max >= mean exactly; a rounded mean may pass the max by an ulp: the ratios keep their range.
    imb = _ratio(max_load, mean_load).clamp_min(1.0)
    node_imb = _ratio(node_max, node_mean).clamp_min(1.0)
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
        if per_slot is None:
            off = off_node_share(problem.weights, plan, problem.num_groups, N)
        else:
            off = off_node_share_of_slots(per_slot, plan.phy2log, problem.num_experts, problem.num_groups, N)
    total_max = float(max_load.sum())
    summary = {
        "max_load_sum": total_max,
        "max_load_worst": float(max_load.max()),
        "imbalance_mean": float(imb.mean()),
        "imbalance_worst": float(imb.max()),
        "balancedness": float(_ratio(mean_load, max_load).clamp(0.0, 1.0).mean()),
        "balancedness_sum": min(float(mean_load.sum() / total_max), 1.0) if total_max > 0 else 1.0,
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
    if mb_imb is not None:
        summary.update(microbatch_summary(mb_imb))
    return Score(gpu, node, max_load, mean_load, imb, node_imb, dups, moves, moves_bytes, off, summary,
                 split, mb_imb)


def microbatch_summary(imbalance: torch.Tensor, prefix: str = "microbatch_imbalance") -> dict:
    """mean, p50, p99 and worst of per-(micro-batch, layer) imbalances [B, L]."""
    flat = imbalance.flatten().to(torch.float64)
    q = torch.quantile(flat, torch.tensor([0.5, 0.99], dtype=torch.float64, device=flat.device))
    return {f"{prefix}_mean": float(flat.mean()), f"{prefix}_p50": float(q[0]),
            f"{prefix}_p99": float(q[1]), f"{prefix}_worst": float(flat.max())}
