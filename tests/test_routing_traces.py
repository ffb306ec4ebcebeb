"""Routing traces: the canonical file, the engines' layouts (SGLang per_token, vLLM
routed_experts, Megatron JSONL), hostile files, load counts, the generator."""
import hashlib
import json

import numpy as np
import pytest
import torch

from solvers.errors import LoadFileError, ProblemError
from solvers.routing import RoutingTrace, generate_routing, load_routing, read_routing, save_routing
from solvers.routing.coactivation import coactivation
from solvers.io import read_loads
from solvers.workloads import dataset_path, list_datasets
from solvers.workloads.catalog import ROUTING


def _ids(L=3, T=10, k=2, E=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.stack([torch.stack([torch.randperm(E, generator=g)[:k] for _ in range(T)]) for _ in range(L)])


def test_load_counts_are_a_bincount_per_layer():
    ids = _ids()
    tr = RoutingTrace(ids, 8)
    want = torch.zeros(3, 8, dtype=torch.int64)
    for layer in range(3):
        for e in ids[layer].flatten().tolist():
            want[layer, e] += 1
    assert torch.equal(tr.loads(), want)
    assert int(tr.loads().sum()) == 3 * 10 * 2


def test_canonical_npz_round_trip_and_loads_reader(tmp_path):
    tr = RoutingTrace(_ids(), 8, torch.arange(10) % 4, 4, {"model": "x"})
    path = save_routing(tr, tmp_path / "r.npz")
    back = load_routing(path)
    assert torch.equal(back.topk_ids, tr.topk_ids) and torch.equal(back.source_rank, tr.source_rank)
    assert back.num_ranks == 4 and back.meta["model"] == "x" and back.num_experts == 8
    assert read_routing(path).num_tokens == 10
    info = read_loads(path)                                    # --loads reads the counts
    assert torch.equal(info.weights.to(torch.int64), tr.loads())


def test_source_gpus_rule():
    tr = RoutingTrace(_ids(T=8), 8, torch.tensor([0, 1, 2, 3, 3, 2, 1, 0]), 4)
    assert tr.source_gpus(8).tolist() == [0, 2, 4, 6, 6, 4, 2, 0]          # rank r of R on r * P // R
    assert RoutingTrace(_ids(T=8), 8).source_gpus(4).tolist() == [0, 0, 1, 1, 2, 2, 3, 3]   # blocks


def _sglang_dump(path, rank, ids_phys, p2l, dense=1):
    """A per_token dump as SGLang writes it: records with topk_ids_of_layer [engine layers,
    tokens, top_k] int32 (dense rows -1) and rank; last_physical_to_logical_map."""
    L, T, k = ids_phys.shape
    full = torch.full((dense + L, T, k), -1, dtype=torch.int32)
    full[dense:] = ids_phys.to(torch.int32)
    half = T // 2
    records = [{"forward_pass_id": i, "rank": rank, "input_ids": list(range(n)), "positions": list(range(n)),
                "extend_seq_lens": [n], "forward_mode": 1, "topk_ids_of_layer": part, "misc_objects": []}
               for i, (n, part) in enumerate([(half, full[:, :half]), (T - half, full[:, half:])])]
    torch.save({"records": records, "last_physical_to_logical_map": p2l}, path)


def test_sglang_per_token_maps_physical_ids_and_keeps_ranks(tmp_path):
    E = 8
    p2l = torch.cat([torch.arange(E), torch.tensor([0, 1])]).repeat(4, 1)   # 1 dense + 3 MoE rows
    phys = torch.tensor([[[8, 3], [9, 5], [0, 2]]] * 3)                      # slots 8, 9 hold experts 0, 1
    for rank in (0, 1):
        _sglang_dump(tmp_path / f"expert_distribution_recorder_{rank}.pt", rank, phys, p2l)
    tr = read_routing(tmp_path)
    assert tr.num_layers == 3 and tr.num_tokens == 6 and tr.num_experts == E
    assert tr.topk_ids[0, :3].tolist() == [[0, 3], [1, 5], [0, 2]]
    assert tr.source_rank.tolist() == [0, 0, 0, 1, 1, 1] and tr.meta["dense_layers"] == 1


def test_vllm_routed_experts_json_and_npz(tmp_path):
    a = _ids(L=4, T=5, k=2, E=8).permute(1, 0, 2)                            # [tokens, layers, top_k]
    b = _ids(L=4, T=3, k=2, E=8, seed=1).permute(1, 0, 2)
    (tmp_path / "resp.json").write_text(json.dumps([{"routed_experts": a.tolist()},
                                                    {"choices": [{"routed_experts": b.tolist()}]}]))
    tr = read_routing(tmp_path / "resp.json", num_experts=8)
    assert tr.num_layers == 4 and tr.num_tokens == 8
    assert torch.equal(tr.topk_ids[:, :5], a.permute(1, 0, 2).to(tr.topk_ids.dtype))
    np.savez(tmp_path / "resp.npz", routed_experts=a.numpy().astype(np.int16))
    assert torch.equal(read_routing(tmp_path / "resp.npz", num_experts=8).topk_ids, tr.topk_ids[:, :5])


def test_megatron_jsonl(tmp_path):
    lines = []
    for step in (0, 1):
        for rank in (1, 0):
            for layer in (5, 3):
                lines.append({"step": step, "layer": layer, "rank": rank,
                              "top_indices": [[layer, rank + step], [layer + 1, 0]]})
    (tmp_path / "trace.jsonl").write_text("\n".join(json.dumps(x) for x in lines))
    tr = read_routing(tmp_path / "trace.jsonl", num_experts=8)
    assert tr.num_layers == 2 and tr.num_tokens == 8 and tr.meta["layer_numbers"] == [3, 5]
    assert tr.source_rank.tolist() == [0, 0, 1, 1, 0, 0, 1, 1]                # (step, rank) order
    assert tr.topk_ids[0, 2].tolist() == [3, 1] and tr.topk_ids[1, 0].tolist() == [5, 0]


@pytest.mark.parametrize("case", ["float", "shape", "range", "negative", "huge", "ragged", "keys"])
def test_hostile_files_give_one_clear_error(tmp_path, case):
    path = tmp_path / ("t.jsonl" if case in ("ragged", "keys") else "t.npz")
    ids = _ids().numpy()
    meta = np.array(json.dumps({"num_experts": 8}))
    if case == "float":
        np.savez(path, topk_ids=ids.astype(np.float32), meta=meta)
    elif case == "shape":
        np.savez(path, topk_ids=ids[0], meta=meta)
    elif case == "range":
        np.savez(path, topk_ids=ids + 8, meta=meta)
    elif case == "negative":
        np.savez(path, topk_ids=ids - 5, meta=meta)
    elif case == "huge":
        np.savez(path, topk_ids=ids, meta=meta)
        raw = bytearray(path.read_bytes())
        at = raw.find(b"'shape': (3, 10, 2)")
        raw[at:at + 19] = b"'shape': (9999999,9"                            # same length, huge declared size
        path.write_bytes(bytes(raw))
    elif case == "ragged":
        path.write_text(json.dumps({"step": 0, "layer": 0, "rank": 0, "top_indices": [[1, 2], [3]]}))
    else:
        path.write_text(json.dumps({"step": 0, "layer": 0, "top_indices": [[1, 2]]}))
    with pytest.raises(LoadFileError) as err:
        read_routing(path, num_experts=8 if case in ("ragged", "keys") else None)
    assert err.value.param == "routing" and str(path) in str(err.value) and "\n" not in str(err.value)


def test_sglang_hostile_dtype_and_range(tmp_path):
    p2l = torch.arange(8).repeat(2, 1)
    torch.save({"records": [{"rank": 0, "topk_ids_of_layer": torch.zeros(2, 3, 2)}],
                "last_physical_to_logical_map": p2l}, tmp_path / "a.pt")
    with pytest.raises(LoadFileError, match="integer"):
        read_routing(tmp_path / "a.pt")
    torch.save({"records": [{"rank": 0, "topk_ids_of_layer": torch.full((2, 3, 2), 9, dtype=torch.int32)}],
                "last_physical_to_logical_map": p2l}, tmp_path / "b.pt")
    with pytest.raises(LoadFileError, match=r"physical expert ids must be in \[0, 8\)"):
        read_routing(tmp_path / "b.pt")
    torch.save({"records": [{"rank": 0, "global_physical_count": torch.zeros(2, 8)}]}, tmp_path / "c.pt")
    with pytest.raises(LoadFileError, match="per_token"):
        read_routing(tmp_path / "c.pt")


def test_trace_checks_its_arguments():
    with pytest.raises(ProblemError, match="top_k"):
        RoutingTrace(torch.zeros(1, 2, 9, dtype=torch.int64), 8)
    with pytest.raises(ProblemError, match="source_rank"):
        RoutingTrace(_ids(), 8, torch.zeros(3, dtype=torch.int64), 1)
    with pytest.raises(ProblemError, match="num_ranks"):
        RoutingTrace(_ids(), 8, torch.zeros(10, dtype=torch.int64))


def test_coactivation_counts_pairs():
    ids = torch.tensor([[[0, 1, 2], [1, 2, 3]]])
    A = coactivation(RoutingTrace(ids, 4))
    assert A[0, 1, 2] == 2 and A[0, 0, 1] == 1 and A[0, 0, 3] == 0 and A[0, 3, 1] == 1
    assert torch.equal(A, A.transpose(1, 2)) and float(A[0].diagonal().abs().sum()) == 0


def test_generator_is_seeded_and_has_coactivation_structure():
    a = generate_routing("olmoe-1b-7b", 3, num_tokens=512)
    b = generate_routing("olmoe-1b-7b", 3, num_tokens=512)
    c = generate_routing("olmoe-1b-7b", 4, num_tokens=512)
    assert torch.equal(a.topk_ids, b.topk_ids) and not torch.equal(a.topk_ids, c.topk_ids)
    assert a.num_layers == 16 and a.top_k == 8 and a.num_ranks == 8
    # every token's experts are distinct
    s = a.topk_ids.sort(-1).values
    assert bool((s[..., 1:] != s[..., :-1]).all())
    # co-activation is concentrated: the top 10 % of pairs carry far more than 10 % of the mass
    A = coactivation(a)[0].flatten()
    top = A.sort(descending=True).values
    assert float(top[: top.numel() // 10].sum()) > 0.3 * float(top.sum())


def test_group_limit_keeps_tokens_in_few_groups():
    tr = generate_routing("deepseek-v3", 0, num_tokens=256)
    groups = tr.topk_ids.to(torch.int64) // 32
    distinct = torch.zeros(*groups.shape[:2], 8, dtype=torch.bool).scatter_(2, groups, True).sum(-1)
    assert int(distinct.max()) <= 4


def test_shipped_routing_dataset_is_catalogued():
    entry = next(e for e in list_datasets() if e["name"] == "deepseek-v3-routing")
    tr = load_routing(dataset_path("deepseek-v3-routing"))
    assert entry["kind"] == "routing" and entry["bytes"] == dataset_path("deepseek-v3-routing").stat().st_size
    assert (tr.num_layers, tr.num_tokens, tr.top_k, tr.num_experts, tr.num_ranks) == (58, 3072, 8, 256, 32)
    assert tr.meta["model"] == "deepseek-v3" and tr.meta["seed"] == 0


@pytest.mark.slow
def test_shipped_routing_dataset_regenerates_exactly():
    entry = next(e for e in list_datasets() if e["name"] == "deepseek-v3-routing")
    spec = ROUTING["deepseek-v3-routing"]
    tr = generate_routing(spec["model"], spec["seed"], num_tokens=spec["num_tokens"])
    assert hashlib.sha256(tr.topk_ids.numpy().astype(np.int64).tobytes()).hexdigest() == entry["topk_sha256"]
