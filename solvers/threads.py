"""One torch intra-op thread for a solve: its many small kernels run faster without a team.

The solvers and the scorer run thousands of kernels on tensors of a few hundred thousand
elements or less (reductions over a pack's handful of slots, one item placed per step):
split over an OpenMP team each one pays a barrier, and on a busy machine a barrier waits
for a descheduled thread. Measured on the shared 2-core CPU (one torch thread against two,
median of 3, load average 8-9): kk_swap on 2 layers x 32 experts / 4096 slots / 2 GPUs
1.05 s against 26.8 s; the greedy on DeepSeek-V3's 58 x 256 / 288 / 32 0.086 s against
0.171 s; the micro-batch scheduler's plan validation 3 ms against 160 ms (load 2.5).
Every graded solve runs under :func:`one_intra_op_thread` (``solvers.grading``), and the
work model (:mod:`solvers.work`) is measured that way.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager

import torch

_THREADS_LOCK = threading.Lock()
_THREADS_USERS = 0
_THREADS_BEFORE = 1


@contextmanager
def one_intra_op_thread():
    """Run torch's CPU kernels on the calling thread only, restoring the setting after.

    The setting is process-wide: other threads' torch work runs single-threaded meanwhile.
    Nested and concurrent uses count themselves: the last one out restores the setting."""
    global _THREADS_USERS, _THREADS_BEFORE
    with _THREADS_LOCK:
        if _THREADS_USERS == 0:
            _THREADS_BEFORE = torch.get_num_threads()
            if _THREADS_BEFORE != 1:
                torch.set_num_threads(1)
        _THREADS_USERS += 1
    try:
        yield
    finally:
        with _THREADS_LOCK:
            _THREADS_USERS -= 1
            if _THREADS_USERS == 0 and _THREADS_BEFORE != 1:
                torch.set_num_threads(_THREADS_BEFORE)
