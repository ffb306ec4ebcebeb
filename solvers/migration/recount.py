"""A second start for layers the repair could not bring within target: the placement in
force with the fresh plan's replica counts.

The repair keeps replica counts unless one expert is too hot, so a layer whose counts
drifted far (a regime shift on a small model) may get stuck where no single swap or count
change helps; it then fell back to the relabelled fresh plan, which moves most replicas.
Here only the replicas whose counts changed move: an expert with more replicas than the
fresh plan gives up its replicas on the heaviest GPUs, and an expert with fewer gets those
slots (its heaviest replicas to the lightest GPUs). The repair then runs from this start.
"""
from __future__ import annotations

import numpy as np
import torch


def recount_layer(w: np.ndarray, p2l: np.ndarray, counts: np.ndarray, num_gpus: int) -> np.ndarray:
    """phy2log [R] of ``p2l`` [R] with replica counts ``counts`` [E]; w: [E] loads."""
    R, E = len(p2l), len(w)
    S = R // num_gpus
    out = p2l.copy()
    cnt = np.bincount(out, minlength=E)
    per = w[out] / cnt[out]                                                     # [R] load per replica
    gpu_load = np.bincount(np.arange(R) // S, weights=per, minlength=num_gpus)
    free = []
    for e in np.flatnonzero(cnt > counts):                                       # surplus replicas
        slots = np.flatnonzero(out == e)
        free += list(slots[np.argsort(-gpu_load[slots // S], kind="stable")][: cnt[e] - counts[e]])
    if not free:
        return out
    free = np.asarray(free)
    np.subtract.at(gpu_load, free // S, per[free])
    need = np.repeat(np.flatnonzero(counts > cnt), (counts - cnt).clip(min=0)[counts > cnt])
    need = need[np.argsort(-(w[need] / counts[need]), kind="stable")]          # heaviest replica first
    for e in need:
        k = int(np.argmin(gpu_load[free // S]))
        out[free[k]] = e
        gpu_load[free[k] // S] += w[e] / counts[e]
        free = np.delete(free, k)
    return out


def recount(weights: torch.Tensor, p2l: torch.Tensor, counts: torch.Tensor, num_gpus: int) -> torch.Tensor:
    """phy2log [X, R] of ``p2l`` [X, R] with replica counts ``counts`` [X, E] (rows sum to R);
    weights: [X, E]."""
    w = weights.to(torch.float64).cpu().numpy()
    old = p2l.cpu().numpy()
    c = counts.cpu().numpy()
    rows = [recount_layer(w[i], old[i], c[i], num_gpus) for i in range(len(old))]
    return torch.as_tensor(np.stack(rows), device=p2l.device) if rows else p2l.clone()
