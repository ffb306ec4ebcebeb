"""Explore a placement: plan one set of loads with one solver and look at it GPU by GPU."""
from __future__ import annotations

import tempfile
from pathlib import Path

import pandas as pd
import streamlit as st

from app import cache, figures, worker
from app import traffic as traffic_view
from app.cluster import expert_bytes
from app.compute import (DISPATCH_MODELS, EXACT_SCALE, exact_report, metric_cards, plan_table, policy_hint,
                         run_line, worst_layer)
from app.exports import plan_downloads
from app.widgets import (
    cluster_picker,
    describe_cluster,
    describe_loads,
    end_run_on_error,
    loads_picker,
    show_error,
    solver_options,
    solver_select,
    window_picker,
)
from solvers import Problem, get_solver, score
from solvers.solver_call import history_of
from solvers.cluster import MODELS, dense_rows
from solvers.dispatch.microbatches import (
    imbalance_stats,
    sample_microbatches,
    steps_as_microbatches,
)
from solvers.errors import EPLBError, PlanError
from solvers.progress import progress_line
from solvers.workloads.exporters import read_plan_for_loads

PAGE = "explore"
PLAN_SUFFIXES = ("json", "yaml", "yml", "csv")
VIEWS = ("Per-GPU load", "Heatmap", "Per layer", "Micro-batches", "Traffic", "Plan", "Download")


def _current_placement(problem, model):
    """The optional placement in force (any plan export format) and the expert size."""
    # A toggle, not an expander: a collapsed expander still draws its uploader and inputs.
    if not st.toggle("Current placement", key=f"{PAGE}:previous_on",
                     help="compare with the plan in force: the cards add the moves and bytes needed to switch"):
        return None, 0
    up = st.file_uploader("Plan in force", type=list(PLAN_SUFFIXES), key=f"{PAGE}:previous",
                          help="our plan JSON, SGLang expert-location JSON, TensorRT-LLM YAML or plan CSV; "
                               "adds the moves and bytes needed to switch to the new plan")
    size = st.number_input("Bytes per expert", 0, 10**12, expert_bytes(model) or 0, step=1_000_000,
                           key=f"{PAGE}:expert_bytes:{model}", help="one expert's weights (default: the model "
                                                                     "preset's size in its usual dtype)")
    if up is None:
        return None, int(size)

    with tempfile.TemporaryDirectory(prefix="eplb-plan-") as tmp:
        path = Path(tmp) / ("plan" + Path(up.name).suffix.lower())
        path.write_bytes(up.getvalue())
        try:
            # the CLI's rule: an engine map with more rows than MoE layers keeps its last rows
            plan, _, _, dropped = read_plan_for_loads(path, problem.num_layers, problem.num_experts, "previous")
        except EPLBError as exc:
            raise type(exc)(exc.param, str(exc).split(": ", 1)[1].replace(str(path), up.name)) from None
    if plan.num_layers != problem.num_layers or plan.num_experts != problem.num_experts:
        raise PlanError("previous", f"{up.name} places {plan.num_experts} experts on {plan.num_layers} layer(s); the "
                        f"loads have {problem.num_experts} experts on {problem.num_layers} MoE layers: is it a plan "
                        "of another model? (an engine map may have more rows, dense layers first, never fewer)")
    if dropped:
        st.caption(f"{up.name}: its first {dropped} row(s) (dense layers) skipped; the last {plan.num_layers} "
                   "rows are the MoE layers.")
    return plan, int(size)


def main() -> None:
    st.title("Explore a placement")
    body = st.container()
    with st.sidebar:
        loads = loads_picker(PAGE, main=body)
        if loads is None:
            return
        window = window_picker(PAGE, loads)
        cluster, groups, model, cluster_error = cluster_picker(PAGE, loads)
        st.subheader("Solver")
        solver = solver_select(PAGE)
        with end_run_on_error():
            options = solver_options(PAGE, solver)
        spec = get_solver(solver)
        exact = spec.kind == "exact"
        c1, c2 = st.columns([2, 1])
        run = c1.button("Run solver", type="primary", key=f"{PAGE}:run", width="stretch",
                        help="heuristics re-run on every change; exact solvers run when you press this")
        stop_slot = c2.empty()          # drawn once the problem is known: its work estimate decides

    st.caption(describe_loads(loads) + f" · planning on steps {window[0]}..{window[1] - 1}"
               + ("" if cluster is None else " · " + describe_cluster(cluster, groups)))
    with end_run_on_error():
        if cluster_error is not None:
            raise cluster_error
        weights = loads.window(*window)                                        # [L, E]
        problem = Problem(weights, cluster=cluster, num_groups=groups)
        with st.sidebar:
            previous, size = _current_placement(problem, model)
            # a solver that plans on per-token routing (traffic_aware) gets its trace here
            routing = traffic_view.routing_picker(f"{PAGE}:solver", problem) \
                if "routing" in spec.options else None
    # Free-form options the page fills: a time-robust planner's history (the window's steps), the
    # migration solver's current placement (the uploaded plan in force), a routing-aware solver's trace.
    extra = {k: v for k, v in (("history", history_of(loads.trace[window[0]:window[1]])),
                               ("current", previous), ("routing", routing)) if k in spec.options and v is not None}
    stoppable = worker.stoppable(solver, {**options, **extra}, problem)
    stop_slot.button("Stop", key=f"{PAGE}:stop", width="stretch", disabled=not stoppable,
                     help=f"ends a solve expected to take more than {worker.IN_PROCESS_LIMIT_S:g} s (its time "
                          "limit or its work estimate) now: its process is stopped; no plan")
    limit = options.get("time_limit", spec.defaults().get("time_limit"))
    running = st.session_state.pop(f"{PAGE}:running", None)        # set while a stoppable solve runs
    if running is not None and not run:
        st.warning(f"Stopped {running}: its process was ended before it returned a plan. Press **Run solver** "
                   "to start it again.", icon=":material/stop_circle:")
    if (exact or running is not None) and not run and not cache.is_solved(problem, solver, options):
        if running is None:
            st.info(f"{solver} is an exact solver (time limit {limit} s): press **Run solver** to start it. "
                    + EXACT_SCALE)
        return
    if "routing" in spec.options and routing is None:
        st.info(f"{solver} plans on a per-token routing trace: upload one in the sidebar.")
        return
    try:
        if stoppable:
            progress = st.empty()
            expected = worker.expected_seconds(problem, solver, {**options, **extra})

            def wait(elapsed: float, pid: int) -> None:     # an st call: where Streamlit can stop the run
                progress.progress(min(elapsed / expected, 1.0) if expected > 0 else 0.0,
                                  text=f"{progress_line(solver, elapsed, expected)} · **Stop** ends it now")

            st.session_state[f"{PAGE}:running"] = solver
            outcome = cache.solve_stoppable(problem, solver, options, extra, wait)
            st.session_state.pop(f"{PAGE}:running", None)
            progress.empty()
        else:
            with st.spinner(f"Running {solver}..."):
                outcome = cache.solve(problem, solver, options, extra)
        cache.mark_solved(problem, solver, options)
    except Exception as exc:  # noqa: BLE001  the library's message, never a traceback
        st.session_state.pop(f"{PAGE}:running", None)
        show_error(exc)
        return
    result = outcome.result
    if result.plan is None:
        st.error(f"{solver}: no plan (stopped: {result.termination}). {result.message}")
        return
    moves = None
    if previous is not None:
        try:
            moves = score(problem, result.plan, previous=previous, expert_bytes=size)
        except EPLBError as exc:
            show_error(exc)
    st.markdown(run_line(result), help="termination: why the solver stopped; solution: what the plan is worth "
                "(proven_optimal: meets the bound valid for every plan; optimal_in_model: only within the solver's "
                "restricted model; feasible: a valid plan, optimality not proven)")
    if exact or result.model_bound is not None:
        (st.info if result.status != "feasible" else st.warning)("\n\n".join(exact_report(result)))
    hint = policy_hint(result, outcome.gap_in_policy)
    if hint:
        st.info(hint, icon=":material/lightbulb:")
    _cards(metric_cards(outcome, moves))
    _charts(problem, outcome, loads, model, solver, window)


CARDS_PER_ROW = 5     # about 150 px per card at 1280 x 800 with the sidebar open: "1.1481" fits


def _cards(cards) -> None:
    for start in range(0, len(cards), CARDS_PER_ROW):
        cols = st.columns(CARDS_PER_ROW)
        for col, (label, value, help_text) in zip(cols, cards[start:start + CARDS_PER_ROW]):
            col.metric(label, value, help=help_text, border=True)


@st.fragment
def _charts(problem, outcome, loads, model, solver, window) -> None:
    """The views; switching views reruns only this fragment, not the page and its cards."""
    result = outcome.result
    sc = result.score
    # One view at a time: the browser draws only the charts in sight (tabs would draw all).
    view = st.segmented_control("View", VIEWS, default=VIEWS[0], key=f"{PAGE}:view",
                                label_visibility="collapsed") or VIEWS[0]
    if view == "Per-GPU load":
        _per_gpu(problem, result)
    elif view == "Heatmap":
        st.plotly_chart(figures.load_heatmap(sc.gpu_load, problem.num_nodes), width="stretch",
                        key=f"{PAGE}:chart:heatmap")
        st.caption("Load / mean per GPU and layer (red: above the mean); x marks each layer's hottest GPU.")
    elif view == "Per layer":
        floor = result.lower_bound / sc.mean_load.clamp_min(1e-300)
        series = {"GPU imbalance": sc.imbalance, "node imbalance": sc.node_imbalance}
        st.plotly_chart(figures.layer_imbalance_figure(series, floor=floor, dashed=("node imbalance",)),
                        width="stretch", key=f"{PAGE}:chart:layers")
        st.caption("GPU imbalance (solid) and node imbalance (dashed, drawn under it: where they coincide the node "
                   "is the bottleneck). The dotted line is the lower bound / mean: no plan of any policy can go "
                   "below it.")
    elif view == "Micro-batches":
        _micro_batches(problem, result, loads, window, model)
    elif view == "Traffic":
        traffic_view.explore_view(problem, result.plan, PAGE)
    elif view == "Plan":
        _plan_table(problem, result)
    else:
        _downloads(problem, result, loads, model, solver, window)


# Fragments: a chart setting reruns only its fragment, never the solve or the other charts.

@st.fragment
def _per_gpu(problem, result) -> None:
    L, worst = problem.num_layers, worst_layer(result)
    # keyed by the plan: a new solve opens on its own worst layer, not the last plan's
    plan_id = cache.loads_mod.content_hash(result.plan.phy2log)[:12]
    # one MoE layer: no slider (Streamlit refuses a 0..0 range)
    layer = st.slider("Layer", 0, L - 1, worst, key=f"{PAGE}:layer:{L}:{plan_id}",
                      help=f"MoE layer to draw (starts at the worst layer, {worst})") if L > 1 else 0
    c = problem.cluster
    if not c.homogeneous:     # a real cluster: time per GPU (load / speed), failed GPUs marked
        sc = result.score
        st.plotly_chart(figures.gpu_time_figure(sc.gpu_load[layer], c.gpu_speed, c.gpu_slots, problem.num_nodes,
                                                f"Layer {layer}: time imbalance {float(sc.time_imbalance[layer]):.4f}"),
                        width="stretch", key=f"{PAGE}:chart:time")
        st.caption("Bars: each GPU's time (its tokens over its relative speed), coloured by speed; the dashed line "
                   "is the best possible time, the layer's tokens over the live GPUs' total speed.")
        return
    fig = cache.gpu_figure(problem, result, layer)
    st.plotly_chart(fig, width="stretch", key=f"{PAGE}:chart:bars")
    nodes = ("Dotted lines mark node boundaries; the panel on the right is the load per node for this layer. "
             if problem.num_nodes > 1 else "")
    st.caption(nodes + "Segments are replicas, coloured by how many replicas their expert has (hover for the expert).")


@st.fragment
def _micro_batches(problem, result, loads, window, model) -> None:
    """The plan under each dispatch model, micro-batch by micro-batch: the window's steps
    taken as micro-batches, or micro-batches sampled from them."""

    c1, c2 = st.columns([2, 3])
    chosen = c1.pills("Dispatch model", list(DISPATCH_MODELS), selection_mode="multi", default=list(DISPATCH_MODELS),
                      key=f"{PAGE}:dispatch", help="even split: each replica serves w_e / c_e (vLLM, SGLang, "
                      "TensorRT-LLM); scheduled split: per micro-batch, the split of each expert's tokens over its "
                      "replicas with the smallest max GPU load (MicroMoE, LPLB)")
    source = c2.radio("Micro-batches", ["sampled", "steps of the window"], horizontal=True, key=f"{PAGE}:mb_source",
                      help="a step of a trace holds many micro-batches' tokens; sampled micro-batches draw "
                           "top-k routed tokens from the steps' expert shares")
    steps = loads.trace[window[0]:window[1]]                                   # [T, L, E]
    try:
        if source == "sampled":
            k1, k2, k3 = st.columns(3)
            n = k1.number_input("Micro-batches", 1, 4096, 64, key=f"{PAGE}:mb_count")
            size = k2.number_input("Tokens per micro-batch", 1, 1_000_000, 4096, step=512, key=f"{PAGE}:mb_tokens")
            seed = k3.number_input("Seed", 0, 2**31 - 1, 0, key=f"{PAGE}:mb_seed")
            top_k = MODELS[model].top_k if model in MODELS else 8
            tokens = sample_microbatches(steps, int(n), int(size), min(top_k, problem.num_experts), int(seed))
        else:
            tokens = steps_as_microbatches(steps)
        series = {m: cache.microbatch_imbalance(result.plan, tokens, problem.cluster, m) for m in chosen or []}
    except Exception as exc:  # noqa: BLE001  the library's message, never a traceback
        show_error(exc)
        return
    if not series:
        return
    st.plotly_chart(figures.microbatch_histogram(series), width="stretch", key=f"{PAGE}:chart:microbatches")
    st.dataframe(pd.DataFrame([{"dispatch model": m, **imbalance_stats(v)} for m, v in series.items()]),
                 hide_index=True)
    st.caption(f"{tokens.shape[0]} micro-batches x {problem.num_layers} layers; the plan was made on the window's sum.")


@st.fragment
def _plan_table(problem, result) -> None:
    L = problem.num_layers
    layer = st.number_input("Layer", 0, L - 1, worst_layer(result), key=f"{PAGE}:table_layer:{L}")
    st.dataframe(plan_table(problem.weights, result.plan, int(layer), problem.num_gpus, problem.num_nodes,
                            problem.cluster.slot_gpus()),
                 hide_index=True, width="stretch",
                 column_config={"tokens": st.column_config.NumberColumn(format="%.0f"),
                                "load / mean": st.column_config.NumberColumn(format="%.4f")})


@st.fragment
def _downloads(problem, result, loads, model, solver, window) -> None:
    dense = dense_rows(model, loads.num_layers, loads.dense_layers)
    offset = st.number_input("Dense layers before the first MoE layer", 0, 1000, dense, key=f"{PAGE}:offset:{model}",
                             help="engines index layers in the whole model (DeepSeek-V3: 3 dense layers)")
    name = f"{loads.name}@{window[0]}:{window[1]}"
    for k, d in enumerate(plan_downloads(result.plan, problem, policy=result.policy, solver=solver,
                                         options=result.options, metrics=result.score.metrics(),
                                         layer_offset=int(offset), loads_name=name, result=result)):
        c1, c2 = st.columns([2, 3])
        c1.download_button(d.label, d.build, file_name=d.filename, mime=d.mime, key=f"{PAGE}:dl:{k}",
                           width="stretch", on_click="ignore")
        c2.markdown(d.usage)

main()
