"""The all-to-all traffic a plan causes on a per-token routing trace (docs/problem.md "Traffic").

What a DeepEP-style dispatch pays for is, per token and layer, the set of distinct GPUs and
nodes its top-k experts are served on. That needs per-token routing (a
:class:`solvers.routing.RoutingTrace`), not load counts.

**Source rank.** Every token starts on one GPU: its recorded rank mapped onto the plan's
GPUs (:meth:`RoutingTrace.source_gpus`: rank ``r`` of ``R`` ranks on GPU ``r * P // R``),
or, for traces without ranks, block ``t * P // T`` of consecutive tokens. On a cluster
with failed GPUs the rule maps onto the ``Q`` live GPUs instead (a failed rank runs no
attention, so no token starts there): the ``i``-th of them, ``i = r * Q // R``.

**Real clusters.** Slots belong to GPUs by the cluster's slot map (each GPU its own slot
count, a failed GPU none: :meth:`solvers.cluster.Cluster.slot_gpus`), so no token is ever
dispatched to a failed GPU; ``dispatched_load`` is then 0 there, and the dispatched
imbalance is in time: the slowest GPU's dispatched load over its speed, over the best
possible time (dispatched tokens over the live GPUs' total speed).

**Dispatcher (nearest replica first).** A source GPU ``g`` sends the tokens of expert ``e``
to one replica, fixed per (layer, e, g), as a static per-rank dispatch map does:

1. a replica on ``g`` itself, if any (no traffic);
2. else a replica on ``g``'s node: the ``(g mod n)``-th of the ``n`` there, in rank order;
3. else the ``(g mod c)``-th of all ``c`` replicas of ``e`` (rank order).

The mod rule spreads the source GPUs evenly over equally near replicas.

**Link classes** (dispatch; the combine returns the same bytes the other way), per token
and layer, ``token_bytes = hidden_size x bytes per element`` (the model preset):

- ``inter_node``: one copy per distinct remote node (DeepEP sends a token once over RDMA
  to each node and forwards it inside that node over NVLink);
- ``intra_node``: one copy per distinct other GPU on the source node (NVLink);
- ``inter_node_flat``: one copy per distinct GPU on another node (an all-to-all without
  node deduplication), for comparison.

**With a score.** :func:`with_traffic` composes the traffic with a plan's score
(:class:`TrafficScore`: the score, its summary joined by the traffic's headline numbers);
``solvers.score(..., routing=trace)`` returns one.

Everything is vectorised over layers and tokens (layers in chunks, to bound memory); the
distinct sets are bitmasks (one int64 per token) when the cluster has at most 32 GPUs on
16 nodes and the trace enough tokens to pay for the 2**N node sets, and sorted rows
otherwise. Layers and tokens go in chunks sized to the working-memory budget
(:mod:`solvers.memory`); a cluster whose results alone exceed it is refused in one line.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import torch

from .cluster import MODELS, Cluster
from .errors import PlanError
from .memory import rows_per_chunk
from .plan import Plan
from .problem import Problem
from .routing.trace import RoutingTrace
from .scoring import Score

# Layers scored at once: [chunk, tokens, top_k] int64 index tensors (8 layers of 100k
# tokens x top-8 are 51 MB each).
LAYER_CHUNK = 8
# Bitmask sets: destination GPUs in bits 0..31 of an int64, their nodes in bits 32..; the
# remote-node sets are counted per (layer, source node, set), 2**N of them.
BITMASK_GPUS = 32
BITMASK_NODES = 16

_M1, _M2, _M4, _H01 = 0x5555555555555555, 0x3333333333333333, 0x0F0F0F0F0F0F0F0F, 0x0101010101010101


def popcount(x: torch.Tensor) -> torch.Tensor:
    """Set bits of non-negative int64 values below 2**62 (SWAR; int64 products wrap)."""
    x = x - ((x >> 1) & _M1)
    x = (x & _M2) + ((x >> 2) & _M2)
    x = (x + (x >> 4)) & _M4
    return (x * _H01) >> 56


@dataclass(frozen=True)
class Traffic:
    """The dispatch traffic of one plan on one routing trace.

    remote_nodes: [L] mean distinct remote nodes per token; remote_nodes_p99: [L] its 99th
        percentile; remote_gpus / remote_gpus_p99: the same for distinct GPUs other than
        the source (any node).
    nodes_hist: [L, N] tokens reaching 0, 1, ... N-1 remote nodes (per layer).
    node_matrix: [N, N] float64 inter-node bytes from source node (row) to destination node
        (column), summed over layers; the diagonal is 0 (intra-node bytes are ``intra_node``).
    bytes: link class -> total bytes over all layers and tokens (``inter_node``,
        ``intra_node``, ``inter_node_flat``).
    layer_bytes: [L] inter-node bytes per layer.
    dispatched_load: [L, P] float64 tokens each GPU serves under this dispatcher (it is not
        the even split the balance metrics assume; ``dispatched_imbalance`` says how far).
    token_bytes: bytes one token sends per destination.
    """

    remote_nodes: torch.Tensor
    remote_nodes_p99: torch.Tensor
    remote_gpus: torch.Tensor
    remote_gpus_p99: torch.Tensor
    nodes_hist: torch.Tensor
    node_matrix: torch.Tensor
    bytes: dict
    layer_bytes: torch.Tensor
    dispatched_load: torch.Tensor
    token_bytes: int
    num_tokens: int
    summary: dict = field(default_factory=dict)


def source_gpus(trace: RoutingTrace, cluster: Cluster) -> torch.Tensor:
    """[T] int64 the GPU every token starts on: :meth:`RoutingTrace.source_gpus` over the
    live GPUs (all of them when none failed)."""
    live = torch.tensor(cluster.live_gpus, dtype=torch.int64)
    return live[trace.source_gpus(live.numel())]


def dispatch_table(plan: Plan, cluster: Cluster, layers: slice | None = None) -> torch.Tensor:
    """[L, E, P] int64: the GPU serving expert e for tokens from source GPU g (rule above);
    with ``layers``, the rows of those layers only ([Lc, E, P]).

    Gathers over [L, E, P] only: the slots sorted by (expert, node) give each expert's
    replicas on each node in rank order (slot order), so "the j-th replica on node n" is one
    offset plus j. Slots map to GPUs by the cluster's slot map (uneven counts, failed GPUs).
    """
    layers = layers or slice(None)
    N, P, gpn = cluster.num_nodes, cluster.num_gpus, cluster.gpus_per_node
    p2l = plan.phy2log[layers]                                             # [L, R]
    L, R = p2l.shape
    E = plan.num_experts
    slot_gpu = torch.tensor(cluster.slot_gpus(), dtype=torch.int64)          # [R] the cluster's slot map
    slot_node = slot_gpu // gpn                                             # [R]
    g = torch.arange(P, dtype=torch.int64)
    g_node = g // gpn
    # Replicas of e on node n, in slot order: sort slots by (e, n).
    key = p2l * N + slot_node                                               # [L, R]
    order = torch.sort(key, dim=1, stable=True).indices                     # slots sorted by (e, n)
    cnt_en = torch.zeros(L, E * N, dtype=torch.int64).scatter_add_(1, key, torch.ones_like(key))
    start_en = cnt_en.cumsum(1) - cnt_en                                    # [L, E*N]
    cell = (torch.arange(E).view(E, 1) * N + g_node.view(1, P)).view(1, E * P).expand(L, -1)   # (e, node of g)
    n_node = cnt_en.gather(1, cell).view(L, E, P)
    pos = start_en.gather(1, cell).view(L, E, P) + g.view(1, 1, P) % n_node.clamp_min(1)
    on_node = slot_gpu[order.gather(1, pos.view(L, -1).clamp_max(R - 1))].view(L, E, P)
    # Any replica: the (g mod c)-th in rank order (log2phy).
    c = plan.logcnt[layers].view(L, E, 1)
    log2phy = plan.log2phy[layers]
    anywhere = slot_gpu[log2phy.gather(2, (g.view(1, 1, P) % c).clamp_max(log2phy.shape[2] - 1))]
    out = torch.where(n_node > 0, on_node, anywhere)
    # A replica on the source GPU itself wins.
    here = torch.zeros(L, P * E, dtype=torch.bool)
    here.scatter_(1, slot_gpu.view(1, R) * E + p2l, True)
    here = here.view(L, P, E).transpose(1, 2)                               # [L, E, P]
    return torch.where(here, g.view(1, 1, P).expand(L, E, P), out).contiguous()


def _hist_quantile(hist: torch.Tensor, q: float) -> torch.Tensor:
    """[L] the q-quantile of integer values 0..B-1 from their histogram [L, B]."""
    cum = hist.cumsum(1)
    need = q * hist.sum(1, keepdim=True)
    return (cum < need).sum(1).to(torch.float64)


def _distinct_sorted(values: torch.Tensor, exclude: torch.Tensor, counts: bool = True):
    """Distinct values per row of [M, k] other than ``exclude`` [M] (any range); with
    ``counts`` False, (the sorted rows [M, k], [M, k] bool the first of each such value)."""
    s = values.sort(-1).values
    new = torch.ones_like(s, dtype=torch.bool)
    new[:, 1:] = s[:, 1:] != s[:, :-1]
    new &= s != exclude.unsqueeze(1)
    return new.sum(1) if counts else (s, new)


def traffic_chunks(num_layers: int, num_experts: int, num_tokens: int, top_k: int, cluster: Cluster,
                   use_bits: bool) -> tuple[int, int]:
    """(layers, tokens) per chunk of :func:`traffic` within the working-memory budget
    (:mod:`solvers.memory`); refuses, naming ``routing`` and the budget, when the results
    themselves or one layer's dispatch table do not fit."""
    L, E, T, k = num_layers, num_experts, num_tokens, top_k
    N, P = cluster.num_nodes, cluster.num_gpus
    what = f"the traffic of {L} layers x {E} experts on {N} nodes x {cluster.gpus_per_node} GPUs"
    hint = "score on a smaller cluster or fewer layers"
    # Kept for the whole call: the results (node matrix, per-layer GPU counts and loads,
    # histograms) and the per-token source GPUs.
    kept = N * N * 8 + 3 * L * P * 8 + 2 * L * N * 8 + 4 * T * 8 + (8 * N << N if use_bits else 0)
    # One layer: its dispatch table and the gathers that build it (about a dozen [E, P] int64),
    # the (expert, source) counts, and with bitmasks the (source node, node set) counts.
    layer = 16 * E * P * 8 + (4 * N * 8 << N if use_bits else 0)
    # One (layer, token): its k index, word or destination tensors and the sorts over them.
    cell = (32 if use_bits else 112) * k + 128
    rows = rows_per_chunk(layer + cell, L, "routing", what, hint, fixed_bytes=kept)
    lc = min(rows, LAYER_CHUNK)
    tc = rows_per_chunk(cell * lc, T, "routing", what, hint, fixed_bytes=kept + lc * layer)
    return lc, tc


def traffic(plan: Plan, cluster: Cluster, trace: RoutingTrace, token_bytes: int = 1, *,
            bitmask: bool | None = None) -> Traffic:
    """The dispatch traffic of ``plan`` (valid for ``cluster``) on ``trace``.

    The trace must have the plan's layers and experts. ``token_bytes``: bytes per token and
    destination (the model preset's ``token_bytes``; 1 counts token copies). ``bitmask``
    forces the set representation (None: bitmasks when the cluster allows), for tests.
    Works in chunks of layers and tokens within the working-memory budget
    (:func:`traffic_chunks`); a cluster whose results alone exceed it is refused.
    """
    L, E = plan.num_layers, plan.num_experts
    if trace.num_layers != L or trace.num_experts != E:
        raise PlanError("routing", f"the trace has {trace.num_layers} layers of {trace.num_experts} experts, "
                        f"the plan {L} layers of {E}")
    if isinstance(token_bytes, bool) or not isinstance(token_bytes, int) or token_bytes < 1:
        raise PlanError("token_bytes", f"must be an integer >= 1, got {token_bytes!r}")
    N, P, gpn = cluster.num_nodes, cluster.num_gpus, cluster.gpus_per_node
    T, k = trace.num_tokens, trace.top_k
    fits = P <= BITMASK_GPUS and N <= BITMASK_NODES and gpn <= 16
    # Bitmasks cost N x 2**N counts per layer whatever the tokens; sorted rows cost about
    # T x k: with few tokens on many nodes the rows are the cheaper of the two exact ways.
    use_bits = (fits and N << N <= 64 * T * k) if bitmask is None else bitmask
    if use_bits and not fits:
        raise PlanError("bitmask", f"bitmasks hold at most {BITMASK_GPUS} GPUs, {BITMASK_NODES} nodes and 16 "
                        f"GPUs per node; the cluster has {P}, {N} and {gpn}")
    lc_max, tc_max = traffic_chunks(L, E, T, k, cluster, use_bits)
    plan = plan.to("cpu")
    src = source_gpus(trace, cluster)                                      # [T]
    src_node = src // gpn
    idx_dtype = torch.int32 if lc_max * E * P < 1 << 31 else torch.int64
    lay_off = torch.arange(L, dtype=torch.int64)

    node_matrix = torch.zeros(N, N, dtype=torch.float64)
    node_pairs = torch.zeros(0 if use_bits else N * N, dtype=torch.int64)   # sorted rows: [N * N] counts
    node_sum = torch.zeros(L, dtype=torch.int64)
    nodes_hist = torch.zeros(L, N, dtype=torch.int64)
    gpus_hist = torch.zeros(L * P, dtype=torch.int64)
    intra = torch.zeros(L, dtype=torch.int64)
    flat = torch.zeros(L, dtype=torch.int64)
    dispatched = torch.zeros(L * P, dtype=torch.float64)
    if use_bits:
        keep = ~((1 << src) | (1 << (32 + src_node)))                      # [T] drop the source's own
        lut = popcount(torch.arange(1 << gpn, dtype=torch.int64))               # set bits of a node's GPU mask
        low = (1 << 32) - 1
        bits = ((torch.arange(1 << N).view(-1, 1) >> torch.arange(N)) & 1)   # [2**N, N] nodes of each set
        size = bits.sum(1)                                                  # nodes in each set
    for a in range(0, L, lc_max):
        b = min(L, a + lc_max)
        Lc = b - a
        table = dispatch_table(plan, cluster, slice(a, b))                  # [Lc, E, P]
        per_src_expert = torch.zeros(Lc * E * P, dtype=torch.int64)
        rows = (lay_off[a:b]).view(Lc, 1)
        chunk_off = (torch.arange(Lc, dtype=torch.int64) * E * P).view(-1, 1)
        if use_bits:
            # One word per (layer, expert, source): the destination GPU's bit (bits 0..31) and
            # its node's bit (bits 32..), so one gather and one OR pass give both sets.
            word = ((1 << table) | (1 << (32 + table // gpn))).view(-1)
            node_sets = torch.zeros(Lc * N << N, dtype=torch.int64)        # [Lc, source node, set]
        for t0 in range(0, T, tc_max):
            t1 = min(T, t0 + tc_max)
            Tc = t1 - t0
            s_g, s_n = src[t0:t1], src_node[t0:t1]
            # idx = ((layer * E + expert) * P + source GPU) in one fused add (ids promote from int16).
            layer_src = (chunk_off + s_g.view(1, Tc)).to(idx_dtype).unsqueeze(-1)
            idx = torch.add(layer_src, trace.topk_ids[a:b, t0:t1], alpha=P)   # [Lc, Tc, k]
            per_src_expert += torch.bincount(idx.view(-1), minlength=Lc * E * P)
            if use_bits:
                wb = word[idx]                                             # [Lc, Tc, k]
                w = wb[..., 0].clone()
                for j in range(1, k):
                    w |= wb[..., j]
                w &= keep[t0:t1]                                           # [Lc, Tc]
                key = ((torch.arange(Lc).view(-1, 1) * N + s_n.view(1, Tc)) << N) + (w >> 32)
                node_sets += torch.bincount(key.view(-1), minlength=Lc * N << N)
                gbits = w & low
                g_cnt = popcount(gbits)                                    # [Lc, Tc]
                intra_c = lut[(gbits >> (s_n * gpn).view(1, Tc)) & ((1 << gpn) - 1)].sum(1)
                intra[a:b] += intra_c
                flat[a:b] += g_cnt.sum(1) - intra_c
            else:
                dest = table.view(-1)[idx].view(Lc * Tc, k)
                dnode = dest // gpn
                srcr = s_g.repeat(Lc)
                srcn = s_n.repeat(Lc)
                g_cnt = _distinct_sorted(dest, srcr).view(Lc, Tc)
                same = dnode == srcn.unsqueeze(1)
                intra_rows = _distinct_sorted(torch.where(same, dest, srcr.unsqueeze(1)), srcr)
                intra[a:b] += intra_rows.view(Lc, Tc).sum(1)
                flat[a:b] += (g_cnt.view(-1) - intra_rows).view(Lc, Tc).sum(1)
                s, new = _distinct_sorted(dnode, srcn, counts=False)      # remote nodes, each once
                n_cnt = new.sum(1).view(Lc, Tc)
                # (source node, remote node) pairs, each distinct remote node of a token once
                pair = (srcn.unsqueeze(1) * N + s)[new]
                node_pairs.index_add_(0, pair, torch.ones_like(pair))          # O(pairs), not O(N**2)
                node_sum[a:b] += n_cnt.sum(1)
                nodes_hist.view(-1).add_(torch.bincount((rows * N + n_cnt).view(-1), minlength=L * N))
            gpus_hist.add_(torch.bincount((rows * P + g_cnt).view(-1), minlength=L * P))
        if use_bits:
            sets = node_sets.view(Lc, N, 1 << N)                           # [Lc, source node, set]
            node_matrix += torch.einsum("lsv,vn->sn", sets.to(torch.float64), bits.to(torch.float64))
            per_layer_sets = sets.sum(1)                                   # [Lc, 2**N]
            node_sum[a:b] = per_layer_sets @ size
            nodes_hist[a:b] = torch.zeros(Lc, N, dtype=torch.int64).index_add_(1, size.clamp_max(N - 1),
                                                                              per_layer_sets)
        # Tokens each GPU serves: the (layer, expert, source) counts sent where the table says.
        dest_rows = table + (lay_off[a:b] * P).view(Lc, 1, 1)
        dispatched.index_add_(0, dest_rows.view(-1), per_src_expert.to(torch.float64))

    if not use_bits:
        node_matrix = node_pairs.view(N, N).to(torch.float64)
    node_matrix = node_matrix * token_bytes
    gpus_hist = gpus_hist.view(L, P)
    dispatched = dispatched.view(L, P)
    # in time: the slowest GPU over the best possible time (the mean on identical GPUs)
    speed = torch.tensor(cluster.gpu_speed, dtype=torch.float64)
    ideal = dispatched.sum(1) / cluster.total_speed
    disp_imb = torch.where(ideal > 0, (dispatched / speed).max(1).values / ideal.clamp_min(1e-300),
                           torch.ones_like(ideal))
    gpu_sum = (gpus_hist * torch.arange(P)).sum(1)
    remote_nodes = node_sum.to(torch.float64) / T
    remote_gpus = gpu_sum.to(torch.float64) / T
    layer_bytes = node_sum.to(torch.float64) * token_bytes
    totals = {"inter_node": int(node_sum.sum()) * token_bytes,
              "intra_node": int(intra.sum()) * token_bytes,
              "inter_node_flat": int(flat.sum()) * token_bytes}
    nodes_p99 = _hist_quantile(nodes_hist, 0.99)
    gpus_p99 = _hist_quantile(gpus_hist, 0.99)
    summary = {
        "traffic_tokens": T,
        "token_bytes": token_bytes,
        "remote_nodes_mean": float(remote_nodes.mean()),
        "remote_nodes_p99": float(nodes_p99.max()),
        "remote_gpus_mean": float(remote_gpus.mean()),
        "remote_gpus_p99": float(gpus_p99.max()),
        **{f"{link}_bytes": n for link, n in totals.items()},      # inter_node, intra_node, inter_node_flat
        "dispatched_imbalance_mean": float(disp_imb.mean()),
        "dispatched_imbalance_worst": float(disp_imb.max()),
    }
    return Traffic(remote_nodes, nodes_p99, remote_gpus, gpus_p99, nodes_hist, node_matrix, totals,
                   layer_bytes, dispatched, token_bytes, T, summary)


@dataclass(frozen=True)
class TrafficScore(Score):
    """A :class:`~solvers.scoring.Score` with the dispatch traffic of its plan on a per-token
    routing trace (:class:`Traffic`: distinct remote nodes and GPUs per token, bytes per link
    class, node x node matrix); the summary holds the traffic's headline numbers too."""

    traffic: Traffic | None = None


def trace_token_bytes(routing: RoutingTrace) -> int:
    """Bytes per token of the trace's model preset (``meta['model']``), else 1."""
    preset = MODELS.get(routing.meta.get("model", ""))
    return preset.token_bytes if preset is not None and preset.token_bytes > 0 else 1


def with_traffic(result: Score, plan: Plan, problem: Problem, routing: RoutingTrace,
                 token_bytes: int | None = None) -> TrafficScore:
    """``result`` (the score of ``plan``, valid for ``problem``) with the traffic of ``plan`` on
    ``routing`` added, summary keys too. token_bytes: bytes per token and destination (None:
    the trace's model preset's ``token_bytes`` when it names one, else 1, i.e. token copies)."""
    if not isinstance(routing, RoutingTrace):
        raise PlanError("routing", f"must be a solvers.routing.RoutingTrace, got {type(routing).__name__}")
    tb = token_bytes if token_bytes is not None else trace_token_bytes(routing)
    t = traffic(plan, problem.cluster, routing, tb)
    fields = {f.name: getattr(result, f.name) for f in dataclasses.fields(Score)}
    return TrafficScore(**{**fields, "summary": {**result.summary, **t.summary}}, traffic=t)
