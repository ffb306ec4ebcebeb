"""Two slots per GPU: the optimal pairing, the count-choice model (exact, checked by
enumeration against brute force) and its LP bound (never above a proven optimum)."""
import itertools
import time

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from solvers.backends import highs_available
from tests.brute import brute_force, packing_optimum
from solvers.certify.small_slots import (candidate_below, count_options, count_search, decision_below,
                                         exact_decide, lp_bound, lp_feasible, pair_phy2log, pair_values)

needs_highs = pytest.mark.skipif(not highs_available(), reason="needs highspy")


# Test references: the exact model without its plan, and an optimality proof of a value.

def exact_feasible(weights: np.ndarray, num_replicas: int, target: float, *, time_limit: float,
                   threads: int = 1) -> bool | None:
    """:func:`exact_decide` without the plan: False = no plan has max load <= target,
    True = one has, None = not decided."""
    return exact_decide(weights, num_replicas, target, time_limit=time_limit, threads=threads)[0]


def prove_optimal(weights: np.ndarray, num_replicas: int, value: float, *, time_limit: float,
                  threads: int = 1) -> float | None:
    """A bound for every plan equal to ``value`` (rounded down by ROUND_DOWN) when the exact
    model proves that no plan reaches the largest possible load below it; None if CP-SAT
    does not decide in time or finds such a plan (the caller's plan is then not optimal)."""
    target, bound = decision_below(weights, num_replicas, value)
    if target <= 0 or exact_feasible(weights, num_replicas, target, time_limit=time_limit,
                                     threads=threads) is False:
        return bound
    return None


@st.composite
def tiny_s2(draw, scale=None):
    """(weights [E], R) with 2 slots per GPU, 2-3 GPUs, 2-5 experts; loads either token
    counts or normalised (about 1e-3), since tolerances must be relative."""
    P = draw(st.integers(2, 3))
    E = draw(st.integers(2, 2 * P))
    w = draw(st.lists(st.integers(0, 60), min_size=E, max_size=E))
    if sum(w) == 0:
        w[0] = 1
    normalised = draw(st.booleans()) if scale is None else scale
    arr = np.array(w, dtype=np.float64)
    if normalised:
        arr = arr / arr.sum() * 1e-3
    return arr, 2 * P


def integer_model_feasible(weights: np.ndarray, R: int, target: float) -> bool:
    """The count-choice model solved by enumeration (one choice per expert, spare y)."""
    o = count_options(weights, R, target)
    if o is None:
        return False
    per_expert = [np.flatnonzero(o.expert == e) for e in range(len(weights))]
    for pick in itertools.product(*per_expert):
        pick = np.array(pick, dtype=np.int64)
        used = int(o.count[pick].sum())
        if used > R:
            continue
        spare_max = R - used if o.full[pick].any() else 0
        balance = np.zeros(o.num_levels, dtype=np.int64)
        np.add.at(balance, o.level[pick], o.sign[pick] * o.count[pick])
        if (np.cumsum(balance) + spare_max >= 0).all():
            return True
    return False


def test_pairing_is_optimal_for_fixed_counts():
    w = torch.tensor([90.0, 40.0, 61.0, 104.0, 7.0])
    counts = torch.tensor([2, 1, 2, 2, 1])
    loads = pair_values(w, counts[None])[0]
    items = (w / counts).tolist()
    assert float(loads[0]) == pytest.approx(packing_optimum(items, counts.tolist(), 4, False))
    p2l = pair_phy2log(w, counts)
    assert torch.bincount(p2l, minlength=5).tolist() == counts.tolist()
    gpu = (w / counts)[p2l].view(4, 2).sum(1)
    assert float(gpu.max()) == pytest.approx(float(loads[0]))


@settings(max_examples=40)
@given(tiny_s2())
def test_count_model_is_exact_against_brute_force(inst):
    weights, R = inst
    opt = brute_force(weights.tolist(), R, R // 2, model="joint")
    assert integer_model_feasible(weights, R, opt * (1 + 1e-9))
    assert not integer_model_feasible(weights, R, opt * (1 - 1e-6))


@needs_highs
@settings(max_examples=40)
@given(tiny_s2())
def test_lp_bound_never_exceeds_the_brute_force_optimum(inst):
    weights, R = inst
    opt = brute_force(weights.tolist(), R, R // 2, model="joint")
    assert lp_feasible(weights, R, opt * (1 + 1e-9), time_limit=10) is True
    bound = lp_bound(weights, R, weights.sum() / (R // 2) * 0.5, opt * 2, deadline=time.perf_counter() + 10)
    assert bound <= opt * (1 + 1e-9)


@needs_highs
def test_lp_bound_beats_the_average_on_a_lumpy_instance():
    # 90+20 and 60+30 is the only pairing shape: W/P = 100 is out of reach (optimum 110).
    weights = np.array([90.0, 60.0, 30.0, 20.0])
    opt = brute_force(weights.tolist(), 4, 2, model="joint")
    bound = lp_bound(weights, 4, 100.0, opt, deadline=time.perf_counter() + 10)
    assert 100.0 < bound <= opt * (1 + 1e-9)


def test_count_search_improves_and_keeps_the_slot_total():
    g = torch.Generator().manual_seed(3)
    w = torch.exp(torch.randn(12, generator=g, dtype=torch.float64)) * 100
    start = torch.ones(12, dtype=torch.int64)
    start[0] += 12                                       # 24 slots, a poor start
    c = count_search(w, start, deadline=time.perf_counter() + 30)
    assert int(c.sum()) == 24 and bool((c >= 1).all())
    assert float(pair_values(w, c[None])[0, 0]) < float(pair_values(w, start[None])[0, 0])


@needs_highs
def test_lns_reaches_the_brute_force_optimum_on_a_small_instance():
    from solvers.certify.small_slots import lns_counts
    w = torch.tensor([50.0, 31.0, 17.0, 9.0, 4.0])
    opt = brute_force(w.tolist(), 8, 4, model="joint")
    start = torch.tensor([4, 1, 1, 1, 1])
    c = lns_counts(w, start, deadline=time.perf_counter() + 20, free_size=5)
    assert int(c.sum()) == 8
    assert float(pair_values(w, c[None])[0, 0]) == pytest.approx(opt, rel=1e-6)


@needs_highs
def test_window_search_descends_to_the_brute_force_optimum():
    from solvers.certify.small_slots import window_search
    w = torch.tensor([50.0, 31.0, 17.0, 9.0, 4.0])
    opt = brute_force(w.tolist(), 8, 4, model="joint")
    start = torch.tensor([4, 1, 1, 1, 1])                 # 50 / 4 + 31: the optimum needs two steps
    c = window_search(w, start, deadline=time.perf_counter() + 30, window=1, max_window=2)
    assert int(c.sum()) == 8
    assert float(pair_values(w, c[None])[0, 0]) == pytest.approx(opt, rel=1e-9)


@needs_highs
def test_exact_decision_on_a_count_window_sees_only_the_window():
    from solvers.certify.small_slots import exact_decide
    w = np.array([50.0, 31.0, 17.0, 9.0, 4.0])
    opt = brute_force(w.tolist(), 8, 4, model="joint")    # 31, at counts (2, 2, 1, 1, 2)
    start = np.array([4, 1, 1, 1, 1])
    assert exact_decide(w, 8, opt * (1 + 1e-9), time_limit=10)[0] is True
    # within one of (4, 1, 1, 1, 1) the best plan is (3, 2, 1, 1, 1) at 32.17: no plan there
    assert exact_decide(w, 8, opt * (1 + 1e-9), time_limit=10, counts=start, window=1)[0] is False
    ok, counts = exact_decide(w, 8, 32.2, time_limit=10, counts=start, window=1)
    assert ok and int(counts.sum()) == 8 and np.abs(counts - start).max() <= 1
    assert float(pair_values(torch.tensor(w), torch.as_tensor(counts)[None])[0, 0]) <= 32.2


@needs_highs
@settings(max_examples=40, deadline=None)
@given(tiny_s2())
def test_exact_decision_matches_brute_force(inst):
    weights, R = inst
    opt = brute_force(weights.tolist(), R, R // 2, model="joint")
    assert exact_feasible(weights, R, opt * (1 + 1e-9), time_limit=10) is True
    assert exact_feasible(weights, R, opt * (1 - 1e-6), time_limit=10) is False


@settings(max_examples=40, deadline=None)
@given(tiny_s2())
def test_candidate_below_is_the_next_possible_load(inst):
    weights, R = inst
    opt = brute_force(weights.tolist(), R, R // 2, model="joint")
    above = opt * (1 + 1e-9)
    assert candidate_below(weights, R, above) == pytest.approx(opt, rel=1e-12)   # the optimum is a pair sum
    below = candidate_below(weights, R, opt)
    assert below < opt
    loads = [w / c for w in weights.tolist() for c in range(1, R - len(weights) + 2)]
    sums = [a + b for a in loads for b in loads if a + b < opt * (1 - 1e-12)]
    assert below == (max(sums) if sums else 0.0)


@needs_highs
@settings(max_examples=30, deadline=None)
@given(tiny_s2())
def test_proof_of_optimality_holds_only_at_the_optimum(inst):
    weights, R = inst
    opt = brute_force(weights.tolist(), R, R // 2, model="joint")
    proven = prove_optimal(weights, R, opt, time_limit=10)
    assert proven is not None and opt * (1 - 1e-6) <= proven <= opt
    worse = candidate_below(weights, R, opt * 1.5)                 # a possible load above the optimum
    if worse > opt * (1 + 1e-9):
        assert prove_optimal(weights, R, worse, time_limit=10) is None


@needs_highs
def test_certify_proves_the_optimum_at_two_slots_per_gpu():
    from solvers import Problem, solve
    w = [50.0, 31.0, 17.0, 9.0, 4.0, 23.0]
    opt = brute_force(w, 8, 4, model="joint")
    res = solve(Problem([w], 8, 1, 1, 4), "certify", policy="global", time_limit=20)
    assert res.status == "proven_optimal" and bool(res.proven_optimal.all())
    assert float(res.objective[0]) == pytest.approx(opt, rel=1e-9)
    assert float(res.lower_bound[0]) <= opt


@settings(max_examples=30, deadline=None)
@given(tiny_s2())
def test_exact_search_reaches_and_proves_the_brute_force_optimum(inst):
    from solvers.certify.small_slots import exact_search
    weights, R = inst
    opt = brute_force(weights.tolist(), R, R // 2, model="joint")
    E = len(weights)
    start = torch.ones(E, dtype=torch.int64)
    start[0] += R - E                                      # a poor start: every spare slot on expert 0
    counts, bound, proven = exact_search(torch.as_tensor(weights), start, 0.0,
                                         deadline=time.perf_counter() + 20)
    assert proven and int(counts.sum()) == R and bool((counts >= 1).all())
    value = float(pair_values(torch.as_tensor(weights), counts[None])[0, 0])
    assert value == pytest.approx(opt, rel=1e-9, abs=1e-300)
    assert bound <= opt and bound >= opt * (1 - 1e-9)


@needs_highs
@settings(max_examples=40, deadline=None)
@given(tiny_s2(), st.floats(1.0, 1.6))
def test_a_feasible_decision_comes_with_a_plan_within_the_target(inst, factor):
    from solvers.certify.small_slots import exact_decide
    weights, R = inst
    opt = brute_force(weights.tolist(), R, R // 2, model="joint")
    ok, counts = exact_decide(weights, R, opt * factor * (1 + 1e-9), time_limit=10)
    assert ok is True and int(counts.sum()) == R and bool((counts >= 1).all())
    assert float(pair_values(torch.as_tensor(weights), torch.as_tensor(counts)[None])[0, 0]) <= opt * factor * (1 + 1e-9)
