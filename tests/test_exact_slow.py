"""Issue-3 targets that take tens of seconds (marked slow; the benchmark script prints them)."""
import time

import pytest
import torch

from solvers import Problem, SolutionStatus, Termination, get_solver, lower_bound, solve
from solvers.bounds import optimal_counts

pytestmark = pytest.mark.slow


def lognormal(seed, layers, experts):
    g = torch.Generator().manual_seed(seed)
    return (torch.exp(torch.randn(layers, experts, generator=g, dtype=torch.float64)) * 1000).round()


def need(name):
    if not get_solver(name).is_available():
        pytest.skip(f"{name} not installed")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sixteen_experts_fixed_counts_cpsat_and_highs_agree(seed):
    need("cpsat")
    need("highs")
    w = lognormal(seed, 1, 16)
    p = Problem(w, 20, 1, 1, 4)
    counts = optimal_counts(w, 20)
    r = solve(p, "cpsat", model="packing", replica_counts=counts, time_limit=10)
    assert bool(r.optimal_in_model.all())
    h = solve(p, "highs", model="packing", replica_counts=counts, time_limit=60)
    assert bool(h.optimal_in_model.all())
    assert float(h.objective[0]) == pytest.approx(float(r.objective[0]), rel=1e-6)


@pytest.mark.parametrize("policy,options", [("global", {"model": "packing"}),
                                            ("hierarchical", {"model": "packing"})])
def test_deepseek_v3_layer_warm_started(policy, options):
    need("cpsat")
    p = Problem(lognormal(0, 1, 256), 288, 8, 4, 32)
    greedy = solve(p, "deepseek", policy=policy)
    start = time.perf_counter()
    r = solve(p, "cpsat", time_limit=10, policy=policy, **options)
    assert time.perf_counter() - start <= 12
    assert r.termination in (Termination.TIME_LIMIT, Termination.OPTIMAL, Termination.COMPLETED)
    assert r.status is not SolutionStatus.NONE
    assert float(r.objective[0]) <= float(greedy.objective[0]) + 1e-9
    assert float(lower_bound(p)[0]) <= float(r.lower_bound[0]) <= float(r.objective[0])
    if r.model_bound is not None:
        assert float(r.model_bound[0]) <= float(r.objective[0]) * (1 + 1e-9)
    assert r.gap_max < 0.05
