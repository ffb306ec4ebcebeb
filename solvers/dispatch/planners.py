"""Placements built for the scheduled split (registered as solvers).

Under scheduling, a GPU's load is not fixed by the plan: tokens of an expert with replicas
on several GPUs flow to whichever is lighter in each micro-batch. What limits balance is
(a) experts with one replica (their tokens cannot move), (b) hot experts with too few
replicas (``t_e / c_e`` above the mean), and (c) small GPU sets that hold every replica
of many experts (``t(I(U)) / |U|``). So these planners

- choose counts for per-micro-batch peaks, then for connectivity: first every expert gets
  enough replicas that ``headroom x`` its share stays below a GPU's mean load
  (``c_e >= headroom * w_e / (W / P)``), then the slots left go to the experts with the
  fewest replicas, heaviest first (every expert twice before any third replica): each
  extra replica turns a fixed load into one that can move;
- spread replicas over all GPUs with no two replicas of one expert on one GPU (so every
  extra replica is a real edge between two GPUs) by a randomised LPT: replicas, heaviest
  first, each to the GPU with a free slot, without that expert, and the least even-split
  load plus a random jitter (``jitter`` x the mean replica load). Without the jitter,
  equal replicas of consecutive experts land on the same GPU pairs (two GPUs holding the
  same 16 experts: a set that cannot shed load); with it no two GPUs share many experts,
  the expert-GPU graph expands well, and the even-split loads stay nearly balanced.

``uniform_replicas`` is MicroMoE's baseline (every expert ``R // E`` times, whatever its load).
"""
from __future__ import annotations

from typing import Any

import torch

from ..errors import OptionError
from ..heuristics.common import expand_items
from ..options import Option, seed_option
from ..plan import Plan
from ..problem import Problem
from ..dynamics.robust import check_history
from ..registry import SolverOutput, register


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


def peak_then_connect_counts(peak: torch.Tensor, num_slots: int, num_gpus: int, headroom: float
                             ) -> torch.Tensor:
    """[L, E] int64 counts: ``ceil(headroom * peak_e)`` (at least 1, at most P), then the slots
    left one by one to the expert with the fewest replicas, heaviest first. When the first
    stage needs more slots than there are, the greedy counts on the peaks (the smallest
    largest peak per replica). peak: [L, E] per-step peak shares in mean GPU loads."""
    L, E = peak.shape
    q = peak.to(torch.float64)
    need = torch.ceil(headroom * q).clamp(1, num_gpus).to(torch.int64)
    fits = need.sum(1) <= num_slots                                       # [L]
    greedy = counts_with_minimum(q, num_slots, 1, num_gpus)
    counts = torch.where(fits.unsqueeze(1), need, torch.ones_like(need))
    heavier = q / q.max(1, keepdim=True).values.clamp_min(1e-300) * 0.5   # < 1: a tie-breaker only
    one = torch.ones(L, 1, dtype=torch.int64, device=q.device)
    for _ in range(num_slots - E):
        left = counts.sum(1, keepdim=True) < num_slots
        key = (-counts.to(torch.float64) + heavier).masked_fill(counts >= num_gpus, -float("inf"))
        counts.scatter_add_(1, key.argmax(1, keepdim=True), one * left)
    return torch.where(fits.unsqueeze(1), counts, greedy)


def _check(problem: Problem, minimum: int) -> int:
    E, R, P = problem.num_experts, problem.num_replicas, problem.num_gpus
    if minimum * E > R:
        raise OptionError("min_replicas", f"{minimum} replicas of {E} experts need {minimum * E} slots, "
                          f"the problem has {R}")
    if minimum > P:
        raise OptionError("min_replicas", f"must be <= num_gpus ({P}) with no two replicas of an expert "
                          f"on one GPU, got {minimum}")
    if R > E * P:
        raise OptionError("num_replicas", f"{R} slots cannot hold {E} experts with at most one replica "
                          f"per GPU ({E * P} at most)")
    return minimum


def spread_plan(weight: torch.Tensor, counts: torch.Tensor, num_gpus: int, jitter: float, seed: int) -> Plan:
    """Replicas with ``counts`` [L, E] placed by randomised LPT (see the module doc), batched
    over layers. weight: [L, E]. Two replicas of one expert share a GPU only when no other
    GPU has a free slot."""
    L, E = weight.shape
    item_e, item_w = expand_items(weight, counts)                        # [L, R] expert-major
    R = item_e.shape[1]
    S = R // num_gpus
    g = torch.Generator(device="cpu").manual_seed(int(seed))
    order = torch.argsort(item_w, dim=1, descending=True, stable=True)
    item_e, item_w = item_e.gather(1, order), item_w.gather(1, order)
    dev = weight.device
    load = torch.zeros(L, num_gpus, dtype=torch.float64, device=dev)
    used = torch.zeros(L, num_gpus, dtype=torch.int64, device=dev)
    holds = torch.zeros(L, num_gpus, E, dtype=torch.bool, device=dev)
    gpu = torch.empty(L, R, dtype=torch.int64, device=dev)
    rows = torch.arange(L, device=dev)
    scale = jitter * weight.to(torch.float64).sum(1, keepdim=True) / R
    noise = torch.rand(R, L, num_gpus, generator=g, dtype=torch.float64).to(dev)
    for i in range(R):
        e = item_e[:, i]
        full = used >= S
        bad = full | holds[rows, :, e]
        bad = torch.where(bad.all(1, keepdim=True), full, bad)          # only duplicates left: allow one
        pick = (load + scale * noise[i]).masked_fill(bad, float("inf")).argmin(1)
        gpu[:, i] = pick
        load[rows, pick] += item_w[:, i]
        used[rows, pick] += 1
        holds[rows, pick, e] = True
    by_gpu = torch.argsort(gpu * R + torch.arange(R, device=dev), dim=1)
    return Plan.from_phy2log(item_e.gather(1, by_gpu), E)


_HISTORY = Option("history", object, None, "the planning window's steps [W, layers, experts]: replica counts "
                  "follow each expert's largest per-step share (default: the problem's weights as one step)",
                  nullable=True, advanced=True)
_JITTER = Option("jitter", float, 1.0, "random jitter of the placement, in mean replica loads (0: plain "
                 "LPT, whose GPUs mirror each other)", minimum=0.0, maximum=100.0, advanced=True)


HEADROOM_ONE_STEP = 3.0
HEADROOM_STEPS = 1.15


@register("sched_spread", kind="heuristic",
          description="for the scheduled split: replicas for each expert's per-step peak share, the slots left to "
                      "the experts with the fewest replicas, spread over all GPUs with no expert twice on a GPU",
          options=(Option("headroom", float, None, "replicas so that headroom x an expert's peak share stays below "
                                                   f"a GPU's mean load (default {HEADROOM_ONE_STEP:g} on the "
                                                   f"problem's weights, {HEADROOM_STEPS:g} on a history of steps)",
                          minimum=1.0, maximum=100.0, nullable=True),
                   _HISTORY, _JITTER, seed_option()))
def solve_sched_spread(problem: Problem, *, headroom: float | None = None, history: Any = None,
                       jitter: float = 1.0, seed: int = 0) -> SolverOutput:
    _check(problem, 1)
    hist = check_history(problem, history)                               # [W, L, E]
    if headroom is None:
        headroom = HEADROOM_STEPS if history is not None and hist.shape[0] > 1 else HEADROOM_ONE_STEP
    peak = peak_shares(hist, problem.num_gpus)
    counts = peak_then_connect_counts(peak, problem.num_replicas, problem.num_gpus, headroom)
    weight = hist.mean(0) if history is not None else problem.weights
    return SolverOutput(spread_plan(weight, counts, problem.num_gpus, jitter, seed), "global",
                        info={"headroom": headroom, "steps": int(hist.shape[0])})


@register("uniform_replicas", kind="heuristic",
          description="MicroMoE-style baseline for the scheduled split: every expert R // E replicas (the "
                      "R mod E left to the hottest), spread over all GPUs with no expert twice on a GPU",
          options=(_JITTER, seed_option()))
def solve_uniform_replicas(problem: Problem, *, jitter: float = 1.0, seed: int = 0) -> SolverOutput:
    E, R, P = problem.num_experts, problem.num_replicas, problem.num_gpus
    minimum = _check(problem, min(R // E, P))
    counts = counts_with_minimum(problem.weights, R, minimum, minimum + 1)
    return SolverOutput(spread_plan(problem.weights, counts, P, jitter, seed), "global",
                        info={"replicas_each": minimum})
