"""Run a benchmark suite: ``eplb bench run --suite NAME --out DIR [...]`` (from a checkout also
``python -m benchmarks.run ...``).

    --solvers a,b        only these registered solvers (default: every available one the suite runs)
    --time-limit S       time limit passed to solvers with a ``time_limit`` option
    --seeds 0,1,2        workload seeds (default: the suite's); ranges like 0-4 work too
    --jobs K             parallel jobs (one per core when timings matter; default 1)
    --threads T          torch threads per job (default 1)
    --executor local|dask|ray  [--address ADDR]
    --resume             keep the rows already in DIR and run only the missing ones
    --overwrite          replace the results already in DIR (default: refuse)
    --fail-if-gap-above X  exit 1 if any run's mean gap to the best bound exceeds X (0.05 = 5%)
    --figure auto|png|html|none  the performance-profile figure (auto: PNG via chromium, else HTML)

Appends each row to DIR/results.csv as it arrives (fsync'ed: a killed run loses at most the
rows in flight) and writes DIR/results.parquet, DIR/meta.json, DIR/summary.md and
DIR/profile.png (or profile.html) when the run ends. Exits 1 when the gate fails: a plan is invalid, an
objective is below a proven lower bound, a solver crashed, or a gap exceeds the threshold;
2 on bad input (one line on stderr).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import subprocess
import sys
import time
from concurrent.futures.process import BrokenProcessPool
from importlib import metadata
from pathlib import Path
from typing import Any, Sequence

from solvers.errors import EPLBError, OptionError
from solvers.safewrite import write_text_atomic

from .analysis import derive
from .arguments import build_parser, parse_seeds
from .dynamics_report import split_dynamics
from .executors import check_executor, run_tasks
from .report import summary_text, write_profile
from .store import META_NAME, SUMMARY_NAME, ResultStore, write_json
from .suites import get_suite
from .tasks import HARD_FAILURES, suite_tasks

EXIT_GATE, EXIT_USAGE = 1, 2
VERSIONED = ("torch", "numpy", "pandas", "pyarrow", "ortools", "pulp", "highspy", "plotly", "kaleido",
             "dask", "distributed", "ray", "eplb-workbench")


# torch's OpenMP aborts the process (libgomp) when asked for absurd thread counts.
MAX_THREADS = 256


def _git() -> dict[str, Any]:
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=Path(__file__).resolve().parents[2], capture_output=True,
                              text=True, timeout=10).stdout.strip()

    try:
        commit, dirty = git("rev-parse", "HEAD"), git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return {"commit": "unknown"}
    return {"commit": commit or "unknown", "dirty": bool(dirty)}


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in VERSIONED:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return out


def _machine() -> dict[str, Any]:
    cpus = os.cpu_count()
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    cpu_model = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"host": platform.node(), "platform": platform.platform(), "cpu": cpu_model, "cpus": cpus,
            "load_average_at_start": load,
            "summary": f"{cpu_model or platform.machine()}, {cpus} CPUs, {platform.system()}"}


def kept_from(previous: dict[str, Any], rows: int) -> list[dict[str, Any]]:
    """Where the ``rows`` a resumed run keeps were made: the previous run (commit, machine,
    command, when it finished) and, before it, what that run had kept itself. A summary of
    a resumed run names them, so no row is credited to a commit or machine that did not run it."""
    git, machine = previous.get("git") or {}, previous.get("machine") or {}
    here = {"rows": rows, "commit": git.get("commit"), "dirty": git.get("dirty"),
            "machine": machine.get("summary"), "command": (previous.get("settings") or {}).get("command"),
            "started": previous.get("started"), "finished": previous.get("finished")}
    older = previous.get("kept_from")
    return [here] + (older if isinstance(older, list) else [])


def run_parsed(args: argparse.Namespace, prog: str, argv: Sequence[str] | None = None) -> int:
    """Run the suite ``args`` name (parsed by a parser with :func:`add_run_arguments`); argv is
    recorded as the command line (default: sys.argv)."""

    suite = get_suite(args.suite)
    solvers = [s.strip() for s in args.solvers.split(",") if s.strip()] if args.solvers else None
    if solvers is not None and not solvers:
        raise OptionError("solvers", "expected comma-separated solver names")
    if args.time_limit is not None and not (args.time_limit > 0):
        raise OptionError("time_limit", f"must be > 0 seconds, got {args.time_limit}")
    if not 1 <= args.threads <= MAX_THREADS:
        raise OptionError("threads", f"must be in [1, {MAX_THREADS}], got {args.threads}")
    if args.fail_if_gap_above is not None and not (args.fail_if_gap_above >= 0):
        raise OptionError("fail_if_gap_above", f"must be >= 0, got {args.fail_if_gap_above}")
    check_executor(args.executor, args.address, args.jobs)
    seeds = parse_seeds(args.seeds) if args.seeds else None
    tasks = suite_tasks(suite, solvers=solvers, time_limit=args.time_limit, seeds=seeds, threads=args.threads)

    previous = None
    if args.resume:
        # the meta of the run a --resume continues (none when unreadable: the rows are the
        # record, the meta only says where they came from)
        try:
            previous = json.loads((Path(args.out) / META_NAME).read_text())
        except (OSError, ValueError):
            pass
    store = ResultStore(args.out, resume=args.resume, overwrite=args.overwrite)
    done = store.done_keys()
    todo = [t for t in tasks if t.key not in done]
    out = store.dir
    meta: dict[str, Any] = {
        "settings": {"suite": suite.name, "description": suite.description, "solvers": solvers,
                     "time_limit": args.time_limit, "seeds": seeds or list(suite.seeds), "jobs": args.jobs,
                     "threads": args.threads, "executor": args.executor, "address": args.address,
                     "resume": args.resume, "fail_if_gap_above": args.fail_if_gap_above,
                     "tasks": len(tasks), "skipped_done": len(tasks) - len(todo),
                     "command": " ".join([prog, *(argv if argv is not None else sys.argv[1:])])},
        "versions": _versions(), "git": _git(), "machine": _machine(),
        "started": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), "finished": None,
    }
    if isinstance(previous, dict) and store.rows:
        meta["kept_from"] = kept_from(previous, len(store.rows))
    write_json(out / META_NAME, meta)
    if args.executor == "local" and args.jobs * args.threads > (os.cpu_count() or 1):
        print(f"note: {args.jobs} jobs x {args.threads} threads exceed the {os.cpu_count()} CPUs here: "
              "wall times will be inflated", file=sys.stderr)
    print(f"suite {suite.name}: {len(tasks)} tasks, {len(tasks) - len(todo)} already done, "
          f"running {len(todo)} on {args.executor} with {args.jobs} job(s) -> {out}", file=sys.stderr)

    from tqdm import tqdm

    start = time.perf_counter()
    bar = tqdm(total=len(todo), unit="run", disable=True if args.no_progress else None, file=sys.stderr)
    try:
        for row in run_tasks(todo, args.executor, jobs=args.jobs, address=args.address, threads=args.threads):
            store.append(row)
            bar.update(1)
            bar.set_postfix_str(f"{row['solver']} {row.get('termination')}", refresh=False)
            if row.get("termination") in HARD_FAILURES:
                msg = f"HARD FAILURE {row['termination']}: {row['solver']} on {row['instance']} seed {row['seed']}: {row.get('message')}"
                tqdm.write(msg, file=sys.stderr)
    except KeyboardInterrupt:
        bar.close()
        print(f"interrupted: {len(store.rows)} rows kept in {out}; continue with --resume", file=sys.stderr)
        return 130
    except BrokenProcessPool:
        # a worker was killed (OOM killer, kill -9): the rows so far are on disk
        bar.close()
        print(f"eplb: error: a benchmark worker process died; {len(store.rows)} rows kept in {out}; "
              f"continue with --resume", file=sys.stderr)
        return 1
    finally:
        bar.close()

    df, violations = derive(store.frame())
    store.write_final(df)
    # every stored hard failure, this invocation's and those of a run it resumed
    stored = df[df["termination"].isin(HARD_FAILURES)]
    violations = [f"HARD FAILURE {r.termination}: {r.solver} on {r.instance} seed {r.seed}: {r.message}"
                  for r in stored.itertuples()] + violations
    # solver rows get the solver tables and profiles; replays of the dynamics suite their own table
    figure = write_profile(split_dynamics(df)[0], out, args.figure)
    meta.update(finished=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                elapsed_s=round(time.perf_counter() - start, 3), rows=len(df), figure=figure.name if figure else None)
    write_json(out / META_NAME, meta)
    write_text_atomic(out / SUMMARY_NAME, summary_text(df, meta, violations, figure))

    failures = list(violations)
    crashed = df[df["termination"].isin(["error", "bad_input"])]
    failures += [f"{r.solver} on {r.instance} seed {r.seed}: {r.termination}: {r.message}" for r in crashed.itertuples()]
    if args.fail_if_gap_above is not None:
        over = df[df["gap_mean"] > args.fail_if_gap_above]
        failures += [f"{r.solver} on {r.instance} seed {r.seed}: gap {100 * r.gap_mean:.3f}% > "
                     f"{100 * args.fail_if_gap_above:.3f}%" for r in over.itertuples()]
    print(f"wrote {out / SUMMARY_NAME} ({len(df)} rows, {meta['elapsed_s']:.1f} s)", file=sys.stderr)
    if failures:
        print(f"benchmark gate FAILED ({len(failures)}):", file=sys.stderr)
        for f in failures[:50]:
            print(f"  {f}", file=sys.stderr)
        return EXIT_GATE
    return 0


def _terminate(signum, frame):  # noqa: ARG001  SIGTERM ends a run like Ctrl-C: rows kept, workers stopped
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None, prog: str = "python -m benchmarks.run",
         args: argparse.Namespace | None = None) -> int:
    """The runner's command line; ``args`` already parsed (``eplb bench run``) skips parsing."""
    import signal
    import threading

    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        return run_parsed(build_parser(prog).parse_args(argv) if args is None else args, prog, argv)
    except (EPLBError, OSError) as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(main())
