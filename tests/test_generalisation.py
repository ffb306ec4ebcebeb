"""The generalisation benchmark (benchmarks/generalisation.py): its family of settings, its seeds
kept apart, a quick run that writes one row per (setting, seed, planner) and resumes without
redoing them, and the FlashLB-style reference planner's plans."""
from __future__ import annotations

import json

import torch

from benchmarks import flashlb_style, generalisation
from solvers import Problem, score
from solvers.cluster import Cluster


def test_the_family_covers_every_kind_of_drift_and_keeps_its_seeds_apart():
    family = generalisation.settings()
    assert len(family) >= 16 and len({s.name for s in family}) == len(family)
    kinds = {s.kind for s in family}
    assert {"gradual mix drift", "abrupt regime switches", "bursts", "diurnal cycles", "heavy-tailed spikes",
            "slow popularity decay", "shipped"} <= kinds
    used = set(generalisation.DEV_SEEDS) | {103, 104, 105} | set(generalisation.FIRST_REPORT_SEEDS)
    assert not set(generalisation.REPORT_SEEDS) & used          # the report's seeds are fresh
    s = next(s for s in family if s.name == "diurnal-24")
    a, b = s.make(5), s.make(5)
    assert torch.equal(a, b) and a.shape[0] == s.plan + s.score
    assert not torch.equal(a, s.make(6))


def test_quick_run_writes_rows_and_resumes(tmp_path, capsys):
    out = tmp_path / "g.jsonl"
    generalisation.main(["--quick", "--dev", "--out", str(out)])
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    planners = [c for c, _ in generalisation.PLANNERS]
    assert len(rows) == len(generalisation.QUICK) * len(planners)
    assert {(r["setting"], r["planner"]) for r in rows} == {(s, p) for s in generalisation.QUICK for p in planners}
    assert all(r["seed"] == generalisation.DEV_SEEDS[0] and r["held_out"] >= 1.0 and r["in_sample"] >= 1.0
               for r in rows)
    assert all(r["chosen"] for r in rows if r["planner"] == "backtest")
    first = capsys.readouterr().out
    for p in planners:
        assert f"| {p} |" in first
    assert "regret mean" in first and "vs flashlb-style" in first
    generalisation.main(["--quick", "--dev", "--out", str(out)])          # resumes: nothing to redo
    assert len(out.read_text().splitlines()) == len(rows)
    again = capsys.readouterr().out
    assert again.split("| planner |", 1)[1] == first.split("| planner |", 1)[1]


def test_report_regret_and_wins_against_the_reference():
    rows = [{"setting": "a", "seed": 1, "planner": p, "held_out": v, "cpu_s": 0.1, "chosen": ""}
            for p, v in (("greedy", 1.10), ("ewma", 1.20), ("robust_sum", 1.05), ("risk_aware", 1.04),
                         ("flashlb-style", 1.02), ("backtest", 1.03))]
    table, fails = generalisation.report(rows)
    line = next(x for x in table.splitlines() if x.startswith("| backtest |"))
    assert "| 0.98 % |" in line and "| 0 / 0 / 1 |" in line       # 1.03 / 1.02 - 1; one loss
    assert "| 0 / 1 | 0 |" in line                                   # 1.03 < 1.002 x the greedy's 1.10
    ewma = next(x for x in table.splitlines() if x.startswith("| ewma |"))
    assert "| 0 / 1 | 1 |" in ewma                                   # 1.20 > 1.002 x 1.10
    assert any("backtest 1.0300 > flashlb-style 1.0200" in f for f in fails)


def test_flashlb_style_plans_are_valid_and_balance_the_window():
    g = torch.Generator().manual_seed(0)
    hist = torch.poisson(torch.exp(torch.randn(3, 32, generator=g)).expand(12, 3, 32) * 100, generator=g)
    p = Problem(hist.sum(0), cluster=Cluster(2, 8, 40))
    plan = flashlb_style.plan(p, hist)
    plan.validate(3, 32, 40, 8)
    assert int(plan.logcnt.sum()) == 3 * 40
    no_adjust = flashlb_style.plan(p, hist, rounds=0)
    q = lambda pl: score(p, pl, tokens=hist).imbalance_mean         # noqa: E731
    assert q(plan) <= q(no_adjust) + 1e-9
