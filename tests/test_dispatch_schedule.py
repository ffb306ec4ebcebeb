"""Token scheduling (solvers.dispatch.schedule_tokens) against the HiGHS LP, on random small
instances and the corner cases: experts with one replica, zero-token experts, one expert
holding every token, replicas of one expert on one GPU."""
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.overrides import TorchFunctionMode

from solvers import Plan, PlanError, ProblemError
from solvers.dispatch import schedule_tokens, schedule_with_bound
from benchmarks.schedule_lp import optimal_max_loads, solve_lp
from solvers.backends import highs_available

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


class _NoHostSync(TorchFunctionMode):
    """Fails on every torch call that reads a tensor's data on the host or gives a shape that
    depends on it (what would synchronise a CUDA stream)."""

    FORBIDDEN = {"__bool__", "__int__", "__float__", "__index__", "item", "tolist", "numpy", "nonzero",
                 "argwhere", "masked_select", "unique", "unique_consecutive", "bincount"}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in self.FORBIDDEN:
            raise AssertionError(f"host synchronisation inside a chunk: {name}")
        if name == "__getitem__" and any(isinstance(a, torch.Tensor) and a.dtype == torch.bool
                                         for a in (args[1] if isinstance(args[1], tuple) else (args[1],))):
            raise AssertionError("boolean indexing (a data-dependent shape) inside a chunk")
        if name == "where" and len(args) + len(kwargs or {}) == 1:
            raise AssertionError("torch.where(cond) (a data-dependent shape) inside a chunk")
        return func(*args, **(kwargs or {}))


def _deepseek_like(seed=3, layers=3, batches=5):
    from solvers import Problem, solve

    g = torch.Generator().manual_seed(seed)
    w = torch.exp(1.2 * torch.randn(layers, 64, generator=g))         # lognormal, from the seed
    plan = solve(Problem(w, 80, 1, 1, 8), "deepseek").plan
    probs = (w / w.sum(-1, keepdim=True)).unsqueeze(0).expand(batches, -1, -1)
    picks = torch.stack([torch.multinomial(probs[b], 4096, replacement=True, generator=g) for b in range(batches)])
    tokens = torch.zeros(batches, layers, 64, dtype=torch.int64).scatter_add_(2, picks, torch.ones_like(picks))
    return plan, tokens


def _instances_of(plan, tokens, P, dense=False):
    from solvers.dispatch.schedule import Layout, _Instances, cheap_lower_bound

    B, L, _ = tokens.shape
    layout = Layout.of(plan, P, tokens.device)
    dev = tokens.device
    base = torch.zeros(B, L, P, dtype=torch.int64, device=dev).scatter_add_(
        2, layout.fixed_gpu.expand(B, -1, -1), tokens * ~layout.flexible)
    flex = tokens.gather(2, layout.flex_expert.expand(B, -1, -1)) * layout.flex_valid
    st = _Instances.of(layout, base.view(B * L, P), flex.view(B * L, -1), torch.arange(L, device=dev).repeat(B), dense)
    return layout, st, st.initial_split(), cheap_lower_bound(layout, tokens).view(B * L)


@pytest.mark.parametrize("dense", [False, True])
def test_a_chunk_of_rounds_never_synchronises_with_the_host(dense):
    from solvers.dispatch.schedule import _chunk

    plan, tokens = _deepseek_like()
    layout, st, y, target = _instances_of(plan, tokens, 8, dense)
    with _NoHostSync():
        y2, target2 = _chunk(st, y, target, 0, 12, 3, 4)          # short labels, then full ones
    assert y2.shape == y.shape and bool((target2 >= target).all())
    with pytest.raises(AssertionError, match="host synchronisation"):
        with _NoHostSync():
            bool((y2 > 0).any())                                    # the guard does catch a sync


def test_finished_instances_pass_through_a_chunk_unchanged():
    from solvers.dispatch.schedule import _chunk

    plan, tokens = _deepseek_like(seed=4)
    layout, st, y, target = _instances_of(plan, tokens, 8)
    y, target = _chunk(st, y, target, 0, 40, 3, 4)
    done = ~(st.gpu_load(y) > target.unsqueeze(-1)).any(-1)
    assert bool(done.any())
    y2, target2 = _chunk(st, y, target, 40, 8, 3, 4)
    assert torch.equal(y2[done], y[done]) and torch.equal(target2[done], target[done])


@pytest.mark.parametrize("chunks", [(1, 1), (3, 2), (60, 60)])
def test_exact_whatever_the_chunk_lengths(chunks):
    # One host check per round, a few, or one at the end: the same proven optimum.
    from solvers.dispatch.schedule import Layout, _solve, slot_split

    plan, tokens = _deepseek_like(seed=5)
    layout = Layout.of(plan, 8, tokens.device)
    y, bound, rounds = _solve(layout, tokens, chunks)
    ref_y, ref_bound, _ = _solve(layout, tokens, (2, 2))
    assert torch.equal(bound, ref_bound)
    top = _check_split(plan, tokens, 8, slot_split(layout, tokens, y))
    assert torch.equal(top, bound) and rounds >= chunks[0]


def test_cpu_solve_runs_on_one_thread_and_restores_the_setting():
    from solvers.dispatch.schedule import one_intra_op_thread

    plan, tokens = _deepseek_like(seed=6, batches=2)
    before = torch.get_num_threads()
    seen = []

    class _Spy(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            if getattr(func, "__name__", "") in ("scatter_reduce", "scatter_reduce_"):
                seen.append(torch.get_num_threads())
            return func(*args, **(kwargs or {}))

    torch.set_num_threads(2)
    try:
        with _Spy():
            schedule_tokens(plan, tokens, 8)
        assert seen and set(seen) == {1}                   # the solver's kernels ran on one thread
        assert torch.get_num_threads() == 2                # and the caller's setting is back
        with one_intra_op_thread():
            with one_intra_op_thread():                    # nested: the outer one restores
                assert torch.get_num_threads() == 1
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("dense", [False, True])
def test_cuda_chunk_runs_without_synchronising(dense):
    from solvers.dispatch.schedule import _chunk

    plan, tokens = _deepseek_like()
    layout, st, y, target = _instances_of(plan.to("cuda"), tokens.cuda(), 8, dense)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        _chunk(st, y, target, 0, 12, 3, 4)
    finally:
        torch.cuda.set_sync_debug_mode("default")


@pytest.mark.gpu
@needs_cuda
def test_cuda_graph_replays_give_the_eager_result_for_new_data():
    # The first call of a shape captures the chunk, later ones replay it on their own data
    # (the same plan, other tokens): each must equal the eager solve, on CUDA and on the CPU.
    # (Another plan may have another number of flexible experts, hence other shapes.)
    from solvers.dispatch import schedule
    from solvers.dispatch.schedule import Layout, _solve

    schedule._GRAPHS.clear()
    plan, _ = _deepseek_like(seed=7)
    layout = Layout.of(plan.to("cuda"), 8, torch.device("cuda"))
    for seed in (7, 8, 9):
        _, tokens = _deepseek_like(seed=seed)
        eager = _solve(layout, tokens.cuda(), (24, 8), graphs=False)
        graphed = _solve(layout, tokens.cuda(), (24, 8), graphs=True)
        cpu = _solve(Layout.of(plan, 8, tokens.device), tokens, (24, 8))
        for a, b, c in zip(eager[:2], graphed[:2], cpu[:2]):
            assert torch.equal(a, b) and torch.equal(a.cpu(), c)
    first_chunks = [g for key, g in schedule._GRAPHS.items() if key[2][0] == 0]    # args: first round, ...
    assert len(first_chunks) == 1 and first_chunks[0] is not None          # one shape, one capture


@pytest.mark.gpu
@needs_cuda
def test_cuda_graph_replay_runs_without_synchronising():
    from solvers.dispatch import schedule
    from solvers.dispatch.schedule import _chunk, _chunk_on_graph

    schedule._GRAPHS.clear()
    plan, tokens = _deepseek_like(seed=10)
    layout, st, y, target = _instances_of(plan.to("cuda"), tokens.cuda(), 8, dense=True)
    first = _chunk_on_graph(st, y, target, 0, 12, 3, 4)           # captures
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        again = _chunk_on_graph(st, y, target, 0, 12, 3, 4)       # replays
    finally:
        torch.cuda.set_sync_debug_mode("default")
    eager = _chunk(st, y, target, 0, 12, 3, 4)
    for a, b, c in zip(first, again, eager):
        assert torch.equal(a, c) and torch.equal(b, c)


@needs_highs
@given(instances())
@settings(max_examples=60, deadline=None)
def test_short_label_rounds_are_exact_too(inst):
    # Small instances have P <= 5, so the default first depth (4) already labels the whole
    # graph; depth 1 makes the first rounds raise targets through the grown closed sets.
    from solvers.dispatch.schedule import Layout, _solve, slot_split

    plan, tokens, P = inst
    layout = Layout.of(plan, P, tokens.device)
    y, bound, _ = _solve(layout, tokens, (1, 1), first_depth=1)
    top = _check_split(plan, tokens, P, slot_split(layout, tokens, y))
    assert torch.equal(top, bound)
    assert torch.equal(top, optimal_max_loads(plan, tokens, P))


@given(instances(), st.sampled_from([1, 2, 4]))
@settings(max_examples=60, deadline=None)
def test_dense_labels_give_the_same_split_as_sparse_ones(inst, first_depth):
    # The dense path (matrix products, used on CUDA) must reproduce the sparse one (scatters)
    # exactly: same labels, so the same split and the same bound, short and full depths.
    from solvers.dispatch.schedule import Layout, _solve

    plan, tokens, P = inst
    layout = Layout.of(plan, P, tokens.device)
    sparse = _solve(layout, tokens, (1, 1), first_depth=first_depth, dense=False)
    dense = _solve(layout, tokens, (1, 1), first_depth=first_depth, dense=True)
    assert torch.equal(sparse[0], dense[0]) and torch.equal(sparse[1], dense[1]) and sparse[2] == dense[2]


@pytest.mark.parametrize("seed", [3, 4])
def test_dense_labels_match_sparse_on_a_deepseek_like_shape(seed):
    from solvers.dispatch.schedule import Layout, _solve

    plan, tokens = _deepseek_like(seed=seed)
    layout = Layout.of(plan, 8, tokens.device)
    sparse = _solve(layout, tokens, (24, 8), first_depth=1, dense=False)
    dense = _solve(layout, tokens, (24, 8), first_depth=1, dense=True)
    assert torch.equal(sparse[0], dense[0]) and torch.equal(sparse[1], dense[1])


def test_a_plan_is_laid_out_once_and_again_when_changed_in_place():
    from solvers.dispatch import schedule

    schedule._LAYOUTS.clear()
    plan = Plan.from_phy2log([[0, 1, 0, 2]], 3)
    tokens = torch.tensor([[[6, 1, 3]]])
    first = schedule_tokens(plan, tokens, 2)
    layout = next(iter(schedule._LAYOUTS.values()))[1]
    assert torch.equal(schedule_tokens(plan, tokens, 2), first)
    assert len(schedule._LAYOUTS) == 1 and next(iter(schedule._LAYOUTS.values()))[1] is layout
    # Swap the replica of expert 0 on GPU 1 with expert 1's slot: a new placement, in place.
    plan.phy2log[0] = torch.tensor([0, 0, 1, 2])
    plan.log2phy[0] = torch.tensor([[0, 1], [2, -1], [3, -1]])
    plan.logcnt[0] = torch.tensor([2, 1, 1])
    moved = schedule_tokens(plan, tokens, 2)
    fresh = schedule_tokens(Plan.from_phy2log([[0, 0, 1, 2]], 3), tokens, 2)
    assert torch.equal(moved, fresh) and not torch.equal(moved, first)
    plan.phy2log[0, 0] = 7                                   # now invalid: checked again, rejected
    with pytest.raises(PlanError, match="^phy2log"):
        schedule_tokens(plan, tokens, 2)


def test_one_entry_schedules_real_clusters_in_time():
    """schedule_tokens over a Cluster: the push-relabel on a homogeneous one, the exact split in
    time (split_one per instance) on speeds, uneven slots and failed GPUs."""
    from solvers import Cluster
    from solvers.dispatch.schedule import split_one

    plan = Plan.from_phy2log([[0, 1, 0, 2, 1, 3, 0, 2]], 4)
    tokens = torch.tensor([[[9, 4, 6, 3]], [[0, 7, 1, 5]]])
    homogeneous = Cluster(1, 4, 8)
    assert torch.equal(schedule_tokens(plan, tokens, homogeneous), schedule_tokens(plan, tokens, 4))
    real = Cluster(1, 4, None, gpu_slots=[3, 2, 3, 0], gpu_speed=[1.0, 2.0, 1.4, 1.0])
    x, bound = schedule_with_bound(plan, tokens, real)
    slot_gpu, speed = np.array(real.slot_gpus()), np.array(real.gpu_speed)
    for b in range(2):
        want, value = split_one(tokens[b, 0].numpy(), plan.phy2log[0].numpy(), slot_gpu, speed)
        assert x[b, 0].tolist() == want.tolist() and float(bound[b, 0]) == value
    with pytest.raises(PlanError, match="^plan: has 8 slots per layer, the cluster 9"):
        schedule_tokens(plan, tokens, Cluster(1, 4, None, gpu_slots=[3, 2, 4, 0]))
