"""Time budgets and memory growth of the heuristics on every benchmark shape and the hostile ones.

Part 1: ``best`` with ``time_limit=1`` on every (model, cluster shape) of the full suite's
heuristic group (8 layers) and on the two hostile shapes (12 experts x 1000 and 1200 slots
on 8 GPUs; 256 experts x 288 slots on 2 GPUs); FAIL when a run exceeds the budget by more
than 10 %. Part 2: peak memory and time of kk_swap, joint and best on 12 experts with 256
to 2048 slots on 8 GPUs, each in its own process (peak RSS from the kernel), to show
linear growth. One torch thread per process, as the benchmark harness runs.

    python -m benchmarks.robust_budgets [--skip-budgets] [--skip-growth]
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import time

from .report import verdict

TOLERANCE = 0.10
MODELS = ("deepseek-v3", "qwen3-235b", "mixtral-8x7b", "olmoe-1b-7b", "kimi-k2")
SHAPES = ("node-8", "prefill-4x8", "decode-ep64", "decode-ep144")

_CHILD = r"""
import json, resource, sys, time, torch
torch.set_num_threads(1)
from solvers import Problem, solve
spec = json.loads(sys.argv[1])
if "instance" in spec:
    from solvers.bench.instances import Instance, load_instance
    problem = load_instance(Instance.on(spec["model"], spec["shape"], "skewed", layers=8).id, 0).problem
else:
    g = torch.Generator().manual_seed(0)
    problem = Problem(torch.rand(spec["layers"], spec["experts"], generator=g) * 1000, spec["slots"], 1, 1, spec["gpus"])
opts = {"time_limit": spec["budget"]} if spec["solver"] == "best" else {}
solve(problem, spec["solver"], **opts)                       # warm-up (imports, caches)
t = time.perf_counter()
res = solve(problem, spec["solver"], **opts)
wall = time.perf_counter() - t
print(json.dumps({"wall": wall, "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "objective": float(res.objective.sum())}))
"""


def _run(spec: dict) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(spec)], capture_output=True, text=True,
                         env=env, timeout=900)
    if out.returncode != 0:
        raise RuntimeError(f"{spec}: {out.stderr.strip().splitlines()[-1:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def budgets() -> list[str]:
    failures = []
    specs = [dict(instance=True, model=m, shape=s) for m, s in itertools.product(MODELS, SHAPES)]
    specs += [dict(experts=12, slots=1000, gpus=8, layers=1), dict(experts=12, slots=1200, gpus=8, layers=1),
              dict(experts=256, slots=288, gpus=2, layers=1)]
    print(f"{'instance':>40} {'best wall (s)':>13} {'over':>7}  load average")
    for spec in specs:
        spec.update(solver="best", budget=1.0)
        r = _run(spec)
        name = (f"{spec['model']} {spec['shape']} L8" if "instance" in spec
                else f"E{spec['experts']} R{spec['slots']} P{spec['gpus']} L{spec['layers']}")
        over = r["wall"] / spec["budget"] - 1
        print(f"{name:>40} {r['wall']:13.3f} {over:+7.1%}  {os.getloadavg()[0]:.2f}")
        if over > TOLERANCE:
            failures.append(f"best on {name}: {r['wall']:.2f} s for a {spec['budget']} s budget")
    return failures


def growth() -> None:
    print(f"\n{'solver':>8} {'slots':>6} {'wall (s)':>9} {'peak RSS (MB)':>14}  load average")
    for solver, slots in itertools.product(("kk_swap", "joint", "best"), (256, 512, 1000, 2048)):
        r = _run(dict(solver=solver, experts=12, slots=slots, gpus=8, layers=1, budget=1.0))
        print(f"{solver:>8} {slots:6d} {r['wall']:9.3f} {r['peak_mb']:14.0f}  {os.getloadavg()[0]:.2f}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--skip-budgets", action="store_true")
    ap.add_argument("--skip-growth", action="store_true")
    args = ap.parse_args(argv)
    print(f"load average at start: {os.getloadavg()}  ({time.strftime('%H:%M:%S')})")
    failures = [] if args.skip_budgets else budgets()
    if not args.skip_growth:
        growth()
    print(f"load average at end: {os.getloadavg()}")
    return verdict(failures, summary=False)


if __name__ == "__main__":
    sys.exit(main())
