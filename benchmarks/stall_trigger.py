"""Does rebalancing pay? The stall-aware trigger against fixed periods, by net throughput.

    .venv/bin/python -m benchmarks.stall_trigger [--traces NAME ...] [--horizon 8] [--step-seconds 1]

For each shipped drifting or shifting trace (on its model's default cluster, the documented
default network: intra-node 400 GB/s, inter-node 50 GB/s per GPU, the model's expert bytes,
synchronous copies, ``--step-seconds`` per balanced step) and each re-planning mode (plain,
migration slack 0.01), the sweep's fixed periods and the stall-aware trigger (checked at the
smallest period, one horizon fixed in advance for every trace: ``--horizon``) are simulated.
Printed: rebalances, stalls, realised imbalance and net efficiency (balanced stall-free time
over serving plus stall time) of each, and whether the stall-aware trigger reaches the best
fixed period's net throughput. Target: it does on every trace and mode.
"""
from __future__ import annotations

import argparse
import os

import torch

from solvers.cluster import CLUSTERS, MODELS
from solvers.dynamics.sweep import sweep
from solvers.io import read_loads

# (trace, model, planning window, fixed periods of the sweep)
TRACES = (("olmoe-1b-7b-drifting", "olmoe-1b-7b", 16, (4, 8, 16, 32, 64)),
          ("mixtral-8x7b-shifting-mix", "mixtral-8x7b", 16, (4, 8, 16, 32, 64)),
          ("deepseek-v3-shifting-mix", "deepseek-v3", 4, (2, 4, 8, 16)))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--traces", nargs="*", default=[t[0] for t in TRACES])
    ap.add_argument("--horizon", type=int, default=8, help="the stall-aware trigger's gain horizon (steps)")
    ap.add_argument("--step-seconds", type=float, default=1.0, help="seconds of one balanced step")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    load = f"{os.getloadavg()[0]:.2f}" if hasattr(os, "getloadavg") else "n/a"
    print(f"# stall-aware trigger  horizon={args.horizon}  step_seconds={args.step_seconds:g}  load(1min)={load}")
    ok = True
    for name, model, window, periods in TRACES:
        if name not in args.traces:
            continue
        preset = MODELS[model]
        trace = read_loads(name).trace
        cluster = CLUSTERS[preset.cluster].cluster(preset.num_experts)
        rows = sweep(trace, periods=periods, slacks=(None, 0.01), window=window, expert_bytes=preset.expert_bytes,
                     horizons=(args.horizon,), step_seconds=args.step_seconds, cluster=cluster,
                     num_groups=preset.num_groups)
        print(f"\n## {name} ({trace.shape[0]} steps) on {cluster.describe()}, window {window}\n")
        print("| mode | trigger | rebalances | declined | stall s | mean imbalance | net efficiency |")
        print("|---|---|---|---|---|---|---|")
        for slack in (None, 0.01):
            mine = [r for r in rows if r["migration_slack"] == slack]
            for r in mine:
                print(f"| {'plain' if slack is None else 'slack 0.01'} | {r['trigger']} | {r['rebalances']} | "
                      f"{r['skipped_rebalances']} | {r['stall_seconds']:.3g} | {r['mean_imbalance']:.4f} | "
                      f"{r['net_efficiency']:.4f} |")
            fixed = max(r["net_efficiency"] for r in mine if r["gain_horizon"] is None)
            aware = next(r["net_efficiency"] for r in mine if r["gain_horizon"] is not None)
            met = aware >= fixed * (1 - 1e-9)
            ok &= met
            print(f"\n{'PASS' if met else 'FAIL'} ({'plain' if slack is None else 'slack 0.01'}): stall-aware "
                  f"{aware:.4f} vs best fixed period {fixed:.4f} ({100 * (aware / fixed - 1):+.2f} %)\n")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
