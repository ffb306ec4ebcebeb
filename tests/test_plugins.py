"""Bring your own planner (solvers.plugins): DeepSeek's public eplb.py and a vLLM-style policy
class graded beside the built-in solvers, and foreign planners that raise, lose an expert, hang,
or kill their own process each get their one-line row while the others complete.

The planners are real files run in real child processes; the hang is a 60 s sleep against an
injected 1 s limit, so no assertion depends on the machine's speed.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from solvers import OptionError, Problem, get_solver, solve
from solvers.compare import compare_solvers
from solvers.plugins import ALLOWED_ENV, register_plugin, resolve_solvers
from solvers.plugins.forms import detect
from solvers.registry import SolverOutput, _REGISTRY
from tests.test_robust_processes import _alive

ROOT = Path(__file__).resolve().parents[1]
THIRD = ROOT / "tests" / "fixtures" / "third_party"
DEEPSEEK_FILE = f"{THIRD / 'deepseek_eplb.py'}:rebalance_experts"
VLLM_CLASS = f"{THIRD / 'vllm_style_policy.py'}:GreedyPolicy"


@pytest.fixture
def forget(monkeypatch):
    """Names registered by a test leave the registry after it (other tests list every solver),
    and so do the specs it allowed (solvers.plugins.ALLOWED_ENV)."""
    monkeypatch.setenv(ALLOWED_ENV, os.environ.get(ALLOWED_ENV, "[]"))
    before = set(_REGISTRY)
    yield
    for name in set(_REGISTRY) - before:
        del _REGISTRY[name]


def tie_free(layers: int, experts: int, seed: int) -> torch.Tensor:
    """Loads with no two equal values (or equal sums the greedy compares): distinct random reals."""
    g = torch.Generator().manual_seed(seed)
    return torch.rand(layers, experts, generator=g, dtype=torch.float64) * 1000 + 1


# Module-level planners: picklable, so solve(problem, fn) can run them in a child.
def own_form(problem, options):
    """The workbench's own form: round-robin slots, every expert once, the rest to expert 0."""
    R, E = problem.num_replicas, problem.num_experts
    row = torch.cat([torch.arange(E), torch.zeros(R - E, dtype=torch.int64)])
    return row.expand(problem.num_layers, R).clone()


def own_form_with_history(problem, options, history=None):
    assert history is not None and history.dim() == 3, "the window's steps reach the planner"
    return SolverOutput(None, "x", message=f"saw {history.shape[0]} steps")


@pytest.mark.parametrize("groups,nodes", [(8, 2), (6, 4)])        # hierarchical, then DeepSeek's global fallback
def test_deepseeks_public_file_scores_exactly_what_deepseek_scores(forget, groups, nodes):
    problem = Problem(tie_free(3, 48, groups), 64, groups, nodes, 8)
    rows = compare_solvers(problem, resolve_solvers(["deepseek", DEEPSEEK_FILE]))
    ours, theirs = rows
    assert theirs["solver"] == DEEPSEEK_FILE and theirs["termination"] == "completed"
    assert theirs["status"] == "feasible" and theirs["wall_time_s"] > 0
    assert torch.equal(theirs["_result"].plan.phy2log, ours["_result"].plan.phy2log)
    for key in ("imbalance_mean", "imbalance_worst", "gap_mean", "gap_max", "duplicates"):
        assert theirs[key] == ours[key], key
    assert theirs["_result"].info["form"] == "deepseek"


def test_a_vllm_policy_class_is_graded_with_bound_gap_and_holdout(forget):
    problem = Problem(tie_free(2, 32, 1), 40, 4, 1, 8)
    holdout = problem.with_weights(tie_free(2, 32, 2))
    previous = solve(problem, "deepseek").plan
    row = compare_solvers(problem, resolve_solvers([VLLM_CLASS]), holdout=holdout, previous=previous,
                          expert_bytes=1000)[0]
    assert row["_result"].info["form"] == "vllm"
    assert row["status"] == "feasible" and row["gap_mean"] >= 0 and row["holdout_imbalance_mean"] >= 1
    assert row["moves"] is not None and row["moves_bytes"] == 1000 * row["moves"]
    # the shared scorer's bound: the same as every solver's
    assert torch.equal(row["_result"].lower_bound, solve(problem, "deepseek").lower_bound)


HOSTILE = {
    "raises.py": "def rebalance_experts(weight, num_replicas, num_groups, num_nodes, num_gpus):\n"
                 "    raise RuntimeError('my planner is broken')\n",
    "loses.py": "import torch\n"
                "def rebalance_experts(weight, num_replicas, num_groups, num_nodes, num_gpus):\n"
                "    L, E = weight.shape\n"
                "    p2l = torch.arange(num_replicas).remainder(E - 1).expand(L, -1).clone()  # never expert E-1\n"
                "    return p2l, None, None\n",
    "sleeps.py": "import time\n"
                 "def rebalance_experts(weight, num_replicas, num_groups, num_nodes, num_gpus):\n"
                 "    time.sleep(60)\n",
    "exits.py": "import os\n"
                "def rebalance_experts(weight, num_replicas, num_groups, num_nodes, num_gpus):\n"
                "    os._exit(3)\n",
    "kills.py": "import os, signal\n"
                "def rebalance_experts(weight, num_replicas, num_groups, num_nodes, num_gpus):\n"
                "    os.kill(os.getpid(), signal.SIGKILL)\n",
    "floats.py": "import torch\n"
                 "def rebalance_experts(weight, num_replicas, num_groups, num_nodes, num_gpus):\n"
                 "    return torch.zeros(weight.shape[0], num_replicas), None, None\n",
    "twice.py": "import torch\n"
                "def rebalance_experts(weight, num_replicas, num_groups, num_nodes, num_gpus):\n"
                "    L, E = weight.shape\n"
                "    p2l = torch.arange(num_replicas).remainder(E).expand(L, -1).clone()\n"
                "    cnt = torch.bincount(p2l[0], minlength=E).expand(L, -1).clone()\n"
                "    l2p = torch.full((L, E, int(cnt.max())), -1, dtype=torch.int64)\n"
                "    for e in range(E):\n"
                "        l2p[:, e, :cnt[0, e]] = 0          # every replica claims slot 0\n"
                "    return p2l, l2p, cnt\n",
    "shape.py": "import torch\n"
                "def rebalance_experts(weight, num_replicas, num_groups, num_nodes, num_gpus):\n"
                "    return torch.arange(weight.shape[1]).expand(weight.shape[0], -1), None, None\n",
    "import_crash.py": "import os\nos._exit(7)\n",
    "no_form.py": "def plan(weights):\n    return weights\n",
}

WHY = {  # file -> (what the one line starts with, a phrase it holds)
    "raises.py": ("error:", "RuntimeError: my planner is broken"),
    "loses.py": ("invalid:", "no slot for expert 31"),
    "sleeps.py": ("error:", "time limit of 1 s"),
    "exits.py": ("error:", "exited (code 3)"),
    "kills.py": ("error:", "killed by SIGKILL"),
    "floats.py": ("invalid:", "dtype float32"),
    "twice.py": ("invalid:", "log2phy"),
    "shape.py": ("invalid:", "shape (2, 32)"),
    "import_crash.py": ("error:", "exited (code 7)"),
    "no_form.py": ("error:", "could not load"),
}


def _write_hostile(folder: Path) -> list[str]:
    specs = []
    for name, code in HOSTILE.items():
        (folder / name).write_text(code)
        attr = "plan" if name == "no_form.py" else "rebalance_experts"
        specs.append(f"{folder / name}:{attr}")
    return specs


def test_hostile_planners_get_one_line_rows_and_the_others_complete(forget, tmp_path):
    problem = Problem(tie_free(2, 32, 3), 40, 4, 1, 8)
    specs = _write_hostile(tmp_path)
    names = resolve_solvers(["deepseek", *specs, "kk_swap"])
    rows = compare_solvers(problem, names, time_limit=1.0)
    by = {Path(r["solver"].rsplit(":", 1)[0]).name: r for r in rows}
    assert by["deepseek"]["status"] == "feasible" and by["kk_swap"]["status"] == "feasible"
    for name, (start, phrase) in WHY.items():
        row = by[name]
        assert row["termination"] == "error" and row["status"] == "none", (name, row)
        assert row.get("imbalance_mean") is None and row["_result"].plan is None, name
        line = row["message"]
        assert "\n" not in line and line.startswith(start) and phrase in line, (name, line)
    assert "time limit" in by["sleeps.py"]["message"] and by["sleeps.py"]["wall_time_s"] < 60


def test_solve_takes_your_function_and_your_file(forget):
    problem = Problem(tie_free(2, 16, 4), 20, 1, 1, 4)
    res = solve(problem, own_form)
    assert res.status == "feasible" and res.plan.phy2log.shape == (2, 20)
    assert res.info["form"] == "own"
    res = solve(problem, DEEPSEEK_FILE)
    assert torch.equal(res.plan.phy2log, solve(problem, "deepseek").plan.phy2log)
    with pytest.raises(OptionError, match="importable"):
        solve(problem, lambda p, o: None)
    with pytest.raises(OptionError, match="no such file"):
        solve(problem, "./nowhere.py:rebalance_experts")


def test_the_own_form_gets_the_windows_steps(forget):
    problem = Problem(tie_free(2, 16, 5), 20, 1, 1, 4)
    name = register_plugin("my_history_planner", own_form_with_history)
    steps = torch.rand(5, 2, 16)
    row = compare_solvers(problem, [name], history=steps)[0]
    assert row["termination"] == "error" and row["message"] == "error: returned no plan: saw 5 steps"
    assert get_solver(name).kind == "heuristic" and not get_solver(name).in_suites


def test_forms_are_told_from_the_signature():
    sys.path.insert(0, str(THIRD))
    try:
        import deepseek_eplb
        import vllm_style_policy
    finally:
        sys.path.remove(str(THIRD))
    assert detect(deepseek_eplb.rebalance_experts)[0] == "deepseek"
    assert detect(vllm_style_policy.GreedyPolicy)[0] == "vllm"
    assert detect(own_form)[0] == "own"
    with pytest.raises(TypeError, match="expected DeepSeek's"):
        detect(lambda weights: None)


def test_bad_specs_are_refused_up_front_naming_the_parameter(tmp_path):
    with pytest.raises(OptionError, match="no such file") as err:
        resolve_solvers([f"{tmp_path / 'missing.py'}:f"])
    assert err.value.param == "solvers"
    with pytest.raises(OptionError, match="no module named"):
        resolve_solvers(["no_such_package_xyz.policies:MyPolicy"])
    with pytest.raises(OptionError, match="not a Python name"):
        resolve_solvers([f"{THIRD / 'deepseek_eplb.py'}:1bad"])


def test_eplb_compare_shows_your_files_beside_the_builtins(forget, tmp_path, capsys, monkeypatch):
    from solvers.cli import main
    monkeypatch.chdir(tmp_path)                 # ./raises.py as a user types it
    loads = tmp_path / "loads.pt"
    torch.save(tie_free(3, 48, 6), loads)
    (tmp_path / "raises.py").write_text(HOSTILE["raises.py"])
    rc = main(["compare", "--loads", str(loads), "--replicas", "64", "--groups", "8", "--nodes", "2", "--gpus", "8",
               "--solvers", f"deepseek,{DEEPSEEK_FILE},{VLLM_CLASS},./raises.py:rebalance_experts", "--json"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    rows = {r["solver"]: r for r in json.loads(out)["rows"]}
    assert rows[DEEPSEEK_FILE]["imbalance_mean"] == rows["deepseek"]["imbalance_mean"]
    assert rows[DEEPSEEK_FILE]["gap_mean"] == rows["deepseek"]["gap_mean"]
    for name in (DEEPSEEK_FILE, VLLM_CLASS):
        assert rows[name]["gap_mean"] is not None and rows[name]["wall_time_s"] > 0
    bad = rows["./raises.py:rebalance_experts"]
    assert bad["termination"] == "error" and bad["message"].startswith("error: RuntimeError: my planner is broken")
    rc = main(["compare", "--loads", str(loads), "--replicas", "64", "--gpus", "8", "--solvers", "deepseek,./missing.py:f"])
    err = capsys.readouterr().err
    assert rc == 2 and err.strip().count("\n") == 0 and "no such file" in err


def _install_entry_point(site: Path) -> None:
    """A tiny installed package declaring a planner in the eplb.solvers entry-point group."""
    pkg = site / "tinyplanner"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(textwrap.dedent("""
        import torch

        def rebalance_experts(weight, num_replicas, num_groups, num_nodes, num_gpus):
            L, E = weight.shape
            return torch.arange(num_replicas).remainder(E).expand(L, -1).clone(), None, None
    """))
    info = site / "tinyplanner-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tinyplanner\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[eplb.solvers]\ntiny_round_robin = tinyplanner:rebalance_experts\n")


@pytest.mark.slow
def test_an_installed_entry_point_planner_is_listed_compared_and_in_the_app(tmp_path):
    """One fresh interpreter with the package on its path: `eplb solvers` (text and JSON),
    `eplb compare`, and the solver list the app's pages offer (app/views/compare.py)."""
    site = tmp_path / "site"
    site.mkdir()
    _install_entry_point(site)
    loads = tmp_path / "loads.pt"
    torch.save(tie_free(2, 32, 7), loads)
    code = textwrap.dedent(f"""
        from solvers.cli import main
        for argv in (["solvers"], ["solvers", "--json"],
                     ["compare", "--loads", {str(loads)!r}, "--replicas", "40", "--gpus", "8",
                      "--solvers", "deepseek,tiny_round_robin", "--json"]):
            assert main(argv) == 0, argv
            print("@@")
        from solvers import solver_names
        import app.views.compare  # noqa: F401  the page that lists them
        print(",".join(solver_names(available_only=True)))
    """)
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=600,
                         env={**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{site}"})
    assert run.returncode == 0, run.stderr
    text, listed, compared, app = run.stdout.split("@@\n")
    assert "tiny_round_robin  [plugin, available]" in text and "tinyplanner:rebalance_experts" in text
    entry = next(s for s in json.loads(listed) if s["name"] == "tiny_round_robin")
    assert entry["plugin"] is True and entry["kind"] == "heuristic"
    row = next(r for r in json.loads(compared)["rows"] if r["solver"] == "tiny_round_robin")
    assert row["status"] == "feasible" and row["gap_mean"] is not None
    assert {"tiny_round_robin", "deepseek"} <= set(app.strip().split(","))


APP_RUN = """
import json, sys
from streamlit.testing.v1 import AppTest
at = AppTest.from_file(sys.argv[1], default_timeout=300).run()
at.switch_page("views/compare.py").run()
offered = at.multiselect(key="compare:solvers").options
at.multiselect(key="compare:solvers").set_value(["deepseek", "tiny_round_robin"]).run()
at.multiselect(key="compare:policies").set_value(["hierarchical"]).run()
at.button(key="compare:run").click().run()
assert not at.exception, [e.value for e in at.exception]
table = at.dataframe[0].value
print(json.dumps({"offered": list(offered), "errors": [e.value for e in at.error],
                  "rows": table[["solver", "imbalance_mean", "gap_mean"]].to_dict("records")}))
"""


@pytest.mark.slow
def test_the_app_offers_and_runs_an_installed_planner(tmp_path):
    """The app's compare page under AppTest, in an interpreter where the package is installed:
    the planner is among the solver choices and its row is graded beside deepseek's."""
    pytest.importorskip("streamlit")
    site = tmp_path / "site"
    site.mkdir()
    _install_entry_point(site)
    run = subprocess.run([sys.executable, "-c", APP_RUN, str(ROOT / "app/main.py")], cwd=ROOT, capture_output=True,
                         text=True, timeout=600, env={**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{site}"})
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert "tiny_round_robin" in got["offered"] and not got["errors"]
    rows = {r["solver"].split(" ")[0]: r for r in got["rows"]}
    assert rows["tiny_round_robin"]["imbalance_mean"] > 1 and rows["tiny_round_robin"]["gap_mean"] is not None
    assert rows["deepseek"]["imbalance_mean"] >= 1


def test_the_docs_catalogue_keeps_to_the_builtins(forget):
    from solvers.cli.catalogue import solver_catalogue_markdown
    register_plugin("my_listed_planner", own_form)
    assert "my_listed_planner" not in solver_catalogue_markdown()


def test_the_docs_worked_example_runs(forget, tmp_path, capsys, monkeypatch):
    """docs/own-algorithm.md: its my_eplb.py and its compare command, as written."""
    from solvers.cli import main
    doc = (ROOT / "docs/own-algorithm.md").read_text()
    example = doc.split("## Worked example")[1]
    (tmp_path / "my_eplb.py").write_text(example.split("```python\n")[1].split("```")[0])
    command = example.split("```bash\n")[1].split("```")[0].replace("\\\n", " ").split()
    assert command[:2] == ["eplb", "compare"]
    for link in ("tests", "datasets"):                      # the command's paths, from the repository root
        (tmp_path / link).symlink_to(ROOT / link)
    monkeypatch.chdir(tmp_path)
    assert main(command[1:] + ["--json"]) == 0
    rows = {r["solver"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    mine = rows["./my_eplb.py:rebalance_experts"]
    assert mine["status"] == "feasible" and mine["imbalance_mean"] == pytest.approx(1.278, abs=5e-4)
    fixture = rows["tests/fixtures/third_party/deepseek_eplb.py:rebalance_experts"]
    assert fixture["imbalance_mean"] == rows["deepseek"]["imbalance_mean"]


@pytest.mark.slow
def test_bench_run_and_simulate_take_your_file(forget, tmp_path, capsys):
    """`eplb bench run --solvers` and `eplb simulate --solver` with DeepSeek's file: its bench
    rows are graded plans; its replay equals the built-in greedy's on a tie-free trace."""
    import pandas as pd
    from solvers.cli import main
    assert main(["bench", "run", "--suite", "tiny", "--out", str(tmp_path / "bench"),
                 "--solvers", f"deepseek,{DEEPSEEK_FILE}"]) == 0
    rows = pd.read_csv(tmp_path / "bench" / "results.csv")
    theirs = rows[rows["solver"] == DEEPSEEK_FILE]
    assert len(theirs) == len(rows[rows["solver"] == "deepseek"]) > 0
    assert (theirs["status"] == "feasible").all() and theirs["gap_mean"].notna().all()
    trace = tmp_path / "trace.pt"
    torch.save(torch.stack([tie_free(3, 48, 10 + t) for t in range(6)]), trace)
    replays = []
    capsys.readouterr()
    for solver in ("deepseek", DEEPSEEK_FILE):
        assert main(["simulate", "--loads", str(trace), "--replicas", "64", "--groups", "8", "--nodes", "2",
                     "--gpus", "8", "--every", "2", "--solver", solver, "--json"]) == 0
        replays.append(json.loads(capsys.readouterr().out))
    for key in ("mean_imbalance", "p99_imbalance", "worst_imbalance", "total_moves", "rebalances", "tokens_lost"):
        assert replays[0][key] == replays[1][key], key


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only")
def test_kill_9_of_the_run_leaves_no_planner_behind(tmp_path):
    """A planner still running when its command is killed (-9) goes with it: the child dies
    with its fork server, and the server with the command."""
    import signal
    import time
    pid_file = tmp_path / "pid"
    (tmp_path / "stays.py").write_text(
        "import os, time\n"
        "def rebalance_experts(weight, num_replicas, num_groups, num_nodes, num_gpus):\n"
        f"    open({str(pid_file)!r}, 'w').write(str(os.getpid()))\n"
        "    time.sleep(300)\n")
    script = (f"from solvers import Problem, solve\n"
              f"solve(Problem([[3.0, 2.0, 1.0, 1.0]], 4, 1, 1, 2), {str(tmp_path / 'stays.py') + ':rebalance_experts'!r},"
              f" time_limit=300)\n")
    parent = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        end = time.monotonic() + 240
        while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < end and parent.poll() is None:
            time.sleep(0.1)
        child = int(pid_file.read_text())
        assert _alive(child)
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=30)
        end = time.monotonic() + 30
        while _alive(child) and time.monotonic() < end:
            time.sleep(0.05)
        assert not _alive(child), f"planner {child} survived its command's kill -9"
    finally:
        if parent.poll() is None:
            parent.kill()
        if pid_file.exists() and pid_file.read_text() and _alive(int(pid_file.read_text())):
            os.kill(int(pid_file.read_text()), signal.SIGKILL)


def test_a_module_attribute_names_a_policy_class(forget, tmp_path, monkeypatch):
    """`mypkg.policies:MyPolicy`: an importable module (here on the path the child inherits)."""
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "policies.py").write_text((THIRD / "vllm_style_policy.py").read_text())
    monkeypatch.syspath_prepend(str(tmp_path))
    problem = Problem(tie_free(2, 32, 11), 40, 4, 1, 8)
    row = compare_solvers(problem, resolve_solvers(["deepseek", "mypkg.policies:GreedyPolicy"]))[1]
    assert row["solver"] == "mypkg.policies:GreedyPolicy" and row["status"] == "feasible"
    assert row["_result"].info["form"] == "vllm" and row["gap_mean"] >= 0
