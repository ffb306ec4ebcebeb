"""Certification targets: certified gap (plan over the best universal bound) per layer.

    .venv/bin/python -m benchmarks.certify_targets                       # every target, 60 s a layer
    .venv/bin/python -m benchmarks.certify_targets --only decode --seeds 0 --time-limit 20

Targets (CPU, 2 cores, per layer):
  decode    64 and 128 experts with 288 slots on 144 GPUs (S = 2), 256 experts with 320
            slots on 64 GPUs (S = 5), global policy; lognormal ("skewed") and Zipf
            ("zipf") loads from solvers.workloads.generators; certified gap <= 0.5 %.
  suite     the decode instances of the benchmark suite `full` (every model preset on
            decode-ep64 and decode-ep144, global policy): certified gap <= 1 % (--layers 8
            is the suite's slice; --time-limit is then the budget per layer).
  deepseek  a DeepSeek-V3 prefill layer (256 experts, 8 groups, 288 slots, 4 nodes x 8
            GPUs), global and hierarchical: certified gap <= 0.002 % (hierarchical: within
            its model, against the node bound for G/N whole groups per node).

Columns: base = the portfolio ``best`` (the solver's first phase) over W/P; plan and
bound (universal) over W/P; gap = plan / bound - 1 (hierarchical: over the model bound);
closed_by from gap_closure (below). Each row prints the load average, since the
CPU is shared.
"""
from __future__ import annotations

import argparse
import os
import time
from typing import Any

import torch

import solvers.certify  # noqa: F401  registers "certify"
from solvers import Problem, solve
from solvers.bench.instances import load_instance
from solvers.bounds import average_bound
from solvers.errors import OptionError
from solvers.result import SolveResult, ratio_gap
from solvers.tolerances import BOUND_RTOL
from solvers.workloads.generators import generate

LAWS = {"lognormal": "skewed", "zipf": "zipf"}
DECODE = ((64, 288, 144), (128, 288, 144), (256, 320, 64))


def loads(experts: int, law: str, seed: int, layers: int) -> torch.Tensor:
    """[layers, experts] token counts: 10 steps of 4096 tokens, top-8 routing."""
    tr = generate("deepseek-v3", LAWS[law], steps=10, seed=seed, num_layers=layers, num_experts=experts,
                  num_groups=8 if experts % 8 == 0 else 1)
    return tr.loads.sum(0).to(torch.float64)


def suite_instances(models: list[str] | None, shapes: list[str], scenarios: list[str], layers: int) -> list:
    """Instances of the benchmark suite ``full``'s grid (``layers`` layers)."""
    from solvers.bench.suites import ALL_MODELS, grid
    return list(grid(models or ALL_MODELS, shapes, scenarios, layers=layers))


def gap_closure(result: SolveResult, target: float = 0.01, scope: str = "universal") -> list[dict[str, Any]]:
    """Per layer: how the ``certify`` run closed the portfolio's gap.

    scope: "universal" (bounds valid for every plan) or "model" (the hierarchical model's
    bound, for a hierarchical run). baseline_gap: the portfolio's plan against the
    combinatorial bound; gap: the final plan against the final bound. closed_by_plan +
    closed_by_bound = baseline_gap - gap, measured in units of the combinatorial bound
    (the plan's part) and of the final plan (the bound's part). closed_by: "already"
    (the baseline was within ``target``), "plan" or "bound" (whichever closed more, when
    the final gap is within ``target``), or "open".
    """
    if result.score is None or "baseline_objective" not in result.info:
        raise OptionError("result", "needs a solve(problem, 'certify') result with a plan")
    if scope not in ("universal", "model"):
        raise OptionError("scope", f"must be 'universal' or 'model', got {scope!r}")
    obj = result.score.max_load.cpu().to(torch.float64)
    base_obj = torch.tensor(result.info["baseline_objective"], dtype=torch.float64)
    if scope == "model":
        if result.model_bound is None or "baseline_model_bound" not in result.info:
            raise OptionError("scope", "'model' needs a hierarchical certify result (it has no model bound)")
        base_lb = torch.tensor(result.info["baseline_model_bound"], dtype=torch.float64)
        lb = result.model_bound.cpu().to(torch.float64)
    else:
        base_lb = torch.tensor(result.info["baseline_bound"], dtype=torch.float64)
        lb = result.lower_bound.cpu().to(torch.float64)
    base_gap, gap = ratio_gap(base_obj, base_lb), ratio_gap(obj, lb)
    by_plan = base_gap - ratio_gap(obj, base_lb)
    by_bound = ratio_gap(obj, base_lb) - gap
    rows = []
    for i in range(obj.shape[0]):
        if float(base_gap[i]) <= target:
            label = "already"
        elif float(gap[i]) <= target:
            label = "plan" if float(by_plan[i]) >= float(by_bound[i]) else "bound"
        else:
            label = "open"
        rows.append({"layer": i, "baseline_gap": float(base_gap[i]), "gap": float(gap[i]),
                     "closed_by_plan": float(by_plan[i]), "closed_by_bound": float(by_bound[i]),
                     "proven_optimal": bool(gap[i] <= BOUND_RTOL), "closed_by": label})
    return rows


def run_rows(problem: Problem, policy: str, time_limit: float, label: list, target: float,
             threads: int = 1) -> list[list]:
    t0 = time.perf_counter()
    res = solve(problem, "certify", policy=policy, time_limit=time_limit * problem.num_layers, threads=threads)
    wall = time.perf_counter() - t0
    avg = average_bound(problem)
    closure = gap_closure(res, target=target, scope="model" if policy == "hierarchical" else "universal")
    rows = []
    for i, c in enumerate(closure):
        gap = c["gap"]
        rows.append(label + [i, f"{res.info['baseline_objective'][i] / float(avg[i]):.6f}",
                             f"{float(res.objective[i]) / float(avg[i]):.6f}",
                             f"{float(res.lower_bound[i]) / float(avg[i]):.6f}",
                             f"{gap * 100:.4f}%", "yes" if c["proven_optimal"] else "no", c["closed_by"], "PASS" if gap <= target else "FAIL",
                             f"{wall / problem.num_layers:.1f}", f"{os.getloadavg()[0]:.1f}"])
    return rows


def table(title: str, header: list[str], rows: list[list]) -> None:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)] if rows else [len(h) for h in header]
    print(f"\n## {title}\n")
    for r in [header] + rows:
        print("  ".join(str(x).rjust(w) for x, w in zip(r, widths)))


HEADER = ["shape", "loads", "seed", "policy", "layer", "base/avg", "plan/avg", "bound/avg", "gap", "proven",
          "closed_by", "verdict", "s/layer", "load1"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", nargs="*", choices=("decode", "deepseek", "suite"), default=("decode", "deepseek"),
                    help="suite: instances of the benchmark suite `full` (every model on --shapes, by "
                         "default decode-ep64 and decode-ep144), global policy, certified gap <= 1 %%")
    ap.add_argument("--models", nargs="*", default=None, help="suite: model presets to run (default: all)")
    ap.add_argument("--scenarios", nargs="*", default=["mild", "skewed", "drifting"], help="suite: scenarios")
    ap.add_argument("--shapes", nargs="*", default=["decode-ep64", "decode-ep144"],
                    help="suite: cluster shapes (solvers.cluster.CLUSTERS)")
    ap.add_argument("--seeds", nargs="*", type=int, default=[0, 1, 2])
    ap.add_argument("--layers", type=int, default=1)
    ap.add_argument("--time-limit", type=float, default=60.0, help="seconds per layer")
    ap.add_argument("--threads", type=int, default=1, help="CP-SAT and HiGHS threads (certify's `threads`)")
    ap.add_argument("--laws", nargs="*", choices=tuple(LAWS), default=tuple(LAWS))
    ap.add_argument("--policies", nargs="*", choices=("global", "hierarchical"), default=("global", "hierarchical"),
                    help="DeepSeek-V3 prefill policies to run")
    ap.add_argument("--experts", nargs="*", type=int, default=[s[0] for s in DECODE],
                    help="decode shapes to run, by expert count (64, 128, 256)")
    args = ap.parse_args(argv)
    print(f"load average at start: {os.getloadavg()}, time limit {args.time_limit:g} s per layer, "
          f"{args.threads} thread(s)")
    failed = 0
    if "decode" in args.only:
        rows = []
        for E, R, P in (s for s in DECODE if s[0] in args.experts):
            for law in args.laws:
                for seed in args.seeds:
                    p = Problem(loads(E, law, seed, args.layers), R, 1, 1, P)
                    rows += run_rows(p, "global", args.time_limit, [f"E{E} R{R} P{P}", law, seed, "global"], 0.005,
                                     args.threads)
                    print("  ".join(map(str, rows[-1])), flush=True)
        table("decode (global): certified gap <= 0.5 %", HEADER, rows)
        failed += sum(r[-3] == "FAIL" for r in rows)
    if "suite" in args.only:
        rows = []
        for inst in suite_instances(args.models, args.shapes, args.scenarios, args.layers):
            for seed in args.seeds:
                p = load_instance(inst.id, seed).problem
                S = inst.replicas // inst.gpus
                rows += run_rows(p, "global", args.time_limit, [f"{inst.model} {inst.shape_name} S{S}",
                                                               inst.scenario, seed, "global"], 0.01, args.threads)
                print("  ".join(map(str, rows[-1])), flush=True)
        table(f"suite `full`, {', '.join(args.shapes)} (global): certified gap <= 1 %", HEADER, rows)
        failed += sum(r[-3] == "FAIL" for r in rows)
    if "deepseek" in args.only:
        rows = []
        for law in args.laws:
            for seed in args.seeds:
                p = Problem(loads(256, law, seed, args.layers), 288, 8, 4, 32)
                for policy in args.policies:
                    rows += run_rows(p, policy, args.time_limit, ["DeepSeek-V3 prefill", law, seed, policy], 2e-5,
                                     args.threads)
                    print("  ".join(map(str, rows[-1])), flush=True)
        table("DeepSeek-V3 prefill: certified gap <= 0.002 % (hierarchical: within its model)", HEADER, rows)
        failed += sum(r[-3] == "FAIL" for r in rows)
    print(f"\nload average at end: {os.getloadavg()}; {failed} row(s) FAIL")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
