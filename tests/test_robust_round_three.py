"""Hostile input, round three (docs/robustness.md): the routing readers, list arguments and writers
share the boundary's checks. Unit checks of the pickle scan, the build budget, the list
parser and the writers here; the hostile files themselves are the cases of
``benchmarks/hostile_round_three.py``, run in child processes whose peak RSS (from
``wait4``, not machine-speed dependent) must stay under a ceiling."""
from __future__ import annotations

import io
import os
import pickle
import pickletools

import numpy as np
import pytest
import torch

from benchmarks import hostile_round_three as hostile
from solvers import filecheck
from solvers.cluster import Cluster
from solvers.cluster_text import MAX_LIST_VALUES, per_gpu_values
from solvers.errors import EPLBError, LoadFileError, ProblemError
from solvers.routing import RoutingTrace, read_routing
from solvers.routing.trace import ENTRY_BYTES, max_entries

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ---------------------------------------------------------------------------------------
# The pickle scan

def _scan(obj) -> None:
    filecheck.check_pickle(pickle.dumps(obj, protocol=2), "x.pt")


def test_shared_references_are_counted_expanded():
    row = list(range(256))
    _scan([row] * 100)                                        # 25,600 objects: fine
    with pytest.raises(LoadFileError, match="shared references"):
        _scan([row] * 20000)                                  # 40 KB of pickle, 5 million objects
    data = pickle.dumps([row] * 20000, protocol=2)
    assert len(data) < 50_000
    # refused after a few thousand opcodes, not after walking the whole expansion
    seen = [0]
    real = pickletools.genops

    def counting(d):
        for op in real(d):
            seen[0] += 1
            yield op
    pickletools.genops, old = counting, pickletools.genops
    try:
        with pytest.raises(LoadFileError):
            filecheck.check_pickle(data, "x.pt")
    finally:
        pickletools.genops = old
    assert seen[0] < 60_000


def test_sharing_by_dup_and_nesting_and_cycles_and_globals():
    # DUP then TUPLE2: a pair of the object below, 30 times (a billion laughs without the memo)
    with pytest.raises(LoadFileError, match="shared references"):
        filecheck.check_pickle(b"\x80\x02]" + b"2\x86" * 30 + b".", "x.pt")
    laughs = [1, 2]                                           # the same through the memo
    for _ in range(25):
        laughs = [laughs, laughs]
    with pytest.raises(LoadFileError, match="shared references"):
        _scan(laughs)
    with pytest.raises(LoadFileError, match="deeper than"):
        filecheck.check_pickle(hostile.deep_list_pickle(100), "x.pt")
    cyc = []
    cyc.append(cyc)
    with pytest.raises(LoadFileError, match="cycle"):
        _scan(cyc)
    with pytest.raises(LoadFileError, match="os.system|posix.system"):
        _scan(hostile._Evil())
    with pytest.raises(LoadFileError, match="not a valid pickle"):
        filecheck.check_pickle(b"\x80\x02a.", "x.pt")


def test_real_dumps_pass_the_scan(tmp_path):
    """Tensors viewing one storage, an SGLang-shaped dump, a state dict: accepted."""
    base = torch.arange(64, dtype=torch.int32)
    obj = {"records": [{"topk_ids_of_layer": torch.randint(0, 8, (3, 50, 2), dtype=torch.int32), "rank": r}
                       for r in range(200)],
           "last_physical_to_logical_map": torch.arange(24).view(3, 8),
           "views": [base[i:i + 8] for i in range(0, 56, 8)], "meta": {"a": [1, 2, {"b": None}]}}
    path = tmp_path / "d.pt"
    torch.save(obj, path)
    filecheck.check_torch_file(path)
    assert filecheck.load_torch(path, "routing")["records"][7]["rank"] == 7


def test_views_of_a_larger_storage_are_refused():
    t = torch.arange(1 << 20, dtype=torch.int64)[:16]
    with pytest.raises(LoadFileError, match="view of 128 bytes into a storage"):
        filecheck.check_tensors({"x": t}, "x.pt")
    filecheck.check_tensors({"x": torch.arange(64)[::2]}, "x.pt")       # a strided half: fine


# ---------------------------------------------------------------------------------------
# Budgets in bytes of what is built

def test_the_build_budget_follows_memory_and_the_input(monkeypatch):
    assert 0 < filecheck.memory_budget() <= filecheck.MAX_BUILD_BYTES
    filecheck.check_build("f", 100 << 20, "x", source_bytes=1 << 20)
    with pytest.raises(LoadFileError, match=r"more than 256x"):
        filecheck.check_build("f", 300 << 20, "x", source_bytes=1 << 20)
    monkeypatch.setattr(filecheck, "MAX_BUILD_BYTES", 1 << 20)
    assert filecheck.memory_budget() == 1 << 20
    with pytest.raises(LoadFileError, match="limit 1.0 MiB"):
        filecheck.check_build("f", 2 << 20, "the arrays")


def test_a_trace_holds_what_the_budget_allows(monkeypatch):
    assert max_entries() * ENTRY_BYTES <= filecheck.memory_budget()
    assert max_entries() < 1 << 31 or filecheck.memory_budget() >= (1 << 31) * ENTRY_BYTES
    monkeypatch.setattr(filecheck, "MAX_BUILD_BYTES", 64 * ENTRY_BYTES)
    RoutingTrace(torch.zeros(1, 64, 1, dtype=torch.int32), 4)
    with pytest.raises(ProblemError, match="65 entries|beyond the limits"):
        RoutingTrace(torch.zeros(1, 65, 1, dtype=torch.int32), 4)


def test_a_routing_file_is_sized_before_its_ids_are_built(tmp_path, monkeypatch):
    monkeypatch.setattr(filecheck, "MAX_BUILD_BYTES", 32 << 20)
    path = hostile.routing_npz(tmp_path / "r.npz", np.zeros((1, 2 << 20, 1), np.uint8), '{"num_experts": 4}')
    with pytest.raises(LoadFileError, match="routing entries would take 64.0 MiB"):
        read_routing(path)


# ---------------------------------------------------------------------------------------
# Ids

def test_duplicate_ids_in_one_token_are_refused():
    RoutingTrace(torch.tensor([[[0, 1], [1, 0]]]), 4)
    with pytest.raises(ProblemError, match="layer 0, token 1 chooses expert 2 more than once"):
        RoutingTrace(torch.tensor([[[0, 1], [2, 2]]]), 4)


def test_unsigned_ids_are_reported_as_stored():
    with pytest.raises(ProblemError, match="18446744073709551615"):
        RoutingTrace(np.full((1, 2, 1), 2**64 - 1, np.uint64), 4)
    with pytest.raises(ProblemError, match=r"found 0\.\.4294967295"):
        RoutingTrace(np.array([[[0], [2**32 - 1]]], np.uint32), 4)


# ---------------------------------------------------------------------------------------
# List arguments

def test_repeats_are_capped_before_the_list_is_built():
    assert per_gpu_values("1*4,1.4*2", "gpu_speed") == [1, 1, 1, 1, 1.4, 1.4]
    assert len(per_gpu_values(f"1*{MAX_LIST_VALUES}", "gpu_slots")) == MAX_LIST_VALUES
    for text in (f"1*{MAX_LIST_VALUES},1", "1*65536," * 3000, f"1*{10**18}"):
        with pytest.raises(EPLBError, match=f"gpu_slots: more than {MAX_LIST_VALUES} values"):
            per_gpu_values(text, "gpu_slots")


def test_a_bad_list_file_is_named_by_line_never_echoed(tmp_path):
    path = tmp_path / "speeds.txt"
    path.write_text("1,1\n1 AWS_SECRET=hunter2\n")
    with pytest.raises(EPLBError) as err:
        per_gpu_values(str(path), "gpu_speed")
    assert "line 2, item 2 is not a number" in str(err.value) and "hunter2" not in str(err.value)
    path.write_bytes(b"1,\xff\xfe")
    with pytest.raises(EPLBError, match="gpu_speed: .*not UTF-8 text"):
        per_gpu_values(str(path), "gpu_speed")
    path.write_text("1," * (1 << 20))
    with pytest.raises(EPLBError, match="gpu_speed: .*larger than"):
        per_gpu_values(str(path), "gpu_speed")


def test_long_arguments_and_fifos_name_the_parameter(tmp_path):
    with pytest.raises(EPLBError, match=r"^gpu_speed: '/ddd.*\(5001 characters\) is not a number"):
        per_gpu_values("/" + "d" * 5000, "gpu_speed")
    assert per_gpu_values("1," * 3000, "gpu_speed") == [1] * 3000       # a long list is a list
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(EPLBError, match="gpu_slots: .*not a regular file"):
        per_gpu_values(str(fifo), "gpu_slots")
    with pytest.raises(LoadFileError, match="FIFO"):
        filecheck.input_file(fifo, "routing")
    with pytest.raises(LoadFileError, match="too long"):
        filecheck.input_file("x" * 5000, "routing")


def test_a_mapping_is_not_a_per_gpu_list():
    with pytest.raises(ProblemError, match="gpu_slots: must be 4 numbers, one per GPU, got dict"):
        Cluster(1, 4, gpu_slots={3: 1, 4: 1, 5: 1, 6: 1})
    with pytest.raises(ProblemError, match="gpu_speed"):
        Cluster(1, 2, 4, gpu_speed={1.0, 2.0})


# ---------------------------------------------------------------------------------------
# The hostile files, in child processes: one line, exit 2, bounded memory and time

DEFAULT_CASES = [".npz of 60M ids deflated 70x (0.9 MB)", ".pt shared rows (41 KB, one list referenced 20,000 times)",
                 "--gpu-speed file of 1*65536 x 10,000 (160 KB to 655M values)",
                 "score --out .csv over the user's file, writing fails (file size limit)"]
BY_NAME = {c.name: c for c in hostile.CASES}


def _check(case):
    out = hostile.run_case(case, ROOT, timeout=120)
    assert not out.problems and not out.notes, (case.name, out.problems, out.notes, out.stderr[-1500:])
    assert out.rss_mb < hostile.RSS_CEILING_MB


@pytest.mark.parametrize("name", DEFAULT_CASES)
def test_hostile_files_in_a_child_process(name):
    _check(BY_NAME[name])


@pytest.mark.slow
@pytest.mark.parametrize("name", [c.name for c in hostile.CASES if c.name not in DEFAULT_CASES])
def test_every_hostile_case_in_a_child_process(name):
    _check(BY_NAME[name])
