"""Importers on fixtures written from the formats' descriptions; bad files give clear errors."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from fixtures_workloads import (E, R, ground_truth, replicated_phy2log, split_over_replicas,
                                write_long_csv, write_megatron, write_sglang_per_pass,
                                write_sglang_stat, write_vllm_history)
from solvers.errors import EPLBError, LoadFileError
from solvers.io import read_loads as read_loads_spec


def cli_read_weights(spec):
    """weights [layers, experts] of a --loads spec, as every command reads them (solvers.io)."""
    return read_loads_spec(spec).weights


def read_array(spec):
    """The loads of a --loads spec, steps kept: [steps, layers, experts], or [layers, experts]."""
    loads = read_loads_spec(spec)
    return loads.weights if loads.matrix else loads.trace


from solvers.workloads import (Trace, detect_format, generate, iter_vllm_steps, read_trace,  # noqa: E402
                               read_weights, save_trace, write_trace)
from solvers.workloads.importers import read_raw as read_loads  # noqa: E402  (loads as stored, the format level)


@pytest.fixture(scope="module")
def truth():
    return ground_truth(steps=12)                                   # [12, 58, 256]


def expect_error(fragment, fn, *args, **kwargs):
    with pytest.raises(LoadFileError) as err:
        fn(*args, **kwargs)
    assert err.value.param == "loads"
    assert fragment in str(err.value), str(err.value)
    assert "\n" not in str(err.value)
    return err.value


# ---------------------------------------------------------------- SGLang

def test_sglang_stat_dump(tmp_path, truth):
    path = write_sglang_stat(tmp_path / "expert_distribution_recorder_1.pt", truth)
    assert detect_format(path) == "sglang"
    tr = read_trace(path)
    assert torch.equal(tr.loads, truth) and tr.meta["format"] == "sglang"
    assert torch.equal(read_weights(path), truth.sum(0))


def test_split_fixture_is_exact(truth):
    p2l = replicated_phy2log(truth.shape[1])
    phys = split_over_replicas(truth, p2l)
    back = torch.zeros_like(truth).scatter_add_(2, p2l.expand(truth.shape[0], *p2l.shape), phys)
    assert torch.equal(back, truth)


def test_sglang_per_pass_dumps_of_all_ranks_map_back_to_logical(tmp_path, truth):
    p2l = replicated_phy2log(truth.shape[1])
    paths = write_sglang_per_pass(tmp_path / "dump", truth, p2l)
    tr = read_trace(tmp_path / "dump")                              # a directory of per-rank files
    assert tuple(tr.loads.shape) == tuple(truth.shape)
    assert torch.equal(tr.loads, truth)
    assert torch.equal(read_trace(str(tmp_path / "dump" / "*.pt")).loads, truth)      # a glob
    # One rank alone sees only its own slots: less than the whole.
    part = read_trace(paths[0]).loads
    assert int(part.sum()) < int(truth.sum())


def test_sglang_per_pass_errors(tmp_path, truth):
    small = truth[:2, :3]
    p2l = replicated_phy2log(3)
    paths = write_sglang_per_pass(tmp_path / "d", small, p2l)
    obj = torch.load(paths[1], weights_only=True)
    obj["last_physical_to_logical_map"] = replicated_phy2log(3, seed=9)
    torch.save(obj, paths[1])
    expect_error("differs", read_trace, tmp_path / "d")

    obj = torch.load(paths[0], weights_only=True)
    del obj["last_physical_to_logical_map"]
    torch.save(obj, tmp_path / "nomap.pt")
    expect_error("last_physical_to_logical_map", read_trace, tmp_path / "nomap.pt")

    obj = torch.load(paths[2], weights_only=True)
    obj["records"][1]["global_physical_count"] = torch.zeros(3, R - 1, dtype=torch.int32)
    torch.save(obj, tmp_path / "shape.pt")
    expect_error("global_physical_count", read_trace, tmp_path / "shape.pt")

    obj["records"][1]["global_physical_count"] = torch.zeros(3, R, dtype=torch.int32)
    obj["last_physical_to_logical_map"] = torch.full((3, R), E + 5)
    torch.save(obj, tmp_path / "ids.pt")
    expect_error("outside", read_sglang_with_experts, tmp_path / "ids.pt")

    torch.save({"logical_count": torch.zeros(3, 4)}, tmp_path / "two_d_ok.pt")
    assert read_trace(tmp_path / "two_d_ok.pt").num_steps == 1
    torch.save({"logical_count": torch.zeros(2, 3, 4, 5)}, tmp_path / "four_d.pt")
    expect_error("[steps, layers, experts]", read_trace, tmp_path / "four_d.pt")


def read_sglang_with_experts(path):
    from solvers.workloads.importers import read_sglang

    return read_sglang(path, num_experts=E)


# ---------------------------------------------------------------- vLLM JSON

def test_vllm_history_streamed(tmp_path, truth):
    path = write_vllm_history(tmp_path / "eplb_history.json", truth, indent=1)
    assert detect_format(path) == "vllm"
    tr = read_trace(path)
    assert torch.equal(tr.loads, truth) and tr.meta["format"] == "vllm"
    steps = list(iter_vllm_steps(path))
    assert len(steps) == 12 and steps[3].shape == (58, 256)
    assert torch.equal(read_weights(path), truth.sum(0))           # summed while streaming
    # The library's writer produces the same content.
    ours = write_trace(Trace(truth), tmp_path / "ours.json")
    assert torch.equal(read_trace(ours).loads, truth)


def test_vllm_fractional_loads_are_kept(tmp_path):
    doc = {"load_history": [{"logical_expert_load": [[0.5, 1.0], [2.0, 3.25]]},
                            {"logical_expert_load": [[1, 2], [3, 4]]}]}
    path = tmp_path / "h.json"
    path.write_text(json.dumps(doc))
    loads, _ = read_loads(path)
    assert loads.dtype == torch.float64 and float(loads.sum()) == 16.75
    expect_error("fractional", read_trace, path)
    assert float(read_weights(path)[1, 1]) == 7.25


@pytest.mark.parametrize("text,fragment", [
    ('{"load_history": [{"logical_expert_load": [[1, 2], [3]]}]}', "rectangular"),
    ('{"load_history": [{"logical_expert_load": [[1, 2], [3, 4]]}, {"logical_expert_load": [[1, 2, 3]]}]}',
     "step 0 has"),
    ('{"load_history": [{"logical_expert_load": [[1, -2]]}]}', ">= 0"),
    ('{"load_history": [{"logical_expert_load": [["a", "b"]]}]}', "numeric"),
    ('{"load_history": [{"other": 1}]}', "no 'logical_expert_load'"),
    ('{"load_history": []}', "missing or empty"),
    ('{"load_history": [{"logical_expert_load": [1, 2]}]}', "[layers, experts]"),
])
def test_vllm_malformed(tmp_path, text, fragment):
    path = tmp_path / "bad.json"
    path.write_text(text)
    expect_error(fragment, read_trace, path)


def test_vllm_truncated_file(tmp_path, truth):
    path = write_vllm_history(tmp_path / "h.json", truth[:4])
    data = path.read_bytes()
    path.write_bytes(data[: len(data) * 2 // 3])
    err = expect_error("truncated", read_trace, path)
    assert "after step" in str(err)
    expect_error("truncated", read_weights, path)


# ---------------------------------------------------------------- Megatron

def test_megatron_per_rank_npz_summed_over_ranks(tmp_path, truth):
    paths = write_megatron(tmp_path / "meg", truth, ep_size=8, pp_size=2, first_layer=4)
    assert len(paths) == 16 and detect_format(paths[0]) == "megatron"
    tr = read_trace(tmp_path / "meg")
    assert torch.equal(tr.loads, truth)
    assert tr.meta["layer_numbers"] == list(range(4, 4 + 58))


def test_megatron_physical_to_logical(tmp_path):
    loads = torch.tensor([[[1, 2, 3], [4, 5, 6]]])                  # [1 layer, 2 forwards, 3 physical]
    np.savez(tmp_path / "r0.npz", loads=loads.numpy(), ep_rank=0, ep_size=1, layer_numbers=np.array([1]),
             physical_to_logical_map=np.array([[0, 1, 0]]))
    tr = read_trace(tmp_path / "r0.npz")
    assert tr.loads.tolist() == [[[4, 2]], [[10, 5]]]


def test_megatron_errors(tmp_path, truth):
    small = truth[:3, :4, :16]
    d = tmp_path / "m"
    paths = write_megatron(d, small, ep_size=4, pp_size=1)
    paths[2].unlink()
    expect_error("lacks ep_rank(s) [2]", read_trace, d)

    d2 = tmp_path / "m2"
    paths = write_megatron(d2, small, ep_size=4, pp_size=1)
    a = dict(np.load(paths[1]))
    a["ep_rank"] = np.int64(0)
    np.savez(paths[1], **a)
    expect_error("also in", read_trace, d2)

    a["ep_rank"], a["ep_size"] = np.int64(1), np.int64(8)
    np.savez(paths[1], **a)
    expect_error("ep_size 8 differs", read_megatron_sorted, d2)

    a["ep_size"] = np.int64(4)
    a["loads"] = a["loads"][:, :2]
    np.savez(paths[1], **a)
    expect_error("forwards", read_trace, d2)

    a["ep_rank"] = np.int64(7)
    np.savez(tmp_path / "rank.npz", **a)
    expect_error("outside", read_trace, tmp_path / "rank.npz", format="megatron")
    np.savez(tmp_path / "partial.npz", loads=a["loads"], ep_rank=0, ep_size=1)
    expect_error("missing layer_numbers", read_trace, tmp_path / "partial.npz", format="megatron")


def read_megatron_sorted(d):
    return read_trace(sorted(d.iterdir()))


# ---------------------------------------------------------------- CSV, npz, pt, json

def test_csv_long_form_with_and_without_steps(tmp_path, truth):
    small = truth[:3, :5]
    tr = read_trace(write_long_csv(tmp_path / "long.csv", small))
    assert torch.equal(tr.loads, small)
    w, _ = read_loads(write_long_csv(tmp_path / "one.csv", small[:1], with_step=False))
    assert torch.equal(w, small[0])
    # Absent pairs are zero; extra columns and another column order are fine.
    (tmp_path / "sparse.csv").write_text("expert,note,layer,count\n3,x,1,7\n0,y,0,2\n")
    assert read_loads(tmp_path / "sparse.csv")[0].tolist() == [[2, 0, 0, 0], [0, 0, 0, 7]]


def test_csv_matrix_with_header(tmp_path):
    (tmp_path / "m.csv").write_text("e0,e1,e2\n1,2,3\n4.5,5,6\n")
    w, _ = read_loads(tmp_path / "m.csv")
    assert w.dtype == torch.float64 and w.tolist() == [[1, 2, 3], [4.5, 5, 6]]
    (tmp_path / "i.csv").write_text("1,2,3\n4,5,6\n")
    assert read_loads(tmp_path / "i.csv")[0].dtype == torch.int64


@pytest.mark.parametrize("text,fragment", [
    ("layer,expert,load\n0,0,1\n0,0,2\n", "appears twice"),
    ("layer,expert,load\n0,1.5,1\n", "integers >= 0"),
    ("layer,expert,load\n-1,0,1\n", "integers >= 0"),
    ("layer,expert,weight\n0,0,1\n", "load column"),
    ("layer,expert,load\n0,0\n", "short row"),
    ("layer,expert,load\n", "no rows"),
    ("1,2,3\n4,5\n", "different lengths"),
    ("1,2,3\n4,x,6\n", "non-numeric"),
    ("", "empty"),
    ("1,2\n3,-4\n", ">= 0"),
])
def test_csv_malformed(tmp_path, text, fragment):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    expect_error(fragment, read_loads, path)


def test_npz_and_pt_traces_keep_their_meta(tmp_path):
    tr = generate("olmoe-1b-7b", "bursty", steps=30, seed=2)
    for suffix in (".npz", ".pt"):
        back = read_trace(save_trace(tr, tmp_path / f"t{suffix}"))
        assert torch.equal(back.loads, tr.loads)
        assert back.meta["scenario"] == "bursty" and back.meta["seed"] == 2
        assert back.meta["params"] == tr.meta["params"]


def test_generic_arrays(tmp_path):
    w = np.arange(24).reshape(2, 12)
    np.savez(tmp_path / "w.npz", weights=w, other=w)
    assert read_loads(tmp_path / "w.npz")[0].tolist() == w.tolist()
    torch.save(torch.from_numpy(w), tmp_path / "w.pt")
    assert read_loads(tmp_path / "w.pt")[0].tolist() == w.tolist()
    (tmp_path / "w.json").write_text(json.dumps({"loads": w.tolist()}))
    assert read_loads(tmp_path / "w.json")[0].dtype == torch.int64


def test_corrupt_and_mismatched_binary_files(tmp_path):
    (tmp_path / "junk.npz").write_bytes(b"PK\x03\x04 not really a zip")
    expect_error("npz", read_loads, tmp_path / "junk.npz")
    tr = generate("olmoe-1b-7b", "mild", steps=4)
    path = save_trace(tr, tmp_path / "t.pt")
    data = path.read_bytes()
    (tmp_path / "cut.pt").write_bytes(data[: len(data) // 2])
    expect_error("cannot read .pt", read_loads, tmp_path / "cut.pt")
    torch.save({"a": torch.zeros(2, 2), "b": torch.zeros(2, 2)}, tmp_path / "two.pt")
    expect_error("no array named", read_loads, tmp_path / "two.pt")
    torch.save({"loads": torch.zeros(2, 3, dtype=torch.complex64)}, tmp_path / "c.pt")
    expect_error("real numbers", read_loads, tmp_path / "c.pt")
    torch.save({"loads": torch.zeros(2, 3, 4, 5)}, tmp_path / "4d.pt")
    expect_error("got shape", read_loads, tmp_path / "4d.pt")
    np.savez(tmp_path / "f.npz", loads=np.full((2, 3), 0.5))
    expect_error("fractional", read_trace, tmp_path / "f.npz")


class Unsafe:
    """Loading an instance would run unpickling code: weights_only refuses it."""


def test_pickled_objects_are_refused(tmp_path):
    torch.save({"loads": torch.zeros(2, 2), "x": Unsafe()}, tmp_path / "evil.pt")
    expect_error("cannot read .pt", read_loads, tmp_path / "evil.pt")


def test_missing_paths_and_multiple_files(tmp_path):
    expect_error("no such file", read_loads, tmp_path / "nope.npz")
    expect_error("no file matches", read_loads, str(tmp_path / "*.pt"))
    (tmp_path / "empty").mkdir()
    expect_error("no files", read_loads, tmp_path / "empty")
    np.savez(tmp_path / "a.npz", loads=np.ones((2, 2)))
    np.savez(tmp_path / "b.npz", loads=np.ones((2, 2)))
    expect_error("2 files given", read_loads, [tmp_path / "a.npz", tmp_path / "b.npz"])
    with pytest.raises(LoadFileError, match="format"):
        read_loads(tmp_path / "a.npz", format="parquet")


# ---------------------------------------------------------------- --loads specs (solvers.io.read_loads)

def test_loads_spec_reads_datasets_formats_and_directories(tmp_path, truth):
    w = cli_read_weights("mixtral-8x7b-shifting-mix")
    assert tuple(w.shape) == (32, 8) and int(w.sum()) == 500 * 32 * 4096 * 2
    p2l = replicated_phy2log(2)
    write_sglang_per_pass(tmp_path / "sg", truth[:3, :2], p2l)
    assert torch.equal(cli_read_weights(str(tmp_path / "sg")), truth[:3, :2].sum(0))
    hist = write_vllm_history(tmp_path / "h.json", truth[:3, :2])
    assert torch.equal(cli_read_weights(f"vllm:{hist}"), truth[:3, :2].sum(0))
    assert tuple(read_array("readme-example").shape) == (2, 12)
    with pytest.raises(EPLBError, match="no such file or dataset"):
        cli_read_weights("no-such-dataset")


def test_vllm_reader_without_ijson_gives_the_same_trace(tmp_path, truth, monkeypatch):
    import solvers.workloads.importers as importers

    path = write_vllm_history(tmp_path / "h.json", truth[:5])
    streamed = read_trace(path).loads
    monkeypatch.setattr(importers, "_ijson", lambda: None)          # the whole-document fallback
    assert torch.equal(read_trace(path).loads, streamed)
    path.write_text('{"load_history": [')
    expect_error("cannot read .json file", read_trace, path)


def test_loads_spec_step_ranges(tmp_path):
    from solvers.workloads.catalog import dataset_path

    tr = generate("olmoe-1b-7b", "drifting", steps=30, seed=1, num_layers=2)
    path = save_trace(tr, tmp_path / "t.npz")
    assert torch.equal(cli_read_weights(f"{path}@0:10"), tr.loads[:10].sum(0))
    assert torch.equal(cli_read_weights(f"{path}@10:"), tr.loads[10:].sum(0))
    assert torch.equal(cli_read_weights(f"{path}@:-5"), tr.loads[:-5].sum(0))
    assert torch.equal(read_array(f"{path}@3:4"), tr.loads[3:4])
    assert torch.equal(cli_read_weights("olmoe-1b-7b-drifting@0:100"),
                       read_trace(dataset_path("olmoe-1b-7b-drifting")).loads[:100].sum(0))
    assert read_loads_spec(f"{path}@1:2").path == path                 # the one file read (checksums)
    expect_error("selects no step", cli_read_weights, f"{path}@40:50")
    expect_error("needs [steps, layers, experts]", cli_read_weights, "readme-example@0:1")
    at = tmp_path / "w@1:2.npz"                                     # a real file name with '@' wins
    np.savez(at, loads=np.ones((2, 3)))
    assert tuple(cli_read_weights(str(at)).shape) == (2, 3)


def test_csv_matrix_headers_and_index_columns(tmp_path):
    want = [[10, 20, 30, 40], [5, 6, 7, 8]]
    for name, text in [("pandas.csv", ",0,1,2,3\n0,10,20,30,40\n1,5,6,7,8\n"),
                       ("named.csv", "e0,e1,e2,e3\n10,20,30,40\n5,6,7,8\n"),
                       ("bom.csv", "\ufeffe0,e1,e2,e3\n10,20,30,40\n5,6,7,8\n"),
                       ("bare.csv", "10,20,30,40\n5,6,7,8\n"),
                       ("bare-bom.csv", "\ufeff10,20,30,40\n5,6,7,8\n")]:
        (tmp_path / name).write_text(text, encoding="utf-8")
        assert cli_read_weights(tmp_path / name).tolist() == want, name
    # A header is told by its text, never by position: a numeric first row is loads.
    (tmp_path / "ids.csv").write_text("0,1,2,3\n10,20,30,40\n5,6,7,8\n")
    assert cli_read_weights(tmp_path / "ids.csv").tolist() == [[0, 1, 2, 3]] + want


def test_long_csv_with_sparse_huge_ids_is_refused(tmp_path):
    path = tmp_path / "long.csv"
    path.write_text("layer,expert,load\n0,0,5\n0,1000000000,1\n")
    with pytest.raises(LoadFileError, match="dense 0-based"):
        cli_read_weights(path)


def test_vllm_missing_key_error_is_not_wrapped_twice(tmp_path):
    path = tmp_path / "h.json"
    path.write_text(json.dumps({"load_history": [{"logical_expert_load": [[1, 2]]}, {"oops": 1}]}))
    with pytest.raises(LoadFileError) as err:
        cli_read_weights(path)
    assert str(err.value).count("loads:") == 1 and "has no 'logical_expert_load'" in str(err.value)
