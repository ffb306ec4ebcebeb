"""What identifies and classifies a result row, shared by solver tasks and dynamics tasks."""
from __future__ import annotations

import json
from typing import Any

import pandas as pd

# A row's ``termination`` is why the run stopped: a solvers.Termination value, or one of the
# harness's own verdicts below; its ``status`` is what it has: a solvers.SolutionStatus value
# ("none" for the verdicts, "" for a replay of the dynamics suite, which is not one plan).
INVALID_PLAN = "invalid_plan"          # the plan failed validation (a solver bug)
BOUND_VIOLATION = "bound_violation"    # objective below a proven lower bound (a solver or bound bug)
BAD_INPUT = "bad_input"                # the solver rejected the instance or options
HARD_FAILURES = (INVALID_PLAN, BOUND_VIOLATION)
SIMULATED = "simulated"                # termination of a finished replay (dynamics suite)

# Rows written before termination and solution status were apart have no ``termination`` and
# one ``status`` holding both: optimal (every layer met the lower bound), optimal_in_model,
# feasible, time_limit, infeasible, error, or a verdict above. Old value -> (termination, status);
# None: decided per row by legacy_rows.
_LEGACY = {"optimal": (None, "proven_optimal"), "optimal_in_model": (None, "optimal_in_model"),
           "feasible": ("completed", "feasible"), "time_limit": ("time_limit", None),
           "infeasible": ("infeasible", "none"), "error": ("error", "none"),
           INVALID_PLAN: (INVALID_PLAN, "none"), BOUND_VIOLATION: (BOUND_VIOLATION, "none"),
           BAD_INPUT: (BAD_INPUT, "none"), SIMULATED: (SIMULATED, "")}


# Columns renamed since: the held-out window is "holdout" everywhere (CLI --holdout, compare).
RENAMED = {"oos_imbalance_mean": "holdout_imbalance_mean", "oos_imbalance_worst": "holdout_imbalance_worst"}


def legacy_rows(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with old column names renamed (:data:`RENAMED`) and rows of the old layout (an
    empty or missing ``termination``) given both columns; rows of the new layout are left as they are, so it may run twice.

    Old optimal / optimal_in_model: the plan met the solver's proven bound, so an exact
    solver proved its optimum (termination "optimal") and a heuristic ran to its end
    ("completed"). Old feasible: "completed" (the old rows did not record an exact backend
    stopping at its gap apart). Old time_limit: the incumbent is counted "feasible" (as the
    old tables counted it: not optimal), "none" without a plan."""
    renamed = {old: new for old, new in RENAMED.items() if old in df.columns and new not in df.columns}
    if renamed:
        df = df.rename(columns=renamed)
    if "status" not in df.columns:
        return df
    term = df["termination"] if "termination" in df.columns else pd.Series("", index=df.index, dtype=object)
    old = (term.isna() | (term.astype(str) == "")) & df["status"].isin(list(_LEGACY))
    if not bool(old.any()):
        return df if "termination" in df.columns else df.assign(termination=term)
    df = df.copy()
    df["termination"] = term.astype(object)
    exact = df["kind"].astype(str) == "exact" if "kind" in df.columns else pd.Series(False, index=df.index)
    objective = df["objective"] if "objective" in df.columns else pd.Series(None, index=df.index, dtype=object)
    has_plan = pd.to_numeric(objective, errors="coerce").notna()
    for i in df.index[old]:
        was = df.at[i, "status"]
        t, s = _LEGACY[was]
        df.at[i, "termination"] = t if t is not None else ("optimal" if exact[i] else "completed")
        df.at[i, "status"] = s if s is not None else ("feasible" if has_plan[i] else "none")
    return df


def options_key(options: dict[str, Any]) -> str:
    """A task's options as canonical JSON (the ``options`` column and part of the resume key)."""
    return json.dumps(options, sort_keys=True, separators=(",", ":"))
