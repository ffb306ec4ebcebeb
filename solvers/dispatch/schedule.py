"""Token scheduling: the exact min-max split of each micro-batch's tokens over replicas.

For a placement and one micro-batch's integer token counts ``t_e`` per expert, choose how
many tokens each replica serves (non-negative integers summing to ``t_e``) so that the
busiest GPU is as light as possible. This is a transportation problem. For a GPU set U
let ``I(U)`` be the experts whose replicas all sit on U; every split puts ``t(I(U))``
tokens on U, so ``ceil(t(I(U)) / |U|)`` is a lower bound, and by max-flow / min-cut
duality the best of these bounds *is* the integer optimum (``ceil`` of the LP's ``T*``).

:func:`schedule_tokens` solves every (micro-batch, layer) at once in torch. Experts whose
replicas all sit on one GPU are fixed load; the others ("flexible") give the edges
(expert, GPU) of a small graph, and a push-relabel runs on it:

- start from the even split over each expert's GPUs and a target ``T`` = the best cheap
  lower bound (average, single-GPU loads, each expert over its GPUs);
- each round labels every GPU with its distance to a GPU below ``T`` (Bellman-Ford on the
  residual arcs g -> h: a GPU g serving tokens of an expert that also lives on h), then
  a few pulses let every GPU above ``T`` push its excess one step down the labels;
- GPUs that reach no GPU below ``T`` are stuck. With labels searched over the whole graph
  (depth P - 1) the set C of GPUs that reach no GPU below ``T`` is closed (an expert with
  tokens on C has all its GPUs in C), so it holds exactly ``t(I(C))`` tokens and
  ``ceil(load(C) / |C|)`` is a proven lower bound, above ``T`` when a GPU of C is: the new
  target. Rounds with shorter labels grow the stuck GPUs' reach instead and use it only
  when it is provably closed.

``T`` only ever takes proven lower bounds, so once no GPU exceeds it the split is optimal:
exactness never depends on an iteration count. Rounds run in chunks (:func:`_chunk`) with
no host synchronisation and fixed shapes; between chunks one count of the unfinished
instances (the only synchronisation in the loop) decides whether another chunk runs, and
the finished instances are dropped from it. Label depth follows a fixed schedule: 4 steps
in the first two rounds, doubling every two rounds up to P - 1.

On CUDA the same labels come from batched products with the 0/1 reach matrix
(:func:`_dense_labels`: log2(P) products instead of P - 1 scatter steps), each chunk is a
replay of a CUDA graph cached per shape (:func:`_chunk_on_graph`, later chunks padded to
power-of-two buckets), and a plan seen unchanged is not validated and laid out again
(:func:`_checked_layout`). None of this changes the result.

**Real clusters** (per-GPU speeds, uneven slot counts, failed GPUs): a replica on a slower
GPU takes proportionally fewer tokens. Per (micro-batch, layer), integers ``x[e, g] >= 0``
on the GPUs g holding e, ``sum_g x[e, g] = t_e``, minimise the max GPU time ``max_g (sum_e
x[e, g]) / s_g``. A time T is reachable iff the max flow source -> expert e (capacity
t_e) -> GPU g holding e -> sink (capacity ``floor(T s_g)``) carries every token, which
only gets easier as T grows: the optimum is the least such T, a value ``k / s_g``
(:func:`split_one`). Bisection on T between ``W / sum(live speeds)`` and the time of a
trivial split (every expert on its first replica's GPU); the flow found at the feasible
end has its own max time ``T_a``, and one more check just below ``T_a`` (infeasible)
proves it optimal, else the search goes on below. Each check is one
``scipy.sparse.csgraph.maximum_flow`` per instance on the CPU: exact, milliseconds per
(micro-batch, layer), where the push-relabel takes microseconds; so the push-relabel runs
whenever the cluster is homogeneous (speed 1 everywhere, R / P slots per GPU), the flow
otherwise, from the one entry :func:`schedule_with_bound`.
"""
from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from contextlib import nullcontext
from dataclasses import dataclass

import numpy as np
import torch

from ..cluster import Cluster
from ..errors import PlanError, ProblemError
from ..plan import Plan, replica_ranks
from ..scoring import check_tokens
from ..threads import one_intra_op_thread

PULSES_PER_ROUND = 3
FIRST_DEPTH = 4
CPU_FIRST_CHUNK, CPU_LATER_CHUNK = 4, 4
CUDA_FIRST_CHUNK, CUDA_LATER_CHUNK = 8, 8
DENSE_MAX_ELEMENTS = 2**26   # n * P * max(P, F) for dense labels: 256 MiB per float32 [n, P, P]
MAX_ROUNDS = 100_000          # a safety net against a bug, never reached by a correct solver
# The split in time: bisection steps before the optimality check (each halves [lo, hi]; 64
# reach float64's resolution on any interval met here), the relative step below a candidate
# optimum at which infeasibility proves it, and scipy's int32 flow capacities.
MAX_STEPS = 64
BELOW = 1e-12
MAX_TOKENS = 2**31 - 1


@dataclass(frozen=True)
class Layout:
    """The placement as a graph, per layer, on the tokens' device.

    Flexible experts (replicas on two or more GPUs) are numbered f < F per layer; their
    (expert, GPU) edges, M per layer at most, are sorted by GPU.

    fixed_gpu: [L, E] the GPU of an expert on one GPU (0 for flexible ones, masked by
    ``flexible`` [L, E] bool); flex_expert: [L, F] expert of each flexible index (0 padded),
    flex_valid: [L, F]; edge_flex: [L, M] flexible index of each edge; edge_gpu: [L, M];
    edge_valid: [L, M]; edge_first: [L, P] first edge of each GPU (M when it has none);
    flex_edges: [L, F, D] the edges of each flexible expert (0 padded), flex_edges_valid;
    slot_edge: [L, R] the edge of each slot (M for fixed experts); slot_share_rank /
    slot_share_count: [L, R] rank and count of the slots of one expert on one GPU;
    rank / logcnt: replica rank [L, R] and replica count [L, E]; distinct: [L, E] GPUs per expert.
    """

    num_gpus: int
    phy2log: torch.Tensor
    rank: torch.Tensor
    logcnt: torch.Tensor
    distinct: torch.Tensor
    flexible: torch.Tensor
    fixed_gpu: torch.Tensor
    flex_expert: torch.Tensor
    flex_valid: torch.Tensor
    edge_flex: torch.Tensor
    edge_gpu: torch.Tensor
    edge_valid: torch.Tensor
    edge_first: torch.Tensor
    flex_edges: torch.Tensor
    flex_edges_valid: torch.Tensor
    slot_edge: torch.Tensor
    slot_share_rank: torch.Tensor
    slot_share_count: torch.Tensor

    @classmethod
    def of(cls, plan: Plan, num_gpus: int, device: torch.device) -> "Layout":
        P = num_gpus
        p2l = plan.phy2log.to(device)
        L, R = p2l.shape
        E = plan.logcnt.shape[1]
        ar_l = torch.arange(L, device=device)[:, None]
        gpu_of_slot = torch.arange(R, device=device) // (R // P)
        rank, logcnt = replica_ranks(p2l, E)
        presence = torch.zeros(L, E, P, dtype=torch.bool, device=device)
        presence[ar_l, p2l, gpu_of_slot[None, :]] = True
        distinct = presence.sum(-1)                                               # [L, E]
        flexible = distinct >= 2
        fixed_gpu = presence.to(torch.int8).argmax(-1)                            # [L, E]
        # Flexible experts first, in expert order.
        F = max(int(flexible.sum(1).max()), 1)
        flex_expert = torch.sort((~flexible).to(torch.int8), dim=1, stable=True).indices[:, :F]
        flex_valid = flexible.gather(1, flex_expert)
        flex_of = torch.full((L, E), -1, dtype=torch.int64, device=device)
        flex_of.scatter_(1, flex_expert, torch.where(flex_valid, torch.arange(F, device=device).expand(L, F), -1))
        flex_of = torch.where(flexible, flex_of, -1)
        # Edges (flexible expert, GPU), sorted by GPU then expert.
        cell = presence & flexible.unsqueeze(-1)                                  # [L, E, P]
        key = cell.transpose(1, 2).reshape(L, P * E)                              # GPU-major
        M = max(int(key.sum(1).max()), 1)
        order = torch.sort((~key).to(torch.int8), dim=1, stable=True).indices[:, :M]
        edge_valid = key.gather(1, order)
        edge_gpu = torch.where(edge_valid, order // E, P - 1)
        edge_expert = order % E
        edge_flex = torch.where(edge_valid, flex_of.gather(1, edge_expert), 0).clamp_min(0)
        idx_m = torch.arange(M, device=device).expand(L, M)
        edge_first = torch.full((L, P), M, dtype=torch.int64, device=device)
        edge_first.scatter_reduce_(1, edge_gpu, torch.where(edge_valid, idx_m, M), "amin")
        # Edges of each flexible expert: sort edges by flexible index.
        fkey = torch.where(edge_valid, edge_flex, F)
        by_flex = torch.sort(fkey, dim=1, stable=True).indices                    # [L, M]
        D = max(int(distinct.max()), 1)
        count = torch.zeros(L, F + 1, dtype=torch.int64, device=device).scatter_add_(
            1, fkey, torch.ones_like(fkey))[:, :F]
        start = count.cumsum(1) - count
        d_idx = torch.arange(D, device=device)
        pos = (start.unsqueeze(-1) + d_idx).clamp_max(M - 1)                      # [L, F, D]
        flex_edges_valid = d_idx < count.unsqueeze(-1)
        flex_edges = torch.where(flex_edges_valid, by_flex.gather(1, pos.view(L, -1)).view(L, F, D), 0)
        # Slots: their edge, and their share among the slots of one expert on one GPU.
        slot_cell = p2l * P + gpu_of_slot
        share_rank, share_count = replica_ranks(slot_cell, E * P)
        edge_of_cell = torch.full((L, E * P + 1), M, dtype=torch.int64, device=device)   # last: padding
        edge_of_cell.scatter_(1, torch.where(edge_valid, edge_expert * P + edge_gpu, E * P), idx_m)
        edge_of_cell = edge_of_cell[:, :E * P]
        slot_edge = torch.where(flexible.gather(1, p2l), edge_of_cell.gather(1, slot_cell), M)
        return cls(P, p2l, rank, logcnt, distinct, flexible, fixed_gpu, flex_expert, flex_valid,
                   edge_flex, edge_gpu, edge_valid, edge_first, flex_edges, flex_edges_valid,
                   slot_edge, share_rank, share_count.gather(1, slot_cell))


def check_plan(plan: Plan, num_gpus, param: str = "plan") -> int:
    """The validated number of GPUs; :class:`PlanError` when ``plan`` does not fit them."""
    if not isinstance(plan, Plan):
        raise PlanError(param, f"must be a solvers.Plan, got {type(plan).__name__}")
    if isinstance(num_gpus, bool) or not isinstance(num_gpus, (int, np.integer)) or num_gpus < 1:
        raise PlanError("num_gpus", f"must be a positive integer, got {num_gpus!r}")
    R = plan.phy2log.shape[-1]
    if R % int(num_gpus) != 0:
        raise PlanError(param, f"has {R} slots per layer, not a multiple of num_gpus ({num_gpus}): "
                        f"a plan for another number of GPUs")
    plan.validate(num_gpus=int(num_gpus))
    return int(num_gpus)


def cheap_lower_bound(layout: Layout, tokens: torch.Tensor) -> torch.Tensor:
    """[B, L] int64: max of ceil(total / P), each GPU's single-GPU experts, and ceil(t_e / GPUs of e)."""
    P = layout.num_gpus
    B = tokens.shape[0]
    total = tokens.sum(-1)
    per_expert = (tokens + layout.distinct - 1) // layout.distinct
    fixed = torch.zeros(B, tokens.shape[1], P, dtype=torch.int64, device=tokens.device).scatter_add_(
        2, layout.fixed_gpu.expand(B, -1, -1), tokens * ~layout.flexible)
    return torch.maximum(torch.maximum((total + P - 1) // P, per_expert.max(-1).values), fixed.max(-1).values)


class _Instances:
    """A set of n (micro-batch, layer) instances, flattened, with their layer's graph.

    base: [n, P] load of fixed experts; flex_tokens: [n, F]; edge_gpu / edge_flex /
    edge_valid (edge_invalid its negation): [n, M]; edge_index: [n, M] 0..M-1;
    segment_start: [n, M] first edge of each edge's GPU; flex_edges / flex_edges_valid:
    [n, F, D]. With dense labels (:func:`_dense_reach`): cell [n, M] the (flexible expert,
    GPU) cell f * P + g of each edge, member [n, F, P] float32 1 where expert f has a
    replica on GPU g, eye [P, P] float32.
    """

    TENSORS = ("base", "flex_tokens", "edge_gpu", "edge_flex", "edge_valid", "edge_invalid", "edge_index",
               "segment_start", "flex_edges", "flex_edges_valid", "cell", "member", "eye")

    def __init__(self, num_gpus: int, **tensors: torch.Tensor | None):
        self.P = num_gpus
        for name in self.TENSORS:
            setattr(self, name, tensors.get(name))

    @classmethod
    def of(cls, layout: Layout, base: torch.Tensor, flex_tokens: torch.Tensor, layer: torch.Tensor,
           dense: bool = False) -> "_Instances":
        P = layout.num_gpus
        edge_gpu, edge_valid = layout.edge_gpu[layer], layout.edge_valid[layer]
        n, M = edge_gpu.shape
        edge_first = layout.edge_first[layer].clamp_max(M - 1)
        t = dict(base=base, flex_tokens=flex_tokens, edge_gpu=edge_gpu, edge_flex=layout.edge_flex[layer],
                 edge_valid=edge_valid, edge_invalid=~edge_valid,
                 edge_index=torch.arange(M, device=base.device).expand(n, M),
                 segment_start=edge_first.gather(1, edge_gpu),
                 flex_edges=layout.flex_edges[layer], flex_edges_valid=layout.flex_edges_valid[layer])
        if dense:
            F = flex_tokens.shape[1]
            t["cell"] = t["edge_flex"] * P + edge_gpu
            t["member"] = torch.zeros(n, F * P, device=base.device).scatter_add_(
                1, t["cell"], edge_valid.to(torch.float32)).view(n, F, P)
            t["eye"] = torch.eye(P, device=base.device)
        return cls(P, **t)

    @property
    def dense(self) -> bool:
        return self.member is not None

    def tensors(self) -> dict[str, torch.Tensor]:
        return {name: getattr(self, name) for name in self.TENSORS if getattr(self, name) is not None}

    def subset(self, keep: torch.Tensor) -> "_Instances":
        """The instances ``keep`` [k] (indices), same graph; ``eye`` is shared."""
        return _Instances(self.P, **{name: (t if name == "eye" else t[keep]) for name, t in self.tensors().items()})

    def initial_split(self) -> torch.Tensor:
        """y: [n, M] tokens per edge: each flexible expert's tokens even over its GPUs."""
        k = self.flex_edges_valid.sum(-1).clamp_min(1).unsqueeze(-1)              # [n, F, 1]
        t = self.flex_tokens.unsqueeze(-1)
        rank = torch.arange(self.flex_edges.shape[2], device=t.device)
        share = (t // k + (rank < t % k).to(torch.int64)) * self.flex_edges_valid
        y = torch.zeros_like(self.edge_gpu)
        return y.scatter_add_(1, self.flex_edges.flatten(1), share.flatten(1))

    def gpu_load(self, y: torch.Tensor) -> torch.Tensor:
        """[n, P]. Padding edges never carry tokens (the split starts and moves only on valid ones)."""
        return self.base.scatter_add(1, self.edge_gpu, y)

    def per_flex_min(self, value_at_gpu: torch.Tensor, fill: int) -> tuple[torch.Tensor, torch.Tensor]:
        """([n, F] for each flexible expert the min over its GPUs of ``value_at_gpu`` [n, P],
        the value at each edge [n, M], ``fill`` on padding).

        One scatter over the M edges (not a gather over F x D padded cells: a hot expert
        with replicas on every GPU would make D = P for all)."""
        at_edge = value_at_gpu.gather(1, self.edge_gpu).masked_fill_(self.edge_invalid, fill)   # [n, M]
        return torch.full_like(self.flex_tokens, fill).scatter_reduce_(1, self.edge_flex, at_edge, "amin"), at_edge

    def per_flex_argmin(self, value_at_gpu: torch.Tensor, fill: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``per_flex_min`` and the first edge [n, F] that attains it."""
        M = self.edge_gpu.shape[1]
        best, at_edge = self.per_flex_min(value_at_gpu, fill)
        miss = (at_edge != best.gather(1, self.edge_flex)) | self.edge_invalid
        idx = self.edge_index.masked_fill(miss, M)
        first = torch.full_like(self.flex_tokens, M).scatter_reduce_(1, self.edge_flex, idx, "amin")
        return best, first.clamp_max_(M - 1)


def depth_of_round(r: int, num_gpus: int, first_depth: int = FIRST_DEPTH) -> int:
    """Label search depth of round ``r``: ``first_depth``, doubling every two rounds, up to P - 1
    (a fixed schedule: which depth a round uses never depends on the data)."""
    return max(1, min(first_depth * 2 ** (r // 2), num_gpus - 1))


def _sparse_labels(st: _Instances, holds: torch.Tensor, below: torch.Tensor, depth: int) -> torch.Tensor:
    """dist [n, P]: arcs from each GPU to one below T, INF = P beyond ``depth``. Bellman-Ford
    over the residual arcs (scatters over the M edges: cheap per step on a CPU)."""
    INF = st.P
    dist = torch.full_like(st.base, INF).masked_fill_(below, 0)
    not_held = ~holds
    for _ in range(depth):
        cand = (st.per_flex_min(dist, INF)[0].gather(1, st.edge_flex) + 1).masked_fill_(not_held, INF)
        dist.scatter_reduce_(1, st.edge_gpu, cand, "amin")
    return dist


def _sparse_closure(st: _Instances, holds: torch.Tensor, closed: torch.Tensor, depth: int
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """(the GPUs ``closed`` [n, P] reaches within ``depth`` arcs, whether one more arc adds none)."""
    grown = closed
    for _ in range(depth + 1):
        closed = grown
        touched = (holds & closed.gather(1, st.edge_gpu)).to(torch.int8)
        per_flex = torch.zeros_like(st.flex_tokens, dtype=torch.int8).scatter_reduce_(
            1, st.edge_flex, touched, "amax")
        reach = per_flex.gather(1, st.edge_flex).masked_fill_(st.edge_invalid, 0)
        # int8, not bool: CUDA has no scatter_reduce kernel for bool tensors
        reached = torch.zeros_like(closed, dtype=torch.int8).scatter_reduce_(1, st.edge_gpu, reach, "amax")
        grown = closed | (reached > 0)
    return closed, (grown == closed).all(-1)


def _dense_reach(st: _Instances, holds: torch.Tensor) -> torch.Tensor:
    """[n, P, P] float32 0/1: 1 where h == g or g -> h is a residual arc (g serves tokens of
    an expert with a replica on h). One batched matrix product: hold^T @ member."""
    n, F, P = st.member.shape
    hold = torch.zeros(n, F * P, device=holds.device).scatter_add_(1, st.cell, holds.to(torch.float32))
    return torch.baddbmm(st.eye, hold.view(n, F, P).transpose(1, 2), st.member).clamp_max_(1)


def _dense_labels(reach: torch.Tensor, below: torch.Tensor, depth: int) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """dist [n, P] (the same labels as :func:`_sparse_labels`) and the powers reach^(2^j).

    Column k of ``within`` [n, P, K] marks the GPUs k arcs or fewer from one below T; the
    columns double per product (within[k + 2^j] = reach^(2^j) within[k]), so depth P - 1
    takes log2(P) products instead of P - 1 steps. Values are 0/1 and sums of at most
    max(P, F) ones: exact in float32."""
    P = below.shape[1]
    within = below.to(torch.float32).unsqueeze(-1)
    powers = [reach]
    while True:
        within = torch.cat([within, torch.bmm(powers[-1], within).clamp_max_(1)], 2)
        if within.shape[2] > depth:
            break
        powers.append(torch.bmm(powers[-1], powers[-1]).clamp_max_(1))
    steps = (depth + 1) - within[..., :depth + 1].sum(-1)                         # first k within reach
    dist = steps.to(torch.int64)
    return dist.masked_fill_(dist > depth, P), powers


def _dense_closure(powers: list[torch.Tensor], closed: torch.Tensor, depth: int
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`_sparse_closure` by products with the powers of the reach matrix (depth's bits)."""
    c = closed.to(torch.float32).unsqueeze(1)                                   # [n, 1, P]
    for j, power in enumerate(powers):
        if depth >> j & 1:
            c = torch.bmm(c, power).clamp_max_(1)
    grown = torch.bmm(c, powers[0]).clamp_max_(1)
    return (c > 0).squeeze(1), (grown == c).all(-1).squeeze(1)


def _round(st: _Instances, y: torch.Tensor, target: torch.Tensor, depth: int,
           pulses: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Relabel, raise the target where stuck, then push. y: [n, M]; target: [n].

    A pure function of its tensors: no host synchronisation, fixed shapes. An instance
    with no GPU above its target is left unchanged (no stuck GPU, no excess to push)."""
    INF = st.P
    load = st.gpu_load(y)
    T = target.unsqueeze(-1)
    holds = (y > 0) & st.edge_valid                                                # [n, M]
    below = load < T
    # Distance labels (BFS over residual arcs; INF beyond ``depth`` steps).
    if st.dense:
        reach = _dense_reach(st, holds)
        dist, powers = _dense_labels(reach, below, depth)
    else:
        dist = _sparse_labels(st, holds, below, depth)
    if depth >= st.P - 1:
        # Exact labels: the GPUs that reach no GPU below T form a closed set (an arc out of
        # it would give a finite label), every one at load >= T.
        closed = dist >= INF
        complete = torch.ones_like(target, dtype=torch.bool)
    else:
        # Short labels: grow the stuck GPUs' reach; it is closed only if one more step adds nothing.
        stuck = (load > T) & (dist >= INF)
        closed, complete = (_dense_closure(powers, stuck, depth) if st.dense
                            else _sparse_closure(st, holds, stuck, depth))
    size = closed.sum(-1)
    raised = ((load * closed).sum(-1) + size - 1) // size.clamp_min(1)
    target = torch.where(complete & (size > 0), torch.maximum(target, raised), target)
    # Push: each edge of an active GPU sends tokens to its expert's GPU of least label,
    # when that label is one below its own (admissible arcs; labels stay valid meanwhile).
    best, to_edge = st.per_flex_argmin(dist, INF + 1)
    to_dist = best.gather(1, st.edge_flex)
    to_edge = to_edge.gather(1, st.edge_flex)                                      # [n, M]
    dist_edge = dist.gather(1, st.edge_gpu)
    downhill = (to_dist == dist_edge - 1) & (dist_edge < INF) & st.edge_valid
    T = target.unsqueeze(-1)
    for _ in range(pulses):
        excess = (load - T).clamp_min_(0).gather(1, st.edge_gpu)                  # [n, M]
        movable = y * (downhill & (excess > 0))
        before = movable.cumsum(1) - movable                                       # edges are sorted by GPU
        before = before - before.gather(1, st.segment_start)
        take = (excess - before).clamp_min_(0).minimum(movable)
        y = (y - take).scatter_add_(1, to_edge, take)
        load = st.gpu_load(y)
    return y, target


def _chunk(st: _Instances, y: torch.Tensor, target: torch.Tensor, first_round: int, rounds: int,
           pulses: int, first_depth: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``rounds`` rounds on every instance of ``st``, with no host synchronisation: the
    kernels are queued back to back (asynchronous on CUDA), shapes never depend on data,
    and instances already optimal pass through unchanged."""
    for r in range(first_round, first_round + rounds):
        y, target = _round(st, y, target, depth_of_round(r, st.P, first_depth), pulses)
    return y, target


class _GraphedChunk:
    """One chunk captured in a CUDA graph, on static copies of its inputs.

    A chunk is a pure function of fixed-shape tensors with no host synchronisation, so its
    kernels can be recorded once and replayed: a replay copies the call's tensors into the
    static inputs, launches the whole chunk at once and clones the outputs (the next replay
    overwrites them). Any instances of the same shapes can use it: nothing of the data is
    baked into the graph. The capture's warm-up run is the first call's answer."""

    def __init__(self, st: _Instances, y: torch.Tensor, target: torch.Tensor, args: tuple):
        self.lock = threading.Lock()
        self.st = _Instances(st.P, **{k: t.clone() for k, t in st.tensors().items()})
        self.y, self.target = y.clone(), target.clone()
        stream = torch.cuda.Stream(y.device)
        stream.wait_stream(torch.cuda.current_stream(y.device))
        with torch.cuda.stream(stream):               # warm-up off the capture (lazy inits, workspaces)
            warm = _chunk(self.st, self.y, self.target, *args)
        torch.cuda.current_stream(y.device).wait_stream(stream)
        self.first_answer = (warm[0].clone(), warm[1].clone())   # on the caller's stream
        del warm
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph, stream=stream):
            self.out = _chunk(self.st, self.y, self.target, *args)

    def __call__(self, st: _Instances, y: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        with self.lock:
            for name, t in st.tensors().items():
                getattr(self.st, name).copy_(t)
            self.y.copy_(y)
            self.target.copy_(target)
            self.graph.replay()
            return self.out[0].clone(), self.out[1].clone()


CUDA_GRAPHS = True            # False: every chunk runs eagerly (the same result, more launches)
GRAPH_CACHE_SIZE = 16         # graphs kept (a shape, a chunk); the least recently used goes
_GRAPHS: "OrderedDict[tuple, _GraphedChunk | None]" = OrderedDict()
_GRAPHS_LOCK = threading.Lock()


def _chunk_on_graph(st: _Instances, y: torch.Tensor, target: torch.Tensor, *args
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`_chunk` through a CUDA graph cached per shape (the :data:`GRAPH_CACHE_SIZE`
    latest); the first call of a shape captures it. Where capture fails the shape runs
    eagerly from then on."""
    key = (y.device, st.P, args, tuple(sorted((k, tuple(t.shape)) for k, t in st.tensors().items())))
    with _GRAPHS_LOCK:
        graphed = _GRAPHS.get(key, False)
        if graphed is not False:
            _GRAPHS.move_to_end(key)
    if graphed is None:
        return _chunk(st, y, target, *args)
    if graphed is not False:
        return graphed(st, y, target)
    try:
        graphed = _GraphedChunk(st, y, target, args)
    except RuntimeError:                               # capture not possible here: stay eager
        graphed = None
    with _GRAPHS_LOCK:
        _GRAPHS[key] = graphed
        while len(_GRAPHS) > GRAPH_CACHE_SIZE:
            _GRAPHS.popitem(last=False)
    if graphed is None:
        return _chunk(st, y, target, *args)
    answer, graphed.first_answer = graphed.first_answer, None
    return answer


def _chunk_in_bucket(st: _Instances, y: torch.Tensor, target: torch.Tensor, *args
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`_chunk_on_graph` on the instances padded to a power of two (copies of the last
    one, whose results are dropped), so that later chunks, whose sizes depend on the data,
    reuse a few cached graphs."""
    n = y.shape[0]
    size = 1 << (n - 1).bit_length()
    if size == n:
        return _chunk_on_graph(st, y, target, *args)
    pad = torch.arange(size, device=y.device).clamp_max_(n - 1)
    y, target = _chunk_on_graph(st.subset(pad), y[pad], target[pad], *args)
    return y[:n], target[:n]


def _solve(layout: Layout, tokens: torch.Tensor, chunks: tuple[int, int] | None = None,
           pulses: int = PULSES_PER_ROUND, first_depth: int = FIRST_DEPTH, dense: bool | None = None,
           graphs: bool | None = None) -> tuple[torch.Tensor, torch.Tensor, int]:
    """y: [B, L, M] optimal tokens per edge, the proven bound [B, L] it meets, rounds run.

    Chunks of rounds (:func:`_chunk`, no synchronisation inside) alternate with one check on
    the host: which instances still have a GPU above their proven bound. Those continue in
    the next chunk, the others are final. ``chunks`` = (first chunk's rounds, later chunks'
    rounds), by default the device's (below). ``dense`` labels (default: on CUDA while the
    [n, P, P] matrices stay small) give the same labels, hence the same result; so does
    running the first chunk through a cached CUDA graph (``graphs``, default on CUDA
    unless :data:`CUDA_GRAPHS` is False).
    """
    B, L, _ = tokens.shape
    P = layout.num_gpus
    dev = tokens.device
    if B * L == 0:
        empty = torch.zeros(B, L, layout.edge_gpu.shape[1], dtype=torch.int64, device=dev)
        return empty, torch.zeros(B, L, dtype=torch.int64, device=dev), 0
    # On CUDA each chunk is one replay of a cached CUDA graph (_chunk_in_bucket), whose cost
    # follows the instances it carries: chunks of 8 rounds drop the finished ones (most are
    # optimal after 8-16 rounds) at one synchronisation each; on a CPU a round's cost is
    # proportional to its instances, so chunks of 4 drop them sooner.
    cuda = dev.type == "cuda"
    first, later = chunks or ((CUDA_FIRST_CHUNK, CUDA_LATER_CHUNK) if cuda else (CPU_FIRST_CHUNK, CPU_LATER_CHUNK))
    # Dense labels (a few batched products per round instead of P scatters) on CUDA; on a CPU
    # scatters are cheap and a batched product of 32 x 32 matrices is not.
    F = layout.flex_expert.shape[1]
    if dense is None:
        dense = cuda and B * L * P * max(P, F) <= DENSE_MAX_ELEMENTS
    graphs = cuda and CUDA_GRAPHS if graphs is None else graphs
    base = torch.zeros(B, L, P, dtype=torch.int64, device=dev).scatter_add_(
        2, layout.fixed_gpu.expand(B, -1, -1), tokens * ~layout.flexible)
    flex_tokens = tokens.gather(2, layout.flex_expert.expand(B, -1, -1)) * layout.flex_valid
    layer = torch.arange(L, device=dev).repeat(B)                                  # [B * L]
    st = _Instances.of(layout, base.view(B * L, P), flex_tokens.view(B * L, -1), layer, dense)
    y_all = st.initial_split()
    bound_all = cheap_lower_bound(layout, tokens).view(B * L)
    todo = torch.arange(B * L, device=dev)
    y, target = y_all, bound_all
    rounds, size = 0, max(1, first)
    while True:
        if not (graphs and cuda):
            run = _chunk
        else:
            run = _chunk_on_graph if rounds == 0 else _chunk_in_bucket
        y, target = run(st, y, target, rounds, size, pulses, first_depth)
        rounds += size
        size = max(1, later)
        open_ = (st.gpu_load(y) > target.unsqueeze(-1)).any(-1)
        n_open = int(open_.sum())                          # the host synchronisation, once per chunk
        order = torch.argsort(open_.to(torch.int8), stable=True)                  # finished first
        done, keep = order[:todo.numel() - n_open], order[todo.numel() - n_open:]
        y_all[todo[done]], bound_all[todo[done]] = y[done], target[done]
        if n_open == 0:
            return y_all.view(B, L, -1), bound_all.view(B, L), rounds
        if rounds >= MAX_ROUNDS:
            raise RuntimeError("schedule_tokens did not converge (a bug: please report the instance)")
        if n_open < todo.numel():
            todo, y, target = todo[keep], y[keep], target[keep]
            st = st.subset(keep)


def slot_split(layout: Layout, tokens: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """[B, L, R] tokens per slot: an edge's tokens over that expert's slots on that GPU, a
    fixed expert's tokens over its slots, both as evenly as integers allow."""
    B = tokens.shape[0]
    p2l = layout.phy2log.expand(B, -1, -1)
    M = y.shape[2]
    y_pad = torch.cat([y, torch.zeros_like(y[..., :1])], 2)
    on_edge = y_pad.gather(2, layout.slot_edge.expand(B, -1, -1))
    t = tokens.gather(2, p2l)
    c = layout.logcnt.gather(1, layout.phy2log)
    fixed = t // c + (layout.rank < t % c).to(torch.int64)
    m = layout.slot_share_count
    shared = on_edge // m + (layout.slot_share_rank < on_edge % m).to(torch.int64)
    return torch.where(layout.slot_edge < M, shared, fixed)


LAYOUT_CACHE_SIZE = 4
_LAYOUTS: "OrderedDict[tuple, tuple[tuple, Layout]]" = OrderedDict()
_LAYOUTS_LOCK = threading.Lock()


def _checked_layout(plan: Plan, num_gpus, device: torch.device) -> Layout:
    """:func:`check_plan` then :meth:`Layout.of`, both skipped for a plan seen unchanged.

    A serving loop schedules every step's tokens on the same plan: validating it and
    building its graph each time is a few milliseconds of small kernels and host reads on
    CUDA. The key holds the plan's three tensors by identity (checked through weak
    references, so a reused id never matches) and their version counters, which every
    in-place write bumps: a modified plan is checked and laid out again."""
    if not isinstance(plan, Plan):
        return Layout.of(plan, check_plan(plan, num_gpus), device)      # raises
    tensors = (plan.phy2log, plan.log2phy, plan.logcnt)
    key = (tuple(id(t) for t in tensors), tuple(t._version for t in tensors), num_gpus, device)
    with _LAYOUTS_LOCK:
        hit = _LAYOUTS.get(key)
    if hit is not None and all(ref() is t for ref, t in zip(hit[0], tensors)):
        return hit[1]
    layout = Layout.of(plan, check_plan(plan, num_gpus), device)
    with _LAYOUTS_LOCK:
        _LAYOUTS[key] = (tuple(weakref.ref(t) for t in tensors), layout)
        while len(_LAYOUTS) > LAYOUT_CACHE_SIZE:
            _LAYOUTS.popitem(last=False)
    return layout


def _flow(t: np.ndarray, pairs_e: np.ndarray, pairs_g: np.ndarray, cap: np.ndarray, E: int, P: int):
    """(flow value, x over the pairs) of the network of one instance with GPU capacities ``cap``."""
    # scipy's graph module loads on first use, not with the scorer (0.7 s of every command's start)
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import maximum_flow

    src, sink = 0, E + P + 1
    rows = np.concatenate([np.full(E, src), 1 + pairs_e, 1 + E + np.arange(P)])
    cols = np.concatenate([1 + np.arange(E), 1 + E + pairs_g, np.full(P, sink)])
    caps = np.concatenate([t, t[pairs_e], cap]).astype(np.int32)
    res = maximum_flow(csr_matrix((caps, (rows, cols)), shape=(E + P + 2, E + P + 2)), src, sink)
    return int(res.flow_value), np.asarray(res.flow.tocsr()[1 + pairs_e, 1 + E + pairs_g]).reshape(-1)


def split_one(t: np.ndarray, p2l: np.ndarray, slot_gpu: np.ndarray, speed: np.ndarray) -> tuple[np.ndarray, float]:
    """The optimal split in time of one instance (module doc): (tokens per slot [R] int64, its
    max GPU time). t: [E] int64 tokens; p2l, slot_gpu: [R] expert and GPU of each slot; speed: [P]."""
    E, P, R = t.shape[0], speed.shape[0], p2l.shape[0]
    total = int(t.sum())
    if total == 0:
        return np.zeros(R, dtype=np.int64), 0.0
    key = np.unique(p2l * P + slot_gpu)
    pairs_e, pairs_g = key // P, key % P                                          # distinct (e, g)
    lo = total / float(speed[np.unique(slot_gpu)].sum()) * (1 - BELOW)
    first = np.full(E, -1, dtype=np.int64)
    first[p2l[::-1]] = slot_gpu[::-1]                                              # GPU of e's first slot
    hi = float((np.bincount(first, weights=t, minlength=P) / speed).max()) * (1 + 1e-9)   # above k / s_g rounding

    def feasible(T: float):
        value, x = _flow(t, pairs_e, pairs_g, np.minimum(np.floor(T * speed), total).astype(np.int64), E, P)
        return value == total, x

    ok, x = feasible(hi)
    if not ok:                             # cannot happen: the trivial split fits under hi
        raise RuntimeError("scheduled split in time: the trivial split does not fit its own time (a bug)")
    while True:
        for _ in range(MAX_STEPS):
            if hi - lo <= BELOW * hi:
                break
            mid = (lo + hi) / 2
            good, xm = feasible(mid)
            if good:
                hi, x = mid, xm
            else:
                lo = mid
        value = float((np.bincount(pairs_g, weights=x, minlength=P) / speed).max())
        below = value * (1 - BELOW)
        good, xb = feasible(below)
        if not good:
            break
        hi, x, lo = below, xb, min(lo, below * (1 - BELOW))
    # each (e, g) pair's tokens over e's slots on g, as evenly as integers allow
    pair_of_slot = np.searchsorted(key, p2l * P + slot_gpu)                       # [R]
    rank, per_pair = (a[0].numpy() for a in replica_ranks(torch.from_numpy(pair_of_slot)[None], key.shape[0]))
    share, extra = np.divmod(x[pair_of_slot].astype(np.int64), per_pair[pair_of_slot])
    return share + (rank < extra), value


def _schedule_in_time(plan: Plan, tokens: torch.Tensor, cluster: Cluster) -> tuple[torch.Tensor, torch.Tensor]:
    """([B, L, R] int64 tokens per slot, [B, L] float64 optimal max GPU time): :func:`split_one`
    of every (micro-batch, layer). tokens: [B, L, E] int64 (checked)."""
    if tokens.numel() and int(tokens.sum(-1).max()) > MAX_TOKENS:
        raise ProblemError("tokens", f"the scheduled split in time takes at most {MAX_TOKENS} tokens per "
                           "micro-batch and layer")
    B, L, E = tokens.shape
    p2l, t = plan.phy2log.cpu().numpy(), tokens.cpu().numpy()
    slot_gpu = np.asarray(cluster.slot_gpus(), dtype=np.int64)
    speed = np.asarray(cluster.gpu_speed, dtype=np.float64)
    out = np.zeros((B, L, p2l.shape[1]), dtype=np.int64)
    value = np.zeros((B, L), dtype=np.float64)
    for b in range(B):
        for layer in range(L):
            out[b, layer], value[b, layer] = split_one(t[b, layer], p2l[layer], slot_gpu, speed)
    return torch.from_numpy(out).to(tokens.device), torch.from_numpy(value)


def schedule_with_bound(plan: Plan, tokens, cluster: Cluster | int) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`schedule_tokens` and its certificate: [B, L], a proven lower bound on every
    split's max GPU load (int64; in time, float64, on a cluster that is not homogeneous) that
    the returned split meets (so both are the optimum).

    With CPU tokens the whole call, checks included, runs under :func:`one_intra_op_thread`;
    with CUDA tokens the work is on the device and changing the CPU's thread count would
    only cost time (it rebuilds thread pools)."""
    on_cuda = isinstance(tokens, torch.Tensor) and tokens.is_cuda
    one = (tokens.dim() if isinstance(tokens, torch.Tensor) else np.ndim(tokens)) == 2
    with nullcontext() if on_cuda else one_intra_op_thread():
        if isinstance(cluster, Cluster) and not cluster.homogeneous:
            if check_plan(plan, 1) and plan.phy2log.shape[-1] != cluster.num_replicas:
                raise PlanError("plan", f"has {plan.phy2log.shape[-1]} slots per layer, the cluster "
                                f"{cluster.num_replicas}")
            x, bound = _schedule_in_time(plan, check_tokens(tokens, plan), cluster)
        else:
            device = tokens.device if isinstance(tokens, torch.Tensor) else torch.device("cpu")
            layout = _checked_layout(plan, cluster.num_gpus if isinstance(cluster, Cluster) else cluster, device)
            t = check_tokens(tokens, plan)
            y, bound, _ = _solve(layout, t)
            x = slot_split(layout, t, y)
    return (x[0], bound[0]) if one else (x, bound)


def schedule_tokens(plan: Plan, tokens, cluster: Cluster | int) -> torch.Tensor:
    """The optimal split of every micro-batch's tokens over the plan's replicas.

    plan: a :class:`~solvers.Plan` of L layers, E experts and R slots on ``cluster`` (a
    :class:`~solvers.Cluster`, or the number of identical GPUs holding R / P slots each).
    tokens: [B, L, E] integer token counts per micro-batch, layer and expert (a [L, E]
    array is one micro-batch and gives [L, R]). Returns [B, L, R] int64 on the tokens'
    device: tokens served by each slot, non-negative, summing over an expert's slots to its
    count, with the smallest possible max GPU load (GPU time on a cluster of different
    speeds or slot counts) in every (micro-batch, layer). Bad input raises
    :class:`~solvers.ProblemError` (``tokens``) or :class:`~solvers.PlanError`.
    """
    return schedule_with_bound(plan, tokens, cluster)[0]
