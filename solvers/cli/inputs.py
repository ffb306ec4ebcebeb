"""Reading what the commands are given: loads (the one reader, :func:`solvers.io.read_loads`),
plans (eplb files or engine maps, one dense-row rule) and the cluster arguments."""
from __future__ import annotations

import argparse
import csv
import io
from pathlib import Path
from typing import Any

from ..units import format_bytes
from ..errors import OptionError
from ..io import Loads, read_loads
from ..planfile import file_sha256, recorded_cluster
from ..safewrite import write_text_atomic
from ..problem import Problem
from ..workloads.exporters import read_plan_for_loads
from ..cluster import Cluster
from .args import cluster_of


def read_trace_arg(spec: str, what: str) -> tuple[Loads, Any]:
    """(loads, trace [steps, MoE layers, experts]) for commands that replay steps."""
    loads = read_loads(spec)
    if loads.matrix:
        raise OptionError("loads", f"{spec}: {what}: need [steps, layers, experts], "
                          f"got shape {tuple(loads.weights.shape)}")
    return loads, loads.trace


def loads_sha256(loads: Loads) -> str | None:
    """Checksum of the one file the loads were read from (None when several)."""
    return file_sha256(loads.path) if loads.path is not None else None


def read_any_plan(path: str, loads: Loads, param: str = "plan"):
    """(plan, shape dict or None, document) from an eplb plan file or an engine export for
    these loads (:func:`solvers.workloads.exporters.read_plan_for_loads`: an engine map keeps
    its last rows, one per MoE layer of the loads)."""
    return read_plan_for_loads(path, loads.num_layers, loads.num_experts, param)[:3]


def read_previous(args: argparse.Namespace, loads: Loads, problem: Problem):
    """(plan in force, the cluster it was made for or None) of --previous; (None, None) without it."""
    previous, previous_cluster, _, _ = previous_plan(args, loads, problem, keep_speeds=False)
    return previous, previous_cluster


def previous_plan(args: argparse.Namespace, loads: Loads, problem: Problem, keep_speeds: bool = True):
    """(plan in force or None, the cluster it was made for or None, the problem, a note or "")
    of --previous. A re-plan serves the same GPUs: the speeds recorded in the plan in force
    carry over to the problem when the command gives none (``--gpu-speed`` overrides), and
    the note says so; a re-plan never silently drops them."""
    if not args.previous:
        return None, None, problem, ""
    previous, shape, _ = read_any_plan(args.previous, loads, "previous")
    if shape and shape.get("num_gpus", problem.num_gpus) != problem.num_gpus:   # as the library refuses it
        raise OptionError("previous", f"{args.previous} is a plan for {shape['num_gpus']} GPUs, the cluster has "
                                      f"{problem.num_gpus}")
    note = ""
    recorded = (shape or {}).get("gpu_speed")
    if (keep_speeds and recorded and getattr(args, "gpu_speed", None) is None and problem.cluster.uniform_speed
            and len(recorded) == problem.num_gpus and len(set(recorded)) > 1):
        c = problem.cluster
        cluster = Cluster(c.num_nodes, c.num_gpus, gpu_speed=recorded, gpu_slots=c.gpu_slots, network=c.network)
        problem = Problem(problem.weights, cluster=cluster, num_groups=problem.num_groups)
        note = (f"GPU speeds from --previous {args.previous} ({_speeds_text(recorded)}); --gpu-speed overrides "
                "them")
    return previous, plan_cluster(shape, problem, previous), problem, note


def _speeds_text(speeds) -> str:
    """``1*16,1.4*16``: per-GPU speeds as the --gpu-speed text that gives them (runs compressed)."""
    runs: list[list] = []
    for v in speeds:
        if runs and runs[-1][0] == v:
            runs[-1][1] += 1
        else:
            runs.append([v, 1])
    return ",".join(f"{v:g}" if n == 1 else f"{v:g}*{n}" for v, n in runs)


def plan_cluster(shape: dict | None, problem: Problem, plan) -> Any:
    """The cluster a plan read from a file was made for: its recorded shape when it has one
    and its slots differ from the problem's (a plan in force before GPUs failed or came back,
    or for other slot counts: the same number of slots on other GPUs is another map too),
    else None (the problem's own cluster)."""
    if shape and {"num_nodes", "num_gpus", "num_replicas"} <= set(shape):
        recorded = recorded_cluster(shape)
        return None if recorded.gpu_slots == problem.cluster.gpu_slots else recorded
    return None


def problem_from_args(args: argparse.Namespace, loads: Loads):
    """(Problem, dense-layer rows of engine maps, expert bytes or None) from the cluster
    arguments and the loads read (:func:`solvers.cluster_text.cluster_from_args`)."""
    c = cluster_of(args, loads.num_experts, loads.num_layers, loads.dense_layers)
    return Problem(loads.weights, cluster=c.cluster, num_groups=c.num_groups), c.dense_layers, c.expert_bytes


def format_metrics(metrics: dict[str, Any]) -> str:
    """One ``key  value`` line per metric; byte counts in units (the exact count in --json)."""
    width = max(map(len, metrics))
    lines = []
    for key, value in metrics.items():
        if key.endswith("bytes") and isinstance(value, (int, float)) and not isinstance(value, bool):
            text = format_bytes(value)
        else:
            # round away float noise (1e-17 is a sum of shares that cancels to 0)
            text = f"{round(value, 12) + 0.0:.6g}" if isinstance(value, float) else str(value)
        lines.append(f"{key:<{width}}  {text}")
    return "\n".join(lines)


def dropped_note(loads: Loads) -> str:
    return f" ({loads.dense_layers} leading all-zero layers dropped)" if loads.dense_layers else ""


def write_csv(path: Path, rows: list[dict[str, Any]], fields: list[str] | None = None) -> None:
    """``rows`` as CSV, written atomically; the header is the first row's keys (``fields``
    when there is no row; neither: an empty file)."""
    buf = io.StringIO()
    fields = list(rows[0]) if rows else fields
    if fields:
        writer = csv.DictWriter(buf, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    write_text_atomic(path, buf.getvalue())


def aligned(table: list) -> str:
    """Rows of text cells as columns, each as wide as its widest cell (two spaces apart)."""
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in table)
