"""Scale-invariant exact solves: each layer is solved in well-conditioned units.

Loads arrive as token counts (up to about 1e9 per layer) or normalised (about 1e-3);
MIP backends' tolerances are absolute and their logs round, so the same instance at two
scales gave two answers. A layer's loads are multiplied by a power of two ``2**k`` (exact
in float64: only the exponent changes) so that its reference load lands in
``[SCALED_LOAD_TARGET, 2 * SCALED_LOAD_TARGET)``; the backend solves that layer, and its
bound and objective are divided by ``2**k`` (exact again) on the way back. The returned
"optimal" is then re-checked against the unscaled loads: a backend's word is not proof.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Callable

import numpy as np
import torch

from ..bounds import optimal_counts
from ..tolerances import BOUND_RTOL, SCALED_LOAD_TARGET
from .model import LayerModel, LayerResult


def reference_load(lm: LayerModel) -> float:
    """The scale of a layer's objective: max(best possible time, hottest expert on the
    fastest GPU), >= 0 (on identical GPUs: max(mean GPU load, hottest expert))."""
    w = lm.w
    return max(float(np.sum(w)) / float(lm.speed.sum()), float(np.max(w)) / float(lm.speed.max())) if len(w) else 0.0


def scale_exponent(lm: LayerModel) -> int:
    """k such that ``reference_load * 2**k`` is in [target, 2 * target); 0 for an all-zero layer."""
    ref = reference_load(lm)
    if not (ref > 0 and math.isfinite(ref)):
        return 0
    _, e_ref = math.frexp(ref)                       # ref = m * 2**e_ref, 0.5 <= m < 1
    _, e_tgt = math.frexp(SCALED_LOAD_TARGET)
    return e_tgt - e_ref


def scaled_layer(lm: LayerModel, k: int) -> LayerModel:
    """``lm`` with times (bound, warm-start value, every GPU time) multiplied by 2**k, exactly:
    speeds divided by the power of two that brings the fastest into [0.5, 1) and loads
    multiplied to match, so that neither loads nor speeds of any magnitude overflow the
    backend's arithmetic (speeds of 1e300 once overflowed ``w * scale``)."""
    _, js = math.frexp(float(lm.speed.max())) if len(lm.speed) else (0.5, 0)
    if k == 0 and js == 0:
        return lm
    up = lambda x: None if x is None else math.ldexp(float(x), k)  # noqa: E731
    return dataclasses.replace(lm, w=np.ldexp(np.asarray(lm.w, dtype=np.float64), k - js),
                               speed=np.ldexp(np.asarray(lm.speed, dtype=np.float64), -js), lb=up(lm.lb),
                               ub=up(lm.ub), notes=lm.notes)


def unscaled_result(res: LayerResult, k: int) -> LayerResult:
    """``res`` with bound and objective divided by 2**k (the bound rounded down)."""
    if k == 0:
        return res
    down = lambda x: None if x is None else math.ldexp(float(x), -k)  # noqa: E731
    bound = down(res.bound)
    if bound is not None and bound > 0:
        bound = math.nextafter(bound, 0.0)           # only an underflow to subnormals is inexact
    stats = dict(res.stats, load_scale_exponent=k)
    return dataclasses.replace(res, bound=bound, objective=down(res.objective), stats=stats)


def true_objective(lm: LayerModel, res: LayerResult) -> float | None:
    """The max GPU time (caller's units, float64) of the backend's placement, or None."""
    if res.xg is not None:
        return None if (res.xg.sum(1) < 1).any() else lm.time(res.xg)
    if res.counts is not None:                     # replication model: the heaviest replica
        return float((lm.w / res.counts).max())
    return None


def certified(lm: LayerModel, res: LayerResult) -> LayerResult:
    """Keep "optimal" only when the unscaled objective meets the bound (relative tolerance)."""
    if res.status != "optimal":
        return res
    obj = true_objective(lm, res)
    if obj is not None and res.bound is not None and obj <= res.bound * (1 + BOUND_RTOL):
        return res
    why = "no bound" if res.bound is None else f"objective {obj!r} above the certified bound {res.bound!r}"
    return dataclasses.replace(res, status="feasible", message=f"{res.message}; not proven: {why}")


def with_counts(lm: LayerModel, res: LayerResult) -> LayerResult:
    """A replication layer stopped on time before any solution keeps the greedy counts
    (optimal replication counts, found in closed form), so the solve still has a plan."""
    if not lm.replication_only or res.counts is not None or res.status != "time_limit":
        return res
    counts = lm.warm_counts
    if counts is None:
        w = torch.from_numpy(np.ascontiguousarray(lm.w, dtype=np.float64)).unsqueeze(0)
        counts = optimal_counts(w, lm.num_replicas, lm.num_gpus if lm.forbid else None)[0].numpy()
    return dataclasses.replace(res, counts=np.asarray(counts, dtype=np.int64))


def solve_scaled(solve_layer: Callable[..., LayerResult], lm: LayerModel, **kwargs) -> LayerResult:
    """Run ``solve_layer`` on ``lm`` in scaled units and map its result back."""
    k = scale_exponent(lm)
    res = unscaled_result(solve_layer(scaled_layer(lm, k), **kwargs), k)
    return with_counts(lm, certified(lm, res))
