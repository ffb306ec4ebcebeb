"""eplb generate / convert / datasets, and --loads NAME: real runs, one-line errors, exit 2."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import yaml

from fixtures_workloads import replicated_phy2log, write_sglang_per_pass
from solvers.cli import main
from solvers.workloads import generate, load_dataset, read_exported_plan, read_trace

SHAPE = ["--replicas", "16", "--groups", "4", "--nodes", "2", "--gpus", "8"]


def one_error_line(capsys, argv, fragment):
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("eplb: error:") and fragment in err[0], err


@pytest.mark.parametrize("suffix", [".npz", ".pt", ".json", ".csv"])
def test_generate_writes_every_trace_format(tmp_path, capsys, suffix):
    out = tmp_path / f"t{suffix}"
    assert main(["generate", "olmoe-1b-7b", "--scenario", "skewed", "--steps", "7", "--seed", "3",
                 "--layers", "2", "--set", "skew=1.3", "--out", str(out)]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    expected = generate("olmoe-1b-7b", "skewed", steps=7, seed=3, num_layers=2, skew=1.3)
    assert torch.equal(read_trace(out).loads, expected.loads)


def test_generate_sglang_dump(tmp_path):
    out = tmp_path / "dump.pt"
    assert main(["generate", "mixtral-8x7b", "--steps", "5", "--format", "sglang", "--out", str(out)]) == 0
    assert tuple(torch.load(out, weights_only=True)["logical_count"].shape) == (5, 32, 8)


def test_convert_per_rank_dumps_to_a_trace(tmp_path, capsys):
    truth = generate("deepseek-v3", "mild", steps=3, num_layers=2, tokens_per_step=512).loads
    write_sglang_per_pass(tmp_path / "ranks", truth, replicated_phy2log(2))
    assert main(["convert", str(tmp_path / "ranks"), "--out", str(tmp_path / "t.npz")]) == 0
    assert torch.equal(read_trace(tmp_path / "t.npz").loads, truth)
    assert main(["convert", "olmoe-1b-7b-bursty", "--out", str(tmp_path / "b.json")]) == 0
    assert json.loads((tmp_path / "b.json").read_text())["load_history"][0]["logical_expert_load"]


def test_plan_on_a_converted_trace_then_convert_the_plan(tmp_path, capsys):
    loads = tmp_path / "readme.csv"
    assert main(["convert", "readme-example", "--out", str(loads)]) == 0
    plan = tmp_path / "plan.json"
    assert main(["plan", "--loads", str(loads), *SHAPE, "--out", str(plan)]) == 0
    assert main(["convert", str(plan), "--out", str(tmp_path / "lb.yaml"), "--layer-offset", "3"]) == 0
    doc = yaml.safe_load((tmp_path / "lb.yaml").read_text())
    assert doc["num_slots"] == 16 and sorted(doc["initial_global_assignments"]) == [3, 4]
    # .json is an eplb plan or an SGLang map: without --to the command asks, it does not guess
    assert main(["convert", str(tmp_path / "lb.yaml"), "--out", str(tmp_path / "sg.json")]) == 2
    assert "pass --to eplb or --to sglang" in capsys.readouterr().err and not (tmp_path / "sg.json").exists()
    assert main(["convert", str(tmp_path / "lb.yaml"), "--out", str(tmp_path / "sg.json"), "--to", "sglang"]) == 0
    assert main(["convert", str(tmp_path / "sg.json"), "--out", str(tmp_path / "back.json"), "--to", "eplb",
                 "--loads", "readme-example", "--num-experts", "12", *SHAPE[2:]]) == 0
    capsys.readouterr()
    scores = []
    for p in (plan, tmp_path / "back.json"):
        assert main(["score", "--loads", "readme-example", "--plan", str(p), "--json"]) == 0
        scores.append(json.loads(capsys.readouterr().out))
    assert scores[0] == scores[1]
    assert read_exported_plan(tmp_path / "sg.json").num_replicas == 16


def test_datasets_command(capsys):
    assert main(["datasets"]) == 0
    out = capsys.readouterr().out
    assert "deepseek-v3-mild" in out and "58" in out
    assert main(["datasets", "--json"]) == 0
    entries = json.loads(capsys.readouterr().out)
    assert any(e["name"] == "kimi-k2-skewed" and e["num_experts"] == 384 for e in entries)


def test_score_accepts_a_dataset_name(tmp_path, capsys):
    loads = tmp_path / "w.npz"
    np.savez(loads, loads=load_dataset("readme-example").loads.numpy())
    plan = tmp_path / "p.json"
    assert main(["plan", "--loads", str(loads), *SHAPE, "--out", str(plan)]) == 0
    capsys.readouterr()
    assert main(["score", "--loads", "readme-example", "--plan", str(plan), "--json"]) == 0
    by_name = json.loads(capsys.readouterr().out)
    assert main(["score", "--loads", str(loads), "--plan", str(plan), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == by_name


def test_bad_input_is_one_line_exit_2(tmp_path, capsys):
    out = str(tmp_path / "x.npz")
    one_error_line(capsys, ["generate", "gpt-5", "--out", out], "unknown model preset")
    one_error_line(capsys, ["generate", "kimi-k2", "--scenario", "calm", "--out", out], "scenario")
    one_error_line(capsys, ["generate", "kimi-k2", "--steps", "0", "--out", out], "steps")
    one_error_line(capsys, ["generate", "kimi-k2", "--set", "skew=-1", "--out", out], "skew")
    one_error_line(capsys, ["generate", "kimi-k2", "--set", "colour=1", "--out", out], "colour")
    one_error_line(capsys, ["generate", "kimi-k2", "--set", "steps=3", "--out", out], "own flag")
    one_error_line(capsys, ["generate", "kimi-k2", "--out", str(tmp_path / "x.txt")], "format")
    one_error_line(capsys, ["generate", "kimi-k2"], "required")
    one_error_line(capsys, ["convert", str(tmp_path / "none.npz"), "--out", out], "no such file or dataset")
    one_error_line(capsys, ["convert", "readme-example", "--out", out, "--to", "trtllm"], "loads convert to")
    bad = tmp_path / "bad.json"
    bad.write_text('{"load_history": [{"logical_expert_load": [[1, 2], [3')
    one_error_line(capsys, ["convert", str(bad), "--out", out], "truncated")
    plan = tmp_path / "p0.json"
    assert main(["plan", "--loads", "datasets/examples/readme.json", *SHAPE, "--out", str(plan)]) == 0
    one_error_line(capsys, ["score", "--loads", "deepseek-v4", "--plan", str(plan)], "no such file or dataset")
    sg = tmp_path / "sg.json"
    sg.write_text(json.dumps({"physical_to_logical_map": [[0, 1, 1, 0]]}))
    one_error_line(capsys, ["convert", str(sg), "--out", str(tmp_path / "p.json"), "--to", "eplb"], "--loads")
    one_error_line(capsys, ["convert", str(sg), "--out", str(tmp_path / "p.csv")], "num_gpus")
    one_error_line(capsys, ["datasets", "--rebuild", "nope"], "unknown generated dataset")
