"""A fuzzer, not a list: hostile loads and plan files built by hypothesis from each format's
grammar (``tests/fuzz_strategies.py``) go through the library's one loads reader and the plan
readers. Every file must end in a result or in one ``ValueError`` line naming the file: no
other exception, no allocation beyond the boundary's caps (lowered here so a miss shows as a
jump of the peak memory), and a success must give loads a plan can be scored on with metrics
in their ranges (imbalance >= 1, balancedness in [0, 1]).

The default run draws a few dozen files per format (derandomised, a few seconds); the ``slow``
run draws many more at random (``EPLB_FUZZ_EXAMPLES`` sets the count). A failure found is
kept as a case of ``tests/fuzz_corpus/`` (set ``EPLB_FUZZ_SAVE=DIR`` to keep the failing files).
"""
from __future__ import annotations

import hashlib
import os
import resource
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings

from solvers import Problem, score, solve
from solvers import filecheck
from solvers.cluster_text import MAX_LIST_VALUES, per_gpu_values
from solvers.io import read_loads
from solvers.routing import read_routing
from solvers.planfile import plan_document, read_plan
from solvers.workloads.exporters import read_exported_plan

from tests import fuzz_strategies as fs

DEFAULT_EXAMPLES = 30
SLOW_EXAMPLES = int(os.environ.get("EPLB_FUZZ_EXAMPLES", "1500"))
# Peak memory (max RSS) may grow this much over a whole fuzz run (the caps are lowered to a
# few MB below; one file honoured beyond them would add hundreds of MB or GB).
MAX_RSS_GROWTH_MB = 600


def _settings(examples: int, derandomize: bool):
    return settings(max_examples=examples, deadline=None, derandomize=derandomize, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.filter_too_much, HealthCheck.function_scoped_fixture])


@pytest.fixture(autouse=True)
def _small_caps(monkeypatch):
    """Caps of a few MB: a reader that allocates what a file declares is caught by the RSS check."""
    monkeypatch.setattr(filecheck, "MAX_ARRAY_BYTES", 32 << 20)
    monkeypatch.setattr(filecheck, "MAX_UNPACKED_BYTES", 64 << 20)
    monkeypatch.setattr(filecheck, "BOMB_MIN_BYTES", 1 << 20)
    monkeypatch.setattr(filecheck, "MAX_PICKLE_BYTES", 4 << 20)
    monkeypatch.setattr(filecheck, "MAX_BUILD_BYTES", 256 << 20)
    monkeypatch.setattr(filecheck, "BUILD_FLOOR", 16 << 20)


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _save(kind: str, suffix: str, data: bytes) -> None:
    target = os.environ.get("EPLB_FUZZ_SAVE")
    if target:
        Path(target).mkdir(parents=True, exist_ok=True)
        (Path(target) / f"{kind}-{hashlib.sha256(data).hexdigest()[:10]}{suffix}").write_bytes(data)


def _check_refusal(exc: ValueError, path: Path) -> None:
    text = str(exc)
    assert "\n" not in text, f"a refusal must be one line: {text!r}"
    assert path.name in text or "upload" in text, f"a refusal must name the file: {text!r}"


def _check_metrics(weights: torch.Tensor) -> None:
    """A success: finite loads >= 0, and the shared scorer's metrics in their ranges."""
    assert weights.dim() == 2 and bool(torch.isfinite(weights).all()) and bool((weights >= 0).all())
    L, E = weights.shape
    if L * E > 4096:
        return
    P = 2
    R = max(E + (E % P), P)
    res = solve(Problem(weights, R, 1, 1, P), "deepseek")
    m = score(Problem(weights, R, 1, 1, P), res.plan).metrics()
    assert m["imbalance_mean"] >= 1.0 and m["imbalance_worst"] >= 1.0, m
    assert 0.0 <= m["balancedness"] <= 1.0 and 0.0 <= m["balancedness_sum"] <= 1.0, m


def _loads_case(tmp_path: Path, kind: str, suffix: str, data: bytes, format: str | None = None) -> str:
    path = tmp_path / f"fuzz{suffix}"
    path.write_bytes(data)
    try:
        try:
            info = read_loads(path, format)
        except ValueError as exc:
            _check_refusal(exc, path)
            return "refused"
        _check_metrics(info.weights)
        return "read"
    except BaseException:
        _save(kind, suffix, data)
        raise


def _plan_case(tmp_path: Path, kind: str, suffix: str, data: bytes) -> str:
    path = tmp_path / f"plan{suffix}"
    path.write_bytes(data)
    try:
        try:
            plan = read_plan(path)[0] if kind == "eplb" else read_exported_plan(path)
        except ValueError as exc:
            _check_refusal(exc, path)
            return "refused"
        plan.validate()
        return "read"
    except BaseException:
        _save(kind, suffix, data)
        raise


def _valid_plan_doc() -> dict:
    problem = Problem(torch.tensor([[5.0, 1.0, 3.0, 2.0], [1.0, 1.0, 4.0, 9.0]]), 6, 1, 1, 2)
    res = solve(problem, "deepseek")
    return plan_document(res.plan, problem, policy=res.policy, solver="deepseek", options=res.options,
                         metrics=res.summary(), result=res)


def _routing_case(tmp_path: Path, kind: str, suffix: str, data: bytes) -> str:
    """A routing file through the one routing reader: a refusal is one line naming the file;
    a trace has ids in range, distinct within each token, and loads that sum to tokens x top-k."""
    path = tmp_path / f"routing{suffix}"
    path.write_bytes(data)
    try:
        try:
            trace = read_routing(path)
        except ValueError as exc:
            _check_refusal(exc, path)
            return "refused"
        ids = trace.topk_ids.to(torch.int64)
        assert int(ids.min()) >= 0 and int(ids.max()) < trace.num_experts
        assert trace.top_k == 1 or bool((ids.sort(dim=2).values.diff(dim=2) > 0).all())
        loads = trace.loads()
        assert bool((loads.sum(dim=1) == trace.num_tokens * trace.top_k).all())
        return "read"
    except BaseException:
        _save(kind, suffix, data)
        raise


def _list_case(text: str) -> str:
    """A --gpu-speed/--gpu-slots text (inline and as a file): values, or one line naming the
    parameter that never echoes a file's text; never more than MAX_LIST_VALUES values."""
    try:
        values = per_gpu_values(text, "gpu_speed", files=False)
    except ValueError as exc:
        msg = str(exc)
        assert "\n" not in msg and msg.startswith("gpu_speed:") and len(msg) < 400, msg
        return "refused"
    assert 0 < len(values) <= MAX_LIST_VALUES
    return "read"


def _list_file_case(tmp_path: Path, text: str) -> str:
    path = tmp_path / "speeds.txt"
    path.write_text(text)
    try:
        values = per_gpu_values(str(path), "gpu_slots")
    except ValueError as exc:
        msg = str(exc)
        assert "\n" not in msg and msg.startswith("gpu_slots:") and len(msg) < 400, msg
        bad = [item for item in text.replace("\n", ",").replace(" ", ",").split(",") if len(item) > 3]
        assert not any(item in msg.split(str(path))[-1] for item in bad), f"echoes the file: {msg}"
        return "refused"
    assert 0 < len(values) <= MAX_LIST_VALUES
    return "read"


VALID_PLAN = _valid_plan_doc()
LOADS = {"npz": fs.npz_files(), "megatron": fs.megatron_files(), "pt": fs.pt_files(),
         "json": fs.json_loads_files(), "csv": fs.csv_files(), "safetensors": fs.safetensors_files()}
PLANS = {"eplb": fs.eplb_plan_files(VALID_PLAN), "sglang": fs.sglang_plan_files(),
         "trtllm": fs.trtllm_plan_files(), "csv": fs.csv_plan_files()}


ROUTING = {"npz": fs.routing_npz_files(), "sglang": fs.routing_pt_files(), "megatron": fs.megatron_routing_files(),
           "vllm": fs.vllm_routing_files()}


def _run(strategy, case, kind: str, examples: int, derandomize: bool, tmp_path: Path) -> dict[str, int]:
    """Run ``case(tmp_path, kind, *file)`` on files drawn from ``strategy``; counts of its
    outcomes ("read" or "refused")."""
    seen = {"read": 0, "refused": 0}

    @_settings(examples, derandomize)
    @given(strategy)
    def check(file):
        seen[case(tmp_path, kind, *file)] += 1

    check()
    return seen


def _run_loads(kind: str, examples: int, derandomize: bool, tmp_path: Path) -> dict[str, int]:
    return _run(LOADS[kind], _loads_case, kind, examples, derandomize, tmp_path)


def _run_plans(kind: str, examples: int, derandomize: bool, tmp_path: Path) -> dict[str, int]:
    return _run(PLANS[kind], _plan_case, kind, examples, derandomize, tmp_path)


@pytest.mark.parametrize("kind", list(LOADS))
def test_fuzzed_loads_files_end_in_a_result_or_one_line(kind, tmp_path):
    before = _rss_mb()
    seen = _run_loads(kind, DEFAULT_EXAMPLES, True, tmp_path)
    assert sum(seen.values()) >= DEFAULT_EXAMPLES // 2, seen
    assert _rss_mb() - before < MAX_RSS_GROWTH_MB


@pytest.mark.parametrize("kind", list(PLANS))
def test_fuzzed_plan_files_end_in_a_plan_or_one_line(kind, tmp_path):
    before = _rss_mb()
    seen = _run_plans(kind, DEFAULT_EXAMPLES, True, tmp_path)
    assert sum(seen.values()) >= DEFAULT_EXAMPLES // 2, seen
    assert _rss_mb() - before < MAX_RSS_GROWTH_MB


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(LOADS))
def test_fuzzed_loads_files_large_budget(kind, tmp_path):
    before = _rss_mb()
    _run_loads(kind, SLOW_EXAMPLES, False, tmp_path)
    assert _rss_mb() - before < MAX_RSS_GROWTH_MB


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(PLANS))
def test_fuzzed_plan_files_large_budget(kind, tmp_path):
    before = _rss_mb()
    _run_plans(kind, SLOW_EXAMPLES, False, tmp_path)
    assert _rss_mb() - before < MAX_RSS_GROWTH_MB


def _run_routing(kind: str, examples: int, derandomize: bool, tmp_path: Path) -> dict[str, int]:
    return _run(ROUTING[kind], _routing_case, kind, examples, derandomize, tmp_path)


def _run_lists(examples: int, derandomize: bool, tmp_path: Path) -> dict[str, int]:
    seen = {"read": 0, "refused": 0}

    @_settings(examples, derandomize)
    @given(fs.list_arguments())
    def check(text):
        seen[_list_case(text)] += 1
        _list_file_case(tmp_path, text)

    check()
    return seen


@pytest.mark.parametrize("kind", list(ROUTING))
def test_fuzzed_routing_files_end_in_a_trace_or_one_line(kind, tmp_path):
    before = _rss_mb()
    seen = _run_routing(kind, DEFAULT_EXAMPLES, True, tmp_path)
    assert sum(seen.values()) >= DEFAULT_EXAMPLES // 2, seen
    assert _rss_mb() - before < MAX_RSS_GROWTH_MB


def test_fuzzed_list_arguments_end_in_values_or_one_line(tmp_path):
    before = _rss_mb()
    seen = _run_lists(DEFAULT_EXAMPLES * 3, True, tmp_path)
    assert seen["read"] and seen["refused"], seen
    assert _rss_mb() - before < MAX_RSS_GROWTH_MB


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(ROUTING))
def test_fuzzed_routing_files_large_budget(kind, tmp_path):
    before = _rss_mb()
    _run_routing(kind, SLOW_EXAMPLES, False, tmp_path)
    assert _rss_mb() - before < MAX_RSS_GROWTH_MB


@pytest.mark.slow
def test_fuzzed_list_arguments_large_budget(tmp_path):
    before = _rss_mb()
    _run_lists(SLOW_EXAMPLES, False, tmp_path)
    assert _rss_mb() - before < MAX_RSS_GROWTH_MB
