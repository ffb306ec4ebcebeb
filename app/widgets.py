"""Sidebar widgets shared by the pages: loads, planning window, cluster, solver options.

Every widget has a key prefixed by its page, so pages keep their own settings. Invalid
input is shown with ``st.error`` (the library's one-line message) and the picker returns
None; the caller stops drawing what depends on it.
"""
from __future__ import annotations

from typing import Any, NamedTuple

import streamlit as st

from solvers import get_solver, solver_names
from solvers.errors import EPLBError
from solvers.options import Option
from solvers.cluster import CLUSTERS, MODELS, Cluster

from . import cache
from .cluster import CUSTOM, DEFAULT_CLUSTER, expert_groups, matching_models, model_label
from .loads import DEFAULT_DATASET, UPLOAD_SUFFIXES, Loads

SOURCES = ("Dataset", "Generate", "Upload")
UPLOAD_FORMATS = ("auto", "sglang", "vllm", "megatron", "csv", "npz", "pt", "json")


def show_error(exc: BaseException) -> None:
    """One line for the user: the library's message (it starts with the parameter's name)."""
    st.error(str(exc) if isinstance(exc, ValueError) else f"{type(exc).__name__}: {exc}", icon=":material/error:")


# ---------------------------------------------------------------------------------------
# Loads

def loads_picker(page: str, default_dataset: str = DEFAULT_DATASET) -> Loads | None:
    """Loads from a shipped dataset, a generated trace or an upload (sidebar)."""
    from solvers.workloads.catalog import dataset_names
    from solvers.workloads.generators import SCENARIOS

    st.subheader("Loads")
    source = st.radio("Source", SOURCES, horizontal=True, key=f"{page}:source")
    try:
        if source == "Dataset":
            names = [n for n in dataset_names()]
            if not names:
                st.error("dataset: no shipped datasets found (datasets/catalog.json)")
                return None
            index = names.index(default_dataset) if default_dataset in names else 0
            name = st.selectbox("Dataset", names, index=index, key=f"{page}:dataset",
                                help="the shipped catalog (`eplb datasets`)")
            return cache.dataset(name)
        if source == "Generate":
            models = list(MODELS)
            model = st.selectbox("Model", models, format_func=model_label, key=f"{page}:gen_model")
            scenario = st.selectbox("Scenario", list(SCENARIOS), index=list(SCENARIOS).index("skewed"),
                                    key=f"{page}:gen_scenario", help=SCENARIOS["skewed"].description)
            c1, c2 = st.columns(2)
            steps = c1.number_input("Steps", 1, 5000, 32, key=f"{page}:gen_steps")
            seed = c2.number_input("Seed", 0, 2**31 - 1, 0, key=f"{page}:gen_seed")
            tokens = st.number_input("Tokens per step", 1, 10_000_000, 16384, step=1024, key=f"{page}:gen_tokens")
            return cache.generated(model, scenario, int(steps), int(seed), int(tokens))
        upload = st.file_uploader("Loads file", type=list(UPLOAD_SUFFIXES), key=f"{page}:upload",
                                  help="SGLang .pt dump, vLLM JSON history, Megatron .npz, CSV, .npz, .pt or "
                                       "JSON; [layers, experts] or [steps, layers, experts]")
        fmt = st.selectbox("Format", UPLOAD_FORMATS, key=f"{page}:upload_format",
                           help="auto: from the suffix and content")
        if upload is None:
            st.info("Upload a loads file to plan on it.")
            return None
        loads = cache.upload(upload.name, upload.getvalue(), None if fmt == "auto" else fmt)
        if loads.dense_layers:
            st.caption(f"{loads.dense_layers} leading all-zero (dense) layer(s) dropped.")
        return loads
    except EPLBError as exc:
        show_error(exc)
        return None


def describe_cluster(cluster: Cluster, groups: int) -> str:
    return f"{cluster.describe()}, {groups} expert group(s)"


def describe_loads(loads: Loads) -> str:
    model = f"{model_label(loads.model)}, " if loads.model else ""
    return (f"{loads.name}: {model}{loads.num_steps} step(s) x {loads.num_layers} MoE layers x "
            f"{loads.num_experts} experts")


def window_picker(page: str, loads: Loads, label: str = "Steps to plan on",
                  default: tuple[int, int] | None = None) -> tuple[int, int]:
    """(start, stop) of the planning window; the whole trace when it has one step."""
    T = loads.num_steps
    if T == 1:
        st.caption("One step of loads: the plan uses all of it.")
        return 0, 1
    lo, hi = default or (0, T)
    start, stop = st.slider(label, 0, T, (lo, hi), key=f"{page}:window:{loads.name}:{T}",
                            help="steps start..stop-1 are summed into the loads the solver sees")
    if stop <= start:
        stop = start + 1 if start < T else T
        start = min(start, stop - 1)
    return int(start), int(stop)


# ---------------------------------------------------------------------------------------
# Cluster

def _fill_cluster(page: str, num_experts: int) -> None:
    """Callback: a cluster preset fills nodes, GPUs and slots per GPU."""
    preset = CLUSTERS.get(st.session_state[f"{page}:cluster"])
    if preset is None:
        return
    st.session_state[f"{page}:nodes"] = preset.nodes
    st.session_state[f"{page}:gpus"] = preset.gpus
    st.session_state[f"{page}:slots"] = preset.replicas(num_experts) // preset.gpus


def _fill_groups(page: str) -> None:
    """Callback: a model preset fills the expert groups."""
    preset = MODELS.get(st.session_state[f"{page}:model"])
    if preset is not None:
        st.session_state[f"{page}:groups"] = preset.num_groups


class ClusterPick(NamedTuple):
    """What the sidebar's cluster widgets say: the cluster (None when its shape is
    impossible, ``error`` then says why: the page shows it where its results would be),
    the expert groups (checked against the loads when the problem is built) and the model
    preset key or None."""

    cluster: Cluster | None
    groups: int
    model: str | None
    error: EPLBError | None = None


def cluster_picker(page: str, loads: Loads, default_cluster: str = DEFAULT_CLUSTER) -> ClusterPick:
    """The sidebar's cluster widgets (see :class:`ClusterPick`)."""
    E = loads.num_experts
    st.subheader("Cluster")
    models = matching_models(E)
    options = models + ["(none)"]
    default_model = loads.model if loads.model in models else (models[0] if models else "(none)")
    model = st.selectbox("Model preset", options, index=options.index(default_model), key=f"{page}:model",
                         format_func=lambda k: "(none)" if k == "(none)" else model_label(k),
                         on_change=_fill_groups, args=(page,),
                         help=f"presets with {E} experts; fills the expert groups and the dense layers of exports")
    names = list(CLUSTERS) + [CUSTOM]
    preset_key = f"{page}:cluster"
    st.selectbox("Cluster preset", names, index=names.index(default_cluster), key=preset_key,
                 format_func=lambda k: CLUSTERS[k].label if k in CLUSTERS else k,
                 on_change=_fill_cluster, args=(page, E))
    # First render, new expert count, or widgets dropped by a run that did not draw them
    # (Streamlit forgets a widget's state then): fill from the presets.
    keys = [f"{page}:{k}" for k in ("nodes", "gpus", "slots", "groups")]
    if st.session_state.get(f"{page}:_experts") != E or any(k not in st.session_state for k in keys):
        st.session_state[f"{page}:_experts"] = E
        if st.session_state[preset_key] == CUSTOM:
            st.session_state[preset_key] = default_cluster
        _fill_cluster(page, E)
        st.session_state[f"{page}:groups"] = expert_groups(loads.num_groups, model)
    c1, c2 = st.columns(2)
    nodes = c1.number_input("Nodes", 1, 4096, key=f"{page}:nodes")
    gpus = c2.number_input("GPUs (all nodes)", 1, 65536, key=f"{page}:gpus")
    slots = c1.number_input("Slots per GPU", 1, 4096, key=f"{page}:slots",
                            help=f"physical expert slots per GPU; all slots = GPUs x this (>= {E} experts)")
    groups = c2.number_input("Expert groups", 1, E, key=f"{page}:groups",
                             help="groups of consecutive experts (group-limited routing); the hierarchical "
                                  "policy keeps whole groups on one node")
    st.caption(f"{int(gpus) * int(slots)} slots for {E} experts "
               f"({int(gpus) * int(slots) - E} redundant)")
    model = model if model in MODELS else None
    try:
        return ClusterPick(Cluster(int(nodes), int(gpus), int(gpus) * int(slots)), int(groups), model)
    except EPLBError as exc:
        return ClusterPick(None, int(groups), model, exc)


# ---------------------------------------------------------------------------------------
# Solvers

def solver_select(page: str, default: str = "deepseek") -> str:
    names = solver_names(available_only=True)
    return st.selectbox("Solver", names, index=names.index(default) if default in names else 0,
                        key=f"{page}:solver", format_func=lambda n: f"{n} ({get_solver(n).kind})",
                        help="registered solvers available here (`eplb solvers`)")


def _option_widget(opt: Option, key: str) -> Any:
    """One widget for one schema option; the library validates the value."""
    label = opt.name.replace("_", " ")
    if opt.type is bool:
        return st.checkbox(label, value=bool(opt.default), key=key, help=opt.help)
    if opt.type is str:
        if opt.choices:
            choices = list(opt.choices)
            return st.selectbox(label, choices, index=choices.index(opt.default) if opt.default in choices else 0,
                                key=key, help=opt.help)
        return st.text_input(label, value=opt.default or "", key=key, help=opt.help)
    integer = opt.type is int
    lo = None if opt.minimum is None else (int(opt.minimum) if integer else float(opt.minimum))
    hi = None if opt.maximum is None else (int(opt.maximum) if integer else float(opt.maximum))
    if opt.choices:
        return st.selectbox(label, list(opt.choices), key=key, help=opt.help)
    if opt.nullable:
        use = st.checkbox(f"set {label}", value=opt.default is not None, key=key + ":set", help=opt.help)
        if not use:
            return None
    default = opt.default if opt.default is not None else (lo if lo is not None else 0)
    value = st.number_input(label, min_value=lo, max_value=hi, value=int(default) if integer else float(default),
                            step=1 if integer else (0.5 if opt.role == "time_limit" else None),
                            format=None if integer else "%g", key=key, help=opt.help)
    return int(value) if integer else float(value)


def solver_options(page: str, solver: str) -> dict[str, Any]:
    """Widgets built from the solver's option schema; returns the options that differ from
    their defaults (free-form ``object`` options are not widgets). Advanced ones sit in an
    expander."""
    spec = get_solver(solver)
    shown = [o for o in spec.schema if o.type is not object]
    values: dict[str, Any] = {}
    for opt in (o for o in shown if not o.advanced):
        values[opt.name] = _option_widget(opt, f"{page}:{solver}:{opt.name}")
    advanced = [o for o in shown if o.advanced]
    if advanced:
        with st.expander("More options"):
            for opt in advanced:
                values[opt.name] = _option_widget(opt, f"{page}:{solver}:{opt.name}")
    return {k: v for k, v in values.items() if v != spec.option(k).default}


# What Over time's totals table shows (the CSV keeps every column under its plain name).
_num = st.column_config.NumberColumn
REPLAY_TOTALS_COLUMNS = {
    "mean_imbalance": _num("mean imbalance", format="%.4f", help="realised max / mean GPU load, mean over the "
                                                                  "scored steps and layers"),
    "p99_imbalance": _num("p99 imbalance", format="%.4f", help="99th percentile over the scored steps"),
    "worst_imbalance": _num("worst layer", format="%.4f", help="the worst layer's imbalance on the worst step"),
    "total_moves": _num("moves", format="localized", help="replicas loaded onto a GPU, over every rebalance"),
    "GB_moved": _num("GB moved", format="%.1f", help="moves x expert size"),
    "total_bytes": None,                                        # shown as GB
    "rebalances": _num("rebalances", format="localized", help="new plans after the first"),
    "tokens_lost": _num("tokens lost", format="compact", help="sum over steps and layers of (max - mean GPU load) x "
                                                                "GPUs: GPU time idle behind the busiest GPU, in tokens"),
    "steps_scored": _num("steps scored", format="localized"),
    "stall_seconds": _num("stall (s)", format="%.3g", help="seconds serving stopped for weight copies (sync), from "
                                                            "each rebalance's transfer schedule"),
    "net_efficiency": _num("net efficiency", format="%.4f", help="balanced stall-free time over serving plus stall "
                                                                  "time: the share of peak throughput served"),
    "serving_seconds": _num("serving (s)", format="%.4g", help="seconds the scored steps took under the plans in "
                                                                "force (each layer waits for its busiest GPU)"),
    "tokens_lost_stall": _num("tokens lost to stalls", format="compact", help="the load the cluster would have "
                                                                             "served during the stalls"),
    "net_throughput": _num("net throughput", format="compact", help="routed load served per second of serving "
                                                                     "plus stalls"),
    "skipped_rebalances": _num("declined", format="localized", help="stall-aware trigger: rebalances whose "
                                                                    "predicted gain was below their stall"),
    "wall_seconds": _num("time (s)", format="%.2f", help="wall time of the replay, planning included"),
    "frontier": st.column_config.CheckboxColumn("frontier", help="no other setting moves less and balances better"),
}
