"""Each command's implementation by name (the parser's ``handler``). Imported by
:func:`solvers.cli.main` once the arguments are parsed: this is where torch and every solver load."""
from __future__ import annotations

from typing import Callable

from ..grading import SolverBug
from .bench import cmd_bench_run, cmd_recommend
from .catalogue import cmd_solvers
from .compare import cmd_compare
from .dispatch import cmd_microbatch
from .dynamics import cmd_simulate, cmd_sweep
from .plan import cmd_plan
from .routing import cmd_routing
from .score import cmd_score
from .workloads import cmd_convert, cmd_datasets, cmd_generate

HANDLERS: dict[str, Callable] = {
    "plan": cmd_plan, "score": cmd_score, "compare": cmd_compare, "solvers": cmd_solvers,
    "generate": cmd_generate, "convert": cmd_convert, "datasets": cmd_datasets,
    "bench run": cmd_bench_run, "recommend": cmd_recommend,
    "simulate": cmd_simulate, "sweep": cmd_sweep, "microbatch": cmd_microbatch, "routing": cmd_routing,
}

__all__ = ["HANDLERS", "SolverBug"]
