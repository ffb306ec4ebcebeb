"""The self-checking out-of-sample planner ``backtest``: its fold layout, its choice rule (least
mean regret when the folds agree, least worst regret when they do not), that it picks the
estimator that wins the folds on a ramping trace and falls back on a two-step window (and says
so), its info fields, and the validation of its options."""
from __future__ import annotations

import pytest
import torch

from solvers import OptionError, Problem, solve
from solvers.dynamics.backtest import CANDIDATES, DEFAULT_CONFIDENCE, choose, fold_layout, gain_t


def _ramp(W=16, L=4, E=16, seed=0):
    """Poisson loads whose popularities ramp up or down through the window (a drift that the
    recency-weighted estimator follows and the window's sum lags)."""
    g = torch.Generator().manual_seed(seed)
    base = torch.exp(torch.randn(L, E, generator=g)) * 200
    slope = torch.randn(L, E, generator=g)
    t = torch.arange(W, dtype=torch.float64).view(W, 1, 1)
    return torch.poisson(base * torch.exp(0.25 * slope * (t - W / 2)), generator=g)


def test_fold_layout_rolls_the_origin_to_the_window_end():
    assert fold_layout(16, 3, 6) == (8, 4, [8, 10, 12])
    h, H, origins = fold_layout(100, 4, 6)
    assert (h, H) == (50, 25) and origins[0] == 50 and origins[-1] + H == 100 and len(origins) == 4
    assert fold_layout(5, 3, 6) == (0, 0, [])          # below min_steps: no folds
    assert fold_layout(2, 3, 3) == (0, 0, [])


def test_choose_takes_the_least_mean_regret_when_the_folds_agree():
    scores = torch.tensor([[1.10, 1.20, 1.15],     # a
                           [1.05, 1.10, 1.12],     # b: best in every fold
                           [1.06, 1.30, 1.12]], dtype=torch.float64)
    i, rule, regret, eligible = choose(scores, 0.001)
    assert (i, rule) == (1, "mean") and bool(eligible.all())
    assert regret.shape == (3, 3) and float(regret[1].max()) == 0.0


def test_choose_takes_the_safest_when_the_folds_disagree():
    # m is best in fold 0 only and 6 % off in the others: the least mean regret, but one win in
    # three; s is 5 % off everywhere: the least worst regret; x wins folds 1 and 2 by far.
    scores = torch.tensor([[1.00, 1.06, 1.06],     # m
                           [1.05, 1.05, 1.05],     # s
                           [1.30, 1.00, 1.00]], dtype=torch.float64)
    i, rule, regret, _ = choose(scores, 0.001)
    assert int(regret.mean(1).argmin()) == 0       # m has the least mean regret ...
    assert (i, rule) == (1, "safest")               # ... but wins one fold of three: s is chosen
    i, rule, _, _ = choose(scores[:, :1], 0.001)    # one fold is no evidence of agreement either
    assert rule == "safest"


def test_choose_keeps_the_incumbent_unless_its_gain_is_significant():
    # paired (fold, layer) scores of 3 folds x 2 layers
    pairs = torch.tensor([[1.10, 1.10, 1.10, 1.10, 1.10, 1.10],      # the incumbent (greedy)
                          [1.00, 1.20, 1.00, 1.20, 1.00, 1.19],      # better on the mean, but scattered
                          [1.09, 1.08, 1.09, 1.085, 1.09, 1.08]],    # a little better everywhere
                         dtype=torch.float64)
    t = gain_t(pairs, 0)
    assert float(t[0]) == 0.0 and float(t[1]) < 1 < 2 < float(t[2])
    scores = pairs.view(3, 3, 2).mean(2)
    i, rule, _, eligible = choose(scores, 0.001, 2.0, incumbent=0, pairs=pairs)
    assert eligible.tolist() == [True, False, True] and (i, rule) == (2, "mean")
    i, rule, _, eligible = choose(scores, 0.001, 100.0, incumbent=0, pairs=pairs)
    assert (i, rule) == (0, "incumbent") and eligible.tolist() == [True, False, False]


def test_default_confidence_keeps_the_incumbent_on_a_gain_at_t_between_1_and_it():
    # the candidate gains 0.75 % on the mean but scatters: t = 1.19, between 1 and the default 1.5
    gain = torch.tensor([0.02, -0.01, 0.03, 0.0, 0.01, -0.005], dtype=torch.float64)
    pairs = torch.stack([torch.full((6,), 1.10, dtype=torch.float64), 1.10 - gain])
    t = float(gain_t(pairs, 0)[1])
    assert 1.0 < t < DEFAULT_CONFIDENCE == 1.5
    scores = pairs.view(2, 3, 2).mean(2)
    assert choose(scores, 0.001, DEFAULT_CONFIDENCE, incumbent=0, pairs=pairs)[:2] == (0, "incumbent")
    assert choose(scores, 0.001, 1.0, incumbent=0, pairs=pairs)[0] == 1


def test_picks_the_estimator_that_wins_the_folds():
    hist = _ramp()
    p = Problem(hist.sum(0), 20, 1, 1, 4)
    res = solve(p, "backtest", history=hist, candidates="greedy,risk", incumbent="greedy")
    assert res.info["chosen"] == "risk" and res.info["rule"] == "mean"
    assert res.info["gain_t"]["risk"] >= res.info["confidence"] == DEFAULT_CONFIDENCE
    assert res.info["mean_regret"]["risk"] == 0.0 < res.info["mean_regret"]["greedy"]
    # the plan is the chosen candidate's on the whole window
    direct = solve(p, "risk_aware", history=hist)
    assert torch.equal(res.plan.phy2log, direct.plan.phy2log)
    assert "backtest chose risk" in res.message and "least mean regret" in res.message
    # the default incumbent is risk: greedy is far worse on every pair, so risk stays
    kept = solve(p, "backtest", history=hist, candidates="greedy,risk")
    assert kept.info["chosen"] == "risk" and kept.info["rule"] == "incumbent"
    assert torch.equal(kept.plan.phy2log, res.plan.phy2log)


def test_two_steps_fall_back_and_say_so():
    hist = _ramp(W=2)
    p = Problem(hist.sum(0), 20, 1, 1, 4)
    res = solve(p, "backtest", history=hist)
    assert res.info["chosen"] == "greedy" and res.info["rule"] == "fallback"
    assert "too short to backtest" in res.info["reason"] and "too short" in res.message
    assert torch.equal(res.plan.phy2log, solve(p, "deepseek").plan.phy2log)
    assert solve(p, "backtest", history=hist, fallback="ewma").info["chosen"] == "ewma"


def test_info_fields_and_a_valid_plan():
    hist = _ramp(W=12, L=3, E=16, seed=1)
    p = Problem(hist.sum(0), 20, 1, 1, 4)
    res = solve(p, "backtest", history=hist, layers=2)
    info = res.info
    assert info["steps_in_window"] == 12 and info["candidates"] == list(CANDIDATES)
    assert info["folds"] == len(info["fold_origins"]) == 3
    assert info["fold_train_steps"] == 6 and info["fold_test_steps"] == 3
    assert info["fold_layers"] == [0, 2]
    assert set(info["fold_scores"]) == set(info["mean_regret"]) == set(info["worst_regret"]) == set(CANDIDATES)
    assert set(info["gain_t"]) == set(CANDIDATES) and info["gain_t"]["risk"] == 0.0     # the incumbent
    assert "risk" in info["eligible"] and info["chosen"] in info["eligible"]
    assert all(len(v) == 3 and min(v) >= 1.0 for v in info["fold_scores"].values())
    assert min(info["mean_regret"].values()) >= 0.0
    assert info["chosen"] in CANDIDATES and info["rule"] in ("mean", "safest", "incumbent") and info["reason"]
    assert res.score is not None
    # the plan is the chosen candidate's on the whole window
    assert torch.equal(res.plan.phy2log, CANDIDATES[info["chosen"]].plan(p, hist.double(), "global"))


def test_hierarchical_policy_runs_every_candidate():
    hist = _ramp(W=8, L=2, E=16, seed=2)
    p = Problem(hist.sum(0), 32, 4, 2, 8)
    res = solve(p, "backtest", history=hist, policy="hierarchical", min_steps=6)
    assert res.policy == "hierarchical" and res.info["folds"] >= 1
    node = torch.arange(32) // 16
    for layer in range(2):
        for grp in range(4):
            assert node[res.plan.phy2log[layer] // 4 == grp].unique().numel() == 1


@pytest.mark.parametrize("opts, param", [
    ({"candidates": "greedy,nope"}, "candidates"),
    ({"candidates": ""}, "candidates"),
    ({"candidates": "risk,risk"}, "candidates"),
    ({"fallback": "nope"}, "fallback"),
    ({"incumbent": "nope"}, "incumbent"),
    ({"folds": 0}, "folds"),
    ({"min_steps": 2}, "min_steps"),
    ({"tolerance": -0.1}, "tolerance"),
    ({"confidence": -1.0}, "confidence"),
    ({"layers": 0}, "layers"),
    ({"history": torch.zeros(3, 2, 5)}, "history"),
])
def test_bad_options_name_the_option(opts, param):
    hist = _ramp(W=8, L=2)
    p = Problem(hist.sum(0), 20, 1, 1, 4)
    with pytest.raises(OptionError, match=param):
        solve(p, "backtest", **({"history": hist} | opts))
