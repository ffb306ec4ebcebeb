"""Docs that stand alone and stay true, and module layers that point one way."""
import ast
import re
from pathlib import Path

from solvers.cli import build_parser
from solvers.cli.catalogue import solver_catalogue_markdown

ROOT = Path(__file__).resolve().parent.parent
DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "docs" / "notes").glob("*.md"))]


def _repository_files() -> list[Path]:
    """Files of the repository (git's list where there is one: no virtualenv, no build output)."""
    import subprocess

    try:
        out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
        return [ROOT / line for line in out.splitlines() if line]
    except (OSError, subprocess.CalledProcessError):
        return [p for p in ROOT.rglob("*") if p.is_file() and not any(x.startswith(".") for x in p.parts)]


MARKDOWN_NAMES = {p.name for p in _repository_files() if p.suffix == ".md"} | {"summary.md"}   # a run writes one


def _outside_references(text: str, here: Path) -> list[str]:
    """Relative paths in ``text`` that climb out of the repository, and markdown documents it
    names that the repository does not have (a user who clones it has nothing else)."""
    def inside(p: Path) -> bool:
        return p.resolve().is_relative_to(ROOT)

    bad = [ref for ref in re.findall(r"(?:\.\./)+[\w./-]+", text)
           if not ((inside(here / ref) and (here / ref).exists()) or inside(ROOT / ref))]
    bad += [ref for ref in re.findall(r"[\w./-]*\w\.md\b", text)
            if not ((here / ref).exists() or (ROOT / ref).exists() or Path(ref).name in MARKDOWN_NAMES)]
    return bad


def test_docs_never_point_outside_the_repository():
    for path in DOC_FILES:
        text = path.read_text()
        assert not _outside_references(text, path.parent), (path, _outside_references(text, path.parent))
        for target in re.findall(r"\]\(([^)#]+)", text):
            if "://" in target:
                continue
            assert (path.parent / target).exists(), f"{path.name} links {target}, which does not exist"


def test_code_cites_the_repositorys_docs_not_an_issue_tracker():
    this = Path(__file__).resolve()
    for folder in ("solvers", "benchmarks", "app", "tests", "scripts"):
        for path in (ROOT / folder).rglob("*.py"):
            if path.resolve() == this:
                continue                       # its examples are what the check must catch
            text = path.read_text()
            assert not _outside_references(text, path.parent), (path, _outside_references(text, path.parent))
            assert not re.search(r"\bissue #?\d+", text, re.I), path


def test_outside_references_are_caught():
    """The checks above can fail: a climb out of the repository and a document it lacks."""
    assert _outside_references("see ../elsewhere/notes", ROOT / "docs")
    assert _outside_references("see ../elsewhere", ROOT)
    assert _outside_references("as planned in ROADMAP-2031.md", ROOT / "docs")
    assert not _outside_references("see [bounds](bounds.md) and README.md", ROOT / "docs")


def test_solver_catalogue_in_docs_matches_the_registry():
    text = (ROOT / "docs" / "solvers.md").read_text()
    block = text.split("<!-- catalogue:start -->\n", 1)[1].split("<!-- catalogue:end -->", 1)[0]
    assert block == solver_catalogue_markdown(), "run: python scripts/update_solver_docs.py"


def _subparsers():
    parser = build_parser()
    action = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return action.choices


def test_every_cli_option_the_readme_shows_exists():
    commands = _subparsers()
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)```", text, flags=re.S)
    seen = 0
    for block in blocks:
        for line in block.replace("\\\n", " ").splitlines():
            m = re.search(r"\beplb (\w+)\b(.*)", line)
            if not m or m.group(1) not in commands:
                continue
            sub = commands[m.group(1)]
            if m.group(1) == "bench":
                continue              # its own sub-commands, tested by the harness tests
            if m.group(1) == "routing":                     # eplb routing ACTION ...: the action's options
                action = next(a for a in sub._actions if a.__class__.__name__ == "_SubParsersAction")
                head, _, rest = m.group(2).strip().partition(" ")
                sub, m = action.choices[head], re.match(r"(routing)(.*)", f"routing {rest}")
            known = {s for a in sub._actions for s in a.option_strings}
            for flag in re.findall(r"(?<![\w-])(--[a-z][a-z-]*|-O)\b", m.group(2)):
                assert flag in known, f"README shows `eplb {m.group(1)} {flag}`, which --help does not list"
                seen += 1
    assert seen > 20


def test_readme_says_what_ci_runs():
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make test" in ci and ci.strip().splitlines()[-1].strip() == "make test"
    assert "runs [`.ci/run`](.ci/run)" in (ROOT / "README.md").read_text().replace("\n", " ") or \
        ".ci/run" in (ROOT / "README.md").read_text()


# Layers ------------------------------------------------------------------------------------

CORE = ("solvers.problem", "solvers.plan", "solvers.scoring", "solvers.bounds", "solvers.registry",
        "solvers.grading", "solvers.result", "solvers.options", "solvers.errors", "solvers.tolerances",
        "solvers.cluster", "solvers.network", "solvers.deepseek", "solvers.threads", "solvers.backends",
        "solvers.clock", "solvers.work")
# What the core may never reach, function-level imports included: the solver families and
# features (routing traces and the traffic metric among them), the workloads, the session
# layer (entry, compare, files) and the front ends.
FEATURES = ("solvers.heuristics", "solvers.exact", "solvers.certify", "solvers.dispatch", "solvers.dynamics",
            "solvers.replan", "solvers.elastic", "solvers.transfers", "solvers.routing",
            "solvers.traffic", "solvers.workloads", "solvers.bench", "solvers.cli", "solvers.builtin",
            "solvers.entry", "solvers.evaluate", "solvers.compare", "solvers.io", "solvers.planfile")


def _import_graph():
    mods = {}
    for f in (ROOT / "solvers").rglob("*.py"):
        parts = list(f.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = f
    graph = {m: set() for m in mods}
    for m, f in mods.items():
        pkg = m.split(".") if f.name == "__init__.py" else m.split(".")[:-1]
        for node in ast.walk(ast.parse(f.read_text())):    # module level and inside functions alike
            targets = []
            if isinstance(node, ast.ImportFrom):
                base = ".".join(pkg[:len(pkg) - node.level + 1] + ([node.module] if node.module else [])) \
                    if node.level else (node.module or "")
                targets = [base + "." + a.name if base + "." + a.name in mods else base for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            graph[m] |= {t for t in targets if t in mods and t != m}
    return graph


def _reach(graph, start):
    seen, todo = set(), [start]
    while todo:
        for nxt in graph[todo.pop()]:
            if nxt not in seen and nxt != "solvers":       # the package root re-exports, it is not a layer
                seen.add(nxt)
                todo.append(nxt)
    return seen


def test_core_modules_import_neither_workloads_nor_the_cli():
    graph = _import_graph()
    for core in CORE:
        bad = {m for m in _reach(graph, core) if m.startswith(("solvers.workloads", "solvers.cli", "solvers.bench"))}
        assert not bad, (core, bad)


def test_core_imports_no_feature_package():
    """Layers point one way: the core (problem, cluster, plan, options, scorer, bounds,
    registry, grading) reaches no solver family, workload, session or front-end module,
    not even through an import inside a function."""
    graph = _import_graph()
    for core in CORE:
        bad = {m for m in _reach(graph, core) if m.startswith(FEATURES)}
        assert not bad, (core, bad)


def test_no_module_fills_another_modules_global_at_import():
    """A module's top level never writes into a name it imported (``other.X[...] = ``,
    ``other.attr = ``, ``X["key"] = `` on an imported X): a module works the same whatever
    was imported before it."""
    for f in (ROOT / "solvers").rglob("*.py"):
        tree = ast.parse(f.read_text())
        imported = set()
        for node in tree.body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                imported |= {(a.asname or a.name).split(".")[0] for a in node.names}
        for node in tree.body:
            targets = node.targets if isinstance(node, ast.Assign) else \
                [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
            for t in targets:
                while isinstance(t, (ast.Subscript, ast.Attribute)):
                    t = t.value
                    if isinstance(t, ast.Name):
                        assert t.id not in imported, f"{f.relative_to(ROOT)}:{node.lineno} writes into {t.id}"


def test_solvers_never_call_solve():
    """Solvers compose through solvers.registry.run; only front ends call solve()."""
    graph = _import_graph()
    families = ("solvers.heuristics", "solvers.exact", "solvers.certify", "solvers.dispatch", "solvers.dynamics",
                "solvers.replan", "solvers.elastic", "solvers.transfers", "solvers.deepseek")
    for m, targets in graph.items():
        if m.startswith(families):
            assert "solvers.entry" not in targets, m


def test_workloads_do_not_import_cli_internals():
    graph = _import_graph()
    for m in graph:
        if m.startswith("solvers.workloads"):
            assert "solvers.cli" not in graph[m], m


def test_no_import_cycles():
    graph = _import_graph()
    graph = {m: {t for t in ts if t != "solvers"} for m, ts in graph.items()}
    index, low, stack, on, cycles, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    assert cycles == [], cycles


# The one function-level import between project modules: the CLI loads its command
# implementations (torch, every solver) only after parsing, so --help and --version answer
# without torch.
DEFERRED_IMPORTS = {("solvers/cli/__init__.py", "_main", ".commands"), ("solvers/cli/__init__.py", "_main", "..grading"),
                    # --gpu-speed FILE is read through the boundary (torch) only when a file is given:
                    # the app's per-GPU fields parse the same text without torch
                    ("solvers/cluster_text.py", "per_gpu_values", ".")}


def _function_level_project_imports(root=ROOT):
    found = set()
    for f in sorted([*(root / "solvers").rglob("*.py"), *(root / "app").rglob("*.py")]):
        rel = str(f.relative_to(root))
        for fn in ast.walk(ast.parse(f.read_text())):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith(("solvers", "app"))):
                    found.add((rel, fn.name, "." * node.level + (node.module or "")))
                elif isinstance(node, ast.Import):
                    found |= {(rel, fn.name, a.name) for a in node.names if a.name.startswith(("solvers", "app"))}
    return found


def test_no_function_level_imports_between_project_modules():
    """Imports between project modules sit at the top of the module, where the layering and
    cycle tests above (and a reader) see them; optional third-party packages may load late."""
    assert _function_level_project_imports() - DEFERRED_IMPORTS == set()


def test_function_level_import_check_catches_one(tmp_path):
    (tmp_path / "solvers").mkdir()
    (tmp_path / "app").mkdir()
    (tmp_path / "solvers" / "late.py").write_text("def f():\n    from .plan import Plan\n    return Plan\n")
    (tmp_path / "app" / "late.py").write_text("def g():\n    import solvers.io\n    import json\n")
    assert _function_level_project_imports(tmp_path) == {("solvers/late.py", "f", ".plan"),
                                                          ("app/late.py", "g", "solvers.io")}
