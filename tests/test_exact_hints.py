"""CP-SAT hints are complete and consistent with the symmetry breaking.

Every model variable gets a hint (CP-SAT's ``fix_variables_to_their_hinted_value`` only
fixes the hinted ones, so the fixed solve alone cannot see a missing hint), and solving
with every variable fixed to its hint must reproduce the warm start's value: an
inconsistent hint would make that model infeasible.
"""
import pytest

from solvers import Problem, get_solver
from solvers.exact import cpsat
from solvers.exact.model import (build_layer, exact_options, default_warm_plan, fixed_counts_for,
                                 layer_problem_bound)

TWELVE = [[90, 132, 40, 61, 104, 165, 39, 4, 73, 56, 183, 86]]
CASES = [
    ("joint", {}, ([[600, 560, 120, 120, 20, 10, 10, 10]], 16, 1, 1, 8)),
    ("joint", {}, ([[9.5, 3.25, 7.0, 1.0, 2.5, 8.0, 0.125, 4.75]], 12, 1, 1, 4)),   # float loads
    ("packing", {}, ([[9.5, 3.25, 7.0, 1.0, 2.5, 8.0]], 12, 1, 1, 4)),            # float loads
    ("hierarchical", {}, (TWELVE, 16, 4, 2, 8)),
    ("hierarchical", {"counts": "fixed"}, (TWELVE, 16, 4, 2, 8)),
    ("hierarchical", {"node_budget": "free"}, ([[20, 107, 104, 64, 19, 197, 187, 157, 172, 86, 16, 27]], 16, 4, 2, 8)),
    # colocation="forbidden": DeepSeek's plan has duplicates, the automatic warm start must not
    ("joint", {"colocation": "forbidden"}, (TWELVE, 16, 1, 1, 8)),
    ("joint", {"colocation": "forbidden"}, ([[600, 560, 120, 120, 20, 10, 10, 10]], 16, 1, 1, 8)),
    ("packing", {"colocation": "forbidden"}, ([[9.5, 3.25, 7.0, 1.0, 2.5, 8.0]], 12, 1, 1, 4)),
    ("hierarchical", {"colocation": "forbidden"}, (TWELVE, 16, 4, 2, 8)),
]


def layer_model(model, extra, shape):
    w, R, G, N, P = shape
    p = Problem(w, R, G, N, P)
    # the public options that resolve to this internal model (hierarchical: on N > 1 nodes)
    public = {"hierarchical": ("hierarchical", "packing" if extra.get("counts") == "fixed" else "joint")}.get(
        model, ("global", model))
    opts = exact_options(p, get_solver("cpsat").parse({
        "policy": public[0], "model": public[1], "colocation": extra.get("colocation", "allowed"),
        "node_budget": extra.get("node_budget", "fixed"), "time_limit": 10, "threads": 1}))
    assert (opts.model, opts.counts) == (model, extra.get("counts") or ("fixed" if model == "packing" else "free"))
    warm, others = default_warm_plan(p, opts)
    fixed = fixed_counts_for(p, opts, warm)
    lb = layer_problem_bound(p, opts, fixed)
    return build_layer(p, 0, opts, warm, fixed, float(lb[0]), explicit_warm=False, alternatives=others)


@pytest.fixture
def protos(monkeypatch):
    """The CpModelProto of every CP-SAT solve in the test."""
    from ortools.sat.python import cp_model

    seen = []
    orig = cp_model.CpSolver.solve

    def spy(self, model, *args, **kwargs):
        seen.append(model.proto)
        return orig(self, model, *args, **kwargs)

    monkeypatch.setattr(cp_model.CpSolver, "solve", spy)
    return seen


@pytest.mark.parametrize("model,extra,shape", CASES)
def test_fixed_hint_reproduces_the_warm_start(model, extra, shape, protos):
    if not get_solver("cpsat").is_available():
        pytest.skip("ortools not installed")
    lm = layer_model(model, extra, shape)
    assert lm.warm is not None, lm.notes
    if lm.forbid:
        assert int(lm.warm.max()) <= 1
    res = cpsat.solve_layer(lm, time_limit=10, threads=1, seed=0, gap=0.0,
                            params={"fix_variables_to_their_hinted_value": True})
    (proto,) = protos
    hinted = list(proto.solution_hint.vars)
    assert len(hinted) == len(set(hinted)) == len(proto.variables), "hint does not cover every variable"
    assert res.status == "optimal", res.message          # the hinted point is feasible
    assert res.objective == pytest.approx(lm.ub, rel=1e-6)
    # ... and it is the warm start up to a permutation of GPUs
    assert sorted(map(tuple, res.xg.T.tolist())) == sorted(map(tuple, lm.warm.T.tolist()))
