"""`eplb bench run` hands every option to the benchmark runner (the same runner as
`python -m benchmarks.run` in a checkout)."""
from __future__ import annotations

import json

from solvers.cli import main


def test_eplb_bench_run_runs_a_suite_and_records_its_command(tmp_path, capsys):
    out = tmp_path / "bench"
    rc = main(["bench", "run", "--suite", "tiny", "--out", str(out), "--solvers", "deepseek", "--figure", "none",
               "--no-progress"])
    assert rc == 0, capsys.readouterr().err
    assert (out / "results.csv").is_file() and (out / "summary.md").is_file()
    meta = json.loads((out / "meta.json").read_text())
    assert meta["settings"]["command"].startswith("eplb bench run --suite tiny")
    assert meta["settings"]["solvers"] in (["deepseek"], "deepseek")


def test_eplb_bench_run_bad_input_is_one_line_exit_2(tmp_path, capsys):
    rc = main(["bench", "run", "--suite", "nope", "--out", str(tmp_path / "x")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2
    assert len(err) == 1 and err[0].startswith("eplb bench run: error: suite:")


def test_eplb_bench_needs_a_step(capsys):
    assert main(["bench"]) == 2
    assert capsys.readouterr().err.startswith("eplb: error:")
