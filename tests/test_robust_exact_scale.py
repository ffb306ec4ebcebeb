"""Exact results do not depend on the scale of the loads; bounds are never above a known plan.

The default run uses a tiny instance (6 experts, 8 slots on 4 GPUs) at a few scales;
the full sweep (1e-12 .. 1e12, float16-like fractional loads, a larger instance) is slow.
"""
import math

import numpy as np
import pytest
import torch

from solvers import Problem, solve
from solvers import backends
from solvers.exact.milp import _cbc_log, printed_floor
from solvers.exact.model import LayerModel, LayerResult
from solvers.exact.scaling import certified, reference_load, scale_exponent, scaled_layer, unscaled_result
from solvers.tolerances import BOUND_RTOL, SCALED_LOAD_TARGET

AVAILABLE = {"cpsat": backends.cpsat_available, "highs": backends.highs_available, "cbc": backends.cbc_available}
BACKENDS = [pytest.param(b, marks=pytest.mark.skipif(not AVAILABLE[b](), reason=f"{b} not installed"))
            for b in AVAILABLE]
TOKENS = torch.tensor([[37.0, 11.0, 52.0, 8.0, 23.0, 61.0]], dtype=torch.float64)
TRUE_OPTIMUM = 53.5          # 61/2 + 23 = 53.5 on one GPU; CP-SAT proves it (checked below)


def _fp16_shares() -> torch.Tensor:
    return (TOKENS / TOKENS.sum()).to(torch.float16).to(torch.float64)


def _check(problem: Problem, backend: str, reference: float, time_limit: float = 30.0):
    known = float(solve(problem, "deepseek").objective[0])
    res = solve(problem, backend, time_limit=time_limit)
    bound = float(res.lower_bound[0])
    assert bound <= known * (1 + 1e-12), f"{backend}: bound {bound} above DeepSeek's plan {known}"
    assert str(res.termination) == "optimal", (res.termination, res.message)
    obj = float(res.objective[0])
    assert bound <= obj * (1 + 1e-12)
    assert abs(obj - reference) <= 1e-6 * reference, (backend, obj, reference)
    assert obj <= bound * (1 + BOUND_RTOL)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("scale", [1e-12, 1.0, 1e12])
def test_optimum_is_the_same_at_every_scale(backend, scale):
    _check(Problem(TOKENS * scale, 8, 1, 1, 4), backend, TRUE_OPTIMUM * scale)


@pytest.mark.parametrize("backend", BACKENDS)
def test_float16_like_fractional_loads(backend):
    w = _fp16_shares() * 1e-3
    ref = solve(Problem(w, 8, 1, 1, 4), "cpsat", time_limit=30)
    assert str(ref.termination) == "optimal"
    _check(Problem(w, 8, 1, 1, 4), backend, float(ref.objective[0]))


@pytest.mark.skipif(not backends.cpsat_available(), reason="needs ortools")
def test_cpsat_on_subnormal_loads_returns_a_plan():
    w = TOKENS * 1e-310                                      # subnormal float64
    res = solve(Problem(w, 8, 1, 1, 4), "cpsat", time_limit=20)
    assert str(res.termination) == "optimal"
    assert float(res.lower_bound[0]) <= float(res.objective[0])


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("scale", [1e-12, 1e-9, 1e-6, 1e-3, 1.0, 1e3, 1e6, 1e9, 1e12])
@pytest.mark.parametrize("fp16", [False, True])
def test_full_scale_sweep(backend, scale, fp16):
    base = _fp16_shares() if fp16 else TOKENS
    ref = solve(Problem(base * scale, 8, 1, 1, 4), "cpsat", time_limit=30)
    assert str(ref.termination) == "optimal"
    _check(Problem(base * scale, 8, 1, 1, 4), backend, float(ref.objective[0]))


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("scale", [1e-6, 1e9])
def test_readme_example_bound_never_above_a_known_plan(backend, scale):
    """The README example is hard for the MILPs: whatever they stop with, the bound holds."""
    w = torch.tensor([[90, 132, 40, 61, 104, 165, 39, 4, 73, 56, 183, 86]], dtype=torch.float64) * scale
    problem = Problem(w, 16, 4, 2, 8)
    res = solve(problem, backend, policy="global", time_limit=10)
    assert float(res.lower_bound[0]) <= 136 * scale * (1 + 1e-9)      # CP-SAT's proven optimum
    if res.objective is not None:
        assert str(res.termination) != "optimal" or abs(float(res.objective[0]) - 136 * scale) <= 1e-6 * 136 * scale


# ----------------------------------------------------------------- the pieces


def _layer(w):
    w = np.asarray(w, dtype=np.float64)
    return LayerModel(w, np.full(4, 2), np.ones(4), 1, 1, False, "fixed", False, False, [[1, 2, 3]] * len(w), lb=float(w.max()) / 3,
                      ub=float(w.sum()))


@pytest.mark.parametrize("scale", [1e-300, 1e-12, 1.0, 3e9, 1e300])
def test_scaling_is_exact_and_well_conditioned(scale):
    lm = _layer(np.array([37.0, 11.0, 52.0, 8.0]) * scale)
    k = scale_exponent(lm)
    s = scaled_layer(lm, k)
    ref = reference_load(s)                                      # in time: loads over speeds
    assert SCALED_LOAD_TARGET <= ref < 2 * SCALED_LOAD_TARGET
    # powers of two, exact both ways: loads and speeds each scaled (speeds into [0.5, 1))
    _, js = math.frexp(float(lm.speed.max()))
    assert np.array_equal(np.ldexp(s.w, js - k), lm.w) and np.array_equal(np.ldexp(s.speed, js), lm.speed)
    back = unscaled_result(LayerResult("optimal", bound=s.lb, objective=s.ub), k)
    assert back.bound <= lm.lb and back.bound >= lm.lb * (1 - 1e-15)
    assert back.objective == lm.ub


def test_an_all_zero_layer_is_not_scaled():
    lm = _layer([0.0, 0.0, 0.0])
    assert scale_exponent(lm) == 0


def test_optimal_is_kept_only_when_the_objective_meets_the_bound():
    lm = _layer([4.0, 4.0, 2.0, 2.0])
    xg = np.array([[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]])
    assert certified(lm, LayerResult("optimal", xg=xg, bound=4.0)).status == "optimal"
    assert certified(lm, LayerResult("optimal", xg=xg, bound=3.9)).status == "feasible"
    assert certified(lm, LayerResult("optimal", xg=xg, bound=None)).status == "feasible"
    assert certified(lm, LayerResult("time_limit", xg=xg, bound=3.0)).status == "time_limit"


@pytest.mark.parametrize("text,floor", [("180.281", 180.280), ("0.002", 0.001), ("136", 135.0),
                                        ("1.2e-05", 1.1e-05), ("180.28088", 180.28087)])
def test_printed_figures_are_floored_by_one_printed_unit(text, floor):
    assert math.isclose(printed_floor(text), floor, rel_tol=1e-12)
    assert printed_floor(text) < float(text)


def test_cbc_bound_is_the_most_precise_printed_figure_floored():
    log = ("Cbc0010I After 0 nodes, 1 on tree, 189.745 best solution, best possible 180.28088 (1.93 seconds)\n"
           "Cbc0005I Partial search - best objective 189.745 (best possible 180.28088), took 15 iterations\n"
           "Result - Stopped on time limit\n\nObjective value:                189.74500000\n"
           "Lower bound:                    180.281\n")
    bound, timed_out, line = _cbc_log(log)
    assert timed_out and line.startswith("Stopped on time")
    assert bound == pytest.approx(180.28087) and bound < 180.28088
    # the rounded summary line alone (true bound 0.0016 printed as 0.002) is taken down a unit
    bound, _, _ = _cbc_log("Result - Stopped on time limit\nLower bound: 0.002\n")
    assert bound <= 0.0016
    assert _cbc_log("Result - Stopped on time limit\nLower bound: 1e+50\n")[0] is None


def test_a_replication_layer_stopped_before_any_solution_keeps_greedy_counts():
    from solvers.exact.scaling import with_counts

    lm = LayerModel(np.array([5.0, 3.0, 1.0]), np.full(2, 3), np.ones(2), 1, 1, False, "fixed", False, True, [[1, 2, 3, 4]] * 3, lb=1.0)
    counts = with_counts(lm, LayerResult("time_limit")).counts
    assert counts.sum() == 6 and (counts >= 1).all()
    assert (lm.w / counts).max() <= 5.0 / 3 + 1e-12         # the optimal replication value
    assert with_counts(lm, LayerResult("error")).counts is None
