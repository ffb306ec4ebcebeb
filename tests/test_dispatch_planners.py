"""Scheduling-aware placements: sched_spread sizes replicas for each expert's per-step peak
share when given the planning window's steps (history), not only for the window's sum."""
import pytest
import torch

import solvers.dispatch  # noqa: F401  registers the planners
from solvers import OptionError, Problem, solve
from solvers.dispatch.planners import peak_shares


def _two_regimes():
    # 16 experts, 8 GPUs, 2 steps of 160 tokens: e0 takes 80 tokens in step 0 (4 GPUs' mean
    # load of 20) and 0 in step 1; e1 the other way round. The sum hides both peaks.
    step0 = torch.full((16,), 80.0 / 14)
    step1 = step0.clone()
    step0[0], step0[1], step1[0], step1[1] = 80.0, 0.0, 0.0, 80.0
    return torch.stack([step0, step1]).unsqueeze(1)                       # [2, 1, 16]


def test_peak_shares_are_per_step_maxima_in_mean_gpu_loads():
    q = peak_shares(_two_regimes(), 8)
    assert q.shape == (1, 16)
    assert torch.allclose(q[0, :2], torch.tensor([4.0, 4.0], dtype=torch.float64))
    assert torch.allclose(q[0, 2:], torch.full((14,), 8 * (80.0 / 14) / 160, dtype=torch.float64))


def test_history_sizes_replicas_for_peaks_the_sum_hides():
    hist = _two_regimes()
    problem = Problem(hist.sum(0), 40, 1, 1, 8)
    with_steps = solve(problem, "sched_spread", history=hist).plan.logcnt[0]
    summed = solve(problem, "sched_spread", headroom=1.15).plan.logcnt[0]
    # peak 4 mean loads x 1.15 -> 5 replicas; on the sum e0 and e1 hold 2 mean loads each -> 3
    assert with_steps[0] == 5 and with_steps[1] == 5
    assert summed[0] == 3 and summed[1] == 3
    assert int(with_steps.sum()) == 40 and bool((with_steps >= 2).all())


def test_history_plan_schedules_the_peak_steps_better():
    from solvers.dispatch.microbatches import microbatch_imbalance

    hist = _two_regimes()
    problem = Problem(hist.sum(0), 40, 1, 1, 8)
    tokens = hist.round().to(torch.int64)                                 # each step as a micro-batch
    tokens[:, :, 2] += 160 - tokens.sum(-1)                               # keep 160 tokens per step
    with_steps = solve(problem, "sched_spread", history=hist).plan
    summed = solve(problem, "sched_spread", headroom=1.15).plan
    a = microbatch_imbalance(with_steps, tokens, 8, "scheduled").max()
    b = microbatch_imbalance(summed, tokens, 8, "scheduled").max()
    assert float(a) < float(b) and float(b) >= 80 / 3 / 20 - 1e-9          # 3 replicas: >= 26.7 / 20


@pytest.mark.parametrize("history, message", [
    (torch.ones(2, 1, 15), "^history: must have shape"),
    (-torch.ones(2, 1, 16), "^history: loads must be finite and >= 0"),
    ("steps", "^history: must have shape|^history: must be"),
])
def test_bad_history_names_the_option(history, message):
    with pytest.raises(OptionError, match=message):
        solve(Problem(torch.ones(1, 16), 32, 1, 1, 8), "sched_spread", history=history)


def test_default_headroom_depends_on_what_the_planner_sees():
    hist = _two_regimes()
    problem = Problem(hist.sum(0), 40, 1, 1, 8)
    assert solve(problem, "sched_spread", history=hist).info["headroom"] == 1.15
    assert solve(problem, "sched_spread").info["headroom"] == 3.0
    assert solve(problem, "sched_spread", history=hist, headroom=2.0).info["headroom"] == 2.0
