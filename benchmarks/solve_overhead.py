"""What ``solve`` adds to DeepSeek's greedy, and what a busy machine does to the drop-in.

Measures, in one process with torch's default thread count (each call picks its own),
``solve(problem, "deepseek")`` against the bare ``rebalance_experts`` on the same loads
(default: 64 layers x 512 experts, 640 slots, 128 GPUs on 16 nodes), best of ``--repeat``
runs each after a warm-up. Then it starts two busy processes (pure-Python loops, one per
core of a 2-core machine) and times the drop-in again. Targets: solve within 1.3x of the
drop-in; the drop-in beside the busy processes within 2x of its quiet time.

    python -m benchmarks.solve_overhead [--layers 64 --experts 512 --replicas 640 --gpus 128 --nodes 16]
"""
from __future__ import annotations

import argparse
import multiprocessing
import time

import torch

from solvers import Problem, rebalance_experts, solve

TARGET = 1.3
BUSY_TARGET = 2.0


def _spin(stop) -> None:
    while not stop.is_set():
        sum(i * i for i in range(10_000))


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
    ap.add_argument("--busy", type=int, default=2, help="busy processes beside the second drop-in timing")
    args = ap.parse_args(argv)
    gen = torch.Generator().manual_seed(0)
    w = torch.randint(1, 10_000, (args.layers, args.experts), generator=gen).to(torch.float64)
    shape = (args.replicas, args.groups, args.nodes, args.gpus)
    problem = Problem(w, *shape)
    bare = best_of(lambda: rebalance_experts(w, *shape), args.repeat)
    full = best_of(lambda: solve(problem, "deepseek"), args.repeat)
    stop = multiprocessing.Event()
    spinners = [multiprocessing.Process(target=_spin, args=(stop,), daemon=True) for _ in range(args.busy)]
    for p in spinners:
        p.start()
    try:
        time.sleep(0.5)
        busy = best_of(lambda: rebalance_experts(w, *shape), args.repeat)
    finally:
        stop.set()
        for p in spinners:
            p.join()
    ratio, slowdown = full / bare, busy / bare
    print(f"{args.layers} layers x {args.experts} experts, {args.replicas} slots on {args.gpus} GPUs "
          f"({args.nodes} nodes, {args.groups} groups), best of {args.repeat}, torch threads "
          f"{torch.get_num_threads()} outside the calls")
    print(f"rebalance_experts  {1e3 * bare:8.2f} ms")
    print(f"solve(deepseek)    {1e3 * full:8.2f} ms   ratio {ratio:.3f} (target <= {TARGET})")
    print(f"rebalance_experts beside {args.busy} busy processes {1e3 * busy:8.2f} ms   "
          f"slowdown {slowdown:.2f}x (target <= {BUSY_TARGET})")
    return 0 if ratio <= TARGET and slowdown <= BUSY_TARGET else 1


if __name__ == "__main__":
    raise SystemExit(main())
