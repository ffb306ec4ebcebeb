"""The exact migration model on real clusters (per-GPU speeds, uneven slot counts, failed
GPUs): the fewest moves such that every GPU's time stays within the cap, each GPU holding
exactly its own slot count (none on a failed GPU); agreement with brute force on tiny
instances, and the ``migration`` solver's ``method="exact"`` graded in time."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from solvers import Cluster, Plan, Problem, get_solver, solve
from solvers.replan.exact import count_window, layer_time, solve_layer

pytestmark = pytest.mark.skipif(not get_solver("cpsat").is_available(), reason="ortools is not installed")


def _brute(w, old, slots, speed, cap):
    """Fewest moves over every phy2log row (each expert at least once) whose max time is <= cap."""
    E, R, P = len(w), int(sum(slots)), len(slots)
    slot_gpu = np.repeat(np.arange(P), slots)
    had = np.zeros((E, P), dtype=bool)
    had[old, slot_gpu] = True
    best = None
    for row in itertools.product(range(E), repeat=R):
        p2l = np.array(row)
        if len(set(row)) < E or layer_time(w, p2l, slot_gpu, speed) > cap * (1 + 1e-12):
            continue
        now = np.zeros((E, P), dtype=bool)
        now[p2l, slot_gpu] = True
        moves = int((now & ~had).sum())
        best = moves if best is None else min(best, moves)
    return best


CASES = [  # slots (0 = failed), speeds
    ([3, 2], [1.5, 1.0]),
    ([2, 2, 2], [1.4, 1.0, 1.0]),
    ([2, 0, 3], [1.0, 1.0, 2.0]),
    ([1, 2, 2], [0.5, 1.0, 1.25]),
]


@pytest.mark.parametrize("slots,speed", CASES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_exact_migration_in_time_agrees_with_brute_force(slots, speed, seed):
    rng = np.random.default_rng(seed)
    E, R, P = 3, sum(slots), len(slots)
    w = rng.integers(1, 60, E).astype(np.float64)
    old = np.concatenate([np.arange(E), rng.integers(0, E, R - E)])
    rng.shuffle(old)
    slot_gpu = np.repeat(np.arange(P), slots)
    # a cap between the best time and the plan in force's: some moves needed, not all
    best = min(layer_time(w, np.array(r), slot_gpu, np.array(speed))
               for r in itertools.product(range(E), repeat=R) if len(set(r)) == E)
    cap = best * (1 + 0.5 * rng.random())
    lo, hi, full = count_window(R, E, np.bincount(old, minlength=E))
    assert full                                           # every count a candidate: optimal = optimal
    res = solve_layer(w, old, cap, P, lo=lo, hi=hi, full_window=full, time_limit=20.0,
                      slots=np.array(slots), speed=np.array(speed))
    want = _brute(w, old, slots, np.array(speed), cap)
    assert res.proven and res.moves == want
    assert layer_time(w, res.phy2log, slot_gpu, np.array(speed)) <= cap * (1 + 1e-12)
    assert np.array_equal(np.bincount(slot_gpu, minlength=P), np.array(slots))       # no slot on a failed GPU
    assert set(res.phy2log.tolist()) == set(range(E))


def test_exact_migration_in_time_reports_an_infeasible_cap():
    w, slots, speed = np.array([10.0, 1.0, 1.0]), np.array([2, 2]), np.array([1.0, 1.0])
    lo, hi, full = count_window(4, 3, np.array([2, 1, 1]))
    res = solve_layer(w, np.array([0, 1, 0, 2]), 1.0, 2, lo=lo, hi=hi, full_window=full, time_limit=5.0,
                      slots=slots, speed=speed)
    assert res.phy2log is None and res.status == "INFEASIBLE"


@pytest.mark.parametrize("kw", [dict(num_gpus=4, gpu_slots=[3, 2, 3, 2], gpu_speed=[1.4, 1.0, 1.4, 1.0]),
                                dict(num_gpus=4, gpu_slots=[3, 3, 3, 3], failed=[1])])
def test_migration_solver_exact_in_time_never_moves_more_than_the_heuristic(kw):
    """End to end on a small real cluster: the exact pass keeps each layer within the time
    target and moves no more than the heuristic (elastic) re-plan; where a layer is proven,
    brute force confirms no plan within the target moves fewer."""
    c = Cluster(1, **kw)
    g = torch.Generator().manual_seed(3)
    E = 4
    old_w = (torch.rand(2, E, generator=g, dtype=torch.float64) * 100).round() + 1
    new_w = (torch.rand(2, E, generator=g, dtype=torch.float64) * 100).round() + 1
    old = solve(Problem(old_w, cluster=c), "kk_swap").plan
    p = Problem(new_w, cluster=c)
    heur = solve(p, "migration", current=old, base="kk_swap", slack=0.05, previous=old)
    exact = solve(p, "migration", current=old, base="kk_swap", slack=0.05, method="exact", time_limit=20.0,
                  previous=old)
    target = torch.tensor(exact.info["target_max_time"], dtype=torch.float64)
    assert bool((exact.score.max_time <= target * (1 + 1e-9)).all())
    assert exact.score.moves <= heur.score.moves
    assert sum(exact.info["moves_per_layer"]) == exact.score.moves
    slots = [s for s in c.gpu_slots]
    for rep in exact.info["exact_layers"]:
        if rep["proven"] and rep["full_window"]:
            layer = rep["layer"]
            want = _brute(new_w[layer].numpy(), old.phy2log[layer].numpy(), slots, np.array(c.gpu_speed),
                          float(target[layer]))
            assert exact.info["moves_per_layer"][layer] == want
    assert exact.info["exact_proven_layers"] >= 1
    assert isinstance(exact.plan, Plan)
