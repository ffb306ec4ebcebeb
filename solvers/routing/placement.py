"""Communication-aware placement: cut cross-node dispatch traffic at (nearly) equal balance.

Registered as ``traffic_aware``. Given a per-token routing trace (option ``routing``), it
keeps experts that the same tokens use together on one node, so a token's top-k spans fewer
nodes, while every layer's GPU imbalance stays within ``1 + epsilon`` (even split). Steps,
batched over layers:

1. **Replica counts**: the greedy counts that minimise the max load per replica (DeepSeek's
   step 2), items ``(expert, w_e / c_e)``.
2. **Affinity clustering into nodes**: items heaviest first, each to the node it is most
   co-activated with (:func:`solvers.routing.coactivation.coactivation`), among nodes with a
   free slot, under the node load cap ``(1 + epsilon / 2) W / N`` and without a second
   replica of the same expert on one node (useless for traffic).
3. **Swaps**: Kernighan-Lin style, the best swap of two items between nodes per layer per
   round (gain: co-activation kept inside nodes), only swaps that keep both node loads
   under the cap (or do not raise an already higher one).
4. **Balanced packing inside each node** onto its GPUs (LPT and Karmarkar-Karp starts, swap
   local search; :mod:`solvers.heuristics.packing`).
5. **Guard**: a layer whose GPU imbalance ends above ``max(1 + epsilon, imbalance of the
   balance-only plan)`` takes the balance-only plan (``kk_swap``, global policy) instead;
   ``info['fallback_layers']`` counts them.

The proxy objective (co-activation inside nodes) is what graph partitioning of the
co-activation graph maximises; the plan is graded by the shared scorer, traffic included
(:mod:`solvers.traffic`), never by this proxy.
"""
from __future__ import annotations

import torch

from ..errors import OptionError
from ..heuristics.common import expand_items, pack_loads, replicate_counts
from ..heuristics.packing import kk_pack, local_search, lpt_pack
from ..options import Option, SolverOptions
from ..plan import Plan
from ..problem import Problem
from ..registry import SolverOutput, register, run
from ..traffic import traffic
from .coactivation import coactivation
from .trace import RoutingTrace
from ..work import WorkModel

ROUTING_OPTION = Option("routing", object, None, "per-token routing trace (solvers.routing.RoutingTrace) with the "
                        "problem's layers and experts; its co-activation drives the placement", nullable=True)
SCHEMA = (
    ROUTING_OPTION,
    Option("epsilon", float, 0.05, "max GPU imbalance: every layer's max / mean GPU load stays <= 1 + epsilon "
           "(or the balance-only plan's, when that is higher)", minimum=0.0, maximum=1.0),
    Option("max_swaps", int, 60, "rounds of the node swap search (one swap per layer per round)",
           minimum=0, maximum=100_000, advanced=True),
    Option("spread", bool, True, "put a replica of each of the hottest experts on every node (the spare slots): "
           "the nearest-replica dispatcher then keeps them local for every token"),
    Option("iterations", int, 12, "rounds of the token / expert co-clustering",
           minimum=0, maximum=10_000, advanced=True),
    Option("max_tokens", int, 1024, "tokens of the trace the search looks at (evenly spaced)",
           minimum=16, maximum=1 << 20, advanced=True),
)


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


def incidence(routing: RoutingTrace, max_tokens: int) -> torch.Tensor:
    """X: [L, T', E] float32, 1 where token t chose expert e; at most ``max_tokens`` tokens,
    evenly spaced over the trace (the statistics of a long trace, at bounded cost)."""
    L, T, _ = routing.topk_ids.shape
    take = torch.linspace(0, T - 1, min(T, max_tokens)).round().to(torch.int64).unique()
    ids = routing.topk_ids[:, take].to(torch.int64)                                    # [L, T', k]
    X = torch.zeros(L, take.numel(), routing.num_experts, dtype=torch.float32)
    X.scatter_(2, ids, 1.0)
    return X


def grow_nodes(A: torch.Tensor, weight: torch.Tensor, logcnt: torch.Tensor, num_nodes: int,
               slots_per_node: int, cap: torch.Tensor) -> torch.Tensor:
    """Greedy graph growing: node of every expert [L, E] (all its replicas there).

    Replicated experts (the hot ones, co-activated with nearly every token) go first, the
    heaviest to the lightest node with room, so the slots left are whole. Single-replica
    experts then grow clusters: each node starts from a seed (the heaviest such expert,
    then each next seed the one least co-activated with the seeds so far), and the node
    with the fewest slots used takes the unplaced expert most co-activated with it
    (relative to the expert's total co-activation), penalised by how far it would push the
    node over its load cap. A: [L, E, E] co-activation; weight, logcnt: [L, E]; cap: [L].
    """
    L, E, _ = A.shape
    N = num_nodes
    rows = torch.arange(L)
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
        key = load.masked_fill(slots + logcnt.gather(1, e.view(L, 1)) > slots_per_node, float("inf"))
        place(e, key.argmin(1), step < multi)
    todo = single.sum(1)
    for n in range(N):
        if n == 0:
            pick = w.masked_fill(~single, -1.0).argmax(1)
        else:
            pick = (aff.sum(2).to(torch.float64) / deg).masked_fill((node >= 0) | ~single, float("inf")).argmin(1)
        place(pick, torch.full((L,), n, dtype=torch.int64), todo > n)
    for step in range(int(todo.max()) - N):
        n = slots.masked_fill(slots >= slots_per_node, 1 << 40).argmin(1)                 # fewest slots used
        pull = aff[rows, :, n].to(torch.float64) / deg                                  # [L, E]
        over = (load[rows, n].view(L, 1) + w - cap.view(L, 1)).clamp_min(0) / cap.view(L, 1)
        score = (pull - 4.0 * over + 1e-6 * w / w.sum(1, keepdim=True)).masked_fill(node >= 0, float("-inf"))
        place(score.argmax(1), n, step < todo - N)
    return node


def touched_nodes(X: torch.Tensor, node: torch.Tensor, num_nodes: int) -> torch.Tensor:
    """[L] mean distinct nodes per token (the proxy the search lowers). X: [L, T, E]."""
    cnt = X @ torch.nn.functional.one_hot(node, num_nodes).to(X.dtype)
    return (cnt > 0).sum((1, 2)).to(torch.float64) / X.shape[1]


def capacity_assign(score: torch.Tensor, weight: torch.Tensor, logcnt: torch.Tensor, fixed: torch.Tensor,
                    slots_per_node: int, cap: torch.Tensor) -> torch.Tensor:
    """Experts to nodes by descending score under slot and load capacities: node [L, E].

    score: [L, E, N]; fixed: [L, E] node already chosen (-1: free). (expert, node) pairs are
    taken best first; an expert whose pairs all exceed a capacity goes, at the end, to
    the node with room that overflows the load cap least.
    """
    L, E, N = score.shape
    rows = torch.arange(L)
    w = weight.to(torch.float64)
    node = fixed.clone()
    load = torch.zeros(L, N, dtype=torch.float64).scatter_add_(1, fixed.clamp_min(0), w * (fixed >= 0))
    slots = torch.zeros(L, N, dtype=torch.int64).scatter_add_(1, fixed.clamp_min(0), logcnt * (fixed >= 0))
    order = torch.sort(score.view(L, -1), dim=1, descending=True, stable=True).indices   # [L, E*N]
    for step in range(E * N):
        pair = order[:, step]
        e, n = pair // N, pair % N
        c = logcnt[rows, e]
        ok = (node[rows, e] < 0) & (slots[rows, n] + c <= slots_per_node) & (load[rows, n] + w[rows, e] <= cap)
        r = rows[ok]
        node[r, e[ok]] = n[ok]
        load[r, n[ok]] += w[r, e[ok]]
        slots[r, n[ok]] += c[ok]
    while bool((node < 0).any()):                     # leftovers: least overflow among nodes with room
        left = node < 0
        e = left.to(torch.float64).argmax(1)
        c = logcnt[rows, e]
        key = (load + w[rows, e].view(L, 1)).masked_fill(slots + c.view(L, 1) > slots_per_node, float("inf"))
        n = key.argmin(1)
        r = rows[left.any(1)]
        node[r, e[r]] = n[r]
        load[r, n[r]] += w[r, e[r]]
        slots[r, n[r]] += c[r]
    return node


def co_cluster(X: torch.Tensor, weight: torch.Tensor, logcnt: torch.Tensor, node: torch.Tensor,
               num_nodes: int, slots_per_node: int, cap: torch.Tensor, iterations: int) -> torch.Tensor:
    """Alternate: every token's home is the node most of its experts are on; every expert
    goes where most of its tokens live (replicated experts stay put, capacities kept).
    Keeps, per layer, the assignment that touches the fewest nodes per token."""
    L = X.shape[0]
    N = num_nodes
    best, best_obj = node.clone(), touched_nodes(X, node, N)
    keep = torch.where(logcnt > 1, node, torch.full_like(node, -1))
    for _ in range(iterations):
        cnt = X @ torch.nn.functional.one_hot(node, N).to(X.dtype)                     # [L, T, N]
        home = torch.nn.functional.one_hot(cnt.argmax(2), N).to(X.dtype)              # [L, T, N]
        score = X.transpose(1, 2) @ home                                              # [L, E, N] tokens of e homed on n
        score = score / X.sum(1).clamp_min(1.0).unsqueeze(2)
        node = capacity_assign(score, weight, logcnt, keep, slots_per_node, cap)
        obj = touched_nodes(X, node, N)
        better = obj < best_obj
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


def swap_search(X: torch.Tensor, weight: torch.Tensor, logcnt: torch.Tensor, node: torch.Tensor,
                num_nodes: int, cap: torch.Tensor, rounds: int, candidates: int = 32) -> torch.Tensor:
    """Swaps of two experts (equal replica counts) between nodes; returns node [L, E].

    The objective is the number of (token, node) pairs touched, ``sum_t |nodes of t's
    experts|`` (a token's remote nodes plus at most one), and the overflow of the node
    loads above ``cap`` [L], which a swap must never raise and is worth more than any
    traffic. A move of e from a to b saves the tokens for which e is alone on a and costs
    those not yet on b; a swap's estimate is the two moves' sum (exact for tokens holding
    one of the pair), and the ``candidates`` best estimates of every layer are evaluated
    exactly. Each round uses one pairing of the nodes (each node in at most one pair) and
    applies the best exact swap of every pair at once: swaps on disjoint nodes change
    disjoint (token, node) counts and loads, so their gains add up exactly.
    """
    L, T, E = X.shape
    N = num_nodes
    node = node.clone()
    w = weight.to(torch.float64)
    wf = (w / cap.view(L, 1)).to(torch.float32)                                         # loads in caps
    Xt = X.transpose(1, 2).contiguous()                                                # [L, E, T]
    same_c = logcnt.view(L, E, 1) == logcnt.view(L, 1, E)
    dw = wf.view(L, 1, E) - wf.view(L, E, 1)                                            # w_f - w_e
    big = float(T) * N                                                                  # per cap of relief
    cand = min(candidates, E * E)
    schedule = matchings(N)
    idle = 0
    cnt = X @ torch.nn.functional.one_hot(node, N).to(X.dtype)                          # [L, T, N]
    for r_ in range(rounds):
        pairs = schedule[r_ % len(schedule)]
        pair_of = torch.full((N, N), -1, dtype=torch.int64)
        pair_of[pairs[:, 0], pairs[:, 1]] = torch.arange(pairs.shape[0])
        pair_of[pairs[:, 1], pairs[:, 0]] = torch.arange(pairs.shape[0])
        alone = Xt @ (cnt == 1).to(X.dtype)                                             # [L, E, N]
        absent = Xt @ (cnt == 0).to(X.dtype)
        move = alone.gather(2, node.view(L, E, 1)) - absent                             # gain of e -> b
        est = move.gather(2, node.view(L, 1, E).expand(L, E, E))
        est = est + est.transpose(1, 2)                                                 # [L, E, F]
        load = torch.zeros(L, N, dtype=torch.float32).scatter_add_(1, node, wf)
        le = load.gather(1, node)                                                       # [L, E]
        over_before = (le.view(L, E, 1) - 1).clamp_min(0) + (le.view(L, 1, E) - 1).clamp_min(0)
        over_after = (le.view(L, E, 1) + dw - 1).clamp_min(0) + (le.view(L, 1, E) - dw - 1).clamp_min(0)
        relief = over_before - over_after                                               # >= 0 to be allowed
        matched = pair_of[node.view(L, E, 1), node.view(L, 1, E)] >= 0
        ok = same_c & matched & (relief >= -1e-6)
        score = (est + big * relief).masked_fill(~ok, float("-inf"))
        top, idx = score.view(L, -1).topk(cand, dim=1)                                  # [L, C]
        e, f = idx // E, idx % E
        a, b = node.gather(1, e), node.gather(1, f)                                     # [L, C]
        xe = X.gather(2, e.view(L, 1, cand).expand(L, T, cand))                         # [L, T, C]
        xf = X.gather(2, f.view(L, 1, cand).expand(L, T, cand))
        d = xf - xe                                                                     # into a, out of b
        ca = cnt.gather(2, a.view(L, 1, cand).expand(L, T, cand))
        cb = cnt.gather(2, b.view(L, 1, cand).expand(L, T, cand))
        before = (ca > 0).to(X.dtype) + (cb > 0).to(X.dtype)
        after = ((ca + d) > 0).to(X.dtype) + ((cb - d) > 0).to(X.dtype)
        gain = (before - after).sum(1) + big * relief.view(L, -1).gather(1, idx)
        gain = gain.masked_fill(~torch.isfinite(top), float("-inf"))                     # [L, C]
        # The best candidate of every node pair of this round's pairing.
        pid = pair_of[a, b].clamp_min(0)                                                # [L, C]
        Q = pairs.shape[0]
        best = torch.full((L, Q), float("-inf"), dtype=gain.dtype).scatter_reduce(
            1, pid, gain, reduce="amax")
        win = (gain == best.gather(1, pid)) & (gain > 0.5)
        # one winner per (layer, pair): the first candidate reaching the best
        first = torch.full((L, Q), cand, dtype=torch.int64).scatter_reduce(
            1, pid, torch.where(win, torch.arange(cand).expand(L, cand), torch.full_like(pid, cand)), reduce="amin")
        chosen = win & (torch.arange(cand).view(1, cand) == first.gather(1, pid))
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
        delta = (X[lr, :, pf] - X[lr, :, pe])                                            # [S, T]
        cnt.index_put_((lr.view(-1, 1), torch.arange(T).view(1, -1), na.view(-1, 1)), delta, accumulate=True)
        cnt.index_put_((lr.view(-1, 1), torch.arange(T).view(1, -1), nb.view(-1, 1)), -delta, accumulate=True)
    return node


def replica_items(weight: torch.Tensor, logcnt: torch.Tensor, node: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The replica items (expert, load, node): item_e, item_w, item_node [L, R]."""
    item_e, item_w = expand_items(weight, logcnt)
    return item_e, item_w, node.gather(1, item_e)


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


def gpu_imbalance(weight: torch.Tensor, plan: Plan, num_gpus: int) -> torch.Tensor:
    """[L] max / mean GPU load under the even split."""
    w = weight.to(torch.float64)
    per = w.gather(1, plan.phy2log) / plan.logcnt.gather(1, plan.phy2log).to(torch.float64)
    g = per.view(plan.num_layers, num_gpus, -1).sum(-1)
    mean = g.mean(1)
    return torch.where(mean > 0, g.max(1).values / mean.clamp_min(1e-300), torch.ones_like(mean))


def _spread_plan(problem: Problem, routing: RoutingTrace, X: torch.Tensor, weight: torch.Tensor, cap: torch.Tensor,
                 hier: Plan | None, opts: SolverOptions) -> Plan:
    """The placement with the hottest experts on every node: F = (R - E) // (N - 1) experts
    (by load) get one replica per node, so a token's dispatcher always finds them on its
    own node (they leave the clustering); the slots left over give the next hottest a second
    replica. The other experts are clustered into nodes (all replicas of one on one node)
    on the slots and load left: (R / N - F) slots and ``cap`` minus the spread experts'
    share per node."""
    L, E = weight.shape
    N, P, R = problem.num_nodes, problem.num_gpus, problem.num_replicas
    F = min(E, (R - E) // (N - 1))
    order = torch.sort(weight, dim=1, descending=True, stable=True).indices
    rank = torch.empty_like(order).scatter_(1, order, torch.arange(E).expand(L, E).contiguous())
    full = rank < F                                                                     # [L, E]
    extra = R - E - F * (N - 1)
    logcnt = torch.where(full, N, 1) + ((rank >= F) & (rank < F + extra)).to(torch.int64)
    # The clustering sees the other experts only: zero load, zero slots and no tokens for the spread ones.
    w_red = weight.masked_fill(full, 0.0)
    c_red = logcnt.masked_fill(full, 0)
    X_red = X.masked_fill(full.view(L, 1, E), 0.0)
    cap_red = cap - (weight * full).sum(1) / N
    slots = R // N - F
    start = hier.log2phy[:, :, 0] // (R // N) if hier is not None else \
        grow_nodes(coactivation(routing), w_red, c_red, N, slots, cap_red)
    start = start.masked_fill(full, 0)
    node = co_cluster(X_red, w_red, c_red, start, N, slots, cap_red, opts.iterations)
    node = swap_search(X_red, w_red, c_red, node, N, cap_red, opts.max_swaps)
    item_e, item_w = expand_items(weight, logcnt)
    first = torch.cumsum(logcnt, 1) - logcnt
    replica = torch.arange(R).expand(L, R) - first.gather(1, item_e)                    # rank among e's replicas
    item_node = torch.where(full.gather(1, item_e), replica, node.gather(1, item_e))
    return Plan.from_phy2log(pack_nodes(item_e, item_w, item_node, N, P // N, E), E)


# Work model (solvers.work): seconds on 2 cores, coefficients measured by
# `python -m benchmarks.work_model --fit`.
TRAFFIC_AWARE_WORK = WorkModel.of({"1": 0, "S": 0.000922, "R": 0.00013, "L*R": 1.19e-05, "L*E*R": 0, "L*S^2": 0, "L*R*S": 5.66e-08, "L*tokens*iterations": 0}, includes=("kk_swap",))


@register("traffic_aware", kind="heuristic", options=SCHEMA, in_suites=False, work=TRAFFIC_AWARE_WORK,
          description="communication-aware placement from a per-token routing trace: co-activated experts on one "
                      "node (affinity clustering, swaps), balanced packing, imbalance <= 1 + epsilon")
def _solve_traffic_aware(problem: Problem, opts: SolverOptions) -> SolverOutput:
    routing = check_routing(problem, opts.routing)
    L, E = problem.num_layers, problem.num_experts
    N, P, R = problem.num_nodes, problem.num_gpus, problem.num_replicas
    weight = problem.weights.to("cpu", torch.float64)
    balanced = run(problem, "kk_swap", {"policy": "global"}).plan.to("cpu")
    base_imb = gpu_imbalance(weight, balanced, P)
    if N == 1:
        return SolverOutput(balanced.to(problem.device), "global", info={"fallback_layers": L,
                                                                           "reason": "one node: no cross-node traffic"})
    X = incidence(routing, opts.max_tokens)
    cap = (1.0 + opts.epsilon / 2) * weight.sum(1) / N
    hier = None
    if problem.num_groups % N == 0 and E % problem.num_groups == 0:
        hier = run(problem, "deepseek", {"policy": "hierarchical"}).plan.to("cpu")
    if opts.spread:
        ours = _spread_plan(problem, routing, X, weight, cap, hier, opts)
    else:
        if hier is not None:
            # Start from DeepSeek's hierarchical plan: its replica counts and the node of every
            # expert (its replicas share a node).
            logcnt = hier.logcnt
            node = hier.log2phy[:, :, 0] // (R // N)
        else:
            logcnt = replicate_counts(weight, R)
            node = grow_nodes(coactivation(routing), weight, logcnt, N, R // N, cap)
        node = co_cluster(X, weight, logcnt, node, N, R // N, cap, opts.iterations)
        node = swap_search(X, weight, logcnt, node, N, cap, opts.max_swaps)
        item_e, item_w, item_node = replica_items(weight, logcnt, node)
        ours = Plan.from_phy2log(pack_nodes(item_e, item_w, item_node, N, P // N, E), E)
    # Per layer, the least traffic among the plans within the balance limit (ours first).
    limit = torch.maximum(torch.full_like(base_imb, 1.0 + opts.epsilon), base_imb) * (1 + 1e-9)
    cands = [ours, balanced] + ([hier] if hier is not None else [])
    src_bytes = torch.stack([traffic(c, problem.cluster, routing).layer_bytes for c in cands])   # [C, L]
    imbs = torch.stack([gpu_imbalance(weight, c, P) for c in cands])
    src_bytes = src_bytes.masked_fill(imbs > limit.view(1, L), float("inf"))
    choice = src_bytes.argmin(0)                                                      # [L]
    phy2log = torch.stack([c.phy2log for c in cands]).gather(0, choice.view(1, L, 1).expand(1, L, R))[0]
    plan = Plan.from_phy2log(phy2log, E).to(problem.device)
    info = {"epsilon": opts.epsilon, "layers_own": int((choice == 0).sum()),
            "layers_balanced": int((choice == 1).sum()), "layers_hierarchical": int((choice == 2).sum())}
    return SolverOutput(plan, "global", info=info)
