"""Hypothesis strategies that build hostile loads and plan files from the grammar of each format.

Each strategy draws a whole file (``(suffix, bytes)``): the containers (zip members of an
``.npz``, records of a ``.pt``), the fields each reader looks for (``loads``, ``meta``,
``records``, ``forward_pass_id``, ``load_history``, ``ep_size``, ``phy2log``, ...), and at
every one of them a value of any type: JSON values nested a few levels, numbers at the
extremes (2**63, 2**64, 1e308, NaN, -0.0, denormals), arrays of every dtype (float8,
complex, bool, text, datetime), tensors that are sparse, on the meta device, stride-0 or
overlapping, ``.npy`` headers declaring shapes up to 2**62, compressed bombs, deep nesting
in JSON, YAML flow and block styles, aliases, and truncations of all of it.

Used by ``tests/test_robust_fuzz_formats.py``.
"""
from __future__ import annotations

import io
import json
import zipfile

import numpy as np
import torch
import yaml
from hypothesis import strategies as st

# Sizes of the bombs the strategies build: small enough to build in milliseconds; the test
# lowers the boundary's caps (solvers.filecheck) below them.
BOMB_BYTES = 4 << 20

# ---------------------------------------------------------------------------------------
# Scalars and JSON values

EXTREME_INTS = [0, 1, -1, 2, 7, 2**31 - 1, 2**31, 2**53, 2**53 + 1, 2**62, 2**63 - 1, 2**63, 2**64 - 1, 2**64,
                -2**63, 10**30]
EXTREME_FLOATS = [0.0, -0.0, 0.5, 1.0, 1e-320, 5e-324, 2.2250738585072014e-308, 1e21, 1.2e21, 1e308,
                  float("inf"), float("-inf"), float("nan")]

numbers = st.one_of(st.sampled_from(EXTREME_INTS), st.sampled_from(EXTREME_FLOATS), st.integers(-5, 1000),
                    st.floats(allow_nan=True, allow_infinity=True))
json_scalars = st.one_of(st.none(), st.booleans(), numbers, st.text(max_size=6))
json_values = st.recursive(json_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=5), inner, max_size=4)), max_leaves=10)


def _matrix(cells: st.SearchStrategy) -> st.SearchStrategy:
    """[layers, experts] nested lists, sometimes ragged, sometimes empty."""
    return st.one_of(
        st.integers(1, 4).flatmap(lambda e: st.lists(st.lists(cells, min_size=e, max_size=e), min_size=1, max_size=3)),
        st.lists(st.lists(cells, max_size=4), max_size=3),        # ragged or empty
        json_values)


count_cells = st.one_of(st.integers(0, 1000), st.sampled_from(EXTREME_INTS), st.sampled_from(EXTREME_FLOATS),
                        st.booleans(), st.text(max_size=3), st.none())
matrices = _matrix(count_cells)
id_cells = st.one_of(st.integers(-2, 9), st.sampled_from(EXTREME_INTS), st.sampled_from([0.5, 1.0, float("nan")]),
                     st.booleans(), st.text(max_size=2))


def deep_text(depth: int, kind: str) -> str:
    if kind == "json-list":
        return "[" * depth + "]" * depth
    if kind == "json-object":
        return '{"a":' * depth + "1" + "}" * depth
    if kind == "yaml-flow":
        return "a: " + "[" * depth + "]" * depth + "\n"
    depth = min(depth, 300)              # block nesting costs depth**2 characters of indentation
    return "".join(" " * i + f"k{i}:\n" for i in range(depth)) + " " * depth + "1\n"     # yaml block


deep_depths = st.sampled_from([9, 65, 70, 1000, 100_000])

# ---------------------------------------------------------------------------------------
# Arrays and .npz archives

NUMPY_DTYPES = ["<i1", "<i2", "<i4", "<i8", "|u1", "<u2", "<u4", "<u8", "<f2", "<f4", "<f8", "<c8", "<c16",
                "|b1", "<U4", "|S3", "<m8[s]", "<M8[s]", "|V4"]
shapes = st.lists(st.integers(0, 4), min_size=0, max_size=4).map(tuple)
huge_shapes = st.lists(st.sampled_from([0, 1, 2, 3, 1000, 2**31, 2**40, 2**62]), min_size=1, max_size=3).map(tuple)


@st.composite
def arrays(draw) -> np.ndarray:
    dtype = np.dtype(draw(st.sampled_from(NUMPY_DTYPES)))
    shape = draw(shapes)
    fill = draw(st.one_of(st.sampled_from(EXTREME_INTS), st.sampled_from(EXTREME_FLOATS), st.integers(0, 100)))
    try:
        return np.full(shape, fill).astype(dtype)
    except (OverflowError, ValueError, TypeError):
        return np.zeros(shape, dtype=dtype)


def _npy(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array(buf, arr, allow_pickle=False)
    return buf.getvalue()


@st.composite
def forged_npy(draw) -> bytes:
    """An .npy header declaring any shape and dtype over a few bytes of data."""
    header = io.BytesIO()
    descr = draw(st.sampled_from(NUMPY_DTYPES + ["|O"]))
    np.lib.format.write_array_header_1_0(header, {"descr": descr, "fortran_order": draw(st.booleans()),
                                                  "shape": draw(huge_shapes)})
    return header.getvalue() + b"\0" * draw(st.integers(0, 64))


MEMBER_NAMES = ["loads", "weights", "logical_count", "meta", "ep_rank", "ep_size", "layer_numbers",
                "physical_to_logical_map", "x"]


@st.composite
def npz_member(draw, name: str | None = None) -> tuple[str, bytes, int]:
    """(member name, bytes, compression) of one .npz member of any kind."""
    name = name or draw(st.sampled_from(MEMBER_NAMES))
    kind = draw(st.sampled_from(["array", "forged", "meta", "raw", "bomb"]))
    if kind == "array":
        data = _npy(draw(arrays()))
    elif kind == "forged":
        data = draw(forged_npy())
    elif kind == "meta":
        text = draw(st.one_of(json_values.map(lambda v: json.dumps(v)), st.text(max_size=20),
                              st.builds(deep_text, deep_depths, st.sampled_from(["json-list", "json-object"]))))
        data = _npy(np.array(text))
    elif kind == "raw":
        data = draw(st.binary(max_size=64))
    else:
        data = _npy(np.zeros(BOMB_BYTES // 8, dtype=np.int64))
    suffix = draw(st.sampled_from([".npy", ".npy", ""]))
    compression = zipfile.ZIP_DEFLATED if kind == "bomb" or draw(st.booleans()) else zipfile.ZIP_STORED
    return name + suffix, data, compression


def _zip(members: list[tuple[str, bytes, int]]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data, compression in members:
            zf.writestr(zipfile.ZipInfo(name), data, compress_type=compression)
    return buf.getvalue()


@st.composite
def truncations(draw, data: bytes) -> bytes:
    if data and draw(st.integers(0, 9)) == 0:
        return data[: draw(st.integers(0, len(data) - 1))]
    return data


@st.composite
def npz_files(draw) -> tuple[str, bytes]:
    members = draw(st.lists(npz_member(), min_size=1, max_size=4, unique_by=lambda m: m[0]))
    return ".npz", draw(truncations(_zip(members)))


@st.composite
def megatron_files(draw) -> tuple[str, bytes]:
    """A Megatron per-rank .npz (the four keys present) with hostile values in each."""
    def member(name: str, good: np.ndarray):
        return st.one_of(st.just((name + ".npy", _npy(good), zipfile.ZIP_STORED)), npz_member(name))
    good = {"loads": np.ones((1, 2, 4), np.int64), "ep_rank": np.array(0), "ep_size": np.array(1),
            "layer_numbers": np.array([0])}
    members = [draw(member(k, v)) for k, v in good.items()]
    if draw(st.booleans()):
        members.append(draw(member("physical_to_logical_map", np.array([[0, 1, 2, 3]]))))
    return ".npz", draw(truncations(_zip(members)))


# ---------------------------------------------------------------------------------------
# Tensors and .pt files

TORCH_DTYPES = [torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.float16, torch.bfloat16,
                torch.float32, torch.float64, torch.bool, torch.complex64, torch.float8_e4m3fn, torch.float8_e5m2]


@st.composite
def tensors(draw) -> torch.Tensor:
    dtype = draw(st.sampled_from(TORCH_DTYPES))
    shape = draw(st.lists(st.integers(1, 4), min_size=0, max_size=3).map(tuple))
    fill = draw(st.sampled_from([0, 1, 3, -1, 2**62, 1e21, float("nan"), float("inf"), 1e-320]))
    try:
        t = torch.full(shape, fill, dtype=torch.float64).to(dtype)
    except (RuntimeError, OverflowError):
        t = torch.zeros(shape, dtype=dtype)
    kind = draw(st.sampled_from(["plain", "plain", "stride0", "overlap", "sparse", "meta", "transposed"]))
    if kind == "stride0":
        t = torch.zeros(1, dtype=dtype).expand(draw(st.sampled_from([(4, 4), (16000, 65536), (10**6, 10**6)])))
    elif kind == "overlap":
        t = torch.zeros(8, dtype=dtype).as_strided((4, 4), (1, 1))
    elif kind == "sparse" and dtype not in (torch.float8_e4m3fn, torch.float8_e5m2, torch.bfloat16, torch.float16):
        t = t.reshape(-1, 1).to_sparse() if t.numel() else t
    elif kind == "meta":
        t = torch.empty(draw(st.sampled_from([(2, 4), (10**6, 10**6)])), device="meta", dtype=dtype)
    elif kind == "transposed" and t.dim() == 2:
        t = t.t()
    return t


pt_values = st.one_of(tensors(), json_values)


@st.composite
def records(draw) -> list:
    def record():
        return st.fixed_dictionaries({}, optional={"forward_pass_id": st.one_of(st.integers(0, 3), json_values,
                                                                                tensors()),
                                                   "global_physical_count": pt_values})
    return draw(st.one_of(st.lists(record(), max_size=3), json_values))


PT_KEYS = ["loads", "weights", "logical_count", "meta", "records", "last_physical_to_logical_map", "rank"]


@st.composite
def pt_objects(draw):
    if draw(st.integers(0, 3)) == 0:
        return draw(pt_values)
    keys = draw(st.lists(st.sampled_from(PT_KEYS), min_size=1, max_size=4, unique=True))
    obj = {}
    for k in keys:
        if k == "records":
            obj[k] = draw(records())
        elif k == "meta":
            obj[k] = draw(st.one_of(json_values.map(json.dumps), json_values,
                                    st.builds(deep_text, deep_depths, st.just("json-list"))))
        else:
            obj[k] = draw(pt_values)
    return obj


@st.composite
def pt_files(draw) -> tuple[str, bytes]:
    buf = io.BytesIO()
    torch.save(draw(pt_objects()), buf)
    data = buf.getvalue()
    if draw(st.integers(0, 7)) == 0:        # recompress every record: a bomb when the records are big
        src = zipfile.ZipFile(io.BytesIO(data))
        data = _zip([(i.filename, src.read(i), zipfile.ZIP_DEFLATED) for i in src.infolist()])
    return ".pt", draw(truncations(data))


# ---------------------------------------------------------------------------------------
# JSON (plain and vLLM histories) and CSV loads

@st.composite
def json_loads_files(draw) -> tuple[str, bytes]:
    kind = draw(st.sampled_from(["vllm", "vllm", "plain", "object", "deep"]))
    if kind == "vllm":
        steps = draw(st.lists(st.one_of(
            st.fixed_dictionaries({"logical_expert_load": matrices}), json_values), min_size=0, max_size=3))
        doc = {"load_history": steps} if draw(st.integers(0, 5)) else draw(json_values)
        text = json.dumps(doc)
        if not draw(st.integers(0, 4)):
            text = '{"load_history": ' + draw(st.builds(deep_text, deep_depths, st.just("json-list"))) + "}"
    elif kind == "plain":
        text = json.dumps(draw(matrices))
    elif kind == "object":
        text = json.dumps({draw(st.sampled_from(["loads", "weights", "logical_count", "x"])): draw(matrices)})
    else:
        text = draw(st.builds(deep_text, deep_depths, st.sampled_from(["json-list", "json-object"])))
    return ".json", draw(truncations(text.encode()))


csv_cells = st.one_of(st.integers(0, 1000).map(str), st.sampled_from([str(v) for v in EXTREME_INTS + EXTREME_FLOATS]),
                      st.sampled_from(["", " ", "layer", "expert", "load", "step", "count", "tokens", "nan", '"1"',
                                       "1e999", "-0", "0x10", "abc", "1,5"]))


@st.composite
def csv_files(draw) -> tuple[str, bytes]:
    width = draw(st.integers(1, 5))
    rows = draw(st.lists(st.lists(csv_cells, min_size=width, max_size=width if draw(st.booleans()) else 6),
                         min_size=0, max_size=5))
    header = draw(st.sampled_from([None, "layer,expert,load", "layer,expert,load,step", "step,layer,expert,count",
                                   "0,1,2,3", "a,b,c"]))
    lines = ([header] if header else []) + [",".join(r) for r in rows]
    text = ("\ufeff" if draw(st.booleans()) else "") + "\n".join(lines) + ("\n" if draw(st.booleans()) else "")
    return ".csv", text.encode("utf-8")


# ---------------------------------------------------------------------------------------
# .safetensors (TensorRT-LLM expert statistics, vLLM saved EPLB load windows)

SAFETENSORS_DTYPES = {"I8": "<i1", "I16": "<i2", "I32": "<i4", "I64": "<i8", "U8": "|u1", "U64": "<u8", "F16": "<f2",
                      "F32": "<f4", "F64": "<f8"}
SAFETENSORS_NAMES = ["50_3", "50_4", "51_3", "51_4", "53_3", "0_0", "7", "1_2_3", "global_expert_load_window",
                     "physical_to_logical_map", "expert_load", "x", "__metadata__"]


@st.composite
def safetensors_entry(draw, offset: int) -> tuple[dict, bytes]:
    """One tensor's header entry and data: honest (shape and bytes agree) or forged (unknown
    dtype, negative or huge shape, offsets outside the data or disagreeing with the shape)."""
    code = draw(st.sampled_from(list(SAFETENSORS_DTYPES) + ["BOOL", "C64", "F8_E4M3", "str", 7]))
    shape = draw(st.one_of(st.lists(st.integers(0, 5), max_size=3),
                           st.lists(st.sampled_from([-1, 2**40, 2**62, 2**64, 1.5, "2", True]),
                                    min_size=1, max_size=3)))
    numpy_code = SAFETENSORS_DTYPES.get(code) if isinstance(code, str) else None
    try:
        size = int(np.prod(shape)) if all(isinstance(d, int) and 0 <= d < 64 for d in shape) else 4
        fill = draw(st.sampled_from([0, 1, 17, -3, 2**31 - 1, float("nan"), float("inf"), 1e30]))
        data = np.full(size, fill).astype(numpy_code or "<i4").tobytes()
    except (ValueError, OverflowError, TypeError):
        data = bytes(4)
    offsets = [offset, offset + len(data)]
    if draw(st.integers(0, 5)) == 0:
        offsets = draw(st.sampled_from([[offset, offset + len(data) + 4], [offset + 1, offset], [0, 2**62],
                                        [-4, 0], [offset], "0-4", [offset, offset + 1.5]]))
    return {"dtype": code, "shape": shape, "data_offsets": offsets}, data


@st.composite
def safetensors_files(draw) -> tuple[str, bytes]:
    names = draw(st.lists(st.sampled_from(SAFETENSORS_NAMES), min_size=0, max_size=4, unique=True))
    header: dict = {}
    blobs = b""
    for name in names:
        if name == "__metadata__":
            header[name] = draw(st.one_of(st.just({"format": "pt"}), json_values))
            continue
        entry, data = draw(safetensors_entry(len(blobs)))
        header[name] = entry if draw(st.integers(0, 6)) else draw(json_values)
        blobs += data
    text = json.dumps(header).encode()
    if not draw(st.integers(0, 6)):
        text = draw(st.sampled_from([b"[]", b"{", b"\xff\xfe", b"null", b'{"a": ' * 80]))
    length = len(text) if draw(st.integers(0, 5)) else draw(st.sampled_from([0, 7, 2**40, 2**64 - 1, len(text) + 9]))
    return ".safetensors", draw(truncations(length.to_bytes(8, "little") + text + blobs))


loads_files = st.one_of(npz_files(), megatron_files(), pt_files(), json_loads_files(), csv_files(), safetensors_files())

# ---------------------------------------------------------------------------------------
# Plan files


def _paths(doc, prefix=()):
    """Every path into a JSON document (dict keys and list indices), the root excluded."""
    out = []
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else ()
    for k, v in items:
        out.append(prefix + (k,))
        if len(prefix) < 3:
            out.extend(_paths(v, prefix + (k,)))
    return out


def _set(doc, path, value):
    for k in path[:-1]:
        doc = doc[k]
    doc[path[-1]] = value


@st.composite
def eplb_plan_files(draw, valid: dict) -> tuple[str, bytes]:
    """A valid plan document with wrong values at one to three of its paths."""
    doc = json.loads(json.dumps(valid))
    for path in draw(st.lists(st.sampled_from(_paths(valid)), min_size=1, max_size=3)):
        try:
            _set(doc, path, draw(st.one_of(json_values, matrices, st.sampled_from(EXTREME_INTS))))
        except (KeyError, IndexError, TypeError):
            pass
    text = json.dumps(doc)
    if not draw(st.integers(0, 6)):
        text = text.replace('"phy2log":', '"phy2log": ' + deep_text(draw(deep_depths), "json-list") + ', "x":', 1)
    return ".json", draw(truncations(text.encode()))


@st.composite
def sglang_plan_files(draw) -> tuple[str, bytes]:
    doc = {"physical_to_logical_map": draw(_matrix(id_cells))} if draw(st.integers(0, 5)) else draw(json_values)
    return ".json", json.dumps(doc).encode()


@st.composite
def trtllm_plan_files(draw) -> tuple[str, bytes]:
    kind = draw(st.sampled_from(["doc", "doc", "deep", "aliases", "inf-key"]))
    if kind == "doc":
        keys = st.one_of(st.integers(-1, 3), st.sampled_from([2**40, 1.5, float("inf"), "a", True, None]))
        assign = draw(st.dictionaries(keys, st.one_of(st.lists(id_cells, max_size=4), json_values), max_size=3))
        doc = {"num_slots": draw(st.one_of(st.integers(0, 8), json_values)), "initial_global_assignments": assign}
        text = yaml.safe_dump(doc)
    elif kind == "deep":
        text = deep_text(draw(deep_depths), draw(st.sampled_from(["yaml-flow", "yaml-block"])))
    elif kind == "aliases":
        lines = ["a0: &a0 [0, 1]"] + [f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}]" for i in range(1, 25)]
        text = "\n".join(lines) + "\ninitial_global_assignments: {0: *a24}\n"
    else:
        text = "num_slots: 2\ninitial_global_assignments:\n  .inf: [0, 1]\n  .nan: [1, 0]\n"
    return ".yaml", text.encode()


@st.composite
def csv_plan_files(draw) -> tuple[str, bytes]:
    rows = draw(st.lists(st.tuples(id_cells, id_cells, id_cells), max_size=5))
    text = "layer,slot,expert\n" + "".join(f"{a},{b},{c}\n" for a, b, c in rows)
    return ".csv", text.encode()


# ---------------------------------------------------------------------------------------
# Routing traces (canonical .npz, SGLang per-token .pt, Megatron JSON Lines, vLLM JSON)

def _ids(draw) -> np.ndarray:
    """[layers, tokens, top_k] ids: valid, repeated in a token, out of range, of any dtype."""
    L, T, k = draw(st.integers(1, 3)), draw(st.integers(1, 5)), draw(st.integers(1, 3))
    kind = draw(st.sampled_from(["valid", "valid", "repeat", "extreme", "array"]))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    if kind == "valid":
        return np.stack([np.stack([rng.permutation(8)[:k] for _ in range(T)]) for _ in range(L)])
    if kind == "repeat":
        return np.full((L, T, k), draw(st.integers(0, 7)))
    if kind == "extreme":
        value = draw(st.sampled_from(EXTREME_INTS))
        dtype = draw(st.sampled_from(["<i8", "<u8", "<i4", "|u1", "<i2"]))
        try:
            return np.full((L, T, k), value).astype(dtype)
        except (OverflowError, ValueError):
            return np.full((L, T, k), -1, dtype=np.int64)
    return draw(arrays())


routing_meta = st.one_of(
    st.fixed_dictionaries({"num_experts": st.one_of(st.just(8), st.sampled_from(EXTREME_INTS), json_values)},
                          optional={"num_ranks": st.one_of(st.integers(1, 4), st.sampled_from(EXTREME_INTS)),
                                    "model": json_values}).map(json.dumps),
    json_values.map(json.dumps), st.text(max_size=10),
    st.builds(deep_text, deep_depths, st.sampled_from(["json-list", "json-object"])))


@st.composite
def routing_npz_files(draw) -> tuple[str, bytes]:
    """A canonical routing .npz: topk_ids (ids, forged headers, bombs), meta, source_rank."""
    members = []
    kind = draw(st.sampled_from(["ids", "ids", "ids", "member"]))
    members.append(("topk_ids.npy", _npy(_ids(draw)), zipfile.ZIP_DEFLATED) if kind == "ids"
                   else draw(npz_member("topk_ids")))
    if draw(st.integers(0, 5)):
        members.append(("meta.npy", _npy(np.array(draw(routing_meta))), zipfile.ZIP_STORED))
    if draw(st.booleans()):
        members.append(draw(st.one_of(st.just(("source_rank.npy", _npy(np.zeros(5, np.int32)), zipfile.ZIP_STORED)),
                                      npz_member("source_rank"))))
    return ".npz", draw(truncations(_zip(members)))


@st.composite
def routing_pt_files(draw) -> tuple[str, bytes]:
    """An SGLang per-token dump: records of topk_ids_of_layer (hostile tensors, shared rows,
    nested lists), ranks at the extremes, a physical-to-logical map."""
    def record():
        kind = draw(st.sampled_from(["ids", "ids", "tensor", "json", "shared"]))
        arr = _ids(draw)
        if kind == "ids" and arr.dtype.kind in "iuf" and arr.dtype != np.float16:
            ids = torch.from_numpy(np.ascontiguousarray(arr))
        elif kind in ("tensor", "ids"):
            ids = draw(tensors())
        elif kind == "json":
            ids = draw(json_values)
        else:
            ids = [[list(range(8))] * draw(st.sampled_from([1, 300, 20000]))]     # one row referenced n times
        return {"topk_ids_of_layer": ids, "rank": draw(st.one_of(st.integers(0, 3), st.sampled_from(EXTREME_INTS),
                                                                 json_values))}
    recs = [record() for _ in range(draw(st.integers(0, 3)))]
    if recs and draw(st.integers(0, 4)) == 0:
        recs = recs * draw(st.sampled_from([2, 1000, 20000]))       # one record referenced many times
    obj = {"records": recs}
    if draw(st.booleans()):
        obj["last_physical_to_logical_map"] = draw(st.one_of(st.just(torch.arange(8).view(1, 8)), tensors()))
    buf = io.BytesIO()
    torch.save(obj, buf)
    data = buf.getvalue()
    if draw(st.integers(0, 7)) == 0:
        src = zipfile.ZipFile(io.BytesIO(data))
        data = _zip([(i.filename, src.read(i), zipfile.ZIP_DEFLATED) for i in src.infolist()])
    return ".pt", draw(truncations(data))


def _top_indices(draw):
    ids = _ids(draw)
    if ids.ndim == 3 and ids.shape[0] and ids.dtype.kind in "iu" and draw(st.booleans()):
        return ids[0].tolist()
    return draw(matrices)


@st.composite
def megatron_routing_files(draw) -> tuple[str, bytes]:
    """Megatron routing JSON Lines: good lines, hostile values, deep nesting, binary garbage."""
    def line():
        rec = {"step": draw(st.one_of(st.integers(0, 2), st.sampled_from(EXTREME_INTS), json_values)),
               "layer": draw(st.one_of(st.integers(0, 2), st.sampled_from(EXTREME_INTS))),
               "rank": draw(st.one_of(st.integers(0, 2), st.sampled_from(EXTREME_INTS), json_values)),
               "top_indices": _top_indices(draw)}
        return json.dumps(rec)
    lines = [line() for _ in range(draw(st.integers(1, 4)))]
    if draw(st.integers(0, 5)) == 0:
        lines.append(draw(st.builds(deep_text, deep_depths, st.sampled_from(["json-list", "json-object"]))))
    data = ("\n".join(lines) + "\n").encode()
    if draw(st.integers(0, 7)) == 0:
        data = draw(st.binary(min_size=1, max_size=64)) + data
    return ".jsonl", draw(truncations(data))


@st.composite
def vllm_routing_files(draw) -> tuple[str, bytes]:
    """vLLM routed-experts JSON: responses, choices, hostile arrays, deep nesting."""
    def response():
        ids = _ids(draw)
        return {"routed_experts": ids.transpose(1, 0, 2).tolist() if ids.ndim == 3 and ids.dtype.kind in "iu"
                and draw(st.booleans())
                else draw(json_values)}
    shape = draw(st.sampled_from(["one", "list", "choices", "json"]))
    doc = (response() if shape == "one" else [response() for _ in range(draw(st.integers(0, 3)))] if shape == "list"
           else {"choices": [response() for _ in range(draw(st.integers(0, 2)))]} if shape == "choices"
           else draw(json_values))
    text = json.dumps(doc)
    if draw(st.integers(0, 6)) == 0:
        text = deep_text(draw(deep_depths), "json-list")
    return ".json", draw(truncations(text.encode()))


# ---------------------------------------------------------------------------------------
# List arguments (--gpu-speed, --gpu-slots): inline text or a file's text

list_items = st.one_of(
    st.sampled_from(["1", "1.4", "0", "-1", "nan", "inf", "1e308", "5e-324", "2", "x", "", "*", "1*", "*2"]),
    st.builds(lambda v, c: f"{v}*{c}", st.sampled_from(["1", "2", "1.4", "nan", "x"]),
              st.sampled_from(["0", "1", "4", "-1", "65536", "65537", "4294967296", "1e3", "9" * 5000])),
    st.text(max_size=8))


@st.composite
def list_arguments(draw) -> str:
    """A --gpu-speed / --gpu-slots text: items joined by commas, spaces or lines, sometimes huge."""
    items = draw(st.lists(list_items, min_size=0, max_size=8))
    text = draw(st.sampled_from([",", " ", "\n", ", "])).join(items)
    if draw(st.integers(0, 9)) == 0:
        text = (text + ",") * draw(st.sampled_from([100, 3000]))
    return text
