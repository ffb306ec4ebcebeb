"""Benchmark scripts use the solver contract's option names (checked without running them).

Every script in benchmarks/, and every child-process program it keeps in a string
constant, is parsed with ``ast``. Each option name handed to a solver must be in that
solver's schema (``get_solver(name).options``) or be an argument of the call itself:

- ``solve(problem, "name", key=...)`` and functions, of the script or of the library, that
  forward ``**options`` to a solver (``timed(problem, "name", n, key=...)``,
  ``plan_with_migration(problem, "name", previous, key=...)``);
- options spread with ``**opts`` where ``opts`` is a dict literal, a conditional dict
  (``{"history": h} if solver == "sched_spread" else {}``), a key set under
  ``if solver == "name":``, or a dict of a ``for name, opts in (...)`` table;
- ``solver_options={...}`` of the simulators.

A solver given as a literal, or by a loop over literal names, is checked against its own
schema; one whose values the script does not spell out against the union of every schema
(a stale name such as ``nodup`` or ``time_budget`` is in none). Names imported from
``solvers`` must exist, and keywords of library calls must be parameters of the callee.
"""
from __future__ import annotations

import ast
import importlib
import inspect
from dataclasses import dataclass
from pathlib import Path

import pytest

import solvers  # noqa: F401  registers every solver
from solvers import get_solver, solver_names

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(p for p in (REPO / "benchmarks").glob("*.py") if p.name != "__init__.py")

ALL = None     # candidate solvers unknown: check against the union of every schema


@dataclass(frozen=True)
class Forwarder:
    """A callable that hands its extra keywords to a solver."""
    solver_index: int            # position of the solver argument
    own: frozenset[str]          # its own keywords (not solver options)
    default: str | None = None   # solver when the argument is left out


def _union_of_options() -> frozenset[str]:
    return frozenset(o for n in solver_names() for o in get_solver(n).options)


def _library_forwarder(obj) -> Forwarder | None:
    """A library callable with a ``solver`` parameter and ``**...options``: it forwards them."""
    try:
        params = list(inspect.signature(obj).parameters.values())
    except (TypeError, ValueError):
        return None
    names = [p.name for p in params]
    var_kw = [p for p in params if p.kind is p.VAR_KEYWORD]
    if "solver" not in names or not var_kw or "option" not in var_kw[0].name:
        return None
    positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    solver = params[names.index("solver")]
    default = solver.default if isinstance(solver.default, str) else None
    index = positional.index("solver") if "solver" in positional else -1
    return Forwarder(index, frozenset(n for p, n in zip(params, names) if p is not var_kw[0]), default)


class ScriptCheck:
    """Stale option names (and unresolvable imports from ``solvers``) in one script's source."""

    def __init__(self, source: str, label: str):
        self.label = label
        self.tree = ast.parse(source)
        self.problems: list[str] = []
        self.checked = 0                     # option names checked
        self.union = _union_of_options()
        self.parents: dict[ast.AST, tuple[ast.AST, str]] = {}
        for node in ast.walk(self.tree):
            for field, value in ast.iter_fields(node):
                for child in value if isinstance(value, list) else [value]:
                    if isinstance(child, ast.AST):
                        self.parents[child] = (node, field)
        self.imported: dict[str, object] = {}
        self.forwarders: dict[str, Forwarder] = {}
        self.tables = {t.id: node.value for node in self.tree.body if isinstance(node, ast.Assign)
                       for t in node.targets if isinstance(t, ast.Name)
                       and isinstance(node.value, (ast.List, ast.Tuple))}

    # -- reporting ------------------------------------------------------------------
    def fail(self, node: ast.AST, text: str) -> None:
        self.problems.append(f"{self.label}:{getattr(node, 'lineno', '?')}: {text}")

    def check(self, node: ast.AST, key: str, candidates) -> None:
        self.checked += 1
        if candidates is ALL:
            if key not in self.union:
                self.fail(node, f"{key!r} is not an option of any registered solver")
            return
        for name in sorted(candidates):
            if name not in solver_names():
                self.fail(node, f"unknown solver {name!r}")
            elif key not in get_solver(name).options:
                self.fail(node, f"{key!r} is not an option of solver {name!r} "
                                f"(options: {', '.join(get_solver(name).options)})")

    # -- the passes -----------------------------------------------------------------
    def run(self) -> "ScriptCheck":
        self.resolve_imports()
        self.find_script_forwarders()
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                if node.func.id in self.forwarders:
                    self.check_solver_call(node, self.forwarders[node.func.id])
                elif node.func.id in self.imported:
                    self.check_library_call(node, self.imported[node.func.id])
        return self

    def resolve_imports(self) -> None:
        for node in ast.walk(self.tree):
            if not (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
                    and node.module.split(".")[0] == "solvers"):
                continue
            try:
                module = importlib.import_module(node.module)
            except ImportError as exc:
                self.fail(node, f"cannot import {node.module}: {exc}")
                continue
            for alias in node.names:
                if not hasattr(module, alias.name):
                    self.fail(node, f"{node.module} has no {alias.name!r}")
                    continue
                obj = getattr(module, alias.name)
                self.imported[alias.asname or alias.name] = obj
                fwd = _library_forwarder(obj) if callable(obj) else None
                if fwd is not None:
                    self.forwarders[alias.asname or alias.name] = fwd

    def find_script_forwarders(self) -> None:
        """``def timed(problem, solver, n, **opts): ... solve(problem, solver, **opts)``."""
        defs = [n for n in ast.walk(self.tree) if isinstance(n, ast.FunctionDef) and n.args.kwarg]
        for _ in range(2):                    # forwarders of forwarders
            for fn in defs:
                positional = [a.arg for a in fn.args.posonlyargs + fn.args.args]
                own = frozenset(positional + [a.arg for a in fn.args.kwonlyargs])
                for call in ast.walk(fn):
                    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
                            and call.func.id in self.forwarders):
                        continue
                    spreads = {k.value.id for k in call.keywords if k.arg is None and isinstance(k.value, ast.Name)}
                    solver = self.solver_expr(call, self.forwarders[call.func.id])
                    if (fn.args.kwarg.arg in spreads and isinstance(solver, ast.Name)
                            and solver.id in positional):
                        self.forwarders[fn.name] = Forwarder(positional.index(solver.id), own)

    # -- one call -------------------------------------------------------------------
    @staticmethod
    def solver_expr(call: ast.Call, fwd: Forwarder) -> ast.AST | None:
        if 0 <= fwd.solver_index < len(call.args):
            return call.args[fwd.solver_index]
        for k in call.keywords:
            if k.arg == "solver":
                return k.value
        return None

    def check_solver_call(self, call: ast.Call, fwd: Forwarder) -> None:
        expr = self.solver_expr(call, fwd)
        scope = self.scope_of(call)
        if expr is None:
            candidates = frozenset([fwd.default]) if fwd.default else ALL
        else:
            candidates = self.candidates(expr, scope)
        if candidates is not ALL:
            for name in candidates:
                if name not in solver_names():
                    self.fail(call, f"unknown solver {name!r}")
        for k in call.keywords:
            if k.arg is None:
                if isinstance(k.value, ast.Name):
                    self.check_spread(call, k.value.id, expr, candidates, scope)
                else:
                    self.check_dict(k.value, expr, candidates)
            elif k.arg == "solver_options" and "solver_options" in fwd.own:
                self.check_dict(k.value, expr, candidates)
            elif k.arg not in fwd.own:
                self.check(k, k.arg, candidates)

    def check_library_call(self, call: ast.Call, obj) -> None:
        try:
            params = inspect.signature(obj).parameters
        except (TypeError, ValueError):
            return
        if any(p.kind is p.VAR_KEYWORD for p in params.values()):
            return
        for k in call.keywords:
            if k.arg is not None and k.arg not in params:
                self.fail(k, f"{k.arg!r} is not a parameter of {getattr(obj, '__qualname__', obj)!r}")
        solver = next((k.value for k in call.keywords if k.arg == "solver"), None)
        if solver is not None:
            cands = self.candidates(solver, self.scope_of(call))
        else:                                 # the callee's default solver
            default = params["solver"].default if "solver" in params else None
            cands = frozenset([default]) if isinstance(default, str) else ALL
        for k in call.keywords:
            if k.arg == "solver_options":
                self.check_dict(k.value, solver, cands)

    # -- where options come from -----------------------------------------------------
    def scope_of(self, node: ast.AST) -> ast.AST:
        while node in self.parents:
            node = self.parents[node][0]
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                return node
        return self.tree

    def literal_rows(self, iterable: ast.AST) -> list[ast.AST] | None:
        if isinstance(iterable, ast.Name):
            iterable = self.tables.get(iterable.id)
        if isinstance(iterable, (ast.List, ast.Tuple)):
            return list(iterable.elts)
        return None

    def loops_binding(self, name: str, scope: ast.AST):
        """(for-loop, index in its tuple target or None) for each loop of ``scope`` binding ``name``."""
        for node in ast.walk(scope):
            if isinstance(node, (ast.For, ast.comprehension)):
                target = node.target
                if isinstance(target, ast.Name) and target.id == name:
                    yield node, None
                elif isinstance(target, ast.Tuple):
                    for i, t in enumerate(target.elts):
                        if isinstance(t, ast.Name) and t.id == name:
                            yield node, i

    def candidates(self, expr: ast.AST, scope: ast.AST):
        if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
            return frozenset([expr.value])
        if not isinstance(expr, ast.Name):
            return ALL
        names: set[str] = set()
        loops = list(self.loops_binding(expr.id, scope))
        if not loops:
            return ALL
        for loop, index in loops:
            rows = self.literal_rows(loop.iter)
            if rows is None:
                return ALL
            for row in rows:
                item = row if index is None else (row.elts[index] if isinstance(row, ast.Tuple) else None)
                if not (isinstance(item, ast.Constant) and isinstance(item.value, str)):
                    return ALL
                names.add(item.value)
        return frozenset(names)

    def check_spread(self, call: ast.Call, name: str, solver: ast.AST | None, candidates, scope) -> None:
        """``**name``: its dict literals, keys set on it, or its entries in a loop's table."""
        for node in ast.walk(scope):
            if isinstance(node, ast.Assign):
                for t in node.targets:
                    if isinstance(t, ast.Name) and t.id == name:
                        self.check_dict(node.value, solver, self.narrowed(node, solver, candidates))
                    elif (isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and t.value.id == name
                          and isinstance(t.slice, ast.Constant) and isinstance(t.slice.value, str)):
                        cands = self.narrowed(node, solver, candidates)
                        if cands is ALL or cands:
                            self.check(t, t.slice.value, cands)
        solver_loops = {id(loop): i for loop, i in self.loops_binding(solver.id, scope)} \
            if isinstance(solver, ast.Name) else {}
        for loop, index in self.loops_binding(name, scope):
            rows = self.literal_rows(loop.iter)
            if rows is None:
                continue
            for row in rows:
                if index is None:             # for opts in (dict(...), ...)
                    self.check_dict(row, solver, candidates)
                    continue
                if not (isinstance(row, ast.Tuple) and index < len(row.elts)):
                    continue
                cands = candidates
                si = solver_loops.get(id(loop))
                if si is not None and si < len(row.elts) and isinstance(row.elts[si], ast.Constant):
                    cands = frozenset([row.elts[si].value])
                self.check_dict(row.elts[index], solver, cands)

    def narrowed(self, node: ast.AST, solver: ast.AST | None, candidates):
        """Candidates left under the ``if solver == "name":`` branches around ``node``."""
        while node in self.parents:
            parent, field = self.parents[node]
            if isinstance(parent, (ast.If, ast.IfExp)) and field in ("body", "orelse"):
                candidates = self.guard(parent.test, solver, candidates, positive=field == "body")
            node = parent
        return candidates

    @staticmethod
    def guard(test: ast.AST, solver: ast.AST | None, candidates, positive: bool):
        if not (solver is not None and isinstance(test, ast.Compare) and len(test.ops) == 1
                and isinstance(test.ops[0], (ast.Eq, ast.NotEq))
                and isinstance(test.comparators[0], ast.Constant)
                and ast.dump(test.left) == ast.dump(solver)):
            return candidates
        name = test.comparators[0].value
        if isinstance(test.ops[0], ast.NotEq):
            positive = not positive
        if positive:
            return frozenset([name]) if candidates is ALL else candidates & {name}
        return candidates if candidates is ALL else candidates - {name}

    def check_dict(self, value: ast.AST, solver: ast.AST | None, candidates) -> None:
        if candidates is not ALL and not candidates:
            return                            # a branch no candidate reaches
        if isinstance(value, ast.IfExp):
            for branch, positive in ((value.body, True), (value.orelse, False)):
                self.check_dict(branch, solver, self.guard(value.test, solver, candidates, positive))
        elif isinstance(value, ast.Dict):
            for key in value.keys:
                if isinstance(key, ast.Constant) and isinstance(key.value, str):
                    self.check(key, key.value, candidates)
        elif isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "dict":
            for k in value.keywords:
                if k.arg is not None:
                    self.check(k, k.arg, candidates)


def check_source(source: str, label: str = "<example>") -> ScriptCheck:
    """The script's own check plus one per child program kept in a module-level string."""
    main = ScriptCheck(source, label).run()
    for node in main.tree.body:
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str) and "import" in node.value.value):
            try:
                child = ScriptCheck(node.value.value, f"{label}:{node.targets[0].id}").run()
            except SyntaxError:
                continue
            main.problems += child.problems
            main.checked += child.checked
    main.problems = list(dict.fromkeys(main.problems))     # one line per stale name, not per call
    return main


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_benchmark_script_uses_current_option_names(script):
    result = check_source(script.read_text(), str(script.relative_to(REPO)))
    assert result.problems == []


def test_checker_sees_the_options_the_scripts_pass():
    # A checker that silently matched nothing would pass every script: count what it checked.
    checked = {p.name: check_source(p.read_text(), p.name).checked for p in SCRIPTS}
    for name in ("exact_targets.py", "heuristic_targets.py", "schedule_targets.py", "simulate_targets.py",
                 "migration_targets.py", "scale_sweep.py", "robust_budgets.py"):
        assert checked[name] > 0, name


OLD_HEURISTIC_TARGETS = '''
from solvers import Problem, solve

def timed(problem, solver, repeats, **opts):
    solve(problem, solver, **opts)
    return solve(problem, solver, **opts), 0.0

def main(args, p):
    nd, nd_t = timed(p, "kk_swap", 1, policy="global", nodup=True)
    bs, bs_t = timed(p, "best", 1, policy="global", time_budget=args.budget)
    for name, opts in (("deepseek", {}), ("kk_swap", {}), ("best", {"time_budget": 5.0})):
        r, t = timed(p, name, 1, **opts)
'''


def test_catches_the_old_option_names_of_heuristic_targets():
    problems = check_source(OLD_HEURISTIC_TARGETS).problems
    assert len(problems) == 3, problems
    assert sum("'nodup' is not an option of solver 'kk_swap'" in p for p in problems) == 1, problems
    assert sum("'time_budget' is not an option of solver 'best'" in p for p in problems) == 2, problems
    fixed = (OLD_HEURISTIC_TARGETS.replace("nodup=True", 'colocation="forbidden"')
             .replace("time_budget", "time_limit"))
    assert check_source(fixed).problems == []


def test_catches_stale_names_behind_a_solver_variable_and_a_table():
    # The old exact_targets: options in a module table, the backend in a loop variable.
    source = '''
from solvers import solve
RUNS = [("global", dict(model="packing")), ("hierarchical", dict(model="hierarchical", counts="fixed"))]
def timed(problem, solver, **options):
    return solve(problem, solver, **options)
def target(p, backends):
    for policy, opts in RUNS:
        for b in backends:
            timed(p, b, time_limit=1.0, **opts)
'''
    problems = check_source(source).problems
    assert problems == ["<example>:3: 'counts' is not an option of any registered solver"]


def test_guards_narrow_the_solver_and_child_programs_are_checked():
    source = '''
from solvers import solve
PLANNERS = ("kk_swap", "robust_sum", "ewma")
_CHILD = r"""
from solvers import solve
opts = {"time_budget": 1.0} if spec["solver"] == "best" else {}
solve(problem, spec["solver"], **opts)
"""
def run(problem, hist):
    for p in PLANNERS:
        opts = {} if p == "kk_swap" else {"history": hist}
        if p == "ewma":
            opts["halflife"] = 2.0
            opts["steps"] = 3
        solve(problem, p, **opts)
'''
    problems = check_source(source).problems
    assert sorted(problems) == sorted([
        "<example>:14: 'steps' is not an option of solver 'ewma' (options: policy, history, halflife)",
        "<example>:_CHILD:3: 'time_budget' is not an option of solver 'best' "
        "(options: policy, colocation, relax, time_limit, exact)",
    ]), problems


def test_catches_moved_names_and_library_keywords():
    source = '''
from solvers import solve, no_such_function
from solvers.replan import plan_with_migration
from solvers.dynamics import simulate
def run(pn, prev, trace):
    plan_with_migration(pn, "deepseek", prev, slack=0.01, policy="global", nodup=True)
    simulate(trace, num_replicas=8, every=4, migration_slak=0.1, solver_options={"time_budget": 1})
'''
    problems = check_source(source).problems
    assert any("solvers has no 'no_such_function'" in p for p in problems), problems
    assert any("'nodup' is not an option of solver 'deepseek'" in p for p in problems), problems
    assert any("'migration_slak' is not a parameter of 'simulate'" in p for p in problems), problems
    assert any("'time_budget' is not an option of solver 'deepseek'" in p for p in problems), problems
    assert len(problems) == 4, problems


def test_every_solver_is_registered_when_checking():
    # The union check is only as strict as the registry is complete.
    assert {"deepseek", "kk_swap", "best", "cpsat", "sched_spread", "robust_sum", "migration"} <= set(solver_names())


def test_hostile_inputs_commands_parse_with_the_current_cli(tmp_path):
    # hostile_inputs drives `eplb` in subprocesses: a renamed flag or solver would only show
    # as one more "exit 2" row. Parse each command (nothing runs) against today's parser.
    from benchmarks import hostile_inputs
    from solvers.cli import build_parser

    files = hostile_inputs.build(tmp_path, csv_steps=1)
    commands = hostile_inputs.runs(files, tmp_path / "out.json")
    assert len(commands) > 10
    for name, argv in commands:
        try:
            args = build_parser().parse_args(argv)
        except SystemExit as exc:
            pytest.fail(f"{name}: `eplb {' '.join(argv)}` does not parse (exit {exc.code})")
        solver = getattr(args, "solver", None)
        assert solver is None or solver in solver_names(), f"{name}: unknown solver {solver!r}"
