"""``eplb solvers``: the registered solvers and their option schemas."""
from __future__ import annotations

import argparse
import json
import textwrap

from .. import builtin  # noqa: F401  registers every solver
from ..plugins import is_plugin
from ..registry import get_solver, solver_names
from .inputs import aligned


def _work_line(spec) -> str:
    """The solver's work model (docs/robustness.md): seconds on 2 cores, capped before it runs."""
    model = spec.work
    if model is None:
        return "Work model: not declared (the greedy's)."
    bounded = "; its time limit bounds the rest" if model.time_limited else ""
    return f"Work model (seconds on 2 cores, refused above the work cap): `{model.formula}`{bounded}."


def solver_catalogue_markdown() -> str:
    """The built-in solvers and their option schemas as Markdown (docs/solvers.md embeds it;
    installed planners, which differ from one machine to the next, are left out)."""
    out = []
    for name in (n for n in solver_names() if not is_plugin(n)):
        spec = get_solver(name)
        need = "" if not spec.requires else f" Needs: `{spec.requires}`."
        out += [f"### `{name}` ({spec.kind})", "", spec.description + "." + need, "", _work_line(spec), ""]
        if not spec.schema:
            out += ["No options.", ""]
            continue
        out += ["| option | values | default | help |", "|---|---|---|---|"]
        for o in spec.schema:
            default = repr(o.default) if o.type is object else json.dumps(o.default)
            out.append(f"| `{o.name}` | {o.describe().replace('|', '&#124;')} | `{default}` | {o.help} |")
        out.append("")
    return "\n".join(out)


def cmd_solvers(args: argparse.Namespace) -> int:
    if args.markdown:
        print(solver_catalogue_markdown(), end="")
        return 0
    specs = [get_solver(n) for n in solver_names()]
    if args.json:
        print(json.dumps([{"name": s.name, "kind": s.kind, "plugin": is_plugin(s.name),
                           "available": s.is_available(), "requires": s.requires,
                           "description": s.description, "options": [o.as_dict() for o in s.schema],
                           "work": None if s.work is None else {"formula": s.work.formula,
                                                                "time_limited": s.work.time_limited}}
                          for s in specs], indent=2))
        return 0
    for spec in specs:
        avail = "available" if spec.is_available() else f"unavailable ({spec.requires})"
        kind = "plugin" if is_plugin(spec.name) else spec.kind      # foreign code: docs/own-algorithm.md
        print(f"{spec.name}  [{kind}, {avail}]\n  {spec.description}\n  {_work_line(spec)}")
        if not spec.schema:
            print("  (no options)\n")
            continue
        rows = [(o.name, o.describe(), repr(o.default) if o.type is object else json.dumps(o.default), o.help)
                for o in spec.schema]
        print(textwrap.indent(aligned([("option", "values", "default", "help"), *rows]), "  ") + "\n")
    return 0
