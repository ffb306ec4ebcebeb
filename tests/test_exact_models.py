"""Every exact model on every backend equals a brute-force enumeration on tiny instances."""
import math
import random

import pytest
import torch

from solvers import Problem, SolutionStatus, Termination, get_solver, lower_bound, solve
from solvers.bounds import optimal_counts
from tests.brute import brute_force

BACKENDS = ["cpsat", "highs", "cbc"]


def backend(name):
    spec = get_solver(name)
    if not spec.is_available():
        pytest.skip(f"{name} not installed here: {spec.requires}")
    return name


def check(r, problem, expected, what, universal=True):
    """Optimal (in the solver's model when it is restricted), equal to the brute-force value,
    and never below any proven bound. A restricted model's bound never leaks into lower_bound."""
    obj = float(r.objective[0])
    if universal:
        assert r.termination is Termination.OPTIMAL, (what, r.termination, r.message)
        assert r.status is SolutionStatus.PROVEN_OPTIMAL, (what, r.status)
        assert r.model_bound is None
    else:
        assert r.termination is Termination.OPTIMAL, (what, r.termination, r.message)
        assert r.status in (SolutionStatus.PROVEN_OPTIMAL, SolutionStatus.OPTIMAL_IN_MODEL), (what, r.status)
        assert bool(r.optimal_in_model.all())
        assert r.model_scope is not None and not r.model_scope.universal
        assert float(r.model_bound[0]) <= obj * (1 + 1e-9)
    assert obj == pytest.approx(expected, rel=1e-6, abs=1e-9), what
    assert float(r.lower_bound[0]) <= obj * (1 + 1e-9) + 1e-9
    assert float(lower_bound(problem)[0]) <= obj + 1e-9
    # the universal bound is never above the unrestricted optimum
    unrestricted = brute_force(problem.weights[0].tolist(), problem.num_replicas, problem.num_gpus, model="joint")
    assert float(r.lower_bound[0]) <= unrestricted * (1 + 1e-9) + 1e-12, what


def tiny_instances(seed, count, max_experts=6):
    rng = random.Random(seed)
    out = []
    while len(out) < count:
        P = rng.choice([1, 2, 3, 4])
        S = rng.choice([1, 2, 3]) if P <= 2 else rng.choice([1, 2])
        R = P * S
        E = rng.randint(1, min(max_experts, R))
        kind = rng.random()
        if kind < 0.4:
            w = [rng.randint(0, 100) for _ in range(E)]
        elif kind < 0.8:
            w = [round(rng.lognormvariate(0, 1.2) * 37, 3) for _ in range(E)]     # float loads
        else:
            w = [rng.choice([0, 10, 10, 50]) for _ in range(E)]                    # ties and zeros
        out.append((w, R, P))
    return out


@pytest.mark.parametrize("name", BACKENDS)
def test_joint_matches_brute_force(name):
    backend(name)
    for w, R, P in tiny_instances(1, 6):
        p = Problem([w], R, 1, 1, P)
        r = solve(p, name, model="joint", time_limit=20)
        check(r, p, brute_force(w, R, P, model="joint"), (w, R, P))


@pytest.mark.parametrize("name", BACKENDS)
def test_packing_matches_brute_force(name):
    backend(name)
    for w, R, P in tiny_instances(2, 6):
        p = Problem([w], R, 1, 1, P)
        counts = optimal_counts(torch.tensor([w], dtype=torch.float64), R)[0].tolist()
        r = solve(p, name, model="packing", replica_counts=counts, time_limit=20)
        assert r.plan.logcnt[0].tolist() == counts
        check(r, p, brute_force(w, R, P, model="packing", counts=counts), (w, R, P, counts), universal=False)


@pytest.mark.parametrize("name", BACKENDS)
def test_forbidden_colocation_matches_brute_force(name):
    backend(name)
    for w, R, P in tiny_instances(3, 8):
        if len(w) < R // P:
            continue                       # infeasible shape: tested in test_exact_contract
        p = Problem([w], R, 1, 1, P)
        r = solve(p, name, model="joint", colocation="forbidden", time_limit=20)
        check(r, p, brute_force(w, R, P, model="joint", colocation="forbidden"), (w, R, P), universal=False)
        assert r.score.duplicates == 0


@pytest.mark.parametrize("name", BACKENDS)
@pytest.mark.parametrize("colocation", ["allowed", "forbidden"])
def test_replication_matches_brute_force(name, colocation):
    backend(name)
    instances = tiny_instances(4, 6)
    if colocation == "forbidden":
        # Counts that a duplicate-free plan cannot place with DeepSeek's packing (it put
        # two replicas of expert 1 on one GPU here), then random feasible shapes.
        instances = [([3, 92, 61, 17], 6, 3)] + [x for x in tiny_instances(9, 12) if len(x[0]) >= x[1] // x[2]][:6]
    for w, R, P in instances:
        p = Problem([w], R, 1, 1, P)
        r = solve(p, name, model="replication", colocation=colocation, time_limit=20)
        rep = r.info["replication_objective"][0]
        expected = brute_force(w, R, P, model="replication", colocation=colocation)
        assert rep == pytest.approx(expected, rel=1e-6, abs=1e-9), (w, R, P)
        # its optimum bounds the max GPU load of the plan it returns
        assert rep <= float(r.objective[0]) * (1 + 1e-9) + 1e-9
        if colocation == "forbidden":
            assert r.score.duplicates == 0, (w, R, P, r.plan.phy2log.tolist())
            assert int(r.plan.logcnt.max()) <= P


def hierarchical_instances(seed, count):
    rng = random.Random(seed)
    out = []
    while len(out) < count:
        N = 2
        G = rng.choice([2, 4])
        E = G if G == 4 else rng.choice([2, 4])
        gpn = rng.choice([1, 2])
        P = N * gpn
        S = rng.choice([1, 2, 3]) if gpn == 1 else rng.choice([1, 2])
        R = P * S
        if R < E:
            continue
        out.append(([rng.randint(0, 60) for _ in range(E)], R, G, N, P))
    return out


@pytest.mark.parametrize("name", BACKENDS)
@pytest.mark.parametrize("budget", ["fixed", "free"])
def test_hierarchical_matches_brute_force(name, budget):
    backend(name)
    for w, R, G, N, P in hierarchical_instances(5 if budget == "fixed" else 6, 4):
        p = Problem([w], R, G, N, P)
        expected = brute_force(w, R, P, model="hierarchical", num_groups=G, num_nodes=N, node_budget=budget)
        r = solve(p, name, policy="hierarchical", node_budget=budget, time_limit=20)
        if math.isinf(expected):
            assert r.termination is Termination.INFEASIBLE and r.status is SolutionStatus.NONE and r.plan is None
            continue
        assert r.policy == "hierarchical"
        check(r, p, expected, (w, R, G, N, P, budget), universal=False)


@pytest.mark.parametrize("name", BACKENDS)
def test_hierarchical_fixed_counts_matches_brute_force(name):
    backend(name)
    for w, R, G, N, P in hierarchical_instances(8, 4):
        p = Problem([w], R, G, N, P)
        greedy = solve(p, "deepseek", policy="hierarchical")
        counts = greedy.plan.logcnt[0].tolist()
        expected = brute_force(w, R, P, model="hierarchical", counts=counts, num_groups=G, num_nodes=N)
        r = solve(p, name, policy="hierarchical", model="packing", time_limit=20)
        check(r, p, expected, (w, R, G, N, P, counts), universal=False)
        assert float(r.objective[0]) <= float(greedy.objective[0]) + 1e-9


def test_multi_layer_solve_is_per_layer():
    backend("cpsat")
    w = [[600, 560, 120, 120], [1, 2, 3, 4], [0, 0, 0, 0]]
    p = Problem(w, 8, 1, 1, 4)
    r = solve(p, "cpsat", model="joint", time_limit=20)
    assert r.termination is Termination.OPTIMAL
    for layer, row in enumerate(w):
        assert float(r.objective[layer]) == pytest.approx(brute_force(row, 8, 4, model="joint"))
    assert r.lower_bound.shape == (3,)
