"""Compare solvers: several solvers (each with its options) on the same loads, in sample and
on a held-out window."""
from __future__ import annotations

import pandas as pd
import streamlit as st
import torch

from solvers import Problem, get_solver, solver_names
from solvers.cluster import POLICIES
from solvers.bench.recommend import OUT_OF_SAMPLE_SOLVER
from solvers.solver_call import history_of
from solvers.compare import default_solvers, pick, planned_runs
from solvers.errors import OptionError
from solvers.progress import progress_line

from app import cache, figures, worker
from app import traffic as traffic_view
from app.compute import compare_row, options_text
from app.widgets import (cluster_picker, describe_cluster, describe_loads, end_run_on_error, keep, kept, loads_picker,
                         show_error, solver_options, window_picker)

PAGE = "compare"


def _holdout_window(loads, window) -> tuple[int, int] | None:
    """The steps after the planning window, as many as it has (fewer at the trace's end)."""
    start, stop = window
    if stop >= loads.num_steps:
        return None
    return stop, min(loads.num_steps, stop + (stop - start))


DEFAULT_POLICIES = ("hierarchical", "global")
# The results table: readable headers (the CSV keeps the plain names of solvers.compare).
_num = st.column_config.NumberColumn
_pct = dict(format="percent")
TABLE_COLUMNS = {
    "solver": st.column_config.TextColumn("solver", pinned=True),
    "policy": st.column_config.TextColumn("policy", help="hierarchical: whole expert groups per node; global: any GPU"),
    "wall_time_s": _num("time (s)", format="%.3g"),
    "imbalance_mean": _num("imbalance", format="%.4f", help="max / mean GPU load, mean over layers (planning window)"),
    "imbalance_worst": _num("worst layer", format="%.4f"),
    "holdout_step_imbalance_mean": _num("held out per step", format="%.4f",
                                        help="the plan on each held-out step in turn, sum of max / sum of mean GPU "
                                             "load: what serving meets; the pick goes by it"),
    "holdout_step_imbalance_worst": _num("per step worst", format="%.4f"),
    "holdout_step_time_imbalance_mean": _num("held out per step, time", format="%.4f",
                                             help="GPUs of different speeds: each held-out step's max GPU time over "
                                                  "its ideal (load / total speed), summed; the pick goes by it"),
    "holdout_step_time_imbalance_worst": _num("per step worst, time", format="%.4f"),
    "holdout_imbalance_mean": _num("held out", format="%.4f", help="the plan's imbalance on the held-out steps summed"),
    "time_imbalance_mean": _num("imbalance, time", format="%.4f",
                                help="GPUs of different speeds: max GPU time over its ideal (load / total speed), "
                                     "mean over layers (planning window); the token figure beside it ignores speeds"),
    "time_imbalance_worst": _num("worst layer, time", format="%.4f"),
    "holdout_time_imbalance_mean": _num("held out, time", format="%.4f",
                                        help="the same in time on the held-out steps summed"),
    "holdout_time_imbalance_worst": _num("held out worst, time", format="%.4f"),
    "holdout_imbalance_worst": _num("held out worst", format="%.4f"),
    "gap_mean": _num("gap to bound", **_pct, help="objective / lower bound - 1 (the bound holds for every plan)"),
    "gap_max": _num("gap worst", **_pct),
    "gap_in_policy_mean": _num("gap in policy", **_pct, help="against the bound for plans of this policy"),
    "holdout_gap_mean": _num("held-out gap", **_pct),
    "holdout_gap_max": _num("held-out gap worst", **_pct),
    "off_node_share_mean": _num("off-node", **_pct, help="tokens served outside their group's home node"),
    "duplicates": _num("dups", help="(layer, GPU, expert) with two or more replicas on one GPU"),
    "termination": st.column_config.TextColumn("termination", help="why the solver stopped"),
    "status": st.column_config.TextColumn("solution", help="what the plan is worth"),
}


# What a reader compares first on the left; the rest (and the CSV) keeps every column.
COLUMN_ORDER = ("solver", "holdout_step_time_imbalance_mean", "holdout_step_imbalance_mean", "time_imbalance_mean",
                "imbalance_mean", "holdout_time_imbalance_mean", "holdout_imbalance_mean", "gap_mean", "gap_in_policy_mean",
                "holdout_gap_mean", "off_node_share_mean", "wall_time_s", "status", "termination", "policy",
                "imbalance_worst", "holdout_step_imbalance_worst", "holdout_imbalance_worst", "gap_max",
                "holdout_gap_max", "duplicates")


def main() -> None:
    st.title("Compare solvers")
    body = st.container()
    with st.sidebar:
        loads = loads_picker(PAGE, main=body)
        if loads is None:
            return
        T = loads.num_steps
        window = window_picker(PAGE, loads, default=(0, max(1, T // 2)))
        cluster, groups, _, cluster_error = cluster_picker(PAGE, loads)
    holdout_steps = _holdout_window(loads, window)
    st.caption(describe_loads(loads) + f" · planning on steps {window[0]}..{window[1] - 1}"
               + (f", held out {holdout_steps[0]}..{holdout_steps[1] - 1}" if holdout_steps else ", no held-out steps after it")
               + ("" if cluster is None else " · " + describe_cluster(cluster, groups)))

    names = solver_names(available_only=True)
    c1, c2 = st.columns([3, 2])
    key = keep(f"{PAGE}:solvers", [n for n in default_solvers(holdout=True) + [OUT_OF_SAMPLE_SOLVER] if n in names])
    chosen = kept(key, c1.multiselect("Solvers", names, key=key))
    key = keep(f"{PAGE}:policies", list(DEFAULT_POLICIES))
    policies = kept(key, c2.multiselect(
        "Policies", POLICIES, key=key, help="every solver with a policy option runs once per policy (as `eplb compare "
        "--policy hierarchical,global`): hierarchical keeps whole expert groups on one node (less inter-node "
        "traffic), global places experts on any GPU (better balance); auto: hierarchical when the groups split "
        "evenly over the nodes"))
    options: dict[str, dict] = {}                   # solver -> its options
    with end_run_on_error():
        cols = st.columns(max(1, min(4, len(chosen))))
        for k, name in enumerate(chosen):
            with cols[k % len(cols)].expander(f"{name} options", expanded=False):
                options[name] = solver_options(PAGE, name, skip=("policy",), shared=False)
    c1, c2, _ = st.columns([1, 1, 4])
    run = c1.button("Run comparison", type="primary", key=f"{PAGE}:run", width="stretch")
    c2.button("Stop", key=f"{PAGE}:stop", width="stretch",
              help=f"ends the comparison now: a solver with a time limit above {worker.IN_PROCESS_LIMIT_S:g} s (the "
                   "exact ones, best with more time) is stopped, a shorter solve is let finish; every finished "
                   "result is kept")
    with end_run_on_error():
        if cluster_error is not None:
            raise cluster_error
        weights = loads.window(*window)
        problem = Problem(weights, cluster=cluster, num_groups=groups)
        held = problem.with_weights(loads.window(*holdout_steps)) if holdout_steps else None
        # the held-out steps one by one (scored per step, as `eplb compare --holdout`) and the
        # planning window's steps (for planners of a history, as `eplb compare`)
        held_steps = loads.trace[slice(*holdout_steps)] if holdout_steps else None
        history = history_of(loads.trace[window[0]:window[1]])      # the one rule (solvers.solver_call)
        if not policies:
            raise OptionError("policy", "pick at least one policy")
        if not problem.cluster.homogeneous and "hierarchical" in policies:
            # the default policies name hierarchical; a real cluster (speeds, uneven slots, failed
            # GPUs) plans globally, so the comparison runs that and says why, instead of an error
            policies = [p for p in policies if p != "hierarchical"] or ["global"]
            st.caption("Hierarchical skipped: it needs identical GPUs (speed 1, the same slot count each); "
                       "this cluster is planned with the global policy.")
        planned = planned_runs(problem, list(options), policies)
    if not options:
        st.info("Pick at least one solver.")
        return
    todo = [(f"{n} ({p})" if p else n, n, {**options[n], **({"policy": p} if p else {})}) for n, p in planned]
    request = (cache.loads_mod.content_hash(weights), window, holdout_steps, cluster, groups, tuple(
        (label, cache.options_key(o)) for label, _, o in todo))
    done = st.session_state.setdefault(f"{PAGE}:done", {})
    if run:
        # filled run by run: a Stop (which reruns the page) keeps what finished
        done[request] = {"rows": [], "outcomes": {}, "held": {}, "total": len(todo), "complete": False}
        progress = st.empty()           # the status boxes, cleared once every run is done: results on top
        with progress.container():
            _solve_all(todo, problem, (held, held_steps), history, done[request])
        progress.empty()
        done[request]["complete"] = True
    if request not in done:
        st.info("Press **Run comparison** to solve with every chosen solver "
                f"({len(todo)} run(s), {sum(get_solver(n).kind == 'exact' for _, n, _ in todo)} exact).")
        return
    entry = done[request]
    if not entry["complete"]:
        st.warning(f"Stopped: {len(entry['rows'])} of {entry['total']} run(s) finished before **Stop**; their results "
                   "are below. Press **Run comparison** to run them all.", icon=":material/stop_circle:")
    if not entry["rows"]:
        return
    _show(entry, problem, holdout_steps is not None)


def _solve_all(runs, problem, holdout, history, entry: dict) -> None:
    """Solve with each solver in turn (cached), with a status box per solver; each result
    goes into ``entry`` as soon as it is there. holdout: (held-out problem, its steps
    [T, L, E]) or Nones; history: the planning window's steps, for solvers with a history."""
    held, held_steps = holdout
    progress = st.progress(0.0, text="Solving...")
    for k, (label, name, options) in enumerate(runs):
        limit = options.get("time_limit", get_solver(name).defaults().get("time_limit"))
        extra = {"history": history} if history is not None and "history" in get_solver(name).options else None
        with st.status(f"{label}: solving" + (f" (time limit {limit:g} s)" if limit else ""), expanded=False) as box:
            try:
                if worker.stoppable(name, {**options, **(extra or {})}, problem):
                    expected = worker.expected_seconds(problem, name, {**options, **(extra or {})})

                    def wait(elapsed: float, pid: int, box=box, label=label, expected=expected, k=k) -> None:
                        box.update(label=f"{progress_line(label, elapsed, expected)} (Stop ends it now)")
                        if expected > 0:          # this solver's share of the bar, by its expected time
                            progress.progress((k + min(elapsed / expected, 0.99)) / len(runs),
                                              text=f"{k} of {len(runs)} solvers done, {label} running")

                    outcome = cache.solve_stoppable(problem, name, options, extra, wait)
                else:
                    outcome = cache.solve(problem, name, options, extra)
            except Exception as exc:  # noqa: BLE001  shown in its status box, the others still run
                entry["rows"].append({"solver": label, "termination": "error", "status": "none", "message": str(exc)})
                box.update(label=f"{label}: {exc}", state="error")
                show_error(exc)
                continue
            r = outcome.result
            h = cache.holdout_score(held, r.plan, held_steps) if held is not None and r.plan is not None else None
            entry["rows"].append({**compare_row(label, outcome, h), "options": options_text(options)})
            entry["outcomes"][label], entry["held"][label] = outcome, h
            state = "complete" if r.plan is not None else "error"
            box.update(label=f"{label}: {r.termination}, {r.status} in {r.wall_time:.3g} s"
                             + (f", imbalance {r.score.imbalance_mean:.4f}" if r.score else ""), state=state)
        progress.progress((k + 1) / len(runs), text=f"{k + 1} of {len(runs)} solvers done")
    progress.empty()


def _show(done: dict, problem, has_held: bool) -> None:
    table = pd.DataFrame(done["rows"])
    outcomes, held = done["outcomes"], done["held"]
    st.subheader("Results")
    st.dataframe(table, hide_index=True, width="stretch", column_config=TABLE_COLUMNS,
                 column_order=[c for c in COLUMN_ORDER if c in table.columns]
                 + [c for c in table.columns if c not in COLUMN_ORDER])
    st.download_button("Download table (CSV)", table.to_csv(index=False).encode(), "compare.csv", "text/csv",
                       key=f"{PAGE}:csv", on_click="ignore")
    ok = table[table["solver"].isin(list(outcomes))]
    if ok.empty:
        return
    best, reason = pick(ok.to_dict("records"))
    if best is not None:
        st.success(f"**{best['solver']}**: {reason}")
    hint = _policy_hint(ok)
    if hint:
        st.info(hint, icon=":material/lightbulb:")
    c1, c2 = st.columns(2)
    c1.markdown("**Gap to the lower bound**")
    c1.plotly_chart(figures.gap_figure(ok), width="stretch", key=f"{PAGE}:chart:gap")
    c2.markdown("**Runtime**")
    c2.plotly_chart(figures.runtime_figure(ok), width="stretch", key=f"{PAGE}:chart:time")
    traffic_view.compare_section(problem, {n: o.result.plan for n, o in outcomes.items()
                                           if o.result.plan is not None}, PAGE)
    _per_layer(outcomes, held, problem, has_held)


def _policy_hint(rows: pd.DataFrame) -> str | None:
    """Why hierarchical and global plans differ so much (when they do), or what the
    comparison left out (only hierarchical plans: the bound holds for global ones too)."""
    pol = rows["policy"].astype(str)
    hier, glob = rows[pol == "hierarchical"], rows[pol == "global"]
    if not hier.empty and not glob.empty:
        h, g = hier["gap_mean"].min(), glob["gap_mean"].min()
        if h > 2 * g + 0.01:
            return (f"The best hierarchical plan is {100 * h:.1f}% above the bound, the best global one {100 * g:.2f}%: "
                    "the hierarchical policy keeps each expert group's replicas on one node, which costs balance "
                    "and saves inter-node traffic (the off-node column).")
    elif not hier.empty and hier["gap_mean"].min() > 0.02 and (hier["gap_in_policy_mean"] < 0.5 * hier["gap_mean"]).all():
        return ("Every plan here is hierarchical and most of its gap to the bound is the policy's cost (gap in "
                "policy is much smaller): add global to **Policies** to see plans without that restriction.")
    return None


@st.fragment
def _per_layer(outcomes, held, problem, has_held: bool) -> None:
    """Per-layer and per-GPU charts; their settings rerun only this fragment."""
    which = "held out" if has_held and st.toggle("Per-layer imbalance on the held-out steps", key=f"{PAGE}:held_toggle") \
        else "in sample"
    series = {n: (held[n].score.imbalance if which == "held out" else o.result.score.imbalance)
              for n, o in outcomes.items() if o.result.score is not None}
    st.markdown(f"**Per-layer imbalance ({which})**")
    st.plotly_chart(figures.layer_imbalance_figure(series, solvers=True), width="stretch", key=f"{PAGE}:chart:layers")
    L = problem.num_layers
    first = next(iter(outcomes.values())).result.score
    worst = int(torch.argmax(first.imbalance)) if first is not None else 0
    layer = st.slider("Layer for the per-GPU loads", 0, L - 1, worst,
                      key=f"{PAGE}:layer:{L}:{'/'.join(outcomes)}:{worst}",     # a new comparison: its worst layer
                      help=f"starts at the worst layer of the first solver ({worst})") if L > 1 else 0
    loads = {n: o.result.score.gpu_load[layer] for n, o in outcomes.items() if o.result.score is not None}
    st.markdown(f"**Per-GPU load, layer {layer} (in sample)**")
    st.plotly_chart(figures.gpu_loads_side_by_side(loads, problem.num_nodes), width="stretch",
                    key=f"{PAGE}:chart:gpus")

main()
