"""Plans a fixed set of instances with every registered solver on every cluster kind and
fingerprints each plan (md5 of its phy2log), so that a refactor can show its plans unchanged.

    python -m benchmarks.plan_identity --out before.json            # record
    python -m benchmarks.plan_identity --check benchmarks/plan_identity.json

Cluster kinds: homogeneous, mixed speeds, uneven slots, a failed GPU (2 nodes x 4 GPUs, 24
slots; 3 layers x 16 experts). Every solver runs with a fixed seed and one thread; the exact
solvers plan 2 layers x 8 experts on 2 nodes x 2 GPUs, which they prove optimal well within
their limits, so a plan is a function of the code alone. A refusal is recorded as its
message: a solver that refused a cluster kind before and plans it now shows as changed.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys

import torch

import solvers
from solvers import Cluster, Problem
from solvers.cluster import ModelPreset

L, E, G = 3, 16, 4
KINDS = {
    "homogeneous": dict(),
    "speeds": dict(gpu_speed=[1, 1, 1, 1, 1.4, 1.4, 1.4, 1.4]),
    "uneven": dict(gpu_slots=[4, 4, 3, 3, 3, 3, 2, 2]),
    "failed": dict(failed=[3]),
}
EXACT = dict(time_limit=60.0, threads=1, seed=0)
# per solver: options beyond the history / plan in force / routing given below
OPTIONS: dict[str, dict] = {
    "cpsat": EXACT, "highs": EXACT, "cbc": EXACT,
    "certify": dict(time_limit=60.0, threads=1, seed=0),
    "scenario_cpsat": dict(time_limit=60.0, threads=1),
    "best": dict(time_limit=30.0),
}
# The exact solvers plan a smaller instance they prove optimal well within the limit, busy
# machine included: a search stopped by the clock is not a function of the code alone.
EXACT_SOLVERS = {"cpsat", "highs", "cbc", "certify", "scenario_cpsat"}
SMALL = {"homogeneous": dict(), "speeds": dict(gpu_speed=[1, 1, 1.4, 1.4]), "uneven": dict(gpu_slots=[4, 3, 3, 2]),
         "failed": dict(failed=[3])}
HISTORY = {"risk_aware", "robust_sum", "robust_max", "ewma", "forecast", "scenario_cpsat", "sched_spread",
           "traffic_aware"}
IN_FORCE = {"migration", "elastic"}


def trace(seed: int = 0) -> torch.Tensor:
    """[T=8, L, E] drifting lognormal steps: the window the history planners see."""
    g = torch.Generator().manual_seed(seed)
    base = torch.exp(torch.randn(L, E, generator=g, dtype=torch.float64) * 1.2)
    steps = [base * torch.exp(0.3 * torch.randn(L, E, generator=g, dtype=torch.float64)) + 0.01 * t
             for t in range(8)]
    return torch.stack(steps).mul(100).round()


# survivable puts every expert on two GPUs (2 E slots at least): its own, roomier clusters
ROOMY = {"homogeneous": dict(), "speeds": KINDS["speeds"], "uneven": dict(gpu_slots=[6, 6, 5, 5, 5, 5, 4, 4]),
         "failed": dict(failed=[3])}


def cluster(kind: str, roomy: bool = False) -> Cluster:
    kw = (ROOMY if roomy else KINDS)[kind]
    return Cluster(2, 8, **kw) if "gpu_slots" in kw else Cluster(2, 8, 40 if roomy else 24, **kw)


def small_cluster(kind: str) -> Cluster:
    kw = SMALL[kind]
    return Cluster(2, 4, **kw) if "gpu_slots" in kw else Cluster(2, 4, 12, **kw)


def fingerprint(result) -> str:
    return hashlib.md5(result.plan.phy2log.to(torch.int64).contiguous().numpy().tobytes()).hexdigest()


OBJECTIVES: dict[str, float] = {}     # case -> sum over layers of the plan's max GPU time (shared scorer)


def run(only: set[str] | None = None) -> dict[str, str]:
    torch.set_num_threads(1)
    steps = trace()
    weights = steps.sum(0)
    routing = None
    out: dict[str, str] = {}
    for kind in KINDS:
        problems = {roomy: Problem(weights, num_groups=G, cluster=cluster(kind, roomy)) for roomy in (False, True)}
        problems["small"] = Problem(weights[:2, :8], num_groups=2, cluster=small_cluster(kind))
        previous = solvers.solve(Problem(trace(1).sum(0), num_groups=G, cluster=cluster("homogeneous")),
                                 "deepseek").plan
        for name in solvers.solver_names():
            if only and name not in only:
                continue
            small = name in EXACT_SOLVERS
            problem = problems["small"] if small else problems[name == "survivable"]
            spec = solvers.get_solver(name)
            if not spec.is_available():
                out[f"{name}/{kind}"] = "unavailable"
                continue
            opts = dict(OPTIONS.get(name, {}))
            if name in HISTORY:
                opts["history"] = steps[:, :2, :8] if small else steps
            if name in IN_FORCE:
                opts["current"] = previous
                if kind != "homogeneous" and name == "elastic":
                    opts["current_cluster"] = cluster("homogeneous")
            if name == "traffic_aware":
                if routing is None:
                    from solvers.routing import generate_routing
                    routing = generate_routing(ModelPreset("tiny", L, E, G, 2, cluster="nodes-2x4"), seed=0,
                                               num_tokens=512, communities=4)
                opts["routing"] = routing
            try:
                res = solvers.solve(problem, name, **opts)
                if res.plan is not None:
                    OBJECTIVES[f"{name}/{kind}"] = float(res.score.max_time.sum())
                out[f"{name}/{kind}"] = fingerprint(res) if res.plan is not None else \
                    f"no plan: {res.termination}: {res.message[:200]}"
            except ValueError as exc:
                out[f"{name}/{kind}"] = f"refused: {exc}"
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="write the fingerprints here (JSON)")
    ap.add_argument("--check", help="compare with fingerprints recorded before (JSON)")
    ap.add_argument("--solvers", help="only these solvers (comma-separated; default: all)")
    args = ap.parse_args(argv)
    only = set(args.solvers.split(",")) if args.solvers else None
    got = run(only)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(got, f, indent=1, sort_keys=True)
        with open(args.out.removesuffix(".json") + ".objectives.json", "w") as f:
            json.dump(OBJECTIVES, f, indent=1, sort_keys=True)
    planned = sum(1 for v in got.values() if len(v) == 32)
    print(f"{len(got)} (solver, cluster kind) cases, {planned} planned")
    if not args.check:
        return 0
    with open(args.check) as f:
        before = json.load(f)
    if only:
        before = {k: v for k, v in before.items() if k.split("/")[0] in only}
    changed = sorted(k for k in set(before) | set(got) if before.get(k) != got.get(k))
    try:        # the objectives recorded beside the fingerprints, where there are any
        with open(args.check.removesuffix(".json") + ".objectives.json") as f:
            was = json.load(f)
    except OSError:
        was = {}
    for k in changed:
        print(f"changed {k}: {before.get(k)!r} -> {got.get(k)!r}")
        if k in was and k in OBJECTIVES:
            print(f"    objective (sum of max GPU time) {was[k]:.6g} -> {OBJECTIVES[k]:.6g} "
                  f"({100 * (OBJECTIVES[k] / was[k] - 1):+.3f} %)")
    print(f"{len(changed)} changed, {len(got) - len(changed)} identical")
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main())
