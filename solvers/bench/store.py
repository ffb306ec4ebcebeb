"""Result rows on disk: appended to a CSV journal as they arrive, read back to resume.

``results.csv`` is the durable log: one record per finished task, appended, flushed and
fsync'ed, so a killed run loses at most the task in flight; appending a row costs the same
whatever the number of rows before it. ``results.parquet`` is the finished table, written
(atomically) once when the run finishes (:meth:`ResultStore.write_final`); a run that
appends to a directory removes the then stale Parquet first, so a killed run's directory
holds only the CSV (which :func:`read_results` reads) until ``--resume`` finishes it. A torn
last record (a kill mid-write) is dropped when the store reopens.
"""
from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path
from typing import Any

import pandas as pd

from solvers.errors import LoadFileError, OptionError
from solvers.safewrite import write_atomic, write_text_atomic

# A row's ``termination`` is why the run stopped: a solvers.Termination value, or one of the
# harness's own verdicts below; its ``status`` is what it has: a solvers.SolutionStatus value
# ("none" for the verdicts, "" for a replay of the dynamics suite, which is not one plan).
INVALID_PLAN = "invalid_plan"          # the plan failed validation (a solver bug)
BOUND_VIOLATION = "bound_violation"    # objective below a proven lower bound (a solver or bound bug)
BAD_INPUT = "bad_input"                # the solver rejected the instance or options
HARD_FAILURES = (INVALID_PLAN, BOUND_VIOLATION)
SIMULATED = "simulated"                # termination of a finished replay (dynamics suite)


def options_key(options: dict[str, Any]) -> str:
    """A task's options as canonical JSON (the ``options`` column and part of the resume key)."""
    return json.dumps(options, sort_keys=True, separators=(",", ":"))


# Column order of the tidy table (one row per instance x solver x options x seed).
COLUMNS = [
    # instance
    "instance", "model", "num_layers", "num_experts", "num_groups", "num_replicas", "num_nodes",
    "num_gpus", "slots_per_gpu", "shape", "scenario", "steps", "window", "seed",
    # solver
    "solver", "kind", "options", "policy", "termination", "status", "message",
    # objective and bounds: sums over layers; per-layer values as JSON lists. lower_bound holds
    # for every plan; model_bound only for the solver's restricted model (model_* = its scope)
    "objective", "lower_bound", "gap_own_mean", "gap_own_max",
    "model_bound", "model_policy", "model_counts", "model_colocation", "model_node_budget",
    # quality (shared scorer) and time
    "imbalance_mean", "imbalance_worst", "balancedness", "node_imbalance_mean", "duplicates",
    "off_node_share_mean", "holdout_imbalance_mean", "holdout_imbalance_worst", "wall_time_s", "threads", "host",
    "holdout_step_imbalance_mean",   # the plan on each held-out step on its own (out of sample, per step)
    "scheduled_imbalance_mean",   # imbalance under the scheduled split (docs/dispatch.md), token counts only
    "objective_layers", "lower_bound_layers", "structure_bound_layers", "model_bound_layers",
    # dynamics suite (a trace replayed under a rebalancing setting; wall_time_s is the replay's):
    # the setting, realised imbalance over the scored steps, moves and bytes of all rebalances
    "trace", "setting", "every", "threshold", "migration_slack", "migration", "migration_budget", "expert_bytes",
    "realised_imbalance_mean", "realised_imbalance_p99", "realised_imbalance_worst", "total_moves",
    "total_bytes", "rebalances", "tokens_lost", "steps_scored",
    # the EPLB benchmark's protocol (instances with id suffix R: plan on every window i, score on
    # i+1; means over the pairs; solvers.bench.windows_task)
    "windows_scored", "bench_balancedness_gpu", "bench_balancedness_expert", "bench_speed_score",
    "bench_combined_score", "rolling_holdout_imbalance_mean", "rolling_holdout_step_imbalance_mean",
]
# Filled in when a run finishes, from all rows of the same instance and seed (analysis.derive).
DERIVED = ["best_bound", "gap_mean", "gap_max", "gap_in_policy_mean", "gap_in_model_mean", "gap_best_known",
           "proven_optimum"]
KEY = ["instance", "solver", "options", "seed"]
TEXT = ["instance", "model", "shape", "scenario", "solver", "kind", "options", "policy", "termination", "status",
        "message", "host", "objective_layers", "lower_bound_layers", "structure_bound_layers",
        "model_policy", "model_counts", "model_colocation", "model_node_budget", "model_bound_layers",
        "trace", "setting", "migration"]
# Every other column is a number (proven_optimum, a DERIVED flag, is the one bool).
NUMERIC = [c for c in COLUMNS + DERIVED if c not in TEXT and c != "proven_optimum"]


def is_dynamics(df: pd.DataFrame) -> pd.Series:
    """[rows] bool: rows of dynamics tasks (a trace replayed under a rebalancing setting)."""
    # such a row has a setting; the solver tables and profiles leave it out
    if "setting" not in df.columns:
        return pd.Series(False, index=df.index)
    return df["setting"].fillna("").astype(str) != ""

CSV_NAME, PARQUET_NAME, META_NAME, SUMMARY_NAME = "results.csv", "results.parquet", "meta.json", "summary.md"
OWN_FILES = (CSV_NAME, PARQUET_NAME, META_NAME, SUMMARY_NAME, "profile.png", "profile.html")


def normalise(df: pd.DataFrame) -> pd.DataFrame:
    """Column order and dtypes of a results table (so CSV and Parquet read back alike)."""
    cols = COLUMNS + [c for c in DERIVED if c in df.columns]
    df = df.reindex(columns=cols)
    for c in NUMERIC:
        if c in df.columns:
            df[c] = pd.to_numeric(df[c], errors="coerce").astype("float64")
    for c in TEXT:
        df[c] = df[c].astype("object").where(df[c].notna(), "").astype(str)
    if "proven_optimum" in df.columns:
        df["proven_optimum"] = df["proven_optimum"].astype(bool)
    for c in ("seed", "num_layers", "num_experts", "num_groups", "num_replicas", "num_nodes", "num_gpus",
              "slots_per_gpu", "steps", "window"):
        df[c] = df[c].astype("int64")
    return df


def read_results(directory: str | Path) -> pd.DataFrame:
    """The results table of a run directory (Parquet when present, else CSV)."""
    d = Path(directory)
    if not d.is_dir():
        raise LoadFileError("results", f"{d} is not a directory of benchmark results")
    path = d / PARQUET_NAME if (d / PARQUET_NAME).is_file() else d / CSV_NAME
    if not path.is_file():
        raise LoadFileError("results", f"{d} holds no {PARQUET_NAME} or {CSV_NAME}")
    return read_results_bytes(_capped_bytes(path), path.name, str(path))


def _capped_bytes(path: Path) -> bytes:
    """The bytes of a results file, refused before reading when above :data:`MAX_RESULTS_BYTES`."""
    size = path.stat().st_size
    if size > MAX_RESULTS_BYTES:
        raise LoadFileError("results", f"{path}: {size} bytes, above the {MAX_RESULTS_BYTES}-byte limit of a results table")
    return path.read_bytes()


# A results table of a long benchmark is a few MB; far larger is not one (and would be held
# in memory whole).
MAX_RESULTS_BYTES = 256 << 20


def read_results_bytes(data: bytes, name: str, label: str | None = None) -> pd.DataFrame:
    """The results table in ``data`` (a ``results.parquet`` or ``results.csv`` by ``name``'s
    suffix, e.g. an upload); anything unreadable is one :class:`LoadFileError` line."""
    label = label or name
    if len(data) > MAX_RESULTS_BYTES:
        raise LoadFileError("results", f"{label}: {len(data)} bytes, above the {MAX_RESULTS_BYTES}-byte limit")
    kind = Path(name).suffix.lower()
    if kind not in (".parquet", ".csv"):
        raise LoadFileError("results", f"{label}: a results table is {PARQUET_NAME} or {CSV_NAME}, not {kind or name}")
    try:
        df = pd.read_parquet(io.BytesIO(data)) if kind == ".parquet" else _read_csv_text(data.decode("utf-8"))
    except Exception as exc:  # noqa: BLE001  pandas and arrow raise many types on a malformed file
        raise LoadFileError("results", f"{label}: not a readable {kind[1:]} results table "
                            f"({type(exc).__name__})") from None
    missing = [c for c in KEY + ["status", "wall_time_s"] if c not in df.columns]
    if missing:
        raise LoadFileError("results", f"{label}: not a benchmark results table (missing column {missing[0]!r})")
    try:
        return normalise(df)
    except (ValueError, TypeError, KeyError, OverflowError) as exc:
        raise LoadFileError("results", f"{label}: a column has values of the wrong type ({type(exc).__name__}: "
                            f"{str(exc).splitlines()[0][:120] if str(exc) else ''})") from None


def _complete_records(text: str) -> str:
    """``text`` (CSV with a header) without a torn last record: a kill mid-write leaves a
    partial line, or a partial record that ends inside a quoted field spanning lines."""
    if text and not text.endswith("\n"):          # killed mid-write: drop the partial line
        text = text[: text.rfind("\n") + 1]
    lines = text.splitlines(keepends=True)
    reader = csv.reader(iter(lines), strict=True)
    width, kept = None, 0                          # lines of the complete records so far
    try:
        for record in reader:
            if width is None:
                width = len(record)
            elif len(record) != width:             # the last record, cut at a quoted newline
                break
            kept = reader.line_num
    except csv.Error:                              # e.g. the file ends inside a quoted field
        pass
    return "".join(lines[:kept])


def _read_csv_text(text: str) -> pd.DataFrame:
    text = _complete_records(text)
    if not text.strip():
        return pd.DataFrame(columns=COLUMNS)
    return pd.read_csv(io.StringIO(text), dtype={c: str for c in TEXT}, keep_default_na=False,
                       na_values={c: [""] for c in NUMERIC})


class ResultStore:
    """Rows of one run directory. ``resume``: keep earlier rows and report their keys as done."""

    def __init__(self, directory: str | Path, *, resume: bool = False, overwrite: bool = False):
        self.dir = Path(directory)
        if self.dir.exists() and not self.dir.is_dir():
            raise OptionError("out", f"{self.dir} exists and is not a directory")
        if resume and overwrite:
            raise OptionError("overwrite", "cannot both resume and overwrite a run")
        self.dir.mkdir(parents=True, exist_ok=True)
        self.csv_path, self.parquet_path = self.dir / CSV_NAME, self.dir / PARQUET_NAME
        if overwrite:  # only the files a run writes; anything else in the directory stays
            for name in OWN_FILES:
                (self.dir / name).unlink(missing_ok=True)
        has_csv = self.csv_path.is_file() and self.csv_path.stat().st_size > 0
        existing = has_csv or self.parquet_path.is_file()   # a Parquet-only set is results too
        if existing and not resume:
            raise OptionError("out", f"{self.dir} already holds results; pass --resume to continue "
                              "that run, --overwrite to replace it, or choose another directory")
        self.rows: list[dict[str, Any]] = []
        if existing:
            # the CSV is appended and synced per row, so it is the record; Parquet only without it
            old = _read_csv_text(_capped_bytes(self.csv_path).decode("utf-8")) if has_csv else read_results(self.dir)
            old = old.drop(columns=[c for c in DERIVED if c in old.columns])
            self.rows = [{k: v for k, v in r.items() if k in COLUMNS} for r in old.to_dict("records")]
        self._rewrite_csv()    # drops any partial record and fixes the header
        if has_csv:            # the CSV is the record; a Parquet beside it may be behind it
            self.parquet_path.unlink(missing_ok=True)
        self._parquet_stale = False          # set by the first append (until write_final)

    def done_keys(self) -> set[tuple]:
        return {(str(r["instance"]), str(r["solver"]), str(r["options"]), int(r["seed"])) for r in self.rows}

    def append(self, row: dict[str, Any]) -> None:
        unknown = set(row) - set(COLUMNS)
        if unknown:
            raise ValueError(f"row has columns the store does not know: {sorted(unknown)}")
        if not self._parquet_stale:      # readers get the CSV until write_final
            self.parquet_path.unlink(missing_ok=True)
            self._parquet_stale = True
        self.rows.append(row)
        buf = io.StringIO()
        csv.DictWriter(buf, COLUMNS, lineterminator="\n").writerow(row)
        with self.csv_path.open("a") as fh:  # one write per row, then to disk
            fh.write(buf.getvalue())
            fh.flush()
            os.fsync(fh.fileno())

    def frame(self) -> pd.DataFrame:
        return normalise(pd.DataFrame(self.rows, columns=COLUMNS))

    def _rewrite_csv(self) -> None:
        def write(tmp: Path) -> None:       # on disk (fsync) before a stale Parquet may be removed
            with tmp.open("w") as fh:
                w = csv.DictWriter(fh, COLUMNS, lineterminator="\n")
                w.writeheader()
                w.writerows(self.rows)

        write_atomic(self.csv_path, write)

    def write_final(self, df: pd.DataFrame) -> None:
        """Replace both files with the finished table (rows plus the DERIVED columns)."""
        df = normalise(df)
        write_atomic(self.csv_path, lambda tmp: df.to_csv(tmp, index=False))
        write_atomic(self.parquet_path, lambda tmp: df.to_parquet(tmp, index=False))
        self._parquet_stale = False


def write_json(path: Path, data: Any) -> None:
    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")

