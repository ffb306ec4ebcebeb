"""Micro-batches from a trace, and their imbalance under both dispatch models.

A trace's step holds many micro-batches' worth of tokens; what one micro-batch sees is
noisier. :func:`sample_microbatches` draws micro-batches of ``tokens`` tokens with top-k
routing from the per-step routing distribution (``k * tokens`` expert assignments,
multinomial over the step's expert shares); :func:`steps_as_microbatches` takes the
trace's steps as they are.
"""
from __future__ import annotations

import torch

from ..cluster import Cluster
from ..errors import ProblemError
from ..plan import Plan
from ..problem import Problem
from ..scoring import check_tokens, microbatch_summary, score
from .schedule import schedule_tokens


def multinomial_counts(probs: torch.Tensor, total: int, generator: torch.Generator | None = None
                       ) -> torch.Tensor:
    """[N, E] int64 counts ~ Multinomial(total, probs[n]) for each row of probs [N, E].

    Drawn expert by expert from binomials conditioned on what is left (exact, and E small
    kernels instead of ``total`` draws per row).
    """
    p = probs.to(torch.float64)
    p = p / p.sum(-1, keepdim=True).clamp_min(1e-300)
    rest = p.flip(-1).cumsum(-1).flip(-1)                 # [N, E] share of experts e..E-1
    left = torch.full(p.shape[:1], float(total), dtype=torch.float64, device=p.device)
    out = torch.empty(p.shape, dtype=torch.int64, device=p.device)
    for e in range(p.shape[1] - 1):
        q = torch.where(rest[:, e] > 0, p[:, e] / rest[:, e].clamp_min(1e-300), torch.zeros_like(left))
        c = torch.binomial(left, q.clamp(0, 1), generator=generator)
        out[:, e] = c.to(torch.int64)
        left = left - c
    out[:, -1] = left.to(torch.int64)
    return out


# Sampled micro-batches held at once ([B, L, E] counts and their float64 shares: 16 bytes each,
# 1 GiB at the cap).
MAX_SAMPLED_CELLS = 1 << 26


def sample_microbatches(trace: torch.Tensor, num_microbatches: int, tokens: int = 4096, top_k: int = 8,
                        seed: int = 0) -> torch.Tensor:
    """[B, L, E] int64 token counts of B micro-batches sampled from trace [T, L, E] (or [L, E]).

    Each micro-batch picks a step uniformly at random and draws ``top_k * tokens`` expert
    assignments per layer from that step's expert shares.
    """
    for name, value in (("microbatches", num_microbatches), ("tokens_per_microbatch", tokens), ("top_k", top_k)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ProblemError(name, f"must be a positive integer, got {value!r}")
    t = _as_trace(trace)
    T, L, E = t.shape
    if top_k > E:
        raise ProblemError("top_k", f"must be <= the number of experts ({E}), got {top_k}")
    if num_microbatches * L * E > MAX_SAMPLED_CELLS:
        raise ProblemError("microbatches", f"{num_microbatches} micro-batches x {L} layers x {E} experts is above "
                           f"the limit of {MAX_SAMPLED_CELLS} sampled counts; sample fewer micro-batches")
    if tokens * top_k >= 2**53:
        raise ProblemError("tokens_per_microbatch", f"tokens x top_k must stay below 2**53, got {tokens * top_k}")
    g = torch.Generator(device="cpu").manual_seed(int(seed))
    steps = torch.randint(0, T, (num_microbatches,), generator=g)
    probs = t[steps].to(torch.float64).reshape(num_microbatches * L, E)
    empty = probs.sum(-1) <= 0
    probs[empty] = 1.0                                      # a step without tokens: uniform routing
    counts = multinomial_counts(probs.cpu(), tokens * top_k, g)
    return counts.view(num_microbatches, L, E).to(t.device)


def steps_as_microbatches(trace: torch.Tensor) -> torch.Tensor:
    """[T, L, E] int64: each step of the trace is one micro-batch (counts must be whole)."""
    t = _as_trace(trace)
    if t.is_floating_point() and not bool((t == t.round()).all()):
        raise ProblemError("loads", "steps as micro-batches need whole token counts, found fractional values")
    return t.to(torch.int64)


def _as_trace(trace: torch.Tensor) -> torch.Tensor:
    t = torch.as_tensor(trace)
    if t.dim() == 2:
        t = t.unsqueeze(0)
    if t.dim() != 3 or t.numel() == 0:
        raise ProblemError("loads", f"must be a [steps, layers, experts] trace, got shape {tuple(t.shape)}")
    if not bool(torch.isfinite(t.to(torch.float64)).all()) or bool((t < 0).any()):
        raise ProblemError("loads", "token counts must be finite and >= 0")
    return t


def microbatch_imbalance(plan: Plan, tokens: torch.Tensor, cluster: Cluster | int, split: str = "even"
                         ) -> torch.Tensor:
    """[B, L] float64 max / mean GPU load of every micro-batch and layer under ``split``, from
    the shared scorer (the mean over the live GPUs, as ``eplb score`` reports it).
    tokens: [B, L, E] counts. cluster: the plan's cluster (uneven slot counts and failed GPUs
    map slots to GPUs by its slot map), or a GPU count for a plan of R/P slots on each."""
    if split not in ("even", "scheduled"):
        raise ProblemError("split", f"must be even or scheduled, got {split!r}")
    t = check_tokens(tokens, plan)
    if not isinstance(cluster, Cluster):
        cluster = Cluster(1, cluster, plan.phy2log.shape[-1])
    problem = Problem(t.sum(0).to(torch.float64), cluster=cluster)                   # weights [L, E]
    sc = score(problem, plan.to(t.device), split=split, tokens=t, scheduler=schedule_tokens)
    return sc.microbatch_imbalance


def imbalance_stats(imbalance: torch.Tensor) -> dict[str, float]:
    """mean, p50, p99 and worst of a [B, L] imbalance tensor (over every micro-batch and layer):
    the scorer's :func:`solvers.scoring.microbatch_summary`, without its key prefix."""
    return {k.rsplit("_", 1)[1]: v for k, v in microbatch_summary(imbalance.cpu(), "x").items()}
