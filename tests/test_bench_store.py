"""The result store on its own: appends cost the same at every row (no rewrite of what is
already on disk), torn records are dropped, a resumed directory never reads a stale Parquet."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from solvers.bench.store import COLUMNS, ResultStore, read_results


def _row(i: int, **extra) -> dict:
    row = {c: "" for c in COLUMNS}
    row.update(instance=f"inst-{i % 7}", model="m", num_layers=1, num_experts=8, num_groups=1, num_replicas=8,
               num_nodes=1, num_gpus=2, slots_per_gpu=4, steps=1, window=1, seed=i, solver="s", kind="heuristic",
               options="{}", termination="completed", status="feasible", objective=1.0 + i, lower_bound=1.0, wall_time_s=0.5,
               objective_layers=json.dumps([1.0 + i]))
    row.update(extra)
    return row


class _WriteCounter:
    """Counts bytes written through Path.open handles and Parquet writes."""

    def __init__(self, monkeypatch):
        self.bytes, self.parquet = 0, 0
        counter = self
        real_open = Path.open

        class Handle:
            def __init__(self, fh):
                self._fh = fh

            def write(self, text):
                counter.bytes += len(text)
                return self._fh.write(text)

            def __getattr__(self, name):
                return getattr(self._fh, name)

            def __enter__(self):
                self._fh.__enter__()
                return self

            def __exit__(self, *exc):
                return self._fh.__exit__(*exc)

        def counting_open(path, mode="r", *args, **kwargs):
            fh = real_open(path, mode, *args, **kwargs)
            return Handle(fh) if any(m in mode for m in "wa") else fh

        real_to_parquet = pd.DataFrame.to_parquet

        def counting_to_parquet(df, *args, **kwargs):
            counter.parquet += 1
            return real_to_parquet(df, *args, **kwargs)

        monkeypatch.setattr(Path, "open", counting_open)
        monkeypatch.setattr(pd.DataFrame, "to_parquet", counting_to_parquet)


def test_append_cost_does_not_grow_with_rows(tmp_path, monkeypatch):
    """Each append writes its own record and nothing else: the bytes written by the 200th
    append are those of the 200th row, not of the 200 rows before it (the store used to
    rewrite the whole Parquet file per row)."""
    counter = _WriteCounter(monkeypatch)
    store = ResultStore(tmp_path / "run")
    csv_path = tmp_path / "run" / "results.csv"
    per_append = []
    for i in range(200):
        before, size = counter.bytes, csv_path.stat().st_size
        store.append(_row(i))
        per_append.append(counter.bytes - before)
        assert csv_path.stat().st_size - size == per_append[-1]     # exactly the record appended
    assert counter.parquet == 0                                     # no Parquet while rows arrive
    assert max(per_append) < 2 * min(per_append)                    # flat: rows differ in a few digits
    assert max(per_append[-20:]) <= max(per_append[:20]) + 10
    # the finished table is written once, with every row
    store.write_final(store.frame())
    assert counter.parquet == 1
    assert len(read_results(tmp_path / "run")) == 200


def test_a_killed_run_reads_back_from_the_csv(tmp_path):
    store = ResultStore(tmp_path / "run")
    for i in range(3):
        store.append(_row(i))
    # killed here: no Parquet yet; the CSV is the results
    assert not (tmp_path / "run" / "results.parquet").exists()
    assert read_results(tmp_path / "run")["seed"].tolist() == [0, 1, 2]


def test_resuming_a_finished_run_never_reads_a_stale_parquet(tmp_path):
    store = ResultStore(tmp_path / "run")
    for i in range(2):
        store.append(_row(i))
    store.write_final(store.frame())
    assert (tmp_path / "run" / "results.parquet").is_file()
    store = ResultStore(tmp_path / "run", resume=True)
    store.append(_row(2))                           # ... and killed before write_final
    assert sorted(read_results(tmp_path / "run")["seed"]) == [0, 1, 2]
    again = ResultStore(tmp_path / "run", resume=True)
    assert len(again.rows) == 3
    again.write_final(again.frame())
    assert sorted(pd.read_parquet(tmp_path / "run" / "results.parquet")["seed"]) == [0, 1, 2]


def test_torn_record_inside_a_quoted_multiline_field_is_dropped(tmp_path):
    store = ResultStore(tmp_path / "run")
    store.append(_row(0, message="first line\nsecond line"))
    store.append(_row(1))
    with (tmp_path / "run" / "results.csv").open("a") as fh:     # killed inside a quoted newline
        fh.write('inst-2,m,1,8,1,8,1,2,4,,,1,1,2,s,heuristic,{},,feasible,"one line\n')
    resumed = ResultStore(tmp_path / "run", resume=True)
    assert [r["seed"] for r in resumed.rows] == [0, 1]
    assert resumed.rows[0]["message"] == "first line\nsecond line"
    resumed.append(_row(2))
    assert read_results(tmp_path / "run")["seed"].tolist() == [0, 1, 2]


@pytest.mark.parametrize("tail", ["inst-9,m,1", 'inst-9,m,1,8,"open quote'])
def test_torn_last_line_is_dropped(tmp_path, tail):
    store = ResultStore(tmp_path / "run")
    store.append(_row(0))
    with (tmp_path / "run" / "results.csv").open("a") as fh:
        fh.write(tail)
    assert len(ResultStore(tmp_path / "run", resume=True).rows) == 1
