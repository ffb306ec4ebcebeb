"""What ``solve`` adds to DeepSeek's greedy: validation, the lower bound, grading and scoring.

Measures, in one process on one thread, ``solve(problem, "deepseek")`` against the bare
``rebalance_experts`` on the same loads (default: 64 layers x 512 experts, 640 slots, 128
GPUs on 16 nodes, the shape of the target), best of ``--repeat`` runs each after a warm-up,
and prints the ratio. The target is a ratio of at most 1.3.

    python -m benchmarks.solve_overhead [--layers 64 --experts 512 --replicas 640 --gpus 128 --nodes 16]
"""
from __future__ import annotations

import argparse
import time

import torch

from solvers import Problem, rebalance_experts, solve

TARGET = 1.3


def best_of(fn, repeat: int) -> float:
    fn()                                                   # warm-up: imports, allocator, caches
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, default=64)
    ap.add_argument("--experts", type=int, default=512)
    ap.add_argument("--replicas", type=int, default=640)
    ap.add_argument("--gpus", type=int, default=128)
    ap.add_argument("--nodes", type=int, default=16)
    ap.add_argument("--groups", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=15)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(0)
    w = torch.randint(1, 10_000, (args.layers, args.experts), generator=gen).to(torch.float64)
    shape = (args.replicas, args.groups, args.nodes, args.gpus)
    problem = Problem(w, *shape)
    bare = best_of(lambda: rebalance_experts(w, *shape), args.repeat)
    full = best_of(lambda: solve(problem, "deepseek"), args.repeat)
    ratio = full / bare
    print(f"{args.layers} layers x {args.experts} experts, {args.replicas} slots on {args.gpus} GPUs "
          f"({args.nodes} nodes, {args.groups} groups), best of {args.repeat}, 1 thread")
    print(f"rebalance_experts  {1e3 * bare:8.2f} ms")
    print(f"solve(deepseek)    {1e3 * full:8.2f} ms")
    print(f"ratio              {ratio:8.3f}  (target <= {TARGET})")
    return 0 if ratio <= TARGET else 1


if __name__ == "__main__":
    raise SystemExit(main())
