"""Numbers derived from a results table: gaps against the best bound and the best known plan,
the regression gate, per-solver aggregates, the best solver per cluster shape and budget.

Gap definitions (stated in every report):
- per layer l: ``gap_l = objective_l / best_bound_l - 1`` where objective_l is the plan's max
  GPU load (shared scorer, even split) and best_bound_l the largest lower bound known for
  that layer of that instance and seed: the combinatorial bounds and every bound a solver
  proved for every plan (``lower_bound_layers``; a restricted model's bound is kept apart in
  ``model_bound_layers``). ``gap_mean`` / ``gap_max`` are the mean / max over layers.
- ``gap_in_model_mean``: against the model bounds that cover this plan (its own solver's,
  and free-count models of its policy and colocation rule).
- ``gap_best_known``: mean over layers of ``objective_l / best objective_l - 1``, the best
  objective among all solvers' plans on that instance and seed.
- ``gap_in_policy_mean``: the same gap against the larger of the best bound and the bound for
  every plan of the plan's own node structure (``solvers.bounds.structure_bound``: node-level
  bounds where each group stays on one node) and the model bounds that cover the plan. For a strict hierarchical plan it measures the
  heuristic within the hierarchical policy; ``gap_mean`` adds what the policy itself costs.
- ``proven_optimum``: the best bound meets the best objective on every layer, so the gap of
  that row is measured against a proven optimum.
"""
from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pandas as pd

from solvers.tolerances import BOUND_RTOL

# Same relative tolerance as solvers.solve (no absolute slack: loads may be normalised).
RTOL = BOUND_RTOL
TIME_SHIFT_S = 0.01        # shift of the shifted geometric mean of wall times (seconds)
DEFAULT_BUDGETS_S = (0.1, 1.0, 10.0, 60.0)
SHAPE_COLS = ["num_experts", "num_replicas", "num_gpus", "num_nodes", "num_groups"]


def _vec(text: Any) -> np.ndarray | None:
    if not isinstance(text, str) or not text:
        return None
    return np.asarray(json.loads(text), dtype=np.float64)


def _model_applies(bound: Any, row: Any) -> bool:
    """The model bound of row ``bound`` holds for the plan of row ``row``: the same scope, or a
    free-count model of the row's policy whose colocation rule the row's plan keeps."""
    if not bound.model_policy:
        return False
    if bound.name == row.name:
        return True
    if bound.model_counts != "free" or bound.model_policy != row.policy:
        return False
    if bound.model_policy == "hierarchical" and bound.model_node_budget != "fixed":
        return False
    return bound.model_colocation == "allowed" or row.duplicates == 0


def derive(df: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """The table with DERIVED columns, and the hard violations found across rows
    (an objective below a bound that applies to it)."""
    df = df.copy()
    for c in ("best_bound", "gap_mean", "gap_max", "gap_in_policy_mean", "gap_in_model_mean", "gap_best_known"):
        df[c] = np.nan
    df["proven_optimum"] = False
    violations: list[str] = []
    for _, idx in df.groupby(["instance", "seed"], sort=False).groups.items():
        rows = df.loc[idx]
        objs = {i: _vec(r.objective_layers) for i, r in rows.iterrows()}
        lbs = [v for v in (_vec(r.lower_bound_layers) for _, r in rows.iterrows()) if v is not None]
        mbs = {i: _vec(r.get("model_bound_layers")) for i, r in rows.iterrows()}
        plans = [v for v in objs.values() if v is not None]
        best_obj = np.min(plans, axis=0) if plans else None
        if not lbs:
            continue
        bound = np.max(lbs, axis=0)              # every lower bound holds for every plan
        for i, r in rows.iterrows():
            model = [mbs[j] for j, q in rows.iterrows() if mbs[j] is not None and _model_applies(q, r)]
            df.at[i, "best_bound"] = float(bound.sum())
            obj = objs[i]
            if obj is None:
                continue
            for what, b in [("lower bound", bound)] + [("model bound", m) for m in model]:
                if (obj < b * (1 - RTOL)).any():
                    layer = int(np.argmax(b - obj))
                    violations.append(f"{r.solver} on {r.instance} seed {r.seed}: layer {layer} objective "
                                      f"{obj[layer]!r} is below the proven {what} {b[layer]!r}")
            gap = _gap(obj, bound)
            known = np.where(best_obj > 0, obj / np.maximum(best_obj, 1e-300) - 1, 0.0)
            df.at[i, "gap_mean"], df.at[i, "gap_max"] = float(gap.mean()), float(gap.max())
            sb = _vec(r.get("structure_bound_layers"))
            within = np.maximum(bound, sb) if sb is not None else bound
            if model:
                in_model = np.maximum(bound, np.max(model, axis=0))
                df.at[i, "gap_in_model_mean"] = float(_gap(obj, in_model).mean())
            # bounds of the row's whole policy (free counts, duplicates allowed) sharpen the gap within it
            of_policy = [mbs[j] for j, q in rows.iterrows() if mbs[j] is not None and q.model_counts == "free"
                         and q.model_colocation == "allowed" and _model_applies(q, r)]
            if of_policy:
                within = np.maximum(within, np.max(of_policy, axis=0))
            df.at[i, "gap_in_policy_mean"] = float(_gap(obj, within).mean())
            df.at[i, "gap_best_known"] = float(known.mean())
            df.at[i, "proven_optimum"] = bool((bound >= best_obj * (1 - RTOL)).all())
    return df, violations


def _gap(obj: np.ndarray, bound: np.ndarray) -> np.ndarray:
    return np.where(bound > 0, obj / np.maximum(bound, 1e-300) - 1, np.where(obj > 0, np.inf, 0.0))


def shifted_geomean(times: pd.Series, shift: float = TIME_SHIFT_S) -> float:
    t = times.dropna().astype(float)
    if t.empty:
        return math.nan
    return float(np.exp(np.log(t + shift).mean()) - shift)


def has_plan(df: pd.DataFrame) -> pd.Series:
    return df["objective"].notna()


def solver_table(df: pd.DataFrame) -> pd.DataFrame:
    """Per solver: runs, plans found, proven optimal, failures, shifted geomean time, gaps."""
    out = []
    for name, g in df.groupby("solver", sort=True):
        ok = g[has_plan(g)]
        out.append({
            "solver": name, "kind": g["kind"].iloc[0], "runs": len(g), "plans": len(ok),
            "optimal": int((g["status"] == "proven_optimal").sum()),
            "optimal_in_model": int((g["status"] == "optimal_in_model").sum()),
            "failed": int((~has_plan(g)).sum()),
            "time_sgm_s": shifted_geomean(g["wall_time_s"]),
            "time_max_s": float(g["wall_time_s"].max()),
            # over the runs with a plan (NaN when none has one)
            "gap_mean": float(ok["gap_mean"].mean()), "gap_max": float(ok["gap_max"].max()),
            "gap_in_policy": float(ok["gap_in_policy_mean"].mean()),
            "gap_best_known": float(ok["gap_best_known"].mean()), "imbalance_mean": float(ok["imbalance_mean"].mean()),
            "holdout_imbalance_mean": float(ok["holdout_imbalance_mean"].mean()),
        })
    return pd.DataFrame(out)


def holdout_table(df: pd.DataFrame) -> pd.DataFrame:
    """Out of sample, per held-out step: per (model, shape, scenario) and solver (with the
    policy it ran), the mean over seeds of ``holdout_step_imbalance_mean``
    (the plan of window 0 served on each step of window 1). Only the instances where the
    time-robust planners ran (a solver with a history among the rows), so that every column
    covers the same instances. Columns: model, shape, scenario, then one per solver."""
    if "holdout_step_imbalance_mean" not in df:
        return pd.DataFrame()
    held = pd.to_numeric(df["holdout_step_imbalance_mean"], errors="coerce")
    rows = df[held.notna()].assign(holdout_step=held[held.notna()])
    robust = rows["solver"].isin(HISTORY_SOLVERS)
    if not robust.any():
        return pd.DataFrame()
    rows = rows[rows["instance"].isin(set(rows.loc[robust, "instance"]))]
    pol = rows["policy"].astype(str)
    label = rows["solver"].where(pol == "", rows["solver"] + " (" + pol + ")")
    table = rows.assign(column=label).pivot_table(index=["model", "shape", "scenario"], columns="column",
                                                 values="holdout_step", aggfunc="mean")
    return table.reset_index()


# The time-robust planners of a window's steps (the benchmark passes them the window).
HISTORY_SOLVERS = ("robust_sum", "ewma", "risk_aware")


def candidates(rows: pd.DataFrame, budget_s: float | None) -> pd.DataFrame:
    """Per (solver, policy) on ``rows`` (one cluster shape): expected gap and time, and whether
    it found a plan on every row within ``budget_s`` (max wall time <= budget). Best first:
    fits the budget, then lowest mean gap, then fastest."""
    out = []
    policy = rows["policy"].where(rows["policy"].astype(str) != "", "-")
    for (name, pol), g in rows.assign(policy=policy).groupby(["solver", "policy"], sort=True):
        all_plans = bool(has_plan(g).all())
        t_max = float(g["wall_time_s"].max())
        off, within, held = (pd.to_numeric(g[c], errors="coerce") if c in g else pd.Series(math.nan, index=g.index)
                             for c in ("off_node_share_mean", "gap_in_policy_mean", "holdout_imbalance_mean"))
        out.append({"solver": name, "policy": pol, "kind": g["kind"].iloc[0], "rows": len(g),
                    "all_plans": all_plans, "fits": all_plans and (budget_s is None or t_max <= budget_s),
                    "gap_mean": float(g["gap_mean"].mean()), "gap_max": float(g["gap_max"].max()),
                    "gap_in_policy": float(within.mean()), "off_node_share": float(off.mean()),
                    # held-out imbalance (plan on window 0, scored on window 1); NaN unless every row has it
                    "holdout_imbalance": math.nan if held.isna().any() else float(held.mean()),
                    "time_mean_s": float(g["wall_time_s"].mean()), "time_max_s": t_max,
                    "proven": bool(g["proven_optimum"].all())})
    c = pd.DataFrame(out)
    if c.empty:
        return c
    return c.sort_values(["fits", "gap_mean", "time_mean_s"], ascending=[False, True, True],
                         na_position="last").reset_index(drop=True)


def shape_label(r: Any) -> str:
    return (f"E={int(r.num_experts)} R={int(r.num_replicas)} P={int(r.num_gpus)} "
            f"N={int(r.num_nodes)} G={int(r.num_groups)}")


def best_per_shape(df: pd.DataFrame, budgets: tuple[float, ...] = DEFAULT_BUDGETS_S) -> pd.DataFrame:
    """For each cluster shape (E, R, P, N, G) and time budget: the solver with the lowest mean
    gap among those that found a plan on every row within the budget."""
    out = []
    for key, g in df.groupby(SHAPE_COLS, sort=True):
        rec = dict(zip(SHAPE_COLS, key))
        rec["shape"] = ", ".join(sorted(set(g["shape"])))
        rec["policies"] = ", ".join(sorted(p for p in set(g["policy"]) if p))
        rec["rows"] = len(g)
        for b in budgets:
            c = candidates(g, b)
            best = c[c["fits"]].head(1)
            rec[f"<= {b:g} s"] = (f"{best.solver.iloc[0]}/{best.policy.iloc[0]} ({100 * best.gap_mean.iloc[0]:.2f}%)"
                                 if len(best) else "none")
        out.append(rec)
    return pd.DataFrame(out)


def performance_profile(df: pd.DataFrame, metric: str) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Dolan-More profile: for each solver, tau -> fraction of problems (instance, seed) where
    its ``metric`` is within a factor tau of the best solver's. A run without a plan counts as
    never solved. metric: "objective" (quality) or "wall_time_s" (speed)."""
    value = df[metric].where(has_plan(df))
    table = df.assign(_v=value).pivot_table(index=["instance", "seed"], columns="solver", values="_v",
                                            aggfunc="first", dropna=False)
    table = table.reindex(columns=sorted(df["solver"].unique()))
    best = table.min(axis=1)
    floor = 1e-12
    ratios = table.div(best.clip(lower=floor), axis=0).where(best > 0, table.gt(0).astype(float) + 1)
    ratios = ratios.fillna(np.inf)
    out = {}
    for solver in ratios.columns:
        r = np.sort(ratios[solver].to_numpy())
        frac = np.arange(1, len(r) + 1) / len(r)
        out[solver] = (r, frac)
    return out


# Certified gap per instance: the best plan of any solver over the best bound of any solver.

CERTIFIED_TARGET = 0.01        # the gap a benchmark instance should be certified within
VERDICTS = ("proven", "already", "plan", "bound", "open")


def _instance_layers(rows: pd.DataFrame) -> dict[str, np.ndarray] | None:
    """Per-layer [layers] vectors of one (instance, seed): best plan, best universal bound,
    the combinatorial bound (the smallest lower bound any row reports: every row includes
    it) and the best heuristic plan; None when no row has both a plan and a bound."""
    objs = [(r.kind, v) for r in rows.itertuples() if (v := _vec(r.objective_layers)) is not None]
    lbs = [v for v in (_vec(x) for x in rows["lower_bound_layers"]) if v is not None]
    if not objs or not lbs:
        return None
    heur = [v for k, v in objs if k == "heuristic"]
    best = np.min([v for _, v in objs], axis=0)
    return {"plan": best, "bound": np.max(lbs, axis=0), "trivial": np.min(lbs, axis=0),
            "baseline": np.min(heur, axis=0) if heur else best}


def certified_table(df: pd.DataFrame, target: float = CERTIFIED_TARGET) -> pd.DataFrame:
    """Per instance (over its seeds): the certified gap and what closed it.

    Per layer l of a seed: ``certified_l = best plan_l / best bound_l - 1`` (best plan: the
    lowest max GPU load of any solver's plan; best bound: the largest bound valid for every
    plan, any solver's). The *baseline* is what the combinatorial bounds and the
    heuristics give without any proof search: ``best heuristic plan_l / combinatorial
    bound_l - 1``. The difference is split, as in ``solvers.certify.gap_closure``, into
    the part closed by better plans (``(baseline plan - best plan) / combinatorial bound``)
    and the part closed by better bounds (``best plan / combinatorial bound - best plan /
    best bound``). Columns: ``certified max`` (worst layer of any seed), ``certified
    mean``, ``baseline max``, ``by plan`` / ``by bound`` (means over layers and seeds),
    ``proven`` (layers whose best bound meets the best plan, out of all layers of all
    seeds) and ``verdict``: ``proven`` (every layer), ``already`` (the baseline meets
    ``target`` on every layer), ``plan`` / ``bound`` (the certified gap meets ``target``
    on every layer, and that side closed more), ``open`` (some layer above ``target``).
    """
    out = []
    for instance, g in df.groupby("instance", sort=True):
        seeds = [v for _, rows in g.groupby("seed", sort=True) if (v := _instance_layers(rows)) is not None]
        if not seeds:
            continue
        cert = np.concatenate([_gap(s["plan"], s["bound"]) for s in seeds])
        base = np.concatenate([_gap(s["baseline"], s["trivial"]) for s in seeds])
        by_plan = np.concatenate([_gap(s["baseline"], s["trivial"]) - _gap(s["plan"], s["trivial"]) for s in seeds])
        by_bound = np.concatenate([_gap(s["plan"], s["trivial"]) - _gap(s["plan"], s["bound"]) for s in seeds])
        proven = np.concatenate([s["bound"] >= s["plan"] * (1 - RTOL) for s in seeds])
        if proven.all():
            verdict = "proven"
        elif (base <= target).all():
            verdict = "already"
        elif (cert <= target).all():
            verdict = "plan" if by_plan.mean() >= by_bound.mean() else "bound"
        else:
            verdict = "open"
        out.append({"instance": instance, "seeds": len(seeds), "layers": len(cert),
                    "certified max": float(cert.max()), "certified mean": float(cert.mean()),
                    "baseline max": float(base.max()), "by plan": float(by_plan.mean()),
                    "by bound": float(by_bound.mean()), "proven": f"{int(proven.sum())}/{len(proven)}",
                    "verdict": verdict})
    return pd.DataFrame(out)
