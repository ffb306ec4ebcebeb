"""``eplb routing`` and the ``--routing`` argument of plan and score."""
import json

import pytest
import torch

from solvers.cli import main
from solvers.routing import load_routing


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("routing") / "olmoe.npz"
    assert main(["routing", "generate", "olmoe-1b-7b", "--tokens", "128", "--seed", "1", "--out", str(path)]) == 0
    return path


def test_generate_and_info(trace_file, capsys):
    tr = load_routing(trace_file)
    assert (tr.num_layers, tr.num_tokens, tr.top_k, tr.num_experts) == (16, 128, 8, 64)
    assert main(["routing", "info", str(trace_file), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["tokens"] == 128


def test_convert_a_vllm_response(tmp_path, capsys):
    ids = torch.randperm(8)[:2].repeat(5, 3, 1)                          # [tokens, layers, top_k]
    (tmp_path / "r.json").write_text(json.dumps({"routed_experts": ids.tolist()}))
    assert main(["routing", "convert", str(tmp_path / "r.json"), "--num-experts", "8",
                 "--out", str(tmp_path / "r.npz")]) == 0
    assert load_routing(tmp_path / "r.npz").topk_ids.shape == (3, 5, 2)


def test_plan_and_score_report_traffic(trace_file, tmp_path, capsys):
    out = tmp_path / "plan.json"
    assert main(["plan", "--loads", str(trace_file), "--model", "olmoe-1b-7b", "--replicas", "72", "--gpus", "8",
                 "--nodes", "2", "--routing", str(trace_file), "--out", str(out), "--json"]) == 0
    m = json.loads(capsys.readouterr().out)
    assert m["token_bytes"] == 2048 * 2 and m["inter_node_bytes"] > 0 and m["remote_nodes_mean"] <= 1
    assert main(["score", "--loads", str(trace_file), "--plan", str(out), "--routing", str(trace_file),
                 "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["inter_node_bytes"] == m["inter_node_bytes"] and s["token_bytes"] == 4096   # no --model: the trace's


def test_bad_routing_file_is_one_line(tmp_path, capsys):
    (tmp_path / "bad.jsonl").write_text('{"step": 0}\n')
    code = main(["routing", "info", str(tmp_path / "bad.jsonl"), "--num-experts", "8"])
    err = capsys.readouterr().err
    assert code != 0 and "routing" in err and len(err.strip().splitlines()) == 1


def test_each_routing_action_has_its_own_help(capsys):
    assert main(["routing", "generate", "--help"]) == 0
    gen = capsys.readouterr().out
    assert gen.startswith("usage: eplb routing generate") and "--tokens" in gen and "--num-experts" not in gen
    assert main(["routing", "convert", "--help"]) == 0
    conv = capsys.readouterr().out
    assert conv.startswith("usage: eplb routing convert") and "--num-experts" in conv and "--tokens" not in conv
