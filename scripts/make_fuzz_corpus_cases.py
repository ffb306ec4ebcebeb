"""Write corpus cases (tests/fuzz_corpus/cases/fuzz-*.json) for the issue-28 classes."""
import io, json, sys
from pathlib import Path
import numpy as np, torch

OUT = Path(sys.argv[1])
PLAN = ["plan", "--loads", "{file}", "--replicas", "8", "--gpus", "2", "--out", "{tmp}/plan.json"]

def pt_hex(obj):
    buf = io.BytesIO(); torch.save(obj, buf); return buf.getvalue().hex()

def npz_hex(**arrays):
    buf = io.BytesIO(); np.savez(buf, **arrays); return buf.getvalue().hex()

def case(id, file, rc, stderr=None, argv=PLAN, extra=None):
    doc = {"id": f"fuzz-{id}", "argv": argv, "file": file, "rc": rc}
    if stderr: doc["stderr"] = stderr
    if extra: doc["extra_files"] = extra
    (OUT / f"fuzz-{id}.json").write_text(json.dumps(doc, indent=1) + "\n")

ok = torch.ones(2, 4)
p2l = torch.arange(4).repeat(2, 1)
case("pt-float8", {"name": "f8.pt", "hex": pt_hex(ok.to(torch.float8_e4m3fn))}, 2, "float8")
case("pt-complex", {"name": "c.pt", "hex": pt_hex(ok.to(torch.complex64))}, 2, "complex")
case("pt-bool", {"name": "b.pt", "hex": pt_hex(ok.bool())}, 2, "boolean")
case("pt-meta-tensor", {"name": "m.pt", "hex": pt_hex(torch.empty(1000000, 1000000, device="meta"))}, 2, "meta")
case("pt-sparse", {"name": "s.pt", "hex": pt_hex(ok.to_sparse())}, 2, "sparse")
case("pt-stride0-1e12", {"name": "z.pt", "hex": pt_hex(torch.ones(1, 1).expand(10**6, 10**6))}, 2, "declares")
case("pt-stride0-16000x65536", {"name": "z.pt", "hex": pt_hex(torch.ones(1, 1).expand(16000, 65536))}, 2, "stride of 0")
case("pt-overlapping-rows", {"name": "o.pt", "hex": pt_hex(torch.ones(8).as_strided((4, 4), (1, 1)))}, 2, "overlapping")
case("pt-meta-list", {"name": "ml.pt", "hex": pt_hex({"loads": ok, "meta": "[1, 2]"})}, 2, "meta: must be a JSON object")
case("pt-meta-deep", {"name": "md.pt", "hex": pt_hex({"loads": ok, "meta": "[" * 100 + "]" * 100})}, 2, "nested deeper")
case("pt-meta-wrong-field-type", {"name": "mt.pt", "hex": pt_hex({"loads": ok, "meta": json.dumps({"num_groups": "abc"})})}, 2, "meta.num_groups")
case("npz-meta-list", {"name": "ml.npz", "hex": npz_hex(loads=np.ones((2, 4)), meta=np.array("[1]"))}, 2, "meta: must be a JSON object")
case("npz-meta-string", {"name": "ms.npz", "hex": npz_hex(loads=np.ones((2, 4)), meta=np.array('"x"'))}, 2, "meta: must be a JSON object")
case("npz-meta-deep", {"name": "md.npz", "hex": npz_hex(loads=np.ones((2, 4)), meta=np.array("[" * 100 + "]" * 100))}, 2, "nested deeper")
case("npz-float16-ok", {"name": "h.npz", "hex": npz_hex(loads=np.ones((2, 4), np.float16))}, 0)
case("npz-int64-sum-wraps", {"name": "w.npz", "hex": npz_hex(loads=np.full((4, 2, 4), 2**62, np.int64))}, 2, "2**53")
case("npz-denormal-loads", {"name": "d.npz", "hex": npz_hex(loads=np.array([[1e-320, 3e-320, 2e-320, 5e-320]] * 2))}, 0)
case("npz-complex", {"name": "c.npz", "hex": npz_hex(loads=np.ones((2, 4), np.complex64))}, 2, "complex")
case("npz-member-without-suffix-40e9", {"name": "n.npz", "make": "npz_header", "shape": [40000000000], "descr": "<i8"}, 2, "header declares")
case("npz-bomb-100MB", {"name": "bomb.npz", "make": "zip_bomb", "bytes": 100 << 20, "npy": True}, 2, "decompression bomb")
case("pt-bomb-100MB", {"name": "bomb.pt", "make": "zip_bomb", "member": "archive/data/0", "bytes": 100 << 20}, 2, "decompression bomb")
SG = lambda fid: {"records": [{"forward_pass_id": fid, "global_physical_count": torch.ones(2, 4, dtype=torch.int64)}],
                  "last_physical_to_logical_map": p2l}
case("sglang-pass-id-list", {"name": "s.pt", "hex": pt_hex(SG([1]))}, 2, "forward_pass_id")
case("sglang-pass-id-none", {"name": "s.pt", "hex": pt_hex(SG(None))}, 2, "forward_pass_id")
case("sglang-pass-id-text", {"name": "s.pt", "hex": pt_hex(SG("abc"))}, 2, "forward_pass_id")
case("sglang-huge-expert-id", {"name": "s.pt", "hex": pt_hex({"records": [{"forward_pass_id": 0, "global_physical_count": torch.ones(2, 4, dtype=torch.int64)}],
      "last_physical_to_logical_map": torch.tensor([[0, 1, 2, 10**12]] * 2)})}, 2, "outside")
case("sglang-float-counts-1e21", {"name": "s.pt", "hex": pt_hex({"records": [{"forward_pass_id": 0, "global_physical_count": torch.full((2, 4), 1.2e21)}],
      "last_physical_to_logical_map": p2l})}, 0)
case("sglang-stat-sum-wraps", {"name": "s.pt", "hex": pt_hex({"logical_count": torch.full((4, 2, 4), 2**62, dtype=torch.int64)})}, 2, "2**53")
case("vllm-empty-layer", {"name": "v.json", "text": json.dumps({"load_history": [{"logical_expert_load": [[]]}]})}, 2, "non-empty")
case("vllm-sum-wraps", {"name": "v.json", "text": json.dumps({"load_history": [{"logical_expert_load": [[2**62] * 4] * 2}] * 4})}, 2, "2**53")
case("vllm-uint64-counts", {"name": "v.json", "text": json.dumps({"load_history": [{"logical_expert_load": [[2**64 - 1] * 4] * 2}]})}, 2, "integer overflow")
case("vllm-error-echoes-no-text", {"name": "v.json", "text": '{"load_history": [{"logical_expert_load": [[1,2]]}, secretpassword ]}'}, 2, "malformed")
case("megatron-ep-size-1e12", {"name": "m.npz", "hex": npz_hex(loads=np.ones((1, 2, 4), np.int64), ep_rank=np.array(0), ep_size=np.array(10**12), layer_numbers=np.array([0]))}, 2, "lacks ep_rank")
case("megatron-ep-size-2p64", {"name": "m.npz", "hex": npz_hex(loads=np.ones((1, 2, 4), np.int64), ep_rank=np.array(0), ep_size=np.array(2**64 - 1, np.uint64), layer_numbers=np.array([0]))}, 2, "lacks ep_rank")
case("csv-bom-header", {"name": "b.csv", "hex": ("\ufeffe0,e1,e2,e3\n5,6,7,8\n1,2,3,4\n").encode().hex()}, 0)
case("csv-bom-numeric", {"name": "b.csv", "hex": ("\ufeff5,6,7,8\n1,2,3,4\n").encode().hex()}, 0)
case("csv-error-echoes-no-text", {"name": "s.csv", "text": "1,2\nroot:x:0:0:secret,2\n"}, 2, "non-numeric cell (could not convert to float64 at row")
for key in ("problem", "solver", "previous", "expert_bytes"):
    case(f"option-reserved-{key.replace('_', '-')}", {"name": "ok.csv", "text": "1,2,3,4\n5,6,7,8\n"}, 2,
         f"{key}: is not an option", argv=PLAN + ["-O", f"{key}=1"])
case("out-device-node", {"name": "ok.csv", "text": "1,2,3,4\n5,6,7,8\n"}, 2, "not a regular file",
     argv=["plan", "--loads", "{file}", "--replicas", "8", "--gpus", "2", "--out", "/dev/null"])
case("compare-time-limit-nan", {"name": "ok.csv", "text": "1,2,3,4\n5,6,7,8\n"}, 2, "time_limit",
     argv=["compare", "--loads", "{file}", "--replicas", "8", "--gpus", "2", "--time-limit", "nan"])
SCORE = ["score", "--loads", "{tmp}/ok.csv", "--plan", "{file}", "--gpus", "2"]
OKF = [{"name": "ok.csv", "text": "1,2,3,4\n5,6,7,8\n"}]
case("trtllm-inf-key", {"name": "p.yaml", "text": "num_slots: 8\ninitial_global_assignments:\n  .inf: [0, 1, 2, 3, 0, 1, 2, 3]\n"}, 2, "non-finite key", argv=SCORE, extra=OKF)
case("trtllm-deep-flow", {"name": "p.yaml", "make": "nested", "depth": 100000, "prefix": "a: "}, 2, "nested deeper", argv=SCORE, extra=OKF)
case("trtllm-aliases", {"name": "p.yaml", "text": "\n".join(["a0: &a0 [0, 1]"] + [f"a{i}: &a{i} [*a{i-1}, *a{i-1}]" for i in range(1, 30)]) + "\ninitial_global_assignments: {0: *a29}\n"}, 2, "aliases", argv=SCORE, extra=OKF)
case("trtllm-layer-not-list", {"name": "p.yaml", "text": "initial_global_assignments:\n  0: 5\n"}, 2, "must be a list", argv=SCORE, extra=OKF)
case("plan-csv-id-2p63", {"name": "p.csv", "text": "layer,slot,expert\n0,0,0\n0,0,0\n0,0,0\n0,0,0\n0,0,9223372036854775808\n"}, 2, "below 2**63", argv=SCORE, extra=OKF)
case("eplb-plan-engine-list", {"name": "p.json", "text": json.dumps({"format": "eplb-plan", "version": 1, "problem": {"num_layers": 2, "num_experts": 4, "num_replicas": 8, "num_groups": 1, "num_nodes": 1, "num_gpus": 2},
     "engine": [1], "phy2log": [[0, 1, 2, 3, 0, 1, 2, 3]] * 2, "log2phy": [[[0, 4]] * 4] * 2, "logcnt": [[2] * 4] * 2})}, 2, "engine: must be an object", argv=SCORE, extra=OKF)
case("eplb-plan-phy2log-strings", {"name": "p.json", "text": json.dumps({"format": "eplb-plan", "version": 1, "problem": {"num_layers": 2, "num_experts": 4, "num_replicas": 8, "num_groups": 1, "num_nodes": 1, "num_gpus": 2},
     "phy2log": [["0"] * 8] * 2, "log2phy": [[[0, 4]] * 4] * 2, "logcnt": [[2] * 4] * 2})}, 2, "phy2log", argv=SCORE, extra=OKF)
case("sglang-map-huge-id", {"name": "p.json", "text": json.dumps({"physical_to_logical_map": [[0, 1, 2, 10**15, 0, 1, 2, 3]] * 2})}, 2, "outside", argv=SCORE, extra=OKF)
case("convert-num-experts-1e12", {"name": "p.json", "text": json.dumps({"physical_to_logical_map": [[0, 1, 2, 3, 0, 1, 2, 3]] * 2})}, 2, "num_experts",
     argv=["convert", "{file}", "--to", "csv", "--out", "{tmp}/x.csv", "--num-experts", "1000000000000", "--gpus", "2"])
# Found by the fuzzer (slow run): an .npz member that is not .npy data (numpy returns bytes).
case("npz-member-raw-bytes", {"name": "r.npz", "hex": "504b030414000000000000002100000000000000000000000000090000006c6f6164732e6e7079504b030414000000000000002100000000000000000000000000080000006d6574612e6e7079504b01021403140000000000000021000000000000000000000000000900000000000000000000008001000000006c6f6164732e6e7079504b01021403140000000000000021000000000000000000000000000800000000000000000000008001270000006d6574612e6e7079504b050600000000020002006d0000004d0000000000"}, 2, "is not an .npy array")
# Found by the fuzzer (slow run): a Megatron physical_to_logical_map of text (torch.from_numpy TypeError).
case("megatron-p2l-text", {"name": "m.npz", "hex": "504b03041400000000000000210007558309c0000000c0000000090000006c6f6164732e6e7079934e554d5059010076007b276465736372273a20273c6938272c2027666f727472616e5f6f72646572273a2046616c73652c20277368617065273a2028312c20322c2034292c207d202020202020202020202020202020202020202020202020202020202020202020202020202020202020202020202020202020202020200a01000000000000000100000000000000010000000000000001000000000000000100000000000000010000000000000001000000000000000100000000000000504b0304140000000000000021003ab1356688000000880000000b00000065705f72616e6b2e6e7079934e554d5059010076007b276465736372273a20273c6938272c2027666f727472616e5f6f72646572273a2046616c73652c20277368617065273a2028292c207d20202020202020202020202020202020202020202020202020202020202020202020202020202020202020202020202020202020202020202020202020200a0000000000000000504b030414000000000000002100a4b19faa88000000880000000b00000065705f73697a652e6e7079934e554d5059010076007b276465736372273a20273c6938272c2027666f727472616e5f6f72646572273a2046616c73652c20277368617065273a2028292c207d20202020202020202020202020202020202020202020202020202020202020202020202020202020202020202020202020202020202020202020202020200a0100000000000000504b030414000000000000002100a09abe928800000088000000110000006c617965725f6e756d626572732e6e7079934e554d5059010076007b276465736372273a20273c6938272c2027666f727472616e5f6f72646572273a2046616c73652c20277368617065273a2028312c292c207d2020202020202020202020202020202020202020202020202020202020202020202020202020202020202020202020202020202020202020202020200a0000000000000000504b030414000000080000002100a6ddf62a4f000000900000001b000000706879736963616c5f746f5f6c6f676963616c5f6d61702e6e70799bec17ea1b10c9c850c650ad9e925a9c5ca46ea5a06e136aa2aea3a09e965f54529498179f5f94920a12774bcc294e058a17672416a402f91a9a3a0ab50a1401ae6721bc0c4b1918185281b8158801504b010214031400000000000000210007558309c0000000c00000000900000000000000000000008001000000006c6f6164732e6e7079504b01021403140000000000000021003ab1356688000000880000000b00000000000000000000008001e700000065705f72616e6b2e6e7079504b0102140314000000000000002100a4b19faa88000000880000000b000000000000000000000080019801000065705f73697a652e6e7079504b0102140314000000000000002100a09abe9288000000880000001100000000000000000000008001490200006c617965725f6e756d626572732e6e7079504b0102140314000000080000002100a6ddf62a4f000000900000001b0000000000000000000000800100030000706879736963616c5f746f5f6c6f676963616c5f6d61702e6e7079504b0506000000000500050031010000880300000000"}, 2, "physical_to_logical_map")
