"""Re-plans across the cluster changes they exist for, through the CLI as an operator runs
them: GPUs fail (the plan in force has more slots), then come back, all or some of them.
Before, a migration-aware re-plan from a plan made with --failed, on the whole cluster again
or with only some GPUs back, ended in `index -1 is out of bounds for dimension 1`."""
from __future__ import annotations

import json

import pytest

from solvers.cli import main
from solvers.planfile import read_plan
from solvers.workloads.generators import generate
from solvers.workloads.trace import save_trace

CLUSTER = ["--replicas", "80", "--nodes", "2", "--gpus", "16", "--groups", "1"]


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    path = tmp_path_factory.mktemp("replan") / "olmoe.npz"
    save_trace(generate("olmoe-1b-7b", "drifting", steps=8, tokens_per_step=4096, seed=3, num_layers=3), path)
    return str(path)


def _plan(capsys, trace, window, out, *extra) -> dict:
    capsys.readouterr()
    assert main(["plan", "--loads", f"{trace}@{window}", *CLUSTER, *extra, "--out", str(out), "--json"]) == 0, \
        capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("back", [[], ["--failed", "9"]], ids=["all-back", "gpu-3-back"])
def test_a_re_plan_after_failed_gpus_come_back(tmp_path, capsys, trace, back):
    base = tmp_path / "base.json"
    _plan(capsys, trace, "0:4", base)
    shrunk = tmp_path / "shrunk.json"
    m = _plan(capsys, trace, "0:4", shrunk, "--failed", "3,9", "--previous", str(base), "--migration-slack", "0.01",
              "--solver", "kk_swap")
    assert read_plan(shrunk)[1]["problem"]["gpu_slots"][3] == 0
    grown = tmp_path / "grown.json"
    m = _plan(capsys, trace, "4:8", grown, *back, "--previous", str(shrunk), "--migration-slack", "0.01",
              "--solver", "kk_swap")
    fresh = _plan(capsys, trace, "4:8", tmp_path / "fresh.json", *back, "--previous", str(shrunk),
                  "--solver", "kk_swap")
    plan, doc = read_plan(grown)
    slots = doc["problem"].get("gpu_slots") or [5] * 16
    assert slots[3] == 5 and (slots[9] == 0) == bool(back)      # the GPUs that came back hold slots again
    assert plan.logcnt.min() >= 1 and int(plan.logcnt.sum(-1)[0]) == sum(slots)
    # migration-aware: far fewer moves than a fresh plan, within the slack's reach of its balance
    assert m["moves"] < fresh["moves"] / 2
    assert m["imbalance_mean"] <= fresh["imbalance_mean"] * 1.05


def test_a_re_plan_keeps_the_speeds_of_the_plan_in_force(tmp_path, capsys, trace):
    """A plan made with --gpu-speed, re-planned with --previous and no --gpu-speed, is made for
    the same GPUs (before: the speeds were silently dropped); the output says where the speeds
    came from, and --gpu-speed overrides them. Compare does the same."""
    base = tmp_path / "fast.json"
    _plan(capsys, trace, "0:4", base, "--gpu-speed", "1*8,1.4*8", "--solver", "kk_swap")
    capsys.readouterr()
    out = tmp_path / "re.json"
    assert main(["plan", "--loads", f"{trace}@4:8", *CLUSTER, "--previous", str(base), "--migration-slack", "0.01",
                 "--solver", "kk_swap", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert text.startswith(f"GPU speeds from --previous {base} (1*8,1.4*8); --gpu-speed overrides them")
    assert read_plan(out)[1]["problem"]["gpu_speed"] == [1.0] * 8 + [1.4] * 8
    assert "time_imbalance_mean" in text
    _plan(capsys, trace, "4:8", out, "--previous", str(base), "--gpu-speed", "1*16", "--solver", "kk_swap")
    assert not read_plan(out)[1]["problem"].get("gpu_speed")             # overridden: identical GPUs
    assert main(["compare", "--loads", f"{trace}@4:8", *CLUSTER, "--previous", str(base), "--solvers",
                 "kk_swap"]) == 0
    text = capsys.readouterr().out
    assert "GPU speeds from --previous" in text and "time" in text
