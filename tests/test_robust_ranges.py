"""Hostile sizes and numbers, round three: computations sized before they allocate
(traffic metric, traffic_aware, routing generator), numbers kept in range end to end (speeds,
bandwidths, sweep lists, budgets), one line for every exception the CLI meets, and the wrong
answers that were given without an error. Every case runs as a user runs it: through
``solvers.cli.main`` or the ``eplb`` process; the memory cases measure the child's peak RSS."""
from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from solvers import memory
from solvers.cli import main
from solvers.cli.args import unexpected
from solvers.cluster import Cluster
from solvers.errors import OptionError, ProblemError
from solvers.plan import Plan
from solvers.routing import RoutingTrace, generate_routing, save_routing
from solvers.scoring import check_finite
from solvers.traffic import traffic, traffic_chunks

ROOT = Path(__file__).resolve().parents[1]
RSS_CEILING_KB = 1_500_000          # 1.5 GB: the memory cases' promise (torch alone is ~0.35 GB)


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def one_line_error(code: int, err: str, *words: str) -> None:
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("eplb: error:"), err
    assert "Traceback" not in err
    for w in words:
        assert w in err, (w, err)


def eplb_process(*argv: str, timeout: float = 300) -> tuple[int, str, int]:
    """(exit code, stderr, peak RSS of the eplb child in KB): a small wrapper process runs the CLI
    as its only child, so RUSAGE_CHILDREN is that child's alone."""
    wrapper = ("import resource, subprocess, sys\n"
               "r = subprocess.run([sys.executable, '-m', 'solvers.cli', *sys.argv[1:]], capture_output=True, "
               "text=True)\n"
               "sys.stderr.write(r.stderr)\n"
               "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
               "sys.exit(r.returncode)\n")
    r = subprocess.run([sys.executable, "-c", wrapper, *argv], capture_output=True, text=True, timeout=timeout,
                       cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    return r.returncode, r.stderr, int(r.stdout.strip().splitlines()[-1])


# 1. Sized before it allocates ------------------------------------------------------------------

def _random_case(N, P, R, L, E, T, k, seed=0, speed=None):
    g = torch.Generator().manual_seed(seed)
    p2l = torch.stack([torch.cat([torch.randperm(E, generator=g), torch.randint(0, E, (R - E,), generator=g)])
                       [torch.randperm(R, generator=g)] for _ in range(L)])
    ids = torch.rand(L, T, E, generator=g).argsort(-1)[..., :k].to(torch.int16)
    trace = RoutingTrace(ids, E, torch.randint(0, P, (T,), dtype=torch.int32, generator=g), P)
    return Plan.from_phy2log(p2l, E), Cluster(N, P, R, gpu_speed=speed), trace


@pytest.mark.parametrize("bitmask", [True, False])
def test_traffic_in_small_chunks_equals_one_chunk(monkeypatch, bitmask):
    plan, cluster, trace = _random_case(4, 16, 32, 11, 16, 300, 4, speed=[1.0] * 8 + [1.5] * 8)
    whole = traffic(plan, cluster, trace, 3, bitmask=bitmask)
    monkeypatch.setattr(memory, "WORK_BYTES", 300_000)          # a few layers and tokens per chunk
    assert traffic_chunks(11, 16, 300, 4, cluster, bitmask)[1] < 300
    parts = traffic(plan, cluster, trace, 3, bitmask=bitmask)
    for name in ("remote_nodes", "remote_nodes_p99", "remote_gpus", "remote_gpus_p99", "nodes_hist",
                 "node_matrix", "layer_bytes", "dispatched_load"):
        assert torch.equal(getattr(whole, name), getattr(parts, name)), name
    assert whole.summary == parts.summary


def test_traffic_bitmasks_and_sorted_rows_agree_on_many_nodes():
    plan, cluster, trace = _random_case(16, 32, 64, 3, 16, 200, 4)
    a, b = traffic(plan, cluster, trace, bitmask=True), traffic(plan, cluster, trace, bitmask=False)
    assert a.summary == b.summary and torch.equal(a.node_matrix, b.node_matrix)


def test_traffic_refuses_a_cluster_whose_results_exceed_the_budget():
    # 16384 nodes: the [N, N] node matrix alone is 2 GiB
    with pytest.raises(OptionError, match=r"routing: .*working-memory budget"):
        traffic_chunks(2, 16, 10, 2, Cluster(16384, 16384, 16384), False)


def test_traffic_of_256_layers_on_16_nodes_stays_small(tmp_path):
    """The issue's case: a tiny trace, 33 KB of loads, 16 nodes and 256 layers took 4.6 GB."""
    L, E = 256, 16
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "loads.npz", loads=rng.integers(1, 100, size=(L, E)))
    ids = np.argsort(rng.random((L, 4, E)), axis=-1)[..., :2]            # two distinct experts per token
    save_routing(RoutingTrace(torch.from_numpy(ids.astype(np.int16)), E), tmp_path / "trace.npz")
    assert main(["plan", "--loads", str(tmp_path / "loads.npz"), "--replicas", "32", "--nodes", "16", "--gpus", "32",
                 "--out", str(tmp_path / "plan.json")]) == 0
    code, err, rss = eplb_process("score", "--loads", str(tmp_path / "loads.npz"),
                                  "--plan", str(tmp_path / "plan.json"), "--routing", str(tmp_path / "trace.npz"),
                                  "--json")
    assert code == 0 and "Traceback" not in err, err
    assert rss < RSS_CEILING_KB, rss


@pytest.mark.parametrize("argv, words", [
    (["--tokens", "4194304"], ["num_tokens", "budget", "--tokens"]),           # the documented maximum
    (["--set", "num_topics=60000"], ["num_topics", "budget"]),
    (["--set", "num_topics=100000000"], ["num_topics", "<= 65536"]),
    (["--set", "request_tokens=10000000000"], ["request_tokens"]),
])
def test_routing_generate_refuses_what_does_not_fit(tmp_path, argv, words):
    code, err, rss = eplb_process("routing", "generate", "deepseek-v3", *argv, "--out", str(tmp_path / "t.npz"))
    one_line_error(code, err, *words)
    assert rss < RSS_CEILING_KB, rss
    assert not (tmp_path / "t.npz").exists()


def test_routing_generator_blocks_draw_the_same_trace(monkeypatch):
    whole = generate_routing("mixtral-8x7b", 3, num_tokens=500, num_topics=5)
    monkeypatch.setattr(memory, "WORK_BYTES", 2_000_000)         # blocks of a few hundred tokens
    parts = generate_routing("mixtral-8x7b", 3, num_tokens=500, num_topics=5)
    assert torch.equal(whole.topk_ids, parts.topk_ids) and torch.equal(whole.source_rank, parts.source_rank)


def test_traffic_aware_refuses_an_allowed_max_tokens_that_does_not_fit(tmp_path):
    L, E, T, k = 58, 256, 8192, 8
    rng = np.random.default_rng(1)
    ids = ((rng.integers(0, E, (L, T, 1)) + 31 * np.arange(k)) % E).astype(np.int16)   # k distinct ids a token
    trace = RoutingTrace(torch.from_numpy(ids), E, torch.from_numpy(rng.integers(0, 32, T).astype(np.int32)), 32)
    save_routing(trace, tmp_path / "trace.npz")
    np.savez(tmp_path / "loads.npz", loads=trace.loads().numpy())
    code, err, rss = eplb_process("plan", "--loads", str(tmp_path / "loads.npz"), "--model", "deepseek-v3",
                                  "--replicas", "288", "--gpus", "32", "--nodes", "4", "--routing",
                                  str(tmp_path / "trace.npz"), "--solver", "traffic_aware",
                                  "-O", "max_tokens=1048576", "--out", str(tmp_path / "plan.json"))
    one_line_error(code, err, "max_tokens", "budget", "-O max_tokens=")
    assert rss < RSS_CEILING_KB, rss


# 2. Numbers in range ----------------------------------------------------------------------------

CLUSTER = ["--loads", "readme-example", "--replicas", "16", "--gpus", "8"]


@pytest.mark.parametrize("flags, words", [
    (["--gpu-speed", "1e308*8"], ["gpu_speed", "[1e-06, 1e+06]"]),          # overflowed math.fsum
    (["--gpu-speed", "1e-308*8"], ["gpu_speed", "[1e-06, 1e+06]"]),         # printed nan and proven_optimal
    (["--gpu-speed", "1e-310*8"], ["gpu_speed"]),
    (["--gpu-speed", "1e-6*4,10*4"], ["gpu_speed", "1e+06 times"]),        # an inf time and a 0 bound
    (["--inter-node-bw", "5e-324"], ["inter_node_bw", "GB/s"]),
    (["--intra-node-bw", "1e300"], ["intra_node_bw", "GB/s"]),
    (["--host-bw", "0.0000001"], ["host_bw"]),
])
def test_plan_refuses_numbers_out_of_range(capsys, tmp_path, flags, words):
    code, _, err = run_cli(capsys, "plan", *CLUSTER, *flags, "--out", str(tmp_path / "p.json"))
    one_line_error(code, err, *words)


def test_speeds_at_the_range_ends_give_finite_figures(capsys, tmp_path):
    code, out, err = run_cli(capsys, "plan", *CLUSTER, "--gpu-speed", "1e-6*4,1*4", "--solver", "kk_swap",
                             "--out", str(tmp_path / "p.json"), "--json")
    assert code == 0, err
    metrics = json.loads(out)
    assert all(not isinstance(v, float) or np.isfinite(v) for v in metrics.values()), metrics
    assert metrics["status"] != "proven_optimal" or metrics.get("gap_max", 0) == 0


def test_a_plan_file_with_speeds_out_of_range_is_refused(capsys, tmp_path):
    code, _, err = run_cli(capsys, "plan", *CLUSTER, "--out", str(tmp_path / "p.json"))
    assert code == 0, err
    doc = json.loads((tmp_path / "p.json").read_text())
    doc["problem"]["gpu_speed"] = [1e308] * 8
    (tmp_path / "bad.json").write_text(json.dumps(doc))
    code, _, err = run_cli(capsys, "score", "--loads", "readme-example", "--plan", str(tmp_path / "bad.json"))
    one_line_error(code, err, "gpu_speed")


SWEEP = ["sweep", "--loads", "olmoe-1b-7b-drifting", "--model", "olmoe-1b-7b"]


@pytest.mark.parametrize("flags, words", [
    (["--periods", "nan"], ["periods", "finite"]),                    # ValueError traceback
    (["--periods", "inf"], ["periods", "finite"]),
    (["--periods", "2.5"], ["periods", "whole"]),                     # became 2
    (["--periods", "0"], ["periods"]),
    (["--thresholds", "nan"], ["thresholds", "finite"]),
    (["--budget-gb", "-1"], ["budget_gb"]),                           # accepted
    (["--budget-gb", "nan"], ["budget_gb"]),
    (["--budget-gb", "inf"], ["budget_gb"]),
])
def test_sweep_refuses_lists_and_budgets_out_of_range(capsys, flags, words):
    code, _, err = run_cli(capsys, *SWEEP, *flags)
    one_line_error(code, err, *words)


def test_the_scorer_refuses_a_non_finite_figure():
    with pytest.raises(ProblemError, match="not finite"):
        check_finite({"time_imbalance": torch.tensor([1.0, float("nan")])})
    with pytest.raises(ProblemError, match="max_time_sum"):
        check_finite({"max_time_sum": float("inf")})
    check_finite({"max_time_sum": 3.0, "status": "feasible", "max_time": torch.ones(2)})


# 3. One line for every exception ----------------------------------------------------------------

@pytest.fixture
def hostile(tmp_path) -> Path:
    deep = "[" * 100_000 + "]" * 100_000
    (tmp_path / "deep.jsonl").write_text('{"step": 0, "layer": 0, "rank": 0, "top_indices": ' + deep + "}\n")
    (tmp_path / "binary.jsonl").write_bytes(bytes(range(128, 256)) * 10)
    for name, rank in (("rank63.jsonl", 2**63), ("rank64.jsonl", 2**64 + 5)):
        (tmp_path / name).write_text(json.dumps({"step": 0, "layer": 0, "rank": rank, "top_indices": [[0, 1]]}) + "\n")
    return tmp_path


@pytest.mark.parametrize("name, words", [
    ("deep.jsonl", ["nested deeper than"]),                # once a RecursionError
    ("binary.jsonl", ["not UTF-8"]),                       # once a UnicodeDecodeError
    ("rank63.jsonl", ["rank must be an integer in [0, 2**31)"]),     # once an OverflowError
    ("rank64.jsonl", ["rank must be an integer in [0, 2**31)"]),
])
def test_reader_exceptions_are_one_line_naming_the_input(capsys, hostile, name, words):
    code, _, err = run_cli(capsys, "routing", "info", str(hostile / name))
    one_line_error(code, err, "routing:", name, *words)


def test_reader_exception_through_plan_routing_names_the_input(capsys, hostile, tmp_path):
    code, _, err = run_cli(capsys, "plan", *CLUSTER, "--routing", str(hostile / "binary.jsonl"),
                           "--out", str(tmp_path / "p.json"))
    one_line_error(code, err, "routing:", "binary.jsonl", "not UTF-8")


def test_the_traceback_only_with_debug(capsys, monkeypatch):
    """An exception a reader did not turn into a clear error (here the format level raising
    OverflowError, as a Megatron rank of 2**63 once did) is one line naming the input; the
    traceback is printed only under --debug."""
    import solvers.io

    def overflowing(*args, **kwargs):
        raise OverflowError("Python int too large to convert to C long")

    monkeypatch.setattr(solvers.io, "read_raw", overflowing)
    argv = ["score", "--loads", "readme-example", "--plan", str(ROOT / "pyproject.toml")]
    code, _, err = run_cli(capsys, *argv)
    one_line_error(code, err, "loads:")
    code, _, err = run_cli(capsys, "--debug", *argv)
    assert code == 2 and "Traceback" in err and "OverflowError" in err, err
    assert err.strip().splitlines()[-1].startswith("eplb: error: loads:")


def test_an_unexpected_exception_is_a_bug_report_line(capsys):
    try:
        {}["missing"]                       # a real exception, raised outside any reader of user input
    except KeyError as exc:
        code = unexpected(exc, debug=False)
    err = capsys.readouterr().err
    assert code == 1 and err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("eplb: internal error: KeyError") and "a bug" in err
    assert "report it with the command line" in err and "--debug" in err
    try:
        1 / 0
    except ZeroDivisionError as exc:
        code = unexpected(exc, debug=True)
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" in err and err.strip().splitlines()[-1].startswith("eplb: internal error:")


# 4. Wrong answers without an error --------------------------------------------------------------

def test_previous_plan_for_other_gpus_is_refused(capsys, tmp_path):
    assert run_cli(capsys, "plan", *CLUSTER, "--out", str(tmp_path / "p8.json"))[0] == 0
    assert run_cli(capsys, "plan", "--loads", "readme-example", "--replicas", "16", "--gpus", "4",
                   "--out", str(tmp_path / "p4.json"))[0] == 0
    code, _, err = run_cli(capsys, "plan", "--loads", "readme-example", "--replicas", "16", "--gpus", "4",
                           "--previous", str(tmp_path / "p8.json"), "--out", str(tmp_path / "p.json"))
    one_line_error(code, err, "previous", "8 GPUs", "has 4")
    code, _, err = run_cli(capsys, "score", "--loads", "readme-example", "--plan", str(tmp_path / "p4.json"),
                           "--previous", str(tmp_path / "p8.json"))
    one_line_error(code, err, "previous", "8 GPUs")


@pytest.mark.parametrize("flag, value", [("--gpus", "4"), ("--nodes", "2"), ("--groups", "2")])
def test_cluster_flags_contradicting_a_plan_file_are_refused(capsys, tmp_path, flag, value):
    assert run_cli(capsys, "plan", *CLUSTER, "--out", str(tmp_path / "p.json"))[0] == 0
    code, _, err = run_cli(capsys, "score", "--loads", "readme-example", "--plan", str(tmp_path / "p.json"),
                           flag, value)
    one_line_error(code, err, flag, "contradicts")
    # the same numbers as the file's are fine
    assert run_cli(capsys, "score", "--loads", "readme-example", "--plan", str(tmp_path / "p.json"),
                   "--gpus", "8", "--nodes", "1")[0] == 0


def test_a_csv_export_of_uneven_slots_is_scored_on_its_own_gpu_column(capsys, tmp_path):
    slots = "3,3,3,3,2,2,2,2"
    code, out, err = run_cli(capsys, "plan", "--loads", "readme-example", "--gpus", "8", "--nodes", "2",
                             "--gpu-slots", slots, "--solver", "kk_swap", "--out", str(tmp_path / "p.json"), "--json")
    assert code == 0, err
    planned = json.loads(out)
    from solvers.planfile import read_plan
    from solvers.workloads.exporters import plan_to_csv
    plan, doc = read_plan(tmp_path / "p.json")
    cluster = Cluster(2, 8, gpu_slots=doc["problem"]["gpu_slots"])
    (tmp_path / "p.csv").write_text(plan_to_csv(plan, 8, cluster.slot_gpus()))
    code, out, err = run_cli(capsys, "score", "--loads", "readme-example", "--plan", str(tmp_path / "p.csv"),
                             "--gpus", "8", "--nodes", "2", "--json")
    assert code == 0, err
    scored = json.loads(out)
    assert scored["imbalance_mean"] == pytest.approx(planned["imbalance_mean"], rel=1e-9)
    code, _, err = run_cli(capsys, "score", "--loads", "readme-example", "--plan", str(tmp_path / "p.csv"),
                           "--gpus", "8", "--nodes", "2", "--gpu-slots", "4,4,2,2,2,2,2,2")
    one_line_error(code, err, "gpu_slots", "contradicts")


def test_compare_option_policy_runs_that_policy(capsys):
    code, out, err = run_cli(capsys, "compare", "--loads", "deepseek-v3-mild", "--model", "deepseek-v3",
                             "--replicas", "288", "--gpus", "32", "--nodes", "4", "--solvers", "deepseek,kk_swap",
                             "-O", "policy=global", "--json")
    assert code == 0, err
    rows = json.loads(out)["rows"]
    assert rows and {r["policy"] for r in rows} == {"global"}
