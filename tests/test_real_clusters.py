"""Real clusters: per-GPU speeds, uneven slot counts and failed GPUs (cluster model,
shared scorer in time, bounds checked against brute force on tiny instances)."""
from __future__ import annotations

import math

import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from solvers import Cluster, Plan, Problem, score
from solvers.bounds import lower_bound, lower_bounds
from solvers.errors import PlanError, ProblemError
from tests.brute import brute_force, cluster_brute_force


# Cluster model -----------------------------------------------------------------------

def test_homogeneous_cluster_is_unchanged():
    c = Cluster(4, 32, 288)
    assert c.homogeneous and c.slots_per_gpu == 9 and c.failed == ()
    assert c.as_dict() == {"num_replicas": 288, "num_nodes": 4, "num_gpus": 32}
    assert c.id == "N4xP32xR288"
    assert c.gpu_speed == (1.0,) * 32 and c.gpu_slots == (9,) * 32


def test_uneven_slots_and_failed_gpus():
    c = Cluster(1, 4, gpu_slots=[3, 2, 3, 2], gpu_speed=[1, 1, 2, 2], failed=[1])
    assert c.gpu_slots == (3, 0, 3, 2) and c.failed == (1,) and c.num_replicas == 8
    assert c.slot_gpus() == [0, 0, 0, 2, 2, 2, 3, 3]
    assert c.slot_starts == (0, 3, 3, 6, 8)
    assert c.total_speed == 5.0 and not c.homogeneous
    assert c.live_gpus == (0, 2, 3)
    with pytest.raises(ProblemError, match="gpu_slots"):
        c.slots_per_gpu
    # a failed GPU of a homogeneous shape takes its R/P slots with it
    assert Cluster(4, 32, 288, failed=[3, 17]).num_replicas == 270
    assert Cluster(1, 2, 4, failed=[0]).id != Cluster(1, 2, 4).id


@pytest.mark.parametrize("kwargs, param", [
    (dict(gpu_speed=[1, 0], num_replicas=4), "gpu_speed"),
    (dict(gpu_speed=[1, float("nan")], num_replicas=4), "gpu_speed"),
    (dict(gpu_speed=[1, 1, 1], num_replicas=4), "gpu_speed"),
    (dict(gpu_speed="fast", num_replicas=4), "gpu_speed"),
    (dict(gpu_slots=[2, -1]), "gpu_slots"),
    (dict(gpu_slots=[2, 1.5]), "gpu_slots"),
    (dict(gpu_slots=[2, 2], num_replicas=5), "num_replicas"),
    (dict(gpu_slots=[0, 0]), "gpu_slots"),
    (dict(num_replicas=4, failed=[2]), "failed"),
    (dict(num_replicas=4, failed=[1, 1]), "failed"),
    (dict(num_replicas=4, failed=[0, 1]), "failed"),
    (dict(num_replicas=5), "num_replicas"),
])
def test_bad_cluster_names_the_parameter(kwargs, param):
    with pytest.raises(ProblemError) as err:
        Cluster(1, 2, **kwargs)
    assert err.value.param == param


def test_problem_passes_the_cluster_fields():
    w = torch.tensor([[5.0, 3.0, 1.0]])
    p = Problem(w, num_gpus=2, gpu_slots=[2, 1], gpu_speed=[2.0, 1.0])
    assert p.num_replicas == 3 and p.cluster.gpu_slots == (2, 1)
    with pytest.raises(ProblemError, match="cluster"):
        Problem(w, cluster=Cluster(1, 2, 4), gpu_speed=[1, 2])
    with pytest.raises(ProblemError, match="num_replicas"):
        Problem(w, num_gpus=2, gpu_slots=[1, 1])            # 2 slots for 3 experts
    with pytest.raises(ProblemError, match="policy"):
        p.resolve_policy("hierarchical")
    assert p.resolve_policy("auto") == "global"


def test_preset_mixed_pool():
    from solvers.cluster import CLUSTERS
    c = CLUSTERS["mixed-4x8"].cluster(256)
    assert c.num_replicas == 288 and c.total_speed == pytest.approx(38.4)
    assert c.gpu_speed[:8] == (1.0,) * 8 and c.gpu_speed[-8:] == (1.4,) * 8


# Scorer in time -----------------------------------------------------------------------

def test_score_maps_uneven_slots_and_divides_by_speed():
    w = torch.tensor([[6.0, 4.0, 2.0, 1.0]])
    p = Problem(w, num_gpus=3, gpu_slots=[2, 0, 3], gpu_speed=[2.0, 1.0, 1.0], failed=[1])
    plan = Plan.from_phy2log([[0, 1, 2, 3, 0]], 4)           # slots 0-1 on GPU 0, 2-4 on GPU 2
    sc = score(p, plan)
    assert sc.gpu_load[0].tolist() == [3.0 + 4.0, 0.0, 2.0 + 1.0 + 3.0]
    assert sc.gpu_time[0].tolist() == [3.5, 0.0, 6.0]
    assert float(sc.max_time[0]) == 6.0 and float(sc.max_load[0]) == 7.0
    # the best time is W / (2 + 1) (failed GPU 1 excluded): 13 / 3
    assert float(sc.time_imbalance[0]) == pytest.approx(6.0 / (13 / 3))
    # the token mean is over the two live GPUs
    assert float(sc.mean_load[0]) == 6.5
    assert sc.summary["max_time_worst"] == 6.0 and "time_imbalance_mean" in sc.summary
    # duplicates follow the real slot-to-GPU map: expert 0 twice... on different GPUs
    assert sc.duplicates == 0
    assert score(p, Plan.from_phy2log([[0, 0, 1, 2, 3]], 4)).duplicates == 1


def test_homogeneous_score_has_time_equal_to_load_and_no_time_keys():
    w = torch.rand(3, 8, generator=torch.Generator().manual_seed(0))
    p = Problem(w, 8, 1, 1, 4)
    sc = score(p, Plan.from_phy2log(torch.arange(8).expand(3, 8), 8))
    assert sc.gpu_time is sc.gpu_load and torch.equal(sc.max_time, sc.max_load)
    assert not any(k.startswith(("max_time", "time_imb")) for k in sc.summary)


def test_plan_of_wrong_width_is_refused_on_uneven_cluster():
    p = Problem(torch.ones(1, 3), num_gpus=2, gpu_slots=[3, 1])
    with pytest.raises(PlanError, match="num_replicas"):
        score(p, Plan.from_phy2log([[0, 1, 2]], 3))


def test_moves_against_a_plan_of_the_healthy_cluster():
    healthy = Cluster(1, 2, 4)
    degraded = Cluster(1, 2, 4, failed=[1])
    prev = Plan.from_phy2log([[0, 1, 1, 0]], 2)               # GPU 0: {0, 1}, GPU 1: {0, 1}
    p = Problem(torch.tensor([[3.0, 1.0]]), cluster=degraded)
    sc = score(p, Plan.from_phy2log([[0, 1]], 2), previous=prev, previous_cluster=healthy)
    assert sc.moves == 0
    prev = Plan.from_phy2log([[0, 0, 1, 1]], 2)               # GPU 0: {0}, GPU 1 (now dead): {1}
    sc = score(p, Plan.from_phy2log([[1, 0]], 2), previous=prev, previous_cluster=healthy)
    assert sc.moves == 1


# Bounds against brute force -----------------------------------------------------------

def _best_time_by_enumeration(w, slots, speed):
    """Every phy2log of the tiny instance scored by the shared scorer: the true optimum."""
    import itertools
    p = Problem(torch.tensor([w], dtype=torch.float64), num_gpus=len(slots), gpu_slots=slots, gpu_speed=speed)
    E, R = len(w), p.num_replicas
    best = math.inf
    for row in itertools.product(range(E), repeat=R):
        if len(set(row)) == E:
            best = min(best, float(score(p, Plan.from_phy2log([list(row)], E)).max_time[0]))
    return p, best


def test_cluster_brute_force_matches_enumeration_of_every_plan():
    for w, slots, speed in [([5, 3, 1], [2, 1, 0], [1.0, 2.0, 1.0]), ([4, 4, 2], [1, 2, 1], [1.5, 1.0, 0.5]),
                            ([7, 1], [2, 2], [1.0, 1.4])]:
        _, best = _best_time_by_enumeration(w, slots, speed)
        assert cluster_brute_force(w, slots, speed) == pytest.approx(best, rel=1e-12)


def test_cluster_brute_force_equals_the_homogeneous_reference():
    w = [9.0, 5.0, 3.0, 2.0]
    assert cluster_brute_force(w, [3, 3], [1.0, 1.0]) == pytest.approx(brute_force(w, 6, 2), rel=1e-12)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 30), min_size=1, max_size=4),
       st.lists(st.tuples(st.integers(0, 3), st.sampled_from([0.5, 1.0, 1.4, 2.0])), min_size=1, max_size=3))
def test_bounds_never_exceed_the_optimum(w, gpus):
    slots = [c for c, _ in gpus]
    speed = [s for _, s in gpus]
    if sum(slots) < len(w) or sum(slots) > 8:
        return
    p = Problem(torch.tensor([w], dtype=torch.float64), num_gpus=len(gpus), gpu_slots=slots, gpu_speed=speed)
    opt = cluster_brute_force(w, slots, speed)
    for name, b in lower_bounds(p).items():
        assert float(b[0]) <= opt * (1 + 1e-9) + 1e-12, name
    # the bound is not vacuous: at least the average time
    assert float(lower_bound(p)[0]) >= sum(w) / p.cluster.total_speed * (1 - 1e-9)


# Solvers on real clusters ---------------------------------------------------------------

def _loads(L=4, E=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.exp(torch.randn(L, E, generator=g, dtype=torch.float64)).mul(1000).round()


MIXED = dict(num_nodes=2, num_gpus=4, num_replicas=20, gpu_speed=[1.0, 1.0, 1.4, 1.4])
UNEVEN = dict(num_nodes=2, num_gpus=4, gpu_slots=[6, 4, 6, 4])
FAILED = dict(num_nodes=2, num_gpus=4, num_replicas=24, failed=[1])


@pytest.mark.parametrize("shape", [MIXED, UNEVEN, FAILED])
@pytest.mark.parametrize("solver", ["kk_swap", "joint", "best"])
def test_heuristics_plan_real_clusters(shape, solver):
    from solvers import solve
    p = Problem(_loads(), **shape)
    opts = {"time_limit": 0.5} if solver == "best" else {}
    r = solve(p, solver, **opts)
    assert r.plan.num_replicas == p.num_replicas
    assert bool((r.plan.logcnt >= 1).all())
    # graded in time, never below the bound, and close to it on these easy loads
    assert bool((r.score.max_time >= r.lower_bound * (1 - 1e-9)).all())
    assert r.gap_max < 0.05


def test_speed_aware_plan_beats_the_token_balanced_greedy_in_time():
    from solvers import solve
    p = Problem(_loads(L=6, E=32, seed=3), **MIXED | {"num_replicas": 40})
    ds, ks = solve(p, "deepseek"), solve(p, "kk_swap")
    # the greedy balances tokens: its slow GPUs finish last, ~W/P against W/sum(speed)
    assert bool((ks.score.max_time <= ds.score.max_time).all())
    assert float(ks.score.max_time.sum()) < 0.9 * float(ds.score.max_time.sum())
    # deepseek plans the homogeneous view: the same plan as on speed-1 GPUs
    homog = solve(Problem(p.weights, 40, 1, 2, 4), "deepseek")
    assert torch.equal(ds.plan.phy2log, homog.plan.phy2log)


def test_heuristic_close_to_brute_force_on_tiny_instances():
    from solvers import solve
    for w, slots, speed in [([9, 5, 3, 2], [2, 3, 1], [1.0, 1.4, 2.0]), ([7, 7, 1], [2, 2, 0], [1.0, 1.5, 1.0]),
                            ([20, 3, 2, 1, 1], [3, 4], [1.0, 2.0])]:
        p = Problem(torch.tensor([w], dtype=torch.float64), num_gpus=len(slots), gpu_slots=slots, gpu_speed=speed)
        opt = cluster_brute_force(w, slots, speed)
        # joint runs to its end (no clock); best's portfolio gets a limit it never reaches on
        # one tiny layer, so neither answer depends on how busy the machine is
        for solver, options in (("joint", {}), ("best", {"time_limit": 60.0})):
            got = float(solve(p, solver, **options).score.max_time[0])
            assert opt * (1 - 1e-9) <= got <= opt * 1.15, solver


def test_solvers_refuse_what_they_cannot_plan():
    from solvers import solve
    from solvers.errors import OptionError
    p = Problem(_loads(), **UNEVEN)
    with pytest.raises(ProblemError) as err:
        solve(p, "deepseek")
    assert err.value.param == "gpu_slots"
    # every registered solver plans real clusters; the registry's refusal stays for one that
    # would not (a copy of a spec declared homogeneous-only, not registered)
    import dataclasses
    from solvers.registry import _REGISTRY, get_solver
    assert all(spec.heterogeneous for spec in _REGISTRY.values())
    with pytest.raises(OptionError) as err:
        dataclasses.replace(get_solver("kk_swap"), heterogeneous=False).check_cluster(p)
    assert err.value.param == "solver" and "identical GPUs" in str(err.value)
    # traffic_aware plans this cluster, but not without its routing trace
    with pytest.raises(OptionError) as err:
        solve(p, "traffic_aware")
    assert err.value.param == "routing"
    with pytest.raises(ProblemError) as err:
        solve(p, "kk_swap", policy="hierarchical")
    assert err.value.param == "policy"
    # forbidden colocation needs at most E slots on every GPU (6 experts, a GPU with 7)
    with pytest.raises(OptionError) as err:
        solve(Problem(_loads(E=6), num_gpus=2, gpu_slots=[7, 3]), "kk_swap", colocation="forbidden")
    assert err.value.param == "colocation"


# CLI -----------------------------------------------------------------------------------

def _loads_file(tmp_path, L=3, E=12, seed=1):
    import numpy as np
    path = tmp_path / "loads.npz"
    np.savez(path, loads=_loads(L, E, seed).numpy().astype("int64"))
    return path


def test_cli_plan_and_score_uneven_slots_end_to_end(tmp_path, capsys):
    import json
    from solvers.cli import main
    loads, out = _loads_file(tmp_path), tmp_path / "plan.json"
    slots = tmp_path / "slots.txt"
    slots.write_text("5 3\n5 3\n")                                  # a file of numbers
    assert main(["plan", "--loads", str(loads), "--nodes", "2", "--gpus", "4", "--gpu-slots", str(slots),
                 "--solver", "kk_swap", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["problem"]["gpu_slots"] == [5, 3, 5, 3] and doc["problem"]["num_replicas"] == 16
    assert len(doc["phy2log"][0]) == 16
    capsys.readouterr()
    # scored on the cluster it was made for (read from the file), then on a mixed pool
    assert main(["score", "--loads", str(loads), "--plan", str(out), "--json"]) == 0
    m = json.loads(capsys.readouterr().out)
    assert "max_time_sum" not in m and m["imbalance_worst"] >= 1
    assert main(["score", "--loads", str(loads), "--plan", str(out), "--gpu-speed", "1*2,1.4*2", "--json",
                 "--per-gpu"]) == 0
    m = json.loads(capsys.readouterr().out)
    assert m["max_time_sum"] < m["max_load_sum"] and len(m["gpu_time"][0]) == 4


def test_cli_failed_gpus_and_speeds(tmp_path, capsys):
    import json
    from solvers.cli import main
    loads, out = _loads_file(tmp_path), tmp_path / "plan.json"
    assert main(["plan", "--loads", str(loads), "--nodes", "2", "--gpus", "4", "--replicas", "16", "--failed", "2",
                 "--gpu-speed", "1,1,1,1.4", "--solver", "kk_swap", "--out", str(out), "--json"]) == 0
    m = json.loads(capsys.readouterr().out)
    doc = json.loads(out.read_text())
    assert doc["problem"]["gpu_slots"] == [4, 4, 0, 4] and "time_imbalance_mean" in m


@pytest.mark.parametrize("flags, param", [
    (["--replicas", "16", "--gpu-speed", "1,1,fast,1"], "gpu_speed"),
    (["--replicas", "16", "--gpu-speed", "1,1"], "gpu_speed"),
    (["--replicas", "16", "--failed", "x"], "failed"),
    (["--replicas", "16", "--failed", "9"], "failed"),
    (["--gpu-slots", "4,4,4,-1"], "gpu_slots"),
])
def test_cli_bad_real_cluster_arguments_are_one_line(tmp_path, capsys, flags, param):
    from solvers.cli import main
    loads = _loads_file(tmp_path)
    rc = main(["plan", "--loads", str(loads), "--nodes", "2", "--gpus", "4", *flags, "--solver", "kk_swap",
               "--out", str(tmp_path / "p.json")])
    err = capsys.readouterr().err.strip()
    assert rc != 0 and len(err.splitlines()) == 1 and param in err


def test_cli_compare_on_uneven_slots_records_refusals(tmp_path, capsys):
    import json
    from solvers.cli import main
    loads = _loads_file(tmp_path)
    assert main(["compare", "--loads", str(loads), "--nodes", "2", "--gpus", "4", "--gpu-slots", "5,3,5,3",
                 "--solvers", "deepseek,kk_swap", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    by = {r["solver"]: r for r in doc["rows"]}
    assert by["deepseek"]["termination"] == "refused" and "gpu_slots" in by["deepseek"]["message"]
    assert doc["pick"]["solver"] == "kk_swap"


# Elastic re-planning -------------------------------------------------------------------

def test_elastic_replan_keeps_survivors_and_meets_the_target():
    from solvers import solve
    from solvers.elastic import replan_after_failure
    w = _loads(L=5, E=24, seed=7)
    healthy = Problem(w, 32, 1, 2, 8)
    before = solve(healthy, "kk_swap")
    p = Problem(w, 32, 1, 2, 8, failed=[5])
    r = replan_after_failure(p, before.plan, slack=0.02)
    assert r.plan.num_replicas == 28 and bool((r.plan.logcnt >= 1).all())   # every expert alive
    fresh = torch.tensor(r.info["fresh_max_time"], dtype=torch.float64)
    assert bool((r.score.max_time <= fresh * 1.02 * (1 + 1e-9)).all())
    # the scorer counts the moves against the plan in force on the healthy cluster
    assert r.score.moves == r.info["moves"] <= r.info["fresh_moves"]
    assert r.score.moves < r.info["fresh_moves"] / 2
    # the survivors' own replicas mostly stay: at least the orphans move, not much more
    assert r.score.moves >= r.info["orphans"]


def test_elastic_without_failure_keeps_a_plan_that_meets_the_target():
    from solvers import solve
    from solvers.elastic import replan_after_failure
    w = _loads(L=3, E=16, seed=2)
    p = Problem(w, 24, 1, 2, 4, gpu_speed=[1, 1, 1.4, 1.4])
    fresh = solve(p, "kk_swap")
    r = replan_after_failure(p, fresh.plan, slack=0.01)
    assert r.score.moves == 0


def test_elastic_refuses_a_plan_of_another_cluster():
    from solvers.errors import OptionError
    from solvers.elastic import replan_after_failure
    p = Problem(_loads(L=1, E=8), num_gpus=4, gpu_slots=[3, 3, 2, 4])
    with pytest.raises(OptionError) as err:
        replan_after_failure(p, Plan.from_phy2log([list(range(8)) * 2], 8))
    assert err.value.param == "previous_cluster"
    with pytest.raises(OptionError) as err:
        replan_after_failure(p, Plan.from_phy2log([list(range(8)) * 2], 8), Cluster(1, 2, 16))
    assert err.value.param == "previous_cluster"


def test_cli_elastic_replan_after_failure(tmp_path, capsys):
    import json
    from solvers.cli import main
    loads, old, new = _loads_file(tmp_path, L=2, E=24), tmp_path / "old.json", tmp_path / "new.json"
    shape = ["--nodes", "2", "--gpus", "8", "--replicas", "32"]
    assert main(["plan", "--loads", str(loads), *shape, "--solver", "kk_swap", "--out", str(old)]) == 0
    assert main(["plan", "--loads", str(loads), *shape, "--failed", "5", "--solver", "kk_swap",
                 "--previous", str(old), "--migration-slack", "0.02", "--out", str(new), "--json"]) == 0
    capsys.readouterr()
    doc = json.loads(new.read_text())
    assert doc["problem"]["num_replicas"] == 28 and doc["problem"]["gpu_slots"][5] == 0
    assert 0 < doc["metrics"]["moves"] < 2 * 28 and doc["options"]["base"] == "kk_swap"
    # scoring the new plan against the old one counts the same moves
    assert main(["score", "--loads", str(loads), "--plan", str(new), "--previous", str(old), "--json"]) == 0
    m = json.loads(capsys.readouterr().out)
    assert m["moves"] == doc["metrics"]["moves"]


# Exact model in time -------------------------------------------------------------------

def _cpsat_available():
    from solvers import backends
    return backends.cpsat_available()


needs_cpsat = pytest.mark.skipif(not _cpsat_available(), reason="needs OR-Tools (pip install ortools)")


@needs_cpsat
@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(0, 40), min_size=2, max_size=4),
       st.lists(st.tuples(st.integers(0, 3), st.sampled_from([0.5, 1.0, 1.4, 2.0])), min_size=2, max_size=3))
def test_cpsat_in_time_proves_the_brute_force_optimum(w, gpus):
    from solvers import solve
    slots = [c for c, _ in gpus]
    speed = [s for _, s in gpus]
    if sum(slots) < len(w) or sum(slots) > 7 or sum(w) == 0:
        return
    p = Problem(torch.tensor([w], dtype=torch.float64), num_gpus=len(gpus), gpu_slots=slots, gpu_speed=speed)
    opt = cluster_brute_force(w, slots, speed)
    r = solve(p, "cpsat", time_limit=5, threads=1)
    assert str(r.status) == "proven_optimal"
    assert float(r.score.max_time[0]) == pytest.approx(opt, rel=1e-9)
    # its certified bound never exceeds the optimum
    assert float(r.lower_bound[0]) <= opt * (1 + 1e-12)


@needs_cpsat
def test_cpsat_in_time_refuses_models_it_lacks():
    from solvers import solve
    from solvers.errors import OptionError
    p = Problem(_loads(L=1, E=6), num_gpus=2, gpu_slots=[4, 3])
    with pytest.raises(OptionError) as err:
        solve(p, "cpsat", model="packing")
    assert err.value.param == "model"
    # forbidden colocation cannot fit 7 slots of one GPU with 6 experts
    with pytest.raises(OptionError) as err:
        solve(Problem(_loads(L=1, E=6), num_gpus=2, gpu_slots=[7, 3]), "cpsat", colocation="forbidden")
    assert err.value.param == "colocation"



@pytest.mark.parametrize("backend", ["cpsat", "highs", "cbc"])
@settings(max_examples=12, deadline=None)
@given(st.lists(st.integers(0, 40), min_size=2, max_size=4),
       st.lists(st.tuples(st.integers(0, 3), st.sampled_from([0.5, 1.0, 1.4, 2.0])), min_size=2, max_size=3),
       st.sampled_from(["allowed", "forbidden"]))
def test_exact_backends_in_time_prove_the_brute_force_optimum(backend, w, gpus, colocation):
    """Every backend, both colocation rules: the model in time proves the optimum that
    enumeration finds; the universal bound never exceeds the optimum of every plan, the
    model bound never exceeds the optimum of the model."""
    from solvers import solve
    from solvers import backends
    if not getattr(backends, f"{backend}_available")():
        pytest.skip(f"{backend} not installed")
    slots = [c for c, _ in gpus]
    speed = [s for _, s in gpus]
    assume(len(w) <= sum(slots) <= 7 and sum(w) > 0)
    p = Problem(torch.tensor([w], dtype=torch.float64), num_gpus=len(gpus), gpu_slots=slots, gpu_speed=speed)
    opt_all = cluster_brute_force(w, slots, speed)
    opt = cluster_brute_force(w, slots, speed, colocation=colocation)
    assume(colocation == "allowed" or max(slots) <= len(w))
    # tiny models solve in ~0.1 s; the generous limit only guards against a loaded machine
    r = solve(p, backend, time_limit=60, threads=1, colocation=colocation)
    assert bool(r.optimal_in_model.all())
    assert float(r.score.max_time[0]) == pytest.approx(opt, rel=1e-7)
    assert float(r.lower_bound[0]) <= opt_all * (1 + 1e-9)
    if colocation == "forbidden":
        assert float(r.model_bound[0]) <= opt * (1 + 1e-9)
        assert r.model_scope.colocation == "forbidden"
        assert r.score.duplicates == 0


@needs_cpsat
def test_certify_in_time_proves_tiny_optima_and_bounds_larger_layers():
    from solvers import solve
    from solvers import backends
    if not backends.highs_available():
        pytest.skip("certify needs HiGHS")
    w, slots, speed = [20.0, 3.0, 2.0, 1.0, 1.0], [3, 4], [1.0, 2.0]
    p = Problem(torch.tensor([w], dtype=torch.float64), num_gpus=2, gpu_slots=slots, gpu_speed=speed)
    r = solve(p, "certify", time_limit=3)
    assert str(r.status) == "proven_optimal"
    assert float(r.score.max_time[0]) == pytest.approx(cluster_brute_force(w, slots, speed), rel=1e-9)
    # a larger cluster: a plan no worse than best's, a bound at least the combinatorial one
    p = Problem(_loads(L=2, E=16), **FAILED)
    r = solve(p, "certify", time_limit=2, heuristic_share=0.3)
    assert bool((r.lower_bound >= lower_bound(p) * (1 - 1e-12)).all())
    assert bool((r.score.max_time >= r.lower_bound * (1 - 1e-9)).all())
    assert r.gap_max < 0.05


def test_exports_of_uneven_plans_keep_the_gpu_map_or_refuse(tmp_path, capsys):
    import json
    from solvers.cli import main
    from solvers.errors import OptionError
    from solvers.workloads.exporters import export_plan
    loads, plan = _loads_file(tmp_path), tmp_path / "plan.json"
    assert main(["plan", "--loads", str(loads), "--nodes", "2", "--gpus", "4", "--gpu-slots", "5,3,5,3",
                 "--solver", "kk_swap", "--out", str(plan)]) == 0
    capsys.readouterr()
    assert main(["convert", str(plan), "--out", str(tmp_path / "plan.csv")]) == 0
    rows = (tmp_path / "plan.csv").read_text().splitlines()[1:17]             # layer 0
    assert [int(r.split(",")[2]) for r in rows] == [0] * 5 + [1] * 3 + [2] * 5 + [3] * 3
    assert main(["convert", str(plan), "--out", str(tmp_path / "sglang.json"), "--to", "sglang"]) == 2
    assert "format" in capsys.readouterr().err
    doc = json.loads(plan.read_text())
    p = Problem(_loads(L=3, E=12, seed=1), num_nodes=2, num_gpus=4, gpu_slots=[5, 3, 5, 3])
    with pytest.raises(OptionError):
        export_plan(Plan.from_phy2log(doc["phy2log"], 12), tmp_path / "x.yaml", "trtllm", problem=p)


# Planning for failure -------------------------------------------------------------------

@pytest.mark.parametrize("kwargs", [dict(num_replicas=48, num_nodes=2, num_gpus=8),
                                    dict(num_nodes=2, num_gpus=4, gpu_slots=[10, 8, 10, 8],
                                         gpu_speed=[1, 1, 1.4, 1.4])])
@pytest.mark.parametrize("domain", ["gpu", "node"])
def test_survivable_plans_survive_any_single_failure(kwargs, domain):
    from solvers import solve
    p = Problem(_loads(L=4, E=16, seed=5), **kwargs)
    r = solve(p, "survivable", domain=domain)
    c = p.cluster
    slot_gpu = torch.tensor(c.slot_gpus())
    unit = slot_gpu if domain == "gpu" else slot_gpu // c.gpus_per_node
    for layer in range(p.num_layers):
        experts = r.plan.phy2log[layer]
        for lost in unit.unique().tolist():          # whichever GPU (node) fails, every expert lives
            assert set(experts[unit != lost].tolist()) == set(range(16))
    assert r.info["exposed_experts"] == 0
    if domain == "gpu":     # spreading over GPUs costs little balance on these loads (over two
        assert r.gap_max < 0.05      # nodes every expert must sit on the slower one too)


def test_survivable_needs_two_slots_per_expert():
    from solvers import solve
    from solvers.errors import OptionError
    with pytest.raises(OptionError) as err:
        solve(Problem(_loads(L=1, E=16), 24, 1, 1, 4), "survivable")
    assert err.value.param == "domain"
    with pytest.raises(OptionError) as err:
        solve(Problem(_loads(L=1, E=16), 40, 1, 1, 4), "survivable", domain="node")
    assert err.value.param == "domain"
