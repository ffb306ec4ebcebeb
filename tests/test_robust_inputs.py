"""Hostile input through the library: size caps, bounded JSON nesting, bounded-memory CSV,
declared .npz sizes, misuse raising the project's ValueErrors naming the parameter."""
import io
import json
import random
import zipfile

import numpy as np
import pytest
import torch

from solvers import Problem, rebalance_experts, safejson
from solvers.errors import LoadFileError, OptionError, ProblemError
from solvers.cluster import MAX_REPLICAS
from solvers.problem import MAX_LAYERS
from solvers.workloads import importers
from solvers.workloads.generators import generate
from solvers.workloads.importers import read_raw as read_loads


# ----------------------------------------------------------------- size caps

@pytest.mark.parametrize("value", [10**7, 10**18, 10**30, MAX_REPLICAS + 1])
def test_replicas_beyond_the_cap_are_refused_at_once(value):
    with pytest.raises(ProblemError, match="^num_replicas: must be <= 65536"):
        Problem(torch.ones(2, 4), value, 1, 1, 2)
    with pytest.raises(ProblemError, match="^num_replicas"):
        rebalance_experts(torch.ones(2, 4), value, 1, 1, 2)


@pytest.mark.parametrize("param", ["num_groups", "num_nodes", "num_gpus"])
def test_other_sizes_are_capped_too(param):
    kw = dict(num_replicas=8, num_groups=1, num_nodes=1, num_gpus=2)
    kw[param] = 10**20
    with pytest.raises(ProblemError, match=f"^{param}: must be <="):
        Problem(torch.ones(2, 4), **kw)


def test_the_cap_itself_is_served():
    p = Problem(torch.rand(1, 64), MAX_REPLICAS, 1, 1, 64)
    assert p.num_replicas == MAX_REPLICAS


def test_too_many_layers_are_refused():
    with pytest.raises(ProblemError, match="^weights: at most"):
        Problem(torch.ones(MAX_LAYERS + 1, 2), 2, 1, 1, 1)


@pytest.mark.parametrize("index", ["a", 1.5, True, None])
def test_layer_index_must_be_an_integer(index):
    with pytest.raises(ProblemError, match="^layer: must be an integer"):
        Problem(torch.ones(2, 4), 4, 1, 1, 2).layer(index)


def test_meta_device_weights_are_refused():
    with pytest.raises(ProblemError, match="^weights: must hold data"):
        Problem(torch.ones(2, 4, device="meta"), 4, 1, 1, 2)


@pytest.mark.parametrize("kw,param", [(dict(steps=10**9), "steps"), (dict(tokens_per_step=2**62), "tokens_per_step"),
                                      (dict(num_layers=99999), "num_layers"), (dict(steps=100000), "steps")])
def test_generate_refuses_before_any_work(kw, param):
    with pytest.raises(OptionError, match=f"^{param}"):
        generate("deepseek-v3", "mild", **kw)


# ----------------------------------------------------------------- JSON nesting

def _depth(obj) -> int:
    if isinstance(obj, (list, dict)):
        values = obj.values() if isinstance(obj, dict) else obj
        return 1 + max((_depth(v) for v in values), default=0)
    return 0


def _random_doc(rng, level=0):
    r = rng.random()
    if level > 7 or r < 0.3:
        return rng.choice(['a"[b', "\\\\", '\\"{', 1, 2.5, None, "}]", 'x\\\\"', "\u00e9]"])
    if r < 0.65:
        return [_random_doc(rng, level + 1) for _ in range(rng.randint(0, 3))]
    return {rng.choice(["k", "[", '\\"', "{"]) + str(i): _random_doc(rng, level + 1) for i in range(rng.randint(0, 3))}


def test_depth_scan_matches_the_parsed_document_whatever_the_chunking(monkeypatch):
    rng = random.Random(7)
    for _ in range(400):
        doc = _random_doc(rng)
        data = json.dumps(doc, ensure_ascii=False).encode()
        monkeypatch.setattr(safejson, "_CHUNK", rng.randint(1, 9))
        assert safejson.check_depth(io.BytesIO(data), 1000) == _depth(doc), data


def test_deep_documents_are_refused_without_recursion(tmp_path):
    deep = "[" * 100_000 + "]" * 100_000
    with pytest.raises(safejson.JSONDepthError):
        safejson.loads(deep)
    path = tmp_path / "deep.json"
    path.write_text('{"load_history": [{"logical_expert_load": ' + deep + "}]}")
    with pytest.raises(LoadFileError, match="nested deeper"):
        read_loads(path)
    assert safejson.loads('[[1, 2], {"a": "]]]]"}]') == [[1, 2], {"a": "]]]]"}]


# ----------------------------------------------------------------- CSV in blocks

def test_csv_read_in_small_blocks_gives_the_same_loads(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    loads = rng.integers(0, 1000, (3, 4, 6))
    long_csv = tmp_path / "long.csv"
    long_csv.write_text("layer,expert,load,step\n" + "".join(
        f"{l},{e},{loads[s, l, e]},{s}\n" for s in range(3) for l in range(4) for e in range(6)))
    matrix = tmp_path / "m.csv"
    matrix.write_text(",0,1,2,3,4,5\n" + "".join(f"{l}," + ",".join(map(str, loads[0, l])) + "\n" for l in range(4)))
    whole_long, whole_matrix = read_loads(long_csv)[0], read_loads(matrix)[0]
    assert torch.equal(whole_long, torch.from_numpy(loads))
    assert torch.equal(whole_matrix, torch.from_numpy(loads[0]))
    for block in (1, 7, 50):
        monkeypatch.setattr(importers, "_CSV_BLOCK_CHARS", block)
        assert torch.equal(read_loads(long_csv)[0], whole_long)
        assert torch.equal(read_loads(matrix)[0], whole_matrix)


# ----------------------------------------------------------------- .npz headers

def _npz_declaring(path, shape, descr="<f8", data=b"\0" * 64):
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": descr, "fortran_order": False, "shape": shape})
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("loads.npy", header.getvalue() + data)
    return path


@pytest.mark.parametrize("shape", [(100_000, 100_000), (2**40, 2**40), (9,)])
def test_npz_declaring_more_than_it_holds_is_refused_before_allocating(tmp_path, shape):
    with pytest.raises(LoadFileError, match="header declares"):
        read_loads(_npz_declaring(tmp_path / "x.npz", shape))


def test_npz_declaring_what_it_holds_is_read(tmp_path):
    arr = np.arange(8, dtype="<f8").reshape(2, 4)
    loads = read_loads(_npz_declaring(tmp_path / "x.npz", (2, 4), data=arr.tobytes()))[0]
    assert loads.tolist() == arr.tolist()
