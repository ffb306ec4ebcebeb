"""The exact joint model in *time*, for real clusters (per-GPU speeds, uneven slot counts,
failed GPUs): what ``cpsat`` solves when the cluster is not one of identical GPUs.

One layer at a time, CP-SAT, global policy, duplicates allowed (a model of every plan, so
its proven bound is a lower bound). Candidate counts ``c`` per expert, binary ``y[e, c]``,
integer ``z[e, c, g]`` replicas of e (count c) on live GPU g:

- ``sum_g z[e, c, g] = c * y[e, c]``, one count per expert; GPU g holds exactly its
  ``slots[g]`` replicas;
- GPU g's time ``sum q[e, c, g] z[e, c, g] <= T`` with ``q[e, c, g] = floor(scale * w_e /
  (c * s_g))``: floored, so every plan's model time is at most ``scale`` x its true time
  and the proven bound over ``scale`` (rounded down) is a valid lower bound on the true
  optimum; minimise T;
- GPUs of equal speed and slot count are interchangeable: their times are ordered.

Candidate counts are pruned with the warm start's value ``ub``: a replica heavier than
``ub x`` the fastest speed cannot be in a better plan. The warm start is ``kk_swap``'s
plan (the speed-aware heuristic) unless given; its layer is kept where the model finds
nothing better. The plan is re-scored by the shared scorer; nothing here grades it.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch

from ..bounds import lower_bound
from ..clock import clock
from ..errors import OptionError, PlanError
from ..plan import Plan
from ..problem import Problem
from ..registry import SolverOutput, run
from ..result import ModelScope, Termination
from ..tolerances import BOUND_RTOL, SCALED_LOAD_TARGET
from .milp import _variable_factory, run_pulp

# A GPU's time in model units (the best possible time, W / total speed, maps to this).
TIME_UNITS = 1e9


def check_timed_options(problem: Problem, o) -> Plan | None:
    """The warm start (a Plan or None for 'auto'), after the checks of what this model supports."""
    problem.resolve_policy(o.policy)                      # hierarchical raises on a real cluster
    if o.model != "joint":
        raise OptionError("model", "on a cluster with speeds, uneven slots or failed GPUs only the joint model "
                          f"is available, got {o.model!r}")
    if o.colocation == "forbidden":
        most = max(problem.cluster.gpu_slots)
        if most > problem.num_experts:
            raise OptionError("colocation", f"forbidden colocation needs at most {problem.num_experts} slots "
                              f"(the number of experts) on every GPU, one GPU has {most}")
    warm = o.warm_start
    if warm not in (None, "auto") and not isinstance(warm, Plan):
        raise OptionError("warm_start", f"must be 'auto', None or a solvers.Plan, got {type(warm).__name__}")
    if isinstance(warm, Plan):
        try:
            problem.validate_plan(warm.to(problem.device))
        except PlanError as exc:
            raise OptionError("warm_start", f"does not fit the problem: {exc}") from None
        return warm.to("cpu")
    return None


def _xg(p2l: np.ndarray, slot_gpu: np.ndarray, num_experts: int, num_gpus: int) -> np.ndarray:
    """[E, P] replicas of e on GPU g of a phy2log row."""
    xg = np.zeros((num_experts, num_gpus), dtype=np.int64)
    np.add.at(xg, (p2l, slot_gpu), 1)
    return xg


@dataclasses.dataclass
class TimedLayer:
    """One layer of the model in time, on the live GPUs only.

    w: [E] loads; slots, speed: [Q] per live GPU; warm: [E, Q] replicas per GPU of the
    warm start or None; lb: a valid lower bound (true units); forbid: no two replicas of
    an expert on one GPU; cand[e]: the candidate replica counts of expert e."""
    w: np.ndarray
    slots: list[int]
    speed: list[float]
    warm: np.ndarray | None
    lb: float
    forbid: bool
    cand: list[list[int]]

    @property
    def ub(self) -> float | None:
        """The warm start's max time (true units), or None."""
        return None if self.warm is None else _time(self.w, self.warm, self.speed)

    def max_per_gpu(self, c: int, g: int) -> int:
        return min(c, self.slots[g], 1 if self.forbid else c)

    def classes(self) -> list[list[int]]:
        """Interchangeable GPUs (equal speed and slot count), each list in GPU order."""
        out: dict[tuple, list[int]] = {}
        for g in range(len(self.slots)):
            out.setdefault((self.speed[g], self.slots[g]), []).append(g)
        return list(out.values())

    def warm_order(self, times: list[float]) -> list[int]:
        """perm[g] = the warm GPU that model GPU g takes, so the hint obeys the ordering of
        interchangeable GPUs (non-increasing times inside each class)."""
        perm = list(range(len(self.slots)))
        for members in self.classes():
            for g, src in zip(members, sorted(members, key=lambda h: -times[h])):
                perm[g] = src
        return perm


def timed_layer(w: np.ndarray, slots: list[int], speed: list[float], warm: np.ndarray | None, lb: float,
                forbid: bool) -> TimedLayer:
    """The layer's model data; candidate counts pruned with the warm start's value ``ub``:
    a replica heavier than ``ub x`` the fastest speed cannot be in a better plan."""
    E, Q, R = len(w), len(slots), int(sum(slots))
    s = np.asarray(speed, dtype=np.float64)
    cap = min(R - E + 1, Q) if forbid else R - E + 1        # forbidden: at most one replica per GPU
    lo = np.ones(E, dtype=np.int64)
    if warm is not None:
        ub = _time(w, warm, speed)
        if ub > 0:
            lo = np.maximum(1, np.ceil(w / (ub * s.max()) * (1 - 1e-12) - 1e-12).astype(np.int64))
    lo = np.minimum(lo, cap)
    hi = np.maximum(np.minimum(cap, R - (lo.sum() - lo)), lo)
    cand = [list(range(int(lo[e]), int(hi[e]) + 1)) for e in range(E)]
    return TimedLayer(w, list(slots), list(speed), warm, lb, forbid, cand)


def solve_layer(tl: TimedLayer, *, time_limit: float, threads: int, seed: int, gap: float) -> dict:
    """CP-SAT on one layer. Returns {"status", "xg" [E, Q] or None, "bound" (true units) or None}."""
    from ortools.sat.python import cp_model

    start = clock()
    w, slots, speed, warm, lb, cand = tl.w, tl.slots, tl.speed, tl.warm, tl.lb, tl.cand
    E, Q, R = len(w), len(slots), int(sum(slots))
    s = np.asarray(speed, dtype=np.float64)
    ideal = float(w.sum()) / float(s.sum())
    scale = TIME_UNITS / ideal if ideal > 0 else 1.0
    wc = None if warm is None else warm.sum(1)
    q = {(e, c, g): int(math.floor(scale * w[e] / (c * s[g]))) for e in range(E) for c in cand[e] for g in range(Q)}
    m = cp_model.CpModel()
    y = {(e, c): m.new_bool_var(f"y{e}_{c}") for e in range(E) for c in cand[e]}
    z = {(e, c, g): m.new_int_var(0, tl.max_per_gpu(c, g), f"z{e}_{c}_{g}")
         for e in range(E) for c in cand[e] for g in range(Q)}
    for e in range(E):
        m.add_exactly_one(y[e, c] for c in cand[e])
        for c in cand[e]:
            m.add(sum(z[e, c, g] for g in range(Q)) == c * y[e, c])
    t_hi = max(sum(sorted((q[e, c, g] for e in range(E) for c in cand[e]), reverse=True)[:slots[g]])
               for g in range(Q))
    if warm is not None:
        warm_times = [sum(q[e, int(wc[e]), g] * int(warm[e, g]) for e in range(E)) for g in range(Q)]
        t_hi = min(t_hi, max(warm_times))
    t_lo = max(0, min(t_hi, math.floor(lb * scale * (1 - 1e-9)) - R))
    T = m.new_int_var(t_lo, t_hi, "T")
    times = []
    for g in range(Q):
        m.add(sum(z[e, c, g] for e in range(E) for c in cand[e]) == slots[g])
        tg = m.new_int_var(0, t_hi, f"t{g}")
        m.add(tg == sum(q[e, c, g] * z[e, c, g] for e in range(E) for c in cand[e]))
        m.add(tg <= T)
        times.append(tg)
    for members in tl.classes():
        for a, b in zip(members, members[1:]):
            m.add(times[a] >= times[b])
    m.minimize(T)
    if warm is not None:
        perm = tl.warm_order(warm_times)
        for e in range(E):
            for c in cand[e]:
                m.add_hint(y[e, c], int(c == int(wc[e])))
                for g in range(Q):
                    m.add_hint(z[e, c, g], int(warm[e, perm[g]]) if c == int(wc[e]) else 0)
        for g in range(Q):
            m.add_hint(times[g], warm_times[perm[g]])
        m.add_hint(T, max(warm_times))
    solver = cp_model.CpSolver()
    p = solver.parameters
    p.max_time_in_seconds = max(0.05, float(time_limit - (clock() - start)))
    p.num_workers = int(threads)
    p.random_seed = int(seed)
    p.relative_gap_limit = float(gap)
    status = solver.solve(m)
    bound = None
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE, cp_model.UNKNOWN) and math.isfinite(solver.best_objective_bound):
        bound = math.nextafter(float(solver.best_objective_bound) / scale, -math.inf)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        st = "infeasible" if status == cp_model.INFEASIBLE else "time_limit"
        return {"status": st, "xg": None, "bound": bound}
    xg = np.zeros((E, Q), dtype=np.int64)
    for (e, c, g), var in z.items():
        xg[e, g] += solver.value(var)
    st = "optimal" if status == cp_model.OPTIMAL and gap == 0 else ("completed" if status == cp_model.OPTIMAL
                                                                      else "time_limit")
    return {"status": st, "xg": xg, "bound": bound}


def _pulp_model(tl: TimedLayer, k: int):
    """The same model as a PuLP MILP with float coefficients ``2**k w_e / (c s_g)`` (times
    scaled by the power of two ``2**k``, exact in float64, so the backend's absolute
    tolerances mean the same at every scale). Returns (problem, z, T, warm assignment)."""
    import pulp

    w = np.ldexp(np.asarray(tl.w, dtype=np.float64), k)
    slots, speed, cand = tl.slots, tl.speed, tl.cand
    E, Q = len(w), len(slots)
    prob = pulp.LpProblem("eplb_time", pulp.LpMinimize)
    var = _variable_factory(prob)
    ub = tl.ub
    t_hi = None if ub is None else math.ldexp(ub, k) * (1 + 1e-9) + 1e-12
    T = var("T", math.ldexp(tl.lb, k) * (1 - 1e-9), t_hi, "Continuous")
    prob += T
    y = {(e, c): var(f"y_{e}_{c}", 0, 1, "Binary") for e in range(E) for c in cand[e] if len(cand[e]) > 1}

    def yv(e, c):
        return y[e, c] if (e, c) in y else 1

    fastest = max(speed)
    for e in range(E):
        if len(cand[e]) > 1:
            prob += pulp.lpSum(y[e, c] for c in cand[e]) == 1
            # every replica runs somewhere: at least its time on the fastest GPU (tightens the LP)
            prob += pulp.lpSum((w[e] / (c * fastest)) * y[e, c] for c in cand[e]) <= T
    z = {(e, c, g): var(f"z_{e}_{c}_{g}", 0, tl.max_per_gpu(c, g), "Integer")
         for e in range(E) for c in cand[e] for g in range(Q) if tl.max_per_gpu(c, g) > 0}
    for e in range(E):
        for c in cand[e]:
            prob += pulp.lpSum(z[e, c, g] for g in range(Q) if (e, c, g) in z) == c * yv(e, c)
    times = []
    for g in range(Q):
        keys = [(e, c) for e in range(E) for c in cand[e] if (e, c, g) in z]
        prob += pulp.lpSum(z[e, c, g] for e, c in keys) == slots[g]
        tg = pulp.LpAffineExpression([(z[e, c, g], w[e] / (c * speed[g])) for e, c in keys])
        prob += tg <= T
        times.append(tg)
    for members in tl.classes():
        for a, b in zip(members, members[1:]):
            prob += times[a] - times[b] >= 0
    warm = None
    if tl.warm is not None:
        wc = tl.warm.sum(1)
        per = (w / wc)[:, None] * tl.warm / np.asarray(speed)[None, :]          # [E, Q] time per GPU
        warm_times = list(per.sum(0))
        perm = tl.warm_order(warm_times)
        warm = {T.name: min(float(max(warm_times)), t_hi)}
        for (e, c), v in y.items():
            warm[v.name] = float(c == wc[e])
        for (e, c, g), v in z.items():
            warm[v.name] = float(tl.warm[e, perm[g]]) if c == wc[e] else 0.0
    return prob, z, T, warm


def pulp_layer_solver(backend: str):
    """solve_layer for the MILP backends ("highs" or "cbc"), same contract as :func:`solve_layer`."""
    def solve(tl: TimedLayer, *, time_limit: float, threads: int, seed: int, gap: float) -> dict:
        start = clock()
        ideal = float(tl.w.sum()) / float(sum(tl.speed))
        k = 0
        if ideal > 0 and math.isfinite(ideal):            # ideal time scaled into [target, 2 target)
            k = math.frexp(SCALED_LOAD_TARGET)[1] - math.frexp(ideal)[1]
        prob, z, _, warm = _pulp_model(tl, k)
        out = run_pulp(prob, warm, backend=backend, time_limit=time_limit, threads=threads, seed=seed, gap=gap,
                       started=start)
        bound = None
        if out.bound is not None:
            bound = max(0.0, math.nextafter(math.ldexp(out.bound, -k), -math.inf))
        if not out.has_solution:
            return {"status": out.status if out.status != "feasible" else "time_limit", "xg": None, "bound": bound}
        E, Q = len(tl.w), len(tl.slots)
        xg = np.zeros((E, Q), dtype=np.int64)
        for (e, c, g), v in z.items():
            xg[e, g] += int(round(v.varValue or 0.0))
        if (xg.sum(0) != np.asarray(tl.slots)).any() or (xg.sum(1) < 1).any():
            return {"status": "error", "xg": None, "bound": bound, "message": f"{backend}: non-integral solution"}
        st = {"optimal": "optimal", "feasible": "completed"}.get(out.status, "time_limit")
        if st == "optimal":
            # the backend's word is not proof: the true time must meet the certified bound
            if gap > 0:
                st = "completed"
            elif bound is None or _time(tl.w, xg, tl.speed) > bound * (1 + BOUND_RTOL):
                st = "completed"
        return {"status": st, "xg": xg, "bound": bound}
    return solve


def _time(w: np.ndarray, xg: np.ndarray, speed: list[float]) -> float:
    """Max GPU time of a placement xg: [E, Q] (even split) in float64."""
    return float(((w / xg.sum(1)) @ xg / np.asarray(speed)).max())


def _duplicate_free(plan: Plan | None, problem: Problem) -> Plan | None:
    """``plan`` if no GPU holds two replicas of one expert, else None."""
    if plan is None:
        return None
    gpu = torch.as_tensor(problem.slot_gpu(), device=plan.phy2log.device)            # [R]
    key = plan.phy2log * problem.num_gpus + gpu                                     # [L, R]
    dup = (key.sort(1).values.diff(dim=1) == 0).any()
    return None if bool(dup) else plan


LAYER_SOLVERS = {"cpsat": lambda: solve_layer, "highs": lambda: pulp_layer_solver("highs"),
                 "cbc": lambda: pulp_layer_solver("cbc")}


def run_timed(problem: Problem, o, backend: str = "cpsat") -> SolverOutput:
    """An exact backend on a heterogeneous cluster: every layer, the time limit shared over them.

    Warm start "auto": kk_swap's plan, made duplicate-free under forbidden colocation (a
    given plan must then be duplicate-free)."""
    warm_plan = check_timed_options(problem, o)
    forbid = o.colocation == "forbidden"
    layer_solver = LAYER_SOLVERS[backend]()
    c = problem.cluster
    live = list(c.live_gpus)
    slots = [c.gpu_slots[g] for g in live]
    speed = [c.gpu_speed[g] for g in live]
    slot_live = np.repeat(np.arange(len(live)), slots)                       # [R] live index of every slot
    if o.warm_start == "auto":       # kk_swap's plan (duplicate-free under forbidden colocation)
        warm_plan = run(problem.to("cpu"), "kk_swap", {"colocation": o.colocation}).plan
    if forbid and warm_plan is not None and _duplicate_free(warm_plan, problem) is None:
        raise OptionError("warm_start", "with colocation forbidden the warm start must hold no expert twice on a GPU")
    lbs = lower_bound(problem).cpu()
    L, E = problem.num_layers, problem.num_experts
    w_all = problem.weights.detach().cpu().to(torch.float64).numpy()
    end = clock() + o.time_limit
    rows, bounds, statuses = [], [], []
    for layer in range(L):
        w = w_all[layer]
        warm = None if warm_plan is None else _xg(warm_plan.phy2log[layer].cpu().numpy(), slot_live, E, len(live))
        left = (end - clock()) / (L - layer)
        tl = timed_layer(w, slots, speed, warm, float(lbs[layer]), forbid)
        res = layer_solver(tl, time_limit=max(0.05, left), threads=o.threads, seed=o.seed, gap=o.gap)
        if res["status"] in ("infeasible", "error"):
            why = res.get("message", f"the model is {res['status']}")
            term = Termination.INFEASIBLE if res["status"] == "infeasible" else Termination.ERROR
            return SolverOutput(None, "global", term, message=f"layer {layer}: {why}")
        xg = res["xg"]
        if xg is not None and warm is not None and _time(w, xg, speed) > _time(w, warm, speed):
            xg = warm                                       # never worse than the warm start
        if xg is None:
            xg = warm
        if xg is None:
            return SolverOutput(None, "global", Termination.TIME_LIMIT, message=f"layer {layer}: no plan found")
        rows.append(np.concatenate([np.repeat(np.arange(E), xg[:, g]) for g in range(len(live))]))
        bounds.append(max(float(lbs[layer]), res["bound"] if res["bound"] is not None else 0.0))
        statuses.append(res["status"])
    plan = Plan.from_phy2log(torch.from_numpy(np.stack(rows)).to(problem.device), E)
    term = (Termination.TIME_LIMIT if "time_limit" in statuses else
            Termination.OPTIMAL if all(s == "optimal" for s in statuses) else Termination.COMPLETED)
    optimal = torch.tensor([s == "optimal" for s in statuses], dtype=torch.bool, device=problem.device)
    msg = ", ".join(f"{statuses.count(s)} layer(s) {s}" for s in dict.fromkeys(statuses))
    bound = torch.tensor(bounds, dtype=torch.float64)
    # forbidden colocation is a restricted model: its bound is a model bound, with its scope
    bound_kw = ({"model_bound": bound, "model_scope": ModelScope("global", "free", "forbidden")} if forbid
                else {"bound": bound})
    return SolverOutput(plan, "global", term, message=msg, model_optimal=optimal,
                        info={"model": "joint (time)", "backend": backend, "colocation": o.colocation,
                              "layer_status": statuses}, **bound_kw)
