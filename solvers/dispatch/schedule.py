"""Token scheduling: the exact min-max split of each micro-batch's tokens over replicas.

For a placement and one micro-batch's integer token counts ``t_e`` per expert, choose how
many tokens each replica serves (non-negative integers summing to ``t_e``) so that the
busiest GPU is as light as possible. This is a transportation problem. For a GPU set U
let ``I(U)`` be the experts whose replicas all sit on U; every split puts ``t(I(U))``
tokens on U, so ``ceil(t(I(U)) / |U|)`` is a lower bound, and by max-flow / min-cut
duality the best of these bounds *is* the integer optimum (``ceil`` of the LP's ``T*``).

:func:`schedule_tokens` solves every (micro-batch, layer) at once in torch with a
push-relabel on the GPU graph (arc g -> h when a replica on g holds tokens of an expert
that also has a replica on h):

- start from the even split rounded to integers, and a target ``T`` = the best cheap lower
  bound (average, and each expert over its distinct GPUs);
- each round, label every GPU with its exact distance to a GPU below ``T`` (a bit-mask
  breadth-first search, P - 1 fixed steps), and let every GPU above ``T`` push its excess
  one step down its distance labels, through the replicas it holds;
- GPUs above ``T`` that reach no GPU below ``T`` are stuck: the set C they reach holds
  exactly ``t(I(C))`` tokens (an expert with tokens on C has all its replicas in C), so
  ``ceil(load(C) / |C|) > T`` is a proven lower bound and becomes the new target.

``T`` only ever takes proven lower bounds, so once no GPU exceeds it the split is optimal:
exactness never depends on an iteration count. Rounds run in chunks of fixed length with
no host synchronisation inside a chunk; one check between chunks decides whether another
is needed (one chunk suffices on the shapes we measured).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..errors import PlanError, ProblemError
from ..plan import Plan, replica_ranks
from . import bitsets

ROUNDS_PER_CHECK = 12
MAX_ROUNDS = 100_000          # a safety net against a bug, never reached by a correct solver


@dataclass(frozen=True)
class Layout:
    """The placement's graph, per layer, on the device of the tokens.

    phy2log: [L, R]; log2phy: [L, E, K] with padding clamped to 0 and ``valid`` [L, E, K];
    gpu_of_slot: [R]; slot_bit: [R, W] the slot's GPU as a bit mask; expert_gpus: [L, E, W]
    the GPUs holding a replica of each expert; distinct: [L, E] how many GPUs that is;
    rank: [L, R] replica rank of each slot; logcnt: [L, E].
    """

    num_gpus: int
    phy2log: torch.Tensor
    log2phy: torch.Tensor
    valid: torch.Tensor
    gpu_of_slot: torch.Tensor
    slot_bit: torch.Tensor
    expert_gpus: torch.Tensor
    distinct: torch.Tensor
    rank: torch.Tensor
    logcnt: torch.Tensor

    @classmethod
    def of(cls, plan: Plan, num_gpus: int, device: torch.device) -> "Layout":
        p2l = plan.phy2log.to(device)
        L, R = p2l.shape
        E = plan.logcnt.shape[1]
        S = R // num_gpus
        rank, logcnt = replica_ranks(p2l, E)
        l2p = plan.log2phy.to(device)
        valid = l2p >= 0
        gpu_of_slot = torch.arange(R, device=device) // S
        slot_bit = bitsets.pack(torch.nn.functional.one_hot(gpu_of_slot, num_gpus).bool())   # [R, W]
        presence = torch.zeros(L, E, num_gpus, dtype=torch.bool, device=device)
        presence[torch.arange(L, device=device)[:, None], p2l, gpu_of_slot[None, :]] = True
        return cls(num_gpus, p2l, l2p.clamp_min(0), valid, gpu_of_slot, slot_bit,
                   bitsets.pack(presence), presence.sum(-1), rank, logcnt)


def check_tokens(tokens, plan: Plan, param: str = "tokens") -> torch.Tensor:
    """tokens as int64 ``[B, L, E]`` on their own device (a ``[L, E]`` array is one micro-batch).

    Raises :class:`ProblemError` naming ``param`` for another shape, negative or fractional
    counts, or non-numbers.
    """
    if not isinstance(tokens, torch.Tensor):
        try:
            arr = np.asarray(tokens)
        except (TypeError, ValueError) as exc:
            raise ProblemError(param, f"must be a rectangular [micro-batches, layers, experts] array ({exc})") \
                from None
        if arr.dtype == object or not np.issubdtype(arr.dtype, np.number):
            raise ProblemError(param, f"must hold token counts (numbers), got dtype {arr.dtype}")
        tokens = torch.from_numpy(np.ascontiguousarray(arr))
    t = tokens.detach()
    if t.dtype == torch.bool or t.is_complex():
        raise ProblemError(param, f"must hold integer token counts, got dtype {t.dtype}")
    if t.dim() == 2:
        t = t.unsqueeze(0)
    L, E = plan.phy2log.shape[0], plan.logcnt.shape[1]
    if t.dim() != 3 or tuple(t.shape[1:]) != (L, E):
        raise ProblemError(param, f"must have shape [micro-batches, {L}, {E}] (layers and experts of the "
                           f"plan), got {tuple(tokens.shape)}")
    if t.is_floating_point():
        if not bool(torch.isfinite(t).all()):
            raise ProblemError(param, "token counts must be finite")
        if not bool((t == t.round()).all()):
            raise ProblemError(param, "token counts must be whole numbers, found fractional values")
        if t.numel() and float(t.abs().max()) >= 2.0**53:
            raise ProblemError(param, "token counts must be below 2**53")
    t = t.to(torch.int64)
    if t.numel() and bool((t < 0).any()):
        raise ProblemError(param, f"token counts must be >= 0, found {int(t.min())}")
    return t


def check_plan(plan: Plan, num_gpus: int, param: str = "plan") -> Plan:
    if not isinstance(plan, Plan):
        raise PlanError(param, f"must be a solvers.Plan, got {type(plan).__name__}")
    if isinstance(num_gpus, bool) or not isinstance(num_gpus, (int, np.integer)) or num_gpus < 1:
        raise PlanError("num_gpus", f"must be a positive integer, got {num_gpus!r}")
    if plan.phy2log.dim() == 2 and plan.phy2log.shape[1] % int(num_gpus) != 0:
        raise PlanError(param, f"has {plan.phy2log.shape[1]} slots, not a multiple of num_gpus ({num_gpus}): "
                        f"a plan for another number of GPUs")
    return plan.validate(num_gpus=int(num_gpus))


def even_split(layout: Layout, tokens: torch.Tensor) -> torch.Tensor:
    """[B, L, R] int64: each expert's tokens spread as evenly as integers allow (replica rank
    r gets one of the ``t_e mod c_e`` leftover tokens when r < t_e mod c_e)."""
    B = tokens.shape[0]
    idx = layout.phy2log.expand(B, -1, -1)
    t = tokens.gather(2, idx)
    c = layout.logcnt.gather(1, layout.phy2log).expand(B, -1, -1)
    return t // c + (layout.rank < t % c).to(torch.int64)


def cheap_lower_bound(layout: Layout, tokens: torch.Tensor) -> torch.Tensor:
    """[B, L] int64: max of ceil(total / P) and, per expert, ceil(t_e / its distinct GPUs)."""
    P = layout.num_gpus
    total = tokens.sum(-1)
    per_expert = (tokens + layout.distinct - 1) // layout.distinct
    return torch.maximum((total + P - 1) // P, per_expert.max(-1).values)


def _slot_gpu_view(t: torch.Tensor, P: int) -> torch.Tensor:
    """[B, L, R, ...] -> [B, L, P, S, ...] (slots of one GPU are consecutive)."""
    B, L, R = t.shape[:3]
    return t.view(B, L, P, R // P, *t.shape[3:])


def _round(layout: Layout, x: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One push-relabel round on every instance. x: [B, L, R] int64; target: [B, L] int64."""
    P = layout.num_gpus
    B, L, R = x.shape
    E, K = layout.log2phy.shape[1:]
    load = _slot_gpu_view(x, P).sum(-1)                                   # [B, L, P]
    T = target.unsqueeze(-1)
    active, sink = load > T, load < T
    holds = x > 0                                                         # [B, L, R]

    # Residual arcs g -> h: a slot on g holding tokens of an expert with a replica on h.
    zero = torch.zeros((), dtype=torch.int64, device=x.device)
    out_bits = torch.where(holds.unsqueeze(-1), layout.expert_gpus.gather(
        1, layout.phy2log.unsqueeze(-1).expand(-1, -1, layout.expert_gpus.shape[-1])), zero)
    adj = bitsets.or_reduce(_slot_gpu_view(out_bits, P), dim=3)          # [B, L, P, W]
    # The reverse arcs: h has bit g when some expert on h holds tokens on g.
    on_gpu = torch.where(holds.unsqueeze(-1), layout.slot_bit, zero)     # [B, L, R, W]
    W = on_gpu.shape[-1]
    flat = layout.log2phy.view(1, L, E * K, 1).expand(B, -1, -1, W)
    per_replica = on_gpu.gather(2, flat).view(B, L, E, K, W)
    per_replica = torch.where(layout.valid.view(1, L, E, K, 1), per_replica, zero)
    holding_gpus = bitsets.or_reduce(per_replica, dim=3)                 # [B, L, E, W]
    radj = bitsets.or_reduce(_slot_gpu_view(holding_gpus.gather(
        2, layout.phy2log.view(1, L, R, 1).expand(B, -1, -1, W)), P), dim=3)   # [B, L, P, W]

    # Exact distance of every GPU to a GPU below the target (P means none reachable).
    dist = torch.where(sink, 0, P)
    reached, frontier = sink, bitsets.pack(sink)
    for step in range(1, P):
        new = bitsets.intersects(adj, frontier) & ~reached
        dist = dist.masked_fill(new, step)
        reached = reached | new
        frontier = bitsets.pack(new)

    # Stuck GPUs: the set they reach proves a larger lower bound.
    closed = active & ~reached
    for _ in range(1, P):
        closed = closed | bitsets.intersects(radj, bitsets.pack(closed))
    size = closed.sum(-1)
    held = (load * closed).sum(-1)
    raised = (held + size - 1) // size.clamp_min(1)
    target = torch.where(size > 0, torch.maximum(target, raised), target)

    # Push: every slot on an active GPU sends tokens to its expert's replica on the GPU
    # with the smallest distance label, when that label is one less than its own.
    dist_slot = dist.gather(2, layout.gpu_of_slot.expand(B, L, R))       # [B, L, R]
    rep_dist = dist_slot.gather(2, layout.log2phy.view(1, L, E * K).expand(B, -1, -1)).view(B, L, E, K)
    rep_dist = rep_dist.masked_fill(~layout.valid, P + 1)
    best_dist, best_rank = rep_dist.min(-1)                               # [B, L, E]
    best_slot = layout.log2phy.expand(B, -1, -1, -1).gather(3, best_rank.unsqueeze(-1)).squeeze(-1)
    to_dist = best_dist.gather(2, layout.phy2log.expand(B, -1, -1))      # [B, L, R]
    to_slot = best_slot.gather(2, layout.phy2log.expand(B, -1, -1))
    admissible = holds & (to_dist == dist_slot - 1) & (dist_slot < P) \
        & active.gather(2, layout.gpu_of_slot.expand(B, L, R))
    movable = _slot_gpu_view(x * admissible, P)                           # [B, L, P, S]
    excess = (load - T).clamp_min(0).unsqueeze(-1)
    before = movable.cumsum(-1) - movable
    take = (excess - before).clamp_min(0).minimum(movable).view(B, L, R)
    x = (x - take).scatter_add(2, to_slot, take)
    return x, target


def _solve(layout: Layout, tokens: torch.Tensor, rounds_per_check: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    x = even_split(layout, tokens)
    target = cheap_lower_bound(layout, tokens)
    P = layout.num_gpus
    rounds = 0
    while True:
        for _ in range(rounds_per_check):
            x, target = _round(layout, x, target)
        rounds += rounds_per_check
        load = _slot_gpu_view(x, P).sum(-1)
        if bool((load <= target.unsqueeze(-1)).all()):      # the one host synchronisation per chunk
            return x, target, rounds
        if rounds >= MAX_ROUNDS:
            raise RuntimeError("schedule_tokens did not converge (a bug: please report the instance)")


def schedule_tokens(plan: Plan, tokens, num_gpus: int, *, rounds_per_check: int = ROUNDS_PER_CHECK
                    ) -> torch.Tensor:
    """The optimal split of every micro-batch's tokens over the plan's replicas.

    plan: a :class:`~solvers.Plan` of L layers, E experts and R slots on ``num_gpus`` GPUs.
    tokens: [B, L, E] integer token counts per micro-batch, layer and expert (a [L, E] array
    is one micro-batch). Returns [B, L, R] int64 on the tokens' device: tokens served by
    each slot, non-negative, summing to each expert's count over its replicas, with the
    smallest possible max GPU load for every (micro-batch, layer). Bad input raises
    :class:`~solvers.ProblemError` (``tokens``) or :class:`~solvers.PlanError` (``plan``).
    """
    x, _ = schedule_with_bound(plan, tokens, num_gpus, rounds_per_check=rounds_per_check)
    return x


def schedule_with_bound(plan: Plan, tokens, num_gpus: int, *, rounds_per_check: int = ROUNDS_PER_CHECK
                        ) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`schedule_tokens` plus its certificate: [B, L] int64, the proven lower bound that
    the returned split's max GPU load meets (so it is the integer optimum)."""
    check_plan(plan, num_gpus)
    t = check_tokens(tokens, plan)
    layout = Layout.of(plan, int(num_gpus), t.device)
    x, bound, _ = _solve(layout, t, max(1, int(rounds_per_check)))
    if not isinstance(tokens, torch.Tensor) or tokens.dim() == 2:
        pass
    if isinstance(tokens, torch.Tensor) and tokens.dim() == 2 or \
            (not isinstance(tokens, torch.Tensor) and np.ndim(tokens) == 2):
        return x[0], bound[0]
    return x, bound


def gpu_loads_of(split: torch.Tensor, num_gpus: int) -> torch.Tensor:
    """[..., R] tokens per slot -> [..., P] tokens per GPU."""
    return split.view(*split.shape[:-1], num_gpus, split.shape[-1] // num_gpus).sum(-1)
