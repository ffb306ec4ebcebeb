"""The eplb CLI: plan and score on every loads format; bad input is one line and exit 2."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from solvers.cli import main

W = np.array([[90, 132, 40, 61, 104, 165, 39, 4, 73, 56, 183, 86],
              [20, 107, 104, 64, 19, 197, 187, 157, 172, 86, 16, 27]])
GOLDEN = [[5, 6, 5, 7, 8, 4, 3, 4, 10, 9, 10, 2, 0, 1, 11, 1], [7, 10, 6, 8, 6, 11, 8, 9, 2, 4, 5, 1, 5, 0, 3, 1]]
SHAPE = ["--replicas", "16", "--groups", "4", "--nodes", "2", "--gpus", "8"]


def write(path: Path, arr: np.ndarray) -> Path:
    if path.suffix == ".npz":
        np.savez(path, loads=arr)
    elif path.suffix == ".pt":
        torch.save(torch.from_numpy(arr), path)
    elif path.suffix == ".json":
        path.write_text(json.dumps({"loads": arr.tolist()}))
    elif path.suffix == ".csv":
        lines = [",".join(f"e{i}" for i in range(arr.shape[1]))] + [",".join(map(str, r)) for r in arr]
        path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("suffix", [".npz", ".pt", ".json", ".csv"])
def test_plan_then_score_every_format(tmp_path, capsys, suffix):
    loads = write(tmp_path / f"loads{suffix}", W)
    out = tmp_path / "plan.json"
    assert main(["plan", "--loads", str(loads), *SHAPE, "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["phy2log"] == GOLDEN and doc["policy"] == "hierarchical" and doc["solver"] == "deepseek"
    assert doc["problem"]["num_gpus"] == 8 and doc["provenance"]["loads_sha256"]
    capsys.readouterr()
    assert main(["score", "--loads", str(loads), "--plan", str(out), "--json"]) == 0
    metrics = json.loads(capsys.readouterr().out)
    assert metrics["imbalance_worst"] == pytest.approx(179.5 / 144.5)
    assert metrics["max_load_sum"] == doc["metrics"]["max_load_sum"]


@pytest.mark.parametrize("suffix", [".npz", ".pt", ".json"])
def test_three_d_loads_are_summed_over_steps(tmp_path, suffix):
    steps = np.stack([W // 2, W - W // 2])              # [T=2, L, E], sums to W
    loads = write(tmp_path / f"trace{suffix}", steps)
    out = tmp_path / "plan.json"
    assert main(["plan", "--loads", str(loads), *SHAPE, "--out", str(out)]) == 0
    assert json.loads(out.read_text())["phy2log"] == GOLDEN


def test_score_reports_moves_and_per_gpu_loads(tmp_path, capsys):
    loads = write(tmp_path / "w.json", W)
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    main(["plan", "--loads", str(loads), *SHAPE, "--out", str(a)])
    main(["plan", "--loads", str(loads), *SHAPE, "--policy", "global", "--out", str(b)])
    capsys.readouterr()
    assert main(["score", "--loads", str(loads), "--plan", str(b), "--previous", str(a),
                 "--expert-bytes", "100", "--per-gpu", "--json"]) == 0
    m = json.loads(capsys.readouterr().out)
    assert m["moves"] > 0 and m["moves_bytes"] == 100 * m["moves"]
    assert len(m["gpu_load"]) == 2 and len(m["gpu_load"][0]) == 8
    # the table gives bytes in units (the exact count is in --json)
    assert main(["score", "--loads", str(loads), "--plan", str(b), "--previous", str(a),
                 "--expert-bytes", "44040192"]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("moves_bytes"))
    value, unit = line.split()[1:]
    assert unit in ("MB", "GB") and float(value) * {"MB": 1e6, "GB": 1e9}[unit] == pytest.approx(
        44040192 * m["moves"], rel=5e-3)


def one_error_line(capsys, argv, fragment):
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("eplb: error:") and fragment in lines[0], err
    assert "Traceback" not in err


def test_bad_input_is_one_line_exit_2(tmp_path, capsys):
    good = write(tmp_path / "w.json", W)
    out = str(tmp_path / "p.json")
    one_error_line(capsys, ["plan", "--loads", str(tmp_path / "missing.npz"), *SHAPE, "--out", out], "no such file")
    one_error_line(capsys, ["plan", "--loads", str(good), "--replicas", "10", "--gpus", "2", "--out", out],
                   "num_replicas")
    one_error_line(capsys, ["plan", "--loads", str(good), "--replicas", "16", "--gpus", "8", "--nodes", "3",
                            "--out", out], "num_gpus")
    one_error_line(capsys, ["plan", "--loads", str(good), *SHAPE, "--solver", "magic", "--out", out],
                   "unknown solver")
    one_error_line(capsys, ["plan", "--loads", str(good), *SHAPE, "-O", "speed=11", "--out", out], "speed")
    one_error_line(capsys, ["plan", "--loads", str(good), "--replicas", "x", "--gpus", "8", "--out", out],
                   "invalid int value")
    one_error_line(capsys, ["plan", "--gpus", "8"], "required")
    one_error_line(capsys, ["frobnicate"], "invalid choice")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    one_error_line(capsys, ["plan", "--loads", str(bad), *SHAPE, "--out", out], "cannot read")
    neg = write(tmp_path / "neg.json", -W)
    one_error_line(capsys, ["plan", "--loads", str(neg), *SHAPE, "--out", out], ">= 0")
    nan = tmp_path / "nan.npz"
    np.savez(nan, loads=np.full((2, 12), np.nan))
    one_error_line(capsys, ["plan", "--loads", str(nan), *SHAPE, "--out", out], "NaN")
    flat = write(tmp_path / "flat.npz", np.arange(12))
    one_error_line(capsys, ["plan", "--loads", str(flat), *SHAPE, "--out", out], "shape")
    txt = tmp_path / "loads.txt"
    txt.write_text("1 2 3")
    one_error_line(capsys, ["plan", "--loads", str(txt), *SHAPE, "--out", out], "unknown format")
    # score: a plan for another shape, and a file that is not a plan
    main(["plan", "--loads", str(good), *SHAPE, "--out", out])
    small = write(tmp_path / "small.json", W[:1])
    capsys.readouterr()
    one_error_line(capsys, ["score", "--loads", str(small), "--plan", out], "shape")
    one_error_line(capsys, ["score", "--loads", str(good), "--plan", str(good)], "not an eplb-plan")
    one_error_line(capsys, ["plan", "--loads", str(good), *SHAPE, "--out", str(tmp_path / "no" / "p.json")],
                   "No such file")


def test_console_script_runs(tmp_path):
    exe = Path(sys.executable).with_name("eplb")
    loads = write(tmp_path / "w.csv", W)
    out = tmp_path / "plan.json"
    run = subprocess.run([str(exe), "plan", "--loads", str(loads), *SHAPE, "--out", str(out)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "policy hierarchical" in run.stdout
    bad = subprocess.run([str(exe), "score", "--loads", str(loads), "--plan", str(tmp_path / "x.json")],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "Traceback" not in bad.stderr



def test_plan_on_a_dataset_window_then_score_the_next(tmp_path, capsys):
    out = tmp_path / "plan.json"
    assert main(["plan", "--loads", "deepseek-v3-skewed@0:12", "--replicas", "288", "--groups", "8",
                 "--nodes", "4", "--gpus", "32", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["provenance"]["loads_sha256"] and doc["problem"]["num_experts"] == 256
    capsys.readouterr()
    assert main(["score", "--loads", "deepseek-v3-skewed@12:24", "--plan", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["imbalance_mean"] >= 1.0


@pytest.mark.parametrize("key,value", [("num_gpus", 0), ("num_gpus", "2"), ("num_replicas", 15),
                                       ("num_layers", -1)])
def test_malformed_plan_file_shape_is_one_line(tmp_path, capsys, key, value):
    loads = write(tmp_path / "w.json", W)
    out = tmp_path / "p.json"
    main(["plan", "--loads", str(loads), *SHAPE, "--out", str(out)])
    doc = json.loads(out.read_text())
    doc["problem"][key] = value
    out.write_text(json.dumps(doc))
    capsys.readouterr()
    one_error_line(capsys, ["score", "--loads", str(loads), "--plan", str(out)], "invalid problem shape")


def test_migration_flags_after_failed_gpus_plan_migration_aware(tmp_path, capsys):
    """After GPUs failed, --migration-budget and --migration-objective plan with the migration
    solver (the elastic re-plan is the default); --migration exact is refused by the solver."""
    np.savez(tmp_path / "l.npz", loads=np.random.default_rng(0).integers(1, 100, size=(2, 24)).astype("int64"))
    shape = ["--loads", str(tmp_path / "l.npz"), "--nodes", "2", "--gpus", "8", "--replicas", "32",
             "--solver", "kk_swap"]
    old, new = tmp_path / "old.json", tmp_path / "new.json"
    assert main(["plan", *shape, "--out", str(old)]) == 0
    again = ["plan", *shape, "--failed", "5", "--previous", str(old), "--migration-slack", "0.02", "--out", str(new)]
    for extra in (["--migration-budget", "0.5"], ["--migration-objective", "makespan"]):
        assert main([*again, *extra]) == 0
        doc = json.loads(new.read_text())
        assert doc["solver"] == "kk_swap" and doc["options"]["base"] == "kk_swap"
        assert doc["problem"]["gpu_slots"][5] == 0 and doc["metrics"]["moves"] > 0
    capsys.readouterr()
    assert main([*again, "--migration", "exact"]) == 2
    assert "method" in capsys.readouterr().err


def test_plan_out_is_a_json_plan_file(tmp_path, capsys):
    """`eplb plan --out x.csv` once wrote the JSON plan into x.csv (unreadable as a CSV map):
    the plan file is .json, and the message says how to get an engine's map."""
    out = tmp_path / "x.csv"
    assert main(["plan", "--loads", "readme-example", "--replicas", "16", "--groups", "4", "--nodes", "2",
                 "--gpus", "8", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("eplb: error: out:") and "eplb convert" in err[0]
    assert not out.exists()
