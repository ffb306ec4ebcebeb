"""The scenario objective (sum over a window's steps of each step's max GPU load): its bound
never exceeds the brute-force optimum, and the exact CP-SAT scenario model finds that optimum."""
from __future__ import annotations

import itertools

import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import solvers.dynamics.scenario as scenario
from solvers import Cluster, OptionError, Problem, get_solver, solve
from solvers.clock import FakeClock, fake_clock
from solvers.bounds import lower_bound
from solvers.dynamics.scenario import scenario_bound, scenario_value, shared_count_bound, tail_steps
from solvers.scoring import count_duplicates


def _history(W, E, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 40, (W, 1, E), generator=g).to(torch.float64) * torch.randint(
        1, 4, (1, 1, E), generator=g)


def _brute_force(hist, R, P, nodup, tail=1.0):
    """min over every phy2log row (each expert at least once) of the scenario value (batched)."""
    W, _, E = hist.shape
    rows = torch.tensor(list(itertools.product(range(E), repeat=R)))             # [E^R, R]
    present = torch.zeros(rows.shape[0], E, dtype=torch.bool).scatter_(1, rows, True).all(1)
    rows = rows[present]
    if nodup:
        s = rows.view(-1, P, R // P).sort(-1).values
        rows = rows[~(s[..., 1:] == s[..., :-1]).flatten(1).any(1)]
    return float(scenario_value(hist.expand(W, rows.shape[0], E), rows, P, tail).min())


CASES = [(3, 4, 2, 3, False), (3, 4, 2, 3, True), (4, 6, 2, 3, True), (4, 6, 3, 2, False), (5, 6, 3, 4, True)]


@pytest.mark.parametrize("E,R,P,W,nodup", CASES)
@pytest.mark.parametrize("seed", [0, 1])
def test_scenario_bound_never_exceeds_the_brute_force_optimum(E, R, P, W, nodup, seed):
    hist = _history(W, E, seed)
    p = Problem(hist.sum(0), R, 1, 1, P)
    opt = _brute_force(hist, R, P, nodup)
    bound = float(scenario_bound(p, hist)[0])
    assert bound <= opt * (1 + 1e-12)
    per_step_average = float((hist.sum(2) / P).sum())
    assert bound >= per_step_average * (1 - 1e-9)                     # at least sum_t W_t / P


@pytest.mark.parametrize("E,R,P,W,nodup", CASES)
def test_exact_scenario_model_finds_the_brute_force_optimum(E, R, P, W, nodup):
    if not get_solver("scenario_cpsat").is_available():
        pytest.skip("ortools is not installed")
    hist = _history(W, E, seed=3)
    p = Problem(hist.sum(0), R, 1, 1, P)
    res = solve(p, "scenario_cpsat", history=hist, colocation="forbidden" if nodup else "allowed",
                time_limit=20.0)
    opt = _brute_force(hist, R, P, nodup)
    assert res.info["scenario_optimal"] == [True]
    assert res.info["scenario_value"][0] == pytest.approx(opt, rel=1e-9)
    assert float(scenario_value(hist, res.plan.phy2log, P)[0]) == pytest.approx(opt, rel=1e-9)
    assert float(scenario_bound(p, hist)[0]) <= res.info["scenario_bound"][0] * (1 + 1e-9)
    if nodup:
        assert count_duplicates(res.plan.phy2log, P) == 0


def test_bound_is_tighter_than_the_average_when_one_expert_dominates_a_step():
    hist = torch.tensor([[[90.0, 5, 5, 0]], [[0, 5, 5, 90]]])          # 2 steps, 4 experts, 4 slots, 2 GPUs
    p = Problem(hist.sum(0), 4, 1, 1, 2)
    assert float(scenario_bound(p, hist)[0]) == pytest.approx(180, rel=1e-9)   # the hot expert, each step
    assert float((hist.sum(2) / 2).sum()) == 100


def test_exact_scenario_model_rejects_fractional_loads():
    if not get_solver("scenario_cpsat").is_available():
        pytest.skip("ortools is not installed")
    hist = torch.full((2, 1, 3), 1.5, dtype=torch.float64)
    with pytest.raises(OptionError, match="history"):
        solve(Problem(hist.sum(0), 4, 1, 1, 2), "scenario_cpsat", history=hist, colocation="allowed")


@pytest.mark.parametrize("E,R,P,W,nodup", CASES)
@pytest.mark.parametrize("tail", [0.34, 0.5])
def test_tail_bound_and_exact_tail_model_against_brute_force(E, R, P, W, nodup, tail):
    """CVaR of the per-step max (the worst ceil(tail x W) steps summed): the bound never
    exceeds the brute-force optimum, and the exact model (tail option) finds it."""
    hist = _history(W, E, seed=5)
    p = Problem(hist.sum(0), R, 1, 1, P)
    opt = _brute_force(hist, R, P, nodup, tail)
    assert float(scenario_bound(p, hist, tail)[0]) <= opt * (1 + 1e-12)
    if not get_solver("scenario_cpsat").is_available():
        pytest.skip("ortools is not installed")
    res = solve(p, "scenario_cpsat", history=hist, colocation="forbidden" if nodup else "allowed",
                time_limit=20.0, tail=tail)
    assert res.info["scenario_optimal"] == [True] and res.info["tail_steps"] == tail_steps(W, tail)
    assert res.info["scenario_value"][0] == pytest.approx(opt, rel=1e-9)
    assert float(scenario_value(hist, res.plan.phy2log, P, tail)[0]) == pytest.approx(opt, rel=1e-9)


def test_shared_counts_bound_tighter_than_per_step_counts():
    """Two steps, each with its own hot expert, one spare slot: each step alone would give
    its hot expert the spare replica (45 each), but a plan has one count vector: one step
    keeps its hot expert whole (90), and the bound knows it; brute force agrees."""
    hist = torch.tensor([[[90.0, 5, 5, 0]], [[0, 5, 5, 90]]])           # 5 slots on 5 GPUs
    p = Problem(hist.sum(0), 5, 1, 1, 5)
    per_step = float(lower_bound(Problem(hist.reshape(2, 4), 5, 1, 1, 5)).sum())
    assert per_step == pytest.approx(90.0)
    assert float(shared_count_bound(hist, 5, 5)[0]) == pytest.approx(135.0)
    assert float(scenario_bound(p, hist)[0]) == pytest.approx(135.0)
    assert _brute_force(hist, 5, 5, False) == pytest.approx(135.0)
    assert shared_count_bound(torch.ones(2, 1, 256), 288, 32) is None      # too many count vectors to list


def test_scenario_model_shares_its_time_over_the_layers_and_ends_on_the_time_limit(monkeypatch):
    """A fake layer model that spends whatever limit it is given (fake clock): each of the 4
    layers gets an equal share of the time left (before, the first took all of it and the
    next ones 1 ms); one that finds no plan in its share ends the solve with termination
    time_limit, not error."""
    clock = FakeClock()
    given = []

    def layer_model(w, slots, speeds, nodup, time_limit, threads, tail_k):
        given.append(time_limit)
        clock.advance(time_limit)
        row = [e for e in range(w.shape[1])] * (sum(slots) // w.shape[1])
        return (None, float("inf"), 0.0, False) if len(given) == 3 else (torch.tensor(row).numpy(), 1.0, 1.0, False)

    monkeypatch.setattr(scenario, "_layer_model", layer_model)
    hist = torch.randint(1, 20, (2, 4, 4)).to(torch.float64)
    with fake_clock(clock):
        res = solve(Problem(hist.sum(0), 8, 1, 1, 2), "scenario_cpsat", history=hist, colocation="allowed",
                    time_limit=1.0)
    assert given == pytest.approx([0.25, 0.25, 0.25])
    assert str(res.termination) == "time_limit" and res.plan is None


# Real clusters (per-GPU speeds, uneven slots, failed GPUs): the objective is in time.
def _brute_force_cluster(hist, cluster, nodup, tail=1.0):
    """min over every phy2log row of the cluster's live slots (each expert at least once,
    no expert twice on one GPU with ``nodup``) of the scenario value in time (batched)."""
    W, _, E = hist.shape
    R = cluster.num_replicas
    rows = torch.tensor(list(itertools.product(range(E), repeat=R)))             # [E^R, R]
    present = torch.zeros(rows.shape[0], E, dtype=torch.bool).scatter_(1, rows, True).all(1)
    rows = rows[present]
    if nodup:
        starts = cluster.slot_starts
        clash = torch.zeros(rows.shape[0], dtype=torch.bool)
        for g in cluster.live_gpus:
            s = rows[:, starts[g]:starts[g + 1]].sort(-1).values
            clash |= (s[:, 1:] == s[:, :-1]).any(1)
        rows = rows[~clash]
    return float(scenario_value(hist.expand(W, rows.shape[0], E), rows, cluster.num_gpus, tail, cluster).min())


REAL = [  # (E, W, cluster kwargs: num_gpus, gpu_slots, gpu_speed, failed), nodup
    (3, 3, dict(num_gpus=2, gpu_slots=[3, 2], gpu_speed=[1.5, 1.0]), False),
    (3, 3, dict(num_gpus=2, gpu_slots=[2, 2], gpu_speed=[1.4, 1.0]), True),
    (4, 2, dict(num_gpus=3, gpu_slots=[2, 2, 2], gpu_speed=[2.0, 1.0, 1.0], failed=[1]), False),
    (3, 3, dict(num_gpus=3, gpu_slots=[1, 2, 2], gpu_speed=[1.0, 0.5, 1.25]), True),
    (4, 2, dict(num_gpus=2, gpu_slots=[4, 2], gpu_speed=[1.0, 1.0]), False),
]


def _real_problem(hist, kw):
    cluster = Cluster(1, kw["num_gpus"], gpu_slots=kw["gpu_slots"], gpu_speed=kw["gpu_speed"], failed=kw.get("failed"))
    return Problem(hist.sum(0), cluster=cluster), cluster


@pytest.mark.parametrize("E,W,kw,nodup", REAL)
@pytest.mark.parametrize("seed", [0, 1])
def test_scenario_bound_in_time_never_exceeds_the_brute_force_optimum(E, W, kw, nodup, seed):
    hist = _history(W, E, seed)
    p, cluster = _real_problem(hist, kw)
    opt = _brute_force_cluster(hist, cluster, nodup)
    bound = float(scenario_bound(p, hist)[0])
    assert bound <= opt * (1 + 1e-12)
    assert bound >= float((hist.sum(2) / cluster.total_speed).sum()) * (1 - 1e-9)   # sum_t W_t / total speed


@pytest.mark.parametrize("E,W,kw,nodup", REAL)
@pytest.mark.parametrize("tail", [1.0, 0.5])
def test_exact_scenario_model_in_time_finds_the_brute_force_optimum(E, W, kw, nodup, tail):
    if not get_solver("scenario_cpsat").is_available():
        pytest.skip("ortools is not installed")
    hist = _history(W, E, seed=3)
    p, cluster = _real_problem(hist, kw)
    res = solve(p, "scenario_cpsat", history=hist, colocation="forbidden" if nodup else "allowed",
                time_limit=20.0, tail=tail)
    opt = _brute_force_cluster(hist, cluster, nodup, tail)
    assert res.info["scenario_optimal"] == [True]
    assert res.info["scenario_value"][0] == pytest.approx(opt, rel=1e-9)
    assert float(scenario_value(hist, res.plan.phy2log, cluster.num_gpus, tail, cluster)[0]) == pytest.approx(opt, rel=1e-9)
    assert res.info["scenario_bound"][0] <= opt * (1 + 1e-9)                         # CP-SAT's bound, in time
    assert float(scenario_bound(p, hist, tail)[0]) <= opt * (1 + 1e-12)
    p.validate_plan(res.plan)                                                         # uneven slots, none on a failed GPU
    if nodup:
        assert count_duplicates(res.plan.phy2log, cluster.num_gpus, p.slot_gpu()) == 0


def test_a_fast_gpu_takes_the_hot_expert_in_time():
    """One step, loads 6, 1, 1 on two GPUs of 2 slots, speeds 2 and 1: both replicas of the hot
    expert on the fast GPU take 6 / 2 = 3 (the slow one 2 / 1), where the token-balanced plan
    (the hot expert split, loads 4 and 4) takes 4 on the slow GPU."""
    if not get_solver("scenario_cpsat").is_available():
        pytest.skip("ortools is not installed")
    hist = torch.tensor([[[6.0, 1, 1]]])
    cluster = Cluster(1, 2, gpu_slots=[2, 2], gpu_speed=[2.0, 1.0])
    res = solve(Problem(hist.sum(0), cluster=cluster), "scenario_cpsat", history=hist, colocation="allowed")
    assert res.info["scenario_value"][0] == pytest.approx(_brute_force_cluster(hist, cluster, False))
    assert res.info["scenario_value"][0] == pytest.approx(3.0)
    assert res.plan.phy2log[0, :2].tolist() == [0, 0]
    balanced = torch.tensor([[0, 1, 0, 2]])                    # tokens 4 and 4
    assert float(scenario_value(hist, balanced, 2, cluster=cluster)[0]) == pytest.approx(4.0)


def test_exact_scenario_model_refuses_a_speed_that_is_no_small_ratio():
    if not get_solver("scenario_cpsat").is_available():
        pytest.skip("ortools is not installed")
    hist = torch.ones(2, 1, 3)
    cluster = Cluster(1, 2, gpu_slots=[2, 2], gpu_speed=[2 ** 0.5, 1.0])
    with pytest.raises(OptionError, match="gpu_speed"):
        solve(Problem(hist.sum(0), cluster=cluster), "scenario_cpsat", history=hist, colocation="allowed")


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 3), st.integers(2, 3),
       st.lists(st.tuples(st.integers(0, 3), st.sampled_from([0.5, 1.0, 1.4, 2.0])), min_size=2, max_size=3),
       st.booleans(), st.sampled_from([1.0, 0.5]), st.integers(0, 10 ** 6))
def test_scenario_bound_and_exact_model_in_time_against_brute_force(W, E, gpus, nodup, tail, seed):
    """Random tiny real clusters (slot counts 0-3, i.e. failed GPUs too; speeds 0.5-2): the
    bound in time never exceeds the brute-force optimum, and the exact model proves it."""
    slots = [c for c, _ in gpus]
    speed = [s for _, s in gpus]
    assume(E <= sum(slots) <= 6 and (not nodup or max(slots) <= E))
    hist = _history(W, E, seed)
    cluster = Cluster(1, len(gpus), gpu_slots=slots, gpu_speed=speed)
    p = Problem(hist.sum(0), cluster=cluster)
    opt = _brute_force_cluster(hist, cluster, nodup, tail)
    assert float(scenario_bound(p, hist, tail)[0]) <= opt * (1 + 1e-12)
    if not get_solver("scenario_cpsat").is_available():
        return
    res = solve(p, "scenario_cpsat", history=hist, colocation="forbidden" if nodup else "allowed",
                time_limit=30.0, threads=1, tail=tail)
    assert res.info["scenario_optimal"] == [True]
    assert res.info["scenario_value"][0] == pytest.approx(opt, rel=1e-9, abs=1e-12)
    assert res.info["scenario_bound"][0] <= opt * (1 + 1e-9) + 1e-12
