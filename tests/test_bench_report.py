"""Report rendering: summary.md tables, the gap definition, the Dolan-More profile, PNG/HTML."""
from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from solvers.bench.analysis import (TIME_SHIFT_S, best_per_shape, certified_table, derive, performance_profile,
                                    shifted_geomean, solver_table)
from solvers.bench.report import (CERTIFIED_DEFINITION, GAP_DEFINITION, browser_path, render_summary,
                                  write_profile)
from solvers.bench.store import COLUMNS, normalise


def _row(instance, solver, kind, obj, lb, t, *, seed=0, status="feasible", E=8, R=16, P=8, N=1, G=1,
         model_bound=None, policy="global", termination=""):
    r = {c: "" for c in COLUMNS}
    r.update(instance=instance, model="m", num_layers=len(lb), num_experts=E, num_groups=G, num_replicas=R,
             num_nodes=N, num_gpus=P, slots_per_gpu=R // P, shape="s", scenario="mild", steps=4, window=2,
             seed=seed, solver=solver, kind=kind, options="{}", policy=policy, status=status, termination=termination,
             wall_time_s=t, threads=1,
             lower_bound=float(sum(lb)), lower_bound_layers=json.dumps(lb))
    if model_bound is not None:        # a hierarchical model's bound, kept apart from lower_bound
        r.update(model_bound=float(sum(model_bound)), model_bound_layers=json.dumps(model_bound),
                 model_policy="hierarchical", model_counts="free", model_colocation="allowed",
                 model_node_budget="fixed")
    if obj is not None:
        r.update(objective=float(sum(obj)), objective_layers=json.dumps(obj), imbalance_mean=1.1,
                 imbalance_worst=1.2, balancedness=0.9, node_imbalance_mean=1.0, duplicates=0,
                 holdout_imbalance_mean=1.2, holdout_imbalance_worst=1.3)
    return r


@pytest.fixture()
def table():
    """Two instances; the exact solver proves the optimum (10, 20) on the first."""
    rows = [
        _row("a", "fast", "heuristic", [11.0, 20.0], [9.0, 18.0], 0.001),
        _row("a", "good", "heuristic", [10.0, 21.0], [9.0, 18.0], 0.2),
        _row("a", "exact", "exact", [10.0, 20.0], [10.0, 20.0], 3.0, status="proven_optimal"),
        _row("b", "fast", "heuristic", [30.0], [25.0], 0.002, R=32, P=16, N=2),
        _row("b", "good", "heuristic", [27.5], [25.0], 0.5, R=32, P=16, N=2),
        _row("b", "exact", "exact", None, [26.0], 10.0, status="none", termination="time_limit", R=32, P=16, N=2),
    ]
    df, violations = derive(normalise(pd.DataFrame(rows)))
    assert violations == []
    return df


def test_derived_gaps_use_the_best_bound_and_best_known(table):
    a_fast = table[(table.instance == "a") & (table.solver == "fast")].iloc[0]
    assert a_fast["best_bound"] == 30.0
    assert a_fast["gap_mean"] == pytest.approx((11 / 10 - 1 + 0) / 2)
    assert a_fast["gap_max"] == pytest.approx(0.1)
    assert a_fast["gap_best_known"] == pytest.approx(0.05)
    assert bool(a_fast["proven_optimum"])
    b_good = table[(table.instance == "b") & (table.solver == "good")].iloc[0]
    assert b_good["best_bound"] == 26.0               # the exact solver's bound, though it found no plan
    assert b_good["gap_mean"] == pytest.approx(27.5 / 26 - 1)
    assert not bool(b_good["proven_optimum"])


def test_a_model_bound_only_covers_plans_of_its_model():
    rows = [
        _row("h", "glob", "heuristic", [10.0], [9.0], 0.01),
        _row("h", "hier", "heuristic", [14.0], [9.0], 0.01, policy="hierarchical"),
        _row("h", "exact", "exact", [13.0], [9.0], 1.0, policy="hierarchical", model_bound=[13.0],
             status="optimal_in_model"),
    ]
    df, violations = derive(normalise(pd.DataFrame(rows)))
    assert violations == []                            # 10 < 13 is fine: the global plan is outside the model
    by = df.set_index("solver")
    assert by.loc["glob", "best_bound"] == 9.0         # the model bound never raises the lower bound
    assert by.loc["hier", "gap_in_model_mean"] == pytest.approx(14 / 13 - 1)
    assert by.loc["hier", "gap_in_policy_mean"] == pytest.approx(14 / 13 - 1)
    assert by.loc["hier", "gap_mean"] == pytest.approx(14 / 9 - 1)
    assert math.isnan(by.loc["glob", "gap_in_model_mean"])
    bad = rows + [_row("h", "wrong", "heuristic", [12.0], [9.0], 0.01, policy="hierarchical")]
    assert any("below the proven model bound" in v for v in derive(normalise(pd.DataFrame(bad)))[1])


def test_solver_table_counts_and_shifted_geomean(table):
    st = solver_table(table).set_index("solver")
    assert st.loc["exact", "runs"] == 2 and st.loc["exact", "plans"] == 1 and st.loc["exact", "optimal"] == 1
    assert st.loc["exact", "failed"] == 1
    expected = math.exp((math.log(0.001 + TIME_SHIFT_S) + math.log(0.002 + TIME_SHIFT_S)) / 2) - TIME_SHIFT_S
    assert st.loc["fast", "time_sgm_s"] == pytest.approx(expected)
    assert shifted_geomean(pd.Series([1.0, 1.0])) == pytest.approx(1.0)
    assert st.loc["good", "gap_max"] == pytest.approx(max(21 / 20 - 1, 27.5 / 26 - 1))


def test_best_per_shape_respects_the_budget(table):
    best = best_per_shape(table, budgets=(0.01, 1.0, 5.0)).set_index("num_replicas")
    assert best.loc[16, "<= 0.01 s"].startswith("fast/global ")
    assert best.loc[16, "<= 1 s"].startswith("good/global ")       # 2.5% beats fast's 5%
    assert best.loc[16, "<= 5 s"].startswith("exact/global ")      # 0% gap
    assert best.loc[32, "<= 5 s"].startswith("good/global ")       # exact found no plan there


def test_performance_profile_is_dolan_more(table):
    prof = performance_profile(table, "objective")
    ratios, frac = prof["fast"]
    # problem a: 31 / 30, problem b: 30 / 27.5
    assert ratios.tolist() == pytest.approx(sorted([31 / 30, 30 / 27.5]))
    assert frac.tolist() == [0.5, 1.0]
    r_exact, _ = prof["exact"]
    assert r_exact[0] == pytest.approx(1.0) and np.isinf(r_exact[1])    # no plan on b: never solved
    t, _ = performance_profile(table, "wall_time_s")["fast"]
    assert t.tolist() == pytest.approx([1.0, 1.0])


def test_summary_has_definitions_tables_and_failures(table, tmp_path):
    meta = {"settings": {"suite": "unit", "executor": "local", "jobs": 1, "threads": 1},
            "machine": {"summary": "test box"}, "git": {"commit": "abcdef1234567"}}
    fig = write_profile(table, tmp_path, "html")
    text = render_summary(table, meta, ["x on a seed 0: layer 0 objective 1 is below the proven lower bound 2"], fig)
    assert "# Benchmark summary: suite `unit`" in text
    assert GAP_DEFINITION in text and f"shift {TIME_SHIFT_S} s" in text
    assert "## HARD FAILURES" in text and "below the proven lower bound" in text
    assert "## Gaps against proven optima" in text
    # the proven-optima table lists instance a with the heuristics' gaps to the optimum
    line = next(l for l in text.splitlines() if l.startswith("| a |"))
    assert "5.00%" in line and "2.50%" in line
    assert "| exact | exact | 2 | 1 | 1 | 0 | 1 |" in text
    assert "## Runs without a plan" in text and "time_limit" in text
    assert "profile.html" in text and (tmp_path / "profile.html").is_file()


def test_profile_falls_back_to_html_without_a_browser(table, tmp_path, monkeypatch):
    monkeypatch.setenv("BROWSER_PATH", str(tmp_path / "no-such-browser"))
    out = write_profile(table, tmp_path)
    assert out.name == "profile.html" and out.is_file() and "plotly" in out.read_text()[:5000].lower()
    assert not (tmp_path / "profile.png").exists()


@pytest.mark.slow
def test_profile_png_with_the_system_browser(table, tmp_path):
    out = write_profile(table, tmp_path, "png")
    if browser_path() is None:                   # no browser on this machine: HTML is the contract
        assert out.name == "profile.html"
    else:
        assert out.name == "profile.png" and out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_rerender_rewrites_summary_from_stored_rows(table, tmp_path):
    from benchmarks.report import rerender
    from solvers.bench.store import ResultStore

    ResultStore(tmp_path).write_final(table)
    (tmp_path / "meta.json").write_text(json.dumps({"settings": {"suite": "stored"},
                                                    "machine": {"load_average_at_start": [1.5, 1, 1]}}))
    out = rerender(tmp_path, "html")
    text = out.read_text()
    assert "suite `stored`" in text and "load average 1.50 at start" in text
    assert "| exact | exact | 2 | 1 | 1 | 0 | 1 |" in text


def test_certified_gap_per_instance_says_what_closed_it(table):
    extra = [
        _row("c", "heur", "heuristic", [10.5], [10.0], 0.01),            # a better plan closes it
        _row("c", "exact", "exact", [10.05], [10.0], 1.0),
        _row("d", "heur", "heuristic", [10.05], [10.0], 0.01),           # the heuristic was within 1 %
        _row("e", "heur", "heuristic", [10.2], [10.0], 0.01),            # a better bound closes it
        _row("e", "exact", "exact", None, [10.15], 1.0, status="none", termination="time_limit"),
    ]
    df, violations = derive(normalise(pd.concat([table, pd.DataFrame(extra)], ignore_index=True)))
    assert violations == []
    t = certified_table(df, target=0.01).set_index("instance")
    assert t.loc["a", "verdict"] == "proven" and t.loc["a", "proven"] == "2/2"
    assert t.loc["a", "certified max"] == pytest.approx(0.0)
    assert t.loc["b", "verdict"] == "open"
    assert t.loc["b", "certified max"] == pytest.approx(27.5 / 26 - 1)
    assert t.loc["b", "baseline max"] == pytest.approx(27.5 / 25 - 1)
    assert t.loc["b", "by plan"] == pytest.approx(0.0)
    assert t.loc["b", "by bound"] == pytest.approx(27.5 / 25 - 27.5 / 26)
    assert t.loc["c", "verdict"] == "plan" and t.loc["c", "by plan"] == pytest.approx(0.045)
    assert t.loc["d", "verdict"] == "already"
    assert t.loc["e", "verdict"] == "bound" and t.loc["e", "certified max"] == pytest.approx(10.2 / 10.15 - 1)
    for name in "bcde":                          # one layer: the two parts add up to what was closed
        r = t.loc[name]
        assert r["by plan"] + r["by bound"] == pytest.approx(r["baseline max"] - r["certified max"])
    meta = {"settings": {"suite": "unit"}}
    text = render_summary(df, meta, [], None)
    assert "## Certified gap per instance" in text and CERTIFIED_DEFINITION in text
    assert "5 instances: 1 proven, 1 already, 1 plan, 1 bound, 1 open." in text
    lines = [l for l in text.splitlines() if l.startswith("| ") and l.split(" | ")[-1].strip(" |") in
             ("proven", "already", "plan", "bound", "open")]
    assert lines[0].startswith("| b |")          # open instances first
