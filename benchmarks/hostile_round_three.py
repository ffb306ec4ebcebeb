"""Hostile input, round three: the routing readers, list arguments and writers (docs/robustness.md).

Builds each hostile file in a temporary directory, runs ``eplb`` on it in a child process
(a time limit, peak RSS read from ``wait4``) and judges the promise: exit 2 with one
stderr line and no traceback (or exit 0 where the input is valid), within the time limit,
under the RSS ceiling, and no user file lost, replaced or written through.

    python -m benchmarks.hostile_round_three [--root DIR] [--timeout 30] [--only CLASS]

``--root`` runs another checkout's ``solvers`` (the code before a fix) on the same cases.
The builders are shared with ``tests/test_robust_round_three.py``.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import pickle
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

RSS_CEILING_MB = 1536


# ---------------------------------------------------------------------------------------
# Hostile files

def npz_bomb(path: Path, entries: int = 256 << 20, member: str = "topk_ids") -> Path:
    """A routing .npz whose ``topk_ids`` ([1, entries, 1] uint8 zeros) deflates ~1000x."""
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "|u1", "fortran_order": False, "shape": (1, entries, 1)})
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
        with zf.open(f"{member}.npy", "w", force_zip64=True) as fh:
            fh.write(buf.getvalue())
            block = b"\0" * (1 << 22)
            for _ in range(entries // len(block)):
                fh.write(block)
        zf.writestr("meta.npy", _npy_bytes(np.array(json.dumps({"num_experts": 8}))))
    return path


def npz_sparse_bomb(path: Path, entries: int = 60 << 20) -> Path:
    """A routing .npz of ``entries`` uint8 ids, mostly 0, deflating ~70x (under the ratio
    and size a zip check alone refuses): ~0.9 MB that builds gigabytes of int64 copies."""
    rng = np.random.default_rng(0)
    ids = np.zeros((1, entries, 1), np.uint8)
    flat = ids.reshape(-1)
    where = rng.integers(0, entries, entries // 150)
    flat[where] = rng.integers(1, 8, len(where))
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
        zf.writestr("topk_ids.npy", _npy_bytes(ids))
        zf.writestr("meta.npy", _npy_bytes(np.array(json.dumps({"num_experts": 8}))))
    return path


def _npy_bytes(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, a, allow_pickle=False)
    return buf.getvalue()


def routing_npz(path: Path, ids: np.ndarray, meta_text: str) -> Path:
    """A canonical routing .npz with the given ids and raw meta text."""
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("topk_ids.npy", _npy_bytes(ids))
        zf.writestr("meta.npy", _npy_bytes(np.array(meta_text)))
    return path


def torch_file(path: Path, obj) -> Path:
    import torch
    torch.save(obj, path)
    return path


def with_pickle(path: Path, data: bytes) -> Path:
    """A torch zip archive whose data.pkl is ``data`` (the other records of a valid save)."""
    import torch
    tmp = path.with_suffix(".base")
    torch.save({"records": []}, tmp)
    with zipfile.ZipFile(tmp) as src, zipfile.ZipFile(path, "w") as dst:
        for info in src.infolist():
            dst.writestr(info.filename, data if info.filename.endswith("data.pkl") else src.read(info))
    tmp.unlink()
    return path


def deflated_storage(path: Path, nbytes: int) -> Path:
    """A torch file whose tensor storage (``nbytes`` of zeros) is deflated (torch stores it)."""
    import torch
    tmp = path.with_suffix(".base")
    torch.save({"records": [{"topk_ids_of_layer": torch.zeros(1, nbytes // 8, 2, dtype=torch.int32), "rank": 0}]},
               tmp)
    with zipfile.ZipFile(tmp) as src, zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            dst.writestr(info.filename, src.read(info))
    tmp.unlink()
    return path


def deep_list_pickle(depth: int) -> bytes:
    """A protocol-2 pickle of a list nested ``depth`` levels."""
    return b"\x80\x02" + b"]" * depth + b"a" * (depth - 1) + b"."


class _Evil:
    def __reduce__(self):
        return (os.system, ("true",))


# ---------------------------------------------------------------------------------------
# Cases

@dataclass
class Case:
    klass: str
    name: str
    build: Callable[[Path], list[str]]          # builds the input in tmp; returns the eplb argv
    rc: int = 2
    fragment: str = ""
    after: Callable[[Path], str | None] | None = None  # a user-file check: None when intact
    stdin: bytes | None = None


def _gen(tmp: Path, out: str, *extra: str) -> list[str]:
    return ["routing", "generate", "deepseek-v3", "--tokens", "64", "--out", out, *extra]


def _small_routing(tmp: Path) -> Path:
    return routing_npz(tmp / "ok.npz", np.array([[[0, 1], [2, 3]]], dtype=np.uint8), '{"num_experts": 4}')


def _loads(tmp: Path) -> Path:
    p = tmp / "w.csv"
    p.write_text("5,1,3,2,4,4,1,1\n1,1,4,9,2,2,3,3\n")
    return p


def _plans(tmp: Path) -> tuple[Path, Path, Path]:
    """Loads and two plans on them, made by the code under test (setup, not judged)."""
    loads = _loads(tmp)
    a, b = tmp / "a.json", tmp / "b.json"
    shape = ["--replicas", "12", "--gpus", "4", "--nodes", "2"]
    for out, extra in ((a, []), (b, ["--policy", "global"])):
        subprocess.run([sys.executable, "-m", "solvers.cli", "plan", "--loads", str(loads), *shape, *extra,
                        "--out", str(out)], check=True, capture_output=True)
    return loads, a, b


def _score(tmp: Path, out: str) -> list[str]:
    loads, a, b = _plans(tmp)
    return ["score", "--loads", str(loads), "--plan", str(b), "--previous", str(a), "--expert-bytes", "1000000",
            "--out", out]


def _fifo(tmp: Path, name: str = "fifo") -> Path:
    p = tmp / name
    os.mkfifo(p)
    return p


def _intact(path: Path, text: str) -> Callable[[Path], str | None]:
    return lambda tmp: None if path.is_file() and not path.is_symlink() and path.read_text() == text \
        else f"{path.name} changed"


def _still_fifo(tmp: Path) -> str | None:
    import stat
    p = next(tmp.glob("fifo*"))
    return None if p.exists() and stat.S_ISFIFO(os.lstat(p).st_mode) else "the FIFO was replaced"


def _user_tmp(tmp: Path) -> str | None:
    p = tmp / "out.npz.tmp"
    return None if p.read_text() == "mine" else "the user's out.npz.tmp was destroyed"


def _symlink_target(tmp: Path) -> str | None:
    return None if (tmp / "target.txt").read_text() == "precious" else "written through the symlink"


def _setup_symlink(tmp: Path, name: str) -> str:
    (tmp / "target.txt").write_text("precious")
    (tmp / name).symlink_to(tmp / "target.txt")
    return str(tmp / name)


def _gpu_speed_file(tmp: Path, text: str) -> str:
    p = tmp / "speeds.txt"
    p.write_text(text)
    return str(p)


def _plan_args(tmp: Path, *extra: str) -> list[str]:
    return ["plan", "--loads", str(_loads(tmp)), "--replicas", "12", "--gpus", "4", "--out", str(tmp / "p.json"),
            *extra]


def _plan_with(tmp: Path, edit: Callable[[dict], None]) -> list[str]:
    loads, a, _ = _plans(tmp)
    doc = json.loads(a.read_text())
    edit(doc)
    a.write_text(json.dumps(doc))
    return ["score", "--loads", str(loads), "--plan", str(a)]


def _records(ids) -> dict:
    return {"records": [{"topk_ids_of_layer": ids, "rank": 0}]}


def _torch_case(name: str, make: Callable[[], object], fragment: str = "", rc: int = 2) -> Case:
    def build(tmp: Path) -> list[str]:
        return ["routing", "info", str(torch_file(tmp / "dump.pt", make()))]
    return Case("routing readers", f"SGLang .pt: {name}", build, rc, fragment)


def _t():
    import torch
    return torch


# Torch objects of the SGLang per-token cases, by name (the fuzz corpus builds them too).
TORCH_RECIPES: dict[str, Callable[[], object]] = {
    "stride0": lambda: _records(_t().zeros(1, 1, 1, dtype=_t().int32).expand(58, 1 << 20, 8)),
    "meta": lambda: _records(_t().empty(2, 4, 2, dtype=_t().int32, device="meta")),
    "sparse": lambda: _records(_t().zeros(2, 4, 2, dtype=_t().int32).to_sparse()),
    "overlap": lambda: _records((_t().arange(64, dtype=_t().int32) % 8).as_strided((2, 8, 4), (1, 1, 1))),
    "view": lambda: _records((_t().arange(1 << 24, dtype=_t().int32) % 8)[:8].view(1, 4, 2)),
    "float": lambda: _records(_t().zeros(2, 4, 2)),
    "shared_rows": lambda: {"records": [{"topk_ids_of_layer": [[list(range(256))] * 20000], "rank": 0}]},
    "shared_records": lambda: (lambda r: {"records": [r] * 20000})(
        {"topk_ids_of_layer": _t().zeros(58, 64, 8, dtype=_t().int32), "rank": 0}),
    "evil": lambda: {"records": [_Evil()]},
    "huge_rank": lambda: {"records": [{"topk_ids_of_layer": _t().zeros(1, 2, 1, dtype=_t().int32), "rank": 2**70}]},
    "loads_shared_rows": lambda: {"loads": [list(range(256))] * 20000},
    "loads_evil": lambda: {"loads": _Evil()},
    "valid": lambda: _records(_t().tensor([[[0, 1], [2, 3]], [[1, 2], [3, 0]]], dtype=_t().int32)),
}


CASES: list[Case] = [
    # Routing readers ---------------------------------------------------------------------
    Case("routing readers", ".npz deflate bomb (256 MB of ids, ~260 KB)",
         lambda tmp: ["routing", "info", str(npz_bomb(tmp / "bomb.npz"))], fragment="bomb"),
    Case("routing readers", ".npz of 60M ids deflated 70x (0.9 MB)",
         lambda tmp: ["routing", "info", str(npz_sparse_bomb(tmp / "sparse.npz"))], fragment="routing entries"),
    Case("routing readers", ".npz deflate bomb via convert --out",
         lambda tmp: ["routing", "convert", str(npz_bomb(tmp / "bomb.npz")), "--out", str(tmp / "o.npz")],
         fragment="bomb"),
    Case("routing readers", ".npz header declares more than it holds",
         lambda tmp: ["routing", "info", str(_header_lie(tmp))], fragment="holds"),
    Case("routing readers", ".npz meta nested 100,000 deep",
         lambda tmp: ["routing", "info", str(routing_npz(tmp / "m.npz", np.zeros((1, 2, 1), np.uint8),
                                                          "[" * 100000 + "]" * 100000))], fragment="meta"),
    Case("routing readers", ".npz meta not JSON",
         lambda tmp: ["routing", "info", str(routing_npz(tmp / "m.npz", np.zeros((1, 2, 1), np.uint8), "{"))],
         fragment="meta"),
    Case("routing readers", ".npz meta num_experts a string",
         lambda tmp: ["routing", "info", str(routing_npz(tmp / "m.npz", np.zeros((1, 2, 1), np.uint8),
                                                          '{"num_experts": "8"}'))], fragment="num_experts"),
    Case("routing readers", ".npz meta num_experts 10**30",
         lambda tmp: ["routing", "info", str(routing_npz(tmp / "m.npz", np.zeros((1, 2, 1), np.uint8),
                                                          '{"num_experts": 1000000000000000000000000000000}'))],
         fragment="num_experts"),
    Case("routing readers", ".npz ids of dtype object (pickled)",
         lambda tmp: ["routing", "info", str(_object_ids(tmp))], fragment="object"),
    _torch_case("stride-0 ids (2 KB declaring 1.6 GB)", TORCH_RECIPES["stride0"], "stride of 0"),
    _torch_case("meta-device ids", TORCH_RECIPES["meta"], "meta"),
    _torch_case("sparse ids", TORCH_RECIPES["sparse"], "sparse"),
    _torch_case("overlapping ids", TORCH_RECIPES["overlap"], "overlapping"),
    _torch_case("a view of a 64 MB storage", TORCH_RECIPES["view"], "view"),
    _torch_case("float ids", TORCH_RECIPES["float"], "integer"),
    _torch_case("shared rows (one list referenced 20,000 times)", TORCH_RECIPES["shared_rows"], "shared"),
    _torch_case("records referenced 20,000 times", TORCH_RECIPES["shared_records"], "routing entries"),
    _torch_case("pickled os.system", TORCH_RECIPES["evil"], "pickled Python objects"),
    _torch_case("rank 2**70", TORCH_RECIPES["huge_rank"], "rank"),
    Case("routing readers", "SGLang .pt: deflated storage (1.5 MB to 1.5 GB)",
         lambda tmp: ["routing", "info", str(deflated_storage(tmp / "d.pt", 1536 << 20))], fragment="bomb"),
    Case("routing readers", "SGLang .pt: pickle of lists nested 80,000 deep",
         lambda tmp: ["routing", "info", str(with_pickle(tmp / "n.pt", deep_list_pickle(80000)))],
         fragment="deeper"),
    Case("routing readers", "SGLang .pt: raw pickle",
         lambda tmp: ["routing", "info", str(_raw_pickle(tmp))], fragment="pickle"),
    Case("routing readers", "Megatron line nested 100,000 deep",
         lambda tmp: ["routing", "info", str(_text(tmp / "m.jsonl", "[" * 100000 + "]" * 100000 + "\n"))],
         fragment="line 1"),
    Case("routing readers", "Megatron top_indices nested 100,000 deep",
         lambda tmp: ["routing", "info", str(_text(tmp / "m.jsonl", '{"step":0,"layer":0,"rank":0,"top_indices":'
                                                    + "[" * 100000 + "]" * 100000 + "}\n"))], fragment="line 1"),
    Case("routing readers", "Megatron rank 2**63",
         lambda tmp: ["routing", "info", str(_text(tmp / "m.jsonl", json.dumps(
             {"step": 0, "layer": 0, "rank": 2**63, "top_indices": [[0, 1]]}) + "\n"))], fragment="rank"),
    Case("routing readers", "Megatron step -1",
         lambda tmp: ["routing", "info", str(_text(tmp / "m.jsonl", json.dumps(
             {"step": -1, "layer": 0, "rank": 0, "top_indices": [[0, 1]]}) + "\n"))], fragment="step"),
    Case("routing readers", "Megatron binary garbage",
         lambda tmp: ["routing", "info", str(_bytes(tmp / "m.jsonl", bytes(range(255, 127, -1)) * 40))],
         fragment="UTF-8"),
    Case("routing readers", "Megatron ids 2**64",
         lambda tmp: ["routing", "info", str(_text(tmp / "m.jsonl", json.dumps(
             {"step": 0, "layer": 0, "rank": 0, "top_indices": [[2**64, 1]]}) + "\n"))], fragment="integer"),
    Case("routing readers", "vLLM JSON nested 100,000 deep",
         lambda tmp: ["routing", "info", str(_text(tmp / "v.json", "[" * 100000 + "]" * 100000))],
         fragment="nested"),
    Case("routing readers", "vLLM JSON binary garbage",
         lambda tmp: ["routing", "info", str(_bytes(tmp / "v.json", bytes(range(255, 127, -1)) * 40))],
         fragment="UTF-8"),
    Case("routing readers", "vLLM .npy header declares 10**12 ids",
         lambda tmp: ["routing", "info", str(_npy_lie(tmp))], fragment="not hold"),
    # Loads readers (the same tricks through --loads) ---------------------------------------
    Case("loads readers", ".pt shared rows (41 KB, one list referenced 20,000 times)",
         lambda tmp: ["plan", "--loads", str(torch_file(tmp / "l.pt", TORCH_RECIPES["loads_shared_rows"]())),
                      "--replicas", "264", "--gpus", "8", "--out", str(tmp / "p.json")], fragment="shared"),
    Case("loads readers", ".pt pickle of lists nested 80,000 deep",
         lambda tmp: ["plan", "--loads", str(with_pickle(tmp / "n.pt", deep_list_pickle(80000))),
                      "--replicas", "12", "--gpus", "4", "--out", str(tmp / "p.json")], fragment="deeper"),
    Case("loads readers", ".pt pickled os.system (no weights_only advice)",
         lambda tmp: ["plan", "--loads", str(torch_file(tmp / "e.pt", TORCH_RECIPES["loads_evil"]())),
                      "--replicas", "12", "--gpus", "4", "--out", str(tmp / "p.json")],
         fragment="pickled Python objects"),
    Case("loads readers", "a FIFO as --loads",
         lambda tmp: ["plan", "--loads", str(_fifo(tmp, "l.csv")), "--replicas", "12", "--gpus", "4", "--out",
                      str(tmp / "p.json")],
         fragment="FIFO"),
    Case("loads readers", "a name of 5,000 characters as --loads",
         lambda tmp: ["plan", "--loads", "x" * 5000 + ".csv", "--replicas", "12", "--gpus", "4", "--out",
                      str(tmp / "p.json")],
         fragment="loads"),
    # Smaller -------------------------------------------------------------------------------
    Case("smaller", "duplicate ids in one token's top-k",
         lambda tmp: ["routing", "info", str(routing_npz(tmp / "d.npz", np.array([[[1, 1], [0, 2]]], np.uint8),
                                                          '{"num_experts": 4}'))], fragment="more than once"),
    Case("smaller", "uint64 maximum as an id",
         lambda tmp: ["routing", "info", str(routing_npz(tmp / "u.npz", np.full((1, 2, 1), 2**64 - 1, np.uint64),
                                                          '{"num_experts": 4}'))], fragment="18446744073709551615"),
    Case("smaller", "a FIFO as a routing file",
         lambda tmp: ["routing", "info", str(_fifo(tmp, "r.npz"))], fragment="FIFO"),
    Case("smaller", "a dict as gpu_slots in a plan file",
         lambda tmp: _plan_with(tmp, lambda d: d["problem"].update(gpu_slots={"3": 1, "4": 1, "5": 1, "6": 1})),
         fragment="gpu_slots"),
    Case("smaller", "valid routing file (control)", lambda tmp: ["routing", "info", str(_small_routing(tmp))], rc=0),
    # List arguments ------------------------------------------------------------------------
    Case("list arguments", "--gpu-speed file of 1*65536 x 10,000 (160 KB to 655M values)",
         lambda tmp: _plan_args(tmp, "--gpu-speed", _gpu_speed_file(tmp, "1*65536\n" * 10000)),
         fragment="gpu_speed"),
    Case("list arguments", "--gpu-slots 1*65536 x 3,000 inline",
         lambda tmp: _plan_args(tmp, "--gpu-slots", ",".join(["1*65536"] * 3000)), fragment="gpu_slots"),
    Case("list arguments", "--gpu-speed file holding a secret",
         lambda tmp: _plan_args(tmp, "--gpu-speed", _gpu_speed_file(tmp, "1,1\nAWS_SECRET=hunter2\n1,1\n")),
         fragment="line 2"),
    Case("list arguments", "--gpu-speed of 5,000 characters",
         lambda tmp: _plan_args(tmp, "--gpu-speed", "1," * 2500), fragment="gpu_speed"),
    Case("list arguments", "--gpu-speed a path of 5,000 characters",
         lambda tmp: _plan_args(tmp, "--gpu-speed", "/" + "d" * 5000), fragment="gpu_speed"),
    Case("list arguments", "--gpu-slots a binary file",
         lambda tmp: _plan_args(tmp, "--gpu-slots", str(_bytes(tmp / "s.bin", bytes(range(256))))),
         fragment="gpu_slots"),
    Case("list arguments", "--gpu-speed a 4 MB file", lambda tmp: _plan_args(tmp, "--gpu-speed", str(_big(tmp))),
         fragment="gpu_speed"),
    # Writers -------------------------------------------------------------------------------
    Case("writers", "routing generate --out X where X.tmp is the user's file",
         lambda tmp: (_text(tmp / "out.npz.tmp", "mine"), _gen(tmp, str(tmp / "out.npz")))[1], rc=0,
         after=_user_tmp),
    Case("writers", "routing generate --out a FIFO",
         lambda tmp: (_fifo(tmp, "fifo.npz"), _gen(tmp, str(tmp / "fifo.npz")))[1], fragment="FIFO",
         after=_still_fifo),
    Case("writers", "routing generate --out a symlink",
         lambda tmp: _gen(tmp, _setup_symlink(tmp, "link.npz")), rc=0, after=_symlink_target),
    Case("writers", "routing generate --out a 255-byte name",
         lambda tmp: _gen(tmp, str(tmp / ("r" * 251 + ".npz"))), rc=0),
    Case("writers", "routing convert --out a FIFO",
         lambda tmp: ["routing", "convert", str(_small_routing(tmp)), "--out", str(_fifo(tmp, "fifo.npz"))],
         fragment="FIFO",
         after=_still_fifo),
    Case("writers", "score --out a FIFO", lambda tmp: (_fifo(tmp, "fifo.json"), _score(tmp, str(tmp / "fifo.json")))[1],
         fragment="FIFO", after=_still_fifo),
    Case("writers", "score --out a symlink", lambda tmp: _score(tmp, _setup_symlink(tmp, "link.json")), rc=0,
         after=_symlink_target),
    Case("writers", "score --out a 255-byte name", lambda tmp: _score(tmp, str(tmp / ("s" * 250 + ".json"))), rc=0),
    Case("writers", "score --out .csv over the user's file, writing fails (file size limit)",
         lambda tmp: (_text(tmp / "s.csv", "precious"), _score(tmp, str(tmp / "s.csv")))[1], rc=-1,
         after=lambda tmp: _intact(tmp / "s.csv", "precious")(tmp)),
]


def _text(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def _bytes(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _big(tmp: Path) -> Path:
    p = tmp / "big.txt"
    with p.open("w") as fh:
        line = "1," * 4096 + "\n"
        for _ in range(4 << 20 >> 13):
            fh.write(line)
    return p


def _header_lie(tmp: Path) -> Path:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "|u1", "fortran_order": False, "shape": (61, 10**6, 8)})
    p = tmp / "lie.npz"
    with zipfile.ZipFile(p, "w") as zf:
        zf.writestr("topk_ids.npy", buf.getvalue() + b"\0" * 64)
        zf.writestr("meta.npy", _npy_bytes(np.array('{"num_experts": 8}')))
    return p


def _npy_lie(tmp: Path) -> Path:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "<i4", "fortran_order": False, "shape": (10**6, 10**3, 10**3)})
    return _bytes(tmp / "lie.npy", buf.getvalue() + b"\0" * 64)


def _object_ids(tmp: Path) -> Path:
    p = tmp / "o.npz"
    buf = io.BytesIO()
    np.save(buf, np.array([[[1, 2]]], dtype=object), allow_pickle=True)
    with zipfile.ZipFile(p, "w") as zf:
        zf.writestr("topk_ids.npy", buf.getvalue())
        zf.writestr("meta.npy", _npy_bytes(np.array('{"num_experts": 8}')))
    return p


def _raw_pickle(tmp: Path) -> Path:
    return _bytes(tmp / "r.pt", pickle.dumps({"records": [{"topk_ids_of_layer": [[[1, 2]]]}]}))


# ---------------------------------------------------------------------------------------
# Running

@dataclass
class Outcome:
    rc: int | None
    seconds: float
    rss_mb: float
    stderr: str
    problems: list[str] = field(default_factory=list)      # the promise broken
    notes: list[str] = field(default_factory=list)         # one line, exit 2, but not the expected reason


def _limits(fsize: int | None, mem_bytes: int):
    def apply():
        resource.setrlimit(resource.RLIMIT_AS, (mem_bytes, mem_bytes))
        if fsize is not None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
        os.setsid()
    return apply


def run_case(case: Case, root: Path, timeout: float = 30, mem_gb: float = 4) -> Outcome:
    """Build and run one case with ``root``'s solvers; the judged outcome."""
    with tempfile.TemporaryDirectory(prefix="eplb-hostile-") as d:
        tmp = Path(d)
        env = {**os.environ, "PYTHONPATH": str(root)}
        old = os.environ.get("PYTHONPATH")
        os.environ["PYTHONPATH"] = str(root)                 # the setup's own eplb runs (plans)
        try:
            argv = case.build(tmp)
        finally:
            if old is None:
                os.environ.pop("PYTHONPATH", None)
            else:
                os.environ["PYTHONPATH"] = old
        fsize = 4 if case.rc == -1 else None                  # -1: the write must fail
        start = time.monotonic()
        chunks: list[bytes] = []
        # stderr through a pipe (a file limit of a few bytes must not cut the error line short)
        proc = subprocess.Popen([sys.executable, "-m", "solvers.cli", *argv], env=env, cwd=tmp,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                preexec_fn=_limits(fsize, int(mem_gb * (1 << 30))))
        reader = threading.Thread(target=lambda: chunks.append(proc.stderr.read()), daemon=True)
        reader.start()
        if True:
            rc = None
            usage = None
            while time.monotonic() - start < timeout:
                pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
                if pid:
                    rc = os.waitstatus_to_exitcode(status)
                    proc.returncode = rc
                    break
                time.sleep(0.02)
            if rc is None:
                os.killpg(proc.pid, signal.SIGKILL)
                _, _, usage = os.wait4(proc.pid, 0)
                proc.returncode = -9
        seconds = time.monotonic() - start
        reader.join(5)
        proc.stderr.close()
        stderr = b"".join(chunks).decode(errors="replace")
        out = Outcome(rc, seconds, usage.ru_maxrss / 1024 if usage else 0.0, stderr)
        lines = stderr.strip().splitlines()
        expected = 2 if case.rc == -1 else case.rc
        if rc is None:
            out.problems.append(f"no exit within {timeout:.0f} s")
        elif rc != expected:
            out.problems.append(f"exit {rc}, expected {expected}")
        if "Traceback" in stderr:
            out.problems.append("traceback")
        if expected != 0 and rc is not None and len(lines) != 1:
            out.problems.append(f"{len(lines)} stderr lines")
        if expected != 0 and lines and case.fragment and case.fragment.lower() not in lines[-1].lower():
            out.notes.append(f"message lacks {case.fragment!r}")
        if "hunter2" in stderr or "weights_only=False" in stderr:
            out.problems.append("echoes what it must not")
        if out.rss_mb > RSS_CEILING_MB:
            out.problems.append(f"peak RSS {out.rss_mb:.0f} MB")
        if case.after is not None:
            why = case.after(tmp)
            if why:
                out.problems.append(why)
        if list(tmp.rglob("*.tmp")) and case.after is not _user_tmp:
            out.problems.append("a .tmp file left behind")
        return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    ap.add_argument("--timeout", type=float, default=30)
    ap.add_argument("--only", default=None, help="run only the cases of this class")
    ap.add_argument("--match", default=None, help="run only the cases whose name holds this text")
    args = ap.parse_args(argv)
    counts: dict[str, list[int]] = {}
    for case in CASES:
        if (args.only and case.klass != args.only) or (args.match and args.match not in case.name):
            continue
        o = run_case(case, args.root, args.timeout)
        tally = counts.setdefault(case.klass, [0, 0, 0])
        tally[0] += 1
        tally[1] += bool(o.problems)
        tally[2] += bool(o.notes) and not o.problems
        verdict = ("FAIL " + "; ".join(o.problems) if o.problems else
                   "unclear: " + "; ".join(o.notes) if o.notes else "ok")
        first = (o.stderr.strip().splitlines() or [""])[-1][:150]
        print(f"{case.klass:16} | {case.name[:58]:58} | rc {o.rc} | {o.seconds:5.1f} s | {o.rss_mb:6.0f} MB | "
              f"{verdict} | {first}", flush=True)
    print()
    print("| class | cases | promise broken | one line, another reason |")
    print("|---|---|---|---|")
    for klass, (n, bad, unclear) in counts.items():
        print(f"| {klass} | {n} | {bad} | {unclear} |")
    print(f"| all | {sum(c[0] for c in counts.values())} | {sum(c[1] for c in counts.values())} | "
          f"{sum(c[2] for c in counts.values())} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
