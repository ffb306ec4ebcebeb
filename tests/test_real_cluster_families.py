"""Real clusters (speeds, uneven slots, failed GPUs) through migration, dynamics (simulate,
robust planners) and the CLI's replay commands: every plan graded in time by the shared
scorer."""
from __future__ import annotations

import json
import math

import pytest
import torch

from solvers import Cluster, Plan, Problem, score, solve
from solvers.dynamics import simulate
from solvers.dynamics.robust import time_robust_search
from solvers.dynamics import step_stats
from solvers.errors import OptionError
from solvers.replan import plan_with_migration
from solvers.transfers import schedule_transfers

SHAPES = {
    "mixed": dict(num_nodes=2, num_gpus=8, num_replicas=48, gpu_speed=[1.0] * 4 + [1.4] * 4),
    "uneven": dict(num_nodes=2, num_gpus=8, gpu_slots=[7, 5] * 4),
    "failed": dict(num_nodes=2, num_gpus=8, num_replicas=48, failed=[2]),
}


def _trace(T=24, L=2, E=32, seed=0):
    """[T, L, E] drifting lognormal token counts."""
    g = torch.Generator().manual_seed(seed)
    base = torch.exp(torch.randn(L, E, generator=g, dtype=torch.float64))
    drift = torch.exp(0.05 * torch.randn(T, L, E, generator=g, dtype=torch.float64).cumsum(0))
    return (base * drift * 100).round()


def _time_imbalance(sc) -> torch.Tensor:
    return sc.time_imbalance if sc.time_imbalance is not None else sc.imbalance


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_migration_in_time_keeps_each_layer_within_slack_with_few_moves(shape):
    c = Cluster(**SHAPES[shape])
    loads = _trace()
    old = solve(Problem(loads[:8].sum(0), cluster=c), "kk_swap").plan
    p = Problem(loads[8:16].sum(0), cluster=c)
    fresh = solve(p, "kk_swap", previous=old)
    r = plan_with_migration(p, "kk_swap", old, slack=0.02)
    target = torch.tensor(r.info["target_max_time"], dtype=torch.float64)
    assert torch.allclose(target, fresh.score.max_time * 1.02)
    assert bool((r.score.max_time <= target * (1 + 1e-9)).all())
    assert r.score.moves < fresh.score.moves / 2
    assert sum(r.info["moves_per_layer"]) == r.score.moves


@pytest.mark.slow
def test_migration_in_time_budget_widens_the_slack_of_the_layers_that_save_most():
    c = Cluster(**SHAPES["failed"])
    loads = _trace()
    old = solve(Problem(loads[:8].sum(0), cluster=c), "kk_swap").plan
    p = Problem(loads[8:16].sum(0), cluster=c)
    fresh = solve(p, "kk_swap", previous=old)
    tight = plan_with_migration(p, "kk_swap", old, slack=0.0)
    capped = plan_with_migration(p, "kk_swap", old, slack=0.0, budget=0.2)
    assert capped.score.moves <= max(tight.score.moves, int(fresh.score.moves * 0.2))
    assert capped.score.moves <= tight.score.moves
    if capped.score.moves < tight.score.moves:
        assert capped.info["relaxed_layers"]


def test_migration_in_time_refuses_makespan_with_a_budget_or_the_exact_method():
    c = Cluster(**SHAPES["uneven"])
    loads = _trace(T=4)
    old = solve(Problem(loads[:2].sum(0), cluster=c), "kk_swap").plan
    p = Problem(loads[2:].sum(0), cluster=c)
    with pytest.raises(OptionError) as err:
        plan_with_migration(p, "kk_swap", old, slack=0.01, objective="makespan", budget=0.5)
    assert err.value.param == "budget"
    with pytest.raises(OptionError) as err:
        plan_with_migration(p, "kk_swap", old, slack=0.01, objective="makespan", method="exact")
    assert err.value.param == "objective"


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_step_stats_are_the_shared_scorers_time_imbalance(shape):
    c = Cluster(**SHAPES[shape])
    loads = _trace(T=6)
    plan = solve(Problem(loads[:3].sum(0), cluster=c), "kk_swap").plan
    imb, worst, lost, ratio = step_stats(loads[3:], plan, c.num_gpus, c)
    for i, t in enumerate(range(3, 6)):
        sc = score(Problem(loads[t], cluster=c), plan)
        ti = _time_imbalance(sc)
        assert float(imb[i]) == pytest.approx(float(ti.mean()), rel=1e-12)
        assert float(worst[i]) == pytest.approx(float(ti.max()), rel=1e-12)
        # tokens lost: what the cluster could have served while its slowest GPU finished
        assert float(lost[i]) == pytest.approx(float((sc.max_time * c.total_speed - loads[t].sum(1)).sum()),
                                               rel=1e-9)
        ideal = loads[t].sum(1) / c.total_speed
        assert float(ratio[i]) == pytest.approx(float(sc.max_time.sum() / ideal.sum()), rel=1e-12)


@pytest.mark.parametrize("solver", ["ewma", pytest.param("robust_sum", marks=pytest.mark.slow)])
def test_simulate_on_a_real_cluster_in_time(solver):
    c = Cluster(**SHAPES["mixed"])
    loads = _trace(T=20)
    plain = simulate(loads, cluster=c, solver=solver, every=6, window=6)
    mig = simulate(loads, cluster=c, solver=solver, every=6, window=6, migration_slack=0.02)
    for res in (plain, mig):
        assert res.rebalances and bool((res.scored >= 1).all())
        # in time: the same plan on mixed speeds is worse in time than in tokens, and the
        # in-sample figures are the scorer's time imbalance
        assert all(r["in_sample_imbalance"] >= 1 for r in res.rebalances)
    assert mig.totals()["total_moves"] < plain.totals()["total_moves"]


@pytest.mark.parametrize("shape", ["uneven", "failed"])
def test_simulate_schedules_transfers_on_uneven_slots_and_failed_gpus(shape):
    # the schedule maps slots to GPUs by the cluster's slot map: every rebalance's copies are timed
    c = Cluster(**SHAPES[shape])
    res = simulate(_trace(T=16), cluster=c, solver="kk_swap", every=4, window=4, expert_bytes=10**9,
                   migration_slack=0.02, migration_objective="makespan", transfer_model="shared")
    later = res.rebalances[1:]
    assert later and all(r["makespan_seconds"] is not None and r["stall_seconds"] == r["makespan_seconds"]
                         for r in later)
    assert any(r["moves"] > 0 for r in later)
    assert all((r["moves"] > 0) == (r["makespan_seconds"] > 0) for r in later)
    assert all(r["makespan_seconds"] >= r["bound_seconds"] * (1 - 1e-9) for r in later)
    assert res.totals()["stall_seconds"] == pytest.approx(sum(r["stall_seconds"] for r in res.rebalances))


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_time_robust_search_never_worsens_the_sum_of_step_times(shape):
    c = Cluster(**SHAPES[shape])
    hist = _trace(T=8)
    p = Problem(hist.sum(0), cluster=c)
    start = solve(p, "kk_swap").plan
    out, rounds = time_robust_search(hist, start.phy2log, c.num_gpus, 1, "sum", 32, c)

    def step_sum(p2l):
        plan = type(start).from_phy2log(p2l, p.num_experts)
        return sum(score(Problem(hist[t], cluster=c), plan).max_time for t in range(hist.shape[0]))

    before, after = step_sum(start.phy2log), step_sum(out)
    assert bool((after <= before * (1 + 1e-12)).all())
    assert rounds >= 1 and float(after.sum()) < float(before.sum())
    # the searched plan keeps every GPU's slot count and every expert
    r = solve(p, "robust_sum", history=hist)
    assert bool((r.plan.logcnt >= 1).all()) and r.plan.num_replicas == c.num_replicas


def test_cli_simulate_and_migration_on_a_real_cluster(tmp_path, capsys):
    import numpy as np

    from solvers.cli import main
    trace = tmp_path / "trace.npz"
    np.savez(trace, loads=_trace(T=16).numpy().astype("int64"))
    shape = ["--nodes", "2", "--gpus", "8", "--gpu-slots", "7,5,7,5,7,5,7,5"]
    assert main(["simulate", "--loads", str(trace), *shape, "--solver", "kk_swap", "--every", "4",
                 "--migration-slack", "0.02", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["rebalances"] >= 2 and out["mean_imbalance"] >= 1
    # with an expert size the stalls are timed on the uneven cluster too
    assert main(["simulate", "--loads", str(trace), *shape, "--solver", "kk_swap", "--every", "4",
                 "--expert-bytes", "1000000000", "--json"]) == 0
    timed = json.loads(capsys.readouterr().out)
    assert timed["stall_seconds"] > 0 and timed["net_efficiency"] < 1
    # a plan of this uneven cluster re-planned migration-aware with a move budget
    loads = tmp_path / "loads.npz"
    np.savez(loads, loads=_trace(T=16).numpy()[:8].sum(0).astype("int64"))
    later = tmp_path / "later.npz"
    np.savez(later, loads=_trace(T=16).numpy()[8:].sum(0).astype("int64"))
    old, new = tmp_path / "old.json", tmp_path / "new.json"
    assert main(["plan", "--loads", str(loads), *shape, "--solver", "kk_swap", "--out", str(old)]) == 0
    assert main(["plan", "--loads", str(later), *shape, "--solver", "kk_swap", "--previous", str(old),
                 "--migration-slack", "0.01", "--migration-budget", "0.3", "--out", str(new), "--json"]) == 0
    capsys.readouterr()
    doc = json.loads(new.read_text())
    assert doc["problem"]["gpu_slots"] == [7, 5] * 4 and doc["metrics"]["moves"] > 0
    # planning for makespan under the sharing model on the uneven cluster: within the slack, and
    # its schedule (the cluster's slot map) never longer than the move-count plan's
    timed = tmp_path / "timed.json"
    moved = tmp_path / "moved.json"
    assert main(["plan", "--loads", str(later), *shape, "--solver", "kk_swap", "--previous", str(old),
                 "--migration-slack", "0.02", "--out", str(moved)]) == 0
    assert main(["plan", "--loads", str(later), *shape, "--solver", "kk_swap", "--previous", str(old),
                 "--migration-slack", "0.02", "--migration-objective", "makespan", "--transfer-model", "shared",
                 "--out", str(timed)]) == 0
    c = Cluster(**SHAPES["uneven"])
    plans = {k: Plan.from_phy2log(torch.tensor(json.loads(f.read_text())["phy2log"]), 32)
             for k, f in (("old", old), ("moved", moved), ("timed", timed))}
    span = {k: schedule_transfers(plans["old"], plans[k], 8, 4, 10**9, c.network, 32, "shared", c.slot_gpus()).makespan
            for k in ("moved", "timed")}
    assert span["timed"] <= span["moved"] * (1 + 1e-12)
    capsys.readouterr()
    # eplb score schedules the copies on the uneven cluster by its slot map, and writes them
    sched = tmp_path / "schedule.csv"
    assert main(["score", "--loads", str(later), "--plan", str(timed), "--previous", str(old), *shape,
                 "--expert-bytes", "1000000000", "--transfer-model", "shared", "--out", str(sched), "--json"]) == 0
    m = json.loads(capsys.readouterr().out)
    assert m["transfers"]["makespan_seconds"] == pytest.approx(span["timed"], rel=1e-12)
    assert m["transfers"]["moves"] == m["moves"] and sched.exists()
    assert main(["plan", "--loads", str(later), *shape, "--solver", "kk_swap", "--previous", str(old),
                 "--migration-slack", "0.02", "--transfer-model", "shared", "--out", str(tmp_path / "y.json")]) != 0
    assert "transfer_model" in capsys.readouterr().err


def test_cli_exact_migration_on_a_real_cluster(tmp_path, capsys):
    """--migration exact on a small uneven, mixed-speed cluster: planned in time, no more moves
    than the heuristic re-plan, every layer within the slack of the fresh plan's max time."""
    import numpy as np

    from solvers.cli import main
    g = np.random.default_rng(0)
    shape = ["--nodes", "1", "--gpus", "4", "--gpu-slots", "3,2,3,2", "--gpu-speed", "1.4,1,1.4,1"]
    loads, later = tmp_path / "loads.npz", tmp_path / "later.npz"
    np.savez(loads, loads=g.integers(1, 100, (2, 5)))
    np.savez(later, loads=g.integers(1, 100, (2, 5)))
    old = tmp_path / "old.json"
    assert main(["plan", "--loads", str(loads), *shape, "--solver", "kk_swap", "--out", str(old)]) == 0
    moves = {}
    for method in ("heuristic", "exact"):
        out = tmp_path / f"{method}.json"
        assert main(["plan", "--loads", str(later), *shape, "--solver", "kk_swap", "--previous", str(old),
                     "--migration-slack", "0.02", "--migration", method, "--out", str(out)]) == 0
        doc = json.loads(out.read_text())
        assert doc["problem"]["gpu_slots"] == [3, 2, 3, 2]
        moves[method] = doc["metrics"]["moves"]
    capsys.readouterr()
    assert moves["exact"] <= moves["heuristic"]


# The hot-expert packing bound (solvers.bounds.hot_expert_packing_bound) -------------------

def test_hot_expert_packing_bound_reaches_the_brute_force_optimum():
    from solvers.bounds import lower_bounds
    from tests.brute import brute_force, cluster_brute_force
    # 3 GPUs x 2 slots: expert 1 needs 2 replicas (32.5 each), and each of their GPUs must
    # take one more replica, at least 7: 39.5, which the other bounds (32.5) miss
    w = [8.0, 65.0, 7.0, 7.0, 9.0]
    b = lower_bounds(Problem([w], 6, 1, 1, 3))
    opt = brute_force(w, 6, 3)
    assert opt == pytest.approx(39.5)
    assert max(float(v[0]) for k, v in b.items() if k != "hot_expert_packing") == pytest.approx(32.5)
    assert opt * (1 - 1e-5) <= float(b["hot_expert_packing"][0]) <= opt
    # with speeds and a failed GPU: still below the optimum, above the other bounds
    slots, speed = [2, 2, 0, 2], [1.4, 1.4, 1.0, 1.4]
    p = Problem(torch.tensor([w], dtype=torch.float64), num_gpus=4, gpu_slots=slots, gpu_speed=speed)
    b = lower_bounds(p)
    opt = cluster_brute_force(w, slots, speed)
    assert max(float(v[0]) for k, v in b.items() if k != "hot_expert_packing") < float(b["hot_expert_packing"][0])
    assert float(b["hot_expert_packing"][0]) <= opt


def test_hot_expert_packing_bound_never_exceeds_optima_of_hot_and_tail_layers():
    """A hot expert and a tail of small ones on few slots (the Zipf failed-GPU shape in
    small): the bound stays below every brute-force optimum."""
    import random

    from solvers.bounds import lower_bounds
    from tests.brute import cluster_brute_force
    rng = random.Random(5)
    for _ in range(40):
        E = rng.randint(3, 5)
        w = [float(rng.randint(200, 900))] + [float(rng.randint(1, 40)) for _ in range(E - 1)]
        G = rng.randint(2, 3)
        slots = [rng.randint(1, 3) for _ in range(G)]
        if not E <= sum(slots) <= 8:
            continue
        speed = [rng.choice([1.0, 1.4]) for _ in range(G)]
        p = Problem(torch.tensor([w], dtype=torch.float64), num_gpus=G, gpu_slots=slots, gpu_speed=speed)
        assert float(lower_bounds(p)["hot_expert_packing"][0]) <= cluster_brute_force(w, slots, speed) * (1 + 1e-12)


# The scheduled split in time (solvers.dispatch.timed) ----------------------------------------

def _best_split_by_enumeration(t, p2l, slot_gpu, speed):
    """min over integer splits (every expert's tokens over the GPUs holding it) of the max GPU time."""
    import itertools
    gpus = [sorted({g for e2, g in zip(p2l, slot_gpu) if e2 == e}) for e in range(len(t))]

    def splits(n, k):
        if k == 1:
            yield (n,)
            return
        for first in range(n + 1):
            for rest in splits(n - first, k - 1):
                yield (first, *rest)

    best = math.inf
    for choice in itertools.product(*[list(splits(int(t[e]), len(gpus[e]))) for e in range(len(t))]):
        load = [0] * len(speed)
        for e, parts in enumerate(choice):
            for g, x in zip(gpus[e], parts):
                load[g] += x
        best = min(best, max(x / s for x, s in zip(load, speed)))
    return best


def test_scheduled_split_in_time_is_the_integer_optimum():
    import random

    import numpy as np

    from benchmarks.schedule_lp import lp_time
    from solvers.dispatch.schedule import split_one
    rng = random.Random(2)
    for _ in range(40):
        E, P = rng.randint(2, 3), rng.randint(2, 3)
        slots = [rng.randint(0, 3) for _ in range(P)]
        if sum(slots) < E or sum(slots) > 6:
            continue
        speed = np.array([rng.choice([0.5, 1.0, 1.4, 2.0]) for _ in range(P)])
        slot_gpu = np.repeat(np.arange(P), slots)
        p2l = np.array(list(range(E)) + [rng.randrange(E) for _ in range(sum(slots) - E)])
        rng.shuffle(p2l)
        t = np.array([rng.randint(0, 6) for _ in range(E)])
        x, value = split_one(t, p2l, slot_gpu, speed)
        assert value == pytest.approx(_best_split_by_enumeration(t, p2l.tolist(), slot_gpu.tolist(), speed), rel=1e-12)
        # a valid split: every expert's tokens on its own slots, the max time as reported
        assert np.array_equal(np.bincount(p2l, weights=x, minlength=E), t)
        load = np.bincount(slot_gpu, weights=x, minlength=P)
        assert (load / speed).max() == pytest.approx(value) if t.sum() else value == 0
        assert value >= lp_time(t, p2l, slot_gpu, speed) * (1 - 1e-12)


def test_scorer_grades_the_scheduled_split_in_time():
    c = Cluster(1, 4, None, gpu_slots=[7, 4, 5, 0], gpu_speed=[1.0, 1.4, 2.0, 1.0])
    g = torch.Generator().manual_seed(0)
    p = Problem(torch.exp(torch.randn(2, 12, generator=g, dtype=torch.float64)).mul(100).round(), cluster=c)
    plan = solve(p, "kk_swap").plan
    tok = (torch.rand(3, 2, 12, generator=g) * 50).round().to(torch.int64)
    sched, even = score(p, plan, tokens=tok, split="scheduled"), score(p, plan, tokens=tok)
    assert bool((sched.max_time <= even.max_time * (1 + 1e-12)).all())
    assert float(sched.max_time.sum()) < float(even.max_time.sum())
    # the failed GPU serves nothing; every micro-batch's tokens are served
    assert sched.split == "scheduled"


# Forbidden colocation on real clusters (solvers.heuristics.packing) -------------------

@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("solver", ["kk_swap", "best"])
def test_forbidden_colocation_on_real_clusters(shape, solver):
    c = Cluster(**SHAPES[shape])
    g = torch.Generator().manual_seed(4)
    # lognormal loads: the allowed plan puts two replicas of a hot expert on one GPU
    w = torch.exp(torch.randn(3, 24, generator=g, dtype=torch.float64)).mul(100).round()
    p = Problem(w, cluster=c)
    opts = {"time_limit": 0.5} if solver == "best" else {}
    allowed = solve(p, solver, **opts)
    r = solve(p, solver, colocation="forbidden", **opts)
    assert r.score.duplicates == 0 and bool((r.plan.logcnt <= len(c.live_gpus)).all())
    assert bool((r.score.max_time >= r.lower_bound * (1 - 1e-9)).all())
    assert allowed.score.duplicates > 0
    # measured 0.2-5.4 % here (small layers: on the mixed shape CP-SAT's forbidden model finds
    # a layer 4 % better than the swap repair); against the bound for duplicates allowed
    assert r.gap_max < 0.08
