"""The bandwidth-sharing transfer model: makespan = largest port load, reached by fluid sharing;
LP sources against every integral choice (brute force), against the rounds model."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from solvers.errors import OptionError
from solvers.transfers import schedule_transfers
from solvers.transfers.schedule import Copies, links_of, schedule_copies
from solvers.transfers.sharing import PORTS, port_loads, schedule_shared, share_sources, shared_makespan
from solvers.network import Network

from test_transfers import random_copies, random_plans

B = 1_000_000


def fluid_rates_fit(copies: Copies, src: np.ndarray, network: Network, nbytes: int, makespan: float) -> bool:
    """Every copy at rate nbytes / makespan from 0 to makespan: no port carries more than its bandwidth."""
    link = links_of(copies, src)
    bw = np.array([network.intra_node_bw, network.inter_node_bw, network.host_bw or np.nan])
    rate = nbytes / makespan
    used: dict[tuple, float] = {}
    for i in range(len(copies)):
        c = int(link[i])
        if src[i] >= 0:
            used[("send", int(src[i]), c)] = used.get(("send", int(src[i]), c), 0.0) + rate
        used[("recv", int(copies.dst[i]), c)] = used.get(("recv", int(copies.dst[i]), c), 0.0) + rate
    return all(v <= bw[k[2]] * (1 + 1e-9) for k, v in used.items())


def brute_force_shared(copies: Copies, network: Network, nbytes: int) -> float:
    """The best integral source choice by enumeration (makespan = largest port load)."""
    host = network.host_bw is not None
    options = [list(np.flatnonzero(row)) + ([-1] if host else []) for row in copies.candidates]
    return min(shared_makespan(copies, np.array(c, dtype=np.int64), network, nbytes)
               for c in itertools.product(*options))


@pytest.mark.parametrize("host", [None, 30e9])
def test_shared_makespan_is_the_port_bound_and_fluid_sharing_reaches_it(host):
    rng = np.random.default_rng(3)
    net = Network(100e9, 20e9, host)
    for _ in range(20):
        copies = random_copies(rng, P=6, Q=3, M=int(rng.integers(1, 8)), holders=int(rng.integers(1, 3)))
        sched = schedule_shared(copies, net, B)
        loads = port_loads(copies, sched.src, net, B)
        assert sched.makespan == pytest.approx(loads.max()) and sched.gap == 0
        assert fluid_rates_fit(copies, sched.src, net, B, sched.makespan)
        assert not fluid_rates_fit(copies, sched.src, net, B, sched.makespan * 0.99)   # and nothing shorter fits
        opt = brute_force_shared(copies, net, B)
        assert sched.info["lp_seconds"] <= opt * (1 + 1e-9) and opt <= sched.makespan * (1 + 1e-12)
        assert np.all(copies.candidates[np.flatnonzero(sched.src >= 0), sched.src[sched.src >= 0]])
        if host is None:
            assert np.all(sched.src >= 0)


def test_lp_rounding_is_optimal_when_the_lp_is_integral():
    # GPU 0 holds everything; GPUs 1 and 2 hold half each: the LP spreads 4 copies to GPU 3 over
    # three senders, but the receiver's port (4 x intra) binds either way.
    cand = np.zeros((4, 4), dtype=bool)
    cand[:, 0] = True
    cand[:2, 1] = True
    cand[2:, 2] = True
    copies = Copies(np.zeros(4, np.int64), np.arange(4), np.full(4, 3), cand, 4, 4)
    net = Network(100e9, 10e9)
    sched = schedule_shared(copies, net, B)
    assert sched.makespan == pytest.approx(4 * B / 100e9) == pytest.approx(sched.info["lp_seconds"])
    assert dict(zip(PORTS, port_loads(copies, sched.src, net, B)[3]))["recv_intra"] == pytest.approx(sched.makespan)


def test_sharing_never_exceeds_rounds_with_the_same_sources_and_schedule_transfers_picks_the_model():
    net = Network(400e9, 50e9)
    for seed in range(4):
        old, new = random_plans(seed, P=8)
        rounds = schedule_transfers(old, new, 8, 4, B, net, model="rounds")
        shared = schedule_transfers(old, new, 8, 4, B, net, model="shared")
        assert rounds.model == "rounds" and shared.model == "shared" and shared.moves == rounds.moves
        # the rounds schedule meets its own port loads one copy at a time, so it is never shorter
        assert shared_makespan(rounds.copies, rounds.src, net, B) <= rounds.makespan * (1 + 1e-12)
        assert shared.info["lp_seconds"] <= shared_makespan(rounds.copies, rounds.src, net, B) * (1 + 1e-9)
        rows = shared.rows()
        assert all(r["start_s"] == 0 and r["end_s"] == pytest.approx(shared.makespan) for r in rows)
    with pytest.raises(OptionError, match="transfer_model"):
        schedule_transfers(old, new, 8, 4, B, net, model="fluid")


def test_no_copies_share_nothing():
    copies = Copies(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros((0, 4), bool), 4, 2)
    src, lp = share_sources(copies, Network(), B)
    assert len(src) == 0 and lp == 0
    assert schedule_shared(copies, Network(), B).makespan == 0
    assert schedule_copies(copies, Network(), B).makespan == 0


def test_shared_sources_do_not_depend_on_the_expert_size():
    # the source LP runs in units of a copy's time: one-byte and 100 GB experts choose the same
    # sources, and the makespans scale with the size (seconds of 1e-11 once fell under its tolerance)
    rng = np.random.default_rng(7)
    net = Network(400e9, 50e9, 60e9)
    for _ in range(10):
        copies = random_copies(rng, P=8, Q=4, M=int(rng.integers(4, 30)), holders=int(rng.integers(1, 4)))
        tiny, huge = schedule_shared(copies, net, 1), schedule_shared(copies, net, 10**11)
        assert np.array_equal(tiny.src, huge.src)
        assert tiny.makespan * 10**11 == pytest.approx(huge.makespan, rel=1e-9)
        assert tiny.info["lp_seconds"] * 10**11 == pytest.approx(huge.info["lp_seconds"], rel=1e-6)
