"""Benchmark instances: a model preset on a cluster shape under a workload scenario.

An instance is named by a self-describing id string, so a task shipped to another
process or machine (Dask, Ray) only needs the id and a seed to rebuild its loads:

    deepseek-v3|L58|N4xP32xR288|skewed|T40W10
    model       |layers|nodes x GPUs x replicas|scenario|steps, window size

The seed is not part of the id: one instance is run with several seeds.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

import torch

from solvers.cluster import (
    MODELS,
    Cluster,
    cluster_id,
    get_cluster,
    get_model,
    shape_name,
)
from solvers.errors import OptionError
from solvers.problem import Problem
from solvers.workloads import generate, windows

# Tokens routed per generated step: a realistic micro-batch, small enough to generate fast.
TOKENS_PER_STEP = 4096


def cluster_of(model: str, shape: str) -> tuple[int, int, int]:
    """(nodes, GPUs, slots) of the named cluster ``shape`` (a key of :data:`solvers.cluster.CLUSTERS`)
    for preset ``model``'s experts."""
    preset, cluster = get_model(model), get_cluster(shape)
    return cluster.nodes, cluster.gpus, cluster.replicas(preset.num_experts)


_ID = re.compile(r"^(?P<model>[a-z0-9.\-]+)\|L(?P<layers>\d+)\|N(?P<nodes>\d+)xP(?P<gpus>\d+)xR(?P<replicas>\d+)"
                 r"\|(?P<scenario>[a-z0-9.\-]+)\|T(?P<steps>\d+)W(?P<window>\d+)(?P<rolling>R?)$")


@dataclass(frozen=True)
class Instance:
    """One benchmark instance (all it takes to rebuild its loads, given a seed).

    The solver plans on window 0 (the sum of the first ``window`` steps) and the plan is
    scored out of sample on window 1 when ``steps >= 2 * window``. ``rolling`` (id suffix
    ``R``): also the ADRS / OpenEvolve benchmark's protocol over every window (plan on window
    i, score on i+1; :mod:`solvers.bench.windows_task`).
    """

    model: str
    layers: int
    nodes: int
    gpus: int
    replicas: int
    scenario: str
    steps: int
    window: int
    rolling: bool = False

    @classmethod
    def on(cls, model: str, shape: str, scenario: str = "mild", *, layers: int | None = None,
           steps: int = 40, window: int = 10, rolling: bool = False) -> "Instance":
        """The instance of preset ``model`` on the named cluster ``shape`` (a key of
        :data:`solvers.cluster.CLUSTERS`)."""
        nodes, gpus, replicas = cluster_of(model, shape)
        if layers is not None and (isinstance(layers, bool) or not isinstance(layers, int) or layers < 1):
            raise OptionError("layers", f"must be a positive integer or None (all layers), got {layers!r}")
        return cls(model, layers or MODELS[model].num_layers, nodes, gpus, replicas, scenario, steps, window, rolling)

    @property
    def id(self) -> str:
        return (f"{self.model}|L{self.layers}|{cluster_id(self.nodes, self.gpus, self.replicas)}"
                f"|{self.scenario}|T{self.steps}W{self.window}{'R' if self.rolling else ''}")

    @classmethod
    def from_id(cls, instance_id: str) -> "Instance":
        m = _ID.match(instance_id) if isinstance(instance_id, str) else None
        if m is None:
            raise OptionError("instance", f"malformed instance id {instance_id!r} "
                              "(expected MODEL|L<layers>|N<nodes>xP<gpus>xR<replicas>|SCENARIO|T<steps>W<window>[R])")
        g = m.groupdict()
        return cls(g["model"], int(g["layers"]), int(g["nodes"]), int(g["gpus"]), int(g["replicas"]),
                   g["scenario"], int(g["steps"]), int(g["window"]), g["rolling"] == "R")

    @property
    def shape_name(self) -> str:
        """The CLUSTERS name of this cluster, or ``N<n>xP<p>`` for an ad-hoc one."""
        return shape_name(self.nodes, self.gpus)

    def params(self) -> dict:
        """Instance columns of a result row."""
        preset = MODELS[self.model]
        return {"instance": self.id, "model": self.model, "num_layers": self.layers,
                "num_experts": preset.num_experts, "num_groups": preset.num_groups,
                "num_replicas": self.replicas, "num_nodes": self.nodes, "num_gpus": self.gpus,
                "slots_per_gpu": self.replicas // self.gpus, "shape": self.shape_name,
                "scenario": self.scenario, "steps": self.steps, "window": self.window}


@dataclass(frozen=True)
class LoadedInstance:
    """problem: the sum of window 0; eval_problem: the sum of window 1 (None without one).
    plan_steps: [window, layers, experts] window 0's steps (what a planner of a history
    gets); eval_steps: window 1's steps (each scored on its own: the per-step held-out
    imbalance), or None. trace: [steps, layers, experts] every step (float64)."""

    instance: Instance
    problem: Problem
    eval_problem: Problem | None
    plan_steps: torch.Tensor
    eval_steps: torch.Tensor | None
    trace: torch.Tensor | None = None


@lru_cache(maxsize=8)
def load_instance(instance_id: str, seed: int) -> LoadedInstance:
    """Generate the instance's trace (deterministic in ``seed``) and cut its windows."""

    inst = Instance.from_id(instance_id)
    if inst.model not in MODELS:
        raise OptionError("model", f"unknown model preset {inst.model!r} in instance {instance_id!r}")
    if inst.window < 1 or inst.steps < inst.window:
        raise OptionError("instance", f"{instance_id!r}: needs 1 <= window <= steps")
    trace = generate(inst.model, inst.scenario, steps=inst.steps, seed=seed,
                     tokens_per_step=TOKENS_PER_STEP, num_layers=inst.layers)
    wins = windows(trace, inst.window)                                   # [W, layers, experts]
    groups = trace.meta.get("num_groups", MODELS[inst.model].num_groups)

    def problem(w: torch.Tensor) -> Problem:
        return Problem(w, cluster=Cluster(inst.nodes, inst.gpus, inst.replicas), num_groups=groups)

    steps = trace.loads.to(torch.float64)
    held = steps[inst.window:2 * inst.window] if wins.shape[0] >= 2 else None
    return LoadedInstance(inst, problem(wins[0]), problem(wins[1]) if wins.shape[0] >= 2 else None,
                          steps[:inst.window], held, steps)
