"""The field's traces, read wherever loads are read: the ADRS / OpenEvolve EPLB benchmark's
``expert-load.json``, TensorRT-LLM's expert statistic dumps and vLLM's saved EPLB load
windows (with per-layer slot maps). Each file is built here in its engine's layout from
token routings drawn at random, and must read back to exactly the counts it was built from."""
from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from solvers.cli import main
from solvers.errors import LoadFileError
from solvers.io import read_loads
from solvers.workloads.importers import read_slot_map, read_weights
from solvers.workloads.safetensors_file import read_header, read_tensors


def write_tensors(path: str | Path, tensors: dict[str, torch.Tensor], metadata: dict[str, str] | None = None) -> None:
    """Write ``tensors`` (contiguous CPU tensors) as a ``.safetensors`` file: the layout
    TensorRT-LLM and vLLM write with ``safetensors.torch.save_file`` (the engines' files, for the tests)."""
    names = {torch.int8: "I8", torch.int16: "I16", torch.int32: "I32", torch.int64: "I64", torch.uint8: "U8",
             torch.float16: "F16", torch.bfloat16: "BF16", torch.float32: "F32", torch.float64: "F64"}
    header: dict = {"__metadata__": dict(metadata)} if metadata else {}
    blobs, offset = [], 0
    for name, t in tensors.items():
        data = t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": names[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)                       # the format pads the header to 8 bytes
    Path(path).write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def routed_counts(rng: np.random.Generator, tokens: int, experts: int, top_k: int) -> np.ndarray:
    """[experts] how many of ``tokens`` tokens chose each expert among their top_k (a skewed
    router: a few hot experts), as an engine's bincount of its token_selected_experts."""
    popularity = rng.dirichlet(np.full(experts, 0.3))
    chosen = np.stack([rng.choice(experts, size=top_k, replace=False, p=popularity) for _ in range(tokens)])
    return np.bincount(chosen.reshape(-1), minlength=experts)


# ---------------------------------------------------------------------------------------
# ADRS / OpenEvolve expert-load.json

def write_expert_load_json(path: Path, steps: int, layers: int, experts: int, seed: int = 0) -> np.ndarray:
    """The benchmark's file: {"load_history": [{"logical_expert_load": [[count per expert] per
    layer]}, ...]}, one entry per step (json.dump, as the benchmark's collector writes it).
    Returns the counts [steps, layers, experts]."""
    rng = np.random.default_rng(seed)
    drift = np.linspace(0.0, 1.0, steps)[:, None, None]
    base = rng.dirichlet(np.full(experts, 0.4), size=layers)                  # [layers, experts]
    later = rng.dirichlet(np.full(experts, 0.4), size=layers)
    p = (1 - drift) * base + drift * later                                     # drifting popularity
    counts = np.stack([[rng.multinomial(512, p[t, l]) for l in range(layers)] for t in range(steps)])
    path.write_text(json.dumps({"load_history": [{"logical_expert_load": step.tolist()} for step in counts]}))
    return counts


def test_expert_load_json_reads_step_by_step(tmp_path):
    counts = write_expert_load_json(tmp_path / "expert-load.json", steps=30, layers=2, experts=16)
    loads = read_loads(tmp_path / "expert-load.json")
    assert loads.format == "vllm"
    assert torch.equal(loads.trace, torch.from_numpy(counts))
    window = read_loads(f"{tmp_path / 'expert-load.json'}@10:20")
    assert torch.equal(window.weights.to(torch.int64), torch.from_numpy(counts[10:20].sum(0)))


# ---------------------------------------------------------------------------------------
# TensorRT-LLM expert statistics

def write_trtllm_statistics(root: Path, iters: range, layers: list[int], experts: int, ranks: int,
                            top_k: int = 4, seed: int = 0) -> np.ndarray:
    """What TensorRT-LLM writes with EXPERT_STATISTIC_PATH=root and EXPERT_STATISTIC_ITER_RANGE
    covering ``iters``: meta_info.json (rank 0), and per rank rank<N>.safetensors of int32
    counts named "{iteration}_{layer}", plus the co-occurrence and raw-token files some
    versions write beside them (not counts). Returns the counts summed over ranks
    [iterations, layers, experts]."""
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    total = np.zeros((len(iters), len(layers), experts), dtype=np.int64)
    for rank in range(ranks):
        counts, cooc = {}, {}
        for i, it in enumerate(iters):
            for j, layer in enumerate(layers):
                c = routed_counts(rng, int(rng.integers(16, 48)), experts, top_k)
                counts[f"{it}_{layer}"] = torch.from_numpy(c.astype(np.int32))
                cooc[f"{it}_{layer}"] = torch.ones(experts, experts, dtype=torch.int32)
                total[i, j] += c
        write_tensors(root / f"rank{rank}.safetensors", counts)
        write_tensors(root / f"cooccurrence_rank{rank}.safetensors", cooc)
        write_tensors(root / f"rank{rank}_raw.safetensors",
                      {k: torch.zeros(3, top_k, dtype=torch.int32) for k in counts})
    (root / "meta_info.json").write_text(json.dumps({"num_experts": experts, "num_experts_per_token": top_k}))
    return total


def test_trtllm_statistics_directory_sums_the_ranks(tmp_path):
    iters, layers = range(50, 62), [3, 4, 5]
    total = write_trtllm_statistics(tmp_path / "expert_statistic", iters, layers, experts=32, ranks=4)
    loads = read_loads(tmp_path / "expert_statistic")
    assert loads.format == "trtllm"
    assert torch.equal(loads.trace, torch.from_numpy(total))
    assert loads.meta["layer_numbers"] == layers and loads.meta["iterations"] == [50, 62]
    assert loads.meta["ranks"] == 4 and loads.meta["top_k"] == 4
    # one rank's file alone (an upload: no meta_info.json) is that rank's counts
    one = read_loads((tmp_path / "expert_statistic" / "rank2.safetensors").read_bytes(), name="rank2.safetensors")
    assert one.format == "trtllm" and one.trace.shape == (12, 3, 32)
    # a glob of the count files, and the windows of iterations
    glob = read_loads(f"{tmp_path}/expert_statistic/rank*.safetensors@2:5")
    assert torch.equal(glob.trace, torch.from_numpy(total[2:5]))
    assert torch.equal(read_weights(tmp_path / "expert_statistic").to(torch.int64), torch.from_numpy(total.sum(0)))


def test_trtllm_statistics_refusals_name_the_file(tmp_path):
    root = tmp_path / "s"
    write_trtllm_statistics(root, range(10, 13), [0, 1], experts=8, ranks=1)
    # an iteration missing in the middle: TensorRT-LLM's reader asserts consecutive iterations
    counts = read_tensors(root / "rank0.safetensors")
    del counts["11_0"], counts["11_1"]
    write_tensors(root / "rank0.safetensors", counts)
    with pytest.raises(LoadFileError, match=r"rank0\.safetensors: iterations 10\.\.12 are not consecutive"):
        read_loads(root)
    # an (iteration, layer) missing
    del counts["12_1"]
    counts["11_0"] = torch.ones(8, dtype=torch.int32)
    counts["11_1"] = torch.ones(8, dtype=torch.int32)
    write_tensors(root / "rank0.safetensors", counts)
    with pytest.raises(LoadFileError, match="iteration 12 has no counts for layer 1"):
        read_loads(root)
    # a count vector of the wrong length for meta_info.num_experts
    counts["12_1"] = torch.ones(7, dtype=torch.int32)
    write_tensors(root / "rank0.safetensors", counts)
    with pytest.raises(LoadFileError, match=r"counts 7 experts, expected 8 \(meta_info.num_experts\)"):
        read_loads(root)


# ---------------------------------------------------------------------------------------
# vLLM saved EPLB load windows and slot maps

def test_vllm_eplb_windows_are_ordered_by_their_index(tmp_path):
    rng = np.random.default_rng(1)
    wins = {i: torch.from_numpy(np.stack([routed_counts(rng, 200, 16, 2) for _ in range(3)]).astype(np.float32))
            for i in (0, 1, 2, 10)}
    for i, w in wins.items():            # vLLM's save_load_window files: global_expert_load_window_i<N>
        write_tensors(tmp_path / f"global_expert_load_window_i{i}.safetensors", {"global_expert_load_window": w})
    loads = read_loads(tmp_path)
    assert loads.format == "vllm_eplb" and loads.meta["windows"] == 4
    expected = torch.stack([wins[i] for i in (0, 1, 2, 10)]).to(torch.int64)     # i10 after i2, not after i1
    assert torch.equal(loads.trace, expected)


def test_vllm_physical_window_is_mapped_by_the_slot_map(tmp_path):
    """A window over physical slots and vLLM's per-layer slot map (JSON, one list per layer, as
    its offline EPLB reads it): each logical expert's load is the sum of its slots'."""
    L, E, R = 2, 8, 12
    rng = np.random.default_rng(2)
    p2l = np.stack([np.concatenate([rng.permutation(E), rng.choice(E, R - E, replace=False)]) for _ in range(L)])
    physical = rng.integers(0, 100, size=(5, L, R))
    write_tensors(tmp_path / "global_expert_load_window_i0.safetensors",
                  {"expert_load_window": torch.from_numpy(physical)})
    (tmp_path / "expert_map.json").write_text(json.dumps(p2l.tolist()))
    loads = read_loads(tmp_path)
    expected = np.zeros((5, L, E), dtype=np.int64)
    for l in range(L):
        for r in range(R):
            expected[:, l, p2l[l, r]] += physical[:, l, r]
    assert torch.equal(loads.trace, torch.from_numpy(expected))
    # the map stored in the file itself gives the same; a shared list applies to every layer
    write_tensors(tmp_path / "in_file.safetensors", {"expert_load_window": torch.from_numpy(physical),
                                                    "physical_to_logical_map": torch.from_numpy(p2l)})
    assert torch.equal(read_loads(tmp_path / "in_file.safetensors").trace, loads.trace)
    (tmp_path / "shared.json").write_text(json.dumps(p2l[0].tolist()))
    assert read_slot_map(tmp_path / "shared.json", 3).tolist() == [p2l[0].tolist()] * 3


# ---------------------------------------------------------------------------------------
# The guarded .safetensors reader

def test_safetensors_reader_reads_the_format_as_specified(tmp_path):
    """A file built byte by byte from the format's definition (u64 header length, JSON header,
    little-endian data), independent of our writer."""
    a = np.array([[1, 2, 3], [4, 5, 6]], dtype="<i4").tobytes()
    b = np.array([0.5, 2.0], dtype="<f8").tobytes()
    header = json.dumps({"__metadata__": {"format": "pt"},
                         "b": {"dtype": "F64", "shape": [2], "data_offsets": [len(a), len(a) + len(b)]},
                         "a": {"dtype": "I32", "shape": [2, 3], "data_offsets": [0, len(a)]}}).encode()
    (tmp_path / "x.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + a + b)
    tensors, meta, _ = read_header(tmp_path / "x.safetensors")
    assert meta == {"format": "pt"} and tensors["a"]["shape"] == (2, 3)
    got = read_tensors(tmp_path / "x.safetensors")
    assert got["a"].tolist() == [[1, 2, 3], [4, 5, 6]] and got["b"].tolist() == [0.5, 2.0]


@pytest.mark.parametrize("header, data, message", [
    (b'{"a": {"dtype": "I32", "shape": [2], "data_offsets": [0, 12]}}', bytes(8), "do not hold its 8 bytes"),
    (b'{"a": {"dtype": "BOOL", "shape": [2], "data_offsets": [0, 2]}}', bytes(2), "cannot hold loads"),
    (b'{"a": {"dtype": "I32", "shape": [-1], "data_offsets": [0, 4]}}', bytes(4), "list of at most 8 sizes"),
    (b'{"a": {"dtype": "I32", "shape": [1], "data_offsets": [0, 4]}, '
     b'"b": {"dtype": "I32", "shape": [1], "data_offsets": [0, 4]}}', bytes(4), "overlapping"),
    (b'{"a": {"dtype": "I64", "shape": [4294967296], "data_offsets": [0, 8]}}', bytes(8), "declares 34359738368 bytes"),
    (b'{"a": ', b"", "header is not JSON"),
])
def test_safetensors_forgeries_are_one_line(tmp_path, header, data, message):
    path = tmp_path / "rank0.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header + data)
    with pytest.raises(LoadFileError, match=message) as err:
        read_loads(path)
    assert "\n" not in str(err.value) and "rank0.safetensors" in str(err.value)


def test_header_longer_than_the_file_is_refused_before_reading(tmp_path):
    path = tmp_path / "w.safetensors"
    path.write_bytes(struct.pack("<Q", 2**40) + b"{}")
    with pytest.raises(LoadFileError, match="header claims 1099511627776 bytes"):
        read_loads(path)


def test_cli_plans_on_each_format(tmp_path, capsys):
    """`eplb plan` reads every new format through the same --loads."""
    write_trtllm_statistics(tmp_path / "trt", range(0, 4), [1, 2], experts=16, ranks=2)
    write_expert_load_json(tmp_path / "expert-load.json", steps=4, layers=2, experts=16)
    write_tensors(tmp_path / "global_expert_load_window_i0.safetensors",
                  {"global_expert_load_window": torch.arange(32, dtype=torch.float32).reshape(2, 16)})
    for spec in (tmp_path / "trt", tmp_path / "expert-load.json",
                 tmp_path / "global_expert_load_window_i0.safetensors"):
        rc = main(["plan", "--loads", str(spec), "--replicas", "20", "--gpus", "4", "--out", str(tmp_path / "p.json")])
        assert rc == 0, capsys.readouterr().err
        assert json.loads((tmp_path / "p.json").read_text())["problem"]["num_experts"] == 16
