"""Peak memory of the streamed vLLM JSON reader on a generated history of ~200 MB.

    .venv/bin/python -m benchmarks.json_memory [--size-mb 200] [--keep FILE] [--with-json-load]

Writes a DeepSeek-V3-shaped ``{"load_history": [...]}`` file (58 layers x 256 experts per
step, steps added until the file reaches the size), then reads it in fresh processes and
prints each reader's peak resident memory (the kernel's ``VmHWM``, reset after the
imports through ``/proc/self/clear_refs``) above the resident memory before reading:

- ``sum (read_weights)``: the ``--loads`` path, summing steps while streaming;
- ``trace (read_trace)``: the whole ``[steps, layers, experts]`` int64 trace;
- ``json.load`` (optional): the naive whole-document parse, for comparison.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_CHILD = r"""
import json, sys, time
import solvers.workloads as w

def status_kib(field):
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])

# Reset the kernel's peak-RSS mark (VmHWM) so the imports' own peak does not count.
with open("/proc/self/clear_refs", "w") as fh:
    fh.write("5")
base = status_kib("VmRSS")
t0 = time.perf_counter()
mode, path = sys.argv[1], sys.argv[2]
if mode == "sum":
    out = w.read_weights(path); shape = tuple(out.shape); nbytes = out.numel() * out.element_size()
elif mode == "trace":
    out = w.read_trace(path).loads; shape = tuple(out.shape); nbytes = out.numel() * out.element_size()
else:
    with open(path) as fh:
        doc = json.load(fh)
    shape = (len(doc["load_history"]),); nbytes = 0
wall = time.perf_counter() - t0
peak = status_kib("VmHWM")
print(json.dumps({"base_kib": base, "peak_kib": peak, "wall_s": wall, "shape": shape, "result_bytes": nbytes}))
"""


def write_history(path: Path, size_mb: float, seed: int = 0) -> tuple[int, int]:
    """Write steps of a generated DeepSeek-V3 trace until the file holds ``size_mb`` MB."""
    from solvers.workloads import generate

    target = int(size_mb * 1e6)
    steps = 0
    with path.open("w") as fh:
        fh.write('{"model": "deepseek-v3 (generated)", "load_history": [')
        while fh.tell() < target:
            block = generate("deepseek-v3", "drifting", steps=200, seed=seed + steps).loads.tolist()
            for step in block:
                if fh.tell() >= target:
                    break
                fh.write(("," if steps else "") + json.dumps({"logical_expert_load": step}, separators=(",", ":")))
                steps += 1
        fh.write("]}\n")
    return steps, path.stat().st_size


def measure(mode: str, path: Path) -> dict:
    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=str(root) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", _CHILD, mode, str(path)], capture_output=True, text=True,
                         env=env, cwd=root)
    if out.returncode != 0:
        raise SystemExit(f"{mode} failed: {out.stderr.strip().splitlines()[-1] if out.stderr else out.returncode}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mb", type=float, default=200.0, help="size of the generated JSON (default 200)")
    ap.add_argument("--keep", default=None, help="write the JSON here and keep it (default: a temp file)")
    ap.add_argument("--with-json-load", action="store_true", help="also measure json.load of the whole file")
    args = ap.parse_args(argv)

    tmpdir = None
    if args.keep:
        path = Path(args.keep)
    else:
        tmpdir = tempfile.TemporaryDirectory()
        path = Path(tmpdir.name) / "history.json"
    t0 = time.perf_counter()
    steps, size = write_history(path, args.size_mb)
    print(f"file: {size / 1e6:.1f} MB, {steps} steps x 58 layers x 256 experts "
          f"(written in {time.perf_counter() - t0:.1f} s); load average {os.getloadavg()[0]:.2f}")
    modes = ["sum", "trace"] + (["json.load"] if args.with_json_load else [])
    print(f"{'reader':<22} {'peak RSS MB':>12} {'above base MB':>14} {'result MB':>10} {'x file':>7} {'wall s':>8}")
    for mode in modes:
        r = measure(mode, path)
        peak, above = r["peak_kib"] / 1024, (r["peak_kib"] - r["base_kib"]) / 1024
        label = {"sum": "sum (read_weights)", "trace": "trace (read_trace)"}.get(mode, mode)
        print(f"{label:<22} {peak:12.1f} {above:14.1f} {r['result_bytes'] / 2**20:10.1f} "
              f"{above * 2**20 / size:7.2f} {r['wall_s']:8.2f}")
    if tmpdir is not None:
        tmpdir.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
