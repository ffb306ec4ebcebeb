"""Time limits of the exact solvers hold with model building counted; the exact transfer
schedule is never worse than the heuristic one; valid inputs that once crashed work.

No test here reads the real clock for its verdict: deadlines are injected (a fake clock that
has already passed them, or one that advances at every reading), or a model is provably too
big for the limit by its estimate (:mod:`solvers.exact.budget`)."""
import json

import numpy as np
import pytest
import torch

from solvers import Problem, get_solver, solve
from solvers.cli import main
from solvers.clock import FakeClock, clock, fake_clock
from solvers.exact import budget, cpsat, milp
from solvers.exact.budget import NOT_BUILT, build_seconds
from solvers.exact.model import build_layer, default_warm_plan, exact_options, layer_problem_bound
from solvers.network import Network
from solvers.result import Termination
from solvers.transfers import exact_schedule, schedule_transfers
from solvers.transfers.schedule import EXACT_MAX_COPIES, _kept

BACKENDS = ["cpsat", "highs", "cbc"]


def backend(name):
    if not get_solver(name).is_available():
        pytest.skip(f"{name} not installed")


def mixed(layers=2, experts=24, slots=32, seed=0):
    """Lognormal loads on 2 x 4 GPUs, half of them 1.4x faster."""
    g = torch.Generator().manual_seed(seed)
    w = (torch.exp(torch.randn(layers, experts, generator=g, dtype=torch.float64)) * 1000).round()
    return Problem(w, slots, 1, 2, 8, gpu_speed=[1.0] * 4 + [1.4] * 4)


@pytest.mark.parametrize("name", BACKENDS)
def test_deadline_passed_before_any_build_returns_the_warm_start_and_says_so(name):
    backend(name)
    p = mixed()
    warm = solve(p, "kk_swap")                       # the warm start on a real cluster
    # every reading of the clock moves it 10 s: the 3 s limit is spent before any model is built
    with fake_clock(FakeClock(step=10.0)):
        r = solve(p, name, time_limit=3)
    assert r.termination is Termination.TIME_LIMIT
    assert f"{NOT_BUILT}: 0 of 2 layers built" in r.message
    assert all(i["solution"] == "warm_start" and i.get("not_built") for i in r.info["layers"])
    assert r.info["layers_not_built"] == 2 and r.info["layers_modelled"] == 0
    assert torch.equal(r.score.max_time, warm.score.max_time)          # kk_swap's placement, GPU by GPU
    assert torch.equal(r.plan.logcnt, warm.plan.logcnt)
    assert bool((r.lower_bound <= r.score.max_time * (1 + 1e-9)).all())


@pytest.mark.parametrize("name", BACKENDS)
def test_the_build_stops_at_the_deadline(name, monkeypatch):
    """With estimates of 0 every layer is started; a clock that advances 0.05 s at every
    reading passes the deadline while the first model is built (it reads the clock between
    experts): the build gives up there, and the solve ends within the limit of fake time."""
    backend(name)
    monkeypatch.setattr(budget, "BUILD_SECONDS_PER_VARIABLE", dict.fromkeys(BACKENDS, 0.0))
    monkeypatch.setattr(budget, "HANDOVER_SECONDS_PER_VARIABLE", dict.fromkeys(BACKENDS, 0.0))
    monkeypatch.setattr(budget, "BUILD_SECONDS_FIXED", dict.fromkeys(BACKENDS, 0.0))
    p = mixed(layers=1, experts=48, slots=64)
    with fake_clock(FakeClock(step=0.05)) as c:
        start = c.now
        r = solve(p, name, time_limit=5.0)
        spent = c.now - start
    (layer,) = r.info["layers"]
    assert layer["not_built"] and layer["build_s"] > 0 and layer["solution"] == "warm_start"
    assert NOT_BUILT in r.message and r.termination is Termination.TIME_LIMIT
    assert spent <= 5.0 + 0.2                        # a reading or two past the limit, not the whole model


def test_a_model_too_big_for_the_limit_by_its_estimate_is_not_built():
    backend("cpsat")
    w = torch.exp(torch.randn(3, 256, generator=torch.Generator().manual_seed(1), dtype=torch.float64)) * 100
    p = Problem(w, 288, 1, 1, 32)
    opts = exact_options(p, get_solver("cpsat").parse({"time_limit": 0.2}))
    warm, others = default_warm_plan(p, opts)
    lm = build_layer(p, 0, opts, warm, None, float(layer_problem_bound(p, opts, None)[0]), False, others)
    assert build_seconds(lm, "cpsat") > 0.2          # provably too big for the limit
    r = solve(p, "cpsat", time_limit=0.2)
    assert r.termination is Termination.TIME_LIMIT and f"{NOT_BUILT}: 0 of 3 layers built" in r.message
    # the warm start (kk_swap's estimate does not fit a quarter of 0.2 s: DeepSeek's plan alone)
    ds = solve(p, "deepseek", policy="global")
    assert bool((r.objective <= ds.objective * (1 + 1e-12)).all())


def test_layer_solvers_refuse_to_build_past_their_deadline():
    backend("cpsat")
    p = mixed(layers=1)
    opts = exact_options(p, get_solver("cpsat").parse({"time_limit": 5}))
    warm, others = default_warm_plan(p, opts)
    lm = build_layer(p, 0, opts, warm, None, float(layer_problem_bound(p, opts, None)[0]), False, others)
    past = clock() - 1.0
    res = cpsat.solve_layer(lm, time_limit=5, threads=1, seed=0, gap=0.0, deadline=past)
    assert res.status == "time_limit" and res.xg is None and res.message == NOT_BUILT and res.stats["not_built"]
    if get_solver("highs").is_available():
        res = milp.layer_solver("highs")(lm, time_limit=5, threads=1, seed=0, gap=0.0, deadline=past)
        assert res.status == "time_limit" and res.xg is None and res.stats["not_built"]


def test_warm_start_meeting_the_bound_is_optimal_without_a_model():
    backend("cpsat")
    p = Problem([[4, 4, 4, 4, 4, 4, 4, 4]], 8, 1, 1, 4)       # two experts a GPU: W / P is reached
    with fake_clock(FakeClock(step=10.0)):                      # no time to build anything
        r = solve(p, "cpsat", time_limit=1)
    assert r.termination is Termination.OPTIMAL and r.info["layers_proven_by_warm_start"] == 1
    assert r.info["layers"][0]["solution"] == "warm_start" and r.gap_max < 1e-9


# The exact transfer schedule ------------------------------------------------------------------

def _copies_case(layers=1, experts=16, gpus=4, seed=0):
    """A re-plan's copies: previous = DeepSeek's plan, new = kk_swap's on other loads."""
    g = torch.Generator().manual_seed(seed)
    a = torch.exp(torch.randn(layers, experts, generator=g)) * 100
    b = torch.exp(torch.randn(layers, experts, generator=g)) * 100
    R = experts + gpus
    old = solve(Problem(a, R, 1, 2, gpus), "deepseek", policy="global").plan
    new = solve(Problem(b, R, 1, 2, gpus), "kk_swap", policy="global").plan
    net = Network(intra_node_bw=100e9, inter_node_bw=10e9)
    return schedule_transfers(old, new, gpus, gpus // 2, 1 << 20, net, num_experts=experts), net


def test_exact_schedule_keeps_the_better_schedule_and_bound():
    backend("cpsat")
    heur, net = _copies_case()
    assert 0 < len(heur.copies) <= EXACT_MAX_COPIES
    ex = exact_schedule(heur.copies, net, 1 << 20, time_limit=10, hint=heur)
    t = ex.summary()
    assert ex.makespan <= heur.makespan * (1 + 1e-12)
    assert t["exact_bound_seconds"] >= heur.bounds["any_source"]          # never weaker than the heuristic's
    assert t["exact_bound_seconds"] <= ex.makespan * (1 + 1e-6)
    assert t["exact_gap"] == pytest.approx(max(0.0, ex.makespan / t["exact_bound_seconds"] - 1), abs=1e-9)
    # the schedule's own bound and gap (for its sources) are its own, never CP-SAT's
    assert t["bound_seconds"] == ex.bound and t["gap"] == ex.gap


def test_exact_schedule_not_built_or_unknown_keeps_the_heuristics_bound_and_gap():
    backend("cpsat")
    heur, net = _copies_case()
    with fake_clock(FakeClock(step=10.0)):                              # the limit passes at once
        ex = exact_schedule(heur.copies, net, 1 << 20, time_limit=0.5, hint=heur)
    t, h = ex.summary(), heur.summary()
    assert ex.info["status"] == "NOT_BUILT" and "not built" in ex.info["note"]
    assert ex.makespan == heur.makespan and np.array_equal(ex.src, heur.src)
    assert (t["bound_seconds"], t["gap"]) == (h["bound_seconds"], h["gap"])
    assert t["exact_bound_seconds"] == heur.bounds["any_source"]
    # CP-SAT ending UNKNOWN with its trivial bound 0: the heuristic's bound and gap stay
    unknown = _kept(heur, "UNKNOWN", 0.0).summary()
    assert (unknown["bound_seconds"], unknown["gap"]) == (h["bound_seconds"], h["gap"])
    assert unknown["exact_bound_seconds"] == heur.bounds["any_source"] > 0
    assert unknown["exact_gap"] == pytest.approx(heur.makespan / heur.bounds["any_source"] - 1)


def test_score_exact_schedule_over_the_cap_prints_the_heuristic_schedule(tmp_path, capsys):
    backend("cpsat")
    g = np.random.default_rng(0)
    loads = tmp_path / "w.json"
    loads.write_text(json.dumps({"loads": np.round(np.exp(g.normal(size=(8, 64))) * 100).tolist()}))
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    shape = ["--replicas", "80", "--nodes", "2", "--gpus", "16"]
    assert main(["plan", "--loads", str(loads), *shape, "--solver", "deepseek", "--out", str(a)]) == 0
    assert main(["plan", "--loads", str(loads), *shape, "--solver", "kk_swap", "--out", str(b)]) == 0
    capsys.readouterr()
    base = ["score", "--loads", str(loads), "--plan", str(b), "--previous", str(a), "--expert-bytes", "1000000"]
    assert main(base + ["--json"]) == 0
    heur = json.loads(capsys.readouterr().out)["transfers"]
    assert heur["moves"] > EXACT_MAX_COPIES
    assert main(base + ["--schedule", "exact", "--time-limit", "1"]) == 0
    out = capsys.readouterr().out
    assert f"over the exact model's cap of {EXACT_MAX_COPIES}: the heuristic schedule" in out
    assert f"makespan {heur['makespan_seconds']:.4g} s" in out


# Valid inputs that once ended in an internal error ----------------------------------------------

@pytest.mark.parametrize("weights,slots,gpus", [([[5.0]], 4, 4), ([[5.0], [3.0]], 2, 2)])
def test_risk_aware_plans_one_expert(weights, slots, gpus):
    p = Problem(weights, slots, 1, 1, gpus)
    r = solve(p, "risk_aware")
    assert r.termination is Termination.COMPLETED and r.plan is not None
    assert bool((r.plan.logcnt == slots).all()) and r.score.imbalance_mean == pytest.approx(1.0)


# the ends of the documented range: speeds in [1e-6, 1e6], the fastest at most 1e6 x the slowest
@pytest.mark.parametrize("speed", [[1e6, 1.0], [1e-6, 1.0], [1.0, 1e-6], [1e-6, 1e-6], [1e6, 1e6], [0.5, 1e-6]])
def test_cpsat_plans_extreme_speeds(speed):
    backend("cpsat")
    p = Problem(torch.tensor([[5.0, 3.0, 1.0, 2.0]]), 4, 1, 1, 2, gpu_speed=speed)
    r = solve(p, "cpsat", time_limit=5)
    assert r.termination in (Termination.OPTIMAL, Termination.COMPLETED), r.message
    kk = solve(p, "kk_swap")
    assert float(r.score.max_time[0]) <= float(kk.score.max_time[0]) * (1 + 1e-12)     # never worse than its warm start
    assert bool((r.lower_bound <= r.score.max_time * (1 + 1e-9)).all())


def test_score_exact_schedule_too_big_for_its_time_limit_keeps_the_heuristic(tmp_path, capsys):
    """By its estimate (EXACT_SECONDS_PER_BOOLEAN) the model cannot be built in 1 ms: the
    heuristic schedule is printed with a one-line note, its bound and gap unchanged."""
    backend("cpsat")
    loads = tmp_path / "w.json"
    loads.write_text(json.dumps({"loads": [[90, 132, 40, 61, 104, 165, 39, 4, 73, 56, 183, 86],
                                           [20, 107, 104, 64, 19, 197, 187, 157, 172, 86, 16, 27]]}))
    shape = ["--replicas", "16", "--groups", "4", "--nodes", "2", "--gpus", "8"]
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    assert main(["plan", "--loads", str(loads), *shape, "--out", str(a)]) == 0
    assert main(["plan", "--loads", str(loads), *shape, "--policy", "global", "--out", str(b)]) == 0
    capsys.readouterr()
    base = ["score", "--loads", str(loads), "--plan", str(b), "--previous", str(a), "--expert-bytes", "1000000"]
    assert main(base + ["--json"]) == 0
    heur = json.loads(capsys.readouterr().out)["transfers"]
    assert main(base + ["--schedule", "exact", "--time-limit", "0.001", "--json"]) == 0
    kept = json.loads(capsys.readouterr().out)["transfers"]
    assert kept["status"] == "NOT_BUILT"
    assert kept["proven"] == (heur["makespan_seconds"] <= heur["bound_any_source_seconds"] * (1 + 1e-9))
    for key in ("makespan_seconds", "bound_seconds", "gap"):
        assert kept[key] == heur[key]
    assert kept["exact_bound_seconds"] == heur["bound_any_source_seconds"]
    assert main(base + ["--schedule", "exact", "--time-limit", "0.001"]) == 0
    out = capsys.readouterr().out
    assert "exact schedule: model not built:" in out and "the heuristic schedule" in out
