"""The benchmark suites, declared in one place.

A suite is a few *groups*; each group crosses a list of instances (model preset x cluster
shape x workload scenario) with the solvers of some kinds from the registry (every
available heuristic, every available exact solver) and the suite's seeds. Exact solvers
only get small instances with a short time limit; heuristics get full model sizes.

Suites:
- ``tiny``: seconds; used by the tests.
- ``ci``:   <= 5 minutes on 2 cores: exact solvers on Mixtral/OLMoE-sized layers (proven
            optima to measure heuristics against), heuristics on DeepSeek-V3/Kimi-K2 sizes.
- ``full``: every preset on every cluster shape (8-layer slices, three scenarios); out of
            sample on drifting / shifting-mix traces (the heuristics and the time-robust
            planners, each held-out step scored); exact solvers on small EP groups with longer
            limits. Its results ship in solvers/bench/results/. From a checkout
            (``python -m benchmarks.run --suite full``) it also runs the generalisation
            benchmark (``benchmarks/generalisation.py``) into ``OUT/generalisation.jsonl``.
- ``dynamics``: traces replayed under rebalancing settings (a period or a threshold, plain or
            migration-aware re-planning; :mod:`.dynamics_tasks`): realised imbalance, moves,
            bytes. A few minutes on 2 cores. ``dynamics-tiny``: seconds (tests).
- ``windows``: the ADRS / OpenEvolve EPLB benchmark's protocol (its cluster, windows of 100
            steps, each plan scored on the next window; the benchmark's balancedness and speed
            score beside held-out imbalance). ``windows-tiny``: seconds (tests).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Iterable

from solvers.cluster import MODELS
from solvers.errors import OptionError

from .analysis import HISTORY_SOLVERS
from .dynamics_tasks import TraceInstance, dynamics_options
from .instances import Instance

HEURISTIC, EXACT = "heuristic", "exact"


@dataclass(frozen=True)
class Group:
    """Instances crossed with every available registered solver of ``kinds``.

    time_limit: seconds passed as ``time_limit`` to solvers that take that option.
    options: extra options per solver name (only passed to solvers that accept them).
    policies: besides each solver's default ("auto"), these explicit policies also run on
    instances where auto resolves to another one (e.g. "global" on grouped multi-node
    shapes, so results show what the hierarchical policy costs).
    solvers: only these solvers of ``kinds`` (None: every available one).
    """

    instances: tuple[Instance, ...]
    kinds: tuple[str, ...] = (HEURISTIC,)
    time_limit: float | None = None
    options: dict[str, dict[str, Any]] = field(default_factory=dict)
    policies: tuple[str, ...] = ()
    solvers: tuple[str, ...] | None = None


@dataclass(frozen=True)
class DynamicsGroup:
    """Traces replayed with each of ``solvers`` under each rebalancing setting.

    settings: task options of :func:`.dynamics_tasks.dynamics_options` (every / threshold,
    window, migration_slack, migration). A shipped dataset runs once (the first seed); a
    generated trace once per seed.
    """

    traces: tuple[TraceInstance, ...]
    solvers: tuple[str, ...]
    settings: tuple[dict[str, Any], ...]


@dataclass(frozen=True)
class Suite:
    name: str
    description: str
    groups: tuple[Group | DynamicsGroup, ...]
    seeds: tuple[int, ...] = (0,)


def grid(models: Iterable[str], shapes: Iterable[str], scenarios: Iterable[str], **kw: Any) -> tuple[Instance, ...]:
    """Every (model, shape, scenario) combination as instances (``kw`` goes to Instance.on)."""
    return tuple(Instance.on(m, s, sc, **kw) for m, s, sc in itertools.product(models, shapes, scenarios))


ALL_MODELS = ("deepseek-v3", "qwen3-235b", "mixtral-8x7b", "olmoe-1b-7b", "kimi-k2")
SMALL_MODELS = ("mixtral-8x7b", "olmoe-1b-7b")
SCENARIOS = ("mild", "skewed", "drifting", "shifting-mix")
# Migration-aware re-planning: the slack against a fresh plan, and the documented default
# setting (docs/dynamics.md), which adds a move budget (a fraction of a fresh plan's moves).
MIGRATION_SLACK, MIGRATION_BUDGET = 0.01, 0.25
MIGRATION_SETTINGS = ((MIGRATION_SLACK, None), (MIGRATION_SLACK, MIGRATION_BUDGET))


def rebalance_settings(period: int, *, threshold: float | None = None,
                       migration: tuple[tuple[float, float | None], ...] = MIGRATION_SETTINGS,
                       ) -> tuple[dict[str, Any], ...]:
    """Plain re-planning and each migration-aware (slack, budget) setting, every ``period``
    steps (window = period) and, with ``threshold``, past that realised imbalance."""
    def each(**trigger: Any) -> list[dict[str, Any]]:
        return [dynamics_options(**trigger, window=period)] + [
            dynamics_options(**trigger, window=period, slack=s, budget=b) for s, b in migration]

    out = each(every=period)
    if threshold is not None:
        out += each(threshold=threshold)
    return tuple(out)


def _slow_to_certify(instance: Instance) -> bool:
    """Two slots per GPU and 64 experts or more: certify's count search needs minutes there."""
    return instance.replicas == 2 * instance.gpus and MODELS[instance.model].num_experts >= 64


def _suites() -> dict[str, Suite]:
    tiny = Suite("tiny", "two small instances, seconds (tests)", groups=(
        Group(grid(["mixtral-8x7b"], ["nodes-2x2-nospare"], ["mild"], layers=2, steps=8, window=4)
              + grid(["olmoe-1b-7b"], ["nodes-2x4"], ["skewed"], layers=2, steps=8, window=4),
              kinds=(HEURISTIC, EXACT), time_limit=1.0),
    ))
    ci = Suite("ci", "exact solvers on Mixtral-sized EP groups (proven optima), heuristics on "
               "DeepSeek-V3 / Kimi-K2 sizes", seeds=(0,), groups=(
        Group(grid(["mixtral-8x7b"], ["node-2", "nodes-2x2-nospare"], ["mild", "skewed", "drifting"], layers=4)
              + grid(["olmoe-1b-7b"], ["node-8"], ["skewed"], layers=2),
              kinds=(HEURISTIC, EXACT), time_limit=4.0),
        Group(grid(["deepseek-v3"], ["prefill-4x8"], ["skewed", "drifting"])
              + grid(["deepseek-v3"], ["decode-ep64"], ["skewed"])
              + grid(["kimi-k2"], ["decode-ep144"], ["skewed"]),
              kinds=(HEURISTIC,), policies=("global",)),
    ))
    # Heuristics on 8-layer slices of every model: layers are independent problems, so the
    # gaps carry over and solve time grows about linearly with the layer count; it keeps the
    # whole suite within tens of minutes on a small machine (the ci suite times full models).
    certify_grid = (grid(ALL_MODELS, ["decode-ep64", "decode-ep144"], ["mild", "skewed", "drifting"], layers=8)
                    + grid(SMALL_MODELS, ["node-8", "prefill-4x8"], ["mild", "skewed", "drifting"], layers=8))
    full = Suite("full", "every preset x cluster shape x 3 scenarios (heuristics, 8-layer slices); exact "
                 "solvers on small EP groups (4 layers, 10 s); certify on decode shapes (40 s; 160 s at two "
                 "slots per GPU and 64+ experts)", seeds=(0, 1),
                 groups=(
        Group(grid(ALL_MODELS, ["node-8", "prefill-4x8", "decode-ep64", "decode-ep144"],
                   ["mild", "skewed", "drifting"], layers=8),
              kinds=(HEURISTIC,), policies=("global",)),
        # Out of sample: plans of window 0 served on each step of window 1, on drifting and
        # shifting-mix traces; the heuristics beside the time-robust planners of the window's steps.
        Group(grid(["deepseek-v3", "qwen3-235b"], ["prefill-4x8"], ["shifting-mix"], layers=8)
              + grid(["olmoe-1b-7b"], ["node-8"], ["shifting-mix"], layers=8),
              kinds=(HEURISTIC,), policies=("global",)),
        Group(grid(["deepseek-v3", "qwen3-235b"], ["prefill-4x8"], ["drifting", "shifting-mix"], layers=8)
              + grid(["olmoe-1b-7b"], ["node-8"], ["drifting", "shifting-mix"], layers=8),
              kinds=(HEURISTIC,), policies=("global",), solvers=HISTORY_SOLVERS + ("backtest",)),
        Group(grid(SMALL_MODELS[:1], ["node-2", "nodes-2x2-nospare", "node-8"], ["mild", "skewed", "drifting"],
                   layers=4)
              + grid(SMALL_MODELS[1:], ["node-8", "nodes-2x4"], ["mild", "skewed"], layers=4),
              kinds=(HEURISTIC, EXACT), time_limit=10.0),
        # Certification where the heuristics' gaps are widest: decode shapes (two to five
        # slots per GPU) and the small models at two slots per GPU; global policy, whose
        # bound holds for every plan. 40 s per 8-layer run; 160 s at two slots per GPU with
        # 64 experts or more, where the count search with CP-SAT needs the time (docs/certify.md).
        Group(tuple(i for i in certify_grid if not _slow_to_certify(i)),
              kinds=(EXACT,), time_limit=40.0, options={"certify": {"policy": "global"}}, solvers=("certify",)),
        Group(tuple(i for i in certify_grid if _slow_to_certify(i)),
              kinds=(EXACT,), time_limit=160.0, options={"certify": {"policy": "global"}}, solvers=("certify",)),
    ))
    # Shipped drifting / shifting-mix datasets at the periods of the migration target, and
    # generated drifting / shifting-mix workloads of larger presets (8-layer slices).
    dynamics = Suite("dynamics", "rebalancing replays: shipped drifting / shifting-mix datasets and generated "
                     "workloads, plain against migration-aware re-planning", seeds=(0,), groups=(
        DynamicsGroup((TraceInstance.of_dataset("olmoe-1b-7b-drifting", "olmoe-1b-7b", "node-8"),
                       TraceInstance.of_dataset("mixtral-8x7b-shifting-mix", "mixtral-8x7b", "node-8")),
                      ("deepseek", "kk_swap"), rebalance_settings(20, threshold=1.15)),
        DynamicsGroup((TraceInstance.of_dataset("deepseek-v3-shifting-mix", "deepseek-v3", "prefill-4x8"),),
                      ("deepseek",), rebalance_settings(4) + rebalance_settings(2)),
        DynamicsGroup((TraceInstance.of_dataset("deepseek-v3-shifting-mix", "deepseek-v3", "prefill-4x8"),),
                      ("kk_swap",), rebalance_settings(4)),
        DynamicsGroup((TraceInstance.generated("deepseek-v3", "drifting", "prefill-4x8", layers=8, steps=96),
                       TraceInstance.generated("qwen3-235b", "shifting-mix", "prefill-4x8", layers=8, steps=96),
                       TraceInstance.generated("kimi-k2", "drifting", "decode-ep64", layers=8, steps=96)),
                      ("deepseek",), rebalance_settings(16, threshold=1.3)),
    ))
    dynamics_tiny = Suite("dynamics-tiny", "one small generated trace, seconds (tests)", seeds=(0,), groups=(
        DynamicsGroup((TraceInstance.generated("olmoe-1b-7b", "drifting", "node-8", layers=2, steps=24),),
                      ("deepseek",), rebalance_settings(6, threshold=1.05)),
    ))
    # The ADRS / OpenEvolve EPLB benchmark's protocol: its cluster (DeepSeek-V3's 256 experts on 4
    # nodes x 8 GPUs, 288 slots), windows of 100 steps, every window planned and scored on the next.
    windows = Suite("windows", "the EPLB benchmark's protocol: windows of 100 steps, plan on i, score on i+1 "
                    "(DeepSeek-V3, 4x8 GPUs, 288 slots)", seeds=(0,), groups=(
        Group(grid(["deepseek-v3"], ["prefill-4x8"], ["drifting", "shifting-mix"], layers=8, steps=500, window=100,
                   rolling=True), kinds=(HEURISTIC,), time_limit=5.0),
    ))
    windows_tiny = Suite("windows-tiny", "the windows protocol on one small trace, seconds (tests)", seeds=(0,),
                         groups=(Group(grid(["olmoe-1b-7b"], ["node-8"], ["drifting"], layers=2, steps=30, window=10,
                                            rolling=True), solvers=("deepseek", "kk_swap")),))
    return {s.name: s for s in (tiny, ci, full, dynamics, dynamics_tiny, windows, windows_tiny)}


SUITES: dict[str, Suite] = _suites()


def get_suite(name: str) -> Suite:
    if name not in SUITES:
        raise OptionError("suite", f"unknown suite {name!r}; choose one of {', '.join(SUITES)}")
    return SUITES[name]
