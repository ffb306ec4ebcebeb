"""Tasks of the ``dynamics`` suite: replay a trace under a rebalancing setting, one row per run.

A dynamics task names a trace (a shipped dataset, or a generated workload of a model preset)
on a cluster, a solver, and a rebalancing setting: a period (``every``) or an imbalance
``threshold``, the planning ``window`` and a ``migration_slack`` (absent: plain
re-planning). It runs :func:`solvers.dynamics.simulate` and stores the totals: mean, p99 and
worst realised imbalance, moves, bytes, rebalances, tokens lost, wall time.

Trace ids are self-describing like benchmark instance ids, so any executor rebuilds the
trace from the id and the seed:

    dataset:olmoe-1b-7b-drifting|N1xP8xR72
    generated:qwen3-235b:drifting:L8:T96|N2xP16xR144
"""
from __future__ import annotations

import json
import platform
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import torch

from solvers.cluster import MODELS, cluster_id, shape_name
from solvers.dynamics import simulate
from solvers.errors import EPLBError, OptionError
from solvers.registry import get_solver
from solvers.workloads import generate, list_datasets, load_dataset

from .instances import TOKENS_PER_STEP, cluster_of
from .store import BAD_INPUT, SIMULATED, options_key

# Keys of a dynamics task's options that set the rebalancing (the others go to the solver).
SETTING_KEYS = ("every", "threshold", "window", "migration_slack", "migration", "migration_budget", "cooldown")

_ID = re.compile(r"^(?:dataset:(?P<dataset>[A-Za-z0-9._\-]+)"
                 r"|generated:(?P<model>[a-z0-9.\-]+):(?P<scenario>[a-z0-9.\-]+):L(?P<layers>\d+):T(?P<steps>\d+))"
                 r"\|N(?P<nodes>\d+)xP(?P<gpus>\d+)xR(?P<replicas>\d+)$")


def is_trace_id(instance_id: str) -> bool:
    return isinstance(instance_id, str) and instance_id.startswith(("dataset:", "generated:"))


@dataclass(frozen=True)
class TraceInstance:
    """A trace on a cluster. dataset: a shipped dataset's name, or None for a generated trace
    of ``model`` under ``scenario`` with ``layers`` layers and ``steps`` steps (seeded by the task)."""

    dataset: str | None
    model: str | None
    scenario: str | None
    layers: int | None
    steps: int | None
    nodes: int
    gpus: int
    replicas: int

    @classmethod
    def of_dataset(cls, name: str, model: str, shape: str) -> "TraceInstance":
        """Shipped dataset ``name`` (of preset ``model``: its expert count sizes the slots) on
        the named cluster ``shape`` (a key of solvers.cluster.CLUSTERS). The catalog is read when the trace is."""
        return cls(name, None, None, None, None, *cluster_of(model, shape))

    @classmethod
    def generated(cls, model: str, scenario: str, shape: str, *, layers: int, steps: int) -> "TraceInstance":
        """A generated ``scenario`` trace of preset ``model`` on the named cluster ``shape``."""
        return cls(None, model, scenario, int(layers), int(steps), *cluster_of(model, shape))

    @property
    def id(self) -> str:
        cluster = cluster_id(self.nodes, self.gpus, self.replicas)
        if self.dataset is not None:
            return f"dataset:{self.dataset}|{cluster}"
        return f"generated:{self.model}:{self.scenario}:L{self.layers}:T{self.steps}|{cluster}"

    @classmethod
    def from_id(cls, instance_id: str) -> "TraceInstance":
        m = _ID.match(instance_id) if isinstance(instance_id, str) else None
        if m is None:
            raise OptionError("instance", f"malformed trace id {instance_id!r} (expected dataset:NAME|N<n>xP<p>xR<r> "
                              "or generated:MODEL:SCENARIO:L<layers>:T<steps>|N<n>xP<p>xR<r>)")
        g = m.groupdict()             # a dataset's id leaves the generated trace's groups None
        return cls(g["dataset"], g["model"], g["scenario"],
                   *(None if g[k] is None else int(g[k]) for k in ("layers", "steps", "nodes", "gpus", "replicas")))


@lru_cache(maxsize=8)
def load_trace(instance_id: str, seed: int):
    """(TraceInstance, loads [T, L, E] int64, model preset name, num_groups) of a trace id."""

    inst = TraceInstance.from_id(instance_id)
    if inst.dataset is not None:
        trace = load_dataset(inst.dataset)        # shipped: the seed does not change it
    else:
        if inst.model not in MODELS:
            raise OptionError("model", f"unknown model preset {inst.model!r} in trace {instance_id!r}")
        trace = generate(inst.model, inst.scenario, steps=inst.steps, seed=seed, tokens_per_step=TOKENS_PER_STEP,
                         num_layers=inst.layers)
    model = trace.meta.get("model") or inst.model
    groups = int(trace.meta.get("num_groups") or (MODELS[model].num_groups if model in MODELS else 1))
    return inst, trace.loads, model, groups


def setting_label(options: dict[str, Any]) -> str:
    """A short name of a rebalancing setting, e.g. ``every 4, window 4, slack 0.01``."""
    o = options
    slack, method = o.get("migration_slack"), o.get("migration")
    parts = [f"{k} {o[k]:g}" for k in ("every", "threshold", "window") if o.get(k) is not None]
    parts.append("plain" if slack is None else f"slack {slack:g}"
                 + (f" ({method})" if method not in (None, "heuristic") else ""))
    return ", ".join(parts + ([f"budget {o['migration_budget']:g}"] if o.get("migration_budget") is not None else []))


def run_dynamics_task(task, threads: int = 1) -> dict[str, Any]:
    """Replay the task's trace under its setting; one row (plain numbers and strings only)."""

    if threads:
        torch.set_num_threads(threads)
    inst, loads, model, groups = load_trace(task.instance, task.seed)
    spec = get_solver(task.solver)
    T, L, E = loads.shape
    setting = {k: task.options[k] for k in SETTING_KEYS if k in task.options}
    solver_options = {k: v for k, v in task.options.items() if k not in SETTING_KEYS}
    preset = MODELS.get(model)
    expert_bytes = int(preset.expert_bytes) if preset is not None and preset.expert_bytes else None
    shape = shape_name(inst.nodes, inst.gpus)
    row: dict[str, Any] = {
        "instance": task.instance, "model": model or "", "num_layers": L, "num_experts": E, "num_groups": groups,
        "num_replicas": inst.replicas, "num_nodes": inst.nodes, "num_gpus": inst.gpus,
        "slots_per_gpu": inst.replicas // inst.gpus, "shape": shape,
        "scenario": inst.scenario or _dataset_scenario(inst.dataset), "steps": T,
        "window": int(setting.get("window") or setting.get("every") or 16), "seed": int(task.seed),
        "solver": task.solver, "kind": spec.kind, "options": options_key(task.options),
        "policy": str(solver_options.get("policy", "")), "threads": threads, "host": platform.node(),
        "trace": inst.dataset or "generated", "setting": setting_label(setting),
        "every": setting.get("every"), "threshold": setting.get("threshold"),
        "migration_slack": setting.get("migration_slack"),
        "migration": setting.get("migration", "heuristic") if setting.get("migration_slack") is not None else "",
        "migration_budget": setting.get("migration_budget"),
        "expert_bytes": expert_bytes,
    }
    try:
        res = simulate(loads, num_replicas=inst.replicas, num_groups=groups, num_nodes=inst.nodes,
                       num_gpus=inst.gpus, solver=task.solver, expert_bytes=expert_bytes,
                       solver_options=solver_options or None, **setting)
    except OptionError:
        raise  # a mistake in the suite: stop the run
    except EPLBError as exc:
        return {**row, "termination": BAD_INPUT, "status": "", "message": str(exc)}
    tot = res.totals()
    row.update(termination=SIMULATED, status="", message="", wall_time_s=res.wall_seconds, window=res.settings["window"],
               realised_imbalance_mean=tot["mean_imbalance"], realised_imbalance_p99=tot["p99_imbalance"],
               realised_imbalance_worst=tot["worst_imbalance"], total_moves=tot["total_moves"],
               total_bytes=tot["total_bytes"], rebalances=tot["rebalances"], tokens_lost=tot["tokens_lost"],
               steps_scored=tot["steps_scored"])
    return row


def _dataset_scenario(name: str | None) -> str:
    entry = next((e for e in list_datasets() if e["name"] == name), {})
    return str(entry.get("scenario") or "")


def dynamics_options(every: int | None = None, *, threshold: float | None = None, window: int | None = None,
                     slack: float | None = None, migration: str | None = None,
                     budget: float | None = None) -> dict[str, Any]:
    """A task's options for one rebalancing setting (only the keys that are set, so keys stay short)."""
    return json.loads(json.dumps({k: v for k, v in (("every", every), ("threshold", threshold), ("window", window),
                                                     ("migration_slack", slack), ("migration", migration),
                                                     ("migration_budget", budget)) if v is not None}))
