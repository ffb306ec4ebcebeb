"""Plans exported to engines' formats and read back; round trips keep the score exactly."""
from __future__ import annotations

import json

import pytest
import torch
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from solvers import Plan, Problem, score, solve
from solvers.errors import LoadFileError, OptionError
from solvers.planfile import read_plan
from solvers.workloads import (PLAN_FORMATS, export_plan, generate, plan_to_sglang, plan_to_trtllm,
                               read_exported_plan, windows)


@pytest.fixture(scope="module")
def solved():
    trace = generate("deepseek-v3", "skewed", steps=40, seed=1, num_layers=6)
    plan_w, eval_w = windows(trace, 20)[:2]
    problem = Problem(plan_w, 288, 8, 4, 32)
    result = solve(problem, "deepseek")
    return problem, result, Problem(eval_w, 288, 8, 4, 32)


@pytest.mark.parametrize("fmt,suffix", [("eplb", ".json"), ("sglang", ".json"), ("trtllm", ".yaml"),
                                        ("csv", ".csv")])
def test_round_trip_keeps_plan_and_score(tmp_path, solved, fmt, suffix):
    problem, result, evaluation = solved
    path = export_plan(result.plan, tmp_path / f"plan{suffix}", fmt, problem=problem, policy=result.policy,
                       solver="deepseek", metrics=result.summary(), layer_offset=3)
    back = read_exported_plan(path, num_experts=256, layer_offset=3)
    assert torch.equal(back.phy2log, result.plan.phy2log)
    assert torch.equal(back.logcnt, result.plan.logcnt)
    if fmt == "eplb":
        assert torch.equal(back.log2phy, result.plan.log2phy)
    else:  # engines carry phy2log only: replicas are re-ranked in slot order, the same slots
        assert torch.equal(back.log2phy.sort(-1).values, result.plan.log2phy.sort(-1).values)
    # Out of sample: the re-imported plan scores the same on the next window.
    a, b = score(evaluation, result.plan), score(evaluation, back)
    assert torch.equal(a.gpu_load, b.gpu_load) and a.metrics() == b.metrics()


def test_eplb_document_has_problem_metrics_and_provenance(tmp_path, solved):
    problem, result, _ = solved
    path = export_plan(result.plan, tmp_path / "p.json", problem=problem, policy=result.policy,
                       solver="deepseek", metrics=result.summary(), provenance={"loads": "deepseek-v3 skewed"})
    plan, doc = read_plan(path)
    assert doc["problem"] == problem.shape_dict() and doc["policy"] == result.policy
    assert doc["metrics"]["imbalance_mean"] == result.summary()["imbalance_mean"]
    assert doc["provenance"]["loads"] == "deepseek-v3 skewed"


def test_engine_documents(solved):
    _, result, _ = solved
    sg = plan_to_sglang(result.plan)
    assert list(sg) == ["physical_to_logical_map"] and len(sg["physical_to_logical_map"]) == 6
    assert len(sg["physical_to_logical_map"][0]) == 288
    trt = plan_to_trtllm(result.plan, layer_offset=3)
    assert trt["num_slots"] == 288 and list(trt["initial_global_assignments"]) == [3, 4, 5, 6, 7, 8]
    assert trt["layer_updates_per_iter"] == 0
    # Every expert of a layer is somewhere in its assignment.
    assert set(trt["initial_global_assignments"][3]) == set(range(256))


def test_trtllm_yaml_is_plain_yaml(tmp_path, solved):
    _, result, _ = solved
    path = export_plan(result.plan, tmp_path / "lb.yaml", "trtllm", layer_offset=3)
    doc = yaml.safe_load(path.read_text())
    assert doc["num_slots"] == 288 and doc["initial_global_assignments"][8] == result.plan.phy2log[5].tolist()


def test_csv_rows(tmp_path, solved):
    problem, result, _ = solved
    path = export_plan(result.plan, tmp_path / "p.csv", problem=problem)
    lines = path.read_text().splitlines()
    assert lines[0] == "layer,slot,gpu,expert,replica" and len(lines) == 1 + 6 * 288
    layer, slot, gpu, expert, _ = map(int, lines[1 + 288 + 20].split(","))
    assert (layer, slot, gpu) == (1, 20, 20 // 9) and expert == int(result.plan.phy2log[1, 20])


def test_export_errors(tmp_path, solved):
    problem, result, _ = solved
    with pytest.raises(OptionError, match="problem"):
        export_plan(result.plan, tmp_path / "p.json", "eplb")
    with pytest.raises(OptionError, match="num_gpus"):
        export_plan(result.plan, tmp_path / "p.csv")
    with pytest.raises(OptionError, match="num_gpus"):
        export_plan(result.plan, tmp_path / "p.csv", num_gpus=7)
    with pytest.raises(OptionError, match="format"):
        export_plan(result.plan, tmp_path / "p.txt")
    with pytest.raises(OptionError, match="format"):
        export_plan(result.plan, tmp_path / "p.json", "onnx")
    assert set(PLAN_FORMATS) == {"eplb", "sglang", "trtllm", "csv"}


@pytest.mark.parametrize("name,text,fragment", [
    ("p.json", '{"physical_to_logical_map": [[0, 1], [1]]}', "rectangular"),
    ("p.json", '{"physical_to_logical_map": [[0, 1, 3]]}', "invalid plan"),
    ("p.json", '{"physical_to_logical_map": [[0.5, 1]]}', "integer"),
    ("p.json", '{"mapping": []}', "physical_to_logical_map"),
    ("p.json", '{"physical_to_logical_map": [[0, 1', "not valid JSON"),
    ("p.yaml", "num_slots: 3\ninitial_global_assignments:\n  0: [0, 1]\n", "num_slots is 3"),
    ("p.yaml", "num_slots: [unclosed\n", "not valid YAML"),
    ("p.yaml", "num_slots: 2\n", "initial_global_assignments"),
    ("p.yaml", "initial_global_assignments:\n  a: [0, 1]\n", "layer indices"),
    ("p.csv", "layer,slot,expert\n0,0,0\n0,0,1\n", "every (layer, slot) once"),
    ("p.csv", "layer,slot,expert\n0,0,0\n0,0,1\n1,1,1\n0,1,1\n", "twice"),
    ("p.csv", "a,b\n1,2\n", "header"),
])
def test_malformed_plan_files(tmp_path, name, text, fragment):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(LoadFileError) as err:
        read_exported_plan(path)
    assert err.value.param == "plan" and fragment in str(err.value), str(err.value)


def test_engine_plan_with_fewer_experts_than_declared(tmp_path):
    (tmp_path / "p.json").write_text(json.dumps({"physical_to_logical_map": [[0, 1, 1]]}))
    with pytest.raises(LoadFileError, match="invalid plan"):
        read_exported_plan(tmp_path / "p.json", num_experts=3)        # expert 2 has no replica
    assert read_exported_plan(tmp_path / "p.json").num_experts == 2


@settings(max_examples=25, deadline=None)
@given(L=st.integers(1, 3), E=st.integers(1, 6), extra=st.integers(0, 6), P=st.sampled_from([1, 2, 3]),
       seed=st.integers(0, 10_000))
def test_any_valid_plan_round_trips_through_every_engine_format(tmp_path_factory, L, E, extra, P, seed):
    R = E + extra
    R += (-R) % P                                                    # slots a multiple of GPUs
    g = torch.Generator().manual_seed(seed)
    rows = [torch.cat([torch.arange(E), torch.randint(0, E, (R - E,), generator=g)])[torch.randperm(R, generator=g)]
            for _ in range(L)]
    plan = Plan.from_phy2log(torch.stack(rows), E)
    d = tmp_path_factory.mktemp("rt")
    for fmt, name in (("sglang", "p.json"), ("trtllm", "p.yaml"), ("csv", "p.csv")):
        back = read_exported_plan(export_plan(plan, d / name, fmt, num_gpus=P), num_experts=E)
        assert torch.equal(back.phy2log, plan.phy2log) and torch.equal(back.log2phy, plan.log2phy)


def test_sglang_export_covers_dense_layers(tmp_path, solved):
    plan = solved[1].plan if isinstance(solved, tuple) else solved.plan
    doc = plan_to_sglang(plan, layer_offset=3)
    rows = doc["physical_to_logical_map"]
    assert len(rows) == plan.num_layers + 3
    assert rows[3:] == plan.phy2log.tolist()
    for row in rows[:3]:                     # dense layers: every expert held, valid map
        Plan.from_phy2log([row], plan.num_experts).validate(num_experts=plan.num_experts)
    with pytest.raises(OptionError, match="layer_offset"):
        plan_to_sglang(plan, layer_offset=-1)


@pytest.mark.parametrize("cluster", [dict(num_replicas=32, failed=[2]), dict(gpu_slots=[5, 3] * 4)])
def test_trtllm_map_of_failed_or_uneven_ranks_is_refused_with_the_reason(tmp_path, cluster):
    """TensorRT-LLM's load-balancer config (num_slots, initial_global_assignments,
    layer_updates_per_iter) has no field that marks a rank dead and splits num_slots evenly
    over the ranks: such a plan is refused naming the format and why, and nothing is written;
    the same plan exports as eplb and csv."""
    g = torch.Generator().manual_seed(0)
    p = Problem((torch.rand(2, 24, generator=g) * 100).round(), num_nodes=2, num_gpus=8, **cluster)
    plan = solve(p, "kk_swap").plan
    out = tmp_path / "x.yaml"
    with pytest.raises(OptionError) as err:
        export_plan(plan, out, "trtllm", problem=p)
    assert err.value.param == "format"
    assert "no field that marks a rank dead" in str(err.value) and "eplb or csv" in str(err.value)
    assert not out.exists()
    for fmt, suffix in (("eplb", ".json"), ("csv", ".csv")):
        assert export_plan(plan, tmp_path / f"x{suffix}", fmt, problem=p).exists()
