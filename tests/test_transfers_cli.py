"""eplb score --previous --expert-bytes: the transfer schedule, its file and the network flags."""
import csv
import json

import pytest

from solvers.cli import main

from test_cli import SHAPE, W, one_error_line, write


@pytest.fixture
def plans(tmp_path, capsys):
    loads = write(tmp_path / "w.json", W)
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    assert main(["plan", "--loads", str(loads), *SHAPE, "--out", str(a)]) == 0
    assert main(["plan", "--loads", str(loads), *SHAPE, "--policy", "global", "--out", str(b)]) == 0
    capsys.readouterr()
    return loads, a, b


def test_score_prints_and_writes_the_schedule(tmp_path, capsys, plans):
    loads, a, b = plans
    base = ["score", "--loads", str(loads), "--plan", str(b), "--previous", str(a), "--expert-bytes", "1000000"]
    assert main(base + ["--json"]) == 0
    m = json.loads(capsys.readouterr().out)
    t = m["transfers"]
    assert t["moves"] == m["moves"] > 0 and t["bytes"] == m["moves_bytes"]
    assert 0 < t["bound_seconds"] <= t["makespan_seconds"]
    assert main(base + ["--intra-node-bw", "100", "--inter-node-bw", "10", "--out", str(tmp_path / "s.json")]) == 0
    text = capsys.readouterr().out
    assert "makespan" in text and "lower bound" in text and "inter-node 10 GB/s" in text
    doc = json.loads((tmp_path / "s.json").read_text())
    assert doc["format"] == "eplb-transfers" and doc["network"]["inter_node_bw"] == 10e9
    assert len(doc["copies"]) == t["moves"]
    assert doc["summary"]["makespan_seconds"] == pytest.approx(sum(doc["round_seconds"]))
    assert doc["summary"]["makespan_seconds"] > t["makespan_seconds"]        # slower links, longer
    assert main(base + ["--out", str(tmp_path / "s.csv")]) == 0
    rows = list(csv.DictReader((tmp_path / "s.csv").open()))
    assert len(rows) == t["moves"] and {r["link"] for r in rows} <= {"intra", "inter"}


def test_score_schedule_bad_input_is_one_line(tmp_path, capsys, plans):
    loads, a, b = plans
    base = ["score", "--loads", str(loads), "--plan", str(b)]
    one_error_line(capsys, base + ["--out", str(tmp_path / "s.json")], "--previous")
    one_error_line(capsys, base + ["--previous", str(a), "--out", str(tmp_path / "s.json")], "expert_bytes")
    one_error_line(capsys, base + ["--previous", str(a), "--expert-bytes", "10", "--out", str(tmp_path / "s.txt")],
                   ".json or .csv")
    one_error_line(capsys, base + ["--previous", str(a), "--expert-bytes", "10", "--inter-node-bw", "0"],
                   "inter_node_bw")


def test_score_shared_model_and_exact_schedule(tmp_path, capsys, plans):
    loads, a, b = plans
    base = ["score", "--loads", str(loads), "--plan", str(b), "--previous", str(a), "--expert-bytes", "1000000"]
    assert main(base + ["--json"]) == 0
    rounds = json.loads(capsys.readouterr().out)["transfers"]
    assert main(base + ["--transfer-model", "shared", "--json"]) == 0
    shared = json.loads(capsys.readouterr().out)["transfers"]
    assert shared["model"] == "shared" and shared["moves"] == rounds["moves"] and shared["gap"] == 0
    assert shared["bound_any_source_seconds"] <= shared["makespan_seconds"]
    assert main(base + ["--transfer-model", "shared", "--out", str(tmp_path / "s.json")]) == 0
    assert "sharing each GPU's links" in capsys.readouterr().out
    doc = json.loads((tmp_path / "s.json").read_text())
    assert all(c["start_s"] == 0 and c["end_s"] == pytest.approx(shared["makespan_seconds"]) for c in doc["copies"])
    assert main(base + ["--schedule", "exact", "--time-limit", "20"]) == 0
    text = capsys.readouterr().out
    assert "exact schedule (CP-SAT" in text
    assert main(base + ["--schedule", "exact", "--time-limit", "20", "--json"]) == 0
    exact = json.loads(capsys.readouterr().out)["transfers"]
    assert exact["makespan_seconds"] <= rounds["makespan_seconds"] * (1 + 1e-12)
    assert exact["bound_seconds"] <= exact["makespan_seconds"] * (1 + 1e-12)
    if exact["proven"]:
        assert "proven optimal" in text
    else:
        assert exact["bound_seconds"] <= exact["makespan_seconds"] and "gap" in text
    one_error_line(capsys, base + ["--schedule", "exact", "--transfer-model", "shared"], "shared model")
    one_error_line(capsys, base + ["--schedule", "exact", "--time-limit", "0"], "time_limit")
    one_error_line(capsys, ["score", "--loads", str(loads), "--plan", str(b), "--schedule", "exact"], "--previous")
