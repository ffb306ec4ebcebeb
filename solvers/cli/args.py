"""What the ``eplb`` commands share: the one-line error parser, the ``--loads`` spec, the
cluster arguments, ``-O KEY=VALUE`` options, ``--out`` and ``--json``.

Plain Python (argparse and the torch-free model presets): building the parser imports no torch.
"""
from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import Any

from .. import safejson                    # json with a depth limit (numpy, no torch)
from ..errors import OptionError
from ..cluster import MODELS, POLICIES  # noqa: F401  (POLICIES: the --policy choices, defined once there)
from ..cluster_text import ClusterArgs, cluster_from_args, gpu_ids, per_gpu_values
from ..options import check_expert_bytes
from ..network import DEFAULT_INTER_NODE_BW, DEFAULT_INTRA_NODE_BW, Network

EXIT_USAGE = 2
# An internal error (a bug, not the user's input): what an uncaught exception exits with too.
EXIT_BUG = 1
# The argv of the running main(), recorded in plan provenance.
ARGV: list[str] = []


class Parser(argparse.ArgumentParser):
    """argparse whose errors are one readable line (no usage dump), exit status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        # "eplb: error: argument --model: ... (eplb plan --help)": the command once, at the end
        raise SystemExit(fail(f"{message} ({self.prog} --help)"))


def fail(message: str) -> int:
    print(f"eplb: error: {message}", file=sys.stderr)
    return EXIT_USAGE


def command_line() -> str:
    return "eplb " + " ".join(shlex.quote(a) for a in ARGV)


# Exceptions nobody raised on purpose --------------------------------------------------------

# The readers of user input (module, function) -> (the input's parameter, the argument holding
# the file or text, or the argument naming the parameter). An exception of any class raised
# inside one of them (deep JSON, binary text, numbers beyond int64, a file too big for memory)
# is the input's fault: one line naming the input, exit 2.
READERS: dict[tuple[str, str], tuple[str, str, str | None]] = {
    ("solvers.io", "read_loads"): ("loads", "source", None),
    ("solvers.io", "load_dataset"): ("loads", "name", None),
    ("solvers.routing.importers", "read_routing"): ("routing", "spec", None),
    ("solvers.workloads.exporters", "read_plan_for_loads"): ("plan", "path", "param"),
    ("solvers.workloads.exporters", "read_exported_plan"): ("plan", "path", None),
    ("solvers.planfile", "read_plan"): ("plan", "source", None),
    ("solvers.cluster_text", "per_gpu_values"): ("gpu_speed", "text", "param"),
    ("solvers.cluster_text", "gpu_ids"): ("failed", "text", "param"),
    ("solvers.bench.store", "read_results"): ("results", "directory", None),
}
ISSUES = "the project's issue tracker"


def debug_flag(argv: list[str]) -> bool:
    """``--debug`` among the global options (before the command)."""
    for arg in argv:
        if arg == "--debug":
            return True
        if not arg.startswith("-"):
            return False
    return False


def _one_line(text: str, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _reading(exc: BaseException) -> tuple[str, Any] | None:
    """(parameter, file or text) of the outermost reader of user input the exception passed
    through, or None when it was raised elsewhere."""
    tb = exc.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        entry = READERS.get((tb.tb_frame.f_globals.get("__name__", ""), code.co_name))
        if entry is not None:
            param, source, param_arg = entry
            local = tb.tb_frame.f_locals
            if param_arg and isinstance(local.get(param_arg), str):
                param = local[param_arg]
            return param, local.get(source)
        tb = tb.tb_next
    return None


def _why(exc: BaseException) -> str:
    if isinstance(exc, RecursionError):
        return "nested too deeply to read"
    if isinstance(exc, UnicodeDecodeError):
        return f"not UTF-8 text (byte {exc.object[exc.start:exc.start + 1]!r} at offset {exc.start})"
    if isinstance(exc, MemoryError):
        return "too large for this machine's memory"
    if isinstance(exc, OverflowError):
        return f"holds a number out of range ({_one_line(exc, 120)})"
    return f"cannot be read ({type(exc).__name__}: {_one_line(exc, 200)})"


def _traceback(exc: BaseException, debug: bool) -> None:
    if debug:
        import traceback
        traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)


def report_bug(exc: BaseException, debug: bool, text: str | None = None) -> int:
    """One line: an internal error, what it was and where to report it; exit :data:`EXIT_BUG`."""
    _traceback(exc, debug)
    where = ""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is not None and text is None:
        where = f" at {Path(tb.tb_frame.f_code.co_filename).name}:{tb.tb_lineno}"
    text = _one_line(text if text is not None else f"{type(exc).__name__}: {exc}")
    print(f"eplb: internal error: {text}{where} (a bug, not your input: please report it with the command line "
          f"on {ISSUES}{'' if debug else '; eplb --debug ... prints the traceback'})", file=sys.stderr)
    return EXIT_BUG


def unexpected(exc: Exception, debug: bool) -> int:
    """An exception no check turned into an :class:`~solvers.errors.EPLBError`: the input's
    fault when a reader of user input raised it (one line naming the input, exit 2), out of
    memory elsewhere (exit 2), else a bug (:func:`report_bug`)."""
    reading = _reading(exc)
    if reading is not None:
        _traceback(exc, debug)
        param, source = reading
        name = source if isinstance(source, (str, Path)) else "the input" if source is None else \
            f"<{type(source).__name__}>"
        return fail(f"{param}: {_one_line(name, 200)}: {_why(exc)}")
    if isinstance(exc, MemoryError):
        _traceback(exc, debug)
        return fail(f"out of memory in {_one_line(command_line(), 120)}: the inputs are too large for this "
                    "machine (if they are small, it is a bug: please report it with the command line)")
    return report_bug(exc, debug)


# --loads ---------------------------------------------------------------------------------

LOADS_HELP = ("loads: a file (.npz, .pt, .json, .csv, SGLang/vLLM/Megatron dumps), a directory or "
              "glob of per-rank dumps, a shipped dataset NAME (`eplb datasets`), optionally "
              "FORMAT:SPEC, and SPEC@A:B for steps A..B-1; leading all-zero (dense) layers are dropped")


def add_loads(p: argparse.ArgumentParser, extra: str = "") -> None:
    p.add_argument("--loads", required=True, help=LOADS_HELP + extra)


# Cluster arguments -------------------------------------------------------------------------

def add_cluster_args(p: argparse.ArgumentParser, required: bool = True) -> None:
    """--model, --replicas, --groups, --nodes, --gpus and the real-cluster arguments. plan and
    compare (``required``) need --gpus and default to one node; simulate and sweep take the
    sizes they are not given from --model's cluster preset. --replicas may be left out when
    --gpu-slots gives the slots."""
    p.add_argument("--model", default=None, choices=sorted(MODELS), metavar="NAME",
                   help=f"model preset ({', '.join(sorted(MODELS))}): fills experts, groups and dense layers"
                   + ("" if required else ", its expert size and a default cluster"))
    p.add_argument("--replicas", type=int, default=None, help="physical expert slots R (optional with --gpu-slots)")
    p.add_argument("--groups", type=int, default=None, help="expert groups G (default: the model's, else 1)")
    p.add_argument("--nodes", type=int, default=1 if required else None,
                   help="nodes N" + (" (default 1)" if required else ""))
    p.add_argument("--gpus", type=int, required=required, help="GPUs P")
    add_real_cluster_args(p)


PER_GPU_HELP = ("one value per GPU: a comma list (VALUE*COUNT repeats: 1*16,1.4*16) or a file of numbers "
                "separated by commas, spaces or lines")


def add_real_cluster_args(p: argparse.ArgumentParser) -> None:
    """--gpu-speed, --gpu-slots, --failed (docs/problem.md, "Real clusters")."""
    p.add_argument("--gpu-speed", default=None, metavar="LIST",
                   help="relative speed of every GPU (in [1e-6, 1e6], the fastest at most 1e6 x the slowest; "
                        "time = load / speed): " + PER_GPU_HELP)
    p.add_argument("--gpu-slots", default=None, metavar="LIST",
                   help="expert slots of every GPU (>= 0; default R/P each; they sum to R): " + PER_GPU_HELP)
    p.add_argument("--failed", default=None, metavar="IDS",
                   help="failed GPUs, comma-separated ids (e.g. 3,17): they hold no slot")


def real_cluster_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """gpu_speed, gpu_slots and failed of the parsed arguments, for Problem/Cluster."""
    return {"gpu_speed": per_gpu_values(getattr(args, "gpu_speed", None), "gpu_speed"),
            "gpu_slots": per_gpu_values(getattr(args, "gpu_slots", None), "gpu_slots"),
            "failed": gpu_ids(getattr(args, "failed", None))}


def cluster_of(args: argparse.Namespace, num_experts: int, num_layers: int | None = None,
               dense_dropped: int = 0) -> ClusterArgs:
    """The cluster of a command's --model, --groups, --nodes, --gpus, --replicas and
    real-cluster and network flags (:func:`solvers.cluster_text.cluster_from_args`, the one rule)."""
    return cluster_from_args(num_experts, num_layers=num_layers, dense_dropped=dense_dropped, model=args.model,
                             groups=args.groups, nodes=args.nodes, gpus=args.gpus, replicas=args.replicas,
                             network=network_from_args(args), **real_cluster_kwargs(args))


def check_against_plan(args: argparse.Namespace, shape: dict[str, Any] | None, path: str) -> None:
    """Refuse --gpus, --nodes, --replicas or --groups that contradict what the plan file ``path``
    records (``shape``: an eplb file's problem, a CSV's GPUs), and --gpu-slots that contradict a
    CSV's gpu column: the plan is scored on the cluster it was made for, never silently on another."""
    for flag, key in (("gpus", "num_gpus"), ("nodes", "num_nodes"), ("replicas", "num_replicas"),
                      ("groups", "num_groups"), ("gpu_slots", "gpu_slots")):
        given, recorded = getattr(args, flag, None), (shape or {}).get(key)
        if flag == "gpu_slots" and given is not None:
            if "num_replicas" in (shape or {}):
                continue                  # an eplb file may be scored on other slots (a what-if, docs/problem.md)
            given = per_gpu_values(given, "gpu_slots")
        if given is not None and recorded and given != recorded:
            shown = given if len(str(given)) < 60 else f"{str(given)[:57]}..."
            raise OptionError(flag, f"--{flag.replace('_', '-')} {shown} contradicts {path}, a plan made for "
                                    f"{key} {recorded if len(str(recorded)) < 60 else str(recorded)[:57] + '...'}")


# Network (what a move costs in seconds) -------------------------------------------------------

def add_network_args(p: argparse.ArgumentParser) -> None:
    """--intra-node-bw, --inter-node-bw, --host-bw in GB/s per GPU (solvers.network)."""
    p.add_argument("--intra-node-bw", type=float, default=None, metavar="GBPS",
                   help=f"GPU-to-GPU bandwidth inside a node, GB/s per GPU (in [0.001, 1e9]; default "
                        f"{DEFAULT_INTRA_NODE_BW / 1e9:g}: NVLink 4)")
    p.add_argument("--inter-node-bw", type=float, default=None, metavar="GBPS",
                   help=f"GPU-to-GPU bandwidth across nodes, GB/s per GPU (in [0.001, 1e9]; default "
                        f"{DEFAULT_INTER_NODE_BW / 1e9:g}: one 400 Gb/s InfiniBand NIC per GPU)")
    p.add_argument("--host-bw", type=float, default=None, metavar="GBPS",
                   help="host memory as a copy source at this many GB/s per GPU (in [0.001, 1e9]; default: not a "
                        "source)")


def network_from_args(args: argparse.Namespace) -> Network:
    """The network of --intra-node-bw, --inter-node-bw, --host-bw (defaults where a command has none)."""
    return Network.from_gbps(getattr(args, "intra_node_bw", None), getattr(args, "inter_node_bw", None),
                             getattr(args, "host_bw", None))


# -O KEY=VALUE --------------------------------------------------------------------------------

def key_value(text: str) -> tuple[str, Any]:
    """argparse type of ``-O``/``--set``: ``KEY=VALUE`` from a command line. The value is
    parsed as JSON when it is JSON (numbers, true, lists), else kept as a string; dashes in
    KEY become underscores. A missing ``=`` or KEY is one readable argparse line."""
    key, eq, raw = text.partition("=")
    key = key.strip().replace("-", "_")
    if not eq or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE{' with a non-empty KEY' if eq else ''}, got {text!r}")
    try:
        return key, safejson.loads(raw)
    except safejson.JSONDepthError:
        raise argparse.ArgumentTypeError(f"{key}: value nested deeper than {safejson.MAX_DEPTH} levels") from None
    except ValueError:
        return key, raw


def expert_bytes_arg(text: str) -> int:
    """argparse type of ``--expert-bytes``: :func:`solvers.options.check_expert_bytes`, the one rule."""
    try:
        return check_expert_bytes(int(text) if text.strip().lstrip("+-").isdigit() else text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_options(p: argparse.ArgumentParser, help: str) -> None:
    p.add_argument("--option", "-O", action="append", type=key_value, metavar="KEY=VALUE", help=help)


def options_dict(pairs: list[tuple[str, Any]] | None) -> dict[str, Any]:
    """The -O pairs as a dict; a key given twice is refused."""
    out: dict[str, Any] = {}
    for key, value in pairs or []:
        if key in out:
            raise OptionError(key, "is given twice")
        out[key] = value
    return out


def solver_options(args: argparse.Namespace) -> dict[str, Any]:
    """The -O pairs with ``--policy`` (the same as ``-O policy=...``; one that contradicts
    -O policy= is refused)."""
    options = options_dict(args.option)
    if args.policy is not None:
        if options.get("policy", args.policy) != args.policy:
            raise OptionError("policy", f"--policy {args.policy} contradicts -O policy={options['policy']}")
        options["policy"] = args.policy
    return options


def flag_option(options: dict[str, Any], name: str, value: Any, flag: str, *, declared: bool, solvers: list[str],
                owner: str) -> None:
    """Put a solver option given as its own flag (``--traffic-weight`` -> ``traffic_weight``)
    into ``options``: refused when -O gives it too, or when none of the solvers run
    (``solvers``) declares it (``declared``); ``owner`` names a solver that does."""
    if value is None:
        return
    if name in options:
        raise OptionError(name, f"given both as {flag} and -O {name}=")
    if not declared:
        raise OptionError(name, f"{flag} is an option none of {', '.join(solvers)} declares ({owner} has it)")
    options[name] = value


# --out, --json -----------------------------------------------------------------------------

def add_json(p: argparse.ArgumentParser, help: str = "print metrics as JSON") -> None:
    p.add_argument("--json", action="store_true", help=help)


def add_out(p: argparse.ArgumentParser, help: str, required: bool = False, metavar: str | None = None) -> None:
    p.add_argument("--out", required=required, default=None, metavar=metavar, help=help)
