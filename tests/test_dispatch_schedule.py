"""Token scheduling (solvers.dispatch.schedule_tokens) against the HiGHS LP, on random small
instances and the corner cases: experts with one replica, zero-token experts, one expert
holding every token, replicas of one expert on one GPU."""
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from solvers import Plan, PlanError, ProblemError
from solvers.dispatch import schedule_tokens, schedule_with_bound
from solvers.dispatch.lp import optimal_max_loads, solve_lp
from solvers.exact.backends import highs_available

needs_highs = pytest.mark.skipif(not highs_available(), reason="highspy not installed")


@st.composite
def instances(draw):
    """(plan, tokens [B, L, E], P): every expert has a slot, extra slots go anywhere."""
    P = draw(st.integers(1, 5))
    E = draw(st.integers(1, 9))
    S = draw(st.integers(max(1, -(-E // P)), -(-E // P) + 3))
    R = P * S
    L = draw(st.integers(1, 2))
    B = draw(st.integers(1, 3))
    rows = []
    for _ in range(L):
        extra = draw(st.lists(st.integers(0, E - 1), min_size=R - E, max_size=R - E))
        perm = draw(st.permutations(list(range(E)) + extra))
        rows.append(perm)
    plan = Plan.from_phy2log(torch.tensor(rows), E)
    kind = draw(st.sampled_from(["random", "sparse", "one_expert", "all_zero"]))
    if kind == "one_expert":
        t = torch.zeros(B, L, E, dtype=torch.int64)
        t[..., draw(st.integers(0, E - 1))] = draw(st.integers(1, 500))
    elif kind == "all_zero":
        t = torch.zeros(B, L, E, dtype=torch.int64)
    else:
        hi = draw(st.sampled_from([3, 40, 1000]))
        vals = draw(st.lists(st.integers(0, hi), min_size=B * L * E, max_size=B * L * E))
        t = torch.tensor(vals, dtype=torch.int64).view(B, L, E)
        if kind == "sparse":
            t = t * (torch.arange(B * L * E).view(B, L, E) % 3 == 0)
    return plan, t, P


def _check_split(plan, tokens, P, x):
    B, L, E = tokens.shape
    assert x.shape == (B, L, plan.num_replicas) and x.dtype == torch.int64
    assert bool((x >= 0).all())
    sums = torch.zeros(B, L, E, dtype=torch.int64).scatter_add_(2, plan.phy2log.expand(B, -1, -1), x)
    assert torch.equal(sums, tokens)                      # every token served exactly once
    return x.view(B, L, P, -1).sum(-1).max(-1).values     # [B, L] max GPU load


@needs_highs
@given(instances())
def test_max_load_equals_the_lp_integer_optimum(inst):
    plan, tokens, P = inst
    x, bound = schedule_with_bound(plan, tokens, P)
    top = _check_split(plan, tokens, P, x)
    assert torch.equal(top, optimal_max_loads(plan, tokens, P))
    assert torch.equal(top, bound)                        # the certificate it returns is tight


@needs_highs
def test_hot_expert_with_replicas_on_busy_gpus():
    # GPU0: e0 (hot, also on GPU1 and GPU2), e1; GPU1: e0, e2; GPU2: e0, e3; GPU3: e4, e5.
    plan = Plan.from_phy2log([[0, 1, 0, 2, 0, 3, 4, 5]], 6)
    tokens = torch.tensor([[[90, 30, 5, 0, 20, 21]]])
    top = _check_split(plan, tokens, 4, schedule_tokens(plan, tokens, 4))
    # GPUs 0-2 share 90 + 30 + 5 + 0 = 125 tokens: ceil(125 / 3) = 42; GPU3 holds 41.
    assert top.tolist() == [[42]]
    assert solve_lp(plan.phy2log[0], tokens[0, 0], 4).integer == 42


def test_single_replica_experts_are_fixed_load():
    plan = Plan.from_phy2log([[0, 1, 2, 3]], 4)          # no expert has a second replica
    tokens = torch.tensor([[[7, 1, 0, 9]]])
    x = schedule_tokens(plan, tokens, 2)
    assert x.tolist() == [[[7, 1, 0, 9]]]


def test_replicas_of_one_expert_on_one_gpu_share_its_tokens():
    plan = Plan.from_phy2log([[0, 0, 1, 2]], 3)          # e0 twice on GPU0
    tokens = torch.tensor([[[9, 2, 2]]])
    x = schedule_tokens(plan, tokens, 2)
    assert x[0, 0, :2].sum() == 9 and abs(int(x[0, 0, 0]) - int(x[0, 0, 1])) <= 1


def test_two_dimensional_tokens_are_one_microbatch():
    plan = Plan.from_phy2log([[0, 1, 0, 2]], 3)
    x = schedule_tokens(plan, [[10, 0, 4]], 2)
    assert x.shape == (1, 4) and x.sum() == 14
    assert x.view(2, 2).sum(-1).max() == 7


def test_large_layered_instance_is_exact_against_its_own_bound():
    # A DeepSeek-like shape, smaller: 3 layers, 64 experts, 80 slots on 8 GPUs.
    g = torch.Generator().manual_seed(3)
    from solvers import Problem, solve

    w = torch.distributions.LogNormal(0.0, 1.2).sample((3, 64))
    plan = solve(Problem(w, 80, 1, 1, 8), "deepseek").plan
    probs = (w / w.sum(-1, keepdim=True)).unsqueeze(0).expand(5, -1, -1)
    tokens = torch.stack([torch.multinomial(probs[b], 4096, replacement=True, generator=g) for b in range(5)])
    tokens = torch.zeros(5, 3, 64, dtype=torch.int64).scatter_add_(2, tokens, torch.ones_like(tokens))
    x, bound = schedule_with_bound(plan, tokens, 8)
    top = _check_split(plan, tokens, 8, x)
    assert torch.equal(top, bound)
    if highs_available():
        assert torch.equal(top, optimal_max_loads(plan, tokens, 8))


@pytest.mark.parametrize("tokens, message", [
    (torch.zeros(2, 1, 5, dtype=torch.int64), "tokens: must have shape"),
    (torch.tensor([[[1, -2, 3]]]), "tokens: token counts must be >= 0"),
    (torch.tensor([[[1.0, 2.5, 3.0]]]), "tokens: token counts must be whole numbers"),
    (torch.tensor([[[1.0, float("nan"), 3.0]]]), "tokens: token counts must be finite"),
    ([["a", "b", "c"]], "tokens: must hold token counts"),
    (torch.tensor([[[True, False, True]]]), "tokens: must hold integer token counts"),
])
def test_bad_tokens_name_the_parameter(tokens, message):
    plan = Plan.from_phy2log([[0, 1, 0, 2]], 3)
    with pytest.raises(ProblemError, match=message):
        schedule_tokens(plan, tokens, 2)


def test_plan_for_another_number_of_gpus():
    plan = Plan.from_phy2log([[0, 1, 0, 2]], 3)
    with pytest.raises(PlanError, match="^plan: has 4 slots per layer, not a multiple of num_gpus"):
        schedule_tokens(plan, torch.ones(1, 1, 3, dtype=torch.int64), 3)
    with pytest.raises(PlanError, match="^num_gpus"):
        schedule_tokens(plan, torch.ones(1, 1, 3, dtype=torch.int64), 0)
    with pytest.raises(PlanError, match="^plan"):
        schedule_tokens("not a plan", torch.ones(1, 1, 3, dtype=torch.int64), 2)


def test_float_whole_counts_and_numpy_are_accepted():
    plan = Plan.from_phy2log([[0, 1, 0, 2]], 3)
    a = schedule_tokens(plan, np.array([[[6.0, 1.0, 3.0]]]), 2)
    b = schedule_tokens(plan, torch.tensor([[[6, 1, 3]]]), 2)
    assert torch.equal(a, b)


@pytest.mark.gpu
def test_cuda_agrees_with_cpu():
    g = torch.Generator().manual_seed(0)
    from solvers import Problem, solve

    w = torch.distributions.LogNormal(0.0, 1.2).sample((4, 64))
    plan = solve(Problem(w, 96, 1, 1, 8), "deepseek").plan
    tokens = torch.randint(0, 300, (6, 4, 64), generator=g)
    cpu = schedule_tokens(plan, tokens, 8)
    cuda = schedule_tokens(plan.to("cuda"), tokens.cuda(), 8)
    assert cuda.device.type == "cuda"
    top_cpu = cpu.view(6, 4, 8, -1).sum(-1).max(-1).values
    top_cuda = cuda.cpu().view(6, 4, 8, -1).sum(-1).max(-1).values
    assert torch.equal(top_cpu, top_cuda)
    sums = torch.zeros(6, 4, 64, dtype=torch.int64).scatter_add_(2, plan.phy2log.expand(6, -1, -1), cuda.cpu())
    assert torch.equal(sums, tokens)


def test_no_microbatches_and_one_gpu():
    plan = Plan.from_phy2log([[0, 1, 0, 2]], 3)
    assert schedule_tokens(plan, torch.zeros(0, 1, 3, dtype=torch.int64), 2).shape == (0, 1, 4)
    one_gpu = schedule_tokens(Plan.from_phy2log([[0, 1, 2, 0]], 3), torch.tensor([[[5, 2, 3]]]), 1)
    assert one_gpu.sum() == 10 and one_gpu[0, 0, [0, 3]].sum() == 5
