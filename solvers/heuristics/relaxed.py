"""Relaxed hierarchical mode: up to ``budget`` replicas per layer may live off their home node.

Strict hierarchical plans keep every replica of an expert on its group's node, so a node
holding hot groups stays overloaded whatever the packing. Here each step moves one slot:
a receiver expert r (a large item w_r / c_r) takes the slot q of a donor replica (an
expert with c_d > 1); all GPU loads change exactly (r's replicas shrink, d's grow) and
the move with the lowest new max GPU load is applied per layer if it lowers the max
(else, on a plateau, the move keeping the max with the lowest sum of squared loads).
A replica is *off-node* when its node is not its expert's home node (the node of its
group in the strict plan); every expert keeps at least one replica at home and a layer
never exceeds ``budget`` off-node replicas. Batched over layers: one step evaluates
[layers, receivers, slots, GPUs] in a few kernels.

Inter-node traffic proxy (docs/problem.md; no routing statistics are needed): the
share of tokens served by off-node replicas, and their count.
"""
from __future__ import annotations

import torch

from ..clock import clock
from ..problem import Problem
from .common import presence_counts
from .packing import local_search

REL_TOL = 1e-12


def home_nodes(phy2log: torch.Tensor, num_experts: int, num_nodes: int) -> torch.Tensor:
    """[L, E] node holding the first replica of each expert (its group's node in a strict plan)."""
    L, R = phy2log.shape
    node_of_slot = torch.arange(R, device=phy2log.device) // (R // num_nodes)
    home = torch.full((L, num_experts), num_nodes, dtype=torch.int64, device=phy2log.device)
    return home.scatter_reduce(1, phy2log, node_of_slot.expand(L, R), reduce="amin")


def off_node_stats(problem: Problem, phy2log: torch.Tensor, home: torch.Tensor) -> dict:
    """Off-node replicas and the share of tokens they serve (even split)."""
    L, R = phy2log.shape
    N = problem.num_nodes
    w = problem.weights.to(torch.float64)
    cnt = torch.zeros_like(w, dtype=torch.int64).scatter_add_(1, phy2log, torch.ones_like(phy2log))
    node_of_slot = torch.arange(R, device=phy2log.device) // (R // N)
    off = node_of_slot.unsqueeze(0) != home.gather(1, phy2log)                    # [L, R]
    per = (w / cnt.clamp_min(1)).gather(1, phy2log)
    total = w.sum()
    share = float((per * off).sum() / total) if float(total) > 0 else 0.0
    return {"off_node_replicas": int(off.sum()), "off_node_replicas_worst_layer": int(off.sum(1).max()),
            "off_node_load_share": share}


def repack_nodes(w: torch.Tensor, p2l: torch.Tensor, num_gpus: int, num_nodes: int, nodup: bool,
                 steps: int, deadline: float | None = None) -> torch.Tensor:
    """Swap local search inside every node (off-node status is unchanged by such swaps).
    w: [L, E] float64, p2l: [L, R] -> p2l [L, R]."""
    L, R = p2l.shape
    E = w.shape[1]
    cnt = torch.zeros(L, E, dtype=torch.int64, device=p2l.device).scatter_add_(1, p2l, torch.ones_like(p2l))
    per = (w / cnt.clamp_min(1).to(torch.float64)).gather(1, p2l)
    rows_w = per.view(L * num_nodes, R // num_nodes).float()
    rows_e = p2l.view(L * num_nodes, R // num_nodes)
    _, e, _ = local_search(rows_w, rows_e, num_gpus // num_nodes, E, nodup=nodup, max_steps=steps,
                           deadline=deadline)
    return e.reshape(L, R)


def evaluate_moves(w: torch.Tensor, c: torch.Tensor, pres: torch.Tensor, loads: torch.Tensor,
                   p2l: torch.Tensor, r: torch.Tensor, gpu_of: torch.Tensor
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Exact effect on all GPU loads of every move "receiver r takes slot q from its donor
    d = p2l[q]" (r's replicas shrink to w_r/(c_r+1), d's grow to w_d/(c_d-1)).

    w: [L, E] loads, c: [L, E] counts (float64), pres: [L, P, E] replicas per GPU (float64),
    loads: [L, P], p2l: [L, R], r: [L, Q] receivers, gpu_of: [R]. Returns obj: [L, Q, R]
    new max GPU load, sos: [L, Q, R] new sum of squared GPU loads, n_r: [L, Q, P] replicas
    of r per GPU. Moves with c_d = 1 or d = r are meaningless; the caller masks them.
    """
    L, Q = r.shape
    P = pres.shape[1]
    R = gpu_of.shape[0]
    wr, cr = w.gather(1, r), c.gather(1, r)
    n_r = pres.gather(2, r.unsqueeze(1).expand(L, P, Q)).transpose(1, 2)              # [L, Q, P]
    delta_r = -(wr / cr - wr / (cr + 1)).unsqueeze(2) * n_r                          # [L, Q, P]
    wd, cd = w.gather(1, p2l), c.gather(1, p2l)                                       # [L, R]
    shrink = wd / (cd - 1).clamp_min(1)
    n_d = pres.gather(2, p2l.unsqueeze(1).expand(L, P, R)).transpose(1, 2)            # [L, R, P]
    V = (shrink - wd / cd).unsqueeze(2) * n_d                                         # [L, R, P]
    # new[l, r, q, g] = U[r, g] + V[q, g], plus the swap of the replica at q's own GPU
    U = loads.unsqueeze(1) + delta_r                                                  # [L, Q, P]
    gain = (wr / (cr + 1)).unsqueeze(2) - shrink.unsqueeze(1)                         # [L, Q, R]
    own = gpu_of.view(1, 1, R).expand(L, Q, R)
    x_own = U.gather(2, own) + V.gather(2, gpu_of.view(1, R, 1).expand(L, R, 1)).view(L, 1, R)
    new = U.unsqueeze(2) + V.unsqueeze(1)                                             # [L, Q, R, P]
    new.scatter_(3, own.unsqueeze(3), (x_own + gain).unsqueeze(3))
    obj = new.amax(3)
    del new
    # sum of squares expanded, so that no second [L, Q, R, P] pass is needed
    sos = (U.pow(2).sum(2).unsqueeze(2) + V.pow(2).sum(2).unsqueeze(1)
           + 2 * torch.bmm(U, V.transpose(1, 2)) + 2 * x_own * gain + gain.pow(2))
    return obj, sos, n_r


def relax_plan(problem: Problem, phy2log: torch.Tensor, budget: int, *, nodup: bool = False,
               steps: int = 64, receivers: int = 8, deadline: float | None = None) -> tuple[torch.Tensor, dict]:
    """Improve a strict hierarchical phy2log [L, R] with at most ``budget`` off-node replicas
    per layer. Never raises any layer's max GPU load. Returns (phy2log, info). ``deadline``
    (a :func:`~solvers.clock.clock` value): no move step starts after it, and
    the node repacks stop at it (every step keeps a valid plan)."""
    L, R = phy2log.shape
    E, P, N = problem.num_experts, problem.num_gpus, problem.num_nodes
    S = R // P
    dev = phy2log.device
    w = problem.weights.to(torch.float64).to(dev)
    home = home_nodes(phy2log, E, N)
    gpu_of = torch.arange(R, device=dev) // S                                         # [R]
    node_of_gpu = torch.arange(P, device=dev) // (P // N)
    node_of_slot = node_of_gpu[gpu_of]
    Q = min(receivers, E)
    rows = torch.arange(L, device=dev)
    p2l = phy2log.clone()
    moves = 0
    for step in range(steps):
        if deadline is not None and clock() >= deadline:
            break
        if step % 8 == 7:
            p2l = repack_nodes(w, p2l, P, N, nodup, 16, deadline)
        cnt = torch.zeros(L, E, dtype=torch.int64, device=dev).scatter_add_(1, p2l, torch.ones_like(p2l))
        c = cnt.to(torch.float64)
        per = w / c
        pres = presence_counts(p2l, E, P).to(torch.float64)                           # [L, P, E] replicas
        loads = (pres * per.unsqueeze(1)).sum(-1)                                     # [L, P]
        cur = loads.max(1).values
        off = node_of_slot.unsqueeze(0) != home.gather(1, p2l)                        # [L, R]
        home_cnt = cnt - torch.zeros_like(cnt).scatter_add_(1, p2l, off.to(torch.int64))
        used = off.sum(1)                                                             # [L]
        # receivers: the largest items
        r = per.topk(Q, dim=1).indices                                                # [L, Q]
        obj, sos, n_r = evaluate_moves(w, c, pres, loads, p2l, r, gpu_of)
        d = p2l
        cd = c.gather(1, d)
        # feasibility
        bad = (cd <= 1).unsqueeze(1) | (d.unsqueeze(1) == r.unsqueeze(2))
        new_off = node_of_slot.view(1, 1, R) != home.gather(1, r).unsqueeze(2)       # r's new replica off-node
        last_home = (~off) & (home_cnt.gather(1, d) <= 1)                            # removing d's last home copy
        bad |= last_home.unsqueeze(1)
        after = used.view(L, 1, 1) + new_off.to(torch.int64) - off.unsqueeze(1).to(torch.int64)
        bad |= after > budget
        if nodup:
            bad |= n_r.gather(2, gpu_of.view(1, 1, R).expand(L, Q, R)) > 0
        obj = obj.masked_fill(bad, float("inf")).view(L, -1)
        best_obj, best = obj.min(1)
        ok = best_obj < cur * (1 - REL_TOL)
        # No move lowers the max (several GPUs share it): take the move that keeps the max
        # and lowers the sum of squared loads most (moves load off the plateau).
        cur_sos = loads.pow(2).sum(1)
        flat = sos.masked_fill(bad | (obj.view_as(sos) > cur.view(L, 1, 1) * (1 + REL_TOL)), float("inf"))
        best_sos, best_side = flat.view(L, -1).min(1)
        side = ~ok & (best_sos < cur_sos * (1 - 1e-9))
        best = torch.where(ok, best, best_side)
        ok = ok | side
        if not bool(ok.any()):
            break
        q = best % R
        r_best = r[rows, best // R]
        p2l[rows, q] = torch.where(ok, r_best, p2l[rows, q])
        moves += int(ok.sum())
    p2l = repack_nodes(w, p2l, P, N, nodup, 32, deadline)
    info = {"relax_budget": budget, "relax_moves": moves}
    info.update(off_node_stats(problem, p2l, home))
    return p2l, info
