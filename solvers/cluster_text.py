"""Clusters from arguments, for every CLI command and the app's fields (torch-free).

:func:`cluster_from_args` is the one rule from a model preset, nodes, GPUs, slots, speeds and
failed GPUs to a :class:`solvers.cluster.Cluster`. Per-GPU lists are text: ``1,1,1.4,1.4`` or
with repeats ``1*2,1.4*2``; or the path of a file holding such numbers (separated by commas,
spaces or lines). The values themselves are checked by :class:`Cluster`, once.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

from .cluster import CLUSTERS, Cluster, dense_rows, get_model, slots_for
from .errors import OptionError


def per_gpu_values(text: str | None, param: str, files: bool = True) -> list[float] | None:
    """The numbers of a --gpu-speed / --gpu-slots argument: a comma list with optional
    ``VALUE*COUNT`` repeats, or (``files``: the CLI, never the app, which must not read
    the server's files) the path of a file holding such numbers. Raises
    :class:`OptionError` naming ``param`` on anything else (the values are checked by
    :class:`solvers.Cluster`)."""
    if text is None:
        return None
    source = text
    if files and Path(text).is_file():
        try:
            source = Path(text).read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise OptionError(param, f"{text}: cannot read ({exc})") from None
    out: list[float] = []
    for item in source.replace("\n", ",").replace(" ", ",").replace("\t", ",").split(","):
        item = item.strip()
        if not item:
            continue
        value, _, count = item.partition("*")
        try:
            number = float(value)
            times = int(count) if count else 1
        except ValueError:
            raise OptionError(param, f"expected numbers (VALUE or VALUE*COUNT), got {item!r}") from None
        if times < 0 or times > 1 << 16:
            raise OptionError(param, f"repeat count out of range in {item!r}")
        out.extend([int(number) if number.is_integer() else number] * times)
    if not out:
        raise OptionError(param, f"no numbers in {text!r}")
    return out


def gpu_ids(text: str | None, param: str = "failed") -> list[int] | None:
    """The GPU ids of --failed (comma-separated integers)."""
    if text is None:
        return None
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise OptionError(param, f"expected comma-separated GPU ids, got {text!r}") from None


class ClusterArgs(NamedTuple):
    """What cluster arguments give: the cluster, the expert groups, the bytes of one expert
    (the model's; None when unknown) and the dense-layer rows of engine maps (:func:`dense_rows`)."""

    cluster: Cluster
    num_groups: int
    expert_bytes: int | None
    dense_layers: int


def cluster_from_args(num_experts: int, *, num_layers: int | None = None, dense_dropped: int = 0,
                      model: str | None = None, groups: int | None = None, nodes: int | None = None,
                      gpus: int | None = None, replicas: int | None = None, gpu_speed: Any = None,
                      gpu_slots: Any = None, failed: Any = None, network: Any = None) -> ClusterArgs:
    """The cluster of a command's (or the app's) arguments for loads of ``num_experts``
    experts and ``num_layers`` MoE layers (``dense_dropped`` leading all-zero layers dropped).

    A model preset must match the loads (experts, at most its MoE layers, its dense layers)
    and fills the expert groups, the expert bytes, and the nodes and GPUs left unset (its
    :data:`CLUSTERS` shape); slots left unset get one spare per GPU with a model.
    gpu_speed / gpu_slots / failed: lists, already parsed by the front end (:func:`per_gpu_values`,
    :func:`gpu_ids`). Raises OptionError naming the argument, or the cluster's own errors."""
    nbytes = None
    if model is not None:
        preset = get_model(model)
        if num_experts != preset.num_experts:
            raise OptionError("model", f"{model} has {preset.num_experts} routed experts, but the loads "
                              f"have {num_experts}")
        if groups is not None and groups != preset.num_groups:
            raise OptionError("groups", f"{groups} contradicts --model {model} ({preset.num_groups} groups)")
        if num_layers is not None and num_layers > preset.num_layers:
            raise OptionError("model", f"{model} has {preset.num_layers} MoE layers, but the loads have "
                              f"{num_layers} (after {dense_dropped} leading all-zero layers)")
        if dense_dropped and dense_dropped != preset.dense_layers:
            raise OptionError("model", f"the loads start with {dense_dropped} all-zero layers; "
                              f"{model} has {preset.dense_layers} dense layers")
        groups, nbytes = preset.num_groups, preset.expert_bytes or None
        shape = CLUSTERS[preset.cluster]
        nodes, gpus = shape.nodes if nodes is None else nodes, shape.gpus if gpus is None else gpus
    if gpus is None:
        raise OptionError("gpus", "give --gpus (and --replicas, --nodes, --groups) or --model NAME")
    if replicas is None and gpu_slots is None:
        if model is None:
            raise OptionError("replicas", "give --replicas (or --model NAME for a default cluster)")
        replicas = slots_for(num_experts, gpus)                 # one spare slot per GPU
    cluster = Cluster(1 if nodes is None else nodes, gpus, replicas, gpu_speed=gpu_speed, gpu_slots=gpu_slots,
                      failed=failed, network=network)
    return ClusterArgs(cluster, 1 if groups is None else groups, nbytes,
                       dense_rows(model, num_layers, dense_dropped))
