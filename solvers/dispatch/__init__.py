"""Dispatch models: how a micro-batch's tokens are split over an expert's replicas.

- even split: each replica of e serves ``t_e / c_e`` (vLLM, SGLang, TensorRT-LLM);
- scheduled split: per micro-batch, the split minimising the max GPU load
  (:func:`schedule_tokens`, exact, batched over micro-batches and layers in torch).

Importing this package registers the scheduling-aware planners ``sched_spread`` and
``uniform_replicas`` (:mod:`solvers.dispatch.planners`).
"""
from .schedule import schedule_tokens, schedule_with_bound

from . import planners  # noqa: E402,F401  registers the solvers

__all__ = ["schedule_tokens", "schedule_with_bound"]
