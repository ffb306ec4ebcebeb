"""The one shared scorer: every plan from every solver is graded here (docs/problem.md).

Two dispatch models (docs/dispatch.md): the **even split** (each replica of e carries
``w_e / c_e``, what vLLM, SGLang and TensorRT-LLM do; the default) and the **scheduled
split** (per micro-batch, each expert's tokens divided over its replicas to minimise the
max GPU load, as MicroMoE and LPLB do). The scorer scores loads: the scheduled split is a
feature (:func:`solvers.dispatch.schedule_tokens`) that a front end hands to :func:`score`
(``scheduler``), and the traffic on a routing trace composes with a score in
:mod:`solvers.traffic`; ``solvers.score`` (:func:`solvers.evaluate.score`) does both. All
arithmetic is float64 so that scores of different solvers compare exactly, whatever
precision a solver used internally.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

import torch

from .cluster import Cluster
from .tolerances import ROUNDING_RTOL
from .errors import OptionError, PlanError, ProblemError
from .plan import Plan
from .problem import Problem


def _ratio(num: torch.Tensor, den: torch.Tensor) -> torch.Tensor:
    """num / den with 0 / 0 = 1 (an all-zero layer is perfectly balanced). A positive denominator
    is used as it is, subnormal included (clamping it to the smallest normal made the imbalance
    of denormal loads 1e-13)."""
    return torch.where(den > 0, num / torch.where(den > 0, den, torch.ones_like(den)), torch.ones_like(num))


def check_finite(figures: dict) -> None:
    """Refuse a score with a figure that is nan or inf (numbers or tensors): it is never printed
    as a status. Inside the documented ranges (loads below 2**63, speeds in [1e-6, 1e6],
    docs/problem.md) every figure is finite, so one that is not comes from input outside them."""
    for key, value in figures.items():
        if isinstance(value, torch.Tensor):
            bad = value.is_floating_point() and not bool(torch.isfinite(value).all())
        else:
            bad = isinstance(value, float) and not math.isfinite(value)
        if bad:
            raise ProblemError("loads", f"the score's {key} is not finite: the loads or GPU speeds are outside "
                                        "the ranges the scorer computes in (docs/problem.md)")


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
    gpu_time:  [layers, gpus]  each GPU's load over its relative speed (the cluster's
        ``gpu_speed``); the same tensor as gpu_load on a cluster of speed-1 GPUs
    max_time:  [layers]        the objective: max over GPUs of gpu_time
    time_imbalance: [layers]   max_time over the best possible time, W / (sum of the live
        GPUs' speeds); equal to imbalance on a homogeneous cluster
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
    gpu_time: torch.Tensor | None = None
    max_time: torch.Tensor | None = None
    time_imbalance: torch.Tensor | None = None

    @property
    def objective(self) -> torch.Tensor:
        """[layers] what every solver minimises and every bound bounds: the max GPU time."""
        return self.max_time

    @property
    def imbalance_mean(self) -> float:
        return self.summary["imbalance_mean"]

    @property
    def imbalance_worst(self) -> float:
        return self.summary["imbalance_worst"]

    def metrics(self) -> dict:
        """Plain-number metrics (for tables, JSON and benchmark rows)."""
        return dict(self.summary)


def per_slot_loads(weights: torch.Tensor, phy2log: torch.Tensor, logcnt: torch.Tensor) -> torch.Tensor:
    """[..., R] load each slot serves under the even split: slot r holds expert e = phy2log[..., r]
    and serves weights[..., e] / logcnt[..., e]. weights: [..., E], phy2log: [..., R],
    logcnt: [..., E] on one device; leading dimensions broadcast (steps, candidates, layers);
    the result has the weights' dtype. Every per-slot load in the project is this one."""
    # numpy's shape arithmetic: torch.broadcast_shapes imports sympy on first use (1 s at start-up)
    lead = np.broadcast_shapes(weights.shape[:-1], phy2log.shape[:-1], logcnt.shape[:-1])
    p2l = phy2log.expand(*lead, phy2log.shape[-1])
    return (weights.expand(*lead, weights.shape[-1]).gather(-1, p2l)
            / logcnt.expand(*lead, logcnt.shape[-1]).gather(-1, p2l).to(weights.dtype))


def gpu_loads(weights: torch.Tensor, plan: Plan, num_gpus: int) -> torch.Tensor:
    """gpu_load: [L, P] float64 under the even split. weights: [L, E], plan on any device."""
    w = weights.to(torch.float64)
    p2l = plan.phy2log.to(w.device)
    cnt = plan.logcnt.to(w.device)
    L, R = p2l.shape
    return per_slot_loads(w, p2l, cnt).view(L, num_gpus, R // num_gpus).sum(-1)


def slots_to_gpus(per_slot: torch.Tensor, slot_gpu: torch.Tensor | None, num_gpus: int) -> torch.Tensor:
    """[..., P]: per-slot values [..., R] summed per GPU. slot_gpu: [R] GPU of every slot,
    None when every GPU holds R/P consecutive slots (a reshape then does it)."""
    if slot_gpu is None:
        return per_slot.view(*per_slot.shape[:-1], num_gpus, -1).sum(-1)
    out = torch.zeros(*per_slot.shape[:-1], num_gpus, dtype=per_slot.dtype, device=per_slot.device)
    return out.index_add_(per_slot.dim() - 1, slot_gpu.to(per_slot.device), per_slot)


def step_gpu_times(steps: torch.Tensor, phy2log: torch.Tensor, num_gpus: int, cluster=None) -> torch.Tensor:
    """[W, L, P] float64: every step's load on every GPU under ``phy2log`` [L, R] (the even
    split, :func:`per_slot_loads`) for step loads ``steps`` [W, L, E]; on a ``cluster`` with
    uneven slots or failed GPUs the slots are summed by its slot map, and with GPUs of
    different speeds each load is divided by its GPU's speed (a time). For the window
    objectives and scenario values, which need each step's maximum."""
    L, E = phy2log.shape[0], steps.shape[-1]
    cnt = torch.zeros(L, E, dtype=torch.float64, device=steps.device).scatter_add_(
        1, phy2log, torch.ones(phy2log.shape, dtype=torch.float64, device=steps.device))
    per = per_slot_loads(steps.to(torch.float64), phy2log, cnt)                       # [W, L, R]
    uneven = cluster is not None and not cluster.uniform_slots
    slot_gpu = torch.tensor(cluster.slot_gpus(), device=steps.device) if uneven else None
    gpu = slots_to_gpus(per, slot_gpu, num_gpus)                                      # [W, L, P]
    if cluster is None or cluster.uniform_speed:
        return gpu
    return gpu / torch.tensor(cluster.gpu_speed, dtype=torch.float64, device=steps.device)


def uneven_slot_gpu(problem: Problem) -> torch.Tensor | None:
    """[R] GPU of every slot when GPUs hold different slot counts, else None (the reshape
    of :func:`slots_to_gpus` is the fast path)."""
    return None if problem.cluster.uniform_slots else problem.slot_gpu()


def duplicates_per_row(phy2log: torch.Tensor, num_gpus: int, slot_gpu: torch.Tensor | None = None) -> torch.Tensor:
    """[L] int64: (GPU, expert) pairs with >= 2 replicas on that GPU, per row of phy2log [L, R].
    slot_gpu: [R] the GPU of every slot when GPUs hold different slot counts."""
    key = _pair_keys(phy2log, phy2log.shape[1], num_gpus, slot_gpu)       # expert ids < R
    same = key[:, 1:] == key[:, :-1]                                      # [L, R-1]
    run_start = same & ~torch.nn.functional.pad(same, (1, 0))[:, :-1]
    return run_start.sum(1)


def count_duplicates(phy2log: torch.Tensor, num_gpus: int, slot_gpu: torch.Tensor | None = None) -> int:
    """Number of (layer, GPU, expert) with >= 2 replicas on that GPU."""
    return int(duplicates_per_row(phy2log, num_gpus, slot_gpu).sum())


def gpu_presence(phy2log: torch.Tensor, num_experts: int, num_gpus: int,
                 slot_gpu: torch.Tensor | None = None) -> torch.Tensor:
    """[L, P, E] bool: GPU g holds at least one replica of expert e (slot_gpu: [R] the GPU
    of every slot when GPUs hold different slot counts)."""
    L = phy2log.shape[0]
    gpu = _slot_gpu(phy2log, num_gpus, slot_gpu)
    pres = torch.zeros(L, num_gpus, num_experts, dtype=torch.bool, device=phy2log.device)
    pres.view(L, -1).scatter_(1, gpu * num_experts + phy2log, True)
    return pres


def _pair_keys(phy2log: torch.Tensor, num_experts: int, num_gpus: int,
               slot_gpu: torch.Tensor | None) -> torch.Tensor:
    """[L, R] int64 sorted keys gpu x E + expert of every slot (a pair once per replica)."""
    return (_slot_gpu(phy2log, num_gpus, slot_gpu) * num_experts + phy2log).sort(1).values


def _slot_gpu(phy2log: torch.Tensor, num_gpus: int, slot_gpu: torch.Tensor | None) -> torch.Tensor:
    """[R] GPU of every slot: ``slot_gpu``, or R/P consecutive slots per GPU when None."""
    if slot_gpu is not None:
        return slot_gpu.to(phy2log.device)
    return torch.arange(phy2log.shape[1], device=phy2log.device) // (phy2log.shape[1] // num_gpus)


def new_pairs(phy2log: torch.Tensor, previous: torch.Tensor, num_experts: int, num_gpus: int,
              slot_gpu: torch.Tensor | None = None, previous_slot_gpu: torch.Tensor | None = None
              ) -> torch.Tensor:
    """[L] int64 moves: the (GPU, expert) pairs ``phy2log`` [L, R] holds and ``previous``
    [L, R'] did not, each plan's slots mapped to GPUs by its own ``slot_gpu`` (None: R/P
    consecutive slots per GPU). The same count as :func:`gpu_presence` tables give, from
    sorted pair keys per layer (O(R log R)): at 64 x 512 experts x 128 GPUs a table is 4 M
    cells, which grading and the migration planners cannot afford several times over."""
    new = _pair_keys(phy2log, num_experts, num_gpus, slot_gpu)                          # [L, R]
    old = _pair_keys(previous.to(phy2log.device), num_experts, num_gpus, previous_slot_gpu)
    distinct = torch.ones_like(new, dtype=torch.bool)
    distinct[:, 1:] = new[:, 1:] != new[:, :-1]                                      # each pair once
    at = torch.searchsorted(old, new).clamp_max(old.shape[1] - 1)
    held = old.gather(1, at) == new                                                  # the previous plan had it
    return (distinct & ~held).sum(1)


def off_node_share_of_slots(per_slot: torch.Tensor, phy2log: torch.Tensor, num_experts: int,
                            num_groups: int, num_nodes: int, slot_node: torch.Tensor | None = None) -> torch.Tensor:
    """[L] share of tokens served outside their group's home node (no routing statistics
    needed: with group-limited routing a token stays on few nodes exactly when its groups'
    replicas stay home), from the tokens each slot serves, per_slot: [L, R] float64 (any
    dispatch model). slot_node: [R] node of every slot (default R/N consecutive slots per
    node)."""
    L, R = phy2log.shape
    E = num_experts
    node = (torch.arange(R, device=per_slot.device) // (R // num_nodes) if slot_node is None
            else slot_node.to(per_slot.device))
    cell = (phy2log // (E // num_groups)) * num_nodes + node                # (group, node) of each slot
    group_node = torch.zeros(L, num_groups * num_nodes, dtype=torch.float64, device=per_slot.device)
    group_node.scatter_add_(1, cell, per_slot)
    home = group_node.view(L, num_groups, num_nodes).max(-1).values.sum(-1)
    total = per_slot.sum(1)
    share = (1 - home / total.clamp_min(1e-300)).clamp_min(0)
    share = torch.where(share <= ROUNDING_RTOL, 0.0, share)           # every token at home, up to rounding
    return torch.where(total > 0, share, torch.zeros_like(total))


SPLITS = ("even", "scheduled")
# The scheduled split of every micro-batch: fn(plan, tokens [B, L, E] int64, cluster) ->
# [B, L, R] int64 tokens per slot (:func:`solvers.dispatch.schedule_tokens`).
Scheduler = Callable[[Plan, torch.Tensor, Cluster], torch.Tensor]


def check_tokens(tokens, plan: Plan, param: str = "tokens") -> torch.Tensor:
    """tokens as int64 ``[B, L, E]`` on their own device (a ``[L, E]`` array is one micro-batch).

    Raises :class:`ProblemError` naming ``param`` for another shape, negative or fractional
    counts, or non-numbers.
    """
    if not isinstance(tokens, torch.Tensor):
        try:
            arr = np.asarray(tokens)
        except (TypeError, ValueError) as exc:
            raise ProblemError(param, f"must be a rectangular [micro-batches, layers, experts] array "
                               f"({exc})") from None
        if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == np.bool_):
            raise ProblemError(param, f"must hold token counts (numbers), got dtype {arr.dtype}")
        tokens = torch.from_numpy(np.ascontiguousarray(arr))
    t = tokens.detach()
    if t.dtype == torch.bool or t.is_complex():
        raise ProblemError(param, f"must hold integer token counts, got dtype {t.dtype}")
    if t.dim() == 2:
        t = t.unsqueeze(0)
    L, E = plan.phy2log.shape[0], plan.logcnt.shape[1]
    if t.dim() != 3 or tuple(t.shape[1:]) != (L, E):
        raise ProblemError(param, f"must have shape [micro-batches, {L}, {E}] (the plan's layers and "
                           f"experts), got {tuple(tokens.shape)}")
    if t.is_floating_point():
        if not bool(torch.isfinite(t).all()):
            raise ProblemError(param, "token counts must be finite")
        if not bool((t == t.round()).all()):
            raise ProblemError(param, "token counts must be whole numbers, found fractional values")
        if t.numel() and float(t.abs().max()) >= 2.0**53:
            raise ProblemError(param, "token counts must be below 2**53")
    t = t.to(torch.int64)
    if t.numel() and bool((t < 0).any()):
        raise ProblemError(param, f"token counts must be >= 0, found {int(t.min())}")
    return t


def slot_loads(problem: Problem, plan: Plan, split: str, tokens, scheduler: Scheduler | None = None
               ) -> torch.Tensor:
    """[B, L, R] float64 tokens each slot serves in each micro-batch under ``split``.

    tokens: [B, L, E] token counts per micro-batch (or [L, E]); None grades the problem's
    weights as one micro-batch. The scheduled split needs whole token counts and the
    ``scheduler`` that computes it.
    """
    if tokens is None:
        t = problem.weights.unsqueeze(0)
        if split == "scheduled":
            if not bool((t == t.round()).all()):
                raise ProblemError("weights", "the scheduled split needs whole token counts, the problem's "
                                   "loads are fractional (pass tokens=[micro-batches, layers, experts])")
            t = t.to(torch.int64)
    else:
        t = check_tokens(tokens, plan).to(problem.device)
    if split == "even":                             # each replica of e serves t_e / c_e
        return per_slot_loads(t.to(torch.float64), plan.phy2log, plan.logcnt)
    if scheduler is None:
        raise OptionError("split", "the scheduled split needs a token scheduler: call solvers.score, or pass "
                          "scheduler=solvers.dispatch.schedule_tokens")
    return scheduler(plan, t, problem.cluster).to(problem.device, torch.float64)


def score(problem: Problem, plan: Plan, previous: Plan | None = None,
          expert_bytes: int | None = None, *, split: str = "even", tokens=None,
          previous_cluster: Cluster | None = None, scheduler: Scheduler | None = None) -> Score:
    """Score ``plan`` on ``problem``; ``previous`` adds migration moves (same layers and GPUs).

    split: the dispatch model, "even" (default) or "scheduled" (the optimal split of every
    micro-batch, :func:`solvers.dispatch.schedule_tokens`). tokens: [B, L, E] token counts
    of B micro-batches to grade on instead of the problem's weights (the loads the plan was
    made for); without it the weights are one micro-batch. Raises :class:`PlanError` unless
    ``plan`` is a valid plan of ``problem``. previous_cluster: the cluster ``previous`` was
    made for, when it was another (the plan in force before GPUs failed): moves count the
    (GPU, expert) pairs new to a GPU, each plan's slots mapped to GPUs by its own cluster.
    scheduler: the scheduled split's function (:data:`Scheduler`; ``solvers.score`` passes
    :func:`solvers.dispatch.schedule_tokens`).

    On a cluster with per-GPU speeds the objective is time (gpu_time = gpu_load / speed);
    the summary adds the time metrics (``max_time_*``, ``time_imbalance_*``) only there."""
    if not isinstance(problem, Problem):
        raise PlanError("problem", f"must be a solvers.Problem, got {type(problem).__name__}")
    for name, value in (("plan", plan), ("previous", previous)):
        if not isinstance(value, Plan) and not (name == "previous" and value is None):
            raise PlanError(name, f"must be a solvers.Plan, got {type(value).__name__}")
    plan = problem.validate_plan(plan.to(problem.device))
    return score_validated(problem, plan, previous, check_expert_bytes(expert_bytes), split=split, tokens=tokens,
                           previous_cluster=previous_cluster, scheduler=scheduler)


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
                    expert_bytes: int | None = None, *, split: str = "even", tokens=None,
                    previous_cluster: Cluster | None = None, scheduler: Scheduler | None = None) -> Score:
    """:func:`score` for a plan already validated against ``problem`` (``solve`` checks a
    solver's plan itself, to tell a solver bug from bad user input)."""
    if split not in SPLITS:
        raise OptionError("split", f"must be one of {', '.join(SPLITS)}, got {split!r}")
    P, N = problem.num_gpus, problem.num_nodes
    L = problem.num_layers
    plan = plan.to(problem.device)
    cluster = problem.cluster
    slot_gpu = uneven_slot_gpu(problem)                                          # [R] or None
    live = len(cluster.live_gpus)
    speed = None if cluster.uniform_speed else problem.gpu_speed()               # [P] or None
    per_slot = None
    mb_imb = None
    if split == "even" and tokens is None and slot_gpu is None:
        gpu = gpu_loads(problem.weights, plan, P)
        mb = gpu.unsqueeze(0)                                                    # [1, L, P]
    else:
        per_slot = slot_loads(problem, plan, split, tokens, scheduler)          # [B, L, R]
        mb = slots_to_gpus(per_slot, slot_gpu, P)                               # [B, L, P]
        gpu = mb.sum(0)
        per_slot = per_slot.sum(0)
    B = mb.shape[0]
    node_mb = mb.view(B, L, N, P // N).sum(-1)
    # means over the live GPUs (a failed GPU serves nothing and is not waiting for work)
    mb_mean = mb.mean(-1) if live == P else mb.sum(-1) / live
    max_load, mean_load = mb.max(-1).values.sum(0), mb_mean.sum(0)
    node_max, node_mean = node_mb.max(-1).values.sum(0), node_mb.mean(-1).sum(0)
    if B > 1 or tokens is not None or split != "even":
        mb_imb = _ratio(mb.max(-1).values, mb_mean)                              # [B, L]
    node = node_mb.sum(0)
    if speed is None:
        gpu_time, max_time = gpu, max_load
        ideal = mean_load
    else:
        mb_time = mb / speed                                                     # [B, L, P]
        gpu_time = gpu / speed
        max_time = mb_time.max(-1).values.sum(0)
        ideal = mb.sum(-1).sum(0) / cluster.total_speed                          # W / sum of speeds
    # max >= mean exactly; a rounded mean may pass the max by an ulp: the ratios keep their range.
    imb = _ratio(max_load, mean_load).clamp_min(1.0)
    time_imb = imb if speed is None else _ratio(max_time, ideal).clamp_min(1.0)
    node_imb = _ratio(node_max, node_mean).clamp_min(1.0)
    dups = count_duplicates(plan.phy2log, P, slot_gpu)
    moves = moves_bytes = None
    if previous is not None:
        previous = previous.to(problem.device)
        pc = cluster if previous_cluster is None else previous_cluster
        previous.validate(L, problem.num_experts, pc.num_replicas if previous_cluster is not None else None,
                          P if pc.uniform_slots else None)
        if pc.num_gpus != P:
            raise PlanError("previous_cluster", f"must have the problem's {P} GPUs, got {pc.num_gpus}")
        prev_gpu = None if pc.uniform_slots else torch.tensor(pc.slot_gpus(), device=problem.device)
        moves = int(new_pairs(plan.phy2log, previous.phy2log, problem.num_experts, P, slot_gpu, prev_gpu).sum())
        if expert_bytes is not None:                 # checked by check_expert_bytes (score, grading)
            moves_bytes = moves * int(expert_bytes)
    off = None
    if problem.num_groups > 1 and problem.num_experts % problem.num_groups == 0:
        slot_node = None if slot_gpu is None else slot_gpu // cluster.gpus_per_node
        if per_slot is None:
            per_slot = per_slot_loads(problem.weights.to(torch.float64), plan.phy2log, plan.logcnt)   # [L, R]
        off = off_node_share_of_slots(per_slot, plan.phy2log, problem.num_experts, problem.num_groups, N, slot_node)
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
    if speed is not None:
        time_sum = float(max_time.sum())
        summary.update({"max_time_sum": time_sum, "max_time_worst": float(max_time.max()),
                        "time_imbalance_mean": float(time_imb.mean()),
                        "time_imbalance_worst": float(time_imb.max())})
    if mb_imb is not None:
        summary.update(microbatch_summary(mb_imb))
    check_finite(summary)
    check_finite({"max_time": max_time, "time_imbalance": time_imb})
    return Score(gpu, node, max_load, mean_load, imb, node_imb, dups, moves, moves_bytes, off, summary,
                 split, mb_imb, gpu_time, max_time, time_imb)


def microbatch_summary(imbalance: torch.Tensor, prefix: str = "microbatch_imbalance") -> dict:
    """mean, p50, p99 and worst of per-(micro-batch, layer) imbalances [B, L]."""
    flat = imbalance.flatten().to(torch.float64)
    q = torch.quantile(flat, torch.tensor([0.5, 0.99], dtype=torch.float64, device=flat.device))
    return {f"{prefix}_mean": float(flat.mean()), f"{prefix}_p50": float(q[0]),
            f"{prefix}_p99": float(q[1]), f"{prefix}_worst": float(flat.max())}
