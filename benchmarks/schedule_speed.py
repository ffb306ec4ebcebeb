"""Speed of token scheduling (solvers.dispatch.schedule_tokens) on the DeepSeek-V3 shape.

58 layers x 256 experts, 288 slots on 32 GPUs (4 nodes), 64 micro-batches of 4096 tokens x
top-8 sampled from the shipped ``deepseek-v3-skewed`` dataset, plan = DeepSeek's greedy on
the first steps. Prints the median time of repeated runs after a warm-up on CPU (with the
process's default torch threads, as a caller gets it, and with one thread), on CUDA where
present (steady state with the first chunk's CUDA graph cached, the capturing first call,
and all eager), and the HiGHS LP's time per instance for comparison (with the check that the
batched solver's max loads equal the LP's integer optima there). Targets: <= 1 s on CPU
(2 cores), <= 20 ms on CUDA.

    python -m benchmarks.schedule_speed [--replicas 288] [--microbatches 64] [--repeats 3] [--lp 24]

Every timing line prints the load average: on a shared machine only low-load runs mean much.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from solvers import Problem, solve
from solvers.dispatch import schedule_tokens
from solvers.dispatch.microbatches import sample_microbatches
from solvers.dispatch import schedule
from solvers.dispatch.schedule import Layout, _solve, one_intra_op_thread
from solvers.io import read_loads


def _median_time(fn, repeats: int, sync=lambda: None) -> tuple[float, float]:
    """Median wall seconds and median process CPU seconds (all threads) of ``fn``."""
    fn()
    sync()
    walls, cpus = [], []
    for _ in range(repeats):
        start, cpu = time.perf_counter(), time.process_time()
        fn()
        sync()
        walls.append(time.perf_counter() - start)
        cpus.append(time.process_time() - cpu)
    return statistics.median(walls), statistics.median(cpus)


def _cpu_line(label: str, plan, tokens, repeats: int) -> float:
    load = os.getloadavg()
    wall, cpu = _median_time(lambda: schedule_tokens(plan, tokens, 32), repeats)
    verdict = "PASS" if wall <= 1.0 else "FAIL"
    print(f"CPU, {label:<22}: {wall * 1e3:8.1f} ms wall, {cpu * 1e3:8.1f} ms CPU time (target <= 1000 ms wall: "
          f"{verdict})  load average before/after {load[0]:.2f}/{os.getloadavg()[0]:.2f} on {os.cpu_count()} cores",
          flush=True)
    return wall


def _cuda_lines(plan, tokens, repeats: int) -> str:
    """Times on CUDA: the steady state (first chunk replayed from its cached CUDA graph), the
    first call of a shape (which captures it), and every chunk eager. Returns the verdict."""
    p_cuda, t_dev = plan.to("cuda"), tokens.cuda()
    sync = torch.cuda.synchronize
    name = torch.cuda.get_device_name()
    schedule._GRAPHS.clear()
    sync()
    start = time.perf_counter()
    schedule_tokens(p_cuda, t_dev, 32)
    sync()
    first = time.perf_counter() - start
    t_cuda, _ = _median_time(lambda: schedule_tokens(p_cuda, t_dev, 32), repeats, sync)
    verdict = "PASS" if t_cuda <= 0.02 else "FAIL"
    print(f"CUDA, cached graph      : {t_cuda * 1e3:8.1f} ms  (target <= 20 ms: {verdict}) on {name}, "
          f"load average {os.getloadavg()[0]:.2f}", flush=True)
    print(f"CUDA, first call (capture): {first * 1e3:6.1f} ms", flush=True)
    schedule.CUDA_GRAPHS = False
    try:
        eager, _ = _median_time(lambda: schedule_tokens(p_cuda, t_dev, 32), repeats, sync)
    finally:
        schedule.CUDA_GRAPHS = True
    print(f"CUDA, eager (no graph)  : {eager * 1e3:8.1f} ms", flush=True)
    return verdict


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--replicas", type=int, default=288)
    ap.add_argument("--microbatches", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--lp", type=int, default=24, help="instances solved by the LP for comparison")
    args = ap.parse_args(argv)
    trace = read_loads("deepseek-v3-skewed").trace
    problem = Problem(trace[:4].sum(0).to(torch.float64), args.replicas, 8, 4, 32)
    plan = solve(problem, "deepseek").plan
    tokens = sample_microbatches(trace[4:], args.microbatches, 4096, 8, seed=0)
    B, L, E = tokens.shape
    print(f"shape: {B} micro-batches x {L} layers x {E} experts, {args.replicas} slots on 32 GPUs")
    layout = Layout.of(plan, 32, tokens.device)
    with one_intra_op_thread():
        _, _, rounds = _solve(layout, tokens)
    print(f"push-relabel rounds until every instance is proven optimal: {rounds}")
    default_threads = torch.get_num_threads()
    wall = _cpu_line(f"default ({default_threads} threads)", plan, tokens, args.repeats)
    torch.set_num_threads(1)
    _cpu_line("torch.set_num_threads(1)", plan, tokens, args.repeats)
    torch.set_num_threads(default_threads)
    verdict = "PASS" if wall <= 1.0 else "FAIL"
    if torch.cuda.is_available():
        cuda_verdict = _cuda_lines(plan, tokens, args.repeats)
        verdict = "PASS" if verdict == cuda_verdict == "PASS" else "FAIL"
    else:
        print("CUDA: no device here")
    if args.lp > 0:
        from benchmarks.schedule_lp import solve_lp

        split = schedule_tokens(plan, tokens, 32)
        top = split.view(B, L, 32, -1).sum(-1).max(-1).values
        g = torch.Generator().manual_seed(1)
        picks = torch.randperm(B * L, generator=g)[:args.lp].tolist()
        solve_lp(plan.phy2log[0], tokens[0, 0], 32)                     # warm-up: imports HiGHS
        start = time.perf_counter()
        agree = 0
        for i in picks:
            b, layer = divmod(i, L)
            agree += solve_lp(plan.phy2log[layer], tokens[b, layer], 32).integer == int(top[b, layer])
        per = (time.perf_counter() - start) / len(picks)
        print(f"LP  : {per * 1e3:9.1f} ms per instance (HiGHS), ~{per * B * L:.1f} s for all {B * L}; "
              f"batched max load == LP integer optimum on {agree}/{len(picks)} sampled instances  "
              f"load average {os.getloadavg()[0]:.2f}")
        if agree != len(picks):
            return 1
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    raise SystemExit(main())
