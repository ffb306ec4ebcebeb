"""Scheduling-aware placements: sched_spread sizes replicas for each expert's per-step peak
share when given the planning window's steps (history), not only for the window's sum."""
import pytest
import torch

import solvers.dispatch  # noqa: F401  registers the planners
from solvers import OptionError, Problem, solve
from solvers.dispatch.planners import peak_shares


def _two_regimes():
    # 16 experts, 8 GPUs, 3 steps of 160 tokens (a GPU's mean load is 20): e0 takes 112
    # tokens in step 0 and none after; e1 takes 20, then 48 and 48. On the sum e1 is the
    # hotter one (116 vs 112 tokens), at its peak e0 is (5.6 vs 2.4 mean GPU loads).
    rest = lambda tokens: [tokens / 14] * 14
    step0 = torch.tensor([112.0, 20.0] + rest(28))
    step1 = torch.tensor([0.0, 48.0] + rest(112))
    return torch.stack([step0, step1, step1]).unsqueeze(1)               # [3, 1, 16]


def test_peak_shares_are_per_step_maxima_in_mean_gpu_loads():
    q = peak_shares(_two_regimes(), 8)
    assert q.shape == (1, 16)
    assert torch.allclose(q[0, :2], torch.tensor([5.6, 2.4], dtype=torch.float64))
    assert torch.allclose(q[0, 2:], torch.full((14,), 8 * 8 / 160, dtype=torch.float64))


def test_history_sizes_replicas_for_peaks_the_sum_hides():
    hist = _two_regimes()
    problem = Problem(hist.sum(0), 24, 1, 1, 8)
    with_steps = solve(problem, "sched_spread", history=hist).plan.logcnt[0]
    summed = solve(problem, "sched_spread").plan.logcnt[0]
    assert with_steps[0] > with_steps[1] and summed[0] <= summed[1]
    assert int(with_steps.sum()) == 24 and int(summed.sum()) == 24


def test_count_profile_blends_peak_and_mean_shares():
    from solvers.dispatch.planners import count_profile

    hist = _two_regimes()
    mean = hist.sum(0) / hist.sum() * 8
    q = peak_shares(hist, 8)
    assert torch.allclose(count_profile(hist, 8, 1.0), q)
    assert torch.allclose(count_profile(hist, 8, 0.0), mean.double())
    assert torch.allclose(count_profile(hist, 8, 0.25), 0.25 * q + 0.75 * mean.double())


def test_history_plan_schedules_the_peak_step_perfectly_where_the_sum_plan_cannot():
    from solvers.dispatch.microbatches import microbatch_imbalance

    hist = _two_regimes()
    problem = Problem(hist.sum(0), 24, 1, 1, 8)
    peak_step = torch.tensor([[[112, 20] + [2] * 14]])                     # step 0 as one micro-batch
    with_steps = solve(problem, "sched_spread", history=hist, peak_weight=1.0)
    summed = solve(problem, "sched_spread")
    assert with_steps.score.duplicates == 0 and summed.score.duplicates == 0
    assert float(microbatch_imbalance(with_steps.plan, peak_step, 8, "scheduled")) == 1.0
    # e0's 112 tokens over its replicas: at least 112 / c0 on one GPU, above the mean 20
    c0 = int(summed.plan.logcnt[0, 0])
    assert 112 / c0 > 20
    assert float(microbatch_imbalance(summed.plan, peak_step, 8, "scheduled")) >= 112 / c0 / 20 - 1e-9


def test_many_replicas_of_one_expert_never_share_a_gpu():
    # e0 needs all 8 GPUs but is lighter per replica than the singles: placed by weight alone,
    # the singles could fill some GPUs first and force two e0 replicas onto one GPU.
    w = torch.tensor([[40.0] + [6.0] * 16])
    counts = torch.tensor([[8] + [1] * 16])
    from solvers.dispatch.planners import spread_plan
    from solvers.scoring import gpu_presence

    for seed in range(5):
        plan = spread_plan(w, counts, 8, 1.0, seed)
        assert bool((gpu_presence(plan.phy2log, 17, 8).sum(1) == counts).all())


@pytest.mark.parametrize("history, message", [
    (torch.ones(2, 1, 15), "^history: must have shape"),
    (-torch.ones(2, 1, 16), "^history: loads must be finite and >= 0"),
    ("steps", "^history: must have shape|^history: must be"),
])
def test_bad_history_names_the_option(history, message):
    with pytest.raises(OptionError, match=message):
        solve(Problem(torch.ones(1, 16), 32, 1, 1, 8), "sched_spread", history=history)


# Real clusters: per-GPU speeds, uneven slot counts, failed GPUs (planned and scored in time).
from solvers import Cluster  # noqa: E402
from solvers.evaluate import score  # noqa: E402
from solvers.scoring import count_duplicates  # noqa: E402


def _real_problem(speed=None, slots=None, failed=None, E=32, L=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    w = torch.rand(L, E, generator=g, dtype=torch.float64) ** 3 * 1000
    cluster = Cluster(2, 8, gpu_slots=slots or [6] * 8, gpu_speed=speed, failed=failed)
    return Problem(w, cluster=cluster)


@pytest.mark.parametrize("solver", ["sched_spread", "uniform_replicas"])
@pytest.mark.parametrize("kw", [dict(speed=[1.4] * 4 + [1.0] * 4),
                                dict(slots=[10, 8] * 4),
                                dict(failed=[2, 5]),
                                dict(speed=[1.4, 1.0] * 4, slots=[8, 6] * 4, failed=[3])])
def test_planners_fill_each_live_gpu_to_its_own_slot_count(solver, kw):
    p = _real_problem(**kw)
    plan = solve(p, solver).plan
    p.validate_plan(plan)                                              # uneven slot ranges, R live slots
    gpu = p.slot_gpu()
    assert not set(gpu.tolist()) & set(p.cluster.failed)               # nothing on a failed GPU
    assert count_duplicates(plan.phy2log, p.num_gpus, gpu) == 0        # an expert at most once per GPU
    assert bool((plan.logcnt >= 1).all())
    s = score(p, plan)
    assert s.max_time is not None and bool((s.max_time > 0).all())


@pytest.mark.parametrize("solver", ["sched_spread", "uniform_replicas"])
def test_planners_balance_time_under_the_scheduled_split_on_gpus_of_different_speeds(solver):
    """Half the GPUs at speed 2: graded in time under the scheduled split (what these planners
    are for), the plan made in time is within 5 % of the time bound and no slower than the
    same planner's plan of the homogeneous view (tokens balanced, speeds ignored)."""
    from solvers.bounds import lower_bound

    g = torch.Generator().manual_seed(1)
    w = (torch.rand(3, 32, generator=g, dtype=torch.float64) * 1000).round()
    p = Problem(w, cluster=Cluster(2, 8, gpu_slots=[6] * 8, gpu_speed=[2.0] * 4 + [1.0] * 4))
    view = Problem(w, cluster=Cluster(2, 8, 48))
    timed = score(p, solve(p, solver).plan, split="scheduled").max_time
    tokens = score(p, solve(view, solver).plan, split="scheduled").max_time
    assert bool((timed <= tokens * (1 + 1e-9)).all()) and float(timed.sum()) < float(tokens.sum())
    assert bool((timed <= lower_bound(p) * 1.05).all())


def test_planners_refuse_a_gpu_with_more_slots_than_experts():
    p = Problem(torch.ones(1, 4), cluster=Cluster(1, 2, gpu_slots=[5, 3]))
    with pytest.raises(OptionError, match="num_replicas"):
        solve(p, "sched_spread")
