"""The shared scorer under both dispatch models, and the per-micro-batch statistics."""
import pytest
import torch

from solvers import OptionError, Plan, ProblemError, Problem, score
from solvers.dispatch.microbatches import (imbalance_stats, microbatch_imbalance, multinomial_counts,
                                           sample_microbatches, steps_as_microbatches)


def _problem_and_plan():
    # GPU0: e0, e1; GPU1: e0, e2 (e0 replicated on both GPUs); one node each.
    problem = Problem([[6.0, 2.0, 4.0]], 4, 1, 2, 2)
    return problem, Plan.from_phy2log([[0, 1, 0, 2]], 3)


def test_default_is_the_even_split_unchanged():
    problem, plan = _problem_and_plan()
    a, b = score(problem, plan), score(problem, plan, split="even")
    assert a.split == "even" and a.microbatch_imbalance is None
    assert torch.equal(a.gpu_load, b.gpu_load) and a.metrics() == b.metrics()
    assert a.gpu_load.tolist() == [[5.0, 7.0]]


def test_scheduled_split_moves_the_hot_expert_to_the_light_gpu():
    problem, plan = _problem_and_plan()
    s = score(problem, plan, split="scheduled")
    assert s.split == "scheduled"
    assert s.gpu_load.tolist() == [[6.0, 6.0]]               # e0: 4 on GPU0, 2 on GPU1
    assert s.max_load.tolist() == [6.0] and s.imbalance_mean == pytest.approx(1.0)
    assert s.metrics()["microbatch_imbalance_worst"] == pytest.approx(1.0)


def test_tokens_grade_each_microbatch_and_sum_the_maxima():
    problem, plan = _problem_and_plan()
    tokens = torch.tensor([[[6, 2, 4]], [[0, 10, 0]]])       # [B=2, L=1, E=3]
    even = score(problem, plan, tokens=tokens)
    sched = score(problem, plan, split="scheduled", tokens=tokens)
    # micro-batch 1: only e1 (one replica, GPU0) -> 10 vs 0 under both splits
    assert even.microbatch_imbalance.tolist() == [[7 / 6], [2.0]]
    assert sched.microbatch_imbalance.tolist() == [[1.0], [2.0]]
    assert sched.max_load.tolist() == [6.0 + 10.0] and sched.mean_load.tolist() == [6.0 + 5.0]
    assert sched.gpu_load.tolist() == [[16.0, 6.0]]
    m = sched.metrics()
    assert m["microbatch_imbalance_mean"] == pytest.approx(1.5)
    assert m["microbatch_imbalance_worst"] == pytest.approx(2.0)
    assert m["imbalance_mean"] == pytest.approx(16 / 11)


def test_scheduled_never_worse_than_even_on_random_plans():
    g = torch.Generator().manual_seed(5)
    w = torch.randint(0, 50, (3, 10), generator=g).double()
    problem = Problem(w, 16, 1, 1, 4)
    from solvers import solve

    plan = solve(problem, "deepseek").plan
    tokens = torch.randint(0, 40, (4, 3, 10), generator=g)
    even = microbatch_imbalance(plan, tokens, 4, "even")
    sched = microbatch_imbalance(plan, tokens, 4, "scheduled")
    assert bool((sched <= even + 1e-12).all())


def test_bad_split_and_fractional_weights():
    problem, plan = _problem_and_plan()
    with pytest.raises(OptionError, match="^split: must be one of even, scheduled"):
        score(problem, plan, split="uneven")
    frac = Problem([[6.5, 2.0, 4.0]], 4, 1, 2, 2)
    with pytest.raises(ProblemError, match="^weights: the scheduled split needs whole token counts"):
        score(frac, plan, split="scheduled")
    with pytest.raises(ProblemError, match="^tokens: must have shape"):
        score(problem, plan, split="scheduled", tokens=torch.ones(2, 2, 3, dtype=torch.int64))


def test_the_core_scorer_takes_the_scheduled_split_from_its_caller():
    """scoring.score imports no feature: the scheduled split is handed to it (solvers.score does),
    so it works, or says how, whatever was imported before."""
    import subprocess
    import sys

    from solvers import scoring
    from solvers.dispatch import schedule_tokens

    problem, plan = _problem_and_plan()
    with pytest.raises(OptionError, match="^split: the scheduled split needs a token scheduler"):
        scoring.score(problem, plan, split="scheduled")
    core = scoring.score(problem, plan, split="scheduled", scheduler=schedule_tokens)
    assert torch.equal(core.gpu_load, score(problem, plan, split="scheduled").gpu_load)
    code = ("import sys, solvers.scoring, solvers.problem; "
            "bad = [m for m in sys.modules if m.startswith(('solvers.dispatch', 'solvers.traffic', "
            "'solvers.routing', 'solvers.builtin'))]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_multinomial_counts_sum_and_mean():
    g = torch.Generator().manual_seed(0)
    p = torch.tensor([[0.5, 0.25, 0.25, 0.0]]).expand(4000, -1)
    c = multinomial_counts(p, 100, g)
    assert bool((c.sum(-1) == 100).all()) and bool((c[:, 3] == 0).all())
    assert c.double().mean(0)[:3].tolist() == pytest.approx([50, 25, 25], abs=1.0)


def test_sampled_microbatches_shape_tokens_and_seed():
    trace = torch.randint(0, 100, (5, 2, 16))
    a = sample_microbatches(trace, 3, tokens=64, top_k=4, seed=1)
    b = sample_microbatches(trace, 3, tokens=64, top_k=4, seed=1)
    assert a.shape == (3, 2, 16) and torch.equal(a, b)
    assert bool((a.sum(-1) == 256).all())
    with pytest.raises(ProblemError, match="^top_k"):
        sample_microbatches(trace, 3, tokens=64, top_k=17)
    with pytest.raises(ProblemError, match="^microbatches"):
        sample_microbatches(trace, 0)


def test_steps_as_microbatches_need_whole_counts():
    assert steps_as_microbatches(torch.tensor([[[1.0, 2.0]]])).dtype == torch.int64
    with pytest.raises(ProblemError, match="^loads"):
        steps_as_microbatches(torch.tensor([[[1.5, 2.0]]]))


def test_imbalance_stats():
    s = imbalance_stats(torch.tensor([[1.0, 1.0], [1.0, 3.0]]))
    assert s["mean"] == 1.5 and s["p50"] == 1.0 and s["worst"] == 3.0 and 2.9 < s["p99"] <= 3.0
