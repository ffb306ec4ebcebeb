"""Where tasks run: in this process, a local process pool, a Dask cluster or a Ray cluster.

Every executor yields rows as tasks finish (in completion order), so the store can write
them as they arrive. One job per core and one torch thread per job keep timings honest.
Dask (``distributed``) and Ray are optional extras, imported only when asked for.
"""
from __future__ import annotations

import importlib.util
import multiprocessing
import os
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from typing import Any, Iterator, Sequence

import torch

from solvers.childproc import die_with_parent
from solvers.errors import OptionError

from .tasks import Task, run_task

EXECUTORS = ("local", "dask", "ray")


def check_executor(name: str, address: str | None, jobs: int) -> None:
    if name not in EXECUTORS:
        raise OptionError("executor", f"unknown executor {name!r}; choose one of {', '.join(EXECUTORS)}")
    if address is not None and name == "local":
        raise OptionError("address", "only the dask and ray executors take an address")
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise OptionError("jobs", f"must be an integer >= 1, got {jobs!r}")
    module, install = {"dask": ("distributed", "'dask[distributed]'"), "ray": ("ray", "ray")}.get(name, (None, ""))
    if module is not None and importlib.util.find_spec(module) is None:
        raise OptionError("executor", f"{name} needs `pip install {install}`")


def run_tasks(tasks: Sequence[Task], executor: str = "local", *, jobs: int = 1, address: str | None = None,
              threads: int = 1) -> Iterator[dict[str, Any]]:
    """Run ``tasks`` and yield their rows as they finish.

    local with jobs=1 runs in this process (no start-up cost); jobs>1 uses a spawned process
    pool. dask/ray connect to ``address`` when given, else start a local cluster of ``jobs``
    single-threaded workers (and stop it afterwards).
    """
    check_executor(executor, address, jobs)
    if not tasks:
        return iter(())
    if executor == "dask":
        return _run_dask(tasks, jobs, address, threads)
    if executor == "ray":
        return _run_ray(tasks, jobs, address, threads)
    if jobs == 1:
        return _run_inline(tasks, threads)
    return _run_pool(tasks, jobs, threads)


def _run_inline(tasks: Sequence[Task], threads: int) -> Iterator[dict[str, Any]]:
    before = torch.get_num_threads()
    try:
        for task in tasks:
            yield run_task(task, threads)
    finally:
        torch.set_num_threads(before)


def _init_worker(threads: int, parent: int | None = None) -> None:
    # A worker (and, through it, any CBC child) dies with the run: kill -9 of the runner
    # leaves no process behind.

    die_with_parent(parent)
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))
    torch.set_num_threads(threads)


def _run_pool(tasks: Sequence[Task], jobs: int, threads: int) -> Iterator[dict[str, Any]]:
    # spawn, not fork: forking a process that already runs torch's thread pools can deadlock.
    ctx = multiprocessing.get_context("spawn")
    pool = ProcessPoolExecutor(max_workers=jobs, mp_context=ctx, initializer=_init_worker,
                               initargs=(threads, os.getpid()))
    finished = False
    try:
        pending = {pool.submit(run_task, t, threads) for t in tasks}
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                yield fut.result()
        finished = True
    finally:
        if not finished:  # interrupted or failed: stop the workers now, not after their tasks
            for proc in list((getattr(pool, "_processes", None) or {}).values()):
                proc.terminate()
        pool.shutdown(wait=finished, cancel_futures=True)


def _run_dask(tasks: Sequence[Task], jobs: int, address: str | None, threads: int) -> Iterator[dict[str, Any]]:
    from distributed import Client, LocalCluster, as_completed

    # a local cluster of single-threaded workers unless given a scheduler's address
    cluster = None if address is not None else LocalCluster(n_workers=jobs, threads_per_worker=1, processes=True,
                                                            dashboard_address=None)
    client = Client(address if cluster is None else cluster)
    try:
        # pure=False: a task is a measurement, never served from Dask's cache of results.
        futures = [client.submit(run_task, t, threads, pure=False) for t in tasks]
        for fut in as_completed(futures):
            yield fut.result()
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def _run_ray(tasks: Sequence[Task], jobs: int, address: str | None, threads: int) -> Iterator[dict[str, Any]]:
    import ray

    started = False
    if not ray.is_initialized():
        if address is None:
            ray.init(num_cpus=jobs, include_dashboard=False, log_to_driver=False)
        else:
            ray.init(address=address, log_to_driver=False)
        started = True
    try:
        remote = ray.remote(num_cpus=1)(run_task)
        pending = [remote.remote(t, threads) for t in tasks]
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for ref in done:
                yield ray.get(ref)
    finally:
        if started:
            ray.shutdown()
