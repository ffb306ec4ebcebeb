"""Traffic targets: the metric's speed, the traffic-aware placement's cut, its gap to a bound.

1. **Speed.** Scoring the dispatch traffic of one plan (DeepSeek hierarchical) on 58 layers
   x 100k tokens x top-8 (a generated DeepSeek-V3 trace, 4 nodes x 8 GPUs, 288 slots):
   median wall time of repeated calls after a warm-up. Target <= 2 s on CPU.
2. **Cut.** On the shipped ``deepseek-v3-routing`` dataset and on regenerated ones (seeds
   1-4, same parameters): inter-node bytes of ``traffic_aware`` (epsilon 0.05) against
   DeepSeek's hierarchical plan, with both plans' GPU imbalance (mean / worst layer). In
   sample (planned and scored on all tokens) and out of sample (planned on the first half
   of the tokens, scored on the second). Target: >= 25 % fewer bytes at imbalance <= 1.05
   (the worst layer's, on the loads the plan was made for; held-out imbalances are printed
   too, and with 1536 tokens per half they are noisy for every plan).
   Weaker co-activation structures (topic_bias 3; random per-topic expert sets instead of
   communities) are printed too, for sensitivity.
3. **Gap.** On small instances (16 experts, top-4, 150 tokens, 2 nodes x 2 GPUs, 16 and 20
   slots) the heuristic's inter-node copies against the CP-SAT lower bound
   (:func:`benchmarks.traffic_bound.traffic_bound`) at the heuristic's own imbalance limit,
   with the dispatch fixed per (source GPU, expert) as the scorer's, and with the older
   per-token dispatch relaxation beside it.

4. **Held out.** The out-of-sample rows print both plans' held-out imbalance and whether
   ours is no worse than hierarchical's at >= 25 % fewer held-out bytes; the cut table runs
   for each ``--risks`` value, and a trade-off table on the shipped dataset varies ``risk``
   and ``traffic_weight``.
   Each held-out row also prints both plans' node imbalance (max / mean node load) and the
   balance-only plan's held-out imbalance: that plan is perfectly balanced on the planning
   half, so its held-out imbalance is the sampling noise every plan carries, and the node
   columns show how much of the rest is the node sums (the drift of co-located communities)
   rather than the packing inside a node. ``--slots`` prints the held-out row at more slots
   (replication; hierarchical gets the same slots).
5. **Strength.** The cut as the generator's co-activation strength (``topic_bias``) varies,
   beside the trace's co-activation lift (what ``eplb routing info`` prints).

6. **Solver speed.** traffic_aware's wall and CPU time on the shipped dataset (target: a
   few seconds), with the load average.
7. **Real clusters** (``--skip-real`` skips it). On the shipped dataset, the DeepSeek-V3
   shape with half the nodes at speed 1.4, with two failed GPUs, and with uneven slots (10
   and 8 alternating): inter-node bytes of ``traffic_aware`` against the balance-only
   ``kk_swap`` (DeepSeek's hierarchical plan needs identical GPUs), both plans' time
   imbalance (mean / worst layer) in sample and held out, and the solver's wall time.

    python -m benchmarks.traffic [--tokens 100000] [--repeats 5] [--seeds 1,2,3,4] [--skip-speed]
        [--risks 0,0.25] [--bias 0,2,3,4,5] [--frontier-risks ...] [--weights ...] [--slots 288,384,512]
        [--slot-risks 0.25,0.5] [--skip-real]

Every timing line prints the load average: on a shared machine only low-load runs mean much.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from solvers import Cluster, Problem, score, solve
from solvers.cluster import ModelPreset
from solvers.routing import RoutingTrace, generate_routing, load_routing
from benchmarks.traffic_bound import traffic_bound
from solvers.routing.coactivation import coactivation_lift
from solvers.traffic import traffic
from solvers.workloads.catalog import ROUTING, dataset_path

PREFILL = Cluster(4, 32, 288)


def _load() -> str:
    return "load average %.2f %.2f %.2f" % os.getloadavg()


def speed(tokens: int, repeats: int) -> None:
    t0 = time.perf_counter()
    trace = generate_routing("deepseek-v3", 0, num_tokens=tokens)
    print(f"generated {trace.describe()} in {time.perf_counter() - t0:.1f} s")
    problem = Problem(trace.loads(), cluster=PREFILL, num_groups=8)
    plan = solve(problem, "deepseek", policy="hierarchical").plan
    traffic(plan, PREFILL, trace, 14336)                            # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        traffic(plan, PREFILL, trace, 14336)
        times.append(time.perf_counter() - start)
    med = statistics.median(times)
    print(f"traffic score, {trace.num_layers} layers x {trace.num_tokens} tokens x top-{trace.top_k}: median "
          f"{med:.2f} s of {repeats} (min {min(times):.2f}, max {max(times):.2f}), torch threads "
          f"{torch.get_num_threads()}, {_load()}; target <= 2 s: {'met' if med <= 2 else 'NOT met'}")


def solver_speed(repeats: int) -> None:
    """traffic_aware's own time on the shipped dataset (58 layers, 3072 tokens, 4 x 8 GPUs,
    288 slots), one torch thread: wall and CPU seconds (CPU time is what a quiet core
    would take; on a shared machine the wall time is several times it), median of
    ``repeats`` after a warm-up of the balance-only solvers it runs."""
    trace = load_routing(dataset_path("deepseek-v3-routing"))
    problem = Problem(trace.loads(), cluster=PREFILL, num_groups=8)
    solve(problem, "kk_swap", policy="global")
    solve(problem, "deepseek", policy="hierarchical")
    for opts in ({}, {"risk": 0.0}, {"traffic_weight": 0.2}):
        wall, cpu = [], []
        for _ in range(repeats):
            w0, c0 = time.perf_counter(), time.process_time()
            solve(problem, "traffic_aware", routing=trace, **opts)
            wall.append(time.perf_counter() - w0)
            cpu.append(time.process_time() - c0)
        print(f"traffic_aware {opts or 'default'}: median wall {statistics.median(wall):.1f} s, CPU "
              f"{statistics.median(cpu):.1f} s of {repeats}, torch threads {torch.get_num_threads()}, {_load()}")


def _half(trace: RoutingTrace, second: bool) -> RoutingTrace:
    T = trace.num_tokens
    return trace.tokens(T // 2, T) if second else trace.tokens(0, T // 2)


def cut_row(name: str, trace: RoutingTrace, options: dict | None = None,
            modes: tuple[str, ...] = ("in sample", "out of sample"), cluster: Cluster = PREFILL) -> tuple[float, ...]:
    """Prints one dataset's in-sample and out-of-sample rows (``traffic_aware`` with
    ``options``); returns the cuts."""
    cuts = []
    options = options or {}
    for mode in modes:
        plan_on = trace if mode == "in sample" else _half(trace, False)
        score_on = trace if mode == "in sample" else _half(trace, True)
        problem = Problem(plan_on.loads(), cluster=cluster, num_groups=8)
        graded = Problem(score_on.loads(), cluster=cluster, num_groups=8)
        res = {}
        for solver, opts in (("deepseek", {"policy": "hierarchical"}), ("kk_swap", {"policy": "global"}),
                             ("traffic_aware", {"routing": plan_on, **options})):
            start = time.perf_counter()
            r = solve(problem, solver, **opts)
            s = score(graded, r.plan, routing=score_on)
            res[solver] = (s.summary, time.perf_counter() - start, r.info, r.score.summary)
        h, o = res["deepseek"][0], res["traffic_aware"][0]
        hp, op = res["deepseek"][3], res["traffic_aware"][3]       # imbalance on the loads planned on
        cut = 1 - o["inter_node_bytes"] / h["inter_node_bytes"]
        # The planner controls the imbalance of the window it plans on: the target's balance
        # condition is checked there (held-out imbalance of both plans printed beside it).
        ok = cut >= 0.25 and op["imbalance_worst"] <= 1.05 + 1e-9
        held = ""
        if mode != "in sample":
            # the held-out target: no worse than hierarchical's held-out imbalance at
            # >= 25 % fewer held-out bytes
            held_ok = cut >= 0.25 and o["imbalance_mean"] <= h["imbalance_mean"] + 1e-12
            # Where it comes from: the node sums (what co-locating communities moves) vs the
            # GPUs inside a node; the balance-only plan's held-out imbalance is the sampling
            # noise every plan has (it was perfectly balanced on the planning half).
            g = res["kk_swap"][0]
            held = (f" held-out imb hier {h['imbalance_mean']:.3f}/{h['imbalance_worst']:.3f} ours "
                    f"{o['imbalance_mean']:.3f}/{o['imbalance_worst']:.3f} (held-out target "
                    f"{'met' if held_ok else 'NOT met'}); node imb hier {h['node_imbalance_mean']:.3f} ours "
                    f"{o['node_imbalance_mean']:.3f}; balance-only {g['imbalance_mean']:.3f} "
                    f"(node {g['node_imbalance_mean']:.3f})")
        print(f"{name:<30} {mode:<14} hierarchical {h['inter_node_bytes'] / 1e9:6.2f} GB imb "
              f"{hp['imbalance_mean']:.3f}/{hp['imbalance_worst']:.3f} remote {h['remote_nodes_mean']:.3f} | "
              f"traffic_aware {o['inter_node_bytes'] / 1e9:6.2f} GB imb {op['imbalance_mean']:.3f}/"
              f"{op['imbalance_worst']:.3f} remote {o['remote_nodes_mean']:.3f} ({res['traffic_aware'][1]:.0f} s) "
              f"| cut {100 * cut:5.1f} % {'met' if ok else 'NOT met'}{held}")
        cuts.append(cut)
    return tuple(cuts)


def cuts(seeds: list[int], risks: list[float]) -> None:
    spec = ROUTING["deepseek-v3-routing"]
    rows = [("deepseek-v3-routing (shipped)", load_routing(dataset_path("deepseek-v3-routing")))]
    rows += [(f"regenerated seed {s}", generate_routing(spec["model"], s, num_tokens=spec["num_tokens"]))
             for s in seeds]
    rows.append(("seed 0, topic_bias 3", generate_routing(spec["model"], 0, num_tokens=spec["num_tokens"],
                                                         topic_bias=3.0)))
    rows.append(("seed 0, communities 0", generate_routing(spec["model"], 0, num_tokens=spec["num_tokens"],
                                                          communities=0)))
    print(f"inter-node bytes (dispatch, BF16 x 7168 per token copy), {PREFILL.describe()}; {_load()}")
    for risk in risks:
        print(f"-- traffic_aware risk {risk:g} (default options otherwise)")
        for name, trace in rows:
            cut_row(name, trace, {"risk": risk})


def strength(bias: list[float]) -> None:
    """How the cut depends on the co-activation strength: the generator's topic_bias swept
    (seed 0, the shipped dataset's other parameters), the trace's co-activation lift
    (:func:`solvers.routing.coactivation.coactivation_lift`, what ``eplb routing info``
    prints for a user's own trace) beside the cut in and out of sample."""
    spec = ROUTING["deepseek-v3-routing"]
    print(f"cut against co-activation strength (seed 0, {spec['num_tokens']} tokens, default options); {_load()}")
    for b in bias:
        trace = generate_routing(spec["model"], 0, num_tokens=spec["num_tokens"], topic_bias=b)
        lift = coactivation_lift(trace)
        cut_row(f"topic_bias {b:g}, lift {lift:.2f}", trace)


def frontier(risks: list[float], weights: list[float]) -> None:
    """Out of sample on the shipped dataset: held-out bytes and imbalance as risk and the
    traffic weight vary (the trade-off a user picks a point on)."""
    trace = load_routing(dataset_path("deepseek-v3-routing"))
    print(f"held-out trade-off on the shipped dataset; {_load()}")
    for risk in risks:
        cut_row(f"risk {risk:g}", trace, {"risk": risk}, modes=("out of sample",))
    for w in weights:
        cut_row(f"risk 0, traffic_weight {w:g}", trace, {"risk": 0.0, "traffic_weight": w}, modes=("out of sample",))


def replication(slots: list[int], risks: list[float]) -> None:
    """Held out on the shipped dataset as the slot count grows (4 x 8 GPUs): the spare slots
    hold replicas of the hottest experts on every node (``spread``), which both keeps their
    tokens on-node and splits their load over the nodes, so it hedges the drift that
    co-locating communities brings. Hierarchical gets the same slots."""
    trace = load_routing(dataset_path("deepseek-v3-routing"))
    print(f"held out against the slot count (replication), shipped dataset; {_load()}")
    for R in slots:
        cluster = Cluster(PREFILL.num_nodes, PREFILL.num_gpus, R)
        for risk in risks:
            cut_row(f"{R} slots, risk {risk:g}", trace, {"risk": risk}, modes=("out of sample",), cluster=cluster)


# Real clusters of the DeepSeek-V3 shape (4 nodes x 8 GPUs): what the placement plans in time.
REAL_CLUSTERS = {
    "mixed speeds (2 nodes at 1.4)": Cluster(4, 32, 288, gpu_speed=[1.0] * 16 + [1.4] * 16),
    "two failed GPUs (3, 17)": Cluster(4, 32, 288, failed=[3, 17]),
    "uneven slots (10, 8 alternating)": Cluster(4, 32, gpu_slots=[10, 8] * 16),
}


def _ti(s, which: str) -> float:
    """The time imbalance of a :class:`solvers.scoring.Score`, mean or worst layer (the
    summary carries it only where speeds differ; the tensor always)."""
    t = s.time_imbalance
    return float(t.mean() if which == "mean" else t.max())


def real_clusters() -> None:
    """traffic_aware on real clusters: cut against the balance-only plan (kk_swap) at the
    time imbalance of each, in sample and held out (planned on the first half of the shipped
    trace, scored on the second)."""
    trace = load_routing(dataset_path("deepseek-v3-routing"))
    print(f"real clusters, shipped dataset, traffic_aware (default options) against kk_swap; {_load()}")
    for name, cluster in REAL_CLUSTERS.items():
        for mode in ("in sample", "out of sample"):
            plan_on = trace if mode == "in sample" else _half(trace, False)
            score_on = trace if mode == "in sample" else _half(trace, True)
            problem = Problem(plan_on.loads(), cluster=cluster, num_groups=8)
            graded = Problem(score_on.loads(), cluster=cluster, num_groups=8)
            start = time.perf_counter()
            ours = solve(problem, "traffic_aware", routing=plan_on)
            wall = time.perf_counter() - start
            base = solve(problem, "kk_swap", policy="global")
            o = score(graded, ours.plan, routing=score_on)
            b = score(graded, base.plan, routing=score_on)
            op, bp = ours.score, base.score                                # on the loads planned on
            cut = 1 - o.summary["inter_node_bytes"] / b.summary["inter_node_bytes"]
            ok = _ti(op, 'worst') <= max(1.05, _ti(bp, 'worst')) + 1e-9
            held = "" if mode == "in sample" else (f" held-out time imb kk_swap {_ti(b, 'mean'):.3f} "
                                                   f"ours {_ti(o, 'mean'):.3f}")
            print(f"{name:<34} {mode:<14} kk_swap {b.summary['inter_node_bytes'] / 1e9:5.2f} GB time imb "
                  f"{_ti(bp, 'mean'):.3f}/{_ti(bp, 'worst'):.3f} | traffic_aware "
                  f"{o.summary['inter_node_bytes'] / 1e9:5.2f} GB time imb {_ti(op, 'mean'):.3f}/"
                  f"{_ti(op, 'worst'):.3f} ({wall:.0f} s, layers own {ours.info['layers_own']}, "
                  f"repaired {ours.info['layers_repaired']}) | cut {100 * cut:5.1f} %, balance "
                  f"{'within' if ok else 'NOT within'} max(1.05, kk_swap's){held}")


def gaps() -> None:
    small = ModelPreset("small-16", 2, 16, 1, 4, cluster="nodes-2x4")
    # identical GPUs at 16 and 20 slots, and a real cluster (slots 6, 4, 5, 5; one node at
    # speed 1.4): the limit is then a time imbalance (benchmarks.traffic_bound)
    shapes = (("R=16", Cluster(2, 4, 16)), ("R=20", Cluster(2, 4, 20)),
              ("real R=20", Cluster(2, 4, gpu_slots=[6, 4, 5, 5], gpu_speed=[1.0, 1.0, 1.4, 1.4])))
    for label, cluster in shapes:
        for seed in (1, 2):
            tr = generate_routing(small, seed, num_tokens=150, communities=4, num_topics=4, num_ranks=4)
            problem = Problem(tr.loads(), cluster=cluster)
            r = solve(problem, "traffic_aware", routing=tr)
            s = score(problem, r.plan, routing=tr)
            base = score(problem, solve(problem, "kk_swap", policy="global").plan).time_imbalance
            limit = torch.maximum(torch.full_like(base, 1.05), base)
            heur = s.traffic.layer_bytes / s.traffic.token_bytes
            bound, optimal = traffic_bound(problem, tr, limit, time_limit=30)
            loose, loose_opt = traffic_bound(problem, tr, limit, time_limit=30, per_token_dispatch=True)
            gap = (heur / bound.clamp_min(1) - 1).tolist()
            gap_loose = (heur / loose.clamp_min(1) - 1).tolist()
            print(f"small {label} seed {seed}: heuristic copies {heur.tolist()} bound (static dispatch) "
                  f"{bound.tolist()} (proven optimal {optimal.tolist()}) gap {[f'{100 * g:.1f} %' for g in gap]}; "
                  f"per-token-dispatch bound {loose.tolist()} (optimal {loose_opt.tolist()}) gap "
                  f"{[f'{100 * g:.1f} %' for g in gap_loose]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seeds", default="1,2,3,4")
    ap.add_argument("--skip-speed", action="store_true")
    ap.add_argument("--skip-cuts", action="store_true")
    ap.add_argument("--skip-gaps", action="store_true")
    ap.add_argument("--skip-solver-speed", action="store_true")
    ap.add_argument("--risks", default="0,0.25", help="traffic_aware risk values of the cut table")
    ap.add_argument("--bias", default="0,2,3,4,5", help="topic_bias values of the strength sweep ('' skips it)")
    ap.add_argument("--frontier-risks", default="0,0.25,0.5,1", help="risk values of the held-out trade-off")
    ap.add_argument("--weights", default="0.05,0.2,1", help="traffic weights of the held-out trade-off")
    ap.add_argument("--slots", default="288,384,512", help="slot counts of the held-out replication table "
                    "('' skips it)")
    ap.add_argument("--slot-risks", default="0.25,0.5", help="traffic_aware risk values of the replication table")
    ap.add_argument("--skip-real", action="store_true", help="skip the real-cluster table")
    args = ap.parse_args()
    floats = lambda text: [float(x) for x in text.split(",") if x]                 # noqa: E731
    if not args.skip_speed:
        speed(args.tokens, args.repeats)
    torch.set_num_threads(1)         # the solver runs: on a loaded 2-core machine 1 thread is steadier
    if not args.skip_solver_speed:
        solver_speed(args.repeats)
    if not args.skip_cuts:
        cuts([int(s) for s in args.seeds.split(",") if s], floats(args.risks))
    if args.bias:
        strength(floats(args.bias))
    if args.frontier_risks or args.weights:
        frontier(floats(args.frontier_risks), floats(args.weights))
    if args.slots:
        replication([int(x) for x in args.slots.split(",") if x], floats(args.slot_risks))
    if not args.skip_real:
        real_clusters()
    if not args.skip_gaps:
        gaps()


if __name__ == "__main__":
    main()
