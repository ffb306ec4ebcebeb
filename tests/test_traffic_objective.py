"""traffic_aware's weighted objective (traffic_weight), its window steps and robust measure,
the co-activation lift, and the batched search pieces."""
import json

import pytest
import torch
from hypothesis import given, settings, strategies as st

import solvers
from solvers import Cluster, Plan, Problem, score
from solvers.cli import main
from solvers.cluster import ModelPreset
from solvers.errors import OptionError
from solvers.routing import RoutingTrace, generate_routing, save_routing
from solvers.routing.coactivation import coactivation_lift
from solvers.routing.nodes import unit_time
from solvers.routing.placement import capacity_assign, choose
from solvers.routing.robust import excess_covariance, robust_imbalance, unit_spread, window_steps


# 4 layers of 32 experts, top-4, on 2 nodes x 4 GPUs: seconds, not minutes, per solve.
SMALL = ModelPreset("small-32", 4, 32, 1, 4, cluster="nodes-2x4")


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def small():
    tr = generate_routing(SMALL, 0, num_tokens=256, num_ranks=8, communities=4, num_topics=8)
    return tr, Problem(tr.loads(), cluster=Cluster(2, 8, 40))


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 6), st.integers(1, 5), st.integers(0, 10_000), st.floats(0, 5), st.floats(0, 5),
       st.booleans())
def test_a_larger_weight_never_picks_more_bytes(C, L, seed, w1, w2, with_robust):
    """For one candidate set, raising the traffic weight never raises any layer's bytes
    (random candidates: bytes, imbalances, some beyond the epsilon limit)."""
    g = torch.Generator().manual_seed(seed)
    bytes_ = torch.randint(0, 1000, (C, L), generator=g).to(torch.float64)
    imb = 1 + 0.2 * torch.rand(C, L, generator=g, dtype=torch.float64)
    robust = imb + 0.1 * torch.rand(C, L, generator=g, dtype=torch.float64) if with_robust else None
    lo, hi = sorted((w1, w2))
    a = choose(bytes_, imb, robust, 0.05, lo, balanced=C - 1)
    b = choose(bytes_, imb, robust, 0.05, hi, balanced=C - 1)
    picked = lambda c: bytes_.gather(0, c.view(1, L))[0]                     # noqa: E731
    assert bool((picked(b) <= picked(a)).all())
    # unset weight: the least bytes among the allowed, never more than any weight's pick
    c = choose(bytes_, imb, robust, 0.05, None, balanced=C - 1)
    assert bool((picked(c) <= picked(b)).all())


def test_choose_keeps_the_epsilon_limits():
    """A candidate above max(1 + epsilon, the balance-only plan's) is never picked, however
    few bytes it has; the balance-only plan is always allowed."""
    bytes_ = torch.tensor([[0.0, 0.0], [50.0, 50.0], [100.0, 100.0]])
    imb = torch.tensor([[1.20, 1.04], [1.05, 1.30], [1.01, 1.01]])
    for w in (None, 0.0, 1.0, 100.0):
        c = choose(bytes_, imb, None, 0.05, w, balanced=2)
        assert c[0].item() in (1, 2) and c[1].item() in (0, 2)
    assert choose(bytes_, imb, None, 0.05, None, balanced=2).tolist() == [1, 0]
    assert choose(bytes_, imb, None, 0.05, 0.0, balanced=2).tolist() == [2, 2]   # weight 0: balance alone


def test_traffic_weight_trades_traffic_for_balance(small):
    """On a fixed instance the solver's total inter-node bytes never rise with the weight,
    and every plan keeps the epsilon limit beside the weight."""
    tr, problem = small
    base = score(problem, solvers.solve(problem, "kk_swap", policy="global").plan).imbalance
    limit = torch.clamp(base, min=1.05)
    totals = []
    for w in (0.0, 0.05, 1.0, 100.0):
        r = solvers.solve(problem, "traffic_aware", routing=tr, traffic_weight=w, max_swaps=5)
        s = score(problem, r.plan, routing=tr)
        assert bool((s.imbalance <= limit + 1e-9).all())
        assert r.info["traffic_weight"] == w
        totals.append(s.summary["inter_node_bytes"])
    assert all(b <= a for a, b in zip(totals, totals[1:])), totals
    assert totals[-1] < totals[0]


def test_window_steps_cut_the_trace_in_time_order(small):
    tr, problem = small
    steps, noise = window_steps(problem, tr, None, 4)
    assert steps.shape == (4, tr.num_layers, tr.num_experts) and noise.shape == (tr.num_layers, tr.num_experts)
    first = tr.tokens(0, 64).loads().to(torch.float64)
    scale = problem.weights.to(torch.float64).sum(1, keepdim=True) / first.sum(1, keepdim=True)
    assert torch.allclose(steps[0], first * scale)
    assert torch.allclose(steps.sum(2), problem.weights.to(torch.float64).sum(1).expand(4, -1))
    with pytest.raises(OptionError, match="history"):
        window_steps(problem, tr, torch.ones(3, 2, 2), 4)
    given_steps, no_noise = window_steps(problem, tr, torch.ones(3, tr.num_layers, tr.num_experts), 4)
    assert given_steps.shape[0] == 3 and no_noise is None


def test_covariance_sees_experts_that_move_together():
    """Two experts rising and falling together covary; their node's std is larger with both
    on it than with one on each node; the Poisson noise leaves the diagonal."""
    up = torch.tensor([10.0, 30.0, 10.0, 30.0])
    down = 40 - up
    steps = torch.stack([up, up, down, down], 1).view(4, 1, 4)                     # [B=4, L=1, E=4]
    cov = excess_covariance(steps, None)
    assert cov[0, 0, 1] > 0 and cov[0, 0, 2] < 0
    together = Plan.from_phy2log(torch.tensor([[0, 1, 2, 3]]), 4)                  # 2 nodes x 2 slots
    apart = Plan.from_phy2log(torch.tensor([[0, 2, 1, 3]]), 4)
    assert unit_spread(cov, together, 2).max() > unit_spread(cov, apart, 2).max() + 1
    noisy = excess_covariance(steps, torch.full((1, 4), 1e6))
    assert torch.equal(noisy.diagonal(dim1=1, dim2=2), torch.zeros(1, 4))
    assert excess_covariance(steps[:1], None) is None


def test_robust_imbalance_is_the_plain_one_at_risk_zero(small):
    tr, problem = small
    plan = solvers.solve(problem, "deepseek", policy="global").plan
    steps, noise = window_steps(problem, tr, None, 4)
    cov = excess_covariance(steps, noise)
    plain = unit_time(problem.weights, plan, problem.num_gpus)
    assert torch.allclose(robust_imbalance(problem.weights, cov, 0.0, plan, problem.num_gpus), plain)
    assert torch.allclose(score(problem, plan).imbalance.to(torch.float64), plain)
    assert bool((robust_imbalance(problem.weights, cov, 1.0, plan, problem.num_gpus) >= plain - 1e-12).all())


def test_capacity_assign_respects_slots_and_places_everything():
    """Every expert placed, no node above its own slot count: even nodes, and nodes of a real
    cluster (different slot counts and caps, a dead node with none)."""
    g = torch.Generator().manual_seed(3)
    L, E, N = 4, 20, 4
    w = torch.rand(L, E, generator=g, dtype=torch.float64)
    cnt = torch.ones(L, E, dtype=torch.int64)
    for slots, share in ((torch.full((N,), 6), torch.ones(N, dtype=torch.float64)),
                         (torch.tensor([9, 0, 5, 7]), torch.tensor([1.4, 0.0, 1.0, 1.2], dtype=torch.float64))):
        cap = 1.1 * (w.sum(1) / N).view(L, 1) * share.view(1, N)
        node = capacity_assign(torch.rand(L, E, N, generator=g), w, cnt, torch.full((L, E), -1), slots, cap)
        assert bool((node >= 0).all())
        used = torch.nn.functional.one_hot(node, N).sum(1)
        assert bool((used <= slots).all())


def test_coactivation_lift_separates_structure_from_independence():
    g = torch.Generator().manual_seed(0)
    ids = torch.stack([torch.stack([torch.randperm(64, generator=g)[:8] for _ in range(2000)]) for _ in range(2)])
    independent = coactivation_lift(RoutingTrace(ids, 64))
    structured = coactivation_lift(generate_routing("olmoe-1b-7b", 0, num_tokens=2000))
    assert 0.8 < independent < 1.1
    assert structured > 2.0


def test_cli_traffic_weight(small, tmp_path, capsys):
    tr, _ = small
    path = save_routing(tr, tmp_path / "t.npz")
    base = ["plan", "--loads", str(path), "--replicas", "40", "--gpus", "8",
            "--nodes", "2", "--routing", str(path), "--out", str(tmp_path / "p.json")]
    assert main(base + ["--solver", "traffic_aware", "--traffic-weight", "0.5", "-O", "max_swaps=3",
                        "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["inter_node_bytes"] > 0
    doc = json.loads((tmp_path / "p.json").read_text())
    assert json.dumps(doc).count("traffic_weight") >= 1
    for extra, word in ((["--solver", "kk_swap", "--traffic-weight", "1"], "traffic_aware"),
                        (["--solver", "traffic_aware", "--traffic-weight", "1", "-O", "traffic_weight=2"], "both"),
                        (["--solver", "traffic_aware", "--traffic-weight", "-1"], "traffic_weight")):
        assert main(base + extra) != 0
        err = capsys.readouterr().err
        assert word in err and len(err.strip().splitlines()) == 1, err
    assert main(["routing", "info", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["coactivation_lift"] > 1


def test_cli_compare_takes_the_traffic_weight_for_traffic_aware(small, tmp_path, capsys):
    """compare --traffic-weight reaches traffic_aware (and only a solver that declares it)."""
    tr, _ = small
    path = save_routing(tr, tmp_path / "t.npz")
    base = ["compare", "--loads", str(path), "--replicas", "40", "--gpus", "8", "--nodes", "2",
            "--routing", str(path), "--policy", "global", "--json", "-O", "max_swaps=3"]
    rows = {}
    for weight in ("0", "100"):
        assert main(base + ["--solvers", "deepseek,traffic_aware", "--traffic-weight", weight]) == 0
        doc = json.loads(capsys.readouterr().out)
        rows[weight] = {r["solver"]: r for r in doc["rows"]}["traffic_aware"]
    # per layer a heavier weight never picks more inter-node bytes (solvers.routing.placement.choose)
    assert rows["100"]["inter_node_bytes"] <= rows["0"]["inter_node_bytes"]
    assert main(base + ["--solvers", "deepseek", "--traffic-weight", "1"]) == 2
    err = capsys.readouterr().err
    assert "traffic_weight" in err and "traffic_aware" in err and len(err.strip().splitlines()) == 1, err


def test_routing_info_takes_a_shipped_name(capsys):
    assert main(["routing", "info", "deepseek-v3-routing"]) == 0
    out = capsys.readouterr().out
    assert "58 layers x 3072 tokens" in out and "co-activation lift 3.62" in out


def test_static_dispatch_bound_is_valid_and_no_weaker():
    """The bound with one remote node per (source GPU, expert) is never below the per-token
    relaxation, and never above the copies of any plan within the limit (random plans,
    scored with the nearest-replica dispatcher)."""
    pytest.importorskip("ortools")
    from benchmarks.traffic_bound import traffic_bound
    g = torch.Generator().manual_seed(5)
    E, T, k, N, P, R = 8, 40, 2, 2, 4, 12
    ids = torch.stack([torch.randperm(E, generator=g)[:k] for _ in range(T)]).unsqueeze(0)
    tr = RoutingTrace(ids, E, torch.randint(0, P, (T,), generator=g), P)
    problem = Problem(tr.loads(), cluster=Cluster(N, P, R))
    limit = 1.5
    static, ok1 = traffic_bound(problem, tr, limit, time_limit=20, workers=1)
    loose, ok2 = traffic_bound(problem, tr, limit, time_limit=20, workers=1, per_token_dispatch=True)
    assert bool(ok1.all() and ok2.all())
    assert static[0] >= loose[0]
    assert_random_plans_within_bound(problem, tr, static[0], limit, g, "imbalance")


def assert_random_plans_within_bound(problem, tr, bound: float, limit: float, g: torch.Generator, field: str) -> None:
    """300 random plans of one layer (every expert at least once): each whose ``field`` of
    the score (``imbalance``, or ``time_imbalance`` on a real cluster) is within ``limit``
    has at least ``bound`` inter-node bytes, and more than 10 of them are within it."""
    E, R = problem.num_experts, problem.num_replicas
    seen = 0
    for _ in range(300):
        p2l = torch.cat([torch.randperm(E, generator=g), torch.randint(0, E, (R - E,), generator=g)])
        plan = Plan.from_phy2log(p2l[torch.randperm(R, generator=g)].view(1, R), E)
        s = score(problem, plan, routing=tr, token_bytes=1)
        if float(getattr(s, field)[0]) <= limit:
            seen += 1
            assert s.traffic.layer_bytes[0] >= bound - 1e-9
    assert seen > 10
