"""What identifies and classifies a result row, shared by solver tasks and dynamics tasks."""
from __future__ import annotations

import json
from typing import Any

# Statuses a row can have beyond solvers.Termination: the harness's own verdicts.
INVALID_PLAN = "invalid_plan"          # the plan failed validation (a solver bug)
BOUND_VIOLATION = "bound_violation"    # objective below a proven lower bound (a solver or bound bug)
BAD_INPUT = "bad_input"                # the solver rejected the instance or options
HARD_FAILURES = (INVALID_PLAN, BOUND_VIOLATION)


def options_key(options: dict[str, Any]) -> str:
    """A task's options as canonical JSON (the ``options`` column and part of the resume key)."""
    return json.dumps(options, sort_keys=True, separators=(",", ":"))
