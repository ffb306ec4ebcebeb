"""Benchmark results: the shipped results (or another results directory), per-solver
tables, the best solver per shape and budget, performance profiles, gap against time, and
the recommender."""
from __future__ import annotations

import streamlit as st

from app import cache, figures
from app.widgets import end_run_on_error
from solvers.bench.analysis import (
    best_per_shape,
    performance_profile,
    shape_label,
    solver_table,
)
from solvers.bench.recommend import format_recommendation, recommend
from solvers.bench.report import profile_sets

PAGE = "results"


def main() -> None:

    st.title("Benchmark results")
    df = _result_set()
    if df is None:
        return
    if df.empty:
        st.warning("The results table is empty.")
        return
    st.caption(f"{len(df)} runs on {df['instance'].nunique()} instances, {df['solver'].nunique()} solvers. "
               "Gap = objective / best lower bound - 1 per layer (the bound holds for the plan); "
               "times are wall times of whole solves.")

    tabs = st.tabs(["Per solver", "Best per shape", "Profiles", "Gap vs time", "Recommend"])
    with tabs[0]:
        table = solver_table(df)
        st.dataframe(table, hide_index=True, width="stretch", column_config=_shares_as_percent(table))
    with tabs[1]:
        best = best_per_shape(df)
        st.dataframe(best, hide_index=True, width="stretch", column_config=_shares_as_percent(best))
        st.caption("Per cluster shape and time budget: the solver with the lowest mean gap among those that "
                   "returned a plan on every run within the budget (its mean gap in brackets).")
    with tabs[2]:
        sets = profile_sets(df)
        if not sets:
            st.info("No problem set that several solvers ran.")
        else:
            c1, c2 = st.columns(2)
            label = c1.selectbox("Problems", [name for name, _ in sets], key=f"{PAGE}:set")
            metric = c2.radio("Measure", ["quality (objective)", "speed (wall time)"], horizontal=True,
                              key=f"{PAGE}:metric")
            part = dict(sets)[label]
            col = "objective" if metric.startswith("quality") else "wall_time_s"
            st.plotly_chart(figures.profile_figure(performance_profile(part, col), metric.split(" ")[0],
                                                   log_x=col == "wall_time_s"), width="stretch",
                            key=f"{PAGE}:chart:profile")
            st.caption("Dolan-More profile: the share of problems on which a solver is within a factor tau of the "
                       "best solver (higher and further left is better).")
    with tabs[3]:
        labels = df.apply(shape_label, axis=1)
        shapes = sorted(labels.unique())
        shape = st.selectbox("Cluster shape", shapes, key=f"{PAGE}:shape")
        rows = df[(labels == shape) & df["gap_mean"].notna()]
        st.plotly_chart(figures.gap_time_scatter(rows, title=shape), width="stretch", key=f"{PAGE}:chart:scatter")
    with tabs[4]:
        _recommender(df)


UPLOAD = "Upload a results table"


def _result_set():
    """The results table chosen: a result set of the project's own folders, or an upload
    (no path box: a shared server reads no path a visitor types). None while nothing is uploaded."""
    sets = cache.result_sets()
    choice = st.selectbox("Result set", [*sets, UPLOAD], key=f"{PAGE}:set_choice",
                          help="the shipped results, run directories under the checkout's results/ "
                               "(`python -m benchmarks.run --out results/NAME`), or a results.parquet / "
                               "results.csv you upload")
    with end_run_on_error():
        if choice == UPLOAD:
            up = st.file_uploader("results.parquet or results.csv", type=["parquet", "csv"], key=f"{PAGE}:upload")
            if up is None:
                st.info("Upload a results table written by `python -m benchmarks.run`.")
                return None
            return cache.results_upload(up.name, up.getvalue())
        directory = sets[choice]
        return cache.results(directory, cache.results_stamp(directory))


def _recommender(df) -> None:

    with st.form(f"{PAGE}:recommend"):
        c = st.columns(4)
        experts = c[0].number_input("Experts", 1, 100_000, 256)
        replicas = c[1].number_input("Slots (all GPUs)", 1, 1_000_000, 288)
        gpus = c[2].number_input("GPUs", 1, 100_000, 32)
        nodes = c[3].number_input("Nodes", 1, 100_000, 4)
        c = st.columns(4)
        groups = c[0].number_input("Expert groups", 1, 100_000, 8)
        layers = c[1].number_input("MoE layers", 1, 10_000, 58, key=f"{PAGE}:layers",
                                   help="layers planned at once: benchmark timings (often of 8-layer slices) are "
                                        "scaled linearly to this many before the budget applies, as `eplb recommend "
                                        "--layers` (DeepSeek-V3: 58)")
        budget = c[2].number_input("Time budget (s)", 0.001, 86_400.0, 1.0, format="%g")
        policy = c[3].radio("Policy of the plans", ["any", "hierarchical", "global"], horizontal=True)
        submitted = st.form_submit_button("Recommend", type="primary")
    if not submitted:
        return
    with end_run_on_error():
        # the CLI's call (eplb recommend): same rows, same layer scaling, same policy filter
        rec = recommend(df, experts=int(experts), replicas=int(replicas), gpus=int(gpus), nodes=int(nodes),
                        groups=int(groups), time_budget=float(budget), layers=int(layers),
                        policy=None if policy == "any" else policy)
    head = format_recommendation(rec).split("\ncandidates", 1)[0].strip()      # the tables follow as tables
    (st.success if rec.solver else st.warning)("\n\n".join(ln for ln in head.splitlines() if ln.strip()))
    st.caption(f"The same answer as `eplb recommend --experts {int(experts)} --replicas {int(replicas)} --gpus {int(gpus)} "
               f"--nodes {int(nodes)} --groups {int(groups)} --layers {int(layers)} --time-budget {float(budget):g}"
               f" --policy {policy}`. The policy named is the one of the benchmark runs behind the answer: set it "
               "as **policy** on Explore or under **Policies** on Compare (the pages' auto is hierarchical where "
               "the groups split evenly over the nodes).")
    st.markdown("**Candidates** (best first)")
    st.dataframe(rec.table, hide_index=True, width="stretch", column_config=_shares_as_percent(rec.table))
    with st.expander(f"Evidence: the runs of {rec.solver or 'the fastest solver'}"):
        st.dataframe(rec.evidence, hide_index=True, width="stretch", column_config=_shares_as_percent(rec.evidence))


# Headers of the results tables (the library's column names are for CSV and code).
LABELS = {
    "time_sgm_s": ("time, geo. mean (s)", "shifted geometric mean of the wall times"),
    "time_max_s": ("time max (s)", None), "time_mean_s": ("time mean (s)", None),
    "wall_time_s": ("time (s)", None),
    "gap_mean": ("gap mean", "objective / best lower bound - 1, mean over layers"),
    "gap_max": ("gap worst layer", None), "gap_in_policy": ("gap in policy", "against the bound of the plan's policy"),
    "gap_in_policy_mean": ("gap in policy", None), "gap_best_known": ("gap to best known", None),
    "imbalance_mean": ("imbalance", "max / mean GPU load, mean over layers"),
    "holdout_imbalance_mean": ("held-out imbalance", "the plan on later steps than it was made on"),
    "holdout_imbalance": ("held-out imbalance", "plans of one window scored on the next, mean over the runs "
                          "every candidate has it on; the recommender ranks by it when there are such runs"),
    "holdout_runs": ("held-out runs", "runs (instance, seed) the held-out mean is taken over"),
    "off_node_share": ("off-node", None), "off_node_share_mean": ("off-node", None),
    "optimal_in_model": ("optimal in model", None), "all_plans": ("all plans", None),
    "num_experts": ("experts", None), "num_replicas": ("slots", None), "num_gpus": ("GPUs", None),
    "num_nodes": ("nodes", None), "num_groups": ("groups", None), "num_layers": ("layers", None),
    "proven_optimum": ("proven optimum", None),
}


def _shares_as_percent(table) -> dict:
    """Readable headers (LABELS); gaps and off-node shares are fractions: percentages."""
    config = {}
    for c in table.columns:
        label, help_text = LABELS.get(c, (c.replace("_", " "), None))
        if c.startswith(("gap", "off_node")):
            config[c] = st.column_config.NumberColumn(label, format="percent", help=help_text)
        elif c in ("solver", "instance"):
            config[c] = st.column_config.TextColumn(label, pinned=True)
        elif c in LABELS:
            config[c] = st.column_config.Column(label, help=help_text)
    return config


main()
