"""The fuzz corpus: hostile and malformed CLI inputs, one JSON file per case.

Each case in ``tests/fuzz_corpus/cases/`` gives the ``eplb`` arguments (``{tmp}`` is a
fresh directory, ``{file}`` the case's input file), how to build the input (literal
text, hex bytes, or a generator: deeply nested JSON, an ``.npz`` whose header declares an
array, a raw pickle) and the expected exit status. Every case must end with that status,
and a failing one with exactly one stderr line containing the expected fragment, no
traceback, and no ``*.tmp`` file left behind. See ``tests/fuzz_corpus/README.md``.
"""
import io
import json
import os
import pickle
import stat
import zipfile
from pathlib import Path

import numpy as np
import pytest

from benchmarks import hostile_round_three as hostile
from solvers.cli import main

CASES = sorted((Path(__file__).parent / "fuzz_corpus" / "cases").glob("*.json"))


def _make(spec: dict, tmp: Path) -> Path:
    path = tmp / spec["name"]
    path.parent.mkdir(parents=True, exist_ok=True)
    make = spec.get("make")
    if make == "nested":
        depth = spec["depth"]
        body = spec.get("open", "[") * depth + spec.get("inner", "") + spec.get("close", "]") * depth
        path.write_text(spec.get("prefix", "") + body + spec.get("suffix", ""))
    elif make == "npz_header":
        header = io.BytesIO()
        np.lib.format.write_array_header_1_0(header, {"descr": spec["descr"], "fortran_order": False,
                                                      "shape": tuple(spec["shape"])})
        with zipfile.ZipFile(path, "w") as zf:
            zf.writestr("loads.npy", header.getvalue() + b"\0" * 64)
    elif make == "zip_bomb":
        # one member of zeros, deflated: decompresses to spec["bytes"] from a few KB
        header = b""
        if spec.get("npy"):
            buf = io.BytesIO()
            np.lib.format.write_array_header_1_0(buf, {"descr": "<f8", "fortran_order": False,
                                                       "shape": (spec["bytes"] // 8,)})
            header = buf.getvalue()
        with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
            with zf.open(spec.get("member", "loads.npy"), "w", force_zip64=True) as fh:
                fh.write(header)
                block = b"\0" * (1 << 22)
                for _ in range(spec["bytes"] // len(block)):
                    fh.write(block)
    elif make == "pickle":
        path.write_bytes(pickle.dumps({"loads": [[1, 2, 3, 4]]}))
    elif make == "torch":
        # a torch.save of a named recipe (benchmarks/hostile_round_three.py: stride-0, meta,
        # sparse, shared rows, pickled os.system...)
        hostile.torch_file(path, hostile.TORCH_RECIPES[spec["recipe"]]())
    elif make == "torch_pickle":
        # a torch zip archive whose data.pkl is a list nested `depth` levels
        hostile.with_pickle(path, hostile.deep_list_pickle(spec["depth"]))
    elif make == "torch_deflated":
        hostile.deflated_storage(path, spec["bytes"])
    elif make == "routing_npz":
        # a canonical routing .npz: `ids` (nested lists) of `dtype`, `meta` as raw text
        hostile.routing_npz(path, np.array(spec["ids"], dtype=spec.get("dtype", "uint8")), spec["meta"])
    elif make == "routing_npz_sparse":
        hostile.npz_sparse_bomb(path, spec["entries"])
    elif make == "fifo":
        os.mkfifo(path)
    elif make == "symlink":
        # `name` links to `target` holding `target_text`
        (tmp / spec["target"]).write_text(spec["target_text"])
        path.symlink_to(tmp / spec["target"])
    elif make == "repeat":
        path.write_text(spec["text"] * spec["times"])
    elif "hex" in spec:
        path.write_bytes(bytes.fromhex(spec["hex"]))
    else:
        path.write_text(spec["text"])
    return path


def _case_param(path: Path):
    case = json.loads(path.read_text())
    marks = [pytest.mark.xfail(reason=case["xfail"], strict=True)] if "xfail" in case else []
    return pytest.param(case, id=case["id"], marks=marks)


@pytest.mark.parametrize("case", [_case_param(p) for p in CASES])
def test_fuzz_case(case, tmp_path, capsys):
    file = None
    for name, text in case.get("files_before", {}).items():
        (tmp_path / name).write_text(text)
    for extra in case.get("extra_files", []):
        _make(extra, tmp_path)
    if "file" in case:
        file = _make(case["file"], tmp_path)
    argv = [a.replace("{tmp}", str(tmp_path)).replace("{file}", str(file)) for a in case["argv"]]
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == case["rc"], f"exit {rc}, expected {case['rc']}; stderr: {err[-2000:]}"
    assert "Traceback" not in err
    if case["rc"] != 0:
        lines = err.strip().splitlines()
        assert len(lines) == 1, f"{len(lines)} stderr lines: {err[-2000:]}"
        assert case["stderr"].lower() in lines[0].lower(), lines[0]
    assert not [p for p in tmp_path.rglob("*.tmp*") if p.name not in case.get("files_after", {})], \
        "a partial file was left behind"
    for name, text in case.get("files_after", {}).items():      # user files that must be left as they were
        p = tmp_path / name
        assert p.is_file() and not p.is_symlink() and p.read_text() == text, f"{name} was changed"
    for name in case.get("fifos_after", []):
        assert stat.S_ISFIFO(os.lstat(tmp_path / name).st_mode), f"{name} is no longer a FIFO"


def test_the_corpus_is_not_empty():
    assert len(CASES) >= 50
