"""The bandwidth-sharing transfer model: concurrent copies share each GPU's links.

The rounds model (:mod:`.schedule`) follows vLLM's rule: one send and one receive per GPU at
a time. Here instead every copy may run at once and a GPU's bandwidth of each direction and
link class (docs/dynamics.md, "Bandwidth sharing") is shared by the copies crossing it:

- ports: a GPU's NVLink send and receive (``intra``), its NIC send and receive (``inter``),
  and the receiver's PCIe link from host memory (``host``); the classes are separate links,
  so a GPU may send over NVLink and its NIC at the same time;
- the *load* of a port is the seconds its copies take one after another at full bandwidth:
  ``copies x expert_bytes / bandwidth``.

With the sources fixed, the makespan is **the largest port load**, ``T* = max_port load``.
Proof: no schedule ends sooner, because a port moves at most ``bandwidth`` bytes a second,
so its bytes need at least its load; and ``T*`` is reached by fluid sharing: run every copy
from time 0 at the constant rate ``expert_bytes / T*``; a port carrying n copies of class c
then carries ``n x expert_bytes / T*`` bytes a second, which is at most its bandwidth
because ``n x expert_bytes / bandwidth <= T*``; every copy ends at ``T*``. So in this model
the schedule always equals its load bound: the only choice left is the sources.

Sources (:func:`share_sources`): minimise the largest port load. Copies with the same
receiver and the same holders are interchangeable, so the linear program has one variable
per (such group, holder): how many of the group's copies that holder sends. Its optimum is
a lower bound over every choice of sources (``any_source``), and it is reached exactly when
a copy may be split between holders (each sends part of the weights); one source per copy
is then taken by rounding each group's amounts (largest remainder), and the gap to the LP
is reported.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..network import Network
from .schedule import HOST, INTER, INTRA, Copies, TransferSchedule, _bandwidths, check_sources, links_of

# Port kinds, in the column order of :func:`port_loads`.
PORTS = ("send_intra", "send_inter", "recv_intra", "recv_inter", "recv_host")


def port_loads(copies: Copies, src: np.ndarray, network: Network, expert_bytes: int) -> np.ndarray:
    """[P, 5] seconds each GPU's ports (:data:`PORTS`) need for the copies with sources
    ``src`` [M] (-1: host memory), every copy at full bandwidth one after another."""
    P = copies.num_gpus
    out = np.zeros((P, len(PORTS)))
    if len(copies) == 0:
        return out
    link = links_of(copies, src)
    dur = expert_bytes / _bandwidths(network)                                       # [3] seconds per copy
    gpu = src >= 0
    for c, col in ((INTRA, 0), (INTER, 1)):
        sel = gpu & (link == c)
        out[:, col] = np.bincount(src[sel], minlength=P) * dur[c]
    for c, col in ((INTRA, 2), (INTER, 3), (HOST, 4)):
        sel = link == c
        if sel.any():
            out[:, col] = np.bincount(copies.dst[sel], minlength=P) * dur[c]
    return out


def shared_makespan(copies: Copies, src: np.ndarray, network: Network, expert_bytes: int) -> float:
    """The makespan of fluid sharing with sources ``src``: the largest port load (module docstring)."""
    return float(port_loads(copies, src, network, expert_bytes).max()) if len(copies) else 0.0


def share_sources(copies: Copies, network: Network, expert_bytes: int) -> tuple[np.ndarray, float]:
    """(src [M], lp_seconds): sources minimising the largest port load, by the linear program
    of the module docstring rounded to one source per copy; ``lp_seconds`` is the LP optimum
    (a lower bound on the makespan of every source choice)."""
    check_sources(copies, network)
    M, P, Q = len(copies), copies.num_gpus, copies.gpus_per_node
    if M == 0:
        return np.zeros(0, dtype=np.int64), 0.0
    dur = expert_bytes / _bandwidths(network)                                       # [3]
    host = network.host_bw is not None
    key = np.concatenate([copies.dst[:, None], copies.candidates], 1)              # [M, 1 + P]
    groups, group_of, count = np.unique(key, axis=0, return_inverse=True, return_counts=True)
    group_of = group_of.reshape(-1)
    G = len(groups)
    dst = groups[:, 0]                                                              # [G]
    holds = groups[:, 1:].astype(bool)                                              # [G, P]
    g_idx, s_idx = np.nonzero(holds)                                                # one variable per (group, holder)
    same = (s_idx // Q) == (dst[g_idx] // Q)
    cls = np.where(same, INTRA, INTER)
    if host:                                                                        # and one per group from host memory
        g_idx = np.concatenate([g_idx, np.arange(G)])
        s_idx = np.concatenate([s_idx, np.full(G, -1)])
        cls = np.concatenate([cls, np.full(G, HOST)])
    V = len(g_idx)
    # scipy's LP loads here, not with the module: `eplb score` without --previous never needs it
    import scipy.optimize
    import scipy.sparse

    # the LP in units of the longer GPU copy: in seconds its coefficients (1-byte experts: 1e-11 s)
    # fell under the solver's tolerances and the sources stopped depending on the loads
    unit = float(max(dur[INTRA], dur[INTER]))
    secs = dur[cls] / unit                                                          # [V] copy time in units
    # rows: send ports (s, intra|inter) = 2P, receive ports (r, intra|inter|host) = 3P
    gpu = s_idx >= 0
    send_row = np.where(cls == INTRA, 0, P) + np.where(gpu, s_idx, 0)
    recv_row = 2 * P + cls * P + dst[g_idx]
    rows = np.concatenate([send_row[gpu], recv_row])
    cols = np.concatenate([np.flatnonzero(gpu), np.arange(V)])
    vals = np.concatenate([secs[gpu], secs])
    ports = scipy.sparse.csr_matrix((vals, (rows, cols)), shape=(5 * P, V + 1)).tolil()
    ports[:, V] = -1.0                                                              # port load - T <= 0
    supply = scipy.sparse.csr_matrix((np.ones(V), (g_idx, np.arange(V))), shape=(G, V + 1))
    cost = np.zeros(V + 1)
    cost[V] = 1.0
    res = scipy.optimize.linprog(cost, A_ub=ports.tocsr(), b_ub=np.zeros(5 * P), A_eq=supply, b_eq=count.astype(float),
                                 bounds=[(0, None)] * (V + 1), method="highs")
    if res.status != 0:
        raise RuntimeError(f"the source LP failed: {res.message}")                 # a feasible LP: a solver fault
    amount = res.x[:V]
    # one source per copy: floor each group's amounts, the rest to the largest remainders
    whole = np.floor(amount + 1e-9)
    short = count - np.bincount(g_idx, weights=whole, minlength=G)                  # [G] copies left per group
    frac = amount - whole
    order = np.lexsort((-frac, g_idx))                                              # by group, largest remainder first
    rank = np.empty(V, dtype=np.int64)
    starts = np.searchsorted(g_idx[order], np.arange(G))
    rank[order] = np.arange(V) - starts[g_idx[order]]
    whole += rank < np.round(short[g_idx]).astype(np.int64)
    # hand the group's copies to its sources in turn
    src = np.empty(M, dtype=np.int64)
    by_group = np.argsort(group_of, kind="stable")
    reps = whole.astype(np.int64)
    var_order = np.lexsort((np.arange(V), g_idx))
    src_seq = np.repeat(s_idx[var_order], reps[var_order])                          # [M], grouped like by_group
    if len(src_seq) != M:
        raise RuntimeError(f"rounding the source LP gave {len(src_seq)} copies for {M}")
    src[by_group] = src_seq
    return src, float(res.x[V]) * unit


def schedule_shared(copies: Copies, network: Network, expert_bytes: int) -> TransferSchedule:
    """The bandwidth-sharing schedule: LP sources, every copy from 0 to the makespan (the
    largest port load). bounds: ``load`` and ``rounds`` are that makespan (the model meets its
    load bound), ``any_source`` the LP optimum."""
    src, lp = share_sources(copies, network, expert_bytes)
    makespan = shared_makespan(copies, src, network, expert_bytes)
    info: dict[str, Any] = {"lp_seconds": lp}
    return TransferSchedule(copies, src, links_of(copies, src), np.zeros(len(copies), dtype=np.int64),
                            np.array([makespan]) if len(copies) else np.zeros(0), makespan,
                            {"load": makespan, "rounds": makespan, "any_source": min(lp, makespan)},
                            int(expert_bytes), "heuristic", info, network, model="shared")
