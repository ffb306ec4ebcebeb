"""``summary.md`` and the performance-profile figure of a benchmark run.

The figure is a PNG rendered by plotly + kaleido with the system's chromium (BROWSER_PATH,
default /usr/bin/chromium when present); where no browser works it is written as HTML.
"""
from __future__ import annotations

import math
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..safewrite import write_atomic
from .analysis import (
    CERTIFIED_TARGET,
    DEFAULT_BUDGETS_S,
    TIME_SHIFT_S,
    VERDICTS,
    best_per_shape,
    certified_table,
    has_plan,
    holdout_table,
    performance_profile,
    solver_table,
)
from .dynamics_report import dynamics_section, dynamics_summary, split_dynamics, summary_head
from .windows_task import SECTION, windows_frame

GAP_DEFINITION = (
    "**Gap to bound** (per layer): `objective / best lower bound - 1`, where objective is the plan's "
    "max GPU load from the shared scorer (even split) and the best lower bound is the largest of the "
    "combinatorial bounds and every bound a solver proved on that instance and seed that holds for the plan (a "
    "bound of the unrestricted model holds for every plan; one proved for a restricted model, e.g. "
    "hierarchical, fixed counts or no colocation, only for plans of that model). `gap mean` averages the "
    "per-row mean over layers; `gap max` is the worst layer of any row. **Gap to best known**: "
    "`objective / best objective among all solvers' plans - 1`, mean over layers. Where the best "
    "bound meets the best objective on every layer the instance is solved to proven optimality "
    "and the gap is against the optimum. **Gap within policy**: the same against the larger of that "
    "bound and the node-level bound that holds for every plan keeping each group on one node "
    "(hierarchical plans); the difference to the gap to bound is what the hierarchical policy "
    "itself costs.")


def _fmt(v: Any, kind: str = "g") -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if kind == "pct":
        return "inf" if v == math.inf else f"{100 * v:.2f}%"
    if kind == "s":
        return f"{v:.3g} s" if v >= 0.001 else f"{1000 * v:.3g} ms"
    if kind == "x":
        return f"{v:.4f}"
    return str(v)


def markdown_table(df: pd.DataFrame, formats: dict[str, str] | None = None) -> str:
    formats = formats or {}
    cols = list(df.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for rec in df.to_dict("records"):
        lines.append("| " + " | ".join(_fmt(rec[c], formats.get(c, "g")) for c in cols) + " |")
    return "\n".join(lines)


def browser_path() -> str | None:
    return os.environ.get("BROWSER_PATH") or shutil.which("chromium") or shutil.which("chromium-browser") \
        or shutil.which("google-chrome")


def profile_sets(df: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """The problem sets to profile: a Dolan-More profile compares solvers on the same problems,
    so (1) every solver on the problems (instance, seed) that all of them ran, and (2) the
    heuristics on every problem they ran, when that set differs."""
    solvers = df["solver"].nunique()
    runs = df.groupby(["instance", "seed"])["solver"].nunique()
    common = runs[runs == solvers].index
    sets = []
    shared = df.set_index(["instance", "seed"]).loc[common].reset_index() if len(common) else df.iloc[0:0]
    if len(shared):
        sets.append((f"all solvers, {len(common)} problems", shared))
    heur = df[df["kind"] == "heuristic"]
    n_heur = heur.groupby(["instance", "seed"]).ngroups
    if len(heur) and (heur["solver"].nunique() < solvers or n_heur > len(common)):
        sets.append((f"heuristics, {n_heur} problems", heur))
    return sets


def profile_figure(df: pd.DataFrame):
    """Plotly figure: Dolan-More profiles on objective (quality) and on wall time, one row per
    problem set of :func:`profile_sets`."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    sets = profile_sets(df)
    titles = [f"{kind}: {name}" for name, _ in sets
              for kind in ("quality (objective / best)", "speed (wall time / fastest)")]
    fig = make_subplots(rows=len(sets), cols=2, subplot_titles=titles, vertical_spacing=0.15)
    palette = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
               "#bcbd22", "#17becf"]
    colors = {s: palette[k % len(palette)] for k, s in enumerate(sorted(df["solver"].unique()))}
    shown: set[str] = set()
    for row, (_, part) in enumerate(sets, start=1):
        for col, metric in ((1, "objective"), (2, "wall_time_s")):
            prof = performance_profile(part, metric)
            finite = np.concatenate([r[np.isfinite(r)] for r, _ in prof.values()] or [np.ones(1)])
            tau_max = max(float(finite.max()) * 1.05 if finite.size else 1.0, 1.0 + 1e-3)
            for solver, (ratios, frac) in prof.items():
                x = np.concatenate([[1.0], np.minimum(ratios, tau_max), [tau_max]])
                y = np.concatenate([[0.0], np.where(np.isfinite(ratios), frac, np.nan), [np.nan]])
                y = pd.Series(y).ffill().fillna(0.0).to_numpy()
                fig.add_trace(go.Scatter(x=x, y=y, mode="lines", line_shape="hv", name=solver,
                                         legendgroup=solver, showlegend=solver not in shown,
                                         line={"color": colors[solver]}), row=row, col=col)
                shown.add(solver)
            fig.update_xaxes(title_text="tau", type="log" if metric == "wall_time_s" else "linear",
                             row=row, col=col)
            fig.update_yaxes(range=[0, 1.02], row=row, col=col)
        fig.update_yaxes(title_text="fraction within tau of best", row=row, col=1)
    fig.update_layout(title="Performance profiles (Dolan-More)", width=1100, height=80 + 380 * len(sets),
                      template="plotly_white")
    return fig


def write_profile(df: pd.DataFrame, out_dir: Path, kind: str = "auto") -> Path | None:
    """The profile figure: ``auto`` writes profile.png (kaleido + chromium) or profile.html
    when no browser renders it; ``png`` / ``html`` force one (png still falls back to HTML
    without a browser); ``none`` writes nothing."""
    if df.empty or kind == "none":
        return None
    fig = profile_figure(df)
    png = out_dir / "profile.png"
    path = browser_path() if kind in ("auto", "png") else None
    if path:
        os.environ.setdefault("BROWSER_PATH", path)
        try:
            write_atomic(png, lambda tmp: fig.write_image(str(tmp), scale=1))
            (out_dir / "profile.html").unlink(missing_ok=True)
            return png
        except Exception:  # noqa: BLE001  no working browser here: fall back to HTML
            pass
    html = out_dir / "profile.html"
    write_atomic(html, lambda tmp: fig.write_html(str(tmp), include_plotlyjs=True))   # self-contained: opens offline
    png.unlink(missing_ok=True)
    return html


def proven_table(df: pd.DataFrame) -> pd.DataFrame:
    """Gap of each heuristic per instance where the optimum is proven (instance rows x solvers)."""
    ok = df[has_plan(df) & df["proven_optimum"]]
    if ok.empty:
        return ok
    t = ok.pivot_table(index=["instance", "seed"], columns="solver", values="gap_mean", aggfunc="mean")
    return t.reset_index()


CERTIFIED_DEFINITION = (
    "**Certified gap** (per layer of a seed): the best plan of any solver over the best bound valid "
    "for every plan that any solver proved, minus 1: how far from optimal the best known plan can "
    "still be. The **baseline** is what needs no proof search: the best heuristic plan over the "
    "combinatorial bounds. The difference is closed **by plan** (`(best heuristic plan - best plan) / "
    "combinatorial bound`) and **by bound** (`best plan / combinatorial bound - best plan / best "
    "bound`); both are means over layers and seeds. `certified max` is the worst layer of any seed. "
    "Verdict: `proven` (every layer's best bound meets its best plan), `already` (the baseline is "
    f"within {100 * CERTIFIED_TARGET:g} % on every layer), `plan` / `bound` (the certified gap is within "
    f"{100 * CERTIFIED_TARGET:g} % on every layer and that side closed more of the baseline's gap), "
    f"`open` (some layer above {100 * CERTIFIED_TARGET:g} %).")


def certified_section(df: pd.DataFrame, target: float = CERTIFIED_TARGET) -> list[str]:
    """Lines of the per-instance certified-gap section: the definition, a count per verdict
    and the table, worst instances first."""
    t = certified_table(df, target)
    if t.empty:
        return ["No instance has both a plan and a bound."]
    counts = t["verdict"].value_counts()
    tally = ", ".join(f"{int(counts[v])} {v}" for v in VERDICTS if v in counts)
    t = t.assign(_order=t["verdict"].map({v: i for i, v in enumerate(reversed(VERDICTS))}))
    t = t.sort_values(["_order", "certified max"], ascending=[True, False]).drop(columns="_order")
    return [CERTIFIED_DEFINITION, "", f"{len(t)} instances: {tally}.", "",
            markdown_table(t, {c: "pct" for c in ("certified max", "certified mean", "baseline max", "by plan",
                                                  "by bound")})]


def _ended(run: dict[str, Any]) -> str:
    """When a run whose rows were kept ended: its finish time, or, for a run that was stopped
    (killed, interrupted: it never wrote one), that it was stopped and when it had started."""
    if run.get("finished"):
        return f"finished {run['finished']}"
    started = f", started {run['started']}" if run.get("started") else ""
    return f"stopped before it finished{started}"


def render_summary(df: pd.DataFrame, meta: dict[str, Any], violations: list[str],
                   figure: Path | None, budgets: tuple[float, ...] = DEFAULT_BUDGETS_S) -> str:
    lines = summary_head(meta, f"{len(df)} runs on {df['instance'].nunique()} instances, seeds "
                               f"{sorted(int(x) for x in df['seed'].unique())}")
    kept = meta.get("kept_from") or []
    if kept:                     # a resumed run: the rows it kept were made elsewhere
        first = kept[0]
        lines[-1] += (f" {first.get('rows')} of these rows were kept by --resume from an earlier run (commit "
                      f"{str(first.get('commit') or '?')[:12]}, machine {first.get('machine') or '?'}, "
                      f"{_ended(first)}); this run made the rest.")
    lines += ["", GAP_DEFINITION, ""]
    if violations:
        lines += ["## HARD FAILURES", ""] + [f"- {v}" for v in violations] + [""]
    lines += ["## Per solver", "",
              f"time: shifted geometric mean of wall time with shift {TIME_SHIFT_S} s, and the maximum; "
              "`plans`: runs that returned a valid plan; `optimal`: runs whose plan meets the lower bound "
              "valid for every plan (solution status `proven_optimal`, whatever stopped the solver); "
              "`optimal_in_model`: runs proven optimal only within the solver's "
              "restricted model (a policy, fixed counts, no colocation; its bound is kept apart from the "
              "lower bound).", ""]
    # solver_table's columns: (heading, format)
    headings = {"time_sgm_s": (f"time sgm (shift {TIME_SHIFT_S} s)", "s"), "time_max_s": ("time max", "s"),
                "gap_mean": ("gap mean", "pct"), "gap_max": ("gap max", "pct"),
                "gap_in_policy": ("gap within policy", "pct"), "gap_best_known": ("gap to best known", "pct"),
                "imbalance_mean": ("imbalance", "x"), "holdout_imbalance_mean": ("out-of-sample imbalance", "x")}
    st = solver_table(df).rename(columns={c: h for c, (h, _) in headings.items()})
    lines.append(markdown_table(st, dict(headings.values())))
    ht = holdout_table(df)
    if not ht.empty:
        lines += ["", "## Out of sample, per held-out step", "",
                  "Each plan is made on window 0 (the time-robust planners get its steps one by one) and "
                  "served on every step of window 1: the sum over those steps of the busiest GPU's load "
                  "over the sum of the mean (1 is perfect), mean over seeds. Lower is better.", "",
                  markdown_table(ht, {c: "x" for c in ht.columns if c not in ("model", "shape", "scenario")})]
    wt = windows_frame(df)
    if not wt.empty:              # the EPLB benchmark's protocol (solvers.bench.windows_task)
        lines += ["", "## The EPLB benchmark's windows protocol", "",
                  "Each solver plans on every window of the trace and each plan is scored on the next window: "
                  "the benchmark's balancedness (mean over max load, summed over layers; GPUs and slots), its "
                  "speed score (0.002 s / mean time per window, planning and scoring) and combined score "
                  "((slots balancedness + speed) / 2), beside the held-out imbalance; means over the pairs.", "",
                  markdown_table(wt, {h: f for _, h, f in SECTION})]
    pt = proven_table(df)
    lines += ["", "## Gaps against proven optima", ""]
    if pt.empty:
        lines.append("No instance of this run was solved to proven optimality.")
    else:
        lines += ["Instances where the best bound meets the best plan on every layer: each solver's "
                  "mean gap over layers to the optimum.", "",
                  markdown_table(pt, {c: "pct" for c in pt.columns if c not in ("instance", "seed")})]
    lines += ["", "## Certified gap per instance", ""] + certified_section(df) + [""]
    lines += ["", "## Best solver per cluster shape within a time budget", "",
              "Lowest mean gap among solvers that returned a plan on every run of the shape with every "
              "run's wall time within the budget (`solver (mean gap)`).", "",
              markdown_table(best_per_shape(df, budgets))]
    lines += ["", "## Performance profile", ""]
    if figure is not None:
        lines.append(f"Dolan-More profiles on objective and on wall time: [{figure.name}]({figure.name}).")
    failed = df[~has_plan(df)]
    if len(failed):
        lines += ["", "## Runs without a plan", "",
                  markdown_table(failed[["instance", "seed", "solver", "termination", "message"]]
                                 .assign(message=lambda d: d["message"].str.slice(0, 120)))]
    return "\n".join(lines) + "\n"


def summary_text(df: pd.DataFrame, meta: dict[str, Any], violations: list[str], figure: Path | None) -> str:
    """summary.md of a run: the solver tables for solver rows, the dynamics table for the
    replays of a dynamics suite (a run holding only replays gets the dynamics summary)."""

    solved, replays = split_dynamics(df)
    if len(solved) or not len(replays):
        text = render_summary(solved, meta, violations, figure)
        return text + ("\n" + dynamics_section(replays) if len(replays) else "")
    return dynamics_summary(replays, meta)
