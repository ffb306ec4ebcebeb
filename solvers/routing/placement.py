"""Communication-aware placement: cut cross-node dispatch traffic at (nearly) equal balance.

Registered as ``traffic_aware``. Given a per-token routing trace (option ``routing``), it
keeps experts that the same tokens use together on one node, so a token's top-k spans fewer
nodes, while every layer's GPU imbalance stays within ``1 + epsilon`` (even split). Steps,
batched over layers (docs/traffic.md):

1. **Spread** the hottest experts, one replica per node, on the spare slots (``spread``).
2. **Co-clustering** of the others into nodes, from DeepSeek's hierarchical node
   assignment (or greedy graph growing on the co-activation matrix): a token's home is the
   node most of its experts are on, an expert goes where most of its tokens live, under
   slot and load caps ``(1 + epsilon / 2) W / N``, less ``risk`` x the correlation of its
   load with the node's over the window's steps (:mod:`solvers.routing.robust`).
3. **Swaps** of two experts between paired nodes with exact gains in touched (token, node)
   pairs, never raising a node's overload; a node's load is ``mean + risk x std``.
4. **Balanced packing inside each node** onto its GPUs (LPT and Karmarkar-Karp starts, swap
   local search; :mod:`solvers.heuristics.packing`).
5. **Choice per layer** (:func:`choose`) among this plan (with ``traffic_weight``: run at
   three fractions of epsilon), the balance-only ``kk_swap`` (global) and DeepSeek's
   hierarchical plan: within the plain and robust imbalance limits, the least traffic, or
   the least ``(imbalance - 1) + traffic_weight x bytes / the balance-only plan's``.

The proxy objective (touched nodes per token) is what partitioning the co-activation graph
lowers; the plan is graded by the shared scorer, traffic included (:mod:`solvers.traffic`),
never by this proxy.
"""
from __future__ import annotations

import torch

from ..errors import OptionError
from ..memory import check_bytes, work_bytes
from ..heuristics.common import expand_items, pack_loads, replicate_counts
from ..heuristics.packing import kk_pack, local_search, lpt_pack
from ..options import Option, SolverOptions
from ..plan import Plan
from ..problem import Problem
from ..registry import SolverOutput, register, run
from ..traffic import traffic
from ..work import WorkModel
from .coactivation import coactivation
from .nodes import Nodes, unit_time
from .robust import excess_covariance, robust_imbalance, unit_spread, window_steps
from .trace import RoutingTrace

ROUTING_OPTION = Option("routing", object, None, "per-token routing trace (solvers.routing.RoutingTrace) with the "
                        "problem's layers and experts; its co-activation drives the placement", nullable=True)
SCHEMA = (
    ROUTING_OPTION,
    Option("epsilon", float, 0.05, "max GPU imbalance: every layer's max / mean GPU load stays <= 1 + epsilon "
           "(or the balance-only plan's, when that is higher), and its robust imbalance (GPU mean + risk x std "
           "over the window's steps) at most epsilon above the balance-only plan's", minimum=0.0, maximum=1.0),
    Option("traffic_weight", float, None, "weighted objective: per layer, the plan within the epsilon limits "
           "minimising (imbalance - 1) + W x inter-node bytes / the balance-only plan's (imbalance: the robust "
           "one when risk > 0); unset: the least traffic within the limits",
           nullable=True, minimum=0.0, maximum=1e6),
    Option("risk", float, 0.25, "a node's load in the search is its mean + risk x std over the window's steps "
           "(the co-variation beyond sampling noise): experts whose loads rise together weigh more on one node; "
           "0: the mean alone", minimum=0.0, maximum=100.0),
    Option("buckets", int, 4, "steps the window is cut into when no history is given: blocks of consecutive "
           "tokens of the routing trace (1: no steps)", minimum=1, maximum=1024),
    Option("history", object, None, "the window's steps [W, layers, experts] (default: the routing trace in "
           "`buckets` blocks)", nullable=True, advanced=True),
    Option("max_swaps", int, 30, "rounds of the node swap search (one swap per node pair per layer per round)",
           minimum=0, maximum=100_000, advanced=True),
    Option("spread", bool, True, "put a replica of each of the hottest experts on every node (the spare slots): "
           "the nearest-replica dispatcher then keeps them local for every token"),
    Option("iterations", int, 12, "rounds of the token / expert co-clustering",
           minimum=0, maximum=10_000, advanced=True),
    Option("max_tokens", int, 1024, "tokens of the trace the search looks at (evenly spaced)",
           minimum=16, maximum=1 << 20, advanced=True),
)
# With a traffic weight, the search runs at these fractions of epsilon: the candidates the
# weight chooses among per layer (with the balance-only and hierarchical plans).
WEIGHT_LADDER = (1.0, 0.5, 0.25)


def check_routing(problem: Problem, routing) -> RoutingTrace:
    """The trace, checked against the problem (same layers and experts)."""
    if routing is None:
        raise OptionError("routing", "the traffic-aware placement needs a per-token routing trace "
                          "(eplb plan --routing FILE)")
    if not isinstance(routing, RoutingTrace):
        raise OptionError("routing", f"must be a solvers.routing.RoutingTrace, got {type(routing).__name__}")
    if routing.num_layers != problem.num_layers or routing.num_experts != problem.num_experts:
        raise OptionError("routing", f"the trace has {routing.num_layers} layers of {routing.num_experts} experts, "
                          f"the problem {problem.num_layers} layers of {problem.num_experts}")
    return routing


def incidence(routing: RoutingTrace, max_tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids [L, T', k] int64, X [L, T', E] float32 1 where token t chose expert e): at most
    ``max_tokens`` tokens, evenly spaced over the trace (the statistics of a long trace, at
    bounded cost)."""
    L, T, _ = routing.topk_ids.shape
    take = torch.linspace(0, T - 1, min(T, max_tokens)).round().to(torch.int64).unique()
    ids = routing.topk_ids[:, take].to(torch.int64)                                    # [L, T', k]
    X = torch.zeros(L, take.numel(), routing.num_experts, dtype=torch.float32)
    X.scatter_(2, ids, 1.0)
    return ids, X


def check_search_memory(num_layers: int, num_tokens: int, top_k: int, num_experts: int, num_nodes: int,
                        max_tokens: int) -> None:
    """Refuse (``max_tokens``, one line) a search whose token tensors exceed the working-memory
    budget (:mod:`solvers.memory`): per layer and sampled token the incidence X and its copies
    (three [E] float32 rows), the ids, the node counts and the swap statistics ([k, 2N])."""
    cell = 12 * num_experts + 24 * top_k + 16 * num_nodes + 16 * top_k * num_nodes
    tokens = min(num_tokens, max_tokens)
    fit = work_bytes() // max(num_layers * cell, 1)
    check_bytes("max_tokens", num_layers * tokens * cell,
                f"the search over {tokens} tokens x {num_layers} layers x {num_experts} experts",
                f"use -O max_tokens={max(16, fit)} or less")


def node_counts(ids: torch.Tensor, inc: torch.Tensor, node: torch.Tensor, num_nodes: int) -> torch.Tensor:
    """cnt [L, T, N]: token t's experts on node n. ids: [L, T, k]; inc: [L, T, k] 1 for the
    experts the search sees (0: left out); node: [L, E]. One gather, no [L, T, E] product."""
    L, T, k = ids.shape
    where = node.gather(1, ids.view(L, -1)).view(L, T, k)
    return torch.zeros(L, T, num_nodes, dtype=inc.dtype).scatter_add_(2, where, inc)


def per_expert(ids: torch.Tensor, inc: torch.Tensor, vals: torch.Tensor, num_experts: int) -> torch.Tensor:
    """[L, E, D]: the sum over the tokens of every expert of vals [L, T, D] (X^T vals as one
    index_add over the (token, choice) entries)."""
    L, T, k = ids.shape
    D = vals.shape[2]
    flat = (torch.arange(L).view(L, 1, 1) * num_experts + ids).view(-1)
    src = (vals.unsqueeze(2) * inc.unsqueeze(3)).reshape(-1, D)
    return torch.zeros(L * num_experts, D, dtype=vals.dtype).index_add_(0, flat, src).view(L, num_experts, D)


def grow_nodes(A: torch.Tensor, weight: torch.Tensor, logcnt: torch.Tensor, num_nodes: int,
               slots_per_node: torch.Tensor, cap: torch.Tensor) -> torch.Tensor:
    """Greedy graph growing: node of every expert [L, E] (all its replicas there).

    Replicated experts (the hot ones, co-activated with nearly every token) go first, the
    heaviest to the lightest node (load over its capacity share) with room, so the slots
    left are whole. Single-replica experts then grow clusters: each live node starts from a
    seed (the heaviest such expert, then each next seed the one least co-activated with the
    seeds so far), and the node with the most free slots takes the unplaced expert most
    co-activated with it (relative to the expert's total co-activation), penalised by how
    far it would push the node over its load cap. A: [L, E, E] co-activation; weight,
    logcnt: [L, E]; slots_per_node: [N] (0: a dead node); cap: [L, N].
    """
    L, E, _ = A.shape
    N = num_nodes
    rows = torch.arange(L)
    spn = torch.as_tensor(slots_per_node, dtype=torch.int64).expand(N)
    share = cap / cap.amax(1, keepdim=True).clamp_min(1e-300)                         # [L, N] 1.0 when even
    live = (spn > 0).nonzero().squeeze(1).tolist()
    single = logcnt == 1
    A1 = A * (single.view(L, 1, E) & single.view(L, E, 1))                              # among single experts
    deg = A1.sum(2).clamp_min(1e-9)                                                     # [L, E]
    node = torch.full((L, E), -1, dtype=torch.int64)
    aff = torch.zeros(L, E, N, dtype=torch.float32)
    load = torch.zeros(L, N, dtype=torch.float64)
    slots = torch.zeros(L, N, dtype=torch.int64)
    w = weight.to(torch.float64)

    def place(e: torch.Tensor, n: torch.Tensor, mask: torch.Tensor) -> None:
        r, e, n = rows[mask], e[mask], n[mask]
        node[r, e] = n
        load[r, n] += w[r, e]
        slots[r, n] += logcnt[r, e]
        aff[r, :, n] += A1[r, e]

    multi = (~single).sum(1)
    order = torch.sort(w.masked_fill(single, -1.0), dim=1, descending=True, stable=True).indices
    for step in range(int(multi.max())):
        e = order[:, step]
        key = (load / share.clamp_min(1e-300)).masked_fill(
            (slots + logcnt.gather(1, e.view(L, 1)) > spn) | (spn == 0), float("inf"))
        place(e, key.argmin(1), step < multi)
    todo = single.sum(1)
    for i, n in enumerate(live):
        if i == 0:
            pick = w.masked_fill(~single, -1.0).argmax(1)
        else:
            pick = (aff.sum(2).to(torch.float64) / deg).masked_fill((node >= 0) | ~single, float("inf")).argmin(1)
        place(pick, torch.full((L,), n, dtype=torch.int64), todo > i)
    for step in range(int(todo.max()) - len(live)):
        free = spn - slots
        n = free.masked_fill(free <= 0, -(1 << 40)).argmax(1)                          # most free slots
        c = cap[rows, n].view(L, 1)
        pull = aff[rows, :, n].to(torch.float64) / deg                                  # [L, E]
        over = (load[rows, n].view(L, 1) + w - c).clamp_min(0) / c.clamp_min(1e-300)
        score = (pull - 4.0 * over + 1e-6 * w / w.sum(1, keepdim=True)).masked_fill(node >= 0, float("-inf"))
        place(score.argmax(1), n, step < todo - len(live))
    return node


def touched_nodes(ids: torch.Tensor, inc: torch.Tensor, node: torch.Tensor, num_nodes: int) -> torch.Tensor:
    """[L] mean distinct nodes per token (the proxy the search lowers)."""
    cnt = node_counts(ids, inc, node, num_nodes)
    return (cnt > 0).sum((1, 2)).to(torch.float64) / ids.shape[1]


def capacity_assign(score: torch.Tensor, weight: torch.Tensor, logcnt: torch.Tensor, fixed: torch.Tensor,
                    slots_per_node: torch.Tensor, cap: torch.Tensor) -> torch.Tensor:
    """Experts to nodes by score under slot and load capacities: node [L, E].

    score: [L, E, N]; fixed: [L, E] node already chosen (-1: free). Rounds of proposals:
    every free expert proposes to its best node not yet closed to it; every node takes its
    proposers best score first while they fit (slots and load cap), all layers and nodes
    at once; a proposer that no longer fits the node's room even alone is closed out of it.
    An expert closed out of every node goes, at the end, to the node with room that
    overflows the load cap least. slots_per_node: [N] (0: a dead node, closed to all);
    cap: [L, N].
    """
    L, E, N = score.shape
    rows = torch.arange(L)
    spn = torch.as_tensor(slots_per_node, dtype=torch.int64).expand(N)
    w = weight.to(torch.float64)
    node = fixed.clone()
    load = torch.zeros(L, N, dtype=torch.float64).scatter_add_(1, fixed.clamp_min(0), w * (fixed >= 0))
    slots = torch.zeros(L, N, dtype=torch.int64).scatter_add_(1, fixed.clamp_min(0), logcnt * (fixed >= 0))
    closed = (spn == 0).view(1, 1, N).expand(L, E, N).clone()
    s = score.to(torch.float64)
    lo, hi = s.amin((1, 2), keepdim=True), s.amax((1, 2), keepdim=True)
    s = (s - lo) / (hi - lo).clamp_min(1e-12)                                           # [0, 1] per layer
    for _ in range(4 * N + 8):
        free = node < 0
        sc = s.masked_fill(closed | ~free.unsqueeze(2), -1.0)
        best, prop = sc.max(2)                                                          # [L, E]
        active = best >= 0
        if not bool(active.any()):
            break
        # proposers grouped by node, best score first: key in [prop, prop + 0.5]
        key = torch.where(active, prop.to(torch.float64) + (1 - best) / 2, float(N + 1))
        order = torch.sort(key, dim=1, stable=True).indices
        pn = prop.gather(1, order)
        act = active.gather(1, order)
        cw = torch.cumsum(w.gather(1, order) * act, 1)
        cc = torch.cumsum(logcnt.gather(1, order) * act, 1)
        first = torch.zeros(L, N, dtype=torch.int64).scatter_reduce(
            1, pn, torch.arange(E).expand(L, E).contiguous(), reduce="amin", include_self=False)
        start = first.gather(1, pn) - 1                                                 # index before the group
        base_w = torch.where(start >= 0, cw.gather(1, start.clamp_min(0)), torch.zeros_like(cw))
        base_c = torch.where(start >= 0, cc.gather(1, start.clamp_min(0)), torch.zeros_like(cc))
        take = act & (load.gather(1, pn) + cw - base_w <= cap.gather(1, pn)) & \
            (slots.gather(1, pn) + cc - base_c <= spn[pn])
        # a group's accepted prefix: stop at its first proposer that does not fit
        bad = (act & ~take).to(torch.int64)
        bad_before = torch.cumsum(bad, 1) - bad - torch.where(start >= 0, (torch.cumsum(bad, 1) - bad).gather(
            1, start.clamp_min(0)) + bad.gather(1, start.clamp_min(0)), torch.zeros_like(bad))
        take = take & (bad_before == 0)
        e_sorted = order
        r, j = take.nonzero(as_tuple=True)
        e, n = e_sorted[r, j], pn[r, j]
        node[r, e] = n
        load.index_put_((r, n), w[r, e], accumulate=True)
        slots.index_put_((r, n), logcnt[r, e], accumulate=True)
        # close the nodes a proposer cannot fit even alone
        ew, ec = w.gather(1, order), logcnt.gather(1, order)
        alone_bad = act & ~take & ((load.gather(1, pn) + ew > cap.gather(1, pn)) |
                                   (slots.gather(1, pn) + ec > spn[pn]))
        r, j = alone_bad.nonzero(as_tuple=True)
        closed[r, e_sorted[r, j], pn[r, j]] = True
    while bool((node < 0).any()):                     # leftovers: least overflow among nodes with room
        left = node < 0
        e = left.to(torch.float64).argmax(1)
        c = logcnt[rows, e]
        key = (load + w[rows, e].view(L, 1)).masked_fill(slots + c.view(L, 1) > spn, float("inf"))
        n = key.argmin(1)
        r = rows[left.any(1)]
        node[r, e[r]] = n[r]
        load[r, n[r]] += w[r, e[r]]
        slots[r, n[r]] += c[r]
    return node


def co_cluster(ids: torch.Tensor, inc: torch.Tensor, weight: torch.Tensor, logcnt: torch.Tensor, node: torch.Tensor,
               num_nodes: int, slots_per_node: torch.Tensor, cap: torch.Tensor, iterations: int,
               cov: torch.Tensor | None = None, risk: float = 0.0) -> torch.Tensor:
    """Alternate: every token's home is the node most of its experts are on; every expert
    goes where most of its tokens live (replicated experts stay put, capacities kept),
    less ``risk`` x the correlation of its load with the node's (``cov`` [L, E, E]: experts
    whose loads rise together repel).
    Keeps, per layer, the assignment that touches the fewest nodes per token; stops after
    two rounds in which no layer improved. ids, inc: [L, T, k] (:func:`node_counts`)."""
    L, E = node.shape
    N = num_nodes
    best, best_obj = node.clone(), touched_nodes(ids, inc, node, N)
    keep = torch.where(logcnt > 1, node, torch.full_like(node, -1))
    tokens = per_expert(ids, inc, torch.ones(L, ids.shape[1], 1), E).clamp_min(1.0)      # [L, E, 1]
    stale = 0
    for _ in range(iterations):
        cnt = node_counts(ids, inc, node, N)                                          # [L, T, N]
        home = torch.nn.functional.one_hot(cnt.argmax(2), N).to(inc.dtype)           # [L, T, N]
        score = per_expert(ids, inc, home, E) / tokens                                # [L, E, N] share homed on n
        if cov is not None and risk > 0:
            member = torch.nn.functional.one_hot(node, N).to(cov.dtype) * (logcnt > 0).unsqueeze(2)
            c = torch.bmm(cov, member)                                                # [L, E, N] cov(e, node n)
            var_n = (c * member).sum(1).clamp_min(1e-30)                              # [L, N]
            sd_e = cov.diagonal(dim1=1, dim2=2).clamp_min(1e-30).sqrt()
            score = score - risk * (c / (sd_e.unsqueeze(2) * var_n.sqrt().unsqueeze(1))).to(score.dtype)
        node = capacity_assign(score, weight, logcnt, keep, slots_per_node, cap)
        obj = touched_nodes(ids, inc, node, N)
        better = obj < best_obj - 1e-9
        stale = 0 if bool(better.any()) else stale + 1
        if stale >= 2:                                  # two rounds without a better layer
            break
        best = torch.where(better.view(L, 1), node, best)
        best_obj = torch.minimum(obj, best_obj)
    return best


def matchings(num_nodes: int) -> list[torch.Tensor]:
    """Node pairings, each node in at most one pair (the circle method): [pairs, 2] each;
    every pair of nodes appears in one of them."""
    n = num_nodes + (num_nodes % 2)
    ring = list(range(n))
    out = []
    for _ in range(n - 1):
        pairs = [(ring[i], ring[n - 1 - i]) for i in range(n // 2)]
        pairs = [(a, b) for a, b in pairs if a < num_nodes and b < num_nodes]
        out.append(torch.tensor(pairs, dtype=torch.int64).view(-1, 2))
        ring = [ring[0], ring[-1], *ring[1:-1]]
    return out


def node_members(node: torch.Tensor, logcnt: torch.Tensor, num_nodes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Experts of every node, padded: members [L, N, m] expert ids and valid [L, N, m].
    Experts with no replica here (logcnt 0: the spread ones) belong to no node."""
    L, E = node.shape
    key = torch.where(logcnt > 0, node, num_nodes)                                    # N: no node
    order = torch.sort(key, dim=1, stable=True).indices                               # [L, E]
    size = torch.nn.functional.one_hot(key, num_nodes + 1)[..., :num_nodes].sum(1)    # [L, N]
    m = max(int(size.max()), 1)
    start = torch.cumsum(size, 1) - size
    slot = start.view(L, num_nodes, 1) + torch.arange(m).view(1, 1, m)                # [L, N, m]
    valid = torch.arange(m).view(1, 1, m) < size.view(L, num_nodes, 1)
    members = order.gather(1, slot.clamp_max(E - 1).view(L, -1)).view(L, num_nodes, m)
    return members.masked_fill(~valid, 0), valid


def swap_search(ids: torch.Tensor, X: torch.Tensor, weight: torch.Tensor, logcnt: torch.Tensor,
                node: torch.Tensor, num_nodes: int, cap: torch.Tensor, rounds: int, candidates: int = 32,
                cov: torch.Tensor | None = None, risk: float = 0.0,
                allow: torch.Tensor | None = None) -> torch.Tensor:
    """Swaps of two experts (equal replica counts) between nodes; returns node [L, E].

    The objective is the number of (token, node) pairs touched, ``sum_t |nodes of t's
    experts|`` (a token's remote nodes plus at most one), and the overflow of the node
    loads above ``cap`` [L, N] (each node's own), which a swap must never raise and is worth more than any
    traffic. A node's load is ``mean + risk x std`` over the window's steps (``cov``
    [L, E, E] the covariance of the experts' per-step loads; ``None`` or ``risk`` 0: the
    mean alone), so experts whose loads rise together weigh more on one node than apart;
    its cap is then ``cap + allow`` (``allow`` [L]: risk x the std a balance-only plan's
    nodes have anyway). Loads are counted in units of the largest node cap.
    A move of e from a to b saves the tokens for which e is alone on a and costs those not
    yet on b; a swap's estimate is the two moves' sum (exact for tokens holding one of the
    pair), and the ``candidates`` best estimates of every layer are evaluated exactly.
    Each round uses one pairing of the nodes (each node in at most one pair) and looks only
    at swaps inside those pairs ([L, pairs, m, m] blocks, m the experts per node), applying
    the best exact swap of every pair at once: swaps on disjoint nodes change disjoint
    (token, node) counts and loads, so their gains add up exactly.
    ids: [L, T, k] the tokens' experts, X: [L, T, E] their incidence (0 where an expert is
    left out of the search); weight, logcnt, node: [L, E].
    """
    L, T, E = X.shape
    N = num_nodes
    node = node.clone()
    w = weight.to(torch.float64)
    ref = cap.amax(1).clamp_min(1e-300)                                                 # [L] the largest cap
    wf = (w / ref.view(L, 1)).to(torch.float32)                                         # loads in caps
    robust = cov is not None and risk > 0
    if robust:
        cv = (cov / (ref.view(L, 1, 1) ** 2)).to(torch.float32)                         # [L, E, E] in caps^2
        diag = cv.diagonal(dim1=1, dim2=2)                                              # [L, E]
    big = float(T) * N                                                                  # per cap of relief
    schedule = matchings(N)
    inc = X.gather(2, ids)                                                              # [L, T, k] 0: left out
    Xt = X.transpose(1, 2).contiguous()                                                 # [L, E, T]
    rows = torch.arange(L)
    idle = 0
    cnt = node_counts(ids, inc, node, N)                                                # [L, T, N]

    # every node's cap in units of the largest: 1.0 on identical GPUs, 0 on a dead node
    thr = cap / ref.view(L, 1)                                                          # [L, N]
    if robust and allow is not None:
        thr = thr + (allow / ref).view(L, 1)
    thr = thr.float()

    def over(x: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
        """Overflow of loads x [L, Q, ...] on the nodes n [Q] of this round's pairs."""
        return (x - thr[:, n].view(L, -1, *([1] * (x.dim() - 2)))).clamp_min(0)

    for r_ in range(rounds):
        pairs = schedule[r_ % len(schedule)]
        Q = pairs.shape[0]
        if Q == 0:
            break
        pa, pb = pairs[:, 0], pairs[:, 1]
        members, valid = node_members(node, logcnt, N)
        m = members.shape[2]
        A, B = members[:, pa], members[:, pb]                                           # [L, Q, m]
        va, vb = valid[:, pa], valid[:, pb]
        # tokens of e for which e is its node's only expert / whose token misses node n:
        # one scatter over the (token, choice) entries, not an [L, E, T] product.
        stats = per_expert(ids, inc, torch.cat([(cnt == 1), (cnt == 0)], 2).to(X.dtype), E)  # [L, E, 2N]
        alone, absent = stats[..., :N], stats[..., N:]
        move = alone.gather(2, node.view(L, E, 1)) - absent                             # [L, E, N] gain of e -> n
        mA = move.gather(1, A.view(L, -1, 1).expand(L, Q * m, N)).view(L, Q, m, N)
        mB = move.gather(1, B.view(L, -1, 1).expand(L, Q * m, N)).view(L, Q, m, N)
        to_b = mA.gather(3, pb.view(1, Q, 1, 1).expand(L, Q, m, 1)).squeeze(3)           # [L, Q, m]
        to_a = mB.gather(3, pa.view(1, Q, 1, 1).expand(L, Q, m, 1)).squeeze(3)
        est = to_b.unsqueeze(3) + to_a.unsqueeze(2)                                     # [L, Q, m(e), m(f)]
        load = torch.zeros(L, N, dtype=torch.float32).scatter_add_(1, node, wf * (logcnt > 0))
        la, lb = load[:, pa].view(L, Q, 1, 1), load[:, pb].view(L, Q, 1, 1)
        dw = wf.gather(1, B.view(L, -1)).view(L, Q, 1, m) - wf.gather(1, A.view(L, -1)).view(L, Q, m, 1)
        new_a, new_b = la + dw, lb - dw
        if robust:
            member = torch.nn.functional.one_hot(node, N).to(cv.dtype) * (logcnt > 0).view(L, E, 1)
            c = torch.bmm(cv, member)
            var = (c * member).sum(1)
            cA = c.gather(1, A.view(L, -1, 1).expand(L, Q * m, N)).view(L, Q, m, N)
            cB = c.gather(1, B.view(L, -1, 1).expand(L, Q * m, N)).view(L, Q, m, N)
            ce_a = cA.gather(3, pa.view(1, Q, 1, 1).expand(L, Q, m, 1))                  # [L, Q, m, 1]
            ce_b = cA.gather(3, pb.view(1, Q, 1, 1).expand(L, Q, m, 1))
            cf_a = cB.gather(3, pa.view(1, Q, 1, 1).expand(L, Q, m, 1)).view(L, Q, 1, m)
            cf_b = cB.gather(3, pb.view(1, Q, 1, 1).expand(L, Q, m, 1)).view(L, Q, 1, m)
            de, df = diag.gather(1, A.view(L, -1)).view(L, Q, m, 1), diag.gather(1, B.view(L, -1)).view(L, Q, 1, m)
            cef = cv.gather(1, A.view(L, -1, 1).expand(L, Q * m, E)).view(L, Q, m, E).gather(
                3, B.view(L, Q, 1, m).expand(L, Q, m, m))                                # [L, Q, m, m]
            vA, vB = var[:, pa].view(L, Q, 1, 1), var[:, pb].view(L, Q, 1, 1)
            nvA = vA - 2 * ce_a + de + 2 * cf_a - 2 * cef + df
            nvB = vB - 2 * cf_b + df + 2 * ce_b - 2 * cef + de
            la, lb = la + risk * vA.clamp_min(0).sqrt(), lb + risk * vB.clamp_min(0).sqrt()
            new_a = new_a + risk * nvA.clamp_min(0).sqrt()
            new_b = new_b + risk * nvB.clamp_min(0).sqrt()
        relief = over(la, pa) + over(lb, pb) - over(new_a, pa) - over(new_b, pb)                       # [L, Q, m, m]
        same_c = logcnt.gather(1, A.view(L, -1)).view(L, Q, m, 1) == logcnt.gather(1, B.view(L, -1)).view(L, Q, 1, m)
        ok = same_c & va.unsqueeze(3) & vb.unsqueeze(2) & (relief >= -1e-6)
        score = (est + big * relief).masked_fill(~ok, float("-inf")).view(L, -1)
        cand = min(candidates, score.shape[1])
        top, idx = score.topk(cand, dim=1)                                              # [L, C]
        q, i, j = idx // (m * m), (idx // m) % m, idx % m
        e = A.view(L, -1).gather(1, q * m + i)
        f = B.view(L, -1).gather(1, q * m + j)
        a, b = pa[q], pb[q]                                                             # [L, C]
        lc = rows.view(L, 1)
        d = Xt[lc, f] - Xt[lc, e]                                                       # [L, C, T] into a, out of b
        cT = cnt.transpose(1, 2)                                                        # [L, N, T]
        ca, cb = cT[lc, a], cT[lc, b]
        before = (ca > 0).to(X.dtype) + (cb > 0).to(X.dtype)
        after = ((ca + d) > 0).to(X.dtype) + ((cb - d) > 0).to(X.dtype)
        gain = (before - after).sum(2) + big * relief.view(L, -1).gather(1, idx)
        gain = gain.masked_fill(~torch.isfinite(top), float("-inf"))                     # [L, C]
        # The best candidate of every node pair of this round's pairing.
        best = torch.full((L, Q), float("-inf"), dtype=gain.dtype).scatter_reduce(1, q, gain, reduce="amax")
        win = (gain == best.gather(1, q)) & (gain > 0.5)
        # one winner per (layer, pair): the first candidate reaching the best
        first = torch.full((L, Q), cand, dtype=torch.int64).scatter_reduce(
            1, q, torch.where(win, torch.arange(cand).expand(L, cand), torch.full_like(q, cand)), reduce="amin")
        chosen = win & (torch.arange(cand).view(1, cand) == first.gather(1, q))
        if not bool(chosen.any()):
            idle += 1
            if idle >= len(schedule):
                break
            continue
        idle = 0
        lr, cc = chosen.nonzero(as_tuple=True)
        pe, pf = e[lr, cc], f[lr, cc]
        na, nb = a[lr, cc], b[lr, cc]
        node[lr, pe], node[lr, pf] = nb, na
        delta = Xt[lr, pf] - Xt[lr, pe]                                                 # [S, T]
        cnt.index_put_((lr.view(-1, 1), torch.arange(T).view(1, -1), na.view(-1, 1)), delta, accumulate=True)
        cnt.index_put_((lr.view(-1, 1), torch.arange(T).view(1, -1), nb.view(-1, 1)), -delta, accumulate=True)
    return node


def pack_nodes(item_e: torch.Tensor, item_w: torch.Tensor, node: torch.Tensor, num_nodes: int,
               gpus_per_node: int, num_experts: int) -> torch.Tensor:
    """phy2log [L, R]: each node's items packed onto its GPUs (best of LPT and KK starts
    after swap local search), nodes in order."""
    L, R = item_e.shape
    N, per_node = num_nodes, R // num_nodes
    order = torch.sort(node, dim=1, stable=True).indices                               # items by node
    e_n = item_e.gather(1, order).view(L * N, per_node)
    w_n = item_w.gather(1, order).view(L * N, per_node)
    best_e, best_obj = None, None
    for start in ("kk", "lpt"):
        pack = kk_pack(w_n, gpus_per_node) if start == "kk" else lpt_pack(w_n, e_n, gpus_per_node, num_experts)
        o = torch.sort(pack, dim=1, stable=True).indices
        ws, es = w_n.gather(1, o), e_n.gather(1, o)
        ws, es, _ = local_search(ws, es, gpus_per_node, num_experts)
        obj = pack_loads(ws, gpus_per_node).max(1).values
        if best_e is None:
            best_e, best_obj = es, obj
        else:
            better = (obj < best_obj).view(-1, 1)
            best_e = torch.where(better, es, best_e)
            best_obj = torch.minimum(obj, best_obj)
    return best_e.reshape(L, R)


def _spread_plan(problem: Problem, nodes: Nodes, routing: RoutingTrace, ids: torch.Tensor, X: torch.Tensor,
                 weight: torch.Tensor, cap: torch.Tensor, hier: Plan | None, cov: torch.Tensor | None,
                 allow: torch.Tensor | None, opts: SolverOptions) -> tuple[torch.Tensor, ...]:
    """The placement with the hottest experts on every live node: F = (R - E) // (N' - 1)
    experts (by load; N' the live nodes, F at most the fewest slots of one) get one replica
    per live node, so a token's dispatcher always finds them on its own node (they leave the
    clustering); the slots left over give the next hottest a second replica. The other
    experts are clustered into nodes (all replicas of one on one node) on the slots and load
    left: each node's slots less F, and its ``cap`` [L, N] less the spread experts' share.
    Returns the replica items (item_e, item_w, item_node) [L, R]."""
    L, E = weight.shape
    R = problem.num_replicas
    live = nodes.live_ids
    Nl = live.numel()
    N = problem.num_nodes
    F = min(E, (R - E) // (Nl - 1), int(nodes.slots[live].min()))
    if F == E and R - E - F * (Nl - 1) > 0:
        F = E - 1               # slots beyond one replica per node of every expert: one expert takes them
    order = torch.sort(weight, dim=1, descending=True, stable=True).indices
    rank = torch.empty_like(order).scatter_(1, order, torch.arange(E).expand(L, E).contiguous())
    full = rank < F                                                                     # [L, E]
    extra = R - E - F * (Nl - 1)
    # the slots left go round the other experts, hottest first: one more each while they last
    pos = rank - F
    more = torch.where(full | (pos >= extra), 0, (extra - pos + (E - F) - 1) // max(E - F, 1))
    logcnt = torch.where(full, Nl, 1) + more
    # The clustering sees the other experts only: zero load, zero slots and no tokens for the spread ones.
    w_red = weight.masked_fill(full, 0.0)
    c_red = logcnt.masked_fill(full, 0)
    X_red = X.masked_fill(full.view(L, 1, E), 0.0)
    cap_red = cap - ((weight * full).sum(1) / Nl).view(L, 1) * nodes.live.view(1, N)   # [L, N]
    slots = nodes.slots - F * nodes.live                                                # [N]
    start = hier.log2phy[:, :, 0] // (R // N) if hier is not None else \
        grow_nodes(coactivation(routing), w_red, c_red, N, slots, cap_red)
    start = start.masked_fill(full, int(live[0]))
    cov_red = None if cov is None else cov * (~full).view(L, E, 1) * (~full).view(L, 1, E)
    node = co_cluster(ids, X_red.gather(2, ids), w_red, c_red, start, N, slots, cap_red, opts.iterations,
                      cov=cov_red, risk=opts.risk)
    node = swap_search(ids, X_red, w_red, c_red, node, N, cap_red, opts.max_swaps, cov=cov_red, risk=opts.risk,
                       allow=allow)
    item_e, item_w = expand_items(weight, logcnt)
    first = torch.cumsum(logcnt, 1) - logcnt
    replica = torch.arange(R).expand(L, R) - first.gather(1, item_e)                    # rank among e's replicas
    item_node = torch.where(full.gather(1, item_e), live[replica.clamp_max(Nl - 1)], node.gather(1, item_e))
    return item_e, item_w, item_node


def rehome(item_w: torch.Tensor, item_node: torch.Tensor, slots: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(item_node [L, R] with exactly ``slots`` [N] items on every node, [L] bool the layers
    that needed it). Each step moves, in every layer still off, the lightest replica of
    its most over-full node to its shortest node (item_w [L, R] replica loads); a dead node
    (0 slots) is never short. At most R steps, batched over layers."""
    L, R = item_node.shape
    N = slots.numel()
    node = item_node.clone()
    rows = torch.arange(L)
    bad = torch.zeros(L, dtype=torch.bool)
    for _ in range(R):
        excess = torch.zeros(L, N, dtype=torch.int64).scatter_add_(1, node, torch.ones_like(node)) - slots.view(1, N)
        off = (excess > 0).any(1)                                                       # [L]
        if not bool(off.any()):
            break
        bad |= off
        src, dst = excess.argmax(1), excess.argmin(1)
        it = item_w.masked_fill(node != src.view(L, 1), float("inf")).argmin(1)         # lightest on src
        node[rows[off], it[off]] = dst[off]
    return node, bad


def _search(problem: Problem, nodes: Nodes, routing: RoutingTrace, ids: torch.Tensor, X: torch.Tensor,
            weight: torch.Tensor, hier: Plan | None, cov: torch.Tensor | None,
            allow: torch.Tensor | None, epsilon: float, opts: SolverOptions) -> tuple[Plan, torch.Tensor]:
    """The traffic-minimising plan with node loads under ``(1 + epsilon / 2) W / N`` times the
    node's capacity share (:meth:`Nodes.caps`), and [L] bool the layers whose replica groups
    did not fit the nodes' slots (repaired by :func:`rehome`)."""
    E = problem.num_experts
    N, P, R = problem.num_nodes, problem.num_gpus, problem.num_replicas
    cap = nodes.caps(weight, epsilon)                                                   # [L, N]
    if opts.spread:
        item_e, item_w, item_node = _spread_plan(problem, nodes, routing, ids, X, weight, cap, hier, cov, allow, opts)
    else:
        if hier is not None:
            # Start from DeepSeek's hierarchical plan: its replica counts and the node of every
            # expert (its replicas share a node).
            logcnt = hier.logcnt
            node = hier.log2phy[:, :, 0] // (R // N)
        else:
            logcnt = replicate_counts(weight, R)
            node = grow_nodes(coactivation(routing), weight, logcnt, N, nodes.slots, cap)
        node = co_cluster(ids, torch.ones(ids.shape), weight, logcnt, node, N, nodes.slots, cap, opts.iterations,
                          cov=cov, risk=opts.risk)
        node = swap_search(ids, X, weight, logcnt, node, N, cap, opts.max_swaps, cov=cov, risk=opts.risk,
                           allow=allow)
        item_e, item_w = expand_items(weight, logcnt)                                   # replica items [L, R]
        item_node = node.gather(1, item_e)
    # Every node must get exactly its slots; where the replica groups did not fit (fragmented
    # slot counts) the lightest replicas move from over-full nodes to short ones.
    item_node, bad = rehome(item_w, item_node, nodes.slots)
    if problem.cluster.homogeneous:
        p2l = pack_nodes(item_e, item_w, item_node, N, P // N, E)
    else:
        p2l = nodes.pack(item_e, item_w, item_node)
    return Plan.from_phy2log(p2l, E), bad


def choose(bytes_: torch.Tensor, imb: torch.Tensor, robust: torch.Tensor | None, epsilon: float,
           traffic_weight: float | None, balanced: int) -> torch.Tensor:
    """Per layer, the candidate plan to keep: [L] indices into C candidates.

    bytes_, imb: [C, L] inter-node bytes and GPU imbalance on the window's loads; robust:
    [C, L] the robust imbalance (:func:`solvers.routing.robust.robust_imbalance`; None:
    risk 0, the plain one); ``balanced`` the index of the balance-only plan, always
    allowed. A candidate is allowed when its imbalance is <= max(1 + epsilon, the
    balance-only plan's) and its robust imbalance at most epsilon above the balance-only
    plan's. Among those: the least bytes (``traffic_weight`` None), or the least
    ``(robust imbalance - 1) + traffic_weight x bytes / the balance-only plan's bytes``.
    For a fixed candidate set a larger weight never picks more bytes in any layer: the two
    minimality conditions added give (W2 - W1)(b2 - b1) <= 0.
    """
    tol = 1 + 1e-9
    ok = imb <= torch.maximum(torch.full_like(imb[balanced], 1.0 + epsilon), imb[balanced]) * tol
    if robust is not None:
        ok &= robust <= robust[balanced] * tol + epsilon
    ok &= torch.isfinite(bytes_)                      # inf: a layer the candidate could not place
    ok[balanced] = True
    if traffic_weight is None:
        cost = bytes_.to(torch.float64)
    else:
        rel = bytes_.to(torch.float64) / bytes_[balanced].to(torch.float64).clamp_min(1.0)
        cost = ((imb if robust is None else robust) - 1) + traffic_weight * rel
    return cost.masked_fill(~ok, float("inf")).argmin(0)


# Work model (solvers.work): seconds on 2 cores, coefficients measured by
# `python -m benchmarks.work_model --fit`.
TRAFFIC_AWARE_WORK = WorkModel.of({"1": 0, "S": 0.000922, "R": 0.00013, "L*R": 1.19e-05, "L*E*R": 0, "L*S^2": 0, "L*R*S": 5.66e-08, "L*tokens*iterations": 0}, includes=("kk_swap",))


@register("traffic_aware", kind="heuristic", options=SCHEMA, in_suites=False, heterogeneous=True,
          work=TRAFFIC_AWARE_WORK,
          description="communication-aware placement from a per-token routing trace: co-activated experts on one "
                      "node (affinity clustering, swaps), balanced packing in time, imbalance <= 1 + epsilon")
def _solve_traffic_aware(problem: Problem, opts: SolverOptions) -> SolverOutput:
    routing = check_routing(problem, opts.routing)
    L, E = problem.num_layers, problem.num_experts
    N, P, R = problem.num_nodes, problem.num_gpus, problem.num_replicas
    check_search_memory(L, routing.num_tokens, routing.top_k, E, N, opts.max_tokens)   # before any work
    cluster = problem.cluster
    nodes = Nodes.of(cluster)
    weight = problem.weights.to("cpu", torch.float64)
    steps, noise = window_steps(problem, routing, opts.history, opts.buckets)        # [B, L, E]
    balanced = run(problem, "kk_swap", {"policy": "global"}).plan.to("cpu")
    if nodes.num_live == 1:
        return SolverOutput(balanced.to(problem.device), "global", info={"fallback_layers": L,
                                                                           "reason": "one node: no cross-node traffic"})
    ids, X = incidence(routing, opts.max_tokens)
    cov = excess_covariance(steps, noise) if opts.risk > 0 else None
    hier = None
    if cluster.homogeneous and problem.num_groups % N == 0 and E % problem.num_groups == 0:
        hier = run(problem, "deepseek", {"policy": "hierarchical"}).plan.to("cpu")
    ladder = (1.0,) if opts.traffic_weight is None else WEIGHT_LADDER
    # the node load spread a balance-only plan has anyway: the robust caps allow as much
    allow = None if cov is None else \
        opts.risk * unit_spread(cov, balanced, N, nodes.slot_node)[:, nodes.live].mean(1)
    found = [_search(problem, nodes, routing, ids, X, weight, hier, cov, allow, opts.epsilon * f, opts)
             for f in ladder]
    ours = [plan for plan, _ in found]
    repaired = torch.stack([bad for _, bad in found]).any(0)                            # [L]
    cands = ours + [balanced] + ([hier] if hier is not None else [])
    bytes_ = torch.stack([traffic(c, cluster, routing).layer_bytes for c in cands])      # [C, L]
    # balance in time on a real cluster (the scorer's time imbalance); tokens on identical GPUs
    imb = torch.stack([unit_time(weight, c, P, cluster) for c in cands])
    robust = None if cov is None else torch.stack([robust_imbalance(weight, cov, opts.risk, c, P, cluster)
                                                   for c in cands])
    choice = choose(bytes_, imb, robust, opts.epsilon, opts.traffic_weight, len(ours))              # [L]
    phy2log = torch.stack([c.phy2log for c in cands]).gather(0, choice.view(1, L, 1).expand(1, L, R))[0]
    plan = Plan.from_phy2log(phy2log, E).to(problem.device)
    info = {"epsilon": opts.epsilon, "traffic_weight": opts.traffic_weight, "steps": int(steps.shape[0]),
            "layers_own": int((choice < len(ours)).sum()), "layers_balanced": int((choice == len(ours)).sum()),
            "layers_hierarchical": int((choice == len(ours) + 1).sum()), "layers_repaired": int(repaired.sum())}
    return SolverOutput(plan, "global", info=info)
