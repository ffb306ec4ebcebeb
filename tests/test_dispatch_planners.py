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
