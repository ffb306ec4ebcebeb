"""The one clock of the solvers' deadline decisions (solvers.clock): a core module, read by
heuristics, certify, migration and exact alike, replaceable by a fake in tests."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import numpy as np
import torch

import solvers.clock as solvers_clock
from solvers import Problem, solve
from solvers.clock import FakeClock, clock, fake_clock

ROOT = Path(__file__).resolve().parents[1]
ON_THE_SEAM = ("heuristics", "certify", "migration", "exact")


def test_clock_module_imports_nothing_from_the_project():
    tree = ast.parse((ROOT / "solvers" / "clock.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            assert node.level == 0 and not (node.module or "").startswith("solvers"), node.module
        elif isinstance(node, ast.Import):
            assert not any(a.name.startswith("solvers") for a in node.names)


def test_deadline_code_reads_time_only_through_the_clock():
    for pkg in ON_THE_SEAM:
        for f in (ROOT / "solvers" / pkg).glob("*.py"):
            text = f.read_text()
            assert not re.search(r"time\.(perf_counter|time|monotonic)\b|\bfrom time import", text), f


def test_fake_clock_is_installed_and_restored():
    fake = FakeClock(step=0.5, start=10.0)
    with fake_clock(fake):
        assert clock() == 10.5 and clock() == 11.0
        fake.advance(100)
        assert clock() == 111.5
    assert solvers_clock.CLOCK is not fake and clock() != 112.0


def test_certify_repartition_stops_on_the_fake_clock():
    """A deadline already past on the fake clock: no re-split is tried (the same plan back)."""
    from solvers.certify.resplit import polish

    g = torch.Generator().manual_seed(0)
    w = torch.exp(torch.randn(16, generator=g, dtype=torch.float64)) * 100
    experts = torch.randperm(16, generator=g).view(4, 4)
    loads = w[experts]
    with fake_clock(FakeClock(start=100.0)):
        new_loads, new_experts = polish(loads, experts, deadline=50.0)
    assert torch.equal(new_experts, experts) and torch.equal(new_loads, loads)


def test_migration_exact_pass_shares_its_time_on_the_fake_clock(monkeypatch):
    """Once the exact pass starts, each reading of the fake clock spends the whole limit: the
    first layer is solved, the others keep the heuristic plan (NOT_RUN), whatever the
    machine's speed. (Before the pass the clock stands still: the heuristic leaves it all.)"""
    from solvers.replan import plan_with_migration, solver as api

    g = torch.Generator().manual_seed(3)
    old_w = torch.exp(torch.randn(3, 12, generator=g, dtype=torch.float64)) * 100
    new_w = old_w * torch.exp(0.3 * torch.randn(3, 12, generator=g, dtype=torch.float64))
    prev = solve(Problem(old_w, 16, 1, 1, 4), "deepseek").plan
    pn = Problem(new_w, 16, 1, 1, 4)
    fake = FakeClock()
    exact_pass = api._exact_pass

    def ticking(*args, **kwargs):
        fake.step = 5.0
        return exact_pass(*args, **kwargs)

    monkeypatch.setattr(api, "_exact_pass", ticking)
    with fake_clock(fake):
        x = plan_with_migration(pn, "deepseek", prev, slack=0.0, method="exact", time_limit=9.0)
    status = [r["status"] for r in x.info["exact_layers"]]
    assert status[0] != "NOT_RUN" and status[1:] == ["NOT_RUN", "NOT_RUN"]
    assert np.isfinite(x.score.moves)
