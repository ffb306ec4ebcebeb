"""The ``eplb`` argument parser: every command's arguments, torch-free (``eplb --help`` and
``eplb COMMAND --help`` answer without importing torch). Each sub-parser records its command's
name (``handler``); :mod:`solvers.cli.commands` maps names to the implementations.
"""
from __future__ import annotations

import argparse

from .. import __version__
from ..bench.arguments import DESCRIPTION as BENCH_RUN_DESCRIPTION
from ..bench.arguments import add_run_arguments
from ..cluster import MODELS
from ..dynamics.settings import SETTINGS
from ..workloads.formats import FORMATS, PLAN_FORMATS, TRACE_FORMATS
from ..workloads.scenarios import SCENARIOS
from .args import (LOADS_HELP, POLICIES, Parser, add_cluster_args, add_json, add_loads, add_network_args,
                   add_options, add_out, add_real_cluster_args, expert_bytes_arg, key_value)

SOLVER_OPTIONS_HELP = ("solver options: every solver declares its options (type, default, allowed values); "
                       "`eplb solvers` prints them as a table. Pass them with -O KEY=VALUE.")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="eplb", description="Expert-parallel load balancing workbench.")
    parser.add_argument("--version", action="version", version=f"eplb {__version__}")
    parser.add_argument("--debug", action="store_true",
                        help="on an internal error (a bug), print the full traceback as well (before the command: "
                             "eplb --debug plan ...)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.required = True
    for add in (add_plan, add_score, add_compare, add_solvers, add_generate, add_convert, add_datasets,
                add_bench, add_recommend, add_simulate, add_sweep, add_microbatch, add_routing):
        add(sub)
    return parser


# plan, score, compare, solvers ---------------------------------------------------------------

def add_progress(p: argparse.ArgumentParser) -> None:
    p.add_argument("--progress", action="store_true",
                   help="progress on stderr also when it is not a terminal (a line every few seconds; a terminal "
                        "always gets a one-line progress for calls longer than a second)")


def add_plan(sub) -> None:
    p = sub.add_parser("plan", help="compute a placement plan and write it as JSON", epilog=SOLVER_OPTIONS_HELP)
    add_loads(p)
    add_cluster_args(p)
    p.add_argument("--solver", default="deepseek", help="solver name (see `eplb solvers`)")
    p.add_argument("--policy", choices=POLICIES, default=None,
                   help="placement policy, the same for every solver (default auto: hierarchical when groups "
                        "divide by nodes)")
    add_options(p, "solver option, repeatable (e.g. -O time_limit=10); see `eplb solvers`")
    p.add_argument("--previous", default=None, help="placement in force (eplb, SGLang, TensorRT-LLM or CSV map): "
                                                   "moves and bytes are recorded; a solver that takes a plan in force "
                                                   "(migration, elastic, risk_aware) re-plans from it")
    p.add_argument("--migration-slack", type=float, default=None, metavar="EPS",
                   help="migration-aware: fewest moves from --previous with every layer's max load within "
                        "(1 + EPS) x a fresh plan's (docs/dynamics.md)")
    p.add_argument("--migration", choices=("heuristic", "exact"), default=None,
                   help="migration-aware method: batched repair heuristic (default) or CP-SAT per layer")
    p.add_argument("--migration-budget", type=float, default=None, metavar="F",
                   help="migration-aware: at most F x a fresh plan's moves; the layers saving most get wider "
                        "slacks until it fits (docs/dynamics.md)")
    p.add_argument("--migration-objective", choices=("moves", "makespan"), default=None,
                   help="migration-aware: minimise the moves (default) or the transfer makespan over the network "
                        "within the slack (docs/dynamics.md)")
    p.add_argument("--transfer-model", choices=("rounds", "shared"), default=None,
                   help="--migration-objective makespan: time the schedules in one-peer rounds (vLLM's rule, "
                        "default) or by bandwidth sharing (docs/dynamics.md)")
    add_network_args(p)
    p.add_argument("--expert-bytes", type=expert_bytes_arg, default=None,
                   help="bytes per expert for moves (default: the model's)")
    add_routing_arg(p, "; the traffic_aware solver plans on it (-O epsilon=E: imbalance <= 1 + E)")
    add_traffic_weight(p)
    add_out(p, "plan JSON to write", required=True)
    add_json(p)
    add_progress(p)
    p.set_defaults(handler="plan")


def add_score(sub) -> None:
    s = sub.add_parser("score", help="score a plan on loads with the shared scorer")
    add_loads(s)
    s.add_argument("--plan", required=True, help="plan: eplb JSON, or an exported SGLang JSON, TensorRT-LLM YAML "
                                                  "or CSV map")
    s.add_argument("--previous", help="previous plan (same formats): migration moves and, with an expert size, "
                                      "the weight-transfer schedule (makespan and its lower bound)")
    s.add_argument("--expert-bytes", type=expert_bytes_arg, default=None,
                   help="bytes per expert, for moves in bytes and transfer times (default: --model's)")
    s.add_argument("--model", default=None, help="engine maps: model preset for the expert groups")
    s.add_argument("--gpus", type=int, default=None,
                   help="engine maps without GPUs (SGLang, TensorRT-LLM): GPUs P (a plan file's own count; one that "
                        "contradicts it is refused)")
    s.add_argument("--nodes", type=int, default=None, help="engine maps: nodes N (default 1; as --gpus)")
    s.add_argument("--groups", type=int, default=None, help="engine maps: expert groups G (default 1; as --gpus)")
    add_real_cluster_args(s)
    s.add_argument("--per-gpu", action="store_true", help="also print every GPU's load / mean over the layers (mean, worst, hottest count) and each layer's hottest and coolest GPUs (and the same in time, with speeds); --json has the full [layers, GPUs] loads")
    add_network_args(s)
    s.add_argument("--transfer-model", choices=("rounds", "shared"), default="rounds",
                   help="with --previous: copies in one-peer rounds (vLLM's rule, default) or sharing each GPU's "
                        "bandwidth per direction and link class (docs/dynamics.md)")
    s.add_argument("--schedule", choices=("heuristic", "exact"), default="heuristic",
                   help="with --previous and the rounds model: the fast heuristic (default) or the exact CP-SAT "
                        "schedule (sources and rounds; at most 200 copies), proven optimal or with its gap")
    s.add_argument("--time-limit", type=float, default=10.0, metavar="T",
                   help="--schedule exact: seconds for CP-SAT (default 10)")
    add_out(s, "with --previous: write the transfer schedule, .json or .csv (docs/formats.md)", metavar="FILE")
    add_routing_arg(s)
    add_json(s)
    s.set_defaults(handler="score")


def add_compare(sub) -> None:
    c = sub.add_parser("compare", help="run several solvers on your loads and pick one", epilog=SOLVER_OPTIONS_HELP)
    add_loads(c, " (the in-sample window)")
    add_cluster_args(c)
    c.add_argument("--solvers", default=None, help="comma-separated solver names, or your own planners as FILE.py:NAME "
                   "or module:NAME (docs/own-algorithm.md) (default deepseek,kk_swap,joint,best; with --holdout also "
                   "risk_aware, with --routing also traffic_aware, with --previous also migration)")
    c.add_argument("--policy", default=None, help="comma-separated policies to run each solver with "
                                                  "(e.g. global,hierarchical; default auto)")
    c.add_argument("--holdout", default=None, metavar="A:B", help="held-out steps A..B-1 of the same loads "
                   "(imbalance out of sample); never planned on: a --loads window overlapping it is refused, "
                   "without one the planning window is the steps before A")
    c.add_argument("--windows", type=int, default=None, metavar="K",
                   help="the EPLB benchmark's protocol: windows of K steps over the whole trace, plan on window i, "
                        "score on window i+1; prints its balancedness and speed score beside held-out imbalance "
                        "and gap")
    c.add_argument("--previous", default=None, help="plan in force (eplb, SGLang, TensorRT-LLM or CSV): moves in "
                   "every row, the migration solver re-plans from it (and joins the default solvers), and the pick "
                   "weighs moves (README: Command line)")
    c.add_argument("--migration-slack", type=float, default=None, metavar="EPS",
                   help="with --previous: the migration solver keeps every layer within (1 + EPS) x a fresh plan's "
                        "max load, and the pick takes the fewest moved bytes among the plans within (1 + EPS) x "
                        "the lowest imbalance (default 0.01)")
    c.add_argument("--expert-bytes", type=expert_bytes_arg, default=None,
                   help="bytes per expert (default: the model's)")
    c.add_argument("--time-limit", type=float, default=None, help="seconds for each solver with a time limit")
    add_routing_arg(c, " (a column per plan; traffic_aware joins the default solvers)")
    add_traffic_weight(c)
    add_options(c, "option for every solver that declares it, repeatable")
    add_out(c, "write compare.csv, compare.html and every row's plan file (plans/SOLVER-POLICY.json) there",
            metavar="DIR")
    add_json(c, "print the rows and the pick as JSON")
    c.add_argument("--wide", action="store_true", help="every column (the default table fits 120 columns)")
    c.add_argument("--verbose", action="store_true", help="print the `eplb plan` command of every row (default: "
                                                          "the pick's)")
    c.set_defaults(handler="compare")


def add_solvers(sub) -> None:
    ls = sub.add_parser("solvers", help="list the registered solvers and their option schemas")
    add_json(ls, "print the schemas as JSON")
    ls.add_argument("--markdown", action="store_true", help="print the catalogue as Markdown (docs/solvers.md)")
    ls.set_defaults(handler="solvers")


def add_traffic_weight(p) -> None:
    p.add_argument("--traffic-weight", type=float, default=None, metavar="W",
                   help="traffic_aware's weighted objective: per layer, the plan within the epsilon limits "
                        "minimising (imbalance - 1) + W x inter-node bytes / the balance-only plan's "
                        "(docs/traffic.md); without it, the least traffic within the limits")


def add_routing_arg(p, extra: str = "") -> None:
    p.add_argument("--routing", default=None, metavar="TRACE",
                   help="per-token routing trace (canonical .npz, SGLang per_token dump, vLLM routed_experts, "
                        "Megatron JSONL, or a shipped routing dataset by name): adds the dispatch traffic "
                        "(remote nodes per token, bytes per link class)" + extra)


def add_routing(sub) -> None:
    r = sub.add_parser("routing", help="per-token routing traces: generate, convert to the canonical .npz, info")
    actions = r.add_subparsers(dest="action", metavar="ACTION", parser_class=Parser)
    actions.required = True
    gen = actions.add_parser("generate", help="draw a synthetic per-token routing trace for a model preset")
    gen.add_argument("input", metavar="MODEL", help=f"model preset: {', '.join(MODELS)}")
    gen.add_argument("--tokens", type=int, default=3072,
                     help="tokens (default 3072; at most 4194304, and what the 1 GiB working-memory budget "
                          "holds: about 500000 for deepseek-v3)")
    gen.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    gen.add_argument("--set", action="append", type=key_value, metavar="KEY=VALUE",
                     help="generator parameter, repeatable (e.g. --set topic_bias=3)")
    add_out(gen, "canonical routing .npz to write", required=True)
    for name, what in (("convert", "convert a routing trace to the canonical .npz"),
                       ("info", "shape of a routing trace and its co-activation lift")):
        a = actions.add_parser(name, help=what)
        a.add_argument("input", metavar="TRACE", help="a routing file, directory or glob (quoted), or a shipped "
                                                       "routing dataset by name")
        a.add_argument("--format", choices=("npz", "sglang", "vllm", "megatron"), default=None,
                       help="input format (default: detected)")
        a.add_argument("--num-experts", type=int, default=None,
                       help="logical experts (vLLM and Megatron files do not record it)")
        if name == "convert":
            add_out(a, "canonical routing .npz to write", required=True)
        else:
            add_json(a)
    # what one action does not take, the handler reads as unset
    r.set_defaults(handler="routing", tokens=None, seed=None, set=None, format=None, num_experts=None, out=None,
                   json=False)


# generate, convert, datasets -----------------------------------------------------------------

def add_generate(sub) -> None:
    g = sub.add_parser("generate", help="write a synthetic load trace for a model preset and scenario")
    g.add_argument("model", help=f"model preset: {', '.join(MODELS)}")
    g.add_argument("--scenario", default="mild", help=f"scenario: {', '.join(SCENARIOS)} (default mild)")
    g.add_argument("--steps", type=int, default=100, help="steps (forward passes) to draw (default 100)")
    g.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    g.add_argument("--tokens-per-step", type=int, default=4096, help="tokens routed per step (default 4096)")
    g.add_argument("--layers", type=int, default=None, help="keep only the first LAYERS MoE layers")
    g.add_argument("--set", action="append", type=key_value, metavar="KEY=VALUE",
                   help="generator parameter, repeatable (e.g. --set skew=1.5 --set drift=0.05)")
    g.add_argument("--format", choices=TRACE_FORMATS, default=None,
                   help="output format (default from the suffix: .npz, .pt, .json = vllm, .csv)")
    add_out(g, "trace file to write", required=True)
    g.set_defaults(handler="generate")


def add_convert(sub) -> None:
    c = sub.add_parser("convert", help="convert loads (or a plan) between formats")
    c.add_argument("input", help="loads file, directory of per-rank dumps, glob, dataset name, or a plan file")
    add_out(c, "file to write", required=True)
    c.add_argument("--to", default=None,
                   help=f"output format: loads {', '.join(TRACE_FORMATS)}; plans {', '.join(PLAN_FORMATS)} "
                        "(default from the suffix)")
    c.add_argument("--format", choices=FORMATS, default=None, help="input loads format (default: detected)")
    c.add_argument("--num-experts", type=int, default=None,
                   help="plans: logical experts (engine plan formats do not record it)")
    c.add_argument("--layer-offset", type=int, default=None,
                   help="plans to sglang or trtllm: model index of the first MoE layer (default: the dense layers "
                        "the plan file records, e.g. 3 for DeepSeek-V3; sglang gets valid rows for them)")
    c.add_argument("--loads", default=None, help="plans to eplb: the loads the plan is for")
    c.add_argument("--gpus", type=int, default=None,
                   help="engine maps to eplb or csv: GPUs P (eplb plan files record it)")
    c.add_argument("--groups", type=int, default=1, help="plans to eplb: expert groups G (default 1)")
    c.add_argument("--nodes", type=int, default=1, help="plans to eplb: nodes N (default 1)")
    c.set_defaults(handler="convert")


def add_datasets(sub) -> None:
    d = sub.add_parser("datasets", help="list the shipped datasets (or rebuild the generated ones)")
    add_json(d, "print the catalog entries as JSON")
    d.add_argument("--rebuild", nargs="*", default=None, metavar="NAME",
                   help="regenerate these generated datasets (all when no name) and the catalog")
    d.set_defaults(handler="datasets")


# bench run, recommend ------------------------------------------------------------------------

def add_bench(sub) -> None:
    b = sub.add_parser("bench", help="run the benchmark harness (eplb bench run --help)")
    steps = b.add_subparsers(dest="bench_command", metavar="STEP", parser_class=Parser)
    steps.required = True
    r = steps.add_parser("run", help="run a benchmark suite (tiny, ci, full, dynamics)",
                         description=BENCH_RUN_DESCRIPTION)
    add_run_arguments(r)                     # the options of python -m benchmarks.run, shared
    r.set_defaults(handler="bench run")


def add_recommend(sub) -> None:
    r = sub.add_parser("recommend", help="which solver to use for a cluster shape (from benchmark results)")
    r.add_argument("--model", default=None, help="model preset: fills experts, groups and layers")
    r.add_argument("--experts", type=int, default=None, help="logical experts E per layer")
    r.add_argument("--policy", choices=("any", "hierarchical", "global"), default="any",
                   help="only runs of this placement policy (default any: the answer names the policy of its runs)")
    r.add_argument("--replicas", type=int, required=True, help="physical expert slots R")
    r.add_argument("--gpus", type=int, required=True, help="GPUs P")
    r.add_argument("--nodes", type=int, default=1, help="nodes N (default 1)")
    r.add_argument("--groups", type=int, default=None, help="expert groups G (default: any)")
    r.add_argument("--layers", type=int, default=None, metavar="L",
                   help="MoE layers planned at once: benchmark timings are scaled linearly to L")
    r.add_argument("--time-budget", type=float, default=None, metavar="S",
                   help="seconds a solve may take (default: no limit)")
    r.add_argument("--results", default=None, metavar="DIR",
                   help="benchmark results directory (default: the shipped solvers/bench/results)")
    add_json(r, "print the recommendation as JSON")
    r.set_defaults(handler="recommend")


# simulate, sweep -----------------------------------------------------------------------------

# The replay settings (solvers.dynamics.SETTINGS) both commands take as flags, and those of simulate alone.
REPLAY_FLAGS = ("solver", "window", "expert_bytes", "stall", "step_seconds", "async_interference", "transfer_model")
SIMULATE_FLAGS = ("every", "threshold", "migration_slack", "migration", "migration_budget", "migration_objective",
                  "stall_aware")


def _add_settings(p: argparse.ArgumentParser, names: tuple[str, ...]) -> None:
    """One flag per replay setting, made from its schema: --NAME-WITH-DASHES, its type, choices
    and help (an unset flag is None: the schema's default applies, and simulate checks the range)."""
    for name in names:
        o = SETTINGS[name]
        flag = "--" + name.replace("_", "-")
        if o.type is bool:
            p.add_argument(flag, action="store_true", help=o.help)
        else:
            p.add_argument(flag, type=o.type, choices=o.choices, default=None,
                           metavar=None if o.choices else {int: "N", float: "X"}.get(o.type, "NAME"),
                           help=o.help + ("" if o.default is None else f" (default {o.default})"))


def _add_replay(p: argparse.ArgumentParser) -> None:
    """What simulate and sweep share: the trace, the cluster (or a model's default) and the planner."""
    add_loads(p, " (a trace: [steps, layers, experts])")
    add_cluster_args(p, required=False)
    p.add_argument("--policy", choices=POLICIES, default=None,
                   help="placement policy of every plan (the planner's policy option; default auto: hierarchical "
                        "when the groups split evenly over the nodes)")
    _add_settings(p, REPLAY_FLAGS)
    add_network_args(p)
    add_options(p, "planner option, repeatable")
    add_json(p, "print the totals as JSON")
    add_out(p, "write tables (and a figure) there", metavar="DIR")
    add_progress(p)


def add_simulate(sub) -> None:
    s = sub.add_parser("simulate", help="replay a load trace with periodic or threshold rebalancing")
    _add_replay(s)
    _add_settings(s, SIMULATE_FLAGS)
    s.set_defaults(handler="simulate")


def add_sweep(sub) -> None:
    w = sub.add_parser("sweep", help="simulate many rebalancing settings: bytes moved against imbalance")
    _add_replay(w)
    w.add_argument("--periods", default="10,25,50", help="comma-separated periods, whole steps in [1, 16777216] "
                   "(default 10,25,50)")
    w.add_argument("--thresholds", default=None, help="comma-separated imbalance thresholds")
    w.add_argument("--slacks", default="plain,0,0.01,0.03",
                   help="comma-separated migration slacks, 'plain' = plain re-planning (default plain,0,0.01,0.03)")
    w.add_argument("--no-stall-aware", action="store_true",
                   help="no stall-aware row (by default one per slack, checked at the smallest period, when the "
                        "expert size is known)")
    w.add_argument("--budget-gb", type=float, default=None,
                   help="suggest the best setting within this many GB (in [0, 1e9]; replicas moved when the expert "
                        "size is unknown)")
    w.set_defaults(handler="sweep")


# microbatch ----------------------------------------------------------------------------------

def add_microbatch(sub) -> None:
    m = sub.add_parser("microbatch", help="per-micro-batch imbalance of a plan, even vs scheduled split")
    add_loads(m, " (a [steps, layers, experts] trace)")
    m.add_argument("--plan", required=True, help="plan: eplb JSON (any cluster: uneven slots, failed GPUs, speeds), "
                                                  "or an exported SGLang JSON, TensorRT-LLM YAML or CSV map")
    m.add_argument("--gpus", type=int, default=None, help="GPUs of an engine map (an eplb plan records them)")
    m.add_argument("--failed", default=None, metavar="IDS",
                   help="ranks an engine map was padded for (failed GPUs: their slots serve nothing)")
    m.add_argument("--tokens-per-microbatch", type=int, default=None,
                   help="tokens per sampled micro-batch (default 4096)")
    m.add_argument("--top-k", type=int, default=None, help="experts per token (default 8)")
    m.add_argument("--microbatches", type=int, default=None, help="micro-batches to sample (default 64)")
    m.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    m.add_argument("--steps-as-microbatches", action="store_true",
                   help="take the trace's steps as the micro-batches instead of sampling")
    add_json(m, "print the summary as JSON")
    add_out(m, "directory for summary.json, imbalance.csv and histogram.svg")
    m.set_defaults(handler="microbatch")


__all__ = ["build_parser", "LOADS_HELP", "SOLVER_OPTIONS_HELP"]
