"""Compare solvers: several solvers (each with its options) on the same loads, in sample and
on a held-out window."""
from __future__ import annotations

import pandas as pd
import streamlit as st
import torch

from solvers import Problem, get_solver, solver_names
from solvers.compare import pick
from solvers.errors import EPLBError

from app import cache, figures
from app import traffic as traffic_view
from app.compute import compare_row, options_text
from app.widgets import cluster_picker, describe_cluster, describe_loads, loads_picker, show_error, solver_options, window_picker

PAGE = "compare"
DEFAULT_SOLVERS = ("deepseek", "kk_swap", "joint", "best")


def _held_out_window(loads, window) -> tuple[int, int] | None:
    """The steps after the planning window, as many as it has (fewer at the trace's end)."""
    start, stop = window
    if stop >= loads.num_steps:
        return None
    return stop, min(loads.num_steps, stop + (stop - start))


def main() -> None:
    st.title("Compare solvers")
    with st.sidebar:
        loads = loads_picker(PAGE)
        if loads is None:
            return
        T = loads.num_steps
        window = window_picker(PAGE, loads, default=(0, max(1, T // 2)))
        cluster, groups, _, cluster_error = cluster_picker(PAGE, loads)
    heldout = _held_out_window(loads, window)
    st.caption(describe_loads(loads) + f" · planning on steps {window[0]}..{window[1] - 1}"
               + (f", held out {heldout[0]}..{heldout[1] - 1}" if heldout else ", no held-out steps after it")
               + ("" if cluster is None else " · " + describe_cluster(cluster, groups)))

    names = solver_names(available_only=True)
    chosen = st.multiselect("Solvers", names, default=[n for n in DEFAULT_SOLVERS if n in names], key=f"{PAGE}:solvers")
    runs: list[tuple[str, str, dict]] = []
    try:
        cols = st.columns(max(1, min(4, len(chosen))))
        for k, name in enumerate(chosen):
            with cols[k % len(cols)].expander(f"{name} options", expanded=False):
                runs.append((name, name, solver_options(PAGE, name)))
    except EPLBError as exc:
        show_error(exc)
        return
    c1, c2, _ = st.columns([1, 1, 4])
    run = c1.button("Run comparison", type="primary", key=f"{PAGE}:run", width="stretch")
    c2.button("Stop", key=f"{PAGE}:stop", width="stretch",
              help="stops after the solver that is running (each respects its time limit)")
    if cluster_error is not None:
        show_error(cluster_error)
        return
    try:
        weights = loads.window(*window)
        problem = Problem(weights, cluster=cluster, num_groups=groups)
        held = problem.with_weights(loads.window(*heldout)) if heldout else None
    except EPLBError as exc:
        show_error(exc)
        return
    if not runs:
        st.info("Pick at least one solver.")
        return
    request = (cache.loads_mod.content_hash(weights), window, heldout, cluster, groups, tuple(
        (n, cache.options_key(o)) for _, n, o in runs))
    done = st.session_state.setdefault(f"{PAGE}:done", {})
    if run:
        done[request] = _solve_all(runs, problem, held)
    if request not in done:
        st.info("Press **Run comparison** to solve with every chosen solver "
                f"({sum(get_solver(n).kind == 'exact' for _, n, _ in runs)} exact).")
        return
    _show(done[request], problem, heldout is not None)


def _solve_all(runs, problem, held) -> dict:
    """Solve with each solver in turn (cached), with a status box per solver."""
    rows, outcomes, held_scores = [], {}, {}
    progress = st.progress(0.0, text="Solving...")
    for k, (label, name, options) in enumerate(runs):
        limit = options.get("time_limit", get_solver(name).defaults().get("time_limit"))
        with st.status(f"{label}: solving" + (f" (time limit {limit:g} s)" if limit else ""), expanded=False) as box:
            try:
                outcome = cache.solve(problem, name, options)
            except Exception as exc:  # noqa: BLE001  shown in its status box, the others still run
                box.update(label=f"{label}: {exc}", state="error")
                rows.append({"solver": label, "termination": "error", "status": "none", "message": str(exc)})
                show_error(exc)
                continue
            r = outcome.result
            h = cache.held_out_score(held, r.plan) if held is not None and r.plan is not None else None
            rows.append({**compare_row(label, outcome, h), "options": options_text(options)})
            outcomes[label], held_scores[label] = outcome, h
            state = "complete" if r.plan is not None else "error"
            box.update(label=f"{label}: {r.termination}, {r.status} in {r.wall_time:.3g} s"
                             + (f", imbalance {r.score.imbalance_mean:.4f}" if r.score else ""), state=state)
        progress.progress((k + 1) / len(runs), text=f"{k + 1} of {len(runs)} solvers done")
    progress.empty()
    return {"table": pd.DataFrame(rows), "outcomes": outcomes, "held": held_scores}


def _show(done: dict, problem, has_held: bool) -> None:
    table: pd.DataFrame = done["table"]
    outcomes, held = done["outcomes"], done["held"]
    st.subheader("Results")
    pct = {c: st.column_config.NumberColumn(format="percent") for c in table.columns if "gap" in c or "share" in c}
    st.dataframe(table, hide_index=True, width="stretch",
                 column_config={**pct, "wall_time_s": st.column_config.NumberColumn("time (s)", format="%.4g")})
    st.download_button("Download table (CSV)", table.to_csv(index=False).encode(), "compare.csv", "text/csv",
                       key=f"{PAGE}:csv", on_click="ignore")
    ok = table[table["solver"].isin(list(outcomes))]
    if ok.empty:
        return
    best, reason = pick(ok.to_dict("records"))
    if best is not None:
        st.success(f"**{best['solver']}**: {reason}")
    c1, c2 = st.columns(2)
    c1.markdown("**Gap to the lower bound**")
    c1.plotly_chart(figures.gap_figure(ok), width="stretch", key=f"{PAGE}:chart:gap")
    c2.markdown("**Runtime**")
    c2.plotly_chart(figures.runtime_figure(ok), width="stretch", key=f"{PAGE}:chart:time")
    traffic_view.compare_section(problem, {n: o.result.plan for n, o in outcomes.items()
                                           if o.result.plan is not None}, PAGE)
    _per_layer(outcomes, held, problem, has_held)


@st.fragment
def _per_layer(outcomes, held, problem, has_held: bool) -> None:
    """Per-layer and per-GPU charts; their settings rerun only this fragment."""
    which = "held out" if has_held and st.toggle("Per-layer imbalance on the held-out steps", key=f"{PAGE}:held_toggle") \
        else "in sample"
    series = {n: (held[n].score.imbalance if which == "held out" else o.result.score.imbalance)
              for n, o in outcomes.items() if o.result.score is not None}
    st.markdown(f"**Per-layer imbalance ({which})**")
    st.plotly_chart(figures.layer_imbalance_figure(series), width="stretch", key=f"{PAGE}:chart:layers")
    L = problem.num_layers
    first = next(iter(outcomes.values())).result.score
    worst = int(torch.argmax(first.imbalance)) if first is not None else 0
    layer = st.slider("Layer for the per-GPU loads", 0, L - 1, worst, key=f"{PAGE}:layer:{L}",
                      help=f"starts at the worst layer of the first solver ({worst})")
    loads = {n: o.result.score.gpu_load[layer] for n, o in outcomes.items() if o.result.score is not None}
    st.markdown(f"**Per-GPU load, layer {layer} (in sample)**")
    st.plotly_chart(figures.gpu_loads_side_by_side(loads, problem.num_nodes), width="stretch",
                    key=f"{PAGE}:chart:gpus")

main()
