"""One workflow from compare to plan, through the CLI as a user calls it: what
compare picks, the `eplb plan` command it prints reproduces; held-out steps are never planned
on; windows are refused, never clamped; with a plan in force the migration-aware row moves
little and the pick weighs moves; the tables fit 120 columns."""
from __future__ import annotations

import json
import re
import shlex

import pytest
import torch

from solvers.cli import main
from solvers.cluster import ModelPreset
from solvers.routing import generate_routing, save_routing

pytestmark = pytest.mark.usefixtures("one_thread")

OLMOE = ["--model", "olmoe-1b-7b", "--replicas", "80", "--nodes", "2", "--gpus", "16"]
DSV3 = ["--model", "deepseek-v3", "--replicas", "288", "--nodes", "4", "--gpus", "32"]
SMALL = ModelPreset("small-32", 4, 32, 1, 4, cluster="nodes-2x4")


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def _commands(out: str) -> dict[str, str]:
    """{solver: the `eplb plan` command compare printed for its row}."""
    found = {}
    for line in out.splitlines():
        m = re.match(r"reproduce (?:the pick|(\S+) \([^)]*\)): (eplb plan .*)$", line)
        if m:
            argv = shlex.split(m[2])
            found[argv[argv.index("--solver") + 1]] = m[2]
    return found


def _run_printed(command: str, capsys) -> None:
    argv = shlex.split(command)
    assert argv[:2] == ["eplb", "plan"]
    assert main(argv[1:]) == 0, capsys.readouterr().err
    capsys.readouterr()


def test_compare_row_of_a_history_solver_is_reproduced_by_its_printed_plan_command(tmp_path, capsys, monkeypatch):
    """compare on a planning window with a held-out range and risk_aware (a planner of the
    window's steps); the printed `eplb plan` command gives the same plan (same phy2log) as the
    row's plan file, and both planned on the window's steps (history recorded, not null)."""
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "cmp"
    assert main(["compare", "--loads", "olmoe-1b-7b-drifting@0:20", "--holdout", "20:40", *OLMOE,
                 "--solvers", "deepseek,risk_aware", "--verbose", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    commands = _commands(text)
    assert set(commands) == {"deepseek", "risk_aware"}
    rows = {r["solver"]: r for r in _csv_rows(out / "compare.csv")}
    for solver, command in commands.items():
        written = out / "plans" / f"{solver}-{rows[solver]['policy']}.json"
        row_plan = json.loads(written.read_text())
        assert row_plan["provenance"]["command"] == command
        written.unlink()
        _run_printed(command, capsys)                    # writes the same file again
        again = json.loads(written.read_text())
        assert again["phy2log"] == row_plan["phy2log"]
        assert again["metrics"]["imbalance_mean"] == pytest.approx(float(rows[solver]["imbalance_mean"]), rel=1e-12)
    html = (out / "compare.html").read_text()
    assert "held out, per step" in html                   # the figure the pick goes by
    low = float(re.search(r'"yaxis":\{"anchor":"x","domain":\[[^]]*\],"range":\[([\d.]+)', html)[1])
    assert low > 0.9                   # the imbalance axis starts near its bars (>= 1), not at 0
    risk = json.loads((out / "plans" / f"risk_aware-{rows['risk_aware']['policy']}.json").read_text())
    assert risk["options"]["history"].startswith("the window's 20 steps")


def _csv_rows(path):
    import csv
    with open(path) as fh:
        return list(csv.DictReader(fh))


def test_plan_gives_a_history_solver_the_windows_steps(tmp_path, capsys):
    """`eplb plan --solver risk_aware` on a window of steps plans on those steps (as compare
    and the benchmark rank it), not on their sum alone: the same plan as compare's row."""
    plan = tmp_path / "p.json"
    assert main(["plan", "--loads", "olmoe-1b-7b-drifting@0:20", *OLMOE, "--solver", "ewma", "--out", str(plan),
                 "--json"]) == 0
    capsys.readouterr()
    doc = json.loads(plan.read_text())
    assert doc["options"]["history"] == "the window's 20 steps [20, 16, 64]"
    assert main(["compare", "--loads", "olmoe-1b-7b-drifting@0:20", *OLMOE, "--solvers", "ewma", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)["rows"][0]
    assert row["imbalance_mean"] == pytest.approx(doc["metrics"]["imbalance_mean"], rel=1e-12)


def test_held_out_steps_are_not_planned_on(capsys):
    """Without a planning window compare plans on the steps before the held-out range and says
    so: its deepseek row is `eplb plan` on those steps, not on the whole trace."""
    assert main(["compare", "--loads", "deepseek-v3-skewed", "--holdout", "16:24", *DSV3, "--solvers", "deepseek",
                 "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["planning_window"] == "deepseek-v3-skewed@0:16" and "0:16" in doc["window_note"]
    assert main(["compare", "--loads", "deepseek-v3-skewed@0:16", *DSV3, "--solvers", "deepseek", "--json"]) == 0
    window = json.loads(capsys.readouterr().out)["rows"][0]
    assert main(["compare", "--loads", "deepseek-v3-skewed", *DSV3, "--solvers", "deepseek", "--json"]) == 0
    whole = json.loads(capsys.readouterr().out)["rows"][0]
    assert doc["rows"][0]["imbalance_mean"] == window["imbalance_mean"] != whole["imbalance_mean"]
    assert main(["compare", "--loads", "deepseek-v3-skewed", "--holdout", "16:24", *DSV3, "--solvers",
                 "deepseek"]) == 0
    assert capsys.readouterr().out.splitlines()[0].startswith("planning on steps 0:16")


@pytest.mark.parametrize("argv, words", [
    (["compare", "--loads", "deepseek-v3-skewed@0:16", "--holdout", "8:20"], "overlap the planning window 0:16"),
    (["compare", "--loads", "deepseek-v3-skewed", "--holdout", "16:40"], "16:40 reaches past the trace"),
    (["compare", "--loads", "deepseek-v3-skewed@0:30", "--holdout", "20:24"], "0:30 reaches past the trace"),
    (["compare", "--loads", "deepseek-v3-skewed", "--holdout", "0:8"], "leave no step before them"),
    (["compare", "--loads", "deepseek-v3-skewed@0:30"], "0:30 reaches past the trace"),
    (["plan", "--loads", "deepseek-v3-skewed@0:30", "--out", "x.json"], "0:30 reaches past the trace"),
    (["plan", "--loads", "deepseek-v3-skewed@5:5", "--out", "x.json"], "5:5 selects no step"),
])
def test_overlapping_and_out_of_range_windows_are_refused_in_one_line(argv, words, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main([*argv, *DSV3]) == 2
    line = _one_line(capsys)
    assert words in line
    assert not (tmp_path / "x.json").exists()


def test_compare_previous_runs_a_migration_aware_row_and_the_pick_weighs_moves(tmp_path, capsys, monkeypatch):
    """With --previous, the migration solver re-plans from the plan in force (far fewer moves
    than a fresh plan), --migration-slack sets its slack, the pick states moves and bytes, and
    the printed command reproduces the migration row."""
    monkeypatch.chdir(tmp_path)
    old = tmp_path / "old.json"
    assert main(["plan", "--loads", "olmoe-1b-7b-drifting@0:20", *OLMOE, "--out", str(old)]) == 0
    capsys.readouterr()
    # the migration solver judges its slack on the forecast of the window's steps (not on their
    # sum), so the pick is made on the held-out steps, where that forecast is tested
    cmp = ["compare", "--loads", "olmoe-1b-7b-drifting@20:40", "--holdout", "40:60", *OLMOE, "--previous", str(old)]
    assert main([*cmp, "--solvers", "deepseek,migration", "--migration-slack", "0.02", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    rows = {r["solver"]: r for r in doc["rows"]}
    assert rows["migration"]["moves"] < rows["deepseek"]["moves"] / 5       # 199 against 1,147
    assert (rows["migration"]["holdout_step_imbalance_mean"]
            <= rows["deepseek"]["holdout_step_imbalance_mean"] * 1.02 + 1e-12)
    assert doc["pick"]["solver"] == "migration"
    assert re.search(r"[\d,]+ moves \([\d.]+ GB\)", doc["reason"])            # moves and bytes, with units
    assert "within 2% of the lowest" in doc["reason"]
    command = doc["pick"]["plan_command"]
    assert "--solver migration" in command and "-O slack=0.02" in command
    _run_printed(command, capsys)
    assert json.loads((tmp_path / f"migration-{rows['migration']['policy']}.json").read_text())["metrics"]["moves"] == \
        rows["migration"]["moves"]
    # the default solvers gain the migration row when a plan is in force
    assert main([*cmp, "--json"]) == 0
    assert [r["solver"] for r in json.loads(capsys.readouterr().out)["rows"]][-1] == "migration"


@pytest.fixture(scope="module")
def routing_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("routing") / "small.npz"
    save_routing(generate_routing(SMALL, 0, num_tokens=256, num_ranks=8, communities=4, num_topics=8), path)
    return str(path)


def test_traffic_aware_plan_equals_its_compare_row(routing_file, tmp_path, capsys):
    """The same loads and routing give traffic_aware the same call in plan and compare: the
    same plan, imbalance and inter-node bytes."""
    base = ["--loads", routing_file, "--routing", routing_file, "--replicas", "40", "--gpus", "8", "--nodes", "2"]
    out = tmp_path / "cmp"
    assert main(["compare", *base, "--solvers", "traffic_aware", "--out", str(out), "--json"]) == 0
    row = json.loads(capsys.readouterr().out)["rows"][0]
    plan = tmp_path / "ta.json"
    assert main(["plan", *base, "--solver", "traffic_aware", "--out", str(plan), "--json"]) == 0
    metrics = json.loads(capsys.readouterr().out)
    assert metrics["imbalance_mean"] == pytest.approx(row["imbalance_mean"], rel=1e-12)
    assert metrics["inter_node_bytes"] == row["inter_node_bytes"]
    assert json.loads(plan.read_text())["phy2log"] == \
        json.loads((out / "plans" / "traffic_aware-global.json").read_text())["phy2log"]


def test_compare_table_fits_120_columns_and_wide_shows_every_column(routing_file, tmp_path, capsys):
    """Speeds, a plan in force and a routing trace: every column kind at once, still within
    120 characters; --wide adds the rest."""
    speeds = ["--gpu-speed", "1,1,1,1,1.4,1.4,1.4,1.4"]
    base = ["--loads", routing_file, "--replicas", "40", "--gpus", "8", "--nodes", "2", *speeds]
    old = tmp_path / "old.json"
    assert main(["plan", *base, "--solver", "kk_swap", "--out", str(old)]) == 0
    capsys.readouterr()
    cmp = ["compare", *base, "--routing", routing_file, "--previous", str(old), "--expert-bytes", "44040192",
           "--solvers", "kk_swap,traffic_aware,migration", "-O", "max_swaps=3"]
    assert main(cmp) == 0
    out = capsys.readouterr().out
    table = out.split("\n\n")[0].splitlines()
    assert max(map(len, table)) <= 120 and "moved" in table[1]
    assert any(re.search(r"\d [kMG]B\b", x) for x in table[2:])        # bytes with units
    assert main([*cmp, "--wide"]) == 0
    wide = capsys.readouterr().out.split("\n\n")[0].splitlines()
    assert "p99" in wide[1] and "dups" in wide[1] and max(map(len, wide)) > max(map(len, table))


def test_recommend_table_is_aligned(capsys):
    """Every candidate line puts its columns where the header does (a long solver name too)."""
    assert main(["recommend", "--model", "deepseek-v3", "--replicas", "288", "--gpus", "32", "--nodes", "4"]) == 0
    lines = capsys.readouterr().out.splitlines()
    start = next(i for i, x in enumerate(lines) if x.startswith("solver "))
    end = lines.index("", start)
    header, body = lines[start], lines[start + 1:end]
    assert body and all(len(x) == len(header) for x in body)
    assert any(x.startswith("uniform_replicas ") for x in body)
    for title in ("held-out", "gap max", "time max"):     # right-aligned numbers end under their title
        right = header.index(title) + len(title)
        assert all(x[right - 1] != " " and (right == len(x) or x[right] == " ") for x in body), title
    assert "plan it with: eplb plan --loads LOADS --solver" in "\n".join(lines)


def test_plan_output_names_the_solver_that_ran(tmp_path, capsys):
    """After a GPU failed, `--migration-slack` re-plans kk_swap's plan with the elastic solver:
    the headline says so, in agreement with the metrics below it (no `solver kk_swap` above a
    table saying `elastic`)."""
    old, new = tmp_path / "old.json", tmp_path / "new.json"
    assert main(["plan", "--loads", "olmoe-1b-7b-drifting@0:20", *OLMOE, "--solver", "kk_swap", "--out", str(old)]) == 0
    capsys.readouterr()
    assert main(["plan", "--loads", "olmoe-1b-7b-drifting@20:40", *OLMOE, "--solver", "kk_swap", "--failed", "3",
                 "--previous", str(old), "--migration-slack", "0.01", "--out", str(new)]) == 0
    lines = capsys.readouterr().out.splitlines()
    ran = next(x.split()[1] for x in lines if x.startswith("solver "))
    assert ran == "elastic" and "solver kk_swap (re-planned by elastic)" in lines[0]
    assert json.loads(new.read_text())["solver"] == "kk_swap"


def test_a_solver_needing_a_routing_trace_is_refused_before_any_solver_runs(capsys):
    assert main(["compare", "--loads", "olmoe-1b-7b-drifting@0:20", *OLMOE, "--solvers", "deepseek,traffic_aware"]) == 2
    cap = capsys.readouterr()
    assert "traffic_aware plans on a per-token routing trace" in cap.err and "[1/2]" not in cap.err


def test_the_pick_names_each_row_once_whether_or_not_its_name_carries_the_policy():
    """The app's table names rows 'deepseek (global)' with a policy column beside: the pick's
    reason said 'next best deepseek (global) (global)'."""
    from solvers.compare import pick

    rows = [{"solver": s, "policy": "global", "imbalance_mean": v, "termination": "completed", "status": "feasible",
             "wall_time_s": 0.1, "gap_mean": 0.0}
            for s, v in (("kk_swap", 1.01), ("deepseek", 1.02))]
    for named in (rows, [{**r, "solver": f"{r['solver']} (global)"} for r in rows]):
        best, reason = pick(named)
        assert "next best deepseek (global) 1.0200" in reason and "(global) (global)" not in reason, reason
