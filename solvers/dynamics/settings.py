"""The settings of a replay (:func:`solvers.dynamics.simulate`): one schema, torch-free.

:data:`SETTINGS` checks a replay's settings (:class:`Settings`) and makes the flags of
``eplb simulate`` / ``eplb sweep`` (names, choices, help) and the Over time page's widgets
(ranges, help), so nothing types them twice. The CLI imports it before torch.
"""
from __future__ import annotations

from typing import Any

from ..errors import OptionError
from ..options import Option, options_class

DEFAULT_WINDOW = 16
# Async copies share NVLink / the NIC with the MoE all-to-all and take SMs for their copy kernels:
# serving is taken to lose this fraction of its throughput while they run (an assumption, not a
# measurement; docs/dynamics.md, "Async interference").
DEFAULT_ASYNC_INTERFERENCE = 0.1
# How copies share the links: one-peer rounds or bandwidth sharing (solvers.transfers imports
# this name: that package imports torch, this module must not).
TRANSFER_MODELS = ("rounds", "shared")

# A replay's settings, one schema: simulate checks them with it, and it makes the flags of
# `eplb simulate` / `eplb sweep` (help and choices) and the Over time page's widgets (ranges, help).
SETTINGS = {o.name: o for o in (
    Option("solver", str, "deepseek", "planner (see `eplb solvers`; robust_sum, ewma, ... get the window's steps; out of sample, "
           "backtest is suggested: it picks its estimator by backtesting the window)"),
    Option("solver_options", object, None, "options of the planner", nullable=True),
    Option("every", int, None, "rebalance every N steps", minimum=1, maximum=10**9, nullable=True),
    Option("threshold", float, None, "rebalance after a step whose realised imbalance exceeds X", minimum=1.0,
           maximum=1e12, nullable=True),
    Option("window", int, None, f"steps each plan is made on (default: the period, else {DEFAULT_WINDOW})",
           minimum=1, maximum=10**9, nullable=True),
    Option("cooldown", int, 1, "at most one threshold rebalance per this many steps", minimum=1, maximum=10**9),
    Option("migration_slack", float, None, "migration-aware re-planning: fewest moves within this slack of a "
           "fresh plan's per-step imbalance over the window, the planner's forecast (with a budget, "
           "another method or objective: of its max load) (none: plain re-planning)", minimum=0.0, maximum=1e6, nullable=True),
    Option("migration", str, "heuristic", "migration method", choices=("heuristic", "exact")),
    Option("migration_budget", float, None, "with a migration slack: move at most this fraction of a fresh "
           "plan's moves per rebalance, widening the slack of the layers that save most (0.25 with slack 0.01: "
           "docs/dynamics.md)", minimum=0.0, exclusive_minimum=True, maximum=1.0, nullable=True),
    Option("migration_objective", str, "moves", "with a migration slack: minimise the moves or the transfer "
           "makespan", choices=("moves", "makespan")),
    Option("expert_bytes", int, None, "bytes per expert (default: the model's)", minimum=0, maximum=2**62,
           nullable=True),
    Option("stall", str, "sync", "a rebalance's weight copies stall serving for their makespan (sync) or run in "
           "the background while the old plan serves until they finish (async)", choices=("sync", "async")),
    Option("step_seconds", float, 1.0, "seconds one trace step takes at perfect balance: stalls against serving "
           "time", minimum=1e-4, maximum=1e9),
    Option("stall_aware", bool, False, "stall-aware trigger: at each trigger, put the new plan in force only when "
           "its calibrated gain over the renewal horizon exceeds its stall (no horizon to guess; needs an expert "
           "size)"),
    Option("transfer_model", str, "rounds", "copies in one-peer rounds (one peer per GPU and direction at a time, "
           "vLLM's rule) or sharing each GPU's bandwidth", choices=TRANSFER_MODELS),
    Option("async_interference", float, DEFAULT_ASYNC_INTERFERENCE, "async copies: fraction of serving throughput "
           "lost while background copies run (an assumption: docs/dynamics.md)", minimum=0.0, maximum=1.0),
)}


class Settings(options_class("simulate", SETTINGS.values())):
    """One replay's settings, checked once against :data:`SETTINGS` (frozen; reads as a mapping)."""

    @classmethod
    def parse(cls, values: Any = None) -> "Settings":
        """Unknown names and bad values raise OptionError naming the setting; defaults filled."""
        values = dict(values or {})
        unknown = sorted(set(values) - set(SETTINGS))
        if unknown:
            raise OptionError(unknown[0], f"is not a setting of simulate (settings: {', '.join(SETTINGS)})")
        return cls(**{k: o.validate(values[k]) if k in values else o.default for k, o in SETTINGS.items()})
