"""Weight-transfer schedules: which copies a re-plan needs, from where, in which round, how long.

From the plan in force (``previous``) and a new plan, a *copy* is a (layer, expert, GPU)
the new plan holds and the old one did not (the shared scorer's moves). Its *source* is
any GPU holding that (layer, expert) in the plan in force, or the receiver's host memory
when the network has ``host_bw``. A copy's link class follows from its source: ``intra``
(same node), ``inter`` (another node) or ``host``; it lasts ``expert_bytes / bandwidth``.

Schedule model (vLLM's rule): copies run in rounds; in a round every GPU sends at most one
copy and receives at most one (a host source is the receiver's own PCIe link, one copy at a
time); a round lasts its longest copy; rounds run back to back; the makespan is the sum of
the rounds' durations. Copies of all layers are scheduled together (packing P2P ops across
layers). Senders keep their old weights readable until the swap after the last round.

Lower bounds (valid for every schedule of the model):

- ``load``: the busiest GPU's copy time in or out, summed per link class (bytes over
  bandwidth); this is the issue's "busiest GPU" bound;
- ``rounds``: with classes by decreasing duration d_1 > d_2 > ..., at least D_k rounds
  last >= d_k, D_k the largest degree of the copies of the k slowest classes; so
  ``makespan >= sum_k (D_k - D_(k-1)) d_k``. It is >= the load bound (Abel summation), and
  exact for one class (König: the rounds equal the largest degree);
- ``any_source``: the ``rounds`` bound on the receivers only, each copy counted in the
  fastest class any of its sources offers, and (without host memory) a senders' bound: for
  every holder set S, the copies held only inside S leave through its |S| GPUs, one at a
  time each, at least as slowly as an intra-node copy; valid whichever sources are chosen.

``bound`` is the best valid bound for the sources chosen (``rounds``); ``gap`` is
``makespan / bound - 1``.

Heuristic (:func:`schedule_copies`): sources by an earliest-finish greedy (fewest
candidates first; the source minimising the larger of its send time and the receiver's
time after the copy; ties to the faster link); then per class, slowest first, König's
colouring of that class's copies (the fewest rounds, :func:`colour_edges`), and faster copies
are packed into those rounds greedily where both ends are free (largest remaining degree
first). Exact (:func:`exact_schedule`): a CP-SAT model choosing sources and rounds, for
small instances; it proves the optimum or reports its bound.
"""
from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..backends import cpsat_solver
from ..clock import TimeUp, check_deadline, clock
from ..errors import OptionError
from ..network import DEFAULT_NETWORK, Network
from ..options import check_expert_bytes
from ..safewrite import write_atomic, write_text_atomic
from ..scoring import gpu_presence

INTRA, INTER, HOST = 0, 1, 2
LINK_NAMES = ("intra", "inter", "host")


@dataclass(frozen=True)
class Copies:
    """The copies a re-plan needs. layer, expert, dst: [M] int64; candidates: [M, P] bool,
    the GPUs holding (layer, expert) in the plan in force; num_gpus, gpus_per_node."""

    layer: np.ndarray
    expert: np.ndarray
    dst: np.ndarray
    candidates: np.ndarray
    num_gpus: int
    gpus_per_node: int

    def __len__(self) -> int:
        return len(self.dst)

    def take(self, keep: np.ndarray) -> "Copies":
        """The copies where ``keep`` [M] bool is True."""
        return Copies(self.layer[keep], self.expert[keep], self.dst[keep], self.candidates[keep], self.num_gpus,
                      self.gpus_per_node)


def _p2l(plan: Any) -> np.ndarray:
    p2l = plan.phy2log if hasattr(plan, "phy2log") else plan
    if isinstance(p2l, torch.Tensor):
        p2l = p2l.detach().cpu().numpy()
    return np.asarray(p2l, dtype=np.int64)


def _slot_map(slot_gpu: Any, R: int, num_gpus: int, param: str) -> np.ndarray | None:
    """[R] int64 GPU of every slot (None: R/P consecutive slots per GPU), checked once here."""
    if slot_gpu is None:
        if R % num_gpus:
            raise OptionError(param, f"is needed: {R} slots do not split evenly over {num_gpus} GPUs")
        return None
    g = _p2l(slot_gpu).reshape(-1)
    if len(g) != R:
        raise OptionError(param, f"must give the GPU of each of the plan's {R} slots, got {len(g)}")
    if len(g) and (g.min() < 0 or g.max() >= num_gpus):
        raise OptionError(param, f"GPU ids must be in [0, {num_gpus}), got {int(g.min())}..{int(g.max())}")
    return g


def needed_copies(previous: Any, plan: Any, num_gpus: int, gpus_per_node: int, num_experts: int | None = None,
                  slot_gpu: Any = None, previous_slot_gpu: Any = None) -> Copies:
    """The copies taking ``previous`` (a Plan or phy2log [L, R']) to ``plan`` ([L, R]): one
    per (layer, GPU, expert) the new plan holds and the old did not, in (layer, GPU, expert)
    order: the shared scorer's moves (:func:`solvers.scoring.new_pairs`), each plan's slots
    mapped to GPUs by its own cluster.

    slot_gpu: [R] the GPU of every slot of the new plan (a cluster with uneven slots or
    failed GPUs: ``Cluster.slot_gpus()``); None: R/P consecutive slots per GPU.
    previous_slot_gpu: [R'] the plan in force's, when it was made for other slots (before
    GPUs failed, or before they came back); default ``slot_gpu``.

    Candidates are the GPUs holding (layer, expert) in the plan in force *and* holding a slot
    of the new plan: a GPU with none (failed, or drained) sends nothing, so a replica it held
    comes from another live holder or from host memory. A GPU back from a failure held
    nothing: its slots start empty (every expert it gets is a copy)."""
    old, new = _p2l(previous), _p2l(plan)
    if old.ndim != 2 or new.ndim != 2 or old.shape[0] != new.shape[0] or (
            previous_slot_gpu is None and old.shape != new.shape):
        raise OptionError("previous", f"has shape {tuple(old.shape)}, the plan {tuple(new.shape)}")
    E = int(max(old.max(), new.max())) + 1 if num_experts is None else num_experts
    new_map = _slot_map(slot_gpu, new.shape[1], num_gpus, "slot_gpu")
    old_map = new_map if previous_slot_gpu is None else _slot_map(previous_slot_gpu, old.shape[1], num_gpus,
                                                                  "previous_slot_gpu")
    had, has = (gpu_presence(torch.from_numpy(x), E, num_gpus, None if g is None else torch.from_numpy(g)).numpy()
                for x, g in ((old, old_map), (new, new_map)))                       # [L, P, E] each
    if new_map is not None:                 # a GPU with no slot in the new plan sends nothing
        had &= (np.bincount(new_map, minlength=num_gpus) > 0)[None, :, None]
    # A pair new to its GPU: a dead GPU holds nothing new, so masking `had` adds no copy.
    layer, dst, expert = np.nonzero(has & ~had)                                     # [M] each
    cand = had[layer, :, expert]                                                    # [M, P] live holders
    return Copies(layer.astype(np.int64), expert.astype(np.int64), dst.astype(np.int64), cand, num_gpus,
                  gpus_per_node)


class NoSourceError(OptionError):
    """Copies that no GPU can send (their only holders failed) and no host memory to copy
    them from: no schedule exists on this network. ``detail``: what lacks a source."""

    def __init__(self, detail: str):
        self.detail = detail
        super().__init__("host_bw", f"{detail}; no schedule without host memory as a source (host_bw)")


def check_sources(copies: Copies, network: Network) -> None:
    """Raise :class:`NoSourceError` (param ``host_bw``) when a copy has no live holder and
    the network has no host memory: such a copy has no source, so no schedule exists."""
    if network.host_bw is not None or len(copies) == 0:
        return
    orphan = np.flatnonzero(~copies.candidates.any(1))
    if len(orphan):
        i = int(orphan[0])
        raise NoSourceError(f"{len(orphan)} of {len(copies)} copies have no source: no live GPU holds their "
                            f"expert (e.g. layer {int(copies.layer[i])} expert {int(copies.expert[i])} for GPU "
                            f"{int(copies.dst[i])}: the GPUs that held it failed)")


@dataclass
class TransferSchedule:
    """A schedule of copies (module docstring).

    copies: the :class:`Copies`; src: [M] sending GPU (-1: host memory); link: [M] 0 intra,
    1 inter, 2 host; round: [M] round of each copy; round_seconds: [K] duration of each
    round; makespan: seconds; bounds: {"load", "rounds", "any_source"} in seconds;
    expert_bytes; method ("heuristic" or "exact"), info (the exact model's status and bound)
    and the network timed; model: ``rounds`` (one peer per GPU and direction at a time) or
    ``shared`` (:mod:`.sharing`: every copy runs from 0 to the makespan, sharing the links).
    """

    copies: Copies
    src: np.ndarray
    link: np.ndarray
    round: np.ndarray
    round_seconds: np.ndarray
    makespan: float
    bounds: dict[str, float]
    expert_bytes: int
    method: str = "heuristic"
    info: dict[str, Any] = field(default_factory=dict)
    network: Network = DEFAULT_NETWORK
    model: str = "rounds"

    @property
    def bound(self) -> float:
        """The best lower bound valid for the sources chosen (``rounds`` >= ``load``)."""
        return max(self.bounds["rounds"], self.bounds["load"])

    @property
    def gap(self) -> float:
        """makespan / bound - 1 (0 within float rounding: the makespan is never below a bound)."""
        gap = self.makespan / self.bound - 1 if self.bound > 0 else 0.0
        return 0.0 if abs(gap) < 1e-12 else gap

    @property
    def copy_seconds(self) -> np.ndarray:
        """[M] seconds of each copy over its link."""
        return self.expert_bytes / _bandwidths(self.network)[self.link] if len(self.link) else np.zeros(0)

    @property
    def moves(self) -> int:
        return len(self.copies)

    @property
    def total_bytes(self) -> int:
        return len(self.copies) * self.expert_bytes

    def summary(self) -> dict[str, Any]:
        """Plain numbers for reports and JSON."""
        per_link = np.bincount(self.link, minlength=3) if len(self.link) else np.zeros(3, dtype=np.int64)
        return {"moves": self.moves, "bytes": self.total_bytes, "rounds": int(len(self.round_seconds)),
                "makespan_seconds": self.makespan, "bound_seconds": self.bound,
                "bound_load_seconds": self.bounds["load"], "bound_any_source_seconds": self.bounds["any_source"],
                "gap": self.gap, "copies_intra": int(per_link[INTRA]), "copies_inter": int(per_link[INTER]),
                "copies_host": int(per_link[HOST]), "method": self.method, "model": self.model, **self.info}

    def rows(self) -> list[dict[str, Any]]:
        """One row per copy, in round order: round, start and end seconds, layer, expert,
        source GPU (-1: host), destination GPU, link, bytes."""
        start = np.concatenate([[0.0], np.cumsum(self.round_seconds)])
        order = np.lexsort((self.copies.dst, self.round))
        # shared: every copy runs from 0 to the makespan at its share of the links
        dur = self.copy_seconds if self.model == "rounds" else np.full(len(self.link), self.makespan)
        return [{"round": int(self.round[i]), "start_s": float(start[self.round[i]]),
                 "end_s": float(start[self.round[i]] + dur[i]), "layer": int(self.copies.layer[i]),
                 "expert": int(self.copies.expert[i]), "src_gpu": int(self.src[i]), "dst_gpu": int(self.copies.dst[i]),
                 "link": LINK_NAMES[int(self.link[i])], "bytes": self.expert_bytes} for i in order]


def _bandwidths(network: Network) -> np.ndarray:
    """[3] bytes/s of intra, inter, host (host: NaN without host memory)."""
    return np.array([network.intra_node_bw, network.inter_node_bw,
                     network.host_bw if network.host_bw is not None else math.nan])


def _durations(network: Network, expert_bytes: int) -> np.ndarray:
    return expert_bytes / _bandwidths(network)


def _fastest(copies: Copies, network: Network, dur: np.ndarray) -> np.ndarray:
    """[M] the fastest link class each copy can use: intra when a holder shares its receiver's
    node, else inter; host memory when it is faster still. dur: [3] seconds per class."""
    node = np.arange(copies.num_gpus) // copies.gpus_per_node
    same = (copies.candidates & (node[None, :] == (copies.dst // copies.gpus_per_node)[:, None])).any(1)
    fastest = np.where(same, INTRA, INTER)
    if network.host_bw is not None:         # host memory: faster, or the only source (no live holder)
        fastest = np.where((dur[HOST] < dur[fastest]) | ~copies.candidates.any(1), HOST, fastest)
    return fastest


def links_of(copies: Copies, src: np.ndarray) -> np.ndarray:
    """[M] link class of each copy from its source (-1: host)."""
    Q = copies.gpus_per_node
    same = (src // Q) == (copies.dst // Q)
    return np.where(src < 0, HOST, np.where(same, INTRA, INTER)).astype(np.int64)


def choose_sources(copies: Copies, network: Network, expert_bytes: int) -> np.ndarray:
    """[M] the source of every copy (-1: host memory), by the earliest-finish greedy."""
    M, P = len(copies), copies.num_gpus
    Q = copies.gpus_per_node
    dur = _durations(network, expert_bytes)
    host = network.host_bw is not None
    src = np.full(M, -1, dtype=np.int64)
    if M == 0:
        return src
    node = np.arange(P) // Q
    # the fastest class each copy can use, and so the least time its receiver must spend
    best = dur[_fastest(copies, network, dur)]
    recv = np.bincount(copies.dst, weights=best, minlength=P)                           # [P] seconds
    send = np.zeros(P)
    order = np.argsort(copies.candidates.sum(1), kind="stable")
    cand_lists = [np.flatnonzero(row) for row in copies.candidates]
    for i in order.tolist():
        r = int(copies.dst[i])
        cs = cand_lists[i]
        if len(cs) == 0:                   # no live holder: host memory (check_sources ran)
            src[i] = -1
            recv[r] += dur[HOST] - best[i]
            continue
        d = np.where(node[cs] == node[r], dur[INTRA], dur[INTER])                          # [C]
        key = np.maximum(send[cs] + d, recv[r] + d - best[i])
        j = int(np.lexsort((cs, d, key))[0])
        choice, cost, extra = int(cs[j]), float(key[j]), float(d[j])
        if host and max(recv[r] + dur[HOST] - best[i], 0.0) < cost:
            src[i] = -1
            recv[r] += dur[HOST] - best[i]
            continue
        src[i] = choice
        send[choice] += extra
        recv[r] += extra - best[i]
    return src


def _round_bound(dur_by_class: np.ndarray, link: np.ndarray, ends: list[tuple[np.ndarray, int]]) -> float:
    """sum_k (D_k - D_(k-1)) d_k over classes by decreasing duration; ``ends``: the vertex
    arrays (ids, count) whose degrees count (senders and receivers, or receivers only)."""
    present = [c for c in range(3) if np.any(link == c)]
    present.sort(key=lambda c: -dur_by_class[c])
    total, prev = 0.0, 0
    chosen = np.zeros(len(link), dtype=bool)
    for c in present:
        chosen |= link == c
        D = max(int(np.bincount(v[chosen], minlength=n).max()) for v, n in ends)
        total += (D - prev) * dur_by_class[c]
        prev = D
    return total


def lower_bounds(copies: Copies, src: np.ndarray, link: np.ndarray, network: Network,
                 expert_bytes: int) -> dict[str, float]:
    """The ``load``, ``rounds`` and ``any_source`` bounds of the module docstring (seconds)."""
    P, Q = copies.num_gpus, copies.gpus_per_node
    dur = _durations(network, expert_bytes)
    if len(copies) == 0:
        return {"load": 0.0, "rounds": 0.0, "any_source": 0.0}
    d = dur[link]
    sender = np.where(src < 0, P + copies.dst, src)          # a host copy uses the receiver's host link
    load = max(np.bincount(sender, weights=d, minlength=2 * P).max(), np.bincount(copies.dst, weights=d,
                                                                                minlength=P).max())
    rounds = _round_bound(dur, link, [(sender, 2 * P), (copies.dst, P)])
    any_source = _round_bound(dur, _fastest(copies, network, dur), [(copies.dst, P)])
    if network.host_bw is None:                 # every copy leaves a GPU: the senders' Hall bound
        any_source = max(any_source, _holder_bound(copies.candidates) * float(np.nanmin(dur)))
    return {"load": float(load), "rounds": float(rounds), "any_source": float(any_source)}


def _holder_bound(candidates: np.ndarray) -> int:
    """The copies some GPU must send whichever holders serve them: for every holder set S of
    a copy, the copies whose holders all lie in S leave through S's |S| GPUs, so one of them
    sends at least ceil(n_S / |S|). candidates: [M, P] bool."""
    sets, count = np.unique(candidates, axis=0, return_counts=True)             # [U, P], [U]
    best = 0
    for lo in range(0, len(sets), 256):                                          # [256, U, P] at a time
        inside = ~(sets[None, :, :] & ~sets[lo:lo + 256, None, :]).any(2)        # [u, U]: set U within set u
        n = inside.astype(np.int64) @ count
        best = max(best, int(np.max(-(-n // sets[lo:lo + 256].sum(1)))))
    return best


# Rounds -----------------------------------------------------------------------------------------
# A round is a matching between senders and receivers (each GPU sends at most one copy and
# receives at most one). With copies of one duration and fixed sources, the fewest rounds is
# the colouring number of the bipartite multigraph (senders, receivers, one edge per copy),
# which König's theorem puts at its largest degree. colour_edges reaches it in O(edges x
# vertices): each edge takes a colour free at both ends, after swapping two colours along an
# alternating path when needed (a Kempe chain; in a bipartite graph the chain never returns to
# the edge's other end, so the swap is always safe).


def max_degree(src: np.ndarray, dst: np.ndarray, num_src: int, num_dst: int) -> int:
    """The largest degree of the bipartite multigraph with edges ``src[i] -> dst[i]``."""
    if len(src) == 0:
        return 0
    return int(max(np.bincount(src, minlength=num_src).max(), np.bincount(dst, minlength=num_dst).max()))


def colour_edges(src: np.ndarray, dst: np.ndarray, num_src: int, num_dst: int) -> tuple[np.ndarray, int]:
    """A proper edge colouring of the bipartite multigraph ``src[i] -> dst[i]`` ([M] int
    arrays, sender ids < num_src, receiver ids < num_dst) with exactly ``max_degree``
    colours. Returns (colour [M] int64 in 0..D-1, D)."""
    M = len(src)
    D = max_degree(src, dst, num_src, num_dst)
    colour = np.full(M, -1, dtype=np.int64)
    if M == 0:
        return colour, 0
    V = num_src + num_dst
    # at[v][c]: the edge of colour c at vertex v (-1: c is free at v); vertices: senders, then receivers
    at = [[-1] * D for _ in range(V)]
    ends = [(int(s), num_src + int(d)) for s, d in zip(src.tolist(), dst.tolist())]
    for i, (u, v) in enumerate(ends):
        au, av = at[u], at[v]
        a = au.index(-1)                   # free at u
        if av[a] != -1:                    # a is taken at v: take a colour b free at v
            b = av.index(-1)
            if au[b] == -1:
                a = b
            else:                          # swap a and b along the a/b chain that starts at v
                path = []
                x, c = v, a
                while True:
                    e = at[x][c]
                    if e == -1:
                        break
                    path.append(e)
                    p, q = ends[e]
                    x = q if p == x else p
                    c = b if c == a else a
                for e in path:             # clear first, then set: chain edges share vertices
                    p, q = ends[e]
                    at[p][colour[e]] = -1
                    at[q][colour[e]] = -1
                for e in path:
                    colour[e] = b if colour[e] == a else a
                    p, q = ends[e]
                    at[p][colour[e]] = e
                    at[q][colour[e]] = e
        colour[i] = a
        au[a] = i
        av[a] = i
    return colour, D


def _greedy_pack(src: np.ndarray, dst: np.ndarray, pending: np.ndarray, busy_s: np.ndarray, busy_r: np.ndarray,
                 priority: np.ndarray) -> np.ndarray:
    """Indices of pending edges added to a round whose busy senders/receivers are given:
    repeatedly every edge that comes first (by priority) at both its free ends joins."""
    chosen = []
    cand = pending[~busy_s[src[pending]] & ~busy_r[dst[pending]]]
    while len(cand):
        order = cand[np.lexsort((cand, -priority[cand]))]
        _, first_s = np.unique(src[order], return_index=True)
        _, first_r = np.unique(dst[order], return_index=True)
        win_s = np.zeros(len(order), dtype=bool)
        win_s[first_s] = True
        win_r = np.zeros(len(order), dtype=bool)
        win_r[first_r] = True
        take = order[win_s & win_r]
        chosen.append(take)
        busy_s[src[take]] = True
        busy_r[dst[take]] = True
        cand = cand[~busy_s[src[cand]] & ~busy_r[dst[cand]]]
    return np.concatenate(chosen) if chosen else np.zeros(0, dtype=np.int64)


def assign_rounds(copies: Copies, src: np.ndarray, link: np.ndarray, network: Network,
                  expert_bytes: int) -> tuple[np.ndarray, np.ndarray]:
    """(round [M], round_seconds [K]) for fixed sources: per class, slowest first, König's
    colouring of its remaining copies, then faster copies packed into those rounds."""
    M, P = len(copies), copies.num_gpus
    dur = _durations(network, expert_bytes)
    rnd = np.full(M, -1, dtype=np.int64)
    seconds: list[float] = []
    if M == 0:
        return rnd, np.zeros(0)
    sender = np.where(src < 0, P + copies.dst, src)
    dst = copies.dst
    classes = sorted({int(c) for c in link}, key=lambda c: -dur[c])
    for c in classes:
        todo = np.flatnonzero((link == c) & (rnd < 0))
        if len(todo) == 0:
            continue
        colour, K = colour_edges(sender[todo], dst[todo], 2 * P, P)
        base = len(seconds)
        rnd[todo] = base + colour
        seconds.extend([float(dur[c])] * K)
        faster = [f for f in classes if dur[f] < dur[c]]
        if not faster:
            continue
        for k in range(K):
            pending = np.flatnonzero(np.isin(link, faster) & (rnd < 0))
            if len(pending) == 0:
                break
            deg_s = np.bincount(sender[pending], minlength=2 * P)
            deg_r = np.bincount(dst[pending], minlength=P)
            priority = np.maximum(deg_s[sender], deg_r[dst]) * (4 * M + 1) + deg_s[sender] + deg_r[dst]
            in_round = todo[colour == k]
            busy_s = np.zeros(2 * P, dtype=bool)
            busy_r = np.zeros(P, dtype=bool)
            busy_s[sender[in_round]] = True
            busy_r[dst[in_round]] = True
            rnd[_greedy_pack(sender, dst, pending, busy_s, busy_r, priority)] = base + k
    return rnd, np.asarray(seconds)


def _finish(copies: Copies, src: np.ndarray, rnd: np.ndarray, network: Network, expert_bytes: int,
            method: str, info: dict[str, Any] | None = None) -> TransferSchedule:
    """Compact the rounds (drop empty ones), time them from their copies, bound them."""
    link = links_of(copies, src)
    dur = _durations(network, expert_bytes)
    used, rnd = np.unique(rnd, return_inverse=True) if len(rnd) else (np.zeros(0, dtype=np.int64), rnd)
    secs = np.zeros(len(used))
    if len(rnd):
        np.maximum.at(secs, rnd, dur[link])
        order = np.argsort(-secs, kind="stable")          # slowest rounds first (any order is valid)
        rnd = np.argsort(order)[rnd]
        secs = secs[order]
    return TransferSchedule(copies, src, link, rnd.astype(np.int64), secs, float(secs.sum()),
                            lower_bounds(copies, src, link, network, expert_bytes), int(expert_bytes), method,
                            info or {}, network)


def schedule_copies(copies: Copies, network: Network, expert_bytes: int) -> TransferSchedule:
    """The heuristic schedule of ready-made copies (sources by the greedy, rounds by class)."""
    check_sources(copies, network)
    src = choose_sources(copies, network, expert_bytes)
    rnd, _ = assign_rounds(copies, src, links_of(copies, src), network, expert_bytes)
    return _finish(copies, src, rnd, network, expert_bytes, "heuristic")


def _check_bytes(expert_bytes: Any) -> int:
    """The shared expert_bytes rule, and more: a schedule needs a size (None is no default
    here) and a positive one (copies of 0 bytes take no time, so no round order or source
    choice would mean anything, and the exact model's grid is a share of the slowest copy)."""
    value = check_expert_bytes(expert_bytes)
    if value is None or value <= 0:
        raise OptionError("expert_bytes", f"must be a positive integer (bytes of one expert), got {expert_bytes!r}")
    return int(value)


# Exact model ------------------------------------------------------------------------------------

# Largest instance the exact model takes (copies): beyond, it would not prove anything in seconds.
EXACT_MAX_COPIES = 200
# Seconds to build one (copy, source, round) boolean with its rows in OR-Tools' Python layer
# (2 cores: 142 copies x 69 rounds, 13,600 booleans, built in 1.6 s at load 12). A model
# whose estimate exceeds 80 % of the time limit is not built (no time would be left to search).
EXACT_SECONDS_PER_BOOLEAN = 1.2e-4


def exact_schedule(copies: Copies, network: Network, expert_bytes: int, *, time_limit: float = 10.0,
                   threads: int = 1, seed: int = 0, hint: TransferSchedule | None = None) -> TransferSchedule:
    """CP-SAT: sources and rounds minimising the makespan (durations on an integer grid of
    1e-6 of the slowest copy; the makespan is re-timed exactly). ``hint``: a schedule to
    start from (and its makespan caps the rounds).

    ``time_limit`` covers building the model too (it is built copy by copy against that
    deadline). The result is never worse than the hint: the better of the two schedules,
    and info's ``exact_bound_seconds`` (valid for every schedule, whatever the sources) the
    better of CP-SAT's bound and the hint's any-source bound, ``exact_gap`` the makespan's gap
    to it, ``proven`` when that gap is 0. Above :data:`EXACT_MAX_COPIES` copies, or when the
    model cannot be built in time, the hint is returned with a ``note`` saying why.
    info: status, proven, exact_bound_seconds, exact_gap (and note)."""
    expert_bytes = _check_bytes(expert_bytes)
    start = clock()
    M, P, Q = len(copies), copies.num_gpus, copies.gpus_per_node
    hint = hint or schedule_copies(copies, network, expert_bytes)
    if M > EXACT_MAX_COPIES:
        return _kept(hint, "NOT_RUN", None, f"{M} copies, over the exact model's cap of {EXACT_MAX_COPIES}: "
                     "the heuristic schedule")
    if M == 0:
        return _kept(hint, "OPTIMAL", 0.0)
    from ortools.sat.python import cp_model

    check_sources(copies, network)
    deadline = start + time_limit
    dur = _durations(network, expert_bytes)
    scale = 1e6 / np.nanmax(dur)
    idur = np.where(np.isnan(dur), 0, np.round(dur * scale)).astype(np.int64)
    # rounds: no optimal schedule has an empty round, and each lasts >= the fastest copy
    K = int(min(M, math.floor(hint.makespan / np.nanmin(dur) + 1e-9)))
    node = np.arange(P) // Q
    # estimated before building: one boolean per (copy, source, round), each with its rows
    booleans = K * int(copies.candidates.sum() + (M if network.host_bw is not None else 0))
    if booleans * EXACT_SECONDS_PER_BOOLEAN > 0.8 * time_limit:
        return _kept(hint, "NOT_BUILT", None, f"model not built: {booleans} variables ({M} copies, {K} rounds) "
                     f"need about {booleans * EXACT_SECONDS_PER_BOOLEAN:.1f} s to build, over the time limit of "
                     f"{time_limit:g} s: the heuristic schedule")
    m = cp_model.CpModel()
    choices: list[list[tuple[int, int, Any]]] = []     # per copy: (source, round, var)
    send: dict[tuple[int, int], list] = {}
    recv: dict[tuple[int, int], list] = {}
    try:
        rdur = [m.NewIntVar(0, int(idur.max()), f"d{k}") for k in range(K)]
        for i in range(M):
            check_deadline(deadline)
            r = int(copies.dst[i])
            sources = [int(s) for s in np.flatnonzero(copies.candidates[i])]
            if network.host_bw is not None:
                sources.append(-1)
            opts = []
            for s in sources:
                c = HOST if s < 0 else (INTRA if node[s] == node[r] else INTER)
                for k in range(K):
                    x = m.NewBoolVar(f"x{i}_{s}_{k}")
                    opts.append((s, k, x))
                    send.setdefault((P + r if s < 0 else s, k), []).append(x)
                    recv.setdefault((r, k), []).append(x)
                    m.Add(rdur[k] >= int(idur[c])).OnlyEnforceIf(x)
            m.AddExactlyOne([x for _, _, x in opts])
            choices.append(opts)
        check_deadline(deadline)
        for xs in list(send.values()) + list(recv.values()):
            m.AddAtMostOne(xs)
        for k in range(K - 1):
            m.Add(rdur[k] >= rdur[k + 1])                  # rounds slowest first: symmetry
        m.Minimize(sum(rdur))
        for i, opts in enumerate(choices):                 # the hint's rounds are slowest first too
            check_deadline(deadline)
            for s, k, x in opts:
                m.AddHint(x, int(s == hint.src[i] and k == hint.round[i]))
    except TimeUp:
        return _kept(hint, "NOT_BUILT", None, f"model not built within the time limit ({M} copies, {K} rounds): "
                     "the heuristic schedule")
    solver = cpsat_solver(max(0.05, deadline - clock()), threads, seed)
    status = solver.Solve(m)
    name = solver.StatusName(status)
    bound = float(solver.BestObjectiveBound()) / scale
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return _kept(hint, name, bound)
    src = np.zeros(M, dtype=np.int64)
    rnd = np.zeros(M, dtype=np.int64)
    for i, opts in enumerate(choices):
        s, k, _ = next(o for o in opts if solver.Value(o[2]))
        src[i], rnd[i] = s, k
    out = _finish(copies, src, rnd, network, expert_bytes, "exact")
    if out.makespan > hint.makespan:                   # grid rounding can only tie; keep the better
        out = hint
    return _kept(out, name, bound, method="exact")


def _kept(sched: TransferSchedule, status: str, cpsat_bound: float | None, note: str | None = None,
          method: str | None = None) -> TransferSchedule:
    """``sched`` with the exact model's outcome in its info: the better of CP-SAT's bound and
    its own any-source bound (both valid for every schedule), the gap to it, proven when 0."""
    bound = sched.bounds["any_source"]
    if cpsat_bound is not None and math.isfinite(cpsat_bound):
        bound = max(bound, cpsat_bound)
    gap = sched.makespan / bound - 1 if bound > 0 else (0.0 if sched.makespan == 0 else math.inf)
    gap = 0.0 if abs(gap) < 1e-9 else gap
    proven = status == "OPTIMAL" or gap == 0.0
    info = {"status": status, "proven": proven, "exact_bound_seconds": bound, "exact_gap": gap}
    if note:
        info["note"] = note
    return dataclasses.replace(sched, info=info, method=method or sched.method)


# Files -----------------------------------------------------------------------------------------

SCHEDULE_FORMAT = "eplb-transfers"


def schedule_document(sched: TransferSchedule) -> dict[str, Any]:
    """The JSON document of a schedule (docs/formats.md): format, version, the network in
    bytes/s, the summary (moves, bytes, rounds, makespan, bounds, gap, copies per link) and
    one row per copy in round order."""
    return {"format": SCHEDULE_FORMAT, "version": 1, "network": sched.network.as_dict(),
            "expert_bytes": sched.expert_bytes, "summary": sched.summary(),
            "round_seconds": sched.round_seconds.tolist(), "copies": sched.rows()}


COPY_COLUMNS = ("round", "start_s", "end_s", "layer", "expert", "src_gpu", "dst_gpu", "link", "bytes")


def write_schedule(path: Any, sched: TransferSchedule) -> None:
    """Write ``sched`` to ``path`` atomically (:mod:`solvers.safewrite`): ``.json``
    (:func:`schedule_document`) or ``.csv`` (one row per copy, columns :data:`COPY_COLUMNS`)."""
    path = Path(path)
    if path.suffix == ".json":
        write_text_atomic(path, json.dumps(schedule_document(sched), indent=1))
    elif path.suffix == ".csv":
        def write(tmp: Path) -> None:
            with tmp.open("w", newline="") as fh:
                writer = csv.DictWriter(fh, fieldnames=list(COPY_COLUMNS))
                writer.writeheader()
                writer.writerows(sched.rows())

        write_atomic(path, write)                  # a temporary file renamed: never half a schedule
    else:
        raise OptionError("out", f"a transfer schedule is written as .json or .csv, got {path.name[:80]!r}")
