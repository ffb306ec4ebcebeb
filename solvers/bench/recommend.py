"""Which solver to use for a cluster shape, from benchmark results.

    recommend(results, experts=256, replicas=288, gpus=32, nodes=4, groups=8, time_budget=1.0)

Looks up the runs of that shape (E, R, P, N and G when given) in a results table (the
shipped ``solvers/bench/results`` by default), keeps the solvers that returned a plan on every
run with every run's wall time within the budget, and picks the lowest mean held-out
imbalance (the plan of window 0 scored on window 1, what a served plan meets), averaged over
the runs every candidate has it on, when there are such runs, else the lowest mean gap to the best lower bound (ties: the lower
gap, then the faster); the answer says which. With no run of exactly that shape it answers
from the nearest benchmarked shape and says so.
"""
from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from solvers.errors import OptionError
from solvers.cluster import Cluster, as_count
from solvers.registry import get_solver

from .analysis import SHAPE_COLS, candidates
from .store import read_results

# Package data: the same directory in a checkout, an editable install and an installed wheel.
# The planner suggested for plans served on later steps than they were made on (out of sample:
# re-planning from a window of past steps): it backtests its candidate estimators on the window
# and plans with the one the evidence picks (docs/dynamics.md, "Out of sample: backtest").
OUT_OF_SAMPLE_SOLVER = "backtest"
SHIPPED_RESULTS = Path(str(resources.files(__package__).joinpath("results")))
EVIDENCE_COLS = ["instance", "seed", "solver", "policy", "termination", "status", "gap_mean", "gap_max", "gap_in_policy_mean",
                 "off_node_share_mean", "wall_time_s", "num_layers", "proven_optimum"]


@dataclass
class Recommendation:
    """solver: the pick (None when no solver fits the budget); shape: the benchmarked shape
    answered from; exact_match: whether it is the asked shape; table: every candidate
    (best first); evidence: the pick's rows."""

    solver: str | None
    shape: dict[str, int]
    exact_match: bool
    time_budget: float | None
    table: pd.DataFrame
    evidence: pd.DataFrame
    source: str
    layers: int | None = None      # timings scaled to this many layers (None: as measured)
    policy: str | None = None      # the pick's placement policy
    ranked_by: str = "gap"         # "held-out imbalance" when the candidates share held-out runs, else "gap"

    def as_dict(self) -> dict[str, Any]:
        def clean(records: list[dict]) -> list[dict]:
            return [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()}
                    for r in records]
        return {"solver": self.solver, "policy": self.policy, "ranked_by": self.ranked_by, "shape": self.shape,
                "exact_match": self.exact_match,
                "time_budget_s": self.time_budget, "source": self.source,
                "candidates": clean(self.table.to_dict("records")),
                "evidence": clean(self.evidence.to_dict("records"))}


def _distance(df: pd.DataFrame, want: dict[str, int]) -> pd.Series:
    """Log-ratio distance of each row's shape to ``want`` (a mismatched G counts as one octave)."""
    d = pd.Series(0.0, index=df.index)
    for c in ("num_experts", "num_replicas", "num_gpus", "num_nodes"):
        d += np.abs(np.log2(df[c].astype(float) / want[c]))
    if "num_groups" in want:
        d += (df["num_groups"] != want["num_groups"]).astype(float)
    return d


def _holdout_on_common_runs(rows: pd.DataFrame, table: pd.DataFrame) -> pd.DataFrame:
    """``table`` with each candidate's held-out imbalance averaged over the runs (instance, seed)
    that every candidate has a held-out score on, NaN for all when there are none.

    Candidates do not all run on the same instances (the window planners run only where the
    suite gives them a history), and a mean over easier traces would rank a planner ahead of
    one measured only on harder ones; so the ranking compares like with like."""
    if table.empty or "holdout_imbalance_mean" not in rows:
        return table
    held = rows.assign(policy=rows["policy"].where(rows["policy"].astype(str) != "", "-"),
                       _h=pd.to_numeric(rows["holdout_imbalance_mean"], errors="coerce")).dropna(subset=["_h"])
    runs = {key: set(zip(g["instance"], g["seed"])) for key, g in held.groupby(["solver", "policy"])}
    keys = list(zip(table["solver"], table["policy"]))
    common = set.intersection(*(runs.get(k, set()) for k in keys)) if keys else set()
    if not common:
        return table.assign(holdout_imbalance=math.nan, holdout_runs=0)
    on = held[[(i, s) in common for i, s in zip(held["instance"], held["seed"])]]
    mean = on.groupby(["solver", "policy"])["_h"].mean()
    return table.assign(holdout_imbalance=[float(mean[k]) for k in keys], holdout_runs=len(common))


def recommend(results: pd.DataFrame | str | Path | None = None, *, experts: int, replicas: int, gpus: int,
              nodes: int = 1, groups: int | None = None, time_budget: float | None = None,
              layers: int | None = None, policy: str | None = None) -> Recommendation:
    """The recommendation for one cluster shape (see the module docstring).

    layers: MoE layers the user will plan at once. Benchmark rows may time fewer layers
    (the `full` suite uses 8-layer slices), so their wall times are scaled linearly to
    ``layers`` before the budget is applied: exact for per-layer solvers, conservative for
    the heuristics, which are batched over layers and grow slower than linearly."""
    E = as_count(experts, "experts")
    cluster = Cluster(nodes, gpus, replicas)
    G = cluster.check_experts(E, 1 if groups is None else groups)
    R, N, P = cluster.num_replicas, cluster.num_nodes, cluster.num_gpus
    if time_budget is not None and (isinstance(time_budget, bool) or not isinstance(time_budget, (int, float))
                                    or not time_budget > 0):
        raise OptionError("time_budget", f"must be > 0 seconds, got {time_budget!r}")
    if layers is not None:
        layers = as_count(layers, "layers")
    path = SHIPPED_RESULTS if results is None else results
    source = "(table)" if isinstance(results, pd.DataFrame) else str(path)
    df = results if isinstance(results, pd.DataFrame) else read_results(path)
    if "gap_mean" not in df.columns or df["gap_mean"].isna().all():
        raise OptionError("results", f"{source}: no finished runs with gaps (was the run completed?)")
    if policy not in (None, "auto", "hierarchical", "global"):
        raise OptionError("policy", f"must be hierarchical, global or auto (any), got {policy!r}")
    if policy in ("hierarchical", "global"):
        df = df[df["policy"].astype(str).str.split("+").str[0] == policy]
        if df.empty:
            raise OptionError("policy", f"{source}: no runs with the {policy} policy")
    want = {"num_experts": E, "num_replicas": R, "num_gpus": P, "num_nodes": N}
    if groups is not None:
        want["num_groups"] = G
    dist = _distance(df, want)
    nearest = df[dist == dist.min()]
    # One benchmarked shape: the most common among the nearest rows.
    shape_key = nearest.groupby(SHAPE_COLS).size().sort_values(ascending=False).index[0]
    rows = df[(df[SHAPE_COLS] == pd.Series(shape_key, index=SHAPE_COLS)).all(axis=1)]
    if layers is not None:
        rows = rows.assign(wall_time_s=rows["wall_time_s"] * layers / rows["num_layers"])
    shape = {c: int(v) for c, v in zip(SHAPE_COLS, shape_key)}
    table = candidates(rows, time_budget)
    ranked_by = "gap"
    table = _holdout_on_common_runs(rows, table)
    if len(table) and not table["holdout_imbalance"].isna().any():
        ranked_by = "held-out imbalance"
        table = table.sort_values(["fits", "holdout_imbalance", "gap_mean", "time_mean_s"],
                                  ascending=[False, True, True, True]).reset_index(drop=True)
    fit = table[table["fits"]]
    top = fit.iloc[0] if len(fit) else (table.sort_values("time_max_s").iloc[0] if len(table) else None)
    solver = None if fit.empty else str(fit.iloc[0]["solver"])
    chosen_policy = None if top is None else str(top["policy"])
    mine = (rows["solver"] == (None if top is None else top["solver"])) \
        & (rows["policy"].astype(str).replace("", "-") == chosen_policy)
    evidence = rows[mine].reindex(columns=EVIDENCE_COLS)
    return Recommendation(solver, shape, bool(dist.min() == 0), time_budget, table,
                          evidence.sort_values(["instance", "seed"]).reset_index(drop=True), source, layers,
                          None if solver is None else chosen_policy, ranked_by)


def format_recommendation(rec: Recommendation) -> str:
    s = rec.shape
    shape = f"E={s['num_experts']} R={s['num_replicas']} P={s['num_gpus']} N={s['num_nodes']} G={s['num_groups']}"
    budget = "no time budget" if rec.time_budget is None else f"time budget {rec.time_budget:g} s"
    lines = []
    if not rec.exact_match:
        lines.append(f"no benchmark runs of exactly this shape; answering from the nearest benchmarked "
                     f"shape {shape}")
    if rec.solver is None:
        fastest = rec.table.sort_values("time_max_s").iloc[0] if len(rec.table) else None
        lines.append(f"no solver returned a plan on every run of {shape} within the {budget}"
                     + (f"; the fastest is {fastest.solver} (max {fastest.time_max_s:.3g} s)" if fastest is not None else ""))
    else:
        best = rec.table[(rec.table["solver"] == rec.solver) & (rec.table["policy"] == rec.policy)].iloc[0]
        layers = "/".join(str(int(x)) for x in sorted(rec.evidence["num_layers"].unique())) + " layers" + (
            "" if rec.layers is None else f", times scaled to {rec.layers}")
        held = (f"held-out imbalance {best.holdout_imbalance:.4f} mean over the {int(best.holdout_runs)} runs "
                f"every candidate has (ranked by it: plans of one window scored on the next); "
                if rec.ranked_by == "held-out imbalance" else "")
        lines.append(f"use {rec.solver} ({best.kind}) with the {rec.policy} policy for {shape} with {budget}: "
                     f"{held}expected gap to the best lower bound {100 * best.gap_mean:.3f}% mean, "
                     f"{100 * best.gap_max:.3f}% worst layer; gap within the {rec.policy} policy "
                     f"{100 * best.gap_in_policy:.3f}%; off-node share {100 * best.off_node_share:.1f}%; "
                     f"runtime {best.time_mean_s:.3g} s mean, {best.time_max_s:.3g} s max "
                     f"over {int(best.rows)} runs of {layers}")
        lines.append(plan_hint(rec))
    lines.append(f"out of sample (a plan made on a window of past steps and served on the next ones): use "
                 f"{OUT_OF_SAMPLE_SOLVER} with the window's steps (history; eplb simulate --solver "
                 f"{OUT_OF_SAMPLE_SOLVER}): it backtests its candidates on the window and says what it chose")
    order = ("held-out imbalance first, then gap" if rec.ranked_by == "held-out imbalance"
             else "gap first: the results have no held-out imbalance for every candidate")
    prose = len(lines)
    lines += ["", f"candidates (best first, {order}; gap = objective / best lower bound - 1, per layer):"]
    lines += candidate_table(rec.table)
    if len(rec.evidence):
        lines += ["", f"evidence ({rec.evidence['solver'].iloc[0]}, from {rec.source}):"]
        for r in rec.evidence.itertuples():
            opt = " (vs proven optimum)" if r.proven_optimum else ""
            scaled = f" (scaled to {rec.layers} layers)" if rec.layers is not None else ""
            lines.append(f"  {r.instance} seed {r.seed}: {r.termination}, {r.status}, gap {100 * r.gap_mean:.3f}%{opt}, "
                         f"{r.wall_time_s:.3g} s{scaled}, measured on {r.num_layers} layers")
    # prose wrapped to the table's width; the table and evidence lines as they are
    return "\n".join(textwrap.fill(x, 120, subsequent_indent="  ") if i < prose else x for i, x in enumerate(lines))


def plan_hint(rec: Recommendation) -> str:
    """How to run the pick: the `eplb plan` flags, and for a planner of the window's steps
    (a solver with a ``history`` option, ranked on the steps of its benchmark windows) that
    it needs a window of steps, not a summed matrix, to plan as it was ranked."""
    cmd = f"eplb plan --loads LOADS --solver {rec.solver} --policy {rec.policy} ... --out plan.json"
    try:
        steps = "history" in get_solver(rec.solver).options
    except ValueError:                      # a solver of the results this install does not have
        steps = False
    if steps:
        return (f"plan it with: {cmd} (LOADS a trace window such as FILE@A:B: {rec.solver} plans on the "
                f"window's steps, as ranked; on a single [layers, experts] matrix it sees only their sum)")
    return f"plan it with: {cmd}"


# The candidates table: (title, column, format, align). Widths come from the cells, so a long
# solver name (uniform_replicas) keeps every column aligned.
_CANDIDATE_COLUMNS = (
    ("solver", "solver", "{}", "<"), ("policy", "policy", "{}", "<"), ("kind", "kind", "{}", "<"),
    ("runs", "rows", "{:d}", ">"), ("fits", "fits", None, ">"), ("held-out", "holdout_imbalance", "{:.4f}", ">"),
    ("gap mean", "gap_mean", "pct3", ">"), ("gap max", "gap_max", "pct3", ">"),
    ("in policy", "gap_in_policy", "pct3", ">"), ("off-node", "off_node_share", "pct1", ">"),
    ("time mean", "time_mean_s", "{:.3g}s", ">"), ("time max", "time_max_s", "{:.3g}s", ">"),
)


def _cell(value: Any, fmt: str | None) -> str:
    if fmt is None:
        return "yes" if value else "no"
    if isinstance(value, float) and math.isnan(value):
        return "-"
    if fmt.startswith("pct"):
        return f"{100 * value:.{fmt[3]}f}%"
    return fmt.format(int(value) if fmt == "{:d}" else value)


def candidate_table(table: pd.DataFrame) -> list[str]:
    """The candidates as aligned text lines (a header, then one line per candidate)."""
    cells = [[title for title, *_ in _CANDIDATE_COLUMNS]]
    cells += [[_cell(r[col], fmt) for _, col, fmt, _ in _CANDIDATE_COLUMNS] for r in table.to_dict("records")]
    widths = [max(len(row[i]) for row in cells) for i in range(len(_CANDIDATE_COLUMNS))]
    def line(row: list[str]) -> str:
        out = ""
        for i, (c, w, (*_, a)) in enumerate(zip(row, widths, _CANDIDATE_COLUMNS)):
            # one space between right-aligned numbers (their titles align on the right too), two elsewhere
            sep = "" if i == 0 else (" " if a == ">" and _CANDIDATE_COLUMNS[i - 1][3] == ">" else "  ")
            out += sep + (c.ljust(w) if a == "<" else c.rjust(w))
        return out.rstrip()
    return [line(row) for row in cells]
