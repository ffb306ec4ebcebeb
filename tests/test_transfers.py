"""Transfer schedules: König colouring, sources, rounds, bounds, the exact model, the network."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from benchmarks.transfers import check_schedule
from solvers import Plan
from solvers.cluster import Cluster
from solvers.errors import OptionError, ProblemError
from solvers.network import DEFAULT_NETWORK, Network
from solvers.transfers import exact_schedule, schedule_transfers
from solvers.transfers.schedule import (Copies, colour_edges, links_of, lower_bounds, max_degree, needed_copies,
                                        schedule_copies)

B = 1_000_000


def _partitions(items):
    """Every set partition of ``items`` (lists of blocks)."""
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for part in _partitions(rest):
        for i in range(len(part)):
            yield part[:i] + [[first] + part[i]] + part[i + 1:]
        yield [[first]] + part


def brute_force(copies: Copies, network: Network, nbytes: int) -> float:
    """The optimal makespan by enumeration: every source choice, every partition into rounds."""
    P = copies.num_gpus
    host = network.host_bw is not None
    options = [list(np.flatnonzero(row)) + ([-1] if host else []) for row in copies.candidates]
    dur = np.array([nbytes / network.intra_node_bw, nbytes / network.inter_node_bw,
                    nbytes / network.host_bw if host else np.nan])
    best = np.inf
    idx = list(range(len(copies)))
    for choice in itertools.product(*options):
        src = np.array(choice, dtype=np.int64)
        d = dur[links_of(copies, src)]
        sender = np.where(src < 0, P + copies.dst, src)
        for part in _partitions(idx):
            if any(len(set(sender[b])) < len(b) or len(set(copies.dst[b])) < len(b) for b in part):
                continue
            best = min(best, sum(max(d[b]) for b in part))
    return float(best)


def random_copies(rng, P: int, Q: int, M: int, holders: int = 2) -> Copies:
    dst = rng.integers(0, P, M)
    cand = np.zeros((M, P), dtype=bool)
    for i in range(M):
        pool = [g for g in range(P) if g != dst[i]]
        cand[i, rng.choice(pool, size=min(holders, len(pool)), replace=False)] = True
    return Copies(np.zeros(M, dtype=np.int64), np.arange(M, dtype=np.int64), dst.astype(np.int64), cand, P, Q)


def random_plans(seed: int, L: int = 3, E: int = 12, P: int = 4, S: int = 4) -> tuple[Plan, Plan]:
    g = torch.Generator().manual_seed(seed)
    R = P * S
    out = []
    for _ in range(2):
        rows = []
        for _ in range(L):
            extra = torch.randint(0, E, (R - E,), generator=g)
            row = torch.cat([torch.arange(E), extra])[torch.randperm(R, generator=g)]
            rows.append(row)
        out.append(Plan.from_phy2log(torch.stack(rows), E))
    return out[0], out[1]


def test_koenig_colouring_uses_max_degree_colours():
    rng = np.random.default_rng(0)
    for trial in range(30):
        n_s, n_d, M = rng.integers(1, 9), rng.integers(1, 9), rng.integers(0, 120)
        src, dst = rng.integers(0, n_s, M), rng.integers(0, n_d, M)
        colour, D = colour_edges(src, dst, n_s, n_d)
        assert D == max_degree(src, dst, n_s, n_d)
        assert M == 0 or (colour.min() >= 0 and colour.max() < D)
        assert len(set(zip(src.tolist(), colour.tolist()))) == M          # a matching per colour
        assert len(set(zip(dst.tolist(), colour.tolist()))) == M


@pytest.mark.parametrize("host", [False, True])
def test_brute_force_agrees_with_exact_and_bounds_hold(host):
    net = Network(400e9, 50e9, 60e9 if host else None)
    rng = np.random.default_rng(1 + host)
    for trial in range(6):
        copies = random_copies(rng, P=4, Q=2, M=int(rng.integers(2, 6)), holders=int(rng.integers(1, 3)))
        opt = brute_force(copies, net, B)
        heur = schedule_copies(copies, net, B)
        exact = exact_schedule(copies, net, B, time_limit=20)
        check_schedule(heur)
        check_schedule(exact)
        assert exact.info["proven"]
        assert exact.makespan == pytest.approx(opt, rel=1e-9)
        assert heur.makespan >= opt * (1 - 1e-12)
        for sched in (heur, exact):
            assert sched.bound <= sched.makespan * (1 + 1e-12)
        assert heur.bounds["any_source"] <= opt * (1 + 1e-12)
        assert exact.info["exact_bound_seconds"] <= opt * (1 + 1e-6)


def test_single_link_class_is_proven_optimal():
    """One node and fixed sources (one holder per expert): rounds = largest degree = bound."""
    for seed in range(5):
        old, new = random_plans(seed, L=4, E=12, P=4, S=3)
        sched = schedule_transfers(old, new, num_gpus=4, gpus_per_node=4, expert_bytes=B)
        check_schedule(sched)
        assert set(sched.link.tolist()) <= {0}
        assert sched.makespan == pytest.approx(sched.bound, rel=1e-12)
        assert len(sched.round_seconds) == max_degree(sched.src, sched.copies.dst, 4, 4)


def test_bound_never_exceeds_makespan_and_copies_match_moves():
    from solvers import Problem, score

    for seed in range(8):
        old, new = random_plans(seed, L=3, E=16, P=8, S=3)
        net = Network(300e9, 25e9, 40e9 if seed % 2 else None)
        sched = schedule_transfers(old, new, num_gpus=8, gpus_per_node=2, expert_bytes=B, network=net)
        check_schedule(sched)
        assert sched.bounds["load"] <= sched.bounds["rounds"] * (1 + 1e-12)
        assert sched.bound <= sched.makespan * (1 + 1e-12)
        assert sched.bounds["any_source"] <= sched.makespan * (1 + 1e-12)
        sc = score(Problem(torch.ones(3, 16), 24, 1, 4, 8), new, previous=old)
        assert sched.moves == sc.moves
        assert sched.makespan == pytest.approx(float(sched.round_seconds.sum()))
        rows = sched.rows()
        assert len(rows) == sched.moves and rows[-1]["end_s"] <= sched.makespan * (1 + 1e-12)


def test_sources_prefer_the_same_node():
    # expert 0 on GPUs 0 (node 0) and 2 (node 1); GPU 1 (node 0) needs it: intra from GPU 0
    old = torch.tensor([[0, 1, 2, 0]])
    new = torch.tensor([[1, 0, 2, 0]])
    sched = schedule_transfers(old, new, num_gpus=4, gpus_per_node=2, expert_bytes=B)
    assert sched.moves == 2                    # GPU 0 gets 1, GPU 1 gets 0
    by_dst = {int(d): (int(s), int(k)) for d, s, k in zip(sched.copies.dst, sched.src, sched.link)}
    assert by_dst[1] == (0, 0)
    assert by_dst[0] == (1, 0)


def test_no_copies_no_time():
    p = torch.tensor([[0, 1, 2, 3]])
    sched = schedule_transfers(p, p, num_gpus=2, gpus_per_node=1, expert_bytes=B)
    assert sched.moves == 0 and sched.makespan == 0 and sched.bound == 0


def test_network_checks_and_cluster_field():
    assert Cluster(1, 8, 16).network == DEFAULT_NETWORK
    net = Network.from_gbps(intra=100, inter=10, host=20)
    assert net.intra_node_bw == 100e9 and net.host_bw == 20e9 and net.links() == ("intra", "inter", "host")
    assert Cluster(2, 8, 16, network=net).network is net
    for bad in (0, -1, float("nan"), "fast", True):
        with pytest.raises(ProblemError, match="intra_node_bw"):
            Network(intra_node_bw=bad)
    with pytest.raises(ProblemError, match="network"):
        Cluster(1, 8, 16, network={"intra": 1})
    with pytest.raises(OptionError, match="expert_bytes"):
        schedule_transfers(torch.zeros(1, 4, dtype=torch.int64), torch.zeros(1, 4, dtype=torch.int64), 2, 1, 0)
    with pytest.raises(OptionError, match="previous"):
        needed_copies(torch.zeros(1, 4, dtype=torch.int64), torch.zeros(2, 4, dtype=torch.int64), 2, 1)


def test_lower_bounds_by_hand():
    # intra copies take 1 s, inter 4 s. GPU 0 (node 0) sends two copies to GPU 1 (intra) and
    # one to GPU 3 (inter); GPU 2 (node 1) sends two to GPU 1 (inter). GPU 1 receives
    # 2 x 1 + 2 x 4 = 10 s; 2 rounds hold inter copies, 2 more the intra ones: 10 s.
    # (4 MB experts over 4 MB/s and 1 MB/s links: bandwidths stay in their documented range)
    net, nbytes = Network(4e6, 1e6), 4_000_000
    cand = np.zeros((5, 4), dtype=bool)
    cand[:3, 0] = True
    cand[3:, 2] = True
    copies = Copies(np.zeros(5, dtype=np.int64), np.arange(5), np.array([1, 1, 3, 1, 1]), cand, 4, 2)
    src = np.array([0, 0, 0, 2, 2])
    b = lower_bounds(copies, src, links_of(copies, src), net, nbytes)
    assert b["load"] == pytest.approx(10.0)
    assert b["rounds"] == pytest.approx(10.0)
    sched = schedule_copies(copies, net, nbytes)
    check_schedule(sched)
    assert sched.makespan == pytest.approx(10.0)
    assert brute_force(copies, net, nbytes) == pytest.approx(10.0)


def test_holder_bound_counts_copies_that_must_leave_few_gpus():
    from solvers.transfers.schedule import _holder_bound

    cand = np.zeros((7, 4), dtype=bool)
    cand[:3, 0] = True                      # 3 copies only GPU 0 holds
    cand[3:, :2] = True                     # 4 more held by GPUs 0 and 1: 7 copies leave 2 GPUs
    assert _holder_bound(cand) == 4
    copies = Copies(np.zeros(7, dtype=np.int64), np.arange(7), np.array([2, 3, 2, 3, 2, 3, 2]), cand, 4, 4)
    net = Network(1e6, 1e6)
    sched = schedule_copies(copies, net, 1_000_000)
    assert sched.bounds["any_source"] >= 4.0 and sched.makespan >= sched.bounds["any_source"]
