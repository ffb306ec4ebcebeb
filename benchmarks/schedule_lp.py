"""The exact reference: the scheduling LP of one (micro-batch, layer) through HiGHS.

Variables ``x[e, g] >= 0`` (tokens of expert e served on GPU g, one per distinct GPU
holding e) and ``T``; minimise T subject to ``sum_g x[e, g] = t_e`` and
``sum_e x[e, g] <= T``. The LP optimum ``T*`` is ``t(I(U)) / |U|`` for some GPU set U (a
rational with denominator <= P), and the integer optimum is ``ceil(T*)`` (flow
integrality). Slow (one HiGHS model per instance); for tests and benchmarks. With GPU
speeds, :func:`lp_time` is the continuous optimum in time by enumeration (tiny instances).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from solvers.backends import cpsat_available, prepare_highs_scheduler
from solvers.plan import Plan


@dataclass(frozen=True)
class LPSolution:
    """value: the LP optimum T*; integer: ceil(T*), the integer optimum; gpu_load: [P] of the LP split."""

    value: float
    integer: int
    gpu_load: np.ndarray


def _highspy():

    cpsat_available()          # OR-Tools first: it bundles HiGHS' symbols (see solvers.backends)
    import highspy

    return highspy


def solve_lp(phy2log, tokens, num_gpus: int) -> LPSolution:
    """The scheduling LP of one layer. phy2log: [R] experts of the slots; tokens: [E] counts."""
    highspy = _highspy()
    p2l = np.asarray(phy2log, dtype=np.int64).reshape(-1)
    t = np.asarray(tokens, dtype=np.float64).reshape(-1)
    R, E = p2l.size, t.size
    S = R // num_gpus
    pairs = sorted({(int(e), p // S) for p, e in enumerate(p2l)})       # (expert, GPU), distinct
    n = len(pairs)
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("primal_feasibility_tolerance", 1e-9)
    h.setOptionValue("dual_feasibility_tolerance", 1e-9)
    inf = highspy.kHighsInf
    # columns: x_0..x_{n-1}, T
    costs = np.zeros(n + 1)
    costs[n] = 1.0
    h.addVars(n + 1, np.zeros(n + 1), np.full(n + 1, inf))
    h.changeColsCost(n + 1, np.arange(n + 1, dtype=np.int32), costs)
    for e in range(E):
        cols = [i for i, (pe, _) in enumerate(pairs) if pe == e]
        if not cols:
            continue
        h.addRow(t[e], t[e], len(cols), np.array(cols, dtype=np.int32), np.ones(len(cols)))
    for g in range(num_gpus):
        cols = [i for i, (_, pg) in enumerate(pairs) if pg == g]
        idx = np.array(cols + [n], dtype=np.int32)
        vals = np.array([1.0] * len(cols) + [-1.0])
        h.addRow(-inf, 0.0, len(idx), idx, vals)
    h.changeObjectiveSense(highspy.ObjSense.kMinimize)
    h.setOptionValue("threads", 1)
    prepare_highs_scheduler(1)             # the exact models' HiGHS runs share its scheduler
    h.run()
    if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
        raise RuntimeError(f"HiGHS: {h.modelStatusToString(h.getModelStatus())}")
    sol = np.asarray(h.getSolution().col_value)
    value = float(sol[n])
    gpu = np.zeros(num_gpus)
    for i, (_, g) in enumerate(pairs):
        gpu[g] += sol[i]
    # T* * |U| is an integer for the tight set U (|U| <= P): round T* to the nearest such rational.
    scale = max(1.0, abs(value))
    integer = math.ceil(value - 1e-7 * scale)
    return LPSolution(value, integer, gpu)


def optimal_max_loads(plan: Plan, tokens: torch.Tensor, num_gpus: int) -> torch.Tensor:
    """[B, L] int64 integer optimum of every (micro-batch, layer), one LP each. tokens: [B, L, E]."""
    p2l = plan.phy2log.cpu().numpy()
    t = tokens.cpu().numpy()
    out = np.zeros(t.shape[:2], dtype=np.int64)
    for b in range(t.shape[0]):
        for layer in range(t.shape[1]):
            out[b, layer] = solve_lp(p2l[layer], t[b, layer], num_gpus).integer
    return torch.from_numpy(out)


def lp_time(t: np.ndarray, p2l: np.ndarray, slot_gpu: np.ndarray, speed: np.ndarray) -> float:
    """The continuous optimum in time (tokens divisible) of one instance, a reference for
    :func:`solvers.dispatch.schedule.split_one`: max over GPU sets U of the tokens of the
    experts living only on U over sum_U s_g, by enumeration (tiny instances only)."""
    P = speed.shape[0]
    gpus_of = {}
    for e, g in zip(p2l.tolist(), slot_gpu.tolist()):
        gpus_of.setdefault(e, set()).add(g)
    best = 0.0
    for mask in range(1, 2**P):
        U = {g for g in range(P) if mask >> g & 1}
        s = float(sum(speed[g] for g in U))
        inside = sum(int(t[e]) for e, gs in gpus_of.items() if gs <= U)
        if s > 0:
            best = max(best, inside / s)
    return best if math.isfinite(best) else 0.0
