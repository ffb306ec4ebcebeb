"""The contract every front end relies on: universal bounds, one option vocabulary with
schemas, library I/O (loads and plan documents), engine round trips and `eplb compare`."""
import dataclasses
import io
import json
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from solvers import Cluster, OptionError, Problem, SolutionStatus, Termination, get_solver, solve, solver_names
from solvers.cli import main
from solvers.compare import compare_solvers, pick
from tests.brute import brute_force
from solvers.io import read_loads
from solvers.options import Option, validate_options
from solvers.planfile import dumps_plan, plan_document, read_plan
from solvers.result import ModelScope
from solvers.scoring import score
from solvers.io import load_dataset

README = [[90, 132, 40, 61, 104, 165, 39, 4, 73, 56, 183, 86],
          [20, 107, 104, 64, 19, 197, 187, 157, 172, 86, 16, 27]]
SHARED_NAMES = {"policy", "colocation", "time_limit", "threads", "seed"}
SYNONYMS = {"nodup", "time_budget", "num_threads", "workers", "random_seed"}


def needs(name):
    if name not in solver_names(available_only=True):
        pytest.skip(f"{name} not installed here: {get_solver(name).requires}")


# 1. A lower bound is a lower bound -------------------------------------------------------

def test_readme_case_restricted_bound_never_leaks_into_lower_bound():
    needs("cpsat")
    p = Problem(README, 16, 4, 2, 8)
    free = solve(p, "cpsat", policy="global", model="joint", colocation="allowed", time_limit=30)
    assert free.termination is Termination.OPTIMAL and free.status is SolutionStatus.PROVEN_OPTIMAL
    assert free.objective.tolist() == [136.0, 172.0]
    assert free.model_bound is None                          # global, free counts: the bound is universal
    best = solve(p, "best", exact="cpsat", time_limit=10)    # hierarchical by default
    assert best.policy == "hierarchical"
    # the bound valid for every plan never exceeds a plan some solver finds
    assert bool((best.lower_bound <= free.objective * (1 + 1e-9)).all())
    assert best.status is not SolutionStatus.PROVEN_OPTIMAL   # its plans (151, 179.5) are not optimal
    assert best.model_scope == ModelScope("hierarchical", "free", "allowed", "fixed")
    assert not bool(best.proven_optimal.any())
    hier = solve(p, "cpsat", time_limit=30)
    assert hier.policy == "hierarchical" and hier.model_scope.policy == "hierarchical"
    if bool(hier.optimal_in_model.all()):
        assert hier.status is SolutionStatus.OPTIMAL_IN_MODEL
    assert hier.gap_in_model is not None and hier.gap is not None
    assert bool((hier.gap >= hier.gap_in_model - 1e-12).all())


def _solver_cases():
    out = []
    for name in solver_names(available_only=True):
        spec = get_solver(name)
        opts = {}
        for o in spec.schema:
            if o.role == "time_limit":
                opts[o.name] = 5.0 if spec.kind == "exact" else 0.2
            if o.role == "threads":
                opts[o.name] = 1
        out.append((name, opts))
    return out


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_every_solvers_lower_bound_is_below_the_unrestricted_optimum(data):
    P = data.draw(st.sampled_from([2, 3]))
    S = data.draw(st.sampled_from([1, 2]))
    R = P * S
    E = data.draw(st.integers(min_value=max(1, R - 2), max_value=R))
    w = data.draw(st.lists(st.integers(0, 60), min_size=E, max_size=E))
    G, N = (2, 2) if E % 2 == 0 and P % 2 == 0 else (1, 1)
    problem = Problem([w], R, G, N, P)
    opt = brute_force(w, R, P, model="joint")        # every plan: any policy, counts, colocation
    for name, opts in _solver_cases():
        try:
            res = solve(problem, name, **opts)
        except OptionError:
            continue                                 # an option the shape cannot take (e.g. colocation)
        assert float(res.lower_bound[0]) <= opt * (1 + 1e-9) + 1e-12, (name, w, R, P, G, N)
        if res.status is SolutionStatus.PROVEN_OPTIMAL:
            assert float(res.objective[0]) == pytest.approx(opt, rel=1e-6, abs=1e-9), (name, w)


# 2. One option vocabulary, with a schema --------------------------------------------------

def test_every_solver_declares_a_schema_in_the_shared_vocabulary():
    for name in solver_names():
        spec = get_solver(name)
        names = set(spec.options)
        assert not names & SYNONYMS, (name, names & SYNONYMS)
        for o in spec.schema:
            assert o.help, (name, o.name)
            if o.name == "policy":
                assert o.default == "auto" and set(o.choices) == {"auto", "hierarchical", "global"}
            if o.name == "colocation":
                assert set(o.choices) == {"allowed", "forbidden"}
            if o.name == "time_limit":
                assert o.role == "time_limit"


def test_policy_is_the_same_option_with_the_same_default_everywhere():
    p = Problem(README, 16, 4, 2, 8)
    policies = {}
    for name in ("deepseek", "kk_swap", "joint", "best", "cpsat"):
        if name in solver_names(available_only=True):
            opts = {"time_limit": 5.0} if "time_limit" in get_solver(name).options else {}
            policies[name] = solve(p, name, **opts).policy
    assert set(policies.values()) == {"hierarchical"}, policies


def test_schema_validation_names_the_option():
    with pytest.raises(OptionError) as err:
        solve(Problem(README, 16, 4, 2, 8), "kk_swap", steps=-1)
    assert err.value.param == "steps"
    with pytest.raises(OptionError) as err:
        solve(Problem(README, 16, 4, 2, 8), "best", time_limit=0)
    assert err.value.param == "time_limit"
    with pytest.raises(OptionError) as err:
        solve(Problem(README, 16, 4, 2, 8), "deepseek", colocation="forbidden")
    assert err.value.param == "colocation" and "not an option of solver 'deepseek'" in str(err.value)
    with pytest.raises(OptionError) as err:
        validate_options("x", (Option("a", str, "u", "h", choices=("u", "v")),), {"a": "w"})
    assert str(err.value).startswith("a: must be one of u, v")


def test_result_records_every_option_in_effect():
    res = solve(Problem(README, 16, 4, 2, 8), "kk_swap", steps=3)
    assert res.options == {"policy": "auto", "colocation": "allowed", "relax": 0, "steps": 3, "starts": "kk"}


def test_register_takes_functions_of_problem_and_typed_options():
    from solvers.registry import _REGISTRY, get_solver, register

    with pytest.raises(ValueError, match="function of \\(problem, options\\)"):
        @register("_contract_bad", kind="heuristic", description="x", options=())
        def _bad(problem, *, policy="auto"):
            raise AssertionError
    with pytest.raises(ValueError, match="declared twice"):
        @register("_contract_bad2", kind="heuristic", description="x",
                  options=(Option("steps", int, 3, "h"), Option("steps", int, 4, "h")))
        def _bad2(problem, options):
            raise AssertionError
    seen = []

    @register("_contract_typed", kind="heuristic", description="x", options=(Option("steps", int, 3, "h"),))
    def _typed(problem, options):
        seen.append(options)
        raise AssertionError
    try:
        spec = get_solver("_contract_typed")
        opts = spec.parse({"steps": 5})
        assert opts.steps == 5 and dict(opts) == {"steps": 5} and type(opts).__name__ == "ContractTypedOptions"
        assert spec.parse(opts) is opts                       # typed options pass through, unchecked again
        with pytest.raises(OptionError, match="^steps"):
            spec.parse({"steps": 2.5})
        with pytest.raises(dataclasses.FrozenInstanceError):
            opts.steps = 6
    finally:
        _REGISTRY.pop("_contract_typed", None)


def test_harness_reads_time_and_threads_from_the_schema():
    from solvers.bench.suites import get_suite
    from solvers.bench.tasks import suite_tasks

    tasks = suite_tasks(get_suite("tiny"), threads=1)
    for t in tasks:
        spec = get_solver(t.solver)
        for o in spec.schema:
            if o.role == "time_limit":
                assert o.name in t.options
            if o.role == "threads":
                assert t.options[o.name] == 1


def test_cli_policy_works_for_every_solver_family(tmp_path, capsys):
    needs("cpsat")
    rc = main(["plan", "--loads", "datasets/examples/readme.json", "--replicas", "16", "--groups", "4", "--nodes",
               "2", "--gpus", "8", "--solver", "cpsat", "--policy", "hierarchical", "-O", "time_limit=5",
               "--out", str(tmp_path / "p.json")])
    assert rc == 0, capsys.readouterr().err
    doc = json.loads((tmp_path / "p.json").read_text())
    assert doc["policy"] == "hierarchical" and doc["options"]["policy"] == "hierarchical"
    assert doc["options"]["threads"] == 2                        # defaults recorded too
    assert doc["bounds"]["model_scope"]["policy"] == "hierarchical"
    assert doc["provenance"]["command"].startswith("eplb plan --loads datasets/examples/readme.json")


def test_cli_solvers_prints_schemas_and_plan_help_points_there(capsys):
    assert main(["solvers", "--json"]) == 0
    listed = {s["name"]: s for s in json.loads(capsys.readouterr().out)}
    assert {o["name"] for o in listed["kk_swap"]["options"]} >= {"policy", "colocation", "steps"}
    assert main(["solvers"]) == 0
    assert "allowed | forbidden" in capsys.readouterr().out
    from solvers.cli import build_parser
    with pytest.raises(SystemExit):
        build_parser().parse_args(["plan", "--help"])
    assert "eplb solvers" in capsys.readouterr().out


@pytest.mark.parametrize("argv,needle", [
    (["-O", "=5"], "non-empty KEY"),
    (["-O", "steps=2", "-O", "steps=3", "--solver", "kk_swap"], "steps: is given twice"),
    (["--solver", "kk_swap", "-O", "nodup=true"], "nodup: is not an option"),
])
def test_cli_bad_options_are_one_line(tmp_path, capsys, argv, needle):
    rc = main(["plan", "--loads", "datasets/examples/readme.json", "--replicas", "16", "--gpus", "8",
               "--out", str(tmp_path / "p.json"), *argv])
    err = capsys.readouterr().err
    assert rc == 2 and needle in err and err.count("\n") == 1, err


# 3. Library I/O ----------------------------------------------------------------------------

def test_read_loads_from_path_bytes_and_file_object():
    path = Path("datasets/examples/readme.json")
    a = read_loads(path)
    b = read_loads(path.read_bytes(), name="readme.json")
    c = read_loads(io.BytesIO(path.read_bytes()), format="json")
    for info in (a, b, c):
        assert info.weights.tolist() == [[float(x) for x in row] for row in README]
        assert info.format == "json" and info.dense_layers == 0 and info.num_layers == 2
    with pytest.raises(ValueError, match="format"):
        read_loads(path.read_bytes())                      # bytes without a name or format
    with pytest.raises(ValueError, match="empty"):
        read_loads(b"", name="x.json")


def sglang_dump(tmp_path, steps=4, dense=3, moe=6, experts=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    counts = torch.zeros(steps, dense + moe, experts, dtype=torch.int64)
    counts[:, dense:] = torch.randint(1, 50, (steps, moe, experts), generator=g)
    path = tmp_path / "expert_distribution.pt"
    torch.save({"logical_count": counts}, path)
    return path, counts


def test_sglang_dump_drops_dense_layers_and_round_trips_with_the_engine_row_count(tmp_path, capsys):
    path, counts = sglang_dump(tmp_path)
    info = read_loads(path)
    assert info.format == "sglang" and info.file_layers == 9 and info.dense_layers == 3
    assert info.weights.shape == (6, 16)
    assert torch.equal(info.weights, counts[:, 3:].sum(0).double())
    plan = tmp_path / "plan.json"
    assert main(["plan", "--loads", str(path), "--replicas", "24", "--gpus", "8", "--out", str(plan)]) == 0
    doc = json.loads(plan.read_text())
    assert doc["problem"]["num_layers"] == 6 and doc["engine"] == {"dense_layers": 3, "engine_layers": 9}
    out = tmp_path / "init.json"
    assert main(["convert", str(plan), "--to", "sglang", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "--init-expert-location" in printed and "--ep-num-redundant-experts 8" in printed
    rows = json.loads(out.read_text())["physical_to_logical_map"]
    assert len(rows) == 9                                  # the engine's row count, not 6 + 3 + 3
    # an explicit offset that contradicts the plan's dense layers is refused
    assert main(["convert", str(plan), "--to", "sglang", "--out", str(out), "--layer-offset", "5"]) == 2
    assert "layer_offset: 5 contradicts" in capsys.readouterr().err
    # the exported map scores on the original dump (dense rows cut off)
    assert main(["score", "--loads", str(path), "--plan", str(out), "--gpus", "8", "--json"]) == 0
    scored = json.loads(capsys.readouterr().out)
    assert scored["max_load_sum"] == pytest.approx(doc["metrics"]["max_load_sum"])


def test_zero_dense_layers_no_longer_flatter_the_mean_imbalance(tmp_path):
    path, counts = sglang_dump(tmp_path)
    res_moe = solve(Problem(read_loads(path).weights, 24, 1, 1, 8), "deepseek")
    assert res_moe.score.imbalance_mean > 1.0                # zero layers would pull it towards 1


def test_model_preset_fills_groups_and_checks_experts(tmp_path, capsys):
    assert main(["plan", "--loads", "deepseek-v3-skewed", "--model", "deepseek-v3", "--replicas", "288",
                 "--nodes", "4", "--gpus", "32", "--out", str(tmp_path / "p.json")]) == 0
    doc = json.loads((tmp_path / "p.json").read_text())
    assert doc["problem"]["num_groups"] == 8 and doc["policy"] == "hierarchical"
    assert doc["engine"] == {"dense_layers": 3, "engine_layers": 61}     # a whole model: 3 dense layers
    capsys.readouterr()
    assert main(["plan", "--loads", "datasets/examples/readme.json", "--model", "deepseek-v3", "--replicas", "16",
                 "--gpus", "8", "--out", str(tmp_path / "q.json")]) == 2
    assert "model: deepseek-v3 has 256 routed experts" in capsys.readouterr().err


def test_plan_document_api_dumps_and_reads_back_from_bytes():
    p = Problem(README, 16, 4, 2, 8)
    res = solve(p, "deepseek")
    doc = plan_document(res.plan, p, policy=res.policy, solver="deepseek", options=res.options,
                        metrics=res.summary(), result=res)
    plan, back = read_plan(dumps_plan(doc).encode())
    assert torch.equal(plan.phy2log, res.plan.phy2log)
    assert back["bounds"]["lower_bound"] == pytest.approx(res.lower_bound.tolist())
    assert back["bounds"]["termination"] == str(res.termination)
    with pytest.raises(ValueError, match="plan"):
        read_plan(b"[" * 100000)                             # deep nesting: an error, not a crash


# 4. Engine round trips ---------------------------------------------------------------------

def test_convert_to_csv_from_the_plan_file_alone_and_extension_checks(tmp_path, capsys):
    plan = tmp_path / "p.json"
    assert main(["plan", "--loads", "datasets/examples/readme.json", "--replicas", "16", "--groups", "4",
                 "--nodes", "2", "--gpus", "8", "--out", str(plan)]) == 0
    assert main(["convert", str(plan), "--to", "csv", "--out", str(tmp_path / "p.csv")]) == 0
    lines = (tmp_path / "p.csv").read_text().splitlines()
    assert lines[0] == "layer,slot,gpu,expert,replica" and len(lines) == 1 + 2 * 16
    capsys.readouterr()
    assert main(["convert", str(plan), "--to", "sglang", "--out", str(tmp_path / "x.yaml")]) == 2
    assert "a sglang plan is written as .json" in capsys.readouterr().err
    assert main(["convert", str(plan), "--out", str(tmp_path / "x.yaml")]) == 0
    assert "moe_config: {load_balancer:" in capsys.readouterr().out


@pytest.mark.parametrize("fmt,suffix", [("sglang", ".json"), ("trtllm", ".yaml"), ("csv", ".csv")])
def test_score_and_previous_accept_engine_maps(tmp_path, capsys, fmt, suffix):
    plan = tmp_path / "p.json"
    base = ["--loads", "datasets/examples/readme.json"]
    assert main(["plan", *base, "--replicas", "16", "--groups", "4", "--nodes", "2", "--gpus", "8",
                 "--out", str(plan)]) == 0
    exported = tmp_path / f"e{suffix}"
    assert main(["convert", str(plan), "--to", fmt, "--out", str(exported)]) == 0
    capsys.readouterr()
    assert main(["score", *base, "--plan", str(exported), "--gpus", "8", "--nodes", "2", "--groups", "4",
                 "--previous", str(exported), "--json"]) == 0
    metrics = json.loads(capsys.readouterr().out)
    assert metrics["moves"] == 0
    assert metrics["max_load_sum"] == pytest.approx(json.loads(plan.read_text())["metrics"]["max_load_sum"])


# 5. eplb compare ---------------------------------------------------------------------------

def test_compare_tabulates_in_sample_and_held_out_and_picks(tmp_path, capsys):
    out = tmp_path / "cmp"
    rc = main(["compare", "--loads", "olmoe-1b-7b-drifting@0:100", "--holdout", "100:200", "--replicas", "80",
               "--nodes", "2", "--gpus", "16", "--solvers", "deepseek,kk_swap", "--policy", "global",
               "--out", str(out)])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    assert "pick: " in cap.out
    assert "lowest mean imbalance per step on the held-out steps" in cap.out      # the held-out steps one by one
    top, titles = cap.out.splitlines()[:2]                                         # a two-line header
    assert top.split()[:2] == ["held-out", "per"] and titles.split()[:4] == ["solver", "policy", "status", "per"]
    assert titles.index("per step") == top.index("held-out")                       # that figure first
    assert "[2/2] kk_swap" in cap.err                        # a progress line per solver
    rows = (out / "compare.csv").read_text().splitlines()
    assert rows[0].startswith("solver,policy,holdout_step_imbalance_mean,") and len(rows) == 3
    assert (out / "compare.html").stat().st_size > 1000
    assert main(["compare", "--loads", "olmoe-1b-7b-drifting@0:100", "--replicas", "80", "--gpus", "16",
                 "--solvers", "deepseek", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["pick"]["solver"] == "deepseek" and "in sample" in doc["reason"]


def test_compare_with_held_out_steps_runs_the_window_planner_by_default(capsys):
    """Judged out of sample, the default comparison includes risk_aware, and on a drifting trace
    it is the one that holds: the in-sample winners balance the past and hold worse."""
    assert main(["compare", "--loads", "olmoe-1b-7b-drifting@0:100", "--holdout", "100:200", "--replicas", "80",
                 "--nodes", "2", "--gpus", "16", "--policy", "global", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [r["solver"] for r in doc["rows"]] == ["deepseek", "kk_swap", "joint", "best", "risk_aware"]
    assert doc["pick"]["solver"] == "risk_aware" and "held-out" in doc["reason"]
    assert main(["compare", "--loads", "olmoe-1b-7b-drifting@0:100", "--replicas", "80", "--gpus", "16",
                 "--policy", "global", "--solvers", "deepseek", "--json"]) == 0      # named solvers: just those
    assert [r["solver"] for r in json.loads(capsys.readouterr().out)["rows"]] == ["deepseek"]


def test_compare_scores_held_out_steps_one_by_one_and_gives_planners_the_window(capsys):
    trace = load_dataset("olmoe-1b-7b-drifting").loads.to(torch.float64)
    window, held = trace[:100], trace[100:200]
    problem = Problem(window.sum(0), 80, 1, 2, 16)
    holdout = Problem(held.sum(0), 80, 1, 2, 16)
    rows = compare_solvers(problem, ["deepseek", "risk_aware"], policies=["global"], holdout=holdout,
                           history=window, holdout_steps=held)
    for r in rows:
        plan = r["_result"].plan
        assert r["holdout_step_imbalance_mean"] == score(holdout, plan, tokens=held).imbalance_mean
        assert r["holdout_imbalance_mean"] == score(holdout, plan).imbalance_mean
    assert rows[1]["_result"].info["steps_in_window"] == 100             # risk_aware got the window's steps
    best, reason = pick(rows)
    assert best["holdout_step_imbalance_mean"] == min(r["holdout_step_imbalance_mean"] for r in rows)
    assert "per step on the held-out steps" in reason
    with pytest.raises(OptionError, match="holdout_steps"):
        compare_solvers(problem, ["deepseek"], holdout=holdout, holdout_steps=held[:, :3])


def test_compare_on_gpus_of_different_speeds_scores_held_out_steps_in_time(capsys):
    """On a cluster of mixed speeds a held-out step costs its slowest GPU's time: the per-step
    figure is in time too, equal to the shared scorer's, and the pick goes by it."""
    trace = load_dataset("olmoe-1b-7b-drifting").loads.to(torch.float64)
    window, held = trace[:20], trace[20:40]
    cluster = Cluster(2, 16, 80, gpu_speed=[1.0] * 8 + [1.4] * 8)
    problem = Problem(window.sum(0), cluster=cluster, num_groups=1)
    holdout = Problem(held.sum(0), cluster=cluster, num_groups=1)
    rows = compare_solvers(problem, ["deepseek", "kk_swap", "risk_aware"], policies=["global"], holdout=holdout,
                           history=window, holdout_steps=held)
    for r in rows:
        s = score(holdout, r["_result"].plan, tokens=held)
        assert r["holdout_step_time_imbalance_mean"] == s.summary["time_imbalance_mean"]
        assert r["holdout_step_time_imbalance_worst"] == s.summary["time_imbalance_worst"]
        assert r["holdout_step_imbalance_mean"] == s.imbalance_mean           # tokens, beside it
    best, reason = pick(rows)
    assert best["holdout_step_time_imbalance_mean"] == min(r["holdout_step_time_imbalance_mean"] for r in rows)
    assert "in time per step on the held-out steps" in reason
    assert main(["compare", "--loads", "olmoe-1b-7b-drifting@0:20", "--holdout", "20:40", "--replicas", "80",
                 "--nodes", "2", "--gpus", "16", "--gpu-speed", ",".join(["1"] * 8 + ["1.4"] * 8),
                 "--policy", "global", "--solvers", "deepseek,kk_swap"]) == 0
    out = capsys.readouterr().out
    top, titles = out.splitlines()[:2]                     # the figure the pick goes by, first
    assert top.split()[:2] == ["held-out", "time"] and titles.split()[3:5] == ["per", "step"]
    assert "in time per step on the held-out steps" in out


def test_compare_bad_input_is_one_line(capsys):
    assert main(["compare", "--loads", "datasets/examples/readme.json", "--replicas", "16", "--gpus", "8",
                 "--solvers", "nope"]) == 2
    assert "unknown solver 'nope'" in capsys.readouterr().err


def test_plan_with_previous_records_moves_and_migration_slack_cuts_them(tmp_path, capsys):
    base = ["--loads", "olmoe-1b-7b-drifting@0:100", "--model", "olmoe-1b-7b", "--replicas", "80", "--nodes", "2",
            "--gpus", "16"]
    old, fresh, aware = tmp_path / "old.json", tmp_path / "fresh.json", tmp_path / "aware.json"
    assert main(["plan", *base, "--out", str(old)]) == 0
    later = ["--loads", "olmoe-1b-7b-drifting@300:400", *base[2:]]
    assert main(["plan", *later, "--previous", str(old), "--out", str(fresh)]) == 0
    assert main(["plan", *later, "--previous", str(old), "--migration-slack", "0.03", "--out", str(aware)]) == 0
    f, a = (json.loads(x.read_text())["metrics"] for x in (fresh, aware))
    assert a["moves"] < f["moves"] and a["moves_bytes"] == a["moves"] * 2 * 3 * 2048 * 1024   # OLMoE's expert bytes
    assert a["max_load_sum"] <= f["max_load_sum"] * 1.03 + 1e-6
    capsys.readouterr()
    assert main(["plan", *later, "--migration-slack", "0.01", "--out", str(aware)]) == 2
    assert "previous:" in capsys.readouterr().err
    # a move budget widens the slack only where it saves most moves, never past the fresh plan's moves
    assert main(["plan", *later, "--previous", str(old), "--migration-slack", "0.0", "--migration-budget", "0.1",
                 "--out", str(aware)]) == 0
    b = json.loads(aware.read_text())["metrics"]
    assert b["moves"] <= f["moves"]
    capsys.readouterr()
    assert main(["plan", *later, "--previous", str(old), "--migration-budget", "0.1", "--out", str(aware)]) == 2
    assert "migration_budget:" in capsys.readouterr().err
    assert main(["plan", *later, "--previous", str(old), "--migration-slack", "0.01", "--migration-budget", "-1",
                 "--out", str(aware)]) == 2
    assert "budget" in capsys.readouterr().err


def test_an_option_of_comma_separated_names_is_checked_name_by_name():
    opt = Option("starts", str, "kk", "h", items=("kk", "lpt", "rr"))
    assert opt.validate("kk, lpt") == "kk, lpt"
    for bad in ("kk,x", "", "kk,,rr"):
        with pytest.raises(OptionError, match="^starts: must name kk, lpt, rr"):
            opt.validate(bad)
