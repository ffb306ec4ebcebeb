"""The work model against the clock: each solver's estimated seconds (``solvers.work``,
declared at its registration) beside the measured wall time of ``solve`` over a grid of
shapes, and the coefficients a fit of the measurements gives.

For every solver (``--solvers``, default all available) and every shape of the grid
(layers x experts / slots / GPUs, global policy, lognormal token counts; T steps of a
window for the solvers that take a history), one ``solve`` after a warm-up: predicted
seconds (the model's estimate plus the time limit for solvers that have one, run at
``--time-limit``), measured seconds, their ratio. A solver's grid stops at shapes at least
as large, in every size, as one that took longer than ``--max-seconds``; a solve past twice
that is stopped and printed as "cut" (a lower bound, not fitted). Shapes a solver refuses (its work cap, or its own rules)
print why.

``--fit``: the upper envelope of the measurements on the solver's terms (a linear program:
no measured shape above its prediction, the least over-prediction relative to the
measurements): the coefficients to declare at its registration. The rows are also
written to ``--out`` (CSV) when given.

Timings depend on the machine and its load: the reference is 2 cores; the load average is
printed with every row, so that a noisy run can be told apart.

    python -m benchmarks.work_model [--solvers kk_swap,joint] [--max-seconds 20] [--fit]
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import signal
import time
import warnings

import numpy as np
import torch
from scipy.optimize import linprog

import solvers.work
from solvers import Problem, solve
from solvers.errors import EPLBError
from solvers.registry import get_solver, solver_names, work_shape
from solvers.routing.trace import RoutingTrace

# (layers, experts, slots, GPUs): S = slots / GPUs from 2 to 2048; each term of the
# vocabulary varies by an order of magnitude or more across them.
GRID: tuple[tuple[int, int, int, int], ...] = (
    (1, 32, 64, 2), (8, 32, 64, 2), (58, 256, 288, 32), (512, 256, 288, 32), (128, 64, 128, 8),
    (8, 256, 512, 64), (8, 256, 2048, 64), (2, 32, 512, 2), (8, 64, 2048, 8), (16, 256, 4096, 16),
    (2, 32, 2048, 2), (58, 256, 16384, 64), (2, 32, 4096, 2), (4, 256, 1024, 4), (2, 32, 16384, 2),
)
WINDOW_STEPS = (4, 16)   # T, for the solvers that take a history (each shape twice)

# Options that scale a term (steps, rounds, ...): each solver also runs with these values on
# the first VARIANT_SHAPES shapes, so that the fit can tell the option's term from the others.
VARIANTS: dict[str, tuple[dict, ...]] = {
    "kk_swap": ({"steps": 64}, {"steps": 1}), "joint": ({"rounds": 128}, {"steps": 64}),
    "survivable": ({"steps": 100},), "robust_sum": ({"steps": 8}, {"steps": 256}),
    "robust_max": ({"steps": 8}, {"steps": 256}), "risk_aware": ({"steps": 8}, {"steps": 256}),
    "traffic_aware": ({"iterations": 48},),
}
VARIANT_SHAPES = 8


def loads(layers: int, experts: int, seed: int = 0, steps: int | None = None) -> torch.Tensor:
    """Lognormal token counts (integers: the scenario model needs them), [L, E] or [T, L, E]."""
    g = torch.Generator().manual_seed(seed)
    shape = (layers, experts) if steps is None else (steps, layers, experts)
    return torch.round(torch.exp(torch.randn(*shape, generator=g)) * 100) + 1


def inputs(solver: str, shape: tuple[int, int, int, int], steps: int | None
           ) -> tuple[Problem, dict]:
    L, E, R, P = shape
    spec = get_solver(solver)
    opts: dict = {}
    if steps is not None:
        hist = loads(L, E, steps=steps)
        opts["history"] = hist
        w = hist.mean(0)
    else:
        w = loads(L, E)
    if "routing" in spec.options:
        g = torch.Generator().manual_seed(0)
        ids = torch.rand(L, 1024, E, generator=g).argsort(-1)[..., :min(8, E)].to(torch.int32)
        opts["routing"] = RoutingTrace(ids, E)
    return Problem(w, R, 1, 1, P), opts


def time_limit_of(solver: str) -> str | None:
    return next((o.name for o in get_solver(solver).schema if o.role == "time_limit"), None)


class Overrun(BaseException):
    """A measurement cut at ``--max-seconds`` x 2 (SIGALRM, raised between torch kernels; a
    BaseException, so that the grader's "a backend crash is a result" does not catch it)."""


def _alarm(signum, frame):
    raise Overrun


def measure(solver: str, problem: Problem, opts: dict, time_limit: float, cut: float
            ) -> tuple[float, float, str]:
    """(predicted s, measured s, note) of one solve; predicted includes the time limit. A
    solve still running after ``cut`` seconds is stopped: measured is then ``cut`` (a
    lower bound on its time) and the note says so."""
    spec = get_solver(solver)
    tl = time_limit_of(solver)
    if tl:
        opts = {**opts, tl: time_limit}
    parsed = spec.parse(opts)
    predicted = spec.estimate(problem, parsed) + (time_limit if tl else 0.0)
    before = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, cut)
    t = time.perf_counter()
    try:
        res = solve(problem, solver, **opts)
        note = str(res.termination)
    except Overrun:
        note = "cut"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, before)
    return predicted, time.perf_counter() - t, note


def _dominates(a: tuple, b: tuple) -> bool:
    return all(x >= y for x, y in zip(a, b))


def run_solver(solver: str, args, writer) -> list[tuple[list[float], float, float]]:
    """Rows (units of each term, measured seconds, seconds not the solver's own terms': its
    time limit and its base solver's estimate) for the fit."""
    spec = get_solver(solver)
    model = spec.work
    takes_history = "history" in spec.options
    tl = time_limit_of(solver)
    tiny, tiny_opts = inputs(solver, (2, 32, 64, 2), 4 if takes_history else None)
    try:
        solve(tiny, solver, **({**tiny_opts, tl: args.time_limit} if tl else tiny_opts))   # warm-up
    except EPLBError:
        pass
    too_long: list[tuple] = []
    rows = []
    grid = GRID if args.grid is None else tuple(tuple(int(x) for x in g.split("x")) for g in args.grid.split(","))
    runs = [] if args.variants_only else [(shape, steps, {}) for shape in grid
                                          for steps in (WINDOW_STEPS if takes_history else (None,))]
    if args.grid is None:
        runs += [(shape, steps, v) for v in VARIANTS.get(solver, ()) for shape in GRID[:VARIANT_SHAPES]
                 for steps in (WINDOW_STEPS[:1] if takes_history else (None,))]
    for shape, steps, variant in runs:
        key = shape + ((steps,) if steps else ()) + tuple(sorted(variant.items()))
        label = (f"{solver:16s} {'x'.join(map(str, shape)):>16s}" + (f" T={steps:<3d}" if steps else " " * 6)
                 + "".join(f" {k}={v}" for k, v in variant.items()))
        if any(_dominates(key, k) for k in too_long if len(k) == len(key)):
            continue
        try:
            problem, opts = inputs(solver, shape, steps)
            opts.update(variant)
            predicted, wall, term = measure(solver, problem, opts, args.time_limit, 2 * args.max_seconds)
        except EPLBError as exc:
            print(f"{label} refused: {str(exc)[:110]}", flush=True)
            continue
        load = os.getloadavg()[0]
        print(f"{label} predicted {predicted:9.3f} s  measured {wall:9.3f} s  ratio {predicted / wall:6.2f}  "
              f"({term}, load {load:.1f})", flush=True)
        if wall > args.max_seconds:
            too_long.append(key)
        if term in ("cut", "error"):
            continue            # a lower bound only (or no solve): not a row of the fit
        parsed = spec.parse({**opts, **({tl: args.time_limit} if tl else {})})
        units = model.units(work_shape(problem, parsed), parsed) if model else []
        # the fit is of the solver's own terms: a base solver's estimate (elastic, migration) is its own
        base = spec.estimate(problem, parsed) - (model.seconds(work_shape(problem, parsed), parsed) if model else 0)
        rows.append((units, wall, (args.time_limit if tl else 0.0) + base))
        if writer:
            writer.writerow([solver, *shape, steps or 1, f"{predicted:.6g}", f"{wall:.6g}", f"{load:.2f}", term,
                             json.dumps(variant)])
            args.out_file.flush()          # a run stopped halfway keeps its rows
    return rows


def fit(solver: str, rows: list[tuple[list[float], float, float]]) -> None:
    """The upper envelope: non-negative coefficients for which no measured shape took longer
    than predicted (each row's own terms >= its seconds less its known part: time limit,
    base solver), with the least total over-prediction relative to the measurements (a
    linear program). A cap must not accept what runs past it; the price is over-prediction
    on the shapes the terms describe less well, printed as the ratio range."""
    model = get_solver(solver).work
    if model is None or len(rows) < len(model.terms):
        print(f"{solver}: too few rows to fit ({len(rows)})")
        return
    A = np.array([u for u, _, _ in rows], dtype=np.float64)
    wall = np.array([w for _, w, _ in rows], dtype=np.float64)
    known = np.array([k for _, _, k in rows], dtype=np.float64)
    scale = A.max(0) + (A.max(0) == 0)                                  # columns of order 1 for the solver
    need = np.maximum(wall - known, 0.0)
    res = linprog((A / scale / wall[:, None]).sum(0), A_ub=-A / scale, b_ub=-need, bounds=(0, None),
                  method="highs")
    if not res.success:
        print(f"{solver}: no envelope ({res.message})")
        return
    coef = res.x / scale
    ratio = (A @ coef + known) / wall
    print(f"{solver}: fitted {dict(zip(model.terms, (float(f'{c:.3g}') for c in coef)))}; predicted/measured "
          f"{ratio.min():.2f}..{ratio.max():.2f} (declared: {model.formula})", flush=True)


def refit(path: str, time_limit: float, max_seconds: float) -> None:
    """--fit of the rows of an earlier run's --out CSV (the units recomputed from each shape;
    rows at the cut, 2 x ``max_seconds``, are lower bounds and left out)."""
    by_solver: dict[str, list[tuple[list[float], float, float]]] = {}
    rows_in = []
    for one in path.split(","):
        with open(one, newline="") as fh:
            rows_in += list(csv.DictReader(fh))
    for r in rows_in:
        name = r["solver"]
        if float(r["measured_s"]) >= 2 * max_seconds * 0.99 or r.get("termination") in ("cut", "error"):
            continue
        spec = get_solver(name)
        L, E, R, P, T = (int(r[k]) for k in ("layers", "experts", "slots", "gpus", "steps"))
        problem = Problem(torch.ones(L, E), R, 1, 1, P)
        tl = time_limit_of(name)
        opts = {**({"history": torch.ones(T, L, E)} if "history" in spec.options else {}),
                **({tl: time_limit} if tl else {}), **json.loads(r.get("options") or "{}")}
        parsed = spec.parse(opts)
        shape = work_shape(problem, parsed)
        own = spec.work.seconds(shape, parsed)
        known = (time_limit if tl else 0.0) + spec.estimate(problem, parsed) - own
        by_solver.setdefault(name, []).append((spec.work.units(shape, parsed), float(r["measured_s"]), known))
    for name, rows in by_solver.items():
        fit(name, rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--solvers", default=None, help="comma-separated (default: every available solver)")
    ap.add_argument("--max-seconds", type=float, default=20.0)
    ap.add_argument("--time-limit", type=float, default=0.2, help="for solvers with a time limit")
    ap.add_argument("--fit", action="store_true")
    ap.add_argument("--out", default=None, help="CSV of the rows")
    ap.add_argument("--refit", default=None, metavar="CSV", help="only fit the rows of earlier --out files "
                                                                 "(comma-separated)")
    ap.add_argument("--grid", default=None, metavar="LxExRxP,...", help="these shapes instead of GRID")
    ap.add_argument("--variants-only", action="store_true", help="only the option variants (VARIANTS)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads")
    ap.add_argument("--no-cap", action="store_true", help="lift the work cap (to measure beyond it)")
    args = ap.parse_args(argv)
    if args.no_cap:
        solvers.work.WORK_CAP_SECONDS = float("inf")
    warnings.filterwarnings("ignore")
    # One torch thread: on a shared machine two spinning OpenMP threads per process slow a
    # solve down 10x and more; the coefficients are then per core, which a 2-core run meets.
    torch.set_num_threads(args.threads)
    if args.refit:
        refit(args.refit, args.time_limit, args.max_seconds)
        return 0
    names = args.solvers.split(",") if args.solvers else solver_names(available_only=True)
    fh = open(args.out, "w", newline="") if args.out else None
    writer = csv.writer(fh) if fh else None
    args.out_file = fh
    if writer:
        writer.writerow(["solver", "layers", "experts", "slots", "gpus", "steps", "predicted_s", "measured_s", "load", "termination",
                         "options"])
    try:
        for name in names:
            rows = run_solver(name, args, writer)
            if args.fit:
                fit(name, rows)
    finally:
        if fh:
            fh.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
