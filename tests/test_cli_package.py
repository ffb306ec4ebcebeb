"""The ``eplb`` package: --help without torch, and one loads reader with one dense-layer rule
for every command and the app (a 61-row SGLang dump of DeepSeek-V3 is 58 MoE layers everywhere)."""
from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from solvers.cli import main
from solvers.workloads.generators import generate

ROOT = Path(__file__).resolve().parents[1]
DENSE, MOE = 3, 58


def test_help_and_version_do_not_import_torch():
    code = ("import sys\n"
            "from solvers.cli import main\n"
            "assert main(['--version']) == 0\n"
            "for argv in (['--help'], ['plan', '--help'], ['bench', 'run', '--help'], ['simulate', '--help'],\n"
            "             ['generate', '--help'], ['convert', '--help']):\n"
            "    assert main(argv) == 0, argv\n"
            "assert 'torch' not in sys.modules, 'torch imported'\n"
            "assert 'solvers.entry' not in sys.modules\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "eplb 0.1.0" in out.stdout and "usage: eplb plan" in out.stdout


def test_score_loads_only_what_it_runs(tmp_path):
    """`eplb score` pays for torch and the scorer, not for the solvers, the benchmark harness,
    pandas, scipy's LP or sympy (each a second or more of every start on 2 cores); a missing
    input is refused before torch loads at all."""
    readme = str(ROOT / "datasets" / "examples" / "readme.json")
    cluster = ["--replicas", "16", "--groups", "4", "--nodes", "2", "--gpus", "8"]
    assert main(["plan", "--loads", readme, *cluster, "--out", str(tmp_path / "plan.json")]) == 0
    heavy = ("pandas", "scipy.optimize", "scipy.sparse", "sympy", "ortools", "pulp", "solvers.bench.run",
             "solvers.builtin", "solvers.exact", "plotly")
    code = ("import sys\n"
            "from solvers.cli import main\n"
            "rc = main(['score', '--loads', sys.argv[1], '--plan', sys.argv[2]])\n"
            "print('RC', rc, [m for m in sys.argv[3].split(',') if m in sys.modules])\n"
            "rc = main(['score', '--loads', 'nope.json', '--plan', sys.argv[2]])\n")
    out = subprocess.run([sys.executable, "-c", code, readme, str(tmp_path / "plan.json"), ",".join(heavy)],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert "RC 0 []" in out.stdout, (out.stdout, out.stderr)
    missing = ("import sys\n"
               "from solvers.cli import main\n"
               "for argv in (['score', '--loads', 'nope.json', '--plan', sys.argv[1]],\n"
               "             ['score', '--loads', sys.argv[2], '--plan', 'nope.json'],\n"
               "             ['plan', '--loads', 'readme-example@0:1', '--replicas', '16', '--groups', '4',\n"
               "              '--nodes', '2', '--gpus', '8', '--previous', 'nope.json', '--out', 'x.json']):\n"
               "    assert main(argv) == 2, argv\n"
               "assert 'torch' not in sys.modules, 'torch imported before the missing file was refused'\n")
    out = subprocess.run([sys.executable, "-c", missing, str(tmp_path / "plan.json"), readme],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stderr.strip().splitlines()
    assert lines[0].startswith("eplb: error: loads: nope.json: no such file or dataset; shipped datasets: ")
    assert lines[1:] == ["eplb: error: plan: nope.json: no such file", "eplb: error: previous: nope.json: no such file"]


def test_library_packages_do_not_import_the_cli():
    for path in (ROOT / "solvers").rglob("*.py"):
        if "cli" in path.relative_to(ROOT / "solvers").parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""] + [f"{node.module or ''}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            assert not any(n.split(".")[-1] == "cli" or ".cli" in n or n.startswith("cli") for n in names), path
    assert [p.parent.name for p in (ROOT / "solvers").glob("*/commands.py")] == ["cli"]


def test_eplb_bench_run_takes_the_runners_own_options():
    from solvers.bench.run import build_parser
    from solvers.cli import build_parser as eplb_parser

    argv = ["--suite", "ci", "--out", "x", "--jobs", "2", "--seeds", "0-2", "--figure", "none", "--no-progress"]
    ours = eplb_parser().parse_args(["bench", "run", *argv])
    theirs = build_parser().parse_args(argv)
    assert {k: v for k, v in vars(ours).items() if k in vars(theirs)} == vars(theirs)


@pytest.fixture(scope="module")
def dump(tmp_path_factory) -> Path:
    """A SGLang stat dump of DeepSeek-V3 as its recorder writes it: 61 rows, the first 3 (dense) zero."""
    moe = generate("deepseek-v3", "mild", steps=4, seed=0, tokens_per_step=2048).loads        # [4, 58, 256]
    loads = torch.cat([torch.zeros(4, DENSE, 256, dtype=moe.dtype), moe], dim=1)
    path = tmp_path_factory.mktemp("sglang") / "expert_distribution_recorder_0.pt"
    torch.save({"rank": 0, "logical_count": loads.to(torch.int32),
                "average_utilization_rate_over_window": None}, path)
    return path


CLUSTER = ["--model", "deepseek-v3", "--replicas", "288", "--nodes", "4", "--gpus", "32"]


def _run(capsys, argv) -> str:
    rc = main(argv)
    out, err = capsys.readouterr()
    assert rc == 0, err
    return out


def test_every_command_sees_the_moe_layers_of_a_61_row_sglang_dump(dump, tmp_path, capsys):
    plan = tmp_path / "plan.json"
    out = _run(capsys, ["plan", "--loads", str(dump), *CLUSTER, "--out", str(plan)])
    assert f"{MOE} MoE layers ({DENSE} leading all-zero layers dropped)" in out
    doc = json.loads(plan.read_text())
    assert doc["problem"]["num_layers"] == MOE and doc["provenance"]["dense_layers_dropped"] == DENSE
    assert doc["provenance"]["loads_sha256"]

    out = _run(capsys, ["score", "--loads", str(dump), "--plan", str(plan), "--json"])
    assert json.loads(out)["imbalance_mean"] == pytest.approx(doc["metrics"]["imbalance_mean"])
    assert f"({DENSE} leading all-zero layers dropped)" in _run(capsys, ["score", "--loads", str(dump),
                                                                         "--plan", str(plan)])

    # an SGLang map of the whole model (61 rows) scores on the 58 MoE layers: its last rows
    sglang = tmp_path / "map.json"
    _run(capsys, ["convert", str(plan), "--out", str(sglang), "--to", "sglang"])
    assert len(json.loads(sglang.read_text())["physical_to_logical_map"]) == DENSE + MOE
    out = _run(capsys, ["score", "--loads", str(dump), "--plan", str(sglang), "--gpus", "32", "--groups", "8",
                        "--nodes", "4", "--json"])
    assert json.loads(out)["imbalance_mean"] == pytest.approx(doc["metrics"]["imbalance_mean"])

    out = _run(capsys, ["compare", "--loads", str(dump), *CLUSTER, "--solvers", "deepseek", "--json"])
    assert json.loads(out)["rows"][0]["imbalance_mean"] == pytest.approx(doc["metrics"]["imbalance_mean"])

    out = _run(capsys, ["simulate", "--loads", str(dump), "--model", "deepseek-v3", "--every", "2"])
    assert out.startswith(f"4 steps x {MOE} layers ({DENSE} leading all-zero layers dropped)")

    out = _run(capsys, ["microbatch", "--loads", str(dump), "--plan", str(plan), "--steps-as-microbatches"])
    assert f"x {MOE} layers ({DENSE} leading all-zero layers dropped)" in out
    out = _run(capsys, ["microbatch", "--loads", str(dump), "--plan", str(plan), "--steps-as-microbatches", "--json"])
    assert json.loads(out)["layers"] == MOE


def test_the_apps_loads_path_sees_the_moe_layers_of_a_61_row_sglang_dump(dump):
    from app.loads import from_upload

    loads = from_upload(dump.name, dump.read_bytes())
    assert (loads.num_layers, loads.dense_layers, loads.format) == (MOE, DENSE, "sglang")


def test_the_apps_explore_page_says_the_dense_layers_were_dropped(dump):
    pytest.importorskip("streamlit")
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app" / "main.py"), default_timeout=180).run()
    at.radio(key="loads:source").set_value("Upload").run()
    at.file_uploader(key="explore:upload").set_value((dump.name, dump.read_bytes(), "application/octet-stream"))
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    assert any(f"{DENSE} leading all-zero (dense) layer(s) dropped" in c.value for c in at.caption)



def test_a_reader_that_leaves_early_gets_no_error_message():
    """`eplb ... | head`: when the pipe's reader has gone, eplb stops quietly (as cat does),
    with no 'Broken pipe' line and no Python traceback at exit."""
    proc = subprocess.Popen([sys.executable, "-m", "solvers.cli", "solvers", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()                      # the reader leaves before eplb writes a byte
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) in (0, 141) and err == "", err
