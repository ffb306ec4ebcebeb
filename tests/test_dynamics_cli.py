"""`eplb simulate` and `eplb sweep`: JSON totals, written tables and figure, one-line errors."""
from __future__ import annotations

import json

import pytest
import torch

from solvers.cli import main
from solvers.workloads import Trace, save_trace

from test_cli import one_error_line


@pytest.fixture
def trace_file(tmp_path):
    g = torch.Generator().manual_seed(0)
    base = torch.rand(2, 8, generator=g) * 100 + 5
    steps = [(base * torch.exp(0.3 * torch.randn(2, 8, generator=g))).round() for _ in range(16)]
    path = tmp_path / "trace.npz"
    save_trace(Trace(torch.stack(steps).to(torch.int64)), path)
    return str(path)


CLUSTER = ["--replicas", "12", "--gpus", "4"]


def test_simulate_json_has_the_totals(trace_file, capsys):
    assert main(["simulate", "--loads", trace_file, *CLUSTER, "--every", "4", "--expert-bytes", "10",
                 "--migration-slack", "0.01", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("mean_imbalance", "p99_imbalance", "total_moves", "total_bytes", "rebalances"):
        assert key in out
    assert out["total_bytes"] == 10 * out["total_moves"]
    assert out["rebalances"] == 2                                  # plan at 4, rebalances at 8 and 12


def test_simulate_out_writes_tables_and_figure(trace_file, tmp_path, capsys):
    out = tmp_path / "sim"
    assert main(["simulate", "--loads", trace_file, *CLUSTER, "--threshold", "1.05", "--window", "3",
                 "--out", str(out)]) == 0
    for name in ("steps.csv", "rebalances.csv", "totals.json", "simulation.html"):
        assert (out / name).exists(), name
    rows = (out / "steps.csv").read_text().splitlines()
    assert len(rows) == 1 + 16 - 3                                 # header + scored steps
    assert "realised imbalance" in capsys.readouterr().out
    html = (out / "simulation.html").read_text()
    assert "<script src=\"http" not in html and "Plotly.newPlot" in html and len(html) > 1_000_000   # opens offline


def test_sweep_out_writes_the_table_and_the_frontier_figure(trace_file, tmp_path, capsys):
    out = tmp_path / "sweep"
    assert main(["sweep", "--loads", trace_file, *CLUSTER, "--periods", "2,4", "--slacks", "plain,0.05",
                 "--out", str(out)]) == 0
    assert f"wrote {out / 'sweep.html'}" in capsys.readouterr().out
    rows = (out / "sweep.csv").read_text().splitlines()
    assert len(rows) == 1 + 2 * 2
    html = (out / "sweep.html").read_text()
    assert "<script src=\"http" not in html and "frontier" in html and "replicas moved" in html


def test_simulate_with_model_preset_cluster(tmp_path, capsys):
    g = torch.Generator().manual_seed(1)
    loads = (torch.rand(6, 2, 8, generator=g) * 50).round().to(torch.int64)
    path = tmp_path / "mix.npz"
    save_trace(Trace(loads), path)
    assert main(["simulate", "--loads", str(path), "--model", "mixtral-8x7b", "--every", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["total_bytes"] == out["total_moves"] * 2 * 3 * 4096 * 14336


def test_sweep_prints_frontier_and_suggestion(trace_file, capsys):
    assert main(["sweep", "--loads", trace_file, *CLUSTER, "--periods", "4", "--slacks", "plain,0.05",
                 "--expert-bytes", "1000000000", "--budget-gb", "1000"]) == 0
    text = capsys.readouterr().out
    assert "| trigger |" in text and "suggested within 1000 GB" in text


@pytest.mark.parametrize("argv, param", [
    (["--every", "0"], "every"),
    ([], "every"),
    (["--every", "2", "--migration-slack", "-1"], "migration_slack"),
    (["--every", "2", "--window", "40"], "window"),
])
def test_bad_input_is_one_line_and_exit_2(trace_file, capsys, argv, param):
    assert main(["simulate", "--loads", trace_file, *CLUSTER, *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"eplb: error: {param}:")


def test_two_dimensional_loads_are_refused(tmp_path, capsys):
    path = tmp_path / "w.npz"
    import numpy as np
    np.savez(path, loads=np.ones((2, 8), dtype=np.int64))
    assert main(["simulate", "--loads", str(path), *CLUSTER, "--every", "2"]) == 2
    assert "loads:" in capsys.readouterr().err


def test_simulate_and_sweep_weigh_stalls(trace_file, capsys):
    base = ["--loads", trace_file, "--replicas", "12", "--gpus", "4", "--nodes", "2", "--expert-bytes", "1000000000",
            "--inter-node-bw", "1", "--step-seconds", "0.5"]
    assert main(["simulate", *base, "--every", "2", "--window", "2"]) == 0
    text = capsys.readouterr().out
    assert "net efficiency" in text and "inter-node 1 GB/s" in text
    assert main(["simulate", *base, "--every", "4", "--stall", "async", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["stall_seconds"] == 0 and 0 < out["net_efficiency"] <= 1
    assert main(["sweep", *base, "--periods", "2,4", "--window", "2", "--slacks", "plain", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [r["trigger"] for r in doc["rows"]] == ["every 2", "every 4", "stall-aware"]
    assert doc["best_net"]["net_throughput"] == max(r["net_throughput"] for r in doc["rows"])
    assert main(["sweep", *base, "--periods", "2,4", "--window", "2", "--slacks", "plain", "--no-stall-aware",
                 "--json"]) == 0
    assert [r["trigger"] for r in json.loads(capsys.readouterr().out)["rows"]] == ["every 2", "every 4"]
    assert main(["simulate", *base, "--every", "2", "--window", "2", "--stall-aware"]) == 0
    text = capsys.readouterr().out
    assert ", stall-aware" in text and "declined" in text and "rounds transfers" in text
    assert main(["simulate", *base, "--every", "4", "--stall", "async", "--async-interference", "0.5",
                 "--transfer-model", "shared", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["stall_seconds"] == 0 and out["interference_seconds"] > 0
    # an async sweep says what background copies cost (stall 0 alone would read as free)
    assert main(["sweep", *base, "--periods", "4", "--slacks", "plain", "--stall", "async", "--no-stall-aware"]) == 0
    table = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("| ")]
    assert "interference s" in table[0]
    cells = dict(zip([c.strip() for c in table[0].split("|")], [c.strip() for c in table[1].split("|")]))
    assert float(cells["stall s"]) == 0 and float(cells["interference s"]) > 0
    one_error_line(capsys, ["simulate", *base, "--every", "4", "--async-interference", "0.5"], "--stall async")
    one_error_line(capsys, ["simulate", *base, "--every", "4", "--stall", "async", "--async-interference", "2"],
                   "async_interference")
