"""Speed of the batched DeepSeek EPLB (targets of the greedy): median wall time per call.

    python -m benchmarks.speed [--repeats 15] [--device cpu|cuda|all] [--threads N] [--json FILE]

Loads are seeded lognormal token counts (hottest expert several times the mean), so the
greedy takes its usual paths. CUDA timings synchronise before reading the clock.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time

import torch

from solvers.deepseek import rebalance_experts
from solvers.problem import Problem
from solvers.plan import Plan
from solvers.scoring import score

# (name, layers, experts, replicas, groups, nodes, gpus, target ms on the 2-core CPU)
SHAPES = [
    ("DeepSeek-V3 prefill, hierarchical", 58, 256, 288, 8, 4, 32, 10.0),
    ("61x256 global, 64 GPUs", 61, 256, 320, 1, 1, 64, 20.0),
    ("64x512 global fallback, 128 GPUs", 64, 512, 640, 8, 16, 128, 60.0),
]


def lognormal_loads(layers: int, experts: int, seed: int, sigma: float = 1.0) -> torch.Tensor:
    """weights: [layers, experts] integer-valued float token counts."""
    g = torch.Generator().manual_seed(seed)
    w = torch.exp(sigma * torch.randn(layers, experts, generator=g, dtype=torch.float64))
    return torch.round(w / w.sum(1, keepdim=True) * 8192 * 8 * 10).clamp_min(1)


def time_call(fn, repeats: int, device: str) -> list[float]:
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    for _ in range(3):  # warm-up (allocator, kernels, CUDA context)
        fn()
    sync()
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        sync()
        out.append((time.perf_counter() - t0) * 1e3)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--device", choices=("cpu", "cuda", "all"), default="all")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    ap.add_argument("--json", help="also write the rows as JSON here")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    devices = ["cpu", "cuda"] if args.device == "all" else [args.device]
    devices = [d for d in devices if d == "cpu" or torch.cuda.is_available()]
    print(f"torch {torch.__version__}, {platform.processor() or platform.machine()}, "
          f"{torch.get_num_threads()} CPU threads, CUDA: "
          f"{torch.cuda.get_device_name() if torch.cuda.is_available() else 'none'}, "
          f"load average {os.getloadavg()[0]:.2f} (timings are only meaningful on a quiet machine)")
    header = f"| {'shape':<36} | device | median ms | min ms | target ms | imbalance (mean / worst) |"
    print(header)
    print("|" + "|".join("-" * (len(c)) for c in header.split("|")[1:-1]) + "|")
    rows = []
    for name, L, E, R, G, N, P, target in SHAPES:
        w = lognormal_loads(L, E, seed=0)
        for dev in devices:
            wd = w.to(dev)
            times = time_call(lambda: rebalance_experts(wd, R, G, N, P), args.repeats, dev)
            p2l, l2p, cnt = rebalance_experts(wd, R, G, N, P)
            sc = score(Problem(w, R, G, N, P), Plan(p2l.cpu(), l2p.cpu(), cnt.cpu()))
            med = statistics.median(times)
            row = {"shape": name, "device": dev, "median_ms": med, "min_ms": min(times),
                   "target_ms": target, "imbalance_mean": sc.imbalance_mean,
                   "imbalance_worst": sc.imbalance_worst}
            rows.append(row)
            print(f"| {name:<36} | {dev:<6} | {med:9.2f} | {min(times):6.2f} | {target:9.0f} | "
                  f"{sc.imbalance_mean:.4f} / {sc.imbalance_worst:.4f}{'':>7} |")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=2)


if __name__ == "__main__":
    main()
