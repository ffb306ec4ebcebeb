"""Over time: replay a trace under rebalancing settings (every N steps, past an imbalance
threshold, with or without migration-aware plans) and compare realised imbalance against
the bytes moved."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import streamlit as st

from solvers import POLICIES, Problem, get_solver, solver_names
from solvers.dynamics.settings import DEFAULT_WINDOW, SETTINGS
from solvers.dynamics.sweep import frontier
from solvers.errors import EPLBError
from solvers.network import DEFAULT_INTER_NODE_BW, DEFAULT_INTRA_NODE_BW, Network

from app import cache, figures
from app.cluster import expert_bytes, with_network
from app.compute import common_start, replay_totals
from app.widgets import (REPLAY_TOTALS_COLUMNS, cluster_picker, describe_cluster, describe_loads, end_run_on_error,
                         error_text, keep, kept, loads_picker, show_error, solver_select)

_num = st.column_config.NumberColumn

PAGE = "over_time"
DEFAULT_DATASET = "olmoe-1b-7b-drifting"
SETTING_COLUMNS = ("setting", "every", "threshold", "window", "migration_slack", "migration_budget", "stall_aware")
# Labels of the widgets made from the replay settings' schema (the others show the setting's name).
LABELS = {"step_seconds": "Seconds per step", "stall": "Weight copies", "transfer_model": "Transfer model",
          "async_interference": "Async interference", "migration_slack": "migration slack",
          "migration_budget": "migration budget", "stall_aware": "stall-aware"}


def setting_column(name: str):
    """The settings table's column of replay setting ``name``: its schema's range and help."""
    o = SETTINGS[name]
    if o.type is bool:
        return st.column_config.CheckboxColumn(LABELS.get(name, name), help=o.help)
    return st.column_config.NumberColumn(LABELS.get(name, name), min_value=o.minimum, max_value=o.maximum,
                                         step=1 if o.type is int else None,
                                         format=None if o.type is int else "%.3f", help=o.help)


def setting_input(name: str):
    """A sidebar widget of replay setting ``name``: its schema's choices (a radio) or range and default."""
    o = SETTINGS[name]
    if o.choices:
        return st.radio(LABELS[name], o.choices, horizontal=True, key=f"{PAGE}:{name}", help=o.help)
    return st.number_input(LABELS[name], o.minimum, o.maximum, o.default, key=f"{PAGE}:{name}", format="%.4g",
                           help=o.help)


def default_settings(num_steps: int) -> pd.DataFrame:
    """The settings table a trace of ``num_steps`` steps opens with: periods that leave most
    of the trace to score (a long period of T/8 steps, 50 on a 400-step trace, and a short
    one), migration-aware variants, the short period checked by the stall-aware trigger (it
    rebalances only when the gain pays for the stall) and a threshold row with its window."""
    long = max(2, num_steps // 8)
    short = max(1, long // 5)
    table = pd.DataFrame([
        {"setting": f"every {long}", "every": long},
        {"setting": f"every {long}, migration 1%", "every": long, "migration_slack": 0.01},
        {"setting": f"every {long}, migration 1% + budget", "every": long, "migration_slack": 0.01,
         "migration_budget": 0.25},
        {"setting": f"every {short}", "every": short},
        {"setting": f"every {short}, stall-aware", "every": short, "stall_aware": True},
        {"setting": "threshold 1.25", "threshold": 1.25, "window": long},
    ], columns=SETTING_COLUMNS)
    table["stall_aware"] = table["stall_aware"].fillna(False).astype(bool)   # a checkbox column needs booleans
    return table


def _setting(row: pd.Series) -> dict:
    """One editor row as simulate() keywords (blank cells are left out)."""
    out = {}
    for col in SETTING_COLUMNS[1:]:
        v, cast = row.get(col), SETTINGS[col].type
        if cast is bool:
            if isinstance(v, (bool, np.bool_)) and v:    # a blank checkbox cell is None or NaN
                out[col] = True
        elif v is not None and not (isinstance(v, float) and math.isnan(v)):
            out[col] = cast(v)
    return out


def blank_window_note(name: str, setting: dict) -> str | None:
    """What a row with a blank window plans on (the simulator's rule, said out loud)."""
    if "window" in setting or "every" in setting:       # blank with a period: the period (the column's help)
        return None
    return (f"{name}: window blank and no period, so each plan is made on the last {DEFAULT_WINDOW} steps "
            "(the simulator's default); fill in **window** to choose.")


def main() -> None:
    st.title("Over time")
    st.caption("A plan is made from past loads and used on later ones. Replay a trace step by step: re-plan every "
               "N steps or when the realised imbalance passes a threshold, on the last W steps, optionally "
               "migration-aware (keep every layer's max load within 1 + slack of a fresh plan, move the fewest "
               "experts; a move budget widens the slack where that saves most).")
    body = st.container()
    with st.sidebar:
        loads = loads_picker(PAGE, DEFAULT_DATASET, main=body)
        if loads is None:
            return
        cluster, groups, model, cluster_error = cluster_picker(PAGE, loads, "node-8")
        st.subheader("Planner")
        names = [n for n in solver_names(available_only=True) if get_solver(n).kind == "heuristic"]
        solver = solver_select(PAGE, "deepseek", names, help="re-plans with this solver (heuristics: exact ones are "
                                                            "too slow to re-run at every rebalance); for plans served "
                                                            "on later steps, backtest is suggested: it picks its "
                                                            "estimator by backtesting the window")
        policy = None
        if "policy" in get_solver(solver).options:
            key = keep(f"{PAGE}:policy", "auto", POLICIES)
            policy = kept(key, st.selectbox("Policy", POLICIES, key=key,
                                            help="of every plan: hierarchical keeps whole expert groups on one node, "
                                                 "global places experts on any GPU; auto: hierarchical when the "
                                                 "groups split evenly over the nodes (as `eplb simulate --policy`)"))
        key = keep(f"{PAGE}:bytes:{model}", expert_bytes(model) or 0)
        size = kept(key, st.number_input("Bytes per expert", 0, 10**12, step=1_000_000, key=key,
                                         help="weights of one expert (moves x this = bytes moved)"))
        st.subheader("Network")
        timing = {name: setting_input(name) for name in ("step_seconds", "stall", "transfer_model")}
        if timing["stall"] == "async":
            timing["async_interference"] = setting_input("async_interference")
        intra = st.number_input("Intra-node GB/s per GPU", 0.001, 1e6, DEFAULT_INTRA_NODE_BW / 1e9,
                                key=f"{PAGE}:intra_bw", format="%g", help="NVLink-class, per GPU and direction")
        inter = st.number_input("Inter-node GB/s per GPU", 0.001, 1e6, DEFAULT_INTER_NODE_BW / 1e9,
                                key=f"{PAGE}:inter_bw", format="%g", help="InfiniBand-class NIC, per GPU and direction")
    st.caption(describe_loads(loads) + ("" if cluster is None else " · " + describe_cluster(cluster, groups)))
    if loads.num_steps < 3:
        st.error(f"loads: a replay needs a trace of several steps; {loads.name} has {loads.num_steps}")
        return
    with end_run_on_error():
        if cluster_error is not None:
            raise cluster_error
        cluster = with_network(cluster, Network(intra * 1e9, inter * 1e9))
        problem = Problem(loads.window(0, 1), cluster=cluster, num_groups=groups)   # checked before any replay
        if policy is not None:
            problem.resolve_policy(policy)
    T = loads.num_steps
    st.markdown(f"**Settings** (edit, add or delete rows; blank = not used; {T} steps in this trace: a plan's "
                "window must leave steps to score)")
    edited = st.data_editor(default_settings(T), num_rows="dynamic", hide_index=True, width="stretch",
                            key=f"{PAGE}:settings:{T}",
                            column_config={name: setting_column(name) for name in SETTING_COLUMNS[1:]})
    run = st.button("Run replay", type="primary", key=f"{PAGE}:run")
    settings = [(str(r["setting"] or f"setting {k}"), {**_setting(r), **(timing if size else {})})
                for k, r in edited.iterrows()]
    if not settings:
        st.info("Add at least one setting.")
        return
    for note in filter(None, (blank_window_note(n, s) for n, s in settings)):
        st.caption(note)
    trace = loads.trace
    nbytes = int(size) or None
    planner_options = {"policy": policy} if policy not in (None, "auto") else {}
    request = (cache.loads_mod.content_hash(trace), cluster, groups, solver, cache.options_key(planner_options),
               nbytes, tuple((n, cache.options_key(s)) for n, s in settings))
    done = st.session_state.setdefault(f"{PAGE}:done", {})
    if run:
        results = {}
        progress = st.empty()           # the bar and status boxes, cleared once every replay is done
        box_area = progress.container()
        bar = box_area.progress(0.0, text=f"0 of {len(settings)} settings replayed")
        for k, (name, setting) in enumerate(settings):
            with box_area.status(f"{name}: replaying {loads.num_steps} steps", expanded=False) as box:
                try:
                    results[name] = cache.simulate(trace, cluster, groups, solver, setting, nbytes, planner_options)
                except EPLBError as exc:
                    box.update(label=f"{name}: {error_text(exc)}", state="error")
                    show_error(exc)
                    continue
                t = results[name].totals()
                box.update(label=f"{name}: mean imbalance {t['mean_imbalance']:.4f}, {t['rebalances']} rebalances, "
                                 f"{t['total_moves']:,} moves in {t['wall_seconds']:.2g} s", state="complete")
            bar.progress((k + 1) / len(settings), text=f"{k + 1} of {len(settings)} settings replayed")
        if len(results) == len(settings):
            progress.empty()            # errors stay in sight
        done[request] = results
    if request not in done:
        st.info("Press **Run replay** to simulate every setting.")
        return
    _show(done[request], nbytes is not None)


def _show(results: dict, has_bytes: bool) -> None:
    if not results:
        return
    unit = "GB" if has_bytes else "moves"
    start = common_start(results.values())
    rows = pd.DataFrame([{"setting": n, **replay_totals(r, start)} for n, r in results.items()])
    front = [r["setting"] for r in frontier(rows.to_dict("records"))]
    rows.insert(1, "frontier", rows["setting"].isin(front))      # by the name, not off the right edge
    if has_bytes:
        rows.insert(rows.columns.get_loc("total_bytes"), "GB_moved", rows["total_bytes"] / 1e9)
    T = next(iter(results.values())).imbalance.shape[0]
    st.subheader("Totals")
    st.caption(f"Every setting is scored on the same steps, {start}..{T - 1} (from the latest first plan among "
               "them), so the totals compare; moves count every rebalance of the replay.")
    st.dataframe(rows, hide_index=True, width="stretch", column_config=REPLAY_TOTALS_COLUMNS)
    st.download_button("Download totals (CSV)", rows.to_csv(index=False).encode(), "replay_totals.csv", "text/csv",
                       key=f"{PAGE}:csv", on_click="ignore")
    runs, cum, net = {}, {}, {}
    for name, r in results.items():
        runs[name] = (np.arange(start, r.imbalance.shape[0]), r.imbalance[start:].numpy(),
                      [x["step"] for x in r.rebalances])
        t = pd.DataFrame(r.step_rows())
        cum[name] = (t["step"].to_numpy(), t["cumulative_bytes" if has_bytes else "cumulative_moves"].to_numpy())
        net[name] = (t["step"].to_numpy(), t["cumulative_efficiency"].to_numpy(), t["stall_seconds"].to_numpy())
    st.markdown("**Realised imbalance per step** (triangles: a new plan takes effect)")
    st.plotly_chart(figures.realised_imbalance_figure(runs), width="stretch", key=f"{PAGE}:chart:imbalance")
    c1, c2 = st.columns(2)
    c1.markdown(f"**Cumulative {unit} moved**")
    c1.plotly_chart(figures.cumulative_bytes_figure(cum, unit), width="stretch", key=f"{PAGE}:chart:bytes")
    c2.markdown(f"**{unit} moved against realised imbalance** (ringed and dotted: the frontier)")
    c2.plotly_chart(figures.frontier_figure(rows, front, unit), width="stretch", key=f"{PAGE}:chart:frontier")
    if has_bytes:
        st.markdown("**Net line: stalls and net efficiency so far** (x: a rebalance's stall, sized by its seconds)")
        st.plotly_chart(figures.net_efficiency_figure(net), width="stretch", key=f"{PAGE}:chart:net")
    _rebalances(results)


REBALANCE_COLUMNS = {
    "step": _num("step", help="the new plan is in force from this step"),
    "plan_seconds": _num("plan time (s)", format="%.3f"),
    "moves": _num("moves", format="localized", help="replicas loaded onto a GPU"),
    "bytes": None,                                               # shown as GB
    "GB": _num("GB moved", format="%.2f"),
    "in_sample_imbalance": _num("imbalance in sample", format="%.4f", help="of the new plan on its planning window"),
    "reason": st.column_config.TextColumn("reason", help="period or threshold"),
}


@st.fragment
def _rebalances(results: dict) -> None:
    name = st.selectbox("Rebalances of", list(results), key=f"{PAGE}:which")
    table = pd.DataFrame(results[name].rebalances)
    if "bytes" in table and table["bytes"].notna().any():
        table["GB"] = table["bytes"].astype(float) / 1e9
    st.dataframe(table, hide_index=True, width="stretch", column_config=REBALANCE_COLUMNS)


main()
