"""The exact elastic re-plan of one layer (for proof): the fewest moves from the plan in
force such that every expert keeps a live replica and every live GPU's time is at most the
target (``(1 + slack)`` x a fresh plan's max time). The migration model of :mod:`.exact`
(:func:`.exact.fewest_moves`) on the live GPUs, with every count a plan can have from the
fewest each expert needs (``c >= 1``: every expert alive), so the model holds every plan.

Coefficients are floored (every true time is at least its model time), so the model holds
every plan that meets the target (a relaxation) and its proven bound on the moves is
valid; a plan the model returns is re-timed in float64 and reported as ``target_met``.
A hint (the heuristic's layout) starts the search; CP-SAT's bound is rounded up to an
integer, and never below the orphans (experts no live GPU holds). A brute force for tiny
instances to check it against is in ``tests/brute.py``.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from solvers.clock import clock
from solvers.replan.exact import fewest_moves


def layer_moves(xg: np.ndarray, old: np.ndarray) -> int:
    """Moves of a placement xg [E, Q] (replicas of e on live GPU g) against old [E, Q] bool."""
    return int(((xg > 0) & ~old).sum())


def layer_time(w: np.ndarray, xg: np.ndarray, speed: Sequence[float]) -> float:
    """Max GPU time of xg [E, Q] under loads w [E] (even split), float64."""
    return float(((w / xg.sum(1)) @ xg / np.asarray(speed, dtype=np.float64)).max())


def least_counts(w: np.ndarray, speed: Sequence[float], target: float) -> np.ndarray:
    """[E] int64 the fewest replicas (and GPUs) each expert needs to meet ``target``: a
    replica of e runs at least w_e / (c x fastest speed), so fewer cannot. A zero target (a
    layer without load) allows only zero loads: a loaded expert then needs more replicas
    than any plan has."""
    w = np.asarray(w, np.float64)
    if target <= 0:
        return np.where(w > 0, np.iinfo(np.int32).max, 1).astype(np.int64)
    return np.maximum(1, np.ceil(w / (target * max(speed)) * (1 - 1e-12) - 1e-9)).astype(np.int64)


def solve_elastic_layer(w: np.ndarray, slots: Sequence[int], speed: Sequence[float], old: np.ndarray,
                        target: float, *, hint: np.ndarray | None = None, time_limit: float = 10.0,
                        threads: int = 1, seed: int = 0) -> dict:
    """One layer. w: [E] loads; slots, speed: [Q] of the live GPUs; old: [E, Q] bool, the
    pairs of the plan in force; target: max time allowed; hint: [E, Q] replicas or None.
    Returns {"status": optimal | feasible | infeasible | unknown, "xg" [E, Q] or None,
    "moves", "bound" (int, valid lower bound on the moves; None if unknown), "target_met",
    "seconds"}."""
    start = clock()
    w = np.asarray(w, dtype=np.float64)
    s = np.asarray(speed, dtype=np.float64)
    lo = least_counts(w, s, target)
    extra = int(sum(slots)) - int(lo.sum())
    out = {"status": "infeasible", "xg": None, "moves": None, "bound": None, "target_met": False}
    if extra >= 0:
        name, xg, bound = fewest_moves(w, old, target, np.asarray(slots, dtype=np.int64), s,
                                       [range(int(a), int(a) + extra + 1) for a in lo], hint=hint,
                                       time_limit=time_limit, threads=threads, seed=seed)
        out["status"] = {"OPTIMAL": "optimal", "FEASIBLE": "feasible", "INFEASIBLE": "infeasible"}.get(name, "unknown")
        if out["status"] != "infeasible":
            # an expert no live GPU held must be copied somewhere: valid even before CP-SAT's
            # own bound passes it
            out["bound"] = max(int((~old.any(1)).sum()), bound)
        if xg is not None:
            out.update(xg=xg, moves=layer_moves(xg, old), target_met=layer_time(w, xg, s) <= target * (1 + 1e-12))
    out["seconds"] = clock() - start
    return out


def placement(p2l_row: np.ndarray, slot_gpu: np.ndarray, live: Sequence[int], num_experts: int) -> np.ndarray:
    """[E, Q] replicas of every expert on every live GPU of a phy2log row (slot_gpu: [R]
    cluster GPU of each slot; live: the live GPUs' cluster ids, in order)."""
    on = np.isin(slot_gpu, live)                 # slots of GPUs that failed since hold nothing now
    xg = np.zeros((num_experts, len(live)), dtype=np.int64)
    np.add.at(xg, (p2l_row[on], np.searchsorted(live, slot_gpu[on])), 1)
    return xg


def layer_inputs(problem, previous, previous_cluster, layers: Sequence[int]):
    """What a per-layer model of an elastic re-plan of ``previous`` (made for
    ``previous_cluster``) needs: the cluster's view (its live GPUs, their slot counts and
    speeds, the GPU of every slot of ``previous_cluster`` [R_old] and of the cluster [R]) and,
    for every layer of ``layers``, (layer, w [E] float64 its loads, old [E, Q] bool which
    live GPU held which expert)."""
    c = problem.cluster
    live = list(c.live_gpus)
    old_gpu = np.asarray(previous_cluster.slot_gpus())
    view = (live, [c.gpu_slots[g] for g in live], [c.gpu_speed[g] for g in live], old_gpu, np.asarray(c.slot_gpus()))
    w_all = problem.weights.detach().cpu().double().numpy()
    rows = [(int(layer), w_all[layer],
             placement(previous.phy2log[layer].cpu().numpy(), old_gpu, live, problem.num_experts) > 0)
            for layer in layers]
    return view, rows


def prove_elastic(problem, previous, previous_cluster, heuristic, target: Sequence[float], layers: Sequence[int], *,
                  time_limit: float = 10.0, threads: int = 1, seed: int = 0) -> list[dict]:
    """The exact model on ``layers`` of an elastic re-plan: ``heuristic`` (its Plan, the
    hint) and ``target`` [L] (its max times allowed, ``info["target_max_time"]``). One dict
    per layer: the solve_elastic_layer result plus "layer" and "heuristic_moves"."""
    (live, slots, speed, _, new_gpu), rows = layer_inputs(problem, previous, previous_cluster, layers)
    out = []
    for layer, w, old in rows:
        hint = placement(heuristic.phy2log[layer].cpu().numpy(), new_gpu, live, problem.num_experts)
        res = solve_elastic_layer(w, slots, speed, old, float(target[layer]), hint=hint,
                                  time_limit=time_limit, threads=threads, seed=seed)
        res.pop("xg")
        out.append({"layer": int(layer), "heuristic_moves": layer_moves(hint, old), **res})
    return out
