"""Cost of appending benchmark rows to the result store (solvers.bench.store.ResultStore).

    .venv/bin/python -m benchmarks.store_append [--rows 200,1000] [--out DIR]

For each N: append N synthetic rows to a fresh store, then finish it (write_final), and
print the bytes handed to write() by this process (Linux /proc/self/io ``wchar``; what
the store wrote, independent of the machine's speed) and the wall time, for the appends
and for the finish separately, plus the bytes per append of the last tenth of the rows
(flat when appending is linear overall).
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path


def _wchar() -> int:
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("wchar:"):
            return int(line.split()[1])
    raise RuntimeError("no wchar in /proc/self/io")


def _row(i: int) -> dict:
    from solvers.bench.store import COLUMNS
    row = {c: "" for c in COLUMNS}
    row.update(instance=f"deepseek-v3|L4|N8xP64xR320|skewed|T8W4-{i % 50}", model="deepseek-v3", num_layers=4,
               num_experts=256, num_groups=8, num_replicas=320, num_nodes=8, num_gpus=64, slots_per_gpu=5, steps=8,
               window=4, seed=i, solver="kk_swap", kind="heuristic", options=json.dumps({"policy": "global"}),
               policy="global", status="feasible", objective=1.01 * (i + 1), lower_bound=1.0 * (i + 1),
               wall_time_s=0.123, threads=1, host="bench",
               objective_layers=json.dumps([1.0 + i / 1e4] * 4), lower_bound_layers=json.dumps([1.0] * 4))
    return row


def measure(n: int, out: Path) -> dict:
    from solvers.bench.store import ResultStore
    store = ResultStore(out / f"n{n}", overwrite=True)
    rows = [_row(i) for i in range(n)]
    w0, t0 = _wchar(), time.perf_counter()
    tail_from = n - max(1, n // 10)
    w_tail = w0
    for i, row in enumerate(rows):
        if i == tail_from:
            w_tail = _wchar()
        store.append(row)
    w1, t1 = _wchar(), time.perf_counter()
    store.write_final(store.frame())
    w2, t2 = _wchar(), time.perf_counter()
    return {"rows": n, "append_bytes": w1 - w0, "append_s": round(t1 - t0, 3),
            "bytes_per_append_last_tenth": round((w1 - w_tail) / (n - tail_from)),
            "final_bytes": w2 - w1, "final_s": round(t2 - t1, 3)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default="200,1000", help="comma-separated row counts")
    ap.add_argument("--out", default=None, help="directory for the stores (default: a temporary one)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(args.out) if args.out else Path(tmp)
        for n in (int(x) for x in args.rows.split(",")):
            print(json.dumps(measure(n, out)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
