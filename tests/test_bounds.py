"""Lower bounds (docs/bounds.md): known values and validity against brute-force optima."""
import math
import random

import pytest
import torch

from solvers import OptionError, Problem, lower_bound, lower_bounds, solve
from solvers.bounds import item_bounds, optimal_counts
from tests.brute import brute_force, compositions

JOINT = [600, 560, 120, 120, 20, 10, 10, 10]


def test_known_values_on_the_joint_example():
    p = Problem([JOINT], 16, 1, 1, 8)
    b = lower_bounds(p, counts=[[5, 5, 1, 1, 1, 1, 1, 1]])
    assert float(b["average"][0]) == pytest.approx(1450 / 8)
    assert float(b["hottest_expert"][0]) == pytest.approx(600 / 8)
    assert float(b["replication"][0]) == pytest.approx(120)   # 600/5, 560/5 ... and the 120s
    # Counts 5,5,1..: items 120 x7, 112 x5, 20, 10 x3 on 8 GPUs; two of the top 9 items
    # share a GPU, at least the two smallest of them: 112 + 112 = 224.
    assert float(b["pigeonhole"][0]) == pytest.approx(224)
    assert float(lower_bound(p)[0]) == pytest.approx(181.25)


def test_item_bounds_forms():
    items = torch.tensor([[10.0, 9, 8, 1, 1, 1]])          # 3 bins of 2
    # j=0: 10 + 1; j=1: top 4 items -> two smallest of them 8 + 1 = 9... max is 11
    assert float(item_bounds(items, 3)[0]) == pytest.approx(11)
    items = torch.tensor([[5.0, 5, 5, 4, 4, 4]])             # top 4 -> 5 + 4 = 9
    assert float(item_bounds(items, 3)[0]) == pytest.approx(9)


def test_optimal_counts_match_enumeration():
    rng = random.Random(3)
    for _ in range(30):
        E, R = rng.randint(1, 5), rng.randint(5, 10)
        if R < E:
            continue
        w = [rng.randint(0, 50) for _ in range(E)]
        c = optimal_counts(torch.tensor([w], dtype=torch.float64), R)[0].tolist()
        best = min(max(x / k for x, k in zip(w, cs)) for cs in compositions(R, E, [R] * E))
        assert max(x / k for x, k in zip(w, c)) == pytest.approx(best)


def _tiny(rng):
    P = rng.choice([1, 2, 3, 4])
    S = rng.choice([1, 2, 3]) if P < 4 else rng.choice([1, 2])
    R = P * S
    E = rng.randint(1, min(5, R))
    w = [rng.choice([0, rng.randint(1, 30), rng.randint(1, 300)]) for _ in range(E)]
    return w, R, P


def test_bounds_never_exceed_brute_force_optima():
    rng = random.Random(7)
    for _ in range(60):
        w, R, P = _tiny(rng)
        p = Problem([w], R, 1, 1, P)
        opt = brute_force(w, R, P, model="joint")
        assert float(lower_bound(p)[0]) <= opt + 1e-9
        counts = optimal_counts(torch.tensor([w], dtype=torch.float64), R)[0].tolist()
        fixed = brute_force(w, R, P, model="packing", counts=counts)
        assert float(lower_bound(p, counts=[counts])[0]) <= fixed + 1e-9


def test_hierarchical_node_bounds_never_exceed_brute_force_optima():
    rng = random.Random(11)
    for _ in range(25):
        N = rng.choice([1, 2])
        G = N * rng.choice([1, 2])
        E = G * rng.choice([1, 2]) if G <= 2 else G
        gpn = rng.choice([1, 2])
        P = N * gpn
        S = rng.choice([1, 2, 3])
        R = P * S
        if R < E or E > 6:
            continue
        w = [rng.randint(0, 100) for _ in range(E)]
        p = Problem([w], R, G, N, P)
        for budget in ("fixed", "free"):
            opt = brute_force(w, R, P, model="hierarchical", num_groups=G, num_nodes=N, node_budget=budget)
            if math.isinf(opt):
                continue
            assert float(lower_bound(p, policy="hierarchical", node_budget=budget)[0]) <= opt + 1e-9


def test_default_bound_holds_for_greedy_plans_on_many_layers():
    torch.manual_seed(0)
    w = torch.distributions.LogNormal(0.0, 1.5).sample((64, 64)) * 100
    p = Problem(w, 80, 8, 2, 16)
    for policy in ("global", "hierarchical"):
        r = solve(p, "deepseek", policy=policy)              # solve() itself checks the bound
        assert bool((r.objective >= lower_bound(p) - 1e-9).all())
        if policy == "hierarchical":
            hb = lower_bound(p, counts=r.plan.logcnt, policy="hierarchical")
            assert bool((r.objective >= hb - 1e-9).all())


def test_bad_bound_arguments():
    p = Problem([[1.0, 2.0, 3.0]], 4, 1, 1, 2)
    with pytest.raises(OptionError, match="counts"):
        lower_bounds(p, counts=[[1, 1, 1]])
    with pytest.raises(OptionError, match="counts"):
        lower_bounds(p, counts=[[1, 1]])
    with pytest.raises(OptionError, match="policy"):
        lower_bounds(p, policy="ring")


def test_structure_bound_holds_and_tightens_for_strict_hierarchical_plans():
    from solvers import solve
    from solvers.bounds import structure_bound

    g = torch.Generator().manual_seed(3)
    w = torch.exp(1.5 * torch.randn(6, 64, generator=g, dtype=torch.float64)) * 100
    problem = Problem(w, 80, 8, 8, 16)                  # one group per node: node bound bites
    hier = solve(problem, "deepseek", policy="hierarchical")
    glob = solve(problem, "deepseek", policy="global")
    sb_h, sb_g = structure_bound(problem, hier.plan), structure_bound(problem, glob.plan)
    base = lower_bound(problem)
    assert bool((sb_h >= base).all()) and bool((sb_h > base * 1.01).any())
    assert bool((hier.objective >= sb_h * (1 - 1e-9)).all())
    assert torch.equal(sb_g, base)                      # a global plan gets the bound of any plan
    assert bool((glob.objective >= sb_g * (1 - 1e-9)).all())


def test_bad_bound_inputs_name_the_parameter():
    from solvers import Plan
    from solvers.bounds import structure_bound

    p = Problem([[1.0, 2.0, 3.0, 4.0]], 4, 1, 1, 2)
    with pytest.raises(OptionError, match="integers") as err:
        lower_bounds(p, counts=[1.5, 1, 1, 0.5])
    assert err.value.param == "counts"
    with pytest.raises(ValueError, match="num_replicas"):
        structure_bound(p, Plan.from_phy2log([[0, 1, 2, 3, 0, 1]], 4))


def test_replication_value_equals_the_greedy_optimum():
    """The bisection-started greedy gives exactly the optimal counts' value (ties, zeros, squares)."""
    from solvers.bounds import optimal_counts, replication_value

    g = torch.Generator().manual_seed(7)
    for trial in range(400):
        X, E = int(torch.randint(1, 4, (1,), generator=g)), int(torch.randint(1, 40, (1,), generator=g))
        R = E + int(torch.randint(0, 80, (1,), generator=g))
        kind = trial % 4
        if kind == 0:
            w = torch.randint(0, 5, (X, E), generator=g).double()
        elif kind == 1:
            w = torch.rand(X, E, generator=g, dtype=torch.float64) * 1e6
        elif kind == 2:
            w = torch.randint(0, 1000, (X, E), generator=g).double() ** 2
        else:
            w = torch.full((X, E), 7.0, dtype=torch.float64)
            w[:, 0] = float(torch.randint(0, 100, (1,), generator=g))
        assert torch.equal(replication_value(w, R), (w / optimal_counts(w, R)).max(1).values), (w, R)


def test_smallest_sum_matches_the_listed_multiset():
    """The k smallest items of a multiset (values each mult times, zero multiplicities and
    infinite values among them): the partial sort of small k and the full sort agree with
    listing every item."""
    from solvers.bounds import _smallest_sum
    g = torch.Generator().manual_seed(7)
    for trial in range(60):
        n = int(torch.randint(1, 12, (1,), generator=g))
        values = torch.randint(0, 6, (3, n), generator=g).to(torch.float64)
        if trial % 5 == 0:
            values[0, 0] = math.inf
        mult = torch.randint(0, 4, (3, n), generator=g).to(torch.float64)
        k = torch.randint(0, 2 * n + 2, (3,), generator=g).to(torch.float64)
        got = _smallest_sum(values, mult, k)
        for row in range(3):
            items = sorted(v for v, m in zip(values[row].tolist(), mult[row].tolist()) for _ in range(int(m)))
            want = sum(items[:int(k[row])]) if k[row] <= len(items) else math.inf
            assert got[row].item() == want, (values[row], mult[row], k[row])
