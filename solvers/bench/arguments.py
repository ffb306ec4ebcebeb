"""The benchmark runner's arguments, torch-free: ``eplb --help`` and ``eplb bench run --help``
build them without importing the runner (which imports every solver)."""
from __future__ import annotations

import argparse

from solvers.errors import OptionError


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise OptionError("arguments", message)


# A run's task list is held in memory (and every seed is a full sweep of the suite).
MAX_SEEDS = 10_000


def parse_seeds(text: str) -> list[int]:
    seeds: list[int] = []
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        try:
            if "-" in part:
                lo, hi = part.split("-", 1)
                if int(hi) - int(lo) >= MAX_SEEDS:
                    raise OptionError("seeds", f"at most {MAX_SEEDS} seeds per run, got the range {part}")
                seeds.extend(range(int(lo), int(hi) + 1))
            else:
                seeds.append(int(part))
        except ValueError:
            raise OptionError("seeds", f"expected integers like 0,1,2 or 0-4, got {text!r}") from None
    if len(seeds) > MAX_SEEDS:
        raise OptionError("seeds", f"at most {MAX_SEEDS} seeds per run, got {len(seeds)}")
    if not seeds or any(s < 0 for s in seeds):
        raise OptionError("seeds", f"expected non-negative integers like 0,1,2 or 0-4, got {text!r}")
    return sorted(set(seeds))


def build_parser(prog: str = "python -m benchmarks.run") -> argparse.ArgumentParser:
    p = _Parser(prog=prog, description=DESCRIPTION)
    add_run_arguments(p)
    return p


DESCRIPTION = "Run an EPLB benchmark suite."


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    """The runner's options, on its own parser and on ``eplb bench run`` alike (torch-free)."""
    p.add_argument("--suite", required=True,
                   help="suite name (tiny, ci, full, dynamics, dynamics-tiny, windows, windows-tiny)")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--solvers", help="comma-separated solver names, or your planners as FILE.py:NAME "
                   "or module:NAME (default: every available one)")
    p.add_argument("--time-limit", type=float, help="seconds, for solvers with a time_limit option")
    p.add_argument("--seeds", help="workload seeds, e.g. 0,1,2 or 0-4 (default: the suite's)")
    p.add_argument("--jobs", type=int, default=1, help="parallel jobs (default 1)")
    p.add_argument("--threads", type=int, default=1, help="torch threads per job (default 1)")
    p.add_argument("--executor", default="local", help="local (default), dask or ray")
    p.add_argument("--address", help="scheduler address for dask (tcp://host:8786) or ray (host:6379, auto)")
    p.add_argument("--resume", action="store_true", help="continue the run already in --out")
    p.add_argument("--overwrite", action="store_true", help="replace the results already in --out")
    p.add_argument("--fail-if-gap-above", type=float, metavar="X",
                   help="exit 1 if any run's mean gap to the best bound exceeds X (fraction)")
    p.add_argument("--figure", default="auto", choices=("auto", "png", "html", "none"),
                   help="performance profile: PNG via chromium, HTML, or none (default auto: PNG, else HTML)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
