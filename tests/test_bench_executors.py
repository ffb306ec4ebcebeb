"""Executors: a local process pool, a real Dask LocalCluster and a real local Ray cluster, each
started by the test, must give the same rows as an in-process run of the tiny suite."""
from __future__ import annotations

import pytest

from solvers.bench import run as bench_run
from solvers.bench.executors import run_tasks
from solvers.bench.store import read_results
from solvers.bench.suites import get_suite
from solvers.bench.tasks import suite_tasks

# Deterministic solvers, so rows can be compared exactly; only timing and host may differ.
SOLVERS = ["deepseek", "kk_swap"]
VOLATILE = {"wall_time_s", "host"}


def _canon(rows):
    # NaN (a metric that does not apply, e.g. off-node share without groups) never equals itself
    nan_free = ({k: (None if isinstance(v, float) and v != v else v) for k, v in r.items()} for r in rows)
    return sorted(({k: v for k, v in r.items() if k not in VOLATILE} for r in nan_free),
                  key=lambda r: (r["instance"], r["solver"], r["seed"]))


@pytest.fixture(scope="module")
def tasks():
    return suite_tasks(get_suite("tiny"), solvers=SOLVERS, seeds=[0, 1])


@pytest.fixture(scope="module")
def local_rows(tasks):
    rows = list(run_tasks(tasks))
    assert len(rows) == len(tasks) == 8
    return _canon(rows)


@pytest.mark.slow
def test_process_pool_matches_inline(tasks, local_rows):
    assert _canon(run_tasks(tasks, "local", jobs=2)) == local_rows


def test_dask_local_cluster_matches_local_run(tasks, local_rows, tmp_path):
    import distributed  # the dask extra is part of the dev install: CI must run this, not skip it
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster:
        rows = list(run_tasks(tasks, "dask", address=cluster.scheduler_address))
        assert _canon(rows) == local_rows
        # and through the runner's command line
        out = tmp_path / "dask"
        assert bench_run.main(["--suite", "tiny", "--out", str(out), "--solvers", ",".join(SOLVERS),
                               "--seeds", "0,1", "--executor", "dask", "--address", cluster.scheduler_address,
                               "--no-progress", "--figure", "none"]) == 0
    from solvers.bench.store import DERIVED
    stored = read_results(out)
    assert _canon(stored.drop(columns=[c for c in DERIVED if c in stored.columns]).to_dict("records")) \
        == _canon(_as_read(local_rows, tmp_path))


def test_ray_local_cluster_matches_local_run(tasks, local_rows):
    import ray  # the ray extra is part of the dev install: CI must run this, not skip it

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        assert ray.cluster_resources().get("CPU") == 2
        rows = list(run_tasks(tasks, "ray"))
        assert ray.is_initialized()            # the executor leaves a cluster it did not start running
    finally:
        ray.shutdown()
    assert _canon(rows) == local_rows


def _as_read(rows, tmp_path):
    """Rows as they read back from disk (same dtypes as a stored run)."""
    from solvers.bench.store import ResultStore

    store = ResultStore(tmp_path / "ref")
    for r in rows:
        store.append(dict(r, wall_time_s=0.0, host=""))
    return read_results(tmp_path / "ref").to_dict("records")
