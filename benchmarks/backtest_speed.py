"""Speed of the ``backtest`` planner on the DeepSeek-V3 shape: target <= 1 s per plan.

58 layers x 256 experts on the cluster presets ``prefill-4x8`` (288 slots on 32 GPUs) and
``decode-ep64`` (320 slots on 64 GPUs), planned on 16 steps of generated drifting,
shifting-mix and bursty traces, one torch thread. The figure is the median CPU time
(``time.process_time``) over ``--repeat`` runs: with one thread, what a plan costs on an idle
core; the wall time is printed beside it (it also measures the other processes of a shared
machine) with the load average.

    python -m benchmarks.backtest_speed [--repeat 3] [--seeds 0,1]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

from solvers import Problem, solve
from solvers.cluster import get_cluster, get_model
from solvers.workloads.generators import generate

from .report import load, table, verdict

TARGET_S = 1.0
SCENARIOS = ("drifting", "shifting-mix", "bursty")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seeds", default="0,1")
    ap.add_argument("--window", type=int, default=16)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    model = get_model("deepseek-v3")
    rows, fails = [], []
    for preset in ("prefill-4x8", "decode-ep64"):
        cluster = get_cluster(preset).cluster(model.num_experts)
        for scenario in SCENARIOS:
            for seed in (int(s) for s in args.seeds.split(",")):
                loads = generate("deepseek-v3", scenario, steps=args.window, seed=seed,
                                 tokens_per_step=16384).loads.to(torch.float64)
                problem = Problem(loads.sum(0), cluster=cluster, num_groups=model.num_groups)
                cpus, walls, res = [], [], None
                for _ in range(args.repeat):
                    t, c = time.perf_counter(), time.process_time()
                    res = solve(problem, "backtest", policy="global", history=loads)
                    walls.append(time.perf_counter() - t)
                    cpus.append(time.process_time() - c)
                cpu = statistics.median(cpus)
                rows.append([preset, f"{cluster.num_replicas} / {cluster.num_gpus}", scenario, seed,
                             res.info["chosen"], f"{cpu:.3f}", f"{statistics.median(walls):.3f}", load()])
                if cpu > TARGET_S:
                    fails.append(f"{preset} {scenario} seed {seed}: {cpu:.3f} s CPU > {TARGET_S} s")
    table(f"backtest on 58 x 256, {args.window} steps, one torch thread (median of {args.repeat})",
          ["cluster", "slots / GPUs", "trace", "seed", "chosen", "CPU s", "wall s", "load"], rows)
    return verdict(fails)


if __name__ == "__main__":
    sys.exit(main())
