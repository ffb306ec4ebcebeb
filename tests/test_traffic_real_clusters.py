"""traffic_aware on real clusters: GPUs of different speeds, uneven slot counts, failed GPUs.

Nodes are filled by capacity in time (a node's share of the load follows the sum of its
live GPUs' speeds, its slots the sum of its GPUs' slots) and packed in time inside each
node; the plan is graded by the shared scorer in time, traffic included."""
import json

import pytest
import torch
from hypothesis import assume, given, settings, strategies as st

import solvers
from solvers import Cluster, Problem, score
from solvers.cli import main
from solvers.cluster import ModelPreset
from solvers.routing import RoutingTrace, generate_routing, save_routing
from tests.test_traffic_objective import assert_random_plans_within_bound

# 4 layers of 32 experts, top-4 (8 topic communities): seconds per solve.
SMALL = ModelPreset("small-32", 4, 32, 1, 4, cluster="nodes-2x4")
CLUSTERS = {
    # half the GPUs 1.4x faster (one node of each)
    "mixed": Cluster(2, 8, 40, gpu_speed=[1.0] * 4 + [1.4] * 4),
    # uneven slots, and nodes of different slot counts (24 and 16)
    "uneven": Cluster(2, 8, gpu_slots=[6, 6, 6, 6, 4, 4, 4, 4]),
    # a failed GPU: its node has 3 live GPUs, 15 slots against 20
    "failed": Cluster(2, 8, 40, failed=[5]),
    # four nodes, one of them dead, the others mixed
    "dead node": Cluster(4, 8, 48, gpu_speed=[1.0, 1.0, 1.4, 1.4, 1.0, 1.0, 1.0, 1.0], failed=[6, 7]),
}
# the default epsilon: every layer's time imbalance <= max(1 + EPSILON, kk_swap's)
EPSILON = 0.05


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def trace():
    return generate_routing(SMALL, 0, num_tokens=256, num_ranks=8, communities=4, num_topics=8)


@pytest.fixture(scope="module")
def results(trace):
    """Per cluster kind: (problem, traffic_aware's score, kk_swap's score, traffic_aware's output)."""
    out = {}
    for name, cluster in CLUSTERS.items():
        problem = Problem(trace.loads(), cluster=cluster)
        ours = solvers.solve(problem, "traffic_aware", routing=trace, max_swaps=5)
        base = solvers.solve(problem, "kk_swap")
        out[name] = (problem, score(problem, ours.plan, routing=trace), score(problem, base.plan, routing=trace), ours)
    return out


@pytest.mark.parametrize("kind", list(CLUSTERS))
def test_valid_plans_on_real_clusters(results, kind):
    """Every expert served, no replica on a failed GPU, each GPU exactly its slot count
    (the plan's slots follow the cluster's slot map), graded in time."""
    problem, s, _, out = results[kind]
    c = problem.cluster
    assert out.plan.phy2log.shape == (problem.num_layers, c.num_replicas)
    assert bool((out.plan.logcnt >= 1).all())
    for g in c.failed:
        assert float(s.gpu_load[:, g].abs().sum()) == 0.0
    assert s.time_imbalance is not None and bool((s.time_imbalance >= 1 - 1e-12).all())
    assert out.info["layers_repaired"] == 0


@pytest.mark.parametrize("kind", list(CLUSTERS))
def test_balance_in_time_within_epsilon_of_kk_swap(results, kind):
    """Every layer's time imbalance <= max(1 + epsilon, kk_swap's on the same cluster)."""
    _, s, k, _ = results[kind]
    limit = torch.clamp(k.time_imbalance, min=1 + EPSILON)
    assert bool((s.time_imbalance <= limit + 1e-9).all())


@pytest.mark.parametrize("kind", ["mixed", "failed"])
def test_a_zero_traffic_weight_is_as_fast_as_kk_swap(trace, kind):
    """With traffic weight 0 (and risk 0: the plain imbalance) the choice minimises the time
    imbalance alone, and kk_swap's plan is a candidate: no layer slower than kk_swap's."""
    problem = Problem(trace.loads(), cluster=CLUSTERS[kind])
    ours = solvers.solve(problem, "traffic_aware", routing=trace, traffic_weight=0.0, risk=0.0, max_swaps=3)
    base = solvers.solve(problem, "kk_swap")
    assert bool((ours.score.max_time <= base.score.max_time * (1 + 1e-12)).all())


@pytest.mark.parametrize("kind", list(CLUSTERS))
def test_cuts_inter_node_bytes_against_the_balance_only_plan(results, kind):
    """On a trace with topic communities, at least 10 % fewer inter-node bytes than the
    hierarchy-free balance-only plan (kk_swap, global), and no layer with more."""
    _, s, k, _ = results[kind]
    assert s.traffic.layer_bytes.le(k.traffic.layer_bytes).all()
    assert s.summary["inter_node_bytes"] <= 0.9 * k.summary["inter_node_bytes"]


def test_no_hierarchical_candidate_on_a_real_cluster(results):
    """DeepSeek's hierarchical plan needs identical GPUs: it is never a candidate here."""
    for _, _, _, out in results.values():
        assert out.info["layers_hierarchical"] == 0


def test_one_live_node_is_the_balance_only_plan(trace):
    """All GPUs of the other node failed: no cross-node traffic to cut, kk_swap's plan."""
    problem = Problem(trace.loads(), cluster=Cluster(2, 8, 64, failed=[4, 5, 6, 7]))
    ours = solvers.solve(problem, "traffic_aware", routing=trace)
    assert torch.equal(ours.plan.phy2log, solvers.solve(problem, "kk_swap").plan.phy2log)
    assert ours.info["fallback_layers"] == problem.num_layers


def test_cli_plan_and_compare_with_a_routing_trace_on_a_real_cluster(trace, tmp_path, capsys):
    """eplb plan --routing with --gpu-speed / --failed, and compare with a routing trace:
    traffic_aware runs (not refused) and reports traffic beside balance in time."""
    path = tmp_path / "small.npz"
    save_routing(trace, path)
    base = ["--loads", str(path), "--replicas", "40", "--gpus", "8", "--nodes", "2", "--routing", str(path),
            "--gpu-speed", "1,1,1,1,1.4,1.4,1.4,1.4", "--failed", "5"]
    out = tmp_path / "plan.json"
    assert main(["plan", *base, "--solver", "traffic_aware", "-O", "max_swaps=3", "--out", str(out), "--json"]) == 0
    m = json.loads(capsys.readouterr().out)
    assert m["inter_node_bytes"] > 0 and m["time_imbalance_worst"] >= 1
    assert main(["compare", *base, "--solvers", "kk_swap,traffic_aware", "-O", "max_swaps=3", "--json"]) == 0
    rows = {r["solver"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    assert rows["traffic_aware"]["termination"] == "completed"
    assert rows["traffic_aware"]["inter_node_bytes"] < rows["kk_swap"]["inter_node_bytes"]
    limit = max(1 + EPSILON, rows["kk_swap"]["time_imbalance_worst"])
    assert rows["traffic_aware"]["time_imbalance_worst"] <= limit + 1e-9


@pytest.mark.parametrize("cluster", [Cluster(2, 4, gpu_slots=[4, 2, 3, 3], gpu_speed=[1.0, 1.0, 1.4, 1.4]),
                                     Cluster(2, 4, 16, failed=[1])], ids=["uneven-mixed", "failed"])
def test_traffic_bound_is_valid_on_real_clusters(cluster):
    """The CP-SAT bound with per-node slots and capacities in time is never above the
    inter-node copies of any plan within its time-imbalance limit (random plans, scored
    by the shared scorer with the nearest-replica dispatcher)."""
    pytest.importorskip("ortools")
    from benchmarks.traffic_bound import traffic_bound
    g = torch.Generator().manual_seed(7)
    E, T, k, P = 8, 40, 2, 4
    ids = torch.stack([torch.randperm(E, generator=g)[:k] for _ in range(T)]).unsqueeze(0)
    tr = RoutingTrace(ids, E, torch.randint(0, P, (T,), generator=g), P)
    problem = Problem(tr.loads(), cluster=cluster)
    limit = 1.6
    bound, ok = traffic_bound(problem, tr, limit, time_limit=20, workers=1)
    assert bool(ok.all())
    assert_random_plans_within_bound(problem, tr, bound[0], limit, g, "time_imbalance")


def test_robust_imbalance_in_time_is_the_scorers_at_risk_zero(results):
    """robust_imbalance on a real cluster: the scorer's time imbalance at risk 0, and never
    below it with a risk term."""
    from solvers.routing.robust import excess_covariance, robust_imbalance, window_steps
    for problem, s, _, out in results.values():
        plain = robust_imbalance(problem.weights, None, 0.0, out.plan, problem.num_gpus, problem.cluster)
        assert torch.allclose(plain, s.time_imbalance.to(torch.float64))
        steps, noise = window_steps(problem, generate_routing(SMALL, 0, num_tokens=256, num_ranks=8, communities=4,
                                                              num_topics=8), None, 4)
        cov = excess_covariance(steps, noise)
        risky = robust_imbalance(problem.weights, cov, 1.0, out.plan, problem.num_gpus, problem.cluster)
        assert bool((risky >= plain - 1e-12).all())


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from([(2, 4), (2, 6), (3, 6), (4, 8)]), st.data())
def test_any_small_real_cluster_gets_a_valid_plan_within_the_limit(seed, shape, data):
    """Random slot counts (0 = drained), speeds and failed GPUs: traffic_aware always returns
    a plan the scorer accepts (every expert served, each GPU its own slot count), every
    layer within max(1 + epsilon, kk_swap's time imbalance), never more inter-node bytes
    than kk_swap in any layer."""
    N, P = shape
    E = 12
    slots = data.draw(st.lists(st.integers(0, 5), min_size=P, max_size=P))
    assume(sum(slots) >= E + 1)
    speed = data.draw(st.lists(st.sampled_from([1.0, 1.4, 2.0]), min_size=P, max_size=P))
    g = torch.Generator().manual_seed(seed)
    L, T, k = 2, 64, 3
    ids = torch.stack([torch.stack([torch.randperm(E, generator=g)[:k] for _ in range(T)]) for _ in range(L)])
    tr = RoutingTrace(ids, E, torch.randint(0, P, (T,), generator=g), P)
    problem = Problem(tr.loads(), cluster=Cluster(N, P, gpu_slots=slots, gpu_speed=speed))
    ours = solvers.solve(problem, "traffic_aware", routing=tr, max_swaps=3, iterations=3)
    base = solvers.solve(problem, "kk_swap")
    s, b = score(problem, ours.plan, routing=tr), score(problem, base.plan, routing=tr)
    assert bool((ours.plan.logcnt >= 1).all())
    assert bool((s.time_imbalance <= torch.clamp(b.time_imbalance, min=1 + EPSILON) + 1e-9).all())
    assert bool(s.traffic.layer_bytes.le(b.traffic.layer_bytes).all())


def test_more_spare_slots_than_experts_to_spread():
    """R - E above E x (nodes - 1) (every expert once per node and slots still left, on
    identical GPUs too): the slots left go to the other experts, and the plan is valid."""
    g = torch.Generator().manual_seed(0)
    E, P = 8, 4
    ids = torch.stack([torch.stack([torch.randperm(E, generator=g)[:3] for _ in range(64)]) for _ in range(2)])
    tr = RoutingTrace(ids, E, torch.randint(0, P, (64,), generator=g), P)
    for cluster in (Cluster(2, 4, 24), Cluster(2, 4, 24, gpu_speed=[1.0, 1.0, 2.0, 2.0])):
        problem = Problem(tr.loads(), cluster=cluster)
        ours = solvers.solve(problem, "traffic_aware", routing=tr)
        assert ours.plan is not None and int(ours.plan.logcnt.sum(1)[0]) == 24
        base = solvers.solve(problem, "kk_swap")
        assert bool((ours.score.time_imbalance <= torch.clamp(base.score.time_imbalance, min=1 + EPSILON) + 1e-9)
                    .all())
