"""`eplb microbatch` end to end, and the scheduling-aware planners through solve()."""
import json

import numpy as np
import pytest
import torch

import solvers.dispatch  # noqa: F401  registers the planners
from solvers import OptionError, Problem, solve
from solvers.cli import main
from solvers.dispatch.microbatches import microbatch_imbalance


@pytest.fixture
def trace_and_plan(tmp_path):
    g = np.random.default_rng(0)
    loads = g.integers(0, 200, size=(6, 2, 16)) * (g.random((1, 2, 16)) < 0.8)
    trace = tmp_path / "trace.npz"
    np.savez(trace, loads=loads)
    plan = tmp_path / "plan.json"
    assert main(["plan", "--loads", str(trace), "--replicas", "24", "--gpus", "4", "--out", str(plan)]) == 0
    return trace, plan


def test_sampled_microbatches_report_and_files(trace_and_plan, tmp_path, capsys):
    trace, plan = trace_and_plan
    capsys.readouterr()
    out = tmp_path / "out"
    rc = main(["microbatch", "--loads", str(trace), "--plan", str(plan), "--tokens-per-microbatch", "64",
               "--top-k", "2", "--microbatches", "5", "--json", "--out", str(out)])
    assert rc == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["count"] == 5 and summary["top_k"] == 2
    even, sched = summary["imbalance"]["even"], summary["imbalance"]["scheduled"]
    assert 1.0 <= sched["mean"] <= even["mean"] and sched["worst"] <= even["worst"]
    assert (out / "histogram.svg").read_text().startswith("<svg")
    rows = (out / "imbalance.csv").read_text().splitlines()
    assert rows[0] == "microbatch,layer,even,scheduled" and len(rows) == 1 + 5 * 2
    assert json.loads((out / "summary.json").read_text())["imbalance"] == summary["imbalance"]


def test_steps_as_microbatches_matches_the_library(trace_and_plan, capsys):
    trace, plan = trace_and_plan
    capsys.readouterr()
    assert main(["microbatch", "--loads", str(trace), "--plan", str(plan), "--steps-as-microbatches"]) == 0
    text = capsys.readouterr().out
    assert "6 micro-batches (steps)" in text
    from solvers.planfile import read_plan

    p, _ = read_plan(plan)
    tokens = torch.from_numpy(np.load(trace)["loads"])
    worst = float(microbatch_imbalance(p, tokens, 4, "scheduled").max())
    line = next(l for l in text.splitlines() if l.startswith("scheduled"))
    assert float(line.split()[-1]) == pytest.approx(worst, abs=1e-4)


def _steps_even_mean(capsys, argv) -> float:
    capsys.readouterr()
    assert main(["microbatch", *argv, "--steps-as-microbatches", "--json"]) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)["imbalance"]["even"]["mean"]


def test_microbatch_reads_every_plan_kind_and_format(trace_and_plan, tmp_path, capsys):
    """Uneven slot counts, failed GPUs and engine maps: the micro-batch figures are the shared
    scorer's, so with the steps as micro-batches the even split's mean is `eplb score`'s
    per-step imbalance (before: an uneven plan was read as R/P slots per GPU, and a plan made
    with --failed ended in a reshape traceback)."""
    trace, _ = trace_and_plan
    cases = {"uneven": ["--replicas", "24", "--gpus", "4", "--gpu-slots", "8,4,8,4", "--solver", "kk_swap"],
             "failed": ["--replicas", "24", "--gpus", "4", "--failed", "1", "--solver", "kk_swap"],
             "speeds": ["--replicas", "24", "--gpus", "4", "--gpu-speed", "1,1,1.5,1.5", "--solver", "kk_swap"]}
    tokens = torch.from_numpy(np.load(trace)["loads"])
    for name, args in cases.items():
        plan = tmp_path / f"{name}.json"
        assert main(["plan", "--loads", str(trace), *args, "--out", str(plan)]) == 0, name
        got = _steps_even_mean(capsys, ["--loads", str(trace), "--plan", str(plan)])
        # the scorer, one step at a time: each step is a micro-batch
        per_step = []
        for t in range(tokens.shape[0]):
            assert main(["score", "--loads", f"{trace}@{t}:{t + 1}", "--plan", str(plan), "--json"]) == 0
            per_step.append(json.loads(capsys.readouterr().out)["imbalance_mean"])
        assert got == pytest.approx(sum(per_step) / len(per_step), rel=1e-9), name
    # an engine map (SGLang) needs --gpus; padded for a failed rank it needs --failed too
    csv = tmp_path / "failed-sglang.json"
    assert main(["convert", str(tmp_path / "failed.json"), "--out", str(csv), "--to", "sglang"]) == 0
    capsys.readouterr()
    assert main(["microbatch", "--loads", str(trace), "--plan", str(tmp_path / "uneven.json"), "--gpus", "8",
                 "--steps-as-microbatches"]) == 2
    assert "gpus: 8 contradicts" in capsys.readouterr().err
    from_map = _steps_even_mean(capsys, ["--loads", str(trace), "--plan", str(csv), "--gpus", "4", "--failed", "1"])
    assert from_map == pytest.approx(_steps_even_mean(capsys, ["--loads", str(trace), "--plan",
                                                               str(tmp_path / "failed.json")]), rel=1e-12)


def test_bad_input_is_one_line_and_status_2(trace_and_plan, tmp_path, capsys):
    trace, plan = trace_and_plan
    capsys.readouterr()
    rc = main(["microbatch", "--loads", str(trace), "--plan", str(plan), "--steps-as-microbatches", "--top-k", "2"])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("eplb: error: steps_as_microbatches:") and err.count("\n") == 1
    other = tmp_path / "other.npz"
    np.savez(other, loads=np.ones((2, 3, 16), dtype=np.int64))
    rc = main(["microbatch", "--loads", str(other), "--plan", str(plan)])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("eplb: error: loads:")


@pytest.mark.parametrize("solver", ["sched_spread", "uniform_replicas"])
def test_planners_spread_replicas_without_duplicates(solver):
    w = torch.distributions.LogNormal(0.0, 1.0).sample((2, 16)).double()
    res = solve(Problem(w, 32, 1, 1, 8), solver)
    assert res.plan is not None and res.score.duplicates == 0 and res.policy == "global"
    if solver == "uniform_replicas":                     # 32 slots for 16 experts: every expert twice
        assert bool((res.plan.logcnt == 2).all())


def test_sched_spread_gives_each_slot_to_the_largest_peak_per_replica():
    # e0 holds 100 of 115 tokens: 6.96 GPUs' mean load, so it gets every GPU (at most one
    # replica per GPU); the 24 slots left go one by one to the largest share per replica.
    w = torch.tensor([[100.0] + [1.0] * 13 + [2.0, 3.0]])
    res = solve(Problem(w, 40, 1, 1, 8), "sched_spread")
    cnt = res.plan.logcnt[0]
    assert cnt[0] == 8 and int(cnt.sum()) == 40 and res.score.duplicates == 0
    per = w[0] / cnt
    # greedy optimality: no expert below the cap would have a larger share per replica with
    # one replica more than the largest one has now... i.e. moving a replica cannot lower the max
    movable = cnt[1:] > 1
    assert float((w[0, 1:] / (cnt[1:] - 1))[movable].min()) >= float(per[1:].max()) - 1e-12


def test_planner_options_are_checked():
    w = torch.ones(1, 16)
    with pytest.raises(OptionError, match="^jitter"):
        solve(Problem(w, 24, 1, 1, 8), "sched_spread", jitter=-1.0)
    with pytest.raises(OptionError, match="^num_replicas"):
        solve(Problem(w, 32, 1, 1, 1), "uniform_replicas")


def test_spread_keeps_gpus_from_mirroring_each_other():
    # Equal replicas of consecutive experts: plain LPT puts them on the same GPU pairs (and a
    # dominant expert's two GPUs take the last two items of every round); the spread must keep
    # every GPU pair's shared experts well below S.
    from solvers.scoring import gpu_presence

    w = torch.exp(torch.randn(3, 64, generator=torch.Generator().manual_seed(7), dtype=torch.float64))

    def most_shared(jitter):
        res = solve(Problem(w, 128, 1, 1, 8), "uniform_replicas", seed=1, jitter=jitter)
        assert res.score.duplicates == 0
        pres = gpu_presence(res.plan.phy2log, 64, 8).double()             # [L, P, E]
        share = pres @ pres.transpose(1, 2)
        return float((share - torch.diag_embed(torch.diagonal(share, dim1=1, dim2=2))).max())

    # S = 16: plain LPT made GPU pairs share all 16 experts; the overlap term keeps every
    # pair well below that, with or without jitter
    assert most_shared(0.0) <= 8 and most_shared(1.0) <= 8


@pytest.mark.parametrize("solver", ["sched_spread", "uniform_replicas"])
def test_planners_on_an_uneven_mixed_speed_cluster_through_the_cli(tmp_path, capsys, solver):
    """`eplb plan` with --gpu-slots/--gpu-speed/--failed and a scheduling-aware planner:
    the plan keeps every GPU's slot count (none on the failed GPU) and is scored in time."""
    g = np.random.default_rng(1)
    loads = tmp_path / "loads.npz"
    np.savez(loads, loads=g.integers(1, 200, size=(2, 16)))
    out = tmp_path / "plan.json"
    rc = main(["plan", "--loads", str(loads), "--gpus", "4", "--gpu-slots", "7,5,7,5", "--gpu-speed", "1.4,1,1.4,1",
               "--failed", "1", "--solver", solver, "--out", str(out), "--json"])
    assert rc == 0
    metrics = json.loads(capsys.readouterr().out)
    doc = json.loads(out.read_text())
    assert doc["problem"]["gpu_slots"] == [7, 0, 7, 5]
    assert len(doc["phy2log"][0]) == 19 and metrics["time_imbalance_mean"] >= 1
