"""Elastic re-planning after GPU failures: the move-minimal search, the exact per-layer
model against brute force, the LP bound (benchmarks/elastic_bound.py), and engine maps of
plans with failed ranks."""
import json

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.exports import plan_downloads
from solvers import Cluster, Plan, Problem, score, solve
from solvers.cli import main
from solvers.errors import OptionError
from solvers import backends
from solvers.heuristics.common import LiveGPUs
from benchmarks.elastic_bound import bound_elastic, lp_move_bound, spread_bound
from solvers.elastic import replan_after_failure
from solvers.elastic.search import Layout, counts, match_orphans, place_orphans, reduce_excess, shed_moves
from solvers.elastic.solver import keep_survivors
from benchmarks.elastic_exact import (
    layer_moves,
    layer_time,
    placement,
    prove_elastic,
    solve_elastic_layer,
)
from solvers.workloads.exporters import export_plan, live_map, padded_map, read_exported_plan
from tests.brute import elastic_brute_force


def _loads(L=4, E=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.exp(torch.randn(L, E, generator=g, dtype=torch.float64)).mul(1000).round()


def _failure(L=4, E=24, seed=3, failed=(5,), gpus=8, slots=32):
    w = _loads(L, E, seed)
    healthy = Problem(w, slots, 1, 2, gpus)
    before = solve(healthy, "kk_swap")
    return w, healthy, before, Problem(w, slots, 1, 2, gpus, failed=list(failed))


# The move-minimal search ----------------------------------------------------------------

def test_orphans_get_a_replica_and_the_excess_search_never_adds_excess():
    w, healthy, before, p = _failure()
    kept = keep_survivors(before.plan.phy2log, healthy.cluster, p.cluster)
    assert not bool((kept < 0).any())                     # the failed GPU's slots are gone, not holes
    orphans = counts(kept, 24) == 0
    assert bool(orphans.any())                            # the instance has orphans to place
    gpus = LiveGPUs.of(p.cluster, w.device)
    target = torch.full((4,), float(w.sum(1).max()) / 7 * 1.01, dtype=torch.float64)
    old = torch.zeros(4, gpus.Q * 24, dtype=torch.bool)
    placed = place_orphans(w, kept, gpus, target, old)
    assert bool((counts(placed, 24) >= 1).all())
    # only orphan slots changed: one per orphan
    assert int((placed != kept).sum()) == int(orphans.sum())
    before_exc = Layout(w, placed, gpus).excess(target)
    after = reduce_excess(w, placed, gpus, target, old)
    assert bool((counts(after, 24) >= 1).all())
    assert bool((Layout(w, after, gpus).excess(target) <= before_exc + 1e-9).all())


def _moves(lay, old):
    return ((lay.n > 0) & ~old).sum(1)


def test_orphans_matched_jointly_then_unneeded_moves_shed_within_target():
    w, healthy, before, p = _failure(L=6, E=32, seed=11, gpus=8, slots=40)
    kept = keep_survivors(before.plan.phy2log, healthy.cluster, p.cluster)
    orphans = counts(kept, 32) == 0
    assert bool(orphans.any())
    gpus = LiveGPUs.of(p.cluster, w.device)
    # the plan in force's (live GPU, expert) pairs: what each survivor holds now
    old = Layout(w, kept, gpus).n > 0
    target = w.sum(1) / gpus.Q * 1.03
    matched = match_orphans(w, kept, gpus, target, old)
    assert bool((counts(matched, 32) >= 1).all())                 # every expert alive
    # only orphans entered, one slot each: moves = orphans, nothing else changed
    changed = matched != kept
    assert int(changed.sum()) == int(orphans.sum())
    assert bool(orphans.gather(1, matched).masked_select(changed).all())
    # shed: excess stays 0 on the layers within target, moves never rise, others untouched
    searched = reduce_excess(w, matched, gpus, target, old)
    lay = Layout(w, searched, gpus)
    met = lay.excess(target) <= 0
    assert bool(met.any())
    shed = shed_moves(w, searched, gpus, target, old)
    after = Layout(w, shed, gpus)
    assert bool((after.excess(target)[met] <= 0).all())
    assert bool((counts(shed, 32) >= 1).all())
    assert bool((_moves(after, old) <= _moves(lay, old)).all())
    assert torch.equal(shed[~met], searched[~met])


def test_shed_moves_undoes_a_move_the_target_does_not_need():
    w, healthy, before, p = _failure(L=6, E=32, seed=11, gpus=8, slots=40)
    kept = keep_survivors(before.plan.phy2log, healthy.cluster, p.cluster)
    gpus = LiveGPUs.of(p.cluster, w.device)
    full = place_orphans(w, kept, gpus, torch.full((6,), float("inf"), dtype=torch.float64),
                         torch.zeros(6, gpus.Q * 32, dtype=torch.bool))
    old = Layout(w, full, gpus).n > 0                             # a plan in force with every orphan placed
    # one needless move: slot 0's replica replaced by an expert its GPU never held, if spare
    lay = Layout(w, full, gpus)
    e = full.clone()
    for x in range(6):
        r = int((lay.cnt[x].gather(0, full[x]) >= 2).nonzero()[0])
        g = int(gpus.gpu_of[r])
        y = int((~old[x].view(gpus.Q, 32)[g]).nonzero()[0])
        e[x, r] = y
    moved = Layout(w, e, gpus)
    target = moved.t.max(1).values.maximum(lay.t.max(1).values) * 1.5   # loose: nothing needs a move
    assert bool((_moves(moved, old) == 1).all())
    shed = shed_moves(w, e, gpus, target, old)
    assert bool((_moves(Layout(w, shed, gpus), old) == 0).all())
    assert bool((counts(shed, 32) >= 1).all())


def test_elastic_meets_the_target_with_fewer_moves_than_a_fresh_plan():
    _, healthy, before, p = _failure(L=6, E=32, seed=11, gpus=8, slots=40)
    r = replan_after_failure(p, before.plan, healthy.cluster, slack=0.01)
    fresh = torch.tensor(r.info["fresh_max_time"], dtype=torch.float64)
    assert bool((r.score.max_time <= fresh * 1.01 * (1 + 1e-9)).all())
    assert bool((r.plan.logcnt >= 1).all())
    assert r.score.moves == r.info["moves"] >= r.info["orphans"]
    assert r.info["moves"] < r.info["fresh_moves"]


# The exact per-layer model --------------------------------------------------------------

needs_cpsat = pytest.mark.skipif(not backends.cpsat_available(), reason="ortools not installed")


@st.composite
def tiny_layers(draw):
    E = draw(st.integers(2, 4))
    slots = draw(st.lists(st.integers(1, 3), min_size=2, max_size=3))
    if sum(slots) < E:
        slots[0] += E - sum(slots)
    speed = draw(st.lists(st.sampled_from([1.0, 1.4]), min_size=len(slots), max_size=len(slots)))
    w = np.array(draw(st.lists(st.integers(1, 60), min_size=E, max_size=E)), dtype=np.float64)
    old = np.array(draw(st.lists(st.booleans(), min_size=E * len(slots), max_size=E * len(slots)))).reshape(E, -1)
    slack = draw(st.sampled_from([0.0, 0.05, 0.3, 1.0]))
    return w, slots, speed, old, float(w.sum() / sum(speed)) * (1 + slack)


@needs_cpsat
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tiny_layers())
def test_exact_elastic_model_agrees_with_brute_force(case):
    w, slots, speed, old, target = case
    best = elastic_brute_force(w, slots, speed, old, target)
    res = solve_elastic_layer(w, slots, speed, old, target, time_limit=10)
    if best is None:
        # the model is a relaxation: it may find a plan the floored arithmetic lets through,
        # never one that truly meets the target
        assert res["status"] == "infeasible" or not res["target_met"]
        return
    assert res["status"] == "optimal"
    assert res["bound"] <= best                           # a valid bound
    if res["target_met"]:
        assert res["moves"] == best
        assert layer_time(w, res["xg"], speed) <= target * (1 + 1e-12)


@needs_cpsat
def test_exact_elastic_bound_is_below_the_heuristic_and_counts_orphans():
    _, healthy, before, p = _failure(L=2, E=12, seed=5, failed=(2,), gpus=4, slots=16)
    r = replan_after_failure(p, before.plan, healthy.cluster, slack=0.05)
    rows = prove_elastic(p, before.plan, healthy.cluster, r.plan, r.info["target_max_time"], [0, 1], time_limit=20)
    kept = keep_survivors(before.plan.phy2log, healthy.cluster, p.cluster)
    orphans = (counts(kept, 12) == 0).sum(1).tolist()
    for row, orph, moves in zip(rows, orphans, r.info["moves_per_layer"]):
        assert row["heuristic_moves"] == moves
        assert orph <= row["bound"] <= moves
        if row["status"] == "optimal" and row["target_met"]:
            assert row["moves"] == row["bound"]


# The LP bound ------------------------------------------------------------------------------

needs_highs = pytest.mark.skipif(not backends.highs_available(), reason="highspy not installed")


@needs_highs
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tiny_layers())
def test_lp_move_bound_never_exceeds_the_brute_force_optimum(case):
    w, slots, speed, old, target = case
    best = elastic_brute_force(w, slots, speed, old, target)
    res = lp_move_bound(w, slots, speed, old, target, time_limit=10)
    if best is None:
        return                                            # no plan: any bound (or "infeasible") is sound
    assert res["status"] == "optimal"                     # a plan exists, so the relaxation is feasible (never
                                                          # "infeasible" when a plan meets the target)
    assert res["orphans"] == int((~old.any(1)).sum())
    assert max(res["orphans"], res["spread"]) <= res["bound"] <= best
    assert res["lp"] <= best + 1e-6


def test_spread_bound_counts_the_gpus_a_heavy_expert_needs():
    # expert 0 (load 30) must be on 2 GPUs at target 20; only GPU 0 held it: one new pair
    old = np.array([[True, False], [False, True], [False, True]])
    assert spread_bound(np.array([30.0, 5.0, 5.0]), [1.0, 1.0], old, 20.0) == 1
    # at speed 2 one GPU runs it in 15: no move needed
    assert spread_bound(np.array([30.0, 5.0, 5.0]), [1.0, 2.0], old, 20.0) == 0


@needs_highs
def test_lp_move_bound_of_a_layer_without_load():
    old = np.array([[True, False], [False, False]])
    res = lp_move_bound(np.zeros(2), [1, 1], [1.0, 1.0], old, 0.0)
    assert res["status"] == "optimal" and res["bound"] == 1            # the orphan still needs a GPU
    assert lp_move_bound(np.array([1.0, 0.0]), [1, 1], [1.0, 1.0], old, 0.0)["status"] == "infeasible"


@needs_highs
def test_lp_bound_lies_between_the_orphans_and_the_heuristic():
    _, healthy, before, p = _failure(L=3, E=24, seed=3)
    r = replan_after_failure(p, before.plan, healthy.cluster, slack=0.01)
    rows = bound_elastic(p, before.plan, healthy.cluster, r.info["target_max_time"], range(3), time_limit=20)
    kept = keep_survivors(before.plan.phy2log, healthy.cluster, p.cluster)
    orphans = (counts(kept, 24) == 0).sum(1).tolist()
    for row, orph, moves in zip(rows, orphans, r.info["moves_per_layer"]):
        assert row["status"] == "optimal" and row["orphans"] == orph
        assert orph <= row["bound"] <= moves


def test_placement_and_moves_follow_the_shared_scorer():
    _, healthy, before, p = _failure(L=2, E=24, seed=3)
    r = replan_after_failure(p, before.plan, healthy.cluster, slack=0.02)
    live = list(p.cluster.live_gpus)
    total = 0
    for layer in range(2):
        old = placement(before.plan.phy2log[layer].numpy(), np.asarray(healthy.cluster.slot_gpus()), live, 24) > 0
        new = placement(r.plan.phy2log[layer].numpy(), np.asarray(p.cluster.slot_gpus()), live, 24)
        total += layer_moves(new, old)
    assert total == r.score.moves


# Engine maps with failed ranks ----------------------------------------------------------

def test_sglang_map_of_failed_ranks_is_padded_and_round_trips(tmp_path):
    p = Problem(_loads(3, 24, 2), 32, 1, 2, 8, failed=[2, 5])      # 6 live GPUs x 4 slots
    plan = solve(p, "kk_swap").plan
    path = export_plan(plan, tmp_path / "map.json", "sglang", problem=p, layer_offset=1)
    rows = json.loads(path.read_text())["physical_to_logical_map"]
    assert len(rows) == 4 and all(len(r) == 32 for r in rows)      # uniform: 8 ranks x 4 slots
    padded = read_exported_plan(path, "sglang", num_experts=24, layer_offset=1)
    dead = padded.phy2log.view(3, 8, 4)[:, [2, 5], :]
    assert bool((dead == 0).all())                                   # SGLang's filler for dead ranks
    back = live_map(padded, 8, [2, 5])
    assert torch.equal(back.phy2log, plan.phy2log)                   # the same live placement
    s = score(p, back)
    assert bool((s.gpu_load[:, [2, 5]] == 0).all())                  # no token reaches a dead rank
    assert torch.allclose(s.gpu_load.sum(1), p.weights.sum(1))


def test_engine_maps_refuse_what_they_cannot_express(tmp_path):
    p = Problem(_loads(2, 24, 2), 32, 1, 2, 8, failed=[2])
    plan = solve(p, "kk_swap").plan
    with pytest.raises(OptionError) as err:
        export_plan(plan, tmp_path / "x.yaml", "trtllm", problem=p)
    assert err.value.param == "format" and "padded" in str(err.value)
    uneven = Problem(_loads(2, 12, 2), num_nodes=2, num_gpus=4, gpu_slots=[6, 0, 6, 4])
    with pytest.raises(OptionError) as err:
        export_plan(solve(uneven, "kk_swap").plan, tmp_path / "x.json", "sglang", problem=uneven)
    assert err.value.param == "format" and "4, 6" in str(err.value)
    # a healthy map read as if ranks failed: refused when an expert loses every replica
    healthy = Problem(_loads(1, 8, 2), 8, 1, 1, 2)
    with pytest.raises(OptionError) as err:
        live_map(Plan.from_phy2log([list(range(8))], 8), 2, [1])
    assert err.value.param == "failed"
    assert healthy.num_replicas == 8
    with pytest.raises(OptionError):
        padded_map(plan, [4, 4, 0, 3, 4, 4, 4, 4])


def test_cli_converts_and_scores_a_padded_map_of_failed_ranks(tmp_path, capsys):
    loads, plan, out = tmp_path / "loads.npz", tmp_path / "plan.json", tmp_path / "map.json"
    np.savez(loads, loads=_loads(3, 24, 4).numpy().astype("int64"))
    shape = ["--nodes", "2", "--gpus", "8", "--replicas", "32", "--failed", "2,5"]
    assert main(["plan", "--loads", str(loads), *shape, "--solver", "kk_swap", "--out", str(plan), "--json"]) == 0
    mine = json.loads(capsys.readouterr().out)
    assert main(["convert", str(plan), "--to", "sglang", "--out", str(out)]) == 0
    said = capsys.readouterr().out
    assert "ranks 2,5 failed" in said and "--ep-num-redundant-experts 8" in said and "padded to 32" in said
    assert main(["score", "--loads", str(loads), "--plan", str(out), "--nodes", "2", "--gpus", "8",
                 "--failed", "2,5", "--json"]) == 0
    theirs = json.loads(capsys.readouterr().out)
    # the padded map, its failed ranks masked, scores as the plan itself
    for key in ("max_load_sum", "max_load_worst", "imbalance_mean"):
        assert theirs[key] == pytest.approx(mine[key])


def test_app_offers_the_padded_sglang_map_of_failed_ranks(tmp_path):
    p = Problem(_loads(2, 24, 2), 32, 1, 2, 8, failed=[5])
    res = solve(p, "kk_swap")
    downloads = plan_downloads(res.plan, p, policy=res.policy, solver="kk_swap", options=res.options,
                               metrics=res.score.metrics(), layer_offset=0, loads_name="x")
    by = {d.filename: d for d in downloads}
    assert set(by) == {"plan.json", "expert_location_sglang.json", "plan.csv"}   # no TensorRT-LLM map
    assert "ranks 5 failed" in by["expert_location_sglang.json"].usage
    path = tmp_path / "map.json"
    path.write_bytes(by["expert_location_sglang.json"].data)
    back = live_map(read_exported_plan(path, "sglang", num_experts=24), 8, [5])
    assert torch.equal(back.phy2log, res.plan.phy2log)


def test_a_gpu_that_gained_slots_gets_them_filled_when_experts_need_more_replicas_than_slots():
    """The plan in force of 3 slots a GPU on a cluster now holding 4, 4, 3, 3, 3, 3, 2, 2: the
    GPUs that gained a slot start with a hole; the rescue of candidate B asks for more replicas
    than there are slots, and must still fill every hole (it used to leave one: index -1)."""
    g = torch.Generator().manual_seed(0)
    w = torch.exp(torch.randn(3, 16, generator=g, dtype=torch.float64) * 1.2) * 100
    healthy = Cluster(2, 8, 24)
    uneven = Cluster(2, 8, gpu_slots=[4, 4, 3, 3, 3, 3, 2, 2])
    before = solve(Problem(w.flip(1), num_groups=4, cluster=healthy), "deepseek").plan
    p = Problem(w, num_groups=4, cluster=uneven)
    for slack in (0.0, 0.01, 0.05):
        r = replan_after_failure(p, before, healthy, slack=slack)
        assert r.plan.phy2log.min() >= 0 and bool((r.plan.logcnt >= 1).all())
        fresh_t = torch.tensor(r.info["fresh_max_time"], dtype=torch.float64)
        assert bool((r.score.max_time <= fresh_t * (1 + slack) * (1 + 1e-9)).all())
