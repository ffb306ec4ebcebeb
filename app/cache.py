"""Cached library calls: changing a chart setting never re-reads a file or re-solves.

Each function is keyed by content: a dataset name, an upload's SHA-256, or the SHA-256 of
the weights being solved (the tensors themselves ride along as unhashed ``_`` arguments).
Exceptions are not cached, so a bad input raises again and the page shows it.
"""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pandas as pd
import streamlit as st
import torch

from solvers import Cluster, Problem
from solvers.bench.analysis import derive
from solvers.bench.recommend import SHIPPED_RESULTS
from solvers.bench.store import read_results, read_results_bytes
from solvers.cluster import CLUSTERS
from solvers.dynamics import simulate as run_simulation
from solvers.routing import RoutingTrace
from solvers.io import load_dataset
from solvers.workloads.generators import generate

from . import compute, figures, worker
from . import loads as loads_mod
from .cluster import DEFAULT_CLUSTER, expert_groups
from .compute import Holdout, Outcome, run_solver, score_holdout


@st.cache_data(show_spinner="Reading the dataset...", max_entries=16)
def dataset(name: str) -> loads_mod.Loads:
    return load_dataset(name)


@st.cache_data(show_spinner="Generating the trace...", max_entries=16)
def generated(model: str, scenario: str, steps: int, seed: int, tokens_per_step: int) -> loads_mod.Loads:
    """A seeded synthetic trace (:func:`solvers.workloads.generators.generate`)."""
    loads = generate(model, scenario, steps=steps, seed=seed, tokens_per_step=tokens_per_step)
    loads.source, loads.format = f"{model} {scenario} ({steps} steps, seed {seed})", "generated"
    return loads


def upload(filename: str, data: bytes, format: str | None) -> loads_mod.Loads:
    """An uploaded loads file, parsed once per content."""
    return _upload(hashlib.sha256(data).hexdigest(), filename, format, data)


@st.cache_data(show_spinner="Reading the upload...", max_entries=8)
def _upload(sha: str, filename: str, format: str | None, _data: bytes) -> loads_mod.Loads:
    return loads_mod.from_upload(filename, _data, format)


def options_key(options: dict[str, Any]) -> tuple:
    return tuple(sorted(options.items()))


@st.cache_data(show_spinner=False, max_entries=128)
def _solve(weights_sha: str, shape: tuple, solver: str, options: tuple, extra_key: tuple, _problem: Problem,
           _extra: dict[str, Any]) -> Outcome:
    return run_solver(_problem, solver, {**dict(options), **_extra})


def _extra_key(extra: dict[str, Any]) -> tuple:
    """Free-form options (a history trace, a plan in force) keyed by their content."""
    def sha(v: Any) -> str:
        if isinstance(v, RoutingTrace):                # a routing trace: its choices and source ranks
            src = v.source_rank if v.source_rank is not None else torch.zeros(0, dtype=torch.int32)
            return loads_mod.content_hash(v.topk_ids, src)
        return loads_mod.content_hash(v if isinstance(v, torch.Tensor) else v.phy2log)
    return tuple(sorted((k, sha(v)) for k, v in extra.items()))


def solve(problem: Problem, solver: str, options: dict[str, Any], extra: dict[str, Any] | None = None) -> Outcome:
    """:func:`app.compute.run_solver`, cached by the loads' content, the cluster, the solver
    and options. ``extra``: free-form options (tensors or plans), keyed by their content."""
    extra = extra or {}
    return _solve(*_solve_key(problem, solver, options, extra), problem, extra)


@st.cache_resource(show_spinner=False, max_entries=1)
def _stoppable_store() -> dict:
    """Outcomes of the solves run in a child process (:mod:`app.worker`), shared by every
    session like st.cache_data's (which cannot hold a solve that waits with st calls)."""
    return {}


STOPPABLE_ENTRIES = 64


def solve_stoppable(problem: Problem, solver: str, options: dict[str, Any], extra: dict[str, Any] | None,
                    wait) -> Outcome:
    """:func:`solve` in a child process that Stop ends (:func:`app.worker.run_stoppable`;
    ``wait(elapsed_s, pid)`` is its progress call), cached by the same key."""
    extra = extra or {}
    key = _solve_key(problem, solver, options, extra)
    store = _stoppable_store()
    if key not in store:
        outcome = worker.run_stoppable(problem, solver, {**options, **extra}, wait)
        while len(store) >= STOPPABLE_ENTRIES:
            store.pop(next(iter(store)))
        store[key] = outcome
    return store[key]


@st.cache_resource(show_spinner=False, max_entries=128)
def _gpu_figure(key: str, title: str, num_gpus: int, num_nodes: int, _weights: torch.Tensor, _phy2log: torch.Tensor,
                _logcnt: torch.Tensor, _node_load: torch.Tensor):

    return figures.gpu_load_figure(_weights, _phy2log, _logcnt, num_gpus, num_nodes, title=title, node_load=_node_load)


def gpu_figure(problem, result, layer: int):
    """Explore's per-GPU figure of one layer (with the node panel), built once per content
    and shared by every session: the first render and a revisited layer skip plotly's
    validation. The figure is shared, so nobody may change it (st.plotly_chart copies it)."""
    sc = result.score
    parts = (problem.weights[layer], result.plan.phy2log[layer], result.plan.logcnt[layer], sc.node_load[layer])
    title = f"Layer {layer}: imbalance {float(sc.imbalance[layer]):.4f}"
    return _gpu_figure(loads_mod.content_hash(*parts), title, problem.num_gpus, problem.num_nodes, *parts)


def is_solved(problem: Problem, solver: str, options: dict[str, Any]) -> bool:
    """Whether this session already solved it (an exact solver then shows its cached plan
    without waiting for the Run button)."""
    return _solve_key(problem, solver, options) in st.session_state.setdefault("_solved", set())


def mark_solved(problem: Problem, solver: str, options: dict[str, Any]) -> None:
    st.session_state.setdefault("_solved", set()).add(_solve_key(problem, solver, options))


@st.cache_data(show_spinner=False, max_entries=128)
def _holdout(weights_sha: str, plan_sha: str, shape: tuple, steps_sha: str, _problem: Problem, _plan,
             _steps: torch.Tensor | None) -> Holdout:
    return score_holdout(_problem, _plan, _steps)


def holdout_score(problem: Problem, plan, steps: torch.Tensor | None = None) -> Holdout:
    """``plan`` scored on ``problem`` (held-out loads; ``steps`` [T, L, E] the same loads step
    by step), cached by content."""
    return _holdout(loads_mod.content_hash(problem.weights), loads_mod.content_hash(plan.phy2log),
                    _shape_key(problem), "" if steps is None else loads_mod.content_hash(steps), problem, plan, steps)


def _shape_key(problem: Problem) -> tuple:
    return (problem.cluster.id, problem.num_groups)


def _solve_key(problem: Problem, solver: str, options: dict[str, Any], extra: dict[str, Any] | None = None) -> tuple:
    """A solve's cache key: the loads' content, the cluster, the solver, its options (and
    the free-form ones' content when given)."""
    key = (loads_mod.content_hash(problem.weights), _shape_key(problem), solver, options_key(options))
    return key if extra is None else (*key, _extra_key(extra))


@st.cache_data(show_spinner="Reading benchmark results...", max_entries=4)
def results(directory: str, stamp: float) -> pd.DataFrame:
    """The benchmark results table of ``directory`` (``stamp``: its files' latest mtime, so a
    rerun of the benchmark is picked up)."""

    return _derived(read_results(directory))


def _derived(df: pd.DataFrame) -> pd.DataFrame:
    """A results table with the derived columns (gaps, proven optima) it lacks."""
    return derive(df)[0] if "gap_mean" not in df.columns or "proven_optimum" not in df.columns else df


@st.cache_data(show_spinner="Reading benchmark results...", max_entries=4)
def _results_upload(sha: str, name: str, _data: bytes) -> pd.DataFrame:
    return _derived(read_results_bytes(_data, name))


def results_upload(name: str, data: bytes) -> pd.DataFrame:
    """An uploaded ``results.parquet`` / ``results.csv``, parsed once per content."""
    return _results_upload(hashlib.sha256(data).hexdigest(), name, data)


# The app is a shared server: the Results page reads result sets from the project's own
# folders only (the shipped results and run directories under <checkout>/results), never
# from a path a visitor types.
PROJECT_RESULTS = Path(__file__).resolve().parents[1] / "results"


def result_sets() -> dict[str, str]:
    """label -> directory of every result set the Results page may read: the shipped one,
    then each directory under ``results/`` of the checkout (two levels) holding a table."""

    sets = {"shipped benchmark results": str(SHIPPED_RESULTS)}
    if PROJECT_RESULTS.is_dir():
        found = {p.parent for pattern in ("*/results.*", "*/*/results.*") for p in PROJECT_RESULTS.glob(pattern)
                 if p.name in ("results.parquet", "results.csv")}
        for d in sorted(found):
            sets[f"results/{d.relative_to(PROJECT_RESULTS).as_posix()}"] = str(d)
    return sets


def results_stamp(directory: str) -> float:
    d = Path(directory)
    return max((p.stat().st_mtime for p in d.glob("results.*")), default=0.0) if d.is_dir() else 0.0


@st.cache_data(show_spinner=False, max_entries=64)
def _simulate(trace_sha: str, shape: tuple, solver: str, setting: tuple, expert_bytes: int | None,
              solver_options: tuple, _trace: torch.Tensor, _cluster: Cluster, _groups: int):
    return run_simulation(_trace, cluster=_cluster, num_groups=_groups, solver=solver, expert_bytes=expert_bytes,
                          solver_options=dict(solver_options) or None, **dict(setting))


def simulate(trace: torch.Tensor, cluster: Cluster, groups: int, solver: str, setting: dict[str, Any],
             expert_bytes: int | None, solver_options: dict[str, Any] | None = None):
    """:func:`solvers.dynamics.simulate` of ``trace [T, L, E]``, cached by content and settings;
    ``solver_options``: the planner's (its policy)."""
    # the network is in the key: the same GPUs over slower links stall longer
    shape = (cluster.id, groups, options_key(cluster.network.as_dict()))
    return _simulate(loads_mod.content_hash(trace), shape, solver, options_key(setting), expert_bytes,
                     options_key(solver_options or {}), trace, cluster, groups)


@st.cache_data(show_spinner="Dispatching the micro-batches...", max_entries=32)
def _microbatch(plan_sha: str, tokens_sha: str, cluster_id: str, model: str, _plan, _tokens: torch.Tensor,
                _cluster) -> torch.Tensor:

    return compute.microbatch_imbalance(_plan, _tokens, _cluster, model)


def microbatch_imbalance(plan, tokens: torch.Tensor, cluster, model: str) -> torch.Tensor:
    """[B, L] per micro-batch and layer imbalance under a dispatch model on the plan's cluster
    (uneven slots and failed GPUs by its slot map), cached by content."""
    return _microbatch(loads_mod.content_hash(plan.phy2log), loads_mod.content_hash(tokens), cluster.id, model,
                       plan, tokens, cluster)


def default_explore_inputs() -> tuple[Problem, str, dict[str, Any]]:
    """(problem, solver, options) of the Explore page as it first opens: the default
    dataset's whole trace on the default cluster preset with ``deepseek`` (the sidebar's
    defaults, in app.widgets)."""
    loads = dataset(loads_mod.DEFAULT_DATASET)
    cluster = CLUSTERS[DEFAULT_CLUSTER].cluster(loads.num_experts)
    problem = Problem(loads.window(0, loads.num_steps), cluster=cluster,
                      num_groups=expert_groups(loads.num_groups, loads.model))
    return problem, "deepseek", {}

