"""Exact results at every scale of the loads: one instance, loads x 1e-12 .. 1e12.

For each scale and backend (cpsat, highs, cbc) prints the solution status, the objective and
the lower bound (both divided by the scale, so every row should read the same), the
relative difference to CP-SAT's objective, and whether the bound stays below a known plan
(DeepSeek's). Exit status 1 when an optimal objective differs from CP-SAT's by more than
1e-6 (relative) or a bound exceeds a known plan.

    python -m benchmarks.scale_sweep [--time-limit 20] [--model joint] [--fp16]
"""
from __future__ import annotations

import argparse
import os
import sys

import torch

from solvers import Problem, solve
from solvers import backends

from .report import verdict

SCALES = (1e-12, 1e-9, 1e-6, 1e-3, 1.0, 1e3, 1e6, 1e9, 1e12)
BACKENDS = ("cpsat", "highs", "cbc")
AGREE_RTOL = 1e-6
# The packing model fixes the replica counts (a restricted model): its proven optimum is
# solution status "optimal_in_model", and that is what the backends must agree on at every scale.
PROVEN = ("proven_optimal", "optimal_in_model")

# A small instance every backend proves within seconds (6 experts, 8 slots on 4 GPUs).
TOKENS = [[37.0, 11.0, 52.0, 8.0, 23.0, 61.0]]


def fp16_loads() -> torch.Tensor:
    """weights: [1, 6] fractional loads representable in float16 (normalised routing shares)."""
    w = torch.tensor(TOKENS, dtype=torch.float64)
    return (w / w.sum()).to(torch.float16).to(torch.float64)


def sweep(base: torch.Tensor, scales, time_limit: float, model: str, out=sys.stdout) -> list[str]:
    """Run every backend at every scale; returns the failures (empty when all agree)."""
    failures = []
    available = [b for b in BACKENDS if {"cpsat": backends.cpsat_available, "highs": backends.highs_available,
                                         "cbc": backends.cbc_available}[b]()]
    print(f"{'scale':>8} {'backend':>7} {'status':>16} {'objective/scale':>18} {'bound/scale':>18} "
          f"{'rel diff':>9} bound<=plan", file=out)
    for scale in scales:
        problem = Problem(base * scale, 8, 1, 1, 4)
        known = solve(problem, "deepseek").objective
        ref = None
        for name in available:
            res = solve(problem, name, model=model, time_limit=time_limit)
            obj = None if res.objective is None else float(res.objective[0])
            bound = float(res.lower_bound[0])
            below = bound <= float(known[0]) * (1 + 1e-12) and (obj is None or bound <= obj * (1 + 1e-12))
            if name == "cpsat" and str(res.status) in PROVEN:
                ref = obj
            diff = None if obj is None or ref is None else abs(obj - ref) / ref
            print(f"{scale:8.0e} {name:>7} {str(res.status):>16} "
                  f"{(obj / scale) if obj is not None else float('nan'):18.10f} {bound / scale:18.10f} "
                  f"{diff if diff is not None else float('nan'):9.1e} {below}", file=out)
            if not below:
                failures.append(f"{name} at {scale:g}: bound {bound!r} above a known plan")
            if str(res.status) in PROVEN and (diff is None or diff > AGREE_RTOL):
                failures.append(f"{name} at {scale:g}: optimal {obj!r} differs from CP-SAT's {ref!r}")
            if str(res.status) not in PROVEN:
                failures.append(f"{name} at {scale:g}: {res.termination}, {res.status} ({res.message})")
    return failures


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-limit", type=float, default=20.0)
    ap.add_argument("--model", default="joint", choices=("joint", "packing", "replication"))
    ap.add_argument("--fp16", action="store_true", help="float16-like fractional loads instead of token counts")
    args = ap.parse_args(argv)
    print(f"load average before: {os.getloadavg()}")
    base = fp16_loads() if args.fp16 else torch.tensor(TOKENS, dtype=torch.float64)
    failures = sweep(base, SCALES, args.time_limit, args.model)
    print(f"load average after: {os.getloadavg()}")
    return verdict(failures, summary=False)


if __name__ == "__main__":
    sys.exit(main())
