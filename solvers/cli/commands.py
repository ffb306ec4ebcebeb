"""Each command's implementation by name (the parser's ``handler``), loaded on demand.

:func:`solvers.cli.main` asks for one handler once the arguments are parsed; only that
command's module is imported (``eplb score`` never loads the benchmark harness, pandas or
the exact solvers), so a command pays for what it runs.
"""
from __future__ import annotations

import importlib
from typing import Callable

# command -> (module under solvers.cli, function)
HANDLERS: dict[str, tuple[str, str]] = {
    "plan": ("plan", "cmd_plan"), "score": ("score", "cmd_score"), "compare": ("compare", "cmd_compare"),
    "solvers": ("catalogue", "cmd_solvers"), "generate": ("workloads", "cmd_generate"),
    "convert": ("workloads", "cmd_convert"), "datasets": ("workloads", "cmd_datasets"),
    "bench run": ("bench", "cmd_bench_run"), "recommend": ("bench", "cmd_recommend"),
    "simulate": ("dynamics", "cmd_simulate"), "sweep": ("dynamics", "cmd_sweep"),
    "microbatch": ("dispatch", "cmd_microbatch"), "routing": ("routing", "cmd_routing"),
}


def handler(name: str) -> Callable:
    """The implementation of command ``name`` (imports its module only)."""
    module, function = HANDLERS[name]
    return getattr(importlib.import_module(f"{__package__}.{module}"), function)


__all__ = ["HANDLERS", "handler"]
