"""Over time: replay a trace under rebalancing settings (every N steps, past an imbalance
threshold, with or without migration-aware plans) and compare realised imbalance against
the bytes moved."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import streamlit as st

from solvers import Problem, get_solver, solver_names
from solvers.dynamics.sweep import frontier
from solvers.errors import EPLBError

from app import cache, figures
from app.cluster import expert_bytes
from app.widgets import REPLAY_TOTALS_COLUMNS, cluster_picker, describe_cluster, describe_loads, loads_picker, show_error

PAGE = "over_time"
DEFAULT_DATASET = "olmoe-1b-7b-drifting"
SETTING_COLUMNS = ("setting", "every", "threshold", "window", "migration_slack", "migration_budget", "gain_horizon")
DEFAULT_SETTINGS = pd.DataFrame([
    {"setting": "every 50", "every": 50},
    {"setting": "every 50, migration 1%", "every": 50, "migration_slack": 0.01},
    {"setting": "every 50, migration 1% + budget", "every": 50, "migration_slack": 0.01, "migration_budget": 0.25},
    {"setting": "every 10", "every": 10},
    {"setting": "threshold 1.25", "threshold": 1.25, "window": 50},
], columns=SETTING_COLUMNS)


def _setting(row: pd.Series) -> dict:
    """One editor row as simulate() keywords (blank cells are left out)."""
    out = {}
    for col, cast in (("every", int), ("threshold", float), ("window", int), ("migration_slack", float),
                      ("migration_budget", float), ("gain_horizon", int)):
        v = row.get(col)
        if v is not None and not (isinstance(v, float) and math.isnan(v)):
            out[col] = cast(v)
    return out


def main() -> None:
    st.title("Over time")
    st.caption("A plan is made from past loads and used on later ones. Replay a trace step by step: re-plan every "
               "N steps or when the realised imbalance passes a threshold, on the last W steps, optionally "
               "migration-aware (keep every layer's max load within 1 + slack of a fresh plan, move the fewest "
               "experts; a move budget widens the slack where that saves most).")
    with st.sidebar:
        loads = loads_picker(PAGE, DEFAULT_DATASET)
        if loads is None:
            return
        cluster, groups, model, cluster_error = cluster_picker(PAGE, loads, "node-8")
        st.subheader("Planner")
        names = [n for n in solver_names(available_only=True) if get_solver(n).kind == "heuristic"]
        solver = st.selectbox("Solver", names, index=names.index("deepseek") if "deepseek" in names else 0,
                              key=f"{PAGE}:solver", help="re-plans with this solver (heuristics: exact ones are too "
                                                         "slow to re-run at every rebalance)")
        size = st.number_input("Bytes per expert", 0, 10**12, expert_bytes(model) or 0, step=1_000_000,
                               key=f"{PAGE}:bytes:{model}", help="weights of one expert (moves x this = bytes moved)")
        timing = {"step_seconds": st.number_input(
                      "Seconds per step", 1e-4, 1e4, 1.0, key=f"{PAGE}:step_seconds", format="%.4g",
                      help="one trace step at perfect balance: the stalls (transfer makespan over the default "
                           "network) are weighed against it"),
                  "stall": st.radio("Weight copies", ("sync", "async"), horizontal=True, key=f"{PAGE}:stall",
                                    help="sync: serving stops for the makespan; async: copies run in the background "
                                         "and the old plan serves until they finish")}
    st.caption(describe_loads(loads) + ("" if cluster is None else " · " + describe_cluster(cluster, groups)))
    if loads.num_steps < 3:
        st.error(f"loads: a replay needs a trace of several steps; {loads.name} has {loads.num_steps}")
        return
    if cluster_error is not None:
        show_error(cluster_error)
        return
    try:
        Problem(loads.window(0, 1), cluster=cluster, num_groups=groups)   # checked before any replay
    except EPLBError as exc:
        show_error(exc)
        return
    st.markdown("**Settings** (edit, add or delete rows; blank = not used; a threshold needs a window)")
    edited = st.data_editor(DEFAULT_SETTINGS, num_rows="dynamic", hide_index=True, width="stretch",
                            key=f"{PAGE}:settings", column_config={
                                "every": st.column_config.NumberColumn(min_value=1, step=1),
                                "threshold": st.column_config.NumberColumn(min_value=1.0, format="%.3f"),
                                "window": st.column_config.NumberColumn(min_value=1, step=1,
                                                                        help="steps planned on (default: every)"),
                                "migration_slack": st.column_config.NumberColumn(min_value=0.0, format="%.3f"),
                                "migration_budget": st.column_config.NumberColumn(
                                    min_value=0.0, format="%.2f", help="at most this fraction of a fresh plan's "
                                    "moves per rebalance; the layers saving most get wider slacks (needs a slack)"),
                                "gain_horizon": st.column_config.NumberColumn(
                                    min_value=1, step=1, help="stall-aware: at each trigger, rebalance only when the "
                                    "predicted gain over this many steps exceeds the stall (needs bytes per expert)")})
    run = st.button("Run replay", type="primary", key=f"{PAGE}:run")
    settings = [(str(r["setting"] or f"setting {k}"), {**_setting(r), **(timing if size else {})})
                for k, r in edited.iterrows()]
    if not settings:
        st.info("Add at least one setting.")
        return
    trace = loads.trace
    nbytes = int(size) or None
    request = (cache.loads_mod.content_hash(trace), cluster, groups, solver, nbytes,
               tuple((n, cache.options_key(s)) for n, s in settings))
    done = st.session_state.setdefault(f"{PAGE}:done", {})
    if run:
        results = {}
        for name, setting in settings:
            with st.status(f"{name}: replaying {loads.num_steps} steps", expanded=False) as box:
                try:
                    results[name] = cache.simulate(trace, cluster, groups, solver, setting, nbytes)
                except EPLBError as exc:
                    box.update(label=f"{name}: {exc}", state="error")
                    show_error(exc)
                    continue
                t = results[name].totals()
                box.update(label=f"{name}: mean imbalance {t['mean_imbalance']:.4f}, {t['rebalances']} rebalances, "
                                 f"{t['total_moves']:,} moves in {t['wall_seconds']:.2g} s", state="complete")
        done[request] = results
    if request not in done:
        st.info("Press **Run replay** to simulate every setting.")
        return
    _show(done[request], nbytes is not None)


def _show(results: dict, has_bytes: bool) -> None:
    if not results:
        return
    unit = "GB" if has_bytes else "moves"
    rows = pd.DataFrame([{"setting": n, **{k: v for k, v in r.totals().items()}} for n, r in results.items()])
    front = [r["setting"] for r in frontier(rows.to_dict("records"))]
    rows["frontier"] = rows["setting"].isin(front)
    if has_bytes:
        rows.insert(rows.columns.get_loc("total_bytes"), "GB_moved", rows["total_bytes"] / 1e9)
    st.subheader("Totals")
    st.dataframe(rows, hide_index=True, width="stretch", column_config=REPLAY_TOTALS_COLUMNS)
    st.download_button("Download totals (CSV)", rows.to_csv(index=False).encode(), "replay_totals.csv", "text/csv",
                       key=f"{PAGE}:csv", on_click="ignore")
    runs = {}
    cum = {}
    for name, r in results.items():
        steps = np.arange(r.first_step, r.imbalance.shape[0])
        runs[name] = (steps, r.scored.numpy(), [x["step"] for x in r.rebalances])
        table = pd.DataFrame(r.step_rows())
        cum[name] = (table["step"].to_numpy(), table["cumulative_bytes" if has_bytes else "cumulative_moves"].to_numpy())
    st.markdown("**Realised imbalance per step** (triangles: a new plan takes effect)")
    st.plotly_chart(figures.realised_imbalance_figure(runs), width="stretch", key=f"{PAGE}:chart:imbalance")
    c1, c2 = st.columns(2)
    c1.markdown(f"**Cumulative {unit} moved**")
    c1.plotly_chart(figures.cumulative_bytes_figure(cum, unit), width="stretch", key=f"{PAGE}:chart:bytes")
    c2.markdown(f"**{unit} moved against realised imbalance** (ringed and dotted: the frontier)")
    c2.plotly_chart(figures.frontier_figure(rows, front, unit), width="stretch", key=f"{PAGE}:chart:frontier")
    if has_bytes:
        net = {}
        for name, r in results.items():
            table = pd.DataFrame(r.step_rows())
            net[name] = (table["step"].to_numpy(), table["cumulative_efficiency"].to_numpy(),
                         table["stall_seconds"].to_numpy())
        st.markdown("**Net line: stalls and net efficiency so far** (x: a rebalance's stall, sized by its seconds)")
        st.plotly_chart(figures.net_efficiency_figure(net), width="stretch", key=f"{PAGE}:chart:net")
    _rebalances(results)


@st.fragment
def _rebalances(results: dict) -> None:
    name = st.selectbox("Rebalances of", list(results), key=f"{PAGE}:which")
    st.dataframe(pd.DataFrame(results[name].rebalances), hide_index=True, width="stretch")


main()
