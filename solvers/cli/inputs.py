"""Reading what the commands are given: loads (the one reader, :func:`solvers.io.read_loads`),
plans (eplb files or engine maps, one dense-row rule) and the cluster arguments."""
from __future__ import annotations

import argparse
from typing import Any

from ..errors import OptionError
from ..io import LoadsInfo, read_loads
from ..loadfiles import LoadsSpec, resolve_spec
from ..planfile import file_sha256
from ..problem import Problem
from ..workloads.exporters import read_plan_for_loads
from ..cluster import Cluster, get_model
from .args import network_from_args, real_cluster_kwargs


def read_loads_arg(spec: str) -> tuple[LoadsInfo, LoadsSpec]:
    """The loads of a ``--loads`` argument (MoE layers; see LOADS_HELP), the spec resolved once."""
    resolved = resolve_spec(spec)
    return read_loads(resolved), resolved


def read_trace_arg(spec: str, what: str) -> tuple[LoadsInfo, Any]:
    """(LoadsInfo, trace [steps, MoE layers, experts]) for commands that replay steps."""
    info = read_loads(resolve_spec(spec))
    if info.trace is None:
        raise OptionError("loads", f"{spec}: {what}: need [steps, layers, experts], "
                          f"got shape {tuple(info.weights.shape)}")
    return info, info.trace


def loads_sha256(info: LoadsInfo) -> str | None:
    """Checksum of the one file the loads were read from (None when several)."""
    return file_sha256(info.path) if info.path is not None else None


def read_any_plan(path: str, info: LoadsInfo, param: str = "plan"):
    """(plan, shape dict or None, document) from an eplb plan file or an engine export for
    these loads (:func:`solvers.workloads.exporters.read_plan_for_loads`: an engine map keeps
    its last rows, one per MoE layer of the loads)."""
    plan, shape, doc, _ = read_plan_for_loads(path, info.num_layers, info.num_experts, param)
    return plan, shape, doc


def plan_cluster(shape: dict | None, problem: Problem, plan) -> Any:
    """The cluster a plan read from a file was made for: its recorded shape when it has one
    and it differs from the problem's slots (a plan in force before GPUs failed), else None
    (the problem's own cluster)."""
    if plan.num_replicas == problem.num_replicas:
        return None
    if shape and {"num_nodes", "num_gpus", "num_replicas"} <= set(shape):
        return Cluster(shape["num_nodes"], shape["num_gpus"], shape["num_replicas"],
                       gpu_speed=shape.get("gpu_speed"), gpu_slots=shape.get("gpu_slots"))
    return None


def problem_from_args(args: argparse.Namespace, info: LoadsInfo):
    """(Problem, dense layers for engine maps, expert bytes or None) from the cluster args
    and the loads read."""
    groups, dense, expert_bytes = args.groups, info.dense_layers, None
    if args.model is not None:
        preset = get_model(args.model)
        if info.num_experts != preset.num_experts:
            raise OptionError("model", f"{args.model} has {preset.num_experts} routed experts, but the loads "
                              f"have {info.num_experts}")
        if groups is not None and groups != preset.num_groups:
            raise OptionError("groups", f"{groups} contradicts --model {args.model} ({preset.num_groups} groups)")
        groups = preset.num_groups
        expert_bytes = preset.expert_bytes or None
        if info.num_layers > preset.num_layers:
            raise OptionError("model", f"{args.model} has {preset.num_layers} MoE layers, but the loads have "
                              f"{info.num_layers} (after {info.dense_layers} leading all-zero layers)")
        if info.dense_layers and info.dense_layers != preset.dense_layers:
            raise OptionError("model", f"the loads start with {info.dense_layers} all-zero layers; "
                              f"{args.model} has {preset.dense_layers} dense layers")
        if info.num_layers == preset.num_layers:
            dense = preset.dense_layers           # a whole model: engines count its dense layers
    cluster = Cluster(args.nodes, args.gpus, args.replicas, **real_cluster_kwargs(args), network=network_from_args(args))
    return Problem(info.weights, cluster=cluster, num_groups=1 if groups is None else groups), dense, expert_bytes


def format_metrics(metrics: dict[str, Any]) -> str:
    width = max(map(len, metrics))
    lines = []
    for key, value in metrics.items():
        # round away float noise (1e-17 is a sum of shares that cancels to 0)
        text = f"{round(value, 12) + 0.0:.6g}" if isinstance(value, float) else str(value)
        lines.append(f"{key:<{width}}  {text}")
    return "\n".join(lines)


def dropped_note(info: LoadsInfo) -> str:
    return f" ({info.dense_layers} leading all-zero layers dropped)" if info.dense_layers else ""
