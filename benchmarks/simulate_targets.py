"""Targets of the rebalancing simulator and the time-robust planners.

    .venv/bin/python -m benchmarks.simulate_targets [--threads 1] [--out bench-out/dynamics] [--resume]
        [--skip-speed] [--skip-seeds]

1. speed: 1000 steps of DeepSeek-V3 (58 layers, drifting scenario, 4 nodes x 32 GPUs,
   288 slots) rebalanced every 50 steps with ``deepseek``: simulator wall time (trace
   generation excluded), target <= 10 s;
2. migration-aware against plain re-planning on the shipped drifting and shifting-mix
   datasets: total bytes moved and realised mean imbalance per migration setting (slacks,
   and the documented default: slack 0.01 with a move budget of 0.25 x a fresh plan's
   moves); target: the default setting moves >= 3x fewer bytes at <= 1 % higher mean
   imbalance, on each dataset at each of its periods;
   then the same comparison on traces of the same generators with other seeds (1-4): how
   often the default setting meets the target when the dataset's draw changes (shown, not
   part of the verdict);
3. time-robust planners out of sample (plan on window i, score on window i+1): mean
   imbalance of the next window's sum (the benchmark's protocol) and mean per-step
   imbalance in it, against the single-sum ``kk_swap`` plan; target: lower on each dataset.

The benchmark harness runs the same replays as rows (``eplb bench run --suite dynamics``).
With ``--out`` every finished case is appended to ``results.jsonl`` and ``--resume`` skips
cases already there. Timings print the 1-minute load average (the machine may be shared).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import torch

from solvers import Problem, score, solve
from solvers.dynamics import simulate, step_stats
from solvers.dynamics.sweep import frontier_table, suggest, sweep
from solvers.workloads import generate, load_dataset
from solvers.cluster import CLUSTERS, get_model

from .report import load, table

DATASETS = {          # dataset: (model, rebalance period = planning window, in steps)
    "olmoe-1b-7b-drifting": ("olmoe-1b-7b", 20),
    "mixtral-8x7b-shifting-mix": ("mixtral-8x7b", 20),
    "deepseek-v3-shifting-mix": ("deepseek-v3", 4),
}
# Further periods the default setting must meet the target at, and periods only shown.
REQUIRED_PERIODS = {"deepseek-v3-shifting-mix": (2,)}
EXTRA_PERIODS = {"olmoe-1b-7b-drifting": (10, 50), "mixtral-8x7b-shifting-mix": (10, 50),
                 "deepseek-v3-shifting-mix": (8,)}
# (migration slack, move budget): None = plain re-planning; the last is the documented default.
DEFAULT_SETTING = (0.01, 0.25)
SETTINGS = ((None, None), (0.0, None), (0.01, None), (0.03, None), DEFAULT_SETTING)
SOLVERS = ("deepseek", "kk_swap")
PLANNERS = ("kk_swap", "robust_sum", "robust_max", "ewma", "forecast")


def cluster(model: str, num_experts: int) -> dict[str, Any]:
    """The model's default cluster preset as plain sizes (simulate's and Problem's keywords)."""
    preset = get_model(model)
    return {**CLUSTERS[preset.cluster].cluster(num_experts).as_dict(), "num_groups": preset.num_groups}


class Store:
    """results.jsonl: one JSON object per finished case (resumable)."""

    def __init__(self, out: str | None, resume: bool):
        self.path = Path(out) / "results.jsonl" if out else None
        self.done: dict[str, dict] = {}
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if resume and self.path.exists():
                for line in self.path.read_text().splitlines():
                    rec = json.loads(line)
                    self.done[rec["case"]] = rec
            elif self.path.exists():
                self.path.unlink()

    def get(self, case: str):
        return self.done.get(case)

    def put(self, rec: dict) -> dict:
        self.done[rec["case"]] = rec
        if self.path is not None:
            with self.path.open("a") as fh:
                fh.write(json.dumps(rec) + "\n")
        return rec


def speed(store: Store) -> bool:
    case = "speed/deepseek-v3/drifting/1000/every50"
    rec = store.get(case)
    if rec is None:
        trace = generate("deepseek-v3", "drifting", steps=1000, seed=1)
        before = load()
        res = simulate(trace, num_replicas=288, num_groups=8, num_nodes=4, num_gpus=32, solver="deepseek",
                       every=50, expert_bytes=get_model("deepseek-v3").expert_bytes)
        rec = store.put({"case": case, "wall": res.wall_seconds, "load_before": before, "load_after": load(),
                         **res.totals()})
    table("Simulator speed: 1000 steps x 58 layers, deepseek every 50 steps (CPU)",
          ["wall s", "rebalances", "mean imbalance", "GB moved", "load before", "load after"],
          [[f"{rec['wall']:.2f}", rec["rebalances"], f"{rec['mean_imbalance']:.4f}",
            f"{rec['total_bytes'] / 1e9:.0f}", rec["load_before"], rec["load_after"]]])
    ok = rec["wall"] <= 10.0
    print(f"\n{'PASS' if ok else 'FAIL'}: {rec['wall']:.2f} s (target <= 10 s)")
    return ok


def migration_vs_plain(store: Store) -> bool:
    ok_all = True
    for name, (model, period) in DATASETS.items():
        ok = True
        for p in (period, *REQUIRED_PERIODS.get(name, ())):
            ok &= compare_at(store, name, model, p, "deepseek")
        compare_at(store, name, model, period, "kk_swap")
        for extra in EXTRA_PERIODS.get(name, ()):
            compare_at(store, name, model, extra, "deepseek")
        periods = ", ".join(str(p) for p in (period, *REQUIRED_PERIODS.get(name, ())))
        print(f"\n{'PASS' if ok else 'FAIL'}: {name}: deepseek every {periods} steps, the default setting (slack "
              f"{DEFAULT_SETTING[0]:g}, budget {DEFAULT_SETTING[1]:g}) moves >= 3x fewer bytes at <= 1 % higher "
              "mean imbalance")
        ok_all &= ok
    return ok_all


def _label(slack, budget) -> str:
    if slack is None:
        return "plain"
    return f"{slack:g}" + ("" if budget is None else f", budget {budget:g}")


def compare_at(store: Store, name: str, model: str, period: int, solver: str) -> bool:
    """One dataset, period and solver: plain re-planning against each migration setting;
    True when the default setting meets the target."""
    trace = load_dataset(name)
    shape = cluster(model, trace.num_experts)
    nbytes = get_model(model).expert_bytes
    recs = []
    for slack, budget in SETTINGS:
        case = f"migration/{solver}/{name}/every{period}/slack{slack}" + ("" if budget is None else f"/budget{budget}")
        rec = store.get(case)
        if rec is None:
            res = simulate(trace, **shape, solver=solver, every=period, migration_slack=slack,
                           migration_budget=budget, expert_bytes=nbytes)
            rec = store.put({"case": case, "slack": slack, "budget": budget, "load": load(), **res.totals()})
        recs.append(rec)
    plain = recs[0]
    rows, ok = [], False
    for rec in recs:
        ratio = plain["total_bytes"] / rec["total_bytes"] if rec["total_bytes"] else float("inf")
        delta = rec["mean_imbalance"] / plain["mean_imbalance"] - 1
        good = rec["slack"] is not None and ratio >= 3 and delta <= 0.01
        if (rec["slack"], rec.get("budget")) == DEFAULT_SETTING:
            ok = good
        rows.append([_label(rec["slack"], rec.get("budget")), rec["rebalances"],
                     rec["total_moves"], f"{rec['total_bytes'] / 1e9:.1f}", f"{ratio:.2f}x",
                     f"{rec['mean_imbalance']:.4f}", f"{100 * delta:+.2f} %", f"{rec['p99_imbalance']:.4f}",
                     f"{rec['wall_seconds']:.1f}", rec["load"], "yes" if good else ""])
    table(f"{name} ({shape['num_gpus']} GPUs, {shape['num_replicas']} slots), {solver} every {period} steps: "
          "migration-aware against plain re-planning",
          ["migration slack", "rebalances", "moves", "GB moved", "fewer bytes", "mean imbalance", "vs plain", "p99",
           "wall s", "load", ">= 3x and <= +1 %"], rows)
    print(f"\nthe default setting {'meets' if ok else 'misses'} the target: {name}, {solver} every {period}")
    return ok


ROBUSTNESS_SEEDS = (1, 2, 3, 4)


def seed_robustness(store: Store) -> None:
    """The default setting against plain re-planning on other draws of each dataset's generator."""
    from solvers.workloads.catalog import GENERATED

    rows = []
    for name, (model, period) in DATASETS.items():
        spec = GENERATED[name]
        for p in (period, *REQUIRED_PERIODS.get(name, ())):
            cells, met = [], 0
            for seed in ROBUSTNESS_SEEDS:
                case = f"seeds/{name}/every{p}/seed{seed}"
                rec = store.get(case)
                if rec is None:
                    trace = generate(spec["model"], spec["scenario"], steps=spec["steps"], seed=seed,
                                     tokens_per_step=spec["tokens_per_step"], **spec.get("overrides", {}))
                    shape = cluster(model, trace.num_experts)
                    plain = simulate(trace, **shape, every=p).totals()
                    aware = simulate(trace, **shape, every=p, migration_slack=DEFAULT_SETTING[0],
                                     migration_budget=DEFAULT_SETTING[1]).totals()
                    rec = store.put({"case": case, "ratio": plain["total_moves"] / max(aware["total_moves"], 1),
                                     "delta": aware["mean_imbalance"] / plain["mean_imbalance"] - 1, "load": load()})
                good = rec["ratio"] >= 3 and rec["delta"] <= 0.01
                met += good
                cells.append(f"{rec['ratio']:.2f}x, {100 * rec['delta']:+.2f} %{' (yes)' if good else ''}")
            rows.append([name, p, *cells, f"{met}/{len(ROBUSTNESS_SEEDS)}"])
    table("The default setting on other seeds of each dataset's generator (fewer bytes, realised mean vs plain)",
          ["generator of", "every", *[f"seed {s}" for s in ROBUSTNESS_SEEDS], "meet >= 3x and <= +1 %"], rows)


def sweep_demo(store: Store) -> None:
    name, (model, _) = "olmoe-1b-7b-drifting", DATASETS["olmoe-1b-7b-drifting"]
    case = f"sweep/{name}"
    rec = store.get(case)
    if rec is None:
        trace = load_dataset(name)
        rows = sweep(trace, periods=[10, 20, 50], thresholds=[1.15], slacks=[None, 0.0, 0.01],
                     expert_bytes=get_model(model).expert_bytes, **cluster(model, trace.num_experts))
        rec = store.put({"case": case, "rows": rows})
    print(f"\n## Sweep on {name} (deepseek): bytes moved against realised imbalance\n")
    print(frontier_table(rec["rows"]))
    pick = suggest(rec["rows"], 100e9)
    if pick is not None:
        print(f"\nsuggested within 100 GB: {pick['trigger']}, slack {pick['migration_slack']} "
              f"(mean imbalance {pick['mean_imbalance']:.4f}, {pick['total_bytes'] / 1e9:.1f} GB)")


def out_of_sample(store: Store) -> bool:
    ok_all = True
    for name, (model, size) in DATASETS.items():
        trace = load_dataset(name)
        shape = cluster(model, trace.num_experts)
        case = f"robust/{name}/window{size}"
        rec = store.get(case)
        if rec is None:
            loads = trace.loads
            W = loads.shape[0] // size
            sums = {p: [] for p in PLANNERS}
            steps = {p: [] for p in PLANNERS}
            for i in range(W - 1):
                hist = loads[i * size:(i + 1) * size]
                nxt = loads[(i + 1) * size:(i + 2) * size]
                problem = Problem(hist.sum(0), **shape)
                evaluate = Problem(nxt.sum(0), **shape)
                for p in PLANNERS:
                    opts = {} if p == "kk_swap" else {"history": hist}
                    if p == "ewma":
                        opts["halflife"] = max(1.0, size / 4)
                    plan = solve(problem, p, **opts).plan
                    sums[p].append(score(evaluate, plan).imbalance_mean)
                    steps[p].append(float(step_stats(nxt, plan, shape["num_gpus"])[0].mean()))
            rec = store.put({"case": case, "pairs": W - 1, "load": load(),
                             "next_window": {p: sum(v) / len(v) for p, v in sums.items()},
                             "per_step": {p: sum(v) / len(v) for p, v in steps.items()}})
        base_w, base_s = rec["next_window"]["kk_swap"], rec["per_step"]["kk_swap"]
        rows = []
        for p in PLANNERS:
            a, b = rec["next_window"][p], rec["per_step"][p]
            rows.append([p, f"{a:.5f}", f"{100 * (a / base_w - 1):+.2f} %", f"{b:.5f}", f"{100 * (b / base_s - 1):+.2f} %"])
        table(f"{name}: out of sample, plan on window i ({size} steps), score on window i+1 "
              f"({rec['pairs']} pairs, {shape['num_gpus']} GPUs)",
              ["planner", "next window's sum: mean imbalance", "vs kk_swap", "per step: mean imbalance",
               "vs kk_swap"], rows)
        ok = rec["next_window"]["robust_sum"] < base_w and rec["per_step"]["robust_sum"] < base_s
        print(f"\n{'PASS' if ok else 'FAIL'}: robust_sum below single-sum kk_swap out of sample on {name}")
        ok_all &= ok
    return ok_all


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1 on a shared machine)")
    ap.add_argument("--out", default=None, help="directory for results.jsonl (resumable)")
    ap.add_argument("--resume", action="store_true", help="skip cases already in results.jsonl")
    ap.add_argument("--skip-speed", action="store_true", help="skip the 1000-step speed target")
    ap.add_argument("--skip-seeds", action="store_true", help="skip the other seeds of the datasets' generators")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    store = Store(args.out, args.resume)
    print(f"# dynamics targets  torch={torch.__version__}  threads={torch.get_num_threads()}  load(1min)={load()}")
    ok = True
    if not args.skip_speed:
        ok &= speed(store)
    ok &= migration_vs_plain(store)
    if not args.skip_seeds:
        seed_robustness(store)
    sweep_demo(store)
    ok &= out_of_sample(store)
    print(f"\nload(1min) at end={load()}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
