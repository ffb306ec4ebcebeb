"""PuLP MILP formulation of the exact models, solved by HiGHS (highspy) or CBC.

Same variables and constraints as :mod:`solvers.exact.cpsat` (see :mod:`.model`), with
the float coefficients ``w_e / c`` directly, in scaled units (:mod:`.scaling`: each
layer's reference load near ``SCALED_LOAD_TARGET``, so the backends' absolute tolerances
mean the same at every scale of the caller's loads). PuLP's own status is not trusted for
optimality: on a time limit it reports ``status == 1`` ("Optimal") even when nothing is
proven, so we read ``sol_status`` (1 = proven optimal, 2 = feasible) and the backend's
own bound:

- HiGHS: ``mip_dual_bound`` from its API (full precision);
- CBC: its log prints the bound rounded (``Lower bound: 180.281``); we take the most
  precise figure it prints (``best possible 180.28088``) and discount one unit of its
  last printed digit, so the rounding can never lift it above the true bound;
- when the backend proves optimality with relative gap ``gap``, ``objective * (1 - gap)``.

Every bound is then taken down by the backend's feasibility tolerance
(``MIP_BOUND_ABS_DISCOUNT``, ``MIP_BOUND_REL_DISCOUNT`` in :mod:`solvers.tolerances`).
CBC runs as a child process tied to ours (:mod:`solvers.childproc`): it dies with us.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import os
import re

import numpy as np

from ..clock import TimeUp, check_deadline, clock
from ..tolerances import MIP_BOUND_ABS_DISCOUNT, MIP_BOUND_REL_DISCOUNT
from ..childproc import scratch_dir
from .. import backends
from ..backends import cbc_command
from .budget import NOT_BUILT, handover_seconds, presolve_seconds
from .model import LayerModel, LayerResult, canonical_gpu_order
from .scaling import solve_scaled


def layer_solver(backend: str):
    """solve_layer(lm, time_limit=, threads=, seed=, gap=) for ``backend`` ("highs" or "cbc"), in scaled units."""
    return functools.partial(solve_scaled, _solve, backend=backend)


def _round_down(b: float | None) -> float | None:
    """A backend's bound (scaled units) less its feasibility tolerance; never negative."""
    if b is None or not math.isfinite(b):
        return None
    # Loads are >= 0, so 0 is always a valid bound: never hand back a negative one.
    return max(0.0, b - MIP_BOUND_ABS_DISCOUNT - MIP_BOUND_REL_DISCOUNT * abs(b))


def _variable_factory(prob):
    """prob.add_variable (PuLP >= 3.3, the 4.0 API) or the older LpVariable constructor."""
    import pulp

    if hasattr(prob, "add_variable"):
        return lambda name, lo, hi, cat: prob.add_variable(name, lo, hi, cat)
    return lambda name, lo, hi, cat: pulp.LpVariable(name, lo, hi, cat)


def _build(lm: LayerModel, deadline: float | None = None):
    """The PuLP problem, its variables, and a complete warm-start assignment (or None).
    Raises :class:`~solvers.clock.TimeUp` once ``deadline`` (a :func:`clock` time) is passed:
    the model is built expert by expert and the clock read between them."""
    import pulp

    # data
    E, P, R, w, cand = lm.num_experts, lm.num_gpus, lm.num_replicas, lm.w, lm.cand
    speed = lm.speed.tolist()
    prob = pulp.LpProblem("eplb", pulp.LpMinimize)
    t_hi = lm.ub * (1 + 1e-9) + 1e-12 if lm.ub is not None else None
    # T's domain: [best combinatorial bound, warm start's value]; the replication model's T
    # is the heaviest replica, bounded below by every expert at its largest count.
    t_lo = max(w[e] / cand[e][-1] for e in range(E)) if lm.replication_only else lm.lb
    # variables: T, counts y, placement z
    var = _variable_factory(prob)
    T = var("T", t_lo * (1 - 1e-12), t_hi, "Continuous")
    prob += T
    y = {(e, c): var(f"y_{e}_{c}", 0, 1, "Binary") for e in range(E) for c in cand[e] if len(cand[e]) > 1}

    def yv(e, c):
        return y[e, c] if (e, c) in y else 1

    # constraints
    for e in range(E):
        if len(cand[e]) > 1:
            prob += pulp.lpSum(y[e, c] for c in cand[e]) == 1
    prob += pulp.lpSum(c * yv(e, c) for e in range(E) for c in cand[e]) == R
    fastest = max(speed)
    for e in range(E):               # a GPU (the fastest at best) carries at least its heaviest replica
        if lm.replication_only or len(cand[e]) > 1:
            prob += pulp.lpSum((w[e] / (c * fastest)) * yv(e, c) for c in cand[e]) <= T
    if lm.replication_only:
        return prob, {"T": T, "y": y}, None

    z = {}
    for e in range(E):
        check_deadline(deadline)
        z.update({(e, c, g): var(f"z_{e}_{c}_{g}", 0, lm.max_per_gpu(c, g), "Integer")
                  for c in cand[e] for g in range(P)})
    for e in range(E):
        check_deadline(deadline)
        for c in cand[e]:
            prob += pulp.lpSum(z[e, c, g] for g in range(P)) == c * yv(e, c)
        if lm.forbid:
            for g in range(P):
                prob += pulp.lpSum(z[e, c, g] for c in cand[e]) <= 1
    load = []
    for g in range(P):
        check_deadline(deadline)
        prob += pulp.lpSum(z[e, c, g] for e in range(E) for c in cand[e]) == int(lm.slots[g])
        lg = pulp.LpAffineExpression([(z[e, c, g], w[e] / (c * speed[g])) for e in range(E) for c in cand[e]])
        prob += lg <= T
        load.append(lg)
    for members in lm.classes():                         # ordered times of interchangeable GPUs
        for a, b in zip(members, members[1:]):
            prob += load[a] - load[b] >= 0
    a, gpn, N = {}, lm.gpus_per_node, lm.num_nodes
    if lm.hierarchical:
        G = lm.num_groups
        a = {(k, n): var(f"a_{k}_{n}", 0, 1, "Binary") for k in range(G) for n in range(N)}
        for k in range(G):
            prob += pulp.lpSum(a[k, n] for n in range(N)) == 1
        if lm.node_budget == "fixed":
            for n in range(N):
                prob += pulp.lpSum(a[k, n] for k in range(G)) == G // N
        for (e, c, g), v in z.items():
            prob += v <= lm.max_per_gpu(c, g) * a[e // lm.group_size, g // gpn]
        node = [pulp.lpSum(load[n * gpn:(n + 1) * gpn]) for n in range(N)]
        for n in range(N):
            prob += node[n] <= gpn * T                   # node-level bound inside the LP
        for n in range(N - 1):
            prob += node[n] - node[n + 1] >= 0
    variables = {"T": T, "y": y, "z": z, "a": a}
    warm = None
    if lm.warm is not None:                              # complete, consistent with the order
        per = w / lm.warm_counts
        perm = canonical_gpu_order(per @ lm.warm / lm.speed, lm)
        xg = lm.warm[:, perm]
        warm = {T.name: float((per @ xg / lm.speed[perm]).max())}
        for (e, c), v in y.items():
            warm[v.name] = float(c == lm.warm_counts[e])
        for (e, c, g), v in z.items():
            warm[v.name] = float(xg[e, g]) if c == lm.warm_counts[e] else 0.0
        for (k, n), v in a.items():
            members = slice(k * lm.group_size, (k + 1) * lm.group_size)
            warm[v.name] = float(xg[members, n * gpn:(n + 1) * gpn].sum() > 0)
        warm[T.name] = min(warm[T.name], t_hi) if t_hi is not None else warm[T.name]
    return prob, variables, warm


@dataclasses.dataclass
class PulpRun:
    """What a backend said about one PuLP problem: status "optimal" | "feasible" |
    "time_limit" | "infeasible" | "error", its bound (already taken down by the backend's
    tolerance; None when it gave none), whether the variables hold a solution, its message."""
    status: str
    bound: float | None
    has_solution: bool
    message: str


def run_pulp(prob, warm: dict | None, *, backend: str, time_limit: float, threads: int, seed: int, gap: float,
             started: float, presolve_off: bool = False) -> PulpRun:
    """Solve ``prob`` with ``backend`` within ``time_limit`` seconds counted from ``started``
    (model building included); ``warm``: variable name -> value, or None."""
    import pulp

    left = max(0.05, time_limit - (clock() - started))
    if backend == "highs":
        solver = _highs_class()(msg=False, timeLimit=left, gapRel=gap, threads=threads,
                                random_seed=seed, mip_abs_gap=0.0, warm=warm,
                                presolve_off=presolve_off, deadline=started + time_limit)
        prob.solve(solver)
        bound = solver.dual_bound
        timed_out = solver.timed_out
        backend_msg = f"HiGHS: {solver.model_status}"
        if solver.failed:
            return PulpRun("error", None, False, backend_msg)
    else:
        for var in prob.variables():
            if warm is not None and var.name in warm:
                var.setInitialValue(warm[var.name])
        with scratch_dir() as tmp:
            log = os.path.join(tmp, "cbc.log")
            # CBC's limit is what is left once PuLP has written the model, less a margin for
            # CBC's own overshoot (backends.cbc_command), so the whole solve ends within it.
            solver = cbc_command(deadline=started + time_limit, msg=False, gapRel=gap,
                                 threads=threads, warmStart=warm is not None, logPath=log,
                                 options=[f"randomCbcSeed {seed + 1}", "allowableGap 0"])
            solver.tmpDir = tmp          # PuLP's .mps/.mst/.sol files: in our scratch directory
            try:
                prob.solve(solver)
            except pulp.PulpSolverError as exc:
                # CBC stopped by its clock before writing any solution file.
                st = "time_limit" if clock() - started >= 0.8 * time_limit else "error"
                return PulpRun(st, None, False, f"CBC: {str(exc).splitlines()[0][:200]}")
            text = open(log).read() if os.path.exists(log) else ""
        bound, timed_out, backend_msg = _cbc_log(text)
        # PuLP reads CBC's "Stopped on time" without a solution as "Not Solved".
        timed_out = timed_out or (prob.status == pulp.LpStatusNotSolved
                                  and clock() - started >= 0.8 * time_limit)
    sol = prob.sol_status
    if prob.status == pulp.LpStatusInfeasible:
        return PulpRun("infeasible", None, False, backend_msg)
    if sol not in (pulp.LpSolutionOptimal, pulp.LpSolutionIntegerFeasible):
        # Only a real timeout is "time_limit": PuLP also maps HiGHS' kNotset / kSolveError /
        # kModelError / kPresolveError to "Not Solved".
        return PulpRun("time_limit" if timed_out else "error", _round_down(bound), False, backend_msg)
    if sol == pulp.LpSolutionOptimal:
        # Proven within the relative gap: obj - bound <= gap * obj. HiGHS leaves
        # mip_dual_bound at 0 when presolve alone solves the model, so take the better.
        # CBC's solution file prints the objective to ~8 significant digits.
        obj = pulp.value(prob.objective)
        proven = obj - gap * abs(obj)
        if backend == "cbc":
            proven -= CBC_PRINT_RTOL * abs(obj)
        bound = proven if bound is None else max(bound, proven)
        return PulpRun("optimal", _round_down(bound), True, backend_msg)
    return PulpRun("time_limit" if timed_out else "feasible", _round_down(bound), True, backend_msg)


def _solve(lm: LayerModel, *, backend: str, time_limit: float, threads: int, seed: int, gap: float,
           deadline: float | None = None) -> LayerResult:
    """One layer; ``time_limit`` counts from now, model building included; the model must be
    built (and handed to the backend) by ``deadline`` (a :func:`clock` time), else the layer
    has no solution and says so (the driver keeps its warm start)."""
    start = clock()
    try:
        prob, v, warm = _build(lm, deadline)
        # the hand-over to the backend (and CBC's start) cannot be interrupted: it must fit
        check_deadline(None if deadline is None else deadline - handover_seconds(lm, backend))
    except TimeUp:
        return LayerResult("time_limit", message=NOT_BUILT, stats={"not_built": True, "build_s": clock() - start})
    stats = {"variables": len(prob.variables()), "constraints": prob.numConstraints(),
             "build_s": clock() - start}
    # HiGHS's presolve checks its clock only between passes (4 s on 18,000 columns against a
    # 2 s limit): off when its estimate would not leave most of the time to the search.
    presolve_off = backend == "highs" and presolve_seconds(lm) > 0.3 * (time_limit - stats["build_s"])
    stats["presolve"] = not presolve_off
    out = run_pulp(prob, warm, backend=backend, time_limit=time_limit, threads=threads, seed=seed, gap=gap,
                   started=start, presolve_off=presolve_off)
    stats["solve_s"] = clock() - start - stats["build_s"]
    st, bound = out.status, out.bound
    if not out.has_solution:
        return LayerResult(st, bound=bound, stats=stats, message=out.message)
    T = v["T"].varValue
    if lm.replication_only:
        counts = np.array([lm.cand[e][0] if len(lm.cand[e]) == 1 else
                           max(lm.cand[e], key=lambda c: v["y"][e, c].varValue) for e in range(lm.num_experts)])
        return LayerResult(st, counts=counts, bound=bound, objective=T, stats=stats, message=out.message)
    xg = np.zeros((lm.num_experts, lm.num_gpus), dtype=np.int64)
    for (e, c, g), var in v["z"].items():
        xg[e, g] += int(round(var.varValue or 0.0))
    if (xg.sum(0) != lm.slots).any():
        return LayerResult("error", stats=stats, message=f"{backend}: solution with fractional replica counts")
    return LayerResult(st, xg=xg, bound=bound, objective=T, stats=stats, message=out.message)


_CBC_BOUND = re.compile(r"^Lower bound:\s*([-+0-9.eE]+)", re.M)
_CBC_BEST_POSSIBLE = re.compile(r"best possible ([-+0-9.eE]+)")
_CBC_RESULT = re.compile(r"^Result - (.*)$", re.M)

# Relative precision of figures CBC prints with 8 significant digits (solution file).
CBC_PRINT_RTOL = 1e-7


def printed_floor(text: str) -> float:
    """A number CBC printed rounded, taken down by one unit of its last printed digit.

    "180.281" -> 180.280; "1.2e-05" -> 1.1e-05: the true value is within half a unit.
    """
    mantissa, _, exponent = text.lower().partition("e")
    decimals = len(mantissa.partition(".")[2])
    unit = 10.0 ** (-decimals + (int(exponent) if exponent else 0))
    return float(text) - unit


def _cbc_log(text: str) -> tuple[float | None, bool, str]:
    """(proven bound, stopped on time, result line) from CBC's log.

    CBC prints its final bound with 3 decimals and progress lines ("best possible") with
    more; both are rounded, so each is floored by one printed unit and the larger kept.
    On "Optimal" the caller derives the bound from the objective instead.
    """
    result = _CBC_RESULT.search(text)
    line = result.group(1).strip() if result else "no result line in CBC log"
    printed = [m.group(1) for m in _CBC_BOUND.finditer(text)]
    progress = _CBC_BEST_POSSIBLE.findall(text)
    if progress:                                  # the last progress line is the final bound
        printed.append(progress[-1])
    # CBC prints 1e+50 (or more) for "no bound yet"
    figures = []
    for t in printed:
        try:
            value = float(t)
        except ValueError:
            continue
        if math.isfinite(value) and abs(value) < 1e30:
            figures.append(printed_floor(t))
    bound = max(figures) if figures else None
    return bound, "time" in line.lower(), line


@contextlib.contextmanager
def _quiet_stdout():
    """Silence C-level stdout (file descriptor 1) for the duration of a backend call."""
    import sys
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 1)
            yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


@functools.cache
def _highs_class():
    """pulp.HiGHS with a warm start (highspy.setSolution) and mip_dual_bound read back (made once)."""
    backends.highs_available()          # imports OR-Tools before highspy (see backends)
    import highspy
    import pulp

    class WarmHiGHS(pulp.HiGHS):
        def __init__(self, *, warm=None, presolve_off=False, deadline=None, **kwargs):
            super().__init__(**kwargs)
            self.warm = warm
            self.presolve_off = presolve_off
            self.deadline = deadline          # a clock() time: the limit is what is left at run()
            self.dual_bound = None
            self.timed_out = False
            self.failed = False
            self.run_time = 0.0
            self.model_status = ""

        def buildSolverModel(self, lp):
            """PuLP's HiGHS hand-over, in a few array calls (PuLP's own calls HiGHS once per
            column and row: 3 s for 18,000 columns, 2 s of it marking integers one by one)."""
            inf = highspy.kHighsInf
            h = lp.solverModel
            cols = lp.variables()
            for i, v in enumerate(cols):
                v.index = i
            n = len(cols)
            lo = np.array([-inf if v.lowBound is None else v.lowBound for v in cols], dtype=np.float64)
            hi = np.array([inf if v.upBound is None else v.upBound for v in cols], dtype=np.float64)
            sign = -1.0 if lp.sense == pulp.LpMaximize else 1.0
            h.addVars(n, lo, hi)
            cost = [(v.index, sign * c) for v, c in lp.objective.items() if c]
            if cost:
                h.changeColsCost(len(cost), np.array([i for i, _ in cost], dtype=np.int32),
                                 np.array([c for _, c in cost], dtype=np.float64))
            ints = np.array([v.index for v in cols if v.cat == pulp.LpInteger], dtype=np.int32)
            if len(ints) and self.mip:
                h.changeColsIntegrality(len(ints), ints,
                                        np.full(len(ints), int(highspy.HighsVarType.kInteger), dtype=np.uint8))
            rows = list(lp._constraints.values())
            starts, index, value, rlo, rhi = [0], [], [], [], []
            for i, con in enumerate(rows):
                con.index = i
                for v, c in con.items():
                    if c != 0:
                        index.append(v.index)
                        value.append(c)
                starts.append(len(index))
                lb, ub = con.getLb(), con.getUb()
                rlo.append(-inf if lb is None else lb)
                rhi.append(inf if ub is None else ub)
            if rows:
                h.addRows(len(rows), np.array(rlo, dtype=np.float64), np.array(rhi, dtype=np.float64), len(index),
                          np.array(starts[:-1], dtype=np.int32), np.array(index, dtype=np.int32),
                          np.array(value, dtype=np.float64))

        def callSolver(self, lp):
            h = lp.solverModel
            if self.presolve_off:
                h.setOptionValue("presolve", "off")
            if self.deadline is not None:         # the hand-over took its share: HiGHS gets the rest
                h.setOptionValue("time_limit", max(0.05, float(self.deadline - clock())))
            if self.warm is not None:
                sol = highspy.HighsSolution()
                sol.col_value = [float(self.warm.get(var.name, 0.0)) for var in lp.variables()]
                sol.value_valid = True
                h.setSolution(sol)
            backends.prepare_highs_scheduler(int(self.threads or 0))
            with _quiet_stdout():          # HiGHS 1.12 prints a debug line on warm solutions
                run_status = h.run()
            status = h.getModelStatus()
            self.model_status = h.modelStatusToString(status)
            self.run_time = float(h.getRunTime())
            self.timed_out = status == highspy.HighsModelStatus.kTimeLimit
            if status in (highspy.HighsModelStatus.kNotset, highspy.HighsModelStatus.kSolveError,
                          highspy.HighsModelStatus.kModelError, highspy.HighsModelStatus.kPresolveError,
                          highspy.HighsModelStatus.kPostsolveError, highspy.HighsModelStatus.kLoadError,
                          highspy.HighsModelStatus.kMemoryLimit):
                self.failed = True
                ran = getattr(run_status, "name", run_status)
                self.model_status += f" (run returned {ran} after {self.run_time:.2f} s)"
            b = h.getInfo().mip_dual_bound
            self.dual_bound = float(b) if b is not None and math.isfinite(b) else None

    return WarmHiGHS
