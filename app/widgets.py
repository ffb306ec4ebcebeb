"""Sidebar widgets shared by the pages: loads, planning window, cluster, solver options.

The loads and the cluster are shared by every page (keys ``loads:...`` and
``cluster:...``): what is picked on one page is what the next page opens on. The planning
window, the solver and its options belong to a page (keys prefixed by the page). Streamlit
forgets a widget's value when a run does not draw it (another page, another solver's
options), so every widget here is seeded from the value it last had in this session
(:func:`keep`) and records it (:func:`kept`). Invalid input is shown with ``st.error`` (the
library's one-line message) and the picker returns None; the caller stops drawing what
depends on it.
"""
from __future__ import annotations

import re
from contextlib import contextmanager
from functools import lru_cache
from typing import Any, Iterator, NamedTuple, Sequence

import streamlit as st

from solvers import get_solver, solver_names
from solvers.cluster import CLUSTERS, MODELS, Cluster
from solvers.cluster_text import cluster_from_args, gpu_ids, per_gpu_values
from solvers.errors import EPLBError, OptionError
from solvers.options import Option
from solvers.workloads.catalog import dataset_names
from solvers.workloads.generators import SCENARIOS

from . import cache
from .cluster import (
    CUSTOM,
    DEFAULT_CLUSTER,
    expert_groups,
    matching_models,
    model_label,
)
from .loads import DEFAULT_DATASET, UPLOAD_SUFFIXES, Loads

SOURCES = ("Dataset", "Generate", "Upload")
LOADS = "loads"         # key prefix of the loads widgets, shared by every page
CLUSTER = "cluster"     # key prefix of the cluster widgets, shared by every page
_KEPT = "_kept"         # session_state: widget key -> the value it last had


def keep(key: str, default: Any, options: Sequence[Any] | None = None) -> str:
    """Seed widget ``key`` (before drawing it) with the value it last had in this session,
    else ``default`` (a kept value no longer in ``options`` falls back to the default).
    Streamlit drops a widget's state at the end of a run that did not draw it; this brings
    it back. The widget must then be drawn without its own default (``value``/``index``)."""
    if key not in st.session_state:
        value = st.session_state.setdefault(_KEPT, {}).get(key, default)
        if options is not None and value not in options:
            value = default
        st.session_state[key] = value
    return key


def restore_kept(page: str) -> None:
    """Call before a page runs: on the first run of another page, give every kept widget the
    value it last had. A widget drawn by another page is another widget to Streamlit (its id
    includes the page) even with the same key, so it would open on its default."""
    if st.session_state.get("_page") != page:
        st.session_state["_page"] = page
        for key, value in st.session_state.get(_KEPT, {}).items():
            st.session_state[key] = value


def kept(key: str, value: Any) -> Any:
    """Record a widget's value for :func:`keep`; returns it."""
    st.session_state.setdefault(_KEPT, {})[key] = value
    return value


def kept_value(key: str, default: Any = None) -> Any:
    """The value widget ``key`` had when last drawn in this session (``default`` if never)."""
    if key in st.session_state:
        return st.session_state[key]
    return st.session_state.get(_KEPT, {}).get(key, default)
UPLOAD_FORMATS = ("auto", "sglang", "vllm", "megatron", "csv", "npz", "pt", "json")


# What the library's parameter names are called in the sidebar (errors name the field the
# user can change; the library's name follows in brackets).
FIELD_LABELS = {
    "num_replicas": "Slots (GPUs x slots per GPU)",
    "num_gpus": "GPUs (all nodes)",
    "num_nodes": "Nodes",
    "num_groups": "Expert groups",
    "loads": "Loads file",
    "window": "Steps to plan on",
}


_BODY_WORDS = {"num_replicas": "slots", "num_gpus": "GPUs", "num_nodes": "nodes", "num_groups": "expert groups"}


def error_text(exc: BaseException) -> str:
    """One line for the user: the library's message (it starts with the parameter's name),
    with the parameter named by its sidebar field when it has one."""
    if not isinstance(exc, ValueError):
        return f"{type(exc).__name__}: {exc}"
    text = str(exc)
    param = getattr(exc, "param", None)
    if param in FIELD_LABELS and text.startswith(f"{param}: "):
        body = text[len(param) + 2:]
        for name, word in _BODY_WORDS.items():          # "a multiple of num_nodes (3)": of nodes (3)
            body = re.sub(rf"\b{name}\b", word, body)
        text = f"{FIELD_LABELS[param]}: {body} ({param})"
    return text


def show_error(exc: BaseException) -> None:
    st.error(error_text(exc), icon=":material/error:")


@contextmanager
def end_run_on_error() -> Iterator[None]:
    """A library error raised inside is shown (:func:`show_error`) and ends the page's run
    (``st.stop``): what follows needs the value that failed."""
    try:
        yield
    except EPLBError as exc:
        show_error(exc)
        st.stop()


# ---------------------------------------------------------------------------------------
# Loads

def loads_picker(page: str, default_dataset: str = DEFAULT_DATASET, main: Any = None) -> Loads | None:
    """Loads from a shipped dataset, a generated trace or an upload (sidebar), shared by
    every page. ``main``: a container in the page's main area where a missing upload or a
    bad file is explained too (not only in the sidebar)."""

    st.subheader("Loads")
    source = kept(f"{LOADS}:source", st.radio("Source", SOURCES, horizontal=True,
                                                key=keep(f"{LOADS}:source", SOURCES[0], SOURCES)))
    try:
        if source == "Dataset":
            names = list(dataset_names())
            if not names:
                raise OptionError("dataset", "no shipped datasets found (datasets/catalog.json)")
            default = default_dataset if default_dataset in names else names[0]
            name = kept(f"{LOADS}:dataset", st.selectbox("Dataset", names, key=keep(f"{LOADS}:dataset", default, names),
                                                         help="the shipped catalog (`eplb datasets`)"))
            return cache.dataset(name)
        if source == "Generate":
            models = list(MODELS)
            model = kept(f"{LOADS}:gen_model", st.selectbox("Model", models, format_func=model_label,
                                                            key=keep(f"{LOADS}:gen_model", models[0], models)))
            scenarios = list(SCENARIOS)
            key = keep(f"{LOADS}:gen_scenario", "skewed", scenarios)
            scenario = kept(key, st.selectbox("Scenario", scenarios, key=key,
                                              help=SCENARIOS[st.session_state[key]].description))
            st.caption(f"{scenario}: {SCENARIOS[scenario].description}")
            c1, c2 = st.columns(2)
            steps = kept(f"{LOADS}:gen_steps", c1.number_input("Steps", 1, 5000, key=keep(f"{LOADS}:gen_steps", 32)))
            seed = kept(f"{LOADS}:gen_seed", c2.number_input("Seed", 0, 2**31 - 1, key=keep(f"{LOADS}:gen_seed", 0)))
            tokens = kept(f"{LOADS}:gen_tokens", st.number_input("Tokens per step", 1, 10_000_000, step=1024,
                                                                 key=keep(f"{LOADS}:gen_tokens", 16384)))
            return cache.generated(model, scenario, int(steps), int(seed), int(tokens))
        upload = st.file_uploader("Loads file", type=list(UPLOAD_SUFFIXES), key=f"{page}:upload",
                                  help="SGLang .pt dump, vLLM JSON history, Megatron .npz, CSV, .npz, .pt or "
                                       "JSON; [layers, experts] or [steps, layers, experts]")
        fmt = kept(f"{LOADS}:upload_format", st.selectbox("Format", UPLOAD_FORMATS, help="auto: from the suffix and "
                                                          "content", key=keep(f"{LOADS}:upload_format", "auto",
                                                                              UPLOAD_FORMATS)))
        # An uploader cannot be seeded: the last upload of this session (any page) is kept
        # as bytes and used until another file is uploaded.
        if upload is not None:
            kept(f"{LOADS}:upload_file", (upload.name, upload.getvalue()))
        last = kept_value(f"{LOADS}:upload_file")
        if last is None:
            _both(main, "info", "Upload a loads file to plan on it (sidebar, **Loads file**).")
            return None
        if upload is None:
            st.caption(f"Using {last[0]}, uploaded earlier in this session.")
        loads = cache.upload(last[0], last[1], None if fmt == "auto" else fmt)
        if loads.dense_layers:
            st.caption(f"{loads.dense_layers} leading all-zero (dense) layer(s) dropped.")
        return loads
    except EPLBError as exc:
        _both(main, "error", error_text(exc), icon=":material/error:")
        return None


def _both(main: Any, kind: str, text: str, **kw: Any) -> None:
    """``st.<kind>(text)`` in the sidebar and, when the page gave one, in its main area too."""
    for where in (st, main) if main is not None else (st,):
        getattr(where, kind)(text, **kw)


def describe_cluster(cluster: Cluster, groups: int) -> str:
    return f"{cluster.describe()}, {groups} expert group(s)"


def describe_loads(loads: Loads) -> str:
    model = f"{model_label(loads.model)}, " if loads.model else ""
    return (f"{loads.name}: {model}{loads.num_steps} step(s) x {loads.num_layers} MoE layers x "
            f"{loads.num_experts} experts")


def window_picker(page: str, loads: Loads, label: str = "Steps to plan on",
                  default: tuple[int, int] | None = None) -> tuple[int, int]:
    """(start, stop) of the planning window: steps start..stop-1 (the slider shows the first
    and the last step, both included); the whole trace when it has one step."""
    T = loads.num_steps
    if T == 1:
        st.caption("One step of loads: the plan uses all of it.")
        return 0, 1
    lo, hi = default or (0, T)
    key = keep(f"{page}:window:{loads.name}:{T}", (lo, hi - 1))
    first, last = kept(key, st.slider(label, 0, T - 1, key=key,
                                      help="steps first..last (both included) are summed into the loads the "
                                           "solver sees"))
    return int(first), int(last) + 1


# ---------------------------------------------------------------------------------------
# Cluster

SHAPE = ("nodes", "gpus", "slots")      # the cluster widgets a preset fills


def _preset_shape(num_experts: int) -> tuple[int, int, int] | None:
    """(nodes, GPUs, slots per GPU) of the cluster preset picked (None: Custom)."""
    preset = CLUSTERS.get(st.session_state[f"{CLUSTER}:cluster"])
    return None if preset is None else (preset.nodes, preset.gpus, preset.replicas(num_experts) // preset.gpus)


def _fill_cluster(num_experts: int) -> None:
    """Callback: a cluster preset fills nodes, GPUs and slots per GPU."""
    shape = _preset_shape(num_experts)
    if shape is None:
        return
    st.session_state.update({f"{CLUSTER}:{k}": v for k, v in zip(SHAPE, shape)})
    # a mixed pool's speeds go to the real-cluster panel; a homogeneous preset clears it
    speeds = CLUSTERS[st.session_state[f"{CLUSTER}:cluster"]].node_speeds
    st.session_state[f"{CLUSTER}:node_speeds"] = ",".join(f"{x:g}" for x in speeds)
    st.session_state[f"{CLUSTER}:gpu_slots"] = st.session_state[f"{CLUSTER}:failed"] = ""


def _to_custom(num_experts: int) -> None:
    """Callback: nodes, GPUs or slots edited away from the preset's shape: the preset no
    longer describes the cluster, so it becomes Custom."""
    shape = _preset_shape(num_experts)
    if shape is not None and tuple(st.session_state[f"{CLUSTER}:{k}"] for k in SHAPE) != shape:
        st.session_state[f"{CLUSTER}:cluster"] = CUSTOM


def _fill_groups() -> None:
    """Callback: a model preset fills the expert groups."""
    preset = MODELS.get(st.session_state[f"{CLUSTER}:model"])
    if preset is not None:
        st.session_state[f"{CLUSTER}:groups"] = preset.num_groups


def preset_label(key: str) -> str:
    """A cluster preset as the sidebar shows it: short enough for the sidebar's width."""
    if key not in CLUSTERS:
        return key
    p = CLUSTERS[key]
    if ": " in p.label:
        return f"{p.label.split(': ')[0]} ({p.nodes} x {p.gpus // p.nodes} GPUs)"
    nodes = "1 node" if p.nodes == 1 else f"{p.nodes} nodes"
    return f"{nodes} x {p.gpus // p.nodes} GPUs" + ("" if p.spare_per_gpu else ", no spare")


def policy_note(cluster: Cluster, num_experts: int, groups: int) -> str:
    """What the auto policy does on this shape, and why (a hierarchical plan keeps whole
    expert groups on one node; it needs the groups to split evenly)."""
    if groups == 1:
        return "1 expert group: every policy places experts over all GPUs (global)."
    N = cluster.num_nodes
    if groups % N != 0:
        return (f"auto policy: global, because {groups} expert groups do not split evenly over {N} nodes "
                "(hierarchical needs groups divisible by nodes).")
    if num_experts % groups != 0:
        return (f"{groups} groups do not divide {num_experts} experts: no hierarchical plan is possible; "
                "choose the global policy.")
    return (f"auto policy: hierarchical, whole groups of {num_experts // groups} experts on each node. Global "
            "balances better and sends more tokens across nodes.")


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
    """The sidebar's cluster widgets (see :class:`ClusterPick`), shared by every page."""
    E = loads.num_experts
    st.subheader("Cluster")
    models = matching_models(E)
    options = models + ["(none)"]
    # A file's own model, else none: an upload of 64 experts is not an OLMoE trace because
    # OLMoE has 64 experts (the presets matching the expert count are offered).
    default_model = loads.model if loads.model in models else "(none)"
    new_loads = st.session_state.get(f"{CLUSTER}:_loads") != loads.name
    if new_loads:                                                          # other loads: their own model
        st.session_state[f"{CLUSTER}:_loads"] = loads.name
        st.session_state[f"{CLUSTER}:model"] = default_model
    model = kept(f"{CLUSTER}:model", st.selectbox(
        "Model preset", options, key=keep(f"{CLUSTER}:model", default_model, options),
        format_func=lambda k: "(none)" if k == "(none)" else model_label(k), on_change=_fill_groups,
        help=f"presets with {E} experts; fills the expert groups, the expert size and the dense layers of exports"))
    if model == "(none)" and models:
        st.caption(f"{E} experts match {', '.join(model_label(m) for m in models)}: pick it if these are its loads.")
    names = list(CLUSTERS) + [CUSTOM]
    preset_key = keep(f"{CLUSTER}:cluster", default_cluster, names)
    st.selectbox("Cluster preset", names, key=preset_key, format_func=preset_label, on_change=_fill_cluster,
                 args=(E,), help="fills nodes, GPUs and slots (every expert plus one spare slot per GPU); "
                                 "editing them makes the cluster Custom")
    kept(preset_key, st.session_state[preset_key])
    keys = [f"{CLUSTER}:{k}" for k in ("nodes", "gpus", "slots", "groups")]
    for k in keys:
        keep(k, None)
    # First render or another expert count: fill from the presets; other loads: their groups.
    if st.session_state.get(f"{CLUSTER}:_experts") != E or any(st.session_state[k] is None for k in keys):
        st.session_state[f"{CLUSTER}:_experts"] = E
        if st.session_state[preset_key] == CUSTOM:
            st.session_state[preset_key] = default_cluster
        _fill_cluster(E)
        new_loads = True
    if new_loads:
        st.session_state[f"{CLUSTER}:groups"] = expert_groups(loads.num_groups, model)
    c1, c2 = st.columns(2)
    nodes = c1.number_input("Nodes", 1, 4096, key=keys[0], on_change=_to_custom, args=(E,))
    gpus = c2.number_input("GPUs (all nodes)", 1, 65536, key=keys[1], on_change=_to_custom, args=(E,))
    slots = c1.number_input("Slots per GPU", 1, 4096, key=keys[2], on_change=_to_custom, args=(E,),
                            help=f"physical expert slots per GPU; all slots = GPUs x this (>= {E} experts)")
    groups = c2.number_input("Expert groups", 1, E, key=keys[3],
                             help="groups of consecutive experts (group-limited routing); the hierarchical "
                                  "policy keeps whole groups on one node")
    for k, v in zip(keys, (nodes, gpus, slots, groups)):
        kept(k, v)
    st.caption(f"{int(gpus) * int(slots)} slots for {E} experts "
               f"({int(gpus) * int(slots) - E} redundant)")
    model = model if model in MODELS else None
    try:
        real = real_cluster_panel(page, int(nodes), int(gpus))
        cluster = cluster_from_args(E, nodes=int(nodes), gpus=int(gpus),
                                    replicas=None if real["gpu_slots"] else int(gpus) * int(slots), **real).cluster
    except EPLBError as exc:
        return ClusterPick(None, int(groups), model, exc)
    st.caption(policy_note(cluster, E, int(groups)))
    return ClusterPick(cluster, int(groups), model)


def real_cluster_panel(page: str, nodes: int, gpus: int) -> dict[str, Any]:
    """The real-cluster editor (an expander under the cluster): relative speed per node (or
    per GPU), uneven slot counts and failed GPUs. Returns Cluster's gpu_speed, gpu_slots and
    failed keywords (None where left at the homogeneous default); the values are checked by
    :class:`Cluster` (bad ones raise, and the page shows the error)."""
    for key in ("node_speeds", "gpu_speeds", "gpu_slots", "failed"):
        st.session_state.setdefault(f"{CLUSTER}:{key}", "")
    edited = any(st.session_state[f"{CLUSTER}:{k}"] for k in ("node_speeds", "gpu_speeds", "gpu_slots", "failed"))
    with st.expander("Real cluster: speeds, slots, failed GPUs", expanded=edited):
        node_speeds = st.text_input("Speed per node", key=f"{CLUSTER}:node_speeds", placeholder="1 (all nodes)",
                                    help=f"relative speed of each node's GPUs, {nodes} comma-separated values "
                                         "(1.4 for H200 beside H100 at 1); a GPU's time is its load / its speed")
        gpu_speeds = st.text_input("Speed per GPU (overrides)", key=f"{CLUSTER}:gpu_speeds", placeholder="",
                                   help=f"{gpus} values, VALUE*COUNT repeats (1*16,1.4*16)")
        gpu_slots = st.text_input("Slots per GPU (uneven)", key=f"{CLUSTER}:gpu_slots", placeholder="the same on every GPU",
                                  help=f"{gpus} slot counts, VALUE*COUNT repeats (10,8 alternating: "
                                       f"{','.join(['10,8'] * min(2, gpus // 2))},...); replaces 'Slots per GPU'")
        failed = st.text_input("Failed GPUs", key=f"{CLUSTER}:failed", placeholder="none",
                               help=f"comma-separated GPU ids in 0..{gpus - 1}: they hold no slot (their replicas "
                                    "are gone)")
    speed = per_gpu_values(gpu_speeds or None, "gpu_speed", files=False)
    if speed is None and node_speeds:
        per_node = per_gpu_values(node_speeds, "node_speeds", files=False)
        if len(per_node) != nodes:
            raise OptionError("node_speeds", f"must give one speed per node ({nodes}), got {len(per_node)}")
        speed = [x for x in per_node for _ in range(gpus // nodes)]
    return {"gpu_speed": speed, "gpu_slots": per_gpu_values(gpu_slots or None, "gpu_slots", files=False),
            "failed": gpu_ids(failed or None)}


# ---------------------------------------------------------------------------------------
# Solvers

def solver_select(page: str, default: str = "deepseek", names: Sequence[str] | None = None, help: str | None = None) -> str:
    names = list(names) if names is not None else solver_names(available_only=True)
    key = keep(f"{page}:solver", default if default in names else names[0], names)
    return kept(key, st.selectbox("Solver", names, key=key, format_func=lambda n: f"{n} ({get_solver(n).kind})",
                                  help=help or "registered solvers available here (`eplb solvers`)"))


@lru_cache(maxsize=1)
def _shared_options() -> frozenset[str]:
    """Option names that several solvers declare, all alike (same type, choices, default
    and range): ``policy`` above all."""
    seen: dict[str, set[tuple]] = {}
    count: dict[str, int] = {}
    for name in solver_names():
        for o in get_solver(name).schema:
            seen.setdefault(o.name, set()).add((o.type.__name__, tuple(o.choices or ()), o.default, o.minimum,
                                                o.maximum, o.nullable))
            count[o.name] = count.get(o.name, 0) + 1
    return frozenset(n for n, sigs in seen.items() if len(sigs) == 1 and count[n] > 1)


def option_key(page: str, solver: str, opt: Option, shared: bool = True) -> str:
    """A solver option's widget key. An option that means the same for every solver that
    has it (:func:`_shared_options`) has one key per page, so switching solvers keeps it (a
    policy set to global stays global); the others are the solver's own."""
    return f"{page}:opt:{opt.name}" if shared and opt.name in _shared_options() else f"{page}:{solver}:{opt.name}"


def _option_widget(opt: Option, key: str) -> Any:
    """One widget for one schema option; the library validates the value."""
    label = opt.name.replace("_", " ")
    if opt.type is bool:
        return kept(key, st.checkbox(label, key=keep(key, bool(opt.default)), help=opt.help))
    if opt.choices:                                       # str or numeric choices: a selectbox
        choices = list(opt.choices)
        return kept(key, st.selectbox(label, choices, key=keep(key, opt.default if opt.default in choices
                                                               else choices[0], choices), help=opt.help))
    if opt.type is str:
        return kept(key, st.text_input(label, key=keep(key, opt.default or ""), help=opt.help))
    integer = opt.type is int
    lo = None if opt.minimum is None else (int(opt.minimum) if integer else float(opt.minimum))
    hi = None if opt.maximum is None else (int(opt.maximum) if integer else float(opt.maximum))
    if opt.nullable:
        use = kept(key + ":set", st.checkbox(f"set {label}", key=keep(key + ":set", opt.default is not None),
                                             help=opt.help))
        if not use:
            return None
    default = opt.default if opt.default is not None else (lo if lo is not None else 0)
    value = kept(key, st.number_input(label, min_value=lo, max_value=hi, key=keep(key, int(default) if integer
                                                                                   else float(default)),
                                      step=1 if integer else (0.5 if opt.role == "time_limit" else None),
                                      format=None if integer else "%g", help=opt.help))
    return int(value) if integer else float(value)


def solver_options(page: str, solver: str, skip: Sequence[str] = (), shared: bool = True) -> dict[str, Any]:
    """Widgets built from the solver's option schema; returns the options that differ from
    their defaults (free-form ``object`` options are not widgets; ``skip``: options the page
    sets itself; ``shared``: options alike across solvers keep one widget key, see
    :func:`option_key`; False where several solvers' widgets are drawn at once). Advanced
    ones sit in an expander."""
    spec = get_solver(solver)
    shown = [o for o in spec.schema if o.type is not object and o.name not in skip]
    values: dict[str, Any] = {}
    for opt in (o for o in shown if not o.advanced):
        values[opt.name] = _option_widget(opt, option_key(page, solver, opt, shared))
    advanced = [o for o in shown if o.advanced]
    if advanced:
        with st.expander("More options"):
            for opt in advanced:
                values[opt.name] = _option_widget(opt, option_key(page, solver, opt, shared))
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
    "interference_seconds": _num("interference (s)", format="%.3g", help="async copies: serving time lost while "
                                                                          "they run (interference x makespan)"),
    "skipped_rebalances": _num("declined", format="localized", help="stall-aware trigger: rebalances whose "
                                                                    "predicted gain was below their stall"),
    "wall_seconds": _num("time (s)", format="%.2f", help="wall time of the replay, planning included"),
    "frontier": st.column_config.CheckboxColumn("frontier", help="no other setting moves less and balances better"),
}
