"""Time-robust planners: use the time axis of a planning window, not only its sum.

A plan is used on future steps, so the sum of a window is only one summary of the loads
it must serve. Each planner here is a registered solver whose ``history`` option takes
the window's steps ``[W, L, E]`` (without it, the problem's weights are one step):

- ``robust_sum``: minimise the sum over the window's steps of the per-step max GPU load
  (the tokens a step waits for, added up); ``robust_max``: minimise the worst step's max.
  Both start from ``kk_swap`` on the window sum and improve it by swaps between the GPU
  that is most often the bottleneck and any other GPU (its node, under the hierarchical
  policy), every swap scored on all steps at once; replica counts are the sum's;
- ``ewma``: ``kk_swap`` on an exponentially weighted history (recent steps count more);
- ``forecast``: ``kk_swap`` on a damped linear-trend forecast of the next window.

Steps are grouped into at most ``buckets`` consecutive blocks first (summed): less noise
and bounded memory. All work is batched over layers in torch.
"""
from __future__ import annotations

import math
from typing import Any

import torch

from ..cluster import Cluster
from ..errors import OptionError
from ..options import Option, SolverOptions, policy_option
from ..plan import Plan
from ..problem import Problem
from ..registry import SolverOutput, register, run
from ..scoring import per_slot_loads
from ..work import WorkModel

_HISTORY = Option("history", object, None, "the window's steps [W, layers, experts] (default: the "
                  "problem's weights as one step)", nullable=True, advanced=True)


def check_history(problem: Problem, history: Any) -> torch.Tensor:
    """history as float64 [W, L, E] on the problem's device (the weights as one step when None)."""
    if history is None:
        return problem.weights.to(torch.float64).unsqueeze(0)
    if not isinstance(history, torch.Tensor):
        try:
            history = torch.as_tensor(history)
        except (TypeError, ValueError, RuntimeError) as exc:
            raise OptionError("history", f"must be a [steps, layers, experts] array ({exc})") from None
    want = (problem.num_layers, problem.num_experts)
    if history.dim() != 3 or tuple(history.shape[1:]) != want or history.shape[0] == 0:
        raise OptionError("history", f"must have shape [steps, {want[0]}, {want[1]}], got {tuple(history.shape)}")
    if history.is_complex() or history.dtype == torch.bool:
        raise OptionError("history", f"must hold real loads, got {history.dtype}")
    h = history.to(problem.device, torch.float64)
    if not bool(torch.isfinite(h).all()) or bool((h < 0).any()):
        raise OptionError("history", "loads must be finite and >= 0")
    return h


def buckets_of(history: torch.Tensor, buckets: int) -> torch.Tensor:
    """[B, L, E]: the steps summed in B <= ``buckets`` consecutive blocks of (nearly) equal size."""
    W = history.shape[0]
    B = min(W, buckets)
    edges = torch.linspace(0, W, B + 1).round().to(torch.int64)
    idx = torch.bucketize(torch.arange(W), edges[1:], right=True)
    out = torch.zeros(B, *history.shape[1:], dtype=history.dtype, device=history.device)
    return out.index_add_(0, idx.to(history.device), history)


def _kk_swap(problem: Problem, weights: torch.Tensor, policy: str) -> tuple[Plan, str]:
    out = run(problem.with_weights(weights), "kk_swap", {"policy": policy})
    return out.plan, out.policy


def _excluding_two(vals: torch.Tensor, idx: torch.Tensor, g: torch.Tensor, num_gpus: int) -> torch.Tensor:
    """[L, B, P]: per step the max GPU load over GPUs other than g and h, for every h.

    vals, idx: [L, B, 3] the three largest loads per step and their GPUs; g: [L]."""
    L, B, _ = vals.shape
    h = torch.arange(num_gpus, device=vals.device).view(1, 1, num_gpus)
    out = torch.full((L, B, num_gpus), -math.inf, dtype=vals.dtype, device=vals.device)
    for k in (2, 1, 0):                                 # the first (largest) usable one wins
        usable = (idx[..., k:k + 1] != g.view(L, 1, 1)) & (idx[..., k:k + 1] != h)
        out = torch.where(usable, vals[..., k:k + 1].expand(L, B, num_gpus), out)
    return out


def time_robust_search(hist: torch.Tensor, phy2log: torch.Tensor, num_gpus: int, num_zones: int,
                       objective: str, steps: int, cluster: Cluster | None = None) -> tuple[torch.Tensor, int]:
    """Swap local search on ``phy2log`` [L, R] minimising, per layer, the sum (or max) over
    steps of the per-step max GPU load under ``hist`` [B, L, E]. Returns (phy2log, rounds).
    On a real ``cluster`` (speeds, uneven slots, failed GPUs) the max GPU *time* (load over
    speed, each GPU's own slot range; a failed GPU has none and never takes a swap)."""
    B, L, E = hist.shape
    R = phy2log.shape[1]
    P = num_gpus
    dev = phy2log.device
    uniform = cluster is None or cluster.homogeneous
    # identical GPUs: R / P slots each at speed 1 (times are the loads: no division on the hot
    # [X, B, S, R] tables)
    sizes, speeds = ([R // P] * P, [1.0] * P) if uniform else (list(cluster.gpu_slots), cluster.gpu_speed)
    S = max(sizes)
    size = torch.tensor(sizes, dtype=torch.int64, device=dev)                      # [P] slots of each GPU
    slot_gpu = torch.repeat_interleave(torch.arange(P, device=dev), size)          # [R]
    first = torch.cumsum(size, 0) - size                                            # [P] first slot of each GPU
    speed = torch.tensor(speeds, dtype=torch.float64, device=dev)                   # [P]
    w = hist.permute(1, 0, 2)                                                      # [L, B, E]
    cnt = torch.zeros(L, E, dtype=torch.float64, device=dev).scatter_add_(
        1, phy2log, torch.ones(L, R, dtype=torch.float64, device=dev))
    p2l = phy2log.clone()
    zone = slot_gpu // (P // num_zones)
    active = torch.ones(L, dtype=torch.bool, device=dev)
    rounds = 0
    pad = max(0, 3 - P)
    for _ in range(steps):
        rows = active.nonzero().squeeze(1)
        if rows.numel() == 0:
            break
        rounds += 1
        X = rows.numel()
        sp = p2l[rows]
        per = per_slot_loads(w[rows], sp.unsqueeze(1), cnt[rows].unsqueeze(1))      # [X, B, R]
        if uniform:
            load = per.view(X, B, P, S).sum(-1)                                    # [X, B, P]
        else:
            load = torch.zeros(X, B, P, dtype=per.dtype, device=dev).index_add_(2, slot_gpu, per)
        time = load if uniform else load / speed                                   # [X, B, P]
        padded = torch.nn.functional.pad(time, (0, pad), value=-math.inf)
        vals, idx = padded.topk(3, dim=-1)                                         # [X, B, 3]
        top = vals[..., 0]
        current = top.sum(1) if objective == "sum" else top.max(1).values          # [X]
        if objective == "sum":       # the GPU whose lead over the runner-up adds up the most
            lead = torch.zeros(X, P, dtype=load.dtype, device=dev)
            lead.scatter_add_(1, idx[..., 0].clamp_max(P - 1), (vals[..., 0] - vals[..., 1]).nan_to_num(0, 0, 0))
            g = lead.argmax(1)
        else:                        # the bottleneck of the worst step
            g = idx[..., 0].gather(1, top.argmax(1, keepdim=True)).squeeze(1)
        k = torch.arange(S, device=dev)
        own = k.view(1, S) < size[g].unsqueeze(1)                                  # [X, S] g has slot k
        mine = (first[g].unsqueeze(1) + k).clamp_max(R - 1)                        # [X, S]
        a = per.gather(2, mine.unsqueeze(1).expand(X, B, S))                       # [X, B, S]
        d = a.unsqueeze(3) - per.unsqueeze(2)                                      # [X, B, S, R]
        load_g = load.gather(2, g.view(X, 1, 1).expand(X, B, 1))                   # [X, B, 1]
        load_h = load[:, :, slot_gpu]                                              # [X, B, R]
        rest = _excluding_two(vals, idx, g, P)[:, :, slot_gpu]                     # [X, B, R]
        new_g = load_g.unsqueeze(3) - d                                            # times: each side over
        new_h = load_h.unsqueeze(2) + d                                            # its own GPU's speed
        if not uniform:
            new_g = new_g / speed[g].view(X, 1, 1, 1)
            new_h = new_h / speed[slot_gpu].view(1, 1, 1, R)
        new_max = torch.maximum(rest.unsqueeze(2), torch.maximum(new_g, new_h))
        value = new_max.sum(1) if objective == "sum" else new_max.max(1).values    # [X, S, R]
        ea = sp.gather(1, mine)
        ok = (slot_gpu.view(1, 1, R) != g.view(X, 1, 1)) & (ea.unsqueeze(2) != sp.unsqueeze(1))
        ok &= own.unsqueeze(2)
        ok &= zone.view(1, 1, R) == zone[mine[:, 0]].view(X, 1, 1)
        value = value.masked_fill(~ok, math.inf).view(X, -1)
        best = value.argmin(1)
        better = value.gather(1, best.unsqueeze(1)).squeeze(1) < current * (1 - 1e-12)
        i = mine.gather(1, (best // R).unsqueeze(1)).squeeze(1)
        j = best % R
        r = torch.arange(X, device=dev)
        swapped = sp.clone()
        swapped[r, i], swapped[r, j] = sp[r, j], sp[r, i]
        p2l[rows] = torch.where(better.unsqueeze(1), swapped, sp)
        active[rows[~better]] = False
    return p2l, rounds


_BUCKETS = Option("buckets", int, 16, "steps are summed into at most this many consecutive blocks",
                  minimum=1, maximum=4096, advanced=True)
_STEPS = Option("steps", int, 64, "swap rounds of the time-robust local search", minimum=0, maximum=100_000,
                advanced=True)


# Work model (solvers.work): seconds on 2 cores, coefficients measured by
# `python -m benchmarks.work_model --fit`.
ROBUST_WORK = WorkModel.of({"1": 0.0696, "S": 0, "R": 0.000792, "L*R": 0, "L*E*R": 0, "L*S^2": 0, "L*R*S": 7.63e-06, "T*L*R": 1.61e-06, "T*L*R*steps": 7.94e-07, "B*L*R*S*steps": 3.45e-08}, includes=("kk_swap",))

# Work model (solvers.work): seconds on 2 cores, coefficients measured by
# `python -m benchmarks.work_model --fit`.
SMOOTHED_WORK = WorkModel.of({"1": 0, "S": 0.000642, "R": 0, "L*R": 0, "L*E*R": 0, "L*S^2": 0, "L*R*S": 0, "L*R*C*steps": 0, "T*L*R": 0}, includes=("kk_swap",))


def _robust_solver(objective: str):
    """The registered function of ``robust_<objective>`` (robust_sum and robust_max differ only in it)."""
    def solve(problem: Problem, o: SolverOptions) -> SolverOutput:
        hist = buckets_of(check_history(problem, o.history), o.buckets)
        plan, resolved = _kk_swap(problem, hist.sum(0), o.policy)
        zones = problem.num_nodes if resolved == "hierarchical" else 1
        p2l, rounds = time_robust_search(hist, plan.phy2log, problem.num_gpus, zones, objective, o.steps,
                                         problem.cluster)
        return SolverOutput(Plan.from_phy2log(p2l, problem.num_experts), resolved,
                            info={"buckets": hist.shape[0], "search_rounds": rounds, "objective": objective})

    solve.__name__ = f"solve_robust_{objective}"
    return solve


for _objective, _what in (("sum", "minimise the sum over the window's steps of the per-step max GPU load"),
                          ("max", "minimise the worst step's max GPU load over the window")):
    register(f"robust_{_objective}", kind="heuristic", in_suites=False, heterogeneous=True, work=ROBUST_WORK,
             options=(policy_option(), _HISTORY, _BUCKETS, _STEPS), description="time-robust: " + _what)(
        _robust_solver(_objective))


def ewma_weights(hist: torch.Tensor, halflife: float) -> torch.Tensor:
    """[L, E]: exponentially weighted mean of the steps ``hist [W, L, E]`` (newest weighs 1)."""
    W = hist.shape[0]
    age = torch.arange(W - 1, -1, -1, dtype=torch.float64, device=hist.device)
    k = torch.pow(0.5, age / halflife)
    return (hist * k.view(W, 1, 1)).sum(0) / k.sum()


def trend_forecast(hist: torch.Tensor, damping: float) -> torch.Tensor:
    """[L, E]: a damped linear-trend forecast of the mean step of the next window.

    Per expert a least-squares line over the W steps, evaluated ``W`` steps past the
    window's centre (the next window's centre) with its slope times ``damping``; never
    below a quarter of the window's mean (a cooling expert does not go to zero)."""
    W = hist.shape[0]
    mean = hist.mean(0)
    if W < 2:
        return mean
    t = torch.arange(W, dtype=torch.float64, device=hist.device) - (W - 1) / 2
    slope = (hist * t.view(W, 1, 1)).sum(0) / (t * t).sum()
    return torch.maximum(mean + damping * slope * W, 0.25 * mean)


@register("ewma", kind="heuristic", in_suites=False, heterogeneous=True, work=SMOOTHED_WORK,
          options=(policy_option(), _HISTORY,
                   Option("halflife", float, 4.0, "steps after which a step's weight halves", minimum=0.0,
                          exclusive_minimum=True, maximum=1e6)),
          description="time-robust: kk_swap on an exponentially weighted history (recent steps count more)")
def solve_ewma(problem: Problem, o: SolverOptions) -> SolverOutput:
    hist = check_history(problem, o.history)
    plan, resolved = _kk_swap(problem, ewma_weights(hist, o.halflife), o.policy)
    return SolverOutput(plan, resolved, info={"halflife": o.halflife, "steps": hist.shape[0]})


@register("forecast", kind="heuristic", in_suites=False, heterogeneous=True, work=SMOOTHED_WORK,
          options=(policy_option(), _HISTORY, _BUCKETS,
                   Option("damping", float, 0.5, "share of the fitted trend carried into the next window",
                          minimum=0.0, maximum=2.0)),
          description="time-robust: kk_swap on a damped linear-trend forecast of the next window")
def solve_forecast(problem: Problem, o: SolverOptions) -> SolverOutput:
    hist = buckets_of(check_history(problem, o.history), o.buckets)
    plan, resolved = _kk_swap(problem, trend_forecast(hist, o.damping), o.policy)
    return SolverOutput(plan, resolved, info={"damping": o.damping, "buckets": hist.shape[0]})
