"""Placements built for the scheduled split (registered as solvers).

Under scheduling, a GPU's load is not fixed by the plan: tokens of an expert with replicas
on several GPUs flow to whichever is lighter in each micro-batch. What limits balance is
(a) experts with one replica (their tokens cannot move), (b) hot experts with too few
replicas (``t_e / c_e`` above the mean), and (c) small GPU sets that hold every replica
of many experts (``t(I(U)) / |U|``). So these planners

- choose counts by each expert's per-step peak share (the planning window's steps,
  ``history``; without it the problem's weights are one step), blended with its mean
  share (``peak_weight``, default half and half: a hedge for the steps after the window):
  every expert once, then each slot to the expert with the largest share per replica, at
  most one replica per GPU. The sum of a window averages an expert's heat away; its peak
  is what a micro-batch meets. A hot expert ends up on many GPUs, so it is covered in its peak
  steps and its tokens, free to go to whichever of its GPUs is light, let every GPU it
  shares shed load (measured on the shipped DeepSeek-V3 traces: better in and out of
  sample than giving every expert a second replica first, see docs/dispatch.md);
- spread replicas over all GPUs with no two replicas of one expert on one GPU (so every
  extra replica is a real edge between two GPUs): experts with more replicas first, each
  replica to the GPU sharing the fewest experts with the expert's other GPUs, then the
  least filled, then the least even-split load plus a random jitter (:func:`spread_plan`).
  Plain LPT made GPU pairs hold the same 16 experts (a set that cannot shed load); this
  keeps the expert-GPU graph expanding.

``uniform_replicas`` is MicroMoE's baseline (every expert ``R // E`` times, whatever its load).

On a real cluster (per-GPU speeds, uneven slot counts, failed GPUs) both fill every live GPU
to its own slot count (a failed GPU gets none, an expert at most once per live GPU) and
balance in time: a replica goes to the GPU whose time after taking it, ``(load + w) /
speed``, is least (the LPT rule for GPUs of different speeds), behind the same overlap rule;
the fill-level rule holds for the last round only (:data:`LAST_ROUNDS_REAL`). On a
homogeneous cluster the placement is the one it always was.
"""
from __future__ import annotations


import torch

from ..dynamics.robust import check_history
from ..errors import OptionError
from ..heuristics.common import expand_items
from ..options import Option, SolverOptions, seed_option
from ..plan import Plan
from ..problem import Problem
from ..registry import SolverOutput, register
from ..work import WorkModel


def counts_with_minimum(weight: torch.Tensor, num_slots: int, minimum: int, cap: int) -> torch.Tensor:
    """[L, E] int64 replica counts: every expert ``minimum`` (at most ``cap``), the slots left
    one by one to the expert with the highest load per replica below ``cap``. weight: [L, E]."""
    L, E = weight.shape
    w = weight.to(torch.float64)
    counts = torch.full((L, E), minimum, dtype=torch.int64, device=w.device)
    one = torch.ones(L, 1, dtype=torch.int64, device=w.device)
    for _ in range(num_slots - minimum * E):
        per = (w / counts).masked_fill(counts >= cap, -1.0)
        counts.scatter_add_(1, per.argmax(1, keepdim=True), one)
    return counts


def peak_shares(history: torch.Tensor, num_gpus: int) -> torch.Tensor:
    """[L, E] float64: each expert's largest per-step share, in mean GPU loads (1 = a GPU's mean
    load). history: [W, L, E] steps. The peak, not the sum: an expert hot only in some steps
    needs its replicas in those steps, and a window's sum averages its heat away."""
    h = history.to(torch.float64)
    total = h.sum(-1, keepdim=True)
    share = torch.where(total > 0, h / total.clamp_min(1e-300), 1.0 / h.shape[-1])
    return share.amax(0) * num_gpus


def live_gpus(problem: Problem) -> int:
    """The GPUs holding slots (all P on a homogeneous cluster): an expert's replicas spread over these."""
    return len(problem.cluster.live_gpus)


def _check(problem: Problem, minimum: int) -> int:
    E, R, P = problem.num_experts, problem.num_replicas, live_gpus(problem)
    if minimum * E > R:
        raise OptionError("min_replicas", f"{minimum} replicas of {E} experts need {minimum * E} slots, "
                          f"the problem has {R}")
    if minimum > P:
        raise OptionError("min_replicas", f"must be <= the live GPUs ({P}) with no two replicas of an expert "
                          f"on one GPU, got {minimum}")
    most = max(problem.cluster.gpu_slots)
    if most > E:
        raise OptionError("num_replicas", f"a GPU with {most} slots cannot hold {E} experts with at most one "
                          f"replica per GPU ({E} slots per GPU at most)")
    return minimum


def _real(problem: Problem) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """(slots [P], speed [P]) of a cluster that is not homogeneous, else (None, None)."""
    c = problem.cluster
    if c.homogeneous:
        return None, None
    return (torch.tensor(c.gpu_slots, dtype=torch.int64, device=problem.device),
            torch.tensor(c.gpu_speed, dtype=torch.float64, device=problem.device))


# On a real cluster the fill-level rule holds for the last round only (every GPU's last
# free slot taken, most free slots first): over two rounds, as on identical GPUs, it kept
# a fast GPU from the heavy replicas (measured on 58 x 256 lognormal layers, 32 GPUs:
# scheduled time 1.048 -> 1.033 x the bound with half the GPUs at speed 1.4, 1.014 -> 1.012
# with 10/8 slots; without the rule an expert could land twice on a GPU at the end).
LAST_ROUNDS_REAL = 1


def spread_plan(weight: torch.Tensor, counts: torch.Tensor, num_gpus: int, jitter: float, seed: int,
                slots: torch.Tensor | None = None, speed: torch.Tensor | None = None) -> Plan:
    """Replicas with ``counts`` [L, E] placed by a randomised LPT (see the module doc), batched
    over layers. weight: [L, E]. ``slots``, ``speed`` [P]: a real cluster's per-GPU slot counts
    (0: failed) and speeds, summing to R; None: R / P slots of speed 1 each.

    Experts with more replicas go first, heaviest first among equal counts, an expert's
    replicas one after the other. Each replica goes to a GPU without its expert, with a free
    slot, of least even-split load plus jitter plus, in mean replica loads, the experts it
    already shares with the GPUs holding this expert: each replica links GPUs that share
    little, so the expert-GPU graph expands (no two GPUs mirror each other). Two rules keep
    distinct GPUs available: an expert with 3 or more replicas goes to the GPUs with the
    fewest filled slots (GPUs fill level by level while the many-replica experts are placed),
    and no GPU is filled up while that would leave fewer open GPUs than the next expert has
    replicas. Two replicas of an expert share a GPU only when every open GPU holds it."""
    L, E = weight.shape
    item_e, item_w = expand_items(weight, counts)                        # [L, R] expert-major
    R = item_e.shape[1]
    S = R // num_gpus if slots is None else slots                        # int, or [P] per GPU
    g = torch.Generator(device="cpu").manual_seed(int(seed))
    order = torch.argsort(item_w, dim=1, descending=True, stable=True)   # stable sorts: weight, then
    item_e, item_w = item_e.gather(1, order), item_w.gather(1, order)
    order = torch.argsort(counts.gather(1, item_e), dim=1, descending=True, stable=True)   # count first
    item_e, item_w = item_e.gather(1, order), item_w.gather(1, order)
    dev = weight.device
    load = torch.zeros(L, num_gpus, dtype=torch.float64, device=dev)
    used = torch.zeros(L, num_gpus, dtype=torch.int64, device=dev)
    holds = torch.zeros(L, num_gpus, E, dtype=torch.bool, device=dev)
    shared = torch.zeros(L, num_gpus, num_gpus, dtype=torch.float64, device=dev)   # experts GPUs g, h share
    gpu = torch.empty(L, R, dtype=torch.int64, device=dev)
    rows = torch.arange(L, device=dev)
    unit = weight.to(torch.float64).sum(1, keepdim=True) / R            # mean replica load
    big = unit * (R + 1) * (2 + jitter)                                  # above any load + jitter
    if speed is not None:
        big = big / speed.min()                                          # ... and any time
    noise = torch.rand(R, L, num_gpus, generator=g, dtype=torch.float64).to(dev)
    for i in range(R):
        e = item_e[:, i]
        has_e = holds[rows, :, e]                                        # [L, P]
        full = used >= S
        bad = full | has_e
        level = used.masked_fill(bad, R).min(1, keepdim=True).values
        if R - i <= (2 if slots is None else LAST_ROUNDS_REAL) * num_gpus:
            if slots is None:
                bad = bad | (used > level)                               # the last rounds: level by level
            else:                                                        # ... by free slots: most first
                free = (S - used).masked_fill(bad, -1)
                bad = bad | (free < free.max(1, keepdim=True).values)
        bad = torch.where(bad.all(1, keepdim=True), full, bad)          # a safety net
        overlap = (shared * has_e.unsqueeze(1)).sum(-1)                  # [L, P]
        if speed is None:
            key = (overlap * (R + 1) + (used - level).clamp_min(0)) * big + load + unit * jitter * noise[i]
        else:
            # in time: the GPU's time once it takes the replica (LPT for GPUs of different
            # speeds); no level-by-level filling before the last rounds, which would give a
            # fast GPU no more of the heavy replicas than a slow one
            key = overlap * (R + 1) * big + (load + item_w[:, i:i + 1]) / speed + unit * jitter * noise[i]
        pick = key.masked_fill(bad, float("inf")).argmin(1)
        gpu[:, i] = pick
        load[rows, pick] += item_w[:, i]
        used[rows, pick] += 1
        holds[rows, pick, e] = True
        shared[rows, pick] += has_e
        shared[rows, :, pick] += has_e
    by_gpu = torch.argsort(gpu * R + torch.arange(R, device=dev), dim=1)
    return Plan.from_phy2log(item_e.gather(1, by_gpu), E)


_HISTORY = Option("history", object, None, "the planning window's steps [W, layers, experts]: replica counts "
                  "follow each expert's largest per-step share (default: the problem's weights as one step)",
                  nullable=True, advanced=True)
_JITTER = Option("jitter", float, 1.0, "random jitter of the placement, in mean replica loads (0: plain "
                 "LPT, whose GPUs mirror each other)", minimum=0.0, maximum=100.0, advanced=True)


def count_profile(history: torch.Tensor, num_gpus: int, peak_weight: float) -> torch.Tensor:
    """[L, E] float64 share the counts follow, in mean GPU loads: ``peak_weight`` x each
    expert's per-step peak share + the rest x its share of the window's sum. history: [W, L, E]."""
    total = history.sum(0)
    mean = total / total.sum(-1, keepdim=True).clamp_min(1e-300) * num_gpus
    return peak_weight * peak_shares(history, num_gpus) + (1.0 - peak_weight) * mean


# Work model (solvers.work): seconds on 2 cores, coefficients measured by
# `python -m benchmarks.work_model --fit`.
SPREAD_WORK = WorkModel.of({"1": 0.00531, "R": 0.00141, "L*R": 8.84e-07, "L*E*R": 1.15e-07, "T*L*R": 0})


@register("sched_spread", kind="heuristic", work=SPREAD_WORK, heterogeneous=True,
          description="for the scheduled split: replica counts by the experts' per-step peak and mean shares "
                      "(greedy on the largest share per replica), spread over all GPUs with no expert twice on a GPU",
          options=(_HISTORY,
                   Option("peak_weight", float, 0.5, "counts follow this x each expert's per-step peak share + the "
                                                     "rest x its mean share over the window (1: peaks only)",
                          minimum=0.0, maximum=1.0),
                   _JITTER, seed_option()))
def solve_sched_spread(problem: Problem, o: SolverOptions) -> SolverOutput:
    _check(problem, 1)
    hist = check_history(problem, o.history)                             # [W, L, E]
    profile = count_profile(hist, problem.num_gpus, o.peak_weight)
    counts = counts_with_minimum(profile, problem.num_replicas, 1, live_gpus(problem))
    weight = hist.mean(0) if o.history is not None else problem.weights
    return SolverOutput(spread_plan(weight, counts, problem.num_gpus, o.jitter, o.seed, *_real(problem)), "global",
                        info={"steps": int(hist.shape[0])})


@register("uniform_replicas", kind="heuristic", work=SPREAD_WORK, heterogeneous=True,
          description="MicroMoE-style baseline for the scheduled split: every expert R // E replicas (the "
                      "R mod E left to the hottest), spread over all GPUs with no expert twice on a GPU",
          options=(_JITTER, seed_option()))
def solve_uniform_replicas(problem: Problem, o: SolverOptions) -> SolverOutput:
    E, R, P = problem.num_experts, problem.num_replicas, problem.num_gpus
    minimum = _check(problem, min(R // E, live_gpus(problem)))
    counts = counts_with_minimum(problem.weights, R, minimum, minimum + 1)
    return SolverOutput(spread_plan(problem.weights, counts, P, o.jitter, o.seed, *_real(problem)), "global",
                        info={"replicas_each": minimum})
