"""What the measurement scripts print around their numbers: the machine's load, a markdown
table, and the verdict on the targets (their exit status); and, as
``python -m benchmarks.report RESULTS_DIR``, a stored benchmark run's summary.md re-rendered."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def load() -> str:
    """The one-minute load average (timings beside it are only as quiet as it)."""
    return f"{os.getloadavg()[0]:.2f}" if hasattr(os, "getloadavg") else "n/a"


def table(title: str, header: list[str], rows: list[list]) -> None:
    """A titled markdown table, cells as ``str`` gives them."""
    print(f"\n## {title}\n")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for r in rows:
        print("| " + " | ".join(str(c) for c in r) + " |")


def verdict(failures: list[str], *, summary: bool = True) -> int:
    """Print each missed target as ``FAIL ...`` (and, with ``summary``, a closing line); the
    script's exit status: 1 when a target was missed."""
    for f in failures:
        print("FAIL", f)
    if summary:
        print("all targets met" if not failures else f"{len(failures)} target(s) missed")
    return 1 if failures else 0


def rerender(directory: str | Path, figure: str = "auto") -> Path:
    """Re-derive the gaps of a stored run and rewrite its summary.md and figure (e.g. after
    changing the report, or after adding rows with --resume from another machine)."""
    from solvers.bench.analysis import derive
    from solvers.bench.dynamics_report import split_dynamics
    from solvers.bench.report import summary_text, write_profile
    from solvers.bench.store import META_NAME, SUMMARY_NAME, read_results
    from solvers.safewrite import write_text_atomic

    d = Path(directory)
    df, violations = derive(read_results(d))
    meta_path = d / META_NAME
    meta = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
    fig = write_profile(split_dynamics(df)[0], d, figure)
    out = d / SUMMARY_NAME
    write_text_atomic(out, summary_text(df, meta, violations, fig))
    return out


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m benchmarks.report RESULTS_DIR")
    print(rerender(sys.argv[1]))
