"""The exact migration pass on a real cluster (per-GPU speeds, uneven slot counts, failed GPUs).

Per layer, the CP-SAT model of :mod:`.exact` in time: the fewest moves from the placement in
force such that every live GPU holds exactly its own slot count (a failed GPU none) and its
load over its speed stays within the layer's time target, ``(1 + slack)`` x the fresh plan's
max time. Warm-started (hinted) from the heuristic's plan (the elastic re-plan), whose layer
is kept unless the model's plan moves fewer replicas and meets the target in float64; each
layer's report says whether its optimum is proven (within the candidate count window).
"""
from __future__ import annotations

import numpy as np
import torch

from ..clock import clock
from ..problem import Problem
from .exact import LayerShares, count_window, moves_of, solve_layer


def exact_pass_in_time(problem: Problem, old: torch.Tensor, start: torch.Tensor, target: torch.Tensor,
                       time_limit: float, threads: int, seed: int) -> tuple[torch.Tensor, list[dict]]:
    """phy2log [L, R] improved layer by layer from ``start`` [L, R] (the placement in force:
    ``old`` [L, R], same cluster), and per-layer reports; ``target`` [L] max times."""
    c = problem.cluster
    w = problem.weights.to(torch.float64).cpu().numpy()
    old_np, hints = old.cpu().numpy(), start.cpu().numpy()
    slots = np.asarray(c.gpu_slots, dtype=np.int64)                         # [P], 0 = failed
    speed = np.asarray(c.gpu_speed, dtype=np.float64)                       # [P]
    slot_gpu = np.repeat(np.arange(c.num_gpus), slots)                      # [R]
    L, E = w.shape
    out = start.clone().cpu()
    reports = []
    shares = LayerShares(L, time_limit)                 # as the homogeneous pass (api._exact_pass)
    for layer in range(L):
        per_layer = shares.share(layer)
        if per_layer is None:
            reports.append(LayerShares.not_run(layer))
            continue
        lo, hi, full = count_window(problem.num_replicas, E, np.bincount(old_np[layer], minlength=E),
                                    np.bincount(hints[layer], minlength=E))
        cap = float(target[layer])
        began = clock()
        res = solve_layer(w[layer], old_np[layer], cap, c.num_gpus, lo=lo, hi=hi, full_window=full,
                          hint=hints[layer], time_limit=per_layer, threads=threads, seed=seed,
                          slots=slots, speed=speed)
        shares.ran(began, per_layer)
        reports.append({"layer": layer, "status": res.status, "moves": res.moves, "bound": res.bound,
                        "proven": res.proven, "full_window": full})
        # solve_layer's plan meets the target in float64 (else it returns none): keep it if it moves less
        if res.phy2log is not None and res.moves < moves_of(hints[layer], old_np[layer], E, c.num_gpus, slot_gpu):
            out[layer] = torch.from_numpy(res.phy2log)
    return out.to(start.device), reports
