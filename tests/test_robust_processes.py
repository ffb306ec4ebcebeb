"""kill -9 leaves no child behind: CBC and benchmark workers die with their parent (Linux)."""
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"      # a zombie has exited
    except FileNotFoundError:
        return False


def _wait_gone(pid: int, seconds: float = 20.0) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return False


def _kill_parent_and_check_child(script: str):
    """Run ``script`` (prints a child's pid, then waits); SIGKILL it; the child must go."""
    parent = subprocess.Popen([sys.executable, "-c", textwrap.dedent(script)], cwd=ROOT, stdout=subprocess.PIPE,
                              text=True)
    child = None
    try:
        line = parent.stdout.readline()
        assert line.strip().isdigit(), f"no child pid from the script: {line!r}"
        child = int(line)
        assert _alive(child)
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=30)
        assert _wait_gone(child), f"child {child} survived its parent's kill -9"
    finally:
        if parent.poll() is None:
            parent.kill()
        if child is not None and _alive(child):
            os.kill(child, signal.SIGKILL)          # clean up after a failing run


def test_a_tied_child_dies_with_its_parent():
    _kill_parent_and_check_child("""
        import time
        from solvers.childproc import tied_subprocess_module
        child = tied_subprocess_module().Popen(["sleep", "120"])
        print(child.pid, flush=True)
        time.sleep(120)
    """)


def test_cbc_runs_tied_to_its_parent():
    """The CBC command PuLP launches goes through the tied Popen (checked on PuLP's module)."""
    pytest.importorskip("pulp")
    from pulp.apis import coin_api

    from solvers.exact.milp import cbc_command

    cbc_command(msg=False)
    assert getattr(coin_api.subprocess, "_eplb_tied", False)
    assert coin_api.subprocess.PIPE == subprocess.PIPE                # everything else is subprocess's


@pytest.mark.slow
def test_benchmark_worker_dies_with_the_runner():
    """A pool worker started the way the benchmark starts them exits when the runner is killed."""
    _kill_parent_and_check_child("""
        import multiprocessing, os, time
        from concurrent.futures import ProcessPoolExecutor
        from solvers.bench.executors import _init_worker
        pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"), initializer=_init_worker,
                                   initargs=(1, os.getpid()))
        print(pool.submit(os.getpid).result(), flush=True)
        time.sleep(120)
    """)
