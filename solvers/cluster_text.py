"""Clusters from arguments, for every CLI command and the app's fields (torch-free).

:func:`cluster_from_args` is the one rule from a model preset, nodes, GPUs, slots, speeds and
failed GPUs to a :class:`solvers.cluster.Cluster`. Per-GPU lists are text: ``1,1,1.4,1.4`` or
with repeats ``1*2,1.4*2``; or the path of a file holding such numbers (separated by commas,
spaces or lines). The values themselves are checked by :class:`Cluster`, once.
"""
from __future__ import annotations

from typing import Any, NamedTuple

from .cluster import CLUSTERS, MAX_REPLICAS, Cluster, dense_rows, get_model, slots_for
from .errors import OptionError


# A per-GPU list holds one value per GPU: never more values than a cluster may have slots
# (expansions of VALUE*COUNT are counted before any list is built), and a file of them is
# small (65,536 values of a few characters).
MAX_LIST_VALUES = MAX_REPLICAS
MAX_LIST_FILE_BYTES = 1 << 20


def _shown(text: str, limit: int = 40) -> str:
    return repr(text) if len(text) <= limit else f"{text[:limit]!r}... ({len(text)} characters)"


def per_gpu_values(text: str | None, param: str, files: bool = True) -> list[float] | None:
    """The numbers of a --gpu-speed / --gpu-slots argument: a comma list with optional
    ``VALUE*COUNT`` repeats, or (``files``: the CLI, never the app, which must not read
    the server's files) the path of a file holding such numbers. Raises
    :class:`OptionError` naming ``param`` on anything else (the values are checked by
    :class:`solvers.Cluster`).

    At most :data:`MAX_LIST_VALUES` values in all, counted before the list is built; a file
    is read through the boundary (a regular file of at most :data:`MAX_LIST_FILE_BYTES`,
    UTF-8) and a bad one is reported by line and item number, never by its text (a file
    named by mistake may hold a secret)."""
    if text is None:
        return None
    text = str(text)
    from_file = False
    if files:
        from . import filecheck                  # the CLI only (it imports torch; the app's fields do not)
        kind = filecheck.input_kind(text)
        if kind == "file":
            source = filecheck.read_text(text, param, MAX_LIST_FILE_BYTES)
            from_file = True
        elif kind in ("dir", "other"):
            raise OptionError(param, f"{_shown(text)}: is not a regular file (a directory, FIFO or device)")
        else:
            source = text                     # missing, or a name no file system allows: a list
    else:
        source = text
    out: list[float] = []
    for line_no, line in enumerate(source.splitlines() or [""], 1):
        for item_no, item in enumerate(line.replace(" ", ",").replace("\t", ",").split(","), 1):
            item = item.strip()
            if not item:
                continue
            where = f"{text if len(text) <= 80 else 'the file'}: line {line_no}, item {item_no}" if from_file \
                else _shown(item)
            value, _, count = item.partition("*")
            try:
                number = float(value)
                times = int(count) if count else 1
            except ValueError:
                raise OptionError(param, f"{where} is not a number: expected VALUE or VALUE*COUNT") from None
            if times < 0:
                raise OptionError(param, f"{where}: the repeat count must be >= 0")
            if len(out) + times > MAX_LIST_VALUES:
                raise OptionError(param, f"more than {MAX_LIST_VALUES} values in all (one per GPU; "
                                  f"{where} repeats {times} times)")
            out.extend([int(number) if number.is_integer() else number] * times)
    if not out:
        raise OptionError(param, f"no numbers in {'the file ' + _shown(text, 80) if from_file else _shown(text)}")
    return out


def gpu_ids(text: str | None, param: str = "failed") -> list[int] | None:
    """The GPU ids of --failed (comma-separated integers)."""
    if text is None:
        return None
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise OptionError(param, f"expected comma-separated GPU ids, got {_shown(text)}") from None


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
