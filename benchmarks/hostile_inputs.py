"""Peak memory and time of the CLI on hostile inputs (each run under ``/usr/bin/time -v``).

Builds the files in a temporary directory (a 100,000-deep vLLM JSON, loads JSON and plan
file, an ``.npz`` whose header declares 100000 x 100000, a raw pickle named ``.pt``, an
~80 MB long-form CSV), then runs ``eplb`` on them and on huge sizes, printing exit status,
wall time, peak RSS and the first stderr line.

    python -m benchmarks.hostile_inputs [--csv-steps 350]
"""
from __future__ import annotations

import argparse
import io
import os
import pickle
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import numpy as np

DEPTH = 100_000


def build(tmp: Path, csv_steps: int) -> dict[str, Path]:
    deep = "[" * DEPTH + "]" * DEPTH
    files = {"vllm": tmp / "deep_vllm.json", "loads_json": tmp / "deep_loads.json", "plan": tmp / "deep_plan.json",
             "npz": tmp / "huge_header.npz", "pickle": tmp / "raw_pickle.pt", "csv": tmp / "long.csv",
             "ok": tmp / "ok.csv", "twelve": tmp / "twelve.csv", "e256": tmp / "e256.csv"}
    files["vllm"].write_text('{"load_history": [{"logical_expert_load": ' + deep + "}]}")
    files["loads_json"].write_text(deep)
    files["plan"].write_text('{"phy2log": ' + deep + "}")
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f8", "fortran_order": False, "shape": (100000, 100000)})
    with zipfile.ZipFile(files["npz"], "w") as zf:
        zf.writestr("loads.npy", header.getvalue() + b"\0" * 64)
    files["pickle"].write_bytes(pickle.dumps({"loads": [[1, 2, 3, 4]]}))
    rng = np.random.default_rng(0)
    L, E = 58, 256
    lay, exp = np.repeat(np.arange(L), E), np.tile(np.arange(E), L)
    with files["csv"].open("w") as fh:
        fh.write("layer,expert,load,step\n")
        for t in range(csv_steps):
            w = rng.integers(0, 100000, L * E)
            fh.write("".join(f"{a},{b},{c},{t}\n" for a, b, c in zip(lay, exp, w)))
    files["ok"].write_text("1,2,3,4\n5,6,7,8\n")
    files["twelve"].write_text(",".join(str(int(x)) for x in rng.integers(1, 1000, 12)) + "\n")
    files["e256"].write_text(",".join(str(int(x)) for x in rng.integers(1, 1000, 256)) + "\n")
    return files


def runs(f: dict[str, Path], out: Path) -> list[tuple[str, list[str]]]:
    plan = ["plan", "--out", str(out)]
    small = ["--replicas", "8", "--gpus", "2"]
    return [
        ("vLLM JSON nested 100k", plan + ["--loads", str(f["vllm"])] + small),
        ("loads JSON nested 100k", plan + ["--loads", str(f["loads_json"])] + small),
        ("plan JSON nested 100k (score)", ["score", "--loads", str(f["ok"]), "--plan", str(f["plan"])]),
        (".npz header 100000x100000", plan + ["--loads", str(f["npz"])] + small),
        ("raw pickle as .pt", plan + ["--loads", str(f["pickle"])] + small),
        (f"long CSV {f['csv'].stat().st_size / 1e6:.0f} MB", plan + ["--loads", str(f["csv"]), "--replicas", "256",
                                                                   "--gpus", "8"]),
        ("--replicas 10**7", plan + ["--loads", str(f["ok"]), "--replicas", str(10**7), "--gpus", "2"]),
        ("--replicas 10**18", plan + ["--loads", str(f["ok"]), "--replicas", str(10**18), "--gpus", "2"]),
        ("--replicas 10**30", plan + ["--loads", str(f["ok"]), "--replicas", str(10**30), "--gpus", "2"]),
        ("kk_swap E12 R1000 P8", plan + ["--loads", str(f["twelve"]), "--replicas", "1000", "--gpus", "8",
                                         "--solver", "kk_swap"]),
        ("joint E12 R1000 P8", plan + ["--loads", str(f["twelve"]), "--replicas", "1000", "--gpus", "8",
                                       "--solver", "joint"]),
        ("best E12 R1000 P8", plan + ["--loads", str(f["twelve"]), "--replicas", "1000", "--gpus", "8",
                                      "--solver", "best"]),
        ("best E12 R1200 P8", plan + ["--loads", str(f["twelve"]), "--replicas", "1200", "--gpus", "8",
                                      "--solver", "best"]),
        ("best E256 R288 P2", plan + ["--loads", str(f["e256"]), "--replicas", "288", "--gpus", "2",
                                      "--solver", "best"]),
        ("generate --steps 10**9", ["generate", "deepseek-v3", "--steps", str(10**9), "--out", str(out) + ".npz"]),
        ("generate --tokens-per-step 2**62", ["generate", "deepseek-v3", "--tokens-per-step", str(2**62),
                                              "--out", str(out) + ".npz"]),
        ("generate --layers 99999", ["generate", "deepseek-v3", "--layers", "99999", "--out", str(out) + ".npz"]),
    ]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv-steps", type=int, default=350, help="steps of the long CSV (350: about 80 MB)")
    args = ap.parse_args(argv)
    eplb = [sys.executable, "-m", "solvers.cli"]
    print(f"load average at start: {os.getloadavg()}")
    print(f"{'input':>34} {'rc':>3} {'wall s':>7} {'peak MB':>8}  stderr")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        files = build(tmp, args.csv_steps)
        for name, cmd in runs(files, tmp / "out.json"):
            p = subprocess.run(["/usr/bin/time", "-v"] + eplb + cmd, capture_output=True, text=True, timeout=900,
                               env={**os.environ, "OMP_NUM_THREADS": "1"})
            wall = re.search(r"Elapsed \(wall clock\) time.*: (?:(\d+):)?(\d+):([\d.]+)", p.stderr)
            secs = (int(wall[1] or 0) * 3600 + int(wall[2]) * 60 + float(wall[3])) if wall else float("nan")
            rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr)
            err = [ln for ln in p.stderr.splitlines() if ln.startswith("eplb:") or "Error" in ln][:1]
            print(f"{name:>34} {p.returncode:3d} {secs:7.2f} {int(rss[1]) / 1024 if rss else float('nan'):8.0f}  "
                  f"{(err[0][:110] if err else '')}")
    print(f"load average at end: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
