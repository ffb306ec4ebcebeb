"""Time limits of the exact solvers on a real cluster, model building included.

The instance: 4 layers x 64 experts (OLMoE-1B-7B, the first 4 MoE layers of
``olmoe-1b-7b-drifting`` summed over steps 0..19), 80 slots, 2 nodes x 8 GPUs, the GPUs of
the second node 1.4x faster. Every exact solver with a time limit runs it with
``time_limit=3``: ``cpsat``, ``highs``, ``cbc``, ``certify``, and the exact transfer schedule
(``exact_schedule``, what ``eplb score --schedule exact`` runs) on the copies from DeepSeek's
plan to kk_swap's (the first layers' copies, at most the exact model's 200).

Printed per solver: the wall time of the call (``solve`` with its grading; the schedule's
call), its termination and message, and the mean imbalance in time. Each is timed after a
warm-up call on a one-layer problem (imports, HiGHS start-up, torch's first kernels; the
first call of a process pays 2-5 s more, outside any limit), first as the machine is
("quiet": the load average is printed beside it), then beside ``--hogs`` CPU-burning
processes started here and killed afterwards. Targets: within 3.5 s quiet and 5 s busy.

    python -m benchmarks.exact_time_limits [--limit 3] [--hogs 2] [--solvers cpsat,highs,cbc,certify,schedule]
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time

import torch

import solvers.builtin  # noqa: F401  (registers every solver)
from solvers import Cluster, Plan, Problem, solve
from solvers.io import load_dataset
from solvers.network import Network
from solvers.registry import get_solver
from solvers.transfers import exact_schedule, schedule_transfers
from solvers.transfers.schedule import EXACT_MAX_COPIES

from .report import load, table, verdict

SOLVERS = ("cpsat", "highs", "cbc", "certify", "schedule")
QUIET_TARGET, BUSY_TARGET = 3.5, 5.0


def instance() -> Problem:
    """4 x 64 OLMoE loads on 80 slots, 2 x 8 GPUs, node 1 at speed 1.4."""
    w = load_dataset("olmoe-1b-7b-drifting").loads[:20].sum(0)[:4].to(torch.float64)
    return Problem(w, cluster=Cluster(2, 16, 80, gpu_speed=[1.0] * 8 + [1.4] * 8))


def schedule_case(p: Problem):
    """The copies from DeepSeek's plan to kk_swap's, on the fewest first layers holding at most
    EXACT_MAX_COPIES of them (the exact model's cap), and the heuristic schedule of them."""
    old, new = solve(p, "deepseek").plan, solve(p, "kk_swap").plan
    net = Network(intra_node_bw=400e9, inter_node_bw=50e9)
    best = None
    for layers in range(1, p.num_layers + 1):
        sched = schedule_transfers(_first(old, layers), _first(new, layers), p.num_gpus, p.num_gpus // p.num_nodes,
                                   1 << 30, net, num_experts=p.num_experts)
        if len(sched.copies) > EXACT_MAX_COPIES:
            break
        best = sched
    return best, net


def _first(plan: Plan, layers: int) -> Plan:
    return Plan.from_phy2log(plan.phy2log[:layers], plan.num_experts)


def run_one(name: str, p: Problem, limit: float, case) -> tuple[float, str, str, str]:
    """(wall seconds, termination, message, mean imbalance in time) of one call."""
    if name == "schedule":
        heur, net = case
        t = time.perf_counter()
        ex = exact_schedule(heur.copies, net, 1 << 30, time_limit=limit, hint=heur)
        wall = time.perf_counter() - t
        info = ex.info
        msg = info.get("note") or (f"{len(heur.copies)} copies, makespan {ex.makespan:.4g} s (heuristic "
                                   f"{heur.makespan:.4g}), bound {info['exact_bound_seconds']:.4g} s, "
                                   f"gap {100 * info['exact_gap']:.2f} %")
        return wall, info["status"], msg, "-"
    t = time.perf_counter()
    r = solve(p, name, time_limit=limit)
    wall = time.perf_counter() - t
    imb = r.score.summary.get("time_imbalance_mean") if r.score is not None else None
    return wall, str(r.termination), (r.message or "")[:150], "-" if imb is None else f"{imb:.5f}"


def warm_up(names: list[str], p: Problem, case) -> None:
    one = Problem(p.weights[:1], cluster=p.cluster)
    for name in names:
        if name == "schedule":
            heur, net = case
            exact_schedule(heur.copies, net, 1 << 30, time_limit=0.5, hint=heur)
        else:
            solve(one, name, time_limit=0.5)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--limit", type=float, default=3.0)
    ap.add_argument("--hogs", type=int, default=2, help="busy processes for the second pass")
    ap.add_argument("--solvers", default=",".join(SOLVERS))
    args = ap.parse_args(argv)
    names = [n for n in args.solvers.split(",") if n == "schedule" or get_solver(n).is_available()]
    p = instance()
    case = schedule_case(p)
    t = time.perf_counter()
    warm_up(names, p, case)
    print(f"warm-up (imports, first kernels, one layer each): {time.perf_counter() - t:.1f} s")
    failures = []
    for label, hogs, target in (("quiet", 0, QUIET_TARGET), (f"beside {args.hogs} busy processes", args.hogs,
                                                             BUSY_TARGET)):
        procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(hogs)]
        try:
            time.sleep(0.5 if hogs else 0.0)
            rows = []
            for name in names:
                wall, term, msg, imb = run_one(name, p, args.limit, case)
                rows.append([name, f"{wall:.2f}", term, imb, msg, load()])
                if wall > target:
                    failures.append(f"{name} {label}: {wall:.2f} s > {target} s with time_limit={args.limit:g}")
        finally:
            for proc in procs:
                proc.kill()
                proc.wait()
        table(f"time_limit={args.limit:g} on 4 x 64 / 80 slots / 2 x 8 GPUs (half at 1.4), {label} "
              f"(target {target} s)", ["solver", "wall s", "termination", "time imbalance", "message",
                                       "load average"], rows)
    return verdict(failures)


if __name__ == "__main__":
    raise SystemExit(main())
